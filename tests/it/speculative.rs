//! Speculative decoding (issue 33 item 1), worked out by hand on one instance whose steps
//! cost 1,000 µs + 1 µs per prompt token + 100 µs per decode token (BLIS's blackbox, no
//! serving path).

use crate::common::{invalid, parse, run, run_keeping};

/// One request (or `n`) of 32 prompt and `output` output tokens on one instance, with
/// `speculative` as given.
fn one(speculative: &str, n: u32, output: u32) -> String {
    format!(
        r#"(seed: 5, cluster: (groups: [(count: 1, kv_blocks: 1000,
             latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]),
             {speculative})]),
           workload: (num_requests: {n}, clients: [(rate_per_s: 1.0, arrival: Constant,
             input_tokens: Constant(32), output_tokens: Constant({output}))]))"#
    )
}

#[test]
fn every_draft_accepted_emits_k_plus_one_tokens_a_step() {
    // Prefill: 1,000 + 32 = 1,032 µs, first token. Then two verifications of 1 + 3
    // positions (1,000 + 400 µs each), 4 tokens each: 9 tokens at 3,832 µs. The last
    // token needs no draft (d = min(3, 10 − 9 − 1) = 0): 1,100 µs, done at 4,932 µs.
    let sc = parse(&one(
        "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: PerPosition([1.0, 1.0, 1.0]))",
        1,
        10,
    ));
    let (s, rows) = run(&sc);
    let r = &rows[0];
    assert_eq!(r.us("ttft_ms"), 1032);
    assert_eq!(r.us("e2e_ms"), 4932);
    assert_eq!((r.u64("drafted_tokens"), r.u64("accepted_tokens")), (6, 6));
    assert_eq!(r.u64("generated_tokens"), 10);
    // Nine tokens after the first in 3,900 µs: each one ITL sample of 433.3 µs.
    assert_eq!(r.str("mean_itl_ms"), "0.433");
    assert_eq!(s.instances[0].steps, 4);
    let sp = &s.speculative[0];
    assert_eq!(
        (sp.method.as_str(), sp.num_speculative_tokens),
        ("ngram", 3)
    );
    assert_eq!((sp.verifications, sp.drafted, sp.accepted), (2, 6, 6));
    assert_eq!(sp.mean_acceptance_length, Some(4.0));
    assert_eq!(sp.per_position, [1.0, 1.0, 1.0]);
    assert_eq!(sp.draft_s, 0.0, "n-grams draft on the CPU");
    // The same request without speculation: nine decode steps of 1,100 µs.
    let (_, plain) = run(&parse(&one("", 1, 10)));
    assert_eq!(plain[0].us("e2e_ms"), 1032 + 9 * 1100);
    assert_eq!(plain[0].us("ttft_ms"), 1032);
}

#[test]
fn a_verifications_tokens_stream_in_one_chunk() {
    // As above with 9 output tokens: the first at 1,032 µs, four at 2,432 and four at 3,832.
    // Behind an API server of 50 µs per step and 10 µs per request's chunk, each step's
    // tokens of the request leave in one chunk, 60 µs after the step (vLLM's one
    // `RequestOutput` per request and step): not 50 + 4 × 10.
    let sc = parse(&one(
        "speculative: (method: Ngram, num_speculative_tokens: 3, \
                       acceptance: PerPosition([1.0, 1.0, 1.0])), \
         engine: (async_scheduling: false, api_request_us: 0.0, api_us_per_prompt_token: 0.0, \
                  api_step_us: 50.0, api_us_per_output_token: 10.0, tokenizer_window_us: 0.0, \
                  schedule_us: 0.0, schedule_us_per_request: 0.0)",
        1,
        9,
    ));
    let (_, rows) = run(&sc);
    assert_eq!(rows[0].u64("generated_tokens"), 9);
    assert_eq!(rows[0].us("ttft_ms"), 1032 + 60);
    assert_eq!(rows[0].us("e2e_ms"), 3832 + 60);
}

