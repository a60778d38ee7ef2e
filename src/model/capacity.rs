//! KV block capacity from GPU memory: by vLLM's start-up profile ([`MemoryRule::Vllm`]) or
//! by BLIS's rule (`kv_capacity.go`, MODELS.md §2.6, [`MemoryRule::Blis`]).
//!
//! A replica is TP × PP GPUs. Per GPU: the KV of one token is (L/PP)·2·head_dim·Hkv·BPP/TP
//! bytes (MLA: (L/PP)·(kv_lora_rank + qk_rope_head_dim)·BPP, not split by TP, plus with
//! DeepSeek sparse attention each layer's 132-byte indexer key), and the
//! memory left for KV is memory · utilisation − (weights + activation + non-torch) / GPUs,
//! with weights = params · weight BPP (3-matrix FFN); BLIS's rule takes activation 5.5 GiB
//! dense / 8 GiB MoE per replica, non-torch 0.15 GiB for one GPU else 0.6 GiB per GPU, and
//! vLLM's profile the terms of [`MemoryRule::Vllm`].
//! blocks = ⌊free bytes per GPU / (block_size · KV bytes per token per GPU)⌋, the same on
//! every GPU. For one GPU this is exactly BLIS's formula, except that the query and output
//! projections count H·head_dim columns where BLIS counts d (the same unless a model's
//! heads are narrower or wider than its hidden size); for TP > 1 BLIS divides the
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
    /// The rule that sized it.
    pub rule: MemoryRule,
    /// vLLM's profile: its sampler run, not its forward pass, set the peak.
    pub sampler_peak: bool,
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
        (weight_memory_bytes(m) - experts * m.weight_bytes) / share
            + experts * m.weight_bytes / (share * f64::from(dp))
    } else {
        weight_memory_bytes(m) / share
    };
    bytes / (gb_per_s * 1e9)
}

/// Parameters of every layer's attention: its projections (and with DeepSeek sparse
/// attention its indexer, with linear-attention layers theirs) and the layers' two norms.
pub fn attention_params(m: &ModelConfig) -> f64 {
    let d = f64::from(m.hidden);
    let l = f64::from(m.layers);
    let dkv = f64::from(m.kv_heads) * f64::from(m.head_dim);
    if m.is_mla() {
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
            + l * indexer_params(m)
    } else if m.kinds.is_hybrid() || m.attn_output_gate {
        // Query width H·head_dim (Qwen3-Next and Gemma-3 differ from d), doubled by an
        // output gate; linear-attention layers have their own projections.
        let q = f64::from(m.heads) * f64::from(m.head_dim);
        let q_out = if m.attn_output_gate { 2.0 * q } else { q };
        let attention = f64::from(m.attention_layers());
        attention * (d * (q_out + 2.0 * dkv) + q * d + 2.0 * d)
            + f64::from(m.kinds.linear) * (linear_layer_params(m) + 2.0 * d)
    } else {
        // The query and output projections are H·head_dim wide, as vLLM loads them; BLIS
        // counts d² for each, which is the same only where H·head_dim = d (not on
        // Mistral-Nemo's 32 × 128 = 4,096 of 5,120, nor Qwen3-30B-A3B's 4,096 of 2,048).
        let q = f64::from(m.heads) * f64::from(m.head_dim);
        l * (d * (q + 2.0 * dkv) + q * d + 2.0 * d)
    }
}

/// Parameter count with 3-matrix FFNs (gate, up, down).
pub fn params(m: &ModelConfig) -> f64 {
    let d = f64::from(m.hidden);
    let l = f64::from(m.layers);
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
    head_params(m) + attention_params(m) + mlp + d
}

/// Parameters of the token embedding and the LM head (one matrix when they are tied).
pub fn head_params(m: &ModelConfig) -> f64 {
    let vd = f64::from(m.vocab) * f64::from(m.hidden);
    if m.tied_embeddings { vd } else { 2.0 * vd }
}

