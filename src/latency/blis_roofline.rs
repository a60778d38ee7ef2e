//! BLIS roofline step time (MODELS.md §2.3), kept for conformance with BLIS's goldens: FLOPs
//! and bytes of the step from the model architecture (2-matrix FFN, BLIS's reading of MoE
//! interleaving), priced against GPU peak compute (× MFU) and bandwidth; the step takes
//! max(compute, memory). No communication, LM head or overhead terms (as BLIS). Our own
//! physics model is [`Roofline`](super::Roofline).

use super::{BatchShape, LatencyError, LatencyModel};
use crate::model::{GpuProfile, ModelConfig};
use crate::time::SimDuration;

/// BLIS's roofline model of one replica.
#[derive(Clone, Debug)]
pub struct BlisRoofline {
    pub model: ModelConfig,
    pub gpu: GpuProfile,
    pub tp: u32,
    /// [α0, α1, α2] µs overheads (BLIS runs roofline with zeros).
    pub alpha: [f64; 3],
}

impl BlisRoofline {
    /// FLOPs of one request computing `n` new tokens after `s` cached ones.
    pub fn request_flops(&self, n: f64, s: f64) -> f64 {
        let m = &self.model;
        let (l, d, h) = (f64::from(m.layers), f64::from(m.hidden), f64::from(m.heads));
        let dh = m.dh_roofline();
        let dkv = f64::from(m.kv_heads) * dh;
        let c = if n > 1.0 { s + (n - 1.0) / 2.0 } else { s };
        // 2-matrix FFN, deliberately (BLIS calibration).
        let (moe, dense) = m.blis_layers();
        let mlp = f64::from(dense) * 2.0 * n * (2.0 * d * f64::from(m.ffn_dense))
            + f64::from(moe) * 2.0 * n * (2.0 * d * f64::from(m.ffn_expert)) * m.k();
        let gemm = l * (2.0 * n * (d * d + 2.0 * d * dkv) + 2.0 * n * d * d)
            + l * 4.0 * h * n * c * dh
            + mlp;
        let vector = l * (5.0 * h * n * c + 2.0 * n * d);
        gemm + vector
    }

    /// Bytes moved for one request (KV growth, KV read, activations).
    pub fn request_bytes(&self, n: f64, s: f64) -> f64 {
        let m = &self.model;
        let (l, d) = (f64::from(m.layers), f64::from(m.hidden));
        let kv_row = 2.0 * l * f64::from(m.kv_heads) * m.dh_roofline() * m.act_bytes;
        kv_row * n + kv_row * s + l * d * m.act_bytes * n
    }

    /// Weight bytes read once per step, with `tokens` routed tokens (MoE expert coverage).
    pub fn weight_bytes(&self, tokens: f64) -> f64 {
        let m = &self.model;
        let (l, d) = (f64::from(m.layers), f64::from(m.hidden));
        let dkv = f64::from(m.kv_heads) * m.dh_roofline();
        let n_eff = if m.is_moe() {
            let n = f64::from(m.experts);
            n * (1.0 - ((n - m.k()) / n).powf(tokens))
        } else {
            0.0
        };
        let (moe, dense) = m.blis_layers();
        (l * (d * (d + 2.0 * dkv) + d * d)
            + f64::from(dense) * 2.0 * d * f64::from(m.ffn_dense)
            + f64::from(moe) * 2.0 * d * f64::from(m.ffn_expert) * n_eff)
            * m.weight_bytes
    }
}

