//! The scenario schema: plain data types every concern reads.
//!
//! One [`Scenario`] root. Every struct denies unknown fields; optional fields have the
//! defaults documented on them (and in docs/scenarios.md). Reading a file, `--set`
//! overrides and validation are the [`loader`](crate::loader)'s.

mod problem;

pub use problem::{Problem, did_you_mean, finite_positive};

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

/// A whole simulation: cluster, policies, workload, outputs.
#[derive(Clone, Debug, Deserialize, PartialEq, bevy_ecs::prelude::Resource)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free-form name, echoed in the summary. Default: the file stem.
    #[serde(default)]
    pub name: String,
    /// Master seed of every random stream. Default 42.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Stop simulating at this simulated time (seconds). Default: run until every request
    /// has finished.
    #[serde(default)]
    pub horizon_s: Option<f64>,
    pub cluster: ClusterSpec,
    #[serde(default)]
    pub policies: PolicySpec,
    pub workload: WorkloadSpec,
    #[serde(default)]
    pub outputs: OutputSpec,
    /// Guards that keep a run's memory bounded.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// Directory that relative paths in the scenario are resolved against (the scenario
    /// file's directory; not a RON field).
    #[serde(skip)]
    pub base_dir: std::path::PathBuf,
    /// The scenario file itself, when loaded from one (not a RON field).
    #[serde(skip)]
    pub source: Option<std::path::PathBuf>,
    /// What the loader worked out from the groups (their models, tables and latency
    /// models), so that a run does not read their files again (not a RON field).
    #[serde(skip)]
    pub memo: Memo,
}

/// A slot per instance group for what the loader resolved from it, opaque to the schema.
/// Clones share it; it never makes two scenarios unequal.
#[derive(Clone, Default)]
pub struct Memo(pub Arc<Mutex<Vec<Option<MemoSlot>>>>);

/// What the loader keeps of one group.
pub type MemoSlot = Arc<dyn Any + Send + Sync>;

impl PartialEq for Memo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for Memo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Memo")
    }
}

impl Scenario {
    /// The labels a scenario's workload will use, in the order requests index them.
    pub fn labels(&self) -> crate::labels::Labels {
        let s = self;
        let mut l = crate::labels::Labels {
            groups: s
                .cluster
                .groups
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    if g.name.is_empty() {
                        format!("group{i}")
                    } else {
                        g.name.clone()
                    }
                })
                .collect(),
            ..Default::default()
        };
        for (i, c) in s.workload.clients.iter().enumerate() {
            let name = if c.name.is_empty() {
                format!("client{i}")
            } else {
                c.name.clone()
            };
            l.tenant(c.tenant.as_deref().unwrap_or(&name));
            l.slo_class(c.slo_class.as_deref().unwrap_or("standard"));
        }
        for (i, t) in s.workload.traces.iter().enumerate() {
            l.tenant(t.tenant.as_deref().unwrap_or(&format!("trace{i}")));
            l.slo_class(t.slo_class.as_deref().unwrap_or("standard"));
        }
        if s.workload.inference_perf.is_some() {
            l.tenant(crate::labels::INFERENCE_PERF_TENANT);
            l.slo_class("standard");
        }
        l
    }

    /// Every file the scenario reads (itself included), by field path, as opened.
    pub fn input_files(&self) -> Vec<(String, std::path::PathBuf)> {
        let base = &self.base_dir;
        let mut files = Vec::new();
        if let Some(s) = &self.source {
            files.push(("the scenario".to_string(), s.clone()));
        }
        for (i, g) in self.cluster.groups.iter().enumerate() {
            if let Some(LatencySpec::MeasuredTable { file, .. }) = &g.latency {
                files.push((format!("cluster.groups[{i}].latency.file"), base.join(file)));
            }
        }
        for (i, t) in self.workload.traces.iter().enumerate() {
            files.push((format!("workload.traces[{i}].file"), base.join(&t.file)));
        }
        for (i, c) in self.workload.clients.iter().enumerate() {
            let turns = c.session.as_ref().map(|s| ("session.turns", &s.turns));
            for (field, spec) in [
                ("input_tokens", &c.input_tokens),
                ("output_tokens", &c.output_tokens),
            ]
            .into_iter()
            .chain(turns)
            {
                if let LengthSpec::Empirical { file, .. } = spec {
                    files.push((
                        format!("workload.clients[{i}].{field}.file"),
                        base.join(file),
                    ));
                }
            }
        }
        files
    }
}

