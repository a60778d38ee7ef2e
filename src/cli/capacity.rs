//! `servesim capacity`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::args::{Format, parse_overrides};
use crate::ServesimApp;
use crate::capacity::{CapacityError, SERVED_SHARE, Settings};

#[derive(clap::Args)]
pub(crate) struct CapacityArgs {
    /// Scenario file (RON): the deployment, and the workload whose rates are scaled.
    scenario: PathBuf,
    /// Override a field (as for `run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Seeds searched (the scenario's seed, +1, …): each gets its own answer, and the
    /// answers their mean and 95 % interval.
    #[arg(long, allow_negative_numbers = true, default_value_t = 3)]
    replicas: u32,
    /// Relative width at which a bracket is settled.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.02)]
    tolerance: f64,
    /// Share of a window's arrivals that must be completed in it for the rate to be
    /// sustained.
    #[arg(long, allow_negative_numbers = true, default_value_t = SERVED_SHARE)]
    served_share: f64,
    /// Parallel searches (default: every core).
    #[arg(long, allow_negative_numbers = true, value_parser = super::args::parse_jobs)]
    jobs: Option<usize>,
    /// Search this instance group alone (every other group left out): what it sustains
    /// under the whole workload.
    #[arg(long, value_name = "NAME")]
    group: Option<String>,
    /// Search the deployment, then each of its instance groups alone under the whole
    /// workload (which group limits it; JSON: `groups`).
    #[arg(long, conflicts_with = "group")]
    each_group: bool,
    /// Also write capacity.json here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The answer on stdout: in words, or capacity.json's content.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Progress bar on stderr: runs finished (the bisection ends when every bracket settles).
    #[arg(long, value_enum, default_value_t = super::progress::Mode::Auto)]
    progress: super::progress::Mode,
    /// No progress bar and no run statistics on stderr (warnings and errors still).
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn capacity(app: &ServesimApp, a: CapacityArgs) -> ExitCode {
    let fail = |e: String| {
        noteln!("error: {e}");
        ExitCode::from(2)
    };
    let set = match parse_overrides(&a.set, None) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let built = app.build();
    let catalog = built.world().resource::<crate::catalog::Catalog>();
    let scenario = match super::args::load(&a.scenario, &set, catalog) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let scenario = match a.group.as_deref() {
        Some(name) => match crate::capacity::group_alone(&scenario, name) {
            Ok(s) => s,
            Err(e) => return fail(e),
        },
        None => scenario,
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    let settings = Settings {
        replicas: a.replicas,
        tolerance: a.tolerance,
        served_share: a.served_share,
        jobs: super::args::jobs(a.jobs),
        interrupt: Some(interrupt.clone()),
        runs_done: Some(Arc::new(0.into())),
        scale_now: Some(Arc::new(0.into())),
    };
    if let Err(e) = settings.check() {
        return fail(e);
    }
    super::args::announce(&scenario, catalog);
    // The output directory is opened (and locked) before anything is simulated, and after
    // every input is known to be good: a refused search leaves nothing behind.
    let out_dir = match super::args::open_out(a.out.as_deref(), crate::output::Results::Capacity) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let _ = ctrlc::set_handler(move || interrupt.store(true, Ordering::Relaxed));
    #[expect(
        clippy::disallowed_methods,
        reason = "wall-clock timing goes to stderr only"
    )]
    let started = std::time::Instant::now();
    let bar = super::progress::Bar::new(
        if a.quiet {
            super::progress::Mode::Never
        } else {
            a.progress
        },
        None,
        super::progress::Counts::Runs,
    );
    let done = settings.runs_done.clone().unwrap_or_default();
    let now = settings.scale_now.clone().unwrap_or_default();
    // The rate a run is at tells why runs slow down as the search climbs.
    let at = || match f64::from_bits(now.load(Ordering::Relaxed)) {
        0.0 => String::new(),
        scale => format!("latest at {scale:.3}× the rates"),
    };
    let searched = super::progress::while_counting(&bar, &done, at, || {
        if a.each_group {
            crate::capacity::search_each_group(app, &scenario, &settings)
        } else {
            crate::capacity::search(app, &scenario, &settings)
        }
    });
    let result = match searched {
        Ok(r) => crate::capacity::Capacity {
            group: a.group.clone(),
            ..r
        },
        Err(CapacityError::Input(e)) => return fail(e),
        Err(CapacityError::Interrupted) => {
            noteln!("servesim: interrupted; nothing was written");
            return ExitCode::from(130);
        }
        Err(e @ CapacityError::Run { .. }) => {
            noteln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let json = serde_json::to_string_pretty(&result).unwrap_or_default() + "\n";
    if let Some(dir) = out_dir
        && let Err(e) = super::args::write_files(dir, &[("capacity.json", json.as_bytes())])
    {
        noteln!("error: {e}");
        return ExitCode::from(1);
    }
    for w in &result.warnings {
        noteln!("warning: {w}");
    }
    for g in &result.groups {
        for w in &g.warnings {
            noteln!(
                "warning: group {} alone: {w}",
                g.group.as_deref().unwrap_or("?")
            );
        }
    }
    match a.format {
        Format::Text => out!("{}", result.text()),
        Format::Json => out!("{json}"),
    }
    if !a.quiet {
        noteln!(
            "servesim: {} on {} in {:.2} s wall",
            super::args::counted(
                result.runs + result.groups.iter().map(|g| g.runs).sum::<u32>(),
                "run"
            ),
            super::args::counted(settings.jobs.min(result.seeds.len()) as u64, "thread"),
            started.elapsed().as_secs_f64()
        );
    }
    ExitCode::SUCCESS
}
