//! Autoscaling: the life of an instance and the scaling stage.
//!
//! An autoscaled group (one with `scaling`) is spawned with `max` instances, of which
//! `count` serve from t = 0 and the rest are off (with an empty KV cache, so an off
//! instance costs no memory). Life of an instance:
//!
//! ```text
//! off → provisioning (provision_s) → loading (load_s) → warming up (warmup_s) → serving
//!                                                                   ↓ scale down
//!                                                 off ← draining (until its work is done)
//! ```
//!
//! A scale-down first cancels instances that are still starting (newest first), then
//! drains the serving instances with the least work: a draining instance is not routable,
//! finishes every request already on or headed to it, then turns off and drops its KV
//! cache. A scale-up first takes back draining instances (they still hold the model), then
//! provisions off ones (lowest index first). While no instance anywhere is routable, the
//! router parks requests instead of rejecting them ([`Parked`]) and a cold start begins in
//! the cheapest autoscaled group that has room; parked requests are routed the moment an
//! instance becomes routable.
//!
//! GPU time accrues from provisioning until off (you pay for a node while it boots and
//! drains). Every transition is a row of `scale_events.csv`.

mod check;

pub use check::check;

use std::fs::File;
use std::io::BufWriter;

use bevy_ecs::prelude::*;

use crate::engine::Parked;
use crate::engine::{
    ClusterView, Event, EventQueue, RecordDue, RouteDue, ScaleDue, SimClock, SimFault,
};
use crate::instance::{Instance, InstanceIndex, Scheduler, refresh_view};
use crate::kv::KvCache;
use crate::metrics::SummaryAppExt;
use crate::policy::{Active, GroupSignals, ScaleTarget, family};
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError, build_policy};
use crate::time::{SimDuration, SimTime};

/// Autoscaling: [`evaluate_scaling`] in [`SimSystems::Autoscale`] (empties `ScaleDue::evaluate`
/// and `cold_start`). The life-cycle systems ([`advance_phases`], [`sample_latencies`],
/// [`stop_on_event_write_error`]) are added by its setup only when a group scales, so runs
/// that do not scale do not pay for them. Sets up the scaling policy
/// (`Active<family::Autoscale>`), each instance's [`Power`] and the group accounts. Owns
/// [`Autoscaler`].
pub struct AutoscalePlugin;

impl bevy_app::Plugin for AutoscalePlugin {
    fn build(&self, app: &mut bevy_app::App) {
        app.init_resource::<Autoscaler>()
            .add_setup(SetupStage::Policies, set_up_policy)
            .add_setup(SetupStage::Cluster, set_up_groups)
            .add_setup(SetupStage::Outputs, open_scale_events)
            .add_summary_part(summarize)
            .add_finish_step(crate::metrics::FinishStage::Concerns, finish_scale_events)
            .add_systems(
                crate::engine::SimStep,
                evaluate_scaling.in_set(crate::engine::SimSystems::Autoscale),
            );
    }
}

/// `SetupStage::Outputs`: `scale_events.csv` (its header written) when a group scales and
/// the scenario keeps the file.
fn open_scale_events(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    if !(world.resource::<Autoscaler>().active && ctx.scenario.outputs.scale_events_csv) {
        return Ok(());
    }
    let mut files = world.resource_mut::<crate::output::Outputs>();
    let Some(file) = files.create("scale_events.csv")? else {
        return Ok(());
    };
    let mut writer = csv::Writer::from_writer(file);
    writer
        .write_record(SCALE_EVENT_COLUMNS)
        .map_err(|e| SimError::Output {
            path: files.staged_path("scale_events.csv"),
            message: e.to_string(),
        })?;
    world.resource_mut::<Autoscaler>().events = Some(writer);
    Ok(())
}

