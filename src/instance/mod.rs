//! Model-server instances: a vLLM v1 scheduler over a paged KV cache.
//!
//! Systems, in tick order:
//! - [`retire_steps`] ([`SimSystems::Advance`]): the step that ended now frees the instance;
//!   requests that finished in it are handed to Record.
//! - [`enqueue_requests`] ([`SimSystems::Enqueue`]): routed requests join the wait queue;
//!   unservable ones are dropped (INV-1 bucket `dropped`).
//! - [`batch::form_batches`] ([`SimSystems::Batch`]): vLLM v1 batch formation.
//! - [`step::execute_steps`] ([`SimSystems::Execute`]): the latency model prices the batch and
//!   the step end is scheduled.
//! - [`step::complete_steps`] ([`SimSystems::Complete`]): token progress of the batch.
//!
//! Step accounting follows BLIS: a batch's progress is applied when the step starts and its
//! outcomes (first token, token times, completion) are stamped at the step end; KV blocks of
//! a finishing request are released when its last step starts. Finished requests leave (and
//! are recorded) at the step end. Per-token state lives in [`Seq`] inside the instance's
//! [`Scheduler`], so a step touches no request entity (ARCHITECTURE: per-step counters live in
//! the instance component).
//!
//! Keeps INV-4 (KV conservation) and INV-8 (work conservation: an instance with queued or
//! running requests always has a step in flight).

pub mod anomaly;
pub mod batch;
mod check;
pub mod energy;
pub mod lockstep;
pub mod lora;
pub mod pipeline;
mod plugin;
pub mod report;
pub mod schedulers;
pub mod spawn;
pub mod speculative;
pub mod step;
#[cfg(test)]
pub(crate) mod tests;

pub use check::{check_group, check_kv_store};
pub use pipeline::{
    InTransit, InstanceParts, Instances, PipelineWork, enqueue_requests, expire_requests,
    publish_kv_events, retire_steps,
};
pub use plugin::InstancePlugin;
pub use schedulers::QueuePolicies;

use std::collections::VecDeque;

use bevy_ecs::prelude::*;

use crate::engine::{ClusterView, InstanceDue};
use crate::kv::{KvCache, SeqBlocks};
use crate::policy::InstanceSnapshot;
use crate::request::{FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::time::{SimDuration, SimTime};

/// The instance plugin's systems, each set inside its engine stage
/// ([`SimSystems`](crate::SimSystems)): order your own systems against these.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstanceSystems {
    /// `retire_steps` (Advance).
    Retire,
    /// `enqueue_requests`, then `expire_requests` (Enqueue).
    Enqueue,
    /// `batch::form_batches` (Batch).
    Batch,
    /// `step::execute_steps` (Execute).
    Execute,
    /// `step::complete_steps` (Complete).
    Complete,
    /// `publish_kv_events` (Observe), while KV events are on.
    PublishKvEvents,
}

/// Where an instance is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Off,
    Provisioning,
    Loading,
    WarmingUp,
    Serving,
    Draining,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Off => "off",
            Phase::Provisioning => "provisioning",
            Phase::Loading => "loading",
            Phase::WarmingUp => "warming_up",
            Phase::Serving => "serving",
            Phase::Draining => "draining",
        }
    }

    /// Counted in the group's size (starting or serving).
    pub fn counted(self) -> bool {
        !matches!(self, Phase::Off | Phase::Draining)
    }

    /// Has its model loaded and serves (or warms up).
    pub fn ready(self) -> bool {
        matches!(self, Phase::WarmingUp | Phase::Serving)
    }

    pub fn starting(self) -> bool {
        matches!(
            self,
            Phase::Provisioning | Phase::Loading | Phase::WarmingUp
        )
    }
}

/// An instance's life-cycle state.
#[derive(Component, Clone, Debug)]
pub struct Power {
    pub phase: Phase,
    /// End of the current timed phase (provisioning, loading, warming up).
    pub phase_end: Option<SimTime>,
    /// Since when it has been on (not off), for GPU time.
    pub on_since: Option<SimTime>,
    pub kv: crate::kv::KvRecipe,
    /// With `cluster.topology` and a derived `load_s`: the weights load over the fabric, so
    /// the loading phase lasts as long as the links make it.
    pub weights: Option<crate::network::WeightLoad>,
}

