//! Injected faults (issue 34 item 1, stragglers), worked out by hand on one instance whose
//! every step takes 1 ms.

use crate::common::{invalid, parse, run, run_keeping};

/// One instance running one request at a time, every step 1,000 µs; three requests of 16
/// prompt and 3 output tokens arriving at 4, 8 and 12 ms; a TTFT target of 1.5 ms; and
/// `faults` as given.
fn one_instance(faults: &str) -> String {
    format!(
        r#"(seed: 1, cluster: (groups: [(count: 1, kv_blocks: 100, max_num_seqs: 1,
             latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
           policies: (slo_classes: [(name: "standard", ttft_ms: 1.5)]),
           {faults}
           workload: (num_requests: 3, clients: [(rate_per_s: 250.0, arrival: Constant,
             input_tokens: Constant(16), output_tokens: Constant(3))]))"#
    )
}

#[test]
fn a_straggler_slows_exactly_the_steps_that_start_in_its_window() {
    // Window [2.5, 4.5) ms, ×2. Request 0 arrives at 4 ms: its prefill step starts in the
    // window and takes 2 ms (first token at 6 ms), its decodes start at 6 and 7 ms, outside
    // it (completion 8 ms). Requests 1 and 2 (8 and 12 ms) are not slowed.
    let sc = parse(&one_instance(
        "faults: (stragglers: [(instance: 0, from_s: 0.0025, until_s: 0.0045, slowdown: 2.0)]),",
    ));
    let (s, rows) = run(&sc);
    let got: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|r| (r.u64("arrival_us"), r.us("ttft_ms"), r.u64("completion_us")))
        .collect();
    assert_eq!(
        got,
        [
            (4000, 2000, 8000),
            (8000, 1000, 11000),
            (12000, 1000, 15000)
        ]
    );
    let f = s.faults.as_ref().expect("the summary has the faults");
    let st = &f.stragglers[0];
    assert_eq!(
        (st.instance, st.from_s, st.until_s, st.slowdown),
        (0, 0.0025, 0.0045, 2.0)
    );
    assert_eq!(st.steps_slowed, 1);
    // Nothing arrived before the window; request 0 during it (TTFT 2 ms misses 1.5 ms); the
    // other two after it.
    assert_eq!((st.before.arrived, st.before.attainment), (0, None));
    assert_eq!(
        (
            st.during.arrived,
            st.during.completed,
            st.during.good,
            st.during.attainment
        ),
        (1, 1, 0, Some(0.0))
    );
    assert_eq!(
        (st.after.arrived, st.after.good, st.after.attainment),
        (2, 2, Some(1.0))
    );
}

#[test]
fn overlapping_windows_multiply_and_a_slowdown_of_one_changes_nothing() {
    // ×2 and ×1.5 both hold 4 ms: the prefill takes 3 ms (first token at 7 ms).
    let both = parse(&one_instance(
        "faults: (stragglers: [(instance: 0, from_s: 0.0025, until_s: 0.0045, slowdown: 2.0),
                               (instance: 0, from_s: 0.004, until_s: 0.005, slowdown: 1.5)]),",
    ));
    let (_, rows) = run(&both);
    assert_eq!(rows[0].us("ttft_ms"), 3000);
    let (_, _, a) = run_keeping(&parse(&one_instance("")));
    let (_, _, b) = run_keeping(&parse(&one_instance(
        "faults: (stragglers: [(instance: 0, from_s: 0.0, until_s: 1.0, slowdown: 1.0)]),",
    )));
    let read = |d: &tempfile::TempDir| std::fs::read(d.path().join("requests.csv")).unwrap();
    assert_eq!(read(&a), read(&b));
}

