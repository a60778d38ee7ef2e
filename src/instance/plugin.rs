//! The instance plugin: its systems, setup steps and the built-in batch schedulers.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;

use super::pipeline::{enqueue_requests, expire_requests, publish_kv_events, retire_steps};
use super::schedulers::{self, BatchFormation};
use super::{
    AnomalyLog, InstanceIndex, InstanceSystems, Limits, Scheduler, batch, report, spawn, step,
};
use crate::catalog::PolicyAppExt;
use crate::engine::{SimStep, SimStepFast, SimSystems};
use crate::kv::{KvCache, KvEvents};
use crate::metrics::{FinishStage, Summary, SummaryAppExt};
use crate::scenario::Scenario;
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError};

/// The instance stages, each in its [`InstanceSystems`] set: `retire_steps` (Advance),
/// `enqueue_requests` and `expire_requests` (Enqueue), `batch::form_batches` (Batch),
/// `step::execute_steps` (Execute), `step::complete_steps` (Complete)
/// (`fast::fast_ticks` runs them as one in `SimStepFast`), and `publish_kv_events` (Observe,
/// only while KV events are on); the batch schedulers. Sets up the queue policies
/// (`Active<family::Priority>`, `Active<family::Scheduling>`), spawns the instances
/// ([`spawn`]) and warns when a wait queue grew past 10,000 requests or an API server could
/// not stream a step's tokens before the next step's arrived. Owns
/// [`InstanceIndex`], [`spawn::Groups`] and the KV events' switch `kv::KvEvents`.
pub struct InstancePlugin;

impl Plugin for InstancePlugin {
    fn build(&self, app: &mut App) {
        for e in [
            schedulers::VLLM_V1,
            schedulers::VLLM_V0,
            schedulers::SARATHI,
            schedulers::ORCA,
            schedulers::FASTER_TRANSFORMER,
            schedulers::LIGHTLLM,
        ] {
            app.add_policy::<BatchFormation>(e);
        }
        app.init_resource::<crate::kv::KvEvents>()
            .add_message::<crate::kv::KvEvent>();
        app.add_setup(SetupStage::Policies, spawn::set_up_queue_policies)
            .add_setup(SetupStage::Instances, spawn::spawn_instances)
            .add_setup(SetupStage::Outputs, switch_kv_events)
            .add_summary_part(report::summarize)
            .add_summary_part(report::summarize_speculative)
            .add_summary_part(report::summarize_lora)
            .add_finish_step(FinishStage::Concerns, warn_long_queues)
            .add_finish_step(FinishStage::Concerns, warn_busy_api_servers);
        for label in [SimStep.intern(), SimStepFast.intern()] {
            app.configure_sets(
                label,
                (
                    InstanceSystems::Retire.in_set(SimSystems::Advance),
                    InstanceSystems::Enqueue.in_set(SimSystems::Enqueue),
                    InstanceSystems::Batch.in_set(SimSystems::Batch),
                    InstanceSystems::Execute.in_set(SimSystems::Execute),
                    InstanceSystems::Complete.in_set(SimSystems::Complete),
                    InstanceSystems::PublishKvEvents.in_set(SimSystems::Observe),
                ),
            );
        }
        app.init_resource::<InstanceIndex>()
            .init_resource::<AnomalyLog>()
            .init_resource::<spawn::Groups>()
            .add_systems(
                SimStep,
                (
                    retire_steps.in_set(InstanceSystems::Retire),
                    enqueue_requests.in_set(InstanceSystems::Enqueue),
                    expire_requests
                        .in_set(InstanceSystems::Enqueue)
                        .after(enqueue_requests),
                    batch::form_batches.in_set(InstanceSystems::Batch),
                    step::execute_steps.in_set(InstanceSystems::Execute),
                    step::complete_steps.in_set(InstanceSystems::Complete),
                ),
            );
    }
}

/// `SetupStage::Outputs`: with KV events on (a router reads caches, the scenario counts
/// them, or a plugin turned them on), every cache records its block events and
/// `publish_kv_events` runs each tick; a run without them schedules nothing.
fn switch_kv_events(app: &mut App, _: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    if !world.resource::<KvEvents>().0 {
        return Ok(());
    }
    let mut caches = world.query::<&mut KvCache>();
    for mut kv in caches.iter_mut(world) {
        kv.record_events(true);
    }
    for label in [SimStep.intern(), SimStepFast.intern()] {
        app.add_systems(
            label,
            publish_kv_events.in_set(InstanceSystems::PublishKvEvents),
        );
    }
    Ok(())
}

/// `FinishStage::Concerns`: a warning when an unbounded wait queue grew past 10,000
/// requests.
fn warn_long_queues(world: &mut World, summary: &mut Summary) -> Result<(), SimError> {
    if world
        .resource::<Scenario>()
        .limits
        .max_waiting_per_instance
        .is_some()
    {
        return Ok(());
    }
    let peak = world
        .resource::<InstanceIndex>()
        .0
        .iter()
        .enumerate()
        .map(|(i, &e)| {
            let c = world.get::<Scheduler>(e).expect("instance").counters;
            (c.peak_waiting, i)
        })
        .max();
    if let Some((n, i)) = peak.filter(|p| p.0 > 10_000) {
        summary.warnings.push(format!(
            "instance {i}'s wait queue reached {n} requests: the load exceeds what it serves; \
             vLLM has no queue cap either, but limits.max_waiting_per_instance sheds the excess \
             (rejected as queue_full) and keeps memory bounded"
        ));
    }
    Ok(())
}

/// `FinishStage::Concerns`: a warning when, on at least 1 % of an instance's steps, the API
/// server was still streaming the previous step's tokens as the step's own arrived
/// (`step::complete_one`). servesim delivers every step's tokens a fixed time after the step
/// (the serving path's `token_out`), as if its API server were free; vLLM's runs one event
/// loop, which then falls behind and delivers them later. Names the instance behind on the
/// largest share of its steps.
fn warn_busy_api_servers(world: &mut World, summary: &mut Summary) -> Result<(), SimError> {
    let mut busy = 0;
    let mut worst: Option<(f64, usize, Entity)> = None;
    for (i, &e) in world.resource::<InstanceIndex>().0.iter().enumerate() {
        let c = world.get::<Scheduler>(e).expect("instance").counters;
        if c.api_steps == 0 || c.api_behind * 100 < c.api_steps {
            continue;
        }
        busy += 1;
        let share = c.api_behind as f64 / c.api_steps as f64;
        if worst.is_none_or(|w| share > w.0) {
            worst = Some((share, i, e));
        }
    }
    let Some((_, i, e)) = worst else {
        return Ok(());
    };
    let c = world.get::<Scheduler>(e).expect("instance").counters;
    let s = world.get::<Limits>(e).expect("instance").serving;
    let others = match busy - 1 {
        0 => String::new(),
        1 => " (and 1 other instance)".into(),
        n => format!(" (and {n} other instances)"),
    };
    summary.warnings.push(format!(
        "instance {i}'s API server{others} was still streaming a step's tokens when the next \
         step's arrived on {} of its {} steps ({:.1} %): a step's output work ({} µs + {} µs \
         per request's chunk, up to {} chunks a step) outlasted the step, so a real vLLM \
         API server would fall behind and deliver tokens later than simulated (servesim \
         delays each token by its own step's output work but does not queue one step's \
         output behind the last; vLLM's --api-server-count runs more API servers)",
        c.api_behind,
        c.api_steps,
        100.0 * c.api_behind as f64 / c.api_steps as f64,
        s.api_step_us,
        s.api_us_per_output_token,
        c.api_peak_chunks,
    ));
    Ok(())
}
