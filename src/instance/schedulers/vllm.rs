//! vLLM's batch formation: v1 (the default) and v0 before chunked prefill.
//!
//! vLLM v1:
//!
//! Per step, with a token budget of `max_num_batched_tokens` (MODELS.md §3.1):
//! 1. **Running requests first**, in batch order: a prefill (or post-preemption recompute)
//!    takes `min(remaining, long_prefill_token_threshold if set, budget)` tokens, a decode
//!    takes 1. If its KV blocks cannot be grown, the **tail** of the running batch is
//!    preempted (recompute mode: blocks freed, progress reset, generated tokens kept, put back
//!    at the **front** of the wait queue) until it fits; if the request itself is the tail it
//!    is preempted and the phase stops. With speculative decoding a decode takes 1 + its
//!    draft tokens. With pipeline parallelism, requests still in flight
//!    in an earlier micro-batch are skipped and never chosen as victims; a request that
//!    could only preempt itself while such requests hold blocks waits for them instead
//!    (otherwise it can preempt itself forever).
//! 2. **Then waiting requests**, head first, while fewer than `max_num_seqs` run and budget
//!    remains, but **not in a step that preempted**: the longest cached prompt prefix is
//!    claimed, the rest is allocated all-or-nothing; a head that does not fit blocks the
//!    queue (head-of-line, as vLLM). With LoRA adapters, a request whose adapter would be
//!    one more than `max_loras` among the step's is skipped, keeping its place
//!    ([`crate::instance::lora`]).

use super::blocks::{Grow, decode_step, grow_or_preempt, order_waiting, prefill_step};
use super::{BatchScheduler, BatcherEntry, Ordering};
use crate::instance::speculative::drafts;
use crate::instance::{Limits, Planned, Scheduler, Seq};
use crate::kv::KvCache;
use crate::time::SimTime;

pub const VLLM_V1: BatcherEntry = BatcherEntry {
    name: "vllm_v1",
    description: "vLLM v1 (default): running requests first, chunked prefill into the token budget, tail preemption",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(VllmV1)),
};

struct VllmV1;

impl BatchScheduler for VllmV1 {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        form_batch(s, kv, l, now, o);
    }

    fn lockstep_decodes(&self) -> bool {
        true
    }
}

pub const VLLM_V0: BatcherEntry = BatcherEntry {
    name: "vllm_v0",
    description: "vLLM v0 without chunked prefill: a prefill step of whole prompts whenever a waiting request fits, else a decode step; never mixed",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(VllmV0)),
};

struct VllmV0;

impl BatchScheduler for VllmV0 {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        if !prefill_step(s, kv, l, now, o, true, |_, _| true) {
            decode_step(s, kv, l, now, o);
        }
    }
}