#[test]
fn least_loaded_routing_shields_the_requests_from_a_straggler_and_round_robin_does_not() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/faults.ron");
    let src = std::fs::read_to_string(path).unwrap();
    let during = |routing: &str| {
        let sc = parse(&src.replace("\"least_loaded\"", &format!("\"{routing}\"")));
        let (s, _) = run(&sc);
        let st = s.faults.unwrap().stragglers.remove(0);
        assert!(st.steps_slowed > 0);
        let all = st.before.arrived + st.during.arrived + st.after.arrived;
        assert_eq!(all, s.requests.injected, "every request in one span");
        (
            st.before.attainment.unwrap(),
            st.during.attainment.unwrap(),
            st.after.attainment.unwrap(),
        )
    };
    let (_, shielded, _) = during("least_loaded");
    let (before, exposed, after) = during("round_robin");
    assert!(shielded > 0.99, "least_loaded: {shielded}");
    assert!(
        exposed < 0.9 && before > 0.99 && after > 0.99,
        "round robin: {before} {exposed} {after}"
    );
}

#[test]
fn bad_fault_blocks_are_located_errors() {
    for (faults, path, says) in [
        (
            "(stragglers: [(instance: 1, from_s: 0.0, until_s: 1.0, slowdown: 2.0)])",
            "faults.stragglers[0].instance",
            "does not exist",
        ),
        (
            "(stragglers: [(instance: 0, from_s: 2.0, until_s: 1.0, slowdown: 2.0)])",
            "faults.stragglers[0].until_s",
            "after from_s",
        ),
        (
            "(stragglers: [(instance: 0, from_s: -1.0, until_s: 1.0, slowdown: 2.0)])",
            "faults.stragglers[0].from_s",
            "in [0, 10⁹] s",
        ),
        (
            "(stragglers: [(instance: 0, from_s: 0.0, until_s: 1.0, slowdown: 0.5)])",
            "faults.stragglers[0].slowdown",
            "[1, 10⁶]",
        ),
        (
            "(stragglers: [(instance: 0, from_s: 0.0, until_s: inf, slowdown: 2.0)])",
            "faults.stragglers[0].until_s",
            "finite",
        ),
        (
            "(stragglers: [(instance: 0, from_s: 0.0, until_s: 1.0)])",
            "faults.stragglers[0]",
            "slowdown",
        ),
        ("(crash: [])", "faults.crash", "did you mean `crashes`"),
        (
            "(crashes: [(instance: 3, at_s: 1.0)])",
            "faults.crashes[0].instance",
            "does not exist",
        ),
        (
            "(crashes: [(instance: 0, at_s: -1.0)])",
            "faults.crashes[0].at_s",
            "finite time in [0, 10⁹] s",
        ),
        ("(crashes: [(instance: 0)])", "faults.crashes[0]", "at_s"),
        ("(mtbf_s: 0.5)", "faults.mtbf_s", "[1, 10⁹]"),
        ("(mtbf_s: 1e300)", "faults.mtbf_s", "[1, 10⁹]"),
        ("(repair_s: inf)", "faults.repair_s", "finite"),
        ("(reload_s: -2.0)", "faults.reload_s", "[0, 10⁹]"),
        (
            "(on_crash: Retry(max_retries: 0))",
            "faults.on_crash.max_retries",
            "1 to 100",
        ),
        (
            "(on_crash: Retry(backoff_s: 10.0))",
            "faults.on_crash.max_backoff_s",
            "≥ backoff_s",
        ),
        (
            "(on_crash: Retry(tries: 2))",
            "faults.on_crash",
            "max_retries",
        ),
        ("(on_crash: Reboot)", "faults.on_crash", "Fail"),
    ] {
        let e = crate::common::invalid(&one_instance(&format!("\n faults: {faults},")));
        assert!(e.contains(path) && e.contains(says), "{faults}: {e}");
        assert!(e.contains("bad.ron:5:"), "located on its line: {e}");
    }
}

#[test]
fn the_docs_straggler_table_matches_the_bundled_scenario() {
    let doc = crate::common::doc("faults");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/faults.ron");
    let src = std::fs::read_to_string(path).unwrap();
    for routing in ["least_loaded", "round_robin"] {
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {routing} |")))
            .unwrap_or_else(|| panic!("docs/faults.md has no row {routing}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let sc = parse(&src.replace("\"least_loaded\"", &format!("\"{routing}\"")));
        let s = crate::common::run_app_checked(servesim::default_app(), &sc);
        let st = &s.faults.as_ref().unwrap().stragglers[0];
        let a = |x: &servesim::metrics::SpanSlo| format!("{:.4}", x.attainment.unwrap());
        let got = [
            st.steps_slowed.to_string(),
            a(&st.before),
            a(&st.during),
            a(&st.after),
        ];
        assert_eq!(
            &cells[2..6],
            &got.each_ref().map(String::as_str),
            "{routing}"
        );
    }
}

