//! Cluster control stages: admission ([`SimSystems::Admit`]) and routing
//! ([`SimSystems::Route`]).
//!
//! Admission runs `admission_latency_us` after arrival; a rejected request ends here
//! (INV-1 bucket `rejected`). Routing picks an instance from the [`ClusterView`]; the
//! request then reaches the instance queue after the routing latency plus the instance
//! latency model's queueing delay (BLIS α0 + α1·input). While in transit it counts as
//! `in_flight` on its instance's snapshot (a router-owned signal, always fresh).
//!
//! [`SimSystems::Admit`]: crate::SimSystems::Admit
//! [`SimSystems::Route`]: crate::SimSystems::Route

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;

use crate::engine::{
    AdmitDue, ClusterView, EnqueueDue, Event, EventQueue, RecordDue, RouteDue, ScaleDue, SimClock,
};
use crate::instance::InstanceIndex;
use crate::labels::Labels;
use crate::latency::Latency;
use crate::metrics::SummaryAppExt;
use crate::policy::{Active, Admission, RouterView, ScoredCandidate, family};
use crate::request::{AssignedTo, FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::setup::{
    RunError, SetupAppExt, SetupCtx, SetupError, SetupStage, SimError, build_policy,
};
use crate::time::{SimDuration, SimTime};

pub use crate::engine::{ClusterDelays, Rejections};

/// Admission: [`admit_requests`] in [`SimSystems::Admit`] applies the admission policy
/// (`policy::Active<family::Admission>`, built from the scenario); empties `AdmitDue`, fills `RouteDue`
/// and, for rejected requests, `RecordDue`. Its setup step ([`set_up_admission`]) builds the
/// policy and [`ClusterDelays`]. Owns [`ClusterDelays`] and [`Rejections`].
pub struct AdmissionPlugin;

impl bevy_app::Plugin for AdmissionPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        app.init_resource::<ClusterDelays>()
            .init_resource::<Rejections>()
            .add_setup(SetupStage::Policies, set_up_admission)
            // Also in SimStepFast, which serves ticks of arrivals only.
            .add_systems(
                crate::engine::SimStep,
                admit_requests.in_set(crate::engine::SimSystems::Admit),
            )
            .add_systems(
                crate::engine::SimStepFast,
                admit_requests.in_set(crate::engine::SimSystems::Admit),
            );
    }
}

/// `SetupStage::Policies`: the admission policy and the control plane's delays.
pub fn set_up_admission(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let p = &ctx.scenario.policies;
    let labels = app.world().resource::<Labels>();
    let admission = build_policy::<family::Admission>(
        ctx,
        labels,
        "admission",
        &p.admission,
        &p.admission_params,
    )?;
    app.insert_resource(Active::<family::Admission>(admission))
        .insert_resource(ClusterDelays {
            admission: SimDuration(p.admission_latency_us),
            routing: SimDuration(p.routing_latency_us),
        });
    Ok(())
}

/// `SetupStage::Policies`: the routing policy (it turns KV events on if it reads caches)
/// and how fresh its signals are.
pub fn set_up_routing(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let p = &ctx.scenario.policies;
    let labels = app.world().resource::<Labels>();
    let routing =
        build_policy::<family::Routing>(ctx, labels, "routing", &p.routing, &p.routing_params)?;
    app.world_mut().resource_mut::<crate::kv::KvEvents>().0 |= routing.wants_kv_events();
    app.insert_resource(Active::<family::Routing>(routing))
        .insert_resource(RouterSnapshots {
            interval: SimDuration(p.snapshot_refresh_interval_us),
            ..Default::default()
        })
        .insert_resource(RoutingStats {
            worst_k: ctx.scenario.outputs.worst_decisions as usize,
            ..Default::default()
        });
    Ok(())
}

