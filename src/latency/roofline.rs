//! servesim's roofline: a per-kernel physics model of one vLLM step on one TP group.
//!
//! Every decoder layer is priced kernel by kernel on one GPU's shard of the weights:
//! - GEMMs (QKV, O, the gated MLP's gate+up and down — three matrices for SwiGLU models —,
//!   MoE experts): each takes max(FLOPs / (peak × `gemm_efficiency`), bytes /
//!   (bandwidth × `bandwidth_efficiency`)) + `kernel_overhead_us`; bytes are the weights plus
//!   activations in and out. A MoE layer reads only the experts the step's tokens touch,
//!   N·(1 − (1 − k/N)^T) of them, and computes k experts per token.
//! - attention: causal prefill FLOPs at `attention_efficiency`, plus every decode's K and V
//!   reads at the achieved bandwidth (`kv_read_efficiency` where it is given), plus
//!   `attention_overhead_us`;
//! - element-wise work (norms, rotary, activation, residuals): `elementwise_hidden_passes`
//!   passes over each token's hidden row and `elementwise_ffn_passes` over its FFN row,
//!   memory bound;
//! - with TP > 1, two all-reduces of the step's activations per layer (ring:
//!   2(TP−1)/TP × bytes / `allreduce_gb_per_s` + `allreduce_latency_us`).
//!
//! A step is every layer, plus the LM head (one logits row per scheduled request and per
//! position a speculative verification adds, vocab sharded over TP), plus a fixed per-step
//! overhead and a per-request overhead (scheduling, input preparation, sampling: the CPU
//! side of vLLM). The efficiencies and overheads live in
//! the GPU profile's `physics` block, fitted to `h100_torch_microbench.csv`; every one can be
//! overridden in the scenario (`Roofline(gemm_efficiency: 0.7, ...)`) or a GPU file.

use super::{Alpha, BatchShape, LatencyError, LatencyModel, StepItem};
use crate::model::{GpuPhysics, GpuProfile, ModelConfig};
use crate::time::SimDuration;

/// Default CPU-side cost of one step (scheduling, input preparation, launch), µs.
pub const DEFAULT_STEP_OVERHEAD_US: f64 = 400.0;
/// Default CPU-side cost per scheduled request (its input rows, sampling), µs; the order of
/// BLIS's fitted per-request term (4.4 µs).
pub const DEFAULT_REQUEST_OVERHEAD_US: f64 = 5.0;

/// vLLM 0.15's top-p sampler (`apply_top_k_top_p`: PyTorch sorts every logits row, then
/// softmax, cumulative sum, mask and scatter back), measured alone with CUDA events by vLLM's
/// sampler benchmarks, PyTorch column, 32,768-token vocabulary: 0.094 ms for 1 row (PR
/// #42191), 0.37 / 0.626 / 1.694 ms for 64 / 128 / 512 rows (PR #40376), 2.252 / 4.236 ms
/// for 512 / 1,024 rows (PR #33538, which re-opens PR #25824, run on an H100; the others do
/// not name their GPU). The fixed part, µs: mostly kernel launches, which a step partly
/// hides behind its forward pass, so it is at most this.
pub const TOP_P_SORT_FIXED_US: f64 = 90.0;
/// The part per logits row of a 32,768-token vocabulary, µs (it scales with the vocabulary).
pub const TOP_P_SORT_US_PER_ROW: f64 = 4.0;
/// The vocabulary [`TOP_P_SORT_US_PER_ROW`] was measured at.
pub const TOP_P_SORT_VOCAB: f64 = 32_768.0;

/// Our roofline model of one replica (one TP group).
#[derive(Clone, Debug)]
pub struct Roofline {
    pub model: ModelConfig,
    pub gpu: GpuProfile,
    pub tp: u32,
    /// [α0, α1, α2] µs overheads as BLIS places them (default zeros).
    pub alpha: [f64; 3],
    /// Fixed CPU-side cost of each step, µs.
    pub step_overhead_us: f64,
    /// CPU-side cost per scheduled request, µs.
    pub request_overhead_us: f64,
    /// The requests sample with a nucleus (top-p < 1), so every step sorts its logits
    /// ([`Roofline::top_p_sort_us`]).
    pub top_p_sort: bool,
}

