//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use servesim::metrics::Summary;
use servesim::policy::Catalog;
use servesim::scenario::Scenario;
use servesim::{RunOptions, Simulation};

/// The repository's root: scenarios, docs and assets are read from it.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Parses scenario text (panics with the rendered error if it is invalid).
pub fn parse(src: &str) -> Scenario {
    let app = servesim::default_app();
    servesim::loader::parse(src, "test.ron", &[], app.world().resource::<Catalog>())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The rendered error of scenario text that must not load (read as `bad.ron`).
pub fn invalid(src: &str) -> String {
    let app = servesim::default_app();
    match servesim::loader::parse(src, "bad.ron", &[], app.world().resource::<Catalog>()) {
        Ok(_) => panic!("accepted: {src}"),
        Err(e) => e.to_string(),
    }
}

/// A chapter of the docs book, `docs/NAME.md`.
pub fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(format!("{name}.md"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of the table row of `docs/NAME.md` that starts with `start`.
pub fn doc_row(name: &str, start: &str) -> Vec<String> {
    doc(name)
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("docs/{name}.md has no row starting `{start}`"))
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// A bundled scenario, `scenarios/NAME.ron`, run with invariants checked.
pub fn run_bundled(name: &str) -> (Summary, Vec<Row>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(format!("{name}.ron"));
    run(&parse(&std::fs::read_to_string(path).unwrap()))
}

/// `x` rounded to a whole number, thousands separated as the docs' tables write them
/// (12,345).
pub fn thousands(x: f64) -> String {
    let r = x.round() as u64;
    if r >= 1000 {
        format!("{},{:03}", r / 1000, r % 1000)
    } else {
        r.to_string()
    }
}

/// A latency distribution's "mean / p99" as the docs' tables write it.
pub fn mean_p99(d: &servesim::metrics::Distribution) -> String {
    format!(
        "{} / {}",
        thousands(d.mean.unwrap()),
        thousands(d.p99.unwrap())
    )
}

/// One `requests.csv` row by column name.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub BTreeMap<String, String>);

impl Row {
    pub fn str(&self, col: &str) -> &str {
        self.0.get(col).unwrap_or_else(|| panic!("no column {col}"))
    }
    pub fn u64(&self, col: &str) -> u64 {
        self.str(col)
            .parse()
            .unwrap_or_else(|_| panic!("{col} = {:?} is not an integer", self.str(col)))
    }
    /// A millisecond column as whole microseconds (the CSV has exactly 3 decimals).
    pub fn us(&self, col: &str) -> u64 {
        let s = self.str(col);
        let (a, b) = s.split_once('.').unwrap_or((s, "0"));
        a.parse::<u64>().unwrap() * 1000 + format!("{b:0<3}")[..3].parse::<u64>().unwrap()
    }
}

pub fn read_rows(path: &Path) -> Vec<Row> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let headers = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            Row(headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect())
        })
        .collect()
}

/// Runs a scenario with invariant checks on every tick; returns the summary and CSV rows
/// sorted by request id.
/// Runs `sc` with `app` (built-ins plus a test's plugins), checking every invariant on
/// every tick.
pub fn run_app_checked(app: servesim::bevy_app::App, sc: &Scenario) -> Summary {
    Simulation::from_app(
        app,
        sc,
        RunOptions {
            check_invariants: true,
            ..Default::default()
        },
    )
    .unwrap()
    .run()
    .unwrap()
}

/// Every Rust file below `dirs`, with its path.
pub fn rust_files(dirs: &[&Path]) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A `ServesimCsv` trace of `rows` (`arrival_us,input_tokens,output_tokens` lines) in a new
/// directory: its path, and the directory (removed when dropped).
pub fn trace_file(rows: &str) -> (PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(
        &trace,
        format!("arrival_us,input_tokens,output_tokens\n{rows}"),
    )
    .unwrap();
    (trace, dir)
}

pub fn run(sc: &Scenario) -> (Summary, Vec<Row>) {
    let (summary, rows, _dir) = run_keeping(sc);
    (summary, rows)
}

/// [`run`], also handing back the output directory (for the run's other files).
pub fn run_keeping(sc: &Scenario) -> (Summary, Vec<Row>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let summary = Simulation::new(
        sc,
        RunOptions {
            check_invariants: true,
            out_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap()
    .run()
    .unwrap();
    let mut rows = read_rows(&dir.path().join("requests.csv"));
    rows.sort_by_key(|r| r.u64("request_id"));
    assert_conserved(&summary, &rows);
    (summary, rows, dir)
}

/// INV-1 on the outputs: one row per injected request, buckets add up.
pub fn assert_conserved(s: &Summary, rows: &[Row]) {
    let r = &s.requests;
    assert_eq!(
        r.injected,
        r.accounted(),
        "summary buckets must add up: {r:?}"
    );
    assert_eq!(
        rows.len() as u64,
        r.injected,
        "one CSV row per injected request"
    );
    let ids: Vec<u64> = rows.iter().map(|x| x.u64("request_id")).collect();
    assert_eq!(
        ids,
        (0..r.injected).collect::<Vec<_>>(),
        "every id exactly once"
    );
    let completed = rows
        .iter()
        .filter(|x| x.str("state") == "completed")
        .count() as u64;
    assert_eq!(completed, r.completed);
    let failed = rows.iter().filter(|x| x.str("state") == "failed").count() as u64;
    assert_eq!(failed, r.failed.unwrap_or(0));
}

/// A model's directory at `dir` as HuggingFace keeps one: the bundled `model`'s config as its
/// `config.json`.
pub fn model_dir(dir: &Path, model: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(
        root().join(format!("assets/models/{model}.json")),
        dir.join("config.json"),
    )
    .unwrap();
}

/// Runs the `servesim` binary with `args` in `cwd`.
pub fn servesim(args: &[&str], cwd: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the binary runs")
}

/// [`servesim`], which must succeed (its stderr is the failure message).
pub fn servesim_ok(args: &[&str], cwd: &Path) -> std::process::Output {
    let out = servesim(args, cwd);
    assert!(
        out.status.success(),
        "servesim {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The stderr of [`servesim_ok`] run in the repository's root (where `scenarios/` is).
pub fn stderr_in_root(args: &[&str]) -> String {
    String::from_utf8(servesim_ok(args, &root()).stderr).unwrap()
}
