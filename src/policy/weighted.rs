//! `weighted` (BLIS §6.3): score every routable instance with named scorers, each in
//! [0, 1], combine them with weights normalised to sum 1, and pick the best (ties taken in
//! turn, [`InTurn`]). Parameters are scorer weights; with none given, BLIS's default profile
//! (precise_prefix 2, queue_depth 1, kv_utilization 1).
//!
//! | scorer | score |
//! |---|---|
//! | `precise_prefix` | leading prompt blocks cached on the instance (its real cache), min-max normalised; all equal ⇒ 1 |
//! | `prefix_affinity` | leading blocks in the router's own LRU index / the request's full blocks |
//! | `queue_depth` | (max − queue)/(max − min) over instances; all equal ⇒ 1 |
//! | `kv_utilization` | 1 − used/total blocks |
//! | `load_balance` | 1/(1 + queued + running + in-flight) |
//! | `no_hit_lru` | if any instance has a cache hit: 0.5 for all; else never-chosen first, then least recently chosen: 1 − rank/(n − 1) |
//! | `lora_affinity` | the Gateway API Inference Extension's LoRA affinity scorer, on what vLLM reports (`vllm:lora_requests_info`): 1 if a running request uses the request's adapter, 0.8 if running and waiting requests use fewer than `max_loras` adapters, 0.6 if a waiting one uses it, else 0; 1 for a request without an adapter; 0 on an instance that serves none |

use super::prefix_index::PrefixIndex;
use super::{Best, InTurn, RouterView, RoutingEntry, RoutingPolicy, ScoredCandidate};
use crate::kv::prompt_block_hashes;
use crate::request::RequestSpec;
use crate::time::SimTime;

/// Scorer names, in trace order.
pub const SCORERS: [&str; 7] = [
    "precise_prefix",
    "prefix_affinity",
    "queue_depth",
    "kv_utilization",
    "load_balance",
    "no_hit_lru",
    "lora_affinity",
];

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "weighted",
    description: "weighted sum of scorers (argmax, ties in turn)",
    params: &[
        ("precise_prefix", "weight [2 if no weights given]"),
        ("prefix_affinity", "weight [0]"),
        ("queue_depth", "weight [1 if no weights given]"),
        ("kv_utilization", "weight [1 if no weights given]"),
        ("load_balance", "weight [0]"),
        ("no_hit_lru", "weight [0]"),
        ("lora_affinity", "weight [0]"),
    ],
    free_params: false,
    build: |a| {
        let mut w = [0.0; 7];
        if a.params.is_empty() {
            w = [2.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        } else {
            for (i, name) in SCORERS.iter().enumerate() {
                w[i] = a.at_least(name, 0.0, 0.0)?;
            }
        }
        Ok(Box::new(Weighted::new(normalise(w)?)))
    },
};

/// Weights scaled to sum 1. Scaling by the largest first keeps huge weights (say 1e308 each)
/// from summing to infinity and turning every weight, and so every score, into 0.
fn normalise(mut w: [f64; 7]) -> Result<[f64; 7], String> {
    if w.iter().any(|x| !x.is_finite()) {
        return Err("weights must be finite".into());
    }
    let max = w.iter().copied().fold(0.0, f64::max);
    if max <= 0.0 {
        return Err("give at least one scorer a weight > 0".into());
    }
    w.iter_mut().for_each(|x| *x /= max);
    let total: f64 = w.iter().sum();
    w.iter_mut().for_each(|x| *x /= total);
    Ok(w)
}

pub struct Weighted {
    weights: [f64; 7],
    index: PrefixIndex,
    /// Per instance: decision count when last chosen by a cold (no-hit) decision.
    last_chosen: Vec<Option<u64>>,
    decisions: u64,
    last: Vec<ScoredCandidate>,
    ties: InTurn,
}

impl Weighted {
    pub fn new(weights: [f64; 7]) -> Self {
        Weighted {
            weights,
            index: PrefixIndex::new(10_000),
            last_chosen: Vec::new(),
            decisions: 0,
            last: Vec::new(),
            ties: InTurn::default(),
        }
    }
}

fn min_max(values: &[f64], invert: bool) -> Vec<f64> {
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    values
        .iter()
        .map(|&v| {
            if hi <= lo {
                1.0
            } else if invert {
                (hi - v) / (hi - lo)
            } else {
                (v - lo) / (hi - lo)
            }
        })
        .collect()
}

impl RoutingPolicy for Weighted {
    fn wants_kv_events(&self) -> bool {
        self.weights[0] > 0.0 || self.weights[5] > 0.0
    }

