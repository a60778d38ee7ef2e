//! Batch formation ([`SimSystems::Batch`](crate::SimSystems::Batch)): each instance listed
//! this tick forms its next batch with its own batch scheduler ([`super::schedulers`]), or
//! takes a lockstep decode step ([`super::lockstep`]).

use bevy_ecs::prelude::*;

use super::pipeline::Instances;
use super::schedulers::{Batcher, Ordering, QueuePolicies};
use super::{InstanceIndex, Limits, Scheduler, Seq};
use crate::engine::{FastLoop, InstanceDue, SimClock};
use crate::kv::KvCache;
use crate::time::SimTime;

/// Forms the next batch of every instance listed for it this tick.
pub fn form_batches(
    mut due: ResMut<InstanceDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    policies: QueuePolicies,
    fast: Res<FastLoop>,
    mut instances: Instances,
) {
    let ordering = policies.ordering();
    form(
        &mut due,
        clock.now,
        &index,
        &ordering,
        fast.on,
        &mut instances,
    );
}

/// Forms the batches of the instances listed; `lockstep` allows lockstep decode steps
/// (see [`super::lockstep`]: only when nothing reads the running requests between steps).
pub(crate) fn form(
    due: &mut InstanceDue,
    now: SimTime,
    index: &InstanceIndex,
    ordering: &Ordering<'_>,
    lockstep: bool,
    instances: &mut Instances,
) {
    let mut listed = std::mem::take(&mut due.batch);
    listed.sort_unstable();
    for &i in &listed {
        let (mut sched, mut kv, _, limits, mut batcher) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        if form_one(
            &mut sched,
            &mut kv,
            limits,
            &mut batcher,
            now,
            ordering,
            lockstep,
        ) {
            due.execute.push(i);
        }
    }
    listed.clear();
    due.batch = listed;
}

/// Forms one listed instance's next batch; true if it is to be priced.
pub(crate) fn form_one(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    limits: &Limits,
    batcher: &mut Batcher,
    now: SimTime,
    ordering: &Ordering<'_>,
    lockstep: bool,
) -> bool {
    sched.listed = false;
    if sched.step_end.is_some() || !sched.has_work() {
        return false;
    }
    sched.left_out_arrivals = false;
    if !sched.sent.is_empty() {
        free_sent(sched, kv);
    }
    let preemptions = sched.counters.preemptions;
    // Lockstep steps advance every request one token a step: not with speculative decoding,
    // and not with adapters (each step prepares its adapters).
    if lockstep
        && sched.spec.is_none()
        && sched.lora.is_none()
        && super::lockstep::try_form(
            sched,
            kv,
            limits,
            ordering.order.is_fifo(),
            batcher.0.lockstep_decodes(),
        )
    {
        sched.preempted_forming = sched.counters.preemptions != preemptions;
        return true;
    }
    sched.settle();
    if kv.has_lower_tiers() {
        kv.set_now(now.as_us());
    }
    // P/D: requests whose KV arrived join the running batch (they hold their blocks, as
    // vLLM's remote-KV requests do once their blocks are received), while there is room,
    // from the step the scheduler can know of them ([`landing_joins_from`]).
    let step = sched.counters.steps;
    while sched
        .arrived
        .front()
        .is_some_and(|seq| seq.joins_from <= step)
        && sched.running.len() < limits.max_num_seqs as usize
    {
        let seq = sched.arrived.pop_front().expect("not empty");
        sched.running.push(seq);
    }
    let unseen = unseen_arrivals(sched, decided_at(sched, limits, now));
    sched.left_out_arrivals = unseen.is_some();
    sched.scheduled.clear();
    batcher.0.form(sched, kv, limits, now, ordering);
    sched.preempted_forming = sched.counters.preemptions != preemptions;
    super::anomaly::check_overtaking(sched, now, ordering);
    if let Some(mut unseen) = unseen {
        sched.waiting.append(&mut unseen);
    }
    debug_assert!(
        {
            let mut slots: Vec<u32> = sched.plan.iter().map(|p| p.slot).collect();
            slots.sort_unstable();
            slots.windows(2).all(|w| w[0] < w[1])
                && slots
                    .last()
                    .is_none_or(|&s| (s as usize) < sched.running.len())
        },
        "a batch scheduler planned a slot twice or past the running batch"
    );
    true
}

/// When the step starting `now` was decided, if before `now`: with vLLM's async scheduling
/// the engine core schedules one step ahead (`step_with_batch_queue`), so a step that follows
/// another was decided when that one started. An instance that was idle decides now (`None`).
/// With pipeline parallelism the engine keeps `pp` micro-batches in flight in either mode,
/// and vLLM 0.15.1's scheduler never schedules a request again while its token is outstanding
/// (`Scheduler.schedule`: `use_pp` and `num_output_placeholders`), which is how our pipeline
/// already runs: nothing is held back there (`None`).
pub(crate) fn decided_at(sched: &Scheduler, limits: &Limits, now: SimTime) -> Option<SimTime> {
    (limits.serving.async_scheduling
        && limits.pp == 1
        && sched.counters.steps > 0
        && sched.step_done == now)
        .then_some(sched.step_started)
}