/// `FinishStage::Concerns`: `scale_events.csv` flushed (or its first write error).
fn finish_scale_events(world: &mut World, _: &mut crate::metrics::Summary) -> Result<(), SimError> {
    let path = world
        .resource::<crate::output::Outputs>()
        .staged_path("scale_events.csv");
    let mut scaler = world.resource_mut::<Autoscaler>();
    if let Some(err) = scaler.write_error.take() {
        return Err(SimError::Output {
            path: std::path::PathBuf::from("scale_events.csv"),
            message: err,
        });
    }
    let Some(writer) = scaler.events.take() else {
        return Ok(());
    };
    let io = |e: String| SimError::Output {
        path: path.clone(),
        message: e,
    };
    writer
        .into_inner()
        .map_err(|e| io(e.to_string()))?
        .into_inner()
        .map_err(|e| io(e.to_string()))?
        .sync_all()
        .map_err(|e| io(e.to_string()))?;
    Ok(())
}

/// Autoscaling's part of the summary: each group's GPU-hours, cost and scaling history (the
/// accounts closed at the end of the run), and the run's cost.
pub fn summarize(world: &mut World, summary: &mut crate::metrics::Summary) {
    let now = world.resource::<SimClock>().now;
    let mut scaler = world.resource_mut::<Autoscaler>();
    close_accounts(&mut scaler, now);
    let end = now.as_us() as f64;
    for g in &scaler.groups {
        let instance_hours = g.instance_time.as_us() as f64 / 3.6e9;
        let gpu_hours = instance_hours * f64::from(g.gpus_per_instance);
        summary.groups.push(crate::metrics::GroupUsage {
            group: g.name.clone(),
            autoscaled: g.timing.is_some(),
            gpus_per_instance: g.gpus_per_instance,
            gpu_hours,
            cost: gpu_hours * g.cost_per_gpu_hour,
            mean_instances: if end > 0.0 {
                g.instance_time.as_us() as f64 / end
            } else {
                f64::from(g.on)
            },
            max_instances: g.peak,
            time_at_max_s: g.time_at_max.as_secs_f64(),
            scale_ups: g.scale_ups,
            cold_starts: g.cold_starts,
            scale_downs: g.scale_downs,
        });
    }
    let c = &mut summary.cost;
    c.gpu_hours = summary.groups.iter().map(|g| g.gpu_hours).sum();
    c.total = summary.groups.iter().map(|g| g.cost).sum();
    let mtok = summary.throughput.output_tokens as f64 / 1e6;
    c.per_million_output_tokens = if mtok > 0.0 { c.total / mtok } else { 0.0 };
}

/// `SetupStage::Policies`: the scaling policy.
pub fn set_up_policy(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let p = &ctx.scenario.policies;
    let labels = app.world().resource::<crate::labels::Labels>();
    let scaling = build_policy::<family::Autoscale>(
        ctx,
        labels,
        "autoscale",
        &p.autoscale,
        &p.autoscale_params,
    )?;
    app.insert_resource(Active::<family::Autoscale>(scaling));
    Ok(())
}

