//! The roofline of hybrid-attention models: sliding-window layers attend over their
//! window only, and linear-attention layers (Gated DeltaNet, Qwen3-Next) replace softmax
//! attention with a recurrent state per request.
//!
//! Per step, on one GPU of the TP group:
//! - a **full-attention** layer is priced as in [`Roofline::layer_us`];
//! - a **sliding-window** layer likewise, but a query attends over at most `window` keys:
//!   a prefill chunk of n tokens after s cached ones pairs Σᵢ min(s + i, W) query-key
//!   pairs, and a decode reads min(context + 1, W) tokens' K and V;
//! - a **linear-attention** layer has its own projections (query, key, value and output
//!   gate `in_proj_qkvz`, the per-head decay and step `in_proj_ba`, the output `out_proj`,
//!   heads split over TP) and, in place of attention, the gated delta rule: each token
//!   updates and reads every value head's key × value state, ~6·dk·dv FLOPs per head
//!   (decay, delta correction and update, readout: three matrix-vector products of the
//!   state, 2·dk·dv each), at the attention efficiency; and each request of the step reads
//!   and writes its state once (convolution and recurrent state), at the achieved
//!   bandwidth. The FLOP count is the kernel's arithmetic, not a measurement: no public
//!   H100 timing of the Gated DeltaNet kernels was used.
//!
//! - a **DeepSeek sparse attention** layer (DeepSeek-V3.2, GLM-5.x: `index_topk` k) is
//!   an MLA layer whose queries attend over at most k cached tokens, priced as a window of
//!   k, plus its lightning indexer, replicated on every GPU of the TP group (vLLM runs its
//!   projections unsharded): the query projection, the key and head-weight projection
//!   (one GEMM, as vLLM fuses them), the fp8 logits
//!   of every causal query-key pair, 2·heads·dim FLOPs each, at the fp8 peak and the
//!   attention efficiency, and per decode a read of every cached token's indexer key
//!   ([`crate::model::LayerKinds::index_key_bytes`]) and a write and read of its fp32
//!   logit (the top-k selection). These are the kernels' arithmetic and traffic, not
//!   measurements: no public H100 timing of the indexer kernels was used.
//!
//! MoE layers are spread over the kinds in proportion (every Qwen3-Next layer is MoE).

use super::roofline::{LayerLoad, Roofline};
use super::{BatchShape, StepItem};

/// The load of a sliding-window layer: as `load`, but every query attends over at most
/// `window` keys.
pub fn windowed_load(items: &[StepItem], load: &LayerLoad, window: u32) -> LayerLoad {
    let mut out = LayerLoad {
        prefill_pairs: 0.0,
        decode_context: 0.0,
        ..*load
    };
    for it in items {
        windowed_add(&mut out, it, window);
    }
    out
}

/// Adds `it`'s query-key pairs and decode reads to `out` as a layer whose queries attend
/// over at most `window` keys sees them.
pub fn windowed_add(out: &mut LayerLoad, it: &StepItem, window: u32) {
    let w = f64::from(window);
    let n = f64::from(it.new_tokens.max(1));
    let s = f64::from(it.context_tokens);
    if it.prefill {
        // Queries s+1 ..= s+a see all earlier keys; the rest see W of them.
        let a = (w - s).clamp(0.0, n);
        out.prefill_pairs += a * (s + (a + 1.0) / 2.0) + (n - a) * w;
    } else {
        out.decode_context += (s + n).min(w);
    }
}

