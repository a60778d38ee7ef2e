//! The gateway plugin: with the scenario's `flow_control`, the gateway resource, its two
//! systems ([`run_gateway`] in [`SimSystems::Gate`], [`wake_gateway`] at the end of a
//! tick) and the summary's `flow_control` part; nothing at all otherwise.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use super::{Gateway, saturated};
use crate::cluster::{Dispatch, Router, RouterSnapshots};
use crate::engine::{ClusterView, EnqueueDue, Event, EventQueue, GateDue, SimClock, SimFault};
use crate::engine::{SimStep, SimSystems};
use crate::metrics::{BandSummary, FlowControlSummary, Summary, SummaryAppExt};
use crate::request::{Lifecycle, RequestSpec};
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError};

/// Puts the gateway between admission and routing when the scenario has `flow_control`.
/// Its systems are added only then, so a scenario without it runs exactly as before (fast
/// ticks included); with it every tick runs the full [`SimStep`].
pub struct FlowControlPlugin;

impl Plugin for FlowControlPlugin {
    fn build(&self, app: &mut App) {
        app.add_setup(SetupStage::Policies, set_up_gateway)
            .add_summary_part(summarize);
    }
}

/// `SetupStage::Policies`: the gateway and its systems, when the scenario asks for one.
fn set_up_gateway(app: &mut App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let Some(spec) = &ctx.scenario.flow_control else {
        return Ok(());
    };
    app.insert_resource(Gateway::new(spec));
    app.world_mut().resource_mut::<GateDue>().on = true;
    app.add_systems(
        SimStep,
        (
            run_gateway
                .in_set(SimSystems::Gate)
                .run_if(gateway_has_work),
            wake_gateway
                .after(SimSystems::Autoscale)
                .before(SimSystems::Observe)
                .run_if(|g: Res<Gateway>| g.waiting > 0),
        ),
    );
    Ok(())
}

/// The Gate stage has work: requests admitted now, a wake-up, or a client giving up on a
/// request that may be waiting in a band.
fn gateway_has_work(due: Res<GateDue>, gateway: Res<Gateway>, enqueue: Res<EnqueueDue>) -> bool {
    due.wake || !due.admitted.is_empty() || (gateway.waiting > 0 && !enqueue.timeouts.is_empty())
}

