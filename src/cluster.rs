//! Cluster control stages: admission ([`SimSystems::Admit`]) and routing
//! ([`SimSystems::Route`]).
//!
//! Admission runs `admission_latency_us` after arrival; a rejected request ends here
//! (INV-1 bucket `rejected`). Routing picks an instance from the [`ClusterView`]; the
//! request then reaches the instance queue after the routing latency plus the instance
//! latency model's queueing delay (BLIS α0 + α1·input). While in transit it counts as
//! `in_flight` on its instance's snapshot (a router-owned signal, always fresh).
//!
//! [`SimSystems::Admit`]: crate::SimSystems::Admit
//! [`SimSystems::Route`]: crate::SimSystems::Route

use bevy_ecs::prelude::*;

use crate::engine::{ClusterView, Due, Event, EventQueue, SimClock};
use crate::instance::InstanceIndex;
use crate::latency::Latency;
use crate::policy::{ActiveAdmission, ActiveRouting, Admission};
use crate::request::{AssignedTo, FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::time::SimDuration;

/// Fixed delays of the control plane.
#[derive(Resource, Debug, Default, Clone, Copy)]
pub struct ClusterDelays {
    pub admission: SimDuration,
    pub routing: SimDuration,
}

/// Rejections by reason (sorted for output).
#[derive(Resource, Debug, Default, Clone)]
pub struct Rejections(pub std::collections::BTreeMap<&'static str, u64>);

/// Applies the admission policy to the requests due for it.
pub fn admit_requests(
    mut due: ResMut<Due>,
    clock: Res<SimClock>,
    view: Res<ClusterView>,
    mut policy: ResMut<ActiveAdmission>,
    mut rejections: ResMut<Rejections>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
) {
    let due = &mut *due;
    let mut work = std::mem::take(&mut due.admit);
    for &entity in &work {
        let Ok((spec, mut life)) = requests.get_mut(entity) else {
            continue; // timed out before admission
        };
        match policy.0.admit(spec, clock.now, &view.instances) {
            Admission::Admit => {
                life.admitted = Some(clock.now);
                due.route.push(entity);
            }
            Admission::Reject(reason) => {
                *rejections.0.entry(reason).or_default() += 1;
                due.finished.push(FinishedRequest::unserved(
                    entity,
                    spec.clone(),
                    *life,
                    FinalState::Rejected,
                    None,
                ));
            }
        }
    }
    work.clear();
    due.admit = work;
}

/// Applies the routing policy and sends each request on its way to the chosen instance.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn route_requests(
    mut commands: Commands,
    mut due: ResMut<Due>,
    clock: Res<SimClock>,
    delays: Res<ClusterDelays>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    mut policy: ResMut<ActiveRouting>,
    mut queue: ResMut<EventQueue>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
    latencies: Query<&Latency>,
) {
    let now = clock.now;
    let due = &mut *due;
    let mut work = std::mem::take(&mut due.route);
    for &entity in &work {
        let Ok((spec, mut life)) = requests.get_mut(entity) else {
            continue; // timed out before routing
        };
        let Some(i) = policy.0.choose(spec, now, &view.instances) else {
            due.finished.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *life,
                FinalState::Rejected,
                None,
            ));
            continue;
        };
        life.routed = Some(now);
        commands.entity(entity).insert(AssignedTo(i));
        view.instances[i as usize].in_flight += 1;
        let latency = latencies
            .get(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        let delay = delays.routing + latency.0.queueing_delay(spec.input_tokens);
        if delay.as_us() == 0 {
            due.enqueue.push((entity, i));
        } else {
            queue.push(
                now + delay,
                Event::Enqueue {
                    request: entity,
                    instance: i,
                },
            );
        }
    }
    work.clear();
    due.route = work;
}
