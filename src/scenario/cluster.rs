//! `cluster`: instance groups, their hardware, limits, scheduler, latency model and
//! serving path, autoscaling and P/D roles.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The most instances a scenario may hold, autoscaled groups counted at their `max`.
pub const MAX_INSTANCES: u64 = 10_000;

/// The model-server instances, as groups of identical instances.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub groups: Vec<InstanceGroup>,
    /// Prefill/decode disaggregation: a prefill instance streams each layer's KV to the decode
    /// instance while its last prefill step still computes (LMCache / Mooncake layer-wise
    /// transfer), so only the part that outlasts the step shows. Needs the link and the
    /// destination blocks free when the step ends; otherwise the whole transfer follows it.
    /// Default false (vLLM's NIXL connector sends after the prefill).
    #[serde(default)]
    pub kv_transfer_layerwise: bool,
    /// Prefill/decode disaggregation: which instance sends the client its first token.
    /// `Decode` (default): vLLM's P/D proxy (NIXL connector, llm-d): the prefill instance
    /// answers the proxy with one token, which is dropped; the decode instance, handed the
    /// request, pulls the prompt's KV and samples the first token. `Prefill`: the prefill
    /// instance streams it and the decode instance carries on (DistServe, Splitwise).
    #[serde(default)]
    pub pd_first_token: PdFirstToken,
    /// A KV store shared by every instance of the cluster (LMCache remote backend, Mooncake
    /// Store): blocks leaving an instance's last local tier (or every computed prompt
    /// block, write-through) are written there, and any instance loads them on a prefix
    /// hit. Absent: none.
    #[serde(default)]
    pub kv_store: Option<KvStoreSpec>,
    /// Nodes, racks and the links between them, shared by the KV transfers that cross
    /// them (docs/topology.md). Absent: each instance's links are its own.
    #[serde(default)]
    pub topology: Option<crate::scenario::TopologySpec>,
}

/// The cluster's shared KV store (`cluster.kv_store`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KvStoreSpec {
    /// Capacity in blocks (of the groups' `block_size` tokens, every layer and KV head).
    pub blocks: u32,
    /// Fixed latency of one write, and of the loads of one step, µs. Required: it is the
    /// store's (its metadata service, its network hops); measure yours.
    pub latency_us: f64,
    /// Link of each GPU to the store, GB/s; an instance moves blocks over its `tp × pp`
    /// GPUs' links in parallel. Default 50 (InfiniBand NDR 400 Gb/s, one NIC per GPU as in a
    /// DGX H100). Not with `cluster.topology` (the store is reached over the NICs).
    #[serde(default)]
    pub link_gb_per_s: Option<f64>,
    /// `WriteBack` (default: a block is written when it leaves the instance's last local
    /// tier) or `WriteThrough` (every full prompt block as soon as it is computed).
    #[serde(default)]
    pub write: StoreWriteSpec,
    /// Which block makes room: `Lru` (default) or `Fifo`.
    #[serde(default)]
    pub eviction: Eviction,
}

/// When the shared store is written.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum StoreWriteSpec {
    #[default]
    WriteBack,
    WriteThrough,
}

/// Which block a full tier drops.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum Eviction {
    /// The least recently used (written or hit).
    #[default]
    Lru,
    /// The oldest written; hits do not refresh a block.
    Fifo,
}

impl Eviction {
    pub fn name(self) -> &'static str {
        match self {
            Eviction::Lru => "LRU",
            Eviction::Fifo => "FIFO",
        }
    }
}

/// Which instance of a disaggregated cluster sends a request's first token
/// (`cluster.pd_first_token`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum PdFirstToken {
    /// The prefill instance streams it; the decode instance sends the rest.
    Prefill,
    /// The decode instance: the prefill instance's token only answers the proxy that then
    /// hands the request to the decode instance (vLLM's `toy_proxy_server.py`, llm-d).
    #[default]
    Decode,
}

/// What the instances of a group do (prefill/decode disaggregation).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Prefill and decode on the same instance (plain vLLM).
    #[default]
    Mixed,
    /// Runs prompts only: after a request's prompt its KV blocks go to a decode instance
    /// (chosen by `policies.decode_routing`).
    Prefill,
    /// Receives prefilled requests and decodes them; never picked by `policies.routing`.
    Decode,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Mixed => "mixed",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// The largest price a scenario may give (per GPU-hour or per kWh, any currency): far above
/// any real one, and small enough that costs summed over a run stay finite.
pub const MAX_PRICE: f64 = 1e6;

