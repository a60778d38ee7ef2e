//! The model and GPU library: HuggingFace `config.json` parsing, GPU profiles, and KV
//! capacity from GPU memory (MODELS.md §2.5, §2.6).
//!
//! Bundled models and GPUs are embedded in the binary (`assets/`), so a scenario can name
//! them by id from any directory; a scenario may also point at its own files.

mod bundled;
mod capacity;
pub mod dtype;
mod gpu;
mod prices;

pub use bundled::{BUNDLED_GENERATION_CONFIGS, BUNDLED_MODELS, hub_repo_name};
pub use capacity::{
    CUDA_WITHHELD_GIB, KvCapacity, KvLayout, MemoryRule, Replica, SAMPLER_BYTES_PER_LOGIT,
    VLLM_OTHER_GIB, attention_params, flops_per_token, forward_peak_bytes_per_token, head_params,
    kv_bytes_per_token, kv_capacity, kv_capacity_with, kv_layout, linear_layer_params, load_s,
    params, replica_weights_gib, routed_expert_params, weight_memory_bytes,
};
pub use gpu::{
    Calibration, GpuPhysics, GpuProfile, TwoStageAllReduce, allreduce_time_us, bundled_gpus,
    find_gpu, gpu_key, gpus_of_chip,
};
pub use prices::{Price, bundled_prices, price_of};

use serde_json::Value;

/// Largest layer count, width, head count or vocabulary a model config may give (2²⁴).
pub const MAX_DIMENSION: u64 = 1 << 24;

/// The architecture numbers every latency model and the KV sizing need.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub id: String,
    /// L
    pub layers: u32,
    /// d
    pub hidden: u32,
    /// H
    pub heads: u32,
    /// Hkv
    pub kv_heads: u32,
    /// `head_dim` if the config gives it, else d/H.
    pub head_dim: u32,
    /// FFN width of dense layers (`intermediate_size_mlp`, else `intermediate_size`).
    pub ffn_dense: u32,
    /// FFN width of one expert (`moe_intermediate_size`, else `intermediate_size`).
    pub ffn_expert: u32,
    /// Routed experts N (0 = dense model).
    pub experts: u32,
    /// Experts per token k.
    pub experts_per_token: u32,
    /// Width of the always-on shared expert(s), 0 if none.
    pub ffn_shared: u32,
    /// The shared-expert width the config spells out (BLIS reads only this; `ffn_shared`
    /// also counts Llama-4's implied shared expert).
    pub ffn_shared_spelled: u32,
    /// MoE on every s-th layer when > 0 (HuggingFace Llama-4 `interleave_moe_layer_step`).
    pub interleave_moe_step: u32,
    /// Leading dense layers of a MoE model (DeepSeek `first_k_dense_replace`).
    pub first_dense_layers: u32,
    pub vocab: u32,
    pub tied_embeddings: bool,
    /// Bytes per activation element (from `torch_dtype`; 2 if absent).
    pub act_bytes: f64,
    /// Bytes per weight of the linear and MoE layers (quantisation aware).
    pub weight_bytes: f64,
    /// Bytes per weight of the attention projections: `weight_bytes`, unless a
    /// compressed-tensors checkpoint leaves them out of its quantisation (its `ignore` list
    /// names every text layer's attention projections, as Llama-4-Scout-FP8's does):
    /// `act_bytes`.
    pub attn_weight_bytes: f64,
    /// Bytes per weight of the token embedding and the LM head: `act_bytes` whatever the
    /// quantisation, as vLLM 0.15 loads them (its fp8, compressed-tensors and AWQ methods
    /// quantise linear and MoE layers only; the LM head is a vocabulary embedding), except
    /// a GPTQ checkpoint that says `lm_head: true`.
    pub head_bytes: f64,
    /// Bytes per KV-cache element: `act_bytes` unless the group sets `kv_cache_dtype`
    /// ([`dtype`]).
    pub kv_bytes: f64,
    pub max_position_embeddings: u64,
    /// MLA: compressed KV rank (0 = standard attention).
    pub kv_lora_rank: u32,
    pub qk_rope_head_dim: u32,
    /// MLA: the query's compressed rank (0 = queries projected from the hidden row).
    pub q_lora_rank: u32,
    /// MLA: the query and key width per head without rotary position (`qk_nope_head_dim`).
    pub qk_nope_head_dim: u32,
    /// MLA: the value width per head (`v_head_dim`).
    pub v_head_dim: u32,
    pub hidden_act: String,
    /// The MLP has a gate (three matrices: SwiGLU, GeGLU, and Gemma's gated GELU); false
    /// for plain GELU/ReLU MLPs (two).
    pub gated_mlp: bool,
    /// The attention kinds of the layers ([`LayerKinds`]): all full attention unless the
    /// config says otherwise.
    pub kinds: LayerKinds,
    /// A `quantization_config.quant_method` whose weight bytes servesim cannot read (not
    /// `fp8`, `compressed-tensors` with `num_bits`, nor one with `bits`, as AWQ and GPTQ
    /// give): a group must then say its `weight_dtype`.
    pub unread_quantization: Option<String>,
    /// Queries carry an output gate (Qwen3-Next `attn_output_gate`): the query projection
    /// is twice as wide.
    pub attn_output_gate: bool,
    /// The nucleus (`top_p`) vLLM gives a request that sets none: the model's
    /// `generation_config.json` (vLLM's default `--generation-config auto`), 1 when it samples
    /// greedily (temperature 0); `None` without such a file (vLLM's neutral 1).
    pub default_top_p: Option<f64>,
    /// The checkpoint holds a vision encoder beside the text model (its config has a
    /// `vision_config`, or an architecture `…ForConditionalGeneration`): vLLM loads it and
    /// profiles it, memory servesim does not count.
    pub multimodal: bool,
}

