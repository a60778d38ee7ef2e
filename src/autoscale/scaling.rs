//! The scaling stage: the groups' signals, the policy's targets, applied within bounds
//! and cooldowns.

use bevy_ecs::prelude::*;

use crate::engine::Parked;
use crate::engine::{ClusterView, Event, EventQueue, RecordDue, ScaleDue, SimClock};
use crate::instance::{Instance, InstanceIndex, Scheduler, refresh_view};
use crate::kv::KvCache;
use crate::policy::{Active, GroupSignals, ScaleTarget, family};
use crate::time::{SimDuration, SimTime};

use super::{
    Autoscaler, Ctx, Phase, Power,
    life::{enter, finish_drains, serving},
};

/// Collects the windowed latency samples of autoscaled groups (before Record despawns).
pub fn sample_latencies(
    due: Res<RecordDue>,
    mut scaler: ResMut<Autoscaler>,
    groups: Query<&Instance>,
    index: Res<InstanceIndex>,
) {
    if !scaler.active {
        return;
    }
    for f in &due.0 {
        let (Some(i), Some(ttft)) = (f.instance, f.ttft) else {
            continue;
        };
        let g = groups
            .get(index.0[i as usize])
            .map_or(0, |x| x.group as usize);
        let group = &mut scaler.groups[g];
        if group.timing.is_none() {
            continue;
        }
        group.ttft_window.push(ttft.as_us());
        if f.itl_count > 0 {
            group
                .itl_window
                .push(f.itl_sum.as_us() as f64 / f64::from(f.itl_count));
        }
    }
}

