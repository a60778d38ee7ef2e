//! Fast ticks (issue 10): [`SimStepFast`]'s one system, [`fast_ticks`] — the instance
//! pipeline and, on ticks of new arrivals, the control plane — which goes on through the
//! following ticks by itself in one system run.
//!
//! It sits above the stages it runs (`instance`, `workload`, `cluster`, `metrics`): none of
//! them imports it. The stages' systems in [`SimStep`](crate::engine::SimStep) call the same
//! per-request and per-instance functions, so both schedules give the same results
//! (`tests/it/ticks.rs` compares them byte for byte).

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;

use crate::cluster::{Routed, Router};
use crate::engine::{
    ClusterDelays, ClusterView, Event, EventQueue, FastLoop, Injected, MAX_SIM_TIME, SimClock,
    SimFault, SimStepFast, SimSystems, fast_events,
};
use crate::engine::{InstanceDue, RecordDue};
use crate::instance::pipeline::{enqueue, retire_one};
use crate::instance::schedulers::Ordering;
use crate::instance::{InTransit, InstanceIndex, Instances, PipelineWork, QueuePolicies};
use crate::policy::{Active, family};
use crate::request::{AssignedTo, Lifecycle, RequestSpec};
use crate::time::SimTime;
use crate::workload::Workload;

/// Adds [`fast_ticks`] to [`SimStepFast`] (in [`SimSystems::Advance`]). Without it a run has
/// no fast ticks: every tick runs [`SimStep`](crate::engine::SimStep).
pub struct FastTicksPlugin;

impl Plugin for FastTicksPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(SimStepFast, fast_ticks.in_set(SimSystems::Advance));
    }
}

/// The built-in SimStep systems that SimStepFast may stand in for without running them
/// itself: those of stages that have no work on its ticks (Enqueue's timeouts, Autoscale),
/// the four instance systems it runs as one, and the control plane's (SimStepFast runs them
/// too, on ticks of arrivals).
fn covered_systems() -> Vec<std::any::TypeId> {
    fn id<M>(s: impl IntoSystem<(), (), M>) -> std::any::TypeId {
        IntoSystem::into_system(s).system_type()
    }
    use crate::instance::{batch, step};
    vec![
        id(crate::workload::spawn_arrivals),
        id(crate::cluster::admit_requests),
        id(crate::cluster::route_requests),
        id(crate::instance::enqueue_requests),
        id(crate::instance::expire_requests),
        id(crate::autoscale::evaluate_scaling),
        id(crate::instance::retire_steps),
        id(batch::form_batches),
        id(step::execute_steps),
        id(step::complete_steps),
    ]
}

/// Takes the built [`SimStepFast`] schedule out of `app` when it may stand in for
/// `schedule`: when every system of SimStep is one SimStepFast runs or covers (not a user's,
/// nor P/D's Transfer stage, which must run between a step's end and the next batch). Sets
/// [`FastLoop`]: fast ticks may run on by themselves unless every tick must be seen
/// (invariant checks, KV events), and ticks of arrivals run SimStepFast unless a routed
/// request may have to wait for a cold start.
pub fn take_fast_schedule(app: &mut App, schedule: &Schedule) -> Option<Schedule> {
    use bevy_ecs::schedule::Schedules;
    let fast = app
        .world_mut()
        .resource_mut::<Schedules>()
        .remove(SimStepFast)
        .and_then(|mut fast| {
            fast.initialize(app.world_mut()).ok()?;
            // Without the fast-tick system (its plugin left out) it would run nothing.
            let has_pipeline = fast.systems().is_ok_and(|mut systems| {
                let id = IntoSystem::into_system(fast_ticks).system_type();
                systems.any(|(_, s)| s.system_type() == id)
            });
            (has_pipeline && crate::engine::fast_ticks_allowed(schedule, &fast, &covered_systems()))
                .then_some(fast)
        });
    let world = app.world();
    let check = world.resource::<crate::invariants::CheckInvariants>().0;
    let kv_events = world
        .get_resource::<crate::kv::KvEvents>()
        .is_some_and(|k| k.0);
    let parking = world
        .get_resource::<crate::engine::Parked>()
        .is_some_and(|p| p.enabled);
    let on = fast.is_some() && !check && !kv_events;
    let mut fast_loop = app.world_mut().resource_mut::<FastLoop>();
    fast_loop.on = on;
    fast_loop.arrivals = on && !parking;
    fast
}