/// `SetupStage::Cluster`: every instance's life-cycle state, each group's accounts and
/// first evaluation; the life-cycle systems when some group scales (they cost a little
/// every tick: only runs that scale pay it).
pub fn set_up_groups(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    let first_policy_tick = world
        .resource::<Active<family::Autoscale>>()
        .0
        .next_evaluation(SimTime::ZERO, true);
    let set_up = world.resource::<crate::instance::spawn::Groups>().clone();
    let index = world.resource::<InstanceIndex>().0.clone();
    let autoscaled = ctx
        .scenario
        .cluster
        .groups
        .iter()
        .any(|g| g.scaling.is_some());
    let mut scaler = Autoscaler {
        active: autoscaled,
        ..Default::default()
    };
    for (group, info) in ctx.scenario.cluster.groups.iter().zip(&set_up.0) {
        let timing = group.scaling.as_ref().map(|s| {
            // One GPU's share of the weights over the load bandwidth.
            let derived = info.resolved.model.as_ref().map_or(0.0, |m| {
                crate::model::params(m) * m.weight_bytes
                    / f64::from(group.tp.max(1) * group.pp.max(1))
                    / (s.load_gb_per_s * 1e9)
            });
            Timing {
                min: s.min,
                max: s.max,
                interval: s.interval_s.map(SimDuration::from_secs_f64),
                provision: SimDuration::from_secs_f64(s.provision_s),
                load: SimDuration::from_secs_f64(s.load_s.unwrap_or(derived)),
                warmup: SimDuration::from_secs_f64(s.warmup_s),
                warmup_speed: s.warmup_speed,
                routable_during_warmup: s.routable_during_warmup,
                up_cooldown: SimDuration::from_secs_f64(s.scale_up_cooldown_s),
                down_cooldown: SimDuration::from_secs_f64(s.scale_down_cooldown_s),
            }
        });
        let recipe = crate::instance::spawn::kv_recipe(group, &info.resolved);
        for i in info.instances() {
            let on = i - info.first < group.count;
            world.entity_mut(index[i as usize]).insert(Power {
                phase: if on { Phase::Serving } else { Phase::Off },
                phase_end: None,
                on_since: on.then_some(SimTime::ZERO),
                kv: recipe,
            });
        }
        scaler.groups.push(GroupScaling {
            name: info.name.clone(),
            timing,
            next_eval: timing.and_then(|t| match t.interval {
                Some(i) => Some(SimTime::ZERO + i),
                None => first_policy_tick,
            }),
            instances: info.instances().collect(),
            gpus_per_instance: group.tp.max(1) * group.pp.max(1),
            cost_per_gpu_hour: group.cost_per_gpu_hour,
            on: group.count,
            peak: group.count,
            ..Default::default()
        });
    }
    let mut firsts: Vec<SimTime> = scaler.groups.iter().filter_map(|g| g.next_eval).collect();
    firsts.sort_unstable();
    firsts.dedup();
    let mut queue = world.resource_mut::<EventQueue>();
    for t in firsts {
        queue.push(t, Event::AutoscaleTick);
    }
    world.insert_resource(scaler);
    if autoscaled {
        app.add_systems(
            crate::engine::SimStep,
            (
                advance_phases
                    .in_set(crate::engine::SimSystems::Advance)
                    .after(crate::instance::InstanceSystems::Retire),
                sample_latencies
                    .in_set(crate::engine::SimSystems::Record)
                    .before(crate::metrics::MetricsSystems::Record),
                stop_on_event_write_error
                    .in_set(crate::engine::SimSystems::Record)
                    .after(crate::metrics::MetricsSystems::Record),
            ),
        );
    }
    Ok(())
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

    fn starting(self) -> bool {
        matches!(
            self,
            Phase::Provisioning | Phase::Loading | Phase::WarmingUp
        )
    }
}

pub use crate::kv::KvRecipe;

/// An instance's life-cycle state.
#[derive(Component, Clone, Debug)]
pub struct Power {
    pub phase: Phase,
    /// End of the current timed phase (provisioning, loading, warming up).
    pub phase_end: Option<SimTime>,
    /// Since when it has been on (not off), for GPU time.
    pub on_since: Option<SimTime>,
    pub kv: KvRecipe,
}

/// Life-cycle timings and bounds of an autoscaled group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub min: u32,
    pub max: u32,
    /// The group's own evaluation interval (`None`: the policy's schedule).
    pub interval: Option<SimDuration>,
    pub provision: SimDuration,
    pub load: SimDuration,
    pub warmup: SimDuration,
    pub warmup_speed: f64,
    pub routable_during_warmup: bool,
    pub up_cooldown: SimDuration,
    pub down_cooldown: SimDuration,
}

/// One instance group's scaling state and accounting.
#[derive(Clone, Debug, Default)]
pub struct GroupScaling {
    pub name: String,
    /// `None` for a fixed-size group.
    pub timing: Option<Timing>,
    /// Instance indices of the group.
    pub instances: Vec<u32>,
    pub gpus_per_instance: u32,
    pub cost_per_gpu_hour: f64,
    /// Instances on (any phase but off), and since when that number holds.
    pub on: u32,
    pub since: SimTime,
    /// ∫ instances on dt, time at `max`, most on at once.
    pub instance_time: SimDuration,
    pub time_at_max: SimDuration,
    pub peak: u32,
    pub scale_ups: u64,
    pub scale_downs: u64,
    pub cold_starts: u64,
    pub last_up: Option<SimTime>,
    pub last_action: Option<SimTime>,
    /// Σ busy time of the group's instances at the previous evaluation.
    pub busy_mark: SimDuration,
    /// The group's next evaluation, and the start of its current window.
    pub next_eval: Option<SimTime>,
    pub window_start: SimTime,
    /// TTFT (µs) and mean ITL (µs) of requests that finished since the previous evaluation.
    pub ttft_window: Vec<u64>,
    pub itl_window: Vec<f64>,
}