fn default_seed() -> u64 {
    42
}

/// Guards that keep a run's memory bounded whatever the scenario asks for.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSpec {
    /// Largest estimated memory of the KV block tables (GPU and CPU tiers, all instances),
    /// GiB; a scenario above it is rejected up front. Default 16.
    pub max_memory_gib: f64,
    /// Requests in the system at once (arrived, not yet finished) at which the run stops
    /// with a diagnosis (exit 1): an overloaded cluster otherwise grows its queues until
    /// memory runs out. Default 2,000,000.
    pub max_in_flight: u64,
    /// Requests an instance's wait queue may hold; one arriving at a full queue is
    /// rejected (reason `queue_full`). Default: unbounded, as vLLM (the summary warns when a
    /// queue passes 10,000).
    pub max_waiting_per_instance: Option<u32>,
    /// An `AllAtZero` batch enters the cluster at most this many requests at a time; the
    /// rest wait at the client (their arrival is still t = 0) and enter one by one as the
    /// batch's requests finish, so a batch of any size costs memory for this many.
    /// Default 65,536.
    pub offline_batch_window: u64,
}

impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec {
            max_memory_gib: 16.0,
            max_in_flight: 2_000_000,
            max_waiting_per_instance: None,
            offline_batch_window: 65_536,
        }
    }
}

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
}

/// What the instances of a group do (prefill/decode disaggregation).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Prefill and decode on the same instance (plain vLLM).
    #[default]
    Mixed,
    /// Runs prompts only: after a request's first token its KV blocks go to a decode
    /// instance (chosen by `policies.decode_routing`).
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
    /// KV cache size per instance, in blocks. Default: derived from `model`, `gpu`, `tp`,
    /// `pp` and `gpu_memory_utilization`.
    #[serde(default)]
    pub kv_blocks: Option<u32>,
    /// Tokens per KV block. Default 16.
    #[serde(default = "default_block_size")]
    pub block_size: u32,
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
    /// Most requests in the running batch (vLLM `max_num_seqs`). Default 256.
    #[serde(default = "default_max_num_seqs")]
    pub max_num_seqs: u32,
    /// Token budget per step (vLLM `max_num_batched_tokens`). Default 2048.
    #[serde(default = "default_max_num_batched_tokens")]
    pub max_num_batched_tokens: u32,
    /// Largest prefill chunk per request and step; 0 = only the budget limits it. Default 0.
    #[serde(default)]
    pub long_prefill_token_threshold: u32,
    /// Longest sequence (prompt + output) the instance serves; longer requests are dropped.
    /// Default: the model's context length (`max_position_embeddings` × rope factor) when a
    /// model is given, else unlimited.
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
    /// Price of one GPU-hour (any currency), for the cost outputs. Default 0.
    #[serde(default)]
    pub cost_per_gpu_hour: f64,
    /// Autoscaling bounds and instance life cycle; absent, the group keeps `count`
    /// instances for the whole run.
    #[serde(default)]
    pub scaling: Option<ScalingSpec>,
    /// `Mixed` (default), `Prefill` or `Decode` (prefill/decode disaggregation).
    #[serde(default)]
    pub role: Role,
    /// KV transfer link of each GPU (P/D disaggregation), GB/s; an instance moves its KV
    /// over its `tp × pp` GPUs' links in parallel. Default 50 (InfiniBand NDR 400 Gb/s, one
    /// NIC per GPU as in a DGX H100).
    #[serde(default = "default_kv_link")]
    pub kv_link_gb_per_s: f64,
    /// Fixed cost of one KV transfer (handshake, completion notice), µs. Default 50 (BLIS's
    /// default).
    #[serde(default = "default_kv_link_latency")]
    pub kv_link_latency_us: f64,
}