// Crashes, by hand on the same instance: request 0 runs 4–7 ms, request 1 8–11 ms, request 2
// 12–15 ms without faults.

/// `one_instance` with a crash of instance 0 at `at_ms`, down 1 ms (no reload), `policy`.
fn crashing(at_ms: f64, policy: &str, extra: &str) -> String {
    one_instance(&format!(
        "faults: (crashes: [(instance: 0, at_s: {})], repair_s: 0.001, reload_s: 0.0,
                  on_crash: {policy}), {extra}",
        at_ms / 1000.0
    ))
}

fn outcomes(rows: &[crate::common::Row]) -> Vec<(&str, Option<u64>, u64)> {
    rows.iter()
        .map(|r| {
            let done = r.str("completion_us");
            (
                r.str("state"),
                (!done.is_empty()).then(|| done.parse().unwrap()),
                r.u64("retries"),
            )
        })
        .collect()
}

#[test]
fn a_crash_with_the_fail_policy_fails_exactly_the_request_on_the_instance() {
    // At 9.5 ms request 1 is on the instance (its first decode step 9–10 ms in flight): it
    // fails. The instance is back at 10.5 ms and serves request 2 as without the crash.
    let (s, rows) = run(&parse(&crashing(9.5, "Fail", "")));
    assert_eq!(
        outcomes(&rows),
        [
            ("completed", Some(7000), 0),
            ("failed", None, 0),
            ("completed", Some(15000), 0)
        ]
    );
    assert_eq!(rows[1].str("instance"), "0");
    assert_eq!(s.requests.failed, Some(1));
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!(
        (c.crashes, c.skipped, c.lost, c.failed, c.retried),
        (1, 0, 1, 1, 0)
    );
    assert_eq!((c.down_s, c.availability), (0.001, Some(1.0 - 1.0 / 15.0)));
    let e = &c.events[0];
    assert_eq!(
        (e.instance, e.at_s, e.back_s, e.cause.as_str(), e.lost),
        (0, 0.0095, Some(0.0105), "listed", 1)
    );
    // Requests 0 and 1 arrived before the crash (request 1 failed), request 2 after the
    // instance was back; none while it was down.
    let l = &c.listed[0];
    assert!(l.happened);
    assert_eq!((l.before.arrived, l.before.good), (2, 1));
    assert_eq!((l.during.arrived, l.after.arrived, l.after.good), (0, 1, 1));
    assert_eq!((c.healthy.arrived, c.degraded.arrived), (3, 0));
}

#[test]
fn a_retried_request_completes_after_its_backoff_and_pays_a_second_prefill() {
    // Request 1 is taken down at 9.5 ms and sent again 2 ms later (11.5 ms; the instance is
    // back at 10.5): prefill 11.5–12.5 ms (TTFT 4.5 ms from its arrival at 8 ms), decodes to
    // 14.5 ms. Request 2 (12 ms) waits for the one sequence slot: 14.5–17.5 ms.
    let (s, rows) = run(&parse(&crashing(
        9.5,
        "Retry(max_retries: 1, backoff_s: 0.002)",
        "",
    )));
    assert_eq!(
        outcomes(&rows),
        [
            ("completed", Some(7000), 0),
            ("completed", Some(14500), 1),
            ("completed", Some(17500), 0)
        ]
    );
    assert_eq!((rows[1].us("ttft_ms"), rows[1].us("e2e_ms")), (4500, 6500));
    assert_eq!(s.requests.failed, Some(0));
    // Four prefills of 16 tokens: request 1's twice.
    assert_eq!(s.instances[0].prefill_tokens, 64);
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!(
        (c.lost, c.failed, c.retried, c.completed_after_retry),
        (1, 0, 1, 1)
    );
}

