//! Lockstep decode steps: a step of a running batch that only decodes, priced and applied
//! in O(1) instead of O(batch).
//!
//! Between an admission and the next completion, an instance running vLLM v1 mostly takes
//! steps in which every running request computes its one newest token: the batch is the
//! running list, in order; each request's progress, output count and ITL count go up by one;
//! every ITL sample is the same (step end − previous step end + α2); a request needs a new KV
//! block every `block_size` steps, at a step known in advance. Such a step is a **lockstep
//! step**: the instance keeps the batch's per-token fields behind (how many steps they lag,
//! the sum of the ITL samples, the last step end and the batch's context sum), grows the KV
//! blocks that are due (request by request in running order, as the scheduler would: a
//! request needs one every `block_size` steps, so the requests due at lag k are those of
//! bucket k mod `block_size`, the same all the cohort's life) and
//! prices the step from the batch's sums when the latency model can
//! ([`LatencyModel::decode_step_time`](crate::latency::LatencyModel::decode_step_time)).
//! [`Scheduler::settle`](super::Scheduler::settle) brings the requests up to date; every
//! path that reads or moves a running request calls it first (a normal step, a timeout, the
//! end-of-run report).
//!
//! A step is a lockstep step only when it would be formed the same way by the scheduler:
//! the instance's batch scheduler says it forms such batches
//! ([`BatchScheduler::lockstep_decodes`](super::schedulers::BatchScheduler::lockstep_decodes)),
//! no pipeline parallelism, no CPU KV tier, not a P/D prefill instance, nothing arrived to
//! join, the budget covers the batch, no request finishes in the step, the due blocks are
//! free, and nothing to admit: the wait queue empty, or under a FIFO order the batch full or
//! the queue's head blocked. A head is blocked when it did not fit the free blocks at the
//! last normal step and no request finished in that step: until one does, lockstep steps
//! only take free blocks (evicting cached ones), a prefix hit of the head's that is evicted
//! while free lowers its need by at most the one block taken, and an enqueue joins the tail,
//! so the head cannot fit at any of them either. And the run must let fast ticks run on (no
//! invariant checks, KV events, P/D or systems of one's own: they read the running requests
//! between steps). Results are byte-identical either way (`tests/it/lockstep.rs` compares
//! runs with and without lockstep steps).

use super::{Limits, Scheduler};
use crate::kv::KvCache;
use crate::time::{SimDuration, SimTime};

impl Scheduler {
    /// Brings the running requests' per-token fields up to date after lockstep steps and
    /// ends the cohort (the next step is formed by the batch scheduler).
    pub fn settle(&mut self) {
        let l = &mut self.lockstep;
        if l.steps > 0 {
            for seq in &mut self.running {
                seq.progress += l.steps;
                seq.generated += l.steps;
                seq.itl_sum += l.itl;
                seq.itl_count += l.steps;
                seq.last_token = l.last_end;
                seq.busy_until = l.last_end;
                seq.energy_nj += l.energy_nj;
            }
            l.steps = 0;
            l.itl = SimDuration::ZERO;
            l.energy_nj = 0;
        }
        l.cohort = false;
        l.built = false;
        l.active = false;
        l.head_blocked = false;
    }

    /// After a normal step that ended at `end`: the running requests form a cohort if every
    /// one of them emitted a token then and decodes next.
    pub(super) fn note_cohort(&mut self, end: SimTime, limits: &Limits) {
        let l = &mut self.lockstep;
        l.cohort = limits.pp <= 1
            && limits.role != crate::scenario::Role::Prefill
            && !self.running.is_empty()
            && self
                .running
                .iter()
                .all(|s| s.last_token == end && s.generated >= 1 && !s.in_prefill());
        l.built = false;
        l.last_end = end;
    }
}

/// Forms a lockstep step if the instance can take one (see the module docs): grows the KV
/// blocks due and marks the step; false if the batch scheduler must form it.
#[inline(always)]
pub(super) fn try_form(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    limits: &Limits,
    fifo: bool,
    scheduler_agrees: bool,
) -> bool {
    if !sched.lockstep.cohort
        || !scheduler_agrees
        || kv.cpu.is_some()
        || kv.layout().is_some()
        || !sched.arrived.is_empty()
        || !(sched.waiting.is_empty()
            || (fifo
                && (sched.running.len() >= limits.max_num_seqs as usize
                    || sched.lockstep.head_blocked)))
        || sched.running.len() > limits.max_num_batched_tokens as usize
    {
        return false;
    }
    if !sched.lockstep.built && !build(sched, kv) {
        return false;
    }
    let l = &mut sched.lockstep;
    if l.steps >= l.finish_at {
        return false;
    }
    let now = l.steps;
    let due = &l.growth[(now % kv.block_size()) as usize];
    if due.len() as u32 > kv.free_blocks() {
        return false; // the scheduler preempts
    }
    for &slot in due {
        let seq = &mut sched.running[slot as usize];
        // Lockstep steps are never formed on a hybrid cache (above).
        let grown = kv.grow_full(&mut seq.kv, seq.progress + now + 1);
        debug_assert!(grown, "counted free blocks");
    }
    sched.plan.clear();
    l.active = true;
    true
}

/// The cohort's sums and growth schedule, from the (settled) running requests; false (no
/// cohort) if a request holds a block or more beyond its next token.
fn build(sched: &mut Scheduler, kv: &KvCache) -> bool {
    debug_assert_eq!(sched.lockstep.steps, 0, "built from settled requests");
    let block_size = kv.block_size();
    let l = &mut sched.lockstep;
    l.growth.resize_with(block_size as usize, Vec::new);
    for bucket in &mut l.growth {
        bucket.clear();
    }
    l.context = 0;
    l.finish_at = u32::MAX;
    for (slot, seq) in sched.running.iter().enumerate() {
        l.context += u64::from(seq.progress);
        // The step that finishes it emits output token `output_tokens`.
        l.finish_at = l
            .finish_at
            .min(seq.spec.output_tokens.saturating_sub(seq.generated + 1));
        // The first step whose token does not fit the blocks held.
        let held = seq.kv.len() as u32 * block_size;
        let at = held.saturating_sub(seq.progress);
        if at >= block_size {
            l.cohort = false;
            return false;
        }
        l.growth[at as usize].push(slot as u32);
    }
    l.built = true;
    true
}

/// The running batch of a lockstep step as the latency model sees it: (decodes, Σ context).
pub(super) fn shape(sched: &Scheduler) -> (u32, u64) {
    let n = sched.running.len() as u32;
    let l = &sched.lockstep;
    (n, l.context + u64::from(l.steps) * u64::from(n))
}

/// The items of a lockstep step, for a latency model that prices items.
pub(super) fn items(sched: &Scheduler, items: &mut Vec<crate::latency::StepItem>) {
    let lag = sched.lockstep.steps;
    items.extend(sched.running.iter().map(|seq| crate::latency::StepItem {
        new_tokens: 1,
        context_tokens: seq.progress + lag,
        input_tokens: seq.spec.input_tokens,
        prefill: false,
    }));
}

/// Applies a lockstep step that ended at `end`: one ITL sample per request, all equal.
/// Returns (sample in µs, count) for the ITL histogram.
pub(super) fn complete(sched: &mut Scheduler, end: SimTime, alpha2: SimDuration) -> (u64, u64) {
    let l = &mut sched.lockstep;
    let sample = end.since(l.last_end) + alpha2;
    l.steps += 1;
    l.itl += sample;
    l.last_end = end;
    l.active = false;
    (sample.as_us(), sched.running.len() as u64)
}
