//! Per-request rows and aggregates ([`SimSystems::Record`]).
//!
//! Each finished (or rejected / dropped) request gets one row in `requests.csv`, written as
//! it finishes, then its entity is despawned: memory is bounded by requests in flight; the
//! latency distributions are bounded-size [`histogram::Histogram`]s.
//!
//! [`SimSystems::Record`]: crate::SimSystems::Record

mod assemble;
mod check;
mod finish;
pub mod histogram;
mod network;
pub mod percentile;
mod plugin;
mod record;
mod row;
mod status;
mod summary;
#[cfg(test)]
mod tests;

pub use crate::output::SharedBuffer;
pub use crate::request::RequestSample;
pub use assemble::assemble;
pub use check::{check_outputs, unpriced_cost_fitness};
pub use finish::{LargestCache, SummaryFile, Unfinished, diagnose};
pub use histogram::Histogram;
pub use percentile::Distribution;
pub use plugin::{MetricsPlugin, set_up_metrics};
pub use record::{
    Recorder, check_causality, count_kv_events, meets_slo, record_finished, record_one,
};
pub use row::{
    CSV_COLUMNS, ENERGY_COLUMN, ExtraColumns, RETRIES_COLUMN, SPECULATIVE_COLUMNS, csv_header,
    fixed, format_row,
};
pub use status::{nothing_left, overloaded};
pub use summary::{
    AdapterSummary, Anomalies, BandSummary, CostSummary, CrashEvent, CrashesSummary, DisaggSummary,
    EnergySummary, FITNESS_KEYS, Fairness, FaultsSummary, FlowControlSummary, GroupEnergy,
    GroupUsage, InstanceSummary, KvEventCounts, KvStoreSummary, KvSummary, KvTierSummary,
    LevelSummary, LinkFaultSummary, ListedCrash, LoraGroupSummary, LoraSummary, NetworkSummary,
    PlaceSummary, PoolSummary, RequestCounts, RoutingSummary, SliceSummary, SloSummary, SpanSlo,
    SpeculativeSummary, StragglerSummary, Summary, Throughput, TtftPartsSummary, WorstDecision,
    cov, fitness_term, jain,
};

use std::fs::File;
use std::io::BufWriter;

use bevy_ecs::prelude::*;

use crate::request::{FinalState, FinishedRequest};
use crate::time::SimTime;

/// The metrics plugin's systems, each set inside its engine stage
/// ([`SimSystems`](crate::SimSystems)): order your own systems against these.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricsSystems {
    /// `record_finished` (Record): rows, aggregates, despawn.
    Record,
    /// `count_kv_events` (Observe), when `outputs.kv_events` counts them.
    CountKvEvents,
}

/// A concern's part of the summary: fills its fields from the World when the run ends,
/// after [`assemble`] has filled the core (request counts, latency, throughput, tenants,
/// SLOs, rejections, extras). Parts run in the order their plugins registered them.
pub type SummaryPart = fn(&mut World, &mut Summary);

/// The registered summary parts.
#[derive(Resource, Default)]
pub struct SummaryParts(pub Vec<SummaryPart>);

/// When a finish step runs, once the summary's core and parts are filled: the run's own
/// diagnoses, then each concern's warnings and result files (in plugin order), then the
/// summary file. Steps of one stage run in the order they were registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FinishStage {
    /// What the run's counts say (requests dropped, rejected, left behind, timed out).
    Run,
    /// Each concern's warnings, and its result files finished and flushed.
    Concerns,
    /// The fitness and `summary.json`.
    Summary,
}

/// A finish step: reads the World when the run ends, may add to the summary, finishes its
/// concern's files; an error fails the run (no file is committed).
pub type FinishStep = fn(&mut World, &mut Summary) -> Result<(), crate::setup::SimError>;

/// The registered finish steps.
#[derive(Resource, Default)]
pub struct FinishSteps(pub Vec<(FinishStage, FinishStep)>);

impl FinishSteps {
    /// The steps in the order they run.
    pub fn ordered(&self) -> Vec<FinishStep> {
        let mut steps: Vec<(usize, &(FinishStage, FinishStep))> =
            self.0.iter().enumerate().collect();
        steps.sort_by_key(|(k, (stage, _))| (*stage, *k));
        steps.into_iter().map(|(_, (_, f))| *f).collect()
    }
}

/// Registers summary parts and finish steps on an App.
pub trait SummaryAppExt {
    fn add_summary_part(&mut self, part: SummaryPart) -> &mut Self;
    fn add_finish_step(&mut self, stage: FinishStage, step: FinishStep) -> &mut Self;
}

impl SummaryAppExt for bevy_app::App {
    fn add_summary_part(&mut self, part: SummaryPart) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<SummaryParts>()
            .0
            .push(part);
        self
    }

    fn add_finish_step(&mut self, stage: FinishStage, step: FinishStep) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<FinishSteps>()
            .0
            .push((stage, step));
        self
    }
}

/// Results of your own systems, by name, for `summary.json` (`extras`) and the text summary:
/// fill it from a system in `SimFinish` (or during the run).
#[derive(Resource, Debug, Default, Clone)]
pub struct SummaryExtras(pub std::collections::BTreeMap<String, serde_json::Value>);

