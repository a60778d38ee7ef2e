//! Instance wait-queue orders (BLIS §6.2), applied as a stable sort before each batch is
//! formed (ties keep queue order, so they fall back to arrival, preemption-first).

use super::{QueueOrder, QueueOrderEntry};
use crate::request::RequestSpec;
use crate::time::SimTime;

/// `fcfs`: arrival order (preempted requests go back to the front). No sorting.
pub(super) const FCFS: QueueOrderEntry = QueueOrderEntry {
    name: "fcfs",
    description: "first come, first served (vLLM default)",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(Fcfs)),
};

/// `priority_fcfs`: highest priority first, then earliest arrival, then lowest id.
pub(super) const PRIORITY_FCFS: QueueOrderEntry = QueueOrderEntry {
    name: "priority_fcfs",
    description: "highest priority first, then arrival, then id",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(PriorityFcfs { sign: -1.0 })),
};

/// `reverse_priority`: lowest priority first (a testing baseline).
pub(super) const REVERSE_PRIORITY: QueueOrderEntry = QueueOrderEntry {
    name: "reverse_priority",
    description: "lowest priority first, then arrival, then id",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(PriorityFcfs { sign: 1.0 })),
};

/// `sjf`: shortest prompt first, then arrival, then id.
pub(super) const SJF: QueueOrderEntry = QueueOrderEntry {
    name: "sjf",
    description: "shortest prompt first, then arrival, then id",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(Sjf)),
};

pub struct Fcfs;

impl QueueOrder for Fcfs {
    fn is_fifo(&self) -> bool {
        true
    }
    fn key(&self, _: &RequestSpec, arrival: SimTime, _: f64) -> (f64, f64) {
        (0.0, arrival.as_us() as f64)
    }
}

pub struct PriorityFcfs {
    sign: f64,
}

impl QueueOrder for PriorityFcfs {
    fn key(&self, _: &RequestSpec, arrival: SimTime, priority: f64) -> (f64, f64) {
        (self.sign * priority, arrival.as_us() as f64)
    }
}

pub struct Sjf;

impl QueueOrder for Sjf {
    fn key(&self, r: &RequestSpec, arrival: SimTime, _: f64) -> (f64, f64) {
        (f64::from(r.input_tokens), arrival.as_us() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::any_request;

    #[test]
    fn keys_order_as_documented() {
        let mut short = any_request();
        short.input_tokens = 5;
        let mut long = any_request();
        long.input_tokens = 50;
        assert!(Sjf.key(&short, SimTime(9), 0.0) < Sjf.key(&long, SimTime(1), 0.0));
        assert!(
            Sjf.key(&short, SimTime(1), 0.0) < Sjf.key(&short, SimTime(2), 0.0),
            "ties by arrival"
        );
        let p = PriorityFcfs { sign: -1.0 };
        assert!(
            p.key(&short, SimTime(9), 4.0) < p.key(&short, SimTime(1), 3.0),
            "higher priority first"
        );
        let r = PriorityFcfs { sign: 1.0 };
        assert!(r.key(&short, SimTime(9), 3.0) < r.key(&short, SimTime(1), 4.0));
        assert!(Fcfs.is_fifo() && !Sjf.is_fifo());
    }
}