/// `SetupStage::Cluster`: the routers' views of the instances just spawned; requests wait
/// for a cold start (instead of being rejected) when some group autoscales.
pub fn set_up_router_views(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    let view = world.resource::<ClusterView>().instances.clone();
    world.insert_resource(crate::policy::CachedBlocks {
        per_instance: vec![Default::default(); view.len()],
        block_size: ctx
            .scenario
            .cluster
            .groups
            .first()
            .map_or(16, |g| g.block_size),
        cursor: Default::default(),
    });
    world.resource_mut::<RouterSnapshots>().stale = view;
    world.resource_mut::<Parked>().enabled = ctx
        .scenario
        .cluster
        .groups
        .iter()
        .any(|g| g.scaling.is_some());
    Ok(())
}

/// Routing: [`route_requests`] in [`SimSystems::Route`] applies the routing policy
/// (`policy::Active<family::Routing>`); empties `RouteDue`, sends requests on as `Enqueue` events (or into `EnqueueDue`),
/// parks them when nothing is routable and a group scales (`ScaleDue::cold_start`). Its
/// setup steps ([`set_up_routing`], [`set_up_router_views`]) build the policy and the
/// routers' views. Owns [`RouterSnapshots`], [`RoutingStats`], [`DecisionLog`] and [`Parked`], and
/// `policy::CachedBlocks` (the caches as the instances' KV events tell them).
pub struct RoutingPlugin;

impl bevy_app::Plugin for RoutingPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        app.init_resource::<RouterSnapshots>()
            .init_resource::<RoutingStats>()
            .init_resource::<DecisionLog>()
            .init_resource::<Parked>()
            .init_resource::<crate::policy::CachedBlocks>()
            .init_resource::<crate::kv::KvEvents>()
            .add_setup(SetupStage::Policies, set_up_routing)
            .add_setup(SetupStage::Cluster, set_up_router_views)
            .add_setup(SetupStage::Outputs, open_decisions)
            .add_setup(SetupStage::Outputs, index_kv_events_when_on)
            .add_summary_part(summarize_routing)
            .add_finish_step(crate::metrics::FinishStage::Concerns, finish_decisions)
            .add_systems(
                crate::engine::SimStep,
                route_requests.in_set(crate::engine::SimSystems::Route),
            )
            .add_systems(
                crate::engine::SimStepFast,
                route_requests.in_set(crate::engine::SimSystems::Route),
            );
    }
}

/// Routing's part of the summary: how many decisions, and how far from the best-scored
/// candidate they were (regret).
pub fn summarize_routing(world: &mut World, summary: &mut crate::metrics::Summary) {
    let stats = world.resource::<RoutingStats>();
    summary.routing = crate::metrics::RoutingSummary {
        decisions: stats.decisions,
        mean_regret: if stats.decisions == 0 {
            0.0
        } else {
            stats.regret_sum / stats.decisions as f64
        },
        max_regret: stats.regret_max,
        worst: stats.worst.clone(),
    };
}

/// Applies the admission policy to the requests due for it.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn admit_requests(
    mut admit: ResMut<AdmitDue>,
    mut route: ResMut<RouteDue>,
    mut record: ResMut<RecordDue>,
    clock: Res<SimClock>,
    view: Res<ClusterView>,
    mut policy: ResMut<Active<family::Admission>>,
    mut rejections: ResMut<Rejections>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
) {
    let mut work = std::mem::take(&mut admit.0);
    for &entity in &work {
        let Ok((spec, mut life)) = requests.get_mut(entity) else {
            continue; // timed out before admission
        };
        match admit_one(&mut policy, spec, &mut life, clock.now, &view) {
            Ok(()) => route.0.push(entity),
            Err(reason) => reject(entity, spec, &life, reason, &mut rejections, &mut record),
        }
    }
    work.clear();
    admit.0 = work;
}

/// The admission policy's decision on one request: admitted (stamped now) or the reason it
/// is rejected.
pub fn admit_one(
    policy: &mut Active<family::Admission>,
    spec: &RequestSpec,
    life: &mut Lifecycle,
    now: SimTime,
    view: &ClusterView,
) -> Result<(), &'static str> {
    match policy.0.admit(spec, now, &view.instances) {
        Admission::Admit => {
            life.admitted = Some(now);
            Ok(())
        }
        Admission::Reject(reason) => Err(reason),
    }
}

