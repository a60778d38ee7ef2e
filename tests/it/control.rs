//! The control plane end to end: each policy shows the behaviour it exists for.

use crate::common::{Row, parse, run};

fn cluster(n: u32, blocks: u32, beta: &str) -> String {
    format!(
        "cluster: (groups: [(count: {n}, kv_blocks: {blocks}, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: {beta}))])"
    )
}

#[test]
fn a_token_bucket_rejects_exactly_the_requests_it_cannot_pay_for() {
    // 100 requests of 100 tokens at t = 0, bucket of 1,000, no refill: 10 admitted.
    let sc = parse(&format!(
        "(seed: 1, {}, policies: (admission: \"token_bucket\", admission_params: {{\"capacity\": 1000.0, \"refill_per_s\": 0.0}}),
          workload: (clients: [(arrival: AllAtZero(count: 100), input_tokens: Constant(100), output_tokens: Constant(2))]))",
        cluster(1, 1000, "[100.0, 1.0, 10.0]")
    ));
    let (s, _) = run(&sc);
    assert_eq!((s.requests.completed, s.requests.rejected), (10, 90));
    assert_eq!(s.rejections.get("token_bucket"), Some(&90));
    // Refill 500 tokens/s, requests every 100 ms (50 tokens per gap), capacity 300: the
    // first five drain the bucket (300 + 4·50 = 500 tokens), then every other request fits.
    // 40 requests: 5 + 17 admitted, 18 rejected.
    let sc = parse(&format!(
        "(seed: 1, {}, policies: (admission: \"token_bucket\", admission_params: {{\"capacity\": 300.0, \"refill_per_s\": 500.0}}),
          workload: (num_requests: 40, clients: [(rate_per_s: 10.0, arrival: Constant, input_tokens: Constant(100), output_tokens: Constant(2))]))",
        cluster(1, 1000, "[100.0, 1.0, 10.0]")
    ));
    let (s, rows) = run(&sc);
    assert_eq!((s.requests.completed, s.requests.rejected), (22, 18));
    let rejected: Vec<u64> = rows
        .iter()
        .filter(|r| r.str("state") == "rejected")
        .map(|r| r.u64("request_id"))
        .collect();
    assert_eq!(rejected, (5..40).step_by(2).collect::<Vec<_>>());
}

