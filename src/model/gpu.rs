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
    /// What our roofline's efficiencies on this GPU rest on. Default `Datasheet`.
    #[serde(default)]
    pub calibration: Calibration,
    /// Efficiencies and overheads of our [`Roofline`](crate::latency::Roofline), fitted to
    /// the H100 microbenchmark (docs/fidelity.md). Defaults: H100's.
    #[serde(default)]
    pub physics: GpuPhysics,
    /// Power figures for the energy accounts (the energy accounts); none for a GPU file
    /// without them.
    #[serde(default, deserialize_with = "crate::scenario::deserialize_power")]
    pub power: Option<crate::scenario::PowerFigures>,
    /// The GPU's usual node (GPUs per NVLink domain, NVLink and NIC per GPU): the defaults
    /// of `cluster.topology`; none for a GPU file without it.
    #[serde(default, deserialize_with = "crate::scenario::deserialize_node")]
    pub node: Option<crate::scenario::NodeFigures>,
}

/// What our roofline's efficiencies ([`GpuPhysics`]) on a GPU rest on.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum Calibration {
    /// Fitted to kernels measured on this GPU (the H100: `h100_torch_microbench.csv`).
    Measured,
    /// The compute die of a measured GPU with other memory (H200: the H100's die): the
    /// efficiencies carry over, the peaks are the datasheet's.
    SameDie,
    /// Datasheet peaks only: the efficiencies are the H100's, an assumption until the GPU is
    /// measured (`servesim calibrate`, or a GPU file with its own `physics`).
    #[default]
    Datasheet,
}

impl Calibration {
    pub fn name(self) -> &'static str {
        match self {
            Calibration::Measured => "measured",
            Calibration::SameDie => "same die",
            Calibration::Datasheet => "datasheet",
        }
    }

    /// What `validate` says of the roofline on such a GPU.
    pub fn note(self) -> &'static str {
        match self {
            Calibration::Measured => "our roofline is calibrated on kernels measured on this GPU",
            Calibration::SameDie => {
                "our roofline uses the efficiencies measured on the same compute die (H100) with this GPU's datasheet peaks"
            }
            Calibration::Datasheet => {
                "datasheet figures only: our roofline assumes the H100's measured efficiencies on this GPU (servesim calibrate fits them to your measurements)"
            }
        }
    }
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
    /// Fraction of peak bandwidth a decode's read of the paged KV cache reaches, when it
    /// differs from `bandwidth_efficiency` (the default, none). vLLM's FlashAttention-2
    /// split-KV decode kernel reached 87 % on an H100 at 64 × 1–2k tokens (vLLM issue
    /// #9471); FlashAttention-3, vLLM's Hopper default, reads 16-token pages on its
    /// non-TMA path, measured once at 54–55 % (flash-attention issue #1572, 8-token pages).
    pub kv_read_efficiency: Option<f64>,
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
    /// The band of message sizes in which vLLM all-reduces with its custom two-stage kernel,
    /// and what that kernel measures; outside it (and with no band) the two numbers above
    /// price every all-reduce. Default none; `assets/gpus.ron` gives the H100's and H200's.
    pub two_stage_allreduce: Option<TwoStageAllReduce>,
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
            kv_read_efficiency: None,
            kernel_overhead_us: 6.0,
            attention_overhead_us: 18.0,
            elementwise_hidden_passes: 20.0,
            elementwise_ffn_passes: 8.0,
            allreduce_gb_per_s: 360.0,
            allreduce_latency_us: 8.0,
            two_stage_allreduce: None,
            host_link_gb_per_s: 50.0,
            host_link_latency_us: 10.0,
            moe_overlap_exponent: 1.3,
        }
    }
}

impl GpuPhysics {
    /// What a decode's paged KV read reaches: `kv_read_efficiency`, else
    /// `bandwidth_efficiency`.
    pub fn kv_read_efficiency(&self) -> f64 {
        self.kv_read_efficiency.unwrap_or(self.bandwidth_efficiency)
    }