impl LatencyModel for BlisRoofline {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        if batch.items.is_empty() {
            return Ok(SimDuration(1));
        }
        let tp = f64::from(self.tp.max(1));
        let peak = self.gpu.peak_flops(self.model.weight_bytes);
        let mut compute_s = 0.0;
        let mut bytes = 0.0;
        for it in batch.items {
            let (n, s) = if it.prefill {
                (f64::from(it.new_tokens), f64::from(it.context_tokens))
            } else {
                (1.0, f64::from(it.context_tokens))
            };
            let mfu = if it.prefill {
                self.gpu.mfu_prefill
            } else {
                self.gpu.mfu_decode
            };
            compute_s += self.request_flops(n, s) / (tp * peak * mfu);
            bytes += self.request_bytes(n, s);
        }
        let routed = f64::from(batch.prefill_tokens + batch.decode_tokens);
        let memory_s =
            (self.weight_bytes(routed) / tp + bytes / tp) / (self.gpu.bandwidth_tb_per_s * 1e12);
        Ok(SimDuration::from_us_f64(compute_s.max(memory_s) * 1e6).max(SimDuration(1)))
    }

    fn queueing_delay(&self, input_tokens: u32) -> SimDuration {
        super::Alpha(self.alpha).queueing_delay(input_tokens)
    }

    fn output_token_overhead(&self) -> SimDuration {
        super::Alpha(self.alpha).output_token_overhead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::StepItem;

    /// A toy dense model small enough to price by hand.
    fn toy() -> BlisRoofline {
        let json = r#"{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "torch_dtype": "float16"}"#;
        BlisRoofline {
            model: ModelConfig::from_hf_json("toy", json).unwrap(),
            gpu: GpuProfile {
                id: "toy".into(),
                aliases: vec![],
                tflops_bf16: 1e-6, // 1e6 FLOP/s
                tflops_fp8: 0.0,
                bandwidth_tb_per_s: 1e-6, // 1e6 B/s
                mfu_prefill: 0.5,
                mfu_decode: 0.25,
                memory_gib: 1.0,
                source: String::new(),
                calibration: Default::default(),
                physics: Default::default(),
                power: None,
                node: None,
            },
            tp: 1,
            alpha: [0.0; 3],
        }
    }

    fn item(n: u32, s: u32, prefill: bool) -> StepItem {
        StepItem {
            new_tokens: n,
            context_tokens: s,
            input_tokens: n + s,
            prefill,
        }
    }

    #[test]
    fn a_prefill_step_is_priced_by_hand() {
        // L=2, d=64, H=4, Hkv=2, dh=16, dKV=32, dFF=128, 2 bytes. Prefill n=4, s=0: c=1.5.
        // GEMM = 2·[2·4·(4096 + 4096) + 2·4·4096] + 2·4·4·4·1.5·16 + MLP 2·2·4·(2·64·128)
        //      = 2·[65,536 + 32,768] + 3,072 + 262,144 = 461,824
        // vector = 2·(5·4·4·1.5 + 2·4·64) = 2·(120 + 512) = 1,264 → F = 463,088 FLOP
        // compute = 463,088 / (1e6 · 0.5) s = 0.926176 s
        // bytes: KV row = 2·2·2·16·2 = 256 B/token → 1,024 growth; activations 2·64·2·4 = 1,024;
        // weights = [2·(64·(64+64) + 4096) + 2·2·64·128]·2 = [2·12,288 + 32,768]·2 = 114,688
        // memory = (114,688 + 2,048) / 1e6 = 0.116736 s → step = compute = 926,176 µs.
        let r = toy();
        assert_eq!(r.request_flops(4.0, 0.0), 463_088.0);
        let items = [item(4, 0, true)];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 4,
            decode_tokens: 0,
        };
        assert_eq!(r.step_time(&shape).unwrap(), SimDuration(926_176));
    }

    #[test]
    fn a_decode_step_is_memory_bound_by_hand() {
        // Decode n=1 at s=10: F = 2·[2·8,192 + 2·4,096] + 2·4·4·10·16 + 2·2·(2·64·128)
        //   + 2·(5·4·10 + 128) = 2·24,576 + 5,120 + 65,536 + 656 = 120,464 → /(1e6·0.25) = 0.481856 s.
        // bytes = 256·1 + 256·10 + 256 = 3,072; memory = (114,688 + 3,072)/1e6 = 0.11776 s.
        let r = toy();
        let items = [item(1, 10, false)];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 0,
            decode_tokens: 1,
        };
        assert_eq!(r.step_time(&shape).unwrap(), SimDuration(481_856));
        let mut fast = toy();
        fast.gpu.tflops_bf16 = 1.0; // compute becomes negligible: memory bound
        assert_eq!(fast.step_time(&shape).unwrap(), SimDuration(117_760));
    }

    #[test]
    fn tensor_parallelism_divides_the_step() {
        let mut r = toy();
        let items = [item(64, 100, true), item(1, 300, false)];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 64,
            decode_tokens: 1,
        };
        let t1 = r.step_time(&shape).unwrap();
        r.tp = 2;
        let t2 = r.step_time(&shape).unwrap();
        assert!(t2 < t1 && t2.as_us() * 2 >= t1.as_us() - 1);
    }
}
