//! Speculative decoding on an instance, as vLLM's v1 engine runs it
//! (`cluster.groups[i].speculative`, docs/speculative.md).
//!
//! - **Scheduling** (`vllm/v1/core/sched/scheduler.py`): a running request that decodes is
//!   scheduled for its last sampled token plus its draft tokens, 1 + d tokens of the step's
//!   budget, d = min(k, budget − 1, tokens it still has to emit − 1); its KV blocks grow to
//!   hold them. (vLLM drafts past the last token and drops what is not needed; capping d
//!   keeps a request's KV within what [`super::kv_tokens_needed`] reserves.)
//! - **Verifying**: the target computes the 1 + d positions in one step; the rejection
//!   sampler accepts a leading run of a ≤ d drafts and adds one token of its own, so the
//!   request emits 1 + a tokens and keeps 1 + a of the positions computed (vLLM rolls
//!   `num_computed_tokens` back by the rejected ones; the blocks stay allocated).
//! - **Acceptance**: P(a ≥ i) = p_i, the per-position rates vLLM reports
//!   (`spec_decode_num_accepted_tokens_per_pos` / `spec_decode_num_drafts`). One uniform
//!   draw u per request and verification, counter-based on (seed, request, tokens emitted
//!   so far): a = #{i ≤ d : u < p_i}. A run's draws do not depend on how requests were
//!   batched, routed or preempted.
//! - **Drafting** (EAGLE, EAGLE-3, MTP, draft models): after sampling, the drafter runs one
//!   pass over every token the step computed (it takes the target's hidden states), then
//!   k − 1 passes of one token per request, priced by the roofline on the drafter's own
//!   shape and added to the step. N-gram drafting runs on the CPU and adds nothing.
//! - **Streaming**: the 1 + a tokens leave in one chunk; each is one ITL sample, the gap split
//!   evenly between them (`step::complete_one`), so a request's mean ITL is its time per
//!   output token (vLLM's benchmark client records one ITL per chunk).
//!
//! The group's configuration (acceptance, drafter, memory) is [`SpecConfig`]
//! (`latency::speculative`); this file holds what an instance does with it and counts.

use std::sync::Arc;

use crate::latency::speculative::SpecConfig;
use crate::latency::{BatchShape, LatencyError, StepItem};
use crate::time::SimDuration;

/// An instance's speculative decoding: its group's configuration and what it counted.
#[derive(Debug)]
pub struct Speculation {
    pub cfg: Arc<SpecConfig>,
    /// Verifications (one per request and step with drafts).
    pub verifies: u64,
    pub drafted: u64,
    pub accepted: u64,
    /// Drafts accepted at each position (vLLM's `num_accepted_tokens_per_pos`).
    pub accepted_per_position: Vec<u64>,
    /// Σ drafter time added to steps, µs.
    pub draft_us: u64,
    scratch: Vec<StepItem>,
}

impl Speculation {
    pub fn new(cfg: Arc<SpecConfig>) -> Self {
        let k = cfg.k as usize;
        Speculation {
            cfg,
            verifies: 0,
            drafted: 0,
            accepted: 0,
            accepted_per_position: vec![0; k],
            draft_us: 0,
            scratch: Vec::new(),
        }
    }

    /// Drafts the target accepts of the `d` a request verified (see the module docs); it has
    /// emitted `generated` tokens before this step. Counts them.
    pub fn accept(&mut self, id: u64, client: u32, generated: u32, d: u32) -> u32 {
        let u = unit(crate::rng::mix(&[self.cfg.seed, id, u64::from(generated)]));
        let rates = self.cfg.rates(client);
        let a = rates
            .iter()
            .take(d as usize)
            .take_while(|&&p| u < p)
            .count();
        self.verifies += 1;
        self.drafted += u64::from(d);
        self.accepted += a as u64;
        for n in &mut self.accepted_per_position[..a] {
            *n += 1;
        }
        a as u32
    }

