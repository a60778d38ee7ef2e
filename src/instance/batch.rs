//! vLLM v1 batch formation ([`SimSystems::Batch`](crate::SimSystems::Batch)).
//!
//! Per step, with a token budget of `max_num_batched_tokens` (MODELS.md §3.1):
//! 1. **Running requests first**, in batch order: a prefill (or post-preemption recompute)
//!    takes `min(remaining, long_prefill_token_threshold if set, budget)` tokens, a decode
//!    takes 1. If its KV blocks cannot be grown, the **tail** of the running batch is
//!    preempted (recompute mode: blocks freed, progress reset, generated tokens kept, put back
//!    at the **front** of the wait queue) until it fits; if the request itself is the tail it
//!    is preempted and the phase stops. With pipeline parallelism, requests still in flight
//!    in an earlier micro-batch are skipped and never chosen as victims; a request that
//!    could only preempt itself while such requests hold blocks waits for them instead
//!    (otherwise it can preempt itself forever).
//! 2. **Then waiting requests**, head first, while fewer than `max_num_seqs` run and budget
//!    remains, but **not in a step that preempted**: the longest cached prompt prefix is
//!    claimed, the rest is allocated all-or-nothing; a head that does not fit blocks the
//!    queue (head-of-line, as vLLM).

use bevy_ecs::prelude::*;

use super::{InstanceIndex, Limits, Planned, Scheduler, Seq};
use crate::engine::{FastLoop, InstanceDue, SimClock};
use crate::kv::KvCache;
use crate::policy::{PriorityPolicy, QueueOrder};
use crate::scenario::PreemptionOrder;
use crate::time::SimTime;

/// How preemption victims are chosen.
#[derive(Resource, Debug, Clone, Copy, Default)]
pub struct SchedulingConfig {
    pub preemption: PreemptionOrder,
}

pub use crate::slo::{SloClass, SloTable};

/// The priority and queue order policies, as batch formation uses them.
pub struct Ordering<'a> {
    pub order: &'a dyn QueueOrder,
    pub priority: &'a dyn PriorityPolicy,
    pub table: &'a SloTable,
    pub preemption: PreemptionOrder,
}

impl Ordering<'_> {
    fn priority_of(&self, seq: &Seq, now: SimTime) -> f64 {
        self.priority.priority(
            &seq.spec,
            self.table.class_priority(&seq.spec),
            now.since(seq.lifecycle.arrival),
        )
    }
}

