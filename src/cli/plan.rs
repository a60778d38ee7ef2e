//! `servesim plan`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::args::{Format, parse_overrides};
use crate::ServesimApp;
use crate::plan::{PlanError, Settings};

#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    /// Scenario file (RON) with a `plan` block.
    scenario: PathBuf,
    /// Override a field (as for `run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Seeds every trial runs (the scenario's seed, +1, …); a size meets the SLOs only if
    /// it does on every seed.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Parallel trials (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Also write plan.csv (every configuration), pareto.csv and plan.json here.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Runners-up listed with why they lost.
    #[arg(long, default_value_t = 5)]
    runners_up: usize,
    /// No run statistics on stderr (warnings and errors still).
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn plan(app: &ServesimApp, a: PlanArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
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
    let out_dir = match super::args::open_out(a.out.as_deref()) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = interrupt.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed));
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let settings = Settings {
        replicas: a.replicas,
        jobs,
        interrupt: Some(interrupt),
    };
    #[expect(
        clippy::disallowed_methods,
        reason = "wall-clock timing goes to stderr only"
    )]
    let started = std::time::Instant::now();
    let result = match crate::plan::search(app, &a.scenario, &set, &scenario, &settings) {
        Ok(r) => r,
        Err(PlanError::Input(e)) => return fail(e),
        Err(PlanError::Interrupted) => {
            eprintln!("servesim: interrupted; nothing was written");
            return ExitCode::from(130);
        }
        Err(PlanError::Run(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let json = serde_json::to_string_pretty(&result).unwrap_or_default() + "\n";
    if let Some(dir) = out_dir {
        let written = result.csv().and_then(|plan| {
            let pareto = result.pareto_csv()?;
            super::args::write_files(
                dir,
                &[
                    ("plan.csv", &plan),
                    ("pareto.csv", &pareto),
                    ("plan.json", json.as_bytes()),
                ],
            )
        });
        if let Err(e) = written {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    }
    match a.format {
        Format::Text => print!("{}", result.text(a.runners_up)),
        Format::Json => print!("{json}"),
    }
    if !a.quiet {
        eprintln!(
            "servesim: {} configurations, {} runs on {jobs} threads in {:.2} s wall",
            result.outcomes.len(),
            result.runs,
            started.elapsed().as_secs_f64()
        );
    }
    if result.best().is_none() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
