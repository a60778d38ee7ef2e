//! The `servesim` command line, as a library: [`main`] parses the arguments and runs one
//! command with the apps a [`ServesimApp`] builds, so a program of your own gets every command
//! with its plugins, policies and systems (`examples/custom_cli.rs`). It owns stdout, stderr
//! and exit codes; the rest of the library never prints.
//!
//! Exit codes: 0 success, 1 run failure (I/O, a step outside a measured table, no progress, a
//! sweep with failed points), 2 bad input (scenario or arguments), 130 interrupted (Ctrl-C).
//! One file per command group: [`run`] (`run`), [`sweep`] (`sweep`, `merge`), [`capacity`]
//! (`capacity`), [`plan`] (`plan`), [`evaluate`] (`evaluate`), [`fidelity`]
//! (`check-real`, `calibrate`), [`info`] (`validate`, `list`, `report`).

/// `print!` that a closed stdout cannot turn into a panic: see [`write_stdout`].
macro_rules! out {
    ($($t:tt)*) => { $crate::cli::write_stdout(format_args!($($t)*), false) };
}

/// `println!` that a closed stdout cannot turn into a panic: see [`write_stdout`].
macro_rules! outln {
    ($($t:tt)*) => { $crate::cli::write_stdout(format_args!($($t)*), true) };
}

/// `note!` that a stderr nobody can write to (`2>/dev/full`, a closed descriptor) cannot
/// turn into a panic: see [`write_stderr`].
macro_rules! note {
    ($($t:tt)*) => { $crate::cli::write_stderr(format_args!($($t)*), false) };
}

/// `noteln!` that cannot panic: see [`write_stderr`].
macro_rules! noteln {
    ($($t:tt)*) => { $crate::cli::write_stderr(format_args!($($t)*), true) };
}

mod args;
mod capacity;
mod evaluate;
mod fidelity;
mod info;
mod plan;
mod progress;
mod run;
mod sweep;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use args::{CalibrateArgs, CheckRealArgs, ListArgs, MergeArgs, ReportArgs, RunArgs, ValidateArgs};

use crate::ServesimApp;

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

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and write requests.csv, timeseries.csv and summary.json (and, when
    /// asked, report.html, timeline.json, decisions.csv).
    Run(RunArgs),
    /// Run the cartesian product of --vary lists in parallel; writes sweep.csv (one row per
    /// point: the varied values and every summary metric) and sweep.json, and prints a
    /// comparison table.
    Sweep(sweep::SweepArgs),
    /// The largest arrival rate the deployment sustains, and the largest at which each
    /// declared SLO holds (bisection on a multiple of the workload's rates, per seed, with a
    /// 95 % interval over seeds); prints it, or JSON, and writes capacity.json with --out.
    Capacity(capacity::CapacityArgs),
    /// The cheapest configuration of an instance group (GPU, TP, PP, batch limits,
    /// scheduler, routing, instances) that meets every SLO at the workload's rate, from the
    /// scenario's `plan` block; prints it with its margin, the Pareto front and the
    /// runners-up, and writes plan.csv, pareto.csv and plan.json with --out.
    Plan(plan::PlanArgs),
    /// Score a candidate (the scenario's policies) for a policy search: named objectives in
    /// [0, 1], their weighted combination, metrics per SLO class, anomaly counts, the checks
    /// against gaming the score, and a trace summary in words (text) or all of it (JSON).
    Evaluate(evaluate::EvaluateArgs),
    /// Join the sweep.csv of every shard of a sweep (`sweep --shard I/N`) into the
    /// sweep.csv one unsharded run gives, or the shards of a plan (`plan --shard I/N`) into
    /// its answer.
    Merge(MergeArgs),
    /// Write one self-contained report.html from one or more output directories (several
    /// are overlaid and put side by side).
    Report(ReportArgs),
    /// Parse and validate a scenario without running it.
    Validate(ValidateArgs),
    /// Replay a measured benchmark run through the scenario's server and compare TTFT, ITL
    /// and E2E (mean, p50, p90, p99) and timeouts, overall and per stage; also writes
    /// check-real.json.
    CheckReal(CheckRealArgs),
    /// Fit latency coefficients to a measured benchmark run by simulating it; prints the
    /// latency line to paste into the scenario and the error on a held-back 20 %.
    Calibrate(CalibrateArgs),
    /// List what a scenario can name.
    List(ListArgs),
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
        Command::Capacity(a) => capacity::capacity(&app, a),
        Command::Plan(a) => plan::plan(&app, a),
        Command::Evaluate(a) => evaluate::evaluate(&app, a),
        Command::Merge(a) => sweep::merge(a),
        Command::Report(a) => info::report(a),
        Command::Validate(a) => info::validate(&app, a),
        Command::CheckReal(a) => fidelity::check_real(&app, a),
        Command::Calibrate(a) => fidelity::calibrate(&app, a),
        Command::List(a) => info::list(&app, a),
    }
}

/// Writes to stderr. Stderr holds diagnostics only (timing, progress, warnings, errors), so a
/// failed write is dropped: the command goes on and ends with the exit status it would have
/// had, which still says whether it failed (`noteln!` panicked, exit 101).
pub(crate) fn write_stderr(text: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write as _;
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_fmt(text).and_then(|()| {
        if newline {
            stderr.write_all(b"\n")
        } else {
            Ok(())
        }
    });
}

/// Writes to stdout. When the reader has gone (`servesim list hardware | head -3`), the
/// process ends quietly with status 141, as SIGPIPE ends other command-line tools, instead
/// of panicking (`run` has committed its result files before it prints).
pub(crate) fn write_stdout(text: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(text)
        .and_then(|()| {
            if newline {
                stdout.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        Err(e) => {
            noteln!("servesim: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `servesim <command> --help` says what every argument is for and what every value of
    /// a choice means: an argument without a line of help reads as a blank in the listing.
    #[test]
    fn every_argument_and_choice_has_help() {
        let mut missing = Vec::new();
        let cli = super::Cli::command();
        for command in cli.get_subcommands() {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() {
                    missing.push(format!("{} {id}", command.get_name()));
                }
                for value in arg.get_possible_values() {
                    if value.get_help().is_none() && arg.get_possible_values().len() > 2 {
                        missing.push(format!("{} {id}={}", command.get_name(), value.get_name()));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "without help: {missing:?}");
    }
}
