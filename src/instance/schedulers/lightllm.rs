//! LightLLM's router: admission by the estimated future peak of KV use.

use super::blocks::{decode_step, prefill_step};
use super::{BatchScheduler, BatcherEntry, Ordering};
use crate::instance::{Limits, Scheduler, Seq};
use crate::kv::KvCache;
use crate::time::SimTime;
pub const LIGHTLLM: BatcherEntry = BatcherEntry {
    name: "lightllm",
    description: "LightLLM router: admit a waiting request only if the estimated future peak of KV use (every running request growing to its full output) still fits; a prefill step for new requests, else a decode step",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LightLlm)),
};

struct LightLlm;

/// LightLLM's estimate: with requests growing one token per step from `current` tokens for
/// `remaining` more steps, the most KV blocks they hold at once (at some request's last step).
pub fn future_peak_blocks(requests: &mut [(u32, u32)], block_size: u32) -> u64 {
    // By remaining steps, longest last: when request k ends (after r_k steps), every
    // request with r ≥ r_k holds current + r_k tokens.
    requests.sort_by_key(|&(_, r)| r);
    let mut peak = 0u64;
    for k in 0..requests.len() {
        let r = requests[k].1;
        let held: u64 = requests[k..]
            .iter()
            .map(|&(c, _)| u64::from((c + r).div_ceil(block_size)))
            .sum();
        peak = peak.max(held);
    }
    peak
}

impl BatchScheduler for LightLlm {
    /// Its peak estimate counts every request at prompt + output tokens.
    fn reserves_whole_request(&self) -> bool {
        true
    }

    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        let (bs, total) = (kv.block_size(), u64::from(kv.total_blocks()));
        // (tokens held, steps left) of every running request.
        let steps_left = |q: &Seq| q.spec.output_tokens.saturating_sub(q.generated);
        let mut load: Vec<(u32, u32)> = s
            .running
            .iter()
            .map(|q| (q.progress, steps_left(q)))
            .collect();
        let fits = |head: &Seq, _: &Scheduler| {
            load.push((head.known_tokens(), steps_left(head)));
            let fits = future_peak_blocks(&mut load.clone(), bs) <= total;
            if !fits {
                load.pop();
            }
            fits
        };
        if !prefill_step(s, kv, l, now, o, false, fits) {
            decode_step(s, kv, l, now, o);
        }
    }
}