/// What one layer of a step computes, summed over the batch (whole model, before TP).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LayerLoad {
    /// Tokens computed in the step (prefill chunk tokens + one per decode).
    pub tokens: f64,
    /// Σ over prefill chunks of n·(s + (n + 1)/2): query × key pairs of causal attention.
    pub prefill_pairs: f64,
    /// Σ over decodes of the context read (tokens in the KV cache).
    pub decode_context: f64,
    /// Rows of logits the LM head computes: one per request, one per position a decode
    /// verifies (speculative decoding).
    pub logit_rows: f64,
}

impl LayerLoad {
    /// The load of a batch.
    pub fn of(batch: &BatchShape<'_>) -> Self {
        let mut l = LayerLoad::default();
        for it in batch.items {
            l.add(it);
        }
        l
    }

    /// Adds one scheduled request.
    pub fn add(&mut self, it: &StepItem) {
        let n = f64::from(it.new_tokens.max(1));
        let s = f64::from(it.context_tokens);
        self.tokens += n;
        if it.prefill {
            self.prefill_pairs += n * (s + (n + 1.0) / 2.0);
            self.logit_rows += 1.0;
        } else {
            // A decode reads its context and the positions it computes (one, or 1 + its
            // drafts verified together), and needs the logits of each.
            self.decode_context += s + n;
            self.logit_rows += n;
        }
    }
}

impl Roofline {
    fn physics(&self) -> &GpuPhysics {
        &self.gpu.physics
    }

    fn peak(&self) -> f64 {
        self.gpu.peak_flops(self.model.weight_bytes)
    }

    pub(super) fn bandwidth(&self) -> f64 {
        self.gpu.bandwidth_tb_per_s * 1e12 * self.physics().bandwidth_efficiency
    }

    /// What a decode's read of the paged KV cache achieves, bytes/s.
    pub(super) fn kv_bandwidth(&self) -> f64 {
        self.gpu.bandwidth_tb_per_s * 1e12 * self.physics().kv_read_efficiency()
    }

    /// One GEMM of `m` rows against a `k × n` weight of `weight_bytes` per element, µs.
    pub fn gemm_us(&self, m: f64, k: f64, n: f64) -> f64 {
        self.gemm_us_at(m, k, n, self.model.weight_bytes)
    }

    /// [`Self::gemm_us`] against an attention projection (`attn_weight_bytes`).
    pub fn attn_gemm_us(&self, m: f64, k: f64, n: f64) -> f64 {
        self.gemm_us_at(m, k, n, self.model.attn_weight_bytes)
    }

    /// The LM head's GEMM of `rows` logits rows (`head_bytes`: unquantised in vLLM), µs.
    pub fn head_gemm_us(&self, rows: f64) -> f64 {
        let vocab = f64::from(self.model.vocab) / f64::from(self.tp.max(1));
        self.gemm_us_at(
            rows,
            f64::from(self.model.hidden),
            vocab,
            self.model.head_bytes,
        )
    }

    /// One GEMM of `m` rows against a `k × n` weight of `weight_bytes` per element (at the
    /// fp8 rate for 1-byte weights), µs.
    fn gemm_us_at(&self, m: f64, k: f64, n: f64, weight_bytes: f64) -> f64 {
        if m <= 0.0 {
            return 0.0;
        }
        let ph = self.physics();
        let flops = 2.0 * m * k * n;
        let bytes = k * n * weight_bytes + m * (k + n) * self.model.act_bytes;
        let peak = self.gpu.peak_flops(weight_bytes);
        let compute = flops / (peak * ph.gemm_efficiency);
        let memory = bytes / self.bandwidth();
        compute.max(memory) * 1e6 + ph.kernel_overhead_us
    }