/// How many layers of each attention kind a model has (HuggingFace `layer_types`, or
/// `sliding_window` with `sliding_window_pattern`, or `full_attention_interval`), and what
/// its efficient layers keep per request. Layers not counted here are full attention.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerKinds {
    /// Sliding-window attention layers: each keeps the last `window` tokens' K and V.
    pub sliding: u32,
    /// The window, tokens (0 without sliding layers).
    pub window: u32,
    /// Linear-attention layers (Gated DeltaNet, Qwen3-Next): each keeps a constant
    /// recurrent state per request instead of K and V per token.
    pub linear: u32,
    /// Linear attention's key heads, value heads, key and value head widths, and its
    /// short convolution's kernel (`linear_num_key_heads`, …, `linear_conv_kernel_dim`).
    pub linear_key_heads: u32,
    pub linear_value_heads: u32,
    pub linear_key_dim: u32,
    pub linear_value_dim: u32,
    pub linear_conv_kernel: u32,
    /// Bytes per element of the recurrent state (`mamba_ssm_dtype`, else the model's
    /// dtype); its convolution state is in the model's dtype.
    pub state_bytes: f64,
    /// vLLM's `--disable-hybrid-kv-cache-manager`: sliding-window layers keep every
    /// token (set from the group, not the config).
    pub full_cache: bool,
    /// DeepSeek sparse attention (DeepSeek-V3.2, GLM-5.x `index_topk`): each query attends
    /// over the `index_topk` cached tokens a lightning indexer of `index_heads` heads ×
    /// `index_dim` scores highest (0: dense attention).
    pub index_topk: u32,
    pub index_heads: u32,
    pub index_dim: u32,
}

impl LayerKinds {
    /// True if any layer is not full attention.
    pub fn is_hybrid(&self) -> bool {
        self.sliding > 0 || self.linear > 0
    }

    /// True with DeepSeek sparse attention.
    pub fn is_sparse(&self) -> bool {
        self.index_topk > 0
    }

    /// True if the roofline prices the layers kind by kind ([`crate::latency::Roofline`]):
    /// hybrid or sparse attention.
    pub fn priced_by_kind(&self) -> bool {
        self.is_hybrid() || self.is_sparse()
    }

    /// Bytes one layer's lightning indexer caches per token, on every GPU: its key in fp8
    /// and one 4-byte scale per 128 elements (vLLM's `DeepseekV32IndexerCache`, `uint8`,
    /// `index_head_dim + index_head_dim / 128 × 4`: 132 B); 0 without sparse attention.
    pub fn index_key_bytes(&self) -> f64 {
        if self.is_sparse() {
            f64::from(self.index_dim + self.index_dim / 128 * 4)
        } else {
            0.0
        }
    }

    /// Elements of one linear-attention layer's state for one request, whole model width
    /// (before TP): (convolution state, recurrent state). The convolution keeps the last
    /// `kernel − 1` rows of its query, key and value channels; the recurrent state is a
    /// key × value matrix per value head (vLLM's `MambaStateShapeCalculator`
    /// `gated_delta_net_state_shape`).
    pub fn linear_state_elements(&self) -> (f64, f64) {
        let (kh, vh) = (
            f64::from(self.linear_key_heads),
            f64::from(self.linear_value_heads),
        );
        let (kd, vd) = (
            f64::from(self.linear_key_dim),
            f64::from(self.linear_value_dim),
        );
        let conv_dim = 2.0 * kh * kd + vh * vd;
        let conv = f64::from(self.linear_conv_kernel.saturating_sub(1)) * conv_dim;
        (conv, vh * kd * vd)
    }
}

/// The context a model serves, as vLLM derives it (`_get_and_verify_max_len`): RoPE scaling
/// multiplies `max_position_embeddings` by its `factor`, except that `llama3`, `longrope` and
/// `su` scaling are already counted in it, and YaRN scales its
/// `original_max_position_embeddings`.
fn context_length(max_pos: u64, scaling: Option<&Value>) -> Result<u64, String> {
    let Some(r) = scaling else {
        return Ok(max_pos);
    };
    let factor = match r.get("factor") {
        None | Some(Value::Null) => 1.0,
        Some(v) => match v.as_f64() {
            Some(f) if f.is_finite() && f > 0.0 => f.max(1.0),
            _ => return Err(format!("`rope_scaling.factor` = {v} is not a number > 0")),
        },
    };
    let kind = r
        .get("rope_type")
        .or_else(|| r.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let original = r
        .get("original_max_position_embeddings")
        .and_then(Value::as_u64);
    Ok(match (kind, original) {
        ("llama3" | "longrope" | "su", _) => max_pos,
        ("yarn", Some(o)) => (o as f64 * factor) as u64,
        _ => (max_pos as f64 * factor) as u64,
    })
}

/// The fields read as a string, a list or an object must be one (or `null`, or absent):
/// each was read as absent when it was not, and served something else without a word (a
/// `torch_dtype` of 7 as bf16, a `rope_scaling` of `"yarn"` as no scaling, a
/// `max_position_embeddings` of -5 as an unlimited context).
fn check_shapes(map: &serde_json::Map<String, Value>) -> Result<(), String> {
    let given = |k: &str| map.get(k).filter(|v| !v.is_null());
    if let Some(v) = given("max_position_embeddings")
        && v.as_u64().is_none()
    {
        return Err(format!(
            "`max_position_embeddings` = {v} is not a whole number ≥ 0 (null, or no field, if the model has none)"
        ));
    }
    for k in [
        "torch_dtype",
        "dtype",
        "hidden_act",
        "hidden_activation",
        "model_type",
    ] {
        if let Some(v) = given(k)
            && !v.is_string()
        {
            return Err(format!("`{k}` = {v} is not a name (a string)"));
        }
    }
    for k in ["use_sliding_window", "attn_output_gate"] {
        if let Some(v) = given(k)
            && !v.is_boolean()
        {
            return Err(format!("`{k}` = {v} is not true or false"));
        }
    }
    if let Some(v) = given("layer_types")
        && !v.is_array()
    {
        return Err(format!(
            "`layer_types` = {v} is not a list with one attention kind per layer"
        ));
    }
    if let Some(v) = given("rope_scaling") {
        let Some(r) = v.as_object() else {
            return Err(format!(
                "`rope_scaling` = {v} is not an object such as {{\"rope_type\": \"yarn\", \"factor\": 4.0}}"
            ));
        };
        for k in ["rope_type", "type"] {
            if let Some(t) = r.get(k).filter(|t| !t.is_null() && !t.is_string()) {
                return Err(format!("`rope_scaling.{k}` = {t} is not a name (a string)"));
            }
        }
    }
    if let Some(v) = given("quantization_config") {
        let Some(q) = v.as_object() else {
            return Err(format!(
                "`quantization_config` = {v} is not an object such as {{\"quant_method\": \"fp8\"}}"
            ));
        };
        if let Some(b) = q.get("bits").filter(|b| !b.is_null())
            && !b.as_f64().is_some_and(|b| b > 0.0 && b <= 32.0)
        {
            return Err(format!(
                "`quantization_config.bits` = {b} is not a number of bits from 1 to 32"
            ));
        }
        if let Some(b) = q.get("lm_head").filter(|b| !b.is_null() && !b.is_boolean()) {
            return Err(format!(
                "`quantization_config.lm_head` = {b} is not true or false"
            ));
        }
        if let Some(m) = q
            .get("quant_method")
            .filter(|m| !m.is_null() && !m.is_string())
        {
            return Err(format!(
                "`quantization_config.quant_method` = {m} is not a name (a string)"
            ));
        }
    }
    Ok(())
}

fn dtype_bytes(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        "float32" | "fp32" => Some(4.0),
        "float16" | "fp16" | "bfloat16" | "bf16" => Some(2.0),
        "int8" | "uint8" | "fp8" | "float8" | "int4" | "nf4" => Some(1.0),
        _ => None,
    }
}

