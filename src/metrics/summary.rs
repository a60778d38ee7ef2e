//! The aggregate result of a run: `summary.json` and the human summary on stdout.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::Distribution;

/// Where every injected request ended up (INV-1: the buckets add up to `injected`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    pub injected: u64,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    /// Abandoned by their client (timeout).
    pub timed_out: u64,
    /// Still in an instance wait queue when the run stopped.
    pub queued: u64,
    /// Still running (or finishing their last step) when the run stopped.
    pub running: u64,
    /// Admitted but not yet in an instance queue when the run stopped.
    pub in_transit: u64,
    /// Taken down by an instance crash and not retried (only when the scenario's `faults`
    /// has crashes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
}

impl RequestCounts {
    /// Every bucket but `injected` added up: equals `injected` when every request is
    /// accounted for (INV-1).
    pub fn accounted(&self) -> u64 {
        self.completed
            + self.rejected
            + self.dropped
            + self.timed_out
            + self.queued
            + self.running
            + self.in_transit
            + self.failed.unwrap_or(0)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub input_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    /// Prompt tokens of the completed requests.
    pub input_tokens: u64,
    /// Output tokens of the completed requests.
    pub output_tokens: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KvSummary {
    /// Prompt blocks served from the prefix cache / all prompt blocks admitted.
    pub hit_rate: f64,
    pub hit_blocks: u64,
    pub miss_blocks: u64,
    /// Prompt blocks found on the GPU / all prompt blocks admitted.
    pub gpu_hit_rate: f64,
    /// Prompt blocks reloaded from the CPU tier / all prompt blocks admitted.
    pub cpu_hit_rate: f64,
    /// Blocks copied GPU → CPU tier.
    pub offloaded_blocks: u64,
    /// Blocks copied CPU tier → GPU (CPU-tier hits).
    pub reloaded_blocks: u64,
    /// Reloads of a block offloaded within the group's `cpu_kv_thrash_window_s` / reloads.
    pub thrashing_rate: f64,
    /// The NVMe tiers of the instances that have one, summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme: Option<KvTierSummary>,
    /// The cluster's shared store (`cluster.kv_store`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<KvStoreSummary>,
}

/// A KV tier below the CPU tier (`kv.nvme`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KvTierSummary {
    /// Blocks the tier can hold, over every instance that was on.
    pub capacity_blocks: u64,
    /// Blocks written to it (evicted from the tier above).
    pub written_blocks: u64,
    /// Blocks loaded from it into the GPU for a prefix hit.
    pub loaded_blocks: u64,
    /// loaded / all prompt blocks admitted.
    pub hit_rate: f64,
}

/// The cluster's shared KV store (`kv.store`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KvStoreSummary {
    /// `write_back` or `write_through`.
    pub write: String,
    pub capacity_blocks: u64,
    /// Blocks held at the end of the run.
    pub held_blocks: u64,
    pub written_blocks: u64,
    /// Blocks dropped to make room.
    pub evicted_blocks: u64,
    /// Blocks loaded into an instance's GPU for a prefix hit.
    pub loaded_blocks: u64,
    /// Of those, blocks another instance had written (cross-instance reuse).
    pub cross_instance_loaded_blocks: u64,
    /// loaded / all prompt blocks admitted.
    pub hit_rate: f64,
}

/// Failure modes a policy search should see, counted over the run (docs/outputs.md defines
/// each; with `decisions.csv`, each event is also a row of it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Anomalies {
    /// A request taken from an instance's wait queue while a request of higher priority that
    /// arrived before it still waits in that queue.
    pub priority_inversions: u64,
    /// A request taken from an instance's wait queue while a request that arrived before it
    /// still waits in that queue (it was overtaken).
    pub hol_blocking: u64,
    /// A scaling action in the opposite direction of the group's previous one, within the
    /// larger of its two cooldowns of it.
    pub scale_oscillations: u64,
    /// Reloads from the CPU KV tier of a block offloaded within `cpu_kv_thrash_window_s`
    /// (the numerator of `kv.thrashing_rate`).
    pub kv_thrashing: u64,
}

impl Anomalies {
    pub fn any(&self) -> bool {
        self.priority_inversions + self.hol_blocking + self.scale_oscillations + self.kv_thrashing
            > 0
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct InstanceSummary {
    pub index: u32,
    pub group: String,
    pub completed: u64,
    pub dropped: u64,
    pub preemptions: u64,
    pub steps: u64,
    /// Fraction of the simulated duration spent executing steps.
    pub busy_fraction: f64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub kv_total_blocks: u32,
    pub kv_hit_rate: f64,
    pub ttft_ms: Distribution,
    pub e2e_ms: Distribution,
}

/// Outcomes of one tenant or SLO class.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SliceSummary {
    pub name: String,
    pub injected: u64,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    pub output_tokens: u64,
    /// Completed within every latency target of its SLO class.
    pub good: u64,
    /// good / injected (rejections, drops and timeouts count as misses); `None` (JSON `null`,
    /// text `n/a`) when no target applies: a class without targets, or a tenant when no class
    /// declares any.
    pub slo_attainment: Option<f64>,
    pub ttft_ms: Distribution,
    pub e2e_ms: Distribution,
}

/// Balance across tenants and instances.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Fairness {
    /// Jain index over per-tenant completed output tokens (BLIS): (Σx)²/(n·Σx²).
    pub jain_tenant_output_tokens: f64,
    /// Jain index over per-instance completed requests (RouteSim).
    pub jain_instance_completed: f64,
    /// Coefficient of variation (population) of per-instance completed requests.
    pub cov_instance_completed: f64,
}

