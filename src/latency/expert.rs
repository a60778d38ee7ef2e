//! Wide expert parallelism with data-parallel attention (vLLM `--enable-expert-parallel`
//! with `--data-parallel-size`), priced on top of [`Roofline`].
//!
//! An instance is `dp` attention ranks of `tp` GPUs. Each rank schedules its own requests
//! (here: the step's requests dealt out in batch order) and runs attention, the dense
//! layers, the router, the shared expert and the LM head on them with TP = `tp`. The
//! routed experts of every MoE layer are spread whole over all E = `dp × tp` GPUs, N/E
//! each, and every MoE layer is a barrier across the ranks:
//!
//! - **dispatch**: every GPU sends each of its tokens' hidden row to the GPUs of its k
//!   experts (FP8 with one scale per 128 values when the weights are FP8, as DeepEP's
//!   low-latency kernels do; else in the activation type);
//! - **experts**: the busiest GPU computes `imbalance × T·k/E` rows, plus the spread of
//!   random routing ([`WideEp::busiest_rows`]), over its N/E experts
//!   ([`Roofline::fused_moe_us`] at the experts' full width);
//! - **combine**: the rows go back in the activation type.
//!
//! A dispatch or combine moving `B` bytes from (or to) the busiest GPU takes
//! `latency + max(B·(g−1)/(E−1) / nvlink, B·(E−g)/(E−1) / rdma)` with `B` the remote share
//! (E−1)/E of its rows and g the GPUs of a node: the traffic to the node's other GPUs goes
//! over NVLink, the rest over the GPU's NIC, at the same time. With the DeepEP README's H800
//! setting (NVLink ~160 GB/s, 400 Gb/s NIC at 0.8, 8 µs) this gives its measured
//! low-latency dispatch and combine times at EP 16–256 within 10 % (tests below).
//!
//! A step is the slowest rank's own work (every layer's attention part, the dense layers,
//! the LM head, its requests' CPU cost) plus, per MoE layer, the experts and the all-to-all,
//! plus the step's fixed overhead.

use super::roofline::{LayerLoad, Roofline};
use super::{Alpha, BatchShape, LatencyError, LatencyModel};
use crate::scenario::All2All;
use crate::time::SimDuration;

/// How an instance's experts are spread and reached (resolved from
/// `scenario::ExpertParallelSpec`).
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertParallel {
    /// Data-parallel attention ranks.
    pub dp: u32,
    /// Routed rows of the busiest GPU over the mean, ≥ 1.
    pub imbalance: f64,
    /// All-to-all rate between GPUs of a node, GB/s per GPU and direction.
    pub nvlink_gb_per_s: f64,
    /// All-to-all rate between nodes, GB/s per GPU.
    pub rdma_gb_per_s: f64,
    /// GPUs of one node (the NVLink domain).
    pub gpus_per_node: u32,
    /// Fixed cost of one dispatch or combine, µs.
    pub latency_us: f64,
    /// How tokens reach their experts.
    pub all2all: All2All,
}

impl ExpertParallel {
    /// One dispatch or combine over `e` GPUs that moves `rows` rows of `row_bytes` from
    /// (or to) the busiest GPU, µs.
    pub fn all_to_all_us(&self, e: u32, rows: f64, row_bytes: f64) -> f64 {
        if e <= 1 || rows <= 0.0 {
            return 0.0;
        }
        let g = f64::from(self.gpus_per_node.clamp(1, e));
        let e = f64::from(e);
        let remote = rows * row_bytes * (e - 1.0) / e;
        let nvlink = remote * (g - 1.0) / (e - 1.0) / (self.nvlink_gb_per_s * 1e3);
        let rdma = remote * (e - g) / (e - 1.0) / (self.rdma_gb_per_s * 1e3);
        nvlink.max(rdma) + self.latency_us
    }
}

