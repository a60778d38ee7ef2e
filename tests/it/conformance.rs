//! Conformance with BLIS's own predictions on 15 real workload configurations
//! (`../shared/reference/data/trained_physics_iter29.json` and `roofline_goldendataset.json`,
//! BLIS's outputs, not measurements; docs/fidelity.md).
//!
//! Each configuration is an inference-perf staged shared-prefix load read as BLIS reads it
//! (`reading: Blis`: closed-loop sessions), on one instance with the experiment's model, TP,
//! limits and GPU block count, priced by the matching backend (`TrainedPhysics()` with BLIS's
//! iter29 coefficients, `BlisRoofline()`). Completed requests and token totals must be
//! equal. Latency means are compared as the mean over three seeds, because a closed-loop
//! session population keeps the random phases its sessions start with for the whole run: at
//! high load one draw of those phases moves mean TTFT by up to ±15 % (experiment 61: 55–72 ms
//! over eight seeds, BLIS's single draw 71.9 ms). Every mean must be within 5 % and every
//! p90 within 10 % unless the case is listed in `KNOWN` with the reason, and then within the
//! tolerance given there.

use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use crate::common::parse;
use servesim::{RunOptions, Simulation};

const SEEDS: [u64; 3] = [42, 43, 44];

const TP: &str = "trained_physics_iter29.json";
const RF: &str = "roofline_goldendataset.json";

/// Sessions' random start phases decide how often requests collide (seed noise).
const PHASES: &str = "closed-loop sessions keep their random start phases: at high load one draw moves TTFT by ±15 % (61: 55–72 ms over eight seeds)";
/// With a fast model, fixed think times pull the sessions into one synchronized burst.
const BURST: &str = "closed-loop sessions synchronize into bursts whose size and timing decide the result (BLIS's own E2E p90 = p99: every request of the burst finishes together)";
/// Few sessions at low load: whether two of them share a phase decides TTFT p90.
const COLLISIONS: &str = "23 sessions at 1 req/s: TTFT p90 is whether two session phases collide, which one draw decides";

/// (file, experiment id, tolerance on every compared metric, why): the differences we keep,
/// each explained in docs/fidelity.md. Every other case must be within 5 % on means and
/// 10 % on p90.
const KNOWN: &[(&str, &str, f64, &str)] = &[
    (TP, "61", 0.30, PHASES),
    (TP, "63", 0.20, PHASES),
    (RF, "17", 0.25, BURST),
    (RF, "20", 0.10, BURST),
    (RF, "48", 0.45, COLLISIONS),
    (RF, "60", 0.10, BURST),
    (RF, "62", 0.45, BURST),
    (RF, "63", 0.10, BURST),
    (RF, "64", 0.30, BURST),
    (RF, "65", 0.10, BURST),
    (RF, "66", 1.20, COLLISIONS),
    (RF, "67", 1.30, COLLISIONS),
];

fn data(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/reference/data")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the golden data must be beside the project)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

/// The scenario of one experiment with `latency` as the backend.
pub fn scenario_text(e: &Value, latency: &str, seed: u64) -> String {
    let ip = &e["workload"]["inference_perf"];
    let sp = &ip["shared_prefix"];
    let stages: Vec<String> = ip["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "(rate_per_s: {:?}, duration_s: {:?})",
                s["rate"].as_f64().unwrap(),
                s["duration"].as_f64().unwrap()
            )
        })
        .collect();
    let model = e["model_config_dir"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    format!(
        "(seed: {seed}, cluster: (groups: [(model: {model:?}, gpu: {gpu}, tp: {tp}, kv_blocks: {kv},
            cpu_kv_blocks: {cpu}, max_num_seqs: {seqs}, max_num_batched_tokens: {budget},
            latency: {latency})]),
          workload: (inference_perf: (reading: Blis, stages: [{stages}],
            shared_prefix: (num_unique_system_prompts: {n}, num_users_per_system_prompt: {m},
              system_prompt_len: {sys}, question_len: {q}, output_len: {o},
              enable_multi_turn_chat: {mt}))))",
        gpu = e["hardware"],
        tp = e["tp"],
        kv = e["total_kv_blocks"],
        cpu = e["cpu_kv_blocks"],
        seqs = e["max_num_seqs"],
        budget = e["max_num_batched_tokens"],
        stages = stages.join(", "),
        n = sp["num_unique_system_prompts"],
        m = sp["num_users_per_system_prompt"],
        sys = sp["system_prompt_len"],
        q = sp["question_len"],
        o = sp["output_len"],
        mt = sp["enable_multi_turn_chat"],
    )
}

