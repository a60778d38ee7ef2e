//! The energy plugin: a meter on every instance when the scenario has `energy`, the
//! scenario's checks, and the summary's `energy` part.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use super::{EnergySummary, GroupEnergy, Meter, PowerFigures};
use crate::instance::{InstanceIndex, Scheduler, spawn::Groups};
use crate::metrics::{Summary, SummaryAppExt};
use crate::scenario::{InstanceGroup, Problem, Scenario};
use crate::setup::{ResolvedGroup, SetupAppExt, SetupCtx, SetupStage, SimError};

/// Meters the instances' steps when the scenario has `energy` (nothing otherwise) and adds
/// `energy` to the summary. Registered after the autoscaling plugin: the idle energy is
/// the GPU time its accounts count on, less the busy time.
pub struct EnergyPlugin;

impl Plugin for EnergyPlugin {
    fn build(&self, app: &mut App) {
        app.add_setup(SetupStage::Instances, attach_meters)
            .add_summary_part(summarize);
    }
}

/// The power figures an instance of `group` uses: the group's, else its GPU's.
pub fn power_of(group: &InstanceGroup, resolved: &ResolvedGroup) -> Option<PowerFigures> {
    group
        .power
        .or_else(|| resolved.gpu.as_ref().and_then(|g| g.power))
}

/// Checks the `energy` block and each group's `power` (a group's `power` without `energy` is
/// an error: it would be ignored). [`check_group`] checks what a resolved group needs.
pub fn check(p: &mut Vec<Problem>, s: &Scenario) {
    for (i, g) in s.cluster.groups.iter().enumerate() {
        if let Some(power) = &g.power {
            for (field, message) in power.problems() {
                p.push(Problem::new(at(i, &format!("power.{field}")), message));
            }
            if s.energy.is_none() {
                p.push(
                    Problem::new(
                        at(i, "power"),
                        "is set but the scenario has no energy block",
                    )
                    .hint("add `energy: ()` at the top level to meter energy, or remove power"),
                );
            }
        }
    }
    let Some(e) = &s.energy else {
        return;
    };
    if !(e.pue.is_finite() && (1.0..=10.0).contains(&e.pue)) {
        p.push(
            Problem::new(
                "energy.pue",
                format!(
                    "must be a number within 1..=10, got {}",
                    crate::scenario::readable(e.pue)
                ),
            )
            .hint("1.0 counts the GPUs alone; data centres report 1.1–1.6"),
        );
    }
    if !(e.price_per_kwh.is_finite()
        && (0.0..=crate::scenario::MAX_PRICE).contains(&e.price_per_kwh))
    {
        p.push(Problem::new(
            "energy.price_per_kwh",
            format!(
                "must be a number within 0..=10⁶ (as cost_per_gpu_hour), got {}",
                crate::scenario::readable(e.price_per_kwh)
            ),
        ));
    }
}

fn at(i: usize, field: &str) -> String {
    format!("cluster.groups[{i}].{field}")
}

/// With `energy`, group `i` (resolved as `r`) can be metered: it has a model, a GPU and
/// power figures.
pub fn check_group(p: &mut Vec<Problem>, s: &Scenario, i: usize, r: &ResolvedGroup) {
    if s.energy.is_none() {
        return;
    }
    let g = &s.cluster.groups[i];
    let hint = "energy meters a step from the model's FLOPs and KV reads on the GPU's peaks: \
                give the group a model and a gpu";
    if r.model.is_none() {
        p.push(Problem::new(at(i, "model"), "energy needs the group's model").hint(hint));
    }
    match &r.gpu {
        None => p.push(Problem::new(at(i, "gpu"), "energy needs the group's GPU").hint(hint)),
        Some(gpu) if power_of(g, r).is_none() => p.push(
            Problem::new(at(i, "power"), format!("GPU {} has no power figures", gpu.id)).hint(
                "give the group power: (idle_w: …, floor_w: …, max_w: …), or the GPU file a power block",
            ),
        ),
        Some(_) => {}
    }
}

