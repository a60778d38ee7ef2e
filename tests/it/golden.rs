//! BLIS golden dataset (`../shared/reference/data/goldendataset.json`, MODELS.md §10.3).
//!
//! Every golden case was produced with BLIS's **roofline** latency backend, which this
//! engine does not have yet (it ships the blackbox alpha/beta model). So the latency
//! metrics (TTFT, ITL, E2E, scheduling delay) of no case can be compared here; what can be
//! compared is everything the workload and the scheduler determine independently of step
//! pricing: every request completes, and the input / output token totals match within
//! sampling error. Our RNG differs from Go's, so totals are compared as two independent
//! samples of the same sum: |ours − golden| < 4·√2·σ·√n, with σ the per-request standard
//! deviation measured on our own sample. Per case:
//! - llama-3.1-8b TP1, prefix 284 + N(70, 35) prompts: counts and token totals compared;
//!   latency not compared (roofline).
//! - llama-3.1-8b TP1, N(2048, 1974) prompts: same.
//! - qwen2.5-7b TP4 (500 requests): same.
//! - granite-3.1-8b TP2: same.
//! - codellama-34b TP1 (2537 blocks): same.
//!
//! Arrivals: BLIS used constant inter-arrival times (i·IAT); we use Poisson at the same
//! rate, which changes queueing but not the token totals compared here.

use std::path::Path;

use serde_json::Value;

use crate::common::{parse, run};

fn golden() -> Option<Value> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/data/goldendataset.json");
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).expect("golden dataset is JSON"))
}

fn sd(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

#[test]
fn golden_cases_match_request_counts_and_token_totals_within_sampling_error() {
    let Some(g) = golden() else {
        eprintln!("skipped: ../shared/reference/data/goldendataset.json is not beside the project");
        return;
    };
    let cases = g["tests"].as_array().unwrap();
    assert_eq!(cases.len(), 5);
    for case in cases {
        let n = case["num-requests"].as_u64().unwrap();
        let prefix = case["prefix_tokens"].as_u64().unwrap();
        let num = |k: &str| case[k].as_f64().unwrap();
        let alpha = case["alpha-coeffs"].as_array().unwrap();
        let beta = case["beta-coeffs"].as_array().unwrap();
        let src = format!(
            "(seed: 42, cluster: (groups: [(count: 1, kv_blocks: {blocks}, block_size: {bs}, max_num_seqs: {seqs},
                max_num_batched_tokens: {budget}, max_model_len: {mml},
                latency: Blackbox(alpha: [{a0:?}, {a1:?}, {a2:?}], beta: [{b0:?}, {b1:?}, {b2:?}]))]),
              workload: (num_requests: {n}, clients: [(rate_per_s: {rate:?},
                input_tokens: Normal(mean: {pm:?}, stdev: {ps:?}, min: {pmin}, max: {pmax}),
                output_tokens: Normal(mean: {om:?}, stdev: {os:?}, min: {omin}, max: {omax}),
                shared_prefix_tokens: {prefix})]))",
            blocks = case["total-kv-blocks"],
            bs = case["block-size-in-tokens"],
            seqs = case["max-num-seqs"],
            budget = case["max-num-batched-tokens"],
            mml = case["max-model-len"],
            a0 = alpha[0].as_f64().unwrap(),
            a1 = alpha[1].as_f64().unwrap(),
            a2 = alpha[2].as_f64().unwrap(),
            b0 = beta[0].as_f64().unwrap(),
            b1 = beta[1].as_f64().unwrap(),
            b2 = beta[2].as_f64().unwrap(),
            rate = num("rate"),
            pm = num("prompt_tokens"),
            ps = num("prompt_tokens_stdev"),
            pmin = case["prompt_tokens_min"],
            pmax = case["prompt_tokens_max"],
            om = num("output_tokens"),
            os = num("output_tokens_stdev"),
            omin = case["output_tokens_min"],
            omax = case["output_tokens_max"],
        );
        let (s, rows) = run(&parse(&src));
        let m = &case["metrics"];
        let label = format!("{} ({} requests)", case["model"], n);
        assert_eq!(
            s.requests.completed,
            m["completed_requests"].as_u64().unwrap(),
            "{label}"
        );
        for (col, key) in [
            ("input_tokens", "total_input_tokens"),
            ("generated_tokens", "total_output_tokens"),
        ] {
            let xs: Vec<f64> = rows.iter().map(|r| r.u64(col) as f64).collect();
            let ours: f64 = xs.iter().sum();
            let theirs = m[key].as_f64().unwrap();
            let tolerance = 4.0 * 2f64.sqrt() * sd(&xs) * (n as f64).sqrt();
            assert!(
                (ours - theirs).abs() < tolerance,
                "{label}: {key} ours {ours} vs golden {theirs} (tolerance {tolerance:.0})"
            );
        }
    }
}