#[test]
fn a_retry_passes_the_gateways_bands_as_a_new_request_does() {
    // Request 1 is taken down at 9.5 ms and sent again 3 ms later (12.5 ms). Request 2
    // arrived at 12 ms to an idle instance and runs 12–15 ms, so at 12.5 ms the instance
    // holds a KV block of its 100 (1 %): saturated at kv_util 0.005. The retry waits in its band, and after the
    // band's 1 ms it is shed at 13.5 ms; routed directly it would have run 15–18 ms.
    let (s, rows) = run(&parse(&crashing(
        9.5,
        "Retry(max_retries: 1, backoff_s: 0.003)",
        "flow_control: (saturation: (kv_util: 0.005), bands: [(priority: 0, max_wait_s: 0.001)]),",
    )));
    assert_eq!(
        outcomes(&rows),
        [
            ("completed", Some(7000), 0),
            ("rejected", None, 1),
            ("completed", Some(15000), 0)
        ]
    );
    assert_eq!(s.rejections.get("gateway_wait_expired"), Some(&1));
    let band = &s.flow_control.unwrap().bands[0];
    // Three requests and one retry reached the band; the retry was shed there.
    assert_eq!(
        (band.arrived, band.dispatched, band.shed_expired),
        (4, 3, 1)
    );
}

#[test]
fn a_retry_spends_its_budget_then_fails_and_backoff_doubles() {
    use servesim::scenario::CrashPolicy;
    let p = CrashPolicy::Retry {
        max_retries: 3,
        backoff_s: 0.5,
        max_backoff_s: 1.5,
    };
    let waits: Vec<Option<f64>> = (1..=4).map(|n| p.backoff(n)).collect();
    assert_eq!(waits, [Some(0.5), Some(1.0), Some(1.5), None]);
    assert_eq!(CrashPolicy::Fail.backoff(1), None);
    // Crashes at 9.5 and 11.7 ms, retry once after 2 ms: request 1 is taken down twice
    // (the second time in its prefill, 11.5–12.5 ms) and then fails.
    let src = one_instance(
        "faults: (crashes: [(instance: 0, at_s: 0.0095), (instance: 0, at_s: 0.0117)],
                  repair_s: 0.0001, reload_s: 0.0,
                  on_crash: Retry(max_retries: 1, backoff_s: 0.002)),",
    );
    let (s, rows) = run(&parse(&src));
    assert_eq!(outcomes(&rows)[1], ("failed", None, 1));
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!((c.crashes, c.lost, c.retried, c.failed), (2, 2, 1, 1));
}

#[test]
fn a_request_reaching_a_down_instance_is_lost_there() {
    // With 1 ms of routing latency everything moves 1 ms later (request 1 ends at 12 ms).
    // Request 2 arrives at 12 ms and reaches the instance at 13 ms, while it is down
    // (12.5–13.5 ms): it fails there; the crash itself found the instance idle.
    let (s, rows) = run(&parse(
        &crashing(12.5, "Fail", "")
            .replace("slo_classes:", "routing_latency_us: 1000, slo_classes:"),
    ));
    assert_eq!(
        outcomes(&rows),
        [
            ("completed", Some(8000), 0),
            ("completed", Some(12000), 0),
            ("failed", None, 0)
        ]
    );
    assert_eq!(rows[2].str("instance"), "0");
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!((c.lost, c.failed, c.events[0].lost), (1, 1, 1));
}

#[test]
fn a_crash_on_an_idle_or_down_instance_and_no_crash_at_all() {
    // Listed twice at the same instant: one crash. At 20 ms the run has ended (its last
    // request at 15 ms): the crash never comes and the run's length is its last request's.
    let (s, rows) = run(&parse(&one_instance(
        "faults: (crashes: [(instance: 0, at_s: 0.0025), (instance: 0, at_s: 0.0025),
                            (instance: 0, at_s: 0.00255), (instance: 0, at_s: 0.02)],
                  repair_s: 0.0001, reload_s: 0.0),",
    )));
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!((c.crashes, c.skipped, c.lost), (1, 1, 0));
    let happened: Vec<(f64, bool)> = c.listed.iter().map(|l| (l.at_s, l.happened)).collect();
    assert_eq!(happened, [(0.0025, true), (0.00255, false), (0.02, false)]);
    assert_eq!(s.sim_duration_s, 0.015);
    assert!(rows.iter().all(|r| r.str("state") == "completed"));
}

