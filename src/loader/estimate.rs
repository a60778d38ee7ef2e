//! A rough estimate of how much work a scenario asks for, so a run that will take minutes
//! says so before it starts (`servesim validate` and `run` print it on stderr).
//!
//! Work is counted in simulated output tokens: a run costs about
//! [`WALL_US_PER_OUTPUT_TOKEN`] µs of wall time per output token on the development machine
//! (100k requests × 256 tokens in ~3.5 s), plus [`WALL_US_PER_REQUEST`] per request.

use crate::scenario::{ArrivalSpec, LengthSpec, Scenario};

/// Measured wall time per simulated output token (release build), µs.
pub const WALL_US_PER_OUTPUT_TOKEN: f64 = 0.15;
/// Measured wall time per request beyond its tokens, µs.
pub const WALL_US_PER_REQUEST: f64 = 2.0;
/// Runs estimated longer than this (s) are announced.
pub const ANNOUNCE_AFTER_S: f64 = 120.0;

/// What a scenario will simulate, roughly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkEstimate {
    pub requests: f64,
    pub output_tokens: f64,
    /// Expected wall time of a release build, s.
    pub wall_s: f64,
}

/// The mean of a length distribution (clamped like sampling); `None` when a file decides.
pub fn mean_tokens(spec: &LengthSpec) -> Option<f64> {
    let clamp = |x: f64, lo: u32, hi: u32| x.clamp(f64::from(lo), f64::from(hi));
    let max = f64::from(crate::workload::lengths::MAX_TOKENS);
    Some(
        match *spec {
            LengthSpec::Constant(n) => f64::from(n),
            LengthSpec::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            LengthSpec::Normal { mean, min, max, .. } => clamp(mean, min, max),
            LengthSpec::LogNormal {
                mu,
                sigma,
                min,
                max,
            } => clamp((mu + sigma * sigma / 2.0).exp(), min, max),
            LengthSpec::Exponential { mean, min, max } => clamp(mean, min, max),
            LengthSpec::Zipf { max, exponent } => {
                // Σ k^(1−s) / Σ k^−s over the first terms (the tail adds little for s > 1).
                let n = max.min(100_000);
                let (mut num, mut den) = (0.0, 0.0);
                for k in 1..=n {
                    let p = f64::from(k).powf(-exponent);
                    num += f64::from(k) * p;
                    den += p;
                }
                num / den
            }
            LengthSpec::Empirical { .. } => return None,
        }
        .min(max),
    )
}

/// The work a scenario asks for, when its sources say how much (traces: counted from their
/// rows at validation; here they are left out).
pub fn estimate(s: &Scenario) -> WorkEstimate {
    let w = &s.workload;
    let horizon = [w.duration_s, s.horizon_s]
        .into_iter()
        .flatten()
        .fold(f64::INFINITY, f64::min);
    let mut requests = 0.0;
    let mut tokens = 0.0;
    for c in &w.clients {
        let rate = crate::workload::client_rate(s, c);
        let n = match &c.arrival {
            ArrivalSpec::AllAtZero { count } => *count as f64,
            ArrivalSpec::Staged { stages, .. } | ArrivalSpec::ConstantTimer { stages } => {
                stages.iter().map(|st| st.rate_per_s * st.duration_s).sum()
            }
            ArrivalSpec::OnOff { on_s, off_s } => {
                rate * horizon.min(1e12) * on_s / (on_s + off_s).max(1e-12)
            }
            _ => rate * horizon.min(1e12),
        };
        let turns = c
            .session
            .as_ref()
            .and_then(|x| mean_tokens(&x.turns))
            .unwrap_or(1.0);
        let n = n * turns;
        requests += n;
        tokens += n * mean_tokens(&c.output_tokens).unwrap_or(256.0);
    }
    if let Some(ip) = &w.inference_perf {
        let n: f64 = ip
            .stages
            .iter()
            .map(|st| crate::workload::inference_perf::stage_requests(st) as f64)
            .sum();
        requests += n;
        tokens += n * f64::from(ip.shared_prefix.output_len);
    }
    if let Some(limit) = w.num_requests
        && requests > limit as f64
    {
        tokens *= limit as f64 / requests;
        requests = limit as f64;
    }
    WorkEstimate {
        requests,
        output_tokens: tokens,
        wall_s: (tokens * WALL_US_PER_OUTPUT_TOKEN + requests * WALL_US_PER_REQUEST) / 1e6,
    }
}

impl WorkEstimate {
    /// A line for stderr when the run will take a while, else `None`.
    pub fn announcement(&self) -> Option<String> {
        (self.wall_s.is_finite() && self.wall_s > ANNOUNCE_AFTER_S).then(|| {
            format!(
                "this scenario simulates about {:.3e} requests and {:.3e} output tokens: expect roughly {:.0} minutes of wall time in a release build (--max-wall-s stops a run cleanly)",
                self.requests,
                self.output_tokens,
                self.wall_s / 60.0
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_of_the_length_distributions() {
        assert_eq!(mean_tokens(&LengthSpec::Constant(7)), Some(7.0));
        assert_eq!(
            mean_tokens(&LengthSpec::Uniform { min: 10, max: 20 }),
            Some(15.0)
        );
        let z = mean_tokens(&LengthSpec::Zipf {
            max: 2,
            exponent: 1.0,
        })
        .unwrap();
        // P(1) = 2/3, P(2) = 1/3: mean 4/3.
        assert!((z - 4.0 / 3.0).abs() < 1e-12);
    }
}
