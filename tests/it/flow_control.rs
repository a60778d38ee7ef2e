//! The gateway's flow control (issue 34 item 3): bands by priority, the saturation
//! detector, dispatch and shedding, worked out by hand on one instance whose every step
//! takes 1 ms.

use crate::common::{parse, run, run_keeping};

/// One instance that runs one request at a time (`max_num_seqs: 1`), every step 1,000 µs,
/// no routing or queueing delay; each request is a prefill step and one decode step.
/// Clients `low` (priority 0) and `high` (priority 1) each send two requests at t = 0: a
/// source's requests at one time arrive one tick after another, so requests 0 (low) and 1
/// (high) arrive in the first tick at t = 0, requests 2 (low) and 3 (high) in the next.
/// The detector gives an instance room only while nothing waits for it (`queue_depth: 0`).
fn two_bands(low_band: &str, low_client: &str) -> String {
    format!(
        r#"(seed: 3,
          cluster: (groups: [(count: 1, kv_blocks: 100, max_num_seqs: 1,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
          flow_control: (saturation: (queue_depth: 0, kv_util: 1.0),
            bands: [(priority: 1), (priority: 0, {low_band})]),
          workload: (clients: [
            (name: "low", priority: 0, arrival: AllAtZero(count: 2), input_tokens: Constant(16),
             output_tokens: Constant(2) {low_client}),
            (name: "high", priority: 1, arrival: AllAtZero(count: 2), input_tokens: Constant(16),
             output_tokens: Constant(2)),
          ]))"#
    )
}

/// The rows of client `name` (its tenant, unnamed), by request id.
fn of<'a>(rows: &'a [crate::common::Row], name: &str) -> Vec<&'a crate::common::Row> {
    rows.iter().filter(|r| r.str("tenant") == name).collect()
}

#[test]
fn the_higher_band_goes_first_and_a_full_band_sheds() {
    // First tick at t = 0: requests 0 (low) and 1 (high) join their bands; the instance has
    // room, so the head of the higher band, 1, is routed and runs at once (prefill 0–1 ms,
    // decode 1–2 ms). Nothing waits at the instance, so the gateway wakes at t = 0 again,
    // with requests 2 (low) and 3 (high) arriving: the low band holds 0 already and its
    // limit is one, so 2 is shed (gateway_band_full); 3 is routed and waits at the
    // instance (one request at a time), which has no room any more.
    // t = 2 ms: 1 finishes, 3 starts (2–4 ms); the instance's queue is empty again and 0 is
    // routed (it waited 2 ms in its band), to run at 4–6 ms.
    let (s, rows) = run(&parse(&two_bands("max_requests: 1", "")));
    let high = of(&rows, "high");
    let low = of(&rows, "low");
    let times = |r: &crate::common::Row| {
        (
            r.str("state").to_string(),
            r.us("scheduling_delay_ms"),
            r.us("ttft_ms"),
            r.u64("completion_us"),
        )
    };
    assert_eq!(times(high[0]), ("completed".into(), 0, 1000, 2000));
    assert_eq!(times(high[1]), ("completed".into(), 2000, 3000, 4000));
    assert_eq!(times(low[0]), ("completed".into(), 4000, 5000, 6000));
    assert_eq!(low[1].str("state"), "rejected");
    assert_eq!(s.rejections.get("gateway_band_full"), Some(&1));
    let fc = s
        .flow_control
        .as_ref()
        .expect("the summary has the gateway's bands");
    assert_eq!((fc.queue_depth, fc.kv_util), (0, 1.0));
    let [h, l] = &fc.bands[..] else {
        panic!("two bands, highest first: {:?}", fc.bands)
    };
    assert_eq!(
        (h.priority, h.arrived, h.dispatched, h.shed_full),
        (1, 2, 2, 0)
    );
    assert_eq!(
        h.wait_ms.max,
        Some(0.0),
        "both high requests routed at t = 0"
    );
    assert_eq!(
        (l.priority, l.arrived, l.dispatched, l.shed_full),
        (0, 2, 1, 1)
    );
    assert_eq!((l.wait_ms.count, l.wait_ms.mean), (1, Some(2.0)));
    assert_eq!(
        (h.peak_waiting, l.peak_waiting),
        (1, 1),
        "each high request routed as it came"
    );
    assert_eq!(
        fc.waiting_s, 0.002,
        "the low request waited alone from 0 to 2 ms"
    );
    for b in &fc.bands {
        assert_eq!(
            b.arrived,
            b.shed_full + b.dispatched + b.shed_expired + b.timed_out + b.left
        );
    }
}