/// Identity of an instance.
#[derive(Component, Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// Dense index in [`InstanceIndex`], stable for the whole run.
    pub index: u32,
    /// Index of its group in the scenario.
    pub group: u32,
}

/// vLLM scheduler limits of an instance.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    /// 0 = off.
    pub long_prefill_token_threshold: u32,
    pub max_model_len: Option<u32>,
    /// Tensor-parallel GPUs per pipeline stage.
    pub tp: u32,
    /// Pipeline stages (1 = no pipeline parallelism).
    pub pp: u32,
    /// Bytes sent between stages per token of a batch.
    pub pp_bytes_per_token: f64,
    /// Stage-to-stage link: bytes per µs and fixed latency.
    pub pp_link_bytes_per_us: f64,
    pub pp_link_latency: SimDuration,
    /// CPU KV tier transfers: µs per block, and a fixed µs per step that moves any block.
    pub host_block_us: f64,
    pub host_latency_us: f64,
    /// NVMe KV tier reads: µs per block, and a fixed µs per step that reads any block.
    pub nvme_block_us: f64,
    pub nvme_latency_us: f64,
    /// Wait-queue cap (`limits.max_waiting_per_instance`); `None` = unbounded.
    pub max_waiting: Option<u32>,
    /// Mixed, prefill-only or decode-only (P/D disaggregation).
    pub role: crate::scenario::Role,
    /// A prefill instance whose token only answers vLLM's P/D proxy: the decode instance
    /// samples the first token (`cluster.pd_first_token: Decode`).
    pub first_token_on_decode: bool,
    /// The scheduler mode and API server around the steps.
    pub serving: crate::latency::ServingPath,
    /// `serving.streams_out()`, read at every step's end.
    pub streams_out: bool,
    /// The batch scheduler reserves KV for prompt + output at admission
    /// ([`BatchScheduler::reserves_whole_request`](schedulers::BatchScheduler::reserves_whole_request)).
    pub reserves_whole: bool,
}

#[cfg(test)]
impl Limits {
    /// An instance without pipeline, CPU tier, length or queue limits (unit tests).
    pub(crate) fn plain(max_num_seqs: u32, max_num_batched_tokens: u32) -> Self {
        Limits {
            max_num_seqs,
            max_num_batched_tokens,
            long_prefill_token_threshold: 0,
            max_model_len: None,
            tp: 1,
            pp: 1,
            pp_bytes_per_token: 0.0,
            pp_link_bytes_per_us: 1.0,
            pp_link_latency: SimDuration::ZERO,
            host_block_us: 0.0,
            host_latency_us: 0.0,
            nvme_block_us: 0.0,
            nvme_latency_us: 0.0,
            max_waiting: None,
            role: Default::default(),
            first_token_on_decode: false,
            serving: crate::latency::ServingPath::BARE,
            streams_out: false,
            reserves_whole: false,
        }
    }
}

/// Instance entities by index.
#[derive(Resource, Debug, Default, Clone)]
pub struct InstanceIndex(pub Vec<Entity>);

