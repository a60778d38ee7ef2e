//! Bare-world tests: `advance_phases` on a world of its own (no app, no scenario).

use bevy_ecs::prelude::*;
use bevy_ecs::system::RunSystemOnce;

use super::{Autoscaler, GroupScaling, Phase, Power, Timing, advance_phases};
use crate::engine::{ClusterView, Event, EventQueue, Parked, RouteDue, ScaleDue, SimClock};
use crate::instance::{Instance, InstanceIndex, Scheduler, snapshot};
use crate::kv::KvRecipe;
use crate::time::{SimDuration, SimTime};

/// One autoscaled group of two instances (provisioning 1 ms, loading 3 ms, no warm-up):
/// instance 0 in `phase` until `phase_end`, instance 1 serving; one request parked; the
/// clock at `now`.
fn world(phase: Phase, phase_end: SimTime, now: SimTime) -> World {
    let mut world = World::new();
    world.init_resource::<ScaleDue>();
    world.init_resource::<RouteDue>();
    world.init_resource::<EventQueue>();
    world.insert_resource(SimClock {
        now,
        ..Default::default()
    });
    let parked = world.spawn_empty().id();
    world.insert_resource(Parked {
        enabled: true,
        requests: vec![parked],
    });
    let recipe = KvRecipe {
        blocks: 64,
        block_size: 16,
        cpu: None,
        nvme: None,
        store: None,
        store_net: None,
        layout: None,
    };
    let mut index = Vec::new();
    let mut view = ClusterView::default();
    for (i, (phase, end)) in [(phase, Some(phase_end)), (Phase::Serving, None)]
        .into_iter()
        .enumerate()
    {
        let sched = Scheduler {
            unroutable: phase != Phase::Serving,
            ..Default::default()
        };
        let kv = recipe.build(i as u32);
        view.instances.push(snapshot(i as u32, &sched, &kv, 0));
        let power = Power {
            phase,
            phase_end: end,
            on_since: Some(SimTime::ZERO),
            kv: recipe.clone(),
            weights: None,
        };
        let instance = Instance {
            index: i as u32,
            group: 0,
        };
        index.push(world.spawn((power, sched, kv, instance)).id());
    }
    world.insert_resource(view);
    world.insert_resource(InstanceIndex(index));
    let ms = SimDuration::from_us;
    world.insert_resource(Autoscaler {
        groups: vec![GroupScaling {
            name: "g".into(),
            timing: Some(Timing {
                min: 0,
                max: 2,
                interval: None,
                provision: ms(1_000),
                load: ms(3_000),
                warmup: SimDuration::ZERO,
                warmup_speed: 1.0,
                routable_during_warmup: false,
                up_cooldown: SimDuration::ZERO,
                down_cooldown: SimDuration::ZERO,
            }),
            instances: vec![0, 1],
            gpus_per_instance: 1,
            on: 2,
            ..Default::default()
        }],
        active: true,
        ..Default::default()
    });
    world
}

fn phase_of(world: &World, i: usize) -> (Phase, Option<SimTime>, bool) {
    let e = world.resource::<InstanceIndex>().0[i];
    let power = world.get::<Power>(e).unwrap();
    let sched = world.get::<Scheduler>(e).unwrap();
    (power.phase, power.phase_end, !sched.unroutable)
}

#[test]
fn provisioning_ends_in_loading_whose_end_is_scheduled() {
    let mut world = world(Phase::Provisioning, SimTime(5_000), SimTime(5_000));
    world.resource_mut::<ScaleDue>().phase_ends.push(0);
    world.run_system_once(advance_phases).unwrap();
    // Loading takes 3 ms from now: its end is on the queue, and the instance is not routable.
    assert_eq!(
        phase_of(&world, 0),
        (Phase::Loading, Some(SimTime(8_000)), false)
    );
    let mut queue = world.resource_mut::<EventQueue>();
    assert_eq!(queue.peek_time(), Some(SimTime(8_000)));
    assert!(matches!(
        queue.pop_at(SimTime(8_000)),
        Some(Event::PhaseEnd { instance: 0 })
    ));
    // The parked request waits for a routable instance; the list is emptied.
    assert!(world.resource::<RouteDue>().0.is_empty());
    assert_eq!(world.resource::<Parked>().requests.len(), 1);
    assert!(world.resource::<ScaleDue>().phase_ends.is_empty());
    assert!(!world.resource::<ClusterView>().instances[0].routable);
}

#[test]
fn loading_without_warm_up_ends_in_serving_and_routes_the_parked_requests() {
    let mut world = world(Phase::Loading, SimTime(8_000), SimTime(8_000));
    world.resource_mut::<ScaleDue>().phase_ends.push(0);
    world.run_system_once(advance_phases).unwrap();
    assert_eq!(phase_of(&world, 0), (Phase::Serving, None, true));
    assert!(world.resource::<ClusterView>().instances[0].routable);
    assert_eq!(world.resource::<RouteDue>().0.len(), 1);
    assert!(world.resource::<Parked>().requests.is_empty());
    assert_eq!(world.resource::<EventQueue>().peek_time(), None);
}

#[test]
fn a_phase_end_that_was_superseded_changes_nothing() {
    // The instance's current phase ends at 9 ms: an older end event at 5 ms is stale.
    let mut world = world(Phase::Loading, SimTime(9_000), SimTime(5_000));
    world.resource_mut::<ScaleDue>().phase_ends.push(0);
    world.run_system_once(advance_phases).unwrap();
    assert_eq!(
        phase_of(&world, 0),
        (Phase::Loading, Some(SimTime(9_000)), false)
    );
    assert!(world.resource::<RouteDue>().0.is_empty());
    assert_eq!(world.resource::<EventQueue>().peek_time(), None);
}

#[test]
fn unparking_hands_every_parked_request_to_routing() {
    let mut world = world(Phase::Serving, SimTime::ZERO, SimTime(1_000));
    world.resource_mut::<ScaleDue>().unpark = true;
    world.run_system_once(advance_phases).unwrap();
    assert_eq!(world.resource::<RouteDue>().0.len(), 1);
    assert!(world.resource::<Parked>().requests.is_empty());
    assert!(!world.resource::<ScaleDue>().unpark);
}
