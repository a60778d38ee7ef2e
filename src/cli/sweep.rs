//! `servesim sweep` and `servesim merge`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::args::{MergeArgs, parse_overrides};
use super::progress;
use crate::ServesimApp;
use crate::catalog::Catalog;
use crate::output::Results;

/// Writes sweep.csv and sweep.json (and with replicas sweep-points.csv) into `out`, together
/// (staged, then moved into place).
pub(crate) fn write_sweep(
    dir: crate::output::OutputDir,
    plan: &crate::sweep::Plan,
    rows: &std::collections::BTreeMap<usize, Vec<String>>,
) -> Result<(), String> {
    let csv = crate::sweep::to_csv(plan, rows)?;
    let json = serde_json::to_string_pretty(plan).map_err(|e| e.to_string())? + "\n";
    let mut files = vec![
        ("sweep.csv", csv.as_slice()),
        ("sweep.json", json.as_bytes()),
    ];
    let per_point;
    if plan.replicas > 1 {
        per_point = crate::sweep::replicas::to_csv(plan, rows)?;
        files.push((crate::sweep::replicas::FILE, per_point.as_slice()));
    }
    super::args::write_files(dir, &files)
}

/// The table printed: one line per run, or with replicas one per point (mean ± 95 %).
fn comparison(
    plan: &crate::sweep::Plan,
    rows: &std::collections::BTreeMap<usize, Vec<String>>,
) -> String {
    if plan.replicas > 1 {
        crate::sweep::replicas::table(plan, rows)
    } else {
        crate::sweep::table(&plan.header(), rows)
    }
}

#[derive(clap::Args)]
pub(crate) struct SweepArgs {
    /// Scenario file (RON) every point starts from.
    scenario: PathBuf,
    /// A field and its values: --vary 'policies.routing=["round_robin","least_loaded"]'
    /// (repeat for more axes; the last varies fastest).
    #[arg(long = "vary", value_name = "PATH=[V1,V2,...]", required = true)]
    vary: Vec<String>,
    /// Override a field in every point (as for `run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Runs per point, with seeds seed, seed+1, ….
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    replicas: u32,
    /// Parallel runs (default: every core).
    #[arg(long, allow_negative_numbers = true, value_parser = super::args::parse_jobs)]
    jobs: Option<usize>,
    /// Run only the points whose number is I modulo N (a Slurm array task or a
    /// Kubernetes Indexed Job pod); join the parts with `servesim merge`.
    #[arg(long, value_name = "I/N", allow_hyphen_values = true)]
    shard: Option<String>,
    /// Where sweep.csv and sweep.json go (default: ./sweep).
    #[arg(long, default_value = "sweep")]
    out: PathBuf,
    /// Also keep every point's result files in OUT/point-NNNN.
    #[arg(long)]
    keep_outputs: bool,
    /// Keep the runs an earlier, killed attempt of this same sweep finished in OUT
    /// (OUT/sweep.progress.csv) and run only the rest.
    #[arg(long)]
    resume: bool,
    /// A progress bar over the points on stderr.
    #[arg(long, value_enum, default_value_t = progress::Mode::Auto)]
    progress: progress::Mode,
    /// No progress bar and no closing statistics on stderr (warnings and errors still).
    #[arg(long, short)]
    quiet: bool,
}

