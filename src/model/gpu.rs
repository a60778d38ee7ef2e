//! GPU profiles (bundled in `assets/gpus.ron`, or a scenario's own RON file).

use serde::Deserialize;

/// Peak compute, bandwidth, calibrated MFU and memory of one GPU.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuProfile {
    pub id: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Dense bf16/fp16 TFLOPS.
    pub tflops_bf16: f64,
    /// Dense fp8 TFLOPS (0 = no fp8).
    #[serde(default)]
    pub tflops_fp8: f64,
    /// Memory bandwidth, TB/s.
    pub bandwidth_tb_per_s: f64,
    /// Model FLOPs utilisation reached in prefill / decode (roofline).
    pub mfu_prefill: f64,
    pub mfu_decode: f64,
    /// Memory, GiB.
    pub memory_gib: f64,
    #[serde(default)]
    pub source: String,
    /// Efficiencies and overheads of our [`Roofline`](crate::latency::Roofline), fitted to
    /// the H100 microbenchmark (docs/fidelity.md). Defaults: H100's.
    #[serde(default)]
    pub physics: GpuPhysics,
}

/// What a GPU achieves, as opposed to its datasheet peaks (our roofline's calibration).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GpuPhysics {
    /// Fraction of peak FLOP/s a large GEMM reaches (H100 bf16: 692–797 of 989.5 TFLOP/s
    /// at m ≥ 1024 in `h100_torch_microbench.csv`). Default 0.76.
    pub gemm_efficiency: f64,
    /// Fraction of peak FLOP/s causal prefill attention reaches (H100: 406–537 TFLOP/s at
    /// 2,048–4,096 tokens). Default 0.55.
    pub attention_efficiency: f64,
    /// Fraction of peak bandwidth streaming weights and KV reaches (H100: a 2 GiB copy at
    /// 3.02 of 3.35 TB/s; weight-streaming GEMMs 2.5–2.9 TB/s). Default 0.9.
    pub bandwidth_efficiency: f64,
    /// Fixed cost of one GEMM kernel, µs (H100: 16.8M-parameter GEMMs take ~20 µs for
    /// ~11 µs of traffic; 6 fits the whole-layer rows best). Default 6.
    pub kernel_overhead_us: f64,
    /// Fixed cost of one attention kernel, µs (H100 SDPA on tiny inputs: 27–40 µs; 18 fits
    /// whole-layer rows best). Default 18.
    pub attention_overhead_us: f64,
    /// Element-wise passes (reads + writes) over each token's hidden-size activation row per
    /// layer: two RMSNorms, rotary, residual adds, unfused; fitted with the next one so the
    /// microbenchmark's whole-layer prefill rows match once GEMMs and attention are priced.
    /// Default 20.
    pub elementwise_hidden_passes: f64,
    /// Element-wise passes over each token's (per-GPU) FFN-width row per layer (SiLU · mul).
    /// Default 8.
    pub elementwise_ffn_passes: f64,
    /// Achieved all-reduce bus bandwidth between the GPUs of a TP group, GB/s (H100 NVLink 4:
    /// 450 GB/s per direction; NCCL all-reduce bus bandwidth ~360). Default 360.
    pub allreduce_gb_per_s: f64,
    /// Fixed latency of one all-reduce, µs (small-message NCCL / vLLM custom all-reduce).
    /// Default 8.
    pub allreduce_latency_us: f64,
    /// Host link for CPU KV offload, GB/s (PCIe Gen5 x16: 64 GB/s per direction, ~50
    /// achieved). Default 50.
    pub host_link_gb_per_s: f64,
    /// Fixed latency of one host transfer batch, µs. Default 10.
    pub host_link_latency_us: f64,
    /// How a fused-MoE kernel's weight traffic and compute add up: its time is
    /// (memory^p + compute^p)^(1/p) with this p (∞ would be a plain roofline max, 1 their
    /// sum). vLLM's Triton fused-MoE kernel on an H100 (Mixtral-8x7B TP2, bf16, 1–1,536
    /// tokens; `benchmark_moe.py` in vLLM PR #24700) fits p = 1.3: mean error 2.8 %, worst
    /// −10.5 % at one token (a plain max is 38 % fast at 1,536 tokens). Default 1.3.
    pub moe_overlap_exponent: f64,
}

impl Default for GpuPhysics {
    fn default() -> Self {
        GpuPhysics {
            gemm_efficiency: 0.76,
            attention_efficiency: 0.55,
            bandwidth_efficiency: 0.9,
            kernel_overhead_us: 6.0,
            attention_overhead_us: 18.0,
            elementwise_hidden_passes: 20.0,
            elementwise_ffn_passes: 8.0,
            allreduce_gb_per_s: 360.0,
            allreduce_latency_us: 8.0,
            host_link_gb_per_s: 50.0,
            host_link_latency_us: 10.0,
            moe_overlap_exponent: 1.3,
        }
    }
}

