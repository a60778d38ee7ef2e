//! `servesim plan`: answers known by construction, the bound never losing the optimum,
//! exclusions with their reason, determinism.

use crate::common::servesim;
use std::path::Path;

/// Llama-3.1-8B at 30 req/s of ~1k-token prompts; p95 TTFT ≤ 150 ms. Eight configurations:
/// A100-80 or H100, TP 1 or 2, 32 or 64 sequences.
const SMALL: &str = r#"(
    name: "small-plan",
    seed: 3,
    cluster: (groups: [(name: "g", count: 1, model: "llama-3.1-8b-instruct", gpu: "H100", max_num_seqs: 64)]),
    policies: (routing: "round_robin", slo_classes: [(name: "standard", ttft_ms: 150.0, attainment: 0.95)]),
    workload: (num_requests: 1500, clients: [(rate_per_s: 30.0,
        input_tokens: Normal(mean: 1024.0, stdev: 128.0, min: 64, max: 2048),
        output_tokens: Normal(mean: 128.0, stdev: 32.0, min: 8, max: 512))]),
    plan: (gpus: ["A100-80", "H100"], tp: [1, 2], max_num_seqs: [32, 64], max_instances: 16,
        prices: {"A100-80": 2.0, "H100": 2.0}),
)"#;

fn plan_json(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "small.ron", "--format", "json", "-q"];
    args.extend_from_slice(extra);
    let out = servesim(&args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn small() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.ron"), SMALL).unwrap();
    dir
}

fn best(plan: &serde_json::Value) -> (&str, f64, u64) {
    let b = &plan["outcomes"][0];
    assert_eq!(b["status"], "best", "{plan}");
    (
        b["config"]["gpu"].as_str().unwrap(),
        b["price_per_hour"].as_f64().unwrap(),
        b["instances"].as_u64().unwrap(),
    )
}