/// `count` identical vLLM-style instances.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InstanceGroup {
    /// Label used in outputs. Default: `group<i>`.
    #[serde(default)]
    pub name: String,
    /// Number of instances. Default 1.
    #[serde(default = "one")]
    pub count: u32,
    /// Model: a bundled id (`servesim list models`) or a path to a HuggingFace
    /// `config.json` (relative to the scenario file). Needed by the roofline and
    /// trained-physics models and to derive `kv_blocks`.
    #[serde(default)]
    pub model: Option<String>,
    /// GPU: a bundled id or alias (`servesim list hardware`) or a path to a RON GPU profile.
    #[serde(default)]
    pub gpu: Option<String>,
    /// Tensor-parallel degree (GPUs per pipeline stage). Default 1.
    #[serde(default = "one")]
    pub tp: u32,
    /// Pipeline-parallel stages; up to `pp` micro-batches are in flight. Default 1.
    #[serde(default = "one")]
    pub pp: u32,
    /// Bandwidth of the link between pipeline stages, GB/s. Default 50.
    #[serde(default = "default_pp_link")]
    pub pp_link_gb_per_s: f64,
    /// Fixed latency of one stage-to-stage transfer, µs. Default 5.
    #[serde(default = "default_pp_latency")]
    pub pp_link_latency_us: u64,
    /// Fraction of GPU memory vLLM may use, for deriving `kv_blocks`. Default 0.9.
    #[serde(default = "default_util")]
    pub gpu_memory_utilization: f64,
    /// Weight data type as the group serves the model: `bf16`, `fp16`, `fp8`, `int8`,
    /// `int4` (`awq`, `gptq`). Default: the model's own (its `torch_dtype`, or its
    /// `quantization_config`). Sets the weights' memory, bytes read and GEMM rate
    /// (`model::dtype`).
    #[serde(default)]
    pub weight_dtype: Option<String>,
    /// KV-cache data type, vLLM's `--kv-cache-dtype`: `auto` (default: the model's),
    /// `bf16`, `fp16`, `fp8`, `fp8_e4m3`, `fp8_e5m2`. Sets the derived KV blocks and the KV
    /// bytes attention reads and transfers move.
    #[serde(default)]
    pub kv_cache_dtype: Option<String>,
    /// KV cache size per instance, in blocks. Default: derived from `model`, `gpu`, `tp`,
    /// `pp` and `gpu_memory_utilization`.
    #[serde(default)]
    pub kv_blocks: Option<u32>,
    /// Tokens per KV block. Default 16.
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// vLLM's `--disable-hybrid-kv-cache-manager`: a model's sliding-window layers keep
    /// every token's K and V like full attention (they still compute over their window).
    /// Default false: each keeps its window only (docs/hybrid-attention.md).
    #[serde(default)]
    pub disable_hybrid_kv_cache_manager: bool,
    /// CPU offload tier, in blocks (vLLM CPU offloading): prefix blocks evicted from the GPU
    /// are copied to host memory (LRU) and reloaded on a later prefix hit. Needs `model`.
    /// Default 0 (no tier).
    #[serde(default)]
    pub cpu_kv_blocks: u32,
    /// Host link of the CPU tier, GB/s per GPU. Default: the GPU profile's
    /// `physics.host_link_gb_per_s` (H100: 50).
    #[serde(default)]
    pub host_link_gb_per_s: Option<f64>,
    /// Fixed latency of the transfers of one step, µs. Default: the GPU profile's (10).
    #[serde(default)]
    pub host_link_latency_us: Option<f64>,
    /// A reload of a block offloaded less than this long ago counts as thrashing (s).
    /// Default 10.
    #[serde(default = "default_thrash_window")]
    pub cpu_kv_thrash_window_s: f64,
    /// Local NVMe tier below the CPU tier, in blocks (LMCache's local disk backend): blocks
    /// the CPU tier evicts are written there and loaded back on a prefix hit. Needs
    /// `cpu_kv_blocks` (disk I/O is staged through host memory) and `nvme_latency_us`.
    /// Default 0 (no tier).
    #[serde(default)]
    pub nvme_kv_blocks: u32,
    /// Read bandwidth of the NVMe tier, GB/s. Default 6.4 (Samsung PM1733 U.2, a PCIe 4.0
    /// data-centre drive: 6.4 GB/s sequential read on its datasheet).
    #[serde(default)]
    pub nvme_read_gb_per_s: Option<f64>,
    /// Fixed latency of the NVMe reads of one step, µs. Required with an NVMe tier: measure
    /// yours (fio, random reads of a block's size).
    #[serde(default)]
    pub nvme_latency_us: Option<f64>,
    /// Which block the NVMe tier drops when full: `Lru` (default) or `Fifo`.
    #[serde(default)]
    pub nvme_kv_eviction: Eviction,
    /// Most requests in the running batch (vLLM `max_num_seqs`). Default: `vllm serve`'s
    /// for the group's GPU with vLLM's serving path, 256 with the BLIS reading
    /// ([`batch_limits`]).
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    /// Token budget per step (vLLM `max_num_batched_tokens`). Default as `max_num_seqs`.
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// Largest prefill chunk per request and step; 0 = only the budget limits it. Default 0.
    #[serde(default)]
    pub long_prefill_token_threshold: u32,
    /// Longest sequence (prompt + output) the instance serves; longer requests are dropped.
    /// Default: the model's context length (`max_position_embeddings`, with RoPE scaling
    /// as vLLM reads it) when a model is given, else unlimited.
    #[serde(default)]
    pub max_model_len: Option<u32>,
    /// How steps are priced. Default (when `model` and `gpu` are given): `Roofline()`.
    #[serde(default)]
    pub latency: Option<LatencySpec>,
    /// The serving path around the steps (vLLM's scheduler mode and API server). Default:
    /// vLLM 0.15's (`preset: Vllm`) with `Roofline()`, nothing (`preset: Bare`, the BLIS
    /// reading) with every other latency model.
    #[serde(default)]
    pub engine: Option<EngineSpec>,
    /// Batch scheduler (`servesim list policies`, family `scheduler`). Default `vllm_v1`.
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    /// Its parameters.
    #[serde(default)]
    pub scheduler_params: BTreeMap<String, f64>,
    /// Price of one GPU-hour (any currency), for the cost outputs. Default 0; at most
    /// [`MAX_PRICE`].
    #[serde(default)]
    pub cost_per_gpu_hour: f64,
    /// Power figures of each GPU (idle, floor, max watts) for the energy accounts; default
    /// the GPU profile's (`assets/gpus.ron`). Needs the scenario's `energy` block.
    #[serde(default, deserialize_with = "crate::scenario::deserialize_power")]
    pub power: Option<crate::scenario::PowerFigures>,
    /// Autoscaling bounds and instance life cycle; absent, the group keeps `count`
    /// instances for the whole run.
    #[serde(default)]
    pub scaling: Option<ScalingSpec>,
    /// `Mixed` (default), `Prefill` or `Decode` (prefill/decode disaggregation).
    #[serde(default)]
    pub role: Role,
    /// KV transfer link of each GPU (P/D disaggregation), GB/s; an instance moves its KV
    /// over its `tp × pp` GPUs' links in parallel. Default 50 (InfiniBand NDR 400 Gb/s, one
    /// NIC per GPU as in a DGX H100). Not with `cluster.topology` (its links carry them).
    #[serde(default)]
    pub kv_link_gb_per_s: Option<f64>,
    /// Fixed cost of one KV transfer (handshake, completion notice), µs. Default 50 (BLIS's
    /// default).
    #[serde(default = "default_kv_link_latency")]
    pub kv_link_latency_us: f64,
    /// Speculative decoding (vLLM's `speculative_config`): a proposer drafts
    /// `num_speculative_tokens` tokens per running request, each step verifies them.
    /// Absent: none.
    #[serde(default)]
    pub speculative: Option<SpeculativeSpec>,
    /// Multi-LoRA serving (vLLM's `--enable-lora` with `--max-loras`, `--max-cpu-loras`,
    /// `--max-lora-rank`): requests naming an adapter (`workload.adapters`) run with it.
    /// Absent: the group serves the base model only.
    #[serde(default)]
    pub lora: Option<LoraSpec>,
    /// Expert parallelism with data-parallel attention for MoE models (vLLM
    /// `--enable-expert-parallel` with `--data-parallel-size`): an instance is `dp` attention
    /// ranks of `tp` GPUs, and every MoE layer's experts are spread whole over all `dp × tp`
    /// GPUs, reached by an all-to-all dispatch and combine (docs/expert-parallel.md).
    /// Absent: experts are sharded over the TP group like every other weight.
    #[serde(default)]
    pub expert_parallel: Option<ExpertParallelSpec>,
}

