//! `prefix_overlap` (RouteSim): score = 0.7·(share of the request's blocks the instance has
//! seen) + 0.3·(1 − load ratio), with a circuit breaker: at load ratio ≥ 0.9 only the load
//! term counts. Load ratio = min((queue + running) / max_queue_depth, 1). No blocks ⇒
//! least outstanding. The overlap is a set intersection on the router's own index.

use super::prefix_index::PrefixIndex;
use super::{Best, InTurn, RouterView, RoutingEntry, RoutingPolicy, ScoredCandidate};
use crate::kv::prompt_block_hashes;
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "prefix_overlap",
    description: "block-hash overlap with the router's index, with a load circuit breaker",
    params: &[
        ("max_queue_depth", "load at which the load ratio is 1 [256]"),
        ("index_blocks", "blocks remembered per instance [10000]"),
    ],
    free_params: false,
    build: |a| {
        Ok(Box::new(PrefixOverlap {
            index: PrefixIndex::new(a.at_least("index_blocks", 10_000.0, 1.0)? as usize),
            max_queue: a.at_least("max_queue_depth", 256.0, 1.0)?,
            last: Vec::new(),
            ties: InTurn::default(),
        }))
    },
};

pub struct PrefixOverlap {
    index: PrefixIndex,
    max_queue: f64,
    last: Vec<ScoredCandidate>,
    /// Equal scores are taken in turn.
    ties: InTurn,
}

impl RoutingPolicy for PrefixOverlap {
    fn choose(&mut self, r: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        let hashes = prompt_block_hashes(&r.content, r.input_tokens, view.block_size);
        self.last.clear();
        if hashes.is_empty() {
            return self.ties.pick(
                view.routable()
                    .map(|s| (s.index, s.queue_depth + s.in_flight)),
                Best::Low,
            );
        }
        for s in view.routable() {
            let load = (f64::from(s.queue_depth + s.batch_size) / self.max_queue).min(1.0);
            let overlap = self.index.overlap(s.index, &hashes) as f64 / hashes.len() as f64;
            let score = if load >= 0.9 {
                0.3 * (1.0 - load)
            } else {
                0.7 * overlap + 0.3 * (1.0 - load)
            };
            self.last.push(ScoredCandidate {
                instance: s.index,
                score,
                parts: vec![("overlap", overlap), ("load_ratio", load)],
            });
        }
        let pick = self
            .ties
            .pick(self.last.iter().map(|c| (c.instance, c.score)), Best::High)?;
        self.index.record(pick, &hashes);
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
    use crate::request::PromptContent;

    fn policy() -> PrefixOverlap {
        PrefixOverlap {
            index: PrefixIndex::new(100),
            max_queue: 10.0,
            last: Vec::new(),
            ties: InTurn::default(),
        }
    }

    #[test]
    fn overlap_attracts_until_the_circuit_breaker_trips() {
        let mut r = any_request();
        r.input_tokens = 64; // 4 blocks
        r.content = PromptContent::Simple {
            prefix_id: 5,
            prefix_tokens: 64,
            unique_id: 1,
        };
        let mut p = policy();
        let mut view = vec![snapshot(0, 0, 0, 0), snapshot(1, 0, 0, 0)];
        assert_eq!(
            p.choose(&r, SimTime(0), &RouterView::of(&view)),
            Some(0),
            "a first tie → the lowest index (later ones in turn)"
        );
        view[0].queue_depth = 5; // 0.7·1 + 0.3·0.5 = 0.85 beats 0.3
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(0));
        let s = p.last_scores().unwrap();
        assert!((s[0].score - 0.85).abs() < 1e-12 && (s[1].score - 0.3).abs() < 1e-12);
        view[0].queue_depth = 9; // load 0.9: breaker, 0.3·0.1 = 0.03 < 0.3
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(1));
        let mut no_blocks = any_request();
        no_blocks.input_tokens = 8;
        view[1].queue_depth = 20;
        assert_eq!(
            p.choose(&no_blocks, SimTime(0), &RouterView::of(&view)),
            Some(0),
            "no full block: least outstanding"
        );
    }
}