/// A bundled scenario's text with `faults` set to `faults` (added before `workload`).
fn bundled_with(name: &str, faults: &str) -> String {
    let path = format!("{}/scenarios/{name}.ron", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(path).unwrap();
    src.replacen(
        "    workload:",
        &format!("    faults: {faults},\n    workload:"),
        1,
    )
}

#[test]
fn crashes_under_pd_disaggregation_take_down_transfers_on_both_ends_and_retries_finish() {
    // Two prefill (0, 1) and three decode instances (2–4), prefill saturated (60 req/s of
    // ~6,000-token prompts); prefill 0 crashes with hand-offs
    // in transfer from it, decode 3 with requests running and arriving; every request taken
    // down is retried on the others and completes (invariants checked every tick: KV blocks
    // on both ends of a cancelled transfer are released, nothing is left on a down instance).
    let src = bundled_with(
        "pd-disaggregation",
        "(crashes: [(instance: 0, at_s: 20.0), (instance: 3, at_s: 30.0)], repair_s: 1.0,
          on_crash: Retry(max_retries: 5))",
    )
    .replacen("count: 1,", "count: 2,", 1)
    .replace("num_requests: 6000", "num_requests: 1500")
    .replace("rate_per_s: 28.0", "rate_per_s: 60.0");
    let (s, rows) = run(&parse(&src));
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!(c.crashes, 2);
    assert!(c.events.iter().all(|e| e.lost > 0), "{:?}", c.events);
    assert_eq!(
        (s.requests.completed, s.requests.failed),
        (s.requests.injected, Some(0))
    );
    let retried = rows.iter().filter(|r| r.u64("retries") > 0).count() as u64;
    assert_eq!(retried, c.completed_after_retry);
    assert!(retried > 0 && retried <= c.retried);
}

#[test]
fn an_autoscaled_instance_that_crashes_is_off_and_its_policy_starts_another() {
    // The pool's only instance crashes at 300 s: it is off at once (scale_events.csv: off,
    // crashed); requests park, a cold start brings an instance up, every request completes.
    let src = bundled_with(
        "autoscaling",
        "(crashes: [(instance: 0, at_s: 300.0)], on_crash: Retry())",
    )
    .replace("(rate_per_s: 30.0, duration_s: 900.0),", "")
    .replace("(rate_per_s: 12.0, duration_s: 600.0),", "")
    .replace("(rate_per_s: 2.0, duration_s: 600.0),", "");
    let (s, _, dir) = run_keeping(&parse(&src));
    assert_eq!(s.requests.completed, s.requests.injected);
    let text = s.to_text();
    let c = s.faults.unwrap().crashes.unwrap();
    assert_eq!((c.crashes, c.events[0].back_s), (1, None));
    assert_eq!(
        (c.down_s, c.availability),
        (0.0, None),
        "no fixed-size group"
    );
    // The text says so instead of "0.000 instance-s down (availability n/a)".
    assert!(
        text.contains("crashes: 1 (0 skipped), all of autoscaled replicas, each off at its crash (not down: its group's policy starts another);"),
        "{text}"
    );
    let events = crate::common::read_rows(&dir.path().join("scale_events.csv"));
    let crashed = events
        .iter()
        .position(|r| r.str("event") == "off" && r.str("reason") == "crashed")
        .expect("the crash is a scale event");
    assert_eq!(events[crashed].str("time_s"), "300.000000");
    assert!(
        events[crashed..]
            .iter()
            .any(|r| r.str("event") == "provisioning"),
        "another instance starts"
    );
}

