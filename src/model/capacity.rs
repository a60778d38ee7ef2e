//! KV block capacity from GPU memory (after BLIS `kv_capacity.go`, MODELS.md §2.6).
//!
//! A replica is TP × PP GPUs. Per GPU: the KV of one token is (L/PP)·2·head_dim·Hkv·BPP/TP
//! bytes (MLA: (L/PP)·(kv_lora_rank + qk_rope_head_dim)·BPP, not split by TP), and the
//! memory left for KV is memory · utilisation − (weights + activation + non-torch) / GPUs,
//! with weights = params · weight BPP (3-matrix FFN), activation 5.5 GiB dense / 8 GiB MoE per
//! replica, non-torch 0.15 GiB for one GPU else 0.6 GiB per GPU.
//! blocks = ⌊free bytes per GPU / (block_size · KV bytes per token per GPU)⌋, the same on
//! every GPU. For one GPU this is exactly BLIS's formula; for TP > 1 BLIS divides the
//! per-token bytes by TP but multiplies the memory of all TP GPUs, which counts TP times
//! the blocks that fit (its golden dataset's qwen2.5-7b TP4 case has 1,281,766 blocks where
//! this gives 311,546).

use super::{GpuProfile, ModelConfig};

const GIB: f64 = (1u64 << 30) as f64;

/// The sizing, every term in GiB except the result.
#[derive(Clone, Debug, PartialEq)]
pub struct KvCapacity {
    pub per_token_bytes: f64,
    pub per_block_bytes: f64,
    pub available_gib: f64,
    pub weights_gib: f64,
    pub activation_gib: f64,
    pub non_torch_gib: f64,
    pub blocks: u32,
}

/// Seconds to load one GPU's share of the weights of a `replica` at `gb_per_s`: the default
/// model load of autoscaling's `load_s` and of faults' `reload_s`. Its tp × pp GPUs share
/// the weights; with dp > 1 ranks, each GPU loads its rank's share of the non-expert
/// weights and its 1/(dp × tp × pp) of the routed experts.
pub fn load_s(m: &ModelConfig, replica: Replica, gb_per_s: f64) -> f64 {
    let Replica { tp, pp, dp } = replica;
    let share = f64::from(tp.max(1) * pp.max(1));
    let bytes = if dp > 1 {
        let experts = routed_expert_params(m);
        ((params(m) - experts) / share + experts / (share * f64::from(dp))) * m.weight_bytes
    } else {
        params(m) * m.weight_bytes / share
    };
    bytes / (gb_per_s * 1e9)
}

/// Parameter count with 3-matrix FFNs (gate, up, down).
pub fn params(m: &ModelConfig) -> f64 {
    let d = f64::from(m.hidden);
    let l = f64::from(m.layers);
    let v = f64::from(m.vocab);
    let dkv = f64::from(m.kv_heads) * f64::from(m.head_dim);
    let attn = if m.is_mla() {
        // Query (through its compressed rank, if any), KV down-projection, the latent's
        // up-projection to keys and values, output; plus the two norms.
        let h = f64::from(m.heads);
        let (nope, rope) = (f64::from(m.qk_nope_head_dim), f64::from(m.qk_rope_head_dim));
        let (latent, v) = (f64::from(m.kv_lora_rank), f64::from(m.v_head_dim));
        let r = f64::from(m.q_lora_rank);
        let q = if r > 0.0 {
            d * r + r + r * h * (nope + rope)
        } else {
            d * h * (nope + rope)
        };
        l * (q + d * (latent + rope) + latent + latent * h * (nope + v) + h * v * d + 2.0 * d)
    } else {
        l * (d * (d + 2.0 * dkv) + d * d + 2.0 * d)
    };
    let mlp = if m.is_moe() {
        let k_dense = f64::from(m.dense_layers());
        let k_moe = f64::from(m.moe_layers());
        let n = f64::from(m.experts);
        k_dense * 3.0 * d * f64::from(m.ffn_dense)
            + k_moe
                * (3.0 * d * f64::from(m.ffn_expert) * n
                    + 3.0 * d * f64::from(m.ffn_shared)
                    + n * d)
    } else {
        l * 3.0 * d * f64::from(m.ffn_dense)
    };
    v * d + attn + mlp + if m.tied_embeddings { 0.0 } else { v * d } + d
}