impl Roofline {
    /// Kernel time of one step of a hybrid model, µs, without CPU overheads (as
    /// [`Roofline::kernels_us`]).
    pub fn hybrid_kernels_us(&self, batch: &BatchShape<'_>, load: &LayerLoad) -> f64 {
        let m = &self.model;
        let k = &m.kinds;
        let moe_share = f64::from(m.moe_layers()) / f64::from(m.layers);
        let blend = |f: &dyn Fn(bool) -> f64| {
            let mut us = 0.0;
            if moe_share > 0.0 {
                us += moe_share * f(true);
            }
            if moe_share < 1.0 {
                us += (1.0 - moe_share) * f(false);
            }
            us
        };
        let full = f64::from(m.full_attention_layers());
        let mut us = if k.is_sparse() {
            let top = windowed_load(batch.items, load, k.index_topk);
            full * (blend(&|moe| self.layer_us(moe, &top, 2.0)) + self.indexer_us(load))
        } else {
            full * blend(&|moe| self.layer_us(moe, load, 2.0))
        };
        if k.sliding > 0 {
            let w = windowed_load(batch.items, load, k.window);
            us += f64::from(k.sliding) * blend(&|moe| self.layer_us(moe, &w, 2.0));
        }
        if k.linear > 0 {
            let requests = batch.items.len() as f64;
            us += f64::from(k.linear) * blend(&|moe| self.linear_layer_us(moe, load, requests));
        }
        us + self.head_gemm_us(load.logit_rows)
    }

    /// One linear-attention layer on one GPU, µs: the layer of [`Roofline::layer_us`]
    /// with its softmax attention and projections swapped for the linear mixer's.
    pub fn linear_layer_us(&self, moe: bool, load: &LayerLoad, requests: f64) -> f64 {
        let t = load.tokens;
        if t <= 0.0 {
            return 0.0;
        }
        let no_attention = LayerLoad {
            prefill_pairs: 0.0,
            decode_context: 0.0,
            ..*load
        };
        let rest = self.layer_us(moe, &no_attention, 2.0)
            - self.projections_us(t)
            - self.attention_us(&no_attention, 2.0);
        rest + self.linear_mixer_us(t, requests)
    }

    /// One layer's lightning indexer (DeepSeek sparse attention) on one GPU, µs: see the
    /// module docs.
    pub fn indexer_us(&self, load: &LayerLoad) -> f64 {
        let m = &self.model;
        let k = &m.kinds;
        let ph = &self.gpu.physics;
        let t = load.tokens;
        if t <= 0.0 || !k.is_sparse() {
            return 0.0;
        }
        let d = f64::from(m.hidden);
        let (heads, dim) = (f64::from(k.index_heads), f64::from(k.index_dim));
        let q_in = m.query_input_width();
        // vLLM fuses the key and head-weight projections (`wk_weights_proj`).
        let projections =
            self.attn_gemm_us(t, q_in, heads * dim) + self.attn_gemm_us(t, d, dim + heads);
        let pairs = load.prefill_pairs + load.decode_context;
        let flops = 2.0 * heads * dim * pairs;
        let bytes = load.decode_context * (k.index_key_bytes() + 8.0);
        let core = (flops / (self.gpu.peak_flops(1.0) * ph.attention_efficiency)
            + bytes / self.bandwidth())
            * 1e6
            + ph.attention_overhead_us
            + ph.kernel_overhead_us;
        projections + core
    }