/// The Gate stage: admitted requests join their bands (or are shed when full), requests
/// whose client gave up leave them (the Enqueue stage records them), those that waited
/// their band's `max_wait_s` are shed, and while the instances are not saturated the head
/// of the highest non-empty band is routed.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn run_gateway(
    mut gateway: ResMut<Gateway>,
    mut due: ResMut<GateDue>,
    clock: Res<SimClock>,
    mut view: ResMut<ClusterView>,
    mut router: Router,
    mut dispatch: Dispatch,
    mut fault: ResMut<SimFault>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
) {
    let now = clock.now;
    let g = &mut *gateway;
    let mut work = std::mem::take(&mut due.admitted);
    for &entity in &work {
        let Ok((spec, life)) = requests.get(entity) else {
            continue; // timed out before it got here
        };
        let k = g.band_of(spec.priority);
        g.bands[k].arrived += 1;
        if let Some(reason) = g.full(k) {
            g.bands[k].shed_full += 1;
            dispatch.shed(entity, spec, life, reason);
            continue;
        }
        let band = &mut g.bands[k];
        band.queue.push_back((entity, now));
        band.peak_waiting = band.peak_waiting.max(band.queue.len() as u64);
        g.waiting += 1;
    }
    work.clear();
    due.admitted = work;

    // Clients that gave up on a waiting request: it leaves its band.
    if g.waiting > 0 {
        for &entity in dispatch.timeouts() {
            for band in &mut g.bands {
                if let Some(pos) = band.queue.iter().position(|&(e, _)| e == entity) {
                    band.queue.remove(pos);
                    band.timed_out += 1;
                    g.waiting -= 1;
                    break;
                }
            }
        }
    }

    // Requests that waited their band's longest wait are shed (FCFS: the oldest first).
    for band in &mut g.bands {
        let Some(wait) = band.max_wait else { continue };
        while let Some(&(entity, joined)) = band.queue.front() {
            if joined + wait > now {
                break;
            }
            band.queue.pop_front();
            band.shed_expired += 1;
            g.waiting -= 1;
            if let Ok((spec, life)) = requests.get(entity) {
                dispatch.shed(entity, spec, life, "gateway_wait_expired");
            }
        }
    }

    // Dispatch while some routable instance has room.
    let mut routed = 0u64;
    // With nothing routable, requests wait here unless routing parks them for a cold start.
    let hold_when_none = !router.parks();
    while g.waiting > 0 && !saturated(&g.saturation, router.sees(now, &view), hold_when_none) {
        let band = g
            .bands
            .iter_mut()
            .find(|b| !b.queue.is_empty())
            .expect("a request is waiting");
        let (entity, joined) = band.queue.pop_front().expect("the band is not empty");
        band.dispatched += 1;
        band.wait.record(now.since(joined).as_us());
        g.waiting -= 1;
        routed += 1;
        if let Ok((spec, mut life)) = requests.get_mut(entity) {
            dispatch.route(&mut router, entity, spec, &mut life, now, &mut view);
        }
    }
    g.account(now);
    // One wake-up pending at the earliest longest wait of a band's head (FCFS: a band's
    // head ends its wait first). One left by a head routed since fires to no effect.
    if g.deadline.is_some_and(|d| d <= now) {
        g.deadline = None;
    }
    let earliest = g
        .bands
        .iter()
        .filter_map(|b| Some(b.queue.front()?.1 + b.max_wait?))
        .min();
    if let Some(t) = earliest
        && g.deadline.is_none_or(|d| t < d)
        && t <= crate::engine::MAX_SIM_TIME
    {
        dispatch.push_event(t, Event::GateWake);
        g.deadline = Some(t);
    }
    if std::mem::take(&mut due.wake) {
        g.wake_pending = false;
        // A wake-up that routed nothing does not wake the gateway again at this time.
        g.idle_wake = (routed == 0).then_some(now);
    }
    router.check_log(now, &mut fault);
}

/// At the end of a tick: if requests wait and the instances now have room (a step ended,
/// a batch took waiting requests, an instance became routable), the gateway wakes at this
/// same time to route them.
pub fn wake_gateway(
    mut gateway: ResMut<Gateway>,
    clock: Res<SimClock>,
    view: Res<ClusterView>,
    snapshots: Res<RouterSnapshots>,
    disagg: Res<crate::disagg::Disagg>,
    parked: Res<crate::engine::Parked>,
    mut queue: ResMut<EventQueue>,
) {
    let now = clock.now;
    if gateway.wake_pending || gateway.idle_wake == Some(now) {
        return;
    }
    if !saturated(
        &gateway.saturation,
        snapshots.sees(now, &view.instances, &disagg),
        !parked.enabled,
    ) {
        queue.push(now, Event::GateWake);
        gateway.wake_pending = true;
    }
}

/// The gateway's part of the summary (only with `flow_control`).
fn summarize(world: &mut World, summary: &mut Summary) {
    let Some(g) = world.get_resource::<Gateway>() else {
        return;
    };
    let now = world.resource::<SimClock>().now;
    summary.flow_control = Some(FlowControlSummary {
        queue_depth: g.saturation.queue_depth,
        kv_util: g.saturation.kv_util,
        bands: g
            .bands
            .iter()
            .map(|b| BandSummary {
                priority: b.priority,
                arrived: b.arrived,
                shed_full: b.shed_full,
                dispatched: b.dispatched,
                shed_expired: b.shed_expired,
                timed_out: b.timed_out,
                left: b.queue.len() as u64,
                peak_waiting: b.peak_waiting,
                wait_ms: b.wait.summarize_ms(),
            })
            .collect(),
        waiting_s: g.waited_until(now).as_us() as f64 / 1e6,
    });
}