    fn choose(&mut self, r: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        self.decisions += 1;
        self.last_chosen.resize(view.instances.len(), None);
        let cands: Vec<_> = view.routable().copied().collect();
        if cands.is_empty() {
            return None;
        }
        let w = self.weights;
        let hashes = if w[1] > 0.0 {
            prompt_block_hashes(&r.content, r.input_tokens, view.block_size)
        } else {
            Vec::new()
        };
        let precise: Vec<f64> = if w[0] > 0.0 || w[5] > 0.0 {
            cands
                .iter()
                .map(|s| {
                    f64::from(
                        view.probe
                            .cached_blocks(s.index, &r.content, r.input_tokens),
                    )
                })
                .collect()
        } else {
            vec![0.0; cands.len()]
        };
        let any_hit = precise.iter().any(|&p| p > 0.0);
        let precise_n = min_max(&precise, false);
        let queue_n = min_max(
            &cands
                .iter()
                .map(|s| f64::from(s.queue_depth))
                .collect::<Vec<_>>(),
            true,
        );
        // no_hit_lru ranks: never chosen first (by index), then least recently chosen.
        let mut order: Vec<(Option<u64>, u32)> = cands
            .iter()
            .map(|s| (self.last_chosen[s.index as usize], s.index))
            .collect();
        order.sort();
        let n = cands.len();
        self.last.clear();
        for (k, s) in cands.iter().enumerate() {
            let affinity = if hashes.is_empty() {
                0.0
            } else {
                self.index.leading_matches(s.index, &hashes) as f64 / hashes.len() as f64
            };
            let kv = 1.0 - f64::from(s.kv_used_blocks) / f64::from(s.kv_total_blocks.max(1));
            let lb = 1.0 / (1.0 + f64::from(s.effective_load()));
            let lru = if any_hit {
                0.5
            } else if n == 1 {
                1.0
            } else {
                let rank = order
                    .iter()
                    .position(|&(_, i)| i == s.index)
                    .expect("every candidate is ranked");
                1.0 - rank as f64 / (n - 1) as f64
            };
            let lora = if w[6] > 0.0 {
                lora_affinity(r.adapter, view.adapters.get(s.index as usize))
            } else {
                0.0
            };
            let parts = [precise_n[k], affinity, queue_n[k], kv, lb, lru, lora];
            let score: f64 = parts
                .iter()
                .zip(w)
                .map(|(p, w)| p.clamp(0.0, 1.0) * w)
                .sum();
            let named = SCORERS
                .iter()
                .zip(parts)
                .zip(w)
                .filter(|(_, w)| *w > 0.0)
                .map(|((n, p), _)| (*n, p))
                .collect();
            self.last.push(ScoredCandidate {
                instance: s.index,
                score,
                parts: named,
            });
        }
        let pick = self
            .ties
            .pick(self.last.iter().map(|c| (c.instance, c.score)), Best::High)?;
        if !hashes.is_empty() {
            self.index.record(pick, &hashes);
        }
        if !any_hit {
            self.last_chosen[pick as usize] = Some(self.decisions);
        }
        Some(pick)
    }

    fn last_scores(&self) -> Option<&[ScoredCandidate]> {
        Some(&self.last)
    }
}

