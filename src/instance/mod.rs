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

pub mod batch;
pub mod lockstep;
pub mod report;
pub mod schedulers;
pub mod spawn;
pub mod step;

use std::collections::VecDeque;

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use crate::engine::{
    ClusterView, EnqueueDue, InstanceDue, RecordDue, SimClock, SimStep, SimSystems,
};
use crate::kv::{KvCache, SeqBlocks};
use crate::metrics::SummaryAppExt;
use crate::policy::InstanceSnapshot;
use crate::request::{AssignedTo, FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::setup::{SetupAppExt, SetupStage};
use crate::time::{SimDuration, SimTime};

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
    /// Wait-queue cap (`limits.max_waiting_per_instance`); `None` = unbounded.
    pub max_waiting: Option<u32>,
    /// Mixed, prefill-only or decode-only (P/D disaggregation).
    pub role: crate::scenario::Role,
    /// The scheduler mode and API server around the steps.
    pub serving: crate::latency::ServingPath,
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
            max_waiting: None,
            role: Default::default(),
            serving: crate::latency::ServingPath::BARE,
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
    /// Instance that produced the first output token.
    pub prefill_instance: Option<u32>,
    /// P/D: first token to KV ready on this (decode) instance.
    pub kv_transfer: Option<SimDuration>,
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
            kv_transfer: None,
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
            decode_instance: (self.generated > 1).then_some(instance),
            kv_transfer: self.kv_transfer,
        }
    }
}

/// P/D, prefill side: a request whose prefill ended in a step, to hand to a decode
/// instance at that step's end.
#[derive(Clone, Debug)]
pub struct Handoff {
    /// Holds its KV blocks on the prefill instance until the transfer ends.
    pub seq: Seq,
    /// End of the step that produced its first token.
    pub ready: SimTime,
    /// Length of that step (layer-wise transfer overlaps it).
    pub last_step: SimDuration,
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
    /// P/D, decode side: requests headed here, in hand-off order.
    pub incoming: VecDeque<Incoming>,
    /// P/D, decode side: requests whose KV is here, to join the running batch.
    pub arrived: VecDeque<Seq>,
    /// Lockstep decode steps: while `lockstep.lag()` > 0 the per-token fields of the running
    /// requests are that many steps behind; [`settle`](Self::settle) brings them up to date.
    pub lockstep: lockstep::Lockstep,
}

impl Scheduler {
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.arrived.is_empty()
    }

    /// INV-8: an instance with work has a step in flight or a micro-batch that will free
    /// some of its requests, or waits for KV blocks a transfer is still sending.
    pub fn is_progressing(&self) -> bool {
        !self.has_work()
            || self.step_end.is_some()
            || !self.in_flight.is_empty()
            || self.outbound > 0
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
}

/// Lists instance `i` for batch formation this tick (once).
pub(crate) fn list_for_batch(due: &mut InstanceDue, i: u32, sched: &mut Scheduler) {
    if sched.step_end.is_none() && !sched.listed && sched.has_work() {
        sched.listed = true;
        due.batch.push(i);
    }
}

/// The components of an instance the pipeline systems work on.
pub type InstanceParts = (
    &'static mut Scheduler,
    &'static mut KvCache,
    &'static crate::latency::Latency,
    &'static Limits,
    &'static mut schedulers::Batcher,
);

/// Every instance, for the pipeline systems.
pub type Instances<'w, 's> = Query<'w, 's, InstanceParts>;