#[test]
fn every_draft_rejected_costs_the_wider_steps_for_one_token_each() {
    // Each verification emits the target's own token only. Drafts per step: 3 while at least
    // 4 tokens remain (generated 1..=6), then 2, 1, 0: 6 × 1,400 + 1,300 + 1,200 + 1,100 µs
    // after the 1,032 µs prefill.
    let sc = parse(&one(
        "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: Rate(0.0))",
        1,
        10,
    ));
    let (s, rows) = run(&sc);
    assert_eq!(rows[0].us("e2e_ms"), 1032 + 6 * 1400 + 1300 + 1200 + 1100);
    assert_eq!(
        (
            rows[0].u64("drafted_tokens"),
            rows[0].u64("accepted_tokens")
        ),
        (6 * 3 + 2 + 1, 0)
    );
    assert_eq!(s.speculative[0].acceptance_rate, Some(0.0));
    assert_eq!(s.instances[0].steps, 10);
}

#[test]
fn acceptance_follows_the_per_position_rates() {
    // Rate 0.6: the draft at position i is accepted with probability 0.6ⁱ. 40 requests of
    // 1,000 tokens verify about 400 times each: the measured rates are within 0.02.
    let sc = parse(&one(
        "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: Rate(0.6))",
        40,
        1000,
    ));
    let (s, rows) = run(&sc);
    let sp = &s.speculative[0];
    assert_eq!(sp.configured_per_position.len(), 3);
    for (got, want) in sp.per_position.iter().zip([0.6, 0.36, 0.216]) {
        assert!((got - want).abs() < 0.02, "{:?}", sp.per_position);
    }
    let length = sp.mean_acceptance_length.unwrap();
    assert!((length - 2.176).abs() < 0.03, "{length}");
    // Every token is accounted for: 1 per request from its prefill, 1 + accepted per
    // verification, plus the draft-less last steps.
    let generated: u64 = rows.iter().map(|r| r.u64("generated_tokens")).sum();
    let accepted: u64 = rows.iter().map(|r| r.u64("accepted_tokens")).sum();
    assert_eq!(generated, 40 * 1000);
    assert_eq!(accepted, sp.accepted);
}

#[test]
fn a_requests_draws_do_not_depend_on_where_or_with_whom_it_ran() {
    // Counter-based draws keyed by (seed, request, tokens emitted): the same requests routed
    // differently over two instances accept the same drafts; another seed accepts others.
    let src = |routing: &str, seed: u32| {
        format!(
            r#"(seed: {seed}, cluster: (groups: [(count: 2, kv_blocks: 1000,
                 latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]),
                 speculative: (method: Ngram, num_speculative_tokens: 4, acceptance: Rate(0.7)))]),
               policies: (routing: "{routing}"),
               workload: (num_requests: 30, clients: [(rate_per_s: 40.0,
                 input_tokens: Constant(32), output_tokens: Uniform(min: 20, max: 200))]))"#
        )
    };
    let accepted = |routing: &str, seed: u32| -> Vec<(u64, u64, u64)> {
        run(&parse(&src(routing, seed)))
            .1
            .iter()
            .map(|r| {
                (
                    r.u64("request_id"),
                    r.u64("accepted_tokens"),
                    r.u64("instance"),
                )
            })
            .collect()
    };
    let a = accepted("round_robin", 1);
    let b = accepted("least_loaded", 1);
    assert_ne!(
        a.iter().map(|x| x.2).collect::<Vec<_>>(),
        b.iter().map(|x| x.2).collect::<Vec<_>>(),
        "the routers place the requests differently"
    );
    let drop_instance = |v: &[(u64, u64, u64)]| v.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>();
    assert_eq!(drop_instance(&a), drop_instance(&b));
    assert_ne!(
        drop_instance(&a),
        drop_instance(&accepted("round_robin", 2))
    );
}

