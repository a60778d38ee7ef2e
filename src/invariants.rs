//! Invariant checks ([`SimSystems::Check`]), on with `--check-invariants` and in tests.
//!
//! A broken invariant is a bug in the simulator, not an input error: it panics with the
//! time, instance and request involved.
//! - INV-1 request conservation: injected = ended (completed + rejected + dropped) +
//!   live requests, and live = queued + running + leaving + in transit, counted three
//!   independent ways (workload counter, entities, instance queues).
//! - INV-3 clock monotonicity.
//! - INV-4 KV conservation per instance, both tiers: GPU allocated + free = total and CPU
//!   tier held ≤ its capacity every tick; every reference accounted for by a request holding
//!   it (running, or with P/D handed off, in transfer on both ends, or arrived) every tick; a full audit of the free list, reference counts,
//!   hash index and CPU LRU list every 1,024 ticks and at the end.
//! - INV-5 causality per request: arrival ≤ admitted ≤ routed ≤ enqueued ≤ scheduled ≤
//!   first token ≤ completion ≤ now.
//! - INV-8 work conservation: an instance with queued or running requests has a step in
//!   flight; waiting requests hold no KV blocks.
//! - INV-9 instance life cycle (autoscaling): an off instance holds no request, no step,
//!   no KV cache and nothing headed to it; only serving (or warming-up, when allowed)
//!   instances are routable.
//! - INV-10 crashed instances (faults): a down instance holds no request, no step, no KV
//!   block, sends nothing and is not routable.
//!
//! [`SimSystems::Check`]: crate::SimSystems::Check

use bevy_ecs::prelude::*;

use crate::engine::{ClusterView, Injected, SimClock};
use crate::instance::{Instance, Scheduler};
use crate::instance::{Phase, Power};
use crate::kv::KvCache;
use crate::metrics::Aggregates;
use crate::request::Lifecycle;
use crate::time::SimTime;

pub use crate::engine::CheckInvariants;
pub use crate::metrics::check_causality;

/// Invariant checks: [`check_invariants`] in [`SimSystems::Check`], in both tick schedules,
/// when [`CheckInvariants`] is on (`--check-invariants`, and in tests; its setup step sets
/// it from the run options). Reads everything, writes nothing.
pub struct InvariantsPlugin;

impl bevy_app::Plugin for InvariantsPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        use crate::engine::{SimStep, SimStepFast, SimSystems};
        use crate::setup::SetupAppExt;
        use bevy_ecs::schedule::ScheduleLabel;
        app.init_resource::<CheckInvariants>().add_setup(
            crate::setup::SetupStage::Policies,
            |app: &mut bevy_app::App, ctx: &crate::setup::SetupCtx<'_>| {
                app.insert_resource(CheckInvariants(ctx.options.check_invariants));
                Ok(())
            },
        );
        for label in [SimStep.intern(), SimStepFast.intern()] {
            app.add_systems(
                label,
                check_invariants
                    .in_set(SimSystems::Check)
                    .run_if(|c: Res<CheckInvariants>| c.0),
            );
        }
    }
}

