//! Hybrid attention (issue 33 item 5): sliding-window and linear-attention layers in the KV
//! cache, traced by hand through whole runs; what servesim refuses for such models. The
//! layout's arithmetic is checked by hand in `src/model/capacity.rs`, the cache's in
//! `src/kv/tests.rs`, the step pricing in `src/latency/hybrid.rs`.

use crate::common::{invalid, parse, run};

/// Three requests at once on one instance of `model` (no serving overheads): the first
/// starts a step alone, the other two ask to join the next one. Their times to first
/// token.
fn three_at_once(model: &str, extra: &str, prompt: u32, output: u32) -> Vec<u64> {
    let budget = if extra.contains("max_num_batched_tokens") {
        ""
    } else {
        "max_num_batched_tokens: 4096,"
    };
    let sc = parse(&format!(
        r#"(seed: 3, cluster: (groups: [(count: 1, model: "{model}", gpu: "H100",
             engine: (preset: Bare), {budget} {extra})]),
           workload: (clients: [(arrival: AllAtZero(count: 3), input_tokens: Constant({prompt}),
             output_tokens: Constant({output}))]))"#
    ));
    let (s, rows) = run(&sc);
    assert_eq!(s.requests.completed, 3);
    rows.iter().map(|r| r.us("ttft_ms")).collect()
}

/// True if the second and third request joined the same step.
fn together(ttfts: &[u64]) -> bool {
    ttfts[1] == ttfts[2] && ttfts[0] < ttfts[1]
}

#[test]
fn a_prefill_holds_its_sliding_blocks_for_every_token_and_a_decode_only_its_window() {
    // Gemma-3-27B: 1 full-attention and 6 sliding-window groups over 1,024 tokens, 16-token
    // blocks. A 1,600-token prompt computed in one chunk holds 100 blocks in every group:
    // 700. At the next step the first request decodes token 1,601 (1,600 computed): 101
    // full-attention blocks, and each sliding group keeps the blocks from
    // ⌊(1,600 + 1 − 1,024)/16⌋ = 36 on, 65 of them: 101 + 390 = 491. The two others need
    // 700 each: together they fit 491 + 1,400 = 1,891 blocks, not one fewer.
    let gemma =
        |blocks: u32| three_at_once("gemma-3-27b-it", &format!("kv_blocks: {blocks}"), 1600, 2);
    assert!(together(&gemma(1891)));
    assert!(!together(&gemma(1890)));
}

#[test]
fn a_model_whose_every_layer_slides_frees_its_own_blocks_behind_the_window() {
    // Mistral-7B-v0.1: one group of 32 sliding layers over 4,096 tokens. A 6,400-token
    // prompt in one chunk holds 400 blocks. At the next step the first request decodes
    // token 6,401 (6,400 computed) and keeps the blocks from ⌊(6,400 + 1 − 4,096)/16⌋ =
    // 144 on: 401 − 144 = 257. The two others need 400 each: together 1,057, not one
    // fewer (full attention would need 401 + 800 = 1,201).
    let mistral = |blocks: u32| {
        three_at_once(
            "mistral-7b-v0.1",
            &format!("kv_blocks: {blocks}, max_num_batched_tokens: 16384"),
            6400,
            2,
        )
    };
    assert!(together(&mistral(1057)));
    assert!(!together(&mistral(1056)));
}

#[test]
fn with_the_hybrid_manager_disabled_every_layer_keeps_every_token() {
    // vLLM's --disable-hybrid-kv-cache-manager: one block per 16 tokens holds every layer.
    // The first request holds 101 blocks at the second step, the others 100 each: 301.
    let full = |blocks: u32| {
        three_at_once(
            "gemma-3-27b-it",
            &format!("kv_blocks: {blocks}, disable_hybrid_kv_cache_manager: true"),
            1600,
            2,
        )
    };
    assert!(together(&full(301)));
    assert!(!together(&full(300)));
}

