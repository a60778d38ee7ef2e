//! `least_outstanding` (Vidur LOR): the fewest requests waiting for the instance — queued
//! plus routed-but-not-yet-queued — ignoring the running batch; ties to the lowest index.

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "least_outstanding",
    description: "fewest queued + in-flight requests (Vidur LOR); ties to the lowest index",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LeastOutstanding)),
};

pub struct LeastOutstanding;

impl RoutingPolicy for LeastOutstanding {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        view.routable()
            .min_by_key(|s| (s.queue_depth + s.in_flight, s.index))
            .map(|s| s.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn least_outstanding_ignores_the_running_batch() {
        let view = [
            snapshot(0, 1, 0, 1),
            snapshot(1, 0, 50, 1),
            snapshot(2, 1, 0, 0),
        ];
        assert_eq!(
            LeastOutstanding.choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
    }
}