/// A request the control plane rejects (admission, or nothing to route it to): counted by
/// reason and handed to Record.
pub fn reject(
    entity: Entity,
    spec: &RequestSpec,
    life: &Lifecycle,
    reason: &'static str,
    rejections: &mut Rejections,
    record: &mut RecordDue,
) {
    *rejections.0.entry(reason).or_default() += 1;
    record.0.push(FinishedRequest::unserved(
        entity,
        spec.clone(),
        *life,
        FinalState::Rejected,
        None,
    ));
}

/// The work lists routing empties and fills.
#[derive(SystemParam)]
pub struct RouteWork<'w> {
    route: ResMut<'w, RouteDue>,
    enqueue: ResMut<'w, EnqueueDue>,
    scale: ResMut<'w, ScaleDue>,
    record: ResMut<'w, RecordDue>,
}

/// Instance snapshots as the router sees them: live, or refreshed every `interval`
/// (BLIS signal freshness: queue depth, batch size and KV usage are instance-reported and
/// may be stale; in-flight counts and routability are router-owned and always live).
#[derive(Resource, Debug, Default, Clone)]
pub struct RouterSnapshots {
    pub interval: SimDuration,
    pub last_refresh: SimTime,
    pub stale: Vec<crate::policy::InstanceSnapshot>,
}

pub use crate::engine::Parked;

/// The router: the routing policy and what it reads and writes besides the request (its
/// signals, decision statistics and trace, parked requests).
#[derive(SystemParam)]
pub struct Router<'w, 's> {
    policy: ResMut<'w, Active<family::Routing>>,
    snapshots: ResMut<'w, RouterSnapshots>,
    stats: ResMut<'w, RoutingStats>,
    log: ResMut<'w, DecisionLog>,
    parked: ResMut<'w, Parked>,
    disagg: Res<'w, crate::disagg::Disagg>,
    cached: Res<'w, crate::policy::CachedBlocks>,
    delays: Res<'w, ClusterDelays>,
    seen: Local<'s, Vec<crate::policy::InstanceSnapshot>>,
    front: Local<'s, Vec<crate::policy::InstanceSnapshot>>,
}

/// Where routing sends a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routed {
    /// To this instance (stamped routed; counted in its in-flight requests).
    To(u32),
    /// Parked until autoscaling makes an instance routable (the Autoscale stage is told).
    Parked,
    /// Nowhere: no instance is routable (the caller rejects it).
    Unroutable,
}

impl Router<'_, '_> {
    /// Routes one request: the policy's choice on the signals the router sees, the decision
    /// traced, the request stamped routed and counted in its instance's in-flight requests.
    pub fn route(
        &mut self,
        entity: Entity,
        spec: &RequestSpec,
        life: &mut Lifecycle,
        now: SimTime,
        view: &mut ClusterView,
        scale: &mut ScaleDue,
    ) -> Routed {
        let block_size = self.cached.block_size.max(1);
        // The signals the router sees (see RouterSnapshots).
        let live = &view.instances;
        let snapshots = &mut *self.snapshots;
        let instances: &[crate::policy::InstanceSnapshot] = if snapshots.interval.as_us() == 0 {
            live
        } else {
            if now.since(snapshots.last_refresh) >= snapshots.interval {
                snapshots.stale.clone_from(live);
                snapshots.last_refresh = now;
            }
            self.seen.clear();
            self.seen
                .extend(snapshots.stale.iter().zip(live).map(|(s, l)| {
                    crate::policy::InstanceSnapshot {
                        in_flight: l.in_flight,
                        routable: l.routable,
                        ..*s
                    }
                }));
            &self.seen
        };
        // P/D: decode instances take requests only from prefill instances.
        let instances: &[crate::policy::InstanceSnapshot] = if self.disagg.enabled {
            self.front.clear();
            let disagg = &self.disagg;
            self.front
                .extend(instances.iter().map(|s| crate::policy::InstanceSnapshot {
                    routable: s.routable && disagg.role(s.index) != crate::scenario::Role::Decode,
                    ..*s
                }));
            &self.front
        } else {
            instances
        };
        let rv = RouterView {
            instances,
            probe: &*self.cached,
            block_size,
        };
        let Some(i) = self.policy.0.choose(spec, now, &rv) else {
            if self.parked.enabled {
                self.parked.requests.push(entity);
                scale.cold_start = true;
                return Routed::Parked;
            }
            return Routed::Unroutable;
        };
        trace_decision(
            &mut self.stats,
            &mut self.log,
            self.policy.0.last_scores(),
            instances,
            now,
            spec.id,
            i,
        );
        life.routed = Some(now);
        view.instances[i as usize].in_flight += 1;
        Routed::To(i)
    }

