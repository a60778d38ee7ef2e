//! The energy accounts' schema: a scenario's `energy` block and the power figures of a GPU
//! (a group's `power`, a GPU profile's); the energy plugin meters with them.

use serde::{Deserialize, Serialize};

/// Power figures of one GPU, watts (`power` of a GPU profile or of an instance group).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PowerFigures {
    /// On, running no step.
    pub idle_w: f64,
    /// Running a step that adds no work to the weight stream (a decode of one short
    /// request).
    pub floor_w: f64,
    /// Fully utilised (the board power limit, TDP).
    pub max_w: f64,
}

/// Reads `power: (idle_w: …, floor_w: …, max_w: …)` into an `Option` field, with or without
/// RON's implicit-`Some` extension (GPU files are read without it).
pub fn deserialize_power<'de, D>(d: D) -> Result<Option<PowerFigures>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    PowerFigures::deserialize(d).map(Some)
}

impl PowerFigures {
    /// Every problem with the figures, as (field, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        for (field, v) in [
            ("idle_w", self.idle_w),
            ("floor_w", self.floor_w),
            ("max_w", self.max_w),
        ] {
            // One GPU: an H100 SXM is rated 700 W, a B200 1,000 W; 10⁵ W is no GPU (and
            // 1e300 W printed energy figures of 300 digits).
            if !(v.is_finite() && (0.0..=1e5).contains(&v)) {
                p.push((
                    field,
                    format!(
                        "must be a number of watts per GPU within 0..=10⁵, got {}",
                        super::readable(v)
                    ),
                ));
            }
        }
        if p.is_empty() && self.max_w == 0.0 {
            // All three at 0 metered nothing and reported 0 J per token as a finding.
            p.push((
                "max_w",
                "must be above 0: a GPU running a step draws power (an H100 SXM is rated 700 W)"
                    .to_string(),
            ));
        }
        if p.is_empty() && !(self.idle_w <= self.floor_w && self.floor_w <= self.max_w) {
            p.push((
                "floor_w",
                format!(
                    "must lie between idle_w and max_w (idle_w ≤ floor_w ≤ max_w), got {} ≤ {} ≤ {}",
                    self.idle_w, self.floor_w, self.max_w
                ),
            ));
        }
        p
    }
}

/// A scenario's `energy` block: its presence turns the energy accounts on.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EnergySpec {
    /// Facility power usage effectiveness: facility energy = GPU energy × pue. Default 1.0
    /// (the GPUs alone).
    pub pue: f64,
    /// Electricity price per kWh of facility energy, in the currency of
    /// `cost_per_gpu_hour`. Default 0 (not priced).
    pub price_per_kwh: f64,
}

impl Default for EnergySpec {
    fn default() -> Self {
        EnergySpec {
            pue: 1.0,
            price_per_kwh: 0.0,
        }
    }
}