fn default_kv_link() -> f64 {
    50.0
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

fn one() -> u32 {
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
fn default_block_size() -> u32 {
    16
}
fn default_thrash_window() -> f64 {
    10.0
}
fn default_max_num_seqs() -> u32 {
    256
}
fn default_max_num_batched_tokens() -> u32 {
    2048
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

/// The serving path of a group's instances (`cluster.groups[i].engine`): a preset and any
/// of its numbers overridden. See `latency::ServingPath` for what each term is.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSpec {
    /// The numbers to start from. Default `Vllm`.
    pub preset: EnginePreset,
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
}

impl InstanceGroup {
    /// The latency model: the one given, or `Roofline()`.
    pub fn latency(&self) -> std::borrow::Cow<'_, LatencySpec> {
        match &self.latency {
            Some(l) => std::borrow::Cow::Borrowed(l),
            None => std::borrow::Cow::Owned(LatencySpec::default_roofline()),
        }
    }
}

impl LatencySpec {
    /// `Roofline()` with every field at its default.
    pub fn default_roofline() -> Self {
        LatencySpec::Roofline {
            alpha: None,
            step_overhead_us: None,
            request_overhead_us: None,
            gemm_efficiency: None,
            attention_efficiency: None,
            bandwidth_efficiency: None,
            kernel_overhead_us: None,
            attention_overhead_us: None,
            allreduce_gb_per_s: None,
            allreduce_latency_us: None,
            elementwise_hidden_passes: None,
            elementwise_ffn_passes: None,
            moe_overlap_exponent: None,
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

/// Cluster-level policies, by catalog name (`servesim list policies`), with parameters.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySpec {
    /// Admission policy. Default `always_admit`.
    pub admission: String,
    pub admission_params: BTreeMap<String, f64>,
    /// Request priority policy. Default `constant`.
    pub priority: String,
    pub priority_params: BTreeMap<String, f64>,
    /// Instance wait-queue order. Default `fcfs`.
    pub scheduling: String,
    /// Which running request is preempted when KV runs out. Default `Tail`.
    pub preemption: PreemptionOrder,
    /// Routing policy. Default `round_robin`.
    pub routing: String,
    pub routing_params: BTreeMap<String, f64>,
    /// Routing policy that picks the decode instance of a prefilled request (P/D
    /// disaggregation; any routing policy, over `Decode` instances only). Default `least_kv`.
    pub decode_routing: String,
    pub decode_routing_params: BTreeMap<String, f64>,
    /// Autoscaling policy. Default `static`.
    pub autoscale: String,
    pub autoscale_params: BTreeMap<String, f64>,
    /// Delay between arrival and the admission decision (µs). Default 0.
    pub admission_latency_us: u64,
    /// Delay between the routing decision and reaching the instance (µs). Default 0.
    pub routing_latency_us: u64,
    /// How often routers re-read instance-reported signals (µs); 0 = live. Default 0.
    pub snapshot_refresh_interval_us: u64,
    /// SLO classes: priority and latency targets for attainment (goodput).
    pub slo_classes: Vec<SloClassSpec>,
}

impl Default for PolicySpec {
    fn default() -> Self {
        PolicySpec {
            admission: "always_admit".into(),
            admission_params: BTreeMap::new(),
            priority: "constant".into(),
            priority_params: BTreeMap::new(),
            scheduling: "fcfs".into(),
            preemption: PreemptionOrder::Tail,
            routing: "round_robin".into(),
            routing_params: BTreeMap::new(),
            decode_routing: "least_kv".into(),
            decode_routing_params: BTreeMap::new(),
            autoscale: "static".into(),
            autoscale_params: BTreeMap::new(),
            admission_latency_us: 0,
            routing_latency_us: 0,
            snapshot_refresh_interval_us: 0,
            slo_classes: Vec::new(),
        }
    }
}

/// Preemption victim choice.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum PreemptionOrder {
    /// The tail of the running batch (vLLM).
    #[default]
    Tail,
    /// The lowest-priority running request (latest arrival among equals).
    Priority,
}

/// An SLO class: its priority and its latency targets (unset = no target).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SloClassSpec {
    pub name: String,
    /// Default: critical 4, standard 3, batch −1, sheddable −2, background −3, others 3.
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Target on the request's mean inter-token latency.
    #[serde(default)]
    pub itl_ms: Option<f64>,
    #[serde(default)]
    pub e2e_ms: Option<f64>,
}

/// The traffic: synthetic clients and/or trace replays, and when to stop generating.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Stop after this many requests in total (all sources, session turns included).
    /// Default: unlimited.
    #[serde(default)]
    pub num_requests: Option<u64>,
    /// Stop generating arrivals after this simulated time (seconds). Default: unlimited.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Total rate shared by clients that give `rate_share` instead of `rate_per_s`.
    #[serde(default)]
    pub aggregate_rate_per_s: Option<f64>,
    /// Synthetic traffic sources.
    #[serde(default)]
    pub clients: Vec<ClientSpec>,
    /// Recorded traces to replay (streamed from disk).
    #[serde(default)]
    pub traces: Vec<TraceSpec>,
    /// An inference-perf load: staged rates over a shared-prefix user population.
    #[serde(default)]
    pub inference_perf: Option<InferencePerfSpec>,
}