/// A request on an instance: its copy of the request data plus per-token progress.
#[derive(Clone, Debug)]
pub struct Seq {
    pub entity: Entity,
    pub spec: RequestSpec,
    pub lifecycle: Lifecycle,
    /// Tokens whose KV is computed (vLLM `num_computed_tokens`, BLIS ProgressIndex).
    pub progress: u32,
    /// Output tokens emitted so far (kept across preemption, as vLLM's recompute mode does).
    pub generated: u32,
    pub kv: SeqBlocks,
    /// Prompt tokens found in the prefix cache at the last admission.
    pub cached_tokens: u32,
    pub first_scheduled: Option<SimTime>,
    pub first_token: Option<SimTime>,
    pub last_token: SimTime,
    pub ttft: Option<SimDuration>,
    /// From the end of the step that emitted the first token to the client receiving it
    /// (the API server's output processing; part of `ttft`).
    pub first_delivery: SimDuration,
    /// The same for the last token.
    pub last_delivery: SimDuration,
    pub itl_sum: SimDuration,
    pub itl_count: u32,
    pub preemptions: u32,
    /// End of the micro-batch this request is in (pipeline parallelism): it cannot be
    /// scheduled again, nor preempted, before then.
    pub busy_until: SimTime,
    /// Instance that ran its prompt to its end (and produced the first token, unless a P/D
    /// decode instance did: `cluster.pd_first_token`).
    pub prefill_instance: Option<u32>,
    /// P/D with `pd_first_token: Decode`, on the prefill instance: its prompt is done and its
    /// one token answered the proxy, this long after the step's end (the API server's output
    /// work). Taken by the hand-off.
    pub proxy_answer: Option<SimDuration>,
    /// P/D: the prefill's end to KV ready on this (decode) instance.
    pub kv_transfer: Option<SimDuration>,
    /// P/D: the first step of this (decode) instance, by its step count, that it may join
    /// once its KV is here ([`batch::landing_joins_from`]).
    pub joins_from: u64,
    /// Its share of the energy of the steps it took part in, nanojoules (`energy`; 0
    /// without). Whole units, so that lockstep steps sum it exactly as normal steps do.
    pub energy_nj: u64,
    /// Speculative decoding: draft tokens verified for it, and accepted.
    pub drafted: u32,
    pub accepted: u32,
}

impl Seq {
    pub fn new(entity: Entity, spec: RequestSpec, lifecycle: Lifecycle) -> Self {
        Seq {
            entity,
            spec,
            lifecycle,
            progress: 0,
            generated: 0,
            kv: SeqBlocks::default(),
            cached_tokens: 0,
            first_scheduled: None,
            first_token: None,
            last_token: SimTime::ZERO,
            ttft: None,
            first_delivery: SimDuration::ZERO,
            last_delivery: SimDuration::ZERO,
            itl_sum: SimDuration::ZERO,
            itl_count: 0,
            preemptions: 0,
            busy_until: SimTime::ZERO,
            prefill_instance: None,
            proxy_answer: None,
            kv_transfer: None,
            joins_from: 0,
            energy_nj: lifecycle.retried_energy_nj,
            drafted: 0,
            accepted: 0,
        }
    }

    /// Tokens that must be in the KV cache before the next output token can be sampled:
    /// the prompt plus every emitted token (the last emitted one is fed in by the next step).
    pub fn known_tokens(&self) -> u32 {
        self.spec.input_tokens + self.generated
    }

    /// True while the request computes more than its one newest token (prompt, or the
    /// recompute after a preemption).
    pub fn in_prefill(&self) -> bool {
        self.generated == 0 || self.progress + 1 < self.known_tokens()
    }

    /// Turns a seq that ended into its record.
    pub fn finish(
        &self,
        state: FinalState,
        instance: u32,
        completed: Option<SimTime>,
        e2e: Option<SimDuration>,
    ) -> FinishedRequest {
        FinishedRequest {
            entity: self.entity,
            spec: self.spec.clone(),
            lifecycle: self.lifecycle,
            state,
            instance: Some(instance),
            cached_tokens: self.cached_tokens,
            generated_tokens: self.generated,
            scheduled: self.first_scheduled,
            first_token: self.first_token,
            completed,
            ttft: self.ttft,
            e2e,
            itl_sum: self.itl_sum,
            itl_count: self.itl_count,
            preemptions: self.preemptions,
            prefill_instance: self.prefill_instance,
            // A request reaches its decode instance with one token (the first, sent by the
            // prefill instance) or none (`pd_first_token: Decode`).
            decode_instance: (self.generated > 1 || self.kv_transfer.is_some()).then_some(instance),
            kv_transfer: self.kv_transfer,
            energy_nj: self.energy_nj,
            drafted: self.drafted,
            accepted: self.accepted,
        }
    }
}

/// P/D, prefill side: a request whose prefill ended in a step, to hand to a decode
/// instance at that step's end.
#[derive(Clone, Debug)]
pub struct Handoff {
    /// Holds its KV blocks on the prefill instance until the transfer ends.
    pub seq: Seq,
    /// End of the step that ended its prompt (and produced its first token).
    pub ready: SimTime,
    /// Length of that step (layer-wise transfer overlaps it).
    pub last_step: SimDuration,
    /// `pd_first_token: Decode`: from `ready` to the prefill instance's answer reaching the
    /// proxy (its API server's output work). `None`: the first token went to the client.
    pub proxy_answer: Option<SimDuration>,
}

