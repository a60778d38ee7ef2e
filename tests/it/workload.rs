//! Workloads end to end: sessions, accumulation, prompt pools, timeouts, tenants, traces.

use std::collections::BTreeMap;
use std::path::Path;

use servesim::policy::Catalog;
use servesim::scenario;

use crate::common::{Row, parse, root, run};

fn load(name: &str, overrides: &[(&str, &str)]) -> scenario::Scenario {
    let app = servesim::default_app();
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    servesim::loader::load(
        &root().join("scenarios").join(name),
        &o,
        app.world().resource::<Catalog>(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn sessions(rows: &[Row]) -> BTreeMap<u64, Vec<&Row>> {
    let mut m: BTreeMap<u64, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        if !r.str("session").is_empty() {
            m.entry(r.u64("session")).or_default().push(r);
        }
    }
    for turns in m.values_mut() {
        turns.sort_by_key(|r| r.u64("turn"));
    }
    m
}

#[test]
fn a_session_turn_never_arrives_before_the_previous_turn_completes_plus_think_time() {
    let (s, rows) = run(&load(
        "multi-turn-chat.ron",
        &[("workload.num_requests", "400")],
    ));
    let by_session = sessions(&rows);
    assert!(by_session.len() > 20);
    let mut follow_ups = 0;
    for turns in by_session.values() {
        for (k, pair) in turns.windows(2).enumerate() {
            let (prev, next) = (pair[0], pair[1]);
            assert_eq!(next.u64("turn"), k as u64 + 1, "turns are consecutive");
            assert_eq!(
                prev.str("state"),
                "completed",
                "only a completed turn is followed"
            );
            assert_eq!(
                next.u64("arrival_us"),
                prev.u64("completion_us") + 3_000_000,
                "closed loop: completion + 3 s think"
            );
            follow_ups += 1;
        }
    }
    assert!(follow_ups > 50);
    assert_eq!(s.requests.injected, 400);
}

#[test]
fn accumulated_prompts_grow_by_exactly_the_previous_output_and_the_new_question() {
    // Constant questions of 40 tokens: turn k's prompt = turn k−1's prompt + its output + 40.
    let sc = parse(
        "(seed: 5, cluster: (groups: [(count: 1, kv_blocks: 20000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [500.0, 1.0, 20.0]))]),
          workload: (num_requests: 60, clients: [(rate_per_s: 1.0, input_tokens: Constant(40),
            output_tokens: Uniform(min: 5, max: 60), shared_prefix_tokens: 100,
            session: (turns: Constant(4), think_time_s: 0.5, accumulate: true))]))",
    );
    let (_, rows) = run(&sc);
    let mut checked = 0;
    for turns in sessions(&rows).values() {
        assert_eq!(turns[0].u64("input_tokens"), 140);
        for pair in turns.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert_eq!(
                b.u64("input_tokens"),
                a.u64("input_tokens") + a.u64("output_tokens") + 40
            );
            // The previous prompt's full blocks are in the cache (one instance, a big cache).
            assert!(
                b.u64("cached_tokens") >= a.u64("input_tokens") / 16 * 16,
                "{b:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked}");
}

#[test]
fn a_prompt_pool_repeats_whole_prompts_so_repeats_hit_the_cache_in_full() {
    let sc = parse(
        "(seed: 6, cluster: (groups: [(count: 1, kv_blocks: 20000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [500.0, 1.0, 20.0]))]),
          workload: (num_requests: 40, clients: [(rate_per_s: 5.0, input_tokens: Uniform(min: 100, max: 900),
            output_tokens: Constant(4), shared_prefix_tokens: 64, prompt_pool: 5)]))",
    );
    let (_, rows) = run(&sc);
    for r in &rows[5..] {
        let first = &rows[(r.u64("request_id") % 5) as usize];
        assert_eq!(
            r.u64("input_tokens"),
            first.u64("input_tokens"),
            "same slot, same prompt"
        );
        assert_eq!(
            r.u64("cached_tokens"),
            (r.u64("input_tokens") - 1) / 16 * 16,
            "{r:?}"
        );
    }
}

#[test]
fn requests_past_their_timeout_are_abandoned_and_release_their_blocks() {
    // One slow instance, heavy load, 2 s timeout: many requests give up, wherever they are.
    let sc = parse(
        "(seed: 7, cluster: (groups: [(count: 1, kv_blocks: 300, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [20000.0, 10.0, 500.0]))]),
          policies: (routing_latency_us: 1000),
          workload: (num_requests: 300, clients: [(rate_per_s: 12.0, input_tokens: Uniform(min: 50, max: 400),
            output_tokens: Uniform(min: 10, max: 200), timeout_s: 2.0)]))",
    );
    let (s, rows) = run(&sc);
    assert!(s.requests.timed_out > 50, "{:?}", s.requests);
    assert!(s.requests.completed > 50, "{:?}", s.requests);
    for r in &rows {
        match r.str("state") {
            "completed" => assert!(
                r.u64("completion_us") <= r.u64("arrival_us") + 2_000_000,
                "{r:?}"
            ),
            "timed_out" => assert!(r.str("completion_us").is_empty()),
            other => panic!("unexpected state {other}"),
        }
    }
}