/// FLOPs per token of a model's matrix multiplications, without the embedding and the
/// logits (LM head) rows: attention projections, dense MLPs, and for MoE layers the k
/// routed experts a token uses, its shared experts and the router.
pub fn flops_per_token(m: &ModelConfig) -> f64 {
    let d = f64::from(m.hidden);
    let l = f64::from(m.layers);
    let q = f64::from(m.heads) * f64::from(m.head_dim);
    let kv = f64::from(m.kv_heads) * f64::from(m.head_dim);
    let attention = l * d * (q + 2.0 * kv + q);
    let mlp = if m.is_moe() {
        let dense = f64::from(m.dense_layers()) * 3.0 * d * f64::from(m.ffn_dense);
        let moe = f64::from(m.moe_layers())
            * (3.0 * d * f64::from(m.ffn_expert) * m.k()
                + 3.0 * d * f64::from(m.ffn_shared)
                + f64::from(m.experts) * d);
        dense + moe
    } else {
        l * 3.0 * d * f64::from(m.ffn_dense)
    };
    2.0 * (attention + mlp)
}

/// Blocks of `block_size` tokens that fit on one replica of `tp` GPUs.
/// KV bytes per token on one GPU of a TP × PP group (MLA: the compressed row, not split).
pub fn kv_bytes_per_token(m: &ModelConfig, tp: u32, pp: u32) -> f64 {
    let layers = f64::from(m.layers) / f64::from(pp.max(1));
    if m.kv_lora_rank > 0 {
        layers * f64::from(m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes
    } else {
        layers * 2.0 * f64::from(m.head_dim) * f64::from(m.kv_heads) * m.kv_bytes
            / f64::from(tp.max(1))
    }
}

pub fn kv_capacity(
    m: &ModelConfig,
    gpu: &GpuProfile,
    tp: u32,
    pp: u32,
    utilization: f64,
    block_size: u32,
) -> Result<KvCapacity, String> {
    let replica = Replica { tp, pp, dp: 1 };
    kv_capacity_with(m, gpu, replica, utilization, block_size, (0.0, 0.0))
}

/// The GPUs of one instance: `dp` data-parallel attention ranks of `tp × pp` GPUs (dp > 1:
/// expert parallelism over all of them, `scenario::ExpertParallelSpec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replica {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
}

impl Replica {
    /// The GPUs of one of the group's instances.
    pub fn of(g: &crate::scenario::InstanceGroup) -> Self {
        Replica {
            tp: g.tp,
            pp: g.pp,
            dp: g.dp(),
        }
    }
}

/// Parameters of a MoE model's routed experts (every MoE layer's N experts, three matrices
/// each), the weights expert parallelism spreads over all of an instance's GPUs.
pub fn routed_expert_params(m: &ModelConfig) -> f64 {
    if !m.is_moe() {
        return 0.0;
    }
    let d = f64::from(m.hidden);
    f64::from(m.moe_layers()) * 3.0 * d * f64::from(m.ffn_expert) * f64::from(m.experts)
}

