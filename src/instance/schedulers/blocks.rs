//! Building blocks of the built-in batch schedulers: growing or preempting, admitting the
//! head of the wait queue, whole-prompt and decode-only steps, ordering the wait queue.

use super::{Ordering, ordered};
use crate::instance::{Limits, Planned, Scheduler, Seq};
use crate::kv::KvCache;
use crate::scenario::PreemptionOrder;
use crate::time::SimTime;

/// What became of a running request's need for more KV blocks.
pub enum Grow {
    Fits,
    /// Skip it this step: the blocks it needs are held by micro-batches in flight.
    Wait,
    /// It was preempted itself: the running phase ends.
    Stop,
}

pub fn preempt(seq: &mut Seq, kv: &mut KvCache) {
    kv.release(&mut seq.kv);
    seq.progress = 0;
    seq.preemptions += 1;
}

/// Grows running request `i` to hold `tokens` tokens, preempting (recompute mode) the tail
/// of the running batch, or by `ordering.preemption`, until it fits; sets `preempted`.
#[inline(always)]
pub fn grow_or_preempt(
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
        sched.unordered = true;
        sched.counters.preemptions += 1;
        *preempted = true;
        if tail == i {
            return Grow::Stop;
        }
    }
}

/// Sorts the wait queue by the queue-order policy (FCFS leaves it as it is).
pub fn order_waiting(sched: &mut Scheduler, now: SimTime, ordering: &Ordering<'_>) {
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

/// Admits waiting requests, head first, up to `cap` running (0: `max_num_seqs`), each with KV
/// for its whole prompt + output reserved and no prefix-cache hits (Orca, FasterTransformer).
pub fn admit_whole_requests(
    s: &mut Scheduler,
    kv: &mut KvCache,
    l: &Limits,
    cap: u32,
    now: SimTime,
    o: &Ordering<'_>,
) {
    let cap = if cap == 0 { l.max_num_seqs } else { cap };
    order_waiting(s, now, o);
    while (s.running.len() as u32) < cap && admit_head(s, kv, |_, whole| whole, false, now) {}
}

/// Plans every running request (not in a pipeline micro-batch) for all it has left to
/// compute: a whole prompt, or one decode token.
pub fn plan_every_running(s: &mut Scheduler, l: &Limits, now: SimTime) {
    for i in 0..s.running.len() {
        let seq = &s.running[i];
        if l.pp > 1 && seq.busy_until > now {
            continue;
        }
        let (tokens, prefill) = (seq.known_tokens() - seq.progress, seq.in_prefill());
        plan(s, i, tokens.max(1), prefill);
    }
}

/// A prefill-only step (vLLM v0, LightLLM): waiting requests' whole prompts (a preempted
/// request recomputes all it knows), admitted head first while they fit the token budget,
/// `max_num_seqs`, `may_admit` and the KV cache; a prompt longer than the budget runs alone.
/// False if nothing was admitted.
pub fn prefill_step(
    s: &mut Scheduler,
    kv: &mut KvCache,
    l: &Limits,
    now: SimTime,
    o: &Ordering<'_>,
    use_cache: bool,
    mut may_admit: impl FnMut(&Seq, &Scheduler) -> bool,
) -> bool {
    order_waiting(s, now, o);
    let mut budget = l.max_num_batched_tokens;
    while (s.running.len() as u32) < l.max_num_seqs {
        let Some(head) = s.waiting.front() else { break };
        let need = head.known_tokens();
        if need > budget && !(s.plan.is_empty() && budget == l.max_num_batched_tokens) {
            break;
        }
        if !may_admit(head, s) || !admit_head(s, kv, |known, _| known, use_cache, now) {
            break;
        }
        let slot = s.running.len() - 1;
        let tokens = s.running[slot].known_tokens() - s.running[slot].progress;
        plan(s, slot, tokens, true);
        budget = budget.saturating_sub(tokens);
    }
    !s.plan.is_empty()
}

/// A decode-only step: one token for every running request, preempting the tail
/// (recompute) when the KV cache cannot grow (vLLM v0, LightLLM).
pub fn decode_step(
    s: &mut Scheduler,
    kv: &mut KvCache,
    l: &Limits,
    now: SimTime,
    o: &Ordering<'_>,
) {
    let mut preempted = false;
    let mut i = 0;
    while i < s.running.len() {
        if l.pp > 1 && s.running[i].busy_until > now {
            i += 1;
            continue;
        }
        let target = s.running[i].progress + 1;
        match grow_or_preempt(s, kv, i, target, now, o, &mut preempted) {
            Grow::Fits => {}
            Grow::Wait => {
                i += 1;
                continue;
            }
            Grow::Stop => break,
        }
        plan(s, i, 1, false);
        i += 1;
    }
}

pub fn plan(sched: &mut Scheduler, slot: usize, tokens: u32, prefill: bool) {
    let context = sched.running[slot].progress;
    sched.plan.push(Planned {
        slot: slot as u32,
        tokens,
        prefill,
        context,
    });
}

/// Moves the head of the wait queue into the running batch with `reserve` tokens of KV
/// (prefix-cache hits claimed when `use_cache`); false if it does not fit.
pub fn admit_head(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    reserve: impl Fn(u32, u32) -> u32,
    use_cache: bool,
    now: SimTime,
) -> bool {
    let Some(head) = sched.waiting.front_mut() else {
        return false;
    };
    let known = head.known_tokens();
    let cached = if use_cache {
        kv.cached_prefix_blocks(&head.spec.content, head.spec.input_tokens, known)
    } else {
        0
    };
    let start = cached * kv.block_size();
    let content = head.spec.content.clone();
    let input = head.spec.input_tokens;
    let want = reserve(known, head.spec.input_tokens + head.spec.output_tokens).max(start);
    if !kv.admit(&mut head.kv, &content, input, cached, want) {
        return false;
    }
    let mut seq = sched.waiting.pop_front().expect("head exists");
    sched.scheduled.push(seq.entity);
    seq.progress = start;
    seq.cached_tokens = start;
    seq.first_scheduled.get_or_insert(now);
    sched.running.push(seq);
    true
}
