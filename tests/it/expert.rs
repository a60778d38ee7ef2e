//! Wide expert parallelism with data-parallel attention (issue 33 item 4): what a scenario's
//! `expert_parallel` block changes in an instance (KV blocks, budgets, GPUs) and what it
//! refuses. The step pricing itself is checked by hand and against DeepEP's measured
//! kernels in `src/latency/expert.rs`.

use crate::common::{invalid, parse, run, servesim_ok};
use servesim::model::{ModelConfig, find_gpu, kv_capacity, params, routed_expert_params};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn qwen(extra: &str, workload: &str) -> String {
    format!(
        r#"(seed: 3, cluster: (groups: [(count: 1, model: "qwen3-30b-a3b", gpu: "H100",
             engine: (preset: Bare), {extra})]),
           workload: ({workload}))"#
    )
}

#[test]
fn data_parallel_ranks_hold_the_attention_weights_each_and_share_the_experts() {
    // Qwen3-30B-A3B (bf16) on 4 ranks of one H100: 4 × 72 GiB usable; the non-expert
    // weights 4 times, the experts once; 8 GiB of activations and 0.6 GiB of other memory
    // per GPU; a block of 16 tokens is 48 layers × 2 × 4 KV heads × 128 × 2 B × 16.
    let m = ModelConfig::bundled("qwen3-30b-a3b").unwrap();
    let (p, e) = (params(&m), routed_expert_params(&m));
    // The experts are most of the model: 48 layers × 128 × 3 × 2,048 × 768.
    assert_eq!(e, 48.0 * 128.0 * 3.0 * 2048.0 * 768.0);
    let weights = ((p - e) * 4.0 + e) * 2.0 / GIB;
    let spare = 4.0 * 80.0 * 0.9 - weights - 4.0 * 8.0 - 0.6 * 4.0;
    let block = 48.0 * 2.0 * 4.0 * 128.0 * 2.0 * 16.0;
    let expected = (spare / 4.0 * GIB / block).floor() as u64 * 4;
    let sc = parse(&qwen(
        "expert_parallel: (dp: 4)",
        "num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(16), output_tokens: Constant(1))]",
    ));
    let (s, _) = run(&sc);
    assert_eq!(u64::from(s.instances[0].kv_total_blocks), expected);
    // One H100 per rank could not hold the whole model and a cache; four with TP hold one
    // copy of everything, so they have more room for KV than four ranks do.
    let tp4 = kv_capacity(&m, &find_gpu("H100").unwrap(), 4, 1, 0.9, 16).unwrap();
    assert!(
        u64::from(tp4.blocks) * 4 / 2 > expected / 4,
        "per-GPU KV of tp 4 vs dp 4"
    );
}

#[test]
fn each_rank_brings_its_own_budgets() {
    // max_num_seqs 2 per rank: four ranks run eight requests at once, tp 4 (one rank)
    // two; a 2,048-token prompt is chunked at one rank's 512-token budget: four steps.
    let eight = "clients: [(arrival: AllAtZero(count: 8), input_tokens: Constant(64), output_tokens: Constant(4))]";
    let (dp4, rows) = run(&parse(&qwen(
        "kv_blocks: 4000, max_num_seqs: 2, expert_parallel: (dp: 4)",
        eight,
    )));
    // The first arrival starts a step alone; the seven others all join the next one.
    let ttfts: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.us("ttft_ms")).collect();
    assert_eq!(ttfts.len(), 2, "{ttfts:?}");
    let (_, rows1) = run(&parse(&qwen(
        "kv_blocks: 4000, max_num_seqs: 2, tp: 4",
        eight,
    )));
    let starts: std::collections::BTreeSet<u64> =
        rows1.iter().map(|r| r.us("scheduling_delay_ms")).collect();
    assert!(starts.len() >= 4, "tp 4 runs two at a time: {starts:?}");
    assert_eq!(dp4.requests.completed, 8);
    let long = "clients: [(arrival: AllAtZero(count: 1), input_tokens: Constant(2048), output_tokens: Constant(1))]";
    let (s, _) = run(&parse(&qwen(
        "kv_blocks: 4000, max_num_batched_tokens: 512, expert_parallel: (dp: 4)",
        long,
    )));
    assert_eq!(s.instances[0].steps, 4);
}

#[test]
fn an_instance_counts_all_its_gpus() {
    // 2 ranks × tp 2 = 4 GPUs an instance: cost and placement count them all.
    let sc = parse(&qwen(
        "cost_per_gpu_hour: 2.0, expert_parallel: (dp: 2), tp: 2",
        "num_requests: 20, clients: [(rate_per_s: 10.0, input_tokens: Constant(64), output_tokens: Constant(8))]",
    ));
    let (s, _) = run(&sc);
    assert_eq!(s.groups[0].gpus_per_instance, 4);
    let hours = s.groups[0].gpu_hours;
    assert!(
        (hours - 4.0 * s.sim_duration_s / 3600.0).abs() < 1e-9,
        "{hours}"
    );
    assert!((s.cost.total - 2.0 * hours).abs() < 1e-9);
}

