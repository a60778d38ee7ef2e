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

/// A bare world for the pipeline systems: two instances (16-token blocks, 64 of them, at
/// most 4 sequences and 64 batched tokens, vLLM v1, a step of 1,000 µs + 10 µs per prefill
/// token + 100 µs per decode token), instance `i` with `waiting[i]` requests of 10 + 10
/// tokens, the queue policies FCFS with constant priority, and the clock at `now`.
pub(crate) fn pipeline_world(waiting: [u64; 2], now: SimTime) -> World {
    use crate::catalog::Active;
    use crate::policy::{ConstantPriority, Fcfs, family};
    let mut world = World::new();
    world.init_resource::<crate::engine::InstanceDue>();
    world.init_resource::<crate::engine::EventQueue>();
    world.init_resource::<crate::engine::SimFault>();
    world.init_resource::<crate::engine::FastLoop>();
    world.init_resource::<crate::engine::ClusterView>();
    world.init_resource::<crate::metrics::Aggregates>();
    world.init_resource::<crate::slo::SloTable>();
    world.init_resource::<schedulers::SchedulingConfig>();
    world.insert_resource(Active::<family::Scheduling>(Box::new(Fcfs)));
    world.insert_resource(Active::<family::Priority>(Box::new(ConstantPriority)));
    world.insert_resource(SimClock {
        now,
        ..Default::default()
    });
    let labels = crate::labels::Labels::default();
    let params = Default::default();
    let mut index = Vec::new();
    for (i, &n) in waiting.iter().enumerate() {
        let mut sched = Scheduler::default();
        for k in 0..n {
            let mut spec = crate::policy::any_request();
            spec.id = i as u64 * 100 + k;
            if let crate::request::PromptContent::Simple { unique_id, .. } = &mut spec.content {
                *unique_id = spec.id + 1;
            }
            sched
                .waiting
                .push_back(Seq::new(Entity::PLACEHOLDER, spec, Lifecycle::default()));
        }
        let batcher =
            (schedulers::VLLM_V1.build)(&crate::catalog::PolicyArgs::new(1, &params, &labels))
                .unwrap();
        let e = world
            .spawn((
                sched,
                KvCache::new(64, 16),
                crate::latency::Latency(std::sync::Arc::new(crate::latency::Blackbox {
                    alpha: [0.0; 3],
                    beta: [1000.0, 10.0, 100.0],
                })),
                Limits::plain(4, 64),
                schedulers::Batcher(batcher),
            ))
            .id();
        world
            .resource_mut::<crate::engine::ClusterView>()
            .instances
            .push(snapshot(
                i as u32,
                &Scheduler::default(),
                &KvCache::new(64, 16),
                0,
            ));
        index.push(e);
    }
    world.insert_resource(InstanceIndex(index));
    world
}

#[test]
fn form_batches_forms_the_listed_instances_batch_only_and_lists_it_for_pricing() {
    use bevy_ecs::system::RunSystemOnce;
    let mut world = pipeline_world([3, 2], SimTime(100));
    world
        .resource_mut::<crate::engine::InstanceDue>()
        .batch
        .push(0);
    world.run_system_once(batch::form_batches).unwrap();
    let index = world.resource::<InstanceIndex>().0.clone();
    let s0 = world.get::<Scheduler>(index[0]).unwrap();
    // Three whole 10-token prompts fit the 64-token budget and 4 sequences: all run.
    assert_eq!(s0.running.len(), 3);
    assert!(s0.waiting.is_empty());
    let planned: Vec<(u32, u32, bool)> = s0
        .plan
        .iter()
        .map(|p| (p.slot, p.tokens, p.prefill))
        .collect();
    assert_eq!(planned, [(0, 10, true), (1, 10, true), (2, 10, true)]);
    // Each holds ceil(10 / 16) = 1 block.
    assert_eq!(
        world.get::<KvCache>(index[0]).unwrap().allocated_blocks(),
        3
    );
    // Instance 1 was not listed: untouched.
    let s1 = world.get::<Scheduler>(index[1]).unwrap();
    assert_eq!((s1.running.len(), s1.waiting.len()), (0, 2));
    let due = world.resource::<crate::engine::InstanceDue>();
    assert!(due.batch.is_empty(), "its work list is emptied");
    assert_eq!(due.execute, vec![0]);
}

#[test]
fn execute_steps_prices_the_batch_and_schedules_its_end() {
    use bevy_ecs::system::RunSystemOnce;
    let mut world = pipeline_world([3, 0], SimTime(100));
    world
        .resource_mut::<crate::engine::InstanceDue>()
        .batch
        .push(0);
    world.run_system_once(batch::form_batches).unwrap();
    world.run_system_once(step::execute_steps).unwrap();
    // 1,000 µs + 30 prefill tokens × 10 µs = 1,300 µs from t = 100 µs.
    let index = world.resource::<InstanceIndex>().0.clone();
    let s0 = world.get::<Scheduler>(index[0]).unwrap();
    assert_eq!(s0.step_end, Some(SimTime(1_400)));
    assert_eq!(s0.counters.prefill_tokens, 30);
    let mut queue = world.resource_mut::<crate::engine::EventQueue>();
    assert_eq!(queue.peek_time(), Some(SimTime(1_400)));
    assert!(matches!(
        queue.pop_at(SimTime(1_400)),
        Some(crate::engine::Event::StepFinished { instance: 0 })
    ));
    let due = world.resource::<crate::engine::InstanceDue>();
    assert!(due.execute.is_empty());
    assert_eq!(due.complete, vec![0]);
}

