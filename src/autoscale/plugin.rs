//! The autoscaling plugin: its setup (the policy, the groups' accounts, each instance's
//! power), its result file, its part of the summary.

use bevy_ecs::prelude::*;

use crate::engine::{Event, EventQueue, SimClock, SimFault};
use crate::instance::InstanceIndex;
use crate::metrics::SummaryAppExt;
use crate::policy::{Active, family};
use crate::setup::{
    RunError, SetupAppExt, SetupCtx, SetupError, SetupStage, SimError, build_policy,
};
use crate::time::{SimDuration, SimTime};

use super::{
    Autoscaler, GroupScaling, Phase, Power, SCALE_EVENT_COLUMNS, Timing,
    life::advance_phases,
    scaling::{evaluate_scaling, sample_latencies},
};

/// Autoscaling: [`evaluate_scaling`] in [`SimSystems::Autoscale`] (empties `ScaleDue::evaluate`
/// and `cold_start`). The life-cycle systems ([`advance_phases`], [`sample_latencies`],
/// [`stop_on_event_write_error`]) are added by its setup only when a group scales, so runs
/// that do not scale do not pay for them. Sets up the scaling policy
/// (`Active<family::Autoscale>`), each instance's [`Power`] and the group accounts. Owns
/// [`Autoscaler`].
pub struct AutoscalePlugin;

impl bevy_app::Plugin for AutoscalePlugin {
    fn build(&self, app: &mut bevy_app::App) {
        app.init_resource::<Autoscaler>()
            .add_setup(SetupStage::Policies, set_up_policy)
            .add_setup(SetupStage::Cluster, set_up_groups)
            .add_setup(SetupStage::Outputs, open_scale_events)
            .add_summary_part(summarize)
            .add_finish_step(crate::metrics::FinishStage::Concerns, finish_scale_events)
            .add_systems(
                crate::engine::SimStep,
                evaluate_scaling.in_set(crate::engine::SimSystems::Autoscale),
            );
    }
}

/// `SetupStage::Outputs`: `scale_events.csv` (its header written) when a group scales and
/// the scenario keeps the file.
fn open_scale_events(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    if !(world.resource::<Autoscaler>().active && ctx.scenario.outputs.scale_events_csv) {
        return Ok(());
    }
    let mut files = world.resource_mut::<crate::output::Outputs>();
    let Some(file) = files
        .create("scale_events.csv")
        .map_err(SetupError::Outputs)?
    else {
        return Ok(());
    };
    let mut writer = csv::Writer::from_writer(file);
    writer
        .write_record(SCALE_EVENT_COLUMNS)
        .map_err(|e| SetupError::Output {
            path: files.staged_path("scale_events.csv"),
            message: e.to_string(),
        })?;
    world.resource_mut::<Autoscaler>().events = Some(writer);
    Ok(())
}

/// `FinishStage::Concerns`: `scale_events.csv` flushed (or its first write error).
fn finish_scale_events(world: &mut World, _: &mut crate::metrics::Summary) -> Result<(), SimError> {
    let path = world
        .resource::<crate::output::Outputs>()
        .staged_path("scale_events.csv");
    let mut scaler = world.resource_mut::<Autoscaler>();
    if let Some(err) = scaler.write_error.take() {
        return Err(RunError::Output {
            path: std::path::PathBuf::from("scale_events.csv"),
            message: err,
        }
        .into());
    }
    crate::output::finish_streamed(scaler.events.take(), None)
        .map_err(|message| RunError::Output { path, message }.into())
}

/// Autoscaling's part of the summary: each group's GPU-hours, cost and scaling history (the
/// accounts closed at the end of the run), and the run's cost.
pub fn summarize(world: &mut World, summary: &mut crate::metrics::Summary) {
    let now = world.resource::<SimClock>().now;
    let mut scaler = world.resource_mut::<Autoscaler>();
    close_accounts(&mut scaler, now);
    let end = now.as_us() as f64;
    for g in &scaler.groups {
        let instance_hours = g.instance_time.as_us() as f64 / 3.6e9;
        let gpu_hours = instance_hours * f64::from(g.gpus_per_instance);
        summary.groups.push(crate::metrics::GroupUsage {
            group: g.name.clone(),
            autoscaled: g.timing.is_some(),
            gpus_per_instance: g.gpus_per_instance,
            gpu_hours,
            cost: gpu_hours * g.cost_per_gpu_hour,
            mean_instances: if end > 0.0 {
                g.instance_time.as_us() as f64 / end
            } else {
                f64::from(g.on)
            },
            max_instances: g.peak,
            time_at_max_s: g.time_at_max.as_secs_f64(),
            scale_ups: g.scale_ups,
            cold_starts: g.cold_starts,
            scale_downs: g.scale_downs,
        });
        summary.anomalies.scale_oscillations += g.oscillations;
    }
    let c = &mut summary.cost;
    c.gpu_hours = summary.groups.iter().map(|g| g.gpu_hours).sum();
    c.total = summary.groups.iter().map(|g| g.cost).sum();
    let mtok = summary.throughput.output_tokens as f64 / 1e6;
    c.per_million_output_tokens = (mtok > 0.0).then(|| c.total / mtok);
}