impl GpuPhysics {
    /// Every problem with the numbers.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (name, v) in [
            ("gemm_efficiency", self.gemm_efficiency),
            ("attention_efficiency", self.attention_efficiency),
            ("bandwidth_efficiency", self.bandwidth_efficiency),
        ] {
            if !v.is_finite() || v <= 0.0 || v > 1.0 {
                p.push(format!("physics.{name} must be in (0, 1], got {v}"));
            }
        }
        if !self.moe_overlap_exponent.is_finite()
            || !(1.0..=100.0).contains(&self.moe_overlap_exponent)
        {
            p.push(format!(
                "physics.moe_overlap_exponent must be in [1, 100], got {}",
                self.moe_overlap_exponent
            ));
        }
        for (name, v) in [
            ("allreduce_gb_per_s", self.allreduce_gb_per_s),
            ("host_link_gb_per_s", self.host_link_gb_per_s),
        ] {
            if !v.is_finite() || v <= 0.0 {
                p.push(format!(
                    "physics.{name} must be a finite number > 0, got {v}"
                ));
            }
        }
        for (name, v) in [
            ("kernel_overhead_us", self.kernel_overhead_us),
            ("attention_overhead_us", self.attention_overhead_us),
            ("allreduce_latency_us", self.allreduce_latency_us),
            ("host_link_latency_us", self.host_link_latency_us),
            ("elementwise_hidden_passes", self.elementwise_hidden_passes),
            ("elementwise_ffn_passes", self.elementwise_ffn_passes),
        ] {
            if !v.is_finite() || !(0.0..=1e6).contains(&v) {
                let unit = if name.ends_with("_us") { " µs" } else { "" };
                p.push(format!("physics.{name} must be in [0, 10⁶]{unit}, got {v}"));
            }
        }
        p
    }
}

impl GpuProfile {
    /// Peak FLOP/s for weights of `weight_bytes` (fp8 rate for 1-byte weights, BLIS rule).
    pub fn peak_flops(&self, weight_bytes: f64) -> f64 {
        if weight_bytes == 1.0 && self.tflops_fp8 > 0.0 {
            self.tflops_fp8 * 1e12
        } else {
            self.tflops_bf16 * 1e12
        }
    }

    /// Checks the numbers make sense; returns every problem.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (name, v) in [
            ("tflops_bf16", self.tflops_bf16),
            ("bandwidth_tb_per_s", self.bandwidth_tb_per_s),
            ("memory_gib", self.memory_gib),
        ] {
            if !v.is_finite() || v <= 0.0 {
                p.push(format!("{name} must be a finite number > 0, got {v}"));
            } else if v < 1e-3 {
                // A GPU of ~0 TFLOPS or TB/s makes steps so long the clock overflows.
                p.push(format!("{name} must be at least 0.001, got {v:e}"));
            }
        }
        for (name, v) in [
            ("mfu_prefill", self.mfu_prefill),
            ("mfu_decode", self.mfu_decode),
        ] {
            if !v.is_finite() || v <= 0.0 || v > 1.0 {
                p.push(format!("{name} must be in (0, 1], got {v}"));
            }
        }
        if !self.tflops_fp8.is_finite() || self.tflops_fp8 < 0.0 {
            p.push(format!("tflops_fp8 must be ≥ 0, got {}", self.tflops_fp8));
        }
        p.extend(self.physics.problems());
        p
    }
}

/// Every bundled GPU.
pub fn bundled_gpus() -> Vec<GpuProfile> {
    ron::from_str(include_str!("../../assets/gpus.ron"))
        .expect("bundled GPU profiles parse (tested)")
}

/// A bundled GPU by id or alias (case-insensitive).
pub fn find_gpu(name: &str) -> Option<GpuProfile> {
    bundled_gpus().into_iter().find(|g| {
        g.id.eq_ignore_ascii_case(name) || g.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_gpus_are_sane_and_findable() {
        let all = bundled_gpus();
        assert_eq!(all.len(), 5);
        for g in &all {
            assert!(g.problems().is_empty(), "{}: {:?}", g.id, g.problems());
            assert!(!g.source.is_empty());
        }
        assert_eq!(find_gpu("h100-sxm").unwrap().id, "H100");
        assert_eq!(find_gpu("A100-SXM").unwrap().id, "A100-80");
        assert!(find_gpu("B200").is_none());
        let h100 = find_gpu("H100").unwrap();
        assert_eq!(h100.peak_flops(1.0), 1979.0e12);
        assert_eq!(h100.peak_flops(2.0), 989.5e12);
    }
}