#[test]
fn a_linear_attention_model_holds_its_states_whole_and_gets_no_prefix_hits() {
    // Qwen3-Next on 4 H100s: 1 full-attention group and 3 linear-attention groups whose
    // state is 17 blocks each (src/model/capacity.rs). A 160-token prompt holds 10 + 51
    // blocks; at the next step the first request holds 11 + 51, the others 61 each: 184.
    let qwen = |blocks: u32| {
        three_at_once(
            "qwen3-next-80b-a3b-instruct",
            &format!("tp: 4, kv_blocks: {blocks}"),
            160,
            2,
        )
    };
    assert!(together(&qwen(184)));
    assert!(!together(&qwen(183)));
    // One shared 1,024-token system prompt: Llama hits it, Qwen3-Next never does (the
    // recurrent state at its end is not kept).
    let shared = |model: &str, tp: u32| {
        let sc = parse(&format!(
            r#"(seed: 1, cluster: (groups: [(model: "{model}", gpu: "H100", tp: {tp})]),
               workload: (num_requests: 50, clients: [(rate_per_s: 5.0, shared_prefix_tokens: 1024,
                 input_tokens: Constant(76), output_tokens: Constant(4))]))"#
        ));
        run(&sc).0.kv.hit_rate
    };
    assert!(shared("llama-3.1-8b-instruct", 1) > 0.8);
    assert_eq!(shared("qwen3-next-80b-a3b-instruct", 4), 0.0);
    // A model whose every layer slides hits it too (its window's blocks are cached).
    assert!(shared("mistral-7b-v0.1", 1) > 0.8);
}

/// Checks the row of docs/hybrid-attention.md's table that starts with `start` against a
/// run of scenario `src`.
fn matches_doc_row(start: &str, src: &str) {
    let n = crate::common::thousands;
    let cells = crate::common::doc_row("hybrid-attention", start);
    let (s, _) = run(&parse(src));
    assert_eq!(
        cells[2],
        format!("{:.2}", s.throughput.requests_per_s),
        "{start}"
    );
    assert_eq!(cells[3], crate::common::mean_p99(&s.ttft_ms), "{start}");
    assert_eq!(
        cells[4],
        format!("{:.1}", s.itl_ms.mean.unwrap()),
        "{start}"
    );
    assert_eq!(cells[5], n(s.e2e_ms.mean.unwrap()), "{start}");
    assert_eq!(cells[6], s.preemptions.to_string(), "{start}");
}

fn bundled(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(path).unwrap()
}

/// Writes bundled model `model`'s config with `from` replaced by `to` into `dir`; its path
/// as a RON string, for a scenario's `model:`.
fn edited_model(dir: &tempfile::TempDir, model: &str, from: &str, to: &str) -> String {
    let config = bundled(&format!("assets/models/{model}.json"));
    assert!(config.contains(from), "{model} has {from}");
    let file = dir.path().join(format!("{model}-edited.json"));
    std::fs::write(&file, config.replace(from, to)).unwrap();
    format!("{:?}", file.to_str().unwrap().replace('\\', "/"))
}

#[test]
fn the_bundled_scenario_keeps_up_only_with_the_hybrid_manager() {
    // docs/hybrid-attention.md's table is scenarios/hybrid-attention.ron as bundled and
    // with the hybrid manager disabled.
    let text = bundled("scenarios/hybrid-attention.ron");
    matches_doc_row("| hybrid KV cache manager (bundled)", &text);
    matches_doc_row(
        "| `disable_hybrid_kv_cache_manager: true`",
        &text.replace(
            "gpu: \"H100\",",
            "gpu: \"H100\", disable_hybrid_kv_cache_manager: true,",
        ),
    );
}

#[test]
fn the_sliding_window_scenario_keeps_up_only_with_its_window() {
    // scenarios/sliding-window.ron as bundled, and with the model's config read with
    // "sliding_window": null (every layer full attention) from a model file.
    let text = bundled("scenarios/sliding-window.ron");
    matches_doc_row("| sliding window over 4,096 tokens (bundled)", &text);
    let dir = tempfile::tempdir().unwrap();
    let full = edited_model(
        &dir,
        "mistral-7b-v0.1",
        "\"sliding_window\": 4096",
        "\"sliding_window\": null",
    );
    matches_doc_row(
        "| every layer full attention",
        &text.replace("\"mistral-7b-v0.1\"", &full),
    );
}

