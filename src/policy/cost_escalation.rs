//! `cost_escalation` (RouteSim): each instance carries a cost that decays as
//! exp(−decay_per_s · Δt); the cheapest instance is chosen and its cost grows by
//! 1 + 0.5·queue depth + 2·KV utilisation.

use super::{RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "cost_escalation",
    description: "cheapest decaying cost; the chosen instance's cost escalates with its load",
    params: &[("decay_per_s", "exponential decay rate of costs [0.1]")],
    free_params: false,
    build: |a| {
        Ok(Box::new(CostEscalation {
            costs: Vec::new(),
            last: SimTime::ZERO,
            decay: a.at_least("decay_per_s", 0.1, 0.0)?,
        }))
    },
};

pub struct CostEscalation {
    costs: Vec<f64>,
    last: SimTime,
    decay: f64,
}

impl RoutingPolicy for CostEscalation {
    fn choose(&mut self, _: &RequestSpec, now: SimTime, view: &RouterView<'_>) -> Option<u32> {
        self.costs.resize(view.instances.len(), 0.0);
        let f = (-self.decay * now.since(self.last).as_secs_f64()).exp();
        self.costs.iter_mut().for_each(|c| *c *= f);
        self.last = now;
        let pick = view.routable().min_by(|a, b| {
            self.costs[a.index as usize]
                .total_cmp(&self.costs[b.index as usize])
                .then(a.index.cmp(&b.index))
        })?;
        let util = f64::from(pick.kv_used_blocks) / f64::from(pick.kv_total_blocks.max(1));
        self.costs[pick.index as usize] += 1.0 + 0.5 * f64::from(pick.queue_depth) + 2.0 * util;
        Some(pick.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn costs_escalate_on_the_chosen_and_decay_over_time() {
        let view = [snapshot(0, 2, 0, 0), snapshot(1, 0, 0, 0)];
        let mut p = CostEscalation {
            costs: Vec::new(),
            last: SimTime::ZERO,
            decay: 0.1,
        };
        let r = any_request();
        assert_eq!(
            p.choose(&r, SimTime(0), &RouterView::of(&view)),
            Some(0),
            "tie at 0 → lowest index"
        );
        // Instance 0 now costs 1 + 0.5·2 = 2.
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(1));
        assert_eq!(p.costs, vec![2.0, 1.0]);
        // 10 s later both decayed by e^−1; instance 1 is still cheaper.
        assert_eq!(
            p.choose(&r, SimTime(10_000_000), &RouterView::of(&view)),
            Some(1)
        );
        assert!((p.costs[0] - 2.0 / std::f64::consts::E).abs() < 1e-12);
    }
}
