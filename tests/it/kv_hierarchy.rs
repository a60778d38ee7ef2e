//! A KV hierarchy beyond the instance (issue 34 item 2): NVMe tiers and the shared store,
//! worked out by hand on Llama-3.1-8B instances (a 16-token block is 16 × 131,072 B =
//! 2,097,152 B, so a 2.097152 GB/s link moves one in 1,000 µs) whose steps cost 1,000 µs +
//! 1 µs per prompt token + 100 µs per decode token (BLIS's blackbox, no serving path).

use crate::common::{assert_conserved, invalid, parse, read_rows, run, servesim_ok};

/// Two instances behind round robin sharing a write-through store (500 µs latency, one block
/// per 1,000 µs); two requests `gap_us` apart with the same 64-token prefix and 16 tokens of
/// their own (80 in all), one output token each.
fn two_requests(gap_us: u64, store: bool) -> String {
    let store = if store {
        "kv_store: (blocks: 100, latency_us: 500.0, link_gb_per_s: 2.097152, write: WriteThrough),"
    } else {
        ""
    };
    let rate = 1e6 / gap_us as f64;
    format!(
        r#"(seed: 5, cluster: (groups: [(count: 2, kv_blocks: 1000, model: "llama-3.1-8b-instruct",
             gpu: "H100", latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]))],
             {store}),
           policies: (routing: "round_robin"),
           workload: (num_requests: 2, clients: [(rate_per_s: {rate}, arrival: Constant,
             input_tokens: Constant(16), output_tokens: Constant(1), shared_prefix_tokens: 64)]))"#
    )
}

#[test]
fn a_prefix_written_by_one_instance_is_loaded_by_another_after_the_store_latency() {
    // Request 0 prefills 80 tokens on instance 0 in 1,080 µs; its five full blocks leave as
    // the step ends, one per 1,000 µs, each readable 500 µs after it is sent: blocks 0..3 of
    // the prefix at +2,580, +3,580, +4,580, +5,580 µs. Request 1 goes to instance 1.
    let (s, rows) = run(&parse(&two_requests(1_000_000, true)));
    assert_conserved(&s, &rows);
    assert_eq!(rows[0].us("ttft_ms"), 1080);
    assert_eq!(rows[0].str("instance"), "0");
    assert_eq!(rows[1].str("instance"), "1");
    // A second later, all four prefix blocks (the cap leaves the last prompt token to
    // compute) load in 500 + 4 × 1,000 µs, then 16 tokens prefill in 1,016 µs.
    assert_eq!(rows[1].us("ttft_ms"), 500 + 4000 + 1016);
    assert_eq!(rows[1].u64("cached_tokens"), 64);
    let st = s.kv.store.as_ref().expect("a store summary");
    assert_eq!(st.write, "write_through");
    // Five blocks from request 0, one (its own last block) from request 1.
    assert_eq!(
        (
            st.written_blocks,
            st.loaded_blocks,
            st.cross_instance_loaded_blocks
        ),
        (6, 4, 4)
    );
    assert_eq!(st.held_blocks, 6);
    assert_eq!(s.kv.hit_blocks, 4);
    assert_eq!(s.kv.gpu_hit_rate, 0.0, "no hit came from a GPU");
    // 4 of 10 prompt blocks admitted came from the store.
    assert_eq!(st.hit_rate, 0.4);
}

#[test]
fn a_block_not_yet_readable_is_computed_again() {
    // 4,000 µs after request 0 arrived, blocks 0 and 1 are readable (2,580 and 3,580 µs),
    // block 2 not before 4,580: two load in 500 + 2,000 µs, 48 tokens prefill in 1,048 µs.
    let (s, rows) = run(&parse(&two_requests(4_000, true)));
    assert_eq!(rows[1].us("ttft_ms"), 2500 + 1048);
    assert_eq!(rows[1].u64("cached_tokens"), 32);
    assert_eq!(s.kv.store.as_ref().unwrap().loaded_blocks, 2);
    // At 2,500 µs none is: the request computes all 80 tokens, like one without a store.
    let (s, rows) = run(&parse(&two_requests(2_500, true)));
    assert_eq!(rows[1].us("ttft_ms"), 1080);
    assert_eq!(s.kv.store.as_ref().unwrap().loaded_blocks, 0);
    let (s, rows) = run(&parse(&two_requests(1_000_000, false)));
    assert_eq!(rows[1].us("ttft_ms"), 1080);
    assert!(s.kv.store.is_none() && s.kv.nvme.is_none());
}

