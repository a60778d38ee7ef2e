//! An instance's energy meter (`Scheduler::energy`, present when the scenario has `energy`):
//! what each step drew and the work it did; `crate::energy` puts the meters in place and
//! sums them into the summary, where its module docs give the model.

use crate::model::{GpuProfile, ModelConfig, flops_per_token};
use crate::scenario::PowerFigures;

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