    /// The routed experts of one MoE layer on one GPU for `t` tokens, µs: vLLM's fused-MoE
    /// kernel reads every expert the tokens touch, N·(1 − (1 − k/N)^t) of them, and computes
    /// k expert rows per token; weight traffic and compute combine as a p-norm
    /// ([`GpuPhysics::moe_overlap_exponent`]), plus two kernels' fixed costs.
    pub fn moe_experts_us(&self, t: f64) -> f64 {
        let m = &self.model;
        let tp = f64::from(self.tp.max(1));
        self.fused_moe_us(f64::from(m.experts), m.k(), t, f64::from(m.ffn_expert) / tp)
    }

    /// [`moe_experts_us`](Self::moe_experts_us) of `n` experts of width `w` on one GPU,
    /// `t` tokens each routed to `k` of them.
    pub fn fused_moe_us(&self, n: f64, k: f64, t: f64, w: f64) -> f64 {
        let m = &self.model;
        let ph = self.physics();
        let d = f64::from(m.hidden);
        let mats = if self.gated() { 3.0 } else { 2.0 };
        let touched = n * (1.0 - (1.0 - k / n).powf(t));
        let flops = 2.0 * t * k * mats * d * w;
        let bytes = touched * mats * d * w * m.weight_bytes + t * k * (d + mats * w) * m.act_bytes;
        let compute_us = flops / (self.peak() * ph.gemm_efficiency) * 1e6;
        let memory_us = bytes / self.bandwidth() * 1e6;
        let q = ph.moe_overlap_exponent;
        (memory_us.powf(q) + compute_us.powf(q)).powf(1.0 / q) + 2.0 * ph.kernel_overhead_us
    }

    /// Gated MLPs (SwiGLU and friends) have three matrices; GELU/ReLU MLPs two.
    fn gated(&self) -> bool {
        self.model.gated_mlp
    }

    /// One decoder layer on one GPU, µs. `moe` selects a MoE layer. `kv_tensors` is how
    /// many tensors attention reads per cached token and head (2 = K and V, as in vLLM;
    /// the microbenchmark's SDPA passed one tensor as both).
    pub fn layer_us(&self, moe: bool, load: &LayerLoad, kv_tensors: f64) -> f64 {
        let m = &self.model;
        let tp = f64::from(self.tp.max(1));
        let t = load.tokens;
        if t <= 0.0 {
            return 0.0;
        }
        let d = f64::from(m.hidden);
        let dims = self.head_dims();
        let mut us = self.projections_with(t, dims);
        let ffn_local = if moe {
            let n = f64::from(m.experts);
            let k = m.k();
            let router = self.gemm_us(t, d, n);
            us += self.moe_experts_us(t) + router + self.mlp_us(f64::from(m.ffn_shared), t);
            (k * f64::from(m.ffn_expert) + f64::from(m.ffn_shared)) / tp
        } else {
            us += self.mlp_us(f64::from(m.ffn_dense), t);
            f64::from(m.ffn_dense) / tp
        };
        us += self.attention_with(load, kv_tensors, dims);
        us += self.elementwise_us(t, ffn_local);
        us + self.allreduce_us(t) * 2.0
    }

    /// Query, key and value heads of this GPU: (query width, K or V width).
    fn head_dims(&self) -> (f64, f64) {
        let m = &self.model;
        let tp = f64::from(self.tp.max(1));
        let hd = f64::from(m.head_dim);
        // KV heads are split over TP, or replicated when there are fewer than TP of them.
        let kv_heads = (f64::from(m.kv_heads) / tp).max(1.0);
        (f64::from(m.heads) * hd / tp, kv_heads * hd)
    }

    /// The QKV and output projections of `t` tokens on one GPU, µs.
    pub fn projections_us(&self, t: f64) -> f64 {
        self.projections_with(t, self.head_dims())
    }

    #[inline]
    fn projections_with(&self, t: f64, (q_dim, kv_dim): (f64, f64)) -> f64 {
        if self.model.is_mla() {
            return self.mla_projections_us(t);
        }
        let d = f64::from(self.model.hidden);
        // Qwen3-Next's queries carry an output gate as wide as themselves.
        let q_out = if self.model.attn_output_gate {
            2.0 * q_dim
        } else {
            q_dim
        };
        self.attn_gemm_us(t, d, q_out + 2.0 * kv_dim) + self.attn_gemm_us(t, q_dim, d)
    }

