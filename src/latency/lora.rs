//! What multi-LoRA costs an instance group (`cluster.groups[i].lora`, docs/lora.md): the
//! GPU memory of its adapter slots, loading an adapter, and the LoRA kernels of a step.
//!
//! An adapter of rank r on every linear layer of a decoder (PEFT's `all-linear`: q, k, v,
//! o, gate, up, down) holds an A matrix (r × in) and a B matrix (out × r) per projection:
//! r · S · L elements, S = Σ (in + out) over the seven projections, L layers, at the
//! model's activation width (bf16: 2 bytes). Llama-3.1-8B: S = 81,920, so rank 16 is
//! 16 · 81,920 · 32 · 2 = 83,886,080 bytes.
//!
//! - **Memory**: vLLM allocates `max_loras` GPU slots of `max_lora_rank` when the engine
//!   starts, out of the memory the KV cache would otherwise get.
//! - **Loading** (vLLM `LRUCacheWorkerLoRAManager`, synchronously while the step's inputs are
//!   prepared): an adapter not in host memory is read from storage, whole, by each worker
//!   (bytes / `load_gb_per_s` + `load_latency_us`), then copied to a GPU slot, each GPU its
//!   TP shard over its own host link (bytes / tp / host link + its latency).
//! - **Kernels**: with any adapter in the step, each of a layer's four LoRA-wrapped linear
//!   layers (QKV, O, gate-up, down) runs a shrink and an expand kernel over the step's
//!   tokens at the slots' rank: 2 · t · r · S · L / tp FLOPs, reading each adapter in the
//!   step and every token's activations, priced like our roofline's GEMMs (peak ×
//!   `gemm_efficiency`, bandwidth × `bandwidth_efficiency`) plus `kernel_overhead_us` per
//!   kernel. A step without adapters runs vLLM's graph without LoRA
//!   (`cudagraph_specialize_lora`) and pays nothing.

use crate::model::{GpuProfile, ModelConfig};

/// LoRA kernels per decoder layer: shrink and expand for QKV, O, gate-up and down.
pub const KERNELS_PER_LAYER: f64 = 8.0;

/// A group's multi-LoRA configuration, resolved from its model and GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    pub max_loras: u32,
    pub max_cpu_loras: u32,
    pub max_rank: u32,
    pub tp: u32,
    /// Bytes of an adapter per unit of rank (S · L · activation bytes).
    pub bytes_per_rank: f64,
    /// S · L: shrink + expand elements per token per unit of rank.
    pub elements_per_rank: f64,
    /// S · L · activation bytes: activations a token's LoRA kernels read and write.
    pub act_bytes_per_token: f64,
    pub layers: u32,
    /// The GPU's achieved rates (FLOP/s, bytes/s) and per-kernel fixed cost (µs).
    pub flops: f64,
    pub bandwidth: f64,
    pub kernel_overhead_us: f64,
    /// Host link of one GPU, bytes per µs, and its fixed cost per copy, µs.
    pub host_bytes_per_us: f64,
    pub host_latency_us: f64,
    /// Storage read rate, bytes per µs, and its fixed cost per adapter, µs.
    pub disk_bytes_per_us: f64,
    pub disk_latency_us: f64,
}

/// Σ (in + out) over the seven projections of one decoder layer (dense MLP; the expert
/// MLPs of a MoE model are not adapted).
pub fn projection_elements(m: &ModelConfig) -> f64 {
    let d = f64::from(m.hidden);
    let q = f64::from(m.heads) * f64::from(m.head_dim);
    let kv = f64::from(m.kv_heads) * f64::from(m.head_dim);
    let f = f64::from(m.ffn_dense);
    (d + q) + 2.0 * (d + kv) + (q + d) + 2.0 * (d + f) + (f + d)
}