#[test]
fn a_request_that_waits_its_bands_longest_wait_is_shed_then() {
    // The low request would be routed at 2 ms; with a longest wait of 1.5 ms it is shed at
    // 1.5 ms, and with exactly 2 ms at 2 ms (a request that has waited its longest wait is
    // shed before the gateway routes at that time).
    for wait in ["0.0015", "0.002"] {
        let (s, rows) = run(&parse(&two_bands(
            &format!("max_requests: 1, max_wait_s: {wait}"),
            "",
        )));
        let low = of(&rows, "low");
        assert_eq!(low[0].str("state"), "rejected", "max_wait_s {wait}");
        assert_eq!(s.rejections.get("gateway_wait_expired"), Some(&1));
        assert_eq!(s.rejections.get("gateway_band_full"), Some(&1));
        let l = &s.flow_control.as_ref().unwrap().bands[1];
        assert_eq!((l.shed_expired, l.dispatched, l.left), (1, 0, 0));
        let waited = s.flow_control.as_ref().unwrap().waiting_s;
        assert_eq!(waited, wait.parse::<f64>().unwrap());
        // The high requests are as before; the run ends with the second of them.
        assert_eq!(of(&rows, "high")[1].u64("completion_us"), 4000);
        assert_eq!(s.sim_duration_s, 0.004);
    }
}

#[test]
fn a_longest_wait_beyond_the_clocks_range_is_no_limit() {
    let (s, rows) = run(&parse(&two_bands("max_requests: 1, max_wait_s: 1e15", "")));
    assert_eq!(of(&rows, "low")[0].u64("completion_us"), 6000);
    assert_eq!(s.sim_duration_s, 0.006);
}

#[test]
fn a_client_that_gives_up_on_a_waiting_request_takes_it_out_of_its_band() {
    // The low client gives up after 1.5 ms: its request leaves the band, timed out, and the
    // instance is not given it at 2 ms.
    let (s, rows) = run(&parse(&two_bands("max_requests: 1", ", timeout_s: 0.0015")));
    let low = of(&rows, "low");
    assert_eq!(low[0].str("state"), "timed_out");
    assert_eq!(low[0].str("instance"), "", "never routed");
    let l = &s.flow_control.as_ref().unwrap().bands[1];
    assert_eq!((l.timed_out, l.dispatched, l.left), (1, 0, 0));
    assert_eq!(s.requests.timed_out, 1);
    assert_eq!(s.instances[0].completed, 2);
}

#[test]
fn all_bands_together_hold_at_most_max_requests() {
    // The gateway holds one request in all: in each tick at t = 0 the low request joins its
    // band first and the high one, arriving when the gateway is full, is shed
    // (gateway_full) although its band has no limit of its own; the low ones run in turn.
    let (s, rows) = run(&parse(
        &two_bands("", "").replace("bands: [", "max_requests: 1, bands: ["),
    ));
    let state = |r: &&crate::common::Row| r.str("state").to_string();
    assert_eq!(
        of(&rows, "high").iter().map(state).collect::<Vec<_>>(),
        ["rejected"; 2]
    );
    let low = of(&rows, "low");
    assert_eq!(low.iter().map(state).collect::<Vec<_>>(), ["completed"; 2]);
    assert_eq!(
        (low[0].u64("completion_us"), low[1].u64("completion_us")),
        (2000, 4000)
    );
    assert_eq!(s.rejections.get("gateway_full"), Some(&2));
    let b = &s.flow_control.as_ref().unwrap().bands;
    assert_eq!((b[0].priority, b[0].arrived, b[0].shed_full), (1, 2, 2));
    assert_eq!((b[1].arrived, b[1].dispatched), (2, 2));
}