/// P/D, decode side: a request on its way here, first waiting for KV room (in order), then
/// in transfer until `done`.
#[derive(Clone, Debug)]
pub struct Incoming {
    pub handoff: Handoff,
    /// The prefill instance (whose blocks `handoff.seq.kv` are).
    pub from: u32,
    /// Blocks reserved here (empty while waiting for room).
    pub reserved: SeqBlocks,
    /// When its KV is all here (`None` while waiting for room).
    pub done: Option<SimTime>,
    /// First block sent (the ones before it were already cached here).
    pub sent_from: u32,
    /// When this instance's engine has the request: at once (`Prefill` reading), or once the
    /// proxy has the prefill instance's answer and this instance's API server has tokenized
    /// it (in its micro-batch) and taken it in (`Decode`, vLLM's P/D proxy).
    pub handed: SimTime,
    /// It found no KV room here at a decision (`waited_for_kv`).
    pub waited: bool,
}

/// One request's part in the batch being formed / executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Index into [`Scheduler::running`].
    pub slot: u32,
    pub tokens: u32,
    pub prefill: bool,
    /// Progress before the step.
    pub context: u32,
}

/// Per-instance counters, reported in the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceCounters {
    pub steps: u64,
    pub busy: SimDuration,
    pub preemptions: u64,
    pub completed: u64,
    pub dropped: u64,
    pub timed_out: u64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    /// Longest the wait queue has been.
    pub peak_waiting: u64,
    /// Requests rejected because the wait queue was full.
    pub queue_full: u64,
    /// P/D: requests handed to a decode instance after their prefill here.
    pub handed_off: u64,
    /// Requests taken from the wait queue past a waiting one that arrived earlier, and past
    /// one that also has a higher priority ([`anomaly`](crate::instance::anomaly)).
    pub hol_blocking: u64,
    pub priority_inversions: u64,
    /// Steps started while a straggler window slowed the instance (faults).
    pub slowed_steps: u64,
    /// Steps whose tokens went out through a modelled API server, and those of them whose
    /// tokens reached it while it was still streaming the previous step's
    /// ([`step::complete_one`]); the most chunks (requests with tokens) one step streamed.
    pub api_steps: u64,
    pub api_behind: u64,
    pub api_peak_chunks: u32,
}