    /// The delay before a request routed to an instance with `latency` and `serving` path
    /// joins its engine's queue: the routing delay, the latency model's queueing delay and
    /// the API server's work on the request.
    pub fn delay(
        &self,
        spec: &RequestSpec,
        latency: &Latency,
        serving: &crate::latency::ServingPath,
    ) -> SimDuration {
        self.delays.routing
            + latency.0.queueing_delay(spec.input_tokens)
            + serving.request_in(spec.input_tokens)
    }

    /// The first failed write of `decisions.csv` stops the run.
    pub fn check_log(&self, now: SimTime, fault: &mut crate::engine::SimFault) {
        if let Some(e) = &self.log.error {
            fault.0.get_or_insert_with(|| crate::engine::Fault::Write {
                file: "decisions.csv",
                at: now,
                error: e.clone(),
            });
        }
    }
}

/// A routed request joins its instance's queue after `delay`: now (the Enqueue stage's
/// `now`), or on an `Enqueue` event.
pub fn send_to(
    entity: Entity,
    i: u32,
    delay: SimDuration,
    now: SimTime,
    now_list: &mut Vec<(Entity, u32)>,
    queue: &mut EventQueue,
) {
    if delay.as_us() == 0 {
        now_list.push((entity, i));
    } else {
        queue.push(
            now + delay,
            Event::Enqueue {
                request: entity,
                instance: i,
            },
        );
    }
}

/// Regret statistics of routing decisions (BLIS counterfactual regret).
#[derive(Resource, Debug, Default, Clone)]
pub struct RoutingStats {
    pub decisions: u64,
    pub regret_sum: f64,
    pub regret_max: f64,
    /// `outputs.worst_decisions`: how many of the highest-regret decisions to keep.
    pub worst_k: usize,
    /// Those decisions, highest regret first (ties: earliest).
    pub worst: Vec<crate::metrics::WorstDecision>,
}

impl RoutingStats {
    /// Keeps `d` if it is among the `worst_k` highest regrets so far.
    fn keep_if_worst(&mut self, d: crate::metrics::WorstDecision) {
        if self.worst.len() == self.worst_k
            && self.worst.last().is_none_or(|w| w.regret >= d.regret)
        {
            return;
        }
        let at = self.worst.partition_point(|w| w.regret >= d.regret);
        self.worst.insert(at, d);
        self.worst.truncate(self.worst_k);
    }
}

/// Streaming `decisions.csv` (present only when decision tracing is on).
#[derive(Resource, Default)]
pub struct DecisionLog {
    pub writer: Option<csv::Writer<std::io::BufWriter<std::fs::File>>>,
    pub top_k: usize,
    pub error: Option<String>,
}

/// `SetupStage::Outputs`: while KV events are on, the routers' index of cached blocks
/// (`policy::CachedBlocks`) reads them after the instances publish them.
fn index_kv_events_when_on(app: &mut bevy_app::App, _: &SetupCtx<'_>) -> Result<(), SimError> {
    use bevy_ecs::schedule::ScheduleLabel;
    if app.world().resource::<crate::kv::KvEvents>().0 {
        for label in [
            crate::engine::SimStep.intern(),
            crate::engine::SimStepFast.intern(),
        ] {
            app.add_systems(
                label,
                crate::policy::index_kv_events
                    .in_set(crate::engine::SimSystems::Observe)
                    .after(crate::instance::InstanceSystems::PublishKvEvents),
            );
        }
    }
    Ok(())
}