#[test]
fn a_tenant_quota_limits_each_tenant_separately() {
    let sc = parse(&format!(
        "(seed: 1, {}, policies: (admission: \"tenant_quota\", admission_params: {{\"rate_per_s\": 0.0, \"burst\": 5.0, \"tenant.b\": 1000.0}}),
          workload: (clients: [
            (name: \"a\", arrival: AllAtZero(count: 20), input_tokens: Constant(10), output_tokens: Constant(2)),
            (name: \"b\", rate_per_s: 10.0, arrival: Constant, input_tokens: Constant(10), output_tokens: Constant(2))], num_requests: 40))",
        cluster(1, 1000, "[100.0, 1.0, 10.0]")
    ));
    let (s, _) = run(&sc);
    let t = |n: &str| s.tenants.iter().find(|t| t.name == n).unwrap().clone();
    assert_eq!(
        (t("a").completed, t("a").rejected),
        (5, 15),
        "burst 5, no refill"
    );
    assert_eq!(
        (t("b").completed, t("b").rejected),
        (20, 0),
        "b's own rate refills between its requests"
    );
}

#[test]
fn a_tenant_may_be_called_like_a_parameter() {
    // Tenant "burst" gets its own rate through `tenant.burst`; the bare `burst` stays the
    // bucket size (3): tenant "other", refilled at 0, admits exactly 3 of its 10.
    let sc = parse(&format!(
        "(seed: 1, {}, policies: (admission: \"tenant_quota\",
            admission_params: {{\"rate_per_s\": 0.0, \"burst\": 3.0, \"tenant.burst\": 1000.0}}),
          workload: (clients: [
            (name: \"other\", arrival: AllAtZero(count: 10), input_tokens: Constant(10), output_tokens: Constant(2)),
            (name: \"burst\", rate_per_s: 10.0, arrival: Constant, input_tokens: Constant(10), output_tokens: Constant(2))],
            num_requests: 20))",
        cluster(1, 1000, "[100.0, 1.0, 10.0]")
    ));
    let (s, _) = run(&sc);
    let t = |n: &str| s.tenants.iter().find(|t| t.name == n).unwrap().clone();
    assert_eq!((t("other").completed, t("other").rejected), (3, 7));
    assert_eq!((t("burst").completed, t("burst").rejected), (10, 0));
    // A bare tenant name is an error that says how to write it.
    let app = servesim::default_app();
    let e = servesim::loader::parse(
        &format!(
            "(seed: 1, {}, policies: (admission: \"tenant_quota\", admission_params: {{\"other\": 1.0}}),
              workload: (num_requests: 1, clients: [(name: \"other\", rate_per_s: 1.0, input_tokens: Constant(10), output_tokens: Constant(2))]))",
            cluster(1, 1000, "[100.0, 1.0, 10.0]")
        ),
        "q.ron",
        &[],
        app.world().resource::<servesim::policy::Catalog>(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("write `tenant.other` for its rate"), "{e}");
}

fn mean_ttft(rows: &[Row]) -> f64 {
    let c: Vec<f64> = rows
        .iter()
        .filter(|r| r.str("state") == "completed")
        .map(|r| r.us("ttft_ms") as f64)
        .collect();
    c.iter().sum::<f64>() / c.len() as f64
}

#[test]
fn sjf_lowers_mean_ttft_against_fcfs_on_mixed_lengths() {
    let src = |order: &str| {
        format!(
            "(seed: 3, {}, policies: (scheduling: \"{order}\"),
              workload: (num_requests: 300, clients: [(rate_per_s: 40.0, input_tokens: Uniform(min: 20, max: 3000), output_tokens: Constant(8))]))",
            cluster(1, 20000, "[2000.0, 15.0, 50.0]").replace("kv_blocks: 20000,", "kv_blocks: 20000, max_num_batched_tokens: 1024,")
        )
    };
    let (_, fcfs) = run(&parse(&src("fcfs")));
    let (_, sjf) = run(&parse(&src("sjf")));
    assert!(
        mean_ttft(&sjf) < 0.8 * mean_ttft(&fcfs),
        "sjf {} vs fcfs {}",
        mean_ttft(&sjf),
        mean_ttft(&fcfs)
    );
}

#[test]
fn priority_scheduling_serves_the_critical_class_first_and_preempts_the_batch_class() {
    let src = |sched: &str, preempt: &str| {
        format!(
            "(seed: 4, {}, policies: (priority: \"slo_based\", scheduling: \"{sched}\", preemption: {preempt}),
              workload: (num_requests: 400, clients: [
                (name: \"c\", slo_class: \"critical\", rate_per_s: 15.0, input_tokens: Uniform(min: 100, max: 600), output_tokens: Uniform(min: 20, max: 200)),
                (name: \"b\", slo_class: \"batch\", rate_per_s: 15.0, input_tokens: Uniform(min: 100, max: 600), output_tokens: Uniform(min: 20, max: 200))]))",
            cluster(1, 400, "[3000.0, 10.0, 100.0]")
        )
    };
    let (s, rows) = run(&parse(&src("priority_fcfs", "Priority")));
    let class_ttft = |c: &str| {
        let r: Vec<Row> = rows
            .iter()
            .filter(|r| r.str("slo_class") == c)
            .cloned()
            .collect();
        mean_ttft(&r)
    };
    assert!(
        class_ttft("critical") < 0.5 * class_ttft("batch"),
        "{} vs {}",
        class_ttft("critical"),
        class_ttft("batch")
    );
    let preempted = |c: &str| {
        rows.iter()
            .filter(|r| r.str("slo_class") == c)
            .map(|r| r.u64("preemptions"))
            .sum::<u64>()
    };
    assert!(s.preemptions > 0, "the small cache forces preemption");
    assert!(
        preempted("batch") > 3 * preempted("critical"),
        "batch {} critical {}",
        preempted("batch"),
        preempted("critical")
    );
}

#[test]
fn a_priority_policy_that_orders_nothing_is_said_to() {
    // FCFS queues and tail preemption read no priority: slo_based runs exactly as constant,
    // and validate says so; with priority_fcfs it is used and nothing is said.
    let src = |priority: &str, sched: &str| {
        format!(
            "(seed: 4, {}, policies: (priority: \"{priority}\", scheduling: \"{sched}\"),
              workload: (num_requests: 200, clients: [
                (name: \"c\", slo_class: \"critical\", rate_per_s: 15.0, input_tokens: Uniform(min: 100, max: 600), output_tokens: Uniform(min: 20, max: 200)),
                (name: \"b\", slo_class: \"batch\", rate_per_s: 15.0, input_tokens: Uniform(min: 100, max: 600), output_tokens: Uniform(min: 20, max: 200))]))",
            cluster(1, 400, "[3000.0, 10.0, 100.0]")
        )
    };
    let ttfts = |sc: &str| -> Vec<String> {
        let (_, rows) = run(&parse(sc));
        rows.iter().map(|r| r.str("ttft_ms").to_string()).collect()
    };
    let fcfs = ttfts(&src("slo_based", "fcfs"));
    assert_eq!(fcfs, ttfts(&src("constant", "fcfs")));
    assert_ne!(fcfs, ttfts(&src("slo_based", "priority_fcfs")));
    let dir = tempfile::tempdir().unwrap();
    let validate = |text: String| {
        std::fs::write(dir.path().join("p.ron"), text).unwrap();
        let o = crate::common::servesim_ok(&["validate", "p.ron"], dir.path());
        String::from_utf8(o.stderr).unwrap()
    };
    let said = validate(src("slo_based", "fcfs"));
    assert!(
        said.contains("warning: policies.priority = \"slo_based\" orders nothing here"),
        "{said}"
    );
    for quiet in [src("slo_based", "priority_fcfs"), src("constant", "fcfs")] {
        let said = validate(quiet);
        assert!(!said.contains("orders nothing"), "{said}");
    }
}

#[test]
fn always_busiest_is_worse_than_least_loaded() {
    let src = |routing: &str| {
        format!(
            "(seed: 5, {}, policies: (routing: \"{routing}\"),
              workload: (num_requests: 400, clients: [(rate_per_s: 30.0, input_tokens: Uniform(min: 50, max: 500), output_tokens: Uniform(min: 10, max: 200))]))",
            cluster(4, 4000, "[3000.0, 10.0, 100.0]")
        )
    };
    let (busy, _) = run(&parse(&src("always_busiest")));
    let (least, _) = run(&parse(&src("least_loaded")));
    assert!(busy.e2e_ms.mean.unwrap() > 1.5 * least.e2e_ms.mean.unwrap());
    assert!(busy.fairness.jain_instance_completed < least.fairness.jain_instance_completed);
    assert!(least.fairness.jain_instance_completed > 0.95);
}

/// `session_affinity` on a workload without sessions routes as `least_outstanding`, and
/// validate says so; with sessions (a client's or inference-perf's multi-turn chat) it does
/// not.
#[test]
fn session_affinity_without_sessions_is_warned_of() {
    let said = crate::common::stderr_in_root;
    let affinity = "policies.routing=\"session_affinity\"";
    let warning = "warning: policies.routing = \"session_affinity\" keeps a session's turns on one instance, and no source makes sessions";
    for without in [
        &["validate", "scenarios/quickstart.ron", "--set", affinity][..],
        &[
            "validate",
            "scenarios/inference-perf.ron",
            "--set",
            affinity,
            "--set",
            "workload.inference_perf.shared_prefix.enable_multi_turn_chat=false",
        ],
    ] {
        let e = said(without);
        assert!(e.contains(warning), "{without:?}: {e}");
    }
    // The bundled inference-perf load is multi-turn chat.
    for with_sessions in [
        &[
            "validate",
            "scenarios/multi-turn-chat.ron",
            "--set",
            affinity,
        ][..],
        &[
            "validate",
            "scenarios/inference-perf.ron",
            "--set",
            affinity,
        ],
    ] {
        let e = said(with_sessions);
        assert!(!e.contains("session_affinity"), "{with_sessions:?}: {e}");
    }
}

#[test]
fn session_affinity_keeps_every_turn_of_a_session_on_one_instance() {
    let sc = parse(&format!(
        "(seed: 6, {}, policies: (routing: \"session_affinity\"),
          workload: (num_requests: 300, clients: [(rate_per_s: 4.0, input_tokens: Constant(50), output_tokens: Uniform(min: 5, max: 50),
            session: (turns: Uniform(min: 2, max: 6), think_time_s: 0.5))]))",
        cluster(4, 4000, "[2000.0, 5.0, 50.0]")
    ));
    let (_, rows) = run(&sc);
    let mut by_session = std::collections::BTreeMap::<u64, std::collections::BTreeSet<u64>>::new();
    for r in &rows {
        by_session
            .entry(r.u64("session"))
            .or_default()
            .insert(r.u64("instance"));
    }
    assert!(by_session.len() > 40);
    assert!(by_session.values().all(|s| s.len() == 1));
    let used: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.u64("instance")).collect();
    assert!(used.len() > 1, "sessions still spread over instances");
}

#[test]
fn prefix_aware_routing_raises_the_hit_rate_over_round_robin() {
    // 8 system prompts of 1,024 tokens; each instance's cache holds only a few of them.
    let src = |routing: &str| {
        format!(
            "(seed: 7, {}, policies: (routing: \"{routing}\"),
              workload: (num_requests: 600, clients: [(rate_per_s: 20.0, input_tokens: Uniform(min: 16, max: 128), output_tokens: Constant(16),
                shared_prefix_tokens: 1024, prefix_groups: 8)]))",
            cluster(4, 400, "[2000.0, 5.0, 50.0]")
        )
    };
    let (rr, _) = run(&parse(&src("round_robin")));
    for routing in ["prefix_aware", "prefix_overlap", "weighted"] {
        let (pa, _) = run(&parse(&src(routing)));
        assert!(
            pa.kv.hit_rate > rr.kv.hit_rate + 0.1,
            "{routing} {} vs round_robin {}",
            pa.kv.hit_rate,
            rr.kv.hit_rate
        );
    }
}

#[test]
fn stale_snapshots_mislead_least_loaded_until_the_first_refresh() {
    let src = |interval: u64| {
        format!(
            "(seed: 8, {}, policies: (routing: \"least_loaded\", snapshot_refresh_interval_us: {interval}),
              workload: (num_requests: 60, duration_s: 2.0, clients: [(rate_per_s: 30.0, input_tokens: Constant(100), output_tokens: Uniform(min: 1, max: 100))]))",
            cluster(3, 2000, "[5000.0, 10.0, 200.0]")
        )
    };
    // Every snapshot reads empty, so every decision is a three-way tie, taken in turn: the
    // router sends requests round the instances blind to their queues (request k to k mod 3).
    let (_, stale) = run(&parse(&src(10_000_000)));
    assert!(
        stale
            .iter()
            .all(|r| r.u64("instance") == r.u64("request_id") % 3),
        "stale snapshots: round robin by ties"
    );
    // Live snapshots see the queues: the choice follows them, not the rotation.
    let (_, live) = run(&parse(&src(0)));
    assert!(
        live.iter()
            .any(|r| r.u64("instance") != r.u64("request_id") % 3),
        "live snapshots steer by load"
    );
}

#[test]
fn slo_attainment_counts_only_requests_within_every_target() {
    // The lone request of tests/it/hand.rs: TTFT 2.100 ms, mean ITL 0.650 ms, E2E 4.050 ms.
    let src = |ttft: f64, e2e: f64| {
        format!(
            "(seed: 1, cluster: (groups: [(count: 1, kv_blocks: 100, latency: Blackbox(alpha: [1000.0, 2.0, 500.0], beta: [100.0, 3.0, 50.0]))]),
              policies: (slo_classes: [(name: \"standard\", ttft_ms: {ttft:?}, itl_ms: 0.65, e2e_ms: {e2e:?})]),
              outputs: (fitness: {{\"ttft_mean\": 2.0, \"requests_per_s\": 1.0}}),
              workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(100), output_tokens: Constant(4))]))"
        )
    };
    let (met, _) = run(&parse(&src(2.1, 4.05)));
    assert_eq!((met.slo.good, met.slo.attainment), (1, Some(1.0)));
    assert_eq!(met.slo_classes[0].slo_attainment, Some(1.0));
    let (missed, _) = run(&parse(&src(2.099, 5.0)));
    assert_eq!((missed.slo.good, missed.slo.attainment), (0, Some(0.0)));
    // Fitness = 2·1/(1 + 2.1) + 1·r/(r + 100), r = 1 request / simulated seconds.
    let r = met.throughput.requests_per_s;
    let expected = 2.0 / (1.0 + 2.1) + r / (r + 100.0);
    assert!(
        (met.fitness.unwrap() - expected).abs() < 1e-9,
        "{:?} vs {expected}",
        met.fitness
    );
}

#[test]
fn a_source_without_a_class_where_classes_are_declared_is_warned_of_as_always_good() {
    // Client "a" is in a class whose TTFT target nobody meets; client "b" names no class, so
    // it is in "standard": without targets, every request of it counts as good.
    let src = |classes: &str| {
        format!(
            "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], \
             beta: [1000.0, 1.0, 1.0]))]), policies: (slo_classes: [{classes}]), \
             workload: (num_requests: 40, clients: [(name: \"a\", rate_per_s: 5.0, \
             input_tokens: Constant(8), output_tokens: Constant(2), slo_class: \"fast\"), \
             (name: \"b\", rate_per_s: 5.0, input_tokens: Constant(8), \
             output_tokens: Constant(2))]))"
        )
    };
    let fast = "(name: \"fast\", ttft_ms: 0.001)";
    let sc = parse(&src(fast));
    let said = servesim::policy::unclassed_sources(&sc).expect("a warning");
    assert!(
        said.starts_with(
            "workload.clients[1] names no slo_class, so its requests are in \"standard\", \
             which policies.slo_classes does not declare"
        ),
        "{said}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.ron"), src(fast)).unwrap();
    let out = crate::common::servesim_ok(&["validate", "s.ron"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("warning: {said}")), "{err}");
    let (s, rows) = run(&sc);
    let b = rows.iter().filter(|r| r.str("tenant") == "b").count() as u64;
    assert!(b > 0 && b < 40);
    assert_eq!(s.slo.good, b, "every request of b, none of a");

    // Declaring the default class, or classes for their priority alone, says nothing.
    let both = parse(&src(&format!(
        "{fast}, (name: \"standard\", ttft_ms: 0.001)"
    )));
    assert_eq!(servesim::policy::unclassed_sources(&both), None);
    assert_eq!(run(&both).0.slo.good, 0);
    let priority_only = parse(&src("(name: \"fast\", priority: 2)"));
    assert_eq!(servesim::policy::unclassed_sources(&priority_only), None);
    // An inference-perf load cannot name a class: the advice is to declare "standard".
    let perf = parse(
        "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], \
         beta: [1000.0, 1.0, 1.0]))]), policies: (slo_classes: [(name: \"fast\", ttft_ms: \
         1.0)]), workload: (inference_perf: (stages: [(rate_per_s: 1.0, duration_s: 2.0)], \
         shared_prefix: (num_unique_system_prompts: 1, num_users_per_system_prompt: 1, \
         system_prompt_len: 8, question_len: 8, output_len: 2))))",
    );
    let said = servesim::policy::unclassed_sources(&perf).expect("a warning");
    assert!(
        said.starts_with("workload.inference_perf names no slo_class")
            && said.ends_with(
                "; declare (name: \"standard\", …), the class of an inference_perf load"
            ),
        "{said}"
    );
}

#[test]
fn a_fitness_weighing_cost_where_nothing_has_a_price_is_warned_of() {
    // cost_per_gpu_hour defaults to 0, so the cost term is 1/(1 + 0) in every run.
    let src = |price: &str, fitness: &str| {
        format!(
            "(cluster: (groups: [(kv_blocks: 100, {price} latency: Blackbox(alpha: [0.0, 0.0, \
             0.0], beta: [1000.0, 1.0, 1.0]))]), outputs: (fitness: {{{fitness}}}), \
             workload: (num_requests: 4, clients: [(rate_per_s: 5.0, input_tokens: \
             Constant(8), output_tokens: Constant(2))]))"
        )
    };
    let sc = parse(&src("", "\"cost\": 1.0, \"ttft_mean\": 1.0"));
    let said = servesim::metrics::unpriced_cost_fitness(&sc).expect("a warning");
    assert!(
        said.starts_with("outputs.fitness weighs cost, but no group gives cost_per_gpu_hour"),
        "{said}"
    );
    assert_eq!(run(&sc).0.cost.total, 0.0);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.ron"), src("", "\"cost_per_mtok\": 2.0")).unwrap();
    let out = crate::common::servesim_ok(&["validate", "s.ron"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: outputs.fitness weighs cost_per_mtok, but no group"),
        "{err}"
    );
    // A price, or no weight on cost, says nothing.
    for (price, fitness) in [
        ("cost_per_gpu_hour: 3.0,", "\"cost\": 1.0"),
        ("", "\"ttft_mean\": 1.0"),
        ("", "\"cost\": 0.0"),
    ] {
        let sc = parse(&src(price, fitness));
        assert_eq!(
            servesim::metrics::unpriced_cost_fitness(&sc),
            None,
            "{price} {fitness}"
        );
    }
}

#[test]
fn the_decision_trace_has_a_row_per_routing_decision_with_scores_and_regret() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args([
            "run",
            "scenarios/routing-comparison.ron",
            "--trace",
            "decisions",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .args([
            "--set",
            "workload.num_requests=200",
            "--set",
            "policies.routing=\"weighted\"",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r = csv::Reader::from_path(dir.path().join("decisions.csv")).unwrap();
    assert_eq!(
        r.headers().unwrap().iter().collect::<Vec<_>>(),
        servesim::cluster::DECISION_COLUMNS
    );
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 200);
    for row in &rows {
        let regret: f64 = row[6].parse().unwrap();
        assert!(regret >= 0.0);
        assert_eq!(regret, 0.0, "weighted always takes its own argmax");
        assert!(row[7].contains("precise_prefix="), "{:?}", &row[7]);
        assert_eq!(row[7].split('|').count(), 3, "top 3 candidates");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["routing"]["decisions"], 200);
}

/// The control-plane chapter's routing comparison, regenerated from `scenarios/routing-comparison.ron`.
fn routing_table() -> String {
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/routing-comparison.ron");
    let mut t = String::from(
        "| routing | KV hit rate | TTFT p50 (ms) | TTFT p99 (ms) | E2E p50 (ms) | E2E p99 (ms) | Jain (instances) | CoV (instances) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for routing in [
        "round_robin",
        "random",
        "least_loaded",
        "least_outstanding",
        "least_kv",
        "cost_escalation",
        "prefix_aware",
        "prefix_overlap",
        "weighted",
        "always_busiest",
    ] {
        let o = [("policies.routing".to_string(), format!("\"{routing}\""))];
        let sc = servesim::loader::load(&path, &o, catalog).unwrap();
        let (s, _) = run(&sc);
        let f = |v: Option<f64>| format!("{:.1}", v.unwrap_or(f64::NAN));
        t.push_str(&format!(
            "| {routing} | {:.3} | {} | {} | {} | {} | {:.3} | {:.3} |\n",
            s.kv.hit_rate,
            f(s.ttft_ms.p50),
            f(s.ttft_ms.p99),
            f(s.e2e_ms.p50),
            f(s.e2e_ms.p99),
            s.fairness.jain_instance_completed,
            s.fairness.cov_instance_completed
        ));
    }
    t
}

#[test]
fn the_docs_routing_comparison_matches_a_fresh_run() {
    let readme = crate::common::doc("control-plane");
    let table = routing_table();
    assert!(
        readme.contains(&table),
        "docs/control-plane.md is out of date; the table should read:\n{table}"
    );
}

#[test]
fn a_priority_near_the_largest_integer_stays_on_top() {
    // Client priority 2,147,483,646 in the critical class (+4): the sum used to wrap to a
    // large negative number and serve the VIP last.
    let src = format!(
        "(seed: 4, {}, policies: (priority: \"slo_based\", scheduling: \"priority_fcfs\"),
          workload: (num_requests: 400, clients: [
            (name: \"vip\", slo_class: \"critical\", priority: 2147483646, rate_per_s: 15.0,
             input_tokens: Uniform(min: 100, max: 600), output_tokens: Uniform(min: 20, max: 200)),
            (name: \"rest\", rate_per_s: 15.0, input_tokens: Uniform(min: 100, max: 600),
             output_tokens: Uniform(min: 20, max: 200))]))",
        cluster(1, 400, "[3000.0, 10.0, 100.0]")
    );
    let (_, rows) = run(&parse(&src));
    let ttft = |tenant: &str| {
        let r: Vec<Row> = rows
            .iter()
            .filter(|r| r.str("tenant") == tenant)
            .cloned()
            .collect();
        mean_ttft(&r)
    };
    assert!(
        ttft("vip") < 0.5 * ttft("rest"),
        "vip {} rest {}",
        ttft("vip"),
        ttft("rest")
    );
}

#[test]
fn an_unscored_routers_regret_is_the_same_with_and_without_the_decision_trace() {
    // Round robin ignores load: its regret (chosen load − least load, over routable
    // instances) is positive. Without a trace it is counted in one pass; with one, from the
    // candidate list written to decisions.csv. Both must agree to the bit.
    let sc = parse(&format!(
        "({}, policies: (routing: \"round_robin\"),
          workload: (num_requests: 400, clients: [(rate_per_s: 300.0,
            input_tokens: Uniform(min: 16, max: 900), output_tokens: Uniform(min: 1, max: 90))]))",
        cluster(5, 3000, "[3000.0, 2.0, 60.0]")
    ));
    let plain = servesim::Simulation::new(&sc, Default::default())
        .unwrap()
        .run()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let traced = servesim::Simulation::new(
        &sc,
        servesim::RunOptions {
            trace_decisions: true,
            out_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap()
    .run()
    .unwrap();
    assert_eq!(plain.routing.decisions, 400);
    assert!(plain.routing.mean_regret > 0.0 && plain.routing.max_regret >= 1.0);
    assert_eq!(plain.routing, traced.routing);
    // The trace's own regret column adds up to the same total.
    let mut r = csv::Reader::from_path(dir.path().join("decisions.csv")).unwrap();
    let max = r
        .records()
        .map(|row| row.unwrap()[6].parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(max, plain.routing.max_regret);
}

/// Issue 30, class 9: every routing policy but `always_busiest` (which exists to pile
/// everything on one instance) spreads a uniform load over all of 8 identical instances:
/// ties are taken in turn, never sent to the lowest index.
#[test]
fn every_routing_policy_spreads_a_uniform_load_over_all_instances() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    let names: Vec<&str> = catalog
        .names::<servesim::policy::family::Routing>()
        .into_iter()
        .filter(|n| *n != "always_busiest")
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let mut lopsided = Vec::new();
    for routing in &names {
        let src = format!(
            "(seed: 9, {}, policies: (routing: \"{routing}\"),
              workload: (num_requests: 800, clients: [(rate_per_s: 40.0,
                input_tokens: Uniform(min: 64, max: 256), output_tokens: Uniform(min: 16, max: 64))]))",
            cluster(8, 2000, "[2000.0, 2.0, 40.0]")
        );
        let (s, _) = run(&parse(&src));
        let served: Vec<u64> = s.instances.iter().map(|i| i.completed).collect();
        let idle = served.iter().filter(|&&c| c == 0).count();
        let spread = idle == 0 && s.fairness.jain_instance_completed >= 0.8;
        if !spread {
            lopsided.push(format!(
                "{routing}: {served:?} (Jain {:.3})",
                s.fairness.jain_instance_completed
            ));
        }
    }
    assert!(lopsided.is_empty(), "{}", lopsided.join("\n"));
}