/// The scheduler state of an instance.
#[derive(Component, Debug, Default)]
pub struct Scheduler {
    /// Wait queue, head first (preempted requests are put back at the front).
    pub waiting: VecDeque<Seq>,
    /// Running batch in admission order (preemption takes from the tail).
    pub running: Vec<Seq>,
    /// The batch of the current step.
    pub plan: Vec<Planned>,
    /// When the instance can start its next step (the first pipeline stage frees), if a
    /// step is in flight.
    pub step_end: Option<SimTime>,
    /// Ends of the micro-batches in flight, oldest first (one entry without pipelining).
    pub in_flight: VecDeque<SimTime>,
    /// End of the step being completed this tick (where its outcomes are stamped).
    pub step_done: SimTime,
    /// Start of that step.
    pub step_started: SimTime,
    /// Requests finished by steps in flight; each leaves at its `completed` time.
    pub leaving: Vec<FinishedRequest>,
    /// Already listed in [`InstanceDue::batch`] this tick.
    pub listed: bool,
    /// Consecutive steps that computed nothing (watchdog).
    pub stalled_steps: u32,
    /// Forming the batch preempted a request: an empty batch is then retried at once (the
    /// blocks it freed may admit the queue), not left to wait for arriving KV.
    pub preempted_forming: bool,
    /// The batch formed last left out requests that reached the engine after it was decided
    /// (async scheduling, [`batch::decided_at`]).
    pub left_out_arrivals: bool,
    /// Preemptions counted when a request last completed here (watchdog).
    pub preemptions_at_completion: u64,
    pub counters: InstanceCounters,
    /// Not routable (starting, draining or off; see `crate::autoscale`).
    pub unroutable: bool,
    /// Speed as a fraction of normal while warming up (steps take 1/x as long).
    pub warmup_speed: Option<f64>,
    /// P/D, prefill side: requests whose prefill ends with a step in flight, in step order.
    pub handoff: Vec<Handoff>,
    /// P/D, prefill side: requests handed off whose KV blocks here are still being sent
    /// (each is in its decode instance's `incoming`).
    pub outbound: u32,
    /// P/D, prefill side: the blocks of requests whose KV has been read, held until the
    /// scheduler hears of it, with the step from whose forming it does
    /// ([`batch::sent_freed_from`]).
    pub sent: Vec<(u64, SeqBlocks)>,
    /// P/D, decode side: requests headed here, in hand-off order.
    pub incoming: VecDeque<Incoming>,
    /// P/D, decode side: requests whose KV is here, to join the running batch.
    pub arrived: VecDeque<Seq>,
    /// Lockstep decode steps: while `lockstep.lag()` > 0 the per-token fields of the running
    /// requests are that many steps behind; [`settle`](Self::settle) brings them up to date.
    pub lockstep: Lockstep,
    /// Requests taken from the wait queue by the batch being formed ([`anomaly`](crate::instance::anomaly)).
    pub scheduled: Vec<Entity>,
    /// The wait queue may hold a request ahead of one that arrived before it (a preempted
    /// request put back at its head, a request enqueued after a later arrival): only then
    /// can FCFS formation overtake, so only then is it checked ([`anomaly`](crate::instance::anomaly)).
    pub unordered: bool,
    /// `decisions.csv` rows of the anomalies detected here, until they are written (only
    /// while it is written).
    pub anomaly_rows: Option<Vec<AnomalyRow>>,
    /// The instance's energy meter, when the scenario has `energy` ([`energy`]).
    pub energy: Option<Box<energy::Meter>>,
    /// Windows in which its steps are slowed (stragglers of the scenario's `faults`):
    /// (from, until, slowdown); empty without.
    pub slowdowns: Vec<(SimTime, SimTime, f64)>,
    /// Crashed and not yet back (faults): it holds nothing, and requests reaching it wait
    /// in `lost` for the fault plugin's policy (fail or retry).
    pub down: bool,
    /// Requests that reached the instance while it was down, this tick.
    pub lost: Vec<Entity>,
    /// Speculative decoding, when its group has it ([`speculative`]).
    pub spec: Option<Box<speculative::Speculation>>,
    /// Multi-LoRA, when its group has it ([`lora`]).
    pub lora: Option<Box<lora::Adapters>>,
    /// Windows in which its host link (CPU KV tier) or the links between its pipeline
    /// stages keep a fraction of their bandwidth (faults); empty without.
    pub host_faults: Vec<LinkWindow>,
    pub pp_faults: Vec<LinkWindow>,
    /// Until when the API server streams the last completed step's tokens (a modelled
    /// serving path only; [`step::complete_one`]).
    pub api_busy_until: SimTime,
}

/// A window in which one of an instance's links keeps `bandwidth` of its bandwidth (faults
/// `host_links`, `pp_links`; 0 = severed).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkWindow {
    pub from: SimTime,
    pub until: SimTime,
    pub bandwidth: f64,
    /// Steps whose transfers over the link started in the window.
    pub touched: u64,
}

/// A transfer of `wire_us` on the wire at full bandwidth, ready at `now` on a link with
/// fault `windows`: (µs it waits until no severed window holds the link, µs on the wire at
/// the lowest bandwidth of the windows that hold the moment it starts); (0, `wire_us`)
/// outside them. Severed windows end to end, or a degraded one that holds the end of a
/// severed one, are followed: the transfer went at the first severed window's end at full
/// bandwidth.
pub fn through_windows(windows: &mut [LinkWindow], now: SimTime, wire_us: f64) -> (f64, f64) {
    let holds = |w: &LinkWindow, t: SimTime| w.from <= t && t < w.until;
    let mut start = now;
    while let Some(w) = windows
        .iter_mut()
        .find(|w| w.bandwidth == 0.0 && holds(w, start))
    {
        w.touched += 1;
        start = w.until;
    }
    let mut wire = wire_us;
    for w in windows.iter_mut().filter(|w| holds(w, start)) {
        w.touched += 1;
        wire = wire.max(wire_us / w.bandwidth);
    }
    (start.since(now).as_us() as f64, wire)
}

