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
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    replicas: u32,
    /// Parallel trials (default: every core).
    #[arg(long, allow_negative_numbers = true, value_parser = super::args::parse_jobs)]
    jobs: Option<usize>,
    /// Also write plan.csv (every configuration), pareto.csv and plan.json here; each trial
    /// is recorded in OUT/plan.progress.jsonl as it finishes (for --resume).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Search only the configurations whose place in the search's order is I modulo N (a
    /// Slurm array task or a Kubernetes Indexed Job pod); join the parts with `servesim merge`.
    /// Give every shard the same `--set plan.bound=PRICE` so they prune as one search does.
    #[arg(long, value_name = "I/N", allow_hyphen_values = true)]
    shard: Option<String>,
    /// Reuse the trials an earlier, killed attempt of this same plan finished in --out and run
    /// only the rest (the answer is byte-identical to an uninterrupted plan).
    #[arg(long, requires = "out")]
    resume: bool,
    /// The answer on stdout: in words, or plan.json's content.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Runners-up listed with why they lost.
    #[arg(long, allow_negative_numbers = true, default_value_t = 5, value_parser = super::args::parse_index)]
    runners_up: usize,
    /// Progress bar on stderr: configurations decided of this shard's.
    #[arg(long, value_enum, default_value_t = super::progress::Mode::Auto)]
    progress: super::progress::Mode,
    /// No progress bar and no run statistics on stderr (warnings and errors still).
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn plan(app: &ServesimApp, a: PlanArgs) -> ExitCode {
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
    let shard = match a
        .shard
        .as_deref()
        .map(crate::sweep::parse_shard)
        .transpose()
    {
        Ok(s) => s.unwrap_or((0, 1)),
        Err(e) => return fail(e),
    };
    if let Err(e) = crate::capacity::check_replicas(a.replicas) {
        return fail(e);
    }
    for w in crate::loader::unused_prices(&scenario) {
        noteln!("warning: {w}");
    }
    // Opened once every input is known to be good: a refused plan leaves nothing behind.
    let out_dir = match super::args::open_out(a.out.as_deref(), crate::output::Results::Plan) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let trials = match &out_dir {
        Some(dir) => {
            let origin = match crate::plan::origin(&a.scenario, &set, &scenario, a.replicas, shard)
            {
                Ok(o) => o,
                Err(e) => return fail(e),
            };
            match crate::plan::progress::Trials::start(dir.path(), &origin, a.resume) {
                Ok(t) => {
                    if a.resume {
                        noteln!(
                            "servesim: resuming: {} trials kept from {}",
                            t.kept(),
                            t.path().display()
                        );
                    }
                    Some(Arc::new(t))
                }
                Err(e) => return fail(e),
            }
        }
        None => None,
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = interrupt.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed));
    let jobs = super::args::jobs(a.jobs);
    let decided = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let settings = Settings {
        replicas: a.replicas,
        jobs,
        interrupt: Some(interrupt),
        shard,
        trials: trials.clone(),
        decided: Some(decided.clone()),
    };
    // This shard's configurations: every N-th of the search's order, from the I-th.
    let total = scenario.plan.as_ref().map_or(0, |spec| {
        let all = crate::plan::configurations(&scenario, spec).len();
        all.saturating_sub(shard.0 as usize)
            .div_ceil(shard.1 as usize)
    });
    let bar = super::progress::Bar::new(
        if a.quiet {
            super::progress::Mode::Never
        } else {
            a.progress
        },
        Some(total as u64),
        super::progress::Counts::Configurations,
    );
    #[expect(
        clippy::disallowed_methods,
        reason = "wall-clock timing goes to stderr only"
    )]
    let started = std::time::Instant::now();
    let searched = super::progress::while_counting(
        &bar,
        &decided,
        || "decided".into(),
        || crate::plan::search(app, &a.scenario, &set, &scenario, &settings),
    );
    let result = match searched {
        Ok(r) => r,
        Err(PlanError::Input(e)) => return fail(e),
        Err(PlanError::Interrupted) => {
            match &trials {
                Some(t) => noteln!(
                    "servesim: interrupted; the finished trials are in {}: run the same command with --resume to go on",
                    t.path().display()
                ),
                None => noteln!("servesim: interrupted; nothing was written"),
            }
            return ExitCode::from(130);
        }
        Err(PlanError::Run(e)) => {
            noteln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let json = serde_json::to_string_pretty(&result).unwrap_or_default() + "\n";
    if let Some(dir) = out_dir {
        let path = dir.path().to_path_buf();
        if let Err(e) = write_plan(dir, &result, &json) {
            noteln!("error: {e}");
            return ExitCode::from(1);
        }
        crate::plan::progress::remove(&path);
    }
    let considered: Vec<(String, Vec<String>)> = result
        .outcomes
        .iter()
        .filter(|o| o.status != crate::plan::Status::Excluded)
        .map(|o| (o.config.label(), o.warnings.clone()))
        .collect();
    super::args::say_once(
        &considered,
        "configuration",
        "with the configuration's values as --set",
    );
    match a.format {
        Format::Text => out!("{}", result.text(a.runners_up)),
        Format::Json => out!("{json}"),
    }
    if !a.quiet {
        noteln!(
            "servesim: {}, {} on {} in {:.2} s wall",
            super::args::counted(result.outcomes.len() as u64, "configuration"),
            super::args::counted(result.runs as u64, "run"),
            super::args::counted(jobs.min((result.runs as usize).max(1)) as u64, "thread"),
            started.elapsed().as_secs_f64()
        );
    }
    if result.best().is_none() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Writes `plan.csv`, `pareto.csv` and `plan.json` (`json`) into `dir`, all or nothing.
fn write_plan(
    dir: crate::output::OutputDir,
    result: &crate::plan::PlanResult,
    json: &str,
) -> Result<(), String> {
    let plan = result.csv()?;
    let pareto = result.pareto_csv()?;
    super::args::write_files(
        dir,
        &[
            ("plan.csv", &plan),
            ("pareto.csv", &pareto),
            ("plan.json", json.as_bytes()),
        ],
    )
}

/// Joins the shards of a plan (`merge` on directories holding `plan.json`): the merged answer
/// on stdout, its files in `out`.
pub(crate) fn merge(shards: &[PathBuf], out: &std::path::Path) -> ExitCode {
    let mut parts = Vec::new();
    for d in shards {
        let path = d.join("plan.json");
        let read = crate::input::read_text(&path).and_then(|text| {
            serde_json::from_str::<crate::plan::PlanResult>(&text)
                .map_err(|e| format!("{}: not a plan's result: {e}", path.display()))
        });
        match read {
            Ok(p) => parts.push((d.display().to_string(), p)),
            Err(e) => {
                noteln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let result = match crate::plan::merge(parts) {
        Ok(r) => r,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = match crate::output::OutputDir::open_for(out, crate::output::Results::Plan) {
        Ok(d) => {
            d.notes().iter().for_each(|n| noteln!("servesim: {n}"));
            d
        }
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let json = serde_json::to_string_pretty(&result).unwrap_or_default() + "\n";
    if let Err(e) = write_plan(dir, &result, &json) {
        noteln!("error: {e}");
        return ExitCode::from(1);
    }
    out!("{}", result.text(5));
    noteln!(
        "servesim: merged {} plan shards, {} configurations, into {}",
        shards.len(),
        result.outcomes.len(),
        out.join("plan.csv").display()
    );
    if result.best().is_none() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
