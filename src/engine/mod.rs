//! The discrete-event core: clock, future-event list, per-tick work lists, the ordered
//! [`SimSystems`] sets of the [`SimStep`] schedule, and the tick driver.
//!
//! One tick = one distinct event time. The driver pops **every** event due at the earliest
//! time into the work lists of their concerns ([`WorkloadDue`], [`AdmitDue`], … filled by
//! [`dispatch_events`]), sets [`SimClock::now`], and runs [`SimStep`] once. Each
//! set runs only if its work list is non-empty, so idle stages cost a run-condition check.

mod queue;

pub use queue::{Event, EventQueue};

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;

use crate::request::FinishedRequest;
use crate::time::SimTime;

/// The schedule run once per tick.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimStep;

/// The instance pipeline alone (Advance, Transfer, Batch, Execute, Complete, Observe, Record,
/// Check), run instead of [`SimStep`] on ticks whose only events are step ends and enqueues,
/// and on ticks of new arrivals alone with Arrive, Admit and Route before it (see
/// [`fast_tick`]): the other stages would have nothing to do, so skipping their run
/// conditions changes nothing but the cost.
/// Built-in plugins add their instance-pipeline systems to both schedules; a run uses this
/// one only while every system of [`SimStep`] is either in it or a built-in control-plane
/// system that cannot have work on such ticks (see [`fast_ticks_allowed`]), so a system of
/// your own always runs.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimStepFast;

/// Runs once when a run ends, after the requests still in the system have been recorded and
/// before the summary is assembled: systems here may add their own results to
/// `metrics::SummaryExtras` (they appear in `summary.json` under `extras`).
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimFinish;

/// True when `fast` may stand in for `full` on ticks of step ends only: every system of
/// `full` is in `fast`, is one of `covered` (systems whose sets have no work on such ticks,
/// or whose work `fast` does in a system of its own), or is a sync point Bevy inserted.
/// Both schedules must be initialized.
pub fn fast_ticks_allowed(full: &Schedule, fast: &Schedule, covered: &[std::any::TypeId]) -> bool {
    let sync = std::any::TypeId::of::<bevy_ecs::schedule::ApplyDeferred>();
    let (Ok(full), Ok(fast)) = (full.systems(), fast.systems()) else {
        return false;
    };
    let in_fast: Vec<std::any::TypeId> = fast.map(|(_, s)| s.system_type()).collect();
    full.map(|(_, s)| s.system_type())
        .all(|t| t == sync || in_fast.contains(&t) || covered.contains(&t))
}