    /// Multi-head latent attention's projections, as vLLM's MLA layer runs them: the
    /// query down-projection (if any) and the KV down-projection replicated on every GPU,
    /// the query up-projection, the latent's up-projection (absorbed into the query and the
    /// output in decode: the same weights, the same FLOPs) and the output projection split
    /// by heads over TP.
    fn mla_projections_us(&self, t: f64) -> f64 {
        let m = &self.model;
        let d = f64::from(m.hidden);
        let heads = f64::from(m.heads) / f64::from(self.tp.max(1));
        let (nope, rope) = (f64::from(m.qk_nope_head_dim), f64::from(m.qk_rope_head_dim));
        let (latent, v) = (f64::from(m.kv_lora_rank), f64::from(m.v_head_dim));
        let q = match m.q_lora_rank {
            0 => self.attn_gemm_us(t, d, heads * (nope + rope)),
            r => {
                let r = f64::from(r);
                self.attn_gemm_us(t, d, r) + self.attn_gemm_us(t, r, heads * (nope + rope))
            }
        };
        q + self.attn_gemm_us(t, d, latent + rope)
            + self.attn_gemm_us(t, latent, heads * (nope + v))
            + self.attn_gemm_us(t, heads * v, d)
    }

    /// A dense MLP of `width` (sharded over TP) on `rows` tokens, µs.
    #[inline]
    pub fn mlp_us(&self, width: f64, rows: f64) -> f64 {
        if width <= 0.0 || rows <= 0.0 {
            return 0.0;
        }
        let d = f64::from(self.model.hidden);
        let tp = f64::from(self.tp.max(1));
        let mats = if self.gated() { 3.0 } else { 2.0 };
        self.gemm_us(rows, d, (mats - 1.0) * width / tp) + self.gemm_us(rows, width / tp, d)
    }

    /// Attention on one GPU, µs: prefill FLOPs (QK^T and PV), decode K/V reads. With MLA,
    /// prefill attends over the expanded keys (`qk_nope + qk_rope` wide) and values, and a
    /// decode reads each cached token's latent row (`kv_lora_rank + qk_rope_head_dim`)
    /// once, whole on every GPU (vLLM's MLA decode kernels).
    pub fn attention_us(&self, load: &LayerLoad, kv_tensors: f64) -> f64 {
        self.attention_with(load, kv_tensors, self.head_dims())
    }

    #[inline]
    fn attention_with(&self, load: &LayerLoad, kv_tensors: f64, dims: (f64, f64)) -> f64 {
        let m = &self.model;
        let ph = self.physics();
        let (q_dim, kv_dim) = dims;
        let (pf_flops, kv_bytes) = if m.is_mla() {
            let heads = f64::from(m.heads) / f64::from(self.tp.max(1));
            let qk = f64::from(m.qk_nope_head_dim + m.qk_rope_head_dim);
            let row = f64::from(m.kv_lora_rank + m.qk_rope_head_dim);
            (
                2.0 * heads * (qk + f64::from(m.v_head_dim)) * load.prefill_pairs,
                row * load.decode_context * m.kv_bytes,
            )
        } else {
            (
                4.0 * q_dim * load.prefill_pairs,
                kv_tensors * kv_dim * load.decode_context * m.kv_bytes,
            )
        };
        (pf_flops / (self.peak_bf16() * ph.attention_efficiency) + kv_bytes / self.kv_bandwidth())
            * 1e6
            + ph.attention_overhead_us
    }

    /// Element-wise passes over `t` tokens' hidden rows and FFN rows of `ffn_local` wide, µs.
    #[inline]
    pub fn elementwise_us(&self, t: f64, ffn_local: f64) -> f64 {
        let ph = self.physics();
        let d = f64::from(self.model.hidden);
        let (a, b) = (ph.elementwise_hidden_passes, ph.elementwise_ffn_passes);
        t * (a * d + b * ffn_local) * self.model.act_bytes / self.bandwidth() * 1e6
    }