#[test]
fn a_client_of_its_own_accepts_at_its_own_rate() {
    let sc = parse(
        r#"(seed: 3, cluster: (groups: [(count: 1, kv_blocks: 4000,
             latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]),
             speculative: (method: Ngram, num_speculative_tokens: 2, acceptance: Rate(0.0),
                           acceptance_by_client: {"code": Rate(1.0)}))]),
           workload: (num_requests: 20, clients: [
             (name: "chat", rate_per_s: 10.0, input_tokens: Constant(32), output_tokens: Constant(40)),
             (name: "code", rate_per_s: 10.0, input_tokens: Constant(32), output_tokens: Constant(40))]))"#,
    );
    let (_, rows) = run(&sc);
    for r in &rows {
        let want = if r.u64("client") == 1 {
            r.u64("drafted_tokens")
        } else {
            0
        };
        assert_eq!(r.u64("accepted_tokens"), want);
        assert!(r.u64("drafted_tokens") > 0);
    }
}

#[test]
fn an_eagle3_head_takes_memory_from_the_kv_cache_and_time_from_each_step() {
    // Llama-3.1-8B on one H100: 26,583 blocks without a drafter (51.921 GiB spare for KV at
    // 2 MiB a block, vLLM's profile: tests/it/latency.rs). The EAGLE-3 head adds one layer
    // of KV per token (2 × 8 heads × 128 × 2 B = 4,096 B: 2,162,688 B a block) and
    // 349,188,096 parameters (one decoder layer and a 32,000-row LM head; the embedding is
    // the target's) = 0.6504 GiB of weights: ⌊(51.921 − 0.650) GiB / 2,162,688 B⌋ = 25,454.
    let src = |spec: &str| {
        format!(
            r#"(seed: 1, cluster: (groups: [(count: 1, model: "llama-3.1-8b-instruct", gpu: "H100" {spec})]),
               workload: (num_requests: 20, clients: [(rate_per_s: 10.0, arrival: Constant,
                 input_tokens: Constant(256), output_tokens: Constant(200))]))"#
        )
    };
    let plain = parse(&src(""));
    let eagle = parse(&src(
        ", speculative: (method: Eagle3, num_speculative_tokens: 3)",
    ));
    let (s, rows) = run(&eagle);
    assert_eq!(s.instances[0].kv_total_blocks, 25_454);
    let (p, plain_rows) = run(&plain);
    assert_eq!(p.instances[0].kv_total_blocks, 26_583);
    // The default acceptance is vLLM's measured EAGLE-3 baseline.
    assert_eq!(
        s.speculative[0].configured_per_position,
        [0.7296, 0.5208, 0.3545]
    );
    assert!(s.speculative[0].draft_s > 0.0);
    // Fewer, wider steps: the requests finish sooner than without speculation.
    let e2e = |rows: &[crate::common::Row]| rows.iter().map(|r| r.us("e2e_ms")).sum::<u64>();
    assert!(
        e2e(&rows) * 10 < e2e(&plain_rows) * 7,
        "{} vs {}",
        e2e(&rows),
        e2e(&plain_rows)
    );
    assert!(s.instances[0].steps < p.instances[0].steps);
}