#[test]
fn mtbf_crashes_are_seeded_and_every_request_is_accounted_for() {
    // Random crashes, once per 30 s of an instance's time up on average, on the bundled
    // crash scenario cut to 60 s: the same seed gives the same crashes and rows; another seed
    // other crashes; requests are conserved (failed included) with invariants on.
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/crashes.ron"
    ))
    .unwrap()
    .replace(
        "crashes: [(instance: 1, at_s: 60.0)],",
        "mtbf_s: 30.0, repair_s: 5.0,",
    )
    .replace("duration_s: 180.0", "duration_s: 60.0");
    let events = |seed: u64| {
        let mut sc = parse(&src);
        sc.seed = seed;
        let (s, _, dir) = run_keeping(&sc);
        let c = s.faults.unwrap().crashes.unwrap();
        assert!(c.crashes >= 2, "{c:?}");
        let at: Vec<(u32, f64)> = c.events.iter().map(|e| (e.instance, e.at_s)).collect();
        (at, std::fs::read(dir.path().join("requests.csv")).unwrap())
    };
    let (a, rows_a) = events(17);
    let (b, rows_b) = events(17);
    assert_eq!((a.clone(), rows_a), (b, rows_b));
    assert_ne!(a, events(18).0);
    assert!(a.windows(2).all(|w| w[0].1 <= w[1].1), "in time order");
}

#[test]
fn the_time_series_shows_a_crashed_instance_down() {
    let (_, _, dir) = run_keeping(&parse(&crashing(
        9.5,
        "Fail",
        "outputs: (sample_interval_s: 0.001),",
    )));
    let rows = crate::common::read_rows(&dir.path().join("timeseries.csv"));
    let at = |t: &str| {
        rows.iter()
            .find(|r| r.str("time_s") == t && r.str("instance") == "0")
            .map(|r| (r.str("phase").to_string(), r.u64("instances_up")))
    };
    assert_eq!(at("0.009000"), Some(("serving".into(), 1)));
    assert_eq!(at("0.010000"), Some(("down".into(), 0)));
    assert_eq!(at("0.011000"), Some(("serving".into(), 1)));
}

#[test]
fn the_docs_crash_table_matches_the_bundled_scenario() {
    let doc = crate::common::doc("faults");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/crashes.ron");
    let src = std::fs::read_to_string(path).unwrap();
    for (policy, label) in [("Retry()", "Retry"), ("Fail", "Fail")] {
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("docs/faults.md has no row {label}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (s, _) = run(&parse(
            &src.replace("on_crash: Retry()", &format!("on_crash: {policy}")),
        ));
        let c = s.faults.unwrap().crashes.unwrap();
        let l = &c.listed[0];
        let att = |x: Option<f64>| format!("{:.4}", x.unwrap());
        let want = [
            c.lost.to_string(),
            c.failed.to_string(),
            c.retried.to_string(),
            att(l.before.attainment),
            att(l.during.attainment),
            att(l.after.attainment),
            format!("{:.1}", s.ttft_ms.p50.unwrap()),
        ];
        assert_eq!(&cells[2..9], &want, "{label}");
    }
}

/// One request of 100 prompt and 3 output tokens arriving at 1 s on a two-stage pipeline
/// of Llama-3.1-8B (8,192 bytes of activations per token between stages, 50 GB/s, 5 µs),
/// every step 1,000 µs; `faults` as given.
fn pipeline(faults: &str) -> String {
    format!(
        r#"(seed: 1, cluster: (groups: [(count: 1, model: "llama-3.1-8b-instruct", pp: 2, kv_blocks: 100,
             latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
           {faults}
           workload: (num_requests: 1, clients: [(rate_per_s: 1.0, arrival: Constant,
             input_tokens: Constant(100), output_tokens: Constant(3))]))"#
    )
}

