//! The instance pipeline's systems besides batch formation and steps: retiring steps
//! that ended, enqueuing routed requests, client timeouts and KV events.

use bevy_ecs::prelude::*;

use super::{
    Instance, InstanceIndex, Limits, Scheduler, Seq, list_for_batch, refresh_view, servable,
};
use crate::engine::{ClusterView, EnqueueDue, InstanceDue, RecordDue, SimClock};
use crate::kv::KvCache;
use crate::request::{AssignedTo, FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::time::SimTime;

/// The components of an instance the pipeline systems work on.
pub type InstanceParts = (
    &'static mut Scheduler,
    &'static mut KvCache,
    &'static crate::latency::Latency,
    &'static Limits,
    &'static mut super::schedulers::Batcher,
);

/// Every instance, for the pipeline systems.
pub type Instances<'w, 's> = Query<'w, 's, InstanceParts>;

/// The work lists the instance pipeline empties and fills (and the driver's event buffer,
/// which a fast run pops the next tick into), and what enqueuing changes.
#[derive(bevy_ecs::system::SystemParam)]
pub struct PipelineWork<'w, 's> {
    pub(crate) instances: ResMut<'w, InstanceDue>,
    pub(crate) record: ResMut<'w, RecordDue>,
    pub(crate) popped: ResMut<'w, crate::engine::Popped>,
    /// Requests routed with no delay on a tick of arrivals (the Enqueue stage's list).
    pub(crate) routed: ResMut<'w, EnqueueDue>,
    pub(crate) requests: Query<'w, 's, (&'static RequestSpec, &'static mut Lifecycle)>,
    pub(crate) rejections: ResMut<'w, crate::engine::Rejections>,
}

/// Frees instances whose step ended now and hands their finished requests to Record.
pub fn retire_steps(
    mut due: ResMut<InstanceDue>,
    mut record: ResMut<RecordDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut instances: Instances,
) {
    retire(&mut due, &mut record, clock.now, &index, &mut instances);
}

pub(crate) fn retire(
    due: &mut InstanceDue,
    record: &mut RecordDue,
    now: SimTime,
    index: &InstanceIndex,
    instances: &mut Instances,
) {
    let mut finished = std::mem::take(&mut due.step_ends);
    // Stable order by instance index, whatever the event order.
    finished.sort_unstable();
    finished.dedup();
    for &i in &finished {
        let mut sched = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run")
            .0;
        retire_one(due, record, i, now, &mut sched);
    }
    finished.clear();
    due.step_ends = finished;
}

/// Frees instance `i` if its step ended now, hands its finished requests to Record and
/// lists it for batch formation.
pub(crate) fn retire_one(
    due: &mut InstanceDue,
    record: &mut RecordDue,
    i: u32,
    now: SimTime,
    sched: &mut Scheduler,
) {
    if sched.step_end.is_some_and(|t| t <= now) {
        sched.step_end = None;
    }
    while sched.in_flight.front().is_some_and(|&t| t <= now) {
        sched.in_flight.pop_front();
    }
    // Leavers are in completion order; hand over those due now.
    if !sched.leaving.is_empty() {
        let due_now = sched
            .leaving
            .partition_point(|f| f.completed.is_some_and(|c| c <= now));
        record.0.extend(sched.leaving.drain(..due_now));
    }
    if sched.handoff.first().is_some_and(|h| h.ready <= now) {
        due.handoffs.push(i);
    } else if !sched.sent.is_empty() && sched.in_flight.is_empty() && !sched.has_work() {
        // Its requests left during the step (timed out): the step vLLM's engine takes to
        // report them polls for reads (P/D).
        due.emptied.push(i);
    }
    list_for_batch(due, i, sched);
}

/// Puts routed requests in their instance's wait queue, dropping unservable ones.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn enqueue_requests(
    mut due: ResMut<EnqueueDue>,
    mut record: ResMut<RecordDue>,
    mut listed: ResMut<InstanceDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    mut requests: Query<(&RequestSpec, &mut Lifecycle)>,
    mut instances: Instances,
    mut rejections: ResMut<crate::engine::Rejections>,
) {
    let mut work = std::mem::take(&mut due.requests);
    enqueue(
        &work,
        clock.now,
        &mut record,
        &mut listed,
        &index,
        &mut view,
        &mut requests,
        &mut instances,
        &mut rejections,
    );
    work.clear();
    due.requests = work;
}