impl GroupScaling {
    fn max(&self) -> u32 {
        self.timing.map_or(self.instances.len() as u32, |t| t.max)
    }

    /// Moves the on-count step function to `now`, then sets it to `on`.
    fn set_on(&mut self, now: SimTime, on: u32) {
        self.advance(now);
        self.on = on;
        self.peak = self.peak.max(on);
    }

    fn advance(&mut self, now: SimTime) {
        let dt = now.since(self.since);
        self.instance_time += SimDuration(dt.as_us() * u64::from(self.on));
        if self.on >= self.max() {
            self.time_at_max += dt;
        }
        self.since = now;
    }
}

/// The scaling state of the cluster.
#[derive(Resource, Default)]
pub struct Autoscaler {
    pub groups: Vec<GroupScaling>,
    /// Instances draining now.
    pub draining: Vec<u32>,
    /// `scale_events.csv`, when written.
    pub events: Option<csv::Writer<BufWriter<File>>>,
    pub write_error: Option<String>,
    /// True when some group autoscales (collect latency samples, park requests).
    pub active: bool,
}

/// Column names of `scale_events.csv`.
pub const SCALE_EVENT_COLUMNS: [&str; 8] = [
    "time_s",
    "group",
    "instance",
    "event",
    "reason",
    "signal",
    "group_instances",
    "group_serving",
];

struct Ctx<'a> {
    now: SimTime,
    power: &'a mut Power,
    sched: &'a mut Scheduler,
    kv: &'a mut KvCache,
}

impl Autoscaler {
    #[expect(clippy::too_many_arguments, reason = "one row of scale_events.csv")]
    fn log(
        &mut self,
        now: SimTime,
        g: usize,
        instance: u32,
        event: &str,
        reason: &str,
        signal: f64,
        serving: u32,
    ) {
        let on = self.groups[g].on;
        let name = self.groups[g].name.clone();
        if let Some(w) = self.events.as_mut()
            && self.write_error.is_none()
        {
            let row = [
                format!("{:.6}", now.as_us() as f64 / 1e6),
                name,
                instance.to_string(),
                event.to_string(),
                reason.to_string(),
                if signal.is_finite() {
                    format!("{signal:.6}")
                } else {
                    String::new()
                },
                on.to_string(),
                serving.to_string(),
            ];
            if let Err(e) = w.write_record(row) {
                self.write_error = Some(e.to_string());
            }
        }
    }
}

/// Moves an instance to `phase` (timed phases schedule their end) and keeps the view.
fn enter(c: &mut Ctx<'_>, t: &Timing, phase: Phase, queue: &mut EventQueue, i: u32) {
    let now = c.now;
    if c.power.phase == Phase::Off && phase != Phase::Off {
        c.power.on_since = Some(now);
        let events = c.kv.records_events();
        *c.kv = c.power.kv.build();
        c.kv.record_events(events);
    }
    c.power.phase = phase;
    c.power.phase_end = None;
    let timer = match phase {
        Phase::Provisioning => Some(t.provision),
        Phase::Loading => Some(t.load),
        Phase::WarmingUp => Some(t.warmup),
        _ => None,
    };
    if let Some(d) = timer {
        c.power.phase_end = Some(now + d);
        queue.push(now + d, Event::PhaseEnd { instance: i });
    }
    c.sched.unroutable =
        !(phase == Phase::Serving || (phase == Phase::WarmingUp && t.routable_during_warmup));
    c.sched.warmup_speed =
        (phase == Phase::WarmingUp && t.warmup_speed < 1.0).then_some(t.warmup_speed);
    if phase == Phase::Off {
        c.power.on_since = None;
        // Its KV cache is dropped (and its memory freed).
        let events = c.kv.records_events();
        c.kv.note_cleared();
        let cleared: Vec<_> = c.kv.take_events().collect();
        *c.kv = KvCache::new(0, c.power.kv.block_size);
        c.kv.record_events(events);
        for (kind, block) in cleared {
            c.kv.note(kind, block);
        }
    }
}

