//! `servesim run`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::args::{Format, RunArgs, TraceKind, announce, load_after, parse_overrides};
use super::progress;
use crate::catalog::Catalog;
use crate::{RunOptions, ServesimApp, Simulation};

/// The process's peak resident memory (Linux `VmHWM`), in MB.
pub(crate) fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Where a page given as `--out` goes: a link to a file is followed, so the page replaces the
/// file it names and the link stays (a staged page moved onto the link would replace the link).
pub(crate) fn page_target(out: &Path) -> Result<PathBuf, String> {
    let link = std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_symlink());
    if !link || not_a_file(out) {
        return Ok(out.to_path_buf());
    }
    std::fs::canonicalize(out).map_err(|e| {
        format!(
            "--out {} is a link to what cannot be reached ({e}); give the page's own file name",
            out.display()
        )
    })
}

/// Whether `out` (its link followed) is something other than a file or a directory: a device,
/// a FIFO, a terminal or the pipe `/dev/stdout` names.
fn not_a_file(out: &Path) -> bool {
    std::fs::metadata(out).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Writes a report page to `out` (staged, then moved into place). The error carries its
/// exit code: 2 for an output location that cannot be used, 1 for a failed write.
///
/// What is not a file (`--out /dev/stdout`, a FIFO, a device) is written into as a shell's `>`
/// would: a staged page moved over it would put a file in the device's place.
pub(crate) fn write_page(page: &str, out: &Path) -> Result<(), (u8, String)> {
    use std::io::Write;
    let out = &page_target(out).map_err(|e| (2, e))?;
    if not_a_file(out) {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(out)
            .and_then(|mut f| f.write_all(page.as_bytes()).and_then(|()| f.flush()))
            .map_err(|e| (1, format!("cannot write {}: {e}", out.display())));
    }
    let name = out
        .file_name()
        .ok_or_else(|| (2, format!("--out {}: expected a file name", out.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut dir = crate::output::OutputDir::open(&parent).map_err(|e| (2, e.to_string()))?;
    dir.notes().iter().for_each(|n| noteln!("servesim: {n}"));
    let mut w = dir.create(&name).map_err(|e| (1, e.to_string()))?;
    w.write_all(page.as_bytes())
        .and_then(|()| w.flush())
        .map_err(|e| (1, format!("cannot write {}: {e}", out.display())))?;
    drop(w);
    dir.commit().map_err(|e| (1, e.to_string()))?;
    Ok(())
}

/// Runs a scenario and writes its results.
pub(crate) fn run(app: &ServesimApp, a: RunArgs) -> ExitCode {
    let RunArgs {
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
    } = a;
    let built = app.build();
    let catalog = built.world().resource::<Catalog>();
    // What changes the scenario's text, named in its errors: `--set` and the flags that set a
    // field for the user (the file's line:column positions are of the text so changed).
    let mut applied: Vec<&str> = Vec::new();
    if !set.is_empty() {
        applied.push("--set");
    }
    if seed.is_some() {
        applied.push("--seed");
    }
    let mut set = set;
    let mut by_flag = |set: &mut Vec<String>, flag: &'static str, field: &str, value: String| {
        if let Some(given) = set
            .iter()
            .find(|s| s.split_once('=').is_some_and(|(p, _)| p.trim() == field))
        {
            noteln!("error: {flag} sets {field}, which --set {given} sets too: give one of them");
            return false;
        }
        set.push(format!("{field}={value}"));
        applied.push(flag);
        true
    };
    if trace.contains(&TraceKind::Timeline)
        && !by_flag(
            &mut set,
            "--trace timeline",
            "outputs.timeline_json",
            "true".into(),
        )
    {
        return ExitCode::from(2);
    }
    if let Some(w) = &trace_window {
        let Some((a, b)) = w.split_once("..") else {
            noteln!(
                "error: --trace-window {w}: expected START..END in simulated seconds, e.g. --trace-window 100..160"
            );
            return ExitCode::from(2);
        };
        let (Ok(a), Ok(b)) = (a.trim().parse::<f64>(), b.trim().parse::<f64>()) else {
            noteln!(
                "error: --trace-window {w}: START and END must be numbers of simulated seconds, e.g. --trace-window 100..160"
            );
            return ExitCode::from(2);
        };
        if !(a.is_finite() && b.is_finite() && 0.0 <= a && a < b) {
            noteln!(
                "error: --trace-window {w}: START and END must be simulated seconds with 0 ≤ START < END, e.g. --trace-window 100..160"
            );
            return ExitCode::from(2);
        }
        if !by_flag(
            &mut set,
            "--trace-window",
            "outputs.timeline_window_s",
            format!("({a:?},{b:?})"),
        ) {
            return ExitCode::from(2);
        }
    }
    if let Some(r) = trace_sample {
        if !(r > 0.0 && r <= 1.0) {
            noteln!(
                "error: --trace-sample {}: must be a fraction in (0, 1], e.g. --trace-sample 0.01 to draw one request in a hundred",
                crate::scenario::readable(r)
            );
            return ExitCode::from(2);
        }
        if !by_flag(
            &mut set,
            "--trace-sample",
            "outputs.timeline_request_sample",
            format!("{r:?}"),
        ) {
            return ExitCode::from(2);
        }
    }
    let overrides = match parse_overrides(&set, seed) {
        Ok(o) => o,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let sc = match load_after(&scenario, &overrides, catalog, &applied.join(", ")) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if !sc.outputs.timeline_json {
        let flag = match (&trace_window, trace_sample) {
            (Some(_), _) => Some("--trace-window"),
            (None, Some(_)) => Some("--trace-sample"),
            (None, None) => None,
        };
        if let Some(flag) = flag {
            noteln!(
                "error: {flag} shapes timeline.json, which this run does not write: add --trace timeline (or outputs.timeline_json: true)"
            );
            return ExitCode::from(2);
        }
    }
    let out_dir = out.unwrap_or_else(|| PathBuf::from(&sc.outputs.dir));
    if let Err(e) = crate::output::check_dir(&out_dir) {
        noteln!("error: {e}");
        return ExitCode::from(2);
    }
    announce(&sc, catalog);
    // Ctrl-C, SIGTERM and SIGHUP stop the run at the next tick; staged files are
    // removed and the output directory is left as it was.
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = interrupt.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed));
    // --max-wall-s stops it the same way, from a timer thread.
    let wall_limit_hit = Arc::new(AtomicBool::new(false));
    if let Some(limit) = max_wall_s {
        if !limit.is_finite() || limit <= 0.0 {
            noteln!(
                "error: --max-wall-s must be a finite number of seconds > 0, got {}",
                crate::scenario::readable(limit)
            );
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
    let estimate = crate::loader::estimate::estimate(&sc);
    let total = (sc.workload.traces.is_empty() && estimate.requests >= 1.0)
        .then_some(estimate.requests.round() as u64);
    let bar = progress::Bar::new(
        if quiet {
            progress::Mode::Never
        } else {
            progress_mode
        },
        total,
        progress::Counts::RequestsDone,
    );
    let hook_bar = bar.clone();
    let sim = match Simulation::from_app(
        built,
        &sc,
        RunOptions {
            check_invariants,
            out_dir: Some(out_dir.clone()),
            trace_decisions: trace.contains(&TraceKind::Decisions),
            interrupt: Some(interrupt.clone()),
            progress: Some(crate::ProgressHook(Arc::new(move |p| {
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
        Err(crate::SimError::Setup(crate::SetupError::Outputs(
            e @ crate::output::OutputError::Unusable(_),
        ))) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let as_it_was = |e: &crate::SimError| {
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
        Err(e @ crate::SimError::Run(crate::RunError::Interrupted(t)))
            if wall_limit_hit.load(Ordering::Relaxed) =>
        {
            noteln!(
                "error: stopped by --max-wall-s at simulated time {t}{}",
                as_it_was(&e)
            );
            return ExitCode::from(1);
        }
        Err(e @ crate::SimError::Run(crate::RunError::Interrupted(_))) => {
            noteln!("servesim: {e}{}", as_it_was(&e));
            return ExitCode::from(130);
        }
        Err(e) => {
            noteln!("error: {e}{}", as_it_was(&e));
            return ExitCode::from(1);
        }
    };
    if !report.completed.is_empty() {
        noteln!(
            "servesim: finished the commit of a run killed while moving its results into {}: {} moved into place (this run then replaced what it writes)",
            out_dir.display(),
            report.completed.join(", ")
        );
    }
    if !report.cleaned.is_empty() {
        noteln!(
            "servesim: removed what killed runs left in {}: {}",
            out_dir.display(),
            report.cleaned.join(", ")
        );
    }
    for w in &summary.warnings {
        noteln!("warning: {w}");
    }
    let wall = started.elapsed().as_secs_f64();
    match format {
        Format::Text => out!("{}", summary.to_text()),
        Format::Json => outln!(
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
        // A run of no tick (a horizon before the first arrival) has no time per tick: the
        // whole set-up was shown as one ("6096853 ns per tick").
        let per_tick = if summary.ticks == 0 {
            String::new()
        } else {
            format!(", {:.0} ns per tick", wall * 1e9 / summary.ticks as f64)
        };
        noteln!(
            "servesim: {}, {} in {wall:.3} s wall ({:.0} requests/s{per_tick}{}); {results}",
            crate::scenario::counted(summary.requests.injected, "request"),
            crate::scenario::counted(summary.ticks, "tick"),
            summary.requests.injected as f64 / wall.max(1e-9),
            peak_rss_mb().map_or(String::new(), |mb| format!(", peak RSS {mb:.0} MB")),
        );
    }
    if want_report || sc.outputs.report_html {
        let page = out_dir.join("report.html");
        let written = crate::report::report_of_run(&out_dir, &report.written)
            .map_err(|e| e.to_string())
            .and_then(|html| write_page(&html, &page).map_err(|(_, e)| e));
        if let Err(e) = written {
            noteln!("error: the run's results are written, but not its report: {e}");
            return ExitCode::from(1);
        }
        if !quiet {
            noteln!("servesim: report in {}", page.display());
        }
    }
    let mut report = report;
    if want_report || sc.outputs.report_html {
        report.earlier.retain(|n| n != "report.html");
    }
    if let Some(note) = report.earlier_note()
        && !quiet
    {
        noteln!("servesim: {note}");
    }
    ExitCode::SUCCESS
}