/// Wide expert parallelism on a group's instances (`cluster.groups[i].expert_parallel`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExpertParallelSpec {
    /// Data-parallel attention ranks (vLLM `--data-parallel-size`), each of `tp` GPUs with
    /// its own KV cache and its own `max_num_seqs` and `max_num_batched_tokens`. Default 1.
    #[serde(default = "one")]
    pub dp: u32,
    /// Routed tokens the busiest GPU's experts get over the mean, ≥ 1 (the inverse of the
    /// `balancedness` vLLM's EPLB logs). Default 1: perfectly balanced.
    #[serde(default = "default_one_f64")]
    pub imbalance: f64,
    /// All-to-all rate between GPUs of one node, GB/s per GPU and direction. Default: the
    /// rate the GPU's all-reduce reaches (`physics.allreduce_gb_per_s`, H100: 360).
    #[serde(default)]
    pub nvlink_gb_per_s: Option<f64>,
    /// All-to-all rate between nodes, GB/s per GPU. Default: 0.8 × the node's NIC
    /// (`cluster.topology.nic_gb_per_s`, else the GPU profile's node; H100: 40).
    #[serde(default)]
    pub rdma_gb_per_s: Option<f64>,
    /// How tokens reach their experts (vLLM `--all2all-backend`). Default
    /// `AllgatherReducescatter`, vLLM's default.
    #[serde(default)]
    pub all2all: All2All,
    /// Fixed cost of one dispatch or one combine, µs. Default: the all-reduce's fixed cost
    /// (`physics.allreduce_latency_us`, 8), plus the topology's `nic_latency_us` when the
    /// instance spans nodes.
    #[serde(default)]
    pub latency_us: Option<f64>,
}

/// vLLM's all-to-all backends for expert parallelism (`--all2all-backend`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum All2All {
    /// Every GPU gathers every rank's tokens and reduce-scatters the results back.
    #[default]
    AllgatherReducescatter,
    /// DeepEP's low-latency kernels: each token goes to each of its experts' GPUs directly
    /// (FP8 dispatch for FP8 models).
    DeepepLowLatency,
    /// DeepEP's high-throughput kernels: a token crosses to another node once and is
    /// forwarded there over NVLink.
    DeepepHighThroughput,
}