impl ExpertParallel {
    /// DeepEP's high-throughput dispatch or combine: each of `tokens` tokens crosses once
    /// to every other node holding one of its `k` experts, N_hit = M·(1 − (1 − 1/M)^k) of
    /// the M nodes, the (M − 1)/M remote share of them over the NIC; the `rows` token-expert
    /// rows the busiest GPU sends or receives move over NVLink (directly or forwarded).
    pub fn deduplicated_us(&self, e: u32, tokens: f64, rows: f64, row_bytes: f64, k: f64) -> f64 {
        let g = self.gpus_per_node.clamp(1, e.max(1));
        if e <= g {
            return self.all_to_all_us(e, rows, row_bytes);
        }
        let nodes = f64::from(e.div_ceil(g));
        let hit = nodes * (1.0 - (1.0 - 1.0 / nodes).powf(k));
        let rdma = tokens * hit * (nodes - 1.0) / nodes * row_bytes / (self.rdma_gb_per_s * 1e3);
        let e = f64::from(e);
        let nvlink = rows * row_bytes * (e - 1.0) / e / (self.nvlink_gb_per_s * 1e3);
        nvlink.max(rdma) + self.latency_us
    }
}

/// [`Roofline`] of an instance with expert parallelism.
#[derive(Clone, Debug)]
pub struct WideEp {
    pub roofline: Roofline,
    pub ep: ExpertParallel,
}

/// What one MoE layer of a step costs, µs (for `validate` and the docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeLayerCost {
    /// The slowest rank's attention, router, shared expert and TP all-reduce.
    pub rank_us: f64,
    /// The busiest GPU's routed experts.
    pub experts_us: f64,
    pub dispatch_us: f64,
    pub combine_us: f64,
}

impl WideEp {
    /// GPUs the experts are spread over.
    pub fn ep_size(&self) -> u32 {
        self.ep.dp.max(1) * self.roofline.tp.max(1)
    }

    /// Rank `r`'s load, its attention's load (DeepSeek sparse attention: at most
    /// `index_topk` keys per query, else the load) and its requests when the step's
    /// requests are dealt out to the ranks in batch order (request i to rank i mod dp).
    fn rank(&self, batch: &BatchShape<'_>, r: usize) -> (LayerLoad, LayerLoad, f64) {
        let topk = self.roofline.model.kinds.index_topk;
        let mut load = LayerLoad::default();
        let mut top = LayerLoad::default();
        let mut requests = 0.0;
        for it in batch
            .items
            .iter()
            .skip(r)
            .step_by(self.ep.dp.max(1) as usize)
        {
            load.add(it);
            if topk > 0 {
                super::hybrid::windowed_add(&mut top, it, topk);
            }
            requests += 1.0;
        }
        let top = if topk > 0 {
            LayerLoad {
                prefill_pairs: top.prefill_pairs,
                decode_context: top.decode_context,
                ..load
            }
        } else {
            load
        };
        (load, top, requests)
    }

    /// One rank's part of a MoE layer on `load`, its attention over `top` (sparse
    /// attention's lightning indexer over `load`), µs.
    fn rank_moe_us(&self, load: &LayerLoad, top: &LayerLoad) -> f64 {
        let r = &self.roofline;
        let m = &r.model;
        let t = load.tokens;
        if t <= 0.0 {
            return 0.0;
        }
        let d = f64::from(m.hidden);
        let shared = f64::from(m.ffn_shared);
        r.projections_us(t)
            + r.gemm_us(t, d, f64::from(m.experts))
            + r.mlp_us(shared, t)
            + r.attention_us(top, 2.0)
            + r.indexer_us(load)
            + r.elementwise_us(t, shared / f64::from(r.tp.max(1)))
            + r.allreduce_us(t)
    }

    /// Routed rows the busiest GPU computes when the step has `tokens` tokens: the mean
    /// μ = T·k/E scaled by `imbalance` (the experts' lasting skew), plus the spread of a
    /// step's random routing: the expected largest of E binomial loads,
    /// σ·√(2 ln E) with σ² = μ(1 − 1/E) (Gaussian approximation); at most T·min(k, N/E).
    pub fn busiest_rows(&self, tokens: f64) -> f64 {
        let m = &self.roofline.model;
        let e = f64::from(self.ep_size());
        let k = m.k();
        let mean = tokens * k / e;
        let spread = (2.0 * e.ln() * mean * (1.0 - 1.0 / e)).sqrt();
        let most = tokens * k.min(f64::from(m.experts) / e);
        (mean * self.ep.imbalance + spread).min(most)
    }