impl LoraConfig {
    #[expect(clippy::too_many_arguments, reason = "the group's settings, one each")]
    pub fn new(
        m: &ModelConfig,
        gpu: &GpuProfile,
        tp: u32,
        max_loras: u32,
        max_cpu_loras: u32,
        max_rank: u32,
        load_gb_per_s: f64,
        load_latency_us: f64,
        host_link_gb_per_s: f64,
        host_link_latency_us: f64,
    ) -> Self {
        let ph = &gpu.physics;
        let elements = projection_elements(m) * f64::from(m.layers);
        LoraConfig {
            max_loras,
            max_cpu_loras,
            max_rank,
            tp: tp.max(1),
            bytes_per_rank: elements * m.act_bytes,
            elements_per_rank: elements,
            act_bytes_per_token: elements * m.act_bytes,
            layers: m.layers,
            flops: gpu.tflops_bf16 * 1e12 * ph.gemm_efficiency,
            bandwidth: gpu.bandwidth_tb_per_s * 1e12 * ph.bandwidth_efficiency,
            kernel_overhead_us: ph.kernel_overhead_us,
            host_bytes_per_us: host_link_gb_per_s * 1e3,
            host_latency_us: host_link_latency_us,
            disk_bytes_per_us: load_gb_per_s * 1e3,
            disk_latency_us: load_latency_us,
        }
    }

    /// Bytes of an adapter of rank `rank`.
    pub fn adapter_bytes(&self, rank: u32) -> f64 {
        f64::from(rank) * self.bytes_per_rank
    }

    /// GiB of the GPU slots on the whole replica (`max_loras` of `max_lora_rank`).
    pub fn slots_gib(&self) -> f64 {
        f64::from(self.max_loras) * self.adapter_bytes(self.max_rank) / (1u64 << 30) as f64
    }

    /// µs to read an adapter of rank `rank` from storage into host memory.
    pub fn disk_us(&self, rank: u32) -> f64 {
        self.adapter_bytes(rank) / self.disk_bytes_per_us + self.disk_latency_us
    }

    /// µs to copy an adapter of rank `rank` from host memory to a GPU slot (each GPU its
    /// shard, at once).
    pub fn host_us(&self, rank: u32) -> f64 {
        self.adapter_bytes(rank) / f64::from(self.tp) / self.host_bytes_per_us
            + self.host_latency_us
    }

    /// µs the LoRA kernels add to a step of `tokens` tokens using `adapters` adapters
    /// (none: nothing).
    pub fn kernel_us(&self, tokens: u32, adapters: u32) -> f64 {
        if adapters == 0 || tokens == 0 {
            return 0.0;
        }
        let tp = f64::from(self.tp);
        let t = f64::from(tokens);
        let r = f64::from(self.max_rank);
        let flops = 2.0 * t * r * self.elements_per_rank / tp;
        let bytes = (f64::from(adapters) * self.adapter_bytes(self.max_rank)
            + t * self.act_bytes_per_token)
            / tp;
        (flops / self.flops).max(bytes / self.bandwidth) * 1e6
            + KERNELS_PER_LAYER * f64::from(self.layers) * self.kernel_overhead_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama8b() -> LoraConfig {
        let m = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
        let gpu = crate::model::find_gpu("H100").unwrap();
        LoraConfig::new(&m, &gpu, 1, 4, 8, 16, 2.0, 0.0, 50.0, 10.0)
    }

    #[test]
    fn a_rank_16_llama_8b_adapter_is_84_mb_and_loads_in_hand_computed_time() {
        let c = llama8b();
        // q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096, gate 4096+14336,
        // up 4096+14336, down 14336+4096 = 81,920; × 32 layers × 2 bytes × rank 16.
        assert_eq!(c.adapter_bytes(16), 83_886_080.0);
        // Storage at 2 GB/s: 41,943.04 µs; the host link at 50 GB/s + 10 µs: 1,687.7216 µs.
        assert!((c.disk_us(16) - 41_943.04).abs() < 1e-6);
        assert!((c.host_us(16) - 1_687.721_6).abs() < 1e-6);
        // Four slots of rank 16: 335,544,320 bytes = 0.3125 GiB.
        assert!((c.slots_gib() - 0.3125).abs() < 1e-12);
    }

    #[test]
    fn kernels_cost_nothing_without_adapters_and_at_least_their_fixed_cost_with() {
        let c = llama8b();
        assert_eq!(c.kernel_us(64, 0), 0.0);
        // 8 kernels × 32 layers × 6 µs = 1,536 µs, plus one adapter's 84 MB and 64 tokens'
        // activations (335.5 MB) at 3.35 TB/s × 0.9: memory bound, 139.1 µs.
        let one = c.kernel_us(64, 1);
        let memory = (83_886_080.0 + 64.0 * 83_886_080.0 / 16.0) / (3.35e12 * 0.9) * 1e6;
        assert!((one - (1_536.0 + memory)).abs() < 1e-6, "{one}");
        assert!(c.kernel_us(64, 2) > one);
    }
}