#[test]
fn a_draft_model_takes_its_weights_and_its_kv_from_the_cache() {
    // Llama-3.1-70B on 4 H100s: 27,821 blocks without a drafter, so its KV memory per GPU
    // lies in [27,821, 27,822) × 1,310,720 B (80 layers × 8 KV heads × 128 × 2 × 2 B / 4
    // GPUs × 16 tokens). A Llama-3.1-8B drafter at the target's TP takes its weights
    // (8,030,261,248 parameters × 2 B / 4 = 4,015,130,624 B a GPU) and adds its own KV
    // (32 × 8 × 128 × 2 × 2 B / 4 × 16 = 524,288 B a block): ⌊(36,465,786,880 −
    // 4,015,130,624) / 1,835,008⌋ = 17,684, and the upper end gives the same.
    let src = |spec: &str| {
        format!(
            r#"(seed: 1, cluster: (groups: [(count: 1, model: "llama-3.1-70b-instruct", gpu: "H100", tp: 4 {spec})]),
               workload: (num_requests: 16, clients: [(rate_per_s: 4.0, arrival: Constant,
                 input_tokens: Constant(256), output_tokens: Constant(64))]))"#
        )
    };
    let (p, plain_rows) = run(&parse(&src("")));
    assert_eq!(p.instances[0].kv_total_blocks, 27_821);
    let (s, rows) = run(&parse(&src(
        r#", speculative: (method: DraftModel("llama-3.1-8b-instruct"), num_speculative_tokens: 3, acceptance: Rate(0.8))"#,
    )));
    assert_eq!(s.instances[0].kv_total_blocks, 17_684);
    assert!(
        s.speculative[0].draft_s > 0.0,
        "the drafter runs on the GPU"
    );
    assert!(rows.iter().all(|r| r.u64("drafted_tokens") > 0));
    // At 0.8 a verification gains 2.95 tokens for less than two plain steps' time.
    let e2e = |rows: &[crate::common::Row]| rows.iter().map(|r| r.us("e2e_ms")).sum::<u64>();
    assert!(
        e2e(&rows) < e2e(&plain_rows),
        "{} vs {}",
        e2e(&rows),
        e2e(&plain_rows)
    );

    let e = invalid(&src(
        r#", speculative: (method: DraftModel("llama-9-1b"), num_speculative_tokens: 3, acceptance: Rate(0.8))"#,
    ));
    assert!(
        e.contains("cluster.groups[0].speculative.method")
            && e.contains("unknown model \"llama-9-1b\""),
        "{e}"
    );
}

#[test]
fn a_scenario_without_speculation_has_no_speculative_outputs() {
    let (s, rows, dir) = run_keeping(&parse(&one("", 3, 5)));
    assert!(s.speculative.is_empty());
    let header = std::fs::read_to_string(dir.path().join("requests.csv")).unwrap();
    assert!(!header.lines().next().unwrap().contains("drafted_tokens"));
    let json = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
    assert!(!json.contains("speculative"));
    assert_eq!(rows.len(), 3);
}

#[test]
fn bad_speculative_blocks_are_refused_with_the_reason() {
    let cases: [(&str, &str, &str); 9] = [
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3)",
            "speculative.acceptance",
            "no published acceptance",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 0, acceptance: Rate(0.5))",
            "speculative.num_speculative_tokens",
            "1..=16",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: PerPosition([0.5, 0.6, 0.2]))",
            "speculative.acceptance",
            "must not increase",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: PerPosition([0.5, 0.4]))",
            "speculative.acceptance",
            "2 positions",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: Rate(1.5))",
            "speculative.acceptance",
            "within 0..=1",
        ),
        (
            "speculative: (method: Eagle3, num_speculative_tokens: 3)",
            "speculative.method",
            "needs the roofline",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: Rate(0.5)), pp: 2",
            "speculative",
            "pipeline parallelism",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: Rate(0.5)), scheduler: \"sarathi\"",
            "speculative",
            "vllm_v1",
        ),
        (
            "speculative: (method: Ngram, num_speculative_tokens: 3, acceptance: Rate(0.5), acceptance_by_client: {\"cod\": Rate(0.9)})",
            "speculative.acceptance_by_client.cod",
            "no workload client",
        ),
    ];
    for (spec, path, says) in cases {
        let e = invalid(&one(spec, 1, 10));
        assert!(
            e.contains(&format!("cluster.groups[0].{path}")) && e.contains(says),
            "{spec}: {e}"
        );
    }
    let e = invalid(
        r#"(cluster: (groups: [(count: 1, model: "llama-3.1-8b-instruct", gpu: "H100",
              speculative: (method: Eagle, num_speculative_tokens: 2, acceptance: Rate(0.5), draft_vocab: 32000))]),
            workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))]))"#,
    );
    assert!(
        e.contains("speculative.draft_vocab") && e.contains("EAGLE-3"),
        "{e}"
    );
    let e = invalid(
        r#"(cluster: (groups: [(count: 1, model: "llama-3.1-8b-instruct", gpu: "H100", role: Prefill,
              speculative: (method: Eagle3, num_speculative_tokens: 2)),
              (count: 1, model: "llama-3.1-8b-instruct", gpu: "H100", role: Decode)]),
            workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))]))"#,
    );
    assert!(e.contains("never decodes"), "{e}");
}