    /// The parts of one MoE layer when the busiest rank computes `busiest` and all ranks
    /// `tokens` tokens.
    pub fn moe_layer(&self, busiest: &LayerLoad, tokens: f64) -> MoeLayerCost {
        MoeLayerCost {
            rank_us: self.rank_moe_us(busiest, busiest),
            ..self.expert_parts(busiest, tokens)
        }
    }

    /// [`moe_layer`](Self::moe_layer) without the rank's own part (the step prices every
    /// rank's).
    fn expert_parts(&self, busiest: &LayerLoad, tokens: f64) -> MoeLayerCost {
        let r = &self.roofline;
        let m = &r.model;
        let e = self.ep_size();
        let k = m.k();
        let d = f64::from(m.hidden);
        let w = f64::from(m.ffn_expert);
        // Rows the busiest GPU computes, and rows a GPU of the busiest rank sends.
        let rows = self.busiest_rows(tokens);
        let sent = busiest.tokens / f64::from(r.tp.max(1)) * k;
        let moved = rows.max(sent);
        let fp8 = if m.weight_bytes <= 1.0 {
            1.0 + 4.0 / 128.0
        } else {
            m.act_bytes
        };
        let ep = &self.ep;
        let (dispatch_us, combine_us) = match ep.all2all {
            All2All::AllgatherReducescatter => {
                let us = ep.all_to_all_us(e, tokens, d * m.act_bytes);
                (us, us)
            }
            All2All::DeepepLowLatency => (
                ep.all_to_all_us(e, moved, d * fp8),
                ep.all_to_all_us(e, moved, d * m.act_bytes),
            ),
            All2All::DeepepHighThroughput => {
                let own = busiest.tokens / f64::from(r.tp.max(1));
                (
                    ep.deduplicated_us(e, own, moved, d * fp8, k),
                    ep.deduplicated_us(e, own, moved, d * m.act_bytes, k),
                )
            }
        };
        MoeLayerCost {
            rank_us: 0.0,
            experts_us: r.fused_moe_us(f64::from(m.experts) / f64::from(e), 1.0, rows, w)
                + r.elementwise_us(rows, w),
            dispatch_us,
            combine_us,
        }
    }
}