/// One instance's part of a fast tick, with one lookup of its components: with `retire`,
/// its step ended now (see [`retire_one`]); then, if it is listed for batch formation, it
/// forms, prices and applies its batch at once. No stage of one instance sees another's:
/// the event queue and Record get the same entries in the same order as stage by stage,
/// instances in index order.
#[expect(
    clippy::too_many_arguments,
    reason = "the instance and the tick's shared state"
)]
pub(crate) fn instance_tick(
    i: u32,
    retire: Option<(&mut InstanceDue, &mut RecordDue)>,
    now: SimTime,
    index: &InstanceIndex,
    ordering: &batch::Ordering<'_>,
    lockstep: bool,
    instances: &mut Instances,
    queue: &mut crate::engine::EventQueue,
    items: &mut Vec<crate::latency::StepItem>,
    view: &mut ClusterView,
    agg: &mut crate::metrics::Aggregates,
    fault: &mut crate::engine::SimFault,
) {
    let (mut sched, mut kv, latency, limits, mut batcher) = instances
        .get_mut(index.0[i as usize])
        .expect("instance entity exists for the whole run");
    // Nothing reads change ticks: not marking them on every access saves a store each.
    let (sched, kv, batcher) = (
        sched.bypass_change_detection(),
        kv.bypass_change_detection(),
        batcher.bypass_change_detection(),
    );
    if let Some((listed, record)) = retire {
        retire_one(listed, record, i, now, sched);
        if !sched.listed {
            return;
        }
        listed.batch.clear(); // formed right here
    }
    if batch::form_one(sched, kv, limits, batcher, now, ordering, lockstep)
        && step::execute_one(i, sched, kv, latency, limits, now, queue, items, fault)
    {
        step::complete_one(i, sched, kv, latency, limits, view, agg, fault);
    }
}

/// A fast tick's events to their lists: step ends to `listed.step_ends`, enqueues (in order)
/// to `enqueues`.
pub(crate) fn sort_fast_events(
    events: &mut Vec<crate::engine::Event>,
    listed: &mut InstanceDue,
    enqueues: &mut Vec<(Entity, u32)>,
) {
    for e in events.drain(..) {
        match e {
            crate::engine::Event::StepFinished { instance } => listed.step_ends.push(instance),
            crate::engine::Event::Enqueue { request, instance } => {
                enqueues.push((request, instance))
            }
            other => unreachable!("not an event of a fast tick: {other:?}"),
        }
    }
}

/// The queue policies batch formation uses.
#[derive(bevy_ecs::system::SystemParam)]
pub struct QueuePolicies<'w> {
    order: Res<'w, crate::policy::Active<crate::policy::family::Scheduling>>,
    priority: Res<'w, crate::policy::Active<crate::policy::family::Priority>>,
    table: Res<'w, crate::slo::SloTable>,
    config: Res<'w, batch::SchedulingConfig>,
}

impl QueuePolicies<'_> {
    /// How batch formation orders and preempts requests.
    pub fn ordering(&self) -> batch::Ordering<'_> {
        batch::Ordering {
            order: &*self.order.0,
            priority: &*self.priority.0,
            table: &self.table,
            preemption: self.config.preemption,
        }
    }

    /// The SLO classes (for recording).
    pub fn slo(&self) -> &crate::slo::SloTable {
        &self.table
    }
}

/// The work lists the instance pipeline empties and fills (and the driver's event buffer,
/// which a fast run pops the next tick into), and what enqueuing changes.
#[derive(bevy_ecs::system::SystemParam)]
pub struct PipelineWork<'w, 's> {
    pub(crate) instances: ResMut<'w, InstanceDue>,
    pub(crate) record: ResMut<'w, RecordDue>,
    pub(crate) popped: ResMut<'w, crate::engine::Popped>,
    /// Requests routed with no delay on a tick of arrivals (the Enqueue stage's list).
    pub(crate) routed: ResMut<'w, EnqueueDue>,
    pub(crate) requests: Query<'w, 's, (&'static RequestSpec, &'static mut Lifecycle)>,
    pub(crate) rejections: ResMut<'w, crate::engine::Rejections>,
}

/// Frees instances whose step ended now and hands their finished requests to Record.
pub fn retire_steps(
    mut due: ResMut<InstanceDue>,
    mut record: ResMut<RecordDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut instances: Instances,
) {
    retire(&mut due, &mut record, clock.now, &index, &mut instances);
}

