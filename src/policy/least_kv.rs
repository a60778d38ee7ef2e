//! `least_kv` (RouteSim): the lowest KV-cache utilisation (used / total blocks); ties are
//! taken in turn ([`InTurn`]).

use super::{Best, InTurn, RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "least_kv",
    description: "lowest KV-cache utilisation; ties in turn",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LeastKv::default())),
};

#[derive(Debug, Default)]
pub struct LeastKv {
    ties: InTurn,
}

impl RoutingPolicy for LeastKv {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        // used / total of block counts below 2²⁴: two different fractions differ by more
        // than a rounding step, and equal ones round alike, so the f64 order is exact.
        self.ties.pick(
            view.routable().map(|s| {
                let used = f64::from(s.kv_used_blocks) / f64::from(s.kv_total_blocks.max(1));
                (s.index, used)
            }),
            Best::Low,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn least_kv_prefers_the_emptiest_cache_relative_to_its_size() {
        let mut view = [
            snapshot(0, 0, 0, 0),
            snapshot(1, 0, 0, 0),
            snapshot(2, 0, 0, 0),
        ];
        view[0].kv_used_blocks = 50; // 50 %
        view[1].kv_used_blocks = 60;
        view[1].kv_total_blocks = 200; // 30 %
        view[2].kv_used_blocks = 30; // 30 %: tie with 1, taken in turn
        let mut p = LeastKv::default();
        let picks: Vec<Option<u32>> = (0..3)
            .map(|_| p.choose(&any_request(), SimTime(0), &RouterView::of(&view)))
            .collect();
        assert_eq!(picks, [Some(1), Some(2), Some(1)]);
    }
}
