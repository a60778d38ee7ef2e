//! The future-event list: a min-heap ordered by `(time, seq)`.
//!
//! Events due at the same time are all popped into the tick's work lists, one list per kind
//! (`engine::InstanceDue`, `engine::RouteDue`, …: one resource per concern), and the stages run in their fixed order; so only the order among events
//! of one kind can matter, and that is insertion order (`seq`). (A per-kind priority class
//! used to be part of the key; it could not change anything and was removed.)

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use bevy_ecs::prelude::*;

use crate::time::SimTime;

/// Something that will happen at a future simulated time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Workload source `source` emits its next request.
    Arrival { source: u32 },
    /// A request reaches the admission decision (after the admission latency).
    Admit(Entity),
    /// A request reaches the instance wait queue (after routing and queueing delays).
    Enqueue { request: Entity, instance: u32 },
    /// Instance `instance` finished the step it was executing.
    StepFinished { instance: u32 },
    /// Periodic autoscaler evaluation.
    AutoscaleTick,
    /// The next turn of a multi-turn session arrives.
    SessionTurn { session: u64 },
    /// A request's client gives up if it has not finished.
    Timeout { request: Entity },
    /// Source `source` lets one more request of its offline batch into the cluster.
    Release { source: u32 },
    /// Instance `instance` ends a timed life-cycle phase (provisioning, loading, warm-up).
    PhaseEnd { instance: u32 },
    /// An instance became routable outside the Advance stage: parked requests are routed.
    Unpark,
    /// A KV transfer to decode instance `instance` ends (P/D disaggregation).
    TransferDone { instance: u32 },
    /// A request handed off through vLLM's P/D proxy reaches decode instance `instance`'s
    /// engine, which may start pulling its KV.
    HandedOff { instance: u32 },
    /// The gateway looks at its bands again: a request's longest wait ends, or the instances
    /// gained room after the gateway's stage ran this tick (flow control).
    GateWake,
    /// Instance `instance` crashes (faults: a listed crash or its MTBF's next draw).
    Crash { instance: u32 },
    /// Instance `instance`, repaired and its model reloaded, serves again (faults).
    Restart { instance: u32 },
    /// A request taken down by a crash is sent again through the router (faults' retry
    /// policy, after its backoff).
    Retry { request: Entity },
}

impl Event {
    /// Which input makes this event come later than a run may reach, for the diagnosis.
    pub fn too_late(&self) -> String {
        match self {
            Event::Arrival { source } | Event::Release { source } => format!(
                "it is the next arrival of workload source {source} (a tiny `rate_per_s`, or trace timestamps × `time_scale` / `rate_scale`)"
            ),
            Event::StepFinished { instance } => format!(
                "it is the end of a step of instance {instance}, priced that long by its group's latency model (its `latency` coefficients, or the `gpu` and `model` a roofline prices: a GPU profile with tiny TFLOPS or TB/s?)"
            ),
            Event::TransferDone { instance } => format!(
                "it is the end of a KV transfer to decode instance {instance} (the groups' `kv_link_gb_per_s` and `kv_link_latency_us`)"
            ),
            Event::HandedOff { instance } => format!(
                "it is a request handed off to decode instance {instance} reaching its engine (the prefill instance's answer and the decode instance's intake: the groups' `engine` costs)"
            ),
            Event::PhaseEnd { instance } => format!(
                "it is the end of a life-cycle phase of instance {instance} (its group's `scaling.provision_s`, `load_s` or `warmup_s`)"
            ),
            Event::SessionTurn { .. } => {
                "it is the next turn of a session (the client's `session.think_time_s`)".into()
            }
            Event::Timeout { .. } => "it is a request's timeout (the workload's or client's `timeout_s`)".into(),
            Event::Admit(_) | Event::Enqueue { .. } => {
                "it is a request on its way to an instance (`policies.admission_latency_us`, `routing_latency_us`)".into()
            }
            Event::Crash { instance } | Event::Restart { instance } => format!(
                "it is a crash or restart of instance {instance} (the scenario's `faults`: `crashes`, `mtbf_s`, `repair_s`, `reload_s`)"
            ),
            Event::Retry { .. } => {
                "it is a retry of a request a crash took down (`faults.on_crash`'s `backoff_s`)".into()
            }
            Event::GateWake => {
                "it is the end of a request's longest wait in a gateway band (`flow_control` bands' `max_wait_s`)".into()
            }
            Event::AutoscaleTick | Event::Unpark => {
                "it is an autoscaling evaluation (`interval_s`)".into()
            }
        }
    }
}

#[derive(Debug)]
struct Scheduled {
    time: SimTime,
    seq: u64,
    event: Event,
}

impl Scheduled {
    fn key(&self) -> (SimTime, u64) {
        (self.time, self.seq)
    }
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the earliest key first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// Pending events. `seq` is a global insertion counter, so same-time events pop first-in
/// first-out.
#[derive(Resource, Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Scheduled>,
    next_seq: u64,
}

impl EventQueue {
    /// Schedules `event` at `time`.
    pub fn push(&mut self, time: SimTime, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Scheduled { time, seq, event });
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|s| s.time)
    }

    /// The earliest pending event.
    pub fn peek(&self) -> Option<&Event> {
        self.heap.peek().map(|s| &s.event)
    }

    /// Pops the earliest event if it is due at `time`.
    pub fn pop_at(&mut self, time: SimTime) -> Option<Event> {
        if self.heap.peek()?.time == time {
            self.heap.pop().map(|s| s.event)
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// True when some pending event satisfies `f` (in no particular order).
    pub fn any(&self, f: impl Fn(&Event) -> bool) -> bool {
        self.heap.iter().any(|s| f(&s.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_pop_by_time_then_insertion_order() {
        let mut q = EventQueue::default();
        q.push(SimTime(10), Event::StepFinished { instance: 1 });
        q.push(SimTime(10), Event::Arrival { source: 7 });
        q.push(SimTime(5), Event::StepFinished { instance: 9 });
        q.push(SimTime(10), Event::StepFinished { instance: 0 });
        q.push(SimTime(10), Event::Arrival { source: 3 });

        assert_eq!(q.peek_time(), Some(SimTime(5)));
        assert_eq!(
            q.pop_at(SimTime(10)),
            None,
            "nothing is due at 10 before 5 is drained"
        );
        assert_eq!(
            q.pop_at(SimTime(5)),
            Some(Event::StepFinished { instance: 9 })
        );
        let at_10: Vec<Event> = std::iter::from_fn(|| q.pop_at(SimTime(10))).collect();
        assert_eq!(
            at_10,
            vec![
                Event::StepFinished { instance: 1 },
                Event::Arrival { source: 7 },
                Event::StepFinished { instance: 0 },
                Event::Arrival { source: 3 },
            ]
        );
        assert!(q.is_empty());
    }
}
