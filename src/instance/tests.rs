//! Bare-world tests of the instance's types and pipeline systems.

use super::pipeline::retire_steps;
use super::*;
use crate::engine::SimClock;
use crate::request::{FinalState, FinishedRequest, Lifecycle};
use crate::time::SimTime;

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
        _: &schedulers::Ordering<'_>,
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
