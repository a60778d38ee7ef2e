//! BLIS trained-physics step time (MODELS.md §2.4): roofline-shaped basis functions
//! (prefill/decode compute and KV traffic, weight loading, TP all-reduce) scaled by fitted
//! coefficients, plus per-layer, per-request and per-step overheads. No MFU factor. The
//! shipped coefficient set ("iter29") is bundled in `assets/trained_physics.ron`.
//! Data parallelism and expert-parallel dispatch are not modelled (DP = 1).

use serde::Deserialize;

use super::{BatchShape, LatencyError, LatencyModel};
use crate::model::{GpuProfile, ModelConfig};
use crate::time::SimDuration;

/// Fitted coefficients: alpha [queueing, post-decode, per output token] µs; 7 to 11 betas.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Coefficients {
    pub alpha: Vec<f64>,
    pub beta: Vec<f64>,
}

impl Coefficients {
    /// BLIS's shipped default ("iter29").
    pub fn bundled() -> Self {
        ron::from_str(include_str!("../../assets/trained_physics.ron"))
            .expect("bundled coefficients parse (tested)")
    }
}

#[derive(Clone, Debug)]
pub struct TrainedPhysics {
    pub model: ModelConfig,
    pub gpu: GpuProfile,
    pub tp: u32,
    pub coefficients: Coefficients,
    /// What does not depend on the batch, computed once by [`TrainedPhysics::new`].
    consts: Consts,
}

/// The batch-independent terms of the basis functions (the same expressions, so the same
/// bits, as computing them per step).
#[derive(Clone, Copy, Debug)]
struct Consts {
    tp: f64,
    l: f64,
    d: f64,
    dh: f64,
    /// FLOP per µs.
    f: f64,
    /// Bytes per µs.
    w: f64,
    n_moe: f64,
    n_dense: f64,
    k: f64,
    proj: f64,
    weight: f64,
    /// β padded with zeros, and how many were given.
    beta: [f64; 11],
    betas: usize,
    /// h / tp and dkv / tp.
    h_tp: f64,
    dkv_tp: f64,
    /// The prefill and decode terms of zero sums.
    pf_zero: (f64, f64),
    dc_zero: (f64, f64),
}

/// The basis values of one step, in µs (before coefficients).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Basis {
    pub pf_compute: f64,
    pub pf_kv: f64,
    pub dc_compute: f64,
    pub dc_kv: f64,
    pub weight: f64,
    pub tp: f64,
}

impl TrainedPhysics {
    pub fn new(model: ModelConfig, gpu: GpuProfile, tp: u32, coefficients: Coefficients) -> Self {
        let m = &model;
        let tp_f = f64::from(tp.max(1));
        let (l, d, h) = (f64::from(m.layers), f64::from(m.hidden), f64::from(m.heads));
        let dh = m.dh_roofline();
        let dkv = f64::from(m.kv_heads) * dh;
        let w = gpu.bandwidth_tb_per_s * 1e6;
        // The coefficients were fitted on BLIS's reading of the architecture; use it.
        let (n_moe, n_dense) = m.blis_layers();
        let (n_moe, n_dense) = (f64::from(n_moe), f64::from(n_dense));
        let g = tp_f; // MoE group = TP·DP with DP = 1
        let wb = m.weight_bytes;
        let weight = (l * d * (2.0 * d + 2.0 * dkv) * wb / tp_f
            + n_moe * (f64::from(m.experts) / g) * 3.0 * d * f64::from(m.ffn_expert) * wb
            + n_moe * 3.0 * d * f64::from(m.ffn_shared_spelled) * wb / tp_f
            + n_dense * 3.0 * d * f64::from(m.ffn_dense) * wb / tp_f)
            / w;
        let mut beta = [0.0; 11];
        for (b, &c) in beta.iter_mut().zip(&coefficients.beta) {
            *b = c;
        }
        let consts = Consts {
            tp: tp_f,
            l,
            d,
            dh,
            f: gpu.peak_flops(m.weight_bytes) / 1e6,
            w,
            n_moe,
            n_dense,
            k: m.k(),
            proj: 2.0 * d * (2.0 * d + 2.0 * dkv) / tp_f,
            weight,
            beta,
            betas: coefficients.beta.len(),
            h_tp: h / tp_f,
            dkv_tp: dkv / tp_f,
            pf_zero: (0.0, 0.0),
            dc_zero: (0.0, 0.0),
        };
        let mut physics = TrainedPhysics {
            model,
            gpu,
            tp,
            coefficients,
            consts,
        };
        physics.consts.pf_zero = physics.prefill_terms(0.0, 0.0);
        physics.consts.dc_zero = physics.decode_terms(0.0, 0.0);
        physics
    }

