//! `prefix_overlap` (RouteSim): score = 0.7·(share of the request's blocks the instance has
//! seen) + 0.3·(1 − load ratio), with a circuit breaker: at load ratio ≥ 0.9 only the load
//! term counts. Load ratio = min((queue + running) / max_queue_depth, 1). No blocks ⇒
//! least outstanding. The overlap is a set intersection on the router's own index.

use super::prefix_index::PrefixIndex;
use super::{RouterView, RoutingEntry, RoutingPolicy, ScoredCandidate, argmax};
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
        }))
    },
};

pub struct PrefixOverlap {
    index: PrefixIndex,
    max_queue: f64,
    last: Vec<ScoredCandidate>,
}

impl RoutingPolicy for PrefixOverlap {
    fn choose(&mut self, r: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        let hashes = prompt_block_hashes(&r.content, r.input_tokens, view.block_size);
        self.last.clear();
        if hashes.is_empty() {
            return view
                .routable()
                .min_by_key(|s| (s.queue_depth + s.in_flight, s.index))
                .map(|s| s.index);
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
        let pick = argmax(self.last.iter().map(|c| (c.instance, c.score)))?;
        self.index.record(pick, &hashes);
        Some(pick)
    }

    fn last_scores(&self) -> Option<&[ScoredCandidate]> {
        (!self.last.is_empty()).then_some(&self.last)
    }
}