/// What the control plane's stages (Arrive, Admit, Route) need on a tick of arrivals.
#[derive(SystemParam)]
pub struct ControlPlane<'w, 's> {
    workload: ResMut<'w, Workload>,
    injected: ResMut<'w, Injected>,
    delays: Res<'w, ClusterDelays>,
    admission: ResMut<'w, Active<family::Admission>>,
    router: Router<'w, 's>,
    scale: ResMut<'w, crate::engine::ScaleDue>,
}

/// A request that arrived during this system run: its entity is reserved, its components
/// are inserted when it is settled (it joins a queue or is turned away) or when the run ends,
/// so that the Enqueue stage can still read and stamp it within the run.
struct Pending {
    entity: Entity,
    spec: RequestSpec,
    life: Lifecycle,
    assigned: Option<u32>,
}

impl Pending {
    /// Inserts its components into its (reserved) entity.
    fn insert(self, commands: &mut Commands) {
        let mut e = commands.entity(self.entity);
        match self.assigned {
            Some(i) => e.insert((self.spec, self.life, AssignedTo(i))),
            None => e.insert((self.spec, self.life)),
        };
    }
}

/// Requests in transit: the world's, and those that arrived during this run.
struct WithPending<'a, 'w, 's> {
    requests: &'a mut Query<'w, 's, (&'static RequestSpec, &'static mut Lifecycle)>,
    pending: &'a mut [Pending],
}

impl InTransit for WithPending<'_, '_, '_> {
    fn request(&mut self, entity: Entity) -> Option<(&RequestSpec, &mut Lifecycle)> {
        // A pending request is not in the world yet.
        if let Some(p) = self.pending.iter_mut().find(|p| p.entity == entity) {
            return Some((&p.spec, &mut p.life));
        }
        self.requests.request(entity)
    }
}

/// Inserts the components of the pending requests among `entities` (in `pending`'s order).
fn settle(pending: &mut Vec<Pending>, entities: &[(Entity, u32)], commands: &mut Commands) {
    let mut k = 0;
    while k < pending.len() {
        if entities.iter().any(|&(e, _)| e == pending[k].entity) {
            pending.remove(k).insert(commands);
        } else {
            k += 1;
        }
    }
}

/// Scratch lists kept across runs (no allocation per tick).
#[derive(Default)]
pub struct Scratch {
    items: Vec<crate::latency::StepItem>,
    enqueues: Vec<(Entity, u32)>,
    finished: Vec<u32>,
    sources: Vec<u32>,
    admit: Vec<Entity>,
    route: Vec<Entity>,
    pending: Vec<Pending>,
}