/// Checks INV-1, INV-3, INV-4 and INV-8 after every tick.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn check_invariants(
    clock: Res<SimClock>,
    injected: Res<Injected>,
    agg: Res<Aggregates>,
    mut last: Local<SimTime>,
    mut seen: Local<crate::kv::HolderCounts>,
    requests: Query<&Lifecycle>,
    instances: Query<(&Instance, &Scheduler, &KvCache, Option<&Power>)>,
    view: Res<ClusterView>,
) {
    let now = clock.now;
    assert!(
        now >= *last,
        "INV-3: clock went from {} back to {now}",
        *last
    );
    *last = now;

    let mut resident = 0u64;
    for (inst, sched, kv, power) in &instances {
        resident += sched.resident() as u64;
        if let Some(p) = power {
            let i = inst.index;
            if p.phase == Phase::Off {
                // A crashed one (faults) may still have requests on their way to it: they
                // are lost when they reach it.
                assert!(
                    sched.resident() == 0
                        && sched.in_flight.is_empty()
                        && kv.total_blocks() == 0
                        && (view.instances[i as usize].in_flight == 0 || sched.down),
                    "INV-9 at {now}: instance {i} is off but holds {} requests, {} steps, {} KV blocks, {} headed to it",
                    sched.resident(),
                    sched.in_flight.len(),
                    kv.total_blocks(),
                    view.instances[i as usize].in_flight
                );
            }
            assert!(
                sched.unroutable || matches!(p.phase, Phase::Serving | Phase::WarmingUp),
                "INV-9 at {now}: instance {i} is routable while {}",
                p.phase.name()
            );
            assert_eq!(
                view.instances[i as usize].routable, !sched.unroutable,
                "INV-9 at {now}: the view of instance {i} disagrees on routability"
            );
        }
        if sched.down {
            assert!(
                sched.resident() == 0
                    && sched.step_end.is_none()
                    && sched.in_flight.is_empty()
                    && sched.outbound == 0
                    && kv.allocated_blocks() == 0
                    && sched.unroutable,
                "INV-10 at {now}: instance {} is down but holds {} requests, {} KV blocks, a step: {}, routable: {}",
                inst.index,
                sched.resident(),
                kv.allocated_blocks(),
                sched.step_end.is_some(),
                !sched.unroutable
            );
        }
        assert!(
            kv.conserves_blocks(),
            "INV-4 at {now}: instance {} has {} allocated + {} free != {} blocks",
            inst.index,
            kv.allocated_blocks(),
            kv.free_blocks(),
            kv.total_blocks()
        );
        for c in kv.cpu.iter().chain(kv.nvme.as_deref()) {
            assert!(
                c.len() <= c.capacity(),
                "INV-4 at {now}: instance {} holds {} blocks in a {:?} tier of {}",
                inst.index,
                c.len(),
                c.kind(),
                c.capacity()
            );
        }
        if clock.ticks.is_multiple_of(1024)
            && let Err(e) = kv.audit()
        {
            panic!("INV-4 at {now}: instance {}: {e}", inst.index);
        }
        // Every reference is held by a request here: running, handed off (P/D, until its
        // transfer ends), arrived, or on its way to a decode instance (its reservation there,
        // its prompt's blocks here); or by a read the scheduler has not heard of yet.
        let outbound = instances
            .iter()
            .flat_map(|(_, s, ..)| &s.incoming)
            .filter(|t| t.from == inst.index)
            .map(|t| &t.handoff.seq.kv);
        let holders = sched
            .running
            .iter()
            .map(|s| &s.kv)
            .chain(sched.handoff.iter().map(|h| &h.seq.kv))
            .chain(sched.arrived.iter().map(|s| &s.kv))
            .chain(sched.incoming.iter().map(|t| &t.reserved))
            .chain(sched.sent.iter().map(|(_, b)| b))
            .chain(outbound);
        if let Err(e) = kv.check_holders(holders, &mut seen) {
            panic!("INV-4 at {now}: instance {}: {e}", inst.index);
        }
        assert!(
            sched.is_progressing(),
            "INV-8 at {now}: instance {} has {} waiting and {} running but no step in flight \
             (listed {}, down {}, unroutable {})",
            inst.index,
            sched.waiting.len(),
            sched.running.len(),
            sched.listed,
            sched.down,
            sched.unroutable
        );
        if let Some(seq) = sched.waiting.iter().find(|s| !s.kv.is_empty()) {
            panic!(
                "INV-8 at {now}: instance {} request {} waits while holding {} KV blocks",
                inst.index,
                seq.spec.id,
                seq.kv.len()
            );
        }
    }
    let mut live = 0u64;
    let mut in_transit = 0u64;
    for l in &requests {
        live += 1;
        if l.enqueued.is_none() {
            in_transit += 1;
        }
    }
    assert_eq!(
        injected.0,
        agg.ended() + live,
        "INV-1 at {now}: injected {} != ended {} + live {live}",
        injected.0,
        agg.ended()
    );
    assert_eq!(
        live,
        resident + in_transit,
        "INV-1 at {now}: {live} live requests but {resident} on instances + {in_transit} in transit"
    );
}

#[cfg(test)]
mod tests {
    use bevy_ecs::system::RunSystemOnce;

    use super::*;
    use crate::instance::Seq;

    /// A bare world: one instance (10 KV blocks) and `injected` requests counted in, of which
    /// one waits on the instance (with `step` in flight or not).
    fn world(injected: u64, step: bool) -> World {
        let mut world = World::new();
        world.init_resource::<SimClock>();
        world.init_resource::<Aggregates>();
        world.init_resource::<ClusterView>();
        world.insert_resource(Injected(injected));
        let request = world
            .spawn(Lifecycle {
                enqueued: Some(SimTime::ZERO),
                ..Default::default()
            })
            .id();
        let mut sched = Scheduler::default();
        sched.waiting.push_back(Seq::new(
            request,
            crate::policy::any_request(),
            Lifecycle::default(),
        ));
        if step {
            sched.step_end = Some(SimTime(5));
        }
        world.spawn((Instance { index: 0, group: 0 }, sched, KvCache::new(10, 16)));
        world
    }

    #[test]
    fn a_consistent_world_passes() {
        world(1, true).run_system_once(check_invariants).unwrap();
    }

    #[test]
    #[should_panic(expected = "INV-1")]
    fn a_request_counted_in_but_nowhere_breaks_conservation() {
        world(2, true).run_system_once(check_invariants).unwrap();
    }

    #[test]
    #[should_panic(expected = "INV-8")]
    fn an_instance_with_work_and_no_step_breaks_work_conservation() {
        world(1, false).run_system_once(check_invariants).unwrap();
    }
}
