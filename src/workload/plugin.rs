//! The workload plugin: its setup step and its systems (arrivals, sessions, held batches).

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;

use super::{Labels, Source, Workload};
use crate::engine::ClusterDelays;
use crate::engine::{AdmitDue, Event, EventQueue, Injected, SimClock, SimFault, WorkloadDue};
use crate::request::{FinalState, Lifecycle, RequestSpec};
use crate::time::{SimDuration, SimTime};

/// The workload: requests arrive ([`spawn_arrivals`] in [`SimSystems::Arrive`]; empties
/// `WorkloadDue::arrivals`, `session_turns`, `releases`, fills `AdmitDue`) and sessions and offline
/// batches go on when a request ends ([`continue_sessions`] then [`release_held`] in
/// [`SimSystems::Record`], after `metrics::record_finished`; empty `WorkloadDue::ended_turns` and
/// `ended_held`). Its setup step (`set_up_workload`) builds the [`Workload`] resource and primes the queue.
pub struct WorkloadPlugin;

/// The workload plugin's systems, each set inside its engine stage
/// ([`SimSystems`](crate::SimSystems)): order your own systems against these.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadSystems {
    /// `spawn_arrivals` (Arrive).
    Arrive,
    /// `continue_sessions`, then `release_held` (Record, after the requests are recorded).
    Continue,
}

impl bevy_app::Plugin for WorkloadPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        use crate::engine::{SimStep, SimStepFast, SimSystems};
        use crate::setup::SetupAppExt;
        app.add_setup(crate::setup::SetupStage::Workload, set_up_workload);
        for label in [SimStep.intern(), SimStepFast.intern()] {
            app.configure_sets(
                label,
                (
                    WorkloadSystems::Arrive.in_set(SimSystems::Arrive),
                    WorkloadSystems::Continue
                        .in_set(SimSystems::Record)
                        .after(crate::metrics::MetricsSystems::Record),
                ),
            );
            app.add_systems(
                label,
                (
                    spawn_arrivals.in_set(WorkloadSystems::Arrive),
                    (continue_sessions, release_held)
                        .chain()
                        .in_set(WorkloadSystems::Continue),
                ),
            );
        }
    }
}

/// `SetupStage::Workload`: the workload's sources (their tenants and classes join the
/// labels), their first arrivals on the event queue, and which hold offline batches back.
pub fn set_up_workload(
    app: &mut bevy_app::App,
    ctx: &crate::setup::SetupCtx<'_>,
) -> Result<(), crate::setup::SimError> {
    let world = app.world_mut();
    let mut labels = world.remove_resource::<Labels>().unwrap_or_default();
    let made = Workload::new(ctx.scenario, &mut labels, ctx.options.replay.clone());
    world.insert_resource(labels);
    let mut workload = made.map_err(crate::setup::SetupError::Workload)?;
    workload
        .prime(&mut world.resource_mut::<EventQueue>())
        .map_err(crate::setup::SetupError::Workload)?;
    world.insert_resource(crate::engine::HeldBatches(workload.held_sources()));
    world.insert_resource(workload);
    Ok(())
}

/// Spawns a request that arrived at `arrival`.
fn spawn(commands: &mut Commands, spec: RequestSpec, arrival: SimTime) -> Entity {
    commands
        .spawn((
            spec,
            Lifecycle {
                arrival,
                ..Default::default()
            },
        ))
        .id()
}

/// Where a request that arrived at `arrival` (now, or t = 0 for a held offline batch) goes
/// next: its client timeout is set, and it is up for admission now (`admit`) or after the
/// admission delay.
pub fn send_on(
    entity: Entity,
    arrival: SimTime,
    timeout: Option<SimDuration>,
    now: SimTime,
    admit: &mut Vec<Entity>,
    queue: &mut EventQueue,
    delays: &ClusterDelays,
) {
    if let Some(t) = timeout {
        queue.push((arrival + t).max(now), Event::Timeout { request: entity });
    }
    if delays.admission.as_us() == 0 {
        admit.push(entity);
    } else {
        queue.push(now + delays.admission, Event::Admit(entity));
    }
}

/// Spawns the requests arriving now (new arrivals and session turns) and schedules each
/// source's next arrival.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn spawn_arrivals(
    mut commands: Commands,
    mut due: ResMut<WorkloadDue>,
    mut admit: ResMut<AdmitDue>,
    clock: Res<SimClock>,
    mut workload: ResMut<Workload>,
    mut injected: ResMut<Injected>,
    mut queue: ResMut<EventQueue>,
    mut fault: ResMut<SimFault>,
    delays: Res<ClusterDelays>,
) {
    let now = clock.now;
    let due = &mut *due;
    let workload = &mut *workload;
    // New arrivals, then requests of held offline batches (they arrived with the batch, at
    // t = 0, and are not followed by another arrival of their own).
    let mut arrivals = std::mem::take(&mut due.arrivals);
    let mut releases = std::mem::take(&mut due.releases);
    let emitted = arrivals
        .iter()
        .map(|&s| (s, false))
        .chain(releases.iter().map(|&s| (s, true)));
    for (source, released) in emitted {
        let Some((spec, timeout)) = workload.emit(source, &mut injected) else {
            continue;
        };
        let arrival = if released { SimTime::ZERO } else { now };
        let entity = spawn(&mut commands, spec, arrival);
        send_on(
            entity,
            arrival,
            timeout,
            now,
            &mut admit.0,
            &mut queue,
            &delays,
        );
        if !released {
            workload.schedule_next(source, &injected, &mut queue, &mut fault);
        }
    }
    arrivals.clear();
    due.arrivals = arrivals;
    releases.clear();
    due.releases = releases;
    let mut turns = std::mem::take(&mut due.session_turns);
    for &sid in &turns {
        if !workload.under_limit(injected.0) {
            workload.sessions.remove(&sid);
            continue;
        }
        let id = injected.0;
        if let Some((spec, timeout)) = workload.make_turn(sid, id) {
            injected.0 += 1;
            let entity = spawn(&mut commands, spec, now);
            send_on(entity, now, timeout, now, &mut admit.0, &mut queue, &delays);
        }
    }
    turns.clear();
    due.session_turns = turns;
}