/// `SetupStage::Outputs`: `decisions.csv` (its header written) when the scenario or the run
/// options ask for it.
fn open_decisions(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let outputs = &ctx.scenario.outputs;
    if !(ctx.options.trace_decisions || outputs.decisions_csv) {
        return Ok(());
    }
    let world = app.world_mut();
    let mut files = world.resource_mut::<crate::output::Outputs>();
    let Some(file) = files.create("decisions.csv").map_err(SetupError::Outputs)? else {
        return Ok(());
    };
    let mut writer = csv::Writer::from_writer(file);
    writer
        .write_record(DECISION_COLUMNS)
        .map_err(|e| SetupError::Output {
            path: files.staged_path("decisions.csv"),
            message: e.to_string(),
        })?;
    world.insert_resource(DecisionLog {
        writer: Some(writer),
        top_k: outputs.decision_top_k as usize,
        error: None,
    });
    use bevy_ecs::schedule::ScheduleLabel;
    for label in [
        crate::engine::SimStep.intern(),
        crate::engine::SimStepFast.intern(),
    ] {
        app.add_systems(
            label,
            write_anomaly_rows.in_set(crate::engine::SimSystems::Observe),
        );
    }
    Ok(())
}

/// Writes the anomalies detected since the last tick (by the instances, by time and index,
/// then by scaling) as rows of `decisions.csv`: `chosen` is the instance (empty for
/// scaling), `kind` and `detail` say what happened.
fn write_anomaly_rows(
    mut log: ResMut<DecisionLog>,
    mut others: ResMut<crate::instance::AnomalyLog>,
    mut instances: Query<(&crate::instance::Instance, &mut crate::instance::Scheduler)>,
) {
    let log = &mut *log;
    let mut rows: Vec<(u32, crate::instance::AnomalyRow)> = Vec::new();
    for (instance, mut sched) in &mut instances {
        if let Some(r) = sched.anomaly_rows.as_mut().filter(|r| !r.is_empty()) {
            rows.extend(r.drain(..).map(|row| (instance.index, row)));
        }
    }
    rows.sort_by_key(|(i, row)| (row.time, *i));
    let scaling = others.0.drain(..).map(|row| (u32::MAX, row));
    for (i, row) in rows.into_iter().chain(scaling) {
        let Some(w) = log.writer.as_mut().filter(|_| log.error.is_none()) else {
            return;
        };
        let at = if i == u32::MAX {
            String::new()
        } else {
            i.to_string()
        };
        let record = [
            row.time.as_us().to_string(),
            row.request.map_or(String::new(), |r| r.to_string()),
            at,
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            row.kind.to_string(),
            row.detail,
        ];
        if let Err(e) = w.write_record(record) {
            log.error = Some(e.to_string());
        }
    }
}

/// `FinishStage::Concerns`: `decisions.csv` flushed (or its first write error).
fn finish_decisions(world: &mut World, _: &mut crate::metrics::Summary) -> Result<(), SimError> {
    let path = world
        .resource::<crate::output::Outputs>()
        .staged_path("decisions.csv");
    let io = |e: String| RunError::Output {
        path: path.clone(),
        message: e,
    };
    let mut log = world.resource_mut::<DecisionLog>();
    if let Some(err) = log.error.take() {
        return Err(io(err).into());
    }
    if let Some(writer) = log.writer.take() {
        writer
            .into_inner()
            .map_err(|e| io(e.to_string()))?
            .into_inner()
            .map_err(|e| io(e.to_string()))?
            .sync_all()
            .map_err(|e| io(e.to_string()))?;
    }
    Ok(())
}