#[test]
fn an_unsaturated_gateway_changes_no_request() {
    // Light load with llm-d's thresholds: every request is routed the moment it is admitted,
    // so requests.csv is byte for byte the one without a gateway.
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/quickstart.ron"
    ))
    .unwrap();
    let with = base.replacen("workload:", "flow_control: (),\n    workload:", 1);
    assert_ne!(with, base);
    let (_, _, a) = run_keeping(&parse(&base));
    let (s, _, b) = run_keeping(&parse(&with));
    // The gateway's systems run in SimStep only: every tick runs the full schedule.
    let sim = |src: &str| servesim::Simulation::new(&parse(src), Default::default()).unwrap();
    assert!(sim(&base).uses_fast_ticks());
    assert!(!sim(&with).uses_fast_ticks());
    let read = |d: &tempfile::TempDir| std::fs::read(d.path().join("requests.csv")).unwrap();
    assert_eq!(read(&a), read(&b));
    let fc = s.flow_control.unwrap();
    assert_eq!(fc.waiting_s, 0.0);
    assert!(fc.bands.iter().all(|b| b.arrived == b.dispatched));
}

#[test]
fn under_a_burst_the_high_band_is_served_first_and_every_request_is_accounted_for() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/flow-control.ron");
    let sc = parse(&std::fs::read_to_string(path).unwrap());
    let (s, rows) = run(&sc);
    let fc = s.flow_control.as_ref().unwrap();
    let (high, low) = (&fc.bands[0], &fc.bands[1]);
    assert_eq!((high.priority, low.priority), (1, 0));
    assert!(low.shed_full > 0 && low.shed_expired > 0, "{low:?}");
    assert_eq!(high.shed_full + high.shed_expired, 0);
    assert!(
        high.wait_ms.p99.unwrap() < low.wait_ms.p50.unwrap() / 10.0,
        "interactive requests wait far less: {high:?} {low:?}"
    );
    // The run ends with its last request (the gateway's pending wake-ups do not extend it).
    let last = rows
        .iter()
        .filter_map(|r| r.str("completion_us").parse::<u64>().ok())
        .max();
    assert_eq!(Some((s.sim_duration_s * 1e6).round() as u64), last);
    let shed = rows.iter().filter(|r| r.str("state") == "rejected").count() as u64;
    assert_eq!(shed, low.shed_full + low.shed_expired);
    assert_eq!(
        s.rejections.values().sum::<u64>(),
        shed,
        "every rejection is the gateway's"
    );
}

#[test]
fn bad_flow_control_blocks_are_located_errors() {
    let head = r#"(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 1.0, 1.0]))]),
      workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(2))]),"#;
    for (block, path, says) in [
        (
            "flow_control: (saturation: (kv_util: 1.5))",
            "flow_control.saturation.kv_util",
            "(0, 1]",
        ),
        (
            "flow_control: (saturation: (kv_util: 0.0))",
            "flow_control.saturation.kv_util",
            "(0, 1]",
        ),
        (
            "flow_control: (bands: [(priority: 2), (priority: 2, max_requests: 4)])",
            "flow_control.bands[1].priority",
            "already has a band (flow_control.bands[0])",
        ),
        (
            "flow_control: (bands: [(priority: 0, max_requests: 0)])",
            "flow_control.bands[0].max_requests",
            "at least 1",
        ),
        (
            "flow_control: (bands: [(priority: 0, max_wait_s: -2.0)])",
            "flow_control.bands[0].max_wait_s",
            "> 0",
        ),
        (
            "flow_control: (default_band: (max_wait_s: inf))",
            "flow_control.default_band.max_wait_s",
            "finite",
        ),
        (
            "flow_control: (max_requests: 0)",
            "flow_control.max_requests",
            "at least 1",
        ),
        (
            "flow_control: (saturation: (queue_depht: 3))",
            "flow_control.saturation",
            "queue_depth",
        ),
        (
            "flow_control: (bands: [(max_requests: 3)])",
            "flow_control.bands[0]",
            "priority",
        ),
    ] {
        let e = crate::common::invalid(&format!("{head}\n {block})"));
        assert!(e.contains(path) && e.contains(says), "{block}: {e}");
        assert!(e.contains("bad.ron:3:"), "located on its line: {e}");
    }
}

