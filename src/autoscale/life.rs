//! The life of an instance: entering a phase, timed phases ending, drains finishing,
//! cold starts.

use bevy_ecs::prelude::*;

use crate::engine::Parked;
use crate::engine::{ClusterView, Event, EventQueue, RouteDue, ScaleDue, SimClock};
use crate::instance::{Instance, InstanceIndex, Scheduler, refresh_view};
use crate::kv::KvCache;
use crate::time::SimTime;

use super::{Autoscaler, Ctx, GroupScaling, Phase, Power, Timing};

/// Moves an instance to `phase` (timed phases schedule their end) and keeps the view.
pub(super) fn enter(c: &mut Ctx<'_>, t: &Timing, phase: Phase, queue: &mut EventQueue, i: u32) {
    let now = c.now;
    if c.power.phase == Phase::Off && phase != Phase::Off {
        c.power.on_since = Some(now);
        c.sched.down = false; // started again after a crash (faults)
        if let Some(lora) = c.sched.lora.as_mut() {
            lora.clear(); // host and GPU memory start empty
        }
        let events = c.kv.records_events();
        *c.kv = c.power.kv.build(i);
        c.kv.record_events(events);
    }
    c.power.phase = phase;
    c.power.phase_end = None;
    let timer = match phase {
        Phase::Provisioning => Some(t.provision),
        Phase::Loading => Some(match &c.power.weights {
            None => t.load,
            Some(w) => SimTime(w.done_us(now.as_us(), now.as_us())).since(now),
        }),
        Phase::WarmingUp => Some(t.warmup),
        _ => None,
    };
    if let Some(d) = timer {
        c.power.phase_end = Some(now + d);
        queue.push(now + d, Event::PhaseEnd { instance: i });
    }
    c.sched.unroutable =
        !(phase == Phase::Serving || (phase == Phase::WarmingUp && t.routable_during_warmup));
    c.sched.warmup_speed =
        (phase == Phase::WarmingUp && t.warmup_speed < 1.0).then_some(t.warmup_speed);
    if phase == Phase::Off {
        c.power.on_since = None;
        // Its KV cache is dropped (and its memory freed), blocks held for reads (P/D) too.
        c.sched.sent.clear();
        let events = c.kv.records_events();
        c.kv.note_cleared();
        let cleared: Vec<_> = c.kv.take_events().collect();
        *c.kv = KvCache::new(0, c.power.kv.block_size);
        c.kv.record_events(events);
        for (kind, block) in cleared {
            c.kv.note(kind, block);
        }
    }
}

pub(super) fn serving(
    world_sched: &Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    index: &InstanceIndex,
    group: &GroupScaling,
) -> u32 {
    group
        .instances
        .iter()
        .filter(|&&i| {
            world_sched
                .get(index.0[i as usize])
                .is_ok_and(|(p, s, _)| p.phase.ready() && !s.unroutable)
        })
        .count() as u32
}

/// Ends timed phases: loaded, warm. An instance that becomes routable releases the parked
/// requests to routing in this same tick.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn advance_phases(
    mut due: ResMut<ScaleDue>,
    mut route: ResMut<RouteDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut scaler: ResMut<Autoscaler>,
    mut parked: ResMut<Parked>,
    mut view: ResMut<ClusterView>,
    mut queue: ResMut<EventQueue>,
    mut instances: Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    groups: Query<&Instance>,
) {
    let now = clock.now;
    if std::mem::take(&mut due.unpark) {
        route.0.append(&mut parked.requests);
    }
    let ends = std::mem::take(&mut due.phase_ends);
    for &i in &ends {
        let e = index.0[i as usize];
        let g = groups.get(e).map_or(0, |x| x.group as usize);
        let Some(t) = scaler.groups[g].timing else {
            continue;
        };
        let (next, was_routable) = {
            let (power, sched, _) = instances.get(e).expect("instance exists");
            if power.phase_end != Some(now) {
                continue; // cancelled or superseded
            }
            let next = match power.phase {
                Phase::Provisioning => Phase::Loading,
                Phase::Loading if t.warmup.as_us() > 0 => Phase::WarmingUp,
                Phase::Loading | Phase::WarmingUp => Phase::Serving,
                _ => continue,
            };
            (next, !sched.unroutable)
        };
        {
            let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
            let mut c = Ctx {
                now,
                power: &mut power,
                sched: &mut sched,
                kv: &mut kv,
            };
            enter(&mut c, &t, next, &mut queue, i);
            refresh_view(&mut view, i, &sched, &kv);
        }
        let serving_now = serving(&instances, &index, &scaler.groups[g]);
        scaler.log(now, g, i, next.name(), "", f64::NAN, serving_now);
        let routable = !instances.get(e).expect("instance exists").1.unroutable;
        if routable && !was_routable && !parked.requests.is_empty() {
            route.0.append(&mut parked.requests);
        }
    }
    let mut ends = ends;
    ends.clear();
    due.phase_ends = ends;
    finish_drains(now, &index, &mut scaler, &view, &mut instances, &groups);
}

