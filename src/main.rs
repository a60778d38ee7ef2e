//! The `servesim` command line. Owns stdout/stderr and exit codes; the library never prints.
//!
//! Exit codes: 0 success, 1 run failure (I/O, a step outside a measured table, no
//! progress), 2 bad input (scenario or arguments), 130 interrupted (Ctrl-C).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod progress;

use clap::{Parser, Subcommand, ValueEnum};
use servesim::policy::Catalog;
use servesim::{RunOptions, Simulation, scenario};

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
enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and write requests.csv, timeseries.csv and summary.json (and, when
    /// asked, report.html, timeline.json, decisions.csv).
    Run {
        /// Scenario file (RON).
        scenario: PathBuf,
        /// Output directory (default: the scenario's outputs.dir, else ./out).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Override the scenario seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override any field: --set cluster.groups[0].count=4 (value in RON syntax).
        #[arg(long = "set", value_name = "PATH=VALUE")]
        set: Vec<String>,
        /// Summary format on stdout.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Check every invariant after every tick (slower).
        #[arg(long)]
        check_invariants: bool,
        /// Extra traces: `decisions` writes decisions.csv (one row per routing decision).
        #[arg(long, value_enum)]
        trace: Vec<TraceKind>,
        /// Stop the run after this many seconds of wall time (exit 1; nothing is written,
        /// as for Ctrl-C).
        #[arg(long, value_name = "SECONDS")]
        max_wall_s: Option<f64>,
        /// Also write report.html into the output directory (as `servesim report` would).
        #[arg(long)]
        report: bool,
        /// Only steps and requests overlapping START..END (simulated seconds) go into
        /// timeline.json.
        #[arg(long, value_name = "START..END")]
        trace_window: Option<String>,
        /// Fraction of requests drawn in timeline.json (by request id).
        #[arg(long, value_name = "FRACTION")]
        trace_sample: Option<f64>,
        /// Progress bar on stderr.
        #[arg(long, value_enum, default_value_t = progress::Mode::Auto)]
        progress: progress::Mode,
        /// No progress bar and no run statistics on stderr (warnings and errors still).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run the cartesian product of --vary lists in parallel; writes sweep.csv (one row per
    /// point: the varied values and every summary metric) and sweep.json, and prints a
    /// comparison table.
    Sweep(SweepArgs),
    /// Join the sweep.csv of every shard of a sweep (`sweep --shard I/N`) into the
    /// sweep.csv one unsharded run gives.
    Merge {
        /// The shards' output directories.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Where the merged sweep.csv and sweep.json go.
        #[arg(long, default_value = "sweep")]
        out: PathBuf,
    },
    /// Write one self-contained report.html from one or more output directories (several
    /// are overlaid and put side by side).
    Report {
        /// Output directories of earlier runs.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where the page goes (default: DIR/report.html for one directory, ./report.html
        /// for several).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Parse and validate a scenario without running it.
    Validate {
        scenario: PathBuf,
        #[arg(long = "set", value_name = "PATH=VALUE")]
        set: Vec<String>,
    },
    /// Replay a measured benchmark run through the scenario's server and compare TTFT, ITL
    /// and E2E (mean, p50, p90, p99), overall and per stage; also writes check-real.json.
    CheckReal {
        /// Scenario describing the server (its workload is replaced by the measured one).
        scenario: PathBuf,
        /// Per-request measurements: a CSV (arrival_s|arrival_ms|arrival_us, input_tokens,
        /// output_tokens, ttft_ms, e2e_ms[, itl_ms][, stage]) or a vLLM benchmark JSON.
        measured: PathBuf,
        /// Where check-real.json goes (default: the scenario's outputs.dir).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long = "set", value_name = "PATH=VALUE")]
        set: Vec<String>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Fit latency coefficients to a measured benchmark run by simulating it; prints the
    /// latency line to paste into the scenario and the error on a held-back 20 %.
    Calibrate {
        /// Scenario describing the server (model, GPU, TP, limits, KV blocks).
        scenario: PathBuf,
        /// Per-request measurements (as for check-real).
        measured: PathBuf,
        /// Which coefficients to fit.
        #[arg(long, value_enum, default_value_t = FitModel::Blackbox)]
        model: FitModel,
        /// The instance group whose latency model is fitted.
        #[arg(long, default_value_t = 0)]
        group: usize,
        /// Most simulations to run.
        #[arg(long, default_value_t = 400)]
        max_evals: usize,
        #[arg(long = "set", value_name = "PATH=VALUE")]
        set: Vec<String>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// List what a scenario can name.
    List {
        #[arg(value_enum)]
        what: ListWhat,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FitModel {
    /// α0 and β0, β1, β2 of the blackbox model.
    Blackbox,
    /// Scale factors on the bundled trained-physics coefficients, and α0.
    TrainedPhysics,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TraceKind {
    /// decisions.csv: one row per routing decision.
    Decisions,
    /// timeline.json: steps, requests and counters for Perfetto UI / chrome://tracing.
    Timeline,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ListWhat {
    Policies,
    /// Batch schedulers only (also under `policies`, family `scheduler`).
    Schedulers,
    Models,
    Hardware,
}

fn parse_overrides(set: &[String], seed: Option<u64>) -> Result<Vec<(String, String)>, String> {
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

fn load(
    path: &Path,
    overrides: &[(String, String)],
    catalog: &Catalog,
) -> Result<scenario::Scenario, ExitCode> {
    scenario::load(path, overrides, catalog).map_err(|e| {
        eprint!("error: {e}");
        ExitCode::from(2)
    })
}

/// The process's peak resident memory (Linux `VmHWM`), in MB.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The resolved set-up `validate` prints: each group's instances, GPUs and KV cache (with
/// the GPU memory it takes when the model is known), and the expected work.
fn setup(sc: &scenario::Scenario, catalog: &Catalog) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for (i, g) in sc.cluster.groups.iter().enumerate() {
        let name = if g.name.is_empty() {
            format!("group{i}")
        } else {
            g.name.clone()
        };
        let Ok(r) = sc.resolve_group(i, catalog) else {
            continue; // validation already reported it
        };
        let model = r.model.as_ref().map_or("-".to_string(), |m| m.id.clone());
        let gpu = r.gpu.as_ref().map_or("-".to_string(), |x| x.id.clone());
        let memory = r.model.as_ref().map_or(String::new(), |m| {
            let bytes = servesim::model::kv_bytes_per_token(m, g.tp, g.pp)
                * f64::from(g.block_size)
                * f64::from(r.kv_blocks);
            format!(" ({:.1} GiB per GPU)", bytes / f64::from(1u32 << 30))
        });
        let derived = if g.kv_blocks.is_some() {
            ""
        } else {
            ", derived"
        };
        let _ = write!(
            s,
            "  {name}: {} × {model} on {} × {gpu} (tp {}, pp {}); {} KV blocks of {} tokens{derived}{memory}",
            g.count,
            g.tp * g.pp,
            g.tp,
            g.pp,
            r.kv_blocks,
            g.block_size
        );
        if g.cpu_kv_blocks > 0 {
            let _ = write!(s, " + {} CPU-tier blocks", g.cpu_kv_blocks);
        }
        if let Some(sc) = &g.scaling {
            let _ = write!(
                s,
                "; autoscaled {}..={} instances ({} at start)",
                sc.min, sc.max, g.count
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "    serving path: {}", r.serving.describe());
        let _ = writeln!(s, "    steps: {}", step_examples(&r));
    }
    let w = scenario::estimate::estimate(sc);
    if w.requests > 0.0 {
        let _ = writeln!(
            s,
            "  workload: about {:.0} requests and {:.0} output tokens (~{:.1} s of wall time in a release build){}",
            w.requests,
            w.output_tokens,
            w.wall_s,
            if sc.workload.traces.is_empty() {
                ""
            } else {
                ", plus the traces"
            }
        );
    }
    s
}

/// What a group's steps cost, for `validate`: the latency model's price of a decode step of
/// 1, 32 and 128 requests at 1,024 tokens of context each, with the scheduler's work as the
/// serving path places it.
fn step_examples(r: &scenario::ResolvedGroup) -> String {
    use servesim::latency::{BatchShape, StepItem};
    let mut parts = Vec::new();
    for n in [1u32, 32, 128] {
        let items = vec![
            StepItem {
                new_tokens: 1,
                context_tokens: 1024,
                input_tokens: 512,
                prefill: false,
            };
            n as usize
        ];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 0,
            decode_tokens: n,
        };
        match r.latency.step_time(&shape) {
            Ok(t) => parts.push(format!(
                "{:.2} ms for {n}",
                r.serving.step(t, n).as_us() as f64 / 1e3
            )),
            Err(e) => return format!("cannot price a decode step: {e}"),
        }
    }
    format!(
        "a decode step at 1,024 tokens of context each takes {} requests",
        parts.join(", ")
    )
}

/// Renders the report of `dirs` and writes it to `out` (staged, then moved into place).
fn write_report(dirs: &[PathBuf], out: &Path) -> Result<(), String> {
    let page = servesim::report::report(dirs).map_err(|e| e.to_string())?;
    let name = out
        .file_name()
        .ok_or_else(|| format!("--out {}: expected a file name", out.display()))?
        .to_string_lossy()
        .into_owned();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut dir = servesim::output::OutputDir::open(&parent).map_err(|e| e.to_string())?;
    let mut w = dir.create(&name).map_err(|e| e.to_string())?;
    use std::io::Write;
    w.write_all(page.as_bytes())
        .and_then(|()| w.flush())
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    drop(w);
    dir.commit().map_err(|e| e.to_string())?;
    Ok(())
}

/// Writes sweep.csv and sweep.json into `out`, together (staged, then moved into place).
fn write_sweep(
    out: &Path,
    plan: &servesim::sweep::Plan,
    rows: &std::collections::BTreeMap<usize, Vec<String>>,
) -> Result<(), String> {
    use std::io::Write;
    let csv = servesim::sweep::to_csv(plan, rows)?;
    let json = serde_json::to_string_pretty(plan).map_err(|e| e.to_string())? + "\n";
    let mut dir = servesim::output::OutputDir::open(out).map_err(|e| e.to_string())?;
    for (name, bytes) in [
        ("sweep.csv", csv.as_slice()),
        ("sweep.json", json.as_bytes()),
    ] {
        let mut w = dir.create(name).map_err(|e| e.to_string())?;
        w.write_all(bytes)
            .and_then(|()| w.flush())
            .map_err(|e| format!("cannot write {}: {e}", out.join(name).display()))?;
    }
    dir.commit().map_err(|e| e.to_string())?;
    Ok(())
}

#[derive(clap::Args)]
struct SweepArgs {
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
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Parallel runs (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Run only the points whose number is I modulo N (a Slurm array task or a
    /// Kubernetes Indexed Job pod); join the parts with `servesim merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Where sweep.csv and sweep.json go (default: ./sweep).
    #[arg(long, default_value = "sweep")]
    out: PathBuf,
    /// Also keep every point's result files in OUT/point-NNNN.
    #[arg(long)]
    keep_outputs: bool,
    #[arg(long, value_enum, default_value_t = progress::Mode::Auto)]
    progress: progress::Mode,
    #[arg(long, short)]
    quiet: bool,
}

/// `servesim sweep`: checks every point before running any.
fn sweep(a: SweepArgs, catalog: &Catalog) -> ExitCode {
    use servesim::sweep::{Plan, parse_axis, parse_shard};
    let fail = |e: String| {
        eprintln!("error: {e}");
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
    let plan = Plan {
        scenario: a.scenario.display().to_string(),
        set,
        axes,
        replicas: a.replicas,
        shard,
    };
    if let Err(e) = servesim::output::check_dir(&a.out) {
        return fail(e.to_string());
    }
    // Every point is loaded and validated first; all problems are reported at once.
    let mut points = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for point in plan.points() {
        match scenario::load(&a.scenario, &plan.overrides(&point), catalog) {
            Ok(mut sc) => {
                sc.seed = sc.seed.wrapping_add(u64::from(point.replica));
                points.push((point, sc));
            }
            Err(e) => {
                let text = e.to_string();
                if !problems.contains(&text) {
                    problems.push(text);
                }
            }
        }
    }
    if !problems.is_empty() {
        for p in &problems {
            eprint!("error: {p}");
        }
        return ExitCode::from(2);
    }
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
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
        "{elapsed_precise} [{bar:30}] {pos}/{len} points, {msg} (ETA {eta})",
    );
    let finished = std::sync::atomic::AtomicU64::new(0);
    let total = points.len();
    #[expect(
        clippy::disallowed_methods,
        reason = "wall-clock timing goes to stderr only"
    )]
    let started = std::time::Instant::now();
    let rows = servesim::sweep::run(
        &plan,
        points,
        jobs,
        keep.as_deref(),
        Some(interrupt),
        &|point, outcome| {
            let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
            let what = match outcome {
                Ok(_) => "ok",
                Err(_) => "failed",
            };
            bar.update(n, format!("point {} {what}", point.index));
        },
    );
    bar.clear();
    let Some(rows) = rows else {
        eprintln!("servesim: interrupted; no sweep result was written");
        return ExitCode::from(130);
    };
    if let Err(e) = write_sweep(&a.out, &plan, &rows) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    print!("{}", servesim::sweep::table(&plan.header(), &rows));
    let failed = rows
        .values()
        .filter(|r| r.iter().any(|c| c.starts_with("error: ")))
        .count();
    if a.quiet {
        if failed > 0 {
            eprintln!("warning: {failed} of {total} runs failed: see their status column");
        }
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "servesim: {total} runs on {jobs} threads in {:.2} s wall{}; wrote sweep.csv, sweep.json in {}",
        started.elapsed().as_secs_f64(),
        if failed > 0 {
            format!(" ({failed} failed: see their status column)")
        } else {
            String::new()
        },
        a.out.display()
    );
    ExitCode::SUCCESS
}

/// Says on stderr when a scenario will take minutes.
fn announce(sc: &scenario::Scenario) {
    if let Some(a) = scenario::estimate::estimate(sc).announcement() {
        eprintln!("warning: {a}");
    }
}

/// Loads the scenario and the measurements for check-real and calibrate.
fn load_with_measured(
    scenario: &Path,
    measured: &Path,
    set: &[String],
    catalog: &Catalog,
) -> Result<(scenario::Scenario, Vec<servesim::fidelity::MeasuredRequest>), ExitCode> {
    let overrides = parse_overrides(set, None).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })?;
    let sc = load(scenario, &overrides, catalog)?;
    let rows = servesim::fidelity::measured::load(measured).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })?;
    Ok((sc, rows))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    match cli.command {
        Command::CheckReal {
            scenario,
            measured,
            out,
            set,
            format,
        } => {
            let (sc, rows) = match load_with_measured(&scenario, &measured, &set, catalog) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let report = match servesim::fidelity::check_real(&sc, &rows) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            };
            let json = serde_json::to_string_pretty(&report).expect("the report serialises");
            let dir = out.unwrap_or_else(|| PathBuf::from(&sc.outputs.dir));
            let mut out_dir = match servesim::output::OutputDir::open(&dir) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let written = out_dir.create("check-real.json").and_then(|mut w| {
                use std::io::Write;
                w.write_all(json.as_bytes())
                    .and_then(|()| w.write_all(b"\n"))
                    .and_then(|()| w.flush())
                    .map_err(|e| servesim::output::OutputError::Write {
                        path: out_dir.staged_path("check-real.json"),
                        message: e.to_string(),
                    })
            });
            if let Err(e) = written.and_then(|()| out_dir.commit()) {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
            match format {
                Format::Text => print!("{}", report.to_text()),
                Format::Json => println!("{json}"),
            }
            eprintln!(
                "servesim: report in {}",
                dir.join("check-real.json").display()
            );
            ExitCode::SUCCESS
        }
        Command::Calibrate {
            scenario,
            measured,
            model,
            group,
            max_evals,
            set,
            format,
        } => {
            let (sc, rows) = match load_with_measured(&scenario, &measured, &set, catalog) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let family = match model {
                FitModel::Blackbox => servesim::fidelity::calibrate::Family::Blackbox,
                FitModel::TrainedPhysics => servesim::fidelity::calibrate::Family::TrainedPhysics,
            };
            let fit = match servesim::fidelity::calibrate::calibrate(
                &sc,
                group,
                &rows,
                family,
                max_evals.max(8),
            ) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            };
            match format {
                Format::Text => {
                    println!(
                        "fitted on {} requests in {} simulations (loss {:.6})",
                        rows.len() - fit.holdout.measured_requests,
                        fit.evaluations,
                        fit.train_loss
                    );
                    for (name, v) in &fit.params {
                        println!("  {name:<30} {v:.6}");
                    }
                    println!("\npaste into cluster.groups[{group}]:\n    {}", fit.ron);
                    println!("\nerror on the held-back 20 %:");
                    print!("{}", fit.holdout.to_text());
                }
                Format::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&fit).expect("the fit serialises")
                ),
            }
            ExitCode::SUCCESS
        }
        Command::List {
            what: ListWhat::Models,
        } => {
            println!(
                "{:<44}{:>7}{:>8}{:>7}{:>5}{:>8}{:>10}  weights",
                "model", "layers", "hidden", "heads", "kv", "experts", "params_b"
            );
            for (id, _) in servesim::model::BUNDLED_MODELS {
                let m = servesim::model::ModelConfig::bundled(id).expect("bundled models parse");
                println!(
                    "{:<44}{:>7}{:>8}{:>7}{:>5}{:>8}{:>10.2}  {} B/param",
                    m.id,
                    m.layers,
                    m.hidden,
                    m.heads,
                    m.kv_heads,
                    m.experts,
                    servesim::model::params(&m) / 1e9,
                    m.weight_bytes
                );
            }
            ExitCode::SUCCESS
        }
        Command::List {
            what: ListWhat::Hardware,
        } => {
            println!(
                "{:<10}{:>10}{:>10}{:>8}{:>8}{:>8}{:>8}  aliases",
                "gpu", "bf16 TF", "fp8 TF", "TB/s", "mfu_p", "mfu_d", "GiB"
            );
            for g in servesim::model::bundled_gpus() {
                println!(
                    "{:<10}{:>10}{:>10}{:>8}{:>8}{:>8}{:>8}  {}",
                    g.id,
                    g.tflops_bf16,
                    g.tflops_fp8,
                    g.bandwidth_tb_per_s,
                    g.mfu_prefill,
                    g.mfu_decode,
                    g.memory_gib,
                    g.aliases.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Command::List {
            what: what @ (ListWhat::Policies | ListWhat::Schedulers),
        } => {
            let mut family = "";
            let only = (what == ListWhat::Schedulers).then_some("scheduler");
            for (fam, name, description, params) in catalog.describe() {
                if only.is_some_and(|f| f != fam) {
                    continue;
                }
                if fam != family {
                    println!("{fam}:");
                    family = fam;
                }
                println!("  {name:<20} {description}");
                for (p, meaning) in params {
                    println!("    {:<32} {meaning}", format!("{fam}_params.{p}"));
                }
            }
            ExitCode::SUCCESS
        }
        Command::Sweep(args) => sweep(args, catalog),
        Command::Merge { shards, out } => {
            let parts = match shards
                .iter()
                .map(|d| servesim::sweep::Part::read(d))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let (plan, rows) = match servesim::sweep::merge(parts) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = write_sweep(&out, &plan, &rows) {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
            print!("{}", servesim::sweep::table(&plan.header(), &rows));
            eprintln!(
                "servesim: merged {} shards, {} points, into {}",
                shards.len(),
                rows.len(),
                out.join("sweep.csv").display()
            );
            ExitCode::SUCCESS
        }
        Command::Report { dirs, out } => {
            let out = out.unwrap_or_else(|| match dirs.as_slice() {
                [one] => one.join("report.html"),
                _ => PathBuf::from("report.html"),
            });
            match write_report(&dirs, &out) {
                Ok(()) => {
                    eprintln!("servesim: report in {}", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Validate { scenario, set } => {
            let overrides = match parse_overrides(&set, None) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            match load(&scenario, &overrides, catalog) {
                Ok(sc) => {
                    println!("{}: ok", scenario.display());
                    print!("{}", setup(&sc, catalog));
                    announce(&sc);
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        Command::Run {
            scenario,
            out,
            seed,
            set,
            format,
            check_invariants,
            trace,
            max_wall_s,
            report: want_report,
            trace_window,
            trace_sample,
            progress: progress_mode,
            quiet,
        } => {
            let mut set = set;
            if trace.contains(&TraceKind::Timeline) {
                set.push("outputs.timeline_json=true".into());
            }
            if let Some(w) = &trace_window {
                let Some((a, b)) = w.split_once("..") else {
                    eprintln!(
                        "error: --trace-window {w}: expected START..END in simulated seconds, e.g. --trace-window 100..160"
                    );
                    return ExitCode::from(2);
                };
                let (Ok(a), Ok(b)) = (a.trim().parse::<f64>(), b.trim().parse::<f64>()) else {
                    eprintln!(
                        "error: --trace-window {w}: START and END must be numbers of simulated seconds, e.g. --trace-window 100..160"
                    );
                    return ExitCode::from(2);
                };
                set.push(format!("outputs.timeline_window_s=({a:?},{b:?})"));
            }
            if let Some(r) = trace_sample {
                set.push(format!("outputs.timeline_request_sample={r:?}"));
            }
            let overrides = match parse_overrides(&set, seed) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let sc = match load(&scenario, &overrides, catalog) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let out_dir = out.unwrap_or_else(|| PathBuf::from(&sc.outputs.dir));
            if let Err(e) = servesim::output::check_dir(&out_dir) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            announce(&sc);
            // Ctrl-C, SIGTERM and SIGHUP stop the run at the next tick; staged files are
            // removed and the output directory is left as it was.
            let interrupt = Arc::new(AtomicBool::new(false));
            let flag = interrupt.clone();
            let _ = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed));
            // --max-wall-s stops it the same way, from a timer thread.
            let wall_limit_hit = Arc::new(AtomicBool::new(false));
            if let Some(limit) = max_wall_s {
                if !limit.is_finite() || limit <= 0.0 {
                    eprintln!("error: --max-wall-s must be a number of seconds > 0, got {limit}");
                    return ExitCode::from(2);
                }
                let (flag, hit) = (interrupt.clone(), wall_limit_hit.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_secs_f64(limit.min(1e9)));
                    hit.store(true, Ordering::Relaxed);
                    flag.store(true, Ordering::Relaxed);
                });
            }
            #[expect(
                clippy::disallowed_methods,
                reason = "wall-clock timing goes to stderr only"
            )]
            let started = std::time::Instant::now();
            let estimate = scenario::estimate::estimate(&sc);
            let total = (sc.workload.traces.is_empty() && estimate.requests >= 1.0)
                .then_some(estimate.requests.round() as u64);
            let bar = progress::Bar::new(
                if quiet {
                    progress::Mode::Never
                } else {
                    progress_mode
                },
                total,
                if total.is_some() {
                    "{elapsed_precise} [{bar:30}] {pos}/~{len} requests done, {msg} ({per_sec}, ETA {eta})"
                } else {
                    "{elapsed_precise} {spinner} {pos} requests done, {msg} ({per_sec})"
                },
            );
            let hook_bar = bar.clone();
            let sim = match Simulation::from_app(
                app,
                &sc,
                RunOptions {
                    check_invariants,
                    out_dir: Some(out_dir.clone()),
                    trace_decisions: trace.contains(&TraceKind::Decisions),
                    interrupt: Some(interrupt.clone()),
                    progress: Some(servesim::ProgressHook(Arc::new(move |p| {
                        hook_bar.update(
                            p.ended,
                            format!("simulated {:.1} s", p.now.as_us() as f64 / 1e6),
                        );
                    }))),
                    ..Default::default()
                },
            ) {
                Ok(s) => s,
                // An unusable output directory (another run holds it, a result would
                // replace an input) is found before anything is simulated.
                Err(servesim::SimError::Outputs(
                    e @ servesim::output::OutputError::Unusable(_),
                )) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            };
            let as_it_was = |e: &servesim::SimError| {
                if e.outputs_unchanged() {
                    format!("; {} is as it was before this run", out_dir.display())
                } else {
                    String::new()
                }
            };
            let outcome = sim.run_reporting();
            bar.clear();
            let (summary, report) = match outcome {
                Ok(s) => s,
                Err(e @ servesim::SimError::Interrupted(t))
                    if wall_limit_hit.load(Ordering::Relaxed) =>
                {
                    eprintln!(
                        "error: stopped by --max-wall-s at simulated time {t}{}",
                        as_it_was(&e)
                    );
                    return ExitCode::from(1);
                }
                Err(e @ servesim::SimError::Interrupted(_)) => {
                    eprintln!("servesim: {e}{}", as_it_was(&e));
                    return ExitCode::from(130);
                }
                Err(e) => {
                    eprintln!("error: {e}{}", as_it_was(&e));
                    return ExitCode::from(1);
                }
            };
            if !report.cleaned.is_empty() {
                eprintln!(
                    "servesim: removed what killed runs left in {}: {}",
                    out_dir.display(),
                    report.cleaned.join(", ")
                );
            }
            for w in &summary.warnings {
                eprintln!("warning: {w}");
            }
            let wall = started.elapsed().as_secs_f64();
            match format {
                Format::Text => print!("{}", summary.to_text()),
                Format::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&summary).expect("summary serialises")
                ),
            }
            let results = if report.written.is_empty() {
                "no result file written (every output is off)".to_string()
            } else {
                format!(
                    "wrote {} in {}",
                    report.written.join(", "),
                    out_dir.display()
                )
            };
            if !quiet {
                eprintln!(
                    "servesim: {} requests, {} ticks in {wall:.3} s wall ({:.0} requests/s, {:.0} ns per tick{}); {results}",
                    summary.requests.injected,
                    summary.ticks,
                    summary.requests.injected as f64 / wall.max(1e-9),
                    wall * 1e9 / summary.ticks.max(1) as f64,
                    peak_rss_mb().map_or(String::new(), |mb| format!(", peak RSS {mb:.0} MB")),
                );
            }
            if want_report || sc.outputs.report_html {
                let page = out_dir.join("report.html");
                if let Err(e) = write_report(std::slice::from_ref(&out_dir), &page) {
                    eprintln!("error: the run's results are written, but not its report: {e}");
                    return ExitCode::from(1);
                }
                if !quiet {
                    eprintln!("servesim: report in {}", page.display());
                }
            }
            let mut report = report;
            if want_report || sc.outputs.report_html {
                report.earlier.retain(|n| n != "report.html");
            }
            if !report.earlier.is_empty() && !quiet {
                eprintln!(
                    "servesim: left alone in {}: {} (from an earlier run; this run does not write {})",
                    out_dir.display(),
                    report.earlier.join(", "),
                    if report.earlier.len() == 1 {
                        "it"
                    } else {
                        "them"
                    }
                );
            }
            ExitCode::SUCCESS
        }
    }
}