fn p90_ms(samples: &mut [f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    // Nearest rank.
    let rank = ((0.9 * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    Some(samples[rank - 1] / 1e3)
}

/// Evaluates the scaling policy (at its times) and starts cold starts for parked requests.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn evaluate_scaling(
    mut due: ResMut<ScaleDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut policy: ResMut<Active<family::Autoscale>>,
    mut scaler: ResMut<Autoscaler>,
    parked: Res<Parked>,
    mut view: ResMut<ClusterView>,
    mut queue: ResMut<EventQueue>,
    mut instances: Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    groups: Query<&Instance>,
    mut anomalies: ResMut<crate::instance::AnomalyLog>,
) {
    let now = clock.now;
    let scaler = &mut *scaler;
    let mut cold = std::mem::take(&mut due.cold_start);
    if std::mem::take(&mut due.evaluate) {
        // A scale-down may cancel the instance parked requests wait for (`scheduled` to 0):
        // then a cold start serves them, as when they were parked.
        cold = true;
        // The groups due now (each has its own schedule: its interval or the policy's).
        let due_groups: Vec<usize> = (0..scaler.groups.len())
            .filter(|&g| scaler.groups[g].next_eval.is_some_and(|t| t <= now))
            .collect();
        let signals = signals(now, scaler, &due_groups, &parked, &view, &index, &instances);
        let targets = if signals.is_empty() {
            Vec::new()
        } else {
            policy.0.evaluate(now, &signals)
        };
        for t in targets {
            apply(
                now,
                t,
                scaler,
                &index,
                &mut view,
                &mut queue,
                &mut instances,
                false,
            );
        }
        // Evaluations go on while there is work: requests waiting for an instance, or an
        // event other than life-cycle timers. A cluster with nothing left to serve stops
        // evaluating instead of ticking through a long provisioning delay.
        let more = !parked.requests.is_empty()
            || queue.any(|e| !matches!(e, Event::PhaseEnd { .. } | Event::AutoscaleTick));
        for &g in &due_groups {
            let group = &mut scaler.groups[g];
            group.window_start = now;
            let next = match group.timing.and_then(|t| t.interval) {
                Some(i) => Some(now + i),
                None => policy.0.next_evaluation(now, false),
            };
            group.next_eval = next.filter(|&t| t > now && more);
            if let Some(t) = group.next_eval {
                queue.push(t, Event::AutoscaleTick);
            }
        }
    }
    if cold && !parked.requests.is_empty() {
        cold_start(now, scaler, &index, &mut view, &mut queue, &mut instances);
    }
    finish_drains(now, &index, scaler, &view, &mut instances, &groups);
    if let Some(rows) = &mut scaler.anomaly_rows {
        anomalies.0.append(rows);
    }
}

/// What the policy sees of each autoscaled group.
fn signals(
    now: SimTime,
    scaler: &mut Autoscaler,
    due: &[usize],
    parked: &Parked,
    view: &ClusterView,
    index: &InstanceIndex,
    instances: &Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
) -> Vec<GroupSignals> {
    let parked_n = parked.requests.len() as f64;
    let mut out = Vec::new();
    for &g in due {
        let group = &mut scaler.groups[g];
        let Some(t) = group.timing else { continue };
        let window = now.since(group.window_start).as_us() as f64;
        let (mut current, mut ready, mut busy) = (0u32, 0u32, SimDuration::ZERO);
        let (mut queued, mut resident, mut used, mut total) = (0u64, 0u64, 0u64, 0u64);
        for &i in &group.instances {
            let (p, s, kv) = instances.get(index.0[i as usize]).expect("instance exists");
            busy += s.counters.busy;
            current += u32::from(p.phase.counted());
            if p.phase.ready() {
                ready += 1;
                let transit = u64::from(view.instances[i as usize].in_flight);
                queued += s.waiting.len() as u64 + transit;
                resident += s.resident() as u64 + transit;
                used += u64::from(kv.allocated_blocks());
                total += u64::from(kv.total_blocks());
            }
        }
        let per = |x: f64| x / f64::from(ready.max(1));
        let utilization = if ready == 0 || window == 0.0 {
            0.0
        } else {
            busy.as_us().saturating_sub(group.busy_mark.as_us()) as f64
                / (f64::from(ready) * window)
        };
        group.busy_mark = busy;
        let mut ttft: Vec<f64> = group.ttft_window.drain(..).map(|x| x as f64).collect();
        let mut itl = std::mem::take(&mut group.itl_window);
        out.push(GroupSignals {
            group: g as u32,
            current,
            ready,
            min: t.min,
            max: t.max,
            instance_cost_per_hour: f64::from(group.gpus_per_instance) * group.cost_per_gpu_hour,
            utilization,
            queue_per_instance: per(queued as f64 + parked_n),
            kv_usage: if total == 0 {
                0.0
            } else {
                used as f64 / total as f64
            },
            in_flight_per_instance: per(resident as f64 + parked_n),
            ttft_p90_ms: p90_ms(&mut ttft),
            itl_p90_ms: p90_ms(&mut itl),
        });
    }
    out
}

/// Moves group `t.group` toward `t.desired` (clamped to its bounds, within cooldowns).
#[expect(clippy::too_many_arguments, reason = "the scaling state it changes")]
fn apply(
    now: SimTime,
    target: ScaleTarget,
    scaler: &mut Autoscaler,
    index: &InstanceIndex,
    view: &mut ClusterView,
    queue: &mut EventQueue,
    instances: &mut Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    cold: bool,
) {
    let g = target.group as usize;
    let Some(t) = scaler.groups.get(g).and_then(|x| x.timing) else {
        return;
    };
    let desired = target.desired.clamp(t.min, t.max);
    let phase_of = |instances: &Query<(&mut Power, &mut Scheduler, &mut KvCache)>, i: u32| {
        instances
            .get(index.0[i as usize])
            .map(|(p, _, _)| p.phase)
            .expect("instance exists")
    };
    let members = scaler.groups[g].instances.clone();
    let current = members
        .iter()
        .filter(|&&i| phase_of(instances, i).counted())
        .count() as u32;
    let group = &scaler.groups[g];
    if desired > current {
        if !cold && group.last_up.is_some_and(|u| now < u + t.up_cooldown) {
            return;
        }
        let mut need = desired - current;
        // Take back draining instances first (the model is still loaded), then start off ones.
        for pass in [Phase::Draining, Phase::Off] {
            for &i in &members {
                if need == 0 || phase_of(instances, i) != pass {
                    continue;
                }
                let e = index.0[i as usize];
                let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
                let mut c = Ctx {
                    now,
                    power: &mut power,
                    sched: &mut sched,
                    kv: &mut kv,
                };
                let (phase, event) = if pass == Phase::Draining {
                    scaler.draining.retain(|&d| d != i);
                    // Routable again at once: parked requests may go to it.
                    queue.push(now, Event::Unpark);
                    (Phase::Serving, "undrain")
                } else {
                    (Phase::Provisioning, "provisioning")
                };
                enter(&mut c, &t, phase, queue, i);
                refresh_view(view, i, &sched, &kv);
                need -= 1;
                let group = &mut scaler.groups[g];
                if pass == Phase::Off {
                    let on = group.on + 1;
                    group.set_on(now, on);
                }
                group.scale_ups += 1;
                group.cold_starts += u64::from(cold);
                let serving_now = serving(instances, index, &scaler.groups[g]);
                scaler.log(now, g, i, event, target.reason, target.signal, serving_now);
            }
        }
        if need < desired - current {
            moved(scaler, g, true, now, &t);
        }
        let group = &mut scaler.groups[g];
        group.last_up = Some(now);
        group.last_action = Some(now);
    } else if desired < current {
        if group.last_action.is_some_and(|a| now < a + t.down_cooldown) {
            return;
        }
        let mut cut = current - desired;
        // Cancel starting instances first (newest start first), then drain the serving
        // ones with the least work (ties: highest index). A step still in flight, or a
        // hand-off's KV still being sent (P/D), is work: the instance drains until it ends
        // (its requests may all have left, timed out, while it ran).
        let mut order: Vec<(u8, u64, u32)> = members
            .iter()
            .filter_map(|&i| {
                let (p, s, _) = instances.get(index.0[i as usize]).ok()?;
                let busy = !s.in_flight.is_empty() || s.step_end.is_some() || s.outbound > 0;
                let load = s.resident() as u64
                    + u64::from(view.instances[i as usize].in_flight)
                    + u64::from(busy);
                match p.phase {
                    ph if ph.starting() && load == 0 => {
                        Some((0, u64::MAX - p.on_since.map_or(0, |x| x.as_us()), i))
                    }
                    ph if ph.counted() => Some((1, load, i)),
                    _ => None,
                }
            })
            .collect();
        order.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(b.2.cmp(&a.2)));
        for (kind, load, i) in order {
            if cut == 0 {
                break;
            }
            let e = index.0[i as usize];
            let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
            let mut c = Ctx {
                now,
                power: &mut power,
                sched: &mut sched,
                kv: &mut kv,
            };
            let (phase, event) = if kind == 0 || load == 0 {
                (Phase::Off, if kind == 0 { "cancelled" } else { "off" })
            } else {
                (Phase::Draining, "draining")
            };
            enter(&mut c, &t, phase, queue, i);
            refresh_view(view, i, &sched, &kv);
            cut -= 1;
            if phase == Phase::Draining {
                scaler.draining.push(i);
            }
            let group = &mut scaler.groups[g];
            if phase == Phase::Off {
                let on = group.on - 1;
                group.set_on(now, on);
            }
            group.scale_downs += 1;
            let serving_now = serving(instances, index, &scaler.groups[g]);
            scaler.log(now, g, i, event, target.reason, target.signal, serving_now);
        }
        if cut < current - desired {
            moved(scaler, g, false, now, &t);
        }
        scaler.groups[g].last_action = Some(now);
    }
}

/// Records a scaling action of group `g` (`up` or down) at `now`: opposite to the group's
/// previous action and within the larger of its cooldowns of it, a scale oscillation.
fn moved(scaler: &mut Autoscaler, g: usize, up: bool, now: SimTime, t: &super::Timing) {
    let window = t.up_cooldown.max(t.down_cooldown);
    let group = &mut scaler.groups[g];
    if let Some((was_up, at)) = group.last_move
        && was_up != up
        && now.since(at) <= window
    {
        group.oscillations += 1;
        if let Some(rows) = &mut scaler.anomaly_rows {
            let word = |u: bool| if u { "up" } else { "down" };
            rows.push(crate::instance::AnomalyRow {
                time: now,
                kind: "scale_oscillation",
                request: None,
                detail: format!(
                    "group {} scaled {} {:.3} s after scaling {} (cooldowns: up {:.3} s, down {:.3} s)",
                    group.name,
                    word(up),
                    now.since(at).as_secs_f64(),
                    word(was_up),
                    t.up_cooldown.as_secs_f64(),
                    t.down_cooldown.as_secs_f64()
                ),
            });
        }
    }
    group.last_move = Some((up, now));
}

/// Parked requests and nothing on its way: start one instance in the cheapest autoscaled
/// group with room.
fn cold_start(
    now: SimTime,
    scaler: &mut Autoscaler,
    index: &InstanceIndex,
    view: &mut ClusterView,
    queue: &mut EventQueue,
    instances: &mut Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
) {
    let coming = scaler.groups.iter().any(|g| {
        g.timing.is_some()
            && g.instances.iter().any(|&i| {
                instances
                    .get(index.0[i as usize])
                    .is_ok_and(|(p, s, _)| p.phase.starting() || (p.phase.ready() && !s.unroutable))
            })
    });
    if coming {
        return;
    }
    let pick = scaler
        .groups
        .iter()
        .enumerate()
        .filter_map(|(g, x)| {
            let t = x.timing?;
            let on = x
                .instances
                .iter()
                .filter(|&&i| {
                    instances
                        .get(index.0[i as usize])
                        .is_ok_and(|(p, _, _)| p.phase.counted())
                })
                .count() as u32;
            (on < t.max).then_some((f64::from(x.gpus_per_instance) * x.cost_per_gpu_hour, g, on))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if let Some((_, g, on)) = pick {
        let target = ScaleTarget {
            group: g as u32,
            desired: on + 1,
            reason: "cold_start",
            signal: f64::NAN,
        };
        apply(now, target, scaler, index, view, queue, instances, true);
    }
}
