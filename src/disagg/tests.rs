//! Bare-world tests: `transfer_kv` on a world of its own (no app, no scenario), on the
//! instance pipeline's two-instance world with instance 0 prefill and instance 1 decode.

use bevy_ecs::prelude::*;
use bevy_ecs::system::RunSystemOnce;

use super::{ActiveDecodeRouting, Disagg, KvLink, transfer_kv};
use crate::engine::{
    ClusterView, Event, EventQueue, InstanceDue, RecordDue, SimClock, TransferDue,
};
use crate::instance::{Handoff, InstanceIndex, Scheduler};
use crate::kv::KvCache;
use crate::policy::{CachedBlocks, RoundRobin};
use crate::scenario::Role;
use crate::time::{SimDuration, SimTime};

/// Instance 0 (prefill: 100 B/µs, 50 µs latency) holds one request whose 10-token prompt
/// (one 16-token block) ran in a step that ended at 100 µs; instance 1 (decode: 50 B/µs,
/// 20 µs) is empty. A token's KV is 1,000 bytes.
fn world() -> World {
    let mut world = crate::instance::tests::pipeline_world([1, 0], SimTime(100));
    world.resource_mut::<InstanceDue>().batch.push(0);
    world
        .run_system_once(crate::instance::batch::form_batches)
        .unwrap();
    world.resource_mut::<InstanceDue>().execute.clear();
    let e0 = world.resource::<InstanceIndex>().0[0];
    let mut s0 = world.get_mut::<Scheduler>(e0).unwrap();
    let mut seq = s0.running.pop().unwrap();
    s0.plan.clear();
    seq.progress = 10;
    s0.handoff.push(Handoff {
        seq,
        ready: SimTime(100),
        last_step: SimDuration::from_us(1_100),
        proxy_answer: None,
    });
    let link = |role, bytes_per_us, latency| KvLink {
        role,
        bytes_per_us,
        latency: SimDuration::from_us(latency),
        bytes_per_token: 1_000.0,
        layers: 32,
    };
    world.insert_resource(Disagg {
        enabled: true,
        links: vec![link(Role::Prefill, 100.0, 50), link(Role::Decode, 50.0, 20)],
        send_free: vec![SimTime::ZERO; 2],
        recv_free: vec![SimTime::ZERO; 2],
        ..Default::default()
    });
    world.insert_resource(ActiveDecodeRouting(Box::new(RoundRobin::default())));
    world.insert_resource(CachedBlocks {
        block_size: 16,
        ..Default::default()
    });
    world.init_resource::<TransferDue>();
    world.init_resource::<RecordDue>();
    world.init_resource::<crate::decisions::DecisionLog>();
    world.init_resource::<crate::latency::TokenizerWindows>();
    world.resource_mut::<InstanceDue>().handoffs.push(0);
    world
}

fn parts(world: &World, i: usize) -> (&Scheduler, &KvCache) {
    let e = world.resource::<InstanceIndex>().0[i];
    (
        world.get::<Scheduler>(e).unwrap(),
        world.get::<KvCache>(e).unwrap(),
    )
}

#[test]
fn a_hand_off_reserves_room_on_the_decode_instance_and_sends_at_the_slower_ends_rate() {
    let mut world = world();
    world.run_system_once(transfer_kv).unwrap();
    // 1 block × 16 tokens × 1,000 B = 16,000 B at min(100, 50) B/µs = 320 µs, starting
    // max(50, 20) µs after now (100 µs): done at 470 µs.
    let (s1, kv1) = parts(&world, 1);
    assert_eq!(s1.incoming.len(), 1);
    assert_eq!(s1.incoming[0].from, 0);
    assert_eq!(s1.incoming[0].done, Some(SimTime(470)));
    assert_eq!(kv1.allocated_blocks(), 1, "its prompt's block is reserved");
    let (s0, kv0) = parts(&world, 0);
    assert!(s0.handoff.is_empty());
    assert_eq!(s0.outbound, 1);
    assert_eq!(kv0.allocated_blocks(), 1, "held until the last byte lands");
    assert_eq!(world.resource::<ClusterView>().instances[1].in_flight, 1);
    let stats = &world.resource::<Disagg>().stats;
    assert_eq!(
        (stats.transfers, stats.bytes, stats.blocks),
        (1, 16_000.0, 1)
    );
    assert!(world.resource::<InstanceDue>().handoffs.is_empty());
    let mut queue = world.resource_mut::<EventQueue>();
    assert_eq!(queue.peek_time(), Some(SimTime(470)));
    assert!(matches!(
        queue.pop_at(SimTime(470)),
        Some(Event::TransferDone { instance: 1 })
    ));
}

#[test]
fn when_the_kv_lands_the_decode_instance_takes_the_request_and_the_prefill_side_frees_it() {
    let mut world = world();
    world.run_system_once(transfer_kv).unwrap();
    world.resource_mut::<SimClock>().now = SimTime(470);
    world.resource_mut::<TransferDue>().transfers_done.push(1);
    world.run_system_once(transfer_kv).unwrap();
    let (s1, kv1) = parts(&world, 1);
    assert!(s1.incoming.is_empty());
    assert_eq!(s1.arrived.len(), 1);
    assert_eq!(
        s1.arrived[0].kv_transfer,
        Some(SimDuration::from_us(370)),
        "first token (100 µs) to KV ready (470 µs)"
    );
    assert_eq!(kv1.allocated_blocks(), 1);
    let (s0, kv0) = parts(&world, 0);
    assert_eq!((s0.outbound, kv0.allocated_blocks()), (0, 0));
    assert_eq!(world.resource::<ClusterView>().instances[1].in_flight, 0);
    assert!(world.resource::<InstanceDue>().batch.contains(&1));
}

#[test]
fn with_no_routable_decode_instance_the_hand_off_waits_on_its_prefill_instance() {
    let mut world = world();
    world.resource_mut::<ClusterView>().instances[1].routable = false;
    world.run_system_once(transfer_kv).unwrap();
    let (s0, _) = parts(&world, 0);
    assert_eq!((s0.handoff.len(), s0.outbound), (1, 0));
    assert_eq!(world.resource::<Disagg>().unrouted, vec![0]);
    assert!(parts(&world, 1).0.incoming.is_empty());
    assert_eq!(world.resource::<EventQueue>().peek_time(), None);
}
