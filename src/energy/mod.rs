//! Energy: what the GPUs draw, step by step, and what that makes per request, per output
//! token and for the run (`energy:` in a scenario; docs/energy.md).
//!
//! The model (one instance of `tp` GPUs per pipeline stage):
//! - **idle** (`idle_w` per GPU): an instance that is on (any phase but off: provisioning,
//!   loading, warming up, serving, draining) and runs no step;
//! - **a step** of `dt` seconds keeps `tp` GPUs busy for `dt` in all (each of `pp` stages for
//!   `dt / pp`) at `floor_w + (max_w − floor_w) · u` per GPU, where u is the step's
//!   utilisation: u = min(1, F / (tp · dt · peak) + R · b / (tp · dt · bandwidth)), F the
//!   step's FLOPs (2 · active parameters per token computed, 2 · vocab · hidden per request
//!   for its logits row, 4 · layers · heads · head_dim per query–key pair of attention),
//!   R the tokens of KV the step's attention reads (a decode: its context; a prefill chunk:
//!   its prompt so far) and b the KV bytes per token of the whole model. This is the form of
//!   the vLLM semantic router's fleet simulator (docs/fleet-sim/power-model): the weight
//!   stream every step pays is in `floor_w`, the work a batch adds (tensor-core FLOPs, KV
//!   reads) raises power towards `max_w`.
//! - Each request is charged its share of the steps it took part in, in proportion to the
//!   tokens computed for it (a lockstep decode step: equal shares). Idle time is charged to
//!   no request: Σ requests' energy = the steps' energy, exactly (tested).
//! - The run's GPU energy = steps + idle; the facility's = GPU energy × `pue`.
//!
//! Every term costs nothing when `energy` is absent: no meter exists, the step pays one
//! `Option` test.

mod plugin;
#[cfg(test)]
mod tests;

pub use crate::scenario::{EnergySpec, PowerFigures};
pub use plugin::{EnergyPlugin, check, check_group, power_of};

use serde::Serialize;

use crate::model::{GpuProfile, ModelConfig};

/// What one step did, as the meter needs it (sums over the step's requests).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepWork {
    /// Tokens computed (prefill chunk tokens + one per decode).
    pub tokens: f64,
    /// Requests in the step (each computes one logits row).
    pub requests: f64,
    /// Query–key pairs of attention: a chunk of n new tokens after s computed ones
    /// n·(s + (n + 1)/2), a decode s + 1.
    pub pairs: f64,
    /// Tokens of KV read: a chunk s + n, a decode s + 1.
    pub kv_tokens: f64,
}

impl StepWork {
    /// Adds one request computing `new` tokens after `context` computed ones.
    pub fn add(&mut self, new: u32, context: u32, prefill: bool) {
        let n = f64::from(new.max(1));
        let s = f64::from(context);
        self.tokens += n;
        self.requests += 1.0;
        if prefill {
            self.pairs += n * (s + (n + 1.0) / 2.0);
            self.kv_tokens += s + n;
        } else {
            self.pairs += s + 1.0;
            self.kv_tokens += s + 1.0;
        }
    }

    /// `decodes` requests decoding one token each with `context` tokens cached in all.
    pub fn decodes(decodes: u32, context: u64) -> Self {
        let n = f64::from(decodes);
        let c = context as f64 + n;
        StepWork {
            tokens: n,
            requests: n,
            pairs: c,
            kv_tokens: c,
        }
    }
}

/// FLOPs per token of a model's matrix multiplications, without the embedding and the
/// logits (LM head) rows: attention projections, dense MLPs, and for MoE layers the k
/// routed experts a token uses, its shared experts and the router.
pub fn flops_per_token(m: &ModelConfig) -> f64 {
    let d = f64::from(m.hidden);
    let l = f64::from(m.layers);
    let q = f64::from(m.heads) * f64::from(m.head_dim);
    let kv = f64::from(m.kv_heads) * f64::from(m.head_dim);
    let attention = l * d * (q + 2.0 * kv + q);
    let mlp = if m.is_moe() {
        let dense = f64::from(m.dense_layers()) * 3.0 * d * f64::from(m.ffn_dense);
        let moe = f64::from(m.moe_layers())
            * (3.0 * d * f64::from(m.ffn_expert) * m.k()
                + 3.0 * d * f64::from(m.ffn_shared)
                + f64::from(m.experts) * d);
        dense + moe
    } else {
        l * 3.0 * d * f64::from(m.ffn_dense)
    };
    2.0 * (attention + mlp)
}

