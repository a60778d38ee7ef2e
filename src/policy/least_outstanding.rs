//! `least_outstanding` (Vidur's LOR): the fewest requests assigned to the instance and not
//! finished — queued, running, and routed but not yet queued. Ties go round the instances,
//! starting after the previous pick, so an idle cluster is filled evenly rather than from
//! the lowest index.

use super::{Best, InTurn, InstanceSnapshot, RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "least_outstanding",
    description: "fewest queued + running + in-flight requests (Vidur LOR); ties in turn",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LeastOutstanding::default())),
};

#[derive(Debug, Default)]
pub struct LeastOutstanding {
    ties: InTurn,
}

/// Requests assigned to an instance and not finished.
pub(super) fn outstanding(s: &InstanceSnapshot) -> u32 {
    s.queue_depth + s.batch_size + s.in_flight
}

/// The routable instance with the fewest outstanding requests, ties taken in turn.
pub(super) fn pick(view: &RouterView<'_>, ties: &mut InTurn) -> Option<u32> {
    ties.pick(
        view.routable().map(|s| (s.index, outstanding(s))),
        Best::Low,
    )
}

impl RoutingPolicy for LeastOutstanding {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        pick(view, &mut self.ties)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn least_outstanding_counts_queued_running_and_in_flight() {
        // snapshot(index, queue, batch, in_flight)
        let view = [
            snapshot(0, 1, 0, 1),
            snapshot(1, 0, 50, 1),
            snapshot(2, 1, 0, 0),
        ];
        let mut p = LeastOutstanding::default();
        assert_eq!(
            p.choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(2),
            "1 outstanding beats 2 and 51"
        );
    }

    #[test]
    fn ties_go_round_the_instances_instead_of_to_the_lowest_index() {
        let view = [
            snapshot(0, 0, 0, 0),
            snapshot(1, 0, 0, 0),
            snapshot(2, 0, 0, 0),
        ];
        let mut p = LeastOutstanding::default();
        let picks: Vec<Option<u32>> = (0..4)
            .map(|_| p.choose(&any_request(), SimTime(0), &RouterView::of(&view)))
            .collect();
        assert_eq!(picks, [Some(0), Some(1), Some(2), Some(0)]);
    }
}