/// Column names of `decisions.csv`.
pub const DECISION_COLUMNS: [&str; 10] = [
    "time_us",
    "request_id",
    "chosen",
    "chosen_score",
    "best",
    "best_score",
    "regret",
    "top_candidates",
    "kind",
    "detail",
];

/// Applies the routing policy and sends each request on its way to the chosen instance.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn route_requests(
    mut commands: Commands,
    mut due: RouteWork,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    mut router: Router,
    mut queue: ResMut<EventQueue>,
    mut rejections: ResMut<Rejections>,
    mut fault: ResMut<crate::engine::SimFault>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
    latencies: Query<(&Latency, &crate::instance::Limits)>,
) {
    let now = clock.now;
    let RouteWork {
        route,
        enqueue,
        scale,
        record,
    } = &mut due;
    let mut work = std::mem::take(&mut route.0);
    for &entity in &work {
        let Ok((spec, mut life)) = requests.get_mut(entity) else {
            continue; // timed out before routing
        };
        match router.route(entity, spec, &mut life, now, &mut view, scale) {
            Routed::To(i) => {
                commands.entity(entity).insert(AssignedTo(i));
                let (latency, limits) = latencies
                    .get(index.0[i as usize])
                    .expect("instance entity exists for the whole run");
                let delay = router.delay(spec, latency, &limits.serving);
                send_to(entity, i, delay, now, &mut enqueue.requests, &mut queue);
            }
            Routed::Parked => {}
            Routed::Unroutable => reject(
                entity,
                spec,
                &life,
                "no_routable_instance",
                &mut rejections,
                record,
            ),
        }
    }
    work.clear();
    route.0 = work;
    router.check_log(now, &mut fault);
}

/// Regret = best candidate score − chosen score (scored policies), else with
/// −(effective load) as the score; optionally one `decisions.csv` row.
/// Counts one decision and its regret (the best candidate's score minus the chosen one's,
/// at least 0), which it returns.
fn record_regret(stats: &mut RoutingStats, gap: f64) -> f64 {
    let regret = gap.max(0.0);
    stats.decisions += 1;
    stats.regret_sum += regret;
    stats.regret_max = stats.regret_max.max(regret);
    regret
}

