//! The commands' arguments and what every command does with them first: `--set`
//! overrides, loading the scenario, announcing a long run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;

use super::progress;
use crate::catalog::Catalog;
use crate::scenario;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario file (RON).
    pub(crate) scenario: PathBuf,
    /// Output directory (default: the scenario's outputs.dir, else ./out).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Override the scenario seed.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_seed)]
    pub(crate) seed: Option<u64>,
    /// Override any field: --set cluster.groups[0].count=4 (value in RON syntax).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
    /// Summary format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
    /// Check every invariant after every tick (slower).
    #[arg(long)]
    pub(crate) check_invariants: bool,
    /// Extra traces: `decisions` writes decisions.csv (one row per routing decision).
    #[arg(long, value_enum)]
    pub(crate) trace: Vec<TraceKind>,
    /// Stop the run after this many seconds of wall time (exit 1; nothing is written,
    /// as for Ctrl-C).
    #[arg(long, allow_negative_numbers = true, value_name = "SECONDS")]
    pub(crate) max_wall_s: Option<f64>,
    /// Also write report.html into the output directory (as `servesim report` would).
    #[arg(long)]
    pub(crate) report: bool,
    /// Only steps and requests overlapping START..END (simulated seconds) go into
    /// timeline.json.
    #[arg(long, value_name = "START..END", allow_hyphen_values = true)]
    pub(crate) trace_window: Option<String>,
    /// Fraction of requests drawn in timeline.json (by request id).
    #[arg(long, allow_negative_numbers = true, value_name = "FRACTION")]
    pub(crate) trace_sample: Option<f64>,
    /// Progress bar on stderr.
    #[arg(long, value_enum, default_value_t = progress::Mode::Auto)]
    pub(crate) progress: progress::Mode,
    /// No progress bar and no run statistics on stderr (warnings and errors still).
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

#[derive(clap::Args)]
pub(crate) struct MergeArgs {
    /// The shards' output directories.
    #[arg(required = true)]
    pub(crate) shards: Vec<PathBuf>,
    /// Where the merged sweep.csv and sweep.json (or a plan's plan.csv, pareto.csv and
    /// plan.json) go.
    #[arg(long, default_value = "sweep")]
    pub(crate) out: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    /// Output directories of earlier runs.
    #[arg(required = true)]
    pub(crate) dirs: Vec<PathBuf>,
    /// Where the page goes (default: DIR/report.html for one directory, ./report.html
    /// for several).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct ValidateArgs {
    /// Scenario file (RON).
    pub(crate) scenario: PathBuf,
    /// Override a field (as for `run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
}

#[derive(clap::Args)]
pub(crate) struct CheckRealArgs {
    /// Scenario describing the server (its workload is replaced by the measured one).
    pub(crate) scenario: PathBuf,
    /// Per-request measurements: a CSV (arrival_s|arrival_ms|arrival_us, input_tokens,
    /// output_tokens, ttft_ms, e2e_ms[, itl_ms][, stage][, state]), a vLLM benchmark JSON or
    /// inference-perf's per_request_lifecycle_metrics.json (its stage summaries beside it
    /// split it by stage).
    pub(crate) measured: PathBuf,
    /// Where check-real.json goes (default: the scenario's outputs.dir).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// The benchmark client's timeout, s: each replayed request is abandoned this long after
    /// it was sent (default: the one the measurement shows, the median age at which its
    /// timed-out requests failed; none if none did).
    #[arg(long, allow_negative_numbers = true, value_name = "SECONDS")]
    pub(crate) timeout_s: Option<f64>,
    /// Override a field of the scenario (as for `run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
    /// The comparison on stdout: a table, or check-real.json's content.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

#[derive(clap::Args)]
pub(crate) struct CalibrateArgs {
    /// Scenario describing the server (model, GPU, TP, limits, KV blocks).
    pub(crate) scenario: PathBuf,
    /// Per-request measurements (as for check-real).
    pub(crate) measured: PathBuf,
    /// Which coefficients to fit.
    #[arg(long, value_enum, default_value_t = crate::fidelity::calibrate::Family::Blackbox)]
    pub(crate) model: crate::fidelity::calibrate::Family,
    /// The instance group whose latency model is fitted.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0, value_parser = parse_index)]
    pub(crate) group: usize,
    /// Most simulations to run.
    #[arg(long, allow_negative_numbers = true, default_value_t = 400, value_parser = parse_index)]
    pub(crate) max_evals: usize,
    /// Override a field of the scenario (as for `run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
    /// The fit on stdout: the coefficients, the line to paste and the held-back error in
    /// words, or all of it as JSON.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

#[derive(clap::Args)]
pub(crate) struct ListArgs {
    /// What to list.
    #[arg(value_enum)]
    pub(crate) what: ListWhat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TraceKind {
    /// decisions.csv: one row per routing decision.
    Decisions,
    /// timeline.json: steps, requests and counters for Perfetto UI / chrome://tracing.
    Timeline,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ListWhat {
    /// Every policy by family (admission, priority, scheduling, routing, autoscale,
    /// scheduler) with its parameters and their defaults.
    Policies,
    /// Batch schedulers only (also under `policies`, family `scheduler`).
    Schedulers,
    /// Bundled models: shape, parameters, weight bytes and the nucleus they sample with.
    Models,
    /// GPU profiles: peaks, memory, power, calibration and node defaults (also `gpus`, as a
    /// group's `gpu` names them).
    #[value(alias = "gpus", alias = "gpu")]
    Hardware,
}

/// `n` and the noun, plural unless `n` is 1: "1 thread", "4 threads".
pub(crate) fn counted(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// The value of `--jobs`: a whole number ≥ 1 (0 is refused rather than read as 1 or as
/// "every core", which is what omitting it means).
/// `--seed`: a whole number, told as one (clap's own message was "invalid digit found in
/// string" for `-5`).
pub(crate) fn parse_seed(s: &str) -> Result<u64, String> {
    s.trim().parse().map_err(|_| {
        format!("expected a whole number from 0 to 18,446,744,073,709,551,615, got {s:?}")
    })
}

/// A group number or a count (`--group`, `--max-evals`), told as a whole number ≥ 0.
pub(crate) fn parse_index(s: &str) -> Result<usize, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("expected a whole number ≥ 0, got {s:?}"))
}

pub(crate) fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(
            "0 threads cannot run anything: give 1 or more, or omit --jobs to use \
                      every core"
                .into(),
        ),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "expected a whole number of threads ≥ 1, got {s:?} (omit --jobs to use every core)"
        )),
    }
}