/// SLO attainment over every request.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SloSummary {
    /// Requests completed within every target of their class (every completed request when
    /// no class declares a target).
    pub good: u64,
    /// good / injected; `None` (JSON `null`, text `n/a`) when no SLO class declares a
    /// target: there is nothing to attain.
    pub attainment: Option<f64>,
    /// good requests per second of simulated time; `None` when no target is declared.
    pub goodput_per_s: Option<f64>,
}

/// Routing decisions and their counterfactual regret (best score − chosen score).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoutingSummary {
    pub decisions: u64,
    pub mean_regret: f64,
    pub max_regret: f64,
    /// With `outputs.worst_decisions`: the decisions of highest regret, highest first (ties:
    /// earliest).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worst: Vec<WorstDecision>,
}

/// A routing decision and what it cost against the best-scored instance.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WorstDecision {
    pub time_us: u64,
    pub request_id: u64,
    pub chosen: u32,
    pub best: u32,
    /// Best score − chosen score (scores: the policy's own, or −(effective load)).
    pub regret: f64,
}

/// Jain's fairness index: 1 if every value is equal (or all zero), 1/n at worst.
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() {
        0.0
    } else if s2 == 0.0 {
        1.0
    } else {
        s * s / (xs.len() as f64 * s2)
    }
}

/// Population coefficient of variation (0 if the mean is 0).
pub fn cov(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return 0.0;
    }
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt() / mean
}

/// The keys `outputs.fitness` may weigh ([`fitness_term`]; MODELS.md §5.2 normalisation).
pub const FITNESS_KEYS: [&str; 11] = [
    "ttft_mean",
    "ttft_p50",
    "ttft_p99",
    "e2e_mean",
    "e2e_p50",
    "e2e_p99",
    "requests_per_s",
    "output_tokens_per_s",
    "cost",
    "cost_per_mtok",
    "joules_per_token",
];

/// Fitness normalisation of one metric (BLIS §5.2): latencies, in µs, 1/(1 + v/1000);
/// requests/s v/(v + 100); tokens/s v/(v + 10,000); cost, cost per Mtok and joules per
/// token 1/(1 + v).
pub fn fitness_term(key: &str, s: &Summary) -> f64 {
    // Distributions are in ms: v µs / 1000 = v ms.
    let lat = |ms: Option<f64>| ms.map_or(0.0, |v| 1.0 / (1.0 + v));
    match key {
        "ttft_mean" => lat(s.ttft_ms.mean),
        "ttft_p50" => lat(s.ttft_ms.p50),
        "ttft_p99" => lat(s.ttft_ms.p99),
        "e2e_mean" => lat(s.e2e_ms.mean),
        "e2e_p50" => lat(s.e2e_ms.p50),
        "e2e_p99" => lat(s.e2e_ms.p99),
        "requests_per_s" => s.throughput.requests_per_s / (s.throughput.requests_per_s + 100.0),
        "output_tokens_per_s" => {
            s.throughput.output_tokens_per_s / (s.throughput.output_tokens_per_s + 10_000.0)
        }
        // Cheaper is better: 1 / (1 + cost).
        "cost" => 1.0 / (1.0 + s.cost.total),
        // A run that served no token has no cost per token: it scores nothing, not 1.0.
        "cost_per_mtok" => s
            .cost
            .per_million_output_tokens
            .map_or(0.0, |c| 1.0 / (1.0 + c)),
        // Facility joules per output token (needs `energy`): 1 / (1 + J).
        "joules_per_token" => s
            .energy
            .as_ref()
            .and_then(|e| e.joules_per_output_token)
            .map_or(0.0, |j| 1.0 / (1.0 + j)),
        _ => 0.0,
    }
}

/// GPU use and cost of one instance group over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupUsage {
    pub group: String,
    /// Has `scaling`.
    pub autoscaled: bool,
    pub gpus_per_instance: u32,
    /// GPU time from provisioning to off, summed over the group's instances.
    pub gpu_hours: f64,
    /// gpu_hours × cost_per_gpu_hour.
    pub cost: f64,
    /// Time-weighted mean of instances on (any phase but off).
    pub mean_instances: f64,
    /// Most instances on at once.
    pub max_instances: u32,
    /// Time the group spent at its `max` (or fixed size), seconds.
    pub time_at_max_s: f64,
    /// Instances added (started or taken back from draining), cold starts among them.
    pub scale_ups: u64,
    pub cold_starts: u64,
    /// Instances removed (cancelled, drained or turned off).
    pub scale_downs: u64,
}

/// Energy of one instance group over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupEnergy {
    pub group: String,
    pub power: Option<crate::scenario::PowerFigures>,
    /// GPU energy in steps and idle (on, between steps), kWh.
    pub step_kwh: f64,
    pub idle_kwh: f64,
    pub gpu_kwh: f64,
    /// GPU energy over the run's duration, watts (all the group's GPUs).
    pub mean_power_w: f64,
    /// Mean utilisation u of its busy GPU time (0 when it ran no step).
    pub mean_utilisation: f64,
    /// GPU-hours busy in steps, and on in all (as in `groups`).
    pub busy_gpu_hours: f64,
    pub gpu_hours: f64,
}

