//! The `servesim` command line, as a library: [`main`] parses the arguments and runs one
//! command with the apps a [`ServesimApp`] builds, so a program of your own gets every command
//! with its plugins, policies and systems (`examples/custom_cli.rs`). It owns stdout, stderr
//! and exit codes; the rest of the library never prints.
//!
//! Exit codes: 0 success, 1 run failure (I/O, a step outside a measured table, no progress, a
//! sweep with failed points), 2 bad input (scenario or arguments), 130 interrupted (Ctrl-C).
//! One file per command group: [`run`] (`run`), [`sweep`] (`sweep`, `merge`), [`fidelity`]
//! (`check-real`, `calibrate`), [`info`] (`validate`, `list`, `report`).

mod fidelity;
mod info;
mod progress;
mod run;
mod sweep;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::ServesimApp;
use crate::policy::Catalog;
use crate::scenario;

#[derive(Parser)]
#[command(
    name = "servesim",
    version,
    about = "Discrete-event simulator of LLM inference serving clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and write requests.csv, timeseries.csv and summary.json (and, when
    /// asked, report.html, timeline.json, decisions.csv).
    Run(RunArgs),
    /// Run the cartesian product of --vary lists in parallel; writes sweep.csv (one row per
    /// point: the varied values and every summary metric) and sweep.json, and prints a
    /// comparison table.
    Sweep(sweep::SweepArgs),
    /// Join the sweep.csv of every shard of a sweep (`sweep --shard I/N`) into the
    /// sweep.csv one unsharded run gives.
    Merge(MergeArgs),
    /// Write one self-contained report.html from one or more output directories (several
    /// are overlaid and put side by side).
    Report(ReportArgs),
    /// Parse and validate a scenario without running it.
    Validate(ValidateArgs),
    /// Replay a measured benchmark run through the scenario's server and compare TTFT, ITL
    /// and E2E (mean, p50, p90, p99), overall and per stage; also writes check-real.json.
    CheckReal(CheckRealArgs),
    /// Fit latency coefficients to a measured benchmark run by simulating it; prints the
    /// latency line to paste into the scenario and the error on a held-back 20 %.
    Calibrate(CalibrateArgs),
    /// List what a scenario can name.
    List(ListArgs),
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario file (RON).
    pub(crate) scenario: PathBuf,
    /// Output directory (default: the scenario's outputs.dir, else ./out).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Override the scenario seed.
    #[arg(long)]
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
    #[arg(long, value_name = "SECONDS")]
    pub(crate) max_wall_s: Option<f64>,
    /// Also write report.html into the output directory (as `servesim report` would).
    #[arg(long)]
    pub(crate) report: bool,
    /// Only steps and requests overlapping START..END (simulated seconds) go into
    /// timeline.json.
    #[arg(long, value_name = "START..END")]
    pub(crate) trace_window: Option<String>,
    /// Fraction of requests drawn in timeline.json (by request id).
    #[arg(long, value_name = "FRACTION")]
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
    /// Where the merged sweep.csv and sweep.json go.
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
    pub(crate) scenario: PathBuf,
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
}

#[derive(clap::Args)]
pub(crate) struct CheckRealArgs {
    /// Scenario describing the server (its workload is replaced by the measured one).
    pub(crate) scenario: PathBuf,
    /// Per-request measurements: a CSV (arrival_s|arrival_ms|arrival_us, input_tokens,
    /// output_tokens, ttft_ms, e2e_ms[, itl_ms][, stage]) or a vLLM benchmark JSON.
    pub(crate) measured: PathBuf,
    /// Where check-real.json goes (default: the scenario's outputs.dir).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
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
    #[arg(long, value_enum, default_value_t = FitModel::Blackbox)]
    pub(crate) model: FitModel,
    /// The instance group whose latency model is fitted.
    #[arg(long, default_value_t = 0)]
    pub(crate) group: usize,
    /// Most simulations to run.
    #[arg(long, default_value_t = 400)]
    pub(crate) max_evals: usize,
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) set: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

#[derive(clap::Args)]
pub(crate) struct ListArgs {
    #[arg(value_enum)]
    pub(crate) what: ListWhat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FitModel {
    /// α0 and β0, β1, β2 of the blackbox model.
    Blackbox,
    /// Scale factors on the bundled trained-physics coefficients, and α0.
    TrainedPhysics,
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
    Policies,
    /// Batch schedulers only (also under `policies`, family `scheduler`).
    Schedulers,
    Models,
    Hardware,
}

pub(crate) fn parse_overrides(
    set: &[String],
    seed: Option<u64>,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for s in set {
        let Some((path, value)) = s.split_once('=') else {
            return Err(format!(
                "--set {s}: expected PATH=VALUE, e.g. --set cluster.groups[0].count=4"
            ));
        };
        out.push((path.trim().to_string(), value.trim().to_string()));
    }
    if let Some(seed) = seed {
        out.push(("seed".into(), seed.to_string()));
    }
    Ok(out)
}

pub(crate) fn load(
    path: &Path,
    overrides: &[(String, String)],
    catalog: &Catalog,
) -> Result<scenario::Scenario, ExitCode> {
    scenario::load(path, overrides, catalog).map_err(|e| {
        eprint!("error: {e}");
        ExitCode::from(2)
    })
}

/// Says on stderr when a scenario will take minutes.
pub(crate) fn announce(sc: &scenario::Scenario) {
    if let Some(a) = scenario::estimate::estimate(sc).announcement() {
        eprintln!("warning: {a}");
    }
}

/// Runs the command in the process's arguments with `app`'s apps.
pub fn main(app: ServesimApp) -> ExitCode {
    main_with_args(app, std::env::args_os())
}

/// Runs the command in `args` (the first is the program's name) with `app`'s apps.
pub fn main_with_args<I, T>(app: ServesimApp, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    match cli.command {
        Command::Run(a) => run::run(&app, a),
        Command::Sweep(a) => sweep::sweep(&app, a),
        Command::Merge(a) => sweep::merge(a),
        Command::Report(a) => info::report(a),
        Command::Validate(a) => info::validate(&app, a),
        Command::CheckReal(a) => fidelity::check_real(&app, a),
        Command::Calibrate(a) => fidelity::calibrate(&app, a),
        Command::List(a) => info::list(&app, a),
    }
}