    fn beta(&self, i: usize) -> f64 {
        self.consts.beta.get(i).copied().unwrap_or(0.0)
    }

    /// The basis functions for `batch`.
    pub fn basis(&self, batch: &BatchShape<'_>) -> Basis {
        let heads_per_gpu = f64::from(self.model.heads) / f64::from(self.tp.max(1));
        let dh = self.model.dh_roofline();
        let mut sums = Sums::default();
        for it in batch.items {
            if it.prefill {
                let t = f64::from(it.new_tokens);
                sums.tp_tokens += t;
                sums.attn_pf +=
                    4.0 * heads_per_gpu * t * (f64::from(it.input_tokens) + t / 2.0) * dh;
            } else {
                sums.td += 1.0;
                sums.ctx += f64::from(it.context_tokens);
            }
        }
        self.basis_of(&sums)
    }

    /// The basis functions from a batch's sums.
    fn basis_of(&self, sums: &Sums) -> Basis {
        let Sums {
            tp_tokens,
            attn_pf,
            td,
            ctx,
        } = *sums;
        // A decode-only (prefill-only) step's prefill (decode) terms are those of zero sums,
        // computed once by the same expressions.
        let (pf_compute, pf_kv) = if tp_tokens == 0.0 && attn_pf == 0.0 {
            self.consts.pf_zero
        } else {
            self.prefill_terms(tp_tokens, attn_pf)
        };
        let (dc_compute, dc_kv) = if td == 0.0 && ctx == 0.0 {
            self.consts.dc_zero
        } else {
            self.decode_terms(td, ctx)
        };
        let m = &self.model;
        let Consts {
            tp,
            l,
            d,
            w,
            n_moe,
            n_dense,
            weight,
            ..
        } = self.consts;
        let all = tp_tokens + td;
        let v = |u: f64| {
            if self.tp <= 1 {
                0.0
            } else {
                u * all * d * m.act_bytes * 2.0 * (tp - 1.0) / tp / w
            }
        };
        let tp_comm = v(l) + v(n_dense) + if m.is_moe() { v(n_moe) } else { 0.0 };
        Basis {
            pf_compute,
            pf_kv,
            dc_compute,
            dc_kv,
            weight,
            tp: tp_comm,
        }
    }

    /// The FFN's FLOPs for `x` tokens.
    fn ffn(&self, x: f64) -> f64 {
        let m = &self.model;
        let Consts {
            tp,
            d,
            n_moe,
            n_dense,
            k,
            ..
        } = self.consts;
        let g = tp; // MoE group = TP·DP with DP = 1
        // y / 1.0 is y, bit for bit: at TP 1 the divisions are skipped.
        let per = |y: f64, by: f64| if by == 1.0 { y } else { y / by };
        let dense = per(n_dense * x * 6.0 * d * f64::from(m.ffn_dense), tp);
        if n_moe == 0.0 {
            // The MoE terms are +0.0 (finite factors), and +0.0 + +0.0 + dense is dense.
            return dense;
        }
        n_moe * per(x * k, g) * 6.0 * d * f64::from(m.ffn_expert)
            + per(n_moe * x * 6.0 * d * f64::from(m.ffn_shared_spelled), tp)
            + dense
    }

    /// (prefill compute, prefill KV) in µs.
    fn prefill_terms(&self, tp_tokens: f64, attn_pf: f64) -> (f64, f64) {
        let Consts {
            l,
            dkv_tp,
            f,
            w,
            proj,
            ..
        } = self.consts;
        let pf_compute = (l * tp_tokens * proj + l * attn_pf + self.ffn(tp_tokens)) / f;
        let pf_kv = l * 2.0 * dkv_tp * tp_tokens * 2.0 / w;
        (pf_compute, pf_kv)
    }

