//! Cases small enough to work out by hand; expected values are derived in the comments.

use crate::common::{parse, run};

/// One instance, blackbox α = [1000, 2, 500] µs, β = [100, 3, 50] µs, block 16.
fn one_instance(kv_blocks: u32, beta: &str, alpha: &str, workload: &str) -> String {
    format!(
        "(seed: 1, cluster: (groups: [(count: 1, kv_blocks: {kv_blocks}, latency: Blackbox(alpha: {alpha}, beta: {beta}))]),
          workload: {workload})"
    )
}

#[test]
fn a_lone_request_has_ttft_and_e2e_exact_from_alpha_and_beta() {
    let sc = parse(&one_instance(
        100,
        "[100.0, 3.0, 50.0]",
        "[1000.0, 2.0, 500.0]",
        "(num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(100), output_tokens: Constant(4))])",
    ));
    let (s, rows) = run(&sc);
    let r = &rows[0];
    let arrival = r.u64("arrival_us");
    // Queueing α0 + α1·100 = 1200 µs; prefill step β0 + β1·100 = 400 µs (first token);
    // three decode steps of β0 + β2 = 150 µs.
    assert_eq!(r.us("scheduling_delay_ms"), 1200);
    assert_eq!(r.us("ttft_ms"), 1200 + 400 + 500, "TTFT includes α2 once");
    assert_eq!(
        r.us("mean_itl_ms"),
        150 + 500,
        "each ITL sample is a step + α2"
    );
    assert_eq!(r.us("e2e_ms"), 2100 + 3 * 650);
    assert_eq!(
        r.u64("completion_us"),
        arrival + 1200 + 400 + 3 * 150,
        "α2 does not move the clock"
    );
    assert_eq!(r.u64("generated_tokens"), 4);
    assert_eq!(s.itl_ms.count, 3);
    assert_eq!(s.instances[0].steps, 4);
    assert_eq!(s.sim_duration_s, (arrival + 2050) as f64 / 1e6);
}

#[test]
fn the_second_request_of_a_prefix_group_reuses_the_full_prefix_blocks() {
    // 70-token shared prefix + 20 own tokens: blocks 0..3 (64 tokens) are pure prefix;
    // block 4 mixes prefix and own tokens, so it is unique to each request.
    let sc = parse(&one_instance(
        100,
        "[100.0, 3.0, 50.0]",
        "[0.0, 0.0, 0.0]",
        "(num_requests: 2, clients: [(rate_per_s: 1.0, input_tokens: Constant(20), output_tokens: Constant(2), shared_prefix_tokens: 70)])",
    ));
    let (s, rows) = run(&sc);
    let (a, b) = (&rows[0], &rows[1]);
    assert!(
        b.u64("arrival_us") > a.u64("completion_us"),
        "precondition: the first has finished"
    );
    assert_eq!(a.u64("input_tokens"), 90);
    assert_eq!(a.u64("cached_tokens"), 0);
    assert_eq!(b.u64("cached_tokens"), 64);
    // Prefill of 90 − 64 = 26 tokens: 100 + 3·26 = 178 µs.
    assert_eq!(b.us("ttft_ms"), 178);
    assert_eq!(a.us("ttft_ms"), 100 + 3 * 90);
    // Prompt blocks admitted: ⌈90/16⌉ = 6 each; 4 hits on the second.
    assert_eq!((s.kv.hit_blocks, s.kv.miss_blocks), (4, 8));
}

