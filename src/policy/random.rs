//! `random`: a uniformly random routable instance, from the router's own seeded stream.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::rng;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "random",
    description: "uniformly random routable instance (seeded `router` stream)",
    params: &[],
    free_params: false,
    build: |a| {
        Ok(Box::new(Random {
            rng: rng::stream(a.seed, "router"),
        }))
    },
};

pub struct Random {
    rng: ChaCha8Rng,
}

impl RoutingPolicy for Random {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        let n = view.routable().count();
        if n == 0 {
            return None;
        }
        let k = self.rng.random_range(0..n);
        view.routable().nth(k).map(|s| s.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn random_spreads_evenly_over_routable_instances_and_repeats_by_seed() {
        let mut view = vec![
            snapshot(0, 0, 0, 0),
            snapshot(1, 0, 0, 0),
            snapshot(2, 0, 0, 0),
        ];
        view[1].routable = false;
        let mut r = Random {
            rng: rng::stream(1, "router"),
        };
        let picks: Vec<u32> = (0..6000)
            .map(|_| {
                r.choose(&any_request(), SimTime(0), &RouterView::of(&view))
                    .unwrap()
            })
            .collect();
        let zeros = picks.iter().filter(|&&p| p == 0).count();
        assert!(picks.iter().all(|&p| p != 1));
        // Binomial(6000, 1/2): sd 38.7; allow 4 sd.
        assert!((zeros as i64 - 3000).abs() < 155, "{zeros}");
        let mut again = Random {
            rng: rng::stream(1, "router"),
        };
        let first: Vec<u32> = (0..10)
            .map(|_| {
                again
                    .choose(&any_request(), SimTime(0), &RouterView::of(&view))
                    .unwrap()
            })
            .collect();
        assert_eq!(first, picks[..10]);
    }
}