/// Anomaly rows of stages that are not instances (scaling), until `decisions.csv` takes
/// them.
#[derive(Resource, Debug, Default)]
pub struct AnomalyLog(pub Vec<AnomalyRow>);

/// One detected anomaly, as a row of `decisions.csv` (kind `priority_inversion`,
/// `hol_blocking` or `scale_oscillation`).
#[derive(Clone, Debug, PartialEq)]
pub struct AnomalyRow {
    pub time: SimTime,
    pub kind: &'static str,
    /// The request scheduled past another (none for scaling).
    pub request: Option<u64>,
    pub detail: String,
}

impl Scheduler {
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.arrived.is_empty()
    }

    /// INV-8: an instance with work has a step in flight or a micro-batch that will free
    /// some of its requests, or waits for KV blocks a transfer is still sending, that
    /// hand-offs hold until a decode instance is routable, or (a decode instance) that are
    /// reserved for KV still arriving: each of those lists the instance again when it ends.
    pub fn is_progressing(&self) -> bool {
        !self.has_work()
            || self.step_end.is_some()
            || !self.in_flight.is_empty()
            || self.outbound > 0
            || !self.handoff.is_empty()
            || !self.incoming.is_empty()
    }

    /// Requests on the instance that have not left (queued, running, leaving, handed off at
    /// the next step end, or headed here from a prefill instance).
    pub fn resident(&self) -> usize {
        self.waiting.len()
            + self.running.len()
            + self.leaving.len()
            + self.handoff.len()
            + self.incoming.len()
            + self.arrived.len()
    }
}

/// Consecutive empty steps after which an instance is declared stuck.
pub const MAX_STALLED_STEPS: u32 = 100_000;
/// Preemptions without a single completion after which an instance is declared thrashing.
pub const MAX_PREEMPTIONS_WITHOUT_COMPLETION: u64 = 100_000;

/// The progress watchdog: a diagnosis if instance `i` has stopped making progress.
pub fn watchdog(i: u32, sched: &Scheduler, kv: &KvCache) -> Option<String> {
    if sched.stalled_steps >= MAX_STALLED_STEPS {
        return Some(format!(
            "instance {i} computed nothing in {} consecutive steps with {} waiting and {} running requests; its KV cache ({} blocks) cannot make room",
            sched.stalled_steps,
            sched.waiting.len(),
            sched.running.len(),
            kv.total_blocks()
        ));
    }
    let thrash = sched.counters.preemptions - sched.preemptions_at_completion;
    if thrash >= MAX_PREEMPTIONS_WITHOUT_COMPLETION {
        return Some(format!(
            "instance {i} preempted {thrash} times without completing a request: its KV cache ({} blocks) thrashes; give it more kv_blocks or lower max_num_seqs",
            kv.total_blocks()
        ));
    }
    None
}

/// The bundle an instance is spawned with.
#[derive(Bundle)]
pub struct InstanceBundle {
    pub instance: Instance,
    pub limits: Limits,
    pub scheduler: Scheduler,
    pub kv: KvCache,
    pub latency: crate::latency::Latency,
}

/// The observable snapshot of an instance.
pub fn snapshot(index: u32, sched: &Scheduler, kv: &KvCache, in_flight: u32) -> InstanceSnapshot {
    InstanceSnapshot {
        index,
        queue_depth: sched.waiting.len() as u32,
        batch_size: sched.running.len() as u32,
        in_flight,
        kv_used_blocks: kv.allocated_blocks(),
        kv_total_blocks: kv.total_blocks(),
        routable: !sched.unroutable,
    }
}

pub(crate) fn refresh_view(view: &mut ClusterView, i: u32, sched: &Scheduler, kv: &KvCache) {
    let slot = &mut view.instances[i as usize];
    *slot = snapshot(i, sched, kv, slot.in_flight);
    if sched.lora.is_some() {
        report_adapters(view, i, sched);
    }
}

/// Instance `i`'s adapters for the routers ([`lora::report`]); out of line, off the path of
/// instances without adapters.
#[inline(never)]
fn report_adapters(view: &mut ClusterView, i: u32, sched: &Scheduler) {
    lora::report(
        &mut view.adapters[i as usize],
        sched.running.iter().map(|s| s.spec.adapter),
        sched.waiting.iter().map(|s| s.spec.adapter),
    );
}