    /// (decode compute, decode KV) in µs.
    fn decode_terms(&self, td: f64, ctx: f64) -> (f64, f64) {
        let Consts {
            l,
            h_tp,
            dh,
            dkv_tp,
            f,
            w,
            proj,
            ..
        } = self.consts;
        let dc_compute = (l * td * proj + l * 4.0 * h_tp * ctx * dh + self.ffn(td)) / f;
        let dc_kv = l * 2.0 * dkv_tp * 2.0 * (ctx + td) / w;
        (dc_compute, dc_kv)
    }
}

/// What the basis functions need of a batch: prefill tokens and attention work, decode
/// count and context (sums of whole numbers below 2^53 are exact in f64, in any order).
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    tp_tokens: f64,
    attn_pf: f64,
    td: f64,
    ctx: f64,
}

impl TrainedPhysics {
    fn price(&self, b: Basis, items: usize) -> SimDuration {
        let n = self.consts.betas;
        let p = if n >= 9 {
            self.beta(0) * b.pf_compute + self.beta(8) * b.pf_kv
        } else {
            self.beta(0) * b.pf_compute.max(b.pf_kv)
        };
        let dcost = if n >= 10 {
            self.beta(1) * b.dc_compute + self.beta(9) * b.dc_kv
        } else {
            self.beta(1) * b.dc_compute.max(b.dc_kv)
        };
        let m = &self.model;
        let interleaved = if m.interleave_moe_step > 0 {
            f64::from(m.blis_layers().0)
        } else {
            0.0
        };
        let us = p
            + dcost
            + self.beta(2) * b.weight
            + self.beta(3) * b.tp
            + self.beta(4) * f64::from(m.layers)
            + self.beta(5) * items as f64
            + self.beta(6)
            + self.beta(7) * interleaved;
        SimDuration::from_us_f64(us).max(SimDuration(1))
    }
}

