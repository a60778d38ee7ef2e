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
    // vLLM's remote-KV requests do once their blocks are received), while there is room.
    // The scheduler learns of a landing from the output of the step it happened in
    // (`finished_recving`), so with async scheduling one that landed after this step was
    // decided joins the step after it, as a new request does.
    let decided = decided_at(sched, limits, now);
    while sched
        .arrived
        .front()
        .is_some_and(|seq| decided.is_none_or(|d| seq.landed <= d))
        && sched.running.len() < limits.max_num_seqs as usize
    {
        let seq = sched.arrived.pop_front().expect("not empty");
        sched.running.push(seq);
    }
    let unseen = unseen_arrivals(sched, decided);
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
