//! `servesim capacity`: the search against queueing theory, its command line, determinism.

use crate::common::servesim;
use std::path::{Path, PathBuf};

use servesim::capacity::{Settings, search};

use crate::common::parse;

/// One server, one request at a time, 10 ms each (a Blackbox step of β0 = 10 ms, nothing
/// else): an M/D/1 queue with service rate μ = 100/s. Poisson arrivals at 50/s × the search's
/// multiple; a request's TTFT is its wait plus 10 ms.
const MD1: &str = r#"(
    name: "md1",
    seed: 7,
    cluster: (groups: [(count: 1, kv_blocks: 1000, max_num_seqs: 1, engine: (preset: Bare),
        latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [10000.0, 0.0, 0.0]))]),
    policies: (slo_classes: [(name: "standard", ttft_ms: 40.0, attainment: 0.9)]),
    workload: (num_requests: 20000, clients: [(rate_per_s: 50.0,
        input_tokens: Constant(16), output_tokens: Constant(1))]),
)"#;

/// P(W ≤ t) of an M/D/1 queue with arrival rate `lambda` and service time `s` (Erlang's
/// formula, e.g. Iversen, *Teletraffic Engineering and Network Planning*, §10.4.2):
/// (1 − ρ) Σ_{k=0}^{⌊t/s⌋} (λ(ks − t))^k / k! · e^{−λ(ks − t)}.
fn md1_wait_cdf(lambda: f64, s: f64, t: f64) -> f64 {
    let rho = lambda * s;
    let mut sum = 0.0;
    let mut factorial = 1.0;
    for k in 0..=((t / s + 1e-9).floor() as i32) {
        if k > 0 {
            factorial *= f64::from(k);
        }
        let x = lambda * (f64::from(k) * s - t);
        sum += x.powi(k) / factorial * (-x).exp();
    }
    (1.0 - rho) * sum
}

#[test]
fn the_md1_formula_gives_the_textbook_values() {
    // P(W = 0) = 1 − ρ; at ρ = 0.5 the mean wait is ρs / 2(1 − ρ) = 5 ms, and the CDF is
    // already 0.98 at 3 service times.
    assert!((md1_wait_cdf(50.0, 0.01, 0.0) - 0.5).abs() < 1e-12);
    let p = md1_wait_cdf(50.0, 0.01, 0.03);
    assert!(p > 0.98 && p < 0.99, "{p}");
}