/// The ordered stages of a tick. This order is the public contract for "where does my
/// system go"; each set says which work list (one resource per concern) its built-in system
/// empties and which it fills. A system of your own that reads or writes one must be ordered
/// against them (`.before`/`.after`, or by its set): an unordered one is an ambiguity, which
/// is an error when the schedule is built.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimSystems {
    /// Instances whose step ended now become free; requests that finished in that step are
    /// handed to Record; instances end life-cycle phases (loaded, warm) and finish drains;
    /// injected crashes take instances down and repaired ones come back ([`FaultDue`]).
    /// Empties [`InstanceDue::step_ends`] (fills `batch`, `handoffs`, [`RecordDue`]) and [`ScaleDue::phase_ends`] / `unpark` (fills [`RouteDue`]).
    Advance,
    /// Workload sources spawn the requests arriving now. Empties [`WorkloadDue`]'s
    /// `arrivals`, `session_turns`, `releases`; fills [`AdmitDue`].
    Arrive,
    /// The admission policy admits or rejects. Empties [`AdmitDue`]; fills
    /// [`RouteDue`] (or, with flow control, [`GateDue::admitted`]) and, for rejections,
    /// [`RecordDue`].
    Admit,
    /// The gateway's flow control (only with the scenario's `flow_control`): admitted
    /// requests join their priority band or are shed; while the instances are not
    /// saturated the band heads are routed. Empties [`GateDue`]; fills [`RecordDue`] (shed
    /// requests) and sends requests on as the Route stage does.
    Gate,
    /// The routing policy picks an instance. Empties [`RouteDue`]; sends requests on
    /// as `Enqueue` events, sets [`ScaleDue::cold_start`], fills [`RecordDue`] (nothing routable).
    Route,
    /// Requests join their instance's wait queue. Empties [`EnqueueDue`] (arrivals in
    /// queues and client timeouts); fills [`InstanceDue::batch`] and [`RecordDue`].
    Enqueue,
    /// Prefill/decode disaggregation: prefilled requests are handed to decode instances and
    /// their KV blocks sent; arrived ones join the decode instance. Empties
    /// [`TransferDue`] and [`InstanceDue::handoffs`]; fills [`InstanceDue::batch`] and
    /// [`RecordDue`].
    Transfer,
    /// Free instances with work form their next batch (vLLM v1). Empties [`InstanceDue::batch`];
    /// fills `execute`.
    Batch,
    /// The latency model prices each new batch; the step end is scheduled. Empties
    /// [`InstanceDue::execute`]; fills `complete`.
    Execute,
    /// Token progress of each new batch is applied; finished requests release their KV
    /// blocks and leave at the step end. Empties [`InstanceDue::complete`].
    Complete,
    /// Autoscaling evaluations and cold starts. Empties [`ScaleDue::evaluate`]
    /// and `cold_start`; fills [`RouteDue`] (requests parked for a cold start).
    Autoscale,
    /// Runs every tick, after every stage that changes state: read messages here (e.g.
    /// `MessageReader<KvEvent>`, published at its start when KV events are on). No work list.
    Observe,
    /// Per-request rows, aggregates; finished requests are despawned. Empties [`RecordDue`]; fills
    /// [`WorkloadDue`]'s `ended_turns` and `ended_held` (emptied by the workload's systems after
    /// `metrics::record_finished`).
    Record,
    /// Invariant checks (with `--check-invariants` and in tests).
    Check,
}

/// The simulated clock.
#[derive(Resource, Debug, Clone, Copy, Default)]
pub struct SimClock {
    /// Time of the current tick.
    pub now: SimTime,
    /// Ticks run so far.
    pub ticks: u64,
    /// Events at or before this time run; later ones do not.
    pub horizon: SimTime,
}

/// The current tick's work, one resource per concern: filled by [`dispatch_events`] from
/// the events due now and by earlier stages (zero-delay hand-offs); each stage empties its
/// own list. A system that reads or writes one of them must be ordered against the
/// built-in systems that do (ambiguities are errors), so each set's doc names its lists.
///
/// The workload's: arrivals, session turns and offline-batch releases due now (Arrive),
/// and what the Record stage tells it of requests that ended (read after
/// `metrics::record_finished`).
#[derive(Resource, Debug, Default)]
pub struct WorkloadDue {
    /// Sources whose next request arrives now.
    pub arrivals: Vec<u32>,
    /// Sessions whose next turn is due now.
    pub session_turns: Vec<u64>,
    /// Sources releasing one more request of an offline batch now.
    pub releases: Vec<u32>,
    /// Session turns that ended this tick: (session, how, completion time).
    pub ended_turns: Vec<(u64, crate::request::FinalState, Option<SimTime>)>,
    /// Sources (of [`HeldBatches`]) whose requests finished this tick.
    pub ended_held: Vec<u32>,
}

/// Requests to admit now (Admit).
#[derive(Resource, Debug, Default)]
pub struct AdmitDue(pub Vec<Entity>);

/// The gateway's work (Gate): requests admitted now, and a wake-up (a band's longest wait
/// ends, or the instances gained room). `on` is set when the scenario has `flow_control`:
/// admission then hands its requests here instead of to [`RouteDue`].
#[derive(Resource, Debug, Default)]
pub struct GateDue {
    pub on: bool,
    pub admitted: Vec<Entity>,
    pub wake: bool,
}

/// Injected faults (Advance): instances that crash now, and instances that serve again now.
#[derive(Resource, Debug, Default)]
pub struct FaultDue {
    pub crashes: Vec<u32>,
    pub restarts: Vec<u32>,
}

/// Requests to route now (Route).
#[derive(Resource, Debug, Default)]
pub struct RouteDue(pub Vec<Entity>);

/// Requests reaching their instance's queue now, and client timeouts firing now (Enqueue).
#[derive(Resource, Debug, Default)]
pub struct EnqueueDue {
    /// (request, instance index).
    pub requests: Vec<(Entity, u32)>,
    pub timeouts: Vec<Entity>,
}