/// KV block events per instance (`outputs.kv_events`), counted by [`count_kv_events`] from
/// the [`KvEvent`](crate::kv::KvEvent) messages.
#[derive(Resource, Debug, Default, Clone)]
pub struct KvEventTally {
    pub on: bool,
    pub per_instance: Vec<KvEventCounts>,
    /// Shared by the system's copies in both tick schedules (see `policy::CachedBlocks`).
    pub cursor: bevy_ecs::message::MessageCursor<crate::kv::KvEvent>,
}

/// Streaming writer of `requests.csv` (absent when the scenario turns it off).
#[derive(Resource, Default)]
pub struct RequestLog {
    /// `requests.csv`, its header written ([`csv_header`]); rows by [`format_row`].
    pub writer: Option<BufWriter<File>>,
    /// First write error; reported when the run ends.
    pub error: Option<String>,
    /// Reused row buffer.
    pub scratch: Vec<u8>,
    /// Per-request samples for in-process consumers (`check-real`, `calibrate`).
    pub collect: Option<std::sync::Arc<std::sync::Mutex<Vec<RequestSample>>>>,
    /// The same rows as `requests.csv`, into memory (the Python package).
    pub memory: Option<BufWriter<SharedBuffer>>,
    /// The columns rows end with (energy, retries), as the scenario's features ask.
    pub extra: ExtraColumns,
}

/// Totals for one slice of the requests (an instance, a tenant, an SLO class). Its
/// distributions use coarse buckets (within 1/256) to keep memory small.
#[derive(Debug, Clone)]
pub struct Breakdown {
    /// Requests recorded in this slice (every request is recorded exactly once).
    pub injected: u64,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    /// Completed requests that met every target of their SLO class.
    pub good: u64,
    pub output_tokens: u64,
    pub ttft: Histogram,
    pub e2e: Histogram,
}

impl Default for Breakdown {
    fn default() -> Self {
        Breakdown {
            injected: 0,
            completed: 0,
            rejected: 0,
            dropped: 0,
            timed_out: 0,
            good: 0,
            output_tokens: 0,
            ttft: Histogram::with_bits(histogram::COARSE),
            e2e: Histogram::with_bits(histogram::COARSE),
        }
    }
}

impl Breakdown {
    fn add(&mut self, f: &FinishedRequest, good: bool) {
        self.injected += 1;
        match f.state {
            FinalState::Completed => {
                self.completed += 1;
                self.output_tokens += u64::from(f.generated_tokens);
                if let Some(e) = f.e2e {
                    self.e2e.record(e.as_us());
                }
            }
            FinalState::Rejected => self.rejected += 1,
            FinalState::Dropped => self.dropped += 1,
            FinalState::TimedOut => self.timed_out += 1,
            _ => {}
        }
        if let Some(t) = f.ttft {
            self.ttft.record(t.as_us());
        }
        self.good += u64::from(good);
    }
}

fn slot(v: &mut Vec<Breakdown>, i: usize) -> &mut Breakdown {
    if v.len() <= i {
        v.resize_with(i + 1, Breakdown::default);
    }
    &mut v[i]
}

/// Sums of requests' TTFT parts (µs), for their means (u128, as the histograms' sums: a
/// million requests of 10⁹ s would overflow u64).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TtftPartsTotal {
    pub requests: u64,
    pub to_the_instance_us: u128,
    pub waiting_us: u128,
    pub prefill_us: u128,
    pub token_out_us: u128,
}

impl TtftPartsTotal {
    pub fn add(&mut self, p: crate::request::TtftParts) {
        self.requests += 1;
        self.to_the_instance_us += u128::from(p.to_the_instance.as_us());
        self.waiting_us += u128::from(p.waiting.as_us());
        self.prefill_us += u128::from(p.prefill.as_us());
        self.token_out_us += u128::from(p.token_out.as_us());
    }
}

/// Running totals for the summary.
#[derive(Resource, Debug, Default, Clone)]
pub struct Aggregates {
    pub ttft: Histogram,
    pub e2e: Histogram,
    pub scheduling_delay: Histogram,
    /// The TTFT parts of the completed requests that went once through them.
    pub ttft_parts: TtftPartsTotal,
    /// Every inter-token sample (µs), recorded as tokens are emitted.
    pub itl: Histogram,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    /// Taken down by a crash and not retried (faults).
    pub failed: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    pub preemptions: u64,
    pub last_completion: SimTime,
    /// Completed requests meeting their SLO class's targets.
    pub good: u64,
    pub per_instance: Vec<Breakdown>,
    pub per_tenant: Vec<Breakdown>,
    pub per_class: Vec<Breakdown>,
    /// Per LoRA adapter (requests that named one).
    pub per_adapter: Vec<Breakdown>,
}

impl Aggregates {
    /// Requests whose life ended (completed, rejected, dropped, timed out or failed).
    pub fn ended(&self) -> u64 {
        self.completed + self.rejected + self.dropped + self.timed_out + self.failed
    }
}