pub(crate) fn retire(
    due: &mut InstanceDue,
    record: &mut RecordDue,
    now: SimTime,
    index: &InstanceIndex,
    instances: &mut Instances,
) {
    let mut finished = std::mem::take(&mut due.step_ends);
    // Stable order by instance index, whatever the event order.
    finished.sort_unstable();
    finished.dedup();
    for &i in &finished {
        let mut sched = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run")
            .0;
        retire_one(due, record, i, now, &mut sched);
    }
    finished.clear();
    due.step_ends = finished;
}

/// Frees instance `i` if its step ended now, hands its finished requests to Record and
/// lists it for batch formation.
pub(crate) fn retire_one(
    due: &mut InstanceDue,
    record: &mut RecordDue,
    i: u32,
    now: SimTime,
    sched: &mut Scheduler,
) {
    if sched.step_end.is_some_and(|t| t <= now) {
        sched.step_end = None;
    }
    while sched.in_flight.front().is_some_and(|&t| t <= now) {
        sched.in_flight.pop_front();
    }
    // Leavers are in completion order; hand over those due now.
    if !sched.leaving.is_empty() {
        let due_now = sched
            .leaving
            .partition_point(|f| f.completed.is_some_and(|c| c <= now));
        record.0.extend(sched.leaving.drain(..due_now));
    }
    if sched.handoff.first().is_some_and(|h| h.ready <= now) {
        due.handoffs.push(i);
    }
    list_for_batch(due, i, sched);
}

/// Puts routed requests in their instance's wait queue, dropping unservable ones.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn enqueue_requests(
    mut due: ResMut<EnqueueDue>,
    mut record: ResMut<RecordDue>,
    mut listed: ResMut<InstanceDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
    mut instances: Instances,
    mut rejections: ResMut<crate::engine::Rejections>,
) {
    let mut work = std::mem::take(&mut due.requests);
    enqueue(
        &work,
        clock.now,
        &mut record,
        &mut listed,
        &index,
        &mut view,
        &mut requests,
        &mut instances,
        &mut rejections,
    );
    work.clear();
    due.requests = work;
}

/// Puts each (request, instance) of `work` in the instance's wait queue, or drops or rejects
/// it; lists the instances for batch formation.
#[expect(
    clippy::too_many_arguments,
    reason = "the Enqueue stage's work and the state it changes"
)]
pub(crate) fn enqueue(
    work: &[(Entity, u32)],
    now: SimTime,
    record: &mut RecordDue,
    listed: &mut InstanceDue,
    index: &InstanceIndex,
    view: &mut ClusterView,
    requests: &mut impl InTransit,
    instances: &mut Instances,
    rejections: &mut crate::engine::Rejections,
) {
    for &(entity, i) in work {
        let Some((spec, lifecycle)) = requests.request(entity) else {
            continue; // timed out in transit (its in-flight count was released then)
        };
        let slot = &mut view.instances[i as usize];
        slot.in_flight = slot.in_flight.saturating_sub(1);
        lifecycle.enqueued = Some(now);
        let (mut sched, kv, _, limits, _) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        if !servable(spec, &kv, limits) {
            sched.counters.dropped += 1;
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::Dropped,
                Some(i),
            ));
            continue;
        }
        if limits
            .max_waiting
            .is_some_and(|cap| sched.waiting.len() >= cap as usize)
        {
            sched.counters.queue_full += 1;
            *rejections.0.entry("queue_full").or_default() += 1;
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::Rejected,
                Some(i),
            ));
            continue;
        }
        let mut seq = Seq::new(entity, spec.clone(), *lifecycle);
        // Room for every block it holds at its last step (`servable` bounds it): its block
        // list never reallocates while it is prefilled and decoded.
        let last = spec.input_tokens.saturating_add(spec.output_tokens.max(1)) - 1;
        seq.kv
            .blocks
            .reserve_exact(kv.blocks_for(last.max(1)) as usize);
        sched.waiting.push_back(seq);
        let waiting = sched.waiting.len() as u64;
        sched.counters.peak_waiting = sched.counters.peak_waiting.max(waiting);
        list_for_batch(listed, i, &mut sched);
        refresh_view(view, i, &sched, &kv);
    }
}

