//! `least_kv` (RouteSim): the lowest KV-cache utilisation (used / total blocks); ties to
//! the lowest index.

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "least_kv",
    description: "lowest KV-cache utilisation; ties to the lowest index",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LeastKv)),
};

pub struct LeastKv;

impl RoutingPolicy for LeastKv {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        // Compare used/total exactly as cross products (no float ties).
        view.routable()
            .min_by(|a, b| {
                let l = u64::from(a.kv_used_blocks) * u64::from(b.kv_total_blocks.max(1));
                let r = u64::from(b.kv_used_blocks) * u64::from(a.kv_total_blocks.max(1));
                l.cmp(&r).then(a.index.cmp(&b.index))
            })
            .map(|s| s.index)
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
        view[2].kv_used_blocks = 30; // 30 %: tie with 1, lower index wins
        assert_eq!(
            LeastKv.choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
    }
}
