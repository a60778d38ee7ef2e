//! The observers' plugin: `timeseries.csv` (sampled before ticks) and `timeline.json`
//! (drawn by two systems), each opened when the run is set up and finished when it ends.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use super::timeline::{Timeline, draw_requests, draw_steps, draw_unfinished};
use super::timeseries::{TimeSeries, interval};
use crate::engine::{BeforeTick, FastLoop, Fault, SimClock, SimFault, SimStep, SimSystems};
use crate::instance::InstanceSystems;
use crate::instance::spawn::Groups;
use crate::metrics::{FinishStage, MetricsSystems, Summary, SummaryAppExt, Unfinished};
use crate::output::Outputs;
use crate::setup::{RunError, SetupAppExt, SetupCtx, SetupError, SetupStage, SimError};
use crate::time::SimTime;

/// `timeseries.csv` and `timeline.json`, as the scenario asks: opened at
/// `SetupStage::Outputs`, the time series sampled by the engine's [`BeforeTick`] hook, the
/// timeline drawn by [`ObserveSystems`], both finished at `FinishStage::Concerns`. Nothing
/// here changes the simulation.
pub struct ObservePlugin;

/// The observers' systems, each set inside its engine stage: order your own against these.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObserveSystems {
    /// `draw_steps` (Complete, before the steps are applied).
    DrawSteps,
    /// `draw_requests` (Record, before the requests are recorded).
    DrawRequests,
}

impl Plugin for ObservePlugin {
    fn build(&self, app: &mut App) {
        app.configure_sets(
            SimStep,
            (
                ObserveSystems::DrawSteps
                    .in_set(SimSystems::Complete)
                    .before(InstanceSystems::Complete),
                ObserveSystems::DrawRequests
                    .in_set(SimSystems::Record)
                    .before(MetricsSystems::Record),
            ),
        )
        .add_setup(SetupStage::Outputs, open_observers)
        .add_finish_step(FinishStage::Concerns, finish_observers);
    }
}

/// Each instance's group name, in instance order.
fn group_names(world: &World) -> Vec<String> {
    world
        .get_resource::<Groups>()
        .map(|g| {
            g.0.iter()
                .flat_map(|g| g.instances().map(|_| g.name.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// `SetupStage::Outputs`: `timeseries.csv` and `timeline.json`, as the scenario asks.
fn open_observers(app: &mut App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let outputs = &ctx.scenario.outputs;
    let groups = group_names(app.world());
    let world = app.world_mut();
    let mut files = world.resource_mut::<Outputs>();
    let io = |files: &Outputs, name: &str, message: String| SetupError::Output {
        path: files.staged_path(name),
        message,
    };
    let series = match outputs.timeseries_csv {
        true => files
            .create("timeseries.csv")
            .map_err(SetupError::Outputs)?,
        false => None,
    };
    let series = match series {
        Some(w) => {
            let file = w
                .into_inner()
                .map_err(|e| io(&files, "timeseries.csv", e.into_error().to_string()))?;
            let ts = TimeSeries::new(
                file,
                interval(ctx.scenario),
                groups.clone(),
                ctx.scenario.flow_control.is_some(),
            )
            .map_err(|e| io(&files, "timeseries.csv", e.to_string()))?;
            Some(ts)
        }
        None => None,
    };
    let timeline = match outputs.timeline_json {
        true => files.create("timeline.json").map_err(SetupError::Outputs)?,
        false => None,
    };
    let timeline = match timeline {
        Some(w) => {
            let file = w
                .into_inner()
                .map_err(|e| io(&files, "timeline.json", e.into_error().to_string()))?;
            let t = Timeline::new(
                file,
                outputs.timeline_window_s,
                outputs.timeline_request_sample,
                &groups,
            )
            .map_err(|e| io(&files, "timeline.json", e.to_string()))?;
            Some(t)
        }
        None => None,
    };
    if let Some(ts) = series {
        let next = ts.next_sample();
        world.insert_resource(ts);
        world.insert_resource(BeforeTick {
            after: next,
            hook: Some(sample),
        });
        world.resource_mut::<FastLoop>().until = next;
    }
    if let Some(t) = timeline {
        world.insert_resource(t);
        app.add_systems(
            SimStep,
            (
                draw_steps.in_set(ObserveSystems::DrawSteps),
                draw_requests.in_set(ObserveSystems::DrawRequests),
            ),
        );
    }
    Ok(())
}

/// The [`BeforeTick`] hook: writes every sample time before `t`; the first failed write
/// stops the run, as for every result file.
fn sample(world: &mut World, t: SimTime) {
    world.resource_scope(|world, mut ts: Mut<TimeSeries>| {
        ts.before_tick(world, t);
        if let Some(e) = &ts.error {
            world
                .resource_mut::<SimFault>()
                .0
                .get_or_insert_with(|| Fault::Write {
                    file: "timeseries.csv",
                    at: t,
                    error: e.clone(),
                });
        }
        let next = ts.next_sample();
        world.resource_mut::<BeforeTick>().after = next;
        world.resource_mut::<FastLoop>().until = next;
    });
}

/// `FinishStage::Concerns`: the timeline (with the requests still in the system) and the
/// time series (up to the end), finished and flushed.
fn finish_observers(world: &mut World, summary: &mut Summary) -> Result<(), SimError> {
    let now = world.resource::<SimClock>().now;
    let staged = |world: &World, name: &str| world.resource::<Outputs>().staged_path(name);
    if let Some(mut timeline) = world.remove_resource::<Timeline>() {
        draw_unfinished(&mut timeline, &world.resource::<Unfinished>().0, now);
        if timeline.window_start_us() > now.0 {
            summary.warnings.push(format!(
                "the timeline window starts at {:.3} s, after the run ended at {:.3} s: timeline.json holds no step or request; \
                 give --trace-window a START within the run",
                timeline.window_start_us() as f64 / 1e6,
                now.as_us() as f64 / 1e6
            ));
        }
        if timeline.requests_drawn == 0 && timeline.requests_in_window > 0 {
            summary.warnings.push(format!(
                "the timeline's request sample drew none of the {} requests in its window: timeline.json holds steps only; \
                 raise --trace-sample or outputs.timeline_request_sample (each request is drawn with that probability)",
                timeline.requests_in_window
            ));
        }
        let mb = timeline.bytes as f64 / 1e6;
        if mb > 300.0 {
            summary.warnings.push(format!(
                "timeline.json is {mb:.0} MB: chrome://tracing struggles past ~300 MB and Perfetto UI past ~1 GB; \
                 narrow it with --trace-window START..END or --trace-sample FRACTION"
            ));
        }
        timeline
            .finish()
            .and_then(|f| f.sync_all().map_err(|e| e.to_string()))
            .map_err(|message| RunError::Output {
                path: staged(world, "timeline.json"),
                message,
            })?;
    }
    if let Some(ts) = world.remove_resource::<TimeSeries>() {
        ts.finish(world, now)
            .and_then(|f| f.sync_all().map_err(|e| e.to_string()))
            .map_err(|message| RunError::Output {
                path: staged(world, "timeseries.csv"),
                message,
            })?;
    }
    Ok(())
}