/// The instance pipeline's lists, by instance index: step ends (Advance), instances to
/// form a batch (Batch), to price it (Execute), to apply it (Complete); and its output to
/// P/D disaggregation: prefill instances with requests to hand to decode instances now, and
/// those whose step ended with nothing left to run while they hold the blocks of reads
/// (both emptied by Transfer).
#[derive(Resource, Debug, Default)]
pub struct InstanceDue {
    pub step_ends: Vec<u32>,
    pub batch: Vec<u32>,
    pub execute: Vec<u32>,
    pub complete: Vec<u32>,
    pub handoffs: Vec<u32>,
    pub emptied: Vec<u32>,
}

/// Prefill/decode disaggregation (Transfer): decode instances where a KV transfer ends now,
/// and those whose engine a handed-off request reaches now.
#[derive(Resource, Debug, Default)]
pub struct TransferDue {
    pub transfers_done: Vec<u32>,
    pub handed: Vec<u32>,
}

/// Autoscaling and instance life cycles: an evaluation is due (Autoscale), routing parked a
/// request for want of any routable instance (`cold_start`, Autoscale), instances whose
/// timed life-cycle phase ends now (Advance), parked requests to route again (Advance).
#[derive(Resource, Debug, Default)]
pub struct ScaleDue {
    pub evaluate: bool,
    pub cold_start: bool,
    pub phase_ends: Vec<u32>,
    pub unpark: bool,
}

/// Requests that ended this tick, whichever stage ended them (Record writes their rows).
#[derive(Resource, Debug, Default)]
pub struct RecordDue(pub Vec<FinishedRequest>);

/// The driver's buffer of the events popped for the current tick (empty between ticks).
#[derive(Resource, Debug, Default)]
pub struct Popped(pub Vec<Event>);

/// Hands the events due now to their concerns' work lists, in the order they were popped
/// (the driver calls it before a [`SimStep`] tick; a [`SimStepFast`] tick's step ends are
/// taken by `fast::fast_ticks` itself). Empties `events`.
pub fn dispatch_events(world: &mut World, events: &mut Vec<Event>) {
    for event in events.drain(..) {
        match event {
            Event::Arrival { source } => world.resource_mut::<WorkloadDue>().arrivals.push(source),
            Event::SessionTurn { session } => world
                .resource_mut::<WorkloadDue>()
                .session_turns
                .push(session),
            Event::Release { source } => world.resource_mut::<WorkloadDue>().releases.push(source),
            Event::Admit(e) => world.resource_mut::<AdmitDue>().0.push(e),
            Event::Enqueue { request, instance } => world
                .resource_mut::<EnqueueDue>()
                .requests
                .push((request, instance)),
            Event::Timeout { request } => world.resource_mut::<EnqueueDue>().timeouts.push(request),
            Event::StepFinished { instance } => {
                world.resource_mut::<InstanceDue>().step_ends.push(instance)
            }
            Event::TransferDone { instance } => world
                .resource_mut::<TransferDue>()
                .transfers_done
                .push(instance),
            Event::HandedOff { instance } => {
                world.resource_mut::<TransferDue>().handed.push(instance)
            }
            Event::AutoscaleTick => world.resource_mut::<ScaleDue>().evaluate = true,
            Event::PhaseEnd { instance } => {
                world.resource_mut::<ScaleDue>().phase_ends.push(instance)
            }
            Event::Unpark => world.resource_mut::<ScaleDue>().unpark = true,
            Event::GateWake => world.resource_mut::<GateDue>().wake = true,
            Event::Crash { instance } => world.resource_mut::<FaultDue>().crashes.push(instance),
            Event::Restart { instance } => world.resource_mut::<FaultDue>().restarts.push(instance),
            // A client's retry is a new request to the gateway: with flow control it waits
            // in its band as any admitted request does.
            Event::Retry { request } => {
                let mut gate = world.resource_mut::<GateDue>();
                if gate.on {
                    gate.admitted.push(request);
                } else {
                    world.resource_mut::<RouteDue>().0.push(request);
                }
            }
        }
    }
}

