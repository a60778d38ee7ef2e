//! Injected faults (issue 34 item 1, stragglers), worked out by hand on one instance whose
//! every step takes 1 ms.

use crate::common::{parse, run, run_keeping};

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
            "≥ 0",
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
        ("(crashes: [])", "faults", "stragglers"),
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