/// An instance's energy meter: its power figures, the rates its steps are measured
/// against, and what it has drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct Meter {
    pub power: PowerFigures,
    /// GPUs busy during a step's time (`tp`; see the module docs for pipeline stages).
    pub tp: f64,
    /// FLOPs per computed token, per logits row, per attention pair.
    pub flops_per_token: f64,
    pub flops_per_request: f64,
    pub flops_per_pair: f64,
    /// KV bytes per token of the whole model.
    pub kv_bytes_per_token: f64,
    /// One GPU's peak FLOP/s (at the weights' data type) and bandwidth, bytes/s.
    pub peak_flops: f64,
    pub bandwidth: f64,
    /// Joules drawn in steps, GPU-seconds busy in them, and Σ u · GPU-seconds.
    pub step_j: f64,
    pub busy_gpu_s: f64,
    pub utilisation_gpu_s: f64,
}

impl Meter {
    /// The meter of an instance of `tp` GPUs per stage serving `model` on `gpu`, whose
    /// KV bytes per token (whole model) are `kv_bytes_per_token`.
    pub fn new(
        power: PowerFigures,
        model: &ModelConfig,
        gpu: &GpuProfile,
        tp: u32,
        kv_bytes_per_token: f64,
    ) -> Self {
        Meter {
            power,
            tp: f64::from(tp.max(1)),
            flops_per_token: flops_per_token(model),
            flops_per_request: 2.0 * f64::from(model.vocab) * f64::from(model.hidden),
            flops_per_pair: 4.0
                * f64::from(model.layers)
                * f64::from(model.heads)
                * f64::from(model.head_dim),
            kv_bytes_per_token,
            peak_flops: gpu.peak_flops(model.weight_bytes),
            bandwidth: gpu.bandwidth_tb_per_s * 1e12,
            step_j: 0.0,
            busy_gpu_s: 0.0,
            utilisation_gpu_s: 0.0,
        }
    }

    /// The utilisation of a step of `dt_s` seconds that did `work` (see the module docs).
    pub fn utilisation(&self, work: &StepWork, dt_s: f64) -> f64 {
        if dt_s <= 0.0 {
            return 0.0;
        }
        let flops = self.flops_per_token * work.tokens
            + self.flops_per_request * work.requests
            + self.flops_per_pair * work.pairs;
        let bytes = self.kv_bytes_per_token * work.kv_tokens;
        let gpu_s = self.tp * dt_s;
        (flops / (gpu_s * self.peak_flops) + bytes / (gpu_s * self.bandwidth)).min(1.0)
    }

    /// Records a step of `dt_s` seconds that did `work`; returns its energy, joules.
    pub fn step(&mut self, work: &StepWork, dt_s: f64) -> f64 {
        let u = self.utilisation(work, dt_s);
        let p = &self.power;
        let gpu_s = self.tp * dt_s;
        let joules = gpu_s * (p.floor_w + (p.max_w - p.floor_w) * u);
        self.step_j += joules;
        self.busy_gpu_s += gpu_s;
        self.utilisation_gpu_s += u * gpu_s;
        joules
    }
}

/// Energy of one instance group over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupEnergy {
    pub group: String,
    pub power: Option<PowerFigures>,
    /// GPU energy in steps and idle (on, between steps), kWh.
    pub step_kwh: f64,
    pub idle_kwh: f64,
    pub gpu_kwh: f64,
    /// GPU energy over the run's duration, watts (all the group's GPUs).
    pub mean_power_w: f64,
    /// Mean utilisation u of its busy GPU time (0 when it ran no step).
    pub mean_utilisation: f64,
    /// GPU-hours busy in steps, and on in all (as in `groups`).
    pub busy_gpu_hours: f64,
    pub gpu_hours: f64,
}

/// The run's energy (`summary.energy`, present when the scenario has `energy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EnergySummary {
    pub pue: f64,
    /// The GPUs' energy (steps + idle), and the facility's (× pue), kWh.
    pub gpu_kwh: f64,
    pub facility_kwh: f64,
    /// Of the GPU energy: in steps (charged to requests) and idle.
    pub step_kwh: f64,
    pub idle_kwh: f64,
    /// GPU energy over the run's duration, watts.
    pub mean_power_w: f64,
    /// Facility joules per output token of completed requests, and watt-hours per
    /// completed request (null when none).
    pub joules_per_output_token: Option<f64>,
    pub wh_per_request: Option<f64>,
    /// facility_kwh × price_per_kwh.
    pub electricity_cost: f64,
    /// Per instance group, in `cluster.groups` order.
    pub groups: Vec<GroupEnergy>,
}