/// Lists instance `i` for batch formation this tick (once).
pub(crate) fn list_for_batch(due: &mut InstanceDue, i: u32, sched: &mut Scheduler) {
    if sched.step_end.is_none() && !sched.listed && sched.has_work() {
        sched.listed = true;
        due.batch.push(i);
    }
}

/// The most tokens a request ever holds in its instance's KV cache: prompt + output − 1 (the
/// last token is never fed back), or prompt + output where the scheduler reserves the whole
/// request at admission.
pub fn kv_tokens_needed(spec: &RequestSpec, limits: &Limits) -> u64 {
    let whole = u64::from(spec.input_tokens) + u64::from(spec.output_tokens.max(1));
    if limits.reserves_whole {
        whole
    } else {
        whole - 1
    }
    .max(1)
}

/// A request is servable if its whole sequence ([`kv_tokens_needed`] at its last step) fits
/// the cache and `max_model_len`. vLLM checks only the prompt and caps output at
/// `max_model_len`; checking the whole sequence keeps a request that can never finish from
/// preempting itself forever, and asking what the scheduler itself reserves keeps one it
/// could never admit from stalling the instance.
pub fn servable(spec: &RequestSpec, kv: &KvCache, limits: &Limits) -> bool {
    let last = kv_tokens_needed(spec, limits);
    let blocks = match kv.layout() {
        None => last.div_ceil(u64::from(kv.block_size())),
        Some(l) => hybrid_blocks(l, last, kv.block_size(), limits),
    };
    if blocks > u64::from(kv.total_blocks()) {
        return false;
    }
    match limits.max_model_len {
        Some(m) => u64::from(spec.input_tokens) + u64::from(spec.output_tokens) <= u64::from(m),
        None => true,
    }
}

/// The most blocks a request of `last` tokens holds at once on a hybrid cache: its
/// full-attention groups' blocks for the whole sequence, a window and a chunk per
/// sliding-window group, its states.
#[cold]
fn hybrid_blocks(l: &crate::model::KvLayout, last: u64, block_size: u32, limits: &Limits) -> u64 {
    let bs = u64::from(block_size);
    let blocks = last.div_ceil(bs);
    let chunk = u64::from(limits.max_num_batched_tokens);
    let window = (u64::from(l.window) + chunk).div_ceil(bs) + 1;
    blocks.saturating_mul(u64::from(l.full_groups))
        + u64::from(l.sliding_groups) * blocks.min(window)
        + u64::from(l.linear_groups) * u64::from(l.state_blocks)
}

/// An instance's lockstep state (see [`lockstep`]).
#[derive(Debug, Default)]
pub struct Lockstep {
    /// Every running request decodes and emitted its last token at `last_end`.
    pub(crate) cohort: bool,
    /// `growth`, `context` and `finish_at` describe the cohort.
    pub(crate) built: bool,
    /// The step being formed, priced and applied is a lockstep step.
    pub(crate) active: bool,
    /// Lockstep steps the running requests' per-token fields are behind by.
    pub(crate) steps: u32,
    /// Σ ITL samples of those steps.
    pub(crate) itl: SimDuration,
    /// End of the last step (every running request's last token).
    pub(crate) last_end: SimTime,
    /// Σ progress of the running requests when the cohort was built.
    pub(crate) context: u64,
    /// The lag at which the first request would finish (lockstep steps stop before it).
    pub(crate) finish_at: u32,
    /// `growth[k % block_size]`: the running slots (in order) that need a new KV block at
    /// lag k.
    pub(crate) growth: Vec<Vec<u32>>,
    /// The last normal step stopped admitting because the head of the wait queue did not
    /// fit the free blocks (vLLM v1's head-of-line blocking).
    pub(crate) head_blocked: bool,
    /// Σ each running request's share of the energy of those steps, nanojoules (`energy`).
    pub(crate) energy_nj: u64,
}

impl Lockstep {
    /// Lockstep steps the running requests are behind by.
    pub fn lag(&self) -> u32 {
        self.steps
    }
}