#[test]
fn bad_hybrid_groups_are_refused_with_the_reason() {
    let group = |model: &str, extra: &str| {
        format!(
            r#"(cluster: (groups: [(model: "{model}", gpu: "H100", {extra})]),
               workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#
        )
    };
    for (model, extra, expect) in [
        (
            "gemma-3-27b-it",
            "role: Prefill",
            "role: P/D disaggregation",
        ),
        (
            "gemma-3-27b-it",
            "cpu_kv_blocks: 100",
            "cpu_kv_blocks: a CPU KV tier",
        ),
        (
            "gemma-3-27b-it",
            "cpu_kv_blocks: 100, nvme_kv_blocks: 100, nvme_latency_us: 100.0",
            "nvme_kv_blocks: an NVMe KV tier",
        ),
        ("gemma-3-27b-it", "pp: 2", "pipeline parallelism"),
        (
            "qwen3-next-80b-a3b-instruct",
            "tp: 4, expert_parallel: (dp: 2)",
            "expert_parallel: expert parallelism with qwen3-next",
        ),
        (
            "llama-3.1-8b-instruct",
            "disable_hybrid_kv_cache_manager: true",
            "disable_hybrid_kv_cache_manager: has no effect",
        ),
        (
            "qwen3-next-80b-a3b-instruct",
            "tp: 4, disable_hybrid_kv_cache_manager: true",
            "recurrent state needs vLLM's hybrid KV cache manager",
        ),
        (
            "mistral-7b-v0.1",
            "disable_hybrid_kv_cache_manager: true",
            "disable_hybrid_kv_cache_manager: has no effect: every layer of mistral-7b-v0.1 is sliding-window",
        ),
        (
            "mistral-7b-v0.1",
            "role: Decode",
            "role: P/D disaggregation",
        ),
    ] {
        let e = invalid(&group(model, extra));
        assert!(e.contains(expect), "{extra}: {e}");
        assert!(e.contains("bad.ron:1:"), "located: {e}");
    }
}

#[test]
fn a_small_window_under_preemption_and_prefix_hits_keeps_every_block_accounted() {
    // Every layer sliding over 40 tokens (not a multiple of the 16-token block): a hit
    // needs its last 3 blocks cached. Shared 512-token prefixes, a cache too small for the
    // load (preemptions, evictions of the prefixes' early blocks), invariants checked at
    // every step (the cache audit and every request's blocks against the reference counts).
    let dir = tempfile::tempdir().unwrap();
    let path = edited_model(
        &dir,
        "mistral-7b-v0.1",
        "\"sliding_window\": 4096",
        "\"sliding_window\": 40",
    );
    let sc = parse(&format!(
        r#"(seed: 9, cluster: (groups: [(count: 2, model: {path}, gpu: "H100", kv_blocks: 40,
             max_num_batched_tokens: 256)]),
           workload: (num_requests: 400, clients: [(rate_per_s: 40.0, shared_prefix_tokens: 512,
             prefix_groups: 4, input_tokens: Uniform(min: 16, max: 600),
             output_tokens: Uniform(min: 1, max: 300))]))"#
    ));
    let (s, _) = run(&sc);
    assert_eq!(s.requests.completed, 400);
    assert!(s.preemptions > 0, "the cache is tight");
    assert!(s.kv.hit_rate > 0.1, "{}", s.kv.hit_rate);
}

#[test]
fn sparse_attention_decodes_long_contexts_faster_and_validate_says_so() {
    // GLM-5.2 on 8 × H200: 8 requests of 40,000-token prompts (as many as its cache
    // holds). With `index_topk` a decode reads 2,048 latent rows per layer (plus the
    // indexer's keys); the same config without it (a model file) reads all 40,000.
    let dir = tempfile::tempdir().unwrap();
    let dense = edited_model(&dir, "glm-5.2-fp8", "\"index_topk\": 2048,", "");
    let scenario = |model: &str| {
        format!(
            r#"(seed: 2, cluster: (groups: [(model: {model}, gpu: "H200", tp: 8)]),
               workload: (clients: [(arrival: AllAtZero(count: 8), input_tokens: Constant(40000),
                 output_tokens: Constant(64))]))"#
        )
    };
    let itl = |model: &str| run(&parse(&scenario(model))).0.itl_ms;
    let (sparse, full) = (itl("\"glm-5.2-fp8\""), itl(&dense));
    // Decode steps share the GPUs with 2,048-token prefill chunks; the sparse model's
    // decodes read less, its chunks add the indexer's logits over every pair.
    assert!(sparse.mean < full.mean, "{sparse:?} vs {full:?}");
    assert!(
        sparse.p90.unwrap() < 0.9 * full.p90.unwrap(),
        "{sparse:?} vs {full:?}"
    );
    let path = dir.path().join("glm.ron");
    std::fs::write(&path, scenario("\"glm-5.2-fp8\"")).unwrap();
    let out = crate::common::servesim_ok(&["validate", path.to_str().unwrap()], dir.path());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("78 MLA layers with DeepSeek sparse attention: a query attends over the 2048 cached tokens"),
        "{text}"
    );
}