    /// Every problem with the numbers.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (name, v) in [
            ("gemm_efficiency", self.gemm_efficiency),
            ("attention_efficiency", self.attention_efficiency),
            ("bandwidth_efficiency", self.bandwidth_efficiency),
            ("kv_read_efficiency", self.kv_read_efficiency()),
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
        if let Some(b) = &self.two_stage_allreduce {
            p.extend(b.problems());
        }
        p
    }
}

/// vLLM's custom all-reduce (`csrc/custom_all_reduce.cuh`) runs a one-stage kernel (every
/// GPU reads every peer's whole buffer) for two GPUs and for small messages, and a two-stage
/// kernel (reduce-scatter, then all-gather) from 512 KiB on groups of up to four fully
/// NVLink-connected GPUs; on Hopper it hands messages of 8 MiB and more to symmetric-memory
/// or NCCL all-reduces (`CUSTOM_ALL_REDUCE_MAX_SIZES`, vLLM 0.11 onwards). The two-stage
/// kernel is slower than the bandwidth of the fabric suggests; this band prices it from its
/// own measurement: `2(tp−1)/tp · bytes / gb_per_s + latency_us` for messages of
/// `from_bytes` up to (not including) `below_bytes` on a TP group of exactly `tp` GPUs.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TwoStageAllReduce {
    /// The TP group size the band applies to (vLLM: 4; on Hopper 6 and 8 GPUs leave the
    /// custom kernel by 512 KiB and 256 KiB).
    pub tp: u32,
    /// Smallest message of the band, bytes (vLLM: 512 KiB).
    pub from_bytes: f64,
    /// First message size past the band, bytes (vLLM on Hopper: 8 MiB).
    pub below_bytes: f64,
    /// Fixed latency of one two-stage all-reduce, µs.
    pub latency_us: f64,
    /// Its achieved bus bandwidth, GB/s.
    pub gb_per_s: f64,
}

impl TwoStageAllReduce {
    /// Every problem with the numbers.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.tp < 3 {
            p.push(format!(
                "physics.two_stage_allreduce.tp must be at least 3 (two GPUs always run the one-stage kernel), got {}",
                self.tp
            ));
        }
        if !(self.from_bytes.is_finite()
            && self.below_bytes.is_finite()
            && 0.0 <= self.from_bytes
            && self.from_bytes < self.below_bytes)
        {
            p.push(format!(
                "physics.two_stage_allreduce needs 0 ≤ from_bytes < below_bytes, got {} and {}",
                self.from_bytes, self.below_bytes
            ));
        }
        if !self.gb_per_s.is_finite() || self.gb_per_s <= 0.0 {
            p.push(format!(
                "physics.two_stage_allreduce.gb_per_s must be a finite number > 0, got {}",
                self.gb_per_s
            ));
        }
        if !self.latency_us.is_finite() || !(0.0..=1e6).contains(&self.latency_us) {
            p.push(format!(
                "physics.two_stage_allreduce.latency_us must be in [0, 10⁶] µs, got {}",
                self.latency_us
            ));
        }
        p
    }

    /// The two-stage kernel's time for `bytes` on `tp` GPUs, µs, if the message is in the band.
    #[inline]
    pub fn time_us(&self, tp: u32, bytes: f64) -> Option<f64> {
        (tp == self.tp && self.from_bytes <= bytes && bytes < self.below_bytes)
            .then(|| allreduce_time_us(tp, bytes, self.gb_per_s, self.latency_us))
    }
}