#[test]
fn tenants_and_slo_classes_label_every_row() {
    let (_, rows) = run(&load(
        "multi-tenant.ron",
        &[("workload.num_requests", "600")],
    ));
    let tenants: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.str("tenant")).collect();
    assert_eq!(
        tenants.into_iter().collect::<Vec<_>>(),
        ["acme", "globex", "initech"]
    );
    for r in &rows {
        let expected = if r.str("tenant") == "globex" {
            "batch"
        } else {
            "interactive"
        };
        assert_eq!(r.str("slo_class"), expected);
    }
}

/// Counts rows and sums token columns without servesim's reader (an independent check).
fn mooncake_totals(path: &Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut t = (0, 0, 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        t.0 += 1;
        t.1 += v["input_length"].as_u64().unwrap();
        t.2 += v["output_length"].as_u64().unwrap();
    }
    t
}

fn vidur_totals(path: &Path, limit: usize) -> (u64, u64, u64) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let mut t = (0, 0, 0);
    for rec in r.records().take(limit) {
        let rec = rec.unwrap();
        t.0 += 1;
        t.1 += rec[1].parse::<f64>().unwrap().round() as u64;
        t.2 += rec[2].parse::<f64>().unwrap().round() as u64;
    }
    t
}

fn trace_scenario(format: &str, file: &str, extra: &str) -> scenario::Scenario {
    let app = servesim::default_app();
    let file = root().join("scenarios").join(file);
    let file = file.display();
    let src = format!(
        "(cluster: (groups: [(count: 2, kv_blocks: 50000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 1.0, 50.0]))]),
          workload: (traces: [(format: {format}, file: \"{file}\"{extra})]))"
    );
    servesim::loader::parse(
        &src,
        "trace-test.ron",
        &[],
        app.world().resource::<Catalog>(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_bundled_mooncake_trace_replays_every_row_with_its_token_totals() {
    let (n, input, output) = mooncake_totals(&root().join("scenarios/data/mooncake_sample.jsonl"));
    assert_eq!(n, 500);
    let (s, rows) = run(&trace_scenario(
        "Mooncake",
        "data/mooncake_sample.jsonl",
        "",
    ));
    assert_eq!(s.requests.injected, n);
    assert_eq!(
        rows.iter().map(|r| r.u64("input_tokens")).sum::<u64>(),
        input
    );
    assert_eq!(
        rows.iter().map(|r| r.u64("output_tokens")).sum::<u64>(),
        output
    );
    assert!(s.kv.hit_blocks > 0, "shared hash_ids hit the prefix cache");
}

#[test]
fn the_bundled_vidur_trace_replays_with_scaled_time_and_tokens() {
    let path = root().join("scenarios/data/splitwise_conv.csv");
    let (n, input, output) = vidur_totals(&path, 1000);
    let (s, rows) = run(&trace_scenario("VidurCsv", "data/splitwise_conv.csv", ""));
    assert_eq!(s.requests.injected, 19_366, "every row");
    let first: Vec<&Row> = rows.iter().take(1000).collect();
    assert_eq!(first.len() as u64, n);
    assert_eq!(
        first.iter().map(|r| r.u64("input_tokens")).sum::<u64>(),
        input
    );
    assert_eq!(
        first.iter().map(|r| r.u64("output_tokens")).sum::<u64>(),
        output
    );
    // time_scale 2 doubles arrival times; token_scale 0.5 halves tokens, cut down to whole
    // tokens as Vidur's trace readers do (`astype(int)`: 7 → 3), and at least 1.
    let (_, slow) = run(&trace_scenario(
        "VidurCsv",
        "data/splitwise_conv.csv",
        ", time_scale: 2.0, token_scale: 0.5",
    ));
    for (a, b) in rows.iter().zip(&slow).take(200) {
        assert!(
            b.u64("arrival_us").abs_diff(2 * a.u64("arrival_us")) <= 1,
            "{a:?} {b:?}"
        );
        let half = |x: u64| (x / 2).max(1);
        assert_eq!(
            b.u64("input_tokens"),
            half(a.u64("input_tokens")),
            "{a:?} {b:?}"
        );
        assert_eq!(
            b.u64("output_tokens"),
            half(a.u64("output_tokens")),
            "{a:?} {b:?}"
        );
    }
}

#[test]
fn a_requests_csv_replays_as_a_servesim_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (_, rows) = run(&load("quickstart.ron", &[("workload.num_requests", "200")]));
    // Write the run's rows in requests.csv form (as servesim wrote them) and replay.
    let mut w = csv::Writer::from_path(dir.path().join("requests.csv")).unwrap();
    w.write_record(["arrival_us", "input_tokens", "output_tokens", "state"])
        .unwrap();
    for r in &rows {
        w.write_record([
            r.str("arrival_us"),
            r.str("input_tokens"),
            r.str("output_tokens"),
            r.str("state"),
        ])
        .unwrap();
    }
    w.flush().unwrap();
    let csv = dir.path().join("requests.csv");
    let (_, replay) = run(&trace_scenario("ServesimCsv", csv.to_str().unwrap(), ""));
    let key = |rows: &[Row]| {
        rows.iter()
            .map(|r| {
                (
                    r.u64("arrival_us"),
                    r.u64("input_tokens"),
                    r.u64("output_tokens"),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&rows), key(&replay));
}

/// A servesim CSV trace of `rows` (`arrival_us,input,output,tenant,slo_class`), run with
/// `entry` as its `traces` entry's extra fields and `policies` as the scenario's.
fn labelled_trace(dir: &Path, rows: &str, entry: &str, policies: &str) -> String {
    let file = dir.join("t.csv");
    std::fs::write(
        &file,
        format!("arrival_us,input_tokens,output_tokens,tenant,slo_class\n{rows}"),
    )
    .unwrap();
    format!(
        "(cluster: (groups: [(kv_blocks: 5000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 1.0, 50.0]))]),
          policies: ({policies}),
          workload: (traces: [(format: ServesimCsv, file: {:?}{entry})]))",
        file.display()
    )
}

#[test]
fn a_servesim_trace_row_keeps_its_own_tenant_and_slo_class_and_an_empty_cell_takes_the_entrys() {
    let dir = tempfile::tempdir().unwrap();
    let rows = "0,100,10,acme,interactive\n1000,100,10,globex,\n2000,100,10,,batch\n\
                3000,100,10,'=sum,interactive\n4000,100,10,acme,batch\n";
    let src = labelled_trace(dir.path(), rows, ", tenant: \"fallback\"", "");
    let (s, out) = run(&parse(&src));
    let by_id = |col: &str| {
        let mut r: Vec<_> = out
            .iter()
            .map(|r| (r.u64("request_id"), r.str(col)))
            .collect();
        r.sort();
        r.into_iter()
            .map(|(_, v)| v.to_string())
            .collect::<Vec<_>>()
    };
    // `'=sum` is how servesim writes the label `=sum` (a formula to a spreadsheet).
    assert_eq!(
        by_id("tenant"),
        ["acme", "globex", "fallback", "'=sum", "acme"]
    );
    let classes = ["interactive", "standard", "batch", "interactive", "batch"];
    assert_eq!(by_id("slo_class"), classes);
    let count = |list: &[servesim::metrics::SliceSummary]| {
        list.iter()
            .map(|t| (t.name.clone(), t.injected))
            .collect::<BTreeMap<_, _>>()
    };
    let expect = |pairs: &[(&str, u64)]| {
        pairs
            .iter()
            .map(|&(n, k)| (n.to_string(), k))
            .collect::<BTreeMap<_, _>>()
    };
    let tenants = [("acme", 2), ("globex", 1), ("fallback", 1), ("=sum", 1)];
    assert_eq!(count(&s.tenants), expect(&tenants));
    let classes = [("interactive", 2), ("batch", 2), ("standard", 1)];
    assert_eq!(count(&s.slo_classes), expect(&classes));

    // Every row names both: the entry's labels (`trace0`, `standard`) have no requests and
    // are not listed.
    let rows = "0,100,10,acme,interactive\n1000,100,10,globex,batch\n";
    let (s, _) = run(&parse(&labelled_trace(dir.path(), rows, "", "")));
    assert_eq!(count(&s.tenants), expect(&[("acme", 1), ("globex", 1)]));
    assert_eq!(
        count(&s.slo_classes),
        expect(&[("interactive", 1), ("batch", 1)])
    );
}

#[test]
fn a_servesim_trace_rows_labels_are_checked_with_file_and_line_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let classes = "slo_classes: [(name: \"interactive\", ttft_ms: 200.0), (name: \"batch\")]";
    let rows = "0,100,10,a,interactive\n1000,100,10,b,bach\n";
    let e = crate::common::invalid(&labelled_trace(dir.path(), rows, "", classes));
    assert!(
        e.contains(
            "t.csv:3: slo_class `bach` is not one of policies.slo_classes (interactive, batch) \
             (did you mean `batch`?)"
        ),
        "{e}"
    );
    let rows = "0,100,10,\"a\tb\",batch\n";
    let e = crate::common::invalid(&labelled_trace(dir.path(), rows, "", classes));
    assert!(
        e.contains("t.csv:2: tenant \"a\\tb\" holds a line break or a tab"),
        "{e}"
    );
    // At most 1,000 distinct tenants: row 1,001 (line 1,002) names the 1,001st.
    let rows: String = (0..1001).map(|k| format!("{k},10,1,t{k},\n")).collect();
    let e = crate::common::invalid(&labelled_trace(dir.path(), &rows, "", ""));
    assert!(
        e.contains("t.csv:1002: tenant `t1000` is past the first 1,000 distinct tenants"),
        "{e}"
    );
}

#[test]
fn a_bad_trace_row_is_reported_with_file_and_line_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,10,3\n0.7,ten,3\n",
    )
    .unwrap();
    let scen = dir.path().join("s.ron");
    std::fs::write(
        &scen,
        "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 1.0, 1.0]))]),
          workload: (traces: [(format: VidurCsv, file: \"t.csv\")]))",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
        .arg("validate")
        .arg(&scen)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("workload.traces[0].file")
            && err.contains("t.csv:3: num_prefill_tokens = \"ten\" is not a number"),
        "{err}"
    );
}

#[test]
fn a_trace_of_the_wrong_shape_says_what_shape_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let check = |format: &str, file: &str, text: &str, expect: &str| {
        std::fs::write(dir.path().join(file), text).unwrap();
        std::fs::write(
            dir.path().join("s.ron"),
            format!(
                "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 1.0, 1.0]))]),
                  workload: (traces: [(format: {format}, file: \"{file}\")]))"
            ),
        )
        .unwrap();
        let out = crate::common::servesim(&["validate", "s.ron"], dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expect), "{expect}: {err}");
    };
    // A row short of a field: its line and the counts, not the CSV reader's record number.
    check(
        "VidurCsv",
        "t.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,10,3\n0.7,10\n",
        "t.csv:3: 2 fields where the header has 3",
    );
    // A JSON array where JSON Lines belong.
    check(
        "Mooncake",
        "m.jsonl",
        "[{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}]\n",
        "m.jsonl:1: not a Mooncake row: invalid type: map, expected f64 at line 1 column 1 (a Mooncake trace is JSON Lines: one object per line, not an array)",
    );
    // A field of the wrong kind or missing is named (serde said "invalid type: floating point
    // `3.5`, expected u64 at line 1 column 50").
    for (row, said) in [
        (
            "{\"timestamp\": 0, \"input_length\": 3.5, \"output_length\": 5}",
            "m.jsonl:2: not a Mooncake row: `input_length` is 3.5, not a whole number of tokens",
        ),
        (
            "{\"timestamp\": \"0\", \"input_length\": 3, \"output_length\": 5}",
            "m.jsonl:2: not a Mooncake row: `timestamp` is \"0\", not a number of milliseconds",
        ),
        (
            "{\"timestamp\": 0, \"input_length\": 3}",
            "m.jsonl:2: not a Mooncake row: no `output_length`",
        ),
        (
            "{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 5, \"hash_ids\": [1, -2]}",
            "m.jsonl:2: not a Mooncake row: `hash_ids` item 2 is -2, not a whole number (a \
             block's hash)",
        ),
    ] {
        check(
            "Mooncake",
            "m.jsonl",
            &format!("{{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}}\n{row}\n"),
            said,
        );
    }
}

#[test]
fn token_scale_scales_what_a_trace_says_is_shared_with_the_prompt() {
    // Two prompts of 32 tokens, 1 s apart, sharing their first 16-token hash block (id 1) and
    // not their second (2, 3). token_scale 2 makes them 64 tokens, and the shared block 32:
    // the second prompt finds 32 tokens (two 16-token KV blocks) cached, not 16.
    let dir = tempfile::tempdir().unwrap();
    let cached = |format: &str, file: &str, text: &str, scale: f64| {
        std::fs::write(dir.path().join(file), text).unwrap();
        let sc = parse(&format!(
            "(cluster: (groups: [(kv_blocks: 1000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
              workload: (traces: [(format: {format}, file: \"{}\", token_scale: {scale:?})]))",
            dir.path().join(file).display()
        ));
        let (_, rows) = run(&sc);
        let mut rows: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.u64("arrival_us"),
                    r.u64("input_tokens"),
                    r.u64("cached_tokens"),
                )
            })
            .collect();
        rows.sort();
        rows
    };
    let moon = "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 2, \"hash_ids\": [1, 2]}\n\
                {\"timestamp\": 1000, \"input_length\": 32, \"output_length\": 2, \"hash_ids\": [1, 3]}\n";
    assert_eq!(
        cached("Mooncake", "m.jsonl", moon, 1.0),
        [(0, 32, 0), (1_000_000, 32, 16)]
    );
    assert_eq!(
        cached("Mooncake", "m.jsonl", moon, 2.0),
        [(0, 64, 0), (1_000_000, 64, 32)]
    );
    // A prefix group's prefix_tokens scale too: 16 of 32 shared becomes 32 of 64.
    let csv = "arrival_us,input_tokens,output_tokens,prefix_group,prefix_tokens\n\
               0,32,2,a,16\n1000000,32,2,a,16\n";
    assert_eq!(
        cached("ServesimCsv", "t.csv", csv, 2.0),
        [(0, 64, 0), (1_000_000, 64, 32)]
    );
}

#[test]
#[ignore = "slow in the test profile: generates 10 million requests; run with --ignored --release"]
fn generating_ten_million_requests_keeps_memory_flat() {
    use servesim::engine::{Event, EventQueue};
    use servesim::workload::{Labels, Workload};
    let sc = load("multi-tenant.ron", &[("workload.num_requests", "10000000")]);
    let mut labels = Labels::default();
    let mut w = Workload::new(&sc, &mut labels, None).unwrap();
    let mut q = EventQueue::default();
    w.prime(&mut q).unwrap();
    let rss = || {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
    };
    let mut at_1m = 0;
    let mut tokens = 0u64;
    for id in 0..10_000_000u64 {
        let t = q.peek_time().expect("sources still emit");
        let Some(Event::Arrival { source }) = q.pop_at(t) else {
            panic!("only arrivals are queued")
        };
        let (spec, _) = w.make_request(source as usize, id);
        tokens += u64::from(spec.input_tokens);
        if let Some(next) = w.next_time(source as usize).unwrap() {
            q.push(next, Event::Arrival { source });
        }
        if id == 1_000_000 {
            at_1m = rss();
        }
    }
    let after = rss();
    assert!(tokens > 10_000_000);
    assert!(q.len() <= 3, "one pending arrival per source");
    assert!(
        after < at_1m + 8 * 1024 * 1024,
        "RSS grew from {at_1m} to {after} bytes between 1M and 10M requests"
    );
}

#[test]
fn a_run_ends_with_its_last_completion_not_with_timeouts_that_can_no_longer_fire() {
    // Three requests 0.1 s apart (Constant arrivals: 100 ms, 200 ms, 300 ms), each one step
    // of 1 ms prefill + 1 ms per decode (β0 = 1000 µs, no per-token terms): done 2 ms after
    // arrival. Their 300 s timeouts must not stretch the run to 300.3 s.
    let sc = parse(
        "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
          workload: (num_requests: 3, clients: [(rate_per_s: 10.0, arrival: Constant,
            input_tokens: Constant(16), output_tokens: Constant(2), timeout_s: 300.0)]))",
    );
    let (s, rows) = run(&sc);
    let last = rows.iter().map(|r| r.u64("completion_us")).max().unwrap();
    assert_eq!(last, 302_000);
    assert_eq!(s.sim_duration_s, 0.302);
    assert!((s.throughput.requests_per_s - 3.0 / 0.302).abs() < 1e-9);
}

fn inference_perf(reading: &str, stages: &str, multi_turn: bool) -> scenario::Scenario {
    parse(&format!(
        "(seed: 5, cluster: (groups: [(kv_blocks: 4000, max_num_seqs: 64,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [2000.0, 5.0, 50.0]))]),
          workload: (inference_perf: (reading: {reading}, stages: [{stages}],
            shared_prefix: (num_unique_system_prompts: 3, num_users_per_system_prompt: 2,
              system_prompt_len: 64, question_len: 40, output_len: 8,
              enable_multi_turn_chat: {multi_turn}))))"
    ))
}

#[test]
fn an_inference_perf_load_too_large_to_expand_says_how_it_counts() {
    let e = crate::common::invalid(
        "(cluster: (groups: [(kv_blocks: 4000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [2000.0, 5.0, 50.0]))]),
          workload: (inference_perf: (stages: [(rate_per_s: 1.0, duration_s: 10.0)],
            shared_prefix: (num_unique_system_prompts: 1000, num_users_per_system_prompt: 1000,
              system_prompt_len: 64, question_len: 40, output_len: 8))))",
    );
    assert!(
        e.contains("1,000 system prompts × 1,000 users each × 1 stage is 1,000,000 users, more than the 100,000 allowed"),
        "{e}"
    );
}

#[test]
fn an_inference_perf_load_sends_exactly_rate_times_duration_per_stage() {
    let stages = "(rate_per_s: 2.5, duration_s: 100.0), (rate_per_s: 0.7, duration_s: 100.0)";
    for (reading, multi_turn) in [
        ("OpenLoop", false),
        ("OpenLoop", true),
        ("Blis", true),
        ("Blis", false),
    ] {
        let (s, rows) = run(&inference_perf(reading, stages, multi_turn));
        // ⌊2.5 × 100⌋ + ⌊0.7 × 100⌋ = 250 + 70. BLIS without multi-turn chat sends Poisson
        // arrivals per user: about 320, not exactly (sd ≈ 18).
        if reading == "Blis" && !multi_turn {
            assert!((250..=390).contains(&rows.len()), "{}", rows.len());
            continue;
        }
        assert_eq!(rows.len(), 320, "{reading} multi_turn={multi_turn}");
        assert_eq!(s.requests.completed, 320);
        for r in &rows {
            assert_eq!(r.u64("input_tokens"), 64 + 40);
            assert_eq!(r.u64("output_tokens"), 8);
            assert_eq!(r.str("tenant"), "inference_perf");
        }
        if reading == "OpenLoop" {
            // The constant timer: 250 arrivals in [0, 100 s], the 250th exactly at 100 s;
            // 70 in (100 s, 200 s], the last exactly at 200 s.
            let mut t: Vec<u64> = rows.iter().map(|r| r.u64("arrival_us")).collect();
            t.sort();
            assert_eq!(t[249], 100_000_000);
            assert!(t[248] < 100_000_000 && t[250] > 100_000_000);
            assert_eq!(t[319], 200_000_000);
        }
    }
}

#[test]
fn users_share_their_system_prompt_and_repeat_their_own_prompt() {
    // Open loop: users take turns, so request k is user k mod 6, whose system prompt is
    // user / 2. With 64-token system prompts (4 blocks of 16) and 40-token questions, the first
    // round (requests 0–5) hits the 4 system-prompt blocks on the second user of each prompt;
    // later rounds repeat each user's whole 104-token prompt (inference-perf cycles through
    // its pre-generated prompts), which hits its 6 full blocks (96 tokens).
    let (s, rows) = run(&inference_perf(
        "OpenLoop",
        "(rate_per_s: 1.5, duration_s: 10.0)",
        false,
    ));
    assert_eq!(rows.len(), 15);
    let cached: Vec<u64> = rows.iter().map(|r| r.u64("cached_tokens")).collect();
    assert_eq!(cached[..6], [0, 64, 0, 64, 0, 64]);
    assert!(cached[6..].iter().all(|&c| c == 96), "{cached:?}");
    assert_eq!(s.kv.hit_blocks, 3 * 4 + 9 * 6);
}

#[test]
fn blis_sessions_send_their_share_with_think_time_after_each_completion() {
    // 6 users, 25 requests in stage 0 → shares 5, 4, 4, 4, 4, 4; think = ⌊6 / 2.5 s⌋ = 2.4 s.
    let sc = inference_perf("Blis", "(rate_per_s: 2.5, duration_s: 10.0)", true);
    let (_, rows) = run(&sc);
    let by_session = sessions(&rows);
    assert_eq!(by_session.len(), 6);
    let mut counts: Vec<usize> = by_session.values().map(Vec::len).collect();
    counts.sort();
    assert_eq!(counts, [4, 4, 4, 4, 4, 5]);
    for turns in by_session.values() {
        for w in turns.windows(2) {
            assert_eq!(
                w[1].u64("arrival_us"),
                w[0].u64("completion_us") + 2_400_000,
                "closed loop: completion + think"
            );
        }
    }
}

#[test]
fn a_lognormal_or_exponential_without_max_is_capped_at_the_token_limit() {
    // `max` is optional for both (docs/scenarios.md); left out, it was u32::MAX, which the
    // 2²⁴-token limit then refused as "input_tokens.max: … got 4294967295".
    let scenario = |input: &str, turns: &str| {
        format!(
            "(cluster: (groups: [(kv_blocks: 100000, latency: Blackbox(alpha: [0.0, 0.0, \
             0.0], beta: [1000.0, 1.0, 1.0]))]), workload: (num_requests: 2000, clients: \
             [(rate_per_s: 10.0, input_tokens: {input}, output_tokens: Constant(2), \
             session: (turns: {turns}, think_time_s: 0.0))]))"
        )
    };
    let sc = parse(&scenario(
        "Exponential(mean: 300.0)",
        "LogNormal(mu: 1.0, sigma: 0.5)",
    ));
    let client = &sc.workload.clients[0];
    assert_eq!(client.input_tokens.max_value(), Some(1 << 24));
    let turns = &client.session.as_ref().unwrap().turns;
    assert_eq!(turns.max_value(), Some(1 << 24));
    // Exponential(300) rounded: mean 300, standard error 300 / √2000 ≈ 6.7.
    let (_, rows) = run(&sc);
    assert_eq!(rows.len(), 2000);
    let mean = rows
        .iter()
        .map(|r| r.u64("input_tokens") as f64)
        .sum::<f64>()
        / 2000.0;
    assert!((mean - 300.0).abs() < 5.0 * 6.7, "mean prompt {mean}");
    parse(&scenario(
        "LogNormal(mu: 5.0, sigma: 1.0)",
        "Exponential(mean: 3.0)",
    ));
}

#[test]
fn rate_shares_are_relative_however_large_or_small() {
    // Two shares of 1.7e308 add up to infinity: each client's rate was inf / inf, and the
    // run panicked drawing its first gap. Each is half of the aggregate, as 1 and 1 are.
    let c = "input_tokens: Constant(8), output_tokens: Constant(2)";
    for (a, b, first) in [
        ("1.7e308", "1.7e308", 2.5),
        ("1e-300", "1e-300", 2.5),
        ("1.7e308", "0.85e308", 5.0 * 2.0 / 3.0),
        ("1.0", "1.0", 2.5),
    ] {
        let sc = parse(&format!(
            "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], \
             beta: [1000.0, 1.0, 1.0]))]), workload: (num_requests: 20, aggregate_rate_per_s: \
             5.0, clients: [(rate_share: {a}, {c}), (rate_share: {b}, {c})]))"
        ));
        let rates: Vec<f64> = sc
            .workload
            .clients
            .iter()
            .map(|k| servesim::workload::client_rate(&sc, k))
            .collect();
        assert!((rates[0] - first).abs() < 1e-12, "{a}, {b}: {rates:?}");
        assert!(
            (rates[0] + rates[1] - 5.0).abs() < 1e-12,
            "{a}, {b}: {rates:?}"
        );
        assert_eq!(run(&sc).1.len(), 20);
    }
}

#[test]
fn a_prompt_length_that_can_only_draw_zero_is_refused_and_a_zero_draw_is_one_token() {
    // vLLM refuses an empty prompt ("The decoder prompt cannot be empty"), so a length that
    // can give nothing but 0 (and no shared prefix) is an error, whatever its shape.
    let scenario = |input: &str, prefix: u32| {
        format!(
            "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], \
             beta: [1000.0, 1.0, 1.0]))]), workload: (num_requests: 200, clients: \
             [(rate_per_s: 10.0, input_tokens: {input}, output_tokens: Constant(2), \
             shared_prefix_tokens: {prefix})]))"
        )
    };
    for input in [
        "Constant(0)",
        "Uniform(min: 0, max: 0)",
        "Normal(mean: 5.0, stdev: 1.0, min: 0, max: 0)",
        "Exponential(mean: 5.0, max: 0)",
    ] {
        let err = crate::common::invalid(&scenario(input, 0));
        assert!(
            err.contains("clients[0].input_tokens: every prompt would be empty"),
            "{input}: {err}"
        );
        parse(&scenario(input, 8)); // a shared prefix is a prompt
    }
    // A draw of 0 among others is a 1-token prompt.
    let (_, rows) = run(&parse(&scenario("Uniform(min: 0, max: 1)", 0)));
    assert_eq!(rows.len(), 200);
    assert!(rows.iter().all(|r| r.u64("input_tokens") == 1));

    // An Empirical column of zeros says which file and column.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("zeros.csv"), "n\n0\n0.4\n").unwrap();
    std::fs::write(dir.path().join("empty.csv"), "").unwrap();
    std::fs::write(dir.path().join("huge.csv"), "n\n5\n16777217\n").unwrap();
    for (file, expected) in [
        (
            "huge.csv",
            "huge.csv:3: n = \"16777217\" is above the 16,777,216 tokens a prompt or output may have",
        ),
        (
            "zeros.csv",
            "zeros.csv: every value of `n` is 0, so every prompt would be empty",
        ),
        (
            "empty.csv",
            "empty.csv: the file is empty (expected a header row naming `n`)",
        ),
    ] {
        let path = dir.path().join("s.ron");
        let input = format!("Empirical(file: {file:?}, column: \"n\")");
        std::fs::write(&path, scenario(&input, 0)).unwrap();
        let done = crate::common::servesim(&["validate", path.to_str().unwrap()], dir.path());
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{err}");
        assert!(
            err.contains("workload.clients[0].input_tokens") && err.contains(expected),
            "{err}"
        );
    }
}

#[test]
fn a_source_that_sends_nothing_is_refused_and_a_rate_not_used_is_warned_of() {
    let scenario = |workload: &str| {
        format!(
            "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], \
             beta: [1000.0, 1.0, 1.0]))]), workload: (num_requests: 10, {workload}))"
        )
    };
    let c = "input_tokens: Constant(8), output_tokens: Constant(2)";
    let cases = [
        (
            format!("aggregate_rate_per_s: 5.0, clients: [(rate_per_s: 1.0, {c})]"),
            "workload.aggregate_rate_per_s: divides nothing: no client gives rate_share",
        ),
        (
            // 5 × 1e-8 / (1 + 1e-8) req/s: one request in 7 years.
            format!(
                "aggregate_rate_per_s: 5.0, clients: [(rate_share: 1e-8, {c}), (rate_share: 1.0, {c})]"
            ),
            "workload.clients[0].rate_share: gives 5.000e-8 req/s",
        ),
        (
            // ⌊0.5 × 1.9⌋ = ⌊0.95⌋ = 0 and ⌊0.0 × 10⌋ = 0: no stage sends one.
            format!(
                "clients: [(arrival: ConstantTimer(stages: [(rate_per_s: 0.5, duration_s: 1.9), (rate_per_s: 0.0, duration_s: 10.0)]), {c})]"
            ),
            "workload.clients[0].arrival.stages: every stage sends ⌊rate_per_s × duration_s⌋ = 0 requests",
        ),
        (
            format!(
                "clients: [(arrival: Staged(stages: [(rate_per_s: 0.0, duration_s: 1.0), (rate_per_s: 0.0, duration_s: 2.0)]), {c})]"
            ),
            "workload.clients[0].arrival.stages: every stage has rate_per_s 0",
        ),
        (
            // round(0.4 × 1.0) = 0 with exact arrivals.
            format!(
                "clients: [(arrival: Staged(stages: [(rate_per_s: 0.4, duration_s: 1.0)], exact: true), {c})]"
            ),
            "workload.clients[0].arrival.stages: every stage sends round(rate_per_s × duration_s) = 0 requests",
        ),
    ];
    for (workload, expected) in cases {
        let err = crate::common::invalid(&scenario(&workload));
        assert!(err.contains(expected), "{workload}\n{err}");
    }
    // A rate an arrival does not use is warned of, not refused: a sweep may vary the arrival
    // of a client whose rate the other arrivals use.
    let dir = tempfile::tempdir().unwrap();
    for (workload, expected) in [
        (
            format!(
                "clients: [(arrival: Staged(stages: [(rate_per_s: 2.0, duration_s: 1.0)]), rate_per_s: 3.0, {c})]"
            ),
            "workload.clients[0].rate_per_s is not used: staged arrivals take their rates from their stages",
        ),
        (
            format!(
                "aggregate_rate_per_s: 5.0, clients: [(arrival: AllAtZero(count: 3), rate_share: 1.0, {c}), (rate_share: 1.0, {c})]"
            ),
            "workload.clients[0].rate_share is not used: AllAtZero sends its count at t = 0",
        ),
    ] {
        let path = dir.path().join("s.ron");
        std::fs::write(&path, scenario(&workload)).unwrap();
        let done = crate::common::servesim(&["validate", path.to_str().unwrap()], dir.path());
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(0), "{err}");
        assert!(err.contains(&format!("warning: {expected}")), "{err}");
    }
    // A pause stage among sending ones is a pause, and ⌊0.5 × 2.0⌋ = 1 sends one.
    for ok in [
        format!(
            "clients: [(arrival: ConstantTimer(stages: [(rate_per_s: 0.5, duration_s: 2.0), (rate_per_s: 0.0, duration_s: 10.0)]), {c})]"
        ),
        format!(
            "clients: [(arrival: Staged(stages: [(rate_per_s: 0.0, duration_s: 1.0), (rate_per_s: 4.0, duration_s: 2.0)]), {c})]"
        ),
    ] {
        parse(&scenario(&ok));
    }
}

#[test]
fn a_wait_shorter_than_the_clocks_microsecond_is_refused() {
    // 1e-9 s rounds to 0 µs: every request would time out (or be shed) on arrival.
    let group = "cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], \
                 beta: [1000.0, 1.0, 1.0]))])";
    let client = "(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(2)";
    let cases = [
        (
            format!(
                "({group}, workload: (num_requests: 5, clients: [{client}, timeout_s: 1e-9)]))"
            ),
            "workload.clients[0].timeout_s: 1e-9 s is shorter than 1 µs",
        ),
        (
            format!(
                "({group}, flow_control: (bands: [(priority: 0, max_wait_s: 5e-7)]), \
                 workload: (num_requests: 5, clients: [{client})]))"
            ),
            "flow_control.bands[0].max_wait_s: 5e-7 s is shorter than 1 µs",
        ),
        (
            format!(
                "({group}, workload: (inference_perf: (stages: [(rate_per_s: 2.0, duration_s: 5.0)], \
                 shared_prefix: (num_unique_system_prompts: 1, num_users_per_system_prompt: 1, \
                 system_prompt_len: 10, question_len: 10, output_len: 5), timeout_s: 1e-7)))"
            ),
            "workload.inference_perf.timeout_s: 1e-7 s is shorter than 1 µs",
        ),
    ];
    for (src, expected) in cases {
        let err = crate::common::invalid(&src);
        assert!(err.contains(expected), "{err}");
    }
    // One microsecond is the clock's grain, and waits that long.
    parse(&format!(
        "({group}, workload: (num_requests: 5, clients: [{client}, timeout_s: 1e-6)]))"
    ));
}

/// `validate` and `run` say before a run when a client can never be served: its shortest
/// request needs more than any instance holds. 32 blocks of 16 tokens hold 512 tokens of one
/// request, whose last token is not stored: a prompt of 503 and an answer of 10 fit (512),
/// 504 and 10 do not. The warning says so exactly where the run drops every request.
#[test]
fn a_client_whose_every_request_is_unservable_is_warned_of_before_the_run() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    let sc = |prompt: u32| {
        parse(&format!(
            "(cluster: (groups: [(kv_blocks: 32, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [100.0, 1.0, 1.0]))]),
              workload: (num_requests: 5, clients: [
                (rate_per_s: 1.0, input_tokens: Constant({prompt}), output_tokens: Constant(10)),
                (rate_per_s: 1.0, input_tokens: Uniform(min: 8, max: 900), output_tokens: Constant(10))]))"
        ))
    };
    let warned = |prompt| servesim::loader::estimate::slow_inputs(&sc(prompt), catalog);
    assert!(warned(503).is_empty(), "{:?}", warned(503));
    assert_eq!(
        warned(504),
        [
            "workload.clients[0]: its shortest request (504 prompt tokens and 10 output tokens) is longer than any instance holds (at most 512 tokens of one request, cluster.groups[0]: its KV cache and max_model_len): every request it sends will be dropped as unservable"
        ]
    );
    let only_first = |prompt| {
        let mut s = sc(prompt);
        s.workload.clients.truncate(1);
        run(&s).0.requests
    };
    let (fits, not) = (only_first(503), only_first(504));
    assert_eq!((fits.completed, fits.dropped), (5, 0));
    assert_eq!((not.completed, not.dropped), (0, 5));
}
