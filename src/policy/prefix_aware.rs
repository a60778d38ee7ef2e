//! `prefix_aware` (RouteSim): requests with a shared prefix go where that prefix was sent
//! before — score 0.8·[prefix seen there ∧ load ratio < 0.9] + 0.2·(1 − load ratio);
//! requests without one go to the least outstanding instance.

use std::collections::HashMap;

use super::{Best, InTurn, RouterView, RoutingEntry, RoutingPolicy, ScoredCandidate};
use crate::request::{PromptContent, RequestSpec};
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "prefix_aware",
    description: "send a shared prefix where it went before, unless that instance is near full",
    params: &[("max_queue_depth", "load at which the load ratio is 1 [256]")],
    free_params: false,
    build: |a| {
        Ok(Box::new(PrefixAware {
            seen: HashMap::new(),
            max_queue: a.at_least("max_queue_depth", 256.0, 1.0)?,
            last: Vec::new(),
            ties: InTurn::default(),
        }))
    },
};

pub struct PrefixAware {
    /// prefix id → instances it was routed to (bitset over the first 64 instances, else a list)
    seen: HashMap<u64, Vec<u32>>,
    max_queue: f64,
    last: Vec<ScoredCandidate>,
    /// Equal scores are taken in turn.
    ties: InTurn,
}

/// The request's shared-prefix identity, if it has one.
fn prefix_of(r: &RequestSpec) -> Option<u64> {
    match &r.content {
        PromptContent::Simple {
            prefix_id,
            prefix_tokens,
            ..
        } if *prefix_tokens > 0 => Some(*prefix_id),
        PromptContent::Segments(s) if s.len() > 1 => s.first().map(|x| x.id),
        _ => None,
    }
}

impl RoutingPolicy for PrefixAware {
    fn choose(&mut self, r: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        self.last.clear();
        let Some(prefix) = prefix_of(r) else {
            return self.ties.pick(
                view.routable()
                    .map(|s| (s.index, s.queue_depth + s.in_flight)),
                Best::Low,
            );
        };
        let seen = self.seen.entry(prefix).or_default();
        for s in view.routable() {
            let load = (f64::from(s.queue_depth + s.batch_size) / self.max_queue).min(1.0);
            let has = seen.contains(&s.index);
            let score = if has && load < 0.9 { 0.8 } else { 0.0 } + 0.2 * (1.0 - load);
            self.last.push(ScoredCandidate {
                instance: s.index,
                score,
                parts: vec![
                    ("has_prefix", f64::from(u8::from(has))),
                    ("load_ratio", load),
                ],
            });
        }
        let pick = self
            .ties
            .pick(self.last.iter().map(|c| (c.instance, c.score)), Best::High)?;
        if !seen.contains(&pick) {
            seen.push(pick);
        }
        Some(pick)
    }

    fn last_scores(&self) -> Option<&[ScoredCandidate]> {
        (!self.last.is_empty()).then_some(&self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};

    #[test]
    fn a_prefix_returns_to_its_instance_until_that_one_is_near_full() {
        let mut view = vec![snapshot(0, 0, 0, 0), snapshot(1, 0, 0, 0)];
        let mut p = PrefixAware {
            seen: HashMap::new(),
            max_queue: 10.0,
            last: Vec::new(),
            ties: InTurn::default(),
        };
        let mut r = any_request();
        r.content = PromptContent::Simple {
            prefix_id: 42,
            prefix_tokens: 100,
            unique_id: 1,
        };
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(0));
        view[0].queue_depth = 5; // load 0.5: 0.8 + 0.1 beats 0.2
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(0));
        view[0].queue_depth = 9; // load 0.9: breaker, 0.02 < 0.2
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(1));
        let plain = any_request();
        view[1].queue_depth = 20;
        assert_eq!(
            p.choose(&plain, SimTime(0), &RouterView::of(&view)),
            Some(0),
            "no prefix: least outstanding"
        );
    }
}