fn serving(
    world_sched: &Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    index: &InstanceIndex,
    group: &GroupScaling,
) -> u32 {
    group
        .instances
        .iter()
        .filter(|&&i| {
            world_sched
                .get(index.0[i as usize])
                .is_ok_and(|(p, s, _)| p.phase.ready() && !s.unroutable)
        })
        .count() as u32
}

/// Ends timed phases: loaded, warm. An instance that becomes routable releases the parked
/// requests to routing in this same tick.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn advance_phases(
    mut due: ResMut<ScaleDue>,
    mut route: ResMut<RouteDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut scaler: ResMut<Autoscaler>,
    mut parked: ResMut<Parked>,
    mut view: ResMut<ClusterView>,
    mut queue: ResMut<EventQueue>,
    mut instances: Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    groups: Query<&Instance>,
) {
    let now = clock.now;
    if std::mem::take(&mut due.unpark) {
        route.0.append(&mut parked.requests);
    }
    let ends = std::mem::take(&mut due.phase_ends);
    for &i in &ends {
        let e = index.0[i as usize];
        let g = groups.get(e).map_or(0, |x| x.group as usize);
        let Some(t) = scaler.groups[g].timing else {
            continue;
        };
        let (next, was_routable) = {
            let (power, sched, _) = instances.get(e).expect("instance exists");
            if power.phase_end != Some(now) {
                continue; // cancelled or superseded
            }
            let next = match power.phase {
                Phase::Provisioning => Phase::Loading,
                Phase::Loading if t.warmup.as_us() > 0 => Phase::WarmingUp,
                Phase::Loading | Phase::WarmingUp => Phase::Serving,
                _ => continue,
            };
            (next, !sched.unroutable)
        };
        {
            let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
            let mut c = Ctx {
                now,
                power: &mut power,
                sched: &mut sched,
                kv: &mut kv,
            };
            enter(&mut c, &t, next, &mut queue, i);
            refresh_view(&mut view, i, &sched, &kv);
        }
        let serving_now = serving(&instances, &index, &scaler.groups[g]);
        scaler.log(now, g, i, next.name(), "", f64::NAN, serving_now);
        let routable = !instances.get(e).expect("instance exists").1.unroutable;
        if routable && !was_routable && !parked.requests.is_empty() {
            route.0.append(&mut parked.requests);
        }
    }
    let mut ends = ends;
    ends.clear();
    due.phase_ends = ends;
    finish_drains(now, &index, &mut scaler, &view, &mut instances, &groups);
}

/// Turns off draining instances with nothing left on them or headed to them.
fn finish_drains(
    now: SimTime,
    index: &InstanceIndex,
    scaler: &mut Autoscaler,
    view: &ClusterView,
    instances: &mut Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    groups: &Query<&Instance>,
) {
    if scaler.draining.is_empty() {
        return;
    }
    let mut k = 0;
    while k < scaler.draining.len() {
        let i = scaler.draining[k];
        let e = index.0[i as usize];
        let done = {
            let (_, s, _) = instances.get(e).expect("instance exists");
            s.resident() == 0
                && s.outbound == 0
                && s.in_flight.is_empty()
                && s.step_end.is_none()
                && view.instances[i as usize].in_flight == 0
        };
        if !done {
            k += 1;
            continue;
        }
        scaler.draining.swap_remove(k);
        let g = groups.get(e).map_or(0, |x| x.group as usize);
        let t = scaler.groups[g]
            .timing
            .expect("only autoscaled groups drain");
        {
            let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
            let mut c = Ctx {
                now,
                power: &mut power,
                sched: &mut sched,
                kv: &mut kv,
            };
            let mut q = EventQueue::default();
            enter(&mut c, &t, Phase::Off, &mut q, i);
        }
        let on = scaler.groups[g].on - 1;
        scaler.groups[g].set_on(now, on);
        let serving_now = serving(instances, index, &scaler.groups[g]);
        scaler.log(now, g, i, "off", "drained", f64::NAN, serving_now);
    }
}