/// The instance systems in one ([`retire_steps`](crate::instance::retire_steps),
/// [`enqueue_requests`](crate::instance::enqueue_requests),
/// [`form_batches`](crate::instance::batch::form_batches),
/// [`execute_steps`](crate::instance::step::execute_steps),
/// [`complete_steps`](crate::instance::step::complete_steps), in that order): one system
/// run and one fetch of each resource instead of five, and one lookup of an instance's
/// components per tick.
///
/// A fast tick holds step ends and enqueues only, or new arrivals only (see
/// [`crate::engine::fast_tick`]; the Arrive, Admit and Route systems of [`SimStepFast`] have
/// run on the latter). With [`FastLoop`] on, this system then runs the following ticks
/// itself, as the driver would, while each holds such events only and nothing else has to
/// see it: no fault, no time-series sample due, within the horizon, not a 1,024th tick (the
/// driver's housekeeping) and not past [`FastLoop::check_at`]. On a tick of arrivals it
/// admits and routes them as the control plane's systems would ([`Workload::emit`],
/// [`crate::cluster::admit_one`], [`Router::route`]); their entities are reserved and get
/// their components when they are settled (see [`Pending`]). Requests that finish are
/// recorded as the Record stage would (rows, aggregates, despawn), unless the workload must
/// hear of them (sessions, held batches). The first tick that does not qualify has its
/// events put back, in order, for the driver.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn fast_ticks(
    mut due: PipelineWork,
    mut clock: ResMut<SimClock>,
    index: Res<InstanceIndex>,
    policies: QueuePolicies,
    mut queue: ResMut<EventQueue>,
    mut fault: ResMut<SimFault>,
    mut view: ResMut<ClusterView>,
    mut agg: ResMut<crate::metrics::Aggregates>,
    fast: Res<FastLoop>,
    mut recorder: crate::metrics::Recorder,
    mut instances: Instances,
    mut control: ControlPlane,
    mut scratch: Local<Scratch>,
) {
    let PipelineWork {
        instances: ref mut listed,
        ref mut record,
        ref mut popped,
        ref mut routed,
        ref mut requests,
        ref mut rejections,
    } = due;
    let (listed, record, popped) = (&mut **listed, &mut **record, &mut **popped);
    // Nothing reads change ticks: one plain borrow each instead of marking them on every
    // access.
    let (clock, queue, fault, view, agg) = (
        clock.bypass_change_detection(),
        queue.bypass_change_detection(),
        fault.bypass_change_detection(),
        view.bypass_change_detection(),
        agg.bypass_change_detection(),
    );
    let Scratch {
        items,
        enqueues,
        finished,
        sources,
        admit,
        route,
        pending,
    } = &mut *scratch;
    // A tick of step ends and enqueues is not dispatched (one of arrivals was: the requests
    // routed with no delay join their queues here).
    sort_fast_events(&mut popped.0, listed, enqueues);
    enqueues.append(&mut routed.requests);
    let ordering = policies.ordering();
    loop {
        let now = clock.now;
        if !sources.is_empty() {
            // Arrive, Admit, Route (as `spawn_arrivals`, `admit_requests`, `route_requests`).
            let c = &mut control;
            for &source in sources.iter() {
                let Some((spec, timeout)) = c.workload.emit(source, &mut c.injected) else {
                    continue;
                };
                let entity = recorder.commands().spawn_empty().id();
                crate::workload::send_on(entity, now, timeout, now, admit, &mut *queue, &c.delays);
                pending.push(Pending {
                    entity,
                    spec,
                    life: Lifecycle {
                        arrival: now,
                        ..Default::default()
                    },
                    assigned: None,
                });
                c.workload
                    .schedule_next(source, &c.injected, &mut *queue, &mut *fault);
            }
            sources.clear();
            for entity in admit.drain(..) {
                let k = position(pending, entity);
                let p = &mut pending[k];
                match crate::cluster::admit_one(&mut c.admission, &p.spec, &mut p.life, now, view) {
                    Ok(()) => route.push(entity),
                    Err(reason) => {
                        crate::cluster::reject(
                            entity, &p.spec, &p.life, reason, rejections, record,
                        );
                        pending.remove(k).insert(recorder.commands());
                    }
                }
            }
            for entity in route.drain(..) {
                let k = position(pending, entity);
                let p = &mut pending[k];
                match c
                    .router
                    .route(entity, &p.spec, &mut p.life, now, &mut *view, &mut c.scale)
                {
                    Routed::To(i) => {
                        p.assigned = Some(i);
                        let parts = instances
                            .get(index.0[i as usize])
                            .expect("instance entity exists for the whole run");
                        let delay = c.router.delay(i, now, &p.spec, parts.2, &parts.3.serving);
                        crate::cluster::send_to(entity, i, delay, now, enqueues, &mut *queue);
                    }
                    Routed::Parked => {
                        unreachable!("ticks of arrivals take SimStep when requests may park")
                    }
                    Routed::Unroutable => {
                        crate::cluster::reject(
                            entity,
                            &p.spec,
                            &p.life,
                            "no_routable_instance",
                            rejections,
                            record,
                        );
                        pending.remove(k).insert(recorder.commands());
                    }
                }
            }
            c.router.check_log(now, &mut *fault);
        }
        std::mem::swap(finished, &mut listed.step_ends);
        finished.sort_unstable();
        finished.dedup();
        let mut step = |i: u32,
                        retire: Option<(
            &mut crate::engine::InstanceDue,
            &mut crate::engine::RecordDue,
        )>,
                        instances: &mut Instances,
                        view: &mut ClusterView| {
            instance_tick(
                i,
                retire,
                now,
                &index,
                &ordering,
                fast.on,
                instances,
                &mut *queue,
                &mut *items,
                view,
                &mut *agg,
                &mut *fault,
            )
        };
        if enqueues.is_empty() {
            // Step ends only: each instance also retires its step first, with the same lookup.
            for &i in finished.iter() {
                step(
                    i,
                    Some((&mut *listed, &mut *record)),
                    &mut instances,
                    &mut *view,
                );
            }
        } else {
            // Stage by stage: every step end retires, then the requests join their queues,
            // then each listed instance forms its batch.
            for &i in finished.iter() {
                let mut sched = instances
                    .get_mut(index.0[i as usize])
                    .expect("instance entity exists for the whole run")
                    .0;
                retire_one(listed, record, i, now, &mut sched);
            }
            enqueue(
                enqueues,
                now,
                record,
                listed,
                &index,
                &mut *view,
                &mut WithPending { requests, pending },
                &mut instances,
                rejections,
            );
            // Stamped enqueued (or turned away): their components are final.
            settle(pending, enqueues, recorder.commands());
            enqueues.clear();
            let mut batch = std::mem::take(&mut listed.batch);
            batch.sort_unstable();
            for &i in &batch {
                step(i, None, &mut instances, &mut *view);
            }
            batch.clear();
            listed.batch = batch;
        }
        finished.clear();
        if !fast.on || fault.0.is_some() {
            break;
        }
        if !record.0.is_empty() {
            // Record them here, as the Record stage would right after this tick; requests
            // whose end the workload must hear about (sessions, held batches) are left to it.
            if !recorder.records_alone(&record.0) {
                break;
            }
            recorder.record(
                record,
                clock.now,
                false,
                policies.slo(),
                &mut *agg,
                &mut *fault,
            );
            if fault.0.is_some() {
                break;
            }
        }
        // The next tick, if it holds step ends and enqueues only, or arrivals only.
        let Some(t) = queue.peek_time() else { break };
        if t > fast.until
            || t > clock.horizon
            || t > MAX_SIM_TIME
            || (clock.ticks + 1).is_multiple_of(1024)
            || clock.ticks >= fast.check_at
        {
            break;
        }
        let mut buffer = std::mem::take(&mut popped.0);
        while let Some(event) = queue.pop_at(t) {
            buffer.push(event);
        }
        if fast_events(&buffer) {
            sort_fast_events(&mut buffer, listed, enqueues);
        } else if fast.arrivals && buffer.iter().all(|e| matches!(e, Event::Arrival { .. })) {
            sources.extend(buffer.drain(..).map(|e| match e {
                Event::Arrival { source } => source,
                _ => unreachable!(),
            }));
        } else {
            // Back for the driver, in the order they came out (same-time events keep their
            // relative order; nothing else is at this time).
            for e in buffer.drain(..) {
                queue.push(t, e);
            }
            popped.0 = buffer;
            break;
        }
        popped.0 = buffer;
        clock.now = t;
        clock.ticks += 1;
    }
    // Requests still on their way get their components now (the run ends: others may look).
    for p in pending.drain(..) {
        p.insert(recorder.commands());
    }
}