#[test]
fn the_docs_burst_table_matches_the_bundled_scenario() {
    let doc = crate::common::doc("flow-control");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/flow-control.ron");
    let with = std::fs::read_to_string(path).unwrap();
    let start = with.find("    flow_control:").unwrap();
    let end = start + with[start..].find("    workload:").unwrap();
    let without = format!("{}{}", &with[..start], &with[end..]);
    for (label, src) in [("with flow control", &with), ("without", &without)] {
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("docs/flow-control.md has no row {label}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let s = crate::common::run_app_checked(servesim::default_app(), &parse(src));
        let class = |n: &str| s.slo_classes.iter().find(|c| c.name == n).unwrap();
        let (i, b) = (class("interactive"), class("batch"));
        let got = [
            format!("{:.3}", i.ttft_ms.p90.unwrap()),
            format!("{:.4}", i.slo_attainment.unwrap()),
            b.completed.to_string(),
            b.rejected.to_string(),
        ];
        assert_eq!(&cells[2..6], &got.each_ref().map(String::as_str), "{label}");
    }
}

#[test]
fn with_every_instance_down_requests_wait_in_their_band_for_one_to_come_back() {
    // One instance of 1 ms steps crashes idle at 0.5 ms and is down until 2.5 ms. Requests
    // arrive at 1 and 2 ms. llm-d's detector counts no pods as saturated, so both wait in
    // their band (they were rejected, no_routable_instance); at 2.5 ms both are routed and
    // share a prefill (2.5–3.5 ms) and a decode (3.5–4.5 ms).
    let src = |band: &str| {
        format!(
            r#"(cluster: (groups: [(count: 1, kv_blocks: 100,
                latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
              flow_control: (bands: [(priority: 0{band})]),
              faults: (crashes: [(instance: 0, at_s: 0.0005)], repair_s: 0.002, reload_s: 0.0),
              workload: (num_requests: 2, clients: [(rate_per_s: 1000.0, arrival: Constant,
                input_tokens: Constant(16), output_tokens: Constant(2))]))"#
        )
    };
    let times = |r: &crate::common::Row| {
        (
            r.str("state").to_string(),
            r.u64("arrival_us"),
            r.us("ttft_ms"),
            r.u64("completion_us"),
        )
    };
    let (s, rows) = run(&parse(&src("")));
    assert_eq!(times(&rows[0]), ("completed".into(), 1000, 2500, 4500));
    assert_eq!(times(&rows[1]), ("completed".into(), 2000, 1500, 4500));
    assert!(s.rejections.is_empty(), "{:?}", s.rejections);
    // A band whose longest wait is 1 ms sheds the first at 2 ms; the second is routed at
    // 2.5 ms, before its own wait ends, and runs alone.
    let (s, rows) = run(&parse(&src(", max_wait_s: 0.001")));
    let mut rows = rows;
    rows.sort_by_key(|r| r.u64("arrival_us"));
    assert_eq!(rows[0].str("state"), "rejected");
    assert_eq!(times(&rows[1]), ("completed".into(), 2000, 1500, 4500));
    assert_eq!(s.rejections.get("gateway_wait_expired"), Some(&1));
}