impl InstanceGroup {
    /// Data-parallel attention ranks per instance (1 without `expert_parallel`).
    pub fn dp(&self) -> u32 {
        self.expert_parallel.as_ref().map_or(1, |e| e.dp.max(1))
    }

    /// GPUs of one instance: `dp × tp × pp`.
    pub fn gpus(&self) -> u32 {
        self.dp()
            .saturating_mul(self.tp.max(1))
            .saturating_mul(self.pp.max(1))
    }
}

/// Multi-LoRA on a group's instances (`cluster.groups[i].lora`, docs/lora.md).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoraSpec {
    /// Adapters a step may use at once, each in a GPU slot (vLLM `max_loras`). Default 1.
    #[serde(default = "one")]
    pub max_loras: u32,
    /// Adapters kept in host memory (vLLM `max_cpu_loras`), at least `max_loras`. Default:
    /// `max_loras`, as vLLM.
    #[serde(default)]
    pub max_cpu_loras: Option<u32>,
    /// The largest rank an adapter may have; every GPU slot is sized for it (vLLM
    /// `max_lora_rank`). Default 16, as vLLM.
    #[serde(default = "default_max_lora_rank")]
    pub max_lora_rank: u32,
    /// Storage read rate of an adapter not in host memory, GB/s. Default 2, the rate
    /// weights load at (`scaling.load_gb_per_s`).
    #[serde(default = "default_lora_load_gb_per_s")]
    pub load_gb_per_s: f64,
    /// Fixed cost of reading an adapter from storage (opening its files, building it), µs.
    /// Default 0: not measured.
    #[serde(default)]
    pub load_latency_us: f64,
}

fn default_max_lora_rank() -> u32 {
    16
}
fn default_lora_load_gb_per_s() -> f64 {
    2.0
}

impl LoraSpec {
    /// `max_cpu_loras`, or its default (`max_loras`).
    pub fn cpu_slots(&self) -> u32 {
        self.max_cpu_loras.unwrap_or(self.max_loras)
    }
}

/// Speculative decoding on a group's instances (`cluster.groups[i].speculative`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeSpec {
    /// Who proposes the draft tokens.
    pub method: SpecMethod,
    /// Draft tokens proposed per request and step (vLLM `num_speculative_tokens`), 1–16.
    pub num_speculative_tokens: u32,
    /// How many drafts the target accepts. Default: vLLM's measured EAGLE-3 baseline for
    /// `Eagle3`, DeepSeek-V3's report for `Mtp`; the other methods need one.
    #[serde(default)]
    pub acceptance: Option<Acceptance>,
    /// Rows of an EAGLE-3 head's own LM head (its `draft_vocab_size`). Default 32,000.
    #[serde(default)]
    pub draft_vocab: Option<u32>,
    /// Acceptance per workload client (by client name), overriding `acceptance` for that
    /// client's requests: code and chat accept drafts at different rates.
    #[serde(default)]
    pub acceptance_by_client: BTreeMap<String, Acceptance>,
}

/// The proposer of a group's draft tokens (`speculative.method`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub enum SpecMethod {
    /// Prompt-lookup n-grams on the CPU (vLLM `ngram`): no GPU work, no memory.
    Ngram,
    /// An EAGLE-1/2 head: one decoder layer of the target's shape, sharing its embedding
    /// and LM head.
    Eagle,
    /// An EAGLE-3 head: one decoder layer with an LM head of its own over `draft_vocab`
    /// tokens.
    Eagle3,
    /// The model's own multi-token-prediction layer (DeepSeek-V3 style): one decoder layer
    /// of the target's kind, sharing its embedding and LM head.
    Mtp,
    /// A smaller model of its own (a bundled id or a `config.json` path), at the group's TP.
    DraftModel(String),
}

/// How many of a step's draft tokens the target accepts.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub enum Acceptance {
    /// Each draft is accepted with this probability given the ones before it were: the
    /// draft at position i is accepted with probability rateⁱ.
    Rate(f64),
    /// The probability that the draft at position i (1, 2, …) is accepted, as vLLM reports
    /// it (`spec_decode_num_accepted_tokens_per_pos` / `spec_decode_num_drafts`):
    /// non-increasing, one value per position up to `num_speculative_tokens`.
    PerPosition(Vec<f64>),
}

/// Default of `kv_link_gb_per_s` and of the store's `link_gb_per_s`: InfiniBand NDR 400 Gb/s,
/// one NIC per GPU (DGX H100 datasheet).
pub const DEFAULT_KV_LINK_GB_PER_S: f64 = 50.0;

impl InstanceGroup {
    /// `kv_cache_dtype` as vLLM's `--kv-cache-dtype` would be given: `auto` when left out.
    pub fn kv_cache_dtype_name(&self) -> &str {
        self.kv_cache_dtype.as_deref().unwrap_or("auto")
    }

    /// `kv_link_gb_per_s`, or its default.
    pub fn kv_link(&self) -> f64 {
        self.kv_link_gb_per_s.unwrap_or(DEFAULT_KV_LINK_GB_PER_S)
    }
}