/// The run's energy (`summary.energy`, present when the scenario has `energy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EnergySummary {
    pub pue: f64,
    /// The GPUs' energy (steps + idle), and the facility's (× pue), kWh.
    pub gpu_kwh: f64,
    pub facility_kwh: f64,
    /// Of the GPU energy: in steps (charged to requests) and idle.
    pub step_kwh: f64,
    pub idle_kwh: f64,
    /// GPU energy over the run's duration, watts.
    pub mean_power_w: f64,
    /// Facility joules per output token of completed requests, and watt-hours per
    /// completed request (null when none).
    pub joules_per_output_token: Option<f64>,
    pub wh_per_request: Option<f64>,
    /// facility_kwh × price_per_kwh.
    pub electricity_cost: f64,
    /// Per instance group, in `cluster.groups` order.
    pub groups: Vec<GroupEnergy>,
}

/// What the run cost, all groups together.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CostSummary {
    pub gpu_hours: f64,
    pub total: f64,
    /// total / (completed output tokens / 10⁶); `None` (null) when no token was served.
    pub per_million_output_tokens: Option<f64>,
}

/// KV block events of one instance (`outputs.kv_events`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KvEventCounts {
    pub instance: u32,
    /// Prompt blocks that entered the GPU prefix cache.
    pub stored: u64,
    /// Cached blocks whose GPU slot was reused.
    pub evicted: u64,
    /// Blocks copied to the CPU tier, and dropped from it.
    pub offloaded: u64,
    pub evicted_from_cpu: u64,
    /// CPU-tier blocks copied back for a prefix hit.
    pub reloaded: u64,
    /// Blocks received from prefill instances (P/D).
    pub transferred_in: u64,
    /// Blocks written to the NVMe tier, dropped from it, and loaded back from it (only when
    /// an instance has one).
    #[serde(skip_serializing_if = "is_zero")]
    pub written_to_nvme: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub evicted_from_nvme: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub loaded_from_nvme: u64,
    /// Blocks this instance wrote to the shared store, that its writes pushed out of the
    /// store, and that it loaded from the store (only with `cluster.kv_store`).
    #[serde(skip_serializing_if = "is_zero")]
    pub written_to_store: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub evicted_from_store: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub loaded_from_store: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One pool of a disaggregated cluster: the instances of one role.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PoolSummary {
    /// `mixed`, `prefill` or `decode`.
    pub role: String,
    pub instances: u32,
    /// Mean over the pool's instances of the fraction of the run spent executing steps.
    pub busy_fraction: f64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    /// Requests that finished on the pool.
    pub completed: u64,
    /// Requests handed to a decode instance after their prefill here.
    pub handed_off: u64,
}

/// Prefill/decode disaggregation: pools and KV transfers (present only when the cluster
/// has decode instances).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DisaggSummary {
    pub pools: Vec<PoolSummary>,
    /// Transfers started (each moves one request's prompt KV).
    pub transfers: u64,
    pub transfer_gb: f64,
    pub blocks_sent: u64,
    /// Prompt blocks the decode instance already had (prefix hits there), not sent.
    pub blocks_cached_on_decode: u64,
    /// The prefill's end (with `pd_first_token: Prefill`, the first token) to KV ready on the
    /// decode instance (waits included), per arrived request.
    pub transfer_ms: Distribution,
    /// Reservation on the decode instance to the last byte (link queueing, latency, wire).
    pub link_ms: Distribution,
    /// The prefill's end to the decode-side KV reservation, per transfer started (with vLLM's
    /// serving path: the hand-off through the proxy, the decode instance's running step, room).
    pub decode_kv_wait_ms: Distribution,
    /// Transfers that found no decode-side KV room at first.
    pub waited_for_kv: u64,
    /// Requests no decode instance could ever hold (dropped after their prefill).
    pub dropped: u64,
    /// With `cluster.topology`: how much later each transfer ended than it would have on
    /// an idle fabric (the other transfers on its links).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contention_ms: Option<Distribution>,
    /// `cluster.pd_first_token: Decode`: the decode instances sent the first tokens, and
    /// `transfer_ms` and `decode_kv_wait_ms` count from the prefill's end.
    pub first_token_on_decode: bool,
}

/// The network (`cluster.topology`): where the instances sit and how loaded each level's
/// links were.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NetworkSummary {
    pub nodes: u32,
    pub racks: u32,
    pub placement: String,
    /// Per instance, by index.
    pub instances: Vec<PlaceSummary>,
    /// Per level with links (`nvlink`, `nic`, `rack`, `store`).
    pub levels: Vec<LevelSummary>,
}

/// Where one instance sits.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PlaceSummary {
    pub instance: u32,
    pub node: u32,
    pub rack: u32,
    /// Nodes it spans (more than one: its tensor-parallel all-reduce crosses nodes).
    pub nodes: u32,
}

/// One level of links.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LevelSummary {
    pub level: String,
    /// Links (one per direction).
    pub links: u32,
    /// Transfers that crossed a link of the level (a transfer crossing two counts twice).
    pub transfers: u64,
    /// Data carried, summed over the level's links.
    pub gb: f64,
    /// Data carried over bandwidth × the run's duration: mean over the links, and the
    /// busiest link's.
    pub utilisation_mean: f64,
    pub utilisation_max: f64,
    pub busiest: String,
}