#[test]
fn nvme_reads_are_priced_on_the_drive_and_the_host_link() {
    // One instance of 6 GPU blocks, a 1-block CPU tier and an NVMe tier read at 2.097152 GB/s
    // (1,000 µs a block) after 300 µs. Request 0 (prefix A, 64 tokens: blocks 0..3; its one
    // output token needs no KV) leaves: the free list is [4, 5, 3, 2, 1, 0]. Request 1
    // (prefix B, 80 tokens) takes 4, 5, 3, 2, 1: a3, a2, a1 leave the GPU in that order; the
    // CPU tier keeps the last (a1), the NVMe tier the others; a0 stays on the GPU. Request 2
    // (prefix A again, capped at 3 blocks) hits a0 on the GPU, copies a1 from the CPU tier
    // and reads a2 from the drive: 300 + 1,000 µs, which outlasts the host link's 10 + 2 ×
    // 41.9 µs (the CPU copy and the read both cross it); then 16 tokens in 1,016 µs.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "arrival_us,input_tokens,output_tokens,prefix_group,prefix_tokens\n\
         0,64,1,a,64\n1000000,80,1,b,80\n2000000,64,1,a,64\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("s.ron"),
        r#"(seed: 5, cluster: (groups: [(count: 1, kv_blocks: 6, model: "llama-3.1-8b-instruct",
             gpu: "H100", latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]),
             cpu_kv_blocks: 1, nvme_kv_blocks: 10, nvme_read_gb_per_s: 2.097152,
             nvme_latency_us: 300.0, max_num_seqs: 1)]),
           workload: (traces: [(format: ServesimCsv, file: "t.csv")]))"#,
    )
    .unwrap();
    servesim_ok(&["run", "s.ron", "--out", "o"], dir.path());
    let rows = read_rows(&dir.path().join("o/requests.csv"));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("o/summary.json")).unwrap())
            .unwrap();
    assert_eq!(rows[2].us("ttft_ms"), 300 + 1000 + 1016);
    assert_eq!(rows[2].u64("cached_tokens"), 48);
    assert_eq!(s["kv"]["nvme"]["loaded_blocks"], 1);
    // Written: a3 and a2 (request 1), then a1, b4, b3 as request 2's GPU blocks push the
    // CPU tier's block down.
    assert_eq!(s["kv"]["nvme"]["written_blocks"], 5);
    assert_eq!(s["kv"]["nvme"]["capacity_blocks"], 10);
    assert_eq!(s["kv"]["reloaded_blocks"], 1);
}
#[test]
fn bad_tiers_and_stores_are_refused_with_the_reason() {
    let group = |extra: &str| {
        format!(
            r#"(cluster: (groups: [(model: "llama-3.1-8b-instruct", gpu: "H100", {extra})]),
               workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))]))"#
        )
    };
    for (extra, path, says) in [
        (
            "nvme_kv_blocks: 100, nvme_latency_us: 50.0",
            "cluster.groups[0].nvme_kv_blocks",
            "needs a CPU tier above it",
        ),
        (
            "cpu_kv_blocks: 10, nvme_kv_blocks: 100",
            "cluster.groups[0].nvme_latency_us",
            "is required with an NVMe tier",
        ),
        (
            "nvme_latency_us: 50.0",
            "cluster.groups[0].nvme_latency_us",
            "has no NVMe tier",
        ),
        (
            "cpu_kv_blocks: 10, nvme_kv_blocks: 100, nvme_latency_us: 50.0, nvme_read_gb_per_s: 0.0",
            "cluster.groups[0].nvme_read_gb_per_s",
            "must be a bandwidth within 0.001..=10⁶ GB/s, got 0",
        ),
    ] {
        let e = invalid(&group(extra));
        assert!(e.contains(path) && e.contains(says), "{extra}: {e}");
    }
    let cluster = |groups: &str, store: &str| {
        format!(
            r#"(cluster: (groups: [{groups}], kv_store: ({store})),
               workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))]))"#
        )
    };
    let llama = r#"(model: "llama-3.1-8b-instruct", gpu: "H100")"#;
    for (groups, store, path, says) in [
        (
            llama,
            "blocks: 0, latency_us: 10.0",
            "cluster.kv_store.blocks",
            "must be within",
        ),
        (
            llama,
            "blocks: 10, latency_us: -1.0",
            "cluster.kv_store.latency_us",
            "within 0..=10⁹",
        ),
        (
            llama,
            "blocks: 10, latency_us: 1.0, link_gb_per_s: 0.0",
            "cluster.kv_store.link_gb_per_s",
            "must be a bandwidth within 0.001..=10⁶ GB/s, got 0",
        ),
        (llama, "blocks: 10", "latency_us", "missing field"),
        (
            llama,
            "blocks: 10, latency_us: 1.0, write: Sometimes",
            "write",
            "Sometimes",
        ),
        (
            "(latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 1.0, 1.0]))",
            "blocks: 10, latency_us: 1.0",
            "cluster.groups[0].model",
            "needed by the shared KV store",
        ),
        (
            r#"(model: "llama-3.1-8b-instruct", gpu: "H100"), (model: "llama-3.1-8b-instruct", gpu: "H100", tp: 2)"#,
            "blocks: 10, latency_us: 1.0",
            "cluster.groups[1].tp",
            "differs from group 0's",
        ),
    ] {
        let e = invalid(&cluster(groups, store));
        assert!(e.contains(path) && e.contains(says), "{store}: {e}");
    }
}