#[test]
fn a_cache_too_small_for_two_requests_preempts_the_later_one_exactly_once() {
    // 6 blocks of 16 tokens; two requests of 32 prompt + 40 output tokens (5 blocks each at
    // the end). Every step costs 1000 µs. Requests arrive µs apart, so R1 prefills alone
    // (step 1) and R2 joins at step 2.
    // Step k ≥ 2: R1 has 32 + (k − 2) tokens in KV before the step and R2 one fewer after
    // its prefill; at step 3 the cache is full (3 + 3 blocks). At step 18 R1 needs its 4th
    // block: R2 (the tail) is preempted with 16 tokens emitted, freeing 3 blocks.
    // R2 cannot come back while R1 runs: re-admission needs 48 tokens = 3 blocks and at
    // most 2 are free. At step 34 R1 takes a 5th block: the least recently freed block,
    // which was R2's second prompt block, so R2 keeps only 1 cached block (16 tokens).
    // R1 emits its 40th token at step 40; R2 re-prefills 32 tokens at step 41 (emitting
    // token 17) and decodes tokens 18..40 at steps 42..64.
    let sc = parse(&one_instance(
        6,
        "[1000.0, 0.0, 0.0]",
        "[0.0, 0.0, 0.0]",
        "(num_requests: 2, clients: [(rate_per_s: 1000000.0, input_tokens: Constant(32), output_tokens: Constant(40))])",
    ));
    let (s, rows) = run(&sc);
    let (r1, r2) = (&rows[0], &rows[1]);
    let t1 = r1.u64("arrival_us");
    let t2 = r2.u64("arrival_us");
    assert!(
        t2 < t1 + 1000,
        "precondition: R2 arrives during R1's first step"
    );
    assert_eq!(s.preemptions, 1);
    assert_eq!(s.instances[0].preemptions, 1);
    assert_eq!(
        r1.u64("preemptions"),
        0,
        "the victim is the tail, not the requester"
    );
    assert_eq!(r2.u64("preemptions"), 1);
    assert_eq!(s.instances[0].steps, 64);
    assert_eq!(r1.u64("completion_us"), t1 + 40_000);
    assert_eq!(r1.us("e2e_ms"), 40_000);
    assert_eq!(r2.us("ttft_ms"), t1 + 2000 - t2);
    assert_eq!(r2.u64("completion_us"), t1 + 64_000);
    assert_eq!(r2.u64("cached_tokens"), 16);
    // ITL: 15 + 23 samples of 1000 µs and one of 41,000 − 17,000 µs across the stall.
    assert_eq!(r2.us("e2e_ms"), t1 + 64_000 - t2);
    assert_eq!(s.itl_ms.count, 39 + 39);
    assert_eq!(s.itl_ms.max, Some(24.0));
}

#[test]
fn a_prompt_larger_than_the_cache_is_dropped_and_counted() {
    let sc = parse(&one_instance(
        4,
        "[100.0, 3.0, 50.0]",
        "[0.0, 0.0, 0.0]",
        "(num_requests: 3, clients: [(rate_per_s: 10.0, input_tokens: Uniform(min: 10, max: 200), output_tokens: Constant(1))])",
    ));
    let (s, rows) = run(&sc);
    for r in &rows {
        let fits = r.u64("input_tokens").div_ceil(16) <= 4;
        assert_eq!(
            r.str("state"),
            if fits { "completed" } else { "dropped" },
            "{r:?}"
        );
    }
    assert_eq!(
        s.requests.dropped,
        rows.iter().filter(|r| r.str("state") == "dropped").count() as u64
    );
    assert!(
        s.requests.dropped > 0,
        "seed 1 draws at least one prompt over 64 tokens"
    );
}

#[test]
fn chunked_prefill_splits_a_long_prompt_by_the_threshold() {
    // 100-token prompt, threshold 32: chunks 32, 32, 32, 4 (4 steps), first token at the
    // end of the 4th: 4·β0 + β1·100 = 400 + 300 µs.
    let sc = parse(
        "(seed: 1, cluster: (groups: [(count: 1, kv_blocks: 100, long_prefill_token_threshold: 32,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [100.0, 3.0, 50.0]))]),
          workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(100), output_tokens: Constant(1))]))",
    );
    let (s, rows) = run(&sc);
    assert_eq!(rows[0].us("ttft_ms"), 700);
    assert_eq!(s.instances[0].steps, 4);
}

#[test]
fn the_token_budget_limits_how_many_prompt_tokens_one_step_takes() {
    // Budget 150, prompts of 100, 3 outputs, every step 1000 µs; R1 and R2 arrive during
    // R0's first step. Step 2: R0 decodes 1, R1 prefills 100, R2 gets the last 49 tokens.
    // Step 3: R0 emits its 3rd token, R1 its 2nd, R2 computes its other 51 and emits its
    // first. Step 4: R1 done, R2 2nd. Step 5: R2 done.
    let sc = parse(
        "(seed: 3, cluster: (groups: [(count: 1, kv_blocks: 100, max_num_batched_tokens: 150,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
          workload: (num_requests: 3, clients: [(rate_per_s: 1000000.0, input_tokens: Constant(100), output_tokens: Constant(3))]))",
    );
    let (s, rows) = run(&sc);
    let t: Vec<u64> = rows.iter().map(|r| r.u64("arrival_us")).collect();
    assert!(
        t[2] < t[0] + 1000,
        "precondition: all arrive during the first step"
    );
    assert_eq!(rows[0].us("ttft_ms"), 1000);
    assert_eq!(rows[1].us("ttft_ms"), t[0] + 2000 - t[1]);
    assert_eq!(rows[2].us("ttft_ms"), t[0] + 3000 - t[2]);
    assert_eq!(rows[2].u64("completion_us"), t[0] + 5000);
    assert_eq!(s.instances[0].steps, 5);
    assert_eq!(s.instances[0].prefill_tokens, 300);
}