/// inference-perf's staged `shared_prefix` load (the generator behind BLIS's training and
/// golden data): `num_unique_system_prompts` × `num_users_per_system_prompt` users, each
/// request = the user's system prompt (`system_prompt_len` tokens, shared by the prompt's
/// users) + a new question (`question_len` tokens); exactly ⌊rate × duration⌋ requests per
/// stage.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InferencePerfSpec {
    /// Stages run back to back.
    pub stages: Vec<Stage>,
    pub shared_prefix: SharedPrefixSpec,
    /// How the load is read. Default `OpenLoop` (what inference-perf sends).
    #[serde(default)]
    pub reading: InferencePerfReading,
    /// Client timeout of every request (seconds). Default: none (`Blis` reading: 300 s, as
    /// BLIS gives session clients).
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// inference-perf's `data.shared_prefix` block (same field names).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixSpec {
    pub num_unique_system_prompts: u32,
    pub num_users_per_system_prompt: u32,
    pub system_prompt_len: u32,
    pub question_len: u32,
    pub output_len: u32,
    /// Users are multi-turn chat sessions (no context accumulation, as inference-perf).
    #[serde(default)]
    pub enable_multi_turn_chat: bool,
}

/// Two readings of an inference-perf load.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum InferencePerfReading {
    /// inference-perf itself: each stage's timer sends exactly ⌊rate × duration⌋ requests
    /// at the stage rate (`Constant`: normalised-exponential gaps, the last at the stage end;
    /// `Poisson`: exponential gaps); requests go to the users in turn.
    #[default]
    OpenLoop,
    /// `OpenLoop` with Poisson stage timers.
    OpenLoopPoisson,
    /// BLIS's expansion (`sim/workload/inference_perf.go`): with multi-turn chat, every user of
    /// every stage is a closed-loop session that starts one exponential gap (at rate / users)
    /// into its stage and sends its share of ⌊rate × duration⌋ requests, each
    /// ⌊users / rate⌋ s after the previous one completed; without it, each user sends its
    /// share with normalised-exponential gaps (one stage) or Poisson arrivals (several).
    Blis,
}