/// `servesim sweep`: checks every point before running any.
pub(crate) fn sweep(app: &ServesimApp, a: SweepArgs) -> ExitCode {
    let built = app.build();
    let catalog = built.world().resource::<Catalog>();
    use crate::sweep::{Plan, parse_axis, parse_shard};
    let fail = |e: String| {
        noteln!("error: {e}");
        ExitCode::from(2)
    };
    let axes = match a
        .vary
        .iter()
        .map(|v| parse_axis(v))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let shard = match a.shard.as_deref().map(parse_shard).transpose() {
        Ok(s) => s.unwrap_or((0, 1)),
        Err(e) => return fail(e),
    };
    if a.replicas == 0 {
        return fail("--replicas must be at least 1".into());
    }
    let set = match parse_overrides(&a.set, None) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut plan = Plan {
        scenario: a.scenario.display().to_string(),
        set,
        axes,
        replicas: a.replicas,
        shard,
        inputs: Default::default(),
        version: crate::sweep::VERSION.into(),
    };
    if let Err(e) = plan.check_size().and_then(|_| plan.check_paths()) {
        return fail(e);
    }
    // The output directory is opened and locked before anything is simulated, and held
    // until sweep.csv and sweep.json are committed: a second sweep into it is refused.
    let out_dir = match crate::output::OutputDir::open_for(&a.out, crate::output::Results::Sweep) {
        Ok(d) => {
            d.notes().iter().for_each(|n| noteln!("servesim: {n}"));
            d
        }
        Err(e) => return fail(e.to_string()),
    };
    // Every point is loaded and validated first; all problems are reported at once, each
    // named by the first point that has it.
    let mut points = Vec::new();
    let mut problems: Vec<(crate::loader::ScenarioError, Vec<Vec<String>>)> = Vec::new();
    for point in plan.points() {
        match crate::loader::load(&a.scenario, &plan.overrides(&point), catalog) {
            Ok(mut sc) => {
                sc.seed = sc.seed.wrapping_add(u64::from(point.replica));
                points.push((point, sc));
            }
            Err(e) => match problems.iter_mut().find(|(p, _)| p.problems == e.problems) {
                Some((_, at)) if at.contains(&point.values) => {}
                Some((_, at)) => at.push(point.values),
                None => problems.push((e, vec![point.values])),
            },
        }
    }
    if !problems.is_empty() {
        for (mut e, at) in problems {
            e.file = format!("{} ({})", a.scenario.display(), point_label(&plan, &at));
            note!("error: {e}");
        }
        return ExitCode::from(2);
    }
    warn_points(&plan, &points, catalog);
    plan.inputs = match crate::sweep::hash_inputs(points.iter().map(|(_, sc)| sc)) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    // Runs an earlier attempt finished (with --resume), and the file this one appends to.
    use crate::sweep::progress as kept;
    let finished = if a.resume {
        match kept::finished(&a.out, &plan) {
            Ok(rows) => rows,
            Err(e) => return fail(e),
        }
    } else {
        if a.out.join(kept::ROWS).exists() && !a.quiet {
            noteln!(
                "servesim: starting over: {} held the runs of an earlier attempt (--resume keeps them)",
                a.out.display()
            );
        }
        Default::default()
    };
    let progress_file = match kept::Progress::start(&a.out, &plan, &finished) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if !finished.is_empty() && !a.quiet {
        noteln!(
            "servesim: resuming: {} of {} runs already finished in {}",
            finished.len(),
            points.len(),
            a.out.display()
        );
    }
    points.retain(|(p, _)| !finished.contains_key(&p.index));
    let progress_error = std::sync::Mutex::new(None::<String>);
    let jobs = super::args::jobs(a.jobs);
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = interrupt.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed));
    let keep = a.keep_outputs.then(|| a.out.clone());
    let bar = progress::Bar::new(
        if a.quiet {
            progress::Mode::Never
        } else {
            a.progress
        },
        Some(points.len() as u64),
        progress::Counts::Points,
    );
    let done = std::sync::atomic::AtomicU64::new(0);
    let total = points.len();
    #[expect(
        clippy::disallowed_methods,
        reason = "wall-clock timing goes to stderr only"
    )]
    let started = std::time::Instant::now();
    let rows = crate::sweep::run(
        app,
        &plan,
        points,
        jobs,
        keep.as_deref(),
        Some(interrupt),
        &|point, outcome, row| {
            if let Err(e) = progress_file.append(row) {
                progress_error
                    .lock()
                    .expect("no thread panics holding it")
                    .get_or_insert(e);
            }
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            let what = match outcome {
                Ok(_) => "ok",
                Err(_) => "failed",
            };
            bar.update(n, format!("point {} {what}", point.index));
        },
    );
    bar.clear();
    let progress_error = progress_error.into_inner().expect("no thread panicked");
    if let Some(e) = &progress_error {
        noteln!("warning: finished runs were not all kept for --resume: {e}");
    }
    let Some(new_rows) = rows else {
        let kept = match &keep {
            Some(dir) => format!(
                "; their result files are under {} (--keep-outputs)",
                dir.display()
            ),
            None => String::new(),
        };
        noteln!(
            "servesim: interrupted; sweep.csv and sweep.json were not written; the {} runs finished are kept in {}{kept}: run the same command with --resume to finish the rest",
            finished.len() as u64 + done.load(Ordering::Relaxed),
            a.out.join(kept::ROWS).display()
        );
        return ExitCode::from(130);
    };
    let mut rows = finished;
    rows.extend(new_rows);
    if let Err(e) = write_sweep(out_dir, &plan, &rows) {
        noteln!("error: {e}");
        return ExitCode::from(1);
    }
    kept::remove(&a.out);
    out!("{}", comparison(&plan, &rows));
    // Every failed run, by point and replica, with its error.
    let header = plan.header();
    let status = header.iter().position(|h| h == "status");
    let replica = header.iter().position(|h| h == "replica");
    let failures: Vec<String> = rows
        .iter()
        .filter_map(|(point, r)| {
            let s = r.get(status?)?;
            s.starts_with("error: ").then(|| {
                format!(
                    "point {point} (replica {}): {}",
                    replica.and_then(|k| r.get(k)).map_or("0", String::as_str),
                    s.trim_start_matches("error: ")
                )
            })
        })
        .collect();
    if !a.quiet {
        noteln!(
            "servesim: {} on {} in {:.2} s wall; wrote sweep.csv, sweep.json{} in {}",
            super::args::counted(total as u64, "run"),
            super::args::counted(jobs.min(total.max(1)) as u64, "thread"),
            started.elapsed().as_secs_f64(),
            if plan.replicas > 1 {
                format!(", {}", crate::sweep::replicas::FILE)
            } else {
                String::new()
            },
            a.out.display()
        );
    }
    let written: std::collections::BTreeSet<usize> = if a.keep_outputs {
        plan.points().iter().map(|p| p.index).collect()
    } else {
        Default::default()
    };
    let earlier = earlier_points(&a.out, &written);
    if !earlier.is_empty() && !a.quiet {
        noteln!(
            "servesim: left alone in {}: {} (an earlier sweep's --keep-outputs; not this sweep's points, which `report {}/point-*` would show beside them)",
            a.out.display(),
            crate::scenario::some_of(earlier.iter().map(String::as_str)),
            a.out.display()
        );
    }
    if !a.quiet {
        note_earlier_means(&a.out, &plan);
    }
    if failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    noteln!(
        "error: {} of {} runs failed (their rows in sweep.csv say so in `status`):",
        failures.len(),
        rows.len()
    );
    for f in &failures {
        noteln!("  {f}");
    }
    ExitCode::from(1)
}