/// Puts each (request, instance) of `work` in the instance's wait queue, or drops or rejects
/// it; lists the instances for batch formation.
#[expect(
    clippy::too_many_arguments,
    reason = "the Enqueue stage's work and the state it changes"
)]
pub(crate) fn enqueue(
    work: &[(Entity, u32)],
    now: SimTime,
    record: &mut RecordDue,
    listed: &mut InstanceDue,
    index: &InstanceIndex,
    view: &mut ClusterView,
    requests: &mut impl InTransit,
    instances: &mut Instances,
    rejections: &mut crate::engine::Rejections,
) {
    for &(entity, i) in work {
        let Some((spec, lifecycle)) = requests.request(entity) else {
            continue; // timed out in transit (its in-flight count was released then)
        };
        let slot = &mut view.instances[i as usize];
        slot.in_flight = slot.in_flight.saturating_sub(1);
        let (mut sched, kv, _, limits, _) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        if sched.down {
            // Crashed while the request was on its way (faults): still in transit, it
            // waits for the crash policy.
            sched.lost.push(entity);
            continue;
        }
        lifecycle.enqueued = Some(now);
        if !servable(spec, &kv, limits) {
            sched.counters.dropped += 1;
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::Dropped,
                Some(i),
            ));
            continue;
        }
        if limits
            .max_waiting
            .is_some_and(|cap| sched.waiting.len() >= cap as usize)
        {
            sched.counters.queue_full += 1;
            *rejections.0.entry("queue_full").or_default() += 1;
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::Rejected,
                Some(i),
            ));
            continue;
        }
        let mut seq = Seq::new(entity, spec.clone(), *lifecycle);
        // Room for every block it holds at its last step (`servable` bounds it): its block
        // list never reallocates while it is prefilled and decoded.
        let last = crate::instance::kv_tokens_needed(spec, limits);
        seq.kv
            .blocks
            .reserve_exact(last.div_ceil(u64::from(kv.block_size())) as usize);
        if sched
            .waiting
            .back()
            .is_some_and(|b| b.lifecycle.arrival > seq.lifecycle.arrival)
        {
            sched.unordered = true;
        }
        sched.waiting.push_back(seq);
        let waiting = sched.waiting.len() as u64;
        sched.counters.peak_waiting = sched.counters.peak_waiting.max(waiting);
        list_for_batch(listed, i, &mut sched);
        refresh_view(view, i, &sched, &kv);
    }
}

/// Requests on their way to an instance, by entity (the Enqueue stage reads and stamps them).
pub trait InTransit {
    /// The request's spec and lifecycle; `None` once it has left (timed out in transit).
    fn request(&mut self, entity: Entity) -> Option<(&RequestSpec, &mut Lifecycle)>;
}

impl InTransit for Query<'_, '_, (&RequestSpec, &mut Lifecycle)> {
    fn request(&mut self, entity: Entity) -> Option<(&RequestSpec, &mut Lifecycle)> {
        self.get_mut(entity)
            .ok()
            .map(|(spec, life)| (spec, life.into_inner()))
    }
}