/// One priority band of the gateway (`summary.flow_control.bands`). Every request that
/// reached the band is counted once: arrived = shed_full + dispatched + shed_expired +
/// timed_out + left.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BandSummary {
    pub priority: i32,
    /// Admitted requests of this priority that reached the gateway.
    pub arrived: u64,
    /// Shed on arrival: the band (or every band together) held its `max_requests`.
    pub shed_full: u64,
    /// Routed from the band.
    pub dispatched: u64,
    /// Shed after waiting the band's `max_wait_s`.
    pub shed_expired: u64,
    /// Given up by their client while waiting in the band.
    pub timed_out: u64,
    /// Still waiting when the run stopped (counted `in_transit`).
    pub left: u64,
    /// Most requests waiting in the band at once.
    pub peak_waiting: u64,
    /// Time from reaching the band to being routed, per dispatched request.
    pub wait_ms: Distribution,
}

/// The gateway's flow control (`summary.flow_control`, present when the scenario has
/// `flow_control`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FlowControlSummary {
    /// The saturation detector's thresholds.
    pub queue_depth: u32,
    pub kv_util: f64,
    /// Bands by priority, highest first.
    pub bands: Vec<BandSummary>,
    /// Simulated time during which some request waited in a band, seconds.
    pub waiting_s: f64,
}

/// The requests that arrived in one span of a run, and how they fared.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpanSlo {
    pub arrived: u64,
    pub completed: u64,
    /// Completed within every target of their SLO class.
    pub good: u64,
    /// good / arrived; `null` when none arrived or no SLO class declares a target.
    pub attainment: Option<f64>,
}

/// One straggler (`summary.faults.stragglers`): its window and the requests that arrived
/// before, during and after it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StragglerSummary {
    pub instance: u32,
    pub from_s: f64,
    pub until_s: f64,
    pub slowdown: f64,
    /// Steps the instance started in the window.
    pub steps_slowed: u64,
    pub before: SpanSlo,
    pub during: SpanSlo,
    pub after: SpanSlo,
}

/// The injected faults (`summary.faults`, present when the scenario has `faults`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultsSummary {
    pub stragglers: Vec<StragglerSummary>,
    /// Only when the scenario degrades or severs KV links.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kv_links: Vec<LinkFaultSummary>,
    /// Only when the scenario degrades or severs host links (`transfers`: steps whose CPU-tier
    /// transfers started in the window).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_links: Vec<LinkFaultSummary>,
    /// Only when the scenario degrades or severs links between pipeline stages
    /// (`transfers`: micro-batches whose hand-offs started in the window).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pp_links: Vec<LinkFaultSummary>,
    /// Only when the scenario has crashes (listed or by MTBF).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crashes: Option<CrashesSummary>,
}

/// One degraded or severed KV link (`summary.faults.kv_links`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LinkFaultSummary {
    pub instance: u32,
    pub from_s: f64,
    pub until_s: f64,
    /// Fraction of the bandwidth left; 0 = severed.
    pub bandwidth: f64,
    /// Transfers that started in the window (at that bandwidth) or waited for its end.
    pub transfers: u64,
}

/// Instance crashes (`summary.faults.crashes`) and what became of the requests they took
/// down.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CrashesSummary {
    /// `fail` or `retry`.
    pub policy: String,
    pub max_retries: u32,
    pub mtbf_s: Option<f64>,
    pub repair_s: f64,
    /// Crashes that took an instance down.
    pub crashes: u64,
    /// Crashes that found their instance already down or off.
    pub skipped: u64,
    /// Instance-seconds down (instances of groups that do not autoscale: from the crash to
    /// the restart, or to the end of the run).
    pub down_s: f64,
    /// 1 − down_s / (those instances × the run's duration); `null` without such instances.
    pub availability: Option<f64>,
    /// Requests a crash took down: on the instance (queued, running, finishing, in KV
    /// transfer to or from it) or reaching it while it was down. A request counts once per
    /// crash that takes it down.
    pub lost: u64,
    /// Of those, ended `failed`.
    pub failed: u64,
    /// Of those, sent again.
    pub retried: u64,
    /// Requests that completed after at least one retry.
    pub completed_after_retry: u64,
    /// The requests that arrived while every instance was up, and while one or more was
    /// down.
    pub healthy: SpanSlo,
    pub degraded: SpanSlo,
    /// Every crash that took an instance down, in time order.
    pub events: Vec<CrashEvent>,
    /// Each crash the scenario lists: the requests that arrived before it, while its
    /// instance was down (until the run's end for an autoscaled one, which does not come
    /// back by itself), and after.
    pub listed: Vec<ListedCrash>,
}

/// One crash (`summary.faults.crashes.events`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CrashEvent {
    pub instance: u32,
    pub at_s: f64,
    /// When it served again; `null` if not within the run, or if its group autoscales (the
    /// instance is off and the autoscaler decides).
    pub back_s: Option<f64>,
    /// `listed` or `mtbf`.
    pub cause: String,
    /// Requests it took down (on the instance, or reaching it while down).
    pub lost: u64,
}

/// One listed crash (`summary.faults.crashes.listed`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ListedCrash {
    pub instance: u32,
    pub at_s: f64,
    /// False when the instance was already down or off then.
    pub happened: bool,
    pub before: SpanSlo,
    pub during: SpanSlo,
    pub after: SpanSlo,
}

/// Speculative decoding on one instance group, counted as vLLM's `spec_decode` metrics
/// count it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpeculativeSummary {
    pub group: String,
    /// `ngram`, `eagle`, `eagle3`, `mtp` or `draft_model`.
    pub method: String,
    pub num_speculative_tokens: u32,
    /// The acceptance the group was given (or its method's default), per position.
    pub configured_per_position: Vec<f64>,
    /// Verifications: one per request and step that verified drafts (vLLM `num_drafts`).
    pub verifications: u64,
    /// Draft tokens verified, and accepted.
    pub drafted: u64,
    pub accepted: u64,
    /// accepted / drafted.
    pub acceptance_rate: Option<f64>,
    /// 1 + accepted / verifications: tokens a request gains per verifying step.
    pub mean_acceptance_length: Option<f64>,
    /// Accepted at each position / verifications (vLLM's per-position acceptance).
    pub per_position: Vec<f64>,
    /// GPU time the drafter's passes added to the group's steps, seconds.
    pub draft_s: f64,
}