impl LatencyModel for TrainedPhysics {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        if batch.items.is_empty() {
            return Ok(SimDuration(1));
        }
        Ok(self.price(self.basis(batch), batch.items.len()))
    }

    fn decode_step_time(
        &self,
        decodes: u32,
        context_tokens: u64,
    ) -> Option<Result<SimDuration, LatencyError>> {
        if decodes == 0 {
            return Some(Ok(SimDuration(1)));
        }
        let sums = Sums {
            td: f64::from(decodes),
            ctx: context_tokens as f64,
            ..Sums::default()
        };
        Some(Ok(self.price(self.basis_of(&sums), decodes as usize)))
    }

    fn queueing_delay(&self, _input_tokens: u32) -> SimDuration {
        SimDuration::from_us_f64(self.coefficients.alpha.first().copied().unwrap_or(0.0))
    }

    fn post_decode_overhead(&self) -> SimDuration {
        SimDuration::from_us_f64(self.coefficients.alpha.get(1).copied().unwrap_or(0.0))
    }

    fn output_token_overhead(&self) -> SimDuration {
        SimDuration::from_us_f64(self.coefficients.alpha.get(2).copied().unwrap_or(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::StepItem;
    use crate::model::find_gpu;

    #[test]
    fn the_bundled_coefficients_are_blis_iter29() {
        let c = Coefficients::bundled();
        assert_eq!(c.alpha, vec![15563.199579, 777.3455, 45.907545]);
        assert_eq!(c.beta.len(), 11);
        assert_eq!(c.beta[6], 126.024825);
    }

    /// The basis of MODELS.md §2.4 written out plainly (every division made), against the
    /// precomputed and shortcut one: equal bit for bit, for every bundled model (dense and
    /// MoE) at TP 1, 2, 4 and 8, on prefill-only, decode-only and mixed sums.
    #[test]
    fn the_basis_is_the_plain_formula_bit_for_bit() {
        let gpu = find_gpu("H100").unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |below: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % below) as f64
        };
        for (id, _) in crate::model::BUNDLED_MODELS {
            let m = ModelConfig::bundled(id).unwrap();
            for tp in [1u32, 2, 4, 8] {
                let p = TrainedPhysics::new(m.clone(), gpu.clone(), tp, Coefficients::bundled());
                let t = f64::from(tp);
                let (l, d, h) = (f64::from(m.layers), f64::from(m.hidden), f64::from(m.heads));
                let dh = m.dh_roofline();
                let dkv = f64::from(m.kv_heads) * dh;
                let (f, w) = (
                    gpu.peak_flops(m.weight_bytes) / 1e6,
                    gpu.bandwidth_tb_per_s * 1e6,
                );
                let (n_moe, n_dense) = m.blis_layers();
                let (n_moe, n_dense) = (f64::from(n_moe), f64::from(n_dense));
                let proj = 2.0 * d * (2.0 * d + 2.0 * dkv) / t;
                let ffn = |x: f64| {
                    n_moe * (x * m.k() / t) * 6.0 * d * f64::from(m.ffn_expert)
                        + n_moe * x * 6.0 * d * f64::from(m.ffn_shared_spelled) / t
                        + n_dense * x * 6.0 * d * f64::from(m.ffn_dense) / t
                };
                for case in 0..300 {
                    let mut sums = Sums::default();
                    if case % 3 != 1 {
                        sums.tp_tokens = 1.0 + next(4096);
                        sums.attn_pf = next(1 << 40);
                    }
                    if case % 3 != 0 {
                        sums.td = 1.0 + next(512);
                        sums.ctx = next(1 << 22);
                    }
                    let Sums {
                        tp_tokens,
                        attn_pf,
                        td,
                        ctx,
                    } = sums;
                    let b = p.basis_of(&sums);
                    let pf_compute = (l * tp_tokens * proj + l * attn_pf + ffn(tp_tokens)) / f;
                    let pf_kv = l * 2.0 * (dkv / t) * tp_tokens * 2.0 / w;
                    let dc_compute = (l * td * proj + l * 4.0 * (h / t) * ctx * dh + ffn(td)) / f;
                    let dc_kv = l * 2.0 * (dkv / t) * 2.0 * (ctx + td) / w;
                    let at = format!("{id} TP{tp} case {case}");
                    assert_eq!(b.pf_compute.to_bits(), pf_compute.to_bits(), "{at}");
                    assert_eq!(b.pf_kv.to_bits(), pf_kv.to_bits(), "{at}");
                    assert_eq!(b.dc_compute.to_bits(), dc_compute.to_bits(), "{at}");
                    assert_eq!(b.dc_kv.to_bits(), dc_kv.to_bits(), "{at}");
                }
            }
        }
    }

    #[test]
    fn a_single_decode_of_llama_8b_is_priced_by_hand() {
        // Llama-3.1-8B / H100 / TP1, one decode at context 1000 (MODELS.md §2.4):
        // F = 989.5e6 FLOP/µs, W = 3.35e6 B/µs, d=4096, dKV=1024, L=32, dFF=14336.
        // T_dc_kv = 32·2·1024·2·(1000 + 1)/W = 131,203,072/3.35e6 = 39.165096 µs
        // T_weight = [32·4096·10240·2 + 32·3·4096·14336·2]/W = (2,684,354,560 + 11,274,289,152)/3.35e6
        //          = 4,166.7593 µs
        // step = β2b·T_dc_kv + β3·T_weight + β5·32 + β6·1 + β7 (β2a = 0, TP = 1 ⇒ no comm)
        //      = 1.94710771·39.165096 + 1.36252915·4,166.7506 + 32.09546717·32 + 4.41684444 + 126.024825
        //      = 76.2587 + 5,677.3310 + 1,027.0550 + 4.4168 + 126.0248 = 6,911.09 µs
        let tp = TrainedPhysics::new(
            ModelConfig::bundled("llama-3.1-8b-instruct").unwrap(),
            find_gpu("H100").unwrap(),
            1,
            Coefficients::bundled(),
        );
        let items = [StepItem {
            new_tokens: 1,
            context_tokens: 1000,
            input_tokens: 500,
            prefill: false,
        }];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 0,
            decode_tokens: 1,
        };
        let b = tp.basis(&shape);
        assert!((b.dc_kv - 39.165096).abs() < 1e-5, "{}", b.dc_kv);
        assert!((b.weight - 4166.7593).abs() < 1e-3, "{}", b.weight);
        assert_eq!(tp.step_time(&shape).unwrap(), SimDuration(6911));
        assert_eq!(tp.queueing_delay(100), SimDuration(15563));
        assert_eq!(tp.post_decode_overhead(), SimDuration(777));
        assert_eq!(tp.output_token_overhead(), SimDuration(45));
    }
}