/// Tokens the request would compute this step if the budget allows: (tokens, is_prefill).
/// A decode computes its last token, plus up to `k` draft tokens with speculative decoding
/// (`SPEC`, [`crate::instance::speculative`]).
#[inline(always)]
fn next_chunk<const SPEC: bool>(seq: &Seq, limits: &Limits, budget: u32, k: u32) -> (u32, bool) {
    if seq.in_prefill() {
        let mut n = seq.known_tokens() - seq.progress;
        if limits.long_prefill_token_threshold > 0 {
            n = n.min(limits.long_prefill_token_threshold);
        }
        (n.min(budget), true)
    } else if SPEC {
        (
            1 + drafts(k, seq.generated, seq.spec.output_tokens, budget),
            false,
        )
    } else {
        (1, false)
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
    // The running phase, compiled apart for speculative decoding so that a group without it
    // runs exactly the plain loop.
    match sched.spec.as_ref().map(|s| s.cfg.k) {
        None => schedule_running::<false>(
            sched,
            kv,
            limits,
            now,
            ordering,
            0,
            &mut budget,
            &mut preempted,
        ),
        Some(k) => schedule_running::<true>(
            sched,
            kv,
            limits,
            now,
            ordering,
            k,
            &mut budget,
            &mut preempted,
        ),
    }
    if preempted {
        return;
    }
    order_waiting(sched, now, ordering);
    if sched.lora.is_some() {
        admit_with_adapters(sched, kv, limits, now, budget);
        return;
    }
    while (sched.running.len() as u32) < limits.max_num_seqs && budget > 0 {
        if sched.waiting.is_empty() {
            break;
        }
        match admit(sched, kv, limits, now, 0, budget) {
            Some(tokens) => budget -= tokens,
            None => {
                sched.lockstep.head_blocked = true;
                break;
            }
        }
    }
}

/// Admits waiting request `j` if its KV fits: claims its longest cached prompt prefix,
/// allocates the rest of its first chunk (all or nothing), moves it to the running batch and
/// plans the chunk. The chunk's tokens, or `None` if it does not fit.
#[inline(always)]
fn admit(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    limits: &Limits,
    now: SimTime,
    j: usize,
    budget: u32,
) -> Option<u32> {
    let block_size = kv.block_size();
    let next = sched.waiting.get_mut(j)?;
    let known = next.known_tokens();
    let cached_blocks = kv.cached_prefix_blocks(&next.spec.content, next.spec.input_tokens, known);
    let start = cached_blocks * block_size;
    let mut tokens = known - start;
    if limits.long_prefill_token_threshold > 0 {
        tokens = tokens.min(limits.long_prefill_token_threshold);
    }
    tokens = tokens.min(budget);
    let content = next.spec.content.clone();
    let input = next.spec.input_tokens;
    if !kv.admit(&mut next.kv, &content, input, cached_blocks, start + tokens) {
        return None;
    }
    let mut seq = if j == 0 {
        sched.waiting.pop_front()
    } else {
        sched.waiting.remove(j)
    }
    .expect("it exists");
    sched.scheduled.push(seq.entity);
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
    Some(tokens)
}

/// Phase 2 of [`form_batch`] on an instance serving LoRA adapters: as the plain loop, but a
/// waiting request whose adapter would exceed `max_loras` among the step's requests is
/// skipped for this step, keeping its place, and the queue goes on behind it (vLLM's
/// `scheduled_loras` check).
fn admit_with_adapters(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    limits: &Limits,
    now: SimTime,
    mut budget: u32,
) {
    let Some(mut lora) = sched.lora.take() else {
        return;
    };
    lora.joined.clear();
    for p in &sched.plan {
        if let Some(a) = sched.running[p.slot as usize].spec.adapter
            && !lora.joined.contains(&a)
        {
            lora.joined.push(a);
        }
    }
    let mut j = 0;
    while (sched.running.len() as u32) < limits.max_num_seqs && budget > 0 {
        let Some(next) = sched.waiting.get(j) else {
            break;
        };
        let adapter = next.spec.adapter;
        if !lora.may_join(&lora.joined, adapter) {
            j += 1;
            continue;
        }
        let Some(tokens) = admit(sched, kv, limits, now, j, budget) else {
            break;
        };
        budget -= tokens;
        if let Some(a) = adapter
            && !lora.joined.contains(&a)
        {
            lora.joined.push(a);
        }
    }
    sched.lora = Some(lora);
}

/// Phase 1 of [`form_batch`]: the running requests, in batch order, into the budget.
#[expect(
    clippy::too_many_arguments,
    reason = "the instance's parts and the step's budget"
)]
#[inline(always)]
fn schedule_running<const SPEC: bool>(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    limits: &Limits,
    now: SimTime,
    ordering: &Ordering<'_>,
    k: u32,
    budget: &mut u32,
    preempted: &mut bool,
) {
    let mut i = 0;
    while i < sched.running.len() && *budget > 0 {
        if limits.pp > 1 && sched.running[i].busy_until > now {
            i += 1; // in a micro-batch still in the pipeline
            continue;
        }
        let (tokens, prefill) = next_chunk::<SPEC>(&sched.running[i], limits, *budget, k);
        let context = sched.running[i].progress;
        let outcome = grow_or_preempt(sched, kv, i, context + tokens, now, ordering, preempted);
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
        *budget -= tokens;
        i += 1;
    }
}