impl KvStoreSpec {
    /// `link_gb_per_s`, or its default.
    pub fn link(&self) -> f64 {
        self.link_gb_per_s.unwrap_or(DEFAULT_KV_LINK_GB_PER_S)
    }
}
fn default_kv_link_latency() -> f64 {
    50.0
}

/// How an autoscaled group grows and shrinks. `count` is the number serving at t = 0.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScalingSpec {
    /// Fewest instances (0 = scale to zero, with cold starts). Default 0.
    #[serde(default)]
    pub min: u32,
    /// Most instances.
    pub max: u32,
    /// Node start before the model loads (s). Default 30.
    #[serde(default = "default_provision_s")]
    pub provision_s: f64,
    /// Model load time (s). Default: one GPU's share of the weights / `load_gb_per_s`
    /// (0 without a model).
    #[serde(default)]
    pub load_s: Option<f64>,
    /// Weight-load bandwidth per GPU (GB/s) for the derived load time. Default 2.
    #[serde(default = "default_load_gb_per_s")]
    pub load_gb_per_s: f64,
    /// Warm-up after loading (s): CUDA graphs, caches. Default 0.
    #[serde(default)]
    pub warmup_s: f64,
    /// Speed during warm-up as a fraction of normal (steps take 1/x as long). Default 1.
    #[serde(default = "default_one_f64")]
    pub warmup_speed: f64,
    /// Whether the router may send requests during warm-up. Default true.
    #[serde(default = "default_true")]
    pub routable_during_warmup: bool,
    /// This group's evaluation interval (s). Default: the policy's (`interval_s`).
    #[serde(default)]
    pub interval_s: Option<f64>,
    /// No scale-up within this long of the previous scale-up (s). Default 0.
    #[serde(default)]
    pub scale_up_cooldown_s: f64,
    /// No scale-down within this long of the previous scaling action (s). Default 0.
    #[serde(default)]
    pub scale_down_cooldown_s: f64,
}

fn default_scheduler() -> String {
    "vllm_v1".into()
}
fn default_provision_s() -> f64 {
    30.0
}
fn default_load_gb_per_s() -> f64 {
    2.0
}
fn default_one_f64() -> f64 {
    1.0
}
fn default_true() -> bool {
    true
}

pub(super) fn one() -> u32 {
    1
}
fn default_pp_link() -> f64 {
    50.0
}
fn default_pp_latency() -> u64 {
    5
}
fn default_util() -> f64 {
    0.9
}
pub(super) fn default_block_size() -> u32 {
    16
}
fn default_thrash_window() -> f64 {
    10.0
}
/// `max_num_seqs` when a group gives none and runs the BLIS reading, on a GPU under 70 GiB or
/// an A100 (`vllm serve`'s default there, and BLIS's).
pub const DEFAULT_MAX_NUM_SEQS: u32 = 256;
/// `max_num_batched_tokens` as [`DEFAULT_MAX_NUM_SEQS`].
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: u32 = 2048;
/// `vllm serve`'s `max_num_seqs` on a GPU of 70 GiB or more that is not an A100.
pub const LARGE_GPU_MAX_NUM_SEQS: u32 = 1024;
/// `vllm serve`'s `max_num_batched_tokens` there.
pub const LARGE_GPU_MAX_NUM_BATCHED_TOKENS: u32 = 8192;

/// Where a group's batch limits come from when it leaves one out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchDefaults {
    /// 256 requests and 2,048 tokens, nothing derived (BLIS's defaults).
    Blis,
    /// `vllm serve`'s (vLLM's `EngineArgs.get_batch_defaults` for the OpenAI server and
    /// `_set_default_max_num_seqs_and_batched_tokens_args`): 1,024 and 8,192 on a GPU of
    /// ≥ 70 GiB whose name has no "a100" (`large`), 256 and 2,048 otherwise; a default budget
    /// is at most `max_num_seqs` × `max_model_len`, a default `max_num_seqs` at most the budget.
    Vllm { large: bool },
}

impl BatchDefaults {
    /// vLLM's defaults on `gpu` (`memory_gib`, `id`).
    pub fn vllm(memory_gib: f64, id: &str) -> Self {
        BatchDefaults::Vllm {
            large: memory_gib >= 70.0 && !id.to_ascii_lowercase().contains("a100"),
        }
    }
}

/// The (`max_num_seqs`, `max_num_batched_tokens`) a group runs: the ones given, the others
/// from `defaults`, for sequences of at most `max_model_len` tokens.
pub fn batch_limits(
    seqs: Option<u32>,
    tokens: Option<u32>,
    defaults: BatchDefaults,
    max_model_len: Option<u32>,
) -> (u32, u32) {
    let (d_seqs, d_tokens, derive) = match defaults {
        BatchDefaults::Blis => (DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_NUM_BATCHED_TOKENS, false),
        BatchDefaults::Vllm { large: false } => {
            (DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_NUM_BATCHED_TOKENS, true)
        }
        BatchDefaults::Vllm { large: true } => (
            LARGE_GPU_MAX_NUM_SEQS,
            LARGE_GPU_MAX_NUM_BATCHED_TOKENS,
            true,
        ),
    };
    let running = seqs.unwrap_or(d_seqs);
    let budget = tokens.unwrap_or_else(|| match (derive, max_model_len) {
        (true, Some(len)) => (u64::from(running) * u64::from(len)).min(d_tokens.into()) as u32,
        _ => d_tokens,
    });
    let running = match seqs {
        None if derive => running.min(budget),
        _ => running,
    };
    (running, budget)
}