/// Lets the instance pipeline of a fast tick go on to the following ticks itself while they
/// hold step ends and enqueues only, or new arrivals only (see `fast::fast_ticks`): one
/// system run instead of a schedule run per tick. Set by the driver.
#[derive(Resource, Debug, Clone, Copy)]
pub struct FastLoop {
    /// Off when something must see every tick (invariant checks, KV events, P/D hand-offs).
    pub on: bool,
    /// The loop stops before a tick later than this (the next time-series sample).
    pub until: SimTime,
    /// Ticks of new arrivals only run [`SimStepFast`] too (see [`fast_tick`]): off when a
    /// routed request may have to wait for a cold start (the Autoscale stage would have work).
    pub arrivals: bool,
    /// The loop stops after a tick whose count reaches this (the driver checks for
    /// overload every 256 ticks).
    pub check_at: u64,
}

impl Default for FastLoop {
    fn default() -> Self {
        FastLoop {
            on: false,
            until: SimTime::MAX,
            arrivals: false,
            check_at: u64::MAX,
        }
    }
}

/// A concern's look at the World before a tick runs (sampling `timeseries.csv`): `hook`
/// is called before the first tick later than `after`, and moves `after` on itself.
#[derive(Resource, Default)]
pub struct BeforeTick {
    pub after: SimTime,
    pub hook: Option<fn(&mut World, SimTime)>,
}

/// Which sources hold part of an offline batch back (by source index), so the Record stage
/// can tell them when one of their requests finishes.
#[derive(Resource, Debug, Default, Clone)]
pub struct HeldBatches(pub Vec<bool>);

/// What a router or admission controller can see of one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceSnapshot {
    pub index: u32,
    /// Requests in the instance's wait queue.
    pub queue_depth: u32,
    /// Requests in the instance's running batch.
    pub batch_size: u32,
    /// Requests routed to the instance that have not reached its queue yet (router-owned).
    pub in_flight: u32,
    pub kv_used_blocks: u32,
    pub kv_total_blocks: u32,
    /// False while provisioning, warming up or draining.
    pub routable: bool,
}

impl InstanceSnapshot {
    /// queue + batch + in-flight requests.
    pub fn effective_load(&self) -> u32 {
        self.queue_depth + self.batch_size + self.in_flight
    }
}

/// What an instance reports of its LoRA adapters, as vLLM's `vllm:lora_requests_info`
/// metric does: the adapters of its running and of its waiting requests, and `max_lora`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstanceAdapters {
    /// 0: the instance serves no adapters.
    pub max_loras: u32,
    pub running: Vec<u32>,
    pub waiting: Vec<u32>,
}

/// What every policy may observe of every instance, kept current by the instance stages.
#[derive(Resource, Debug, Default, Clone)]
pub struct ClusterView {
    pub instances: Vec<InstanceSnapshot>,
    /// Per instance, the LoRA adapters it serves (empty unless a group has `lora`).
    pub adapters: Vec<InstanceAdapters>,
}

/// A run-stopping problem found while simulating (e.g. a batch outside a measured
/// latency table). The driver stops at the end of the tick that set it.
#[derive(Resource, Debug, Default, Clone)]
pub struct SimFault(pub Option<Fault>);

/// Why a run stopped before its end. Each variant says what happened and, where the input is
/// to blame, what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Fault {
    /// A result file could not be written (a full disk, say): simulating on would only produce
    /// results that cannot be kept.
    #[error("cannot write {file} at simulated time {:.3} s: {error}", .at.as_us() as f64 / 1e6)]
    Write {
        file: &'static str,
        at: SimTime,
        error: String,
    },
    /// The latency model could not price a batch (e.g. outside a measured table).
    #[error("instance {instance} at {at}: cannot price a step: {error}")]
    Pricing {
        instance: u32,
        at: SimTime,
        error: String,
    },
    /// An instance stopped making progress (the watchdog's diagnosis).
    #[error("no progress: {0}")]
    NoProgress(String),
    /// An input pushes the next event past [`MAX_SIM_TIME`]; `cause` says which input.
    #[error(
        "the next event is at {:.3e} s of simulated time, past the 10⁹ s a run may reach: \
         {cause}; the run stops rather than saturate the clock",
        .at.as_us() as f64 / 1e6
    )]
    ClockLimit { at: SimTime, cause: String },
    /// A workload source failed (a trace row that cannot be read, say).
    #[error("{0}")]
    Workload(String),
    /// More requests in the system than `limits.max_in_flight`.
    #[error(
        "{in_flight} requests in the system at t = {:.1} s, above limits.max_in_flight = {limit}: \
         arrivals outpace the cluster ({injected} arrived, {:.1} req/s; {completed} completed, {:.1} req/s); \
         add instances, lower the load, cap queues with limits.max_waiting_per_instance, \
         or raise limits.max_in_flight",
        .at.as_us() as f64 / 1e6,
        rate(*.injected, *.at),
        rate(*.completed, *.at)
    )]
    Overloaded {
        in_flight: u64,
        limit: u64,
        at: SimTime,
        injected: u64,
        completed: u64,
    },
}