/// Bytes of weights one replica loads: the linear and MoE layers at `weight_bytes`, the
/// attention projections at `attn_weight_bytes`, the embedding and LM head at `head_bytes`
/// ([`ModelConfig`]: what vLLM's quantisation methods leave unquantised). For a model
/// without quantisation every part is at `weight_bytes`: `params × weight_bytes`.
pub fn weight_memory_bytes(m: &ModelConfig) -> f64 {
    params(m) * m.weight_bytes
        + attention_params(m) * (m.attn_weight_bytes - m.weight_bytes)
        + head_params(m) * (m.head_bytes - m.weight_bytes)
}

/// Weights of one layer's lightning indexer (DeepSeek sparse attention, 0 without it): its
/// query projection from the compressed query (`wq_b`), its key projection and key norm
/// (`wk`, `k_norm`), and its per-head weights (`weights_proj`).
pub fn indexer_params(m: &ModelConfig) -> f64 {
    let k = &m.kinds;
    if !k.is_sparse() {
        return 0.0;
    }
    let d = f64::from(m.hidden);
    let (heads, dim) = (f64::from(k.index_heads), f64::from(k.index_dim));
    let q_in = m.query_input_width();
    q_in * heads * dim + d * dim + 2.0 * dim + d * heads
}

/// Weights of one linear-attention (Gated DeltaNet) layer: the query/key/value/gate
/// projection, the two per-head scalars' projection (`in_proj_ba`), the short convolution
/// over the query, key and value channels, and the output projection.
pub fn linear_layer_params(m: &ModelConfig) -> f64 {
    let k = &m.kinds;
    let d = f64::from(m.hidden);
    let keys = f64::from(k.linear_key_heads) * f64::from(k.linear_key_dim);
    let values = f64::from(k.linear_value_heads) * f64::from(k.linear_value_dim);
    let heads = f64::from(k.linear_value_heads);
    d * (2.0 * keys + 2.0 * values)
        + d * 2.0 * heads
        + (2.0 * keys + values) * f64::from(k.linear_conv_kernel)
        + values * d
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
/// Hybrid models: the layers that keep K and V (full and sliding-window attention), as if
/// each kept every token.
pub fn kv_bytes_per_token(m: &ModelConfig, tp: u32, pp: u32) -> f64 {
    let layers = f64::from(m.attention_layers()) / f64::from(pp.max(1));
    if m.kv_lora_rank > 0 {
        layers
            * (f64::from(m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes
                + m.kinds.index_key_bytes())
    } else if m.kv_heads < tp {
        // Fewer KV heads than GPUs: each GPU holds one, replicated (vLLM).
        layers * 2.0 * f64::from(m.head_dim) * m.kv_bytes
    } else {
        layers * 2.0 * f64::from(m.head_dim) * f64::from(m.kv_heads) * m.kv_bytes
            / f64::from(tp.max(1))
    }
}

/// How vLLM's hybrid KV cache manager lays out the cache of a model whose layers are not
/// all full attention (vLLM `docs/design/hybrid_kv_cache_manager.md`,
/// `kv_cache_utils._get_kv_cache_groups_uniform_page_size`):
/// - the layers of each kind are cut into KV cache groups of `group_layers` layers (the
///   fewest layers of any kind, or the most if that is under 1.5 × the fewest), the last
///   group of a kind padded;
/// - every block of the one pool is a page of `group_layers` layers × `block_size` tokens;
/// - a request holds, per full-attention group, a block per `block_size` tokens; per
///   sliding-window group, only the blocks that cover its last `window − 1` computed tokens
///   and the tokens being computed (the rest are freed as the window moves on); per
///   linear-attention group, its recurrent state: `state_blocks` blocks (vLLM raises the
///   attention block size until one page holds a layer's state, 544 tokens for Qwen3-Next;
///   servesim keeps the scenario's block size and gives the state the same bytes in whole
///   blocks);
/// - a model whose every layer slides (Mistral-7B-v0.1) has one KV cache type, so one group
///   of all its layers (`full_groups` 0, `sliding_groups` 1): its request's block list is
///   the window's, with the blocks behind the window freed (vLLM's `SlidingWindowManager`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvLayout {
    pub group_layers: u32,
    pub full_groups: u32,
    pub sliding_groups: u32,
    pub window: u32,
    pub linear_groups: u32,
    /// Blocks of one linear-attention group's state, per request.
    pub state_blocks: u32,
    /// Bytes of one block on one GPU.
    pub page_bytes: f64,
}

impl KvLayout {
    /// Blocks a request holds beyond its full-attention group's one per `block_size`
    /// tokens, with `tokens` in the cache after this step and `computed` of them computed
    /// before it (sliding-window groups keep only the window behind `computed`).
    pub fn side_blocks(&self, block_size: u32, tokens: u32, computed: u32) -> u32 {
        let all = tokens.div_ceil(block_size);
        let live = all.saturating_sub(self.behind_window(block_size, computed));
        // The request's own block list is the first full-attention group's, or with none
        // the first sliding group's.
        let (full, sliding) = match self.full_groups {
            0 => (0, self.sliding_groups.saturating_sub(1)),
            n => (n - 1, self.sliding_groups),
        };
        // Saturating: a hostile config's request asks for more than any cache holds.
        full.saturating_mul(all)
            .saturating_add(sliding.saturating_mul(live))
            .saturating_add(self.linear_groups.saturating_mul(self.state_blocks))
    }

    /// True if every layer slides: the request's own block list is a window, its blocks
    /// behind the window freed (null in vLLM's block table).
    pub fn slides_main(&self) -> bool {
        self.full_groups == 0
    }

    /// The leading blocks a sliding window no longer needs with `computed` tokens computed:
    /// those before the block of token `computed + 1 − window` (vLLM's
    /// `SlidingWindowManager.remove_skipped_blocks`).
    pub fn behind_window(&self, block_size: u32, computed: u32) -> u32 {
        (computed + 1).saturating_sub(self.window) / block_size
    }

    /// The cached blocks a prefix-cache hit needs in a row at its end on a sliding-window
    /// group: those the window still reads, ⌈(window − 1)/block_size⌉ (vLLM's
    /// `sliding_window_contiguous_blocks`).
    pub fn window_hit_blocks(&self, block_size: u32) -> u32 {
        self.window.saturating_sub(1).div_ceil(block_size)
    }

    /// The longest sequence one request can hold in `blocks` blocks (any length if every
    /// layer slides and its windows fit).
    pub fn max_tokens(&self, blocks: u32, block_size: u32) -> u64 {
        let window = self.window.div_ceil(block_size) + 1;
        let fixed = self
            .sliding_groups
            .saturating_mul(window)
            .saturating_add(self.linear_groups.saturating_mul(self.state_blocks));
        match self.full_groups {
            0 if blocks >= fixed => u64::MAX,
            0 => 0,
            n => u64::from(blocks.saturating_sub(fixed) / n) * u64::from(block_size),
        }
    }
}

/// The hybrid layout of `m` on one GPU of a `tp` group, or `None` if every layer is full
/// attention. An error for what vLLM's hybrid manager does not serve either: no
/// full-attention layer, or both sliding-window and linear-attention layers.
pub fn kv_layout(m: &ModelConfig, tp: u32, block_size: u32) -> Result<Option<KvLayout>, String> {
    let k = &m.kinds;
    let full = m.full_attention_layers();
    // Every layer sliding: one kind of cache, which vLLM keeps as it is whatever
    // `disable_hybrid_kv_cache_manager` says (`unify_hybrid_kv_cache_specs` leaves a
    // uniform model alone).
    let all_sliding = full == 0 && k.linear == 0 && k.sliding > 0;
    if !k.is_hybrid() || (k.full_cache && k.linear == 0 && !all_sliding) {
        return Ok(None);
    }
    if k.full_cache && k.linear > 0 {
        return Err(format!(
            "{} has linear-attention layers, whose recurrent state needs vLLM's hybrid KV cache manager",
            m.id
        ));
    }
    if full == 0 && k.linear > 0 {
        return Err(format!(
            "every layer of {} is sliding-window or linear attention: servesim models linear-attention caches beside full-attention layers only",
            m.id
        ));
    }
    if k.sliding > 0 && k.linear > 0 {
        return Err(format!(
            "{} mixes sliding-window and linear-attention layers: vLLM's hybrid KV cache manager serves full attention plus one other kind",
            m.id
        ));
    }
    let other = k.sliding + k.linear;
    let (few, many) = (full.min(other), full.max(other));
    let group_layers = if all_sliding {
        k.sliding
    } else if f64::from(many) < 1.5 * f64::from(few) {
        many
    } else {
        few
    };
    let tp = f64::from(tp.max(1));
    // KV heads split over TP, or replicated when there are fewer than TP of them (vLLM).
    let kv_heads = (f64::from(m.kv_heads) / tp).max(1.0);
    let layer_token = 2.0 * f64::from(m.head_dim) * kv_heads * m.kv_bytes;
    let layer_page = layer_token * f64::from(block_size);
    let (conv, recurrent) = k.linear_state_elements();
    let state = (conv * m.act_bytes + recurrent * k.state_bytes) / tp;
    Ok(Some(KvLayout {
        group_layers,
        full_groups: full.div_ceil(group_layers),
        sliding_groups: k.sliding.div_ceil(group_layers),
        window: k.window,
        linear_groups: k.linear.div_ceil(group_layers),
        // `as` saturates: a state larger than 2³² blocks cannot fit any cache anyway.
        state_blocks: if k.linear > 0 {
            (state / layer_page).ceil() as u32
        } else {
            0
        },
        page_bytes: (layer_page * f64::from(group_layers)).trunc(),
    }))
}

/// GiB of weights on a whole replica: every rank holds the non-expert weights, and the
/// routed experts are shared among the ranks.
pub fn replica_weights_gib(m: &ModelConfig, replica: Replica) -> f64 {
    if replica.dp > 1 {
        let experts = routed_expert_params(m);
        let ranks = f64::from(replica.dp);
        ((weight_memory_bytes(m) - experts * m.weight_bytes) * ranks + experts * m.weight_bytes)
            / GIB
    } else {
        weight_memory_bytes(m) / GIB
    }
}

/// [`kv_capacity_with`] by BLIS's rule, for one replica of `tp × pp` GPUs without a drafter.
pub fn kv_capacity(
    m: &ModelConfig,
    gpu: &GpuProfile,
    tp: u32,
    pp: u32,
    utilization: f64,
    block_size: u32,
) -> Result<KvCapacity, String> {
    let replica = Replica { tp, pp, dp: 1 };
    let rule = MemoryRule::Blis;
    kv_capacity_with(m, gpu, replica, utilization, block_size, (0.0, 0.0), rule)
}

/// How much of a GPU's memory besides the weights and the KV cache is set aside.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryRule {
    /// BLIS's (`kv_capacity.go`): 5.5 GiB of activations per replica (8 GiB for MoE) and
    /// 0.15 GiB of non-torch memory on one GPU, else 0.6 GiB per GPU, of the nominal memory.
    Blis,
    /// vLLM's start-up profile (`Worker.determine_available_memory`, vLLM 0.11–0.15): of the
    /// memory CUDA reports, the peak of one forward pass of `tokens` tokens
    /// (`max_num_batched_tokens`) or of the sampler over `rows` requests (`max_num_seqs`, at
    /// most `tokens`), whichever is larger, and [`VLLM_OTHER_GIB`] of other memory per GPU.
    Vllm { tokens: u32, rows: u32 },
}

