//! Every bundled scenario runs, with invariants checked every tick.

use std::path::Path;

use servesim::policy::Catalog;

use crate::common::run;

#[test]
fn every_bundled_scenario_validates_and_runs_with_invariants_checked() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    let mut seen = 0;
    let mut entries: Vec<_> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "ron"))
            .collect();
    entries.sort();
    for path in entries {
        // Cap the size so the whole suite stays quick; the full runs are benchmarks.
        let cap = [("workload.num_requests".to_string(), "1500".to_string())];
        let sc = servesim::loader::load(&path, &cap, catalog).unwrap_or_else(|e| panic!("{e}"));
        let (s, _) = run(&sc);
        assert!(s.requests.injected > 0, "{}", path.display());
        assert!(s.requests.completed > 0, "{}", path.display());
        seen += 1;
    }
    assert!(
        seen >= 2,
        "quickstart and at least one multi-instance scenario"
    );
}

#[test]
fn the_benchmark_scenarios_validate() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bench");
    for w in ["w1", "w2", "w3", "w4", "w5"] {
        let sc = servesim::loader::load(&dir.join(format!("{w}.ron")), &[], catalog)
            .unwrap_or_else(|e| panic!("{e}"));
        let instances: u32 = sc.cluster.groups.iter().map(|g| g.count).sum();
        let rate = sc.workload.clients[0].rate_per_s;
        assert_eq!(
            rate,
            Some(8.0 * f64::from(instances)),
            "{w}: 8 req/s per instance"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_summary_and_a_different_seed_does_not() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.ron");
    let load = |seed: &str| {
        let o = [
            ("seed".to_string(), seed.to_string()),
            ("workload.num_requests".to_string(), "300".to_string()),
        ];
        servesim::loader::load(&path, &o, catalog).unwrap()
    };
    let (a, ra) = run(&load("5"));
    let (b, rb) = run(&load("5"));
    let (c, _) = run(&load("6"));
    assert_eq!(a, b);
    assert!(
        format!("{ra:?}") == format!("{rb:?}"),
        "rows differ between identical runs"
    );
    assert_ne!(a.e2e_ms, c.e2e_ms);
}

#[test]
fn changing_the_router_does_not_change_the_generated_workload() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/cluster-16.ron");
    let with = |routing: &str| {
        let o = [
            ("policies.routing".to_string(), format!("\"{routing}\"")),
            ("workload.num_requests".to_string(), "400".to_string()),
        ];
        run(&servesim::loader::load(&path, &o, catalog).unwrap()).1
    };
    let key = |rows: &[crate::common::Row]| -> Vec<(u64, u64, u64)> {
        rows.iter()
            .map(|r| {
                (
                    r.u64("arrival_us"),
                    r.u64("input_tokens"),
                    r.u64("output_tokens"),
                )
            })
            .collect()
    };
    let rr = with("round_robin");
    let ll = with("least_loaded");
    assert_eq!(key(&rr), key(&ll));
    let instances =
        |rows: &[crate::common::Row]| rows.iter().map(|r| r.u64("instance")).collect::<Vec<_>>();
    assert_ne!(
        instances(&rr),
        instances(&ll),
        "the routers do decide differently"
    );
}

#[test]
fn round_robin_spreads_requests_evenly_and_least_loaded_balances_load() {
    let sc = crate::common::parse(
        "(seed: 9, cluster: (groups: [(count: 4, kv_blocks: 4000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [2000.0, 5.0, 100.0]))]),
          policies: (routing: \"round_robin\"),
          workload: (num_requests: 400, clients: [(rate_per_s: 200.0, input_tokens: Constant(64), output_tokens: Uniform(min: 1, max: 200))]))",
    );
    let (s, _) = run(&sc);
    let per: Vec<u64> = s.instances.iter().map(|i| i.completed).collect();
    assert_eq!(per, vec![100, 100, 100, 100], "round robin is exact");
}

#[test]
fn a_horizon_stops_the_run_and_leaves_requests_in_their_buckets() {
    let sc = crate::common::parse(
        "(seed: 2, horizon_s: 2.0, cluster: (groups: [(count: 1, kv_blocks: 2000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 10.0, 300.0]))]),
          workload: (clients: [(rate_per_s: 50.0, input_tokens: Constant(200), output_tokens: Constant(300))]))",
    );
    let (s, rows) = run(&sc);
    assert!(s.sim_duration_s <= 2.0);
    assert!(
        s.requests.queued + s.requests.running > 0,
        "overloaded: work is left at the horizon"
    );
    assert!(rows.iter().all(|r| r.u64("arrival_us") <= 2_000_000));
    assert!(
        rows.iter()
            .filter(|r| r.str("state") == "completed")
            .all(|r| r.u64("completion_us") <= 2_000_000)
    );
    // The warning names what stopped the run with requests left.
    let says = |s: &servesim::metrics::Summary, why: &str| {
        let left = s.requests.queued + s.requests.running;
        let want = format!("{left} requests were still in the system when {why}");
        assert!(s.warnings.contains(&want), "{want:?} in {:?}", s.warnings);
    };
    says(&s, "the run stopped (horizon)");
    // Finished by its caller after 50 ticks, before its horizon: said so, not "horizon".
    // (With invariant checks each call is one tick.)
    let options = servesim::RunOptions {
        check_invariants: true,
        ..Default::default()
    };
    let mut sim = servesim::Simulation::new(&sc, options).unwrap();
    for _ in 0..50 {
        assert!(sim.tick());
    }
    let early = sim.finish().unwrap();
    assert!(early.sim_duration_s < 2.0);
    says(&early, "the run was finished before its end");
}