/// Events per simulated second up to `at` (0 at the start).
fn rate(n: u64, at: SimTime) -> f64 {
    let secs = at.as_us() as f64 / 1e6;
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Rejections by reason (sorted for output): admission policies, no routable instance, a
/// full instance wait queue.
#[derive(Resource, Debug, Default, Clone)]
pub struct Rejections(pub std::collections::BTreeMap<&'static str, u64>);

/// Fixed delays of the control plane.
#[derive(Resource, Debug, Default, Clone, Copy)]
pub struct ClusterDelays {
    pub admission: crate::time::SimDuration,
    pub routing: crate::time::SimDuration,
}

/// Whether the Check stage (and the per-request causality check) runs.
#[derive(Resource, Debug, Default, Clone, Copy)]
pub struct CheckInvariants(pub bool);

/// Requests injected so far, by the workload (INV-1's left-hand side).
#[derive(Resource, Debug, Default, Clone, Copy)]
pub struct Injected(pub u64);

/// The tick contract checks itself: two systems of a tick that touch the same data in no
/// set order are an error when the schedule is built (not a silent, order-dependent result;
/// e.g. a system reading a stage's work list after the built-in system emptied it).
fn strict(schedule: &mut Schedule) {
    schedule.set_build_settings(bevy_ecs::schedule::ScheduleBuildSettings {
        ambiguity_detection: bevy_ecs::schedule::LogLevel::Error,
        ..Default::default()
    });
}

/// Registers the clock, the event queue, the per-concern work lists, the stage order with
/// its run conditions.
/// The driver sets the clock's horizon; the engine has no setup step of its own.
pub struct EnginePlugin;

impl Plugin for EnginePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<SimClock>()
            .init_resource::<EventQueue>()
            .init_resource::<Popped>()
            .init_resource::<WorkloadDue>()
            .init_resource::<AdmitDue>()
            .init_resource::<RouteDue>()
            .init_resource::<GateDue>()
            .init_resource::<FaultDue>()
            .init_resource::<EnqueueDue>()
            .init_resource::<InstanceDue>()
            .init_resource::<TransferDue>()
            .init_resource::<ScaleDue>()
            .init_resource::<RecordDue>()
            .init_resource::<ClusterView>()
            .init_resource::<Injected>()
            .init_resource::<SimFault>()
            .init_resource::<HeldBatches>()
            .init_resource::<FastLoop>()
            .init_resource::<BeforeTick>()
            .init_schedule(SimFinish)
            .init_schedule(SimStepFast)
            .edit_schedule(SimStepFast, strict)
            .configure_sets(
                SimStepFast,
                (
                    // A fast tick holds arrivals only, or step ends and enqueues only (see
                    // `fast_tick`): the control plane's stages first have no work on the
                    // second kind, the instance pipeline (in Advance) none of its own
                    // on the first but the requests routed with no delay.
                    SimSystems::Arrive.run_if(arrivals_due),
                    SimSystems::Admit.run_if(|d: Res<AdmitDue>| !d.0.is_empty()),
                    SimSystems::Route.run_if(|d: Res<RouteDue>| !d.0.is_empty()),
                    SimSystems::Advance,
                    SimSystems::Transfer,
                    SimSystems::Batch,
                    SimSystems::Execute,
                    SimSystems::Complete,
                    SimSystems::Observe,
                    SimSystems::Record.run_if(|d: Res<RecordDue>| !d.0.is_empty()),
                    SimSystems::Check,
                )
                    .chain(),
            )
            .init_schedule(SimStep)
            .edit_schedule(SimStep, strict)
            .configure_sets(
                SimStep,
                (
                    SimSystems::Advance.run_if(
                        |i: Res<InstanceDue>, s: Res<ScaleDue>, f: Res<FaultDue>| {
                            !i.step_ends.is_empty()
                                || !s.phase_ends.is_empty()
                                || s.unpark
                                || !f.crashes.is_empty()
                                || !f.restarts.is_empty()
                        },
                    ),
                    SimSystems::Arrive.run_if(arrivals_due),
                    SimSystems::Admit.run_if(|d: Res<AdmitDue>| !d.0.is_empty()),
                    SimSystems::Gate,
                    SimSystems::Route.run_if(|d: Res<RouteDue>| !d.0.is_empty()),
                    SimSystems::Enqueue.run_if(|d: Res<EnqueueDue>| {
                        !d.requests.is_empty() || !d.timeouts.is_empty()
                    }),
                    SimSystems::Transfer,
                    SimSystems::Batch.run_if(|d: Res<InstanceDue>| !d.batch.is_empty()),
                    SimSystems::Execute.run_if(|d: Res<InstanceDue>| !d.execute.is_empty()),
                    SimSystems::Complete.run_if(|d: Res<InstanceDue>| !d.complete.is_empty()),
                    SimSystems::Autoscale.run_if(|d: Res<ScaleDue>| d.evaluate || d.cold_start),
                    SimSystems::Observe,
                    SimSystems::Record.run_if(|d: Res<RecordDue>| !d.0.is_empty()),
                    SimSystems::Check,
                )
                    .chain(),
            );
    }
}