/// [`kv_capacity`] of a `replica`, with a speculative drafter beside the model: `draft` =
/// (its weights in GiB for one rank, its KV bytes per token on one GPU), which vLLM
/// allocates in the same memory and the same blocks as the target's.
///
/// With `dp` > 1 ranks, every rank holds the non-expert weights (sharded over its `tp`), the
/// routed experts are spread over all `dp × tp` GPUs, each rank has its own activations and
/// KV cache, and the instance's blocks are the `dp` ranks' together.
pub fn kv_capacity_with(
    m: &ModelConfig,
    gpu: &GpuProfile,
    replica: Replica,
    utilization: f64,
    block_size: u32,
    draft: (f64, f64),
) -> Result<KvCapacity, String> {
    let Replica { tp, pp, dp } = replica;
    let ranks = f64::from(dp.max(1));
    let gpus = f64::from(tp.max(1)) * f64::from(pp.max(1)) * ranks;
    let per_token = kv_bytes_per_token(m, tp, pp) + draft.1;
    let per_block = (per_token * f64::from(block_size)).trunc();
    let available = gpu.memory_gib * utilization * gpus;
    let weights = if dp > 1 {
        let experts = routed_expert_params(m);
        ((params(m) - experts) * ranks + experts) * m.weight_bytes / GIB + draft.0 * ranks
    } else {
        params(m) * m.weight_bytes / GIB + draft.0
    };
    let activation = (if m.is_moe() { 8.0 } else { 5.5 }) * ranks;
    let non_torch = if gpus <= 1.0 { 0.15 } else { 0.6 * gpus };
    let tp = tp * pp.max(1) * dp.max(1);
    let act = m.hidden_act.to_ascii_lowercase();
    if !["silu", "swiglu", "geglu", "situ", ""].contains(&act.as_str()) {
        return Err(format!(
            "cannot size the KV cache for activation `{}`; give kv_blocks",
            m.hidden_act
        ));
    }
    let spare = available - weights - activation - non_torch;
    if spare <= 0.0 || per_block <= 0.0 {
        return Err(format!(
            "{} does not fit: {available:.1} GiB available on {tp}×{}, {weights:.1} GiB of weights + {activation} GiB activations + {non_torch} GiB other; use more GPUs (tp) or give kv_blocks",
            m.id, gpu.id
        ));
    }
    let blocks = (spare / gpus * GIB / per_block).floor() * ranks;
    Ok(KvCapacity {
        per_token_bytes: per_token,
        per_block_bytes: per_block,
        available_gib: available,
        weights_gib: weights,
        activation_gib: activation,
        non_torch_gib: non_torch,
        blocks: blocks.min(f64::from(u32::MAX)) as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::find_gpu;

    #[test]
    fn a_data_parallel_rank_loads_its_attention_whole_and_its_share_of_the_experts() {
        // DeepSeek-V3 (FP8) on 16 ranks of one GPU: each GPU reads every non-expert weight
        // and 1/16 of the routed experts, at 2 GB/s.
        let m = ModelConfig::bundled("deepseek-v3").unwrap();
        let (p, e) = (params(&m), routed_expert_params(&m));
        let dp16 = Replica {
            tp: 1,
            pp: 1,
            dp: 16,
        };
        let expected = ((p - e) + e / 16.0) / 2e9;
        assert!((load_s(&m, dp16, 2.0) - expected).abs() < 1e-9);
        // The same 16 GPUs as one TP group share every weight.
        let tp16 = Replica {
            tp: 16,
            pp: 1,
            dp: 1,
        };
        assert!((load_s(&m, tp16, 2.0) - p / 16.0 / 2e9).abs() < 1e-9);
        assert!(load_s(&m, dp16, 2.0) > 1.3 * load_s(&m, tp16, 2.0));
    }

    #[test]
    fn llama_3_1_8b_on_one_h100_gets_26312_blocks() {
        // Worked by hand (MODELS.md §2.6): 128 KiB/token, 2 MiB/block, 14.96 GiB weights,
        // 72 GiB available → ⌊(72 − 14.96 − 5.5 − 0.15)·512⌋ = 26,312.
        let m = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
        let c = kv_capacity(&m, &find_gpu("H100").unwrap(), 1, 1, 0.9, 16).unwrap();
        assert_eq!(c.per_token_bytes, 131_072.0);
        assert_eq!(c.per_block_bytes, 2_097_152.0);
        assert!((c.weights_gib - 14.96).abs() < 0.01, "{}", c.weights_gib);
        assert_eq!(c.blocks, 26_312);
    }

    #[test]
    fn a_model_too_big_for_its_gpus_is_an_error_not_zero_blocks() {
        let m = ModelConfig::bundled("llama-3.1-70b-instruct").unwrap();
        let e = kv_capacity(&m, &find_gpu("L40S").unwrap(), 1, 1, 0.9, 16).unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        assert!(
            kv_capacity(&m, &find_gpu("H100").unwrap(), 4, 1, 0.9, 16)
                .unwrap()
                .blocks
                > 0
        );
    }

    #[test]
    fn llama_70b_on_four_h100s_matches_the_per_gpu_arithmetic() {
        // Per GPU: 72 GiB − (131.44 GiB weights + 5.5 + 0.6·4) / 4 = 37.03 GiB free;
        // KV per token per GPU = 80·2·128·8·2 / 4 = 81,920 B → ×16 = 1,310,720 B per block
        // → ⌊37.03·2³⁰ / 1,310,720⌋ ≈ 30.3k blocks (≈ 485k tokens, what vLLM reports for
        // this setup, give or take its own activation profiling).
        let m = ModelConfig::bundled("llama-3.1-70b-instruct").unwrap();
        let c = kv_capacity(&m, &find_gpu("H100").unwrap(), 4, 1, 0.9, 16).unwrap();
        assert_eq!(c.per_block_bytes, 1_310_720.0);
        let free = 72.0 - (c.weights_gib + 5.5 + 2.4) / 4.0;
        assert_eq!(c.blocks, (free * GIB / 1_310_720.0).floor() as u32);
        assert!((29_000..32_000).contains(&c.blocks), "{}", c.blocks);
    }

    #[test]
    fn more_gpus_hold_more_blocks() {
        let m = ModelConfig::bundled("llama-3.1-70b-instruct").unwrap();
        let g = find_gpu("H100").unwrap();
        let b2 = kv_capacity(&m, &g, 2, 1, 0.9, 16).unwrap().blocks;
        let b4 = kv_capacity(&m, &g, 4, 1, 0.9, 16).unwrap().blocks;
        let b2x2 = kv_capacity(&m, &g, 2, 2, 0.9, 16).unwrap().blocks;
        assert!(b4 > 2 * b2, "{b2} → {b4}");
        assert_eq!(b4, b2x2, "TP×PP = 4 GPUs either way hold the same KV");
    }
}