/// Requests on their way to an instance, by entity (the Enqueue stage reads and stamps them).
pub trait InTransit {
    /// The request's spec and lifecycle; `None` once it has left (timed out in transit).
    fn request(&mut self, entity: Entity) -> Option<(&RequestSpec, &mut Lifecycle)>;
}

impl InTransit for Query<'_, '_, (&RequestSpec, &mut Lifecycle)> {
    fn request(&mut self, entity: Entity) -> Option<(&RequestSpec, &mut Lifecycle)> {
        self.get_mut(entity)
            .ok()
            .map(|(spec, life)| (spec, life.into_inner()))
    }
}

/// A request is servable if its whole sequence (prompt + outputs − 1 tokens in KV at the
/// last step) fits the cache and `max_model_len`. vLLM checks only the prompt and caps
/// output at `max_model_len`; checking the whole sequence keeps a request that can never
/// finish from preempting itself forever.
pub fn servable(spec: &RequestSpec, kv: &KvCache, limits: &Limits) -> bool {
    let last = u64::from(spec.input_tokens) + u64::from(spec.output_tokens.max(1)) - 1;
    if last.max(1).div_ceil(u64::from(kv.block_size())) > u64::from(kv.total_blocks()) {
        return false;
    }
    match limits.max_model_len {
        Some(m) => u64::from(spec.input_tokens) + u64::from(spec.output_tokens) <= u64::from(m),
        None => true,
    }
}