/// An all-reduce of `bytes` over `tp` GPUs that moves 2(tp−1)/tp of them at `gb_per_s` of
/// bus bandwidth after `latency_us`, µs (a ring, and vLLM's two-stage kernel alike).
#[inline]
pub fn allreduce_time_us(tp: u32, bytes: f64, gb_per_s: f64, latency_us: f64) -> f64 {
    let n = f64::from(tp);
    2.0 * (n - 1.0) / n * bytes / (gb_per_s * 1e9) * 1e6 + latency_us
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
        // The node's figures are `cluster.topology`'s defaults: checked as the topology's own.
        if let Some(node) = &self.node {
            if !(1..=4096).contains(&node.gpus) {
                p.push(format!(
                    "node.gpus must be within 1..=4,096, got {}",
                    node.gpus
                ));
            }
            for (name, v) in [
                ("nvlink_gb_per_s", Some(node.nvlink_gb_per_s)),
                ("nic_gb_per_s", node.nic_gb_per_s),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && (1e-3..=1e6).contains(&v))
                {
                    p.push(format!(
                        "node.{name} must be a bandwidth within 0.001..=10⁶ GB/s per direction, got {}",
                        crate::scenario::readable(v)
                    ));
                }
            }
        }
        if let Some(power) = &self.power {
            p.extend(
                power
                    .problems()
                    .into_iter()
                    .map(|(field, message)| format!("power.{field} {message}")),
            );
        }
        p
    }
}

/// The bundled GPUs, parsed once per process.
fn bundled() -> &'static [GpuProfile] {
    static GPUS: std::sync::OnceLock<Vec<GpuProfile>> = std::sync::OnceLock::new();
    GPUS.get_or_init(|| {
        ron::from_str(include_str!("../../assets/gpus.ron"))
            .expect("bundled GPU profiles parse (tested)")
    })
}

/// Every bundled GPU.
pub fn bundled_gpus() -> Vec<GpuProfile> {
    bundled().to_vec()
}

/// A bundled GPU by id or alias, whatever the case and with a space or underscore for a
/// hyphen (`NVIDIA H100 80GB HBM3`, as nvidia-smi names the H100 SXM, is `nvidia-h100-80gb-hbm3`).
pub fn find_gpu(name: &str) -> Option<GpuProfile> {
    let wanted = gpu_key(name);
    bundled()
        .iter()
        .find(|g| gpu_key(&g.id) == wanted || g.aliases.iter().any(|a| gpu_key(a) == wanted))
        .cloned()
}

