//! Watching runs (issue 12): timeseries.csv checked against requests.csv, the HTML report
//! (also opened in a real headless Chromium), timeline.json, progress bars, and sweeps that
//! shard and merge.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::common::{Row, read_rows, root};

fn servesim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the binary runs")
}

fn ok(args: &[&str]) -> Output {
    let out = servesim(args);
    assert!(
        out.status.success(),
        "servesim {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The quickstart scenario, shortened; `extra` are more `run` arguments.
fn quickstart(dir: &Path, requests: u32, extra: &[&str]) -> Output {
    let n = format!("workload.num_requests={requests}");
    let mut args = vec![
        "run",
        "scenarios/quickstart.ron",
        "--out",
        dir.to_str().unwrap(),
        "--set",
        &n,
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

fn us_of_seconds(s: &str) -> u64 {
    let (a, b) = s.split_once('.').unwrap();
    a.parse::<u64>().unwrap() * 1_000_000 + format!("{b:0<6}")[..6].parse::<u64>().unwrap()
}

#[test]
fn timeseries_counts_match_requests_csv_counted_independently() {
    let dir = tempfile::tempdir().unwrap();
    quickstart(dir.path(), 300, &["--set", "outputs.sample_interval_s=0.5"]);
    let requests = read_rows(&dir.path().join("requests.csv"));
    let samples = read_rows(&dir.path().join("timeseries.csv"));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let end_us = (summary["sim_duration_s"].as_f64().unwrap() * 1e6).round() as u64;
    let cluster: Vec<&Row> = samples
        .iter()
        .filter(|r| r.str("instance") == "all")
        .collect();
    // Every 0.5 s, then one last row at the end of the run.
    let times: Vec<u64> = cluster
        .iter()
        .map(|r| us_of_seconds(r.str("time_s")))
        .collect();
    let expected: Vec<u64> = (1..)
        .map(|k| k * 500_000)
        .take_while(|&t| t <= end_us)
        .chain((!end_us.is_multiple_of(500_000)).then_some(end_us))
        .collect();
    assert_eq!(times, expected);
    // Two instance rows per sample time, then the cluster row.
    assert_eq!(samples.len(), times.len() * 3);

    let arrivals: Vec<u64> = requests.iter().map(|r| r.u64("arrival_us")).collect();
    let completions: Vec<u64> = requests.iter().map(|r| r.u64("completion_us")).collect();
    let mut previous = 0;
    for (row, &t) in cluster.iter().zip(&times) {
        let arrived = arrivals.iter().filter(|&&a| a <= t).count() as u64;
        let done = completions.iter().filter(|&&c| c <= t).count() as u64;
        assert_eq!(row.u64("in_flight"), arrived - done, "in flight at {t} µs");
        let new = |v: &[u64]| v.iter().filter(|&&x| previous < x && x <= t).count() as u64;
        assert_eq!(row.u64("arrivals"), new(&arrivals), "arrivals in (.., {t}]");
        assert_eq!(
            row.u64("completed"),
            new(&completions),
            "completions in (.., {t}]"
        );
        assert_eq!(row.u64("instances_up"), 2);
        previous = t;
    }
    // Per instance: completions add up to what the summary says each instance did.
    for (i, inst) in summary["instances"].as_array().unwrap().iter().enumerate() {
        let total: u64 = samples
            .iter()
            .filter(|r| r.str("instance") == i.to_string())
            .map(|r| r.u64("completed"))
            .sum();
        assert_eq!(total, inst["completed"].as_u64().unwrap());
    }
    // The run ends empty.
    let last = cluster.last().unwrap();
    assert_eq!(
        (
            last.u64("in_flight"),
            last.u64("waiting"),
            last.u64("kv_used_blocks")
        ),
        (0, 0, 0)
    );
}

#[test]
fn a_zero_sample_interval_is_refused_with_the_field_named() {
    let out = servesim(&[
        "validate",
        "scenarios/quickstart.ron",
        "--set",
        "outputs.sample_interval_s=0.0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("outputs.sample_interval_s"), "{err}");
}

#[test]
fn observers_do_not_change_results_and_runs_are_byte_identical() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let plain = quickstart(
        a.path(),
        300,
        &[
            "--set",
            "outputs.timeseries_csv=false",
            "--progress",
            "never",
        ],
    );
    let watched = quickstart(
        b.path(),
        300,
        &["--trace", "timeline", "--report", "--progress", "always"],
    );
    quickstart(
        c.path(),
        300,
        &["--trace", "timeline", "--report", "--progress", "always"],
    );
    assert_eq!(plain.stdout, watched.stdout);
    for f in ["requests.csv", "summary.json"] {
        assert_eq!(
            std::fs::read(a.path().join(f)).unwrap(),
            std::fs::read(b.path().join(f)).unwrap(),
            "{f}"
        );
    }
    for f in [
        "requests.csv",
        "summary.json",
        "timeseries.csv",
        "timeline.json",
        "report.html",
    ] {
        // The report names the run by its directory.
        let read = |d: &Path| {
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            String::from_utf8(std::fs::read(d.join(f)).unwrap())
                .unwrap()
                .replace(&name, "RUN")
        };
        assert!(
            read(b.path()) == read(c.path()),
            "{f} differs between two runs"
        );
    }
    assert!(!a.path().join("timeseries.csv").exists());
}

#[test]
fn progress_goes_to_stderr_only_and_quiet_silences_it() {
    let dir = tempfile::tempdir().unwrap();
    let shown = quickstart(dir.path(), 2000, &["--progress", "always"]);
    let err = String::from_utf8_lossy(&shown.stderr);
    assert!(err.contains("requests done"), "{err}");
    assert!(!String::from_utf8_lossy(&shown.stdout).contains("requests done"));
    // Not a terminal: plain lines, one per 10 s of wall time (this run takes less: one),
    // no cursor movement, and rates a person can read (whole requests per second from 10 up).
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("requests done"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    let rate = lines[0].rsplit(", ").next().unwrap();
    assert!(
        rate.ends_with(" requests/s")
            && rate
                .trim_end_matches(" requests/s")
                .parse::<f64>()
                .is_ok_and(|r| r < 10.0 || r.fract() == 0.0),
        "{rate}"
    );
    // Not a terminal: auto shows nothing.
    let auto = quickstart(dir.path(), 2000, &[]);
    let err = String::from_utf8_lossy(&auto.stderr);
    assert!(!err.contains("requests done"), "{err}");
    assert!(err.contains("ticks in"), "{err}");
    // One request is one (it read "1 requests").
    let one = quickstart(dir.path(), 1, &[]);
    let err = String::from_utf8_lossy(&one.stderr);
    assert!(err.contains("servesim: 1 request, "), "{err}");
    // A run of no tick has no time per tick (the set-up read "6096853 ns per tick").
    let none = quickstart(dir.path(), 20, &["--set", "horizon_s=0.000001"]);
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(
        err.contains(" 0 ticks in ") && !err.contains("per tick"),
        "{err}"
    );
    let quiet = quickstart(dir.path(), 2000, &["--quiet", "--progress", "always"]);
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
    assert_eq!(shown.stdout, quiet.stdout);
}

/// The time of request `id`'s `ph` event named `name` in a timeline's events.
fn of_id(events: &[serde_json::Value], ph: &str, name: &str, id: u64) -> Option<u64> {
    events
        .iter()
        .find(|e| e["ph"] == ph && e["name"] == name && e["id"] == id)
        .and_then(|e| e["ts"].as_u64())
}

#[test]
fn the_timeline_holds_every_step_and_request_and_respects_its_bounds() {
    let dir = tempfile::tempdir().unwrap();
    quickstart(dir.path(), 200, &["--trace", "timeline"]);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("timeline.json")).unwrap())
            .expect("timeline.json is JSON");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let of = |ph: &'static str| events.iter().filter(move |e| e["ph"] == ph);
    let steps: u64 = summary["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["steps"].as_u64().unwrap())
        .sum();
    assert_eq!(of("X").count() as u64, steps, "one slice per step");
    assert_eq!(of("C").count() as u64, steps, "one counter sample per step");
    // Slices on one instance track never overlap (one step at a time without pipelining).
    for tid in 0..2 {
        let mut spans: Vec<(u64, u64)> = of("X")
            .filter(|e| e["tid"] == tid)
            .map(|e| (e["ts"].as_u64().unwrap(), e["dur"].as_u64().unwrap()))
            .collect();
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
    }
    // Every request: one span from arrival to completion, matching requests.csv.
    let rows = read_rows(&dir.path().join("requests.csv"));
    let begins: Vec<_> = of("b")
        .filter(|e| e["name"].as_str().unwrap().starts_with("request "))
        .collect();
    assert_eq!(begins.len(), rows.len());
    for r in &rows {
        let id = r.u64("request_id");
        let b = begins.iter().find(|e| e["id"] == id).unwrap();
        assert_eq!(b["ts"].as_u64().unwrap(), r.u64("arrival_us"));
        let end = of("e")
            .find(|e| e["id"] == id && e["name"] == format!("request {id}"))
            .unwrap();
        assert_eq!(end["ts"].as_u64().unwrap(), r.u64("completion_us"));
        // The parts of its first token's wait tile it: to the instance, waiting, and a
        // prefill that starts when it was scheduled (requests.csv's scheduling delay).
        let at = |ph: &str, name: &str| {
            of_id(events, ph, name, id).unwrap_or_else(|| panic!("{name} of {id}"))
        };
        let arrival = r.u64("arrival_us");
        assert_eq!(at("b", "to the instance"), arrival);
        assert_eq!(at("e", "to the instance"), at("b", "waiting"));
        assert_eq!(at("e", "waiting"), at("b", "prefill"));
        assert_eq!(at("b", "prefill"), arrival + r.us("scheduling_delay_ms"));
        assert_eq!(at("e", "prefill"), at("e", "queued + prefill"));
        assert!(at("b", "to the instance") <= at("e", "to the instance"));
    }

    // A window and a sample rate bound the file.
    let small = tempfile::tempdir().unwrap();
    let sampled = quickstart(
        small.path(),
        200,
        &[
            "--trace",
            "timeline",
            "--trace-window",
            "2..4",
            "--trace-sample",
            "0.25",
        ],
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(small.path().join("timeline.json")).unwrap())
            .unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let xs: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(!xs.is_empty());
    for e in &xs {
        let (ts, dur) = (e["ts"].as_u64().unwrap(), e["dur"].as_u64().unwrap());
        assert!(ts <= 4_000_000 && ts + dur >= 2_000_000, "{e}");
    }
    let requests = events
        .iter()
        .filter(|e| e["ph"] == "b" && e["name"].as_str().unwrap().starts_with("request "))
        .count();
    assert!(
        requests > 0 && requests < 20,
        "{requests} of ~24 in the window, a quarter kept"
    );
    let none = "the timeline's request sample drew none";
    assert!(!String::from_utf8_lossy(&sampled.stderr).contains(none));
    // A sample so small it draws no request says so (the file holds the steps only).
    let empty = tempfile::tempdir().unwrap();
    let out = quickstart(
        empty.path(),
        200,
        &["--trace", "timeline", "--trace-sample", "1e-300"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{none} of the 200 requests in its window")),
        "{stderr}"
    );
    // The flag the user typed is named, not the field it sets. A negative START reached clap
    // as a flag ("unexpected argument '-1' found").
    let window = "START and END must be simulated seconds with 0 ≤ START < END";
    let fraction = "must be a fraction in (0, 1]";
    for (flags, said) in [
        (
            &["--trace-window", "5..2"][..],
            format!("--trace-window 5..2: {window}"),
        ),
        (
            &["--trace-window", "-1..2"],
            format!("--trace-window -1..2: {window}"),
        ),
        (
            &["--trace", "timeline", "--trace-sample", "0"],
            format!("--trace-sample 0: {fraction}"),
        ),
        (
            &["--trace", "timeline", "--trace-sample", "NaN"],
            format!("--trace-sample NaN: {fraction}"),
        ),
        (
            &["--trace", "timeline", "--trace-sample", "1.5"],
            format!("--trace-sample 1.5: {fraction}"),
        ),
    ] {
        let bad = servesim(
            &[
                &["run", "scenarios/quickstart.ron"][..],
                flags,
                &["--out", small.path().to_str().unwrap()],
            ]
            .concat(),
        );
        assert_eq!(bad.status.code(), Some(2));
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains(&said), "{err}");
    }
    // A window or a sample without a timeline would be ignored: refused, with the fix.
    for flag in [["--trace-window", "2..4"], ["--trace-sample", "0.5"]] {
        let unused = tempfile::tempdir().unwrap();
        let bad = servesim(
            &[
                &["run", "scenarios/quickstart.ron"][..],
                &flag[..],
                &["--out", unused.path().to_str().unwrap()][..],
            ]
            .concat(),
        );
        assert_eq!(bad.status.code(), Some(2));
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            err.contains(&format!(
                "{} shapes timeline.json, which this run does not write: add --trace timeline",
                flag[0]
            )),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(unused.path()).unwrap().count(), 0);
    }
}

/// Runs `servesim sweep` with `extra` arguments into `out`.
fn sweep(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "sweep",
        "scenarios/quickstart.ron",
        "--set",
        "workload.num_requests=150",
        "--vary",
        r#"policies.routing=["round_robin","least_loaded"]"#,
        "--vary",
        "workload.clients[0].rate_per_s=[6.0,18.0]",
        "--out",
        out.to_str().unwrap(),
        "--progress",
        "never",
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

#[test]
fn a_sweep_row_is_what_a_single_run_of_that_point_gives() {
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(dir.path(), &["--jobs", "2"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 5, "{table}");
    let rows = read_rows(&dir.path().join("sweep.csv"));
    assert_eq!(rows.len(), 4);
    let point = &rows[3];
    assert_eq!(point.str("policies.routing"), "least_loaded");
    assert_eq!(point.str("workload.clients[0].rate_per_s"), "18.0");
    assert_eq!(point.str("status"), "ok");
    // The same point run on its own.
    let single = tempfile::tempdir().unwrap();
    quickstart(
        single.path(),
        150,
        &[
            "--set",
            r#"policies.routing="least_loaded""#,
            "--set",
            "workload.clients[0].rate_per_s=18.0",
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(single.path().join("summary.json")).unwrap())
            .unwrap();
    for (col, pointer) in [
        ("requests.completed", "/requests/completed"),
        ("ttft_ms.p99", "/ttft_ms/p99"),
        ("e2e_ms.mean", "/e2e_ms/mean"),
        (
            "throughput.output_tokens_per_s",
            "/throughput/output_tokens_per_s",
        ),
        ("ticks", "/ticks"),
    ] {
        // serde_json reads floats to within an ulp, so compare numbers, not text.
        let (swept, single): (f64, f64) = (
            point.str(col).parse().unwrap(),
            summary.pointer(pointer).unwrap().as_f64().unwrap(),
        );
        assert!(
            (swept - single).abs() <= single.abs() * 1e-14,
            "{col}: {swept} vs {single}"
        );
    }
    // Every metric column is filled for a good point, but the fitness (no weights given), the
    // P/D columns (no decode instances), the energy columns (no energy block), the results of
    // systems of one's own (none here) and the SLO's attainment and goodput (no target
    // declared).
    assert!(
        point.0.iter().all(|(k, v)| !v.is_empty()
            || k == "fitness"
            || k == "extras"
            || k == "slo.attainment"
            || k == "slo.goodput_per_s"
            || k.starts_with("disaggregation.")
            || k.starts_with("energy.")),
        "{point:?}"
    );
}

#[test]
fn sweeps_are_deterministic_and_shards_merge_into_the_whole() {
    let (whole, one_job, s0, s1, merged) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let full = sweep(whole.path(), &["--jobs", "2"]);
    sweep(one_job.path(), &["--jobs", "1"]);
    let csv = |d: &Path| std::fs::read(d.join("sweep.csv")).unwrap();
    assert_eq!(csv(whole.path()), csv(one_job.path()));
    sweep(s0.path(), &["--shard", "0/2"]);
    sweep(s1.path(), &["--shard", "1/2"]);
    assert_eq!(read_rows(&s0.path().join("sweep.csv")).len(), 2);
    // A missing shard is refused.
    let lone = servesim(&[
        "merge",
        s0.path().to_str().unwrap(),
        "--out",
        merged.path().to_str().unwrap(),
    ]);
    assert_eq!(lone.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&lone.stderr).contains("missing shards: 1/2"));
    let m = ok(&[
        "merge",
        s1.path().to_str().unwrap(),
        s0.path().to_str().unwrap(),
        "--out",
        merged.path().to_str().unwrap(),
    ]);
    assert_eq!(csv(merged.path()), csv(whole.path()));
    assert_eq!(
        std::fs::read(merged.path().join("sweep.json")).unwrap(),
        std::fs::read(whole.path().join("sweep.json")).unwrap()
    );
    assert_eq!(m.stdout, full.stdout, "the same comparison table");
    // The whole sweep beside one of its shards, and a directory that is not there.
    let gone = merged.path().join("gone");
    for (dirs, said) in [
        (
            [whole.path(), s1.path()],
            format!(
                "error: {} holds a whole sweep (merged, or run without --shard), not one of the shards: merge only the shards",
                whole.path().display()
            ),
        ),
        (
            [s0.path(), gone.as_path()],
            format!(
                "error: {} is not a directory: give the --out of each `servesim sweep --shard` or `servesim plan --shard`",
                gone.display()
            ),
        ),
    ] {
        let out = servesim(&[
            "merge",
            dirs[0].to_str().unwrap(),
            dirs[1].to_str().unwrap(),
            "--out",
            merged.path().join("again").to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end(), said);
    }
}

#[test]
fn a_sweep_with_a_bad_value_reports_every_problem_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let out = servesim(&[
        "sweep",
        "scenarios/quickstart.ron",
        "--vary",
        r#"policies.routing=["round_robin","no_such_router"]"#,
        "--vary",
        "workload.clients[0].rate_per_s=[6.0,-1.0]",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no_such_router"), "{err}");
    assert!(err.contains("rate_per_s"), "{err}");
    assert!(!dir.path().join("sweep.csv").exists());
}

#[test]
fn the_report_is_self_contained_and_overlays_several_runs() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    quickstart(a.path(), 300, &[]);
    quickstart(
        b.path(),
        300,
        &["--set", r#"policies.routing="round_robin""#],
    );
    let page = a.path().join("both.html");
    ok(&[
        "report",
        a.path().to_str().unwrap(),
        b.path().to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    // Nothing to fetch: no external scripts, styles, images or fonts.
    for needle in ["<link", " src=", "http://", "https://", "@import", "url("] {
        assert!(!html.contains(needle), "the page references {needle}");
    }
    // 6 latency + 6 over-time charts, and 2 per-instance charts for each run.
    assert_eq!(html.matches(r#"<svg class="chart"#).count(), 16);
    // Each CDF has one line per run.
    let ttft_cdf = html
        .split("TTFT: CDF")
        .last()
        .unwrap()
        .split("</svg>")
        .next()
        .unwrap();
    assert_eq!(ttft_cdf.matches(r#"class="series""#).count(), 2);
    // The summary table shows both runs' numbers as summary.json has them.
    for d in [a.path(), b.path()] {
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
        let p99 = format!("{:.3}", s["ttft_ms"]["p99"].as_f64().unwrap());
        assert!(html.contains(&format!("<td>{p99}</td>")), "TTFT p99 {p99}");
    }
    // A directory without results is an error that says so.
    let empty = tempfile::tempdir().unwrap();
    let out = servesim(&["report", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "bad input");
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no results"));
    assert!(!empty.path().join("report.html").exists());
}

/// Chromium from the distribution's packages (`apt-get install chromium`), or
/// `SERVESIM_CHROMIUM`.
pub(crate) fn chromium() -> Option<PathBuf> {
    std::env::var_os("SERVESIM_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            [
                "/usr/bin/chromium",
                "/usr/bin/chromium-browser",
                "/usr/bin/google-chrome",
            ]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
        })
}

pub(crate) fn headless(browser: &Path, profile: &Path, args: &[&str]) -> Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium starts")
}

#[test]
fn the_report_renders_in_a_real_browser_without_script_errors() {
    let Some(browser) = chromium() else {
        // .ci/run installs Chromium and sets SERVESIM_REQUIRE_BROWSER, so CI cannot skip.
        assert!(
            std::env::var_os("SERVESIM_REQUIRE_BROWSER").is_none(),
            "no Chromium found: apt-get install chromium (or set SERVESIM_CHROMIUM)"
        );
        eprintln!("skipped: no Chromium (apt-get install chromium to run this test)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    quickstart(dir.path(), 400, &["--report"]);
    let page = format!("file://{}", dir.path().join("report.html").display());
    let profile = tempfile::tempdir().unwrap();
    // The DOM after the page's scripts ran.
    let dom = headless(
        &browser,
        profile.path(),
        &["--virtual-time-budget=2000", "--dump-dom", &page],
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let root_tag = dom.split("<head>").next().unwrap_or("");
    assert!(
        root_tag.contains(r#"data-ready="1""#),
        "script did not finish: {root_tag}"
    );
    assert!(
        !root_tag.contains("data-script-errors"),
        "script errors: {root_tag}"
    );
    assert!(root_tag.contains(r#"data-charts="14""#), "{root_tag}");
    assert!(dom.matches(r#"class="series""#).count() >= 12);
    // A screenshot that is not blank: many colours, a good share of non-white pixels.
    let shot = profile.path().join("shot.png");
    let out = headless(
        &browser,
        profile.path(),
        &[
            "--window-size=1280,1600",
            &format!("--screenshot={}", shot.display()),
            &page,
        ],
    );
    assert!(shot.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let mut colours: Vec<[u8; 3]> = pixels.iter().map(|p| [p[0], p[1], p[2]]).collect();
    let inked = colours
        .iter()
        .filter(|c| c.iter().any(|&v| v < 200))
        .count();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() > 50, "{} colours", colours.len());
    assert!(
        inked * 100 > pixels.len() * 2,
        "{inked} of {} pixels drawn",
        pixels.len()
    );
    // The chart colour of the first run is on screen.
    assert!(
        pixels.iter().any(|p| p[..3] == [0x00, 0x72, 0xB2]),
        "no run-coloured pixel"
    );
}

#[test]
fn a_point_that_fails_at_run_time_is_a_row_with_its_error_the_sweep_goes_on_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = servesim(&[
        "sweep",
        "scenarios/quickstart.ron",
        "--set",
        "workload.num_requests=3000",
        "--vary",
        "limits.max_in_flight=[2,100000]",
        "--out",
        dir.path().to_str().unwrap(),
        "--keep-outputs",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: 1 of 2 runs failed")
            && err.contains("point 0 (replica 0): ")
            && err.contains("above limits.max_in_flight = 2"),
        "{err}"
    );
    let rows = read_rows(&dir.path().join("sweep.csv"));
    assert!(
        rows[0]
            .str("status")
            .contains("above limits.max_in_flight = 2")
    );
    assert_eq!(rows[0].str("requests.completed"), "");
    assert_eq!(rows[1].str("status"), "ok");
    assert_eq!(rows[1].str("requests.completed"), "3000");
    // --keep-outputs: the good point's results, nothing of the failed one.
    assert!(dir.path().join("point-0001/requests.csv").exists());
    assert!(!dir.path().join("point-0000/requests.csv").exists());
}

#[test]
fn the_scenario_file_turns_on_the_report_and_a_bounded_timeline() {
    let dir = tempfile::tempdir().unwrap();
    quickstart(
        dir.path(),
        200,
        &[
            "--set",
            "outputs.report_html=true",
            "--set",
            "outputs.timeline_json=true",
            "--set",
            "outputs.timeline_window_s=(1.0,2.0)",
            "--set",
            "outputs.timeseries_csv=false",
        ],
    );
    assert!(dir.path().join("report.html").exists());
    assert!(!dir.path().join("timeseries.csv").exists());
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("timeline.json")).unwrap()).unwrap();
    let xs: Vec<_> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert!(!xs.is_empty());
    assert!(xs.iter().all(|e| {
        let ts = e["ts"].as_u64().unwrap();
        ts <= 2_000_000 && ts + e["dur"].as_u64().unwrap() >= 1_000_000
    }));
}

/// A run with `requests_csv` off leaves the earlier run's `requests.csv` in place (and says
/// so); the report used to draw that file's latencies under the later run's summary.
#[test]
fn the_report_refuses_a_summary_and_requests_of_different_runs() {
    let dir = tempfile::tempdir().unwrap();
    quickstart(dir.path(), 200, &[]);
    quickstart(dir.path(), 100, &["--set", "outputs.requests_csv=false"]);
    let out = servesim(&["report", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let d = dir.path().display();
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!(
            "error: {d}/requests.csv holds 200 requests (200 completed) and {d}/summary.json counts 100 injected (100 completed): they are not one run's results"
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("report.html").exists());
    // The same with the time series.
    quickstart(dir.path(), 100, &[]);
    quickstart(dir.path(), 50, &["--set", "outputs.timeseries_csv=false"]);
    let out = servesim(&["report", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!(
            "error: {d}/timeseries.csv counts 100 completed requests and {d}/summary.json counts 50 injected (50 completed): they are not one run's results"
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `run --report` draws only the files the run wrote.
    quickstart(
        dir.path(),
        30,
        &["--report", "--set", "outputs.timeseries_csv=false"],
    );
    assert!(dir.path().join("report.html").exists());
    // One run's files agree.
    quickstart(dir.path(), 100, &[]);
    ok(&["report", dir.path().to_str().unwrap()]);
}
