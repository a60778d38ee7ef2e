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
