//! `least_loaded`: the routable instance with the fewest queued + running + in-flight
//! requests; ties go to the lowest index (deterministic, unlike BLIS's random tie-break).

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "least_loaded",
    description: "fewest queued + running + in-flight requests; ties to the lowest index",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LeastLoaded)),
};

#[derive(Debug, Default)]
pub struct LeastLoaded;

impl RoutingPolicy for LeastLoaded {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        view.routable()
            .min_by_key(|s| (s.effective_load(), s.index))
            .map(|s| s.index)
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
            LeastLoaded.choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
    }

    #[test]
    fn least_loaded_breaks_ties_on_the_lowest_index() {
        let view = [
            snapshot(0, 3, 0, 0),
            snapshot(1, 1, 1, 0),
            snapshot(2, 0, 2, 0),
        ];
        assert_eq!(
            LeastLoaded.choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
    }
}