/// Turns off draining instances with nothing left on them or headed to them.
pub(super) fn finish_drains(
    now: SimTime,
    index: &InstanceIndex,
    scaler: &mut Autoscaler,
    view: &ClusterView,
    instances: &mut Query<(&mut Power, &mut Scheduler, &mut KvCache)>,
    groups: &Query<&Instance>,
) {
    if scaler.draining.is_empty() {
        return;
    }
    let mut k = 0;
    while k < scaler.draining.len() {
        let i = scaler.draining[k];
        let e = index.0[i as usize];
        let done = {
            let (_, s, _) = instances.get(e).expect("instance exists");
            s.resident() == 0
                && s.outbound == 0
                && s.in_flight.is_empty()
                && s.step_end.is_none()
                && view.instances[i as usize].in_flight == 0
        };
        if !done {
            k += 1;
            continue;
        }
        scaler.draining.swap_remove(k);
        let g = groups.get(e).map_or(0, |x| x.group as usize);
        let t = scaler.groups[g]
            .timing
            .expect("only autoscaled groups drain");
        {
            let (mut power, mut sched, mut kv) = instances.get_mut(e).expect("instance exists");
            let mut c = Ctx {
                now,
                power: &mut power,
                sched: &mut sched,
                kv: &mut kv,
            };
            let mut q = EventQueue::default();
            enter(&mut c, &t, Phase::Off, &mut q, i);
        }
        let on = scaler.groups[g].on - 1;
        scaler.groups[g].set_on(now, on);
        let serving_now = serving(instances, index, &scaler.groups[g]);
        scaler.log(now, g, i, "off", "drained", f64::NAN, serving_now);
    }
}

/// A crash (faults) of instance `i` of an autoscaled group, its requests already taken
/// down: the instance is off at once, as a lost replica is, and the group's policy decides
/// at its next evaluation whether to start another (`scale_events.csv`: `off`, `crashed`).
/// False (nothing done) when `i`'s group does not autoscale.
pub fn crash_off(world: &mut World, i: u32, now: SimTime) -> bool {
    let e = world.resource::<InstanceIndex>().0[i as usize];
    let g = world.get::<Instance>(e).map_or(0, |x| x.group as usize);
    world.resource_scope(|world, mut scaler: Mut<Autoscaler>| {
        let Some(t) = scaler.groups.get(g).and_then(|x| x.timing) else {
            return false;
        };
        scaler.draining.retain(|&d| d != i);
        let mut instances = world.query::<(&mut Power, &mut Scheduler, &mut KvCache)>();
        let (mut power, mut sched, mut kv) = instances
            .get_mut(world, e)
            .expect("an instance has a life cycle, a scheduler and a KV cache");
        let counted = power.phase.counted();
        let mut c = Ctx {
            now,
            power: &mut power,
            sched: &mut sched,
            kv: &mut kv,
        };
        enter(&mut c, &t, Phase::Off, &mut EventQueue::default(), i);
        if counted {
            let on = scaler.groups[g].on - 1;
            scaler.groups[g].set_on(now, on);
        }
        let serving_now = scaler.groups[g]
            .instances
            .iter()
            .filter(|&&k| {
                let e = world.resource::<InstanceIndex>().0[k as usize];
                world.get::<Power>(e).is_some_and(|p| p.phase.ready())
                    && world.get::<Scheduler>(e).is_some_and(|s| !s.unroutable)
            })
            .count() as u32;
        scaler.log(now, g, i, "off", "crashed", f64::NAN, serving_now);
        true
    })
}