#[test]
fn capacity_of_an_md1_server_matches_queueing_theory() {
    let sc = parse(MD1);
    let settings = Settings {
        replicas: 2,
        tolerance: 0.02,
        served_share: 0.97,
        jobs: 2,
        interrupt: None,
        runs_done: Some(std::sync::Arc::new(0.into())),
        scale_now: Some(std::sync::Arc::new(0.into())),
    };
    let c = search(&servesim::ServesimApp::new(), &sc, &settings).unwrap();
    // The progress counter saw every run, and the rate shown last is a last bracket's:
    // within the tolerance of some seed's answer to some criterion.
    let counted = settings.runs_done.as_ref().unwrap();
    assert_eq!(
        counted.load(std::sync::atomic::Ordering::Relaxed),
        c.runs as usize
    );
    let now = f64::from_bits(
        settings
            .scale_now
            .as_ref()
            .unwrap()
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let answers: Vec<f64> = c
        .limits
        .iter()
        .flat_map(|l| l.scale_per_seed.iter().flatten().copied())
        .collect();
    assert!(
        answers.iter().any(|a| (now / a - 1.0).abs() <= 0.03),
        "last run at {now}×, answers {answers:?}"
    );
    assert_eq!(c.stated_requests_per_s, Some(50.0));
    // Stable exactly below μ = 100/s; the test passes rates up to μ / 0.97 = 103.1/s.
    let kept = c.limits[0].requests_per_s.as_ref().unwrap().mean;
    assert!((96.0..=104.0).contains(&kept), "sustained {kept} req/s");
    // Asked for more, the server completes exactly μ.
    let flat_out = c.limits[0]
        .overloaded_completed_per_s
        .as_ref()
        .unwrap()
        .mean;
    assert!(
        (flat_out - 100.0).abs() < 1.0,
        "overloaded {flat_out} req/s"
    );
    // The SLO (TTFT ≤ 40 ms, i.e. a wait ≤ 30 ms, for 90 %) holds up to the λ where
    // P(W ≤ 30 ms) = 0.9, found here by bisection on the formula: 69.4/s.
    let (mut lo, mut hi) = (1.0, 99.9);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if md1_wait_cdf(mid, 0.01, 0.03) >= 0.9 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    assert!((lo - 69.4).abs() < 0.1, "{lo}");
    let slo = c.limits[1].requests_per_s.as_ref().unwrap().mean;
    assert!(
        (slo / lo - 1.0).abs() < 0.05,
        "SLO holds to {slo} req/s, theory {lo}"
    );
    assert_eq!(c.limits[1].criterion, "slo:standard");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn capacity_prints_the_same_answer_every_time_and_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "md1.ron",
        &MD1.replace("num_requests: 20000", "num_requests: 2000"),
    );
    let args = ["capacity", "md1.ron", "--format", "json", "--replicas", "3"];
    let one = servesim(
        &[&args[..], &["--jobs", "1", "--out", "a"]].concat(),
        dir.path(),
    );
    let two = servesim(&[&args[..], &["--jobs", "2"]].concat(), dir.path());
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    assert_eq!(one.stdout, two.stdout);
    // capacity.json holds what was printed.
    let file = std::fs::read(dir.path().join("a/capacity.json")).unwrap();
    assert_eq!(file, one.stdout);
    let json: serde_json::Value = serde_json::from_slice(&file).unwrap();
    assert_eq!(json["seeds"], serde_json::json!([7, 8, 9]));
    assert_eq!(
        json["limits"][0]["scale_per_seed"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // Text: both limits, each with its interval.
    let text = servesim(&["capacity", "md1.ron", "-q"], dir.path());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("the deployment keeps up"), "{text}");
    assert!(text.contains("SLO standard holds"), "{text}");
    assert!(text.contains("TTFT ≤ 40 ms for 90 %"), "{text}");
}

#[test]
fn capacity_refuses_what_it_cannot_search_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "batch.ron",
        &MD1.replace("rate_per_s: 50.0,", "arrival: AllAtZero(count: 100),"),
    );
    write(
        dir.path(),
        "short.ron",
        &MD1.replace("num_requests: 20000", "num_requests: 30"),
    );
    for (file, args, expected) in [
        ("batch.ron", &[][..], "no rate to scale"),
        ("short.ron", &[][..], "raise workload.num_requests"),
        (
            "short.ron",
            &["--tolerance", "0"][..],
            "tolerance must be in [10⁻⁶, 1], got 0 ",
        ),
        // Finer than an f64 bracket can be split: the search would run its midpoint forever.
        (
            "short.ron",
            &["--tolerance", "1e-300"][..],
            "tolerance must be in [10⁻⁶, 1], got 1e-300 ",
        ),
        (
            "short.ron",
            &["--tolerance", "1e300"][..],
            "tolerance must be in [10⁻⁶, 1], got 1e300 ",
        ),
        (
            "short.ron",
            &["--replicas", "0"][..],
            "replicas must be in [1, 10,000], got 0 ",
        ),
        (
            "short.ron",
            &["--replicas", "1000000"][..],
            "replicas must be in [1, 10,000], got 1000000 ",
        ),
    ] {
        let out = servesim(
            &[&["capacity", file, "--out", "refused"][..], args].concat(),
            dir.path(),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file} {args:?}: {err}");
        assert!(err.contains(expected), "{file} {args:?}: {err}");
        // A setting is refused before the output directory is made, and a workload the
        // search cannot use leaves none behind either.
        assert!(!dir.path().join("refused").exists(), "{file} {args:?}");
    }
}

#[test]
fn scaling_the_rates_keeps_the_shape_of_every_source() {
    let mut sc = parse(
        r#"(
        cluster: (groups: [(kv_blocks: 1000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 0.0, 0.0]))]),
        workload: (num_requests: 10, aggregate_rate_per_s: 6.0, clients: [
            (rate_per_s: 2.0, input_tokens: Constant(8), output_tokens: Constant(8)),
            (rate_share: 1.0, input_tokens: Constant(8), output_tokens: Constant(8)),
            (rate_share: 2.0, input_tokens: Constant(8), output_tokens: Constant(8)),
            (rate_per_s: 1.0, arrival: Staged(stages: [(rate_per_s: 1.0, duration_s: 10.0),
                (rate_per_s: 4.0, duration_s: 30.0)]), input_tokens: Constant(8), output_tokens: Constant(8)),
            (rate_per_s: 3.0, arrival: OnOff(on_s: 1.0, off_s: 2.0), input_tokens: Constant(8), output_tokens: Constant(8)),
        ]),
    )"#,
    );
    // A staged client's rate changes over the run (and num_requests may end it before its
    // later stages): the workload states no one rate, and capacity measures it in each run.
    assert_eq!(sc.workload.nominal_rate(), None);
    let mut steady = sc.clone();
    steady.workload.clients.remove(3);
    // 2 + 6 (shared 1:2) + 3 × 1/3 = 9 requests/s.
    assert_eq!(steady.workload.nominal_rate(), Some(9.0));
    steady.workload.scale_rates(2.0).unwrap();
    assert_eq!(steady.workload.nominal_rate(), Some(18.0));
    sc.workload.scale_rates(2.0).unwrap();
    assert_eq!(sc.workload.aggregate_rate_per_s, Some(12.0));
    let servesim::scenario::ArrivalSpec::Staged { stages, .. } = &sc.workload.clients[3].arrival
    else {
        panic!("staged")
    };
    assert_eq!((stages[1].rate_per_s, stages[1].duration_s), (8.0, 30.0));
}