    /// The Gated DeltaNet mixer of `t` tokens from `requests` requests on one GPU, µs.
    pub fn linear_mixer_us(&self, t: f64, requests: f64) -> f64 {
        let m = &self.model;
        let k = &m.kinds;
        let ph = &self.gpu.physics;
        let tp = f64::from(self.tp.max(1));
        let d = f64::from(m.hidden);
        let heads = f64::from(k.linear_value_heads) / tp;
        let keys = f64::from(k.linear_key_heads) * f64::from(k.linear_key_dim) / tp;
        let values = heads * f64::from(k.linear_value_dim);
        let projections = self.attn_gemm_us(t, d, 2.0 * keys + 2.0 * values + 2.0 * heads)
            + self.attn_gemm_us(t, values, d);
        let state = f64::from(k.linear_key_dim) * f64::from(k.linear_value_dim);
        let flops = 6.0 * t * heads * state;
        let (conv, recurrent) = k.linear_state_elements();
        let bytes = 2.0 * requests * (conv * m.act_bytes + recurrent * k.state_bytes) / tp;
        let core =
            (flops / (self.peak_bf16() * ph.attention_efficiency) + bytes / self.bandwidth()) * 1e6
                + ph.attention_overhead_us;
        projections + core
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::LatencyModel;
    use crate::model::{LayerKinds, ModelConfig, find_gpu};

    fn roofline(model: &str, tp: u32) -> Roofline {
        Roofline {
            model: ModelConfig::bundled(model).unwrap(),
            gpu: find_gpu("H100").unwrap(),
            tp,
            alpha: [0.0; 3],
            step_overhead_us: 0.0,
            request_overhead_us: 0.0,
            top_p_sort: false,
        }
    }

    fn item(new_tokens: u32, context_tokens: u32, prefill: bool) -> StepItem {
        StepItem {
            new_tokens,
            context_tokens,
            input_tokens: 10_000,
            prefill,
        }
    }

    #[test]
    fn a_window_caps_the_pairs_a_prefill_and_the_context_a_decode_attends_to() {
        let items = [
            // 6 queries after 2 cached, window 5: queries 3, 4, 5 see 3, 4, 5 keys; the
            // other three see 5: 27 pairs.
            item(6, 2, true),
            // 4 queries after 10 cached: all see 5.
            item(4, 10, true),
            // Decodes: 3 + 1 keys, and 100 + 1 capped at 5.
            item(1, 3, false),
            item(1, 100, false),
        ];
        let load = LayerLoad {
            tokens: 12.0,
            logit_rows: 4.0,
            ..LayerLoad::default()
        };
        let w = windowed_load(&items, &load, 5);
        assert_eq!(
            (w.prefill_pairs, w.decode_context),
            (27.0 + 20.0, 4.0 + 5.0)
        );
        assert_eq!((w.tokens, w.logit_rows), (12.0, 4.0));
    }

    #[test]
    fn gemmas_sliding_layers_read_only_their_window() {
        // 32 decodes at 8,192 tokens of context: the sliding layers read 1,024 tokens each
        // instead of 8,193. The step is the full-attention model's less 52 layers' K/V
        // reads of the difference: 52 × 32 × 7,169 tokens × 2·16·128·2 B = 97.7 GB, ~32 ms
        // at the H100's achieved bandwidth.
        let hybrid = roofline("gemma-3-27b-it", 1);
        let mut full = hybrid.clone();
        full.model.kinds = LayerKinds::default();
        let items = vec![item(1, 8192, false); 32];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 0,
            decode_tokens: 32,
        };
        let (h, f) = (
            hybrid.step_time(&shape).unwrap().as_us() as f64,
            full.step_time(&shape).unwrap().as_us() as f64,
        );
        let bytes = 52.0 * 32.0 * 7169.0 * 2.0 * 16.0 * 128.0 * 2.0;
        let ph = &hybrid.gpu.physics;
        let read_us =
            bytes / (hybrid.gpu.bandwidth_tb_per_s * 1e12 * ph.bandwidth_efficiency) * 1e6;
        assert!((f - h - read_us).abs() < 2.0, "{f} − {h} vs {read_us}");
    }

    #[test]
    fn a_linear_layer_reads_each_requests_state_once() {
        // Qwen3-Next on TP 4: one more decode in a step adds, per linear layer, its state's
        // read and write: 2 × 274,432 B per GPU; and its context is not read there.
        let r = roofline("qwen3-next-80b-a3b-instruct", 4);
        let load = LayerLoad {
            tokens: 8.0,
            decode_context: 8.0 * 4000.0,
            logit_rows: 8.0,
            ..LayerLoad::default()
        };
        let ph = &r.gpu.physics;
        let bw = r.gpu.bandwidth_tb_per_s * 1e12 * ph.bandwidth_efficiency;
        let one_more = r.linear_mixer_us(8.0, 9.0) - r.linear_mixer_us(8.0, 8.0);
        assert!(
            (one_more - 2.0 * 274_432.0 / bw * 1e6).abs() < 1e-6,
            "{one_more}"
        );
        let far = LayerLoad {
            decode_context: 8.0 * 64_000.0,
            ..load
        };
        assert_eq!(
            r.linear_layer_us(true, &load, 8.0),
            r.linear_layer_us(true, &far, 8.0)
        );
        assert!(r.layer_us(true, &far, 2.0) > r.layer_us(true, &load, 2.0));
    }
}

