//! Setting a run up: the builder ([`Simulation::from_app`](crate::Simulation::from_app))
//! hands the scenario to the setup steps the plugins registered, stage by stage, so each
//! plugin builds its own part of the World from the scenario (its policies, resources,
//! entities, first events) and a plugin left out builds nothing. The builder itself keeps
//! only the run's output files and the tick schedules.
//!
//! ```
//! use servesim::bevy_app::App;
//! use servesim::bevy_ecs::prelude::*;
//! use servesim::setup::{SetupAppExt, SetupCtx, SetupStage};
//!
//! /// A plugin's own resource, sized from the scenario when the run is set up.
//! #[derive(Resource)]
//! struct GroupCount(usize);
//!
//! let mut app = servesim::default_app();
//! app.add_setup(SetupStage::Cluster, |app: &mut App, ctx: &SetupCtx<'_>| {
//!     app.insert_resource(GroupCount(ctx.scenario.cluster.groups.len()));
//!     Ok(())
//! });
//! # let catalog = app.world().resource::<servesim::policy::Catalog>();
//! # let sc = servesim::loader::parse("(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [10.0, 0.0, 0.0]))]), workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(2))]))", "doc.ron", &[], catalog).unwrap();
//! let sim = servesim::Simulation::from_app(app, &sc, Default::default()).unwrap();
//! assert_eq!(sim.world().resource::<GroupCount>().0, 1);
//! ```

use std::path::PathBuf;

use bevy_app::App;
use bevy_ecs::prelude::*;

use crate::catalog::Catalog;
use crate::engine::Fault;
use crate::latency::{LatencyModel, ServingPath};
use crate::model::{GpuProfile, ModelConfig};
use crate::output::OutputError;
use crate::scenario::Scenario;
use crate::time::SimTime;
use std::sync::Arc;

/// When a setup step runs; steps of one stage run in the order they were registered
/// (the order of `SimPlugins`, then yours).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetupStage {
    /// The clock, cluster-wide policies and the resources that do not depend on instances.
    Policies,
    /// Instance entities: `instance::InstanceIndex`, `engine::ClusterView`,
    /// `instance::Groups`.
    Instances,
    /// What reads the instances: autoscaling accounts and life cycles, P/D links, the
    /// routers' views, KV events.
    Cluster,
    /// The workload: its sources, first arrivals on the event queue.
    Workload,
    /// Last: each concern's result files (created in the run's
    /// [`Outputs`](crate::output::Outputs)), and what depends on every other part being
    /// built (the KV events' switch).
    Outputs,
}

/// What a setup step sees: the scenario (validated; its groups already resolved), the
/// policy catalog, and the run options that change what is built.
pub struct SetupCtx<'a> {
    pub scenario: &'a Scenario,
    /// Each group resolved (model, GPU, KV capacity, latency model), in group order.
    pub resolved: &'a [ResolvedGroup],
    pub catalog: &'a Catalog,
    /// How to run: invariant checks, requests to replay, what to collect in memory.
    pub options: &'a RunOptions,
}

/// An interrupt flag for every run an app builds (a resource an extension inserts): a run
/// whose [`RunOptions::interrupt`] is `None` polls this one, so a command that runs many
/// simulations (`calibrate`, `check-real`) stops as a whole when it is set.
#[derive(bevy_ecs::prelude::Resource, Clone, Debug)]
pub struct AppInterrupt(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Check every invariant after every tick (panics on a violation: a simulator bug).
    pub check_invariants: bool,
    /// Output directory; `None` writes no files.
    pub out_dir: Option<PathBuf>,
    /// Write `decisions.csv` (also on with the scenario's `outputs.decisions_csv`).
    pub trace_decisions: bool,
    /// Set from outside (e.g. a Ctrl-C handler) to stop the run; nothing is committed.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Requests to replay from memory, in addition to the scenario's workload (a measured
    /// run for `check-real` and `calibrate`).
    pub replay: Option<crate::workload::Replay>,
    /// Collects one [`RequestSample`](crate::request::RequestSample) per request.
    pub collect: Option<std::sync::Arc<std::sync::Mutex<Vec<crate::request::RequestSample>>>>,
    /// Writes the bytes `requests.csv` would hold into this buffer (no file needed).
    pub requests_csv_memory: Option<crate::output::SharedBuffer>,
    /// Told how far the run has got every [`PROGRESS_EVERY`] ticks (a progress bar).
    pub progress: Option<ProgressHook>,
}