/// Which serving path a group's numbers start from (`engine.preset`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum EnginePreset {
    /// vLLM 0.14 and later: async scheduling, measured scheduler and API-server costs.
    #[default]
    Vllm,
    /// vLLM up to 0.13: the same costs, scheduling between steps.
    VllmSync,
    /// The step alone: no scheduler or API-server time (how BLIS's models read a step).
    Bare,
}

/// The serving path of a group's instances (`cluster.groups[i].engine`): a preset (or the vLLM
/// release it stands for) and any of its numbers overridden. See `latency::ServingPath` for
/// what each term is.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSpec {
    /// The numbers to start from. Default `Vllm`, or the preset `vllm` names.
    pub preset: Option<EnginePreset>,
    /// The vLLM release mimicked, e.g. "0.13.0": names the preset (see [`VllmRelease`]).
    pub vllm: Option<String>,
    /// vLLM's async scheduling (on by default since vLLM 0.14).
    pub async_scheduling: Option<bool>,
    /// Engine-core CPU per step, µs.
    pub schedule_us: Option<f64>,
    /// Engine-core CPU per request in a step, µs.
    pub schedule_us_per_request: Option<f64>,
    /// API server per request, µs.
    pub api_request_us: Option<f64>,
    /// API server per prompt token, µs.
    pub api_us_per_prompt_token: Option<f64>,
    /// API server per step with outputs, µs.
    pub api_step_us: Option<f64>,
    /// API server per streamed token, µs.
    pub api_us_per_output_token: Option<f64>,
    /// API server: how long a tokenizer micro-batch gathers prompts after its first, µs
    /// (0: each prompt tokenized at once).
    pub tokenizer_window_us: Option<f64>,
    /// API server: the most prompts in one tokenizer micro-batch.
    pub tokenizer_batch: Option<u32>,
}

/// A vLLM release (`engine.vllm`), as far as servesim's serving path tells releases apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct VllmRelease {
    /// Major version (0 for every vLLM release so far: 0.x.y).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version (0 when left out).
    pub patch: u32,
}

impl VllmRelease {
    /// The oldest release modelled: vLLM 0.11 removed the v0 engine; servesim's serving path is
    /// the v1 engine core's.
    pub const OLDEST: VllmRelease = VllmRelease::new(0, 11, 0);
    /// The first release with async scheduling on by default (vLLM 0.14.0, PR #27614).
    pub const ASYNC_DEFAULT: VllmRelease = VllmRelease::new(0, 14, 0);
    /// The newest release whose serving path the defaults were taken from (vLLM 0.15.1).
    pub const MEASURED: VllmRelease = VllmRelease::new(0, 15, 1);
    /// The first release without the API server's tokenizer micro-batch: vLLM PR #45759
    /// (opened 2026-06-16, the day after 0.23.0 was out) removed `AsyncMicrobatchTokenizer`,
    /// and integrations moving to 0.24.0 replaced it (ai-dynamo/dynamo PR #11076).
    pub const NO_TOKENIZER_BATCH: VllmRelease = VllmRelease::new(0, 24, 0);

    const fn new(major: u32, minor: u32, patch: u32) -> Self {
        VllmRelease {
            major,
            minor,
            patch,
        }
    }

    /// Reads "0.13.0", "0.14", "v0.15.1" or "0.15.1rc2" / "0.15.1+cu129" / "0.15.1.post1" (what
    /// follows the numbers is a build or pre-release label and is not told apart).
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let numbers = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .map_or(t, |end| &t[..end])
            .trim_end_matches('.');
        let parts: Vec<&str> = numbers.split('.').collect();
        let nums: Vec<u32> = parts.iter().filter_map(|p| p.parse().ok()).collect();
        if !(2..=3).contains(&parts.len()) || nums.len() != parts.len() {
            return Err(format!(
                "must be a vLLM release such as \"0.15.1\" or \"0.13\", got {text:?}"
            ));
        }
        Ok(VllmRelease::new(
            nums[0],
            nums[1],
            nums.get(2).copied().unwrap_or(0),
        ))
    }

    /// The preset this release runs: async scheduling from 0.14.0 on.
    pub fn preset(self) -> EnginePreset {
        if self >= Self::ASYNC_DEFAULT {
            EnginePreset::Vllm
        } else {
            EnginePreset::VllmSync
        }
    }
}

impl std::fmt::Display for VllmRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl EngineSpec {
    /// The preset the numbers start from: `preset`, else the one `vllm` names, else `Vllm`.
    pub fn resolved_preset(&self) -> EnginePreset {
        self.preset
            .or_else(|| {
                let release = VllmRelease::parse(self.vllm.as_deref()?).ok()?;
                Some(release.preset())
            })
            .unwrap_or_default()
    }

    /// The release `vllm` names, when it reads as one.
    pub fn release(&self) -> Option<VllmRelease> {
        VllmRelease::parse(self.vllm.as_deref()?).ok()
    }
}