    /// Attention runs in 16-bit even for fp8 weights.
    pub(super) fn peak_bf16(&self) -> f64 {
        self.gpu.tflops_bf16 * 1e12
    }

    /// One all-reduce of `tokens` activation rows across the TP group, µs: a ring at the
    /// GPU's bus bandwidth, or in its band vLLM's two-stage custom kernel as measured.
    pub fn allreduce_us(&self, tokens: f64) -> f64 {
        if self.tp <= 1 {
            return 0.0;
        }
        let ph = self.physics();
        let bytes = tokens * f64::from(self.model.hidden) * self.model.act_bytes;
        if let Some(us) = ph
            .two_stage_allreduce
            .and_then(|b| b.time_us(self.tp, bytes))
        {
            return us;
        }
        crate::model::allreduce_time_us(
            self.tp,
            bytes,
            ph.allreduce_gb_per_s,
            ph.allreduce_latency_us,
        )
    }

    /// Kernel time of one step (every layer and the LM head over `logit_rows` rows), µs,
    /// without CPU overheads.
    pub fn kernels_us(&self, load: &LayerLoad, logit_rows: f64, kv_tensors: f64) -> f64 {
        let m = &self.model;
        let moe = f64::from(m.moe_layers());
        let dense = f64::from(m.dense_layers());
        let mut us = 0.0;
        if moe > 0.0 {
            us += moe * self.layer_us(true, load, kv_tensors);
        }
        if dense > 0.0 {
            us += dense * self.layer_us(false, load, kv_tensors);
        }
        us + self.head_gemm_us(logit_rows)
    }
}

impl Roofline {
    /// What sampling with a nucleus adds to a step of `requests` with `logit_rows` rows of
    /// logits, µs: vLLM 0.15's sort of every row over the whole vocabulary (every rank samples
    /// the gathered logits), 0 when the requests sample without one. A step that verifies
    /// drafts (more rows than requests) sorts twice: the rejection sampler samples the
    /// requests' bonus rows, then constrains the drafts' target rows, each a sort of its own.
    pub fn top_p_sort_us(&self, requests: f64, logit_rows: f64) -> f64 {
        if !self.top_p_sort || logit_rows <= 0.0 {
            return 0.0;
        }
        let sorts = if logit_rows > requests { 2.0 } else { 1.0 };
        sorts * TOP_P_SORT_FIXED_US
            + TOP_P_SORT_US_PER_ROW * logit_rows * f64::from(self.model.vocab) / TOP_P_SORT_VOCAB
    }
}