/// P/D, decode side: the first step (by [`InstanceCounters::steps`], the count of steps
/// taken before it) that a request whose KV lands `now` may join. vLLM 0.15.1's workers ask
/// the KV connector which receives have finished as they launch a step (`get_finished`, right
/// after the forward's launch, in `KVConnectorModelRunnerMixin`); that step's output tells the
/// scheduler (`finished_recving`), whose next decision schedules the request
/// (`_update_waiting_for_remote_kv`). So a landing while a step runs is polled at the next
/// launch, the step formed next (`n`), and joins:
/// - without async scheduling, `n + 1`, decided when `n` ends;
/// - with async scheduling, `n + 3`: the launch at `n`'s start is of the step after it
///   (`n + 1`, scheduled one ahead), whose output reaches the scheduler when `n + 2` starts,
///   too late for `n + 2` itself;
/// - with pipeline parallelism, `n + pp`: the micro-batch launched with the poll reports when
///   it leaves the last stage, as the `pp`-th after it is formed.
///
/// An idle engine polls in a loop (`kv_connector_no_forward`): the request joins the next
/// step. So does it without vLLM's serving path (the BLIS reading).
///
/// [`InstanceCounters::steps`]: super::InstanceCounters::steps
pub(crate) fn landing_joins_from(sched: &Scheduler, limits: &Limits, now: SimTime) -> u64 {
    let next = sched.counters.steps;
    if idle_at(sched, now) || limits.serving.is_bare() {
        next
    } else if limits.pp > 1 {
        next + u64::from(limits.pp)
    } else if limits.serving.async_scheduling {
        next + 3
    } else {
        next + 1
    }
}

/// True if the instance has no step in flight and did not end one `now` (its engine would
/// launch the next at once).
fn idle_at(sched: &Scheduler, now: SimTime) -> bool {
    sched.in_flight.is_empty() && (sched.counters.steps == 0 || sched.step_done < now)
}

/// P/D, prefill side: the first step (by [`InstanceCounters::steps`]) before whose forming the
/// instance frees the blocks of a request whose KV a decode instance finished reading `now`.
/// vLLM 0.15.1's scheduler keeps a handed-off request's blocks (its KV connector's
/// `request_finished` delays the free) until the workers report the read done
/// (`finished_sending`, from the notification the reading side sends): they poll as they
/// launch a step (`get_finished`, in `KVConnectorModelRunnerMixin`), and that step's output
/// tells the scheduler, which frees the blocks (`_update_from_kv_xfer_finished`). So:
/// - a busy instance frees them before the step a request landing now on a decode instance
///   would join ([`landing_joins_from`]): its scheduler hears at the same output;
/// - an idle one with work (requests waiting for room) steps empty and polls at once: the
///   next step;
/// - an idle one with nothing to do does not poll: its engine waits on its input queue
///   (`EngineCore._process_input_queue`: no requests, no batch in flight), so the blocks stay
///   held until a request arrives; the first step it then takes polls, and its output frees
///   them before the step after it (`next + 1`), or with async scheduling the step decided
///   after its end (`next + 2`), or with pipeline parallelism the `pp`-th after it.
///
/// A prefill instance whose step ends with nothing left to run frees them all then (the
/// Transfer stage's `reads_heard_at_last_step`: vLLM's engine takes one more step to report
/// the requests that step finished, and it polls).
///
/// Without vLLM's serving path (the BLIS reading) they are free at once (the next step).
///
/// [`InstanceCounters::steps`]: super::InstanceCounters::steps
pub(crate) fn sent_freed_from(sched: &Scheduler, limits: &Limits, now: SimTime) -> u64 {
    let next = sched.counters.steps;
    if !idle_at(sched, now) || limits.serving.is_bare() {
        landing_joins_from(sched, limits, now)
    } else if sched.has_work() {
        next
    } else if limits.pp > 1 {
        next + u64::from(limits.pp)
    } else if limits.serving.async_scheduling {
        next + 2
    } else {
        next + 1
    }
}

/// Frees the blocks of the reads (P/D, prefill side) the scheduler has heard of by the step
/// being formed ([`sent_freed_from`]).
fn free_sent(sched: &mut Scheduler, kv: &mut KvCache) {
    let step = sched.counters.steps;
    sched.sent.retain_mut(|(from, blocks)| {
        let heard = *from <= step;
        if heard {
            kv.release(blocks);
        }
        !heard
    });
}

/// Requests that reached the engine after the step was `decided` ([`decided_at`]) were not
/// yet in its wait queue: they are taken out of `sched.waiting` for this step (to be put back
/// after it is formed). Requests join the queue at its back in the order they arrive, so
/// those are its tail.
pub(crate) fn unseen_arrivals(
    sched: &mut Scheduler,
    decided: Option<SimTime>,
) -> Option<std::collections::VecDeque<Seq>> {
    let decided = decided?;
    let seen = sched
        .waiting
        .iter()
        .rposition(|s| s.lifecycle.enqueued.is_none_or(|e| e <= decided))
        .map_or(0, |k| k + 1);
    (seen < sched.waiting.len()).then(|| sched.waiting.split_off(seen))
}