#[test]
fn a_degraded_or_severed_pipeline_link_slows_the_hand_offs_that_start_in_its_window() {
    // The prefill's hand-off between the stages: 100 × 8,192 B / 50,000 B/µs = 16.4 µs on
    // the wire (16) + 5 µs: first token at 1,000 + 21 µs; two decodes of 1,000 + 5 µs each.
    let (_, rows) = run(&parse(&pipeline("")));
    assert_eq!((rows[0].us("ttft_ms"), rows[0].us("e2e_ms")), (1021, 3031));
    // Half the bandwidth for the whole request: 32.8 µs on the wire (32) + 5: 1,037; the
    // decodes' 0.16 µs stay under a microsecond.
    let (s, rows) = run(&parse(&pipeline(
        "faults: (pp_links: [(instance: 0, from_s: 1.0, until_s: 2.0, bandwidth: 0.5)]),",
    )));
    assert_eq!((rows[0].us("ttft_ms"), rows[0].us("e2e_ms")), (1037, 3047));
    let l = &s.faults.as_ref().unwrap().pp_links[0];
    assert_eq!((l.instance, l.bandwidth, l.transfers), (0, 0.5, 3));
    // Severed for the first 500 µs: the prefill's hand-off waits for the window's end
    // (once, not once per stage): 1,521; the decodes after it are as before.
    let (s, rows) = run(&parse(&pipeline(
        "faults: (pp_links: [(instance: 0, from_s: 1.0, until_s: 1.0005, bandwidth: 0.0)]),",
    )));
    assert_eq!((rows[0].us("ttft_ms"), rows[0].us("e2e_ms")), (1521, 3531));
    assert_eq!(s.faults.as_ref().unwrap().pp_links[0].transfers, 1);
    // Severed in two windows end to end, [1, 1.0005) and [1.0005, 1.0015) s: it waits for
    // the second's end too (1,500 µs: 2,521). The hand-off went at the first window's end,
    // through a link the second still held severed (1,521).
    let (s, rows) = run(&parse(&pipeline(
        "faults: (pp_links: [(instance: 0, from_s: 1.0, until_s: 1.0005, bandwidth: 0.0), (instance: 0, from_s: 1.0005, until_s: 1.0015, bandwidth: 0.0)]),",
    )));
    assert_eq!((rows[0].us("ttft_ms"), rows[0].us("e2e_ms")), (2521, 4531));
    let l = &s.faults.as_ref().unwrap().pp_links;
    assert_eq!((l[0].transfers, l[1].transfers), (1, 1));
    assert!(
        s.to_text()
            .contains("pipeline link: instance 0 at 0 of its bandwidth from 1.0005 s to 1.0015 s (1 micro-batch)\n"),
        "{}",
        s.to_text()
    );
    // Severed for 500 µs inside a window at half the bandwidth: after the wait it goes at
    // half (500 + 32 + 5: 1,537); it went at full bandwidth, the half window not holding
    // the step's start (1,521).
    let (_, rows) = run(&parse(&pipeline(
        "faults: (pp_links: [(instance: 0, from_s: 1.0, until_s: 1.0005, bandwidth: 0.0), (instance: 0, from_s: 1.0002, until_s: 2.0, bandwidth: 0.5)]),",
    )));
    assert_eq!((rows[0].us("ttft_ms"), rows[0].us("e2e_ms")), (1537, 3547));
}

/// Llama-2-7B (8 MiB of KV per 16-token block) with 64 GPU blocks and a CPU tier of 256:
/// 40 prompts of 512 tokens, one every 0.5 s, from a pool of 4, so that the repeats reload
/// 31 blocks each over the 50 GB/s host link; `faults` as given.
fn host_tier(faults: &str) -> String {
    format!(
        r#"(seed: 3, cluster: (groups: [(model: "llama-2-7b-hf", gpu: "H100", kv_blocks: 64,
             cpu_kv_blocks: 256, max_num_seqs: 1, latency: Roofline())]),
           {faults}
           workload: (num_requests: 40, clients: [(rate_per_s: 2.0, arrival: Constant,
             input_tokens: Constant(512), output_tokens: Constant(4), prompt_pool: 4)]))"#
    )
}