/// A GPU name as names are compared: lower case, words joined by hyphens.
pub fn gpu_key(name: &str) -> String {
    name.trim()
        .to_ascii_lowercase()
        .split([' ', '_', '-'])
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The bundled GPUs of the chip a name names (`A100`, `h100-pcie`: the bundled parts whose id
/// begins with a word of the name), for a name that names no bundled part.
pub fn gpus_of_chip(name: &str) -> Vec<GpuProfile> {
    let key = gpu_key(name);
    let words: Vec<&str> = key.split('-').collect();
    bundled()
        .iter()
        .filter(|g| {
            let id = gpu_key(&g.id);
            words.contains(&id.split('-').next().unwrap_or(&id))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_gpus_are_sane_and_findable() {
        let all = bundled_gpus();
        assert_eq!(all.len(), 10);
        for g in &all {
            assert!(g.problems().is_empty(), "{}: {:?}", g.id, g.problems());
            assert!(!g.source.is_empty());
        }
        assert_eq!(find_gpu("h100-sxm").unwrap().id, "H100");
        assert_eq!(find_gpu("A100-SXM").unwrap().id, "A100-80");
        assert_eq!(find_gpu("gb200-nvl72").unwrap().id, "GB200");
        // As nvidia-smi and torch name the parts, and spelt with spaces or underscores.
        assert_eq!(find_gpu("NVIDIA H100 80GB HBM3").unwrap().id, "H100");
        assert_eq!(find_gpu("h100 sxm").unwrap().id, "H100");
        assert_eq!(find_gpu("H100-80GB").unwrap().id, "H100");
        assert_eq!(find_gpu("A100_SXM4_80GB").unwrap().id, "A100-80");
        assert_eq!(find_gpu("NVIDIA A100-SXM4-40GB").unwrap().id, "A100-40");
        assert_eq!(find_gpu("AMD Instinct MI300X").unwrap().id, "MI300X");
        // Other parts of a bundled chip are not it; their chip's bundled parts are named.
        for other in ["H100-PCIe", "H100 NVL", "A100"] {
            assert!(find_gpu(other).is_none(), "{other}");
        }
        let ids = |name: &str| {
            gpus_of_chip(name)
                .into_iter()
                .map(|g| g.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("H100-PCIe"), ["H100"]);
        assert_eq!(ids("a100"), ["A100-80", "A100-40"]);
        assert!(ids("TPUv5").is_empty());
        let h100 = find_gpu("H100").unwrap();
        assert_eq!(h100.peak_flops(1.0), 1979.0e12);
        assert_eq!(h100.peak_flops(2.0), 989.5e12);
    }

    #[test]
    fn a_node_of_no_gpus_or_no_bandwidth_is_refused() {
        // A GPU file's node of 0 GB/s NVLink stopped a run with a topology on a panic.
        let mut g = find_gpu("H100").unwrap();
        let node = g.node.as_mut().unwrap();
        node.gpus = 0;
        node.nvlink_gb_per_s = 0.0;
        node.nic_gb_per_s = Some(f64::NAN);
        assert_eq!(
            g.problems(),
            [
                "node.gpus must be within 1..=4,096, got 0",
                "node.nvlink_gb_per_s must be a bandwidth within 0.001..=10⁶ GB/s per direction, got 0",
                "node.nic_gb_per_s must be a bandwidth within 0.001..=10⁶ GB/s per direction, got NaN",
            ]
        );
    }

    #[test]
    fn only_the_h100_is_measured_and_the_newer_gpus_carry_their_datasheets() {
        let cal = |id: &str| find_gpu(id).unwrap().calibration;
        assert_eq!(cal("H100"), Calibration::Measured);
        assert_eq!(cal("H200"), Calibration::SameDie);
        for id in [
            "A100-80", "A100-40", "L40S", "B200", "GB200", "H20", "MI300X", "MI325X",
        ] {
            assert_eq!(cal(id), Calibration::Datasheet, "{id}");
        }
        // Per-GPU shares of the system datasheets: DGX B200 1,440 GB / 8 = 180 GB, GB200 NVL72
        // 13.4 TB / 72 = 186 GB; GB → GiB (÷ 1.073741824), to 0.1 GiB.
        for (id, gb) in [
            ("B200", 180.0),
            ("GB200", 186.0),
            ("H20", 96.0),
            ("MI300X", 192.0),
            ("MI325X", 256.0),
        ] {
            let g = find_gpu(id).unwrap();
            assert!(
                (g.memory_gib - gb / 1.073_741_824).abs() < 0.06,
                "{id}: {}",
                g.memory_gib
            );
        }
        let mi300x = find_gpu("MI300X").unwrap();
        assert_eq!(mi300x.peak_flops(1.0), 2614.9e12);
        assert_eq!(
            mi300x.peak_flops(0.5),
            1307.4e12,
            "W4A16 runs at the bf16 rate"
        );
    }

    #[test]
    fn llama_70b_fits_one_mi300x_with_room_for_kv() {
        // 178.8 GiB × 0.9 = 160.92; − 131.44 (weights) − 5.5 − 0.15 = 23.83 GiB; 5 MiB per
        // block of 16 tokens (80 layers × 2 × 128 × 8 heads × 2 B × 16) → ⌊23.83 × 1024 / 5⌋
        // ≈ 4,880 blocks (±2 for the weights' last digit); an H100 cannot hold it at all.
        let m = crate::model::ModelConfig::bundled("llama-3.1-70b-instruct").unwrap();
        let c = crate::model::kv_capacity(&m, &find_gpu("MI300X").unwrap(), 1, 1, 0.9, 16).unwrap();
        assert_eq!(c.per_block_bytes, 5_242_880.0);
        assert!((4_875..=4_885).contains(&c.blocks), "{}", c.blocks);
        assert!(crate::model::kv_capacity(&m, &find_gpu("H100").unwrap(), 1, 1, 0.9, 16).is_err());
    }
}