impl ModelConfig {
    /// Parses a HuggingFace `config.json` (`text_config` keys override top-level ones).
    pub fn from_hf_json(id: &str, text: &str) -> Result<Self, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let Value::Object(mut map) = root.clone() else {
            return Err("expected a JSON object".into());
        };
        if let Some(Value::Object(tc)) = root.get("text_config") {
            for (k, v) in tc {
                map.insert(k.clone(), v.clone());
            }
        }
        // Every architecture number is narrowed to 32 bits below: check the range first, so a
        // hostile config is an error naming its field instead of a value wrapped to 0.
        for k in [
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "num_kv_heads",
            "multi_query_group_num",
            "head_dim",
            "intermediate_size",
            "ffn_hidden_size",
            "intermediate_size_mlp",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "n_shared_experts",
            "num_experts",
            "moe_num_experts",
            "n_routed_experts",
            "num_local_experts",
            "num_routed_experts",
            "num_experts_per_tok",
            "interleave_moe_layer_step",
            "first_k_dense_replace",
            "vocab_size",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "q_lora_rank",
            "qk_nope_head_dim",
            "v_head_dim",
            "sliding_window",
            "sliding_window_pattern",
            "full_attention_interval",
            "max_window_layers",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
            "index_topk",
            "index_n_heads",
            "index_head_dim",
        ] {
            // `null` is a field left unset (Mixtral's `sliding_window`); anything else
            // must be a whole number, or it was read as absent: a `sliding_window` of
            // -5 or 1024.5 served the model with full attention and said nothing.
            match map.get(k) {
                None | Some(Value::Null) => {}
                Some(v) if v.as_u64().is_some() => {}
                Some(v) => {
                    return Err(format!(
                        "`{k}` = {v} is not a whole number ≥ 0 (null, or no field, if the model has none)"
                    ));
                }
            }
            if let Some(v) = map.get(k).and_then(Value::as_u64)
                && v > MAX_DIMENSION
            {
                return Err(format!(
                    "`{k}` = {v} is larger than the {MAX_DIMENSION} a model dimension may be"
                ));
            }
        }
        check_shapes(&map)?;
        let uint = |k: &str| map.get(k).and_then(Value::as_u64);
        let req = |k: &str| {
            uint(k)
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("missing or zero `{k}`"))
        };
        let layers = req("num_hidden_layers")? as u32;
        let hidden = req("hidden_size")? as u32;
        let heads = req("num_attention_heads")? as u32;
        let kv_heads = [
            "num_key_value_heads",
            "num_kv_heads",
            "multi_query_group_num",
        ]
        .iter()
        .find_map(|k| uint(k).filter(|&v| v > 0))
        .unwrap_or(u64::from(heads)) as u32;
        if heads > hidden && uint("head_dim").filter(|&v| v > 0).is_none() {
            return Err(format!(
                "`num_attention_heads` = {heads} is larger than `hidden_size` = {hidden}"
            ));
        }
        // Each KV head serves a whole group of query heads (grouped-query attention); a
        // model whose query heads do not split into them does not load.
        if !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "`num_attention_heads` = {heads} is not a multiple of the {kv_heads} KV heads \
                 (`num_key_value_heads`): each KV head serves a whole group of query heads"
            ));
        }
        let head_dim = match uint("head_dim").filter(|&v| v > 0) {
            Some(d) => d as u32,
            None if !hidden.is_multiple_of(heads) => {
                return Err(format!(
                    "`hidden_size` = {hidden} does not split into {heads} heads \
                     (`num_attention_heads`) and there is no `head_dim`: give the head size"
                ));
            }
            None => hidden / heads,
        };
        let ffn = uint("intermediate_size")
            .or_else(|| uint("ffn_hidden_size"))
            .unwrap_or(0) as u32;
        let experts = [
            "num_experts",
            "moe_num_experts",
            "n_routed_experts",
            "num_local_experts",
            "num_routed_experts",
        ]
        .iter()
        .find_map(|k| uint(k).filter(|&v| v >= 2))
        .unwrap_or(0) as u32;
        let experts_per_token = uint("num_experts_per_tok").unwrap_or(0) as u32;
        if experts >= 2 && experts_per_token > experts {
            return Err(format!(
                "`num_experts_per_tok` = {experts_per_token} is more than the model's {experts} experts"
            ));
        }
        let ffn_expert = uint("moe_intermediate_size").map_or(ffn, |v| v as u32);
        // Every layer has an MLP or experts: a width of 0 would serve a model of attention
        // alone (a third of Llama-3.1-8B's weights) and say nothing.
        let ffn_dense = uint("intermediate_size_mlp").map_or(ffn, |v| v as u32);
        if experts < 2 && ffn_dense == 0 {
            return Err("missing or zero `intermediate_size`: the MLP's width".into());
        }
        if experts >= 2 && ffn_expert == 0 {
            return Err(
                "missing or zero `moe_intermediate_size` (or `intermediate_size`): an expert's width"
                    .into(),
            );
        }
        let vocab = req("vocab_size")? as u32;
        let ffn_shared = uint("shared_expert_intermediate_size")
            .map(|v| v as u32)
            .or_else(|| uint("n_shared_experts").map(|n| (n as u32).saturating_mul(ffn_expert)))
            .unwrap_or(0);
        // Llama-4 MoE layers always run one shared expert of the routed experts' width
        // (HuggingFace `Llama4TextMoe`), which its config does not spell out.
        let model_type = map.get("model_type").and_then(Value::as_str).unwrap_or("");
        let ffn_shared_spelled = ffn_shared;
        let ffn_shared = if ffn_shared == 0 && experts >= 2 && model_type.starts_with("llama4") {
            ffn_expert
        } else {
            ffn_shared
        };
        let dtype = map
            .get("torch_dtype")
            .or_else(|| map.get("dtype"))
            .and_then(Value::as_str)
            .unwrap_or("bfloat16");
        let act_bytes =
            dtype_bytes(dtype).ok_or_else(|| format!("unknown torch_dtype `{dtype}`"))?;
        let quantization = map.get("quantization_config");
        let read = weight_bytes(id, quantization);
        let unread_quantization = quantization
            .and_then(|q| q.get("quant_method"))
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty() && read.is_none())
            .map(str::to_string);
        let weight_bytes = read.unwrap_or(act_bytes);
        let attn_weight_bytes = if attention_left_unquantised(quantization, layers) {
            act_bytes
        } else {
            weight_bytes
        };
        let head_bytes = if quantization
            .and_then(|q| q.get("lm_head"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            weight_bytes
        } else {
            act_bytes
        };
        let max_pos = uint("max_position_embeddings").unwrap_or(0);
        // vLLM: Gemma-3's `max_position_embeddings` already counts its RoPE scaling.
        let scaling = map
            .get("rope_scaling")
            .filter(|_| !model_type.starts_with("gemma3"));
        let max_position_embeddings = context_length(max_pos, scaling)?;
        let hidden_act = map
            .get("hidden_act")
            .or_else(|| map.get("hidden_activation"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        // Gemma's MLPs are gated whatever their activation is called.
        let gated_mlp = model_type.starts_with("gemma")
            || !["gelu", "gelu_new", "relu", "gelu_pytorch_tanh"]
                .iter()
                .any(|a| hidden_act.eq_ignore_ascii_case(a));
        let kinds = layer_kinds(&map, layers, act_bytes)?;
        Ok(ModelConfig {
            id: id.to_string(),
            layers,
            hidden,
            heads,
            kv_heads,
            head_dim,
            ffn_dense,
            ffn_expert,
            experts,
            experts_per_token,
            ffn_shared,
            ffn_shared_spelled,
            interleave_moe_step: uint("interleave_moe_layer_step").unwrap_or(0) as u32,
            first_dense_layers: uint("first_k_dense_replace").unwrap_or(0) as u32,
            vocab,
            tied_embeddings: match map.get("tie_word_embeddings") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(format!("`tie_word_embeddings` = {v} is not true or false")),
            },
            act_bytes,
            weight_bytes,
            attn_weight_bytes,
            head_bytes,
            kv_bytes: act_bytes,
            max_position_embeddings,
            kv_lora_rank: uint("kv_lora_rank").unwrap_or(0) as u32,
            qk_rope_head_dim: uint("qk_rope_head_dim").unwrap_or(0) as u32,
            q_lora_rank: uint("q_lora_rank").unwrap_or(0) as u32,
            qk_nope_head_dim: uint("qk_nope_head_dim").unwrap_or(0) as u32,
            v_head_dim: uint("v_head_dim").unwrap_or(0) as u32,
            hidden_act,
            gated_mlp,
            kinds,
            unread_quantization,
            // Qwen3-Next always gates its attention output; Qwen3.5 says so.
            attn_output_gate: map
                .get("attn_output_gate")
                .and_then(Value::as_bool)
                .unwrap_or(model_type.starts_with("qwen3_next")),
            default_top_p: None,
            multimodal: root.get("vision_config").is_some_and(|v| !v.is_null())
                || root
                    .get("architectures")
                    .and_then(Value::as_array)
                    .is_some_and(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .any(|n| n.ends_with("ForConditionalGeneration"))
                    }),
        })
    }

    /// Reads a HuggingFace `generation_config.json` into [`Self::default_top_p`], as vLLM
    /// 0.15's `ModelConfig.get_diff_sampling_param` reads it: `top_p` where given, and a
    /// temperature of 0 (greedy: vLLM then sets `top_p` to 1) overrides it.
    pub fn with_generation_config(mut self, text: &str) -> Result<Self, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let Value::Object(map) = root else {
            return Err("expected a JSON object".into());
        };
        let number = |k: &str| -> Result<Option<f64>, String> {
            match map.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .map(Some)
                    .ok_or_else(|| format!("`{k}` must be a number ≥ 0, got {v}")),
            }
        };
        let top_p = number("top_p")?;
        if let Some(p) = top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(format!("`top_p` must be in (0, 1], got {p}"));
        }
        // vLLM's `_SAMPLING_EPS`: below it a temperature means greedy sampling.
        let greedy = number("temperature")?.is_some_and(|t| t < 1e-5);
        self.default_top_p = if greedy { Some(1.0) } else { top_p };
        Ok(self)
    }

    /// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): a compressed KV row per
    /// token and layer, shared by every head.
    pub fn is_mla(&self) -> bool {
        self.kv_lora_rank > 0 && self.qk_nope_head_dim > 0 && self.v_head_dim > 0
    }

    /// The width queries are projected from: the compressed query (MLA `q_lora_rank`),
    /// else the hidden row (what a sparse-attention indexer's `wq_b` reads).
    pub fn query_input_width(&self) -> f64 {
        f64::from(if self.q_lora_rank > 0 {
            self.q_lora_rank
        } else {
            self.hidden
        })
    }

    pub fn is_moe(&self) -> bool {
        self.experts >= 2
    }

    /// Layers with softmax attention over K and V (full or sliding-window).
    pub fn attention_layers(&self) -> u32 {
        self.layers - self.kinds.linear
    }

    /// Full-attention layers.
    pub fn full_attention_layers(&self) -> u32 {
        self.attention_layers() - self.kinds.sliding
    }

    /// Number of MoE layers: with interleaving, every s-th layer (HuggingFace's reading; BLIS
    /// takes ⌊L/(s+1)⌋, which makes Llama-4-Scout half dense and 59B instead of 109B
    /// parameters); else all but the leading dense ones.
    pub fn moe_layers(&self) -> u32 {
        if !self.is_moe() {
            0
        } else if let Some(n) = self.layers.checked_div(self.interleave_moe_step) {
            n
        } else {
            self.layers.saturating_sub(self.first_dense_layers)
        }
    }

    pub fn dense_layers(&self) -> u32 {
        self.layers - self.moe_layers()
    }

    /// MoE and dense layer counts as BLIS reads them (MODELS.md §2.3): with interleaving step
    /// s > 0, ⌊L/(s+1)⌋ MoE layers. BLIS's trained-physics coefficients were fitted on this
    /// reading, so its basis functions must use it.
    pub fn blis_layers(&self) -> (u32, u32) {
        let moe = if !self.is_moe() {
            0
        } else if self.interleave_moe_step > 0 {
            self.layers / (self.interleave_moe_step + 1)
        } else {
            self.layers.saturating_sub(self.first_dense_layers)
        };
        (moe, self.layers - moe)
    }

    /// Experts per token, at least 1 for MoE models.
    pub fn k(&self) -> f64 {
        f64::from(self.experts_per_token.max(1))
    }

    /// d / H, the head dimension the BLIS latency models use.
    pub fn dh_roofline(&self) -> f64 {
        f64::from(self.hidden) / f64::from(self.heads)
    }
}

