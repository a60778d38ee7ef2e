//! Where a run stands, for the driver between ticks: too many requests in the system, or
//! nothing left to serve.

use bevy_ecs::prelude::*;

use super::Aggregates;
use crate::engine::{Event, EventQueue, Fault, Injected, Parked, SimClock};

/// A diagnosis when more requests are in the system than `limit` (`limits.max_in_flight`).
pub fn overloaded(world: &World, limit: u64) -> Option<Fault> {
    let injected = world.resource::<Injected>().0;
    let agg = world.resource::<Aggregates>();
    let in_flight = injected.saturating_sub(agg.ended());
    if in_flight <= limit {
        return None;
    }
    Some(Fault::Overloaded {
        in_flight,
        limit,
        at: world.resource::<SimClock>().now,
        injected,
        completed: agg.completed,
    })
}

/// True when no request is in the system or still to come and only life-cycle timers are
/// pending (provisioning, loading, warm-up, scaling evaluations, the gateway's wake-ups): the
/// run is over, rather than ticking on to a timer that serves no one.
pub fn nothing_left(world: &World) -> bool {
    let queue = world.resource::<EventQueue>();
    // Wake-ups of the gateway matter only while requests wait in it (not all ended); crashes
    // and restarts only while requests remain.
    if queue.any(|e| {
        !matches!(
            e,
            Event::PhaseEnd { .. }
                | Event::AutoscaleTick
                | Event::GateWake
                | Event::Crash { .. }
                | Event::Restart { .. }
        )
    }) {
        return false;
    }
    world.resource::<Injected>().0 == world.resource::<Aggregates>().ended()
        && world
            .get_resource::<Parked>()
            .is_none_or(|p| p.requests.is_empty())
}