/// The `lora_affinity` score of an instance reporting `reported` for a request with
/// `adapter` (see the module docs).
fn lora_affinity(adapter: Option<u32>, reported: Option<&crate::engine::InstanceAdapters>) -> f64 {
    let Some(a) = adapter else {
        return 1.0;
    };
    let Some(r) = reported.filter(|r| r.max_loras > 0) else {
        return 0.0;
    };
    let in_use = r.running.len() + r.waiting.iter().filter(|x| !r.running.contains(x)).count();
    if r.running.contains(&a) {
        1.0
    } else if (in_use as u32) < r.max_loras {
        0.8
    } else if r.waiting.contains(&a) {
        0.6
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_weights_normalise_like_small_ones() {
        let small = normalise([2.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]).unwrap();
        let huge = normalise([1e308, 0.0, 5e307, 5e307, 0.0, 0.0, 0.0]).unwrap();
        assert_eq!(small, [0.5, 0.0, 0.25, 0.25, 0.0, 0.0, 0.0]);
        assert_eq!(huge, small);
        assert!(normalise([0.0; 7]).is_err());
        assert!(normalise([f64::INFINITY, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]).is_err());
    }
    use crate::policy::{PrefixProbe, any_request, snapshot};
    use crate::request::PromptContent;

    struct Fixed(Vec<u32>);
    impl PrefixProbe for Fixed {
        fn cached_blocks(&self, i: u32, _: &PromptContent, _: u32) -> u32 {
            self.0[i as usize]
        }
    }

    #[test]
    fn lora_affinity_scores_as_the_gateway_inference_extension_does() {
        use crate::engine::InstanceAdapters;
        let at = |running: &[u32], waiting: &[u32]| InstanceAdapters {
            max_loras: 2,
            running: running.to_vec(),
            waiting: waiting.to_vec(),
        };
        assert_eq!(lora_affinity(Some(1), Some(&at(&[1, 2], &[]))), 1.0);
        assert_eq!(lora_affinity(Some(1), Some(&at(&[2], &[]))), 0.8);
        // Adapter 2 running and waiting counts once: one slot is still free.
        assert_eq!(lora_affinity(Some(1), Some(&at(&[2], &[2]))), 0.8);
        assert_eq!(lora_affinity(Some(1), Some(&at(&[2, 3], &[1]))), 0.6);
        assert_eq!(lora_affinity(Some(1), Some(&at(&[2, 3], &[4]))), 0.0);
        assert_eq!(lora_affinity(None, Some(&at(&[2, 3], &[4]))), 1.0);
        assert_eq!(lora_affinity(Some(1), None), 0.0);
        // Routing on it alone sends adapter 1 where it runs.
        let view = [snapshot(0, 0, 0, 0), snapshot(1, 0, 0, 0)];
        let adapters = [at(&[2, 3], &[]), at(&[1], &[])];
        let v = RouterView {
            instances: &view,
            probe: &crate::policy::NoProbe,
            block_size: 16,
            adapters: &adapters,
        };
        let mut r = only("lora_affinity");
        let mut req = any_request();
        req.adapter = Some(1);
        assert_eq!(r.choose(&req, SimTime::ZERO, &v), Some(1));
    }

    fn only(name: &str) -> Weighted {
        let mut w = [0.0; 7];
        w[SCORERS.iter().position(|s| *s == name).unwrap()] = 1.0;
        Weighted::new(w)
    }

    #[test]
    fn precise_prefix_follows_the_real_cache() {
        let view = [
            snapshot(0, 0, 0, 0),
            snapshot(1, 9, 0, 0),
            snapshot(2, 0, 0, 0),
        ];
        let probe = Fixed(vec![1, 5, 5]);
        let v = RouterView {
            instances: &view,
            probe: &probe,
            block_size: 16,
            adapters: &[],
        };
        let mut precise = only("precise_prefix");
        let picks: Vec<Option<u32>> = (0..3)
            .map(|_| precise.choose(&any_request(), SimTime(0), &v))
            .collect();
        assert_eq!(picks, [Some(1), Some(2), Some(1)], "1 and 2 tie: in turn");
        // With queue depth weighed equally, instance 2 (cached and idle) wins.
        let mut both = Weighted::new([0.5, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(both.choose(&any_request(), SimTime(0), &v), Some(2));
        let s = both.last_scores().unwrap();
        assert_eq!(
            s.iter().map(|c| c.score).collect::<Vec<_>>(),
            vec![0.5, 0.5, 1.0]
        );
    }

    #[test]
    fn prefix_affinity_learns_from_its_own_decisions() {
        let view = [snapshot(0, 0, 0, 0), snapshot(1, 0, 0, 0)];
        let mut p = Weighted::new([0.0, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0]);
        let mut r = any_request();
        r.input_tokens = 64;
        r.content = PromptContent::Simple {
            prefix_id: 1,
            prefix_tokens: 64,
            unique_id: 2,
        };
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(0));
        let busier = [snapshot(0, 1, 0, 0), snapshot(1, 0, 0, 0)];
        // 0.5·1 + 0.5·(1/2) = 0.75 on instance 0 beats 0.5·0 + 0.5·1 = 0.5.
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&busier)), Some(0));
    }

    #[test]
    fn queue_depth_kv_and_load_balance_prefer_idle_instances() {
        let mut view = [
            snapshot(0, 4, 2, 0),
            snapshot(1, 1, 1, 0),
            snapshot(2, 2, 0, 0),
        ];
        assert_eq!(
            only("queue_depth").choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
        assert_eq!(
            only("load_balance").choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(1)
        );
        view[1].kv_used_blocks = 90;
        view[2].kv_used_blocks = 10;
        view[0].kv_used_blocks = 10;
        assert_eq!(
            only("kv_utilization").choose(&any_request(), SimTime(0), &RouterView::of(&view)),
            Some(0)
        );
    }

    #[test]
    fn no_hit_lru_rotates_through_cold_instances() {
        let view = [
            snapshot(0, 0, 0, 0),
            snapshot(1, 0, 0, 0),
            snapshot(2, 0, 0, 0),
        ];
        let mut p = only("no_hit_lru");
        let picks: Vec<u32> = (0..5)
            .map(|_| {
                p.choose(&any_request(), SimTime(0), &RouterView::of(&view))
                    .unwrap()
            })
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1]);
    }
}