/// Schedules the next turn of every session whose turn ended this tick (closed loop:
/// completion + think time); ends sessions whose turn failed or that have no turns left.
pub fn continue_sessions(
    mut due: ResMut<WorkloadDue>,
    mut workload: ResMut<Workload>,
    mut queue: ResMut<EventQueue>,
) {
    let mut ended = std::mem::take(&mut due.ended_turns);
    for &(sid, state, completed) in &ended {
        let Some(s) = workload.sessions.get(&sid) else {
            continue;
        };
        let Source::Client(c) = &workload.sources[s.source as usize] else {
            continue;
        };
        let think = c
            .session
            .as_ref()
            .map_or(SimDuration::ZERO, |cfg| cfg.think);
        match (state, completed) {
            (FinalState::Completed, Some(t))
                if s.turns_left > 0 && t + think <= workload.stop_at =>
            {
                queue.push(t + think, Event::SessionTurn { session: sid });
            }
            _ => {
                workload.sessions.remove(&sid);
            }
        }
    }
    ended.clear();
    due.ended_turns = ended;
}

/// Lets one more request of a held offline batch in for each of the batch's requests that
/// finished this tick.
pub fn release_held(
    mut due: ResMut<WorkloadDue>,
    clock: Res<SimClock>,
    mut workload: ResMut<Workload>,
    mut queue: ResMut<EventQueue>,
) {
    let mut ended = std::mem::take(&mut due.ended_held);
    for &source in &ended {
        if let Source::Client(c) = &mut workload.sources[source as usize]
            && c.held > 0
        {
            c.held -= 1;
            queue.push(clock.now, Event::Release { source });
        }
    }
    ended.clear();
    due.ended_held = ended;
}

#[cfg(test)]
mod tests {
    use bevy_ecs::system::RunSystemOnce;

    use super::*;

    /// A bare world holding what `spawn_arrivals` reads: a workload of one client sending
    /// 100-token prompts for 8-token answers every 250 ms (`Constant` arrivals at 4/s), at
    /// most `limit` of them, primed (its first arrival on the queue).
    fn world(limit: u64) -> World {
        let catalog = crate::default_app()
            .world_mut()
            .remove_resource::<crate::catalog::Catalog>()
            .unwrap();
        let sc = crate::loader::parse(
            &format!(
                "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [10.0, 0.0, 0.0]))]),
                  workload: (num_requests: {limit}, clients: [(rate_per_s: 4.0, arrival: Constant,
                    input_tokens: Constant(100), output_tokens: Constant(8))]))"
            ),
            "bare.ron",
            &[],
            &catalog,
        )
        .unwrap();
        let mut labels = sc.labels();
        let mut workload = Workload::new(&sc, &mut labels, None).unwrap();
        let mut world = World::new();
        let mut queue = EventQueue::default();
        workload.prime(&mut queue).unwrap();
        world.insert_resource(queue);
        world.insert_resource(workload);
        world.init_resource::<WorkloadDue>();
        world.init_resource::<AdmitDue>();
        world.init_resource::<SimClock>();
        world.init_resource::<Injected>();
        world.init_resource::<SimFault>();
        world.init_resource::<ClusterDelays>();
        world
    }

    /// Pops the next event as the engine would and runs `spawn_arrivals` at its time.
    fn arrive(world: &mut World) -> SimTime {
        let t = world.resource::<EventQueue>().peek_time().unwrap();
        let event = world.resource_mut::<EventQueue>().pop_at(t).unwrap();
        let Event::Arrival { source } = event else {
            panic!("expected an arrival, got {event:?}");
        };
        world.resource_mut::<WorkloadDue>().arrivals.push(source);
        world.resource_mut::<SimClock>().now = t;
        world.run_system_once(spawn_arrivals).unwrap();
        t
    }

    #[test]
    fn an_arrival_spawns_its_request_hands_it_to_admission_and_schedules_the_next() {
        let mut world = world(3);
        // The first arrival comes one gap (250 ms) after t = 0.
        assert_eq!(arrive(&mut world), SimTime(250_000));
        assert_eq!(world.resource::<Injected>().0, 1);
        let admit = world.resource::<AdmitDue>().0.clone();
        assert_eq!(admit.len(), 1, "no admission delay: admitted this tick");
        let spec = world.get::<RequestSpec>(admit[0]).unwrap();
        assert_eq!(
            (spec.id, spec.input_tokens, spec.output_tokens),
            (0, 100, 8)
        );
        assert_eq!(
            world.get::<Lifecycle>(admit[0]).unwrap().arrival,
            SimTime(250_000)
        );
        assert!(world.resource::<WorkloadDue>().arrivals.is_empty());
        assert_eq!(
            world.resource::<EventQueue>().peek_time(),
            Some(SimTime(500_000))
        );
    }

    #[test]
    fn the_workload_stops_at_its_request_limit() {
        let mut world = world(2);
        arrive(&mut world);
        arrive(&mut world);
        assert_eq!(world.resource::<Injected>().0, 2);
        assert_eq!(
            world.resource::<EventQueue>().peek_time(),
            None,
            "no arrival after the last request"
        );
    }
}
