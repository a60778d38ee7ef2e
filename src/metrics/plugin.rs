//! The metrics plugin: its systems, setup and finish steps.

use bevy_ecs::prelude::*;

use super::{
    Aggregates, FinishStage, KvEventTally, LargestCache, MetricsSystems, RequestLog, SummaryAppExt,
    SummaryExtras, Unfinished, count_kv_events, finish, record_finished,
};
use crate::engine::CheckInvariants;
use crate::labels::Labels;
use crate::slo::SloTable;

/// Per-request rows and aggregates: [`record_finished`] in [`SimSystems::Record`] (empties
/// `RecordDue`, fills `WorkloadDue::ended_turns` and `ended_held`, despawns recorded requests), in
/// both tick schedules. Sets up the `slo::SloTable`. When the run ends, [`assemble`] builds
/// the summary's core and runs the concerns' [`SummaryParts`] (each plugin registers its own
/// with [`SummaryAppExt::add_summary_part`]). Owns [`Aggregates`], [`SummaryExtras`],
/// [`KvEventTally`] and [`RequestLog`] (the simulation builder opens `requests.csv` into it).
pub struct MetricsPlugin;

impl bevy_app::Plugin for MetricsPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        use crate::engine::{SimStep, SimStepFast, SimSystems};
        use crate::setup::SetupAppExt;
        use bevy_ecs::schedule::ScheduleLabel;
        app.init_resource::<Aggregates>()
            .init_resource::<SummaryExtras>()
            .init_resource::<RequestLog>()
            .init_resource::<KvEventTally>()
            .init_resource::<SloTable>()
            .init_resource::<crate::kv::KvEvents>()
            .init_resource::<CheckInvariants>()
            .init_resource::<LargestCache>()
            .init_resource::<Unfinished>()
            .add_setup(crate::setup::SetupStage::Policies, set_up_metrics)
            .add_setup(crate::setup::SetupStage::Outputs, finish::open_files)
            .add_finish_step(FinishStage::Run, finish::diagnose_run)
            .add_finish_step(FinishStage::Concerns, finish::finish_requests)
            .add_finish_step(FinishStage::Summary, finish::write_summary)
            .add_summary_part(super::network::summarize);
        for label in [SimStep.intern(), SimStepFast.intern()] {
            app.configure_sets(
                label,
                (
                    MetricsSystems::Record.in_set(SimSystems::Record),
                    MetricsSystems::CountKvEvents
                        .in_set(SimSystems::Observe)
                        .after(crate::instance::InstanceSystems::PublishKvEvents),
                ),
            );
            app.add_systems(label, record_finished.in_set(MetricsSystems::Record));
        }
        app.add_setup(crate::setup::SetupStage::Outputs, |app, _| {
            if app.world().resource::<KvEventTally>().on {
                for label in [SimStep.intern(), SimStepFast.intern()] {
                    app.add_systems(label, count_kv_events.in_set(MetricsSystems::CountKvEvents));
                }
            }
            Ok(())
        });
    }
}

/// `SetupStage::Policies`: the SLO classes requests are judged by, and the KV-event counts
/// when `outputs.kv_events` asks for them (which turns the events on).
pub fn set_up_metrics(
    app: &mut bevy_app::App,
    ctx: &crate::setup::SetupCtx<'_>,
) -> Result<(), crate::setup::SimError> {
    let world = app.world_mut();
    let table = SloTable::new(
        world.resource::<Labels>(),
        &ctx.scenario.policies.slo_classes,
    );
    world.insert_resource(table);
    let count = ctx.scenario.outputs.kv_events;
    world.resource_mut::<KvEventTally>().on = count;
    world.resource_mut::<crate::kv::KvEvents>().0 |= count;
    world.insert_resource(LargestCache::of(ctx));
    Ok(())
}
