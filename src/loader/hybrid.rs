//! A group serving a hybrid-attention model (sliding-window or linear-attention layers,
//! docs/hybrid-attention.md): what servesim does not model for such a cache is refused
//! here, each with its reason.

use crate::model::ModelConfig;
use crate::scenario::{InstanceGroup, Problem, Role, Scenario};
use crate::setup::ResolvedGroup;

/// Problems of group `g` serving `m` (with a drafter keeping `draft_kv` bytes per token)
/// under `at(field)`; true if there were any (its KV cache cannot be sized then).
pub(super) fn refusals(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    g: &InstanceGroup,
    m: &ModelConfig,
    draft_kv: f64,
) -> bool {
    if !m.kinds.is_hybrid() {
        return false;
    }
    let before = p.len();
    if let Err(e) = crate::model::kv_layout(m, g.tp, g.block_size.max(1)) {
        let field = if g.disable_hybrid_kv_cache_manager {
            "disable_hybrid_kv_cache_manager"
        } else {
            "model"
        };
        p.push(Problem::new(at(field), e).hint("serve a model with full-attention layers"));
        return true;
    }
    let mut refuse = |field: &str, what: &str, hint: &str| {
        p.push(
            Problem::new(
                at(field),
                format!(
                    "{what} with {}: a hybrid-attention model's KV cache (sliding windows, recurrent states) is modelled on one instance only",
                    m.id
                ),
            )
            .hint(hint.to_string()),
        );
    };
    if g.role != Role::Mixed {
        refuse("role", "P/D disaggregation", "use role: Mixed");
    }
    if g.cpu_kv_blocks > 0 {
        refuse("cpu_kv_blocks", "a CPU KV tier", "omit cpu_kv_blocks");
    }
    if g.nvme_kv_blocks > 0 {
        refuse("nvme_kv_blocks", "an NVMe KV tier", "omit nvme_kv_blocks");
    }
    if g.expert_parallel.is_some() {
        refuse(
            "expert_parallel",
            "expert parallelism",
            "omit expert_parallel; use tp",
        );
    }
    if g.pp > 1 {
        refuse("pp", "pipeline parallelism", "use tp instead of pp");
    }
    if draft_kv > 0.0 {
        refuse(
            "speculative",
            "a drafter with its own KV cache",
            "use method: Ngram, which keeps no KV",
        );
    }
    p.len() > before
}

/// What only the whole scenario shows, for group `i` resolved to `r`: the shared KV store
/// with a hybrid model, and `disable_hybrid_kv_cache_manager` on a model without hybrid
/// attention.
pub(super) fn check(p: &mut Vec<Problem>, s: &Scenario, i: usize, r: &ResolvedGroup) {
    let g = &s.cluster.groups[i];
    let at = |f: &str| format!("cluster.groups[{i}].{f}");
    let Some(m) = r.model.as_ref() else {
        return;
    };
    let k = &m.kinds;
    if g.disable_hybrid_kv_cache_manager && k.sliding > 0 && m.full_attention_layers() == 0 {
        p.push(
            Problem::new(
                at("disable_hybrid_kv_cache_manager"),
                format!(
                    "has no effect: every layer of {} is sliding-window attention, one kind of KV cache, which vLLM keeps with its window either way",
                    m.id
                ),
            )
            .hint("leave it out"),
        );
    }
    if !k.is_hybrid() {
        if g.disable_hybrid_kv_cache_manager {
            p.push(
                Problem::new(
                    at("disable_hybrid_kv_cache_manager"),
                    "has no effect: the group's model has only full-attention layers",
                )
                .hint("leave it out, or serve a model with sliding-window layers"),
            );
        }
        return;
    }
    if s.cluster.kv_store.is_some() {
        p.push(
            Problem::new(
                "cluster.kv_store",
                format!(
                    "the shared KV store with {} (group {i}): a hybrid-attention model's KV cache is modelled on one instance only",
                    m.id
                ),
            )
            .hint("omit cluster.kv_store"),
        );
    }
}