/// What the shards hold: one sweep's or one plan's results, or (`None`) nothing a command
/// wrote, left for the sweep's reader to say what is missing.
fn shards_kind(shards: &[PathBuf]) -> Result<Option<Results>, String> {
    let mut first: Option<(&PathBuf, Results)> = None;
    for d in shards {
        let Some((kind, files)) = Results::held_in(d) else {
            continue;
        };
        if !matches!(kind, Results::Sweep | Results::Plan) {
            return Err(format!(
                "{} holds a {}'s results ({}), not a shard: merge joins the --out directories \
                 of `servesim sweep --shard` or of `servesim plan --shard`",
                d.display(),
                kind.name(),
                files.join(", ")
            ));
        }
        match first {
            None => first = Some((d, kind)),
            Some((a, seen)) if seen != kind => {
                return Err(format!(
                    "{} holds a {}'s results and {} a {}'s: merge joins the shards of one sweep \
                     or of one plan",
                    a.display(),
                    seen.name(),
                    d.display(),
                    kind.name()
                ));
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(_, kind)| kind))
}

/// The `point-NNNN` directories in `out` that this sweep did not write (`written`: its
/// points' numbers with `--keep-outputs`, else none), sorted.
fn earlier_points(
    out: &std::path::Path,
    written: &std::collections::BTreeSet<usize>,
) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Vec::new();
    };
    let mut earlier: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let index: usize = name.strip_prefix("point-")?.parse().ok()?;
            (e.path().is_dir() && !written.contains(&index)).then_some(name)
        })
        .collect();
    earlier.sort();
    earlier
}