impl InstanceGroup {
    /// The latency model: the one given, or `Roofline()`.
    pub fn latency(&self) -> std::borrow::Cow<'_, LatencySpec> {
        match &self.latency {
            Some(l) => std::borrow::Cow::Borrowed(l),
            None => std::borrow::Cow::Owned(LatencySpec::default_roofline()),
        }
    }

    /// The serving path's preset: the `engine`'s, or its latency model's default (vLLM's
    /// with `Roofline()`, the BLIS reading with every other model).
    pub fn engine_preset(&self) -> EnginePreset {
        match &self.engine {
            Some(e) => e.resolved_preset(),
            None if matches!(&*self.latency(), LatencySpec::Roofline { .. }) => EnginePreset::Vllm,
            None => EnginePreset::Bare,
        }
    }
}

impl LatencySpec {
    /// The numbers a `Roofline(...)` sets, by field name in declaration order, `alpha` aside
    /// (empty for any other model).
    pub fn roofline_numbers(&self) -> Vec<(&'static str, f64)> {
        let LatencySpec::Roofline {
            alpha: _,
            step_overhead_us: a,
            request_overhead_us: b,
            gemm_efficiency: c,
            attention_efficiency: d,
            bandwidth_efficiency: e,
            kv_read_efficiency: f,
            kernel_overhead_us: g,
            attention_overhead_us: h,
            allreduce_gb_per_s: i,
            allreduce_latency_us: j,
            elementwise_hidden_passes: k,
            elementwise_ffn_passes: l,
            moe_overlap_exponent: m,
            top_p: n,
        } = self
        else {
            return Vec::new();
        };
        let named = [
            ("step_overhead_us", a),
            ("request_overhead_us", b),
            ("gemm_efficiency", c),
            ("attention_efficiency", d),
            ("bandwidth_efficiency", e),
            ("kv_read_efficiency", f),
            ("kernel_overhead_us", g),
            ("attention_overhead_us", h),
            ("allreduce_gb_per_s", i),
            ("allreduce_latency_us", j),
            ("elementwise_hidden_passes", k),
            ("elementwise_ffn_passes", l),
            ("moe_overlap_exponent", m),
            ("top_p", n),
        ];
        named
            .into_iter()
            .filter_map(|(name, v)| v.map(|v| (name, v)))
            .collect()
    }

    /// `Roofline()` with every field at its default.
    pub fn default_roofline() -> Self {
        LatencySpec::Roofline {
            alpha: None,
            step_overhead_us: None,
            request_overhead_us: None,
            gemm_efficiency: None,
            attention_efficiency: None,
            bandwidth_efficiency: None,
            kv_read_efficiency: None,
            kernel_overhead_us: None,
            attention_overhead_us: None,
            allreduce_gb_per_s: None,
            allreduce_latency_us: None,
            elementwise_hidden_passes: None,
            elementwise_ffn_passes: None,
            moe_overlap_exponent: None,
            top_p: None,
        }
    }
}

/// Latency model of an instance group.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum LatencySpec {
    /// BLIS alpha/beta: step = β0 + β1·prefill tokens + β2·decode tokens (µs);
    /// queueing = α0 + α1·input tokens; α2 per output token.
    Blackbox { alpha: Vec<f64>, beta: Vec<f64> },
    /// servesim's physics roofline from the group's `model` and `gpu` (per-kernel GEMMs,
    /// attention, element-wise work, TP all-reduce, LM head, CPU overheads). Every field is
    /// optional: the efficiencies default to the GPU profile's `physics` block.
    Roofline {
        /// [α0, α1, α2] µs overheads placed as BLIS places them. Default zeros.
        #[serde(default)]
        alpha: Option<Vec<f64>>,
        /// CPU-side cost of each step, µs. Default 400.
        #[serde(default)]
        step_overhead_us: Option<f64>,
        /// CPU-side cost per scheduled request, µs. Default 5.
        #[serde(default)]
        request_overhead_us: Option<f64>,
        #[serde(default)]
        gemm_efficiency: Option<f64>,
        #[serde(default)]
        attention_efficiency: Option<f64>,
        #[serde(default)]
        bandwidth_efficiency: Option<f64>,
        /// What a decode's paged KV read reaches, as a fraction of peak bandwidth. Default:
        /// `bandwidth_efficiency`.
        #[serde(default)]
        kv_read_efficiency: Option<f64>,
        #[serde(default)]
        kernel_overhead_us: Option<f64>,
        #[serde(default)]
        attention_overhead_us: Option<f64>,
        #[serde(default)]
        allreduce_gb_per_s: Option<f64>,
        #[serde(default)]
        allreduce_latency_us: Option<f64>,
        #[serde(default)]
        elementwise_hidden_passes: Option<f64>,
        #[serde(default)]
        elementwise_ffn_passes: Option<f64>,
        #[serde(default)]
        moe_overlap_exponent: Option<f64>,
        /// The nucleus the requests sample with: below 1, every step sorts its logits
        /// (vLLM 0.15's PyTorch sampler). Default: the model's `generation_config.json`, as
        /// vLLM's `--generation-config auto` applies it to requests that give none; else 1.
        #[serde(default)]
        top_p: Option<f64>,
    },
    /// BLIS's roofline (MODELS.md §2.3), for conformance: one max(compute × MFU, memory)
    /// crossover, 2-matrix FFN, no communication or overheads; optional [α0, α1, α2].
    BlisRoofline {
        #[serde(default)]
        alpha: Option<Vec<f64>>,
    },
    /// BLIS trained-physics from the group's `model` and `gpu`; coefficients default to the
    /// bundled BLIS "iter29" set.
    TrainedPhysics {
        #[serde(default)]
        alpha: Option<Vec<f64>>,
        #[serde(default)]
        beta: Option<Vec<f64>>,
    },
    /// RouteSim piecewise-linear throughput curves.
    PiecewiseLinear {
        #[serde(default = "pl_prefill")]
        prefill_tokens_per_s: f64,
        #[serde(default = "pl_decode1")]
        decode_tokens_per_s_at_1: f64,
        #[serde(default = "pl_sat_batch")]
        saturation_batch: u32,
        #[serde(default = "pl_sat")]
        saturation_tokens_per_s: f64,
    },
    /// Step times interpolated from a measured CSV (path relative to the scenario).
    MeasuredTable {
        file: String,
        #[serde(default)]
        extrapolation: Extrapolation,
    },
    /// A latency model registered by name (`app.add_policy::<latency::LatencyModels>(…)`,
    /// `servesim list policies`), with numeric parameters; it is built from them and the
    /// group's model, GPU, tp and pp.
    Named {
        name: String,
        #[serde(default)]
        params: BTreeMap<String, f64>,
    },
}

