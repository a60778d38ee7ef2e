//! The instance plugin: its systems, setup steps and the built-in batch schedulers.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use super::pipeline::{enqueue_requests, expire_requests, retire_steps};
use super::schedulers::{self, BatchFormation};
use super::{InstanceIndex, batch, report, spawn, step};
use crate::catalog::PolicyAppExt;
use crate::engine::{SimStep, SimSystems};
use crate::metrics::SummaryAppExt;
use crate::setup::{SetupAppExt, SetupStage};

/// The instance stages: `retire_steps` (Advance), `enqueue_requests` and `expire_requests`
/// (Enqueue), `batch::form_batches` (Batch), `step::execute_steps` (Execute),
/// `step::complete_steps` (Complete) (`fast::fast_ticks` runs them as one in `SimStepFast`); the batch
/// schedulers. Sets up the queue policies (`Active<family::Priority>`,
/// `Active<family::Scheduling>`) and spawns the instances ([`spawn`]). Owns
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
            .add_summary_part(report::summarize);
        app.init_resource::<InstanceIndex>()
            .init_resource::<spawn::Groups>()
            .add_systems(
                SimStep,
                (
                    retire_steps.in_set(SimSystems::Advance),
                    enqueue_requests.in_set(SimSystems::Enqueue),
                    expire_requests
                        .in_set(SimSystems::Enqueue)
                        .after(enqueue_requests),
                    batch::form_batches.in_set(SimSystems::Batch),
                    step::execute_steps.in_set(SimSystems::Execute),
                    step::complete_steps.in_set(SimSystems::Complete),
                ),
            );
    }
}