#[test]
fn a_group_alone_explains_the_deployment_round_robin_falls_behind_with_its_slowest_group() {
    // The quickstart's two H100s beside two A100-80s, same model, round robin.
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let two = std::fs::read_to_string(format!("{root}/scenarios/quickstart.ron"))
        .unwrap()
        .replacen(
            "            ),\n        ],",
            r#"            ),
            (name: "a100", count: 2, model: "llama-3.1-8b-instruct", gpu: "A100-80"),
        ],"#,
            1,
        );
    write(dir.path(), "two.ron", &two);
    let sustained = |group: Option<&str>| {
        let mut args = vec![
            "capacity",
            "two.ron",
            "--set",
            "workload.num_requests=4000",
            "--set",
            r#"policies.routing="round_robin""#,
            "--replicas",
            "1",
            "--format",
            "json",
            "-q",
        ];
        if let Some(g) = group {
            args.extend(["--group", g]);
        }
        let out = servesim(&args, dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(c["group"].as_str(), group);
        c["limits"][0]["requests_per_s"]["mean"].as_f64().unwrap()
    };
    let whole = sustained(None);
    let h100 = sustained(Some("h100"));
    let a100 = sustained(Some("a100"));
    // Round robin gives each group half the requests: the deployment falls behind when the
    // A100s do, at twice what they sustain alone (within the 2 % brackets and run noise).
    assert!(
        (whole / (2.0 * a100) - 1.0).abs() < 0.05,
        "{whole} vs 2 × {a100}"
    );
    assert!(
        h100 > whole,
        "the H100s alone ({h100}) beat round robin over both ({whole})"
    );
    // --each-group: the same three answers from one invocation, the groups in the cluster's
    // order, in JSON, in the text and on the report's page.
    let each = |format: &str| {
        servesim(
            &[
                "capacity",
                "two.ron",
                "--set",
                "workload.num_requests=4000",
                "--set",
                r#"policies.routing="round_robin""#,
                "--replicas",
                "1",
                "--each-group",
                "--format",
                format,
                "-q",
                "--out",
                &format!("each-{format}"),
            ],
            dir.path(),
        )
    };
    let out = each("json");
    assert!(out.status.success());
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mean = |v: &serde_json::Value| v["limits"][0]["requests_per_s"]["mean"].as_f64().unwrap();
    assert_eq!(mean(&c), whole);
    let groups = c["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(
        (groups[0]["group"].as_str(), mean(&groups[0])),
        (Some("h100"), h100)
    );
    assert_eq!(
        (groups[1]["group"].as_str(), mean(&groups[1])),
        (Some("a100"), a100)
    );
    let text = String::from_utf8(each("text").stdout).unwrap();
    assert!(
        text.contains(&format!(
            "sum of the groups' means     {:.2} req/s, against {whole:.2} req/s",
            h100 + a100
        )),
        "{text}"
    );
    assert!(text.contains("group a100 alone"), "{text}");
    let page = servesim(&["report", "each-json", "--out", "each.html"], dir.path());
    assert!(page.status.success());
    let html = std::fs::read_to_string(dir.path().join("each.html")).unwrap();
    assert!(html.contains(r#"id="group-1""#) && html.contains("Group a100 alone"));
    let both = servesim(
        &["capacity", "two.ron", "--each-group", "--group", "h100"],
        dir.path(),
    );
    assert_eq!(both.status.code(), Some(2));
    // Unknown and P/D groups are refused with the reason.
    let out = servesim(&["capacity", "two.ron", "--group", "h10"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(r#"no instance group "h10": did you mean "h100"?"#)
    );
    let out = servesim(
        &[
            "capacity",
            &format!("{root}/scenarios/pd-disaggregation.ron"),
            "--group",
            "decode",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("is a decode pool, which cannot serve requests alone")
    );
}