/// Mean over seeds of (completed, input tokens, output tokens, TTFT, E2E, ITL means, TTFT
/// and E2E p90, in ms).
fn simulate(e: &Value, latency: &str) -> [f64; 8] {
    let mut acc = [0.0; 8];
    for seed in SEEDS {
        let sc = parse(&scenario_text(e, latency, seed));
        let s = Simulation::new(&sc, RunOptions::default())
            .unwrap()
            .run()
            .unwrap();
        let r = &s.requests;
        assert_eq!(r.completed, r.injected, "INV-1: every request completes");
        let v = [
            r.completed as f64,
            s.throughput.input_tokens as f64,
            s.throughput.output_tokens as f64,
            s.ttft_ms.mean.unwrap(),
            s.e2e_ms.mean.unwrap(),
            s.itl_ms.mean.unwrap(),
            s.ttft_ms.p90.unwrap(),
            s.e2e_ms.p90.unwrap(),
        ];
        for (a, x) in acc.iter_mut().zip(v) {
            *a += x / SEEDS.len() as f64;
        }
    }
    acc
}

/// Runs every experiment of `file` (two at a time) and checks it; returns the table rows.
fn conform(file: &str, latency: &str) -> Vec<String> {
    let d = data(file);
    let exps = d["experiments"].as_array().unwrap().clone();
    assert_eq!(exps.len(), 15);
    let results = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(e) = exps.get(i) else { break };
                    let got = simulate(e, latency);
                    results.lock().unwrap().push((i, got));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (i, got) in results {
        let e = &exps[i];
        let x = &e["expected"];
        let id = e["id"].as_str().unwrap();
        let model = e["model_config_dir"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap();
        for (k, key) in [
            "completed_requests",
            "total_input_tokens",
            "total_output_tokens",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(got[k], x[key].as_f64().unwrap(), "{file} {id}: {key}");
        }
        let mut cells = Vec::new();
        for (k, metric, default_tol) in [
            (3, "ttft_mean_ms", 0.05),
            (4, "e2e_mean_ms", 0.05),
            (5, "itl_mean_ms", 0.05),
            (6, "ttft_p90_ms", 0.10),
            (7, "e2e_p90_ms", 0.10),
        ] {
            let want = x[metric].as_f64().unwrap();
            let ratio = got[k] / want;
            let tol = KNOWN
                .iter()
                .find(|c| c.0 == file && c.1 == id)
                .map_or(default_tol, |c| c.2);
            if (ratio - 1.0).abs() > tol {
                let why = KNOWN
                    .iter()
                    .find(|c| c.0 == file && c.1 == id)
                    .map_or("", |c| c.3);
                bad.push(format!(
                    "{file} {id} {model}: {metric} ours {:.2} vs BLIS {want:.2} (ratio {ratio:.3}, tolerance {tol}) {why}",
                    got[k]
                ));
            }
            cells.push(format!("{:.2} / {want:.2} ({ratio:.3})", got[k]));
        }
        rows.push(format!(
            "| {id} | {model} | {} | {} |",
            e["tp"],
            cells.join(" | ")
        ));
    }
    eprintln!("{file}:\n{}", rows.join("\n"));
    assert!(
        bad.is_empty(),
        "{} means outside tolerance:\n{}",
        bad.len(),
        bad.join("\n")
    );
    rows
}

#[test]
fn trained_physics_matches_blis_iter29_goldens() {
    conform("trained_physics_iter29.json", "TrainedPhysics()");
}

#[test]
fn blis_roofline_matches_blis_roofline_goldens() {
    conform("roofline_goldendataset.json", "BlisRoofline()");
}