/// A step's tokens are priced when it is formed: a request whose first step was still in
/// flight at the horizon was reported with the TTFT it would have had, and with a step
/// priced past the clock's range (a measured table of 10²⁰ µs) a TTFT of 1.8·10¹⁶ ms (and
/// INV-5 under `--check-invariants`).
#[test]
fn a_first_token_after_the_horizon_is_not_reported() {
    // One request at t = 0: a step of 1,000 + 160 µs, then 1,010 µs a token.
    let at = |horizon_s: f64| {
        let sc = crate::common::parse(&format!(
            "(seed: 2, horizon_s: {horizon_s}, cluster: (groups: [(count: 1, kv_blocks: 2000,
                latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))]),
              workload: (clients: [(arrival: AllAtZero(count: 1), input_tokens: Constant(160), output_tokens: Constant(3))]))"
        ));
        let (s, rows) = run(&sc);
        assert_eq!(s.requests.running, 1);
        let r = &rows[0];
        (
            r.str("ttft_ms").to_string(),
            r.u64("generated_tokens"),
            s.ttft_ms.count,
        )
    };
    // At 1,100 µs the first step runs to 1,160: no token yet.
    assert_eq!(at(0.0011), (String::new(), 0, 0));
    // At 1,200 µs the first token (1,160) is out. (`generated_tokens` counts the step in
    // flight too, as outputs.md says.)
    let (ttft, _, count) = at(0.0012);
    assert_eq!((ttft.as_str(), count), ("1.160", 1));
}

#[test]
fn reject_all_rejects_every_request_into_its_own_bucket() {
    let sc = crate::common::parse(
        "(seed: 2, cluster: (groups: [(count: 2, kv_blocks: 100,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 10.0, 300.0]))]),
          policies: (admission: \"reject_all\"),
          workload: (num_requests: 50, clients: [(rate_per_s: 50.0, input_tokens: Constant(20), output_tokens: Constant(3))]))",
    );
    let (s, rows) = run(&sc);
    assert_eq!(s.requests.rejected, 50);
    assert_eq!(s.rejections.get("reject_all"), Some(&50));
    assert!(
        rows.iter()
            .all(|r| r.str("state") == "rejected" && r.str("instance").is_empty())
    );
}

#[test]
fn quantised_weights_shorten_weight_bound_steps_and_bad_data_types_are_located() {
    // A decode step of one request on Llama-3.1-70B TP2 reads every weight once: in fp8 it
    // reads half the bytes, so the step takes a little over half as long (the all-reduces,
    // the KV read and the fixed costs stay).
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let scenario = format!("{root}/scenarios/quantisation.ron");
    let step_of_one = |sets: &[&str]| -> f64 {
        let mut args = vec!["validate", scenario.as_str()];
        for s in sets {
            args.extend(["--set", s]);
        }
        let out = crate::common::servesim(&args, dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let at = text.find("context each takes ").unwrap() + "context each takes ".len();
        text[at..].split(" ms").next().unwrap().parse().unwrap()
    };
    // What the weights take: fp8 but the embedding and LM head (2 × 128,256 × 8,192
    // parameters), which vLLM keeps in bf16: 68,452,360,192 + 2 × 2,101,346,304 B = 67.7 GiB.
    let out = crate::common::servesim_ok(&["validate", scenario.as_str()], dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("weights fp8 (1 B each; embedding and LM head at 2 B: 67.7 GiB)"),
        "{text}"
    );
    let fp8 = step_of_one(&[]);
    let bf16 = step_of_one(&[r#"cluster.groups[0].weight_dtype="bf16""#]);
    let ratio = fp8 / bf16;
    assert!((0.5..0.7).contains(&ratio), "fp8 {fp8} ms, bf16 {bf16} ms");
    let out = crate::common::servesim(
        &[
            "validate",
            &scenario,
            "--set",
            r#"cluster.groups[0].kv_cache_dtype="int4""#,
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cluster.groups[0].kv_cache_dtype: unknown kv_cache_dtype \"int4\": auto or one of bf16, fp16, fp8"),
        "{err}"
    );
}

#[test]
fn validate_and_list_say_what_the_roofline_on_each_gpu_rests_on() {
    let dir = tempfile::tempdir().unwrap();
    let quick = format!("{}/scenarios/quickstart.ron", env!("CARGO_MANIFEST_DIR"));
    let validate = |gpu: &str| {
        let out = crate::common::servesim(
            &[
                "validate",
                &quick,
                "--set",
                &format!(r#"cluster.groups[0].gpu="{gpu}""#),
            ],
            dir.path(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(
        validate("H100")
            .contains("H100: our roofline is calibrated on kernels measured on this GPU")
    );
    assert!(
        validate("H200")
            .contains("H200: our roofline uses the efficiencies measured on the same compute die")
    );
    let mi = validate("MI300X");
    assert!(mi.contains("MI300X: datasheet figures only"), "{mi}");
    let out = crate::common::servesim(&["list", "hardware"], dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    for id in ["B200", "GB200", "H20", "MI300X", "MI325X"] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .unwrap();
        assert!(row.contains("datasheet"), "{row}");
    }
    let h100 = text.lines().find(|l| l.starts_with("H100 ")).unwrap();
    assert!(h100.contains("measured"), "{h100}");
}