/// The layers' attention kinds from a config: `layer_types` (`full_attention`,
/// `sliding_attention`, `linear_attention`) if given; else `sliding_window` on every
/// `sliding_window_pattern`-th layer but the last of each period (Gemma-3), on the layers
/// from `max_window_layers` on (Qwen2 with `use_sliding_window`), or on every layer;
/// else linear attention on all but every `full_attention_interval`-th layer (Qwen3-Next).
/// Llama-4's chunked local attention is full attention here, as in vLLM's KV cache by
/// default (`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` off).
fn layer_kinds(
    map: &serde_json::Map<String, Value>,
    layers: u32,
    act_bytes: f64,
) -> Result<LayerKinds, String> {
    let uint = |k: &str| map.get(k).and_then(Value::as_u64).filter(|&v| v > 0);
    // Saturating: a hostile 2³²-token window is a window longer than any context.
    let uint32 = |k: &str| uint(k).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
    let mut kinds = LayerKinds {
        state_bytes: act_bytes,
        ..LayerKinds::default()
    };
    let window = uint32("sliding_window");
    let swa_on = map.get("use_sliding_window").and_then(Value::as_bool) != Some(false);
    if let Some(Value::Array(types)) = map.get("layer_types") {
        if types.len() != layers as usize {
            return Err(format!(
                "`layer_types` names {} but `num_hidden_layers` is {layers}",
                crate::scenario::counted(types.len() as u64, "layer")
            ));
        }
        for t in types {
            match t.as_str().unwrap_or("") {
                "full_attention" | "chunked_attention" => {}
                "sliding_attention" => kinds.sliding += 1,
                "linear_attention" => kinds.linear += 1,
                other => {
                    return Err(format!(
                        "`layer_types` has `{other}`; known: full_attention, sliding_attention, linear_attention"
                    ));
                }
            }
        }
    } else if let (Some(_), true) = (window, swa_on) {
        kinds.sliding = if let Some(p) = map.get("sliding_window_pattern").and_then(Value::as_u64) {
            // As transformers' Gemma-3 config builds `layer_types`: layer i is full
            // attention when (i + 1) % p == 0, so a period longer than the model slides
            // every layer.
            if p == 0 {
                return Err("`sliding_window_pattern` = 0: every p-th layer is full attention, so p must be at least 1".into());
            }
            layers - (u64::from(layers) / p) as u32
        } else if map.contains_key("use_sliding_window") {
            layers.saturating_sub(uint32("max_window_layers").unwrap_or(0))
        } else {
            layers
        };
    } else if map.contains_key("linear_num_value_heads")
        && let Some(k) = map.get("full_attention_interval").and_then(Value::as_u64)
    {
        // Qwen3-Next's config: layer i is full attention when (i + 1) % k == 0.
        if k == 0 {
            return Err("`full_attention_interval` = 0: every k-th layer is full attention, so k must be at least 1".into());
        }
        kinds.linear = layers - (u64::from(layers) / k) as u32;
    }
    if kinds.sliding > 0 {
        kinds.window = window.ok_or("sliding-window layers need `sliding_window` (tokens)")?;
    }
    if let Some(topk) = uint32("index_topk") {
        let need = |k: &str| {
            uint32(k).ok_or_else(|| format!("DeepSeek sparse attention (`index_topk`) needs `{k}`"))
        };
        if uint("kv_lora_rank").is_none() {
            return Err(
                "DeepSeek sparse attention (`index_topk`) needs MLA (`kv_lora_rank`)".into(),
            );
        }
        kinds.index_topk = topk;
        kinds.index_heads = need("index_n_heads")?;
        kinds.index_dim = need("index_head_dim")?;
    }
    if kinds.linear > 0 {
        let need = |k: &str| uint32(k).ok_or_else(|| format!("linear-attention layers need `{k}`"));
        kinds.linear_key_heads = need("linear_num_key_heads")?;
        kinds.linear_value_heads = need("linear_num_value_heads")?;
        kinds.linear_key_dim = need("linear_key_head_dim")?;
        kinds.linear_value_dim = need("linear_value_head_dim")?;
        kinds.linear_conv_kernel = match map.get("linear_conv_kernel_dim") {
            Some(Value::Number(n)) if n.as_u64() == Some(0) => {
                return Err(
                    "`linear_conv_kernel_dim` = 0: the short convolution spans at least 1 token"
                        .into(),
                );
            }
            _ => uint32("linear_conv_kernel_dim").unwrap_or(4),
        };
        if let Some(d) = map.get("mamba_ssm_dtype").and_then(Value::as_str) {
            kinds.state_bytes =
                dtype_bytes(d).ok_or_else(|| format!("unknown mamba_ssm_dtype `{d}`"))?;
        }
    }
    Ok(kinds)
}

