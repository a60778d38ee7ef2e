//! `servesim evaluate`: objectives by their definitions, the checks against gaming the
//! score, the worst decisions, determinism over threads.

use crate::common::{root, servesim};

fn evaluate(extra: &[&str]) -> serde_json::Value {
    let tenants = root().join("scenarios/multi-tenant.ron");
    let mut args = vec!["evaluate", tenants.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(extra);
    let out = servesim(&args, &root());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn f(e: &serde_json::Value, k: &str) -> f64 {
    e["fitness"][k].as_f64().unwrap()
}

#[test]
fn shedding_load_or_starving_a_class_is_flagged_and_never_pays() {
    // Every request rejected: nothing served, every objective that needs a served request
    // is 0 (fairness too: Jain's index of nothing would be 1), and so is the combination.
    let none = evaluate(&["--set", r#"policies.admission="reject_all""#]);
    assert_eq!(f(&none, "served"), 0.0);
    assert_eq!(f(&none, "fairness"), 0.0);
    assert_eq!(none["combined"], 0.0);
    assert!(
        none["checks"]["flags"][0]
            .as_str()
            .unwrap()
            .starts_with("sheds load: only 0.0 % of requests completed (3000 rejected")
    );
    // The summarising tenant (class batch) may send one request and no more: the batch
    // class is starved, load is shed, and the combination is scaled by the share served.
    let starved = evaluate(&[
        "--set",
        r#"policies.admission="tenant_quota""#,
        "--set",
        r#"policies.admission_params={"rate_per_s": 1000.0, "burst": 1.0, "tenant.globex": 0.0}"#,
    ]);
    assert_eq!(
        starved["checks"]["starved_classes"],
        serde_json::json!(["batch"])
    );
    let batch = &starved["classes"][1];
    assert_eq!(batch["name"], "batch");
    assert!(batch["completed"].as_u64().unwrap() <= 1, "{batch}");
    let overall = &starved["overall"];
    let served = overall["completed"].as_f64().unwrap() / overall["injected"].as_f64().unwrap();
    assert_eq!(f(&starved, "served"), served);
    assert!(served < 0.97);
    let mean: f64 = starved["fitness"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum::<f64>()
        / 7.0;
    assert!((starved["combined"].as_f64().unwrap() - mean * served).abs() < 1e-12);
    let flags: Vec<&str> = starved["checks"]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(flags[0].starts_with("sheds load"), "{flags:?}");
    assert!(flags[1].starts_with("starves class batch: "), "{flags:?}");
    assert!(
        starved["trace"]["text"]
            .as_str()
            .unwrap()
            .contains("Warnings: sheds load")
    );
}

#[test]
fn the_worst_decisions_are_the_highest_regrets_and_threads_change_nothing() {
    let random = ["--set", r#"policies.routing="random""#, "--worst", "3"];
    let e = evaluate(&random);
    let worst = e["trace"]["worst_decisions"].as_array().unwrap();
    assert_eq!(worst.len(), 3);
    let regrets: Vec<f64> = worst
        .iter()
        .map(|w| w[1]["regret"].as_f64().unwrap())
        .collect();
    assert!(regrets.windows(2).all(|w| w[0] >= w[1]), "{regrets:?}");
    // The first is the run's largest regret, as the summary counts it on its own.
    let dir = tempfile::tempdir().unwrap();
    let tenants = root().join("scenarios/multi-tenant.ron");
    let run = servesim(
        &[
            "run",
            tenants.to_str().unwrap(),
            "--set",
            r#"policies.routing="random""#,
            "--out",
            "o",
            "-q",
        ],
        dir.path(),
    );
    assert!(run.status.success());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("o/summary.json")).unwrap())
            .unwrap();
    assert_eq!(regrets[0], s["routing"]["max_regret"].as_f64().unwrap());
    assert_eq!(e["anomalies"], s["anomalies"]);
    // Where the mean TTFT goes: the run's own parts (one seed), also said in words.
    let parts = &e["trace"]["ttft_parts_ms"];
    assert_eq!(parts["requests"], s["ttft_parts_ms"]["requests"]);
    for part in ["ttft", "to_the_instance", "waiting", "prefill", "token_out"] {
        let (ours, run) = (
            parts[part].as_f64().unwrap(),
            s["ttft_parts_ms"][part].as_f64().unwrap(),
        );
        assert!((ours - run).abs() < 1e-9, "{part}: {ours} against {run}");
    }
    let words = e["trace"]["text"].as_str().unwrap();
    let mean = format!(
        "Mean TTFT {:.1} ms ({} requests never preempted or retried): {:.1} ms to the instance",
        s["ttft_parts_ms"]["ttft"].as_f64().unwrap(),
        s["ttft_parts_ms"]["requests"],
        s["ttft_parts_ms"]["to_the_instance"].as_f64().unwrap()
    );
    assert!(words.contains(&mean), "{words}");
    // Two seeds on one thread and on two: the same bytes.
    let tenants = tenants.to_str().unwrap();
    let one = servesim(
        &[
            "evaluate", tenants, "--seeds", "2", "--jobs", "1", "--format", "json",
        ],
        &root(),
    );
    let two = servesim(
        &[
            "evaluate", tenants, "--seeds", "2", "--jobs", "2", "--format", "json",
        ],
        &root(),
    );
    assert!(one.status.success());
    assert_eq!(one.stdout, two.stdout);
    // What validate warns of goes to stderr, as run and capacity say it; stdout is the same.
    let warned = servesim(
        &[
            "evaluate",
            tenants,
            "--seeds",
            "2",
            "--jobs",
            "1",
            "--format",
            "json",
            "--set",
            "cluster.groups[0].block_size=48",
        ],
        &root(),
    );
    let err = String::from_utf8_lossy(&warned.stderr);
    assert!(
        err.contains("warning: cluster.groups[0].block_size = 48: vLLM's --block-size is one of"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&one.stderr).contains("warning:"));
    // Bad settings are refused with the reason.
    let bad = servesim(&["evaluate", tenants, "--weight", "speed=1"], &root());
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no objective \"speed\""));
    // Every wrong weight at once, each with its likely meaning.
    let weights = [
        "--weight",
        "ttft_p90=1",
        "--weight",
        "speed=1",
        "--weight",
        "cost=-1",
    ];
    let bad = servesim(&[&["evaluate", tenants][..], &weights].concat(), &root());
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains(
            "the weight of cost must be finite and ≥ 0, got -1; no objective \"speed\" (did \
             you mean \"served\"?); no objective \"ttft_p90\" (did you mean \"ttft_p99\"?); \
             the objectives: ttft_p99,"
        ),
        "{err}"
    );
    // Four billion seeds would be four billion runs (and their list alone 32 GB): refused
    // with the bound before anything is allocated.
    let bad = servesim(&["evaluate", tenants, "--seeds", "4000000000"], &root());
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("seeds must be in [1, 100,000], got 4000000000 "),
        "{err}"
    );
}