#[test]
fn bad_expert_parallelism_is_refused_with_the_reason() {
    let group = |model: &str, extra: &str| {
        format!(
            r#"(cluster: (groups: [(model: "{model}", gpu: "H100", {extra})]),
               workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#
        )
    };
    for (model, extra, expect) in [
        (
            "llama-3.1-8b-instruct",
            "expert_parallel: (dp: 2)",
            "has no experts",
        ),
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 0)",
            "expert_parallel.dp: must be ≥ 1",
        ),
        ("qwen3-30b-a3b", "expert_parallel: (dp: 1)", "dp × tp ≥ 2"),
        (
            "mixtral-8x7b-v0.1",
            "expert_parallel: (dp: 16)",
            "16 GPUs for 8 experts",
        ),
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 2, imbalance: 0.5)",
            "imbalance: must be ≥ 1",
        ),
        // On 2 GPUs the busiest takes at most all rows: twice the mean (it was capped there
        // silently).
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 2, imbalance: 2.5)",
            "imbalance: 2.5 is more than the 2 a step can reach: with 128 experts of 8 per token over 2 GPUs",
        ),
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 2, rdma_gb_per_s: 0.0)",
            "rdma_gb_per_s: must be",
        ),
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 2, latency_us: -1.0)",
            "latency_us: must be",
        ),
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 2, latency_us: 1e12)",
            "latency_us: must be a number within 0..=10⁹ µs, got 1000000000000",
        ),
        (
            "qwen3-30b-a3b",
            "pp: 2, expert_parallel: (dp: 2)",
            "not with pipeline parallelism",
        ),
        (
            "qwen3-30b-a3b",
            "latency: TrainedPhysics(), expert_parallel: (dp: 2)",
            "priced by the roofline latency model only",
        ),
        (
            "qwen3-30b-a3b",
            "expert_parallel: (dp: 2, all2all: Pplx)",
            "unknown variant `Pplx`",
        ),
    ] {
        let e = invalid(&group(model, extra));
        assert!(e.contains(expect), "{extra}: {e}");
        assert!(e.contains("bad.ron:1:"), "{extra}: located: {e}");
    }
    // Across nodes with no NIC figure anywhere (the H20 profile has none).
    let e = invalid(
        r#"(cluster: (groups: [(model: "qwen3-30b-a3b", gpu: "H20", expert_parallel: (dp: 16))]),
           workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#,
    );
    assert!(
        e.contains("span nodes of 8") && e.contains("rdma_gb_per_s"),
        "{e}"
    );
}

#[test]
fn tensor_parallelism_wider_than_a_node_all_reduces_over_the_nics_without_a_topology() {
    // tp 16 on H100 nodes of 8 (NVLink bus 360 GB/s, 50 GB/s NICs at 0.8): NCCL's
    // hierarchical all-reduce, 2·15/16 / (2·7/8/360 + 2·(1/2)/(8·40)) = 234.7 GB/s.
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(
        dir.join("tp16.ron"),
        r#"(cluster: (groups: [(model: "deepseek-v3", gpu: "H100", tp: 16)]),
            workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#,
    )
    .unwrap();
    let out = servesim_ok(&["validate", "tp16.ron"], dir);
    let out = String::from_utf8_lossy(&out.stdout);
    let bus = 2.0 * 15.0 / 16.0 / (2.0 * 7.0 / 8.0 / 360.0 + 2.0 * 0.5 / (8.0 * 40.0));
    assert!(
        out.contains(&format!(
            "spans 2 nodes of 8 H100 GPUs: the roofline's all-reduce runs at {bus:.1} GB/s"
        )),
        "{out}"
    );
}

#[test]
fn the_docs_table_matches_the_bundled_scenario() {
    // docs/expert-parallel.md's first measured row, 16 req/s, is scenarios/moe-wide-ep.ron
    // as bundled.
    let cells = crate::common::doc_row("expert-parallel", "| bundled: EP 16,");
    let (s, _) = crate::common::run_bundled("moe-wide-ep");
    let n = crate::common::thousands;
    assert_eq!(cells[2], crate::common::mean_p99(&s.ttft_ms));
    assert_eq!(cells[3], format!("{:.1}", s.itl_ms.mean.unwrap()));
    assert_eq!(cells[4], n(s.e2e_ms.mean.unwrap()));
    assert_eq!(s.requests.completed, 6000);
    assert_eq!(
        s.groups.iter().map(|g| g.gpus_per_instance).sum::<u32>(),
        32
    );
}