/// The Arrive stage's run condition: a request arrives, a session turn or a release is due.
fn arrivals_due(d: Res<WorkloadDue>) -> bool {
    !d.arrivals.is_empty() || !d.session_turns.is_empty() || !d.releases.is_empty()
}

/// True when nothing but step ends and enqueues is due: only the instance pipeline can have
/// work (it enqueues too; the stages that follow fill their lists within the tick).
pub fn fast_events(events: &[Event]) -> bool {
    events
        .iter()
        .all(|e| matches!(e, Event::StepFinished { .. } | Event::Enqueue { .. }))
}

/// True when `events` (one tick's) may run [`SimStepFast`] instead of [`SimStep`]: step ends
/// and enqueues only ([`fast_events`]), or, with [`FastLoop::arrivals`], new arrivals only
/// (the Arrive, Admit and Route stages, then the instance pipeline; no other stage of
/// [`SimStep`] can have work on such a tick).
pub fn fast_tick(events: &[Event], fast: &FastLoop) -> bool {
    fast_events(events)
        || (fast.arrivals && events.iter().all(|e| matches!(e, Event::Arrival { .. })))
}

/// Latest simulated time a run may reach: 10¹⁵ µs (10⁹ s, ~32 years). Inputs that push
/// events further (huge timestamps or scales, tiny rates, huge latencies) would otherwise
/// saturate the 64-bit µs clock and stamp requests with nonsense times.
pub const MAX_SIM_TIME: SimTime = SimTime(1_000_000_000_000_000);

/// Runs one tick: pops every event due at the earliest pending time (if it is within the
/// horizon), advances the clock and runs the schedule. Returns false when nothing is left.
///
/// Timeouts of requests that already left (finished, rejected, dropped) are discarded
/// without a tick: they neither advance the clock nor count as simulated time, so a run's
/// duration ends with its last real event.
pub fn tick(world: &mut World, schedule: &mut Schedule) -> bool {
    tick_observed(world, schedule, None)
}

