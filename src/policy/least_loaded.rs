//! `least_loaded`: the routable instance with the fewest queued + running + in-flight
//! requests; ties are taken in turn ([`InTurn`]: deterministic, and unbiased like BLIS's
//! random tie-break).

use super::{Best, InTurn, RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "least_loaded",
    description: "fewest queued + running + in-flight requests; ties in turn",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LeastLoaded::default())),
};

#[derive(Debug, Default)]
pub struct LeastLoaded {
    ties: InTurn,
}

impl RoutingPolicy for LeastLoaded {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        self.ties.pick(
            view.routable().map(|s| (s.index, s.effective_load())),
            Best::Low,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn least_loaded_counts_queue_batch_and_in_flight() {
        let view = [
            snapshot(0, 2, 1, 0),
            snapshot(1, 0, 1, 1),
            snapshot(2, 1, 0, 2),
        ];
        assert_eq!(
            LeastLoaded::default().choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
    }

    #[test]
    fn least_loaded_takes_tied_instances_in_turn() {
        let view = [
            snapshot(0, 3, 0, 0),
            snapshot(1, 1, 1, 0),
            snapshot(2, 0, 2, 0),
        ];
        let mut p = LeastLoaded::default();
        let picks: Vec<Option<u32>> = (0..3)
            .map(|_| p.choose(&any_request(), SimTime(0), &RouterView::of(&view)))
            .collect();
        assert_eq!(picks, [Some(1), Some(2), Some(1)], "1 and 2 tie at 2");
    }
}