/// RouteSim's default throughput curves: what `PiecewiseLinear` fields left out stand for.
pub mod piecewise_defaults {
    pub const PREFILL_TOKENS_PER_S: f64 = 50_000.0;
    pub const DECODE_TOKENS_PER_S_AT_1: f64 = 80.0;
    pub const SATURATION_BATCH: u32 = 64;
    pub const SATURATION_TOKENS_PER_S: f64 = 3_200.0;
}
fn pl_prefill() -> f64 {
    piecewise_defaults::PREFILL_TOKENS_PER_S
}
fn pl_decode1() -> f64 {
    piecewise_defaults::DECODE_TOKENS_PER_S_AT_1
}
fn pl_sat_batch() -> u32 {
    piecewise_defaults::SATURATION_BATCH
}
fn pl_sat() -> f64 {
    piecewise_defaults::SATURATION_TOKENS_PER_S
}

/// What to do with a batch shape outside a measured table's grid
/// (`latency: MeasuredTable(extrapolation: …)`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum Extrapolation {
    /// Stop the run with an error naming the shape and the table's range (default).
    #[default]
    Error,
    /// Use the nearest edge of the grid.
    Clamp,
    /// Extend the outermost segment linearly (never below 1 µs).
    Linear,
}

#[cfg(test)]
mod tests {
    use super::{BatchDefaults, batch_limits};

    const LARGE: BatchDefaults = BatchDefaults::Vllm { large: true };
    const SMALL: BatchDefaults = BatchDefaults::Vllm { large: false };

    #[test]
    fn vllm_serve_takes_larger_batches_on_large_gpus_but_a100s() {
        assert_eq!(BatchDefaults::vllm(80.0, "H100"), LARGE);
        assert_eq!(BatchDefaults::vllm(178.8, "B200"), LARGE);
        assert_eq!(BatchDefaults::vllm(80.0, "A100-80"), SMALL);
        assert_eq!(BatchDefaults::vllm(48.0, "L40S"), SMALL);
        assert_eq!(BatchDefaults::vllm(70.0, "x"), LARGE);
        assert_eq!(BatchDefaults::vllm(69.9, "x"), SMALL);
    }

    #[test]
    fn limits_left_out_take_the_defaults_and_given_ones_stay() {
        assert_eq!(batch_limits(None, None, LARGE, Some(4096)), (1024, 8192));
        assert_eq!(batch_limits(None, None, SMALL, Some(4096)), (256, 2048));
        assert_eq!(
            batch_limits(None, None, BatchDefaults::Blis, None),
            (256, 2048)
        );
        assert_eq!(
            batch_limits(Some(128), Some(512), LARGE, Some(4096)),
            (128, 512)
        );
        assert_eq!(batch_limits(Some(64), None, LARGE, None), (64, 8192));
    }

    #[test]
    fn a_default_budget_stays_within_the_longest_batch_and_a_default_batch_within_the_budget() {
        // vLLM: budget = min(8192, max_num_seqs × max_model_len); then max_num_seqs =
        // min(1024, budget) when it was left out.
        assert_eq!(batch_limits(None, None, LARGE, Some(4)), (1024, 4096));
        assert_eq!(batch_limits(Some(2), None, LARGE, Some(100)), (2, 200));
        assert_eq!(batch_limits(None, Some(512), LARGE, None), (512, 512));
        assert_eq!(batch_limits(None, Some(100), SMALL, None), (100, 100));
        // BLIS derives nothing: a budget below max_num_seqs stays (and is warned of).
        assert_eq!(
            batch_limits(None, Some(100), BatchDefaults::Blis, Some(4)),
            (256, 100)
        );
    }
}