/// [`tick`], first calling the [`BeforeTick`] hook when it is due, with the world as the
/// previous tick left it and the time of the tick about to run (observers that sample state
/// use it; they must not change it).
///
/// With `fast` ([`SimStepFast`], for apps whose [`SimStep`] holds only built-in systems), a
/// tick whose only events are step ends runs `fast` instead of `schedule`.
pub fn tick_observed(
    world: &mut World,
    schedule: &mut Schedule,
    fast: Option<&mut Schedule>,
) -> bool {
    let horizon = world.resource::<SimClock>().horizon;
    let t = loop {
        let Some(t) = world.resource::<EventQueue>().peek_time() else {
            return false;
        };
        if t > horizon {
            return false;
        }
        if t > MAX_SIM_TIME {
            // The timeout of a request that already left is no event (below), however far
            // off: a client timeout longer than a run can reach stopped runs that had ended.
            let stale = world.resource::<EventQueue>().peek().is_some_and(
                |e| matches!(e, Event::Timeout { request } if world.get_entity(*request).is_err()),
            );
            if stale {
                world.resource_mut::<EventQueue>().pop_at(t);
                continue;
            }
            let cause = world
                .resource::<EventQueue>()
                .peek()
                .map_or_else(String::new, |e| e.too_late().to_string());
            world
                .resource_mut::<SimFault>()
                .0
                .get_or_insert(Fault::ClockLimit { at: t, cause });
            return false;
        }
        // Pop into a reused buffer (no resource_scope: taking a resource out of the world
        // and putting it back costs more than the rest of a small tick).
        let mut popped = std::mem::take(&mut world.resource_mut::<Popped>().0);
        {
            let mut queue = world.resource_mut::<EventQueue>();
            while let Some(event) = queue.pop_at(t) {
                popped.push(event);
            }
        }
        popped.retain(
            |e| !matches!(e, Event::Timeout { request } if world.get_entity(*request).is_err()),
        );
        let live = !popped.is_empty();
        world.resource_mut::<Popped>().0 = popped;
        if live {
            break t;
        }
    };
    let look = world.resource::<BeforeTick>();
    if t > look.after
        && let Some(hook) = look.hook
    {
        hook(world, t);
    }
    let ticks = {
        let mut clock = world.resource_mut::<SimClock>();
        assert!(
            t >= clock.now,
            "INV-3 clock went back from {} to {t}",
            clock.now
        );
        clock.now = t;
        clock.ticks += 1;
        clock.ticks
    };
    // Change ticks of despawned entities accumulate otherwise.
    if ticks.is_multiple_of(1024) {
        world.clear_trackers();
    }
    match fast {
        Some(fast) if fast_events(&world.resource::<Popped>().0) => fast.run(world),
        Some(fast) if fast_tick(&world.resource::<Popped>().0, world.resource::<FastLoop>()) => {
            let mut popped = std::mem::take(&mut world.resource_mut::<Popped>().0);
            dispatch_events(world, &mut popped);
            world.resource_mut::<Popped>().0 = popped;
            fast.run(world)
        }
        _ => {
            let mut popped = std::mem::take(&mut world.resource_mut::<Popped>().0);
            dispatch_events(world, &mut popped);
            world.resource_mut::<Popped>().0 = popped;
            schedule.run(world)
        }
    }
    world.resource::<SimFault>().0.is_none()
}