/// `SetupStage::Policies`: the scaling policy.
pub fn set_up_policy(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let p = &ctx.scenario.policies;
    let labels = app.world().resource::<crate::labels::Labels>();
    let scaling = build_policy::<family::Autoscale>(
        ctx,
        labels,
        "autoscale",
        &p.autoscale,
        &p.autoscale_params,
    )?;
    app.insert_resource(Active::<family::Autoscale>(scaling));
    Ok(())
}

/// `SetupStage::Cluster`: every instance's life-cycle state, each group's accounts and
/// first evaluation; the life-cycle systems when some group scales (they cost a little
/// every tick: only runs that scale pay it).
pub fn set_up_groups(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    let first_policy_tick = world
        .resource::<Active<family::Autoscale>>()
        .0
        .next_evaluation(SimTime::ZERO, true);
    let set_up = world.resource::<crate::instance::spawn::Groups>().clone();
    let index = world.resource::<InstanceIndex>().0.clone();
    let autoscaled = ctx
        .scenario
        .cluster
        .groups
        .iter()
        .any(|g| g.scaling.is_some());
    let mut scaler = Autoscaler {
        active: autoscaled,
        anomaly_rows: (ctx.options.trace_decisions || ctx.scenario.outputs.decisions_csv)
            .then(Vec::new),
        ..Default::default()
    };
    let store = world
        .get_resource::<crate::instance::spawn::SharedKvStore>()
        .cloned();
    let net = world.get_resource::<crate::network::Network>().cloned();
    for (group, info) in ctx.scenario.cluster.groups.iter().zip(&set_up.0) {
        let timing = group.scaling.as_ref().map(|s| {
            // One GPU's share of the weights over the load bandwidth.
            let derived = info.resolved.model.as_ref().map_or(0.0, |m| {
                crate::model::load_s(m, crate::model::Replica::of(group), s.load_gb_per_s)
            });
            Timing {
                min: s.min,
                max: s.max,
                interval: s.interval_s.map(SimDuration::from_secs_f64),
                provision: SimDuration::from_secs_f64(s.provision_s),
                load: SimDuration::from_secs_f64(s.load_s.unwrap_or(derived)),
                warmup: SimDuration::from_secs_f64(s.warmup_s),
                warmup_speed: s.warmup_speed,
                routable_during_warmup: s.routable_during_warmup,
                up_cooldown: SimDuration::from_secs_f64(s.scale_up_cooldown_s),
                down_cooldown: SimDuration::from_secs_f64(s.scale_down_cooldown_s),
            }
        });
        let recipe =
            crate::instance::spawn::kv_recipe(group, &info.resolved, store.as_ref(), net.as_ref());
        // With a topology a derived load crosses the fabric (and waits for what is on it).
        let weights = match (&net, &group.scaling, &info.resolved.model) {
            (Some(net), Some(s), Some(m)) if s.load_s.is_none() => Some((net, s, m)),
            _ => None,
        };
        for i in info.instances() {
            let on = i - info.first < group.count;
            let gpus = group.gpus();
            world.entity_mut(index[i as usize]).insert(Power {
                phase: if on { Phase::Serving } else { Phase::Off },
                phase_end: None,
                on_since: on.then_some(SimTime::ZERO),
                kv: recipe.clone(),
                weights: weights.map(|(net, s, m)| {
                    let bytes = crate::model::weight_memory_bytes(m);
                    net.weight_load(i, bytes, s.load_gb_per_s, gpus)
                }),
            });
        }
        scaler.groups.push(GroupScaling {
            name: info.name.clone(),
            timing,
            next_eval: timing.and_then(|t| match t.interval {
                Some(i) => Some(SimTime::ZERO + i),
                None => first_policy_tick,
            }),
            instances: info.instances().collect(),
            gpus_per_instance: group.gpus(),
            cost_per_gpu_hour: group.cost_per_gpu_hour,
            on: group.count,
            peak: group.count,
            ..Default::default()
        });
    }
    let mut firsts: Vec<SimTime> = scaler.groups.iter().filter_map(|g| g.next_eval).collect();
    firsts.sort_unstable();
    firsts.dedup();
    let mut queue = world.resource_mut::<EventQueue>();
    for t in firsts {
        queue.push(t, Event::AutoscaleTick);
    }
    world.insert_resource(scaler);
    if autoscaled {
        app.add_systems(
            crate::engine::SimStep,
            (
                advance_phases
                    .in_set(crate::engine::SimSystems::Advance)
                    .after(crate::instance::InstanceSystems::Retire),
                sample_latencies
                    .in_set(crate::engine::SimSystems::Record)
                    .before(crate::metrics::MetricsSystems::Record),
                stop_on_event_write_error
                    .in_set(crate::engine::SimSystems::Record)
                    .after(crate::metrics::MetricsSystems::Record),
            ),
        );
    }
    Ok(())
}

/// Stops the run at the first failed write of `scale_events.csv`.
pub fn stop_on_event_write_error(
    scaler: Res<Autoscaler>,
    clock: Res<SimClock>,
    mut fault: ResMut<SimFault>,
) {
    if let Some(e) = &scaler.write_error {
        fault.0.get_or_insert_with(|| crate::engine::Fault::Write {
            file: "scale_events.csv",
            at: clock.now,
            error: e.clone(),
        });
    }
}

/// Closes the accounting at `end` (the end of the run).
pub fn close_accounts(scaler: &mut Autoscaler, end: SimTime) {
    for g in &mut scaler.groups {
        g.advance(end);
    }
}
