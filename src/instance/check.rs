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
    if !(g.cost_per_gpu_hour.is_finite() && (0.0..=1e6).contains(&g.cost_per_gpu_hour)) {
        p.push(Problem::new(
            at("cost_per_gpu_hour"),
            format!(
                "must be a number within 0..=10⁶, got {}",
                g.cost_per_gpu_hour
            ),
        ));
    }
    check_scheduler(p, i, g, catalog, s.seed);
    if g.block_size == 0 {
        p.push(Problem::new(at("block_size"), "must be > 0").hint("vLLM's default is 16 tokens"));
    }
    if g.max_num_seqs == 0 {
        p.push(Problem::new(at("max_num_seqs"), "must be > 0").hint("vLLM's default is 256"));
    }
    if g.max_num_batched_tokens == 0 {
        p.push(
            Problem::new(at("max_num_batched_tokens"), "must be > 0")
                .hint("vLLM's default is 2048"),
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
