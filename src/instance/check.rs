//! Checks of an instance group's part of a scenario: sizes, limits and its batch scheduler.

use crate::catalog::{Catalog, PolicyArgs, check_member};
use crate::scenario::{Problem, Scenario};

/// Checks group `i` of `s`: KV and batch limits, parallelism, cost and its scheduler (its
/// model, GPU and latency model are checked when the loader resolves it).
pub fn check_group(p: &mut Vec<Problem>, s: &Scenario, i: usize, catalog: &Catalog) {
    let g = &s.cluster.groups[i];
    let at = |f: &str| format!("cluster.groups[{i}].{f}");
    if g.kv_blocks.is_some_and(|b| b > 1 << 24) {
        p.push(Problem::new(
            at("kv_blocks"),
            "at most 16,777,216 blocks per instance",
        ));
    }
    if g.block_size > 65_536 {
        p.push(Problem::new(
            at("block_size"),
            format!("at most 65,536 tokens, got {}", g.block_size),
        ));
    }
    for (f, v) in [("tp", g.tp), ("pp", g.pp)] {
        if v > 1024 {
            p.push(Problem::new(at(f), format!("at most 1,024, got {v}")));
        }
    }
    if g.count == 0 && g.scaling.is_none() {
        p.push(
            Problem::new(at("count"), "must be ≥ 1")
                .hint("remove the group instead of giving it 0 instances (an autoscaled group may start at 0)"),
        );
    }
    if !(g.cost_per_gpu_hour.is_finite()
        && (0.0..=crate::scenario::MAX_PRICE).contains(&g.cost_per_gpu_hour))
    {
        p.push(Problem::new(
            at("cost_per_gpu_hour"),
            format!(
                "must be a number within 0..=10⁶, got {}",
                g.cost_per_gpu_hour
            ),
        ));
    }
    check_scheduler(p, i, g, catalog, s.seed);
    // A block size of 0 is refused where the group is resolved, beside tp and pp of 0.
    if g.max_num_seqs == Some(0) {
        p.push(
            Problem::new(at("max_num_seqs"), "must be > 0")
                .hint("omit it for vLLM's default (256; 1,024 on an H100-class GPU)"),
        );
    }
    if g.max_num_batched_tokens == Some(0) {
        p.push(
            Problem::new(at("max_num_batched_tokens"), "must be > 0")
                .hint("omit it for vLLM's default (2,048; 8,192 on an H100-class GPU)"),
        );
    }
    if g.max_model_len == Some(0) {
        p.push(Problem::new(at("max_model_len"), "must be > 0").hint("omit it for no limit"));
    }
    if let Some(sp) = &g.speculative {
        check_speculative(p, s, i, sp);
    }
}

/// Where a group's speculative decoding can run: vLLM's v1 scheduler, no pipeline
/// parallelism (vLLM's documented restriction), an instance that decodes; its per-client
/// rates name the workload's clients. (Its numbers are checked when the group is resolved.)
fn check_speculative(
    p: &mut Vec<Problem>,
    s: &Scenario,
    i: usize,
    sp: &crate::scenario::SpeculativeSpec,
) {
    let g = &s.cluster.groups[i];
    let at = |f: &str| format!("cluster.groups[{i}].{f}");
    if g.scheduler != "vllm_v1" {
        p.push(
            Problem::new(
                at("speculative"),
                format!(
                    "speculative decoding runs with the vllm_v1 scheduler, not {}",
                    g.scheduler
                ),
            )
            .hint("remove `scheduler` (vllm_v1 is the default) or the speculative block"),
        );
    }
    if g.pp > 1 {
        p.push(
            Problem::new(
                at("speculative"),
                format!(
                    "vLLM does not combine speculative decoding with pipeline parallelism (pp {})",
                    g.pp
                ),
            )
            .hint("use pp: 1 (and tp for the GPUs), or remove the speculative block"),
        );
    }
    if g.role == crate::scenario::Role::Prefill {
        p.push(
            Problem::new(
                at("speculative"),
                "a prefill-only group never decodes, so it never verifies drafts",
            )
            .hint("give the speculative block to the decode group"),
        );
    }
    let names = s.client_names();
    for name in sp.acceptance_by_client.keys() {
        if !names.contains(name) {
            p.push(
                Problem::new(
                    at(&format!("speculative.acceptance_by_client.{name}")),
                    format!("no workload client is named `{name}`"),
                )
                .hint(format!("the clients are: {}", names.join(", "))),
            );
        }
    }
}

/// A group's batch scheduler: a known name, known parameters that build.
fn check_scheduler(
    p: &mut Vec<Problem>,
    i: usize,
    g: &crate::scenario::InstanceGroup,
    catalog: &Catalog,
    seed: u64,
) {
    let labels = crate::labels::Labels::default();
    check_member::<super::schedulers::BatchFormation>(
        p,
        catalog,
        "scheduler",
        &format!("cluster.groups[{i}].scheduler"),
        &format!("cluster.groups[{i}].scheduler_params"),
        &g.scheduler,
        &PolicyArgs::new(seed, &g.scheduler_params, &labels),
    );
}

/// Checks `cluster.kv_store`: its figures, and that every group can share its blocks (the
/// same model, KV data type, parallelism and block size: a block is reusable only by an
/// instance that lays it out alike, as LMCache keys its chunks by model and TP rank).
pub fn check_kv_store(p: &mut Vec<Problem>, s: &Scenario) {
    let Some(st) = &s.cluster.kv_store else {
        return;
    };
    let at = |f: &str| format!("cluster.kv_store.{f}");
    if st.blocks == 0 || st.blocks > 1 << 28 {
        p.push(
            Problem::new(
                at("blocks"),
                format!("must be within 1..=268,435,456, got {}", st.blocks),
            )
            .hint("leave kv_store out for no shared store"),
        );
    }
    crate::scenario::latency_us(p, &at("latency_us"), st.latency_us);
    crate::scenario::gb_per_s(p, &at("link_gb_per_s"), st.link());
    let groups = &s.cluster.groups;
    for (i, g) in groups.iter().enumerate() {
        let at = |f: &str| format!("cluster.groups[{i}].{f}");
        for (f, missing) in [("model", g.model.is_none()), ("gpu", g.gpu.is_none())] {
            if missing {
                p.push(
                    Problem::new(
                        at(f),
                        "is needed by the shared KV store (`cluster.kv_store`)",
                    )
                    .hint("they size a block in bytes for the store's link"),
                );
            }
        }
    }
    let Some(first) = groups.first() else {
        return;
    };
    for (i, g) in groups.iter().enumerate().skip(1) {
        let at = |f: &str| format!("cluster.groups[{i}].{f}");
        for (f, same) in [
            ("model", g.model == first.model),
            (
                "kv_cache_dtype",
                g.kv_cache_dtype_name() == first.kv_cache_dtype_name(),
            ),
            ("tp", g.tp.max(1) == first.tp.max(1)),
            ("pp", g.pp.max(1) == first.pp.max(1)),
            ("block_size", g.block_size == first.block_size),
        ] {
            if !same {
                p.push(
                    Problem::new(
                        at(f),
                        "differs from group 0's, but every group shares `cluster.kv_store`",
                    )
                    .hint("a stored block is reusable only by instances that lay it out alike: give every group the same model, kv_cache_dtype, tp, pp and block_size"),
                );
            }
        }
    }
}