#[test]
fn weights_are_relative_and_each_objective_takes_one() {
    let c = |e: &serde_json::Value| e["combined"].as_f64().unwrap();
    let two = ["--weight", "ttft_p99=2", "--weight", "e2e_p99=1"];
    let expect = {
        let e = evaluate(&two);
        // Five objectives weigh 1, ttft_p99 2 and e2e_p99 1: Σ w·f / 8, times `served`.
        let others = ["itl_p99", "slo_attainment", "served", "cost", "fairness"];
        let sum = 2.0 * f(&e, "ttft_p99")
            + f(&e, "e2e_p99")
            + others.map(|k| f(&e, k)).iter().sum::<f64>();
        let want = sum / 8.0 * f(&e, "served");
        assert!((c(&e) - want).abs() < 1e-12, "{} vs {want}", c(&e));
        c(&e)
    };
    // The same proportions near the largest f64 (their sum overflows) give the same score.
    let mut huge: Vec<String> = vec![
        "--weight".into(),
        "ttft_p99=1.6e308".into(),
        "--weight".into(),
        "e2e_p99=8e307".into(),
    ];
    for k in ["itl_p99", "slo_attainment", "served", "cost", "fairness"] {
        huge.extend(["--weight".into(), format!("{k}=8e307")]);
    }
    let huge: Vec<&str> = huge.iter().map(String::as_str).collect();
    let got = c(&evaluate(&huge));
    assert!((got - expect).abs() < 1e-12, "{got} vs {expect}");
    // Two weights for one objective contradict each other.
    let tenants = root().join("scenarios/multi-tenant.ron");
    let bad = servesim(
        &[
            "evaluate",
            tenants.to_str().unwrap(),
            "--weight",
            "cost=1",
            "--weight",
            "cost=3",
        ],
        &root(),
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--weight cost is given twice"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