/// Joins the shards of a sweep.
pub(crate) fn merge(a: MergeArgs) -> ExitCode {
    let MergeArgs { shards, out } = a;
    // The merged sweep never replaces one of its own shards.
    if let Ok(target) = std::fs::canonicalize(&out)
        && let Some(shard) = shards
            .iter()
            .find(|d| std::fs::canonicalize(d).is_ok_and(|d| d == target))
    {
        noteln!(
            "error: --out {} is the shard {}: merging into it would replace the shard; give --out another directory",
            out.display(),
            shard.display()
        );
        return ExitCode::from(2);
    }
    if let Some(gone) = shards.iter().find(|d| !d.is_dir()) {
        noteln!(
            "error: {} is not a directory: give the --out of each `servesim sweep --shard` or `servesim plan --shard`",
            gone.display()
        );
        return ExitCode::from(2);
    }
    if let Err(code) = super::args::finish_interrupted_commits(&shards) {
        return code;
    }
    match shards_kind(&shards) {
        Ok(Some(Results::Plan)) => return super::plan::merge(&shards, &out),
        Ok(_) => {}
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let parts = match shards
        .iter()
        .map(|d| crate::sweep::Part::read(d))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(p) => p,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (plan, rows) = match crate::sweep::merge(parts) {
        Ok(m) => m,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let out_dir = match crate::output::OutputDir::open_for(&out, crate::output::Results::Sweep) {
        Ok(d) => {
            d.notes().iter().for_each(|n| noteln!("servesim: {n}"));
            d
        }
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = write_sweep(out_dir, &plan, &rows) {
        noteln!("error: {e}");
        return ExitCode::from(1);
    }
    out!("{}", comparison(&plan, &rows));
    let runs = if plan.replicas > 1 {
        format!(
            "{} of {}",
            super::args::counted(rows.len() as u64, "run"),
            super::args::counted(rows.len() as u64 / u64::from(plan.replicas), "point")
        )
    } else {
        super::args::counted(rows.len() as u64, "point")
    };
    noteln!(
        "servesim: merged {} shards, {runs}, into {}",
        shards.len(),
        out.join("sweep.csv").display()
    );
    note_earlier_means(&out, &plan);
    ExitCode::SUCCESS
}

/// Names an earlier sweep's `sweep-points.csv` left beside a sweep without replicas, which
/// writes none (the commit leaves files it does not write alone).
fn note_earlier_means(out: &std::path::Path, plan: &crate::sweep::Plan) {
    if plan.replicas == 1 && out.join(crate::sweep::replicas::FILE).exists() {
        noteln!(
            "servesim: left alone in {}: {} (an earlier sweep's means over its --replicas; this sweep runs each point once and writes none)",
            out.display(),
            crate::sweep::replicas::FILE
        );
    }
}

/// Says on stderr what `run` would warn of, once per warning: plainly when every point of
/// the sweep (of this shard) has it, else with the values of the points that do, the first
/// few of them, and at most ten warnings (a sweep over `tp` can reach a configuration vLLM
/// would not start; its point still runs, as `run` would run it). Replicas of a point share
/// its warnings.
fn warn_points(
    plan: &crate::sweep::Plan,
    points: &[(crate::sweep::Point, crate::scenario::Scenario)],
    catalog: &crate::catalog::Catalog,
) {
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    for (point, sc) in points {
        if !seen.insert(&point.values) {
            continue;
        }
        let at = plan.describe(&point.values);
        found.push((at, crate::loader::estimate::slow_inputs(sc, catalog)));
    }
    super::args::say_once(&found, "point", "with a point's values as --set");
}

/// Which sweep points a load error came from: the first point's values, and how many others
/// share it (`--set`s named when there are some, as they were applied too).
fn point_label(plan: &crate::sweep::Plan, at: &[Vec<String>]) -> String {
    let mut label = format!("at {}", plan.describe(&at[0]));
    if !plan.set.is_empty() {
        label.push_str(", after --set");
    }
    match at.len() {
        1 => {}
        2 => label.push_str(", and 1 other point"),
        n => label.push_str(&format!(", and {} other points", n - 1)),
    }
    label
}