fn trace_decision(
    stats: &mut RoutingStats,
    log: &mut DecisionLog,
    scored: Option<&[ScoredCandidate]>,
    instances: &[crate::policy::InstanceSnapshot],
    now: SimTime,
    id: u64,
    chosen: u32,
) {
    // Unscored policies: each routable instance scores −(effective load). Without a
    // decision trace the regret needs no list of candidates (one pass, no allocation).
    let unscored = !matches!(scored, Some(c) if !c.is_empty());
    if unscored && log.writer.is_none() {
        // The best score is the least load (the first instance with it wins ties); the
        // regret −chosen − (−least) is chosen − least, exactly, in f64.
        let least = instances
            .iter()
            .filter(|s| s.routable)
            .map(|s| s.effective_load())
            .min();
        if let Some(least) = least {
            // Instances are listed by index.
            let chosen_load = match instances.get(chosen as usize) {
                Some(s) if s.index == chosen => s.routable.then(|| s.effective_load()),
                _ => instances
                    .iter()
                    .find(|s| s.index == chosen && s.routable)
                    .map(|s| s.effective_load()),
            }
            .unwrap_or(least);
            let regret = record_regret(stats, -f64::from(least) - -f64::from(chosen_load));
            if stats.worst_k > 0 && regret > 0.0 {
                let best = instances
                    .iter()
                    .find(|s| s.routable && s.effective_load() == least)
                    .map_or(chosen, |s| s.index);
                stats.keep_if_worst(crate::metrics::WorstDecision {
                    time_us: now.as_us(),
                    request_id: id,
                    chosen,
                    best,
                    regret,
                });
            }
        }
        return;
    }
    let fallback: Vec<ScoredCandidate>;
    let cands: &[ScoredCandidate] = match scored {
        Some(c) if !c.is_empty() => c,
        _ => {
            fallback = instances
                .iter()
                .filter(|s| s.routable)
                .map(|s| ScoredCandidate {
                    instance: s.index,
                    score: -f64::from(s.effective_load()),
                    parts: Vec::new(),
                })
                .collect();
            &fallback
        }
    };
    let best = cands.iter().fold(None::<&ScoredCandidate>, |b, c| match b {
        Some(b) if b.score > c.score || (b.score == c.score && b.instance < c.instance) => Some(b),
        _ => Some(c),
    });
    let Some(best) = best else { return };
    let chosen_score = cands
        .iter()
        .find(|c| c.instance == chosen)
        .map_or(best.score, |c| c.score);
    let regret = record_regret(stats, best.score - chosen_score);
    if stats.worst_k > 0 && regret > 0.0 {
        stats.keep_if_worst(crate::metrics::WorstDecision {
            time_us: now.as_us(),
            request_id: id,
            chosen,
            best: best.instance,
            regret,
        });
    }
    if let Some(w) = log.writer.as_mut()
        && log.error.is_none()
    {
        let mut top: Vec<&ScoredCandidate> = cands.iter().collect();
        top.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(a.instance.cmp(&b.instance))
        });
        let list = top
            .iter()
            .take(log.top_k)
            .map(|c| {
                let parts: Vec<String> =
                    c.parts.iter().map(|(n, v)| format!("{n}={v:.4}")).collect();
                format!("{}:{:.4}[{}]", c.instance, c.score, parts.join(";"))
            })
            .collect::<Vec<_>>()
            .join("|");
        let row = [
            now.as_us().to_string(),
            id.to_string(),
            chosen.to_string(),
            format!("{chosen_score:.6}"),
            best.instance.to_string(),
            format!("{:.6}", best.score),
            format!("{regret:.6}"),
            list,
            "route".to_string(),
            String::new(),
        ];
        if let Err(e) = w.write_record(row) {
            log.error = Some(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy_ecs::system::RunSystemOnce;

    /// `admit_requests` alone on a bare world: two requests due, the second already gone.
    fn admit_with(policy: Box<dyn crate::policy::AdmissionPolicy>) -> (World, Entity) {
        let mut world = World::new();
        world.init_resource::<RouteDue>();
        world.init_resource::<RecordDue>();
        world.init_resource::<Rejections>();
        world.init_resource::<ClusterView>();
        world.insert_resource(SimClock {
            now: SimTime(250),
            ..Default::default()
        });
        world.insert_resource(Active::<family::Admission>(policy));
        let r = world
            .spawn((crate::policy::any_request(), Lifecycle::default()))
            .id();
        let gone = world.spawn_empty().id();
        world.despawn(gone);
        world.insert_resource(AdmitDue(vec![r, gone]));
        world.run_system_once(admit_requests).unwrap();
        assert!(
            world.resource::<AdmitDue>().0.is_empty(),
            "its list is emptied"
        );
        (world, r)
    }

    #[test]
    fn admitted_requests_are_stamped_and_go_on_to_routing() {
        let (world, r) = admit_with(Box::new(crate::policy::AlwaysAdmit));
        assert_eq!(world.resource::<RouteDue>().0, [r]);
        assert!(world.resource::<RecordDue>().0.is_empty());
        assert_eq!(
            world.get::<Lifecycle>(r).unwrap().admitted,
            Some(SimTime(250))
        );
    }

    #[test]
    fn rejected_requests_are_counted_by_reason_and_recorded() {
        let (world, r) = admit_with(Box::new(crate::policy::RejectAll));
        assert!(world.resource::<RouteDue>().0.is_empty());
        let ended = &world.resource::<RecordDue>().0;
        assert_eq!(ended.len(), 1);
        assert_eq!((ended[0].entity, ended[0].state), (r, FinalState::Rejected));
        let total: u64 = world.resource::<Rejections>().0.values().sum();
        assert_eq!(total, 1);
        assert_eq!(world.get::<Lifecycle>(r).unwrap().admitted, None);
    }
}
