//! Autoscaling stage ([`SimSystems::Autoscale`]): on each periodic tick the scaling policy
//! looks at the cluster view and may change its size. The default `static` policy never
//! ticks, so the stage costs nothing.
//!
//! [`SimSystems::Autoscale`]: crate::SimSystems::Autoscale

use bevy_ecs::prelude::*;

use crate::engine::{ClusterView, Due, Event, EventQueue, SimClock};
use crate::policy::{ActiveScaling, ScaleDecision};

/// Evaluates the scaling policy and schedules its next tick.
pub fn evaluate_scaling(
    mut due: ResMut<Due>,
    clock: Res<SimClock>,
    view: Res<ClusterView>,
    mut policy: ResMut<ActiveScaling>,
    mut queue: ResMut<EventQueue>,
) {
    due.autoscale = false;
    match policy.0.evaluate(clock.now, &view.instances) {
        ScaleDecision::Hold => {}
    }
    if let Some(interval) = policy.0.interval()
        && !queue.is_empty()
    {
        queue.push(clock.now + interval, Event::AutoscaleTick);
    }
}