/// Multi-LoRA: each adapter's requests and loads, each group's slots and the time its
/// steps spent on adapters (only when the workload declares adapters or a group serves
/// them).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LoraSummary {
    pub adapters: Vec<AdapterSummary>,
    pub groups: Vec<LoraGroupSummary>,
}

/// One LoRA adapter: its requests (as a tenant's), rank and how often it was loaded.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AdapterSummary {
    #[serde(flatten)]
    pub requests: SliceSummary,
    pub rank: u32,
    /// Reads from storage into host memory, copies into a GPU slot (every instance).
    pub loads: u64,
    pub activations: u64,
}

/// One group serving adapters.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LoraGroupSummary {
    pub group: String,
    pub max_loras: u32,
    pub max_cpu_loras: u32,
    pub max_lora_rank: u32,
    /// GPU memory of its slots on one instance, GiB (taken from the KV cache).
    pub slots_gib: f64,
    /// Steps with at least one adapter.
    pub steps_with_adapters: u64,
    pub loads: u64,
    pub activations: u64,
    /// Time its steps waited for loads and copies, and spent in LoRA kernels, seconds.
    pub load_s: f64,
    pub kernel_s: f64,
}

/// The mean TTFT of the completed requests that went once through its parts (no crash's
/// retry, no preemption) and the means of the parts, which add up to it (ms; `None` without
/// such a request). See [`crate::request::TtftParts`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TtftPartsSummary {
    pub requests: u64,
    pub ttft: Option<f64>,
    pub to_the_instance: Option<f64>,
    pub waiting: Option<f64>,
    pub prefill: Option<f64>,
    pub token_out: Option<f64>,
}

impl TtftPartsSummary {
    /// "3.146 to the instance + 10.825 waiting + 11.660 prefill + 0.259 token out = 25.890"
    /// (ms, as the latency table writes them).
    pub fn describe(&self) -> String {
        format!(
            "{} to the instance + {} waiting + {} prefill + {} token out = {}",
            f(self.to_the_instance),
            f(self.waiting),
            f(self.prefill),
            f(self.token_out),
            f(self.ttft)
        )
    }

    /// The parts of several runs (an evaluation's seeds), each run weighed by its requests.
    pub fn pooled<'a>(runs: impl IntoIterator<Item = &'a TtftPartsSummary>) -> Self {
        let mut sums = [0.0; 5];
        let mut requests = 0;
        for r in runs {
            let parts = [r.ttft, r.to_the_instance, r.waiting, r.prefill, r.token_out];
            for (sum, v) in sums.iter_mut().zip(parts) {
                *sum += v.unwrap_or(0.0) * r.requests as f64;
            }
            requests += r.requests;
        }
        let mean = |sum: f64| (requests > 0).then(|| sum / requests as f64);
        TtftPartsSummary {
            requests,
            ttft: mean(sums[0]),
            to_the_instance: mean(sums[1]),
            waiting: mean(sums[2]),
            prefill: mean(sums[3]),
            token_out: mean(sums[4]),
        }
    }
}

impl From<crate::metrics::TtftPartsTotal> for TtftPartsSummary {
    fn from(t: crate::metrics::TtftPartsTotal) -> Self {
        let mean = |us: u128| (t.requests > 0).then(|| us as f64 / t.requests as f64 / 1000.0);
        let parts = [
            t.to_the_instance_us,
            t.waiting_us,
            t.prefill_us,
            t.token_out_us,
        ];
        TtftPartsSummary {
            requests: t.requests,
            ttft: mean(parts.iter().sum()),
            to_the_instance: mean(t.to_the_instance_us),
            waiting: mean(t.waiting_us),
            prefill: mean(t.prefill_us),
            token_out: mean(t.token_out_us),
        }
    }
}

/// Aggregates of a run (every latency in milliseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub seed: u64,
    pub requests: RequestCounts,
    /// Simulated time of the last event processed (≤ horizon), seconds.
    pub sim_duration_s: f64,
    /// Ticks (distinct event times) processed.
    pub ticks: u64,
    pub throughput: Throughput,
    pub ttft_ms: Distribution,
    /// Per output-token samples (every token after the first, all requests).
    pub itl_ms: Distribution,
    pub e2e_ms: Distribution,
    pub scheduling_delay_ms: Distribution,
    pub ttft_parts_ms: TtftPartsSummary,
    pub preemptions: u64,
    pub rejections: BTreeMap<String, u64>,
    pub kv: KvSummary,
    pub anomalies: Anomalies,
    pub slo: SloSummary,
    pub fairness: Fairness,
    pub routing: RoutingSummary,
    /// Σ weight · normalised metric, for the scenario's `outputs.fitness` weights.
    pub fitness: Option<f64>,
    pub instances: Vec<InstanceSummary>,
    /// Per instance group: GPU-hours, cost, instance counts, scaling actions.
    pub groups: Vec<GroupUsage>,
    pub cost: CostSummary,
    /// Energy: per step, per group and for the run (only with the scenario's `energy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy: Option<EnergySummary>,
    /// The gateway's bands (only with the scenario's `flow_control`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_control: Option<FlowControlSummary>,
    /// The injected faults (only with the scenario's `faults`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsSummary>,
    /// Speculative decoding, per group that has it (only when one does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub speculative: Vec<SpeculativeSummary>,
    /// Multi-LoRA (only when the workload declares adapters or a group serves them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraSummary>,
    pub tenants: Vec<SliceSummary>,
    pub slo_classes: Vec<SliceSummary>,
    /// Prefill/decode disaggregation (only when the cluster has decode instances).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<DisaggSummary>,
    /// The network between nodes (only with `cluster.topology`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSummary>,
    /// Results added by your own systems (`metrics::SummaryExtras`), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extras: BTreeMap<String, serde_json::Value>,
    /// KV block events per instance (only with `outputs.kv_events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_events: Option<Vec<KvEventCounts>>,
    /// Plain-language diagnoses of outcomes worth a look (also printed on stderr).
    pub warnings: Vec<String>,
}