    /// The drafter's time for a step over `items` (none for n-grams): one pass over the
    /// step's tokens, then k − 1 passes of one token per request.
    pub fn draft_time(&mut self, items: &[StepItem]) -> Result<SimDuration, LatencyError> {
        let Some(drafter) = self.cfg.drafter.clone() else {
            return Ok(SimDuration::ZERO);
        };
        if items.is_empty() {
            return Ok(SimDuration::ZERO);
        }
        let shape = |items: &[StepItem]| {
            let mut prefill_tokens = 0;
            let mut decode_tokens = 0;
            for it in items {
                if it.prefill {
                    prefill_tokens += it.new_tokens;
                } else {
                    decode_tokens += it.new_tokens;
                }
            }
            (prefill_tokens, decode_tokens)
        };
        let (prefill_tokens, decode_tokens) = shape(items);
        let mut us = drafter
            .step_time(&BatchShape {
                items,
                prefill_tokens,
                decode_tokens,
            })?
            .as_us();
        for pass in 1..self.cfg.k {
            self.scratch.clear();
            self.scratch.extend(items.iter().map(|it| StepItem {
                new_tokens: 1,
                context_tokens: it.context_tokens + it.new_tokens + pass - 1,
                input_tokens: it.input_tokens,
                prefill: false,
            }));
            us += drafter
                .step_time(&BatchShape {
                    items: &self.scratch,
                    prefill_tokens: 0,
                    decode_tokens: self.scratch.len() as u32,
                })?
                .as_us();
        }
        self.draft_us += us;
        Ok(SimDuration(us))
    }
}

/// Drafts a decoding request verifies this step: `k`, or fewer near its last token or the
/// end of the step's token budget (`budget` ≥ 1 left).
#[inline]
pub fn drafts(k: u32, generated: u32, output_tokens: u32, budget: u32) -> u32 {
    k.min(budget.saturating_sub(1))
        .min(output_tokens.saturating_sub(generated + 1))
}

/// The top 53 bits of `h` as a number in [0, 1).
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::speculative::draw_key;
    use crate::latency::{Blackbox, LatencyModel};

    fn config(drafter: Option<Arc<dyn LatencyModel>>, k: u32) -> SpecConfig {
        SpecConfig {
            method: "eagle",
            k,
            per_position: vec![0.5; k as usize],
            by_client: Vec::new(),
            by_name: Vec::new(),
            drafter,
            draft_weights_gib: 0.0,
            draft_kv_bytes_per_token: 0.0,
            seed: draw_key(1),
        }
    }

    fn decode(new_tokens: u32, context_tokens: u32) -> StepItem {
        StepItem {
            new_tokens,
            context_tokens,
            input_tokens: 10,
            prefill: false,
        }
    }

    #[test]
    fn the_drafter_runs_once_over_the_step_then_once_per_further_draft() {
        // Drafter: 100 µs + 1 µs per prefill token + 10 µs per decode token. A step of one
        // verification (4 positions) and a 50-token prefill chunk: the first pass over its
        // 54 tokens is 100 + 50 + 40 = 190 µs, then two passes of one token per request at
        // 100 + 2 × 10 = 120 µs each: 430 µs.
        let drafter: Arc<dyn LatencyModel> = Arc::new(Blackbox {
            alpha: [0.0; 3],
            beta: [100.0, 1.0, 10.0],
        });
        let mut s = Speculation::new(Arc::new(config(Some(drafter), 3)));
        let prefill = StepItem {
            new_tokens: 50,
            context_tokens: 0,
            input_tokens: 50,
            prefill: true,
        };
        let d = s.draft_time(&[decode(4, 100), prefill]).unwrap();
        assert_eq!(d.as_us(), 430);
        assert_eq!(s.draft_us, 430);
        // N-grams: nothing.
        let mut n = Speculation::new(Arc::new(config(None, 3)));
        assert_eq!(n.draft_time(&[decode(4, 100)]).unwrap().as_us(), 0);
    }

    #[test]
    fn drafts_stop_at_the_last_token_and_the_budget() {
        assert_eq!(drafts(3, 1, 100, 2048), 3);
        assert_eq!(
            drafts(3, 97, 100, 2048),
            2,
            "tokens 98 and 99 drafted, 100 sampled"
        );
        assert_eq!(drafts(3, 99, 100, 2048), 0);
        assert_eq!(drafts(3, 1, 100, 2), 1, "one token of budget for the draft");
        assert_eq!(drafts(3, 1, 100, 1), 0);
    }

    #[test]
    fn one_draw_gives_a_leading_run_with_the_per_position_odds() {
        // Rates 1, 1, 0: every verification accepts exactly two drafts, never the third.
        let mut c = config(None, 3);
        c.per_position = vec![1.0, 1.0, 0.0];
        let mut s = Speculation::new(Arc::new(c));
        for id in 0..50 {
            assert_eq!(s.accept(id, 0, 7, 3), 2);
            assert_eq!(s.accept(id, 0, 7, 1), 1, "no more than the drafts verified");
        }
        assert_eq!(s.accepted_per_position, [100, 50, 0]);
        assert_eq!((s.verifies, s.drafted, s.accepted), (100, 200, 150));
    }
}