/// One synthetic traffic source (a client, tenant or user population).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// Label. Default: `client<i>`.
    #[serde(default)]
    pub name: String,
    /// Tenant the requests belong to. Default: the client's name.
    #[serde(default)]
    pub tenant: Option<String>,
    /// SLO class of the requests. Default `standard`.
    #[serde(default)]
    pub slo_class: Option<String>,
    /// Request priority (higher = more important). Default 0.
    #[serde(default)]
    pub priority: i32,
    /// Mean arrival rate (requests/s; sessions/s for session clients).
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// Share of `workload.aggregate_rate_per_s` (normalised over the clients that give one).
    #[serde(default)]
    pub rate_share: Option<f64>,
    /// Arrival process. Default `Poisson`.
    #[serde(default)]
    pub arrival: ArrivalSpec,
    /// Prompt tokens, in addition to any shared prefix (per turn for sessions).
    pub input_tokens: LengthSpec,
    /// Output tokens (each request generates exactly this many, at least 1).
    pub output_tokens: LengthSpec,
    /// Tokens of the system prompt shared by every request of a prefix group. Default 0.
    #[serde(default)]
    pub shared_prefix_tokens: u32,
    /// Number of prefix groups the client's requests are spread over (uniformly at random),
    /// each with its own system prompt. Default 1.
    #[serde(default = "one")]
    pub prefix_groups: u32,
    /// Base id of the client's prefix groups; clients with the same base share prompts.
    /// Default: groups of their own.
    #[serde(default)]
    pub prefix_group: Option<u32>,
    /// Reuse a fixed pool of this many whole prompts in rotation (same content and length
    /// each time round), so repeats hit the prefix cache in full. Default: every prompt new.
    #[serde(default)]
    pub prompt_pool: Option<u32>,
    /// Multi-turn sessions: each arrival starts a session of several turns.
    #[serde(default)]
    pub session: Option<SessionSpec>,
    /// A request not finished this long after its arrival is abandoned (seconds).
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// Multi-turn conversations (closed loop).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Turns per session.
    pub turns: LengthSpec,
    /// Time between a turn's completion and the next turn's arrival (seconds).
    #[serde(default)]
    pub think_time_s: f64,
    /// Each turn's prompt = previous prompt + previous output + the new question.
    /// Default false (each turn is the shared prefix + a new question).
    #[serde(default)]
    pub accumulate: bool,
}

/// Inter-arrival process.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum ArrivalSpec {
    /// Exponential inter-arrival times.
    #[default]
    Poisson,
    /// Evenly spaced, 1/rate apart.
    Constant,
    /// Gamma inter-arrival times with this coefficient of variation (cv > 1 is bursty).
    Gamma { cv: f64 },
    /// Weibull inter-arrival times with this coefficient of variation.
    Weibull { cv: f64 },
    /// Poisson at the client's rate during `on_s`, silent for `off_s`, repeating.
    OnOff { on_s: f64, off_s: f64 },
    /// `count` requests all at t = 0 (offline batch).
    AllAtZero { count: u64 },
    /// Poisson stages run back to back; with `exact`, exactly round(rate × duration)
    /// arrivals are placed uniformly at random in each stage.
    Staged {
        stages: Vec<Stage>,
        #[serde(default)]
        exact: bool,
    },
    /// inference-perf's constant load timer per stage: exactly ⌊rate × duration⌋ arrivals
    /// whose gaps are exponential draws normalised to sum to the stage duration (the last
    /// arrival falls on the stage end).
    ConstantTimer { stages: Vec<Stage> },
}

/// One stage of a staged load.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub rate_per_s: f64,
    pub duration_s: f64,
}

/// A token-length distribution. Samples are whole tokens.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum LengthSpec {
    /// Always this many tokens.
    Constant(u32),
    /// Uniform over [min, max], inclusive.
    Uniform { min: u32, max: u32 },
    /// Normal(mean, stdev), clamped to [min, max], then rounded (BLIS gaussian).
    Normal {
        mean: f64,
        stdev: f64,
        min: u32,
        max: u32,
    },
    /// exp(N(mu, sigma)), clamped to [min, max], rounded.
    LogNormal {
        mu: f64,
        sigma: f64,
        #[serde(default)]
        min: u32,
        #[serde(default = "max_tokens")]
        max: u32,
    },
    /// Exponential with this mean, clamped to [min, max], rounded.
    Exponential {
        mean: f64,
        #[serde(default)]
        min: u32,
        #[serde(default = "max_tokens")]
        max: u32,
    },
    /// Zipf over 1..=max with exponent s: P(k) ∝ k^−s.
    Zipf { max: u32, exponent: f64 },
    /// Values drawn uniformly from a column of a CSV file (path relative to the scenario).
    Empirical { file: String, column: String },
}

fn max_tokens() -> u32 {
    u32::MAX
}

impl LengthSpec {
    /// Smallest value the distribution can produce (0 for Empirical, unknown up front).
    pub fn min_value(&self) -> u32 {
        match *self {
            LengthSpec::Constant(n) => n,
            LengthSpec::Uniform { min, .. }
            | LengthSpec::Normal { min, .. }
            | LengthSpec::LogNormal { min, .. }
            | LengthSpec::Exponential { min, .. } => min,
            LengthSpec::Zipf { .. } => 1,
            LengthSpec::Empirical { .. } => 0,
        }
    }
}

