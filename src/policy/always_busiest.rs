//! `always_busiest` (BLIS): the most loaded instance — a deliberately bad baseline.

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "always_busiest",
    description: "most queued + running + in-flight requests (a bad baseline); ties to the lowest index",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(AlwaysBusiest)),
};

pub struct AlwaysBusiest;

impl RoutingPolicy for AlwaysBusiest {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        view.routable()
            .min_by_key(|s| (std::cmp::Reverse(s.effective_load()), s.index))
            .map(|s| s.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn always_busiest_picks_the_most_loaded_first_on_ties() {
        let view = [
            snapshot(0, 1, 1, 0),
            snapshot(1, 3, 0, 0),
            snapshot(2, 0, 2, 1),
        ];
        assert_eq!(
            AlwaysBusiest.choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
    }
}