/// A table cell: 3 decimals, or scientific notation where that would not fit a 10-wide
/// column with a space before it (so columns never run together).
fn f(v: Option<f64>) -> String {
    v.map_or_else(
        || "-".to_string(),
        |x| {
            let fixed = format!("{x:.3}");
            if fixed.len() <= 9 {
                fixed
            } else {
                format!("{x:.3e}")
            }
        },
    )
}

impl Summary {
    /// The exact text of `summary.json` (pretty JSON and a final newline).
    pub fn to_json_file(&self) -> String {
        serde_json::to_string_pretty(self).expect("the summary serialises") + "\n"
    }

    /// The deterministic human summary printed on stdout.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let r = &self.requests;
        let _ = writeln!(s, "scenario {} (seed {})", self.scenario, self.seed);
        let _ = write!(
            s,
            "requests: {} injected, {} completed, {} rejected, {} dropped, {} timed out, {} queued, {} running, {} in transit",
            r.injected,
            r.completed,
            r.rejected,
            r.dropped,
            r.timed_out,
            r.queued,
            r.running,
            r.in_transit
        );
        match r.failed {
            Some(n) => _ = writeln!(s, ", {n} failed"),
            None => s.push('\n'),
        }
        let _ = writeln!(
            s,
            "simulated {:.3} s in {} ticks; {:.3} req/s, {:.1} output tok/s",
            self.sim_duration_s,
            self.ticks,
            self.throughput.requests_per_s,
            self.throughput.output_tokens_per_s
        );
        let _ = writeln!(
            s,
            "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (ms)", "mean", "p50", "p90", "p99", "min", "max"
        );
        for (name, d) in [
            ("ttft", &self.ttft_ms),
            ("itl (per token)", &self.itl_ms),
            ("e2e", &self.e2e_ms),
            ("scheduling delay", &self.scheduling_delay_ms),
        ] {
            let _ = writeln!(
                s,
                "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
                name,
                f(d.mean),
                f(d.p50),
                f(d.p90),
                f(d.p99),
                f(d.min),
                f(d.max)
            );
        }
        let parts = &self.ttft_parts_ms;
        if parts.requests > 0 {
            let left_out = self.requests.completed.saturating_sub(parts.requests);
            let _ = writeln!(
                s,
                "ttft taken apart (mean ms{}): {}",
                if left_out > 0 {
                    format!(", without the {left_out} preempted or retried")
                } else {
                    String::new()
                },
                parts.describe()
            );
        }
        let _ = writeln!(
            s,
            "preemptions: {}; KV prefix hit rate: {:.4} ({} of {} prompt blocks)",
            self.preemptions,
            self.kv.hit_rate,
            self.kv.hit_blocks,
            self.kv.hit_blocks + self.kv.miss_blocks
        );
        if self.kv.offloaded_blocks + self.kv.reloaded_blocks > 0 {
            let _ = writeln!(
                s,
                "CPU KV tier: {} blocks offloaded, {} reloaded; hit rate GPU {:.4}, CPU {:.4}; thrashing {:.4}",
                self.kv.offloaded_blocks,
                self.kv.reloaded_blocks,
                self.kv.gpu_hit_rate,
                self.kv.cpu_hit_rate,
                self.kv.thrashing_rate
            );
        }
        if let Some(n) = &self.kv.nvme {
            let _ = writeln!(
                s,
                "NVMe KV tier: {} blocks written, {} loaded; hit rate {:.4}",
                n.written_blocks, n.loaded_blocks, n.hit_rate
            );
        }
        if let Some(st) = &self.kv.store {
            let _ = writeln!(
                s,
                "shared KV store ({}): {} blocks written, {} evicted, {} loaded ({} written by another instance); hit rate {:.4}; {} of {} blocks held",
                st.write,
                st.written_blocks,
                st.evicted_blocks,
                st.loaded_blocks,
                st.cross_instance_loaded_blocks,
                st.hit_rate,
                st.held_blocks,
                st.capacity_blocks
            );
        }
        if self.anomalies.any() {
            let a = &self.anomalies;
            let _ = writeln!(
                s,
                "anomalies: {} priority inversions, {} head-of-line blocking, {} scale oscillations, {} KV thrashing reloads",
                a.priority_inversions, a.hol_blocking, a.scale_oscillations, a.kv_thrashing
            );
        }
        for (reason, n) in &self.rejections {
            let _ = writeln!(s, "rejected by {reason}: {n}");
        }
        if let Some(faults) = &self.faults {
            let att = |a: Option<f64>| a.map_or("n/a".to_string(), |a| format!("{a:.4}"));
            for st in &faults.stragglers {
                let _ = writeln!(
                    s,
                    "straggler: instance {} ×{} from {} s to {} s ({}); SLO attainment of requests arriving before {}, during {}, after {}",
                    st.instance,
                    st.slowdown,
                    st.from_s,
                    st.until_s,
                    crate::scenario::counted(st.steps_slowed, "step"),
                    att(st.before.attainment),
                    att(st.during.attainment),
                    att(st.after.attainment)
                );
            }
            for (what, links, one, many) in [
                ("kv link", &faults.kv_links, "transfer", "transfers"),
                (
                    "host link",
                    &faults.host_links,
                    "step with transfers",
                    "steps with transfers",
                ),
                (
                    "pipeline link",
                    &faults.pp_links,
                    "micro-batch",
                    "micro-batches",
                ),
            ] {
                for l in links {
                    let _ = writeln!(
                        s,
                        "{what}: instance {} at {} of its bandwidth from {} s to {} s ({} {})",
                        l.instance,
                        l.bandwidth,
                        l.from_s,
                        l.until_s,
                        l.transfers,
                        if l.transfers == 1 { one } else { many }
                    );
                }
            }
            if let Some(c) = &faults.crashes
                && c.availability.is_none()
                && c.crashes > 0
                && c.events.iter().all(|e| e.back_s.is_none())
            {
                // Only autoscaled replicas crashed: each is off at its crash, never down, so
                // down time, availability and the up/down split have nothing to say.
                let _ = writeln!(
                    s,
                    "crashes: {} ({} skipped), all of autoscaled replicas, each off at its crash (not down: its group's policy starts another); {} requests taken down: {} failed, {} retried ({} completed after a retry)",
                    c.crashes, c.skipped, c.lost, c.failed, c.retried, c.completed_after_retry,
                );
            } else if let Some(c) = &faults.crashes {
                let _ = writeln!(
                    s,
                    "crashes: {} ({} skipped), {:.3} instance-s down (availability {}); {} requests taken down: {} failed, {} retried ({} completed after a retry); SLO attainment of requests arriving with all instances up {}, with some down {}",
                    c.crashes,
                    c.skipped,
                    c.down_s,
                    att(c.availability),
                    c.lost,
                    c.failed,
                    c.retried,
                    c.completed_after_retry,
                    att(c.healthy.attainment),
                    att(c.degraded.attainment)
                );
            }
        }
        if let Some(fc) = &self.flow_control {
            let bands: Vec<String> = fc
                .bands
                .iter()
                .map(|b| {
                    format!(
                        "priority {}: {} arrived, {} routed (wait p99 {} ms), {} shed full, {} shed expired, {} timed out",
                        b.priority,
                        b.arrived,
                        b.dispatched,
                        f(b.wait_ms.p99).trim(),
                        b.shed_full,
                        b.shed_expired,
                        b.timed_out
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "gateway: requests waited {:.3} s in all; {}",
                fc.waiting_s,
                bands.join("; ")
            );
        }
        let slo = match (self.slo.attainment, self.slo.goodput_per_s) {
            (Some(a), Some(g)) => format!(
                "SLO: {} of {} requests good (attainment {a:.4}), goodput {g:.3} req/s",
                self.slo.good, r.injected
            ),
            _ => "SLO: attainment n/a (no latency target declared)".to_string(),
        };
        let _ = writeln!(
            s,
            "{slo}; Jain fairness: tenants {:.4}, instances {:.4}",
            self.fairness.jain_tenant_output_tokens, self.fairness.jain_instance_completed
        );
        if let Some(d) = &self.disaggregation {
            let _ = writeln!(
                s,
                "P/D: {} KV transfers, {:.3} GB; {} to KV on decode (ms) mean {}, p99 {}; to its reservation p99 {}, {} waited for room{}",
                d.transfers,
                d.transfer_gb,
                if d.first_token_on_decode {
                    "prefill's end"
                } else {
                    "first token"
                },
                f(d.transfer_ms.mean),
                f(d.transfer_ms.p99),
                f(d.decode_kv_wait_ms.p99),
                d.waited_for_kv,
                if d.first_token_on_decode {
                    "; first tokens sent by the decode instances"
                } else {
                    ""
                }
            );
            let pools: Vec<String> = d
                .pools
                .iter()
                .map(|p| {
                    format!(
                        "{} ×{} busy {:.1}%",
                        p.role,
                        p.instances,
                        100.0 * p.busy_fraction
                    )
                })
                .collect();
            let _ = writeln!(s, "pools: {}", pools.join(", "));
            if let Some(c) = &d.contention_ms {
                let _ = writeln!(
                    s,
                    "P/D transfers slowed by other transfers on their links (ms): mean {}, p99 {}",
                    f(c.mean),
                    f(c.p99)
                );
            }
        }
        if let Some(n) = &self.network {
            let levels: Vec<String> = n
                .levels
                .iter()
                .filter(|l| l.transfers > 0)
                .map(|l| {
                    format!(
                        "{} {:.3} GB (busiest {:.1}%)",
                        l.level,
                        l.gb,
                        100.0 * l.utilisation_max
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "network: {} on {} in {} ({}); carried: {}",
                crate::scenario::counted(n.instances.len() as u64, "instance"),
                crate::scenario::counted(u64::from(n.nodes), "node"),
                crate::scenario::counted(u64::from(n.racks), "rack"),
                n.placement,
                if levels.is_empty() {
                    "nothing".to_string()
                } else {
                    levels.join(", ")
                }
            );
        }
        for (name, value) in &self.extras {
            let _ = writeln!(s, "{name}: {value}");
        }
        if let Some(fitness) = self.fitness {
            let _ = writeln!(s, "fitness: {fitness:.6}");
        }
        // Per-tenant and per-class rows when there is more than the one implicit slice.
        let slices = self
            .tenants
            .iter()
            .map(|t| ("tenant", t))
            .chain(self.slo_classes.iter().map(|c| ("class", c)));
        if self.tenants.len() + self.slo_classes.len() > 2 {
            let _ = writeln!(
                s,
                "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>11}{:>10}{:>10}",
                "tenant / SLO class",
                "injected",
                "completed",
                "rejected",
                "timed out",
                "good",
                "attainment",
                "ttft p90",
                "e2e p90"
            );
            for (kind, x) in slices {
                let _ = writeln!(
                    s,
                    "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>11}{:>10}{:>10}",
                    format!("{kind} {}", x.name),
                    x.injected,
                    x.completed,
                    x.rejected,
                    x.timed_out,
                    x.good,
                    x.slo_attainment
                        .map_or("n/a".to_string(), |a| format!("{a:.4}")),
                    f(x.ttft_ms.p90),
                    f(x.e2e_ms.p90)
                );
            }
        }
        if self.groups.iter().any(|g| g.autoscaled || g.cost > 0.0) {
            let _ = writeln!(
                s,
                "cost: {:.3} over {:.3} GPU-hours, {} per 1M output tokens",
                self.cost.total,
                self.cost.gpu_hours,
                self.cost
                    .per_million_output_tokens
                    .map_or("n/a (no token served)".into(), |c| format!("{c:.4}"))
            );
            let _ = writeln!(
                s,
                "{:<12}{:>10}{:>10}{:>10}{:>10}{:>12}{:>6}{:>6}{:>6}",
                "group",
                "gpu-hours",
                "cost",
                "mean inst",
                "max inst",
                "at max (s)",
                "ups",
                "downs",
                "cold"
            );
            for g in &self.groups {
                let _ = writeln!(
                    s,
                    "{:<12}{:>10.3}{:>10.3}{:>10.3}{:>10}{:>12.1}{:>6}{:>6}{:>6}",
                    g.group,
                    g.gpu_hours,
                    g.cost,
                    g.mean_instances,
                    g.max_instances,
                    g.time_at_max_s,
                    g.scale_ups,
                    g.scale_downs,
                    g.cold_starts
                );
            }
        }
        for sp in &self.speculative {
            let _ = writeln!(
                s,
                "speculative decoding ({}): {} k={}, {} of {} drafts accepted ({}), {} tokens per verification, drafter {:.3} s",
                sp.group,
                sp.method,
                sp.num_speculative_tokens,
                sp.accepted,
                sp.drafted,
                sp.acceptance_rate
                    .map_or("n/a".into(), |r| format!("{r:.4}")),
                sp.mean_acceptance_length
                    .map_or("n/a".into(), |l| format!("{l:.3}")),
                sp.draft_s
            );
        }
        if let Some(l) = &self.lora {
            for g in &l.groups {
                let _ = writeln!(
                    s,
                    "LoRA ({}): max_loras {}, max_cpu_loras {}, rank ≤ {} ({:.3} GiB of slots); {} loads from storage, {} copies to the GPU; steps waited {:.3} s for them, LoRA kernels {:.3} s",
                    g.group,
                    g.max_loras,
                    g.max_cpu_loras,
                    g.max_lora_rank,
                    g.slots_gib,
                    g.loads,
                    g.activations,
                    g.load_s,
                    g.kernel_s
                );
            }
            if !l.adapters.is_empty() {
                let _ = writeln!(
                    s,
                    "adapter           rank  requests  completed   loads  copies  ttft mean ms  e2e mean ms"
                );
                for a in &l.adapters {
                    let _ = writeln!(
                        s,
                        "{:<16} {:>5} {:>9} {:>10} {:>7} {:>7} {:>13} {:>12}",
                        a.requests.name,
                        a.rank,
                        a.requests.injected,
                        a.requests.completed,
                        a.loads,
                        a.activations,
                        a.requests
                            .ttft_ms
                            .mean
                            .map_or("n/a".into(), |m| format!("{m:.3}")),
                        a.requests
                            .e2e_ms
                            .mean
                            .map_or("n/a".into(), |m| format!("{m:.3}"))
                    );
                }
            }
        }
        if let Some(e) = &self.energy {
            let _ = writeln!(
                s,
                "energy: {:.4} kWh GPU ({:.4} in steps, {:.4} idle), {:.4} kWh facility (pue {}), mean {:.1} W, {} J per output token{}",
                e.gpu_kwh,
                e.step_kwh,
                e.idle_kwh,
                e.facility_kwh,
                e.pue,
                e.mean_power_w,
                e.joules_per_output_token
                    .map_or("n/a".into(), |j| format!("{j:.4}")),
                if e.electricity_cost > 0.0 {
                    format!(", electricity {:.4}", e.electricity_cost)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            s,
            "{:<10}{:<12}{:>10}{:>10}{:>12}{:>8}",
            "instance", "group", "completed", "steps", "preemptions", "busy"
        );
        for i in &self.instances {
            let _ = writeln!(
                s,
                "{:<10}{:<12}{:>10}{:>10}{:>12}{:>7.1}%",
                i.index,
                i.group,
                i.completed,
                i.steps,
                i.preemptions,
                i.busy_fraction * 100.0
            );
        }
        s
    }
}