impl LatencyModel for Roofline {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        if batch.items.is_empty() {
            return Ok(SimDuration(1));
        }
        let requests = batch.items.len() as f64;
        let load = LayerLoad::of(batch);
        let kernels = if self.model.kinds.priced_by_kind() {
            self.hybrid_kernels_us(batch, &load)
        } else {
            self.kernels_us(&load, load.logit_rows, 2.0)
        };
        let us = kernels
            + self.top_p_sort_us(requests, load.logit_rows)
            + self.step_overhead_us
            + self.request_overhead_us * requests;
        Ok(SimDuration::from_us_f64(us).max(SimDuration(1)))
    }

    fn queueing_delay(&self, input_tokens: u32) -> SimDuration {
        Alpha(self.alpha).queueing_delay(input_tokens)
    }

    fn output_token_overhead(&self) -> SimDuration {
        Alpha(self.alpha).output_token_overhead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::StepItem;
    use crate::model::{ModelConfig, find_gpu};

    fn llama(tp: u32) -> Roofline {
        Roofline {
            model: ModelConfig::bundled("llama-3.1-8b-instruct").unwrap(),
            gpu: find_gpu("H100").unwrap(),
            tp,
            alpha: [0.0; 3],
            step_overhead_us: 0.0,
            request_overhead_us: 0.0,
            top_p_sort: false,
        }
    }

    #[test]
    fn a_nucleus_adds_vllms_logits_sort_to_every_step() {
        // Llama-2-7B (32,000-token vocabulary), three decodes: the sort adds
        // 90 + 4.0 × 3 × 32,000 / 32,768 = 101.72 µs; the LM head and layers are unchanged.
        let mut r = llama(1);
        r.model = ModelConfig::bundled("llama-2-7b-hf").unwrap();
        let items = [StepItem {
            new_tokens: 1,
            context_tokens: 600,
            input_tokens: 590,
            prefill: false,
        }; 3];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 0,
            decode_tokens: 3,
        };
        let plain = r.step_time(&shape).unwrap().as_us() as f64;
        r.top_p_sort = true;
        let sorted = r.step_time(&shape).unwrap().as_us() as f64;
        assert!((sorted - plain - 101.72).abs() <= 1.0, "{plain} → {sorted}");
        assert!((r.top_p_sort_us(3.0, 3.0) - 101.718_75).abs() < 1e-9);
        // Verifying 2 drafts each, the same 3 requests sort 9 rows in two calls:
        // 2 × 90 + 4.0 × 9 × 32,000 / 32,768 = 215.156 µs.
        assert!((r.top_p_sort_us(3.0, 9.0) - 215.156_25).abs() < 1e-9);
        // Nothing to sort, nothing added; without a nucleus, nothing at all.
        assert_eq!(r.top_p_sort_us(0.0, 0.0), 0.0);
        r.top_p_sort = false;
        assert_eq!(r.top_p_sort_us(3.0, 3.0), 0.0);
    }

    #[test]
    fn a_weight_streaming_gemm_is_priced_by_hand() {
        // Llama-3.1-8B gate+up at m = 1: 4096 × 28672 bf16 = 234.9 MB of weights, plus
        // (4096 + 28672) × 2 B of activations; at 3.35 TB/s × 0.9 = 3.015 TB/s that is
        // 77.91 µs, + 6 µs kernel overhead.
        let r = llama(1);
        let bytes = 4096.0 * 28672.0 * 2.0 + (4096.0 + 28672.0) * 2.0;
        let expected = bytes / 3.015e12 * 1e6 + 6.0;
        assert!((r.gemm_us(1.0, 4096.0, 28672.0) - expected).abs() < 1e-6);
        // At m = 4096 it is compute bound: 2·4096·4096·28672 FLOP at 989.5 × 0.76 TFLOP/s.
        let flops = 2.0 * 4096.0 * 4096.0 * 28672.0;
        let expected = flops / (989.5e12 * 0.76) * 1e6 + 6.0;
        assert!((r.gemm_us(4096.0, 4096.0, 28672.0) - expected).abs() < 1e-6);
    }

    #[test]
    fn fp8_weights_leave_the_lm_head_in_bf16() {
        // vLLM quantises linear and MoE layers only: with fp8 weights (1 B, fp8 rate) the
        // gate+up GEMM streams half the bytes, the LM head (4096 × 128,256, a vocabulary
        // embedding) still streams bf16: 1,050,673,152 + (4096 + 128,256) × 2 B at
        // 3.015 TB/s = 348.57 µs, + 6 µs.
        let mut r = llama(1);
        r.model = crate::model::dtype::quantised(r.model, Some("fp8"), None).unwrap();
        let head = 4096.0 * 128_256.0 * 2.0 + (4096.0 + 128_256.0) * 2.0;
        assert!((r.head_gemm_us(1.0) - (head / 3.015e12 * 1e6 + 6.0)).abs() < 1e-6);
        let up = 4096.0 * 28672.0 + (4096.0 + 28672.0) * 2.0;
        assert!((r.gemm_us(1.0, 4096.0, 28672.0) - (up / 3.015e12 * 1e6 + 6.0)).abs() < 1e-6);
        // Compute bound, the head runs at the bf16 rate, the rest at the fp8 rate.
        let flops = 2.0 * 4096.0 * 4096.0 * 128_256.0;
        let bf16 = flops / (989.5e12 * 0.76) * 1e6 + 6.0;
        assert!((r.head_gemm_us(4096.0) - bf16).abs() < 1e-6);
        let flops = 2.0 * 4096.0 * 4096.0 * 28672.0;
        let fp8 = flops / (1979.0e12 * 0.76) * 1e6 + 6.0;
        assert!((r.gemm_us(4096.0, 4096.0, 28672.0) - fp8).abs() < 1e-6);
    }

    #[test]
    fn the_mlp_has_three_matrices_for_silu_models() {
        let r = llama(1);
        assert!(r.gated());
        let mut gelu = llama(1);
        gelu.model.hidden_act = "gelu".into();
        gelu.model.gated_mlp = false;
        let load = LayerLoad {
            tokens: 1.0,
            ..Default::default()
        };
        // One MLP matrix fewer: 4096 × 14336 × 2 B less weight traffic (~39 µs).
        let saved = r.layer_us(false, &load, 2.0) - gelu.layer_us(false, &load, 2.0);
        assert!((35.0..42.0).contains(&saved), "{saved}");
    }

    #[test]
    fn tensor_parallelism_adds_two_all_reduces_per_layer() {
        let r = llama(2);
        // 512 rows × 4096 × 2 B = 4 MiB: ring all-reduce over 2 GPUs moves 2·(1/2)·4 MiB at
        // 360 GB/s = 11.65 µs, + 8 µs latency.
        let bytes = 512.0 * 4096.0 * 2.0;
        assert!((r.allreduce_us(512.0) - (bytes / 360e9 * 1e6 + 8.0)).abs() < 1e-9);
        assert_eq!(llama(1).allreduce_us(512.0), 0.0);
    }

    #[test]
    fn four_gpus_all_reduce_from_512_kib_to_8_mib_with_vllms_two_stage_kernel() {
        // Llama-3.1-8B rows are 4096 × 2 B = 8 KiB. On 4 H100s (bundled band: 12.6 µs + bus
        // 210 GB/s from 512 KiB up to 8 MiB):
        let r = llama(4);
        let ring = |bytes: f64| 1.5 * bytes / 360e9 * 1e6 + 8.0;
        let two_stage = |bytes: f64| 1.5 * bytes / 210e9 * 1e6 + 12.6;
        // 63 rows = 504 KiB: below the band, the one-stage kernel (the ring formula).
        assert!((r.allreduce_us(63.0) - ring(63.0 * 8192.0)).abs() < 1e-9);
        // 64 rows = 512 KiB, the band's first size: 12.6 + 1.5 · 524,288 / 210 GB/s = 16.34 µs.
        assert!(
            (r.allreduce_us(64.0) - 16.345).abs() < 1e-3,
            "{}",
            r.allreduce_us(64.0)
        );
        // 256 rows = 2 MiB: 27.58 µs where the ring would say 16.74.
        assert!((r.allreduce_us(256.0) - two_stage(256.0 * 8192.0)).abs() < 1e-9);
        assert!((r.allreduce_us(256.0) - 27.58).abs() < 0.01);
        // 1,023 rows: still in; 1,024 rows = 8 MiB: handed on (ring formula again).
        assert!((r.allreduce_us(1023.0) - two_stage(1023.0 * 8192.0)).abs() < 1e-9);
        assert!((r.allreduce_us(1024.0) - ring(1024.0 * 8192.0)).abs() < 1e-9);
        // Two GPUs always run the one-stage kernel; eight leave it by 256 KiB: the band is
        // for four only.
        let bytes = 256.0 * 8192.0;
        assert!((llama(2).allreduce_us(256.0) - (bytes / 360e9 * 1e6 + 8.0)).abs() < 1e-9);
        let eight = 2.0 * 7.0 / 8.0 * bytes / 360e9 * 1e6 + 8.0;
        assert!((llama(8).allreduce_us(256.0) - eight).abs() < 1e-9);
    }

    #[test]
    fn a_decodes_paged_kv_read_has_its_own_efficiency_and_the_weights_keep_theirs() {
        // 64 Llama-3.1-8B decodes at 1,000 tokens of context: K and V of 8 heads × 128 in
        // bf16, 2 × 1,024 × 64,000 × 2 B = 262.144 MB per layer. At the default (the
        // bandwidth efficiency, 3.35 TB/s × 0.9) that is 86.94 µs, at 0.45 of peak 173.89 µs;
        // each + 18 µs for the kernel.
        let load = LayerLoad {
            tokens: 64.0,
            decode_context: 64_000.0,
            ..Default::default()
        };
        let mut r = llama(1);
        let default_us = r.attention_us(&load, 2.0);
        assert!((default_us - (262.144e6 / 3.015e12 * 1e6 + 18.0)).abs() < 1e-6);
        let default_layer = r.layer_us(false, &load, 2.0);
        r.gpu.physics.kv_read_efficiency = Some(0.45);
        let slow_us = r.attention_us(&load, 2.0);
        assert!((slow_us - (262.144e6 / 1.5075e12 * 1e6 + 18.0)).abs() < 1e-6);
        // Only the KV read moved: the GEMMs still stream weights at 0.9.
        let moved = r.layer_us(false, &load, 2.0) - default_layer;
        assert!((moved - (slow_us - default_us)).abs() < 1e-6, "{moved}");
        // A prefill reads no paged KV this way: its attention is FLOPs at
        // attention_efficiency, whatever the KV read reaches.
        let prefill = LayerLoad {
            tokens: 512.0,
            prefill_pairs: 512.0 * 513.0 / 2.0,
            ..Default::default()
        };
        let at_045 = r.attention_us(&prefill, 2.0);
        r.gpu.physics.kv_read_efficiency = None;
        assert_eq!(at_045, r.attention_us(&prefill, 2.0));
    }

    #[test]
    fn a_verification_computes_its_positions_reads_its_context_once_and_needs_their_logits() {
        // Speculative decoding: one request verifies 1 + 3 positions over 1,000 cached
        // tokens: 4 GEMM rows, K/V of 1,004 tokens read once, 4 logits rows.
        let verify = StepItem {
            new_tokens: 4,
            context_tokens: 1000,
            input_tokens: 100,
            prefill: false,
        };
        fn shape(items: &[StepItem]) -> BatchShape<'_> {
            BatchShape {
                items,
                prefill_tokens: 0,
                decode_tokens: items.iter().map(|i| i.new_tokens).sum(),
            }
        }
        let l = LayerLoad::of(&shape(&[verify]));
        assert_eq!(
            (l.tokens, l.decode_context, l.logit_rows),
            (4.0, 1004.0, 4.0)
        );
        // One plain decode: 1 row, 1,001 tokens read, 1 logits row.
        let plain = StepItem {
            new_tokens: 1,
            ..verify
        };
        let l = LayerLoad::of(&shape(&[plain]));
        assert_eq!(
            (l.tokens, l.decode_context, l.logit_rows),
            (1.0, 1001.0, 1.0)
        );
        // Memory bound: the four positions cost a few percent more than one, not four times.
        let r = llama(1);
        let (v, p) = (
            r.step_time(&shape(&[verify])).unwrap().as_us(),
            r.step_time(&shape(&[plain])).unwrap().as_us(),
        );
        assert!(v > p && v * 100 < p * 110, "{v} vs {p}");
    }

    #[test]
    fn steps_grow_with_context_and_batch_and_pay_the_overheads() {
        let mut r = llama(1);
        let decode = |ctx| StepItem {
            new_tokens: 1,
            context_tokens: ctx,
            input_tokens: 100,
            prefill: false,
        };
        let price = |r: &Roofline, items: &[StepItem]| {
            r.step_time(&BatchShape {
                items,
                prefill_tokens: 0,
                decode_tokens: items.len() as u32,
            })
            .unwrap()
            .as_us()
        };
        let short = price(&r, &[decode(100)]);
        let long = price(&r, &[decode(8000)]);
        let wide = price(&r, &[decode(100); 64]);
        assert!(short < long && short < wide);
        r.step_overhead_us = 1000.0;
        r.request_overhead_us = 10.0;
        assert_eq!(price(&r, &[decode(100)]), short + 1010);
    }
}
