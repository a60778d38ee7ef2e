//! Checks of prefill/decode disaggregation in a scenario.

use crate::catalog::Catalog;
use crate::policy::{check_policy, family};
use crate::scenario::{Problem, Scenario};

/// Prefill/decode disaggregation: prefill groups need decode groups and the other way
/// round, both need a model (it sizes the KV moved) and share the block size and KV cache
/// dtype; the decode routing policy is known, with its parameters.
pub fn check(p: &mut Vec<Problem>, s: &Scenario, catalog: &Catalog) {
    use crate::scenario::Role;
    let groups = &s.cluster.groups;
    let has = |r: Role| groups.iter().any(|g| g.role == r);
    for (i, g) in groups.iter().enumerate() {
        let at = |f: &str| format!("cluster.groups[{i}].{f}");
        crate::scenario::gb_per_s(p, &at("kv_link_gb_per_s"), g.kv_link());
        crate::scenario::latency_us(p, &at("kv_link_latency_us"), g.kv_link_latency_us);
        if g.role == Role::Mixed {
            continue;
        }
        if let Some(sc) = &g.scaling
            && sc.min == 0
        {
            p.push(
                Problem::new(
                    at("scaling.min"),
                    format!(
                        "a {} group cannot scale to zero: requests would have no {} instance to go to",
                        g.role.name(),
                        g.role.name()
                    ),
                )
                .hint("use min: 1 or more (scale to zero works for Mixed groups)"),
            );
        }
        if g.model.is_none() {
            p.push(
                Problem::new(
                    at("model"),
                    format!(
                        "a {} group needs a model: it sizes the KV blocks sent between prefill and decode instances",
                        g.role.name()
                    ),
                )
                .hint("set model: \"llama-3.1-8b-instruct\" (or a path to a config.json)"),
            );
        }
        let other = if g.role == Role::Prefill {
            Role::Decode
        } else {
            Role::Prefill
        };
        if !has(other) {
            p.push(
                Problem::new(
                    at("role"),
                    format!(
                        "a {} group needs a {} group to work with, and the cluster has none",
                        g.role.name(),
                        other.name()
                    ),
                )
                .hint(
                    "add a group with role: Prefill and one with role: Decode, or use role: Mixed",
                ),
            );
        }
        if let Some((j, first)) = groups
            .iter()
            .enumerate()
            .find(|(_, o)| o.role != Role::Mixed)
        {
            if j < i && first.block_size != g.block_size {
                p.push(Problem::new(
                    at("block_size"),
                    format!(
                        "{} tokens, but cluster.groups[{j}] has {}: prefill and decode groups must use one block size",
                        g.block_size, first.block_size
                    ),
                ));
            }
            // vLLM's NIXL connector refuses a peer whose `cache_dtype` differs: it is one
            // of the factors of `compute_nixl_compatibility_hash` (nixl_connector.py).
            if j < i && first.kv_cache_dtype_name() != g.kv_cache_dtype_name() {
                p.push(
                    Problem::new(
                        at("kv_cache_dtype"),
                        format!(
                            "{:?}, but cluster.groups[{j}] has {:?}: prefill and decode groups must lay out KV alike",
                            g.kv_cache_dtype_name(),
                            first.kv_cache_dtype_name()
                        ),
                    )
                    .hint("give both the same kv_cache_dtype: vLLM's NIXL connector refuses a peer whose cache dtype differs"),
                );
            }
            let name =
                |m: &Option<String>| m.as_deref().map(crate::model::ModelConfig::canonical_name);
            if j < i && name(&first.model) != name(&g.model) {
                p.push(Problem::new(
                    at("model"),
                    format!(
                        "{:?}, but cluster.groups[{j}] serves {:?}: prefill and decode groups must serve one model",
                        g.model.as_deref().unwrap_or(""),
                        first.model.as_deref().unwrap_or("")
                    ),
                ));
            }
        }
    }
    // Checked without decode groups too: a misspelt name is wrong wherever it is (that it
    // is unused there is a warning, `loader::estimate::slow_inputs`).
    {
        let pol = &s.policies;
        check_policy::<family::Routing>(
            p,
            catalog,
            "decode_routing",
            &pol.decode_routing,
            &pol.decode_routing_params,
            &s.labels(),
            s.seed,
        );
    }
}