/// Requests waiting at the router because no instance is routable while autoscaling can
/// bring one up (scale to zero, cold starts). They count as in transit; when an instance
/// becomes routable they are routed again, oldest first.
#[derive(Resource, Debug, Default, Clone)]
pub struct Parked {
    /// True when some group autoscales: requests wait instead of being rejected.
    pub enabled: bool,
    pub requests: Vec<Entity>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a bare world holding only the work lists.
    #[test]
    fn dispatch_hands_each_event_to_its_concerns_list_in_the_order_popped() {
        let mut world = World::new();
        for init in [
            World::init_resource::<WorkloadDue>,
            World::init_resource::<AdmitDue>,
            World::init_resource::<EnqueueDue>,
            World::init_resource::<InstanceDue>,
            World::init_resource::<TransferDue>,
            World::init_resource::<ScaleDue>,
            World::init_resource::<GateDue>,
            World::init_resource::<FaultDue>,
            World::init_resource::<RouteDue>,
        ] {
            init(&mut world);
        }
        let r = world.spawn_empty().id();
        let mut events = vec![
            Event::StepFinished { instance: 3 },
            Event::Arrival { source: 1 },
            Event::Admit(r),
            Event::StepFinished { instance: 0 },
            Event::Enqueue {
                request: r,
                instance: 2,
            },
            Event::Timeout { request: r },
            Event::SessionTurn { session: 9 },
            Event::Release { source: 4 },
            Event::TransferDone { instance: 5 },
            Event::AutoscaleTick,
            Event::PhaseEnd { instance: 6 },
            Event::Unpark,
            Event::GateWake,
            Event::Crash { instance: 7 },
            Event::Restart { instance: 8 },
            Event::Retry { request: r },
        ];
        dispatch_events(&mut world, &mut events);
        assert!(events.is_empty(), "the buffer is emptied");
        let i = world.resource::<InstanceDue>();
        assert_eq!(i.step_ends, [3, 0], "in the order popped");
        assert!(i.batch.is_empty() && i.execute.is_empty() && i.complete.is_empty());
        let w = world.resource::<WorkloadDue>();
        assert_eq!(
            (&w.arrivals[..], &w.session_turns[..], &w.releases[..]),
            (&[1][..], &[9][..], &[4][..])
        );
        assert_eq!(world.resource::<AdmitDue>().0, [r]);
        let e = world.resource::<EnqueueDue>();
        assert_eq!(
            (&e.requests[..], &e.timeouts[..]),
            (&[(r, 2)][..], &[r][..])
        );
        assert_eq!(world.resource::<TransferDue>().transfers_done, [5]);
        let s = world.resource::<ScaleDue>();
        assert!(s.evaluate && s.unpark && !s.cold_start);
        assert_eq!(s.phase_ends, [6]);
        let g = world.resource::<GateDue>();
        assert!(g.wake && g.admitted.is_empty() && !g.on);
        let f = world.resource::<FaultDue>();
        assert_eq!((&f.crashes[..], &f.restarts[..]), (&[7][..], &[8][..]));
        assert_eq!(
            world.resource::<RouteDue>().0,
            [r],
            "a retry is routed again"
        );
        // With flow control a retry waits in the gateway's bands first.
        world.resource_mut::<RouteDue>().0.clear();
        world.resource_mut::<GateDue>().on = true;
        dispatch_events(&mut world, &mut vec![Event::Retry { request: r }]);
        assert_eq!(world.resource::<GateDue>().admitted, [r]);
        assert!(world.resource::<RouteDue>().0.is_empty());
    }

    #[test]
    fn only_ticks_of_step_ends_and_enqueues_may_run_the_instance_pipeline_alone() {
        let request = Entity::from_raw_u32(7).unwrap();
        assert!(fast_events(&[]));
        assert!(fast_events(&[
            Event::StepFinished { instance: 1 },
            Event::Enqueue {
                request,
                instance: 0
            },
            Event::StepFinished { instance: 0 }
        ]));
        for other in [
            Event::Unpark,
            Event::Timeout { request },
            Event::Arrival { source: 0 },
            Event::TransferDone { instance: 0 },
            Event::Crash { instance: 0 },
            Event::Restart { instance: 0 },
            Event::Retry { request },
        ] {
            assert!(!fast_events(&[Event::StepFinished { instance: 1 }, other]));
        }
    }

    #[test]
    fn ticks_of_arrivals_alone_run_simstepfast_only_when_the_loop_allows_it() {
        let request = Entity::from_raw_u32(7).unwrap();
        let arrivals = [Event::Arrival { source: 0 }, Event::Arrival { source: 3 }];
        let mut fast = FastLoop {
            on: true,
            until: SimTime::MAX,
            ..Default::default()
        };
        assert!(!fast_tick(&arrivals, &fast), "off: SimStep");
        assert!(fast_tick(&[Event::StepFinished { instance: 1 }], &fast));
        fast.arrivals = true;
        assert!(fast_tick(&arrivals, &fast));
        // Arrivals with anything else (a step end's Advance runs before Arrive in SimStep,
        // a session turn or a timeout has a stage of its own): SimStep.
        for other in [
            Event::StepFinished { instance: 1 },
            Event::Enqueue {
                request,
                instance: 0,
            },
            Event::SessionTurn { session: 2 },
            Event::Timeout { request },
            Event::Admit(request),
        ] {
            assert!(!fast_tick(&[arrivals[0], other], &fast));
        }
    }
}
