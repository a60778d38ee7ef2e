//! `servesim check-real` and `servesim calibrate`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::{CalibrateArgs, CheckRealArgs, Format, load, parse_overrides};
use crate::catalog::Catalog;
use crate::{ServesimApp, scenario};

/// Loads the scenario and the measurements for check-real and calibrate.
fn load_with_measured(
    scenario: &Path,
    measured: &Path,
    set: &[String],
    catalog: &Catalog,
) -> Result<(scenario::Scenario, crate::fidelity::Measurement), ExitCode> {
    let overrides = parse_overrides(set, None).map_err(|e| {
        noteln!("error: {e}");
        ExitCode::from(2)
    })?;
    // The replay takes the measured requests in place of the workload and runs until they
    // end (`fidelity::replay_scenario`): an override of either changes nothing.
    const REPLACED: [&str; 7] = [
        "workload.num_requests",
        "workload.duration_s",
        "workload.aggregate_rate_per_s",
        "workload.clients",
        "workload.traces",
        "workload.inference_perf",
        "horizon_s",
    ];
    for (path, value) in &overrides {
        let field = path.split(['[', '.']).take(2).collect::<Vec<_>>().join(".");
        if REPLACED.contains(&field.as_str()) || path == "workload" {
            noteln!(
                "warning: --set {path}={value} is not used: the replay sends the measured \
                 requests in place of the scenario's workload and runs until they end"
            );
        }
    }
    let sc = load(scenario, &overrides, catalog)?;
    let rows = crate::fidelity::measured::load(measured).map_err(|e| {
        noteln!("error: {e}");
        ExitCode::from(2)
    })?;
    Ok((sc, rows))
}

/// Replays a measured run and compares.
pub(crate) fn check_real(app: &ServesimApp, a: CheckRealArgs) -> ExitCode {
    let CheckRealArgs {
        scenario,
        measured,
        out,
        timeout_s,
        set,
        format,
    } = a;
    let built = app.build();
    let catalog = built.world().resource::<Catalog>();
    let (sc, measurement) = match load_with_measured(&scenario, &measured, &set, catalog) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let timeout = match crate::fidelity::replay_timeout(&measurement, timeout_s) {
        Ok(t) => t,
        Err(e) => {
            let whose = if timeout_s.is_some() {
                "--timeout-s"
            } else {
                "the measured requests' timeout"
            };
            noteln!("error: {whose}: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match crate::fidelity::check_real(app, &sc, &measurement, timeout) {
        Ok(r) => r,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let json = serde_json::to_string_pretty(&report).expect("the report serialises");
    let dir = out.unwrap_or_else(|| PathBuf::from(&sc.outputs.dir));
    let mut out_dir = match crate::output::OutputDir::open_for(&dir, crate::output::Results::Run) {
        Ok(d) => {
            d.notes().iter().for_each(|n| noteln!("servesim: {n}"));
            d
        }
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let written = out_dir.create("check-real.json").and_then(|mut w| {
        use std::io::Write;
        w.write_all(json.as_bytes())
            .and_then(|()| w.write_all(b"\n"))
            .and_then(|()| w.flush())
            .map_err(|e| crate::output::OutputError::Write {
                path: out_dir.staged_path("check-real.json"),
                message: e.to_string(),
            })
    });
    let earlier = out_dir.earlier_files();
    if let Err(e) = written.and_then(|()| out_dir.commit()) {
        noteln!("error: {e}");
        return ExitCode::from(1);
    }
    match format {
        Format::Text => out!("{}", report.to_text()),
        Format::Json => outln!("{json}"),
    }
    noteln!(
        "servesim: report in {}",
        dir.join("check-real.json").display()
    );
    if !earlier.is_empty() {
        noteln!(
            "servesim: left alone in {}: {} (from an earlier run; check-real writes only check-real.json)",
            dir.display(),
            earlier.join(", ")
        );
    }
    ExitCode::SUCCESS
}

/// Fits a latency model to a measured run.
pub(crate) fn calibrate(app: &ServesimApp, a: CalibrateArgs) -> ExitCode {
    let CalibrateArgs {
        scenario,
        measured,
        model,
        group,
        max_evals,
        set,
        format,
    } = a;
    let built = app.build();
    let catalog = built.world().resource::<Catalog>();
    let (sc, measurement) = match load_with_measured(&scenario, &measured, &set, catalog) {
        Ok(x) => x,
        Err(code) => return code,
    };
    // A fit matches completed requests and replays them alone.
    let rows = measurement.completed();
    let left_out = measurement.timed_out() + measurement.failed;
    if left_out > 0 {
        noteln!(
            "servesim: {left_out} of the measured requests timed out or failed and are left out of the fit (fit to a run that keeps up; `check-real` replays and counts timeouts)"
        );
    }
    if let Some(problem) = crate::fidelity::calibrate::input_problem(
        &sc,
        group,
        rows.len(),
        max_evals,
        model,
        ["--group", "--max-evals", "--model {}"],
    ) {
        noteln!("error: {problem}");
        return ExitCode::from(2);
    }
    let fit = match crate::fidelity::calibrate::calibrate(app, &sc, group, &rows, model, max_evals)
    {
        Ok(f) => f,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    match format {
        Format::Text => {
            outln!(
                "fitted on {} requests in {} simulations (loss {:.6})",
                rows.len() - fit.holdout.measured_requests,
                fit.evaluations,
                fit.train_loss
            );
            for (name, v) in &fit.params {
                outln!("  {name:<30} {v:.6}");
            }
            outln!("\npaste into cluster.groups[{group}]:\n    {}", fit.ron);
            outln!("\nerror on the held-back 20 %:");
            out!("{}", fit.holdout.to_text());
        }
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&fit).expect("the fit serialises")
        ),
    }
    ExitCode::SUCCESS
}