#[test]
fn a_degraded_host_link_slows_every_reload_by_its_share() {
    let (_, base, a) = run_keeping(&parse(&host_tier("")));
    // A window at full bandwidth changes nothing, byte for byte.
    let (_, _, same) = run_keeping(&parse(&host_tier(
        "faults: (host_links: [(instance: 0, from_s: 0.0, until_s: 100.0, bandwidth: 1.0)]),",
    )));
    let read = |d: &tempfile::TempDir| std::fs::read(d.path().join("requests.csv")).unwrap();
    assert_eq!(read(&a), read(&same));
    // At half: a reload of 31 blocks takes ⌊10 + 31 × 335.544⌋ = 10,411 µs instead of
    // ⌊10 + 31 × 167.772⌋ = 5,210: every request that reloads and whose step offloads
    // nothing is 5,201 µs later to its first token; those whose step also offloads (the
    // copy out outlasts the step at half the bandwidth) more; first uses not at all.
    let (s, half) = run(&parse(&host_tier(
        "faults: (host_links: [(instance: 0, from_s: 0.0, until_s: 100.0, bandwidth: 0.5)]),",
    )));
    let mut exact = 0;
    for (b, h) in base.iter().zip(&half) {
        let d = h.us("ttft_ms") as i64 - b.us("ttft_ms") as i64;
        if b.u64("cached_tokens") == 0 {
            assert_eq!(d, 0, "request {}", b.u64("request_id"));
        } else {
            assert!(d >= 5201, "request {}: {d}", b.u64("request_id"));
            exact += usize::from(d == 5201);
        }
    }
    assert!(exact >= 30, "{exact}");
    let l = &s.faults.as_ref().unwrap().host_links[0];
    assert!(l.transfers >= 36, "{}", l.transfers);
}

#[test]
fn a_severed_host_link_holds_its_transfers_until_its_window_ends() {
    // Severed from 1.9 to 3 s. Request 3 (at 2 s) is a first use whose admission copies an
    // evicted prompt out: the copy waits for 3 s and the step lasts until it is done, so its
    // first token comes a little over a second after it arrived. Request 4 (2.5 s) reloads
    // behind it; from request 6 (3.5 s) on nothing differs.
    let (_, base) = run(&parse(&host_tier("")));
    let (s, cut) = run(&parse(&host_tier(
        "faults: (host_links: [(instance: 0, from_s: 1.9, until_s: 3.0, bandwidth: 0.0)]),",
    )));
    let ttft = |rows: &[crate::common::Row], i: usize| rows[i].us("ttft_ms");
    assert_eq!(cut[3].u64("arrival_us"), 2_000_000);
    assert!(ttft(&cut, 3) > 1_000_000 && ttft(&cut, 3) < 1_000_000 + 2 * ttft(&base, 3));
    assert!(ttft(&cut, 4) > 500_000);
    for i in 6..40 {
        assert_eq!(ttft(&cut, i), ttft(&base, i), "request {i}");
    }
    assert_eq!(s.faults.as_ref().unwrap().host_links[0].transfers, 1);
}

#[test]
fn link_faults_name_instances_that_have_the_link() {
    let e = invalid(&host_tier(
        "faults: (host_links: [(instance: 0, from_s: 2.0, until_s: 1.0, bandwidth: 1.5)], pp_links: [(instance: 0, from_s: 0.0, until_s: 1.0, bandwidth: 0.5)]),",
    ));
    assert!(
        e.contains("faults.host_links[0].until_s") && e.contains("must be after from_s"),
        "{e}"
    );
    assert!(e.contains("faults.host_links[0].bandwidth"), "{e}");
    assert!(
        e.contains("faults.pp_links[0].instance") && e.contains("one pipeline stage"),
        "{e}"
    );
    let e = invalid(&pipeline(
        "faults: (host_links: [(instance: 0, from_s: 0.0, until_s: 1.0, bandwidth: 0.5)]),",
    ));
    assert!(
        e.contains("faults.host_links[0].instance") && e.contains("no CPU KV tier"),
        "{e}"
    );
    let e = invalid(&pipeline(
        "faults: (pp_links: [(instance: 3, from_s: 0.0, until_s: 1.0, bandwidth: 0.5)]),",
    ));
    assert!(e.contains("faults.pp_links[0].instance"), "{e}");
}
