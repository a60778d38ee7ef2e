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
    AdmitDue, ClusterView, EnqueueDue, Event, EventQueue, GateDue, RecordDue, RouteDue, ScaleDue,
    SimClock,
};
use crate::instance::InstanceIndex;
use crate::labels::Labels;
use crate::latency::{Latency, TokenizerWindows};
use crate::metrics::SummaryAppExt;
use crate::policy::{Active, Admission, RouterView, family};
use crate::request::{AssignedTo, FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError, build_policy};
use crate::time::{SimDuration, SimTime};

pub use crate::decisions::{DECISION_COLUMNS, DecisionLog, RoutingStats};
use crate::decisions::{finish_decisions, open_decisions, trace_decision};
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
        store: Default::default(),
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
/// routers' views. Owns [`RouterSnapshots`], [`RoutingStats`], [`DecisionLog`], [`Parked`],
/// [`TokenizerWindows`] and `policy::CachedBlocks` (the caches as the instances' KV events tell them).
pub struct RoutingPlugin;

impl bevy_app::Plugin for RoutingPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        app.init_resource::<RouterSnapshots>()
            .init_resource::<RoutingStats>()
            .init_resource::<DecisionLog>()
            .init_resource::<Parked>()
            .init_resource::<TokenizerWindows>()
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
    mut gate: ResMut<GateDue>,
    mut record: ResMut<RecordDue>,
    clock: Res<SimClock>,
    view: Res<ClusterView>,
    mut policy: ResMut<Active<family::Admission>>,
    mut rejections: ResMut<Rejections>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
) {
    let mut work = std::mem::take(&mut admit.0);
    // With flow control, admitted requests wait in the gateway's bands first.
    let next = if gate.on {
        &mut gate.admitted
    } else {
        &mut route.0
    };
    for &entity in &work {
        let Ok((spec, mut life)) = requests.get_mut(entity) else {
            continue; // timed out before admission
        };
        match admit_one(&mut policy, spec, &mut life, clock.now, &view) {
            Ok(()) => next.push(entity),
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

/// What sending a request on from the router takes: the instances' latency models (the
/// delay to their queues), the work lists and the event queue it fills, and the
/// rejection counts. Used by the Route stage and by the gateway's (flow control).
#[derive(SystemParam)]
pub struct Dispatch<'w, 's> {
    commands: Commands<'w, 's>,
    index: Res<'w, InstanceIndex>,
    queue: ResMut<'w, EventQueue>,
    enqueue: ResMut<'w, EnqueueDue>,
    scale: ResMut<'w, ScaleDue>,
    record: ResMut<'w, RecordDue>,
    rejections: ResMut<'w, Rejections>,
    latencies: Query<'w, 's, (&'static Latency, &'static crate::instance::Limits)>,
}

impl Dispatch<'_, '_> {
    /// Routes one request with `router` and sends it on: to its instance's queue (after
    /// the routing delay, the latency model's queueing delay and the API server's work),
    /// parked for a cold start, or rejected when nothing is routable.
    pub fn route(
        &mut self,
        router: &mut Router,
        entity: Entity,
        spec: &RequestSpec,
        life: &mut Lifecycle,
        now: SimTime,
        view: &mut ClusterView,
    ) {
        match router.route(entity, spec, life, now, view, &mut self.scale) {
            Routed::To(i) => {
                self.commands.entity(entity).insert(AssignedTo(i));
                let (latency, limits) = self
                    .latencies
                    .get(self.index.0[i as usize])
                    .expect("instance entity exists for the whole run");
                let delay = router.delay(i, now, spec, latency, &limits.serving);
                send_to(
                    entity,
                    i,
                    delay,
                    now,
                    &mut self.enqueue.requests,
                    &mut self.queue,
                );
            }
            Routed::Parked => {}
            Routed::Unroutable => reject(
                entity,
                spec,
                life,
                "no_routable_instance",
                &mut self.rejections,
                &mut self.record,
            ),
        }
    }

    /// Sheds a request that will not be routed (a reason of the gateway's): counted by
    /// reason and handed to Record as rejected.
    pub fn shed(
        &mut self,
        entity: Entity,
        spec: &RequestSpec,
        life: &Lifecycle,
        reason: &'static str,
    ) {
        reject(
            entity,
            spec,
            life,
            reason,
            &mut self.rejections,
            &mut self.record,
        );
    }

    /// Schedules an event (the gateway's wake-ups).
    pub fn push_event(&mut self, at: SimTime, event: Event) {
        self.queue.push(at, event);
    }

    /// The client timeouts firing now (the Enqueue stage records them).
    pub fn timeouts(&self) -> &[Entity] {
        &self.enqueue.timeouts
    }
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

impl RouterSnapshots {
    /// What a router deciding at `now` sees of the `live` instances, without refreshing the
    /// snapshots: the same signals [`Router::route`] reads (a refresh due now gives the live
    /// values, which is what the refresh would copy), decode instances not routable under
    /// P/D disaggregation. The gateway's saturation detector reads these.
    pub fn sees<'a>(
        &'a self,
        now: SimTime,
        live: &'a [crate::policy::InstanceSnapshot],
        disagg: &'a crate::disagg::Disagg,
    ) -> impl Iterator<Item = crate::policy::InstanceSnapshot> + 'a {
        let fresh = self.interval.as_us() == 0 || now.since(self.last_refresh) >= self.interval;
        live.iter().enumerate().map(move |(k, l)| {
            let mut s = if fresh {
                *l
            } else {
                crate::policy::InstanceSnapshot {
                    in_flight: l.in_flight,
                    routable: l.routable,
                    ..self.stale[k]
                }
            };
            s.routable &=
                !(disagg.enabled && disagg.role(s.index) == crate::scenario::Role::Decode);
            s
        })
    }
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
    tokenizers: ResMut<'w, TokenizerWindows>,
    seen: Local<'s, Vec<crate::policy::InstanceSnapshot>>,
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
        let instances = signals(
            &mut self.snapshots,
            &mut self.seen,
            &self.disagg,
            now,
            &view.instances,
        );
        let rv = RouterView {
            instances,
            probe: &*self.cached,
            block_size,
            adapters: &view.adapters,
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

    /// What the router sees of the instances at `now` (see [`RouterSnapshots::sees`]).
    pub fn sees<'a>(
        &'a self,
        now: SimTime,
        view: &'a ClusterView,
    ) -> impl Iterator<Item = crate::policy::InstanceSnapshot> + 'a {
        self.snapshots.sees(now, &view.instances, &self.disagg)
    }

    /// True when nothing routable parks a request for a cold start (some group autoscales)
    /// instead of rejecting it.
    pub fn parks(&self) -> bool {
        self.parked.enabled
    }

    /// The delay before a request routed at `now` to instance `i` with `latency` and
    /// `serving` path joins its engine's queue: the routing delay, the wait for the API
    /// server's tokenizer batch (the request reaches it when routed), the latency model's
    /// queueing delay and the API server's work on the request.
    pub fn delay(
        &mut self,
        i: u32,
        now: SimTime,
        spec: &RequestSpec,
        latency: &Latency,
        serving: &crate::latency::ServingPath,
    ) -> SimDuration {
        let tokenizer = if serving.tokenizer_window_us > 0.0 {
            self.tokenizer_wait(i, now + self.delays.routing, serving)
        } else {
            SimDuration::ZERO
        };
        self.delays.routing
            + tokenizer
            + latency.0.queueing_delay(spec.input_tokens)
            + serving.request_in(spec.input_tokens)
    }

    /// A request reaching instance `i`'s API server at `at` waits for its tokenizer batch
    /// (kept out of line: scenarios without a window only test the branch in [`Self::delay`]).
    #[inline(never)]
    fn tokenizer_wait(
        &mut self,
        i: u32,
        at: SimTime,
        serving: &crate::latency::ServingPath,
    ) -> SimDuration {
        self.tokenizers.wait(i, at, serving)
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

/// The signals a router sees of the `live` instances at `now` ([`RouterSnapshots::sees`]),
/// the snapshots refreshed first when a refresh is due: the live slice itself when they are
/// always fresh and nothing is masked, else a copy in `seen` (a scratch buffer).
fn signals<'a>(
    snapshots: &'a mut RouterSnapshots,
    seen: &'a mut Vec<crate::policy::InstanceSnapshot>,
    disagg: &crate::disagg::Disagg,
    now: SimTime,
    live: &'a [crate::policy::InstanceSnapshot],
) -> &'a [crate::policy::InstanceSnapshot] {
    if snapshots.interval.as_us() == 0 && !disagg.enabled {
        return live;
    }
    if snapshots.interval.as_us() > 0 && now.since(snapshots.last_refresh) >= snapshots.interval {
        snapshots.stale.clear();
        snapshots.stale.extend_from_slice(live);
        snapshots.last_refresh = now;
    }
    seen.clear();
    seen.extend(snapshots.sees(now, live, disagg));
    seen
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

/// Applies the routing policy and sends each request on its way to the chosen instance.
pub fn route_requests(
    mut route: ResMut<RouteDue>,
    clock: Res<SimClock>,
    mut view: ResMut<ClusterView>,
    mut router: Router,
    mut dispatch: Dispatch,
    mut fault: ResMut<crate::engine::SimFault>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
) {
    let now = clock.now;
    let mut work = std::mem::take(&mut route.0);
    for &entity in &work {
        let Ok((spec, mut life)) = requests.get_mut(entity) else {
            continue; // timed out before routing
        };
        dispatch.route(&mut router, entity, spec, &mut life, now, &mut view);
    }
    work.clear();
    route.0 = work;
    router.check_log(now, &mut fault);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy_ecs::system::RunSystemOnce;

    /// `admit_requests` alone on a bare world: two requests due, the second already gone.
    fn admit_with(policy: Box<dyn crate::policy::AdmissionPolicy>) -> (World, Entity) {
        admit_gated(policy, false)
    }

    /// [`admit_with`], with flow control on or off.
    fn admit_gated(
        policy: Box<dyn crate::policy::AdmissionPolicy>,
        gated: bool,
    ) -> (World, Entity) {
        let mut world = World::new();
        world.insert_resource(GateDue {
            on: gated,
            ..Default::default()
        });
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
    fn with_flow_control_admitted_requests_go_to_the_gateway() {
        let (world, r) = admit_gated(Box::new(crate::policy::AlwaysAdmit), true);
        assert!(world.resource::<RouteDue>().0.is_empty());
        assert_eq!(world.resource::<GateDue>().admitted, [r]);
        let (world, _) = admit_gated(Box::new(crate::policy::RejectAll), true);
        assert!(world.resource::<GateDue>().admitted.is_empty());
        assert_eq!(world.resource::<RecordDue>().0.len(), 1);
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