/// `--jobs`: as given (at least 1), or every core.
pub(crate) fn jobs(given: Option<usize>) -> usize {
    given
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1)
}

pub(crate) fn parse_overrides(
    set: &[String],
    seed: Option<u64>,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for s in set {
        let Some((path, value)) = s.split_once('=').filter(|(p, _)| !p.trim().is_empty()) else {
            return Err(format!(
                "--set {s}: expected PATH=VALUE, e.g. --set cluster.groups[0].count=4"
            ));
        };
        let (path, value) = (path.trim(), value.trim());
        // Only the last would count: a mistake as likely as not.
        if let Some((_, first)) = out.iter().find(|(p, _)| p == path) {
            return Err(format!(
                "--set {path} is given twice (={first} and ={value}): only the last would \
                 count; give it once"
            ));
        }
        out.push((path.to_string(), value.to_string()));
    }
    if let Some(seed) = seed {
        if let Some((_, first)) = out.iter().find(|(p, _)| p == "seed") {
            return Err(format!(
                "the seed is given twice (--set seed={first} and --seed {seed}): give it once"
            ));
        }
        out.push(("seed".into(), seed.to_string()));
    }
    Ok(out)
}

pub(crate) fn load(
    path: &Path,
    overrides: &[(String, String)],
    catalog: &Catalog,
) -> Result<scenario::Scenario, ExitCode> {
    load_after(path, overrides, catalog, "--set")
}

/// [`load`], with an error naming the file "(after {applied})" when `overrides` changed its
/// text: `applied` lists the flags that gave them (`--set`, `--seed`, `--trace timeline`).
pub(crate) fn load_after(
    path: &Path,
    overrides: &[(String, String)],
    catalog: &Catalog,
    applied: &str,
) -> Result<scenario::Scenario, ExitCode> {
    crate::loader::load(path, overrides, catalog).map_err(|mut e| {
        if let Some(file) = e.file.strip_suffix(" (after --set)") {
            e.file = format!("{file} (after {applied})");
        }
        note!("error: {e}");
        ExitCode::from(2)
    })
}

/// Says on stderr when a scenario will take minutes.
pub(crate) fn announce(sc: &scenario::Scenario, catalog: &crate::catalog::Catalog) {
    if let Some(a) = crate::loader::estimate::estimate(sc).announcement() {
        noteln!("warning: {a}");
    }
    for w in crate::loader::estimate::slow_inputs(sc, catalog) {
        noteln!("warning: {w}");
    }
    for w in crate::loader::unused_prices(sc) {
        noteln!("warning: {w}");
    }
}

/// Prints the warnings of many runs on stderr, each once
/// ([`said_once`](crate::loader::estimate::said_once)).
pub(crate) fn say_once(found: &[(String, Vec<String>)], what: &str, how: &str) {
    for w in crate::loader::estimate::said_once(found, what, how) {
        noteln!("warning: {w}");
    }
}

/// Before reading results in `dirs` (`report`, `merge`): finishes any commit a killed run left
/// half done there, saying so on stderr; a directory that cannot be tidied is bad input (2).
pub(crate) fn finish_interrupted_commits(dirs: &[std::path::PathBuf]) -> Result<(), ExitCode> {
    for d in dirs {
        match crate::output::finish_interrupted_commit(d) {
            Ok(notes) => notes.iter().for_each(|n| noteln!("servesim: {n}")),
            Err(e) => {
                noteln!("error: {e}");
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok(())
}

/// Opens (and locks) an optional `--out` before anything is simulated, saying what opening it
/// tidied; an unusable directory is bad input (2).
pub(crate) fn open_out(
    out: Option<&Path>,
    kind: crate::output::Results,
) -> Result<Option<crate::output::OutputDir>, ExitCode> {
    match out
        .map(|d| crate::output::OutputDir::open_for(d, kind))
        .transpose()
    {
        Ok(d) => {
            d.iter()
                .flat_map(|d| d.notes())
                .for_each(|n| noteln!("servesim: {n}"));
            Ok(d)
        }
        Err(e) => {
            noteln!("error: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// Writes `files` into `dir` and moves them into place together (all or nothing).
pub(crate) fn write_files(
    mut dir: crate::output::OutputDir,
    files: &[(&str, &[u8])],
) -> Result<(), String> {
    use std::io::Write;
    for (name, bytes) in files {
        let path = dir.path().join(name);
        let mut w = dir.create(name).map_err(|e| e.to_string())?;
        w.write_all(bytes)
            .and_then(|()| w.flush())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    dir.commit().map(drop).map_err(|e| e.to_string())
}