/// Collects the windowed latency samples of autoscaled groups (before Record despawns).
pub fn sample_latencies(
    due: Res<RecordDue>,
    mut scaler: ResMut<Autoscaler>,
    groups: Query<&Instance>,
    index: Res<InstanceIndex>,
) {
    if !scaler.active {
        return;
    }
    for f in &due.0 {
        let (Some(i), Some(ttft)) = (f.instance, f.ttft) else {
            continue;
        };
        let g = groups
            .get(index.0[i as usize])
            .map_or(0, |x| x.group as usize);
        let group = &mut scaler.groups[g];
        if group.timing.is_none() {
            continue;
        }
        group.ttft_window.push(ttft.as_us());
        if f.itl_count > 0 {
            group
                .itl_window
                .push(f.itl_sum.as_us() as f64 / f64::from(f.itl_count));
        }
    }
}

fn p90_ms(samples: &mut [f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    // Nearest rank.
    let rank = ((0.9 * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    Some(samples[rank - 1] / 1e3)
}

/// Evaluates the scaling policy (at its times) and starts cold starts for parked requests.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn evaluate_scaling(
    mut due: ResMut<ScaleDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut policy: ResMut<Active<family::Autoscale>>,
    mut scaler: ResMut<Autoscaler>,
    parked: Res<Parked>,
    mut view: ResMut<ClusterView>,
    mut queue: ResMut<EventQueue>,
    mut instances: Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    groups: Query<&Instance>,
) {
    let now = clock.now;
    let scaler = &mut *scaler;
    if std::mem::take(&mut due.evaluate) {
        // The groups due now (each has its own schedule: its interval or the policy's).
        let due_groups: Vec<usize> = (0..scaler.groups.len())
            .filter(|&g| scaler.groups[g].next_eval.is_some_and(|t| t <= now))
            .collect();
        let signals = signals(now, scaler, &due_groups, &parked, &view, &index, &instances);
        let targets = if signals.is_empty() {
            Vec::new()
        } else {
            policy.0.evaluate(now, &signals)
        };
        for t in targets {
            apply(
                now,
                t,
                scaler,
                &index,
                &mut view,
                &mut queue,
                &mut instances,
                false,
            );
        }
        let more = !queue.is_empty();
        for &g in &due_groups {
            let group = &mut scaler.groups[g];
            group.window_start = now;
            let next = match group.timing.and_then(|t| t.interval) {
                Some(i) => Some(now + i),
                None => policy.0.next_evaluation(now, false),
            };
            group.next_eval = next.filter(|&t| t > now && more);
            if let Some(t) = group.next_eval {
                queue.push(t, Event::AutoscaleTick);
            }
        }
    }
    if std::mem::take(&mut due.cold_start) && !parked.requests.is_empty() {
        cold_start(now, scaler, &index, &mut view, &mut queue, &mut instances);
    }
    finish_drains(now, &index, scaler, &view, &mut instances, &groups);
}

/// What the policy sees of each autoscaled group.
fn signals(
    now: SimTime,
    scaler: &mut Autoscaler,
    due: &[usize],
    parked: &Parked,
    view: &ClusterView,
    index: &InstanceIndex,
    instances: &Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
) -> Vec<GroupSignals> {
    let parked_n = parked.requests.len() as f64;
    let mut out = Vec::new();
    for &g in due {
        let group = &mut scaler.groups[g];
        let Some(t) = group.timing else { continue };
        let window = now.since(group.window_start).as_us() as f64;
        let (mut current, mut ready, mut busy) = (0u32, 0u32, SimDuration::ZERO);
        let (mut queued, mut resident, mut used, mut total) = (0u64, 0u64, 0u64, 0u64);
        for &i in &group.instances {
            let (p, s, kv) = instances.get(index.0[i as usize]).expect("instance exists");
            busy += s.counters.busy;
            current += u32::from(p.phase.counted());
            if p.phase.ready() {
                ready += 1;
                let transit = u64::from(view.instances[i as usize].in_flight);
                queued += s.waiting.len() as u64 + transit;
                resident += s.resident() as u64 + transit;
                used += u64::from(kv.allocated_blocks());
                total += u64::from(kv.total_blocks());
            }
        }
        let per = |x: f64| x / f64::from(ready.max(1));
        let utilization = if ready == 0 || window == 0.0 {
            0.0
        } else {
            busy.as_us().saturating_sub(group.busy_mark.as_us()) as f64
                / (f64::from(ready) * window)
        };
        group.busy_mark = busy;
        let mut ttft: Vec<f64> = group.ttft_window.drain(..).map(|x| x as f64).collect();
        let mut itl = std::mem::take(&mut group.itl_window);
        out.push(GroupSignals {
            group: g as u32,
            current,
            ready,
            min: t.min,
            max: t.max,
            instance_cost_per_hour: f64::from(group.gpus_per_instance) * group.cost_per_gpu_hour,
            utilization,
            queue_per_instance: per(queued as f64 + parked_n),
            kv_usage: if total == 0 {
                0.0
            } else {
                used as f64 / total as f64
            },
            in_flight_per_instance: per(resident as f64 + parked_n),
            ttft_p90_ms: p90_ms(&mut ttft),
            itl_p90_ms: p90_ms(&mut itl),
        });
    }
    out
}

/// Moves group `t.group` toward `t.desired` (clamped to its bounds, within cooldowns).
#[expect(clippy::too_many_arguments, reason = "the scaling state it changes")]
fn apply(
    now: SimTime,
    target: ScaleTarget,
    scaler: &mut Autoscaler,
    index: &InstanceIndex,
    view: &mut ClusterView,
    queue: &mut EventQueue,
    instances: &mut Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    cold: bool,
) {
    let g = target.group as usize;
    let Some(t) = scaler.groups.get(g).and_then(|x| x.timing) else {
        return;
    };
    let desired = target.desired.clamp(t.min, t.max);
    let phase_of = |instances: &Query<(&mut Power, &mut Scheduler, &mut KvCache)>, i: u32| {
        instances
            .get(index.0[i as usize])
            .map(|(p, _, _)| p.phase)
            .expect("instance exists")
    };
    let members = scaler.groups[g].instances.clone();
    let current = members
        .iter()
        .filter(|&&i| phase_of(instances, i).counted())
        .count() as u32;
    let group = &scaler.groups[g];
    if desired > current {
        if !cold && group.last_up.is_some_and(|u| now < u + t.up_cooldown) {
            return;
        }
        let mut need = desired - current;
        // Take back draining instances first (the model is still loaded), then start off ones.
        for pass in [Phase::Draining, Phase::Off] {
            for &i in &members {
                if need == 0 || phase_of(instances, i) != pass {
                    continue;
                }
                let e = index.0[i as usize];
                let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
                let mut c = Ctx {
                    now,
                    power: &mut power,
                    sched: &mut sched,
                    kv: &mut kv,
                };
                let (phase, event) = if pass == Phase::Draining {
                    scaler.draining.retain(|&d| d != i);
                    // Routable again at once: parked requests may go to it.
                    queue.push(now, Event::Unpark);
                    (Phase::Serving, "undrain")
                } else {
                    (Phase::Provisioning, "provisioning")
                };
                enter(&mut c, &t, phase, queue, i);
                refresh_view(view, i, &sched, &kv);
                need -= 1;
                let group = &mut scaler.groups[g];
                if pass == Phase::Off {
                    let on = group.on + 1;
                    group.set_on(now, on);
                }
                group.scale_ups += 1;
                group.cold_starts += u64::from(cold);
                let serving_now = serving(instances, index, &scaler.groups[g]);
                scaler.log(now, g, i, event, target.reason, target.signal, serving_now);
            }
        }
        let group = &mut scaler.groups[g];
        group.last_up = Some(now);
        group.last_action = Some(now);
    } else if desired < current {
        if group.last_action.is_some_and(|a| now < a + t.down_cooldown) {
            return;
        }
        let mut cut = current - desired;
        // Cancel starting instances first (newest start first), then drain the serving
        // ones with the least work (ties: highest index).
        let mut order: Vec<(u8, u64, u32)> = members
            .iter()
            .filter_map(|&i| {
                let (p, s, _) = instances.get(index.0[i as usize]).ok()?;
                let load = s.resident() as u64 + u64::from(view.instances[i as usize].in_flight);
                match p.phase {
                    ph if ph.starting() && load == 0 => {
                        Some((0, u64::MAX - p.on_since.map_or(0, |x| x.as_us()), i))
                    }
                    ph if ph.counted() => Some((1, load, i)),
                    _ => None,
                }
            })
            .collect();
        order.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(b.2.cmp(&a.2)));
        for (kind, load, i) in order {
            if cut == 0 {
                break;
            }
            let e = index.0[i as usize];
            let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
            let mut c = Ctx {
                now,
                power: &mut power,
                sched: &mut sched,
                kv: &mut kv,
            };
            let (phase, event) = if kind == 0 || load == 0 {
                (Phase::Off, if kind == 0 { "cancelled" } else { "off" })
            } else {
                (Phase::Draining, "draining")
            };
            enter(&mut c, &t, phase, queue, i);
            refresh_view(view, i, &sched, &kv);
            cut -= 1;
            if phase == Phase::Draining {
                scaler.draining.push(i);
            }
            let group = &mut scaler.groups[g];
            if phase == Phase::Off {
                let on = group.on - 1;
                group.set_on(now, on);
            }
            group.scale_downs += 1;
            let serving_now = serving(instances, index, &scaler.groups[g]);
            scaler.log(now, g, i, event, target.reason, target.signal, serving_now);
        }
        scaler.groups[g].last_action = Some(now);
    }
}

/// Parked requests and nothing on its way: start one instance in the cheapest autoscaled
/// group with room.
fn cold_start(
    now: SimTime,
    scaler: &mut Autoscaler,
    index: &InstanceIndex,
    view: &mut ClusterView,
    queue: &mut EventQueue,
    instances: &mut Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
) {
    let coming = scaler.groups.iter().any(|g| {
        g.timing.is_some()
            && g.instances.iter().any(|&i| {
                instances
                    .get(index.0[i as usize])
                    .is_ok_and(|(p, s, _)| p.phase.starting() || (p.phase.ready() && !s.unroutable))
            })
    });
    if coming {
        return;
    }
    let pick = scaler
        .groups
        .iter()
        .enumerate()
        .filter_map(|(g, x)| {
            let t = x.timing?;
            let on = x
                .instances
                .iter()
                .filter(|&&i| {
                    instances
                        .get(index.0[i as usize])
                        .is_ok_and(|(p, _, _)| p.phase.counted())
                })
                .count() as u32;
            (on < t.max).then_some((f64::from(x.gpus_per_instance) * x.cost_per_gpu_hour, g, on))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if let Some((_, g, on)) = pick {
        let target = ScaleTarget {
            group: g as u32,
            desired: on + 1,
            reason: "cold_start",
            signal: f64::NAN,
        };
        apply(now, target, scaler, index, view, queue, instances, true);
    }
}

/// Stops the run at the first failed write of `scale_events.csv`.
pub fn stop_on_event_write_error(
    scaler: Res<Autoscaler>,
    clock: Res<SimClock>,
    mut fault: ResMut<SimFault>,
) {
    if let Some(e) = &scaler.write_error {
        fault.0.get_or_insert_with(|| crate::engine::Fault::Write {
            file: "scale_events.csv",
            at: clock.now,
            error: e.clone(),
        });
    }
}

/// Closes the accounting at `end` (the end of the run).
pub fn close_accounts(scaler: &mut Autoscaler, end: SimTime) {
    for g in &mut scaler.groups {
        g.advance(end);
    }
}
