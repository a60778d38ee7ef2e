//! BLIS "blackbox" alpha/beta model (MODELS.md §2.2).
//!
//! step = β0 + β1·(prefill tokens computed this step) + β2·(decode tokens), truncated to
//! whole µs, at least 1; queueing = α0 + α1·input tokens; per output token = α2.

use super::{BatchShape, LatencyError, LatencyModel};
use crate::time::SimDuration;

/// Linear step-time model fitted per (model, GPU, TP, vLLM version).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blackbox {
    /// [α0 µs, α1 µs per input token, α2 µs per output token].
    pub alpha: [f64; 3],
    /// [β0 µs per step, β1 µs per prefill token, β2 µs per decode token].
    pub beta: [f64; 3],
}

impl LatencyModel for Blackbox {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        let [b0, b1, b2] = self.beta;
        let us = b0 + b1 * f64::from(batch.prefill_tokens) + b2 * f64::from(batch.decode_tokens);
        Ok(SimDuration::from_us_f64(us).max(SimDuration(1)))
    }

    fn decode_step_time(
        &self,
        decodes: u32,
        _context_tokens: u64,
    ) -> Option<Result<SimDuration, LatencyError>> {
        Some(self.step_time(&BatchShape {
            items: &[],
            prefill_tokens: 0,
            decode_tokens: decodes,
        }))
    }

    fn queueing_delay(&self, input_tokens: u32) -> SimDuration {
        super::Alpha(self.alpha).queueing_delay(input_tokens)
    }

    fn output_token_overhead(&self) -> SimDuration {
        super::Alpha(self.alpha).output_token_overhead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(prefill: u32, decode: u32) -> BatchShape<'static> {
        BatchShape {
            items: &[],
            prefill_tokens: prefill,
            decode_tokens: decode,
        }
    }

    #[test]
    fn step_time_is_linear_in_prefill_and_decode_tokens() {
        let m = Blackbox {
            alpha: [10326.27, 0.0, 0.0],
            beta: [6472.01, 19.797, 304.40],
        };
        // 6472.01 + 19.797·512 + 304.40·3 = 17521.274 → 17521 µs.
        assert_eq!(m.step_time(&shape(512, 3)).unwrap(), SimDuration(17_521));
        assert_eq!(m.queueing_delay(1000), SimDuration(10_326));
    }

    #[test]
    fn step_time_is_at_least_one_microsecond() {
        let m = Blackbox {
            alpha: [0.0; 3],
            beta: [0.0; 3],
        };
        assert_eq!(m.step_time(&shape(0, 0)).unwrap(), SimDuration(1));
    }
}