/// Abandons the requests whose client timeout fires now: wherever they are, they leave
/// with state `timed_out`, releasing their KV blocks (INV-1 bucket `timed_out`).
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn expire_requests(
    mut due: ResMut<EnqueueDue>,
    mut record: ResMut<RecordDue>,
    mut listed: ResMut<InstanceDue>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    requests: Query<(&RequestSpec, &Lifecycle, Option<&AssignedTo>)>,
    mut instances: Query<(&mut Scheduler, &mut KvCache)>,
    parked: Option<ResMut<crate::engine::Parked>>,
) {
    let mut work = std::mem::take(&mut due.timeouts);
    let mut unassigned = false;
    for &entity in &work {
        let Ok((spec, lifecycle, assigned)) = requests.get(entity) else {
            continue; // already finished
        };
        if record.0.iter().any(|f| f.entity == entity) {
            continue; // ended this very tick
        }
        let Some(&AssignedTo(i)) = assigned else {
            unassigned = true;
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::TimedOut,
                None,
            ));
            continue;
        };
        if lifecycle.enqueued.is_none() {
            let slot = &mut view.instances[i as usize];
            slot.in_flight = slot.in_flight.saturating_sub(1);
            record.0.push(FinishedRequest::unserved(
                entity,
                spec.clone(),
                *lifecycle,
                FinalState::TimedOut,
                Some(i),
            ));
            continue;
        }
        let (mut sched, mut kv) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        let sched = &mut *sched;
        sched.settle();
        let ended = if let Some(pos) = sched.waiting.iter().position(|s| s.entity == entity) {
            let mut seq = sched.waiting.remove(pos).expect("position is valid");
            kv.release(&mut seq.kv);
            seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched.running.iter().position(|s| s.entity == entity) {
            let mut seq = sched.running.remove(pos);
            kv.release(&mut seq.kv);
            seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched.leaving.iter().position(|f| f.entity == entity) {
            // Its last token comes after the deadline.
            let mut f = sched.leaving.remove(pos);
            f.state = FinalState::TimedOut;
            f.completed = None;
            f.e2e = None;
            f
        } else if let Some(pos) = sched.handoff.iter().position(|h| h.seq.entity == entity) {
            let mut h = sched.handoff.remove(pos);
            kv.release(&mut h.seq.kv);
            h.seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched.arrived.iter().position(|s| s.entity == entity) {
            let mut seq = sched.arrived.remove(pos).expect("position is valid");
            kv.release(&mut seq.kv);
            seq.finish(FinalState::TimedOut, i, None, None)
        } else if let Some(pos) = sched
            .incoming
            .iter()
            .position(|x| x.handoff.seq.entity == entity)
        {
            // Cancelled on its way here: both ends free their blocks (the link time it was
            // given stays used).
            let mut x = sched.incoming.remove(pos).expect("position is valid");
            kv.release(&mut x.reserved);
            let slot = &mut view.instances[i as usize];
            slot.in_flight = slot.in_flight.saturating_sub(1);
            sched.counters.timed_out += 1;
            refresh_view(&mut view, i, sched, &kv);
            let (mut src, mut src_kv) = instances
                .get_mut(index.0[x.from as usize])
                .expect("instance entity exists for the whole run");
            src_kv.release(&mut x.handoff.seq.kv);
            src.outbound -= 1;
            list_for_batch(&mut listed, x.from, &mut src);
            refresh_view(&mut view, x.from, &src, &src_kv);
            record
                .0
                .push(x.handoff.seq.finish(FinalState::TimedOut, i, None, None));
            continue;
        } else {
            continue;
        };
        sched.counters.timed_out += 1;
        record.0.push(ended);
        // The blocks it held may be what a waiting request needs: an idle instance forms a
        // batch this tick (it waited for its next arrival, or for ever).
        list_for_batch(&mut listed, i, sched);
        refresh_view(&mut view, i, sched, &kv);
    }
    // Requests parked for a cold start leave the list (it holds the live ones: the run is
    // over when it is empty, and autoscaling counts it).
    if let Some(mut parked) = parked.filter(|p| unassigned && !p.requests.is_empty()) {
        parked.requests.retain(|e| !work.contains(e));
    }
    work.clear();
    due.timeouts = work;
}

/// Publishes the block events the instances recorded this tick as [`KvEvent`] messages
/// (first in [`SimSystems::Observe`], scheduled by the simulation builder only while
/// [`KvEvents`] is on). Messages live for two ticks: a reader that runs every tick sees each
/// once.
///
/// [`KvEvent`]: crate::kv::KvEvent
/// [`KvEvents`]: crate::kv::KvEvents
pub fn publish_kv_events(
    clock: Res<SimClock>,
    mut messages: ResMut<Messages<crate::kv::KvEvent>>,
    mut instances: Query<(&Instance, &mut KvCache)>,
) {
    messages.update();
    let now = clock.now;
    for (inst, mut kv) in &mut instances {
        if !kv.records_events() {
            continue;
        }
        let instance = inst.index;
        let kv = kv.bypass_change_detection();
        messages.write_batch(kv.take_events().map(|(kind, block)| crate::kv::KvEvent {
            time: now,
            instance,
            block,
            kind,
        }));
    }
}
