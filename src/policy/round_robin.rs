//! `round_robin`: the next routable instance after the last one chosen, wrapping around.

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "round_robin",
    description: "cycle through routable instances in index order",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(RoundRobin::default())),
};

#[derive(Debug, Default)]
pub struct RoundRobin {
    last: Option<u32>,
}

impl RoutingPolicy for RoundRobin {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        // The view lists instances in index order: start the search right after `last`.
        let start = self.last.map_or(0, |last| {
            view.instances.partition_point(|s| s.index <= last)
        });
        let next = view.instances[start..]
            .iter()
            .find(|s| s.routable)
            .or_else(|| view.routable().next())?;
        self.last = Some(next.index);
        Some(next.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn round_robin_cycles_and_skips_unroutable_instances() {
        let mut view = vec![
            snapshot(0, 0, 0, 0),
            snapshot(1, 0, 0, 0),
            snapshot(2, 0, 0, 0),
        ];
        let mut rr = RoundRobin::default();
        let r = any_request();
        let picks: Vec<_> = (0..4)
            .map(|_| rr.choose(&r, SimTime(0), &RouterView::of(&view)).unwrap())
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 0]);
        view[1].routable = false;
        assert_eq!(rr.choose(&r, SimTime(0), &RouterView::of(&view)), Some(2));
        assert_eq!(rr.choose(&r, SimTime(0), &RouterView::of(&view)), Some(0));
        view.iter_mut().for_each(|s| s.routable = false);
        assert_eq!(rr.choose(&r, SimTime(0), &RouterView::of(&view)), None);
    }
}