/// Maps f64 to an integer with the same total order (for stable integer sort keys).
fn ordered(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

/// Forms the next batch of every instance listed for it this tick.
pub fn form_batches(
    mut due: ResMut<InstanceDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    policies: super::QueuePolicies,
    fast: Res<FastLoop>,
    mut instances: super::Instances,
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
    instances: &mut super::Instances,
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
    batcher: &mut super::schedulers::Batcher,
    now: SimTime,
    ordering: &Ordering<'_>,
    lockstep: bool,
) -> bool {
    sched.listed = false;
    if sched.step_end.is_some() || !sched.has_work() {
        return false;
    }
    if lockstep
        && super::lockstep::try_form(
            sched,
            kv,
            limits,
            ordering.order.is_fifo(),
            batcher.0.lockstep_decodes(),
        )
    {
        return true;
    }
    sched.settle();
    if let Some(c) = kv.cpu.as_mut() {
        c.now_us = now.as_us();
    }
    // P/D: requests whose KV arrived join the running batch (they hold their blocks, as
    // vLLM's remote-KV requests do once their blocks are received), while there is room.
    while !sched.arrived.is_empty() && sched.running.len() < limits.max_num_seqs as usize {
        let seq = sched.arrived.pop_front().expect("not empty");
        sched.running.push(seq);
    }
    let unseen = unseen_arrivals(sched, limits, now);
    batcher.0.form(sched, kv, limits, now, ordering);
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

/// With vLLM's async scheduling the step starting `now` was decided when the step before it
/// started (the engine core schedules one step ahead: `step_with_batch_queue`), so requests
/// that reached the engine after that were not yet in its wait queue: they are taken out of
/// `sched.waiting` for this step (to be put back after it is formed). Requests join the queue
/// at its back in the order they arrive, so those are its tail. An instance that was idle
/// decides now. (vLLM 0.15 does not combine async scheduling with pipeline parallelism.)
pub(crate) fn unseen_arrivals(
    sched: &mut Scheduler,
    limits: &Limits,
    now: SimTime,
) -> Option<std::collections::VecDeque<Seq>> {
    if !limits.serving.async_scheduling
        || limits.pp > 1
        || sched.counters.steps == 0
        || sched.step_done != now
    {
        return None;
    }
    let decided = sched.step_started;
    let seen = sched
        .waiting
        .iter()
        .rposition(|s| s.lifecycle.enqueued.is_none_or(|e| e <= decided))
        .map_or(0, |k| k + 1);
    (seen < sched.waiting.len()).then(|| sched.waiting.split_off(seen))
}

/// Tokens the request would compute this step if the budget allows: (tokens, is_prefill).
fn next_chunk(seq: &Seq, limits: &Limits, budget: u32) -> (u32, bool) {
    if seq.in_prefill() {
        let mut n = seq.known_tokens() - seq.progress;
        if limits.long_prefill_token_threshold > 0 {
            n = n.min(limits.long_prefill_token_threshold);
        }
        (n.min(budget), true)
    } else {
        (1, false)
    }
}

/// What became of a running request's need for more KV blocks.
pub(super) enum Grow {
    Fits,
    /// Skip it this step: the blocks it needs are held by micro-batches in flight.
    Wait,
    /// It was preempted itself: the running phase ends.
    Stop,
}

pub(super) fn preempt(seq: &mut Seq, kv: &mut KvCache) {
    kv.release(&mut seq.kv);
    seq.progress = 0;
    seq.preemptions += 1;
}

/// Grows running request `i` to hold `tokens` tokens, preempting (recompute mode) the tail
/// of the running batch, or by `ordering.preemption`, until it fits; sets `preempted`.
#[inline(always)]
pub(super) fn grow_or_preempt(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    i: usize,
    tokens: u32,
    now: SimTime,
    ordering: &Ordering<'_>,
    preempted: &mut bool,
) -> Grow {
    // The common case (the blocks are there) stays inline in the batch loop.
    if kv.grow(&mut sched.running[i].kv, tokens) {
        return Grow::Fits;
    }
    make_room(sched, kv, i, tokens, now, ordering, preempted)
}

#[inline(never)]
fn make_room(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    i: usize,
    tokens: u32,
    now: SimTime,
    ordering: &Ordering<'_>,
    preempted: &mut bool,
) -> Grow {
    loop {
        if kv.grow(&mut sched.running[i].kv, tokens) {
            return Grow::Fits;
        }
        // The tail-most request not in flight in another micro-batch (without
        // pipelining: the tail), or the least important one.
        let eligible = |j: usize| j == i || sched.running[j].busy_until <= now;
        let tail =
            match ordering.preemption {
                PreemptionOrder::Tail => (i..sched.running.len()).rev().find(|&j| eligible(j)),
                PreemptionOrder::Priority => (i..sched.running.len())
                    .filter(|&j| eligible(j))
                    .min_by(|&a, &b| {
                        let (sa, sb) = (&sched.running[a], &sched.running[b]);
                        ordering
                            .priority_of(sa, now)
                            .total_cmp(&ordering.priority_of(sb, now))
                            .then(sb.lifecycle.arrival.cmp(&sa.lifecycle.arrival))
                            .then(sb.spec.id.cmp(&sa.spec.id))
                    }),
            }
            .expect("the requester itself qualifies");
        if tail == i && sched.running.iter().any(|s| s.busy_until > now) {
            // Only requests in flight in other micro-batches could make room: wait for
            // them to come back rather than preempt the requester, which could go on
            // forever without any request completing.
            return Grow::Wait;
        }
        let mut victim = sched.running.remove(tail);
        preempt(&mut victim, kv);
        sched.waiting.push_front(victim);
        sched.counters.preemptions += 1;
        *preempted = true;
        if tail == i {
            return Grow::Stop;
        }
    }
}

/// Sorts the wait queue by the queue-order policy (FCFS leaves it as it is).
pub(super) fn order_waiting(sched: &mut Scheduler, now: SimTime, ordering: &Ordering<'_>) {
    if !ordering.order.is_fifo() && sched.waiting.len() > 1 {
        sched.waiting.make_contiguous().sort_by_cached_key(|seq| {
            let (a, b) = ordering.order.key(
                &seq.spec,
                seq.lifecycle.arrival,
                ordering.priority_of(seq, now),
            );
            (ordered(a), ordered(b), seq.spec.id)
        });
    }
}

/// Fills `sched.plan` with the next step's batch (see the module docs).
pub fn form_batch(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    limits: &Limits,
    now: SimTime,
    ordering: &Ordering<'_>,
) {
    let sched = &mut *sched;
    sched.plan.clear();
    sched.lockstep.head_blocked = false;
    let mut budget = limits.max_num_batched_tokens;
    let mut preempted = false;

    let mut i = 0;
    while i < sched.running.len() && budget > 0 {
        if limits.pp > 1 && sched.running[i].busy_until > now {
            i += 1; // in a micro-batch still in the pipeline
            continue;
        }
        let (tokens, prefill) = next_chunk(&sched.running[i], limits, budget);
        let context = sched.running[i].progress;
        let outcome = grow_or_preempt(
            sched,
            kv,
            i,
            context + tokens,
            now,
            ordering,
            &mut preempted,
        );
        match outcome {
            Grow::Fits => {}
            Grow::Wait => {
                i += 1;
                continue;
            }
            Grow::Stop => break,
        }
        sched.plan.push(Planned {
            slot: i as u32,
            tokens,
            prefill,
            context,
        });
        budget -= tokens;
        i += 1;
    }

    if preempted {
        return;
    }
    order_waiting(sched, now, ordering);
    let block_size = kv.block_size();
    while (sched.running.len() as u32) < limits.max_num_seqs && budget > 0 {
        let Some(head) = sched.waiting.front_mut() else {
            break;
        };
        let known = head.known_tokens();
        let cached_blocks =
            kv.cached_prefix_blocks(&head.spec.content, head.spec.input_tokens, known);
        let start = cached_blocks * block_size;
        let mut tokens = known - start;
        if limits.long_prefill_token_threshold > 0 {
            tokens = tokens.min(limits.long_prefill_token_threshold);
        }
        tokens = tokens.min(budget);
        let content = head.spec.content.clone();
        let input = head.spec.input_tokens;
        if !kv.admit(&mut head.kv, &content, input, cached_blocks, start + tokens) {
            sched.lockstep.head_blocked = true;
            break;
        }
        let mut seq = sched.waiting.pop_front().expect("head exists");
        seq.progress = start;
        seq.cached_tokens = start;
        seq.first_scheduled.get_or_insert(now);
        sched.running.push(seq);
        sched.plan.push(Planned {
            slot: sched.running.len() as u32 - 1,
            tokens,
            prefill: true,
            context: start,
        });
        budget -= tokens;
    }
}