/// Index of `entity` among the pending requests (it arrived in this run).
fn position(pending: &[Pending], entity: Entity) -> usize {
    pending
        .iter()
        .position(|p| p.entity == entity)
        .expect("a request admitted or routed in a fast run arrived in it")
}

/// One instance's part of a fast tick, with one lookup of its components: with `retire`,
/// its step ended now (see [`retire_one`]); then, if it is listed for batch formation, it
/// forms, prices and applies its batch at once. No stage of one instance sees another's:
/// the event queue and Record get the same entries in the same order as stage by stage,
/// instances in index order.
#[expect(
    clippy::too_many_arguments,
    reason = "the instance and the tick's shared state"
)]
fn instance_tick(
    i: u32,
    retire: Option<(&mut InstanceDue, &mut RecordDue)>,
    now: SimTime,
    index: &InstanceIndex,
    ordering: &Ordering<'_>,
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
    if crate::instance::batch::form_one(sched, kv, limits, batcher, now, ordering, lockstep)
        && crate::instance::step::execute_one(
            i, sched, kv, latency, limits, now, queue, items, fault,
        )
    {
        crate::instance::step::complete_one(i, sched, kv, latency, limits, view, agg, fault);
    }
}

/// A fast tick's events to their lists: step ends to `listed.step_ends`, enqueues (in order)
/// to `enqueues`.
fn sort_fast_events(
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

#[cfg(test)]
mod tests {
    //! Bare-world tests: one instance's fast tick against the four stage systems it stands in
    //! for, on the instance pipeline's two-instance world.

    use bevy_ecs::prelude::*;
    use bevy_ecs::system::RunSystemOnce;

    use super::{instance_tick, sort_fast_events};
    use crate::engine::{ClusterView, Event, EventQueue, InstanceDue, RecordDue, SimClock};
    use crate::instance::schedulers::QueuePolicies;
    use crate::instance::{InstanceIndex, Instances, Scheduler, batch, retire_steps, step};
    use crate::kv::KvCache;
    use crate::metrics::Aggregates;
    use crate::time::SimTime;

    /// Everything a tick of instance 0 changes, as text.
    fn state(world: &World) -> String {
        let e = world.resource::<InstanceIndex>().0[0];
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            world.get::<Scheduler>(e).unwrap(),
            world.get::<KvCache>(e).unwrap(),
            world.resource::<EventQueue>(),
            world.resource::<ClusterView>(),
            world.resource::<Aggregates>(),
            world.resource::<RecordDue>().0.len(),
        )
    }

    /// A tick of instance 0 by the stage systems: retire (when its step ends now), form,
    /// execute, complete.
    fn staged(world: &mut World, retire: bool) {
        if retire {
            world.resource_mut::<InstanceDue>().step_ends.push(0);
            world.run_system_once(retire_steps).unwrap();
        } else {
            world.resource_mut::<InstanceDue>().batch.push(0);
        }
        world.run_system_once(batch::form_batches).unwrap();
        world.run_system_once(step::execute_steps).unwrap();
        world.run_system_once(step::complete_steps).unwrap();
    }

    /// The same tick by the fast path's one call.
    fn fast(world: &mut World, retire: bool) {
        world
            .run_system_once(
                move |mut due: ResMut<InstanceDue>,
                      mut record: ResMut<RecordDue>,
                      clock: Res<SimClock>,
                      index: Res<InstanceIndex>,
                      policies: QueuePolicies,
                      mut instances: Instances,
                      mut queue: ResMut<EventQueue>,
                      mut view: ResMut<ClusterView>,
                      mut agg: ResMut<Aggregates>,
                      mut fault: ResMut<crate::engine::SimFault>| {
                    let mut items = Vec::new();
                    instance_tick(
                        0,
                        retire.then_some((&mut *due, &mut *record)),
                        clock.now,
                        &index,
                        &policies.ordering(),
                        false,
                        &mut instances,
                        &mut queue,
                        &mut items,
                        &mut view,
                        &mut agg,
                        &mut fault,
                    );
                },
            )
            .unwrap();
    }

    #[test]
    fn an_instances_fast_tick_leaves_what_the_four_stage_systems_leave() {
        let worlds = || {
            let mut w = crate::instance::tests::pipeline_world([3, 0], SimTime(100));
            w.init_resource::<RecordDue>();
            w
        };
        let (mut a, mut b) = (worlds(), worlds());
        // A prefill step of three 10-token prompts: 1,000 + 30 × 10 = 1,300 µs.
        staged(&mut a, false);
        fast(&mut b, false);
        assert_eq!(state(&a), state(&b));
        let e = a.resource::<InstanceIndex>().0[0];
        assert_eq!(
            a.get::<Scheduler>(e).unwrap().step_end,
            Some(SimTime(1_400))
        );
        // At its end, the next: three decodes, 1,000 + 3 × 100 = 1,300 µs more.
        for w in [&mut a, &mut b] {
            w.resource_mut::<SimClock>().now = SimTime(1_400);
            let mut queue = w.resource_mut::<EventQueue>();
            assert!(queue.pop_at(SimTime(1_400)).is_some());
        }
        staged(&mut a, true);
        fast(&mut b, true);
        assert_eq!(state(&a), state(&b));
        assert_eq!(
            a.get::<Scheduler>(e).unwrap().step_end,
            Some(SimTime(2_700))
        );
    }

    #[test]
    fn a_fast_ticks_events_go_to_their_lists_in_order() {
        let (r1, r2) = (
            Entity::from_raw_u32(1).unwrap(),
            Entity::from_raw_u32(2).unwrap(),
        );
        let mut events = vec![
            Event::Enqueue {
                request: r2,
                instance: 1,
            },
            Event::StepFinished { instance: 3 },
            Event::Enqueue {
                request: r1,
                instance: 0,
            },
            Event::StepFinished { instance: 0 },
        ];
        let mut listed = InstanceDue::default();
        let mut enqueues = Vec::new();
        sort_fast_events(&mut events, &mut listed, &mut enqueues);
        assert!(events.is_empty());
        assert_eq!(listed.step_ends, vec![3, 0]);
        assert_eq!(enqueues, vec![(r2, 1), (r1, 0)]);
    }
}
