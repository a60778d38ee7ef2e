//! `servesim report`: one self-contained `report.html` from one or more output directories
//! (their `summary.json`, `requests.csv` and `timeseries.csv`). The page needs no network:
//! charts are inline SVG drawn here, and a few lines of script add legend toggles and a
//! cursor read-out. Several directories are overlaid (distributions, time series) and put
//! side by side (tables, per-instance charts).

pub mod chart;
pub mod dist;
pub mod many;
mod page;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use chart::{BarChart, LineChart, Series, colour, esc, thin};
use dist::{Dist, EXACT_CAP};
pub use dist::{Requests, nearest_rank};
pub use page::ReportError;
use page::{page, read_err, read_err_plain};

/// Points per CDF line and per time-series line: enough for a 560-pixel-wide chart.
const CDF_POINTS: usize = 400;
const SERIES_POINTS: usize = 1200;
/// Per-instance lines drawn per chart (the rest are summarised by the cluster charts).
const MAX_INSTANCE_LINES: usize = 16;

/// One output directory's results.
#[derive(Debug, Default)]
pub struct Run {
    pub name: String,
    pub summary: Option<Value>,
    pub requests: Option<Requests>,
    pub samples: Option<Samples>,
}

/// What `timeseries.csv` says: cluster rows and per-instance rows.
#[derive(Debug, Default)]
pub struct Samples {
    /// (time s, waiting, in flight, KV used fraction, decode tokens/s, completions/s, up).
    pub cluster: Vec<[f64; 7]>,
    /// Per instance (label): (time s, waiting, KV used fraction).
    pub instances: BTreeMap<u32, (String, Vec<[f64; 3]>)>,
    /// Requests the cluster rows count as completed, over the whole run.
    pub completed: f64,
}

/// Column positions by name, so files with extra or reordered columns still read.
fn columns(
    path: &Path,
    headers: &csv::StringRecord,
    want: &[&str],
) -> Result<Vec<usize>, ReportError> {
    want.iter()
        .map(|w| {
            headers.iter().position(|h| h == *w).ok_or_else(|| {
                read_err(
                    path,
                    format!("no `{w}` column (is it a servesim result file?)"),
                )
            })
        })
        .collect()
}