#[test]
fn complete_steps_applies_the_progress_a_whole_prompt_gives_its_first_token() {
    use bevy_ecs::system::RunSystemOnce;
    let mut world = pipeline_world([1, 0], SimTime(100));
    world
        .resource_mut::<crate::engine::InstanceDue>()
        .batch
        .push(0);
    world.run_system_once(batch::form_batches).unwrap();
    world.run_system_once(step::execute_steps).unwrap();
    world.run_system_once(step::complete_steps).unwrap();
    let index = world.resource::<InstanceIndex>().0.clone();
    let s0 = world.get::<Scheduler>(index[0]).unwrap();
    let seq = &s0.running[0];
    // The whole 10-token prompt computed: its first token is due at the step end
    // (1,000 + 10 × 10 µs after t = 100 µs).
    assert_eq!(seq.progress, 10);
    assert_eq!(seq.generated, 1);
    assert_eq!(seq.first_token, Some(SimTime(1_200)));
    assert!(
        world
            .resource::<crate::engine::InstanceDue>()
            .complete
            .is_empty()
    );
}

/// An instance with a step in flight until 6,000 µs; the next step it forms is its 8th (7).
fn busy_at_step_7() -> Scheduler {
    Scheduler {
        in_flight: [SimTime(6_000)].into(),
        step_done: SimTime(6_000),
        counters: InstanceCounters {
            steps: 7,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Batch limits of 128 requests and 2,048 tokens with `serving` and `pp` stages.
fn limits(serving: crate::latency::ServingPath, pp: u32) -> Limits {
    Limits {
        serving,
        pp,
        ..Limits::plain(128, 2048)
    }
}

/// The step a request whose KV lands now may join, by the instance's state and engine
/// (`batch::landing_joins_from`): the count of steps taken is the next step's number.
#[test]
fn a_landing_joins_the_step_the_scheduler_can_know_of_it_in() {
    use crate::latency::ServingPath;
    let now = SimTime(5_000);
    let busy = busy_at_step_7();
    let joins = |s: &Scheduler, l: &Limits| batch::landing_joins_from(s, l, now);
    // A step in flight: polled at the next launch (step 7).
    assert_eq!(joins(&busy, &limits(ServingPath::VLLM_SYNC, 1)), 8);
    assert_eq!(joins(&busy, &limits(ServingPath::VLLM, 1)), 10);
    assert_eq!(joins(&busy, &limits(ServingPath::VLLM, 4)), 11);
    // BLIS's reading: the next step.
    assert_eq!(joins(&busy, &limits(ServingPath::BARE, 1)), 7);
    // A step that ended now: the engine launches the next at once, and polls then.
    let at_boundary = Scheduler {
        in_flight: Default::default(),
        step_done: now,
        ..busy
    };
    assert_eq!(joins(&at_boundary, &limits(ServingPath::VLLM, 1)), 10);
    // Idle since before now (or never stepped): its engine polls in a loop.
    let idle = Scheduler {
        step_done: SimTime(4_999),
        ..at_boundary
    };
    assert_eq!(joins(&idle, &limits(ServingPath::VLLM, 1)), 7);
    let fresh = Scheduler::default();
    assert_eq!(joins(&fresh, &limits(ServingPath::VLLM, 1)), 0);
}

/// The step before whose forming a P/D prefill instance frees the blocks of a read that
/// ended now (`batch::sent_freed_from`), by the instance's state and engine.
#[test]
fn a_read_s_blocks_are_freed_from_the_step_the_prefill_scheduler_hears_of_it_in() {
    use crate::latency::ServingPath;
    let now = SimTime(5_000);
    let freed = |s: &Scheduler, l: &Limits| batch::sent_freed_from(s, l, now);
    // A step in flight (the next to be formed is step 7): the scheduler hears when a landing
    // on a decode instance would join (the test above).
    let busy = busy_at_step_7();
    assert_eq!(freed(&busy, &limits(ServingPath::VLLM_SYNC, 1)), 8);
    assert_eq!(freed(&busy, &limits(ServingPath::VLLM, 1)), 10);
    assert_eq!(freed(&busy, &limits(ServingPath::VLLM, 4)), 11);
    assert_eq!(freed(&busy, &limits(ServingPath::BARE, 1)), 7);
    // Idle with nothing to do: held until a request comes; the first step it takes (7)
    // polls, and its output frees them before the step after it, or with async scheduling
    // before the one decided at its end.
    let idle = Scheduler {
        in_flight: Default::default(),
        step_done: SimTime(4_999),
        ..busy
    };
    assert_eq!(freed(&idle, &limits(ServingPath::VLLM_SYNC, 1)), 8);
    assert_eq!(freed(&idle, &limits(ServingPath::VLLM, 1)), 9);
    assert_eq!(freed(&idle, &limits(ServingPath::VLLM, 4)), 11);
    assert_eq!(freed(&idle, &limits(ServingPath::BARE, 1)), 7);
    // Idle with a request waiting (for room): the engine steps empty and polls at once.
    let mut waiting = Scheduler {
        in_flight: Default::default(),
        step_done: SimTime(4_999),
        ..busy_at_step_7()
    };
    waiting.waiting.push_back(Seq::new(
        Entity::PLACEHOLDER,
        crate::policy::any_request(),
        Lifecycle::default(),
    ));
    assert_eq!(freed(&waiting, &limits(ServingPath::VLLM, 1)), 7);
    assert_eq!(freed(&waiting, &limits(ServingPath::VLLM_SYNC, 1)), 7);
}