/// `SetupStage::Instances` (after the instances are spawned): a meter on each instance.
fn attach_meters(app: &mut App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    if ctx.scenario.energy.is_none() {
        return Ok(());
    }
    let world = app.world_mut();
    let groups = world.resource::<Groups>().0.clone();
    let index = world.resource::<InstanceIndex>().0.clone();
    for (g, info) in groups.iter().enumerate() {
        let group = &ctx.scenario.cluster.groups[g];
        let r = &info.resolved;
        let (Some(model), Some(gpu), Some(power)) = (&r.model, &r.gpu, power_of(group, r)) else {
            return Err(SimError::Internal {
                what: "energy",
                message: format!(
                    "group {} passed validation without a model, GPU or power",
                    info.name
                ),
            });
        };
        let meter = Meter::new(
            power,
            model,
            gpu,
            group.tp * group.dp(),
            r.kv_bytes_per_token,
        );
        for i in info.instances() {
            let mut sched = world
                .get_mut::<Scheduler>(index[i as usize])
                .expect("instance has a scheduler");
            sched.energy = Some(Box::new(meter.clone()));
        }
    }
    Ok(())
}

const J_PER_KWH: f64 = 3.6e6;

/// The summary's `energy` part (when the scenario has `energy`).
fn summarize(world: &mut World, summary: &mut Summary) {
    let Some(spec) = world.resource::<Scenario>().energy.clone() else {
        return;
    };
    let groups = world.resource::<Groups>().0.clone();
    let index = world.resource::<InstanceIndex>().0.clone();
    let duration_s = summary.sim_duration_s;
    let mut out = EnergySummary {
        pue: spec.pue,
        ..Default::default()
    };
    for (g, info) in groups.iter().enumerate() {
        let (mut step_j, mut busy, mut used) = (0.0, 0.0, 0.0);
        let mut power = None;
        for i in info.instances() {
            let sched = world
                .get::<Scheduler>(index[i as usize])
                .expect("instance has a scheduler");
            if let Some(m) = &sched.energy {
                step_j += m.step_j;
                busy += m.busy_gpu_s;
                used += m.utilisation_gpu_s;
                power = Some(m.power);
            }
        }
        // GPU time on (the autoscaling accounts), less the time in steps. The group's own
        // figure is reported as it is (a round trip through seconds would move its last bit).
        let on_h = summary.groups.get(g).map_or(0.0, |u| u.gpu_hours);
        let on_s = on_h * 3600.0;
        let idle_j = power.map_or(0.0, |p| p.idle_w * (on_s - busy).max(0.0));
        let gpu_j = step_j + idle_j;
        out.groups.push(GroupEnergy {
            group: info.name.clone(),
            power,
            step_kwh: step_j / J_PER_KWH,
            idle_kwh: idle_j / J_PER_KWH,
            gpu_kwh: gpu_j / J_PER_KWH,
            mean_power_w: if duration_s > 0.0 {
                gpu_j / duration_s
            } else {
                0.0
            },
            mean_utilisation: if busy > 0.0 { used / busy } else { 0.0 },
            busy_gpu_hours: busy / 3600.0,
            gpu_hours: on_h,
        });
        out.step_kwh += step_j / J_PER_KWH;
        out.idle_kwh += idle_j / J_PER_KWH;
    }
    out.gpu_kwh = out.step_kwh + out.idle_kwh;
    out.facility_kwh = out.gpu_kwh * spec.pue;
    out.mean_power_w = if duration_s > 0.0 {
        out.gpu_kwh * J_PER_KWH / duration_s
    } else {
        0.0
    };
    let facility_j = out.facility_kwh * J_PER_KWH;
    let tokens = summary.throughput.output_tokens;
    out.joules_per_output_token = (tokens > 0).then(|| facility_j / tokens as f64);
    let completed = summary.requests.completed;
    out.wh_per_request = (completed > 0).then(|| facility_j / 3600.0 / completed as f64);
    out.electricity_cost = out.facility_kwh * spec.price_per_kwh;
    summary.energy = Some(out);
}
