//! The scenario schema: plain data types every concern reads.
//!
//! One [`Scenario`] root. Every struct denies unknown fields; optional fields have the
//! defaults documented on them (and in docs/scenarios.md). Reading a file, `--set`
//! overrides and validation are the [`loader`](crate::loader)'s.

mod cluster;
mod energy;
mod faults;
mod flow_control;
mod outputs;
mod plan;
mod policies;
mod problem;
mod topology;
mod workload;

pub use cluster::*;
pub use energy::{EnergySpec, PowerFigures, deserialize_power};
pub use faults::{CrashPolicy, CrashSpec, FaultsSpec, LinkFaultSpec, StragglerSpec};
pub use flow_control::{BandLimits, BandSpec, FlowControlSpec, SaturationSpec};
pub use outputs::*;
pub use plan::*;
pub use policies::*;
pub use problem::{
    Problem, closest, counted, did_you_mean, finite_positive, gb_per_s, grouped, latency_us,
    readable, some_of, wait_seconds,
};
pub use topology::{NodeFigures, PlacementSpec, TopologySpec, deserialize_node};
pub use workload::*;

use std::any::Any;
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
    /// What `servesim plan` searches (ignored by every other command).
    #[serde(default)]
    pub plan: Option<PlanSpec>,
    /// Energy accounts (GPU power per step, energy per request and for the run); absent,
    /// none are kept. `energy: ()` turns them on with the defaults.
    #[serde(default)]
    pub energy: Option<EnergySpec>,
    /// The gateway's flow control between admission and routing (priority bands, a
    /// saturation detector, shedding); absent, admitted requests go straight to routing.
    #[serde(default)]
    pub flow_control: Option<FlowControlSpec>,
    /// Faults injected into the run (stragglers, crashes); absent, none.
    #[serde(default)]
    pub faults: Option<FaultsSpec>,
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
    /// The workload's client names in request `client` order: each client's `name` (or
    /// `client<i>`), then `trace<i>` for each trace.
    pub fn client_names(&self) -> Vec<String> {
        let clients = self.workload.clients.iter().enumerate().map(|(i, c)| {
            if c.name.is_empty() {
                format!("client{i}")
            } else {
                c.name.clone()
            }
        });
        let traces = (0..self.workload.traces.len()).map(|i| format!("trace{i}"));
        clients.chain(traces).collect()
    }

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
        for (c, name) in s.workload.clients.iter().zip(s.client_names()) {
            l.tenant(c.tenant.as_deref().unwrap_or(&name));
            l.slo_class(
                c.slo_class
                    .as_deref()
                    .unwrap_or(crate::labels::DEFAULT_SLO_CLASS),
            );
        }
        for (i, t) in s.workload.traces.iter().enumerate() {
            let rows = &t.row_labels;
            if rows.entry_tenant_used {
                l.tenant(t.tenant.as_deref().unwrap_or(&format!("trace{i}")));
            }
            for name in &rows.tenants {
                l.tenant(name);
            }
            if rows.entry_class_used {
                l.slo_class(
                    t.slo_class
                        .as_deref()
                        .unwrap_or(crate::labels::DEFAULT_SLO_CLASS),
                );
            }
            for name in &rows.slo_classes {
                l.slo_class(name);
            }
        }
        if s.workload.inference_perf.is_some() {
            l.tenant(crate::labels::INFERENCE_PERF_TENANT);
            l.slo_class(crate::labels::DEFAULT_SLO_CLASS);
        }
        if let Some(a) = &s.workload.adapters {
            l.adapters = a.all_names();
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