/// Abandons the requests whose client timeout fires now: wherever they are, they leave
/// with state `timed_out`, releasing their KV blocks (INV-1 bucket `timed_out`).
pub fn expire_requests(
    mut due: ResMut<EnqueueDue>,
    mut record: ResMut<RecordDue>,
    mut listed: ResMut<InstanceDue>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    requests: Query<(&RequestSpec, &Lifecycle, Option<&AssignedTo>)>,
    mut instances: Query<(&mut Scheduler, &mut KvCache)>,
) {
    let mut work = std::mem::take(&mut due.timeouts);
    for &entity in &work {
        let Ok((spec, lifecycle, assigned)) = requests.get(entity) else {
            continue; // already finished
        };
        if record.0.iter().any(|f| f.entity == entity) {
            continue; // ended this very tick
        }
        let Some(&AssignedTo(i)) = assigned else {
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::TimedOut,
                None,
            ));
            continue;
        };
        if lifecycle.enqueued.is_none() {
            let slot = &mut view.instances[i as usize];
            slot.in_flight = slot.in_flight.saturating_sub(1);
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::TimedOut,
                Some(i),
            ));
            continue;
        }
        let (mut sched, mut kv) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        let sched = &mut *sched;
        sched.settle();
        let ended = if let Some(pos) = sched.waiting.iter().position(|s| s.entity == entity) {
            let mut seq = sched.waiting.remove(pos).expect("position is valid");
            kv.release(&mut seq.kv);
            seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched.running.iter().position(|s| s.entity == entity) {
            let mut seq = sched.running.remove(pos);
            kv.release(&mut seq.kv);
            seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched.leaving.iter().position(|f| f.entity == entity) {
            // Its last token comes after the deadline.
            let mut f = sched.leaving.remove(pos);
            f.state = FinalState::TimedOut;
            f.completed = None;
            f.e2e = None;
            f
        } else if let Some(pos) = sched.handoff.iter().position(|h| h.seq.entity == entity) {
            let mut h = sched.handoff.remove(pos);
            kv.release(&mut h.seq.kv);
            h.seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched.arrived.iter().position(|s| s.entity == entity) {
            let mut seq = sched.arrived.remove(pos).expect("position is valid");
            kv.release(&mut seq.kv);
            seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched
            .incoming
            .iter()
            .position(|x| x.handoff.seq.entity == entity)
        {
            // Cancelled on its way here: both ends free their blocks (the link time it was
            // given stays used).
            let mut x = sched.incoming.remove(pos).expect("position is valid");
            kv.release(&mut x.reserved);
            let slot = &mut view.instances[i as usize];
            slot.in_flight = slot.in_flight.saturating_sub(1);
            sched.counters.timed_out += 1;
            refresh_view(&mut view, i, sched, &kv);
            let (mut src, mut src_kv) = instances
                .get_mut(index.0[x.from as usize])
                .expect("instance entity exists for the whole run");
            src_kv.release(&mut x.handoff.seq.kv);
            src.outbound -= 1;
            list_for_batch(&mut listed, x.from, &mut src);
            refresh_view(&mut view, x.from, &src, &src_kv);
            record
                .0
                .push(x.handoff.seq.finish(FinalState::TimedOut, i, None, None));
            continue;
        } else {
            continue;
        };
        sched.counters.timed_out += 1;
        record.0.push(ended);
        refresh_view(&mut view, i, sched, &kv);
    }
    work.clear();
    due.timeouts = work;
}

/// Publishes the block events the instances recorded this tick as [`KvEvent`] messages
/// (first in [`SimSystems::Observe`], scheduled by the simulation builder only while
/// [`KvEvents`] is on). Messages live for two ticks: a reader that runs every tick sees each
/// once.
///
/// [`KvEvent`]: crate::kv::KvEvent
/// [`KvEvents`]: crate::kv::KvEvents
pub fn publish_kv_events(
    clock: Res<SimClock>,
    mut messages: ResMut<Messages<crate::kv::KvEvent>>,
    mut instances: Query<(&Instance, &mut KvCache)>,
) {
    messages.update();
    let now = clock.now;
    for (inst, mut kv) in &mut instances {
        if !kv.records_events() {
            continue;
        }
        let instance = inst.index;
        let kv = kv.bypass_change_detection();
        messages.write_batch(kv.take_events().map(|(kind, block)| crate::kv::KvEvent {
            time: now,
            instance,
            block,
            kind,
        }));
    }
}

/// The instance stages: `retire_steps` (Advance), `enqueue_requests` and `expire_requests`
/// (Enqueue), `batch::form_batches` (Batch), `step::execute_steps` (Execute),
/// `step::complete_steps` (Complete) (`fast::fast_ticks` runs them as one in [`SimStepFast`]); the batch
/// schedulers. Sets up the queue policies (`Active<family::Priority>`,
/// `Active<family::Scheduling>`) and spawns the instances ([`spawn`]). Owns
/// [`InstanceIndex`], [`spawn::Groups`] and the KV events' switch `kv::KvEvents`.
pub struct InstancePlugin;

impl Plugin for InstancePlugin {
    fn build(&self, app: &mut App) {
        schedulers::register_builtins(app);
        app.init_resource::<crate::kv::KvEvents>()
            .add_message::<crate::kv::KvEvent>();
        app.add_setup(SetupStage::Policies, spawn::set_up_queue_policies)
            .add_setup(SetupStage::Instances, spawn::spawn_instances)
            .add_summary_part(report::summarize);
        app.init_resource::<InstanceIndex>()
            .init_resource::<spawn::Groups>()
            .add_systems(
                SimStep,
                (
                    retire_steps.in_set(SimSystems::Advance),
                    enqueue_requests.in_set(SimSystems::Enqueue),
                    expire_requests
                        .in_set(SimSystems::Enqueue)
                        .after(enqueue_requests),
                    batch::form_batches.in_set(SimSystems::Batch),
                    step::execute_steps.in_set(SimSystems::Execute),
                    step::complete_steps.in_set(SimSystems::Complete),
                ),
            );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_names_a_stuck_or_thrashing_instance() {
        let kv = KvCache::new(10, 16);
        let mut s = Scheduler::default();
        assert_eq!(watchdog(3, &s, &kv), None);
        s.stalled_steps = MAX_STALLED_STEPS;
        let msg = watchdog(3, &s, &kv).unwrap();
        assert!(
            msg.contains("instance 3 computed nothing") && msg.contains("(10 blocks)"),
            "{msg}"
        );
        s.stalled_steps = 0;
        s.counters.preemptions = MAX_PREEMPTIONS_WITHOUT_COMPLETION + 5;
        s.preemptions_at_completion = 5;
        assert!(
            watchdog(3, &s, &kv)
                .unwrap()
                .contains("preempted 100000 times without completing")
        );
        s.preemptions_at_completion = 6;
        assert_eq!(watchdog(3, &s, &kv), None);
    }

    /// Bevy's own pattern: one system run on a bare world holding only what it needs.
    fn bare_world(step_end: SimTime, leaving: &[SimTime]) -> (World, Entity) {
        let mut world = World::new();
        world.init_resource::<crate::engine::InstanceDue>();
        world.init_resource::<crate::engine::RecordDue>();
        let mut sched = Scheduler {
            step_end: Some(step_end),
            ..Default::default()
        };
        sched.in_flight.push_back(step_end);
        for (k, &t) in leaving.iter().enumerate() {
            let mut f = FinishedRequest::unserved(
                Entity::PLACEHOLDER,
                crate::policy::any_request(),
                Lifecycle::default(),
                FinalState::Completed,
                Some(0),
            );
            f.spec.id = k as u64;
            f.completed = Some(t);
            sched.leaving.push(f);
        }
        sched.waiting.push_back(Seq::new(
            Entity::PLACEHOLDER,
            crate::policy::any_request(),
            Lifecycle::default(),
        ));
        let e = world
            .spawn((
                sched,
                KvCache::new(16, 16),
                crate::latency::Latency(std::sync::Arc::new(crate::latency::Blackbox {
                    alpha: [0.0; 3],
                    beta: [1.0, 0.0, 0.0],
                })),
                Limits::plain(4, 64),
                schedulers::Batcher(Box::new(NoBatches)),
            ))
            .id();
        world.insert_resource(InstanceIndex(vec![e]));
        (world, e)
    }

    struct NoBatches;
    impl schedulers::BatchScheduler for NoBatches {
        fn form(
            &mut self,
            _: &mut Scheduler,
            _: &mut KvCache,
            _: &Limits,
            _: SimTime,
            _: &batch::Ordering<'_>,
        ) {
        }
    }

    /// Runs `retire_steps` at t = 100 µs on a bare world whose instance's step ends at
    /// `step_end`, with requests leaving at `leaving`.
    fn retire_at_100(step_end: SimTime, leaving: &[SimTime]) -> (World, Entity) {
        use bevy_ecs::system::RunSystemOnce;
        let (mut world, e) = bare_world(step_end, leaving);
        world.insert_resource(SimClock {
            now: SimTime(100),
            ..Default::default()
        });
        world
            .resource_mut::<crate::engine::InstanceDue>()
            .step_ends
            .push(0);
        world.run_system_once(retire_steps).unwrap();
        (world, e)
    }

    #[test]
    fn retire_steps_frees_the_instance_hands_over_leavers_due_now_and_lists_it_for_a_batch() {
        let (world, e) = retire_at_100(SimTime(100), &[SimTime(100), SimTime(150)]);
        let due = world.resource::<crate::engine::InstanceDue>();
        let finished = &world.resource::<crate::engine::RecordDue>().0;
        assert!(due.step_ends.is_empty(), "its work list is emptied");
        assert_eq!(finished.len(), 1, "only the leaver due now");
        assert_eq!(finished[0].completed, Some(SimTime(100)));
        assert_eq!(due.batch, vec![0], "free with work waiting: listed once");
        let sched = world.get::<Scheduler>(e).unwrap();
        assert_eq!(sched.step_end, None);
        assert!(sched.in_flight.is_empty());
        assert_eq!(sched.leaving.len(), 1);
        assert!(sched.listed);
    }

    #[test]
    fn retire_steps_leaves_an_instance_whose_step_ends_later_busy() {
        let (world, e) = retire_at_100(SimTime(200), &[SimTime(200)]);
        let due = world.resource::<crate::engine::InstanceDue>();
        assert!(world.resource::<crate::engine::RecordDue>().0.is_empty() && due.batch.is_empty());
        assert_eq!(
            world.get::<Scheduler>(e).unwrap().step_end,
            Some(SimTime(200))
        );
    }
}