#[cfg(test)]
mod sparse_tests {
    use super::*;
    use crate::latency::LatencyModel;
    use crate::model::{ModelConfig, find_gpu};

    fn glm(sparse: bool) -> Roofline {
        let mut model = ModelConfig::bundled("glm-5.2-fp8").unwrap();
        if !sparse {
            model.kinds.index_topk = 0;
        }
        Roofline {
            model,
            gpu: find_gpu("H200").unwrap(),
            tp: 8,
            alpha: [0.0; 3],
            step_overhead_us: 0.0,
            request_overhead_us: 0.0,
            top_p_sort: false,
        }
    }

    fn decodes(n: usize, context: u32) -> Vec<StepItem> {
        (0..n)
            .map(|_| StepItem {
                new_tokens: 1,
                context_tokens: context,
                input_tokens: context,
                prefill: false,
            })
            .collect()
    }

    fn shape(items: &[StepItem]) -> BatchShape<'_> {
        BatchShape {
            items,
            prefill_tokens: 0,
            decode_tokens: items.len() as u32,
        }
    }

    fn step_us(r: &Roofline, items: &[StepItem]) -> f64 {
        r.step_time(&shape(items)).unwrap().as_us() as f64
    }

    #[test]
    fn glm_reads_its_top_2048_tokens_and_its_indexer_reads_every_key() {
        let (sparse, dense) = (glm(true), glm(false));
        let k = &sparse.model.kinds;
        assert_eq!((k.index_topk, k.index_heads, k.index_dim), (2048, 32, 128));
        // 128 fp8 bytes and one 4-byte scale per 128 (vLLM's indexer cache).
        assert_eq!(k.index_key_bytes(), 132.0);
        // Under 2,048 tokens of context every query already attends to every key: the
        // sparse model costs its 78 indexers more, nothing else.
        let short = decodes(16, 1000);
        let load = LayerLoad::of(&shape(&short));
        let extra = 78.0 * sparse.indexer_us(&load);
        let diff = step_us(&sparse, &short) - step_us(&dense, &short);
        assert!((diff - extra).abs() <= 1.0, "{diff} vs {extra}");
        // At 32,768 tokens: 16 decodes read 2,048 latent rows each instead of 32,769, on
        // every layer: 16 × 30,721 × 576 × 2 B = 566 MB per layer less at the achieved
        // bandwidth; the indexers read 32,769 keys and logits (140 B each) per request.
        let long = decodes(16, 32_768);
        let load = LayerLoad::of(&shape(&long));
        let saved = 78.0 * 16.0 * 30_721.0 * 576.0 * 2.0 / sparse.bandwidth() * 1e6;
        let extra = 78.0 * sparse.indexer_us(&load);
        let diff = step_us(&dense, &long) - step_us(&sparse, &long);
        assert!(
            (diff - (saved - extra)).abs() <= 2.0,
            "{diff} vs {saved} − {extra}"
        );
        assert!(
            diff > 0.5 * saved,
            "the top-k read dominates: {diff} of {saved}"
        );
        // The indexer's traffic grows with the context: 16 × 16,384 more keys × 140 B.
        let longer = decodes(16, 49_152);
        let more = LayerLoad::of(&shape(&longer));
        let grown = sparse.indexer_us(&more) - sparse.indexer_us(&load);
        let traffic = 16.0 * 16_384.0 * 140.0 / sparse.bandwidth() * 1e6;
        let flops = 2.0 * 32.0 * 128.0 * 16.0 * 16_384.0
            / (sparse.gpu.peak_flops(1.0) * sparse.gpu.physics.attention_efficiency)
            * 1e6;
        assert!((grown - traffic - flops).abs() < 1e-6, "{grown}");
    }
}