/// Ticks between two calls of a [`ProgressHook`].
pub const PROGRESS_EVERY: u64 = 4096;

/// How far a run has got.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Simulated time.
    pub now: SimTime,
    pub ticks: u64,
    /// Requests that arrived so far, and those that left (completed, rejected, dropped,
    /// timed out).
    pub injected: u64,
    pub ended: u64,
}

/// Receives [`Progress`] during a run; it must not take long (it runs on the simulation
/// thread).
#[derive(Clone)]
pub struct ProgressHook(pub std::sync::Arc<dyn Fn(&Progress) + Send + Sync>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

/// A setup step: builds part of the run in `app` (resources, entities, events, systems).
pub type SetupFn = fn(&mut App, &SetupCtx<'_>) -> Result<(), SimError>;

/// The registered setup steps.
#[derive(Resource, Default)]
pub struct SetupSteps(pub Vec<(SetupStage, SetupFn)>);

impl SetupSteps {
    /// The steps in the order they run.
    pub fn ordered(&self) -> Vec<SetupFn> {
        let mut steps: Vec<(usize, &(SetupStage, SetupFn))> = self.0.iter().enumerate().collect();
        steps.sort_by_key(|(k, (stage, _))| (*stage, *k));
        steps.into_iter().map(|(_, (_, f))| *f).collect()
    }
}

/// Registers setup steps on an [`App`].
pub trait SetupAppExt {
    fn add_setup(&mut self, stage: SetupStage, step: SetupFn) -> &mut Self;
}

impl SetupAppExt for App {
    fn add_setup(&mut self, stage: SetupStage, step: SetupFn) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<SetupSteps>()
            .0
            .push((stage, step));
        self
    }
}

/// Builds the active member of family `F` named at `policies.<field>` (with its
/// `_params`), as a setup step does.
pub fn build_policy<F: crate::catalog::PolicyFamily>(
    ctx: &SetupCtx<'_>,
    labels: &crate::labels::Labels,
    field: &'static str,
    name: &str,
    params: &std::collections::BTreeMap<String, f64>,
) -> Result<Box<F::Policy>, SimError> {
    use crate::catalog::{BuildError, PolicyArgs};
    ctx.catalog
        .build::<F>(name, &PolicyArgs::new(ctx.scenario.seed, params, labels))
        .map_err(|e| match e {
            BuildError::Unknown { .. } => SetupError::UnknownPolicy {
                family: field,
                name: name.to_string(),
            },
            BuildError::Params(message) => SetupError::Policy {
                path: format!("policies.{field}"),
                message,
            },
        })
        .map_err(SimError::from)
}

/// An instance group with everything looked up (by the loader, which validated it): its
/// model config, GPU profile, KV capacity and latency model.
#[derive(Clone)]
pub struct ResolvedGroup {
    pub model: Option<ModelConfig>,
    pub gpu: Option<GpuProfile>,
    pub kv_blocks: u32,
    /// How the blocks were derived from the GPU's memory (`None`: the group gave them).
    pub kv_sizing: Option<crate::model::KvCapacity>,
    pub max_model_len: Option<u32>,
    /// The most tokens one request's KV can take in an instance's cache (one data-parallel
    /// rank's; with hybrid attention, as its layout holds them).
    pub request_kv_tokens: u64,
    /// Most requests in an instance's (each data-parallel rank's) running batch: the
    /// group's `max_num_seqs` or its default ([`batch_limits`](crate::scenario::batch_limits)).
    pub max_num_seqs: u32,
    /// Token budget of a step, as `max_num_seqs`.
    pub max_num_batched_tokens: u32,
    /// Where a limit left out came from.
    pub batch_defaults: crate::scenario::BatchDefaults,
    /// Shared by every instance of the group (latency models are pure).
    pub latency: Arc<dyn LatencyModel>,
    /// Bytes sent between pipeline stages per token (hidden × activation bytes).
    pub pp_bytes_per_token: f64,
    /// CPU offload tier: (blocks, µs per block transferred, fixed µs per step with transfers).
    pub cpu_tier: Option<(u32, f64, f64)>,
    /// NVMe tier below it: (blocks, µs per block read, fixed µs per step with reads).
    pub nvme_tier: Option<(u32, f64, f64)>,
    /// KV bytes of one token over the whole model (every layer and KV head; MLA: one
    /// compressed row per layer): what a P/D transfer moves. 0 without a model.
    pub kv_bytes_per_token: f64,
    /// Layers of the model (1 without one), for layer-wise KV transfer.
    pub layers: u32,
    /// The serving path around the steps (`engine`, or the latency model's default).
    pub serving: ServingPath,
    /// The GPU physics the roofline prices with, after the scenario's overrides (`None`
    /// with another latency model), for `validate`.
    pub roofline_physics: Option<crate::model::GpuPhysics>,
    /// The nucleus (top-p < 1) the roofline's steps sort their logits for, for `validate`;
    /// `None` when the requests sample without one or another model prices the steps.
    pub top_p_sort: Option<f64>,
    /// Speculative decoding (`speculative`), shared by the group's instances.
    pub speculative: Option<Arc<crate::latency::speculative::SpecConfig>>,
    /// Multi-LoRA (`lora`), shared by the group's instances.
    pub lora: Option<Arc<crate::latency::lora::LoraConfig>>,
    /// Expert parallelism (`expert_parallel`): the instances' step pricing.
    pub expert_parallel: Option<Arc<crate::latency::WideEp>>,
    /// Hybrid attention (sliding-window or linear-attention layers): how the KV cache's
    /// blocks are spread over its groups.
    pub kv_layout: Option<crate::model::KvLayout>,
}

/// A run that could not complete, by phase: loading the scenario fails with
/// [`ScenarioError`](crate::loader::ScenarioError) before any of these; building the run
/// with a [`SetupError`]; running it with a [`RunError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The run could not be built from its scenario.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The run stopped before it finished, or its results could not be written.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A calibration or a comparison with a measured run that cannot be made
    /// (`servesim calibrate`, `servesim check-real`).
    #[error("{0}")]
    Calibration(String),
    /// A simulator bug: something the builder or the end of a run relies on failed.
    #[error("internal error in {what}: {message}")]
    Internal { what: &'static str, message: String },
}

/// Why a run could not be built (its scenario passed validation: these are what
/// validation cannot see, an unusable output directory, or a scenario never validated).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The output directory cannot be used (locked by another run, not a directory, a
    /// result would replace an input).
    #[error(transparent)]
    Outputs(#[from] OutputError),
    /// A result file's first bytes (its header) could not be written.
    #[error("cannot write {path}: {message}")]
    Output { path: PathBuf, message: String },
    #[error("unknown {family} policy `{name}` (validate the scenario first)")]
    UnknownPolicy { family: &'static str, name: String },
    /// A policy (or batch scheduler) refused its parameters; `path` names the scenario field.
    #[error("invalid scenario (validate it first): {path}: {message}")]
    Policy { path: String, message: String },
    /// An instance group could not be resolved (its model, GPU, table or limits).
    #[error("invalid scenario (validate it first): {}", join_problems(.0))]
    Group(Vec<crate::scenario::Problem>),
    /// The workload could not be built or primed (a trace that cannot be read, say).
    #[error("invalid scenario (validate it first): {0}")]
    Workload(String),
    #[error(
        "the tick schedule does not build: {0}\nA system added to SimStep must be ordered against every built-in system of its stage that \
         touches the same data: add .before(...) or .after(...) (docs/extending.md lists what each stage's built-in system reads and empties)"
    )]
    Schedule(String),
}

/// Why a run that was built did not finish with its results in place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A fault stopped the run (overload, a stuck instance, a failed write, the clock's
    /// limit).
    #[error("the run stopped: {0}")]
    Fault(Fault),
    #[error(
        "interrupted at simulated time {0}; no result file was written (temporary files removed)"
    )]
    Interrupted(SimTime),
    /// A result file could not be finished.
    #[error("cannot write {path}: {message}")]
    Output { path: PathBuf, message: String },
    /// The result files could not be moved into place (see [`OutputError`]).
    #[error(transparent)]
    Outputs(#[from] OutputError),
}

fn join_problems(p: &[crate::scenario::Problem]) -> String {
    p.iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl SimError {
    /// True when the output directory holds exactly what it held before the run (every
    /// failure except a commit whose undo failed too).
    pub fn outputs_unchanged(&self) -> bool {
        match self {
            SimError::Run(RunError::Outputs(e)) => e.directory_unchanged(),
            _ => true,
        }
    }
}