/// What CUDA withholds of a GPU's memory from `cudaMemGetInfo`'s total, in GiB: an H100
/// 80GB reports 79.1–79.3 GiB (PyTorch's out-of-memory messages, "GPU 0 has a total capacity
/// of 79.11 GiB", vary with the driver). Taken alike for every GPU.
pub const CUDA_WITHHELD_GIB: f64 = 0.8;

/// Memory per GPU that vLLM's profile counts beside the weights and the profiling pass's
/// peak: non-torch allocations since the worker started (cuBLAS workspaces, NCCL and
/// custom all-reduce buffers, loaded kernels) and persistent input buffers. Not derivable
/// from vLLM's code; the one constant fitted to vLLM's own KV block counts
/// (docs/fidelity.md, "KV capacity against vLLM's own counts").
pub const VLLM_OTHER_GIB: f64 = 0.67;

/// Bytes per logit alive at the peak of vLLM's dummy sampler run (`_dummy_sampler_run`:
/// temperature, top-k and top-p all on, PyTorch's `apply_top_k_top_p`), in its sort of every
/// row: the model's bf16 logits (2) and their float32 copy (4), the sorted values (4) and
/// their int64 indices (8), and the sort's scratch of 12 (vLLM issue #15105: that sort asked
/// for 1.74 GiB = 1,024 rows × 152,064 logits × 12 B). The top-p pass after it holds 28.
pub const SAMPLER_BYTES_PER_LOGIT: f64 = 30.0;