/// The cells `pick` (indices into `names`, found at `cols`) of `record`, read from line `line`
/// of `path`: an empty cell is a value the run did not have (NaN); anything else must be a
/// finite number ≥ 0, as servesim writes them, so a hand-edited or foreign file is refused
/// where it is wrong instead of drawn as if it were right.
fn numbers<const N: usize>(
    path: &Path,
    line: u64,
    record: &csv::StringRecord,
    (cols, names): (&[usize], &[&str]),
    pick: [usize; N],
) -> Result<[f64; N], ReportError> {
    let mut out = [f64::NAN; N];
    for (k, &i) in pick.iter().enumerate() {
        let cell = record.get(cols[i]).unwrap_or("");
        if cell.is_empty() {
            continue;
        }
        match cell.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => out[k] = v,
            _ => {
                return Err(read_err(
                    path,
                    format!(
                        "line {line}, column `{}`: expected a number ≥ 0, got \"{}\" (is it a servesim result file?)",
                        names[i],
                        cell.chars().take(40).collect::<String>()
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// The `state` values servesim writes in `requests.csv`.
const STATES: [&str; 8] = crate::request::FinalState::NAMES;

fn read_requests(path: &Path) -> Result<Requests, ReportError> {
    let mut reader = csv::Reader::from_reader(
        crate::input::open_lines(path).map_err(|e| read_err_plain(path, e))?,
    );
    let headers = reader.headers().map_err(|e| read_err(path, e))?.clone();
    const NAMES: [&str; 5] = ["state", "ttft_ms", "e2e_ms", "mean_itl_ms", "completion_us"];
    let c = columns(path, &headers, &NAMES)?;
    // Streamed: memory is bounded however long the file (see `dist`).
    let mut r = Requests::new(EXACT_CAP);
    let mut record = csv::StringRecord::new();
    while reader
        .read_record(&mut record)
        .map_err(|e| read_err(path, e))?
    {
        r.rows += 1;
        let line = record.position().map_or(0, csv::Position::line);
        let state = record.get(c[0]).unwrap_or("");
        if state != "completed" {
            if !STATES.contains(&state) {
                return Err(read_err(
                    path,
                    format!(
                        "line {line}, column `state`: no state \"{}\" (servesim writes {})",
                        state.chars().take(40).collect::<String>(),
                        STATES.join(", ")
                    ),
                ));
            }
            continue;
        }
        let [ttft, e2e, itl, done] = numbers(path, line, &record, (&c, &NAMES), [1, 2, 3, 4])?;
        r.add(ttft, e2e, itl, done / 1e6);
    }
    r.finish();
    Ok(r)
}

fn read_samples(path: &Path) -> Result<Samples, ReportError> {
    let mut reader = csv::Reader::from_reader(
        crate::input::open_lines(path).map_err(|e| read_err_plain(path, e))?,
    );
    let headers = reader.headers().map_err(|e| read_err(path, e))?.clone();
    const NAMES: [&str; 10] = [
        "time_s",
        "instance",
        "group",
        "waiting",
        "in_flight",
        "kv_used_blocks",
        "kv_total_blocks",
        "decode_tokens_per_s",
        "completed",
        "instances_up",
    ];
    let c = columns(path, &headers, &NAMES)?;
    let mut s = Samples::default();
    let mut record = csv::StringRecord::new();
    let mut last_t = 0.0;
    while reader
        .read_record(&mut record)
        .map_err(|e| read_err(path, e))?
    {
        let line = record.position().map_or(0, csv::Position::line);
        let [
            t,
            waiting,
            in_flight,
            kv_used,
            kv_total,
            tokens_per_s,
            completed,
            up,
        ] = numbers(path, line, &record, (&c, &NAMES), [0, 3, 4, 5, 6, 7, 8, 9])?;
        let kv = if kv_total > 0.0 {
            kv_used / kv_total
        } else {
            0.0
        };
        match record.get(c[1]).unwrap_or("") {
            "all" => {
                let span = t - last_t;
                let done_per_s = if span > 0.0 { completed / span } else { 0.0 };
                last_t = t;
                if completed.is_finite() {
                    s.completed += completed;
                }
                s.cluster
                    .push([t, waiting, in_flight, kv, tokens_per_s, done_per_s, up]);
            }
            i => {
                let Ok(i) = i.parse::<u32>() else {
                    return Err(read_err(
                        path,
                        format!(
                            "line {line}, column `instance`: expected `all` or an instance number, got \"{}\"",
                            i.chars().take(40).collect::<String>()
                        ),
                    ));
                };
                let group = record.get(c[2]).unwrap_or("");
                s.instances
                    .entry(i)
                    .or_insert_with(|| (format!("{i} {group}"), Vec::new()))
                    .1
                    .push([t, waiting, kv]);
            }
        }
    }
    Ok(s)
}

impl Run {
    /// Reads what `dir` holds; an error when it holds no result file or one is unreadable.
    pub fn load(dir: &Path, name: String) -> Result<Run, ReportError> {
        Run::load_files(dir, name, |_| true)
    }

    /// [`Run::load`] of the result files named `wanted` only.
    fn load_files(
        dir: &Path,
        name: String,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Run, ReportError> {
        let there = |file: &str| wanted(file) && dir.join(file).exists();
        let mut run = Run {
            name,
            ..Default::default()
        };
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(read_err(dir, "it is not a directory (give a run's --out)")),
            Err(e) => return Err(read_err(dir, e)),
        }
        let summary_path = dir.join("summary.json");
        if there("summary.json") {
            let text = crate::input::read_text(&summary_path)
                .map_err(|e| read_err_plain(&summary_path, e))?;
            let value = serde_json::from_str(&text).map_err(|e| read_err(&summary_path, e))?;
            check_summary(&summary_path, &value)?;
            run.summary = Some(value);
        }
        let requests = dir.join("requests.csv");
        if there("requests.csv") {
            run.requests = Some(read_requests(&requests)?);
        }
        let samples = dir.join("timeseries.csv");
        if there("timeseries.csv") {
            run.samples = Some(read_samples(&samples)?);
        }
        // A run with an output off leaves an earlier run's file of that name in place.
        if let Some(summary) = &run.summary {
            let count = |what: &str| summary.pointer(&format!("/requests/{what}"))?.as_u64();
            let said = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
            let (injected, completed) = (count("injected"), count("completed"));
            let counts = format!(
                "{} counts {} injected ({} completed)",
                summary_path.display(),
                said(injected),
                said(completed)
            );
            if let Some(r) = &run.requests
                && (injected.is_some_and(|n| n != r.rows)
                    || completed.is_some_and(|n| n != r.completed as u64))
            {
                return Err(ReportError::NotOneRun(format!(
                    "{} holds {} requests ({} completed) and {counts}",
                    requests.display(),
                    r.rows,
                    r.completed,
                )));
            }
            if let Some(t) = &run.samples
                && completed.is_some_and(|n| n as f64 != t.completed)
            {
                return Err(ReportError::NotOneRun(format!(
                    "{} counts {} completed requests and {counts}",
                    samples.display(),
                    t.completed,
                )));
            }
        }
        if run.summary.is_none() && run.requests.is_none() && run.samples.is_none() {
            return Err(ReportError::NoResults(dir.display().to_string()));
        }
        Ok(run)
    }

    fn get(&self, pointer: &str) -> Option<&Value> {
        self.summary.as_ref()?.pointer(pointer)
    }

    fn percentile(&self, metric: &str, p: &str) -> f64 {
        if let Some(v) = self
            .get(&format!("/{metric}_ms/{p}"))
            .and_then(Value::as_f64)
        {
            return v;
        }
        let Some(r) = &self.requests else {
            return f64::NAN;
        };
        let q: f64 = p.trim_start_matches('p').parse().unwrap_or(50.0) / 100.0;
        r.metric(metric).quantile(q)
    }
}

/// Names for the runs: directory names, or whole paths where two names would be the same.
pub fn run_names(dirs: &[PathBuf]) -> Vec<String> {
    let short: Vec<String> = dirs
        .iter()
        .map(|d| {
            d.file_name().map_or_else(
                || d.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .collect();
    short
        .iter()
        .zip(dirs)
        .map(|(s, d)| {
            if short.iter().filter(|x| *x == s).count() > 1 {
                d.display().to_string()
            } else {
                s.clone()
            }
        })
        .collect()
}

/// Loads every directory and renders the page. One sweep, plan or capacity directory gets
/// its own page ([`many`]); run directories are overlaid.
pub fn report(dirs: &[PathBuf]) -> Result<String, ReportError> {
    for d in dirs {
        if let Some(kind) = many::Kind::of(d) {
            if let [one] = dirs {
                return many::report(one, kind);
            }
            return Err(ReportError::Mixed {
                dir: d.display().to_string(),
                kind: kind.name(),
            });
        }
    }
    let runs = dirs
        .iter()
        .zip(run_names(dirs))
        .map(|(d, n)| Run::load(d, n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(render(&runs))
}

/// The page of the run that has just written the result files `written` into `dir`
/// (`run --report`): files an earlier run left there are not its own.
pub fn report_of_run(dir: &Path, written: &[String]) -> Result<String, ReportError> {
    let name = run_names(&[dir.to_path_buf()]).remove(0);
    let run = Run::load_files(dir, name, |file| written.iter().any(|w| w == file))?;
    Ok(render(&[run]))
}

/// CDF points of sorted values: `CDF_POINTS` quantiles.
fn cdf(values: &Dist) -> Vec<(f64, f64)> {
    if values.is_empty() {
        return Vec::new();
    }
    let k = CDF_POINTS.min(values.len());
    (0..=k)
        .map(|i| {
            let q = i as f64 / k as f64;
            (values.quantile(q), q)
        })
        .collect()
}

/// Value formatting for tables: integers as is, others with 3 significant decimals.
fn fmt_value(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x.abs() >= 100.0 {
                format!("{x:.1}")
            } else {
                format!("{x:.3}")
            }
        }
        Value::String(s) => esc(s),
        Value::Null => "n/a".into(),
        other => esc(&other.to_string()),
    }
}

const SUMMARY_ROWS: [(&str, &str); 32] = [
    ("scenario", "/scenario"),
    ("seed", "/seed"),
    ("requests injected", "/requests/injected"),
    ("completed", "/requests/completed"),
    ("rejected", "/requests/rejected"),
    ("timed out", "/requests/timed_out"),
    ("dropped", "/requests/dropped"),
    ("simulated time (s)", "/sim_duration_s"),
    ("requests/s", "/throughput/requests_per_s"),
    ("output tokens/s", "/throughput/output_tokens_per_s"),
    ("TTFT mean (ms)", "/ttft_ms/mean"),
    ("TTFT p50 (ms)", "/ttft_ms/p50"),
    ("TTFT p99 (ms)", "/ttft_ms/p99"),
    (
        "TTFT mean: to the instance (ms)",
        "/ttft_parts_ms/to_the_instance",
    ),
    ("TTFT mean: waiting (ms)", "/ttft_parts_ms/waiting"),
    ("TTFT mean: prefill (ms)", "/ttft_parts_ms/prefill"),
    ("TTFT mean: token out (ms)", "/ttft_parts_ms/token_out"),
    ("ITL p50 (ms)", "/itl_ms/p50"),
    ("ITL p99 (ms)", "/itl_ms/p99"),
    ("E2E p50 (ms)", "/e2e_ms/p50"),
    ("E2E p99 (ms)", "/e2e_ms/p99"),
    ("SLO attainment", "/slo/attainment"),
    ("goodput (req/s)", "/slo/goodput_per_s"),
    ("preemptions", "/preemptions"),
    ("KV hit rate", "/kv/hit_rate"),
    ("GPU-hours", "/cost/gpu_hours"),
    ("cost", "/cost/total"),
    ("energy, facility kWh", "/energy/facility_kwh"),
    ("mean GPU power (W)", "/energy/mean_power_w"),
    ("J per output token", "/energy/joules_per_output_token"),
    ("electricity cost", "/energy/electricity_cost"),
    ("fitness", "/fitness"),
];

/// What the page reads of a `summary.json` must be as servesim writes it: an object with its
/// `requests` counts, whole numbers where it counts, numbers (or null, for a metric the run
/// had no sample of) elsewhere; a field the page does not read is not looked at.
fn check_summary(path: &Path, summary: &Value) -> Result<(), ReportError> {
    if !summary.get("requests").is_some_and(Value::is_object) {
        return Err(read_err(
            path,
            "no `requests` object: is it a servesim summary.json?",
        ));
    }
    let counts = ["/seed", "/preemptions"];
    for (_, pointer) in SUMMARY_ROWS {
        let Some(v) = summary.pointer(pointer) else {
            continue;
        };
        let (fine, expected) = match pointer {
            "/scenario" => (v.is_string(), "a name"),
            _ if pointer.starts_with("/requests/") || counts.contains(&pointer) => {
                (v.is_u64(), "a whole number ≥ 0")
            }
            _ => (
                v.is_null() || v.as_f64().is_some_and(f64::is_finite),
                "a number",
            ),
        };
        if !fine {
            let got: String = v.to_string().chars().take(40).collect();
            return Err(read_err(
                path,
                format!(
                    "`{}`: expected {expected}, got {got} (is it a servesim summary.json?)",
                    pointer[1..].replace('/', ".")
                ),
            ));
        }
    }
    Ok(())
}

fn summary_table(runs: &[Run]) -> String {
    let mut s = String::from(r#"<table class="summary"><thead><tr><th></th>"#);
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(
            s,
            r#"<th><span class="swatch" style="background:{}"></span>{}</th>"#,
            colour(i),
            esc(&r.name)
        );
    }
    s.push_str("</tr></thead><tbody>");
    for (label, pointer) in SUMMARY_ROWS {
        if runs.iter().all(|r| r.get(pointer).is_none()) {
            continue;
        }
        let _ = write!(s, "<tr><th>{label}</th>");
        for r in runs {
            let _ = write!(
                s,
                "<td>{}</td>",
                r.get(pointer).map_or("–".into(), fmt_value)
            );
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

fn slice_tables(runs: &[Run], key: &str, title: &str, one: &str) -> String {
    let mut s = String::new();
    for r in runs {
        let Some(rows) = r.get(&format!("/{key}")).and_then(Value::as_array) else {
            continue;
        };
        if rows.is_empty() {
            continue;
        }
        let _ = write!(
            s,
            r#"<table class="slices"><caption>{} — {}</caption><thead><tr><th>{}</th><th>injected</th><th>completed</th><th>rejected</th><th>timed out</th><th>good</th><th>attainment</th><th>TTFT p90 (ms)</th><th>E2E p90 (ms)</th></tr></thead><tbody>"#,
            esc(&r.name),
            title,
            one
        );
        for row in rows {
            let f = |p: &str| row.pointer(p).map_or("–".into(), fmt_value);
            let _ = write!(
                s,
                "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f("/name"),
                f("/injected"),
                f("/completed"),
                f("/rejected"),
                f("/timed_out"),
                f("/good"),
                f("/slo_attainment"),
                f("/ttft_ms/p90"),
                f("/e2e_ms/p90")
            );
        }
        s.push_str("</tbody></table>");
    }
    s
}

/// The gateway's bands of each run that has them (`flow_control`).
fn band_tables(runs: &[Run]) -> String {
    let mut s = String::new();
    for r in runs {
        let Some(rows) = r.get("/flow_control/bands").and_then(Value::as_array) else {
            continue;
        };
        let waited = r
            .get("/flow_control/waiting_s")
            .map_or("–".into(), fmt_value);
        let _ = write!(
            s,
            r#"<table class="slices"><caption>{} — gateway bands (requests waited {waited} s in all)</caption><thead><tr><th>priority</th><th>arrived</th><th>routed</th><th>shed full</th><th>shed expired</th><th>timed out</th><th>left</th><th>peak waiting</th><th>wait p50 (ms)</th><th>wait p99 (ms)</th></tr></thead><tbody>"#,
            esc(&r.name)
        );
        for row in rows {
            let f = |p: &str| row.pointer(p).map_or("–".into(), fmt_value);
            let _ = write!(
                s,
                "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f("/priority"),
                f("/arrived"),
                f("/dispatched"),
                f("/shed_full"),
                f("/shed_expired"),
                f("/timed_out"),
                f("/left"),
                f("/peak_waiting"),
                f("/wait_ms/p50"),
                f("/wait_ms/p99")
            );
        }
        s.push_str("</tbody></table>");
    }
    s
}

fn series(name: &str, i: usize, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.to_string(),
        colour: colour(i),
        points: thin(&points, SERIES_POINTS),
        dashed: false,
        markers: false,
    }
}

/// p50 and p99 TTFT of requests completing in each of [`dist::SLOTS`] windows.
/// Points of a line: (x, y).
type Line = Vec<(f64, f64)>;

fn ttft_over_time(r: &Requests) -> (Line, Line) {
    r.done
        .p50_p99()
        .into_iter()
        .map(|(t, p50, p99)| ((t, p50), (t, p99)))
        .unzip()
}

fn charts(runs: &[Run]) -> (String, String, String) {
    let mut dist = String::new();
    for (metric, title) in [
        ("ttft", "TTFT"),
        ("itl", "ITL (mean per request)"),
        ("e2e", "E2E latency"),
    ] {
        let lines: Vec<Series> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let req = r.requests.as_ref()?;
                Some(series(&r.name, i, cdf(req.metric(metric))))
            })
            .collect();
        // A log axis when the tail is long (p99.9 over 20 × the minimum).
        let spread = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .filter(|x| *x > 0.0)
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
                (lo.min(x), hi.max(x))
            });
        let x_log = spread.1 > 20.0 * spread.0;
        dist.push_str(
            &LineChart {
                title: format!("{title}: CDF"),
                x_label: if x_log { "ms (log scale)" } else { "ms" }.into(),
                y_label: "fraction of completed requests".into(),
                series: lines,
                step: true,
                y_range: Some((0.0, 1.0)),
                x_log,
            }
            .svg(),
        );
    }
    for (metric, title) in [("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E")] {
        let categories = ["p50", "p90", "p99"];
        dist.push_str(
            &BarChart {
                title: format!("{title} percentiles"),
                y_label: "ms".into(),
                categories: categories.iter().map(|c| c.to_string()).collect(),
                bars: runs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        (
                            r.name.clone(),
                            colour(i),
                            categories.iter().map(|p| r.percentile(metric, p)).collect(),
                        )
                    })
                    .collect(),
                legend: false,
            }
            .svg(),
        );
    }

    let mut time = String::new();
    let mut lat = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        if let Some(req) = &r.requests {
            let (p50, p99) = ttft_over_time(req);
            lat.push(series(&format!("{} p50", r.name), i, p50));
            let mut s = series(&format!("{} p99", r.name), i, p99);
            s.dashed = true;
            lat.push(s);
        }
    }
    time.push_str(
        &LineChart {
            title: "TTFT over time (by completion)".into(),
            x_label: "simulated time (s)".into(),
            y_label: "ms".into(),
            series: lat,
            ..Default::default()
        }
        .svg(),
    );
    let cluster = |col: usize| -> Vec<Series> {
        runs.iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let s = r.samples.as_ref()?;
                Some(series(
                    &r.name,
                    i,
                    s.cluster.iter().map(|row| (row[0], row[col])).collect(),
                ))
            })
            .collect()
    };
    for (col, title, y, step, range) in [
        (4, "Output tokens/s", "tokens/s", false, None),
        (5, "Completions/s", "requests/s", false, None),
        (
            1,
            "Queued requests (cluster)",
            "requests waiting",
            true,
            None,
        ),
        (
            3,
            "KV cache used (cluster)",
            "fraction of blocks",
            true,
            Some((0.0, 1.0)),
        ),
        (6, "Instances up", "instances", true, None),
    ] {
        time.push_str(
            &LineChart {
                title: title.into(),
                x_label: "simulated time (s)".into(),
                y_label: y.into(),
                series: cluster(col),
                step,
                y_range: range,
                x_log: false,
            }
            .svg(),
        );
    }

    let mut per_instance = String::new();
    for r in runs {
        let Some(s) = &r.samples else { continue };
        let _ = write!(
            per_instance,
            r#"<div class="run"><h3>{}</h3>"#,
            esc(&r.name)
        );
        let shown = s.instances.len().min(MAX_INSTANCE_LINES);
        for (col, title, y, range) in [
            (1, "Queue depth per instance", "requests waiting", None),
            (
                2,
                "KV usage per instance",
                "fraction of blocks",
                Some((0.0, 1.0)),
            ),
        ] {
            per_instance.push_str(
                &LineChart {
                    title: title.into(),
                    x_label: "simulated time (s)".into(),
                    y_label: y.into(),
                    series: s
                        .instances
                        .values()
                        .take(shown)
                        .enumerate()
                        .map(|(k, (label, rows))| {
                            series(
                                label,
                                k,
                                rows.iter().map(|row| (row[0], row[col])).collect(),
                            )
                        })
                        .collect(),
                    step: true,
                    y_range: range,
                    x_log: false,
                }
                .svg(),
            );
        }
        if s.instances.len() > shown {
            let _ = write!(
                per_instance,
                r#"<p class="note">The first {shown} of {} instances are drawn; the cluster charts above cover all of them.</p>"#,
                s.instances.len()
            );
        }
        per_instance.push_str("</div>");
    }
    (dist, time, per_instance)
}

/// The whole page.
pub fn render(runs: &[Run]) -> String {
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    let (dist, time, per_instance) = charts(runs);
    let mut s = String::new();
    let header = format!(
        r#"<p>{} run{}: {}</p>"#,
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        runs.iter()
            .enumerate()
            .map(|(i, r)| format!(
                r#"<span class="swatch" style="background:{}"></span>{}"#,
                colour(i),
                esc(&r.name)
            ))
            .collect::<Vec<_>>()
            .join(" &nbsp; ")
    );
    let _ = write!(
        s,
        r#"<section id="summary"><h2>Summary</h2>{}</section>"#,
        summary_table(runs)
    );
    let _ = write!(
        s,
        r#"<section id="latency"><h2>Latency</h2><div class="grid">{dist}</div></section>"#
    );
    let _ = write!(
        s,
        r#"<section id="over-time"><h2>Over time</h2><div class="grid">{time}</div></section>"#
    );
    if !per_instance.is_empty() {
        let _ = write!(
            s,
            r#"<section id="instances"><h2>Per instance</h2>{per_instance}</section>"#
        );
    }
    let tenants = slice_tables(runs, "tenants", "tenants", "tenant");
    let classes = slice_tables(runs, "slo_classes", "SLO classes", "SLO class");
    if !(tenants.is_empty() && classes.is_empty()) {
        let _ = write!(
            s,
            r#"<section id="slices"><h2>Tenants and SLO classes</h2>{tenants}{classes}</section>"#
        );
    }
    let bands = band_tables(runs);
    if !bands.is_empty() {
        let _ = write!(
            s,
            r#"<section id="gateway"><h2>Gateway flow control</h2>{bands}</section>"#
        );
    }
    page(&names.join(", "), &header, &s, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_matches_hand_counts() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), 5.0);
        assert_eq!(nearest_rank(&v, 0.9), 9.0);
        assert_eq!(nearest_rank(&v, 0.99), 10.0);
        assert_eq!(nearest_rank(&v, 0.0), 1.0);
        assert!(nearest_rank(&[], 0.5).is_nan());
    }

    #[test]
    fn cdf_runs_from_the_minimum_to_the_maximum() {
        let v = Dist::Exact((1..=1000).map(f64::from).collect());
        let c = cdf(&v);
        assert_eq!(c.first(), Some(&(1.0, 0.0)));
        assert_eq!(c.last(), Some(&(1000.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(c.len(), CDF_POINTS + 1);
    }

    #[test]
    fn run_names_are_unique() {
        let dirs = [
            PathBuf::from("a/out"),
            PathBuf::from("b/out"),
            PathBuf::from("c"),
        ];
        assert_eq!(run_names(&dirs), vec!["a/out", "b/out", "c"]);
    }

    #[test]
    fn ttft_over_time_buckets_by_completion() {
        let mut r = Requests::new(usize::MAX);
        for i in 0..200 {
            let ttft = if i < 100 { 10.0 } else { 50.0 };
            r.add(ttft, f64::NAN, f64::NAN, f64::from(i) / 2.0);
        }
        r.finish();
        let (p50, p99) = ttft_over_time(&r);
        assert_eq!(p50.first().unwrap().1, 10.0);
        assert_eq!(p50.last().unwrap().1, 50.0);
        assert!(p99.iter().all(|p| p.1 == 10.0 || p.1 == 50.0));
    }
}