/// A trace to replay.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// `VidurCsv`, `Mooncake` or `ServesimCsv`.
    pub format: TraceFormat,
    /// Path relative to the scenario file.
    pub file: String,
    /// Multiplies timestamps (2.0 = half the rate). Default 1.
    #[serde(default = "unit")]
    pub time_scale: f64,
    /// Multiplies the arrival rate (divides timestamps). Default 1.
    #[serde(default = "unit")]
    pub rate_scale: f64,
    /// Multiplies token counts (rounded, at least 1). Default 1.
    #[serde(default = "unit")]
    pub token_scale: f64,
    /// Tokens per `hash_ids` entry (Mooncake). Default 16.
    #[serde(default = "default_block_size")]
    pub hash_block_tokens: u32,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub slo_class: Option<String>,
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

fn unit() -> f64 {
    1.0
}

/// Trace file formats.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum TraceFormat {
    /// Vidur/Splitwise CSV: `arrived_at` (s), `num_prefill_tokens`, `num_decode_tokens`.
    VidurCsv,
    /// Mooncake JSON lines: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// servesim CSV: `arrival_us`, `input_tokens`, `output_tokens`, optional `tenant`,
    /// `slo_class`, `prefix_group`, `prefix_tokens`. A `requests.csv` output replays as is.
    ServesimCsv,
}

/// Where results go.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    /// Output directory (created if missing; `--out` overrides). Default `out`.
    pub dir: String,
    /// Write `requests.csv`. Default true.
    pub requests_csv: bool,
    /// Write `summary.json`. Default true.
    pub summary_json: bool,
    /// Write `decisions.csv`, one row per routing decision (also `--trace decisions`).
    pub decisions_csv: bool,
    /// Candidates listed per decision in `decisions.csv`. Default 3.
    pub decision_top_k: u32,
    /// Weights of a fitness score (keys: `ttft_mean`, `ttft_p50`, `ttft_p99`, `e2e_mean`,
    /// `e2e_p50`, `e2e_p99`, `requests_per_s`, `output_tokens_per_s`, `cost`,
    /// `cost_per_mtok`). Default: none.
    pub fitness: BTreeMap<String, f64>,
    /// Write `scale_events.csv` (instance life-cycle events). Default true; written only
    /// when a group has `scaling`.
    pub scale_events_csv: bool,
    /// Write `timeseries.csv`: per instance and cluster-wide state sampled every
    /// `sample_interval_s` of simulated time. Default true.
    pub timeseries_csv: bool,
    /// Simulated seconds between `timeseries.csv` samples. Default: about a thousandth of
    /// the run (`workload.duration_s` or `horizon_s`), rounded to 1, 2 or 5 × 10ⁿ; 1 s when
    /// neither is set.
    pub sample_interval_s: Option<f64>,
    /// Write `timeline.json`, a Chrome trace-event file for Perfetto UI or
    /// chrome://tracing (also `--trace timeline`). Default false.
    pub timeline_json: bool,
    /// Only steps and requests overlapping this simulated-time window (start, end), in
    /// seconds, go into `timeline.json` (also `--trace-window START..END`). Default: all.
    pub timeline_window_s: Option<(f64, f64)>,
    /// Fraction of requests drawn as spans in `timeline.json` (chosen by request id, so the
    /// same requests at every run; also `--trace-sample`). Default 1.
    pub timeline_request_sample: f64,
    /// Write `report.html` after the run (also `servesim run --report`). Default false.
    pub report_html: bool,
    /// Record the instances' KV block events (stored, evicted, offloaded, reloaded,
    /// transferred) and count them per instance in `summary.json` (`kv_events`). On anyway,
    /// without the counts, when a routing policy reads caches. Default false.
    pub kv_events: bool,
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec {
            dir: "out".into(),
            requests_csv: true,
            summary_json: true,
            decisions_csv: false,
            decision_top_k: 3,
            fitness: BTreeMap::new(),
            scale_events_csv: true,
            timeseries_csv: true,
            sample_interval_s: None,
            timeline_json: false,
            timeline_window_s: None,
            timeline_request_sample: 1.0,
            report_html: false,
            kv_events: false,
        }
    }
}