/// Bytes per token one GPU holds at the peak of a forward pass: a dense layer's MLP
/// gate-and-up output (2 · I / tp values) beside its activation's output (I / tp); a MoE
/// layer's fused-MoE workspace for the k experts a token goes to (gate-and-up 2 · I / tp,
/// activation I / tp and the down projection's hidden-wide output, each) and its shared
/// experts' MLP; the larger of the model's layer kinds.
pub fn forward_peak_bytes_per_token(m: &ModelConfig, tp: u32) -> f64 {
    let tp = f64::from(tp.max(1));
    let mlp = |width: u32| 3.0 * f64::from(width) / tp;
    let dense = if m.dense_layers() > 0 || !m.is_moe() {
        mlp(m.ffn_dense)
    } else {
        0.0
    };
    let moe = if m.is_moe() {
        m.k() * (mlp(m.ffn_expert) + f64::from(m.hidden)) + mlp(m.ffn_shared)
    } else {
        0.0
    };
    dense.max(moe) * m.act_bytes
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
    rule: MemoryRule,
) -> Result<KvCapacity, String> {
    let Replica { tp, pp, dp } = replica;
    let ranks = f64::from(dp.max(1));
    let gpus = f64::from(tp.max(1)) * f64::from(pp.max(1)) * ranks;
    let per_token = kv_bytes_per_token(m, tp, pp) + draft.1;
    let mut per_block = (per_token * f64::from(block_size)).trunc();
    if let Some(layout) = kv_layout(m, tp, block_size)? {
        if draft.1 > 0.0 || pp > 1 || dp > 1 {
            return Err(format!(
                "{} has hybrid attention: its KV cache is sized for one GPU group without pipeline or data parallelism and without a drafter's KV",
                m.id
            ));
        }
        per_block = layout.page_bytes;
    }
    let memory = match rule {
        MemoryRule::Blis => gpu.memory_gib,
        MemoryRule::Vllm { .. } => gpu.memory_gib - CUDA_WITHHELD_GIB,
    };
    let available = memory * utilization * gpus;
    let weights = replica_weights_gib(m, replica) + draft.0 * ranks;
    let (activation, non_torch, sampler_peak) = match rule {
        MemoryRule::Blis => (
            (if m.is_moe() { 8.0 } else { 5.5 }) * ranks,
            if gpus <= 1.0 { 0.15 } else { 0.6 * gpus },
            false,
        ),
        MemoryRule::Vllm { tokens, rows } => {
            // Every GPU runs the forward pass on its rank's tokens; the sampler's rows hold
            // the whole vocabulary on every GPU (vLLM gathers the logits), while the forward
            // pass's output, a hidden row per token, is still held (`profile_run`).
            let tokens = f64::from(tokens);
            let forward = tokens * forward_peak_bytes_per_token(m, tp);
            let logits = f64::from(rows) * f64::from(m.vocab) * SAMPLER_BYTES_PER_LOGIT;
            let sampler = logits + tokens * f64::from(m.hidden) * m.act_bytes;
            let peak = forward.max(sampler);
            (peak / GIB * gpus, VLLM_OTHER_GIB * gpus, sampler > forward)
        }
    };
    let tp = tp * pp.max(1) * dp.max(1);
    let act = m.hidden_act.to_ascii_lowercase();
    let gated_gelu = m.gated_mlp && act.starts_with("gelu");
    if !["silu", "swiglu", "geglu", "situ", ""].contains(&act.as_str()) && !gated_gelu {
        return Err(format!(
            "cannot size the KV cache for activation `{}`; give kv_blocks",
            m.hidden_act
        ));
    }
    let spare = available - weights - activation - non_torch;
    if spare <= 0.0 || per_block <= 0.0 {
        // Smaller batch limits help only where the profiling pass is what tips it over.
        let batch_bound = available - weights - non_torch > 0.0;
        let (pass, fewer) = match rule {
            MemoryRule::Blis => (String::new(), ""),
            MemoryRule::Vllm { tokens, rows } => (
                format!(
                    " (vLLM's profiling pass of {} tokens and {} sampler rows)",
                    crate::scenario::grouped(u64::from(tokens)),
                    crate::scenario::grouped(u64::from(rows))
                ),
                if batch_bound {
                    ", lower max_num_batched_tokens or max_num_seqs,"
                } else {
                    ""
                },
            ),
        };
        return Err(format!(
            "{} does not fit: {available:.1} GiB available on {tp}×{}, {weights:.1} GiB of weights + {activation:.2} GiB activations{pass} + {non_torch:.2} GiB other; use more GPUs (tp){fewer} or give kv_blocks",
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
        rule,
        sampler_peak,
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
        // and 1/16 of the routed experts, at 2 GB/s; one byte a weight, but two for the
        // embedding and the LM head (vLLM leaves them in bf16).
        let m = ModelConfig::bundled("deepseek-v3").unwrap();
        assert_eq!(
            (m.weight_bytes, m.attn_weight_bytes, m.head_bytes),
            (1.0, 1.0, 2.0)
        );
        let (p, e, h) = (params(&m), routed_expert_params(&m), head_params(&m));
        let dp16 = Replica {
            tp: 1,
            pp: 1,
            dp: 16,
        };
        let expected = ((p - e + h) + e / 16.0) / 2e9;
        assert!((load_s(&m, dp16, 2.0) - expected).abs() < 1e-9);
        // The same 16 GPUs as one TP group share every weight.
        let tp16 = Replica {
            tp: 16,
            pp: 1,
            dp: 1,
        };
        assert!((load_s(&m, tp16, 2.0) - (p + h) / 16.0 / 2e9).abs() < 1e-9);
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
    fn vllm_s_profile_sets_aside_the_larger_of_the_forward_pass_and_the_sampler() {
        let m = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
        let h100 = find_gpu("H100").unwrap();
        let one = Replica {
            tp: 1,
            pp: 1,
            dp: 1,
        };
        let vllm = |tokens, rows| {
            let rule = MemoryRule::Vllm { tokens, rows };
            kv_capacity_with(&m, &h100, one, 0.9, 16, (0.0, 0.0), rule).unwrap()
        };
        // `vllm serve` on an H100: the sampler's 1,024 rows × 128,256 logits × 30 B and the
        // 8,192 hidden rows × 4,096 × 2 B it runs beside (4,007,133,184 B) outweigh the
        // forward pass's 8,192 × 3 × 14,336 × 2 B (704,643,072 B): of 0.9 × (80 − 0.8) GiB,
        // 71.28 − 14.95753 − 3.73193 − 0.67 = 51.92054 GiB, ⌊26,583.3⌋ blocks of 2 MiB.
        let c = vllm(8192, 1024);
        assert!((c.available_gib - 71.28).abs() < 1e-9);
        assert_eq!(c.activation_gib, 4_007_133_184.0 / GIB);
        assert_eq!(c.non_torch_gib, 0.67);
        assert_eq!(c.blocks, 26_583);
        // One request: the forward pass is the larger.
        assert_eq!(vllm(8192, 1).activation_gib, 704_643_072.0 / GIB);
        // BLIS's deployments, 128 requests of a 2,048-token budget: 128 × 128,256 × 30 B +
        // 2,048 × 4,096 × 2 B.
        let c = vllm(2048, 128);
        assert_eq!(c.activation_gib, (492_503_040.0 + 16_777_216.0) / GIB);
        // Mixtral on two GPUs: a token's fused-MoE workspace for its 2 experts, each
        // 3 × 14,336 / 2 + 4,096 values of 2 B: 102,400 B.
        let mixtral = ModelConfig::bundled("mixtral-8x7b-v0.1").unwrap();
        assert_eq!(forward_peak_bytes_per_token(&mixtral, 2), 102_400.0);
        assert_eq!(forward_peak_bytes_per_token(&m, 1), 86_016.0);
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
    fn gemma_3_keeps_a_window_in_six_of_its_seven_groups() {
        // 62 layers: every 6th full attention (10), 52 sliding over 1,024 tokens. vLLM
        // groups 10 layers (52 ≥ 1.5 × 10): 1 full group, ⌈52/10⌉ = 6 sliding groups. A
        // block is 10 layers × 16 tokens × 2·16 heads·128·2 B = 1,310,720 B.
        let m = ModelConfig::bundled("gemma-3-27b-it").unwrap();
        assert_eq!((m.full_attention_layers(), m.kinds.sliding), (10, 52));
        assert_eq!(
            m.max_position_embeddings, 131_072,
            "Gemma-3's RoPE factor is in it"
        );
        // 27B parameters as published (the text model; the vision tower is 0.4B).
        assert!((26.5e9..27.5e9).contains(&params(&m)), "{}", params(&m));
        let l = kv_layout(&m, 1, 16).unwrap().unwrap();
        assert_eq!(
            (
                l.group_layers,
                l.full_groups,
                l.sliding_groups,
                l.linear_groups
            ),
            (10, 1, 6, 0)
        );
        assert_eq!(l.page_bytes, 1_310_720.0);
        // A request of 8,000 tokens decoding its last (7,999 computed): 500 full-attention
        // blocks, and per sliding group the blocks from ⌊(7,999 + 1 − 1,024)/16⌋ = 436 on.
        assert_eq!(l.side_blocks(16, 8000, 7999), 6 * (500 - 436));
        // A short request keeps every block in every group.
        assert_eq!(l.side_blocks(16, 100, 0), 6 * 7);
        let c = kv_capacity(&m, &find_gpu("H100").unwrap(), 1, 1, 0.9, 16).unwrap();
        assert_eq!(c.per_block_bytes, 1_310_720.0);
        let spare = 72.0 - c.weights_gib - 5.5 - 0.15;
        assert_eq!(c.blocks, (spare * GIB / 1_310_720.0).floor() as u32);
        // The 8,000-token request takes 500 + 384 blocks of 1.31 MB (1.16 GB); with every
        // layer full attention it would take 500 blocks of 8.1 MB (4.06 GB).
        assert_eq!(
            l.max_tokens(c.blocks, 16),
            u64::from(c.blocks - 6 * 65) * 16
        );
    }

    #[test]
    fn qwen3_next_holds_three_recurrent_states_and_one_full_attention_group() {
        // 48 layers, every 4th full attention: 12 full, 36 Gated DeltaNet. 79.67B
        // parameters as published (Qwen3-Coder-Next, the same architecture).
        let m = ModelConfig::bundled("qwen3-next-80b-a3b-instruct").unwrap();
        assert_eq!((m.full_attention_layers(), m.kinds.linear), (12, 36));
        assert!(m.attn_output_gate);
        let p = params(&m);
        assert!((p / 79_674_391_296.0 - 1.0).abs() < 0.002, "{p}");
        // On TP 4: a layer's K and V per token per GPU are 2·256·2 B = 1,024 B (its 2 KV
        // heads replicated: one per GPU); a
        // state per layer per GPU is (3·8,192 conv + 32·128·128 recurrent)·2 B / 4 =
        // 274,432 B = ⌈16.75⌉ = 17 blocks of 16 tokens (vLLM: a 272-token attention block).
        let l = kv_layout(&m, 4, 16).unwrap().unwrap();
        assert_eq!(
            (
                l.group_layers,
                l.full_groups,
                l.linear_groups,
                l.state_blocks
            ),
            (12, 1, 3, 17)
        );
        assert_eq!(l.page_bytes, 12.0 * 1024.0 * 16.0);
        assert_eq!(l.side_blocks(16, 5000, 4999), 3 * 17);
    }

    #[test]
    fn a_sparse_attention_model_caches_its_indexer_keys_beside_the_latent() {
        // GLM-5.2: 78 MLA layers, each caching a 512 + 64 latent row in bf16 and its
        // lightning indexer's 132-byte key, whole on every GPU: 78 × 1,284 B per token.
        let m = ModelConfig::bundled("glm-5.2-fp8").unwrap();
        assert_eq!(kv_bytes_per_token(&m, 8, 1), 78.0 * (576.0 * 2.0 + 132.0));
        // Its indexer's weights: 2,048 × 32 × 128 (query) + 6,144 × 128 (key) + 2 × 128
        // (key norm) + 6,144 × 32 (head weights) per layer.
        let per_layer = 2048.0 * 32.0 * 128.0 + 6144.0 * 128.0 + 256.0 + 6144.0 * 32.0;
        assert_eq!(indexer_params(&m), per_layer);
        let mut dense = m.clone();
        dense.kinds.index_topk = 0;
        assert_eq!(params(&m) - params(&dense), 78.0 * per_layer);
    }

    #[test]
    fn mistral_7b_v0_1_slides_every_layer_in_one_group() {
        // 32 layers, every one sliding over 4,096 tokens: one KV cache type, so one group
        // of 32 layers whose blocks are a full-attention model's: 32·2·8 heads·128·2 B·16
        // = 2 MiB. The request's own list is the window.
        let m = ModelConfig::bundled("mistral-7b-v0.1").unwrap();
        assert_eq!((m.full_attention_layers(), m.kinds.sliding), (0, 32));
        // 7.24B parameters as published.
        assert!((7.2e9..7.3e9).contains(&params(&m)), "{}", params(&m));
        let l = kv_layout(&m, 1, 16).unwrap().unwrap();
        assert_eq!(
            (l.group_layers, l.full_groups, l.sliding_groups, l.window),
            (32, 0, 1, 4096)
        );
        assert!(l.slides_main());
        assert_eq!(l.page_bytes, 2.0 * 1024.0 * 1024.0);
        // No other group: nothing beside the request's own list.
        assert_eq!(l.side_blocks(16, 10_000, 9_999), 0);
        // 10,000 tokens, 9,999 computed: blocks from ⌊(9,999 + 1 − 4,096)/16⌋ = 369 on.
        assert_eq!(l.behind_window(16, 9_999), 369);
        // A hit must end in ⌈4,095/16⌉ = 256 cached blocks.
        assert_eq!(l.window_hit_blocks(16), 256);
        // Any length fits once the window (257 blocks) does; the context is the config's.
        assert_eq!(l.max_tokens(257, 16), u64::MAX);
        assert_eq!(l.max_tokens(256, 16), 0);
        let c = kv_capacity(&m, &find_gpu("H100").unwrap(), 1, 1, 0.9, 16).unwrap();
        assert_eq!(c.per_block_bytes, 2.0 * 1024.0 * 1024.0);
        // vLLM's switch changes nothing for a model with one kind of layer.
        let mut off = m.clone();
        off.kinds.full_cache = true;
        assert_eq!(kv_layout(&off, 1, 16).unwrap(), Some(l));
        // Sliding and linear layers without full attention are still refused.
        let mut mixed = m.clone();
        (mixed.kinds.sliding, mixed.kinds.linear) = (16, 16);
        assert!(
            kv_layout(&mixed, 1, 16)
                .unwrap_err()
                .contains("every layer")
        );
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
