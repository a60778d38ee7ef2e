//! RouteSim's piecewise-linear model (MODELS.md §2.7), as a step time:
//! step = prefill tokens / prefill rate + b / decode_throughput(b) for b decoding requests,
//! with decode throughput linear from batch 1 to the saturation batch, flat after.
//! (RouteSim prices each request on its own timer in whole ms; here the same curve prices
//! one step in µs.)

use serde::Deserialize;

use super::{BatchShape, LatencyError, LatencyModel};
use crate::scenario::piecewise_defaults::{
    DECODE_TOKENS_PER_S_AT_1, PREFILL_TOKENS_PER_S, SATURATION_BATCH, SATURATION_TOKENS_PER_S,
};
use crate::time::SimDuration;

/// Parameters, RouteSim defaults in brackets.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PiecewiseLinear {
    /// Prefill throughput, tokens/s [50,000].
    pub prefill_tokens_per_s: f64,
    /// Decode throughput of a batch of one, tokens/s [80].
    pub decode_tokens_per_s_at_1: f64,
    /// Batch size where decode throughput saturates [64].
    pub saturation_batch: u32,
    /// Saturated decode throughput of the whole batch, tokens/s [3,200].
    pub saturation_tokens_per_s: f64,
}

impl Default for PiecewiseLinear {
    fn default() -> Self {
        PiecewiseLinear {
            prefill_tokens_per_s: PREFILL_TOKENS_PER_S,
            decode_tokens_per_s_at_1: DECODE_TOKENS_PER_S_AT_1,
            saturation_batch: SATURATION_BATCH,
            saturation_tokens_per_s: SATURATION_TOKENS_PER_S,
        }
    }
}

impl PiecewiseLinear {
    /// Whole-batch decode throughput with `b` requests, tokens/s.
    pub fn decode_throughput(&self, b: u32) -> f64 {
        if b == 0 {
            0.0
        } else if b >= self.saturation_batch || self.saturation_batch <= 1 {
            self.saturation_tokens_per_s
        } else {
            let f = f64::from(b - 1) / f64::from(self.saturation_batch - 1);
            self.decode_tokens_per_s_at_1
                + f * (self.saturation_tokens_per_s - self.decode_tokens_per_s_at_1)
        }
    }
}

impl LatencyModel for PiecewiseLinear {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        let prefill = f64::from(batch.prefill_tokens) / self.prefill_tokens_per_s;
        let b = batch.decode_tokens;
        let decode = if b == 0 {
            0.0
        } else {
            f64::from(b) / self.decode_throughput(b)
        };
        Ok(SimDuration::from_secs_f64(prefill + decode).max(SimDuration(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(p: u32, d: u32) -> BatchShape<'static> {
        BatchShape {
            items: &[],
            prefill_tokens: p,
            decode_tokens: d,
        }
    }

    #[test]
    fn routesim_defaults_give_its_documented_gaps() {
        // RouteSim: b = 1 → 12.5 ms (13 ms after its ceil), b = 32 → 32/(80 + 31/63·3120) s = 19.811 ms.
        let m = PiecewiseLinear::default();
        assert_eq!(m.step_time(&shape(0, 1)).unwrap(), SimDuration(12_500));
        assert_eq!(m.step_time(&shape(0, 32)).unwrap(), SimDuration(19_811));
        assert_eq!(m.step_time(&shape(0, 64)).unwrap(), SimDuration(20_000));
        // 1,000 prompt tokens at 50,000 tok/s = 20 ms.
        assert_eq!(m.step_time(&shape(1000, 0)).unwrap(), SimDuration(20_000));
    }
}