impl LatencyModel for WideEp {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        if batch.items.is_empty() {
            return Ok(SimDuration(1));
        }
        let r = &self.roofline;
        let m = &r.model;
        let moe_layers = f64::from(m.moe_layers());
        let dense_layers = f64::from(m.dense_layers());
        let mut slowest = 0.0f64;
        let mut busiest = LayerLoad::default();
        let mut tokens = 0.0;
        for rank in 0..self.ep.dp.max(1) as usize {
            let (load, top, requests) = &self.rank(batch, rank);
            tokens += load.tokens;
            if load.tokens > busiest.tokens {
                busiest = *load;
            }
            let own = moe_layers * self.rank_moe_us(load, top)
                + dense_layers * (r.layer_us(false, top, 2.0) + r.indexer_us(load))
                + r.head_gemm_us(load.logit_rows)
                + r.top_p_sort_us(*requests, load.logit_rows)
                + r.request_overhead_us * requests;
            slowest = slowest.max(own);
        }
        let layer = self.expert_parts(&busiest, tokens);
        let us = slowest
            + moe_layers * (layer.experts_us + layer.dispatch_us + layer.combine_us)
            + r.step_overhead_us;
        Ok(SimDuration::from_us_f64(us).max(SimDuration(1)))
    }

    fn queueing_delay(&self, input_tokens: u32) -> SimDuration {
        Alpha(self.roofline.alpha).queueing_delay(input_tokens)
    }

    fn output_token_overhead(&self) -> SimDuration {
        Alpha(self.roofline.alpha).output_token_overhead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::StepItem;
    use crate::model::{ModelConfig, find_gpu};

    /// DeepEP's low-latency benchmark (its README): H800 with ~160 GB/s NVLink and one
    /// 400 Gb/s CX7 NIC (~50 GB/s) per GPU, 128 tokens per GPU, hidden 7168, top-8, FP8
    /// dispatch (7168 B + 56 fp32 scales), BF16 combine. Measured µs per EP size.
    const DEEPEP_LL: [(u32, f64, f64); 5] = [
        (16, 118.0, 195.0),
        (32, 155.0, 273.0),
        (64, 173.0, 314.0),
        (128, 192.0, 369.0),
        (256, 194.0, 360.0),
    ];

    fn h800() -> ExpertParallel {
        ExpertParallel {
            dp: 1,
            imbalance: 1.0,
            nvlink_gb_per_s: 160.0,
            rdma_gb_per_s: 0.8 * 50.0,
            gpus_per_node: 8,
            latency_us: 8.0,
            all2all: All2All::DeepepLowLatency,
        }
    }

    #[test]
    fn all_to_all_matches_deepeps_measured_low_latency_kernels() {
        let ep = h800();
        for (e, dispatch, combine) in DEEPEP_LL {
            let rows = 128.0 * 8.0;
            let d = ep.all_to_all_us(e, rows, 7168.0 + 56.0 * 4.0);
            let c = ep.all_to_all_us(e, rows, 7168.0 * 2.0);
            assert!(
                (d / dispatch - 1.0).abs() < 0.15,
                "EP {e}: dispatch {d:.0} vs {dispatch}"
            );
            assert!(
                (c / combine - 1.0).abs() < 0.10,
                "EP {e}: combine {c:.0} vs {combine}"
            );
        }
    }

    #[test]
    fn all_to_all_inside_a_node_is_priced_by_hand() {
        // EP 8 in one node: 1,024 rows of 14,336 B, 7/8 of them to the other GPUs, all over
        // NVLink at 160 GB/s: 12,845,056 B / 160e3 B/µs = 80.28 µs, + 8 µs.
        let ep = h800();
        let us = ep.all_to_all_us(8, 1024.0, 14336.0);
        assert!((us - (1024.0 * 14336.0 * 7.0 / 8.0 / 160e3 + 8.0)).abs() < 1e-9);
        assert_eq!(ep.all_to_all_us(1, 1024.0, 14336.0), 0.0);
    }

    #[test]
    fn each_backend_moves_what_it_sends_by_hand() {
        // DeepSeek-V3-like layer on EP 16 over 2 nodes, 256 tokens per GPU of the busiest
        // rank, top-8, 2,048 rows on the busiest GPU, hidden 7,168 in BF16.
        let ep = h800();
        let row = 7168.0 * 2.0;
        // All-gather: every GPU receives all 4,096 tokens, 15/16 of them from others; 7 of
        // those 15 GPUs in its node (NVLink), 8 in the other (NIC, the bottleneck).
        let gather = ep.all_to_all_us(16, 4096.0, row);
        let remote = 4096.0 * row * 15.0 / 16.0;
        assert!((gather - (remote * 8.0 / 15.0 / 40e3 + 8.0)).abs() < 1e-9);
        // High throughput: a token crosses to the other node once if any of its 8 experts
        // is there: 2·(1 − 0.5⁸) = 1.992 nodes hit, half of them remote.
        let ht = ep.deduplicated_us(16, 256.0, 2048.0, row, 8.0);
        let rdma = 256.0 * 0.99609375 * row / 40e3;
        let nvlink = 2048.0 * row * 15.0 / 16.0 / 160e3;
        assert!((ht - (rdma.max(nvlink) + 8.0)).abs() < 1e-9);
        // Low latency sends every token-expert row: 8/15 of 15/16 of 2,048 rows over the
        // NIC, 4 times the deduplicated NIC traffic, which makes it twice as slow here.
        let ll = ep.all_to_all_us(16, 2048.0, row);
        assert!((ll - (2048.0 * row * 0.5 / 40e3 + 8.0)).abs() < 1e-9);
        assert!(ll > 2.0 * ht, "{ll} vs {ht}");
        // Inside one node the high-throughput kernels are the low-latency arithmetic.
        assert_eq!(
            ep.deduplicated_us(8, 256.0, 2048.0, row, 8.0),
            ep.all_to_all_us(8, 2048.0, row)
        );
    }

    fn qwen(dp: u32, imbalance: f64) -> WideEp {
        WideEp {
            roofline: Roofline {
                model: ModelConfig::bundled("qwen3-30b-a3b").unwrap(),
                gpu: find_gpu("H100").unwrap(),
                tp: 1,
                alpha: [0.0; 3],
                step_overhead_us: 0.0,
                request_overhead_us: 0.0,
                top_p_sort: false,
            },
            ep: ExpertParallel {
                dp,
                imbalance,
                ..h800()
            },
        }
    }

    fn decodes(n: usize) -> Vec<StepItem> {
        vec![
            StepItem {
                new_tokens: 1,
                context_tokens: 1000,
                input_tokens: 500,
                prefill: false,
            };
            n
        ]
    }

    fn price(w: &WideEp, items: &[StepItem]) -> u64 {
        w.step_time(&BatchShape {
            items,
            prefill_tokens: 0,
            decode_tokens: items.len() as u32,
        })
        .unwrap()
        .as_us()
    }

    #[test]
    fn a_step_is_the_slowest_rank_plus_experts_and_all_to_all_per_moe_layer() {
        // Qwen3-30B-A3B (48 MoE layers, 128 experts, top-8, no shared expert) on 4 ranks of
        // 1 GPU: 64 decodes, 16 per rank. Each rank's own part is one rank's layers and LM
        // head; the experts are 32 per GPU with 64·8/4 = 128 rows on each on average, and
        // the busiest GPU gets √(2 ln 4 · 128 · 3/4) = 16.32 more.
        let w = qwen(4, 1.0);
        let rows = 128.0 + (2.0 * 4f64.ln() * 96.0).sqrt();
        assert!((w.busiest_rows(64.0) - rows).abs() < 1e-9);
        let r = &w.roofline;
        let items = decodes(64);
        let mut rank = LayerLoad::default();
        for it in &items[..16] {
            rank.add(it);
        }
        // A rank's MoE layer: QKV and output projections, the router (2,048 × 128),
        // attention, element-wise passes; no shared expert, no all-reduce at tp 1.
        let rank_layer = r.projections_us(16.0)
            + r.gemm_us(16.0, 2048.0, 128.0)
            + r.attention_us(&rank, 2.0)
            + r.elementwise_us(16.0, 0.0);
        let own = 48.0 * rank_layer + r.gemm_us(16.0, 2048.0, 151936.0);
        let experts = r.fused_moe_us(32.0, 1.0, rows, 768.0) + r.elementwise_us(rows, 768.0);
        // The busiest GPU receives `rows` rows (more than the 16 × 8 = 128 it sends) and
        // sends them back, 3/4 from the 3 other GPUs over NVLink; BF16 model: BF16 dispatch.
        let a2a = 2.0 * (rows * 2048.0 * 2.0 * 0.75 / 160e3 + 8.0);
        let expected = own + 48.0 * (experts + a2a);
        let got = price(&w, &items) as f64;
        assert!((got - expected).abs() <= 1.0, "{got} vs {expected}");
    }

    #[test]
    fn the_busiest_gpu_sets_the_expert_time_and_an_uneven_rank_the_rest() {
        let items = decodes(64);
        let even = price(&qwen(4, 1.0), &items);
        let skewed = price(&qwen(4, 2.0), &items);
        assert!(skewed > even, "{skewed} vs {even}");
        // 65 requests: one rank holds 17 and the step waits for it.
        let w = qwen(4, 1.0);
        assert!(price(&w, &decodes(65)) > even);
        // A second rank halves the attention each rank does: the step is shorter than one
        // rank serving all 64.
        assert!(even < price(&qwen(1, 1.0), &items));
    }
}