#[test]
fn a_faster_gpu_at_the_same_price_wins_and_loses_once_it_costs_ten_times_more() {
    let dir = small();
    // H100: 3.2× the A100's compute and 1.6× its bandwidth, at the same price.
    let same = plan_json(dir.path(), &[]);
    let (gpu, price, n) = best(&same);
    assert_eq!(gpu, "H100");
    // Every A100 configuration that meets the SLOs needs more GPUs, so costs more.
    for o in same["outcomes"].as_array().unwrap() {
        if o["config"]["gpu"] == "A100-80" && o["price_per_hour"].is_number() {
            assert!(o["price_per_hour"].as_f64().unwrap() > price, "{o}");
        }
    }
    // At ten times the price the H100 cannot pay for itself: the A100 wins.
    let dear = plan_json(
        dir.path(),
        &["--set", r#"plan.prices={"A100-80": 2.0, "H100": 20.0}"#],
    );
    let (gpu, dear_price, _) = best(&dear);
    assert_eq!(gpu, "A100-80");
    assert!(dear_price < 20.0 * n as f64, "{dear_price}");
}

#[test]
fn the_bound_never_prunes_the_cheapest_configuration() {
    let dir = small();
    let whole = plan_json(dir.path(), &[]);
    let (_, price, _) = best(&whole);
    // Each configuration planned on its own (no bound: its fewest instances).
    let mut cheapest = f64::INFINITY;
    for gpu in ["A100-80", "H100"] {
        for tp in ["1", "2"] {
            for seqs in ["32", "64"] {
                let one = plan_json(
                    dir.path(),
                    &[
                        "--set",
                        &format!("plan.gpus=[{gpu:?}]"),
                        "--set",
                        &format!("plan.tp=[{tp}]"),
                        "--set",
                        &format!("plan.max_num_seqs=[{seqs}]"),
                    ],
                );
                if let Some(p) = one["outcomes"][0]["price_per_hour"].as_f64() {
                    cheapest = cheapest.min(p);
                }
            }
        }
    }
    assert_eq!(price, cheapest);
    // And the bound saved runs: fewer than planning every configuration on its own.
    assert!(whole["runs"].as_u64().unwrap() < 8 * 5, "{}", whole["runs"]);
}

#[test]
fn plan_writes_every_configuration_and_the_front_the_same_on_any_number_of_threads() {
    let dir = small();
    let run = |out: &str, jobs: &str| {
        let o = servesim(
            &["plan", "small.ron", "--out", out, "--jobs", jobs, "-q"],
            dir.path(),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let one = run("a", "1");
    let two = run("b", "2");
    assert_eq!(one, two);
    for f in ["plan.csv", "pareto.csv", "plan.json"] {
        assert_eq!(
            std::fs::read(dir.path().join("a").join(f)).unwrap(),
            std::fs::read(dir.path().join("b").join(f)).unwrap(),
            "{f}"
        );
    }
    let rows = crate::common::read_rows(&dir.path().join("a/plan.csv"));
    assert_eq!(rows.len(), 8);
    assert_eq!(rows[0].str("status"), "best");
    // The front: cheapest first, each strictly lower p99 TTFT than every cheaper point.
    let front = crate::common::read_rows(&dir.path().join("a/pareto.csv"));
    assert!(!front.is_empty());
    for w in front.windows(2) {
        let f = |r: &crate::common::Row, c: &str| -> f64 { r.str(c).parse().unwrap() };
        assert!(f(&w[0], "price_per_hour") <= f(&w[1], "price_per_hour"));
        assert!(f(&w[0], "ttft_p99_ms") > f(&w[1], "ttft_p99_ms"));
    }
    let text = String::from_utf8(one).unwrap();
    assert!(text.contains("best: "), "{text}");
    assert!(text.contains("runners-up:"), "{text}");
}

#[test]
fn configurations_the_model_does_not_fit_are_excluded_with_the_reason_at_no_run() {
    let dir = small();
    let reasons = every_one_excluded(
        dir.path(),
        &[
            "small.ron",
            "--set",
            r#"cluster.groups[0].model="llama-3.1-70b-instruct""#,
            "--set",
            "cluster.groups[0].tp=4",
            "--set",
            r#"plan.gpus=["L40S"]"#,
            "--set",
            "plan.tp=[1]",
            "--set",
            r#"plan.prices={"L40S": 1.0}"#,
        ],
    );
    for reason in reasons {
        assert!(reason.contains("does not fit"), "{reason}");
    }
}

/// Runs a plan no configuration of which can run: exit 1, no run, every configuration
/// excluded; their reasons.
fn every_one_excluded(dir: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json", "-q"]);
    let out = servesim(&all, dir);
    assert_eq!(out.status.code(), Some(1));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["runs"], 0);
    plan["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            assert_eq!(o["status"], "excluded");
            o["reason"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Writes the bundled P/D scenario (one Prefill and one Decode group) with `plan` as `pd.ron`.
fn pd_scenario(dir: &Path, plan: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/scenarios/pd-disaggregation.ron"))
        .unwrap()
        .replace("    outputs:", &format!("    plan: {plan},\n    outputs:"));
    std::fs::write(dir.join("pd.ron"), text).unwrap();
}

/// vLLM refuses to start a server whose context does not fit its KV cache; `plan` leaves such a
/// configuration out (saying what `max_model_len` would admit it) rather than recommend it.
/// Llama-3.1-8B (131,072 tokens of context) at 0.35 of an H100's memory: on one GPU
/// 0.35 × 79.2 GiB − 14.96 GiB of weights − 0.66 GiB profiling pass (8,192 tokens × 3 × 14,336
/// × 2 B) − 0.67 GiB other = 11.43 GiB of KV at 128 KiB a token (32 layers × 8 KV heads × 128
/// × K and V × 2 B): 93.6k tokens, too few; on two, 7.5 GiB of weights each and 64 KiB a
/// token: ≈ 300k, enough.
#[test]
fn a_configuration_vllm_would_not_start_is_excluded_until_max_model_len_admits_it() {
    let dir = small();
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "--set",
            "cluster.groups[0].gpu_memory_utilization=0.35",
            "--set",
            r#"plan.gpus=["H100"]"#,
            "--set",
            "plan.max_num_seqs=[64]",
        ];
        args.extend_from_slice(extra);
        plan_json(dir.path(), &args)
    };
    let by_tp = |p: &serde_json::Value, tp: u64| {
        p["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["config"]["tp"] == tp)
            .cloned()
            .unwrap()
    };
    let whole = plan(&[]);
    let one = by_tp(&whole, 1);
    assert_eq!(one["status"], "excluded", "{one}");
    let reason = one["reason"].as_str().unwrap();
    assert!(
        reason.contains("vLLM would not start it")
            && reason.contains("context (max_model_len left out) of 131,072 tokens"),
        "{reason}"
    );
    let fits: u64 = reason
        .rsplit("max_model_len at most ")
        .next()
        .and_then(|t| t.split(' ').next())
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!((93_000..94_000).contains(&fits), "{fits}");
    assert_ne!(by_tp(&whole, 2)["status"], "excluded");
    // With max_model_len at what fits, one GPU is planned too.
    let admitted = plan(&["--set", &format!("cluster.groups[0].max_model_len={fits}")]);
    assert_ne!(by_tp(&admitted, 1)["status"], "excluded");
}

#[test]
fn plan_says_each_input_warning_of_the_configurations_it_considers_once() {
    let dir = small();
    let stderr = |extra: &[&str]| {
        let mut args = vec!["plan", "small.ron", "--format", "json"];
        args.extend_from_slice(extra);
        let out = servesim(&args, dir.path());
        assert!(out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    // What every configuration has is said once, plainly.
    let e = stderr(&["--set", "cluster.groups[0].block_size=12"]);
    assert_eq!(e.matches("vLLM's --block-size is one of").count(), 1, "{e}");
    assert!(
        e.lines()
            .any(|l| l.starts_with("warning: cluster.groups[0].block_size = 12: ")),
        "{e}"
    );
    // What depends on the configuration names those that have it: vLLM 0.18 changed the
    // all-reduce, which only TP 2 runs.
    let e = stderr(&["--set", r#"cluster.groups[0].engine=(vllm: "0.18.0")"#]);
    assert_eq!(e.matches("vLLM 0.18.0 is newer").count(), 2, "{e}");
    let tp2 = e
        .lines()
        .find(|l| l.contains("PR #34299"))
        .expect("a TP 2 warning");
    assert!(
        tp2.starts_with("warning: at H100 tp2 ")
            && tp2.matches(" tp2 ").count() == 4
            && !tp2.contains(" tp1 "),
        "{tp2}"
    );
    // A configuration vLLM would not start is excluded (the plan says why), not warned of.
    let e = stderr(&[
        "--set",
        "cluster.groups[0].gpu_memory_utilization=0.35",
        "--set",
        r#"plan.gpus=["H100"]"#,
        "--set",
        r#"plan.prices={"H100": 2.0}"#,
    ]);
    assert!(!e.contains("warning"), "{e}");
}

/// With a P/D split both pools are vLLM servers: a decode pool vLLM would not start leaves the
/// split out too, naming the pool.
#[test]
fn a_p_d_split_whose_decode_pool_vllm_would_not_start_is_excluded_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    pd_scenario(
        dir.path(),
        r#"(gpus: ["H100"], pd_splits: [(1, 1), (1, 3)], max_instances: 4)"#,
    );
    let reasons = every_one_excluded(
        dir.path(),
        // The decode pool (group 1) at 0.3 of an H100: ~27.8k tokens of cache.
        &[
            "pd.ron",
            "--set",
            "cluster.groups[1].gpu_memory_utilization=0.3",
        ],
    );
    assert_eq!(reasons.len(), 2);
    for reason in reasons {
        assert!(
            reason.starts_with("excluded: vLLM would not start its decode group: ")
                && reason.contains("of 131,072 tokens"),
            "{reason}"
        );
    }
}
/// Lines of a plan's progress file after its first (the plan's description).
fn trials(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.matches('\n').count().saturating_sub(1))
        .unwrap_or(0)
}

#[test]
fn a_plan_killed_midway_and_resumed_gives_the_bytes_of_an_uninterrupted_plan() {
    let dir = small();
    let d = dir.path();
    // Longer runs, so the plan can be killed between trials.
    let args = |out: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "plan",
            "small.ron",
            "--set",
            "workload.num_requests=6000",
            "--out",
            out,
            "-q",
        ];
        a.extend_from_slice(extra);
        a
    };
    let whole = servesim(&args("whole", &["--jobs", "2"]), d);
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    // Killed (SIGKILL: no chance to tidy up) once three trials are recorded.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(args("cut", &["--jobs", "1"]))
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let progress = d.join("cut/plan.progress.jsonl");
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the plan finished before it could be killed"
        );
        if trials(&progress) >= 3 {
            child.kill().unwrap();
            child.wait().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(!d.join("cut/plan.csv").exists());
    let kept = trials(&progress);
    // Resumed on another thread count: the same bytes, the kept trials not run again.
    let resumed = servesim(&args("cut", &["--resume", "--jobs", "2"]), d);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    assert!(
        err.contains(&format!("resuming: {kept} trials kept")),
        "{err}"
    );
    assert_eq!(resumed.stdout, whole.stdout);
    for f in ["plan.csv", "pareto.csv", "plan.json"] {
        assert_eq!(
            std::fs::read(d.join("cut").join(f)).unwrap(),
            std::fs::read(d.join("whole").join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(
        !progress.exists(),
        "the progress file goes once the plan is written"
    );
}

#[test]
fn a_sharded_plan_merges_into_the_unsharded_best_and_merge_refuses_what_is_not_its_shards() {
    let dir = small();
    let d = dir.path();
    let run = |extra: &[&str]| {
        let mut a = vec!["plan", "small.ron", "-q"];
        a.extend_from_slice(extra);
        servesim(&a, d)
    };
    let whole = run(&["--format", "json"]);
    let whole: serde_json::Value = serde_json::from_slice(&whole.stdout).unwrap();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = format!("s{i}");
        let o = run(&["--shard", &shard, "--out", &out]);
        // A shard's own best may be beaten in another shard: exit 0 or 1 both fine.
        assert!(o.status.code().is_some_and(|c| c <= 1), "{shard}");
        let rows = crate::common::read_rows(&d.join(&out).join("plan.csv"));
        // Every third configuration of the search's order.
        assert!((2..=3).contains(&rows.len()), "{shard}: {}", rows.len());
        // Its best is the best of its part, and says so (it read as the plan's answer), as
        // does its report.
        let text = String::from_utf8_lossy(&o.stdout);
        let part = format!(
            "shard {shard}: {} of the plan's 8 configurations,",
            rows.len()
        );
        assert!(text.contains(&part), "{text}");
        assert!(
            text.contains("best of this shard (`servesim merge` the shards' --out directories for the plan's): ")
                || text.contains("no configuration of this shard meets every SLO"),
            "{text}"
        );
        assert!(servesim(&["report", &out], d).status.success());
        let page = std::fs::read_to_string(d.join(&out).join("report.html")).unwrap();
        assert!(page.contains(&part.replace("`", "")), "{shard}");
        assert!(page.contains("configuration of this shard"), "{shard}");
    }
    let merged = servesim(&["merge", "s0", "s1", "s2", "--out", "m"], d);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("m/plan.json")).unwrap()).unwrap();
    assert_eq!(best(&m), best(&whole));
    assert_eq!(m["outcomes"].as_array().unwrap().len(), 8);
    let positions: std::collections::BTreeSet<u64> = m["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, (0..8).collect());
    // Merging again gives the same bytes.
    let again = servesim(&["merge", "s2", "s0", "s1", "--out", "m2"], d);
    assert_eq!(again.stdout, merged.stdout);
    for f in ["plan.csv", "pareto.csv", "plan.json"] {
        assert_eq!(
            std::fs::read(d.join("m").join(f)).unwrap(),
            std::fs::read(d.join("m2").join(f)).unwrap(),
            "{f}"
        );
    }
    let refused = |args: &[&str], why: &str| {
        let o = servesim(args, d);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    };
    refused(&["merge", "s0", "s1", "--out", "x"], "shard 2/3 missing");
    refused(
        &["merge", "s0", "s0", "s1", "--out", "x"],
        "are both shard 0/3",
    );
    // Another command's directory among the shards is named with what it holds (a sweep's
    // shard was reported as a plan.json that could not be read, a plan's as a missing
    // sweep.json).
    for (name, file) in [("w", "sweep.csv"), ("r", "summary.json")] {
        std::fs::create_dir(d.join(name)).unwrap();
        std::fs::write(d.join(name).join(file), "").unwrap();
    }
    refused(
        &["merge", "s0", "s1", "w", "s2", "--out", "x"],
        "s0 holds a plan's results and w a sweep's: merge joins the shards of one sweep or of one plan",
    );
    refused(
        &["merge", "w", "s0", "--out", "x"],
        "w holds a sweep's results and s0 a plan's",
    );
    refused(
        &["merge", "s0", "r", "--out", "x"],
        "r holds a run's results (summary.json), not a shard",
    );
    // A directory that is not there was "cannot read gone/plan.json".
    refused(
        &["merge", "s0", "gone", "--out", "x"],
        "error: gone is not a directory: give the --out of each `servesim sweep --shard` or `servesim plan --shard`",
    );
    assert!(!d.join("x").exists());
    // A shard's plan.json edited or cut: it would answer from part of the plan. Shard 1 of
    // 3 holds configurations 1, 4 and 7 of 8.
    let json = std::fs::read_to_string(d.join("s1/plan.json")).unwrap();
    let original: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(original["origin"]["configurations"], 8);
    let last = |v: &serde_json::Value| {
        v["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .position(|o| o["position"] == 7)
            .unwrap()
    };
    let k = last(&original);
    for (edit, why) in [
        (
            &(|v: &mut serde_json::Value| {
                let at = last(v);
                v["outcomes"].as_array_mut().unwrap().remove(at);
            }) as &dyn Fn(&mut serde_json::Value),
            "configuration 7 of the plan is in no shard: a shard's plan.json was cut or edited",
        ),
        (
            &|v: &mut serde_json::Value| {
                let o = v["outcomes"][0].clone();
                v["outcomes"].as_array_mut().unwrap().push(o);
            },
            "appears twice",
        ),
        (
            &|v: &mut serde_json::Value| v["outcomes"][k]["position"] = 6.into(),
            "configuration 6 is not one of shard 1/3's",
        ),
        (
            &|v: &mut serde_json::Value| v["outcomes"][k]["price_per_hour"] = (-1.0).into(),
            "configuration 7 has a price that is not a number ≥ 0",
        ),
    ] {
        let mut v = original.clone();
        edit(&mut v);
        std::fs::write(d.join("s1/plan.json"), v.to_string()).unwrap();
        refused(&["merge", "s0", "s1", "s2", "--out", "x"], why);
        assert!(!d.join("x").exists());
    }
    std::fs::write(d.join("s1/plan.json"), &json).unwrap();
    // A shard run after the scenario was edited.
    std::fs::write(
        d.join("small.ron"),
        SMALL.replace("max_instances: 16", "max_instances: 15"),
    )
    .unwrap();
    assert!(
        run(&["--shard", "2/3", "--out", "s2"])
            .status
            .code()
            .is_some_and(|c| c <= 1)
    );
    refused(
        &["merge", "s0", "s1", "s2", "--out", "x"],
        "s2 is not a shard of the plan in s0: its inputs differ (small.ron)",
    );
    assert!(!d.join("x").exists());
    // Seeds beyond what a search takes are refused before anything runs.
    refused(
        &["plan", "small.ron", "--replicas", "20000", "--out", "x"],
        "replicas must be in [1, 10,000], got 20000 ",
    );
    assert!(!d.join("x").exists());
}

#[test]
fn a_bound_at_the_best_price_finds_it_with_fewer_runs_in_every_shard_and_one_below_finds_none() {
    let dir = small();
    let d = dir.path();
    let whole = plan_json(d, &[]);
    let (gpu, price, n) = best(&whole);
    let bound = format!("plan.bound={price}");
    let at = plan_json(d, &["--set", &bound]);
    assert_eq!(best(&at), (gpu, price, n));
    assert_eq!(at["bound"].as_f64(), Some(price));
    // The first round no longer runs at plan.max_instances.
    assert!(at["runs"].as_u64() < whole["runs"].as_u64(), "{at}");
    for o in at["outcomes"].as_array().unwrap() {
        if let Some(p) = o["price_per_hour"].as_f64() {
            assert!(p <= price, "{o}");
        }
    }
    // Each of three shards starts from the bound, so each finds the best or knows it lost.
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = format!("s{i}");
        let o = servesim(
            &[
                "plan",
                "small.ron",
                "-q",
                "--set",
                &bound,
                "--shard",
                &shard,
                "--out",
                &out,
            ],
            d,
        );
        assert!(o.status.code().is_some_and(|c| c <= 1), "{shard}");
    }
    let merged = servesim(&["merge", "s0", "s1", "s2", "--out", "m"], d);
    assert!(merged.status.success());
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("m/plan.json")).unwrap()).unwrap();
    assert_eq!(best(&m), (gpu, price, n));
    // Just below the best price nothing is left, and every configuration says why.
    let below = servesim(
        &[
            "plan",
            "small.ron",
            "-q",
            "--set",
            &format!("plan.bound={}", price - 0.5),
        ],
        d,
    );
    assert_eq!(below.status.code(), Some(1));
    let text = String::from_utf8_lossy(&below.stdout);
    assert!(
        text.contains(&format!(
            "no configuration meets every SLO within plan.max_instances and plan.bound ({:.2}/h)",
            price - 0.5
        )),
        "{text}"
    );
    let below = plan_json_any(d, &["--set", &format!("plan.bound={}", price - 0.5)]);
    for o in below["outcomes"].as_array().unwrap() {
        let reason = o["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("excluded") || reason.contains("plan.bound"),
            "{reason}"
        );
    }
}

/// The plan's JSON whatever its exit code.
fn plan_json_any(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "small.ron", "--format", "json", "-q"];
    args.extend_from_slice(extra);
    serde_json::from_slice(&servesim(&args, dir).stdout).unwrap()
}

#[test]
fn p_d_splits_size_both_pools_and_a_doubled_split_never_beats_the_split_it_doubles() {
    // The bundled P/D scenario, planned over splits.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pd_scenario(
        d,
        r#"(gpus: ["H100"], pd_splits: [(1, 1), (2, 2), (1, 3)], max_instances: 8)"#,
    );
    let out = servesim(
        &[
            "plan",
            "pd.ron",
            "--set",
            "workload.num_requests=3000",
            "--format",
            "json",
            "--out",
            "o",
            "-q",
        ],
        d,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcomes = plan["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 3);
    let of = |p: u64, q: u64| {
        outcomes
            .iter()
            .find(|o| o["config"]["pd_split"] == serde_json::json!([p, q]))
            .unwrap()
    };
    // A unit of (2, 2) is two units of (1, 1): the (1, 1) split never costs more.
    let price = |o: &serde_json::Value| o["price_per_hour"].as_f64();
    let best = price(&outcomes[0]).unwrap();
    assert_eq!(price(of(1, 1)), Some(best), "{}", of(1, 1));
    if let Some(p22) = price(of(2, 2)) {
        assert!(p22 >= best);
    }
    // Where both ran the same deployment — (2, 2) × k and (1, 1) × 2k — they measured the
    // same p99 TTFT: both pools were sized, the same way.
    let mut same = 0;
    for t in of(2, 2)["passing"].as_array().unwrap() {
        let k = t["instances"].as_u64().unwrap();
        if let Some(u) = of(1, 1)["passing"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["instances"].as_u64() == Some(2 * k))
        {
            assert_eq!(u["ttft_p99_ms"], t["ttft_p99_ms"]);
            assert_eq!(u["price_per_hour"], t["price_per_hour"]);
            same += 1;
        }
    }
    assert!(same >= 1, "no deployment run under both splits: {plan}");
    // plan.csv: the split, and the GPUs of both pools.
    let rows = crate::common::read_rows(&d.join("o/plan.csv"));
    let r13 = rows.iter().find(|r| r.str("pd_split") == "1:3").unwrap();
    if !r13.str("instances").is_empty() {
        assert_eq!(r13.u64("gpus"), 4 * r13.u64("instances"));
    }
    let r11 = rows.iter().find(|r| r.str("pd_split") == "1:1").unwrap();
    assert_eq!(r11.u64("gpus"), 2 * r11.u64("instances"));
}

#[test]
fn a_value_listed_twice_in_the_plan_is_refused_where_it_is() {
    let dir = small();
    let out = servesim(
        &[
            "validate",
            "small.ron",
            "--set",
            r#"plan.gpus=["H100", "A100-80", "h100"]"#,
            "--set",
            "plan.tp=[1, 2, 1]",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 problems"), "{err}");
    assert!(
        err.contains("plan.gpus[2]: H100 is listed twice (also plan.gpus[0])"),
        "{err}"
    );
    assert!(
        err.contains("plan.tp[2]: 1 is listed twice (also plan.tp[0])"),
        "{err}"
    );
}

#[test]
fn a_price_out_of_the_range_a_group_s_cost_takes_is_refused_before_any_run() {
    // 1e300 per GPU-hour passed as a price and then excluded every configuration of that
    // GPU, one by one, at the group's own bound of 10⁶.
    let dir = small();
    for (price, says) in [
        ("1e300", "got 1e300"),
        ("0.0", "got 0"),
        ("1000001.0", "got 1000001"),
    ] {
        let out = servesim(
            &[
                "validate",
                "small.ron",
                "--set",
                &format!(r#"plan.prices={{"H100": {price}}}"#),
            ],
            dir.path(),
        );
        assert_eq!(out.status.code(), Some(2), "{price}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "plan.prices.H100: must be a price per GPU-hour in (0, 10⁶] (as cost_per_gpu_hour), {says}"
            )),
            "{err}"
        );
    }
}

/// A price for a GPU the plan does not consider is unused: validate and plan say so (and
/// plan it all the same); a price of a planned GPU under another name is used.
#[test]
fn a_price_of_a_gpu_left_out_of_the_plan_is_warned_of() {
    let dir = small();
    let unused = "plan.prices.A100-80: the plan does not consider A100-80 (it plans H100), so its price is unused";
    for command in ["validate", "plan"] {
        let mut args = vec![
            command,
            "small.ron",
            "--set",
            r#"plan.gpus=["H100"]"#,
            "--set",
            "plan.tp=[1]",
        ];
        if command == "plan" {
            args.push("-q");
        }
        let out = servesim(&args, dir.path());
        assert!(out.status.success(), "{command}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(unused), "{command}: {err}");
    }
    // Both GPUs planned, one priced under another of its names: no warning.
    let out = servesim(
        &[
            "validate",
            "small.ron",
            "--set",
            r#"plan.prices={"a100-80": 2.0, "H100": 2.0}"#,
        ],
        dir.path(),
    );
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("so its price is unused"), "{err}");
}

/// A run too short for the cluster to fill reads as falling behind; the plan says so where a
/// size fails that way, and a run long enough answers with fewer instances.
#[test]
fn a_size_failing_while_the_cluster_still_fills_says_the_run_may_be_too_short() {
    let dir = small();
    let one = [
        "--set",
        r#"plan.gpus=["H100"]"#,
        "--set",
        "plan.tp=[1]",
        "--set",
        "plan.max_num_seqs=[64]",
    ];
    let mut args = one.to_vec();
    args.extend(["--set", "workload.num_requests=100"]);
    let short = plan_json(dir.path(), &args);
    let (_, _, n_short) = best(&short);
    // 100 arrivals: the warm-up is the first 25 and the one that opens the window.
    let failed = short["outcomes"][0]["one_fewer"]["failed"]
        .as_str()
        .unwrap();
    assert!(
        failed.contains("falls behind")
            && failed.contains("; the run may be too short to tell: ")
            && failed.contains(" of the first 26 arrivals (the warm-up) were still in flight"),
        "{failed}"
    );
    let long = plan_json(dir.path(), &one);
    let (_, _, n_long) = best(&long);
    assert!(n_long < n_short, "{n_long} {n_short}");
    assert!(!long.to_string().contains("too short"), "{long}");
}

/// plan and capacity draw progress on stderr only (a plan's configurations decided of its
/// shard's, a capacity search's runs), and --quiet silences it.
#[test]
fn plan_and_capacity_show_progress_on_stderr_only() {
    let dir = small();
    let d = dir.path();
    let shown = servesim(&["plan", "small.ron", "--progress", "always"], d);
    let err = String::from_utf8_lossy(&shown.stderr);
    // Not a terminal: a plain line at once, then one per 10 s.
    assert!(err.contains(" 0/8 configurations, decided"), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    // A shard counts its own: the second of three holds positions 1, 4 and 7.
    let shard = servesim(
        &[
            "plan",
            "small.ron",
            "--progress",
            "always",
            "--shard",
            "1/3",
        ],
        d,
    );
    let err = String::from_utf8_lossy(&shard.stderr);
    assert!(err.contains(" 0/3 configurations"), "{err}");
    let quiet = servesim(&["plan", "small.ron", "--progress", "always", "-q"], d);
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
    assert_eq!(shown.stdout, quiet.stdout);
    let capacity = |extra: &[&str]| {
        let mut args = vec![
            "capacity",
            "small.ron",
            "--replicas",
            "1",
            "--progress",
            "always",
        ];
        args.extend_from_slice(extra);
        servesim(&args, d)
    };
    let shown = capacity(&[]);
    let err = String::from_utf8_lossy(&shown.stderr);
    assert!(err.contains(" 0 runs"), "{err}");
    let quiet = capacity(&["-q"]);
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
    assert_eq!(shown.stdout, quiet.stdout);
}
