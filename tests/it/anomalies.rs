//! The failure-mode detectors (`summary.json` `anomalies`, the text summary, rows of
//! `decisions.csv`), each triggered by a case worked out by hand.

use crate::common::servesim;
use std::path::Path;

/// One instance that runs one request at a time; every step takes β0 = 1 ms and a request
/// of one output token is done after its prefill step. Requests (arrival µs, prompt tokens,
/// class): r0 (0, 10, low), r1 (100, 500, high), r2 (200, 10, low); priorities by class
/// (`slo_based`: high 5, low 0). r0 runs 0–1 ms; at 1 ms
/// r1 and r2 wait and one of them is taken.
const QUEUE: &str = r#"(
    seed: 1,
    cluster: (groups: [(count: 1, kv_blocks: 1000, max_num_seqs: 1,
        engine: (preset: Bare, async_scheduling: Some(false)),
        latency: Blackbox(alpha: [0.0, ALPHA1, 0.0], beta: [1000.0, 0.0, 0.0]))]),
    policies: (scheduling: "ORDER", priority: "slo_based", slo_classes: [(name: "high", priority: Some(5)), (name: "low", priority: Some(0))]),
    workload: (traces: [
        (format: ServesimCsv, file: "low.csv", slo_class: Some("low")),
        (format: ServesimCsv, file: "high.csv", slo_class: Some("high")),
    ]),
)"#;

fn queue_case(dir: &Path, order: &str) -> (serde_json::Value, String, String) {
    queue_case_with(dir, order, "0.0")
}

/// With `alpha1` µs of queueing delay per prompt token before a request joins the queue.
fn queue_case_with(dir: &Path, order: &str, alpha1: &str) -> (serde_json::Value, String, String) {
    std::fs::write(
        dir.join("low.csv"),
        "arrival_us,input_tokens,output_tokens\n0,10,1\n200,10,1\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("high.csv"),
        "arrival_us,input_tokens,output_tokens\n100,500,1\n",
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{order}.ron")),
        QUEUE.replace("ORDER", order).replace("ALPHA1", alpha1),
    )
    .unwrap();
    let out = servesim(
        &[
            "run",
            &format!("{order}.ron"),
            "--out",
            order,
            "--trace",
            "decisions",
        ],
        dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(order).join("summary.json")).unwrap(),
    )
    .unwrap();
    let decisions = std::fs::read_to_string(dir.join(order).join("decisions.csv")).unwrap();
    (
        summary["anomalies"].clone(),
        decisions,
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn counts(a: &serde_json::Value) -> (u64, u64) {
    (
        a["hol_blocking"].as_u64().unwrap(),
        a["priority_inversions"].as_u64().unwrap(),
    )
}

#[test]
fn overtaking_in_a_wait_queue_is_counted_as_head_of_line_blocking_and_inversion_by_priority() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // FCFS takes r1 (the earliest waiting), then r2: nobody is overtaken.
    let (a, rows, text) = queue_case(d, "fcfs");
    assert_eq!(counts(&a), (0, 0));
    assert!(!text.contains("anomalies:"), "{text}");
    assert!(
        rows.lines().skip(1).all(|l| l.contains(",route,")),
        "{rows}"
    );
    // Highest priority first also takes r1 (high): nobody is overtaken.
    assert_eq!(counts(&queue_case(d, "priority_fcfs").0), (0, 0));
    // Shortest prompt first takes r2 (10 tokens) while r1 (500), earlier and of higher
    // priority, waits: one head-of-line blocking event and one priority inversion.
    let (a, rows, text) = queue_case(d, "sjf");
    assert_eq!(counts(&a), (1, 1));
    assert!(
        text.contains(
            "anomalies: 1 priority inversions, 1 head-of-line blocking, 0 scale oscillations"
        ),
        "{text}"
    );
    let mine: Vec<&str> = rows
        .lines()
        .skip(1)
        .filter(|l| !l.contains(",route,"))
        .collect();
    assert_eq!(
        mine,
        [
            "1000,2,0,,,,,,hol_blocking,request 2 (arrived 0.000200 s) taken while request 1 (arrived 0.000100 s) waits",
            "1000,2,0,,,,,,priority_inversion,\"request 2 (priority 0) taken while request 1 (priority 5, arrived earlier) waits\"",
        ]
    );
    // Lowest priority first: the same overtaking.
    assert_eq!(counts(&queue_case(d, "reverse_priority").0), (1, 1));
    // FCFS when requests join the queue out of arrival order: with α1 = 1 µs per prompt
    // token, r1 joins at 100 + 500 = 600 µs, r2 at 200 + 10 = 210 µs, so FCFS takes r2 first
    // while r1 (earlier, higher priority) waits.
    std::fs::remove_dir_all(d.join("fcfs")).unwrap();
    assert_eq!(counts(&queue_case_with(d, "fcfs", "1.0").0), (1, 1));
}

#[test]
fn scaling_down_then_up_within_the_cooldown_is_one_oscillation() {
    // Three instances; the scheduled policy sizes the group to 1 at 10 s and back to 3 at
    // 12 s. Cooldowns: up 0, down 60 s, so the window is 60 s: the move up 2 s after the
    // move down is an oscillation. With the move up at 80 s it is not.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let case = |up_at: &str| {
        let sc = format!(
            r#"(
    seed: 1,
    cluster: (groups: [(name: "g", count: 3, kv_blocks: 1000,
        latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]), engine: (preset: Bare),
        scaling: (min: 1, max: 3, provision_s: 1.0, load_s: Some(0.0), scale_down_cooldown_s: 60.0))]),
    policies: (autoscale: "scheduled", autoscale_params: {{"10": 1.0, "{up_at}": 3.0}}),
    workload: (num_requests: 1000, clients: [(rate_per_s: 10.0, arrival: Constant,
        input_tokens: Constant(10), output_tokens: Constant(2))]),
)"#
        );
        std::fs::write(d.join("s.ron"), sc).unwrap();
        let out = servesim(
            &["run", "s.ron", "--out", up_at, "--trace", "decisions", "-q"],
            d,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join(up_at).join("summary.json")).unwrap(),
        )
        .unwrap();
        let rows = std::fs::read_to_string(d.join(up_at).join("decisions.csv")).unwrap();
        (summary, rows)
    };
    let (s, rows) = case("12");
    assert_eq!(s["groups"][0]["scale_downs"], 2);
    assert_eq!(s["anomalies"]["scale_oscillations"], 1);
    let mine: Vec<&str> = rows
        .lines()
        .skip(1)
        .filter(|l| !l.contains(",route,"))
        .collect();
    assert_eq!(
        mine,
        [
            "12000000,,,,,,,,scale_oscillation,\"group g scaled up 2.000 s after scaling down (cooldowns: up 0.000 s, down 60.000 s)\""
        ]
    );
    let (s, _) = case("80");
    assert_eq!(s["groups"][0]["scale_ups"], 2);
    assert_eq!(s["anomalies"]["scale_oscillations"], 0);
}