/// A compressed-tensors quantisation whose `ignore` list names the attention projections
/// of every one of the `layers` text layers (`…layers.N.self_attn.{q,k,v,o}_proj`; a vision
/// tower's layers do not count): vLLM runs those layers unquantised (`is_layer_skipped`).
fn attention_left_unquantised(q: Option<&Value>, layers: u32) -> bool {
    let Some(ignore) = q
        .filter(|q| q.get("quant_method").and_then(Value::as_str) == Some("compressed-tensors"))
        .and_then(|q| q.get("ignore"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    let mut covered = std::collections::BTreeSet::new();
    for name in ignore.iter().filter_map(Value::as_str) {
        if name.starts_with("vision") || name.contains(".vision") {
            continue;
        }
        let Some((before, proj)) = name.rsplit_once(".self_attn.") else {
            continue;
        };
        if !["q_proj", "k_proj", "v_proj", "o_proj"].contains(&proj) {
            continue;
        }
        if let Some(layer) = before
            .rsplit_once("layers.")
            .and_then(|(_, n)| n.parse::<u32>().ok())
        {
            covered.insert((layer, proj));
        }
    }
    layers > 0
        && covered.iter().filter(|(layer, _)| *layer < layers).count() as u64
            == 4 * u64::from(layers)
}

/// Weight bytes from the quantisation config or the model name (MODELS.md §2.5).
fn weight_bytes(id: &str, q: Option<&Value>) -> Option<f64> {
    if let Some(q) = q {
        if let Some(bits) = q.get("bits").and_then(Value::as_f64) {
            return Some(bits / 8.0);
        }
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
        if method == "fp8" {
            return Some(1.0);
        }
        if method == "compressed-tensors"
            && let Some(bits) = q
                .get("config_groups")
                .and_then(Value::as_object)
                .and_then(|g| g.values().next())
                .and_then(|g| g.get("weights"))
                .and_then(|w| w.get("num_bits"))
                .and_then(Value::as_f64)
        {
            return Some(bits / 8.0);
        }
    }
    let name = id.to_ascii_lowercase();
    if let Some(pos) = name.find('w')
        && let Some(d) = name[pos + 1..].chars().next().and_then(|c| c.to_digit(10))
        && name[pos + 2..].starts_with('a')
    {
        return Some(f64::from(d) / 8.0);
    }
    name.contains("fp8").then_some(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_quantised_checkpoint_leaves_in_bf16() {
        // Llama-4-Scout-FP8 (compressed-tensors): its `ignore` list names the attention
        // projections of all 48 text layers (and the vision tower's, which do not count).
        let scout = ModelConfig::bundled("llama-4-scout").unwrap();
        assert_eq!(
            (
                scout.weight_bytes,
                scout.attn_weight_bytes,
                scout.head_bytes
            ),
            (1.0, 2.0, 2.0)
        );
        // DeepSeek-V3's fp8 (block scales) quantises attention too; no model quantises its
        // embedding or LM head; an unquantised model is at its own bytes throughout.
        let v3 = ModelConfig::bundled("deepseek-v3").unwrap();
        assert_eq!((v3.attn_weight_bytes, v3.head_bytes), (1.0, 2.0));
        let llama = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
        assert_eq!(
            (
                llama.weight_bytes,
                llama.attn_weight_bytes,
                llama.head_bytes
            ),
            (2.0, 2.0, 2.0)
        );
        let q = |ignore: Vec<String>, method: &str| serde_json::json!({"quant_method": method, "ignore": ignore});
        let all: Vec<String> = (0..2)
            .flat_map(|l| {
                ["q_proj", "k_proj", "v_proj", "o_proj"]
                    .map(|p| format!("model.layers.{l}.self_attn.{p}"))
            })
            .collect();
        assert!(attention_left_unquantised(
            Some(&q(all.clone(), "compressed-tensors")),
            2
        ));
        // One projection missing, a third layer, another method, or only a vision tower's.
        assert!(!attention_left_unquantised(
            Some(&q(all[1..].to_vec(), "compressed-tensors")),
            2
        ));
        assert!(!attention_left_unquantised(
            Some(&q(all.clone(), "compressed-tensors")),
            3
        ));
        assert!(!attention_left_unquantised(Some(&q(all.clone(), "fp8")), 2));
        let vision = all.iter().map(|n| format!("vision_model.{n}")).collect();
        assert!(!attention_left_unquantised(
            Some(&q(vision, "compressed-tensors")),
            2
        ));
        // GPTQ's `lm_head: true` quantises the head with the rest.
        let gptq = r#"{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
            "quantization_config": {"quant_method": "gptq", "bits": 4, "lm_head": true}}"#;
        let m = ModelConfig::from_hf_json("gptq", gptq).unwrap();
        assert_eq!((m.weight_bytes, m.head_bytes), (0.5, 0.5));
    }

    #[test]
    fn a_checkpoint_with_a_vision_encoder_is_multimodal() {
        let text = |extra: &str| {
            format!(
                r#"{{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 128, "vocab_size": 100{extra}}}"#
            )
        };
        let multimodal = |extra: &str| {
            ModelConfig::from_hf_json("m", &text(extra))
                .unwrap()
                .multimodal
        };
        assert!(!multimodal(""));
        assert!(multimodal(r#", "vision_config": {"image_size": 336}"#));
        assert!(!multimodal(r#", "vision_config": null"#));
        assert!(multimodal(
            r#", "architectures": ["Gemma3ForConditionalGeneration"]"#
        ));
        assert!(!multimodal(r#", "architectures": ["LlamaForCausalLM", 7]"#));
        assert!(!multimodal(
            r#", "architectures": "Gemma3ForConditionalGeneration""#
        ));
        assert!(
            ModelConfig::bundled("llama-4-scout-17b-16e-instruct-fp8-dynamic")
                .unwrap()
                .multimodal
        );
        assert!(ModelConfig::bundled("gemma-3-27b-it").unwrap().multimodal);
        assert!(
            !ModelConfig::bundled("llama-3.1-8b-instruct")
                .unwrap()
                .multimodal
        );
    }

    #[test]
    fn bundled_generation_configs_give_the_nucleus_vllm_applies() {
        // Every bundled generation config belongs to a bundled model and parses.
        for (id, _) in BUNDLED_GENERATION_CONFIGS {
            assert!(BUNDLED_MODELS.iter().any(|(k, _)| k == id), "{id}");
            assert!(
                ModelConfig::bundled(id).unwrap().default_top_p.is_some(),
                "{id}"
            );
        }
        // Llama-2 and Llama-3.1-8B-Instruct publish top_p 0.9 (temperature 0.6); Mixtral's
        // config is not bundled, so it samples as vLLM's neutral defaults do.
        for id in ["llama-2-7b-hf", "llama-2-70b-hf", "llama-3.1-8b-instruct"] {
            assert_eq!(ModelConfig::bundled(id).unwrap().default_top_p, Some(0.9));
        }
        assert_eq!(ModelConfig::bundled("mixtral").unwrap().default_top_p, None);
        let m = || ModelConfig::bundled("llama-2-7b-hf").unwrap();
        // vLLM makes a temperature of 0 greedy, with top_p 1, whatever the file's top_p.
        let greedy = m()
            .with_generation_config(r#"{"temperature": 0.0, "top_p": 0.5}"#)
            .unwrap();
        assert_eq!(greedy.default_top_p, Some(1.0));
        let none = m()
            .with_generation_config(r#"{"bos_token_id": 1}"#)
            .unwrap();
        assert_eq!(none.default_top_p, None);
        for (bad, says) in [
            (r#"{"top_p": 1.5}"#, "`top_p` must be in (0, 1], got 1.5"),
            (r#"{"top_p": 0}"#, "`top_p` must be in (0, 1], got 0"),
            (r#"{"top_p": "high"}"#, "`top_p` must be a number ≥ 0"),
            (
                r#"{"temperature": -1}"#,
                "`temperature` must be a number ≥ 0",
            ),
            ("[1]", "expected a JSON object"),
            ("{", "not valid JSON"),
        ] {
            let e = m().with_generation_config(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn llama_3_1_8b_reads_as_published() {
        let m = ModelConfig::bundled("llama-3.1-8b").unwrap();
        assert_eq!(
            (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim),
            (32, 4096, 32, 8, 128)
        );
        assert_eq!(
            (m.ffn_dense, m.experts, m.act_bytes, m.weight_bytes),
            (14336, 0, 2.0, 2.0)
        );
        assert_eq!(m.vocab, 128256);
    }

    #[test]
    fn moe_and_quantised_configs_are_understood() {
        let mix = ModelConfig::bundled("mixtral-8x7b-v0.1").unwrap();
        assert_eq!(
            (mix.experts, mix.experts_per_token, mix.moe_layers()),
            (8, 2, 32)
        );
        let scout = ModelConfig::bundled("llama-4-scout").unwrap();
        assert_eq!(
            (scout.experts, scout.interleave_moe_step, scout.moe_layers()),
            (16, 1, 48)
        );
        // 109B parameters as published (17B active, 16 experts).
        let p = capacity::params(&scout);
        assert!((105e9..112e9).contains(&p), "{p}");
        assert_eq!(
            scout.ffn_dense, 16384,
            "intermediate_size_mlp for dense layers"
        );
        assert_eq!(scout.weight_bytes, 1.0, "fp8 from the name");
        let ds = ModelConfig::bundled("deepseek-v2-lite").unwrap();
        assert_eq!(
            (
                ds.moe_layers(),
                ds.ffn_expert,
                ds.ffn_shared,
                ds.kv_lora_rank
            ),
            (26, 1408, 2816, 512)
        );
        // DeepSeek-V3 as published: 671B parameters in the main model (the HuggingFace
        // checkpoint's 685B add the 14B multi-token-prediction module), MLA with a
        // 1,536-rank query; 163,840 tokens of context (YaRN: 4,096 × 40).
        let v3 = ModelConfig::bundled("deepseek-v3").unwrap();
        let p = capacity::params(&v3);
        assert!((666e9..676e9).contains(&p), "{p}");
        assert!(v3.is_mla() && v3.weight_bytes == 1.0);
        assert_eq!(v3.max_position_embeddings, 163_840);
        // DeepSeek-V2-Lite: 15.7B parameters as published.
        let p = capacity::params(&ds);
        assert!((15.5e9..15.9e9).contains(&p), "{p}");
        // Llama-3.1: `llama3` RoPE scaling is already in max_position_embeddings.
        let l70 = ModelConfig::bundled("llama-3.1-70b-instruct").unwrap();
        assert_eq!(l70.max_position_embeddings, 131_072);
        let glm = ModelConfig::bundled("glm-5.2-fp8").unwrap();
        assert_eq!(glm.weight_bytes, 1.0);
        assert_eq!(glm.head_dim, 192);
    }

    #[test]
    fn layer_kinds_come_from_layer_types_patterns_and_intervals() {
        let base = r#""num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4,
            "intermediate_size": 512, "vocab_size": 1000"#;
        let parse = |extra: &str| ModelConfig::from_hf_json("x", &format!("{{{base}, {extra}}}"));
        // GPT-OSS style: alternating, listed.
        let m = parse(
            r#""sliding_window": 128, "layer_types": ["sliding_attention", "full_attention",
               "sliding_attention", "full_attention", "sliding_attention", "full_attention",
               "sliding_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(
            (m.kinds.sliding, m.kinds.window, m.full_attention_layers()),
            (4, 128, 4)
        );
        // Gemma-3 style: every 4th full of 8 → 2 full, 6 sliding.
        let m = parse(r#""sliding_window": 512, "sliding_window_pattern": 4"#).unwrap();
        assert_eq!((m.kinds.sliding, m.full_attention_layers()), (6, 2));
        // A period longer than the model: no layer i has (i + 1) % 12 == 0, so all 8 slide
        // (this read as 1 full layer).
        let m = parse(r#""sliding_window": 512, "sliding_window_pattern": 12"#).unwrap();
        assert_eq!((m.kinds.sliding, m.full_attention_layers()), (8, 0));
        // `null` and 0 are no window (Mixtral's config, Qwen2-MoE's with it switched off).
        for none in ["null", "0"] {
            let m = parse(&format!(r#""sliding_window": {none}"#)).unwrap();
            assert!(!m.kinds.is_hybrid(), "{none}");
        }
        // Qwen2: a window given but switched off; switched on from layer 3.
        let m = parse(r#""sliding_window": 4096, "use_sliding_window": false"#).unwrap();
        assert!(!m.kinds.is_hybrid());
        let m =
            parse(r#""sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 3"#)
                .unwrap();
        assert_eq!(m.kinds.sliding, 5);
        // Qwen3-Next style: every 2nd full, the rest linear; fp32 state.
        let m = parse(
            r#""full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
               "linear_key_head_dim": 8, "linear_value_head_dim": 16, "mamba_ssm_dtype": "float32""#,
        )
        .unwrap();
        assert_eq!((m.kinds.linear, m.kinds.state_bytes), (4, 4.0));
        // conv: 3 × (2·2·8 + 4·16) = 288; recurrent: 4 × 8 × 16 = 512.
        assert_eq!(m.kinds.linear_state_elements(), (288.0, 512.0));
        // A kernel of 0 tokens was read as absent, the default 4.
        let e = parse(
            r#""full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
               "linear_key_head_dim": 8, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 0"#,
        )
        .unwrap_err();
        assert!(e.contains("`linear_conv_kernel_dim` = 0"), "{e}");
        // Every existing bundled model but the two hybrids has full attention only.
        for (id, _) in BUNDLED_MODELS {
            let hybrid = ModelConfig::bundled(id).unwrap().kinds.is_hybrid();
            assert_eq!(
                hybrid,
                id.starts_with("gemma-3")
                    || id.starts_with("qwen3-next")
                    || *id == "mistral-7b-v0.1",
                "{id}"
            );
        }
        for (extra, why) in [
            (r#""layer_types": ["full_attention"]"#, "names 1 layer but"),
            // Read as no window before: the model was served with full attention.
            (
                r#""sliding_window": -5"#,
                "`sliding_window` = -5 is not a whole number",
            ),
            (
                r#""sliding_window": 1024.5"#,
                "`sliding_window` = 1024.5 is not a whole number",
            ),
            (
                r#""num_key_value_heads": "8""#,
                "`num_key_value_heads` = \"8\" is not",
            ),
            (
                r#""sliding_window": 512, "sliding_window_pattern": 0"#,
                "`sliding_window_pattern` = 0",
            ),
            (
                r#""full_attention_interval": 0, "linear_num_value_heads": 4"#,
                "`full_attention_interval` = 0",
            ),
            (
                r#""layer_types": ["full_attention", "mamba", "a", "b", "c", "d", "e", "f"]"#,
                "has `mamba`",
            ),
            (
                r#""full_attention_interval": 2, "linear_num_value_heads": 4"#,
                "need `linear_num_key_heads`",
            ),
            (
                r#""index_topk": 64, "index_n_heads": 4, "index_head_dim": 128"#,
                "needs MLA (`kv_lora_rank`)",
            ),
            (
                r#""index_topk": 64, "kv_lora_rank": 64, "index_head_dim": 128"#,
                "needs `index_n_heads`",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert!(e.contains(why), "{extra}: {e}");
        }
    }

    #[test]
    fn a_unique_prefix_finds_a_model_and_an_ambiguous_one_does_not() {
        assert_eq!(ModelConfig::bundled("yi").unwrap().id, "yi-34b");
        assert!(ModelConfig::bundled("llama").is_none());
        assert!(ModelConfig::bundled("gpt-9").is_none());
    }

    #[test]
    fn bad_configs_give_messages() {
        assert!(
            ModelConfig::from_hf_json("x", "{")
                .unwrap_err()
                .contains("JSON")
        );
        assert!(
            ModelConfig::from_hf_json("x", "{\"hidden_size\": 8}")
                .unwrap_err()
                .contains("num_hidden_layers")
        );
        // Shapes no model loads with: each was read and served without a word.
        let llama = |edit: &str| {
            let mut c: serde_json::Value = serde_json::from_str(
                r#"{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}"#,
            )
            .unwrap();
            let (k, v) = edit.split_once('=').unwrap();
            c[k] = serde_json::from_str(v).unwrap();
            ModelConfig::from_hf_json("x", &c.to_string())
        };
        assert_eq!(llama("num_key_value_heads=8").unwrap().head_dim, 128);
        for (edit, said) in [
            (
                "num_key_value_heads=3",
                "`num_attention_heads` = 32 is not a multiple of the 3 KV heads",
            ),
            (
                "hidden_size=4097",
                "`hidden_size` = 4097 does not split into 32 heads (`num_attention_heads`) and there is no `head_dim`",
            ),
            (
                "num_local_experts=8",
                "", // 8 experts and no top-k: a dense reading is fine
            ),
            // Read as absent, each served something else and said nothing: a model of
            // attention alone, no LM head, untied embeddings, the unscaled context.
            ("intermediate_size=0", "missing or zero `intermediate_size`"),
            ("vocab_size=null", "missing or zero `vocab_size`"),
            (
                "tie_word_embeddings=\"yes\"",
                "`tie_word_embeddings` = \"yes\" is not true or false",
            ),
            (
                r#"rope_scaling={"rope_type": "linear", "factor": "big"}"#,
                "`rope_scaling.factor` = \"big\" is not a number > 0",
            ),
            (r#"rope_scaling={"rope_type": "linear", "factor": 2.0}"#, ""),
            (
                "rope_scaling=\"yarn\"",
                "`rope_scaling` = \"yarn\" is not an object",
            ),
            (
                r#"rope_scaling={"rope_type": 7, "factor": 2.0}"#,
                "`rope_scaling.rope_type` = 7 is not a name",
            ),
            (
                "torch_dtype=7",
                "`torch_dtype` = 7 is not a name (a string)",
            ),
            (
                "use_sliding_window=\"no\"",
                "`use_sliding_window` = \"no\" is not true or false",
            ),
            ("hidden_act=false", "`hidden_act` = false is not a name"),
            (
                "max_position_embeddings=-5",
                "`max_position_embeddings` = -5 is not a whole number ≥ 0",
            ),
            ("max_position_embeddings=null", ""),
            (
                "layer_types=\"sliding_attention\"",
                "`layer_types` = \"sliding_attention\" is not a list",
            ),
            (
                "quantization_config=\"fp8\"",
                "`quantization_config` = \"fp8\" is not an object",
            ),
            (
                r#"quantization_config={"quant_method": "awq", "bits": "x"}"#,
                "`quantization_config.bits` = \"x\" is not a number of bits from 1 to 32",
            ),
            (
                r#"quantization_config={"quant_method": "awq", "bits": 4}"#,
                "",
            ),
            ("tie_word_embeddings=null", ""),
        ] {
            match llama(edit) {
                Err(e) => assert!(!said.is_empty() && e.contains(said), "{edit}: {e}"),
                Ok(_) => assert!(said.is_empty(), "{edit} was accepted"),
            }
        }
        // A head size given explicitly needs no split.
        let c = r#"{"num_hidden_layers": 2, "hidden_size": 4097, "num_attention_heads": 32, "head_dim": 128,
            "intermediate_size": 512, "vocab_size": 1000}"#;
        assert_eq!(ModelConfig::from_hf_json("x", c).unwrap().head_dim, 128);
        let moe = r#"{"num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 32,
            "num_local_experts": 8, "num_experts_per_tok": 9}"#;
        assert!(
            ModelConfig::from_hf_json("x", moe)
                .unwrap_err()
                .contains("`num_experts_per_tok` = 9 is more than the model's 8 experts")
        );
    }
}