#[test]
fn the_bundled_scenario_reuses_prefixes_across_instances() {
    let sc = parse(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/kv-hierarchy.ron"
        ))
        .unwrap(),
    );
    let (s, rows) = run(&sc);
    assert_conserved(&s, &rows);
    let st = s.kv.store.as_ref().unwrap();
    let n = s.kv.nvme.as_ref().unwrap();
    // Round robin sends later turns elsewhere: most store loads were written by another
    // instance, and every tier serves some hits.
    assert!(
        st.cross_instance_loaded_blocks * 2 > st.loaded_blocks,
        "{st:?}"
    );
    assert!(n.loaded_blocks > 0 && s.kv.reloaded_blocks > 0);
    let tiers = s.kv.gpu_hit_rate + s.kv.cpu_hit_rate + n.hit_rate + st.hit_rate;
    assert!(
        (tiers - s.kv.hit_rate).abs() < 1e-9,
        "tiers sum to the hit rate"
    );
}

/// The store with the features that add, remove and restart instances: every request stays
/// accounted for (invariants on), and instances that were off or crashed load from it.
#[test]
fn the_store_outlives_crashes_and_serves_new_and_disaggregated_instances() {
    let group = |extra: &str| {
        format!(
            r#"(model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 400, cpu_kv_blocks: 100,
                nvme_kv_blocks: 400, nvme_latency_us: 80.0, {extra})"#
        )
    };
    let workload = r#"workload: (num_requests: 600, clients: [(rate_per_s: 20.0,
        input_tokens: Constant(64), output_tokens: Constant(32), shared_prefix_tokens: 256,
        prefix_groups: 4, timeout_s: 60.0)])"#;
    let store = "kv_store: (blocks: 5000, latency_us: 50.0, write: WriteThrough)";
    // A crash with retries, and a group that scales out from one instance.
    let crash = format!(
        r#"(seed: 9, cluster: (groups: [{}], {store}),
           policies: (routing: "round_robin", autoscale: "target_tracking",
             autoscale_params: {{"target_in_flight": 2.0, "interval_s": 2.0}}),
           faults: (crashes: [(instance: 0, at_s: 10.0)], repair_s: 2.0, reload_s: 1.0,
             on_crash: Retry()),
           {workload})"#,
        group("count: 2, scaling: (min: 1, max: 4, provision_s: 1.0, load_s: 1.0)")
    );
    let (s, rows) = run(&parse(&crash));
    assert_conserved(&s, &rows);
    let st = s.kv.store.as_ref().unwrap();
    assert!(st.cross_instance_loaded_blocks > 0, "{st:?}");
    assert!(st.held_blocks <= st.capacity_blocks);
    let crashes = s.faults.as_ref().unwrap().crashes.as_ref().unwrap();
    assert_eq!(crashes.crashes, 1, "the crash happened");
    assert!(s.groups[0].scale_ups > 0, "the group scaled out");
    // Prefill/decode pools sharing the store.
    let pd = format!(
        r#"(seed: 9, cluster: (groups: [{}, {}], {store}), {workload})"#,
        group("role: Prefill, count: 2"),
        group("role: Decode, count: 2")
    );
    let (s, rows) = run(&parse(&pd));
    assert_conserved(&s, &rows);
    let st = s.kv.store.as_ref().unwrap();
    let n = s.kv.nvme.as_ref().unwrap();
    let tiers = s.kv.gpu_hit_rate + s.kv.cpu_hit_rate + n.hit_rate + st.hit_rate;
    assert!((tiers - s.kv.hit_rate).abs() < 1e-9, "{:?}", s.kv);
}

/// Found by random feature combinations: a P/D decode instance takes the prefix of a
/// request handed to it from the shared store rather than over the wire. Those loads are
/// the store's (`loaded_blocks`), not prompt hits: one prefill instance with room for every
/// prompt computes or finds every prompt block on its own GPU, so every hit is a GPU hit.
/// (They went into the hit rates: `gpu_hit_rate` underflowed to 1.7 × 10¹⁷.)
#[test]
fn a_decode_instances_loads_from_the_store_are_not_prompt_hits() {
    let (s, rows) = run(&parse(
        r#"(seed: 5, cluster: (groups: [
            (name: "p", count: 1, role: Prefill, model: "llama-3.1-8b-instruct", gpu: "H100"),
            (name: "d", count: 3, role: Decode, model: "llama-3.1-8b-instruct", gpu: "H100", max_num_seqs: 1)],
            kv_store: (blocks: 5000, latency_us: 200.0, write: WriteThrough)),
          policies: (routing: "least_loaded"),
          workload: (num_requests: 30, clients: [(rate_per_s: 100.0, input_tokens: Constant(129),
            output_tokens: Constant(20), shared_prefix_tokens: 64, prefix_groups: 2)]))"#,
    ));
    assert_conserved(&s, &rows);
    let st = s.kv.store.as_ref().unwrap();
    assert!(
        st.loaded_blocks > 0,
        "decode instances loaded from the store: {st:?}"
    );
    assert!(s.kv.hit_blocks > 0);
    assert_eq!(st.hit_rate, 0.0, "{st:?}");
    assert_eq!(s.kv.gpu_hit_rate, s.kv.hit_rate, "{:?}", s.kv);
}
