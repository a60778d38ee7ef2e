//! `calibrate` and `check-real` end to end, on measurements servesim made itself.

use std::path::Path;

use rand::RngExt;
use servesim::fidelity::calibrate::{Family, calibrate};
use servesim::fidelity::{self, measured};
use servesim::scenario::LatencySpec;
use servesim::{RunOptions, Simulation};

use crate::common::{parse, read_rows};

/// A load that sweeps from light to heavy (1, 5, then 12 req/s), so the per-step and
/// per-request costs show separately, with prompts long enough to be chunked.
fn truth(latency: &str) -> String {
    format!(
        "(seed: 11, cluster: (groups: [(kv_blocks: 8000, max_num_seqs: 64, max_num_batched_tokens: 1024,
            latency: {latency})]),
          workload: (clients: [(arrival: Staged(stages: [(rate_per_s: 1.0, duration_s: 400.0),
              (rate_per_s: 5.0, duration_s: 250.0), (rate_per_s: 12.0, duration_s: 200.0)]),
            input_tokens: Uniform(min: 64, max: 1500), output_tokens: Uniform(min: 8, max: 300))]))"
    )
}

/// Runs `src` and returns its requests.csv as measured rows, with multiplicative Gaussian
/// noise of `noise` (relative sd) on every TTFT, E2E and ITL.
fn measure(src: &str, noise: f64, dir: &Path) -> Vec<fidelity::MeasuredRequest> {
    Simulation::new(
        &parse(src),
        RunOptions {
            out_dir: Some(dir.to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap()
    .run()
    .unwrap();
    let mut rng = servesim::rng::stream(1, "measurement noise");
    let mut gauss = move || {
        // Box–Muller.
        let (u, v): (f64, f64) = (rng.random(), rng.random());
        (-2.0 * (1.0 - u).ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    };
    let mut csv = String::from("arrival_us,input_tokens,output_tokens,ttft_ms,e2e_ms,itl_ms\n");
    for r in read_rows(&dir.join("requests.csv")) {
        let mut f = |col: &str| r.str(col).parse::<f64>().unwrap() * (1.0 + noise * gauss());
        let ttft = f("ttft_ms");
        let e2e = f("e2e_ms").max(ttft);
        let itl = if r.str("mean_itl_ms").is_empty() {
            String::new()
        } else {
            format!("{:.4}", f("mean_itl_ms"))
        };
        csv.push_str(&format!(
            "{},{},{},{ttft:.4},{e2e:.4},{itl}\n",
            r.str("arrival_us"),
            r.str("input_tokens"),
            r.str("output_tokens")
        ));
    }
    let path = dir.join("measured.csv");
    std::fs::write(&path, csv).unwrap();
    measured::load(&path).unwrap().requests
}

/// Measured requests that all completed, as a measurement.
fn measurement(rows: &[fidelity::MeasuredRequest]) -> fidelity::Measurement {
    fidelity::Measurement {
        requests: rows.to_vec(),
        ..Default::default()
    }
}

#[test]
fn calibrate_recovers_blackbox_coefficients_from_noisy_measurements() {
    // α0 15 ms, β = 6 ms per step + 25 µs per prompt token + 180 µs per decoding request;
    // 2 % noise on every measured latency; the fit starts from the measurements alone.
    let dir = tempfile::tempdir().unwrap();
    let rows = measure(
        &truth("Blackbox(alpha: [15000.0, 0.0, 0.0], beta: [6000.0, 25.0, 180.0])"),
        0.02,
        dir.path(),
    );
    assert!(rows.len() > 4000, "{}", rows.len());
    let server = parse(&truth(
        "Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 1.0])",
    ));
    let fit = calibrate(
        &servesim::ServesimApp::new(),
        &server,
        0,
        &rows,
        Family::Blackbox,
        400,
    )
    .unwrap();
    let truth = [15000.0, 6000.0, 25.0, 180.0];
    eprintln!(
        "fit {:?} in {} simulations; held-back mean APE {:.2} %",
        fit.params, fit.evaluations, fit.holdout.mean_ape_pct
    );
    for ((name, got), want) in fit.params.iter().zip(truth) {
        let err = (got - want) / want;
        assert!(
            err.abs() < 0.02,
            "{name}: {got} vs {want} ({:+.2} %)",
            err * 100.0
        );
    }
    assert!(fit.evaluations <= 400);
    // The held-back fifth: means within a few percent.
    assert_eq!(fit.holdout.measured_requests, rows.len() / 5);
    assert!(fit.holdout.mean_ape_pct < 3.0, "{}", fit.holdout.to_text());
    // The snippet is a scenario latency line that parses back to the fitted model.
    let line = fit
        .ron
        .trim_start_matches("latency: ")
        .trim_end_matches(',');
    let spec: LatencySpec = ron::from_str(line).unwrap();
    let LatencySpec::Blackbox { alpha, beta } = spec else {
        panic!("{}", fit.ron)
    };
    assert!((beta[0] - fit.params[1].1).abs() < 1e-5 && alpha[1] == 0.0);
}

#[test]
fn check_real_of_a_run_against_itself_is_exact_and_splits_stages() {
    // Replaying a servesim run through the scenario that made it reproduces every request:
    // a zero error on every line. A stage column splits the report.
    let dir = tempfile::tempdir().unwrap();
    let src = "(seed: 4, cluster: (groups: [(kv_blocks: 2000, max_num_seqs: 16,
            latency: Blackbox(alpha: [2000.0, 0.0, 0.0], beta: [4000.0, 12.0, 90.0]))]),
          workload: (num_requests: 300, clients: [(rate_per_s: 8.0,
            input_tokens: Uniform(min: 32, max: 900), output_tokens: Uniform(min: 2, max: 120))]))";
    let mut rows = measure(src, 0.0, dir.path());
    for (i, r) in rows.iter_mut().enumerate() {
        r.stage = Some(if i < 150 { "first" } else { "second" }.into());
    }
    let report = fidelity::check_real(
        &servesim::ServesimApp::new(),
        &parse(src),
        &measurement(&rows),
        None,
    )
    .unwrap();
    assert_eq!(report.measured_requests, 300);
    assert_eq!(report.not_completed_in_simulation, 0);
    assert_eq!(report.overall.requests, 300);
    assert_eq!(report.overall.lines.len(), 12);
    for l in &report.overall.lines {
        // The CSV rounds to 1 µs (3 decimals of ms).
        assert!(l.ape_pct < 0.01, "{l:?}");
    }
    let names: Vec<&str> = report.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(report.stages[0].requests + report.stages[1].requests, 300);
    // A slower model shows up as positive errors of the right size: every step 2 ms longer.
    let mut slow = parse(src);
    slow.cluster.groups[0].latency = Some(LatencySpec::Blackbox {
        alpha: vec![2000.0, 0.0, 0.0],
        beta: vec![6000.0, 12.0, 90.0],
    });
    let off = fidelity::check_real(
        &servesim::ServesimApp::new(),
        &slow,
        &measurement(&rows),
        None,
    )
    .unwrap();
    let itl = off
        .overall
        .lines
        .iter()
        .find(|l| l.metric == "itl" && l.stat == "mean")
        .unwrap();
    assert!(itl.simulated_ms > itl.measured_ms + 1.5, "{itl:?}");
}

#[test]
fn trained_physics_scales_can_be_fitted() {
    // A smoke test of the second family (its recovery is measured in docs/fidelity.md): a short fit
    // on Llama-3.1-8B measurements lowers the loss and returns coefficients that run.
    let dir = tempfile::tempdir().unwrap();
    let src = "(seed: 2, cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", kv_blocks: 4000,
            max_num_seqs: 32, latency: TrainedPhysics(beta: [0.2, 0.0, 1.5, 0.75, 32.0, 4.4, 126.0, 481.0, 0.0, 1.5]))]),
          workload: (num_requests: 400, clients: [(rate_per_s: 6.0,
            input_tokens: Uniform(min: 32, max: 900), output_tokens: Uniform(min: 2, max: 120))]))";
    let rows = measure(src, 0.0, dir.path());
    let mut server = parse(src);
    server.cluster.groups[0].latency = Some(LatencySpec::TrainedPhysics {
        alpha: None,
        beta: None,
    });
    let fit = calibrate(
        &servesim::ServesimApp::new(),
        &server,
        0,
        &rows,
        Family::TrainedPhysics,
        40,
    )
    .unwrap();
    assert_eq!(fit.params.len(), 5);
    assert!(fit.train_loss < 0.01, "{}", fit.train_loss);
    assert!(fit.ron.starts_with("latency: TrainedPhysics(alpha: ["));
}

#[test]
fn our_rooflines_unmeasured_terms_are_recovered_from_noisy_measurements() {
    // Llama-3.1-8B on an H100 behind vLLM's serving path, made with a GEMM efficiency of
    // 0.6, paged KV reads at 55 % of peak and 1.5 ms per step besides the layers (the
    // defaults are 0.76, 90 % and 400 µs), and α0 = 5 ms; 2 % noise on every latency. The
    // fit starts from the defaults and keeps every other term of the roofline.
    let truth = |latency: &str| {
        format!(
            "(seed: 11, cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\",
                kv_blocks: 8000, max_num_seqs: 64, max_num_batched_tokens: 1024,
                latency: {latency})]),
              workload: (clients: [(arrival: Staged(stages: [(rate_per_s: 1.0, duration_s: 300.0),
                  (rate_per_s: 5.0, duration_s: 200.0), (rate_per_s: 14.0, duration_s: 150.0)]),
                input_tokens: Uniform(min: 64, max: 1500), output_tokens: Uniform(min: 8, max: 300))]))"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let rows = measure(
        &truth(
            "Roofline(alpha: [5000.0, 0.0, 0.0], gemm_efficiency: 0.6, kv_read_efficiency: 0.55, \
             step_overhead_us: 1500.0)",
        ),
        0.02,
        dir.path(),
    );
    let server = parse(&truth("Roofline()"));
    let fit = calibrate(
        &servesim::ServesimApp::new(),
        &server,
        0,
        &rows,
        Family::Roofline,
        200,
    )
    .unwrap();
    eprintln!(
        "fit {:?} in {} simulations; held-back mean APE {:.2} %",
        fit.params, fit.evaluations, fit.holdout.mean_ape_pct
    );
    for ((name, got), want) in fit.params.iter().zip([5000.0, 0.6, 0.55, 1500.0]) {
        let err = (got - want) / want;
        assert!(
            err.abs() < 0.05,
            "{name}: {got} vs {want} ({:+.2} %)",
            err * 100.0
        );
    }
    assert!(fit.holdout.mean_ape_pct < 3.0, "{}", fit.holdout.to_text());
    // The snippet is a roofline line that parses back to the fitted model.
    let line = fit
        .ron
        .trim_start_matches("latency: ")
        .trim_end_matches(',');
    let spec: LatencySpec = ron::Options::default()
        .with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
        .from_str(line)
        .unwrap();
    let LatencySpec::Roofline {
        kv_read_efficiency: Some(kv),
        bandwidth_efficiency: None,
        ..
    } = spec
    else {
        panic!("{}", fit.ron)
    };
    assert!((kv - fit.params[2].1).abs() < 1e-5, "{}", fit.ron);
}

#[test]
fn calibrate_and_check_real_run_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = truth("Blackbox(alpha: [15000.0, 0.0, 0.0], beta: [6000.0, 25.0, 180.0])")
        .replace("duration_s: 400.0", "duration_s: 40.0")
        .replace("duration_s: 250.0", "duration_s: 25.0")
        .replace("duration_s: 200.0", "duration_s: 20.0");
    let scenario = dir.path().join("server.ron");
    std::fs::write(&scenario, &src).unwrap();
    measure(&src, 0.0, dir.path());
    let measured = dir.path().join("measured.csv");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(args)
            .output()
            .unwrap()
    };
    let out_dir = dir.path().join("report");
    let out = run(&[
        "check-real",
        scenario.to_str().unwrap(),
        measured.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("ttft    mean"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("check-real.json")).unwrap())
            .unwrap();
    assert_eq!(json["overall"]["lines"].as_array().unwrap().len(), 12);
    // The simulated TTFT taken apart, over the requests compared (none preempted here): its
    // parts add up to the table's simulated mean.
    let parts = &json["overall"]["simulated_ttft_parts_ms"];
    assert_eq!(parts["requests"], json["overall"]["requests"]);
    let sum: f64 = ["to_the_instance", "waiting", "prefill", "token_out"]
        .iter()
        .map(|k| parts[k].as_f64().unwrap())
        .sum();
    let mean = &json["overall"]["lines"][0];
    assert_eq!(
        (mean["metric"].as_str(), mean["stat"].as_str()),
        (Some("ttft"), Some("mean"))
    );
    assert!(
        (sum - mean["simulated_ms"].as_f64().unwrap()).abs() < 1e-6,
        "{parts}"
    );
    assert!(
        text.contains("simulated ttft taken apart (mean ms): "),
        "{text}"
    );
    // A run's results and a comparison share a directory; each command names the other's
    // files it leaves (check-real.json was left beside a later run's files without a word).
    let (scenario_arg, measured_arg) = (scenario.to_str().unwrap(), measured.to_str().unwrap());
    for (command, left) in [
        (
            &["run", scenario_arg][..],
            "check-real.json (from an earlier run; this run does not write it)",
        ),
        (
            &["check-real", scenario_arg, measured_arg],
            "requests.csv, summary.json, timeseries.csv (from an earlier run; check-real writes only check-real.json)",
        ),
    ] {
        let done = run(&[command, &["--out", out_dir.to_str().unwrap()]].concat());
        let said = format!("servesim: left alone in {}: {left}", out_dir.display());
        assert!(
            String::from_utf8_lossy(&done.stderr).contains(&said),
            "{said}"
        );
    }
    let out = run(&[
        "calibrate",
        scenario.to_str().unwrap(),
        measured.to_str().unwrap(),
        "--max-evals",
        "30",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("latency: Blackbox(alpha: ["), "{text}");
    assert!(text.contains("held-back 20 %"), "{text}");
    // The replay sends the measured requests and runs until they end: an override of the
    // workload or the horizon changes nothing, and is said to (it was taken silently). One of
    // the server is not warned of.
    let report = std::fs::read_to_string(out_dir.join("check-real.json")).unwrap();
    let out = run(&[
        "check-real",
        scenario_arg,
        measured_arg,
        "--out",
        out_dir.to_str().unwrap(),
        "--set",
        "workload.num_requests=5",
        "--set",
        "horizon_s=Some(1.0)",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: --set workload.num_requests=5 is not used: the replay sends the measured requests in place of the scenario's workload and runs until they end")
            && err.contains("warning: --set horizon_s=Some(1.0) is not used"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("check-real.json")).unwrap(),
        report
    );
    let out = run(&[
        "calibrate",
        scenario_arg,
        measured_arg,
        "--max-evals",
        "8",
        "--set",
        "cluster.groups[0].count=1",
    ]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("is not used"));
    // Our roofline needs the model and GPU this server does not name: said before anything
    // runs, as bad input.
    let out = run(&[
        "calibrate",
        scenario.to_str().unwrap(),
        measured.to_str().unwrap(),
        "--model",
        "roofline",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: --model roofline fits a model computed from the group's model and GPU, and cluster.groups[0] has no model and no gpu"),
        "{err}"
    );
    // A measured file that is not one: exit 2 with the file and line.
    std::fs::write(dir.path().join("bad.csv"), "arrival_s,input_tokens\n1,2\n").unwrap();
    let out = run(&[
        "check-real",
        scenario.to_str().unwrap(),
        dir.path().join("bad.csv").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.csv:1: no `output_tokens` column"),
        "{err}"
    );
}

/// Issue 30, class 4: a measured run that the scenario's cluster cannot serve at all (every
/// prompt longer than its KV cache) is an error for both commands, not "mean APE −0.0 %" or a
/// fitted model to paste.
#[test]
fn measurements_nothing_in_the_scenario_can_serve_are_an_error_not_a_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("server.ron");
    std::fs::write(
        &scenario,
        "(cluster: (groups: [(kv_blocks: 4, block_size: 16,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))]),
          workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(4), output_tokens: Constant(4))]))",
    )
    .unwrap();
    let measured = dir.path().join("measured.csv");
    let mut csv = String::from("arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n");
    for k in 0..20 {
        csv += &format!("{}.0,500,20,30.0,300.0\n", k);
    }
    std::fs::write(&measured, csv).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(args)
            .output()
            .unwrap()
    };
    let out_dir = dir.path().join("report");
    let check = run(&[
        "check-real",
        scenario.to_str().unwrap(),
        measured.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(1), "{err}");
    assert!(
        err.contains("none of the 20 measured requests completed"),
        "{err}"
    );
    assert!(!out_dir.join("check-real.json").exists());
    assert!(!String::from_utf8_lossy(&check.stdout).contains("APE"));
    let fit = run(&[
        "calibrate",
        scenario.to_str().unwrap(),
        measured.to_str().unwrap(),
        "--max-evals",
        "8",
    ]);
    let err = String::from_utf8_lossy(&fit.stderr);
    assert_eq!(fit.status.code(), Some(1), "{err}");
    assert!(
        err.contains("none of the 20 measured requests completed"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&fit.stdout).contains("paste into"));
}

/// A fit that cannot be made is bad input (exit 2, before any simulation), not a fitted line
/// to paste beside a table of NaN: one measured request leaves nothing to hold back, and a
/// group or a budget the fit cannot have is said as such. The library says the same.
#[test]
fn a_fit_without_enough_requests_simulations_or_the_group_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("server.ron");
    let src = "(cluster: (groups: [(kv_blocks: 4000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))]),
          workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(4), output_tokens: Constant(4))]))";
    std::fs::write(&scenario, src).unwrap();
    let write = |name: &str, rows: usize| {
        let mut csv = String::from("arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n");
        for k in 0..rows {
            csv += &format!("{k}.0,200,20,30.0,300.0\n");
        }
        let path = dir.path().join(name);
        std::fs::write(&path, csv).unwrap();
        path
    };
    let (nine, twenty) = (write("nine.csv", 9), write("twenty.csv", 20));
    let run = |measured: &Path, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(["calibrate", scenario.to_str().unwrap()])
            .arg(measured)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&nine, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("error: 9 measured requests are too few to fit a latency model")
            && err.contains("needs at least 10"),
        "{err}"
    );
    let (code, err) = run(&twenty, &["--max-evals", "7"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--max-evals 7: a fit needs at least 8 simulations"),
        "{err}"
    );
    let (code, err) = run(&twenty, &["--group", "1", "--model", "roofline"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--group 1: the scenario has 1 instance group\n"),
        "{err}"
    );
    // Through the library: the same sentences, as calibration errors (a trained-physics fit
    // of a group without model and GPU: `calibrate_and_check_real_run_from_the_command_line`
    // has the command line's).
    let app = servesim::ServesimApp::new();
    let twenty_rows = measured::load(&twenty).unwrap().requests;
    let e = calibrate(
        &app,
        &parse(src),
        0,
        &twenty_rows,
        Family::TrainedPhysics,
        400,
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "family trained-physics fits a model computed from the group's model and GPU"
        ),
        "{e}"
    );
    let rows = measured::load(&nine).unwrap().requests;
    let e = calibrate(&app, &parse(src), 0, &rows, Family::Blackbox, 400).unwrap_err();
    assert!(
        e.to_string().starts_with("9 measured requests are too few"),
        "{e}"
    );
}

/// inference-perf's per-request report, written the way inference-perf writes it (perf_counter
/// seconds of any origin; each token's arrival), is a measured run like the others: replayed
/// through the server that made it, every line matches, from the command line too.
#[test]
fn an_inference_perf_per_request_report_is_a_measured_run() {
    let dir = tempfile::tempdir().unwrap();
    let src = "(seed: 4, cluster: (groups: [(kv_blocks: 2000, max_num_seqs: 16,
            latency: Blackbox(alpha: [2000.0, 0.0, 0.0], beta: [4000.0, 12.0, 90.0]))]),
          workload: (num_requests: 200, clients: [(rate_per_s: 8.0,
            input_tokens: Uniform(min: 32, max: 900), output_tokens: Uniform(min: 2, max: 120))]))";
    let rows = measure(src, 0.0, dir.path());
    let entries: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let start = 4_000.0 + r.arrival_us as f64 / 1e6;
            let (first, end) = (start + r.ttft_us / 1e6, start + r.e2e_us / 1e6);
            let n = r.output_tokens as usize;
            let times: Vec<f64> = (0..n)
                .map(|k| first + (end - first) * k as f64 / (n - 1).max(1) as f64)
                .collect();
            serde_json::json!({"start_time": start, "end_time": end, "request": "{}",
                "response": "", "error": null,
                "info": {"request_metrics": {"text": {"input_tokens": r.input_tokens}},
                    "response_metrics": {"output_tokens": r.output_tokens,
                        "output_token_times": times}}})
        })
        .collect();
    let path = dir.path().join("per_request_lifecycle_metrics.json");
    std::fs::write(&path, serde_json::to_string(&entries).unwrap()).unwrap();
    let read = measured::load(&path).unwrap();
    assert_eq!(read.requests.len(), 200);
    let report =
        fidelity::check_real(&servesim::ServesimApp::new(), &parse(src), &read, None).unwrap();
    for l in &report.overall.lines {
        assert!(l.ape_pct < 0.01, "{l:?}");
    }
    std::fs::write(dir.path().join("server.ron"), src).unwrap();
    let args = ["check-real", "server.ron", path.to_str().unwrap()];
    let out = crate::common::servesim_ok(&[&args[..], &["--out", "report"]].concat(), dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(
            "200 measured requests replayed, 0 of them timed out; 0 that completed did not complete in the simulation\nno client timeout"
        ),
        "{text}"
    );
}

/// A run that falls behind, its clients giving up after 20 s: its `requests.csv` (completed
/// and timed-out rows, as servesim writes it) is a measured run. Replayed through the same
/// server with the same timeout, the same requests time out and every compared line matches;
/// without a timeout nobody gives up. Written as inference-perf writes a timeout (an `error`
/// of type `TimeoutError`, no token counts, the request body), the timeout and each prompt's
/// length are read from the report.
#[test]
fn check_real_replays_and_counts_the_requests_whose_client_timed_out() {
    // One request at a time, ~0.26 s each (61 output tokens of 4.09 ms on average), 6
    // arriving per second: the queue grows.
    let src = "(seed: 5, cluster: (groups: [(kv_blocks: 4000, max_num_seqs: 1,
            latency: Blackbox(alpha: [2000.0, 0.0, 0.0], beta: [4000.0, 12.0, 90.0]))]),
          workload: (num_requests: 400, clients: [(rate_per_s: 6.0, timeout_s: 20.0,
            input_tokens: Uniform(min: 32, max: 900), output_tokens: Uniform(min: 2, max: 120))]))";
    let (_, _, dir) = crate::common::run_keeping(&parse(src));
    let csv = dir.path().join("requests.csv");
    let read = measured::load(&csv).unwrap();
    let timed_out = read.timed_out();
    assert!(
        (50..350).contains(&timed_out) && read.failed == 0,
        "{timed_out} timed out, {} failed",
        read.failed
    );
    assert_eq!(
        read.timeout_s(),
        None,
        "requests.csv does not say when they gave up"
    );
    let app = servesim::ServesimApp::new();
    let twenty = fidelity::replay_timeout(&read, Some(20.0)).unwrap();
    let report = fidelity::check_real(&app, &parse(src), &read, twenty).unwrap();
    assert_eq!(report.measured_requests, 400);
    assert_eq!(report.timeout_s, Some(20.0));
    assert_eq!(
        (
            report.overall.timeouts.measured,
            report.overall.timeouts.simulated
        ),
        (timed_out, timed_out)
    );
    assert_eq!(report.not_completed_in_simulation, 0);
    assert_eq!(report.overall.requests, 400 - timed_out);
    for l in &report.overall.lines {
        assert!(l.ape_pct < 0.01, "{l:?}");
    }
    // Without the timeout the simulated clients wait: nobody gives up, and the waits show.
    let patient = fidelity::check_real(&app, &parse(src), &read, None).unwrap();
    assert_eq!(patient.overall.timeouts.simulated, 0);
    assert_eq!(patient.overall.timeouts.measured, timed_out);
    assert!(patient.mean_ape_pct > 1.0, "{}", patient.to_text());
    // docs/fidelity.md gives this replay's figures.
    let ttft = &patient.overall.lines[0];
    assert!(ttft.metric == "ttft" && ttft.simulated_ms > ttft.measured_ms);
    let doc = fidelity_doc();
    for figure in [
        format!("the same {timed_out} timeouts"),
        format!("its mean TTFT is {:.0} % high", ttft.ape_pct),
    ] {
        assert!(doc.contains(&figure), "docs/fidelity.md lacks: {figure}");
    }

    // inference-perf's report of the same run: prompts of their own (each begins with its
    // arrival time), 4 characters per token.
    let body = |at: u64, input: u32, output: u32| {
        let text = format!("{:08}", at % 100_000_000) + &"abcd".repeat(input as usize - 2);
        serde_json::json!({"model": "m", "max_tokens": output, "ignore_eos": true,
            "prompt": text})
        .to_string()
    };
    let entries: Vec<serde_json::Value> = read
        .requests
        .iter()
        .map(|r| {
            let start = 4_000.0 + r.arrival_us as f64 / 1e6;
            if r.timed_out {
                return serde_json::json!({"start_time": start, "end_time": start + 20.0,
                    "request": body(r.arrival_us, r.input_tokens, r.output_tokens), "response": "",
                    "info": {"request_metrics": {"text": {"input_tokens": 0}},
                        "response_metrics": null},
                    "error": {"error_type": "TimeoutError", "error_msg": "Request timed out"}});
            }
            let (first, end) = (start + r.ttft_us / 1e6, start + r.e2e_us / 1e6);
            let n = r.output_tokens as usize;
            let times: Vec<f64> = (0..n)
                .map(|k| first + (end - first) * k as f64 / (n - 1).max(1) as f64)
                .collect();
            serde_json::json!({"start_time": start, "end_time": end,
                "request": body(r.arrival_us, r.input_tokens, r.output_tokens), "response": "", "error": null,
                "info": {"request_metrics": {"text": {"input_tokens": r.input_tokens}},
                    "response_metrics": {"output_tokens": r.output_tokens,
                        "output_token_times": times}}})
        })
        .collect();
    // A request refused before the others (an HTTP error): counted in its stage, not replayed.
    let mut entries = entries;
    entries.push(
        serde_json::json!({"start_time": 3_999.0, "end_time": 3_999.1,
        "request": body(0, 10, 10), "response": "", "info": null,
        "error": {"error_type": "HTTP Error 503", "error_msg": ""}}),
    );
    let ip_dir = dir.path().join("inference-perf");
    std::fs::create_dir(&ip_dir).unwrap();
    let report_path = ip_dir.join("per_request_lifecycle_metrics.json");
    std::fs::write(&report_path, serde_json::to_string(&entries).unwrap()).unwrap();
    // Its stage summaries: stages run one after another, 151 then 250 requests sent.
    let stage = |id: u32, count: u32, rate: f64| {
        std::fs::write(
            ip_dir.join(format!("stage_{id}_lifecycle_metrics.json")),
            serde_json::json!({"load_summary": {"count": count, "requested_rate": rate}})
                .to_string(),
        )
        .unwrap();
    };
    stage(0, 151, 6.0);
    stage(1, 250, 6.0);
    let ip = measured::load(&report_path).unwrap();
    assert_eq!((ip.failed, ip.notes.len()), (1, 0), "{:?}", ip.notes);
    let names: Vec<&str> = ip
        .requests
        .iter()
        .map(|r| r.stage.as_deref().unwrap())
        .collect();
    assert!(
        names[..150].iter().all(|n| *n == "stage 0 (6 req/s)")
            && names[150..].iter().all(|n| *n == "stage 1 (6 req/s)"),
        "the first 150 replayed requests (and the refused one) are stage 0's"
    );
    assert_eq!(ip.timed_out(), timed_out);
    assert!((ip.timeout_s().unwrap() - 20.0).abs() < 1e-6);
    for (a, b) in ip.requests.iter().zip(&read.requests) {
        assert_eq!(
            (a.input_tokens, a.output_tokens),
            (b.input_tokens, b.output_tokens)
        );
    }
    let inferred = fidelity::replay_timeout(&ip, None).unwrap();
    let again = fidelity::check_real(&app, &parse(src), &ip, inferred).unwrap();
    assert_eq!(
        (
            again.overall.timeouts.measured,
            again.overall.timeouts.simulated
        ),
        (timed_out, timed_out)
    );
    assert_eq!(again.measured_failed, 1);
    let per_stage: Vec<(usize, usize)> = again
        .stages
        .iter()
        .map(|s| (s.requests + s.timeouts.measured, s.timeouts.simulated))
        .collect();
    assert_eq!(per_stage.len(), 2);
    assert_eq!(per_stage[0].0 + per_stage[1].0, 400);
    assert_eq!(per_stage[0].1 + per_stage[1].1, timed_out);
    assert!(
        per_stage[1].1 > per_stage[0].1,
        "the queue grows: later requests give up more"
    );
    // Summaries that do not add up to the report split nothing, and say so.
    stage(1, 200, 6.0);
    let off = measured::load(&report_path).unwrap();
    assert!(off.requests.iter().all(|r| r.stage.is_none()));
    assert_eq!(
        off.notes,
        [
            "the stage summaries beside the report count 351 requests and the report holds 401: the comparison is not split by stage"
        ]
    );

    // From the command line: the timeout given, said, and compared; a bad one refused.
    let scenario = dir.path().join("server.ron");
    std::fs::write(&scenario, src).unwrap();
    let (scenario, csv) = (scenario.to_str().unwrap(), csv.to_str().unwrap());
    let check = |extra: &[&str]| {
        let args = [&["check-real", scenario, csv, "--out", "report"][..], extra].concat();
        crate::common::servesim(&args, dir.path())
    };
    let out = check(&["--timeout-s", "20"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("client timeout 20 s\n")
            && text.contains(&format!(
                "timeouts: measured {timed_out}, simulated {timed_out} (+0.0 %)"
            )),
        "{text}"
    );
    let out = check(&["--timeout-s", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--timeout-s: the client timeout must be a number of seconds in (0,")
            && err.contains("], got 0\n"),
        "{err}"
    );
    // A fit matches the completed requests alone, and says what it left out.
    let out = crate::common::servesim(
        &["calibrate", scenario, csv, "--max-evals", "8"],
        dir.path(),
    );
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{timed_out} of the measured requests timed out or failed and are left out of the fit"
        )) && text.starts_with("fitted on "),
        "{err}\n{text}"
    );
}

/// inference-perf's report holds every prompt's text, and prompts that begin alike share
/// their first KV blocks in the replay as they did on the server. A run whose requests share
/// system prompts (four of 400 tokens, a trace saying which), written as inference-perf
/// writes it with the texts (the system prompt's, then the request's own), replays exactly;
/// the same report without the texts replays every prompt as unique, and its TTFTs come out
/// high.
#[test]
fn prompts_that_begin_alike_share_their_prefix_in_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = servesim::rng::stream(3, "prefix replay");
    let mut trace =
        String::from("arrival_us,input_tokens,output_tokens,prefix_group,prefix_tokens\n");
    let mut group = Vec::new();
    for i in 0..200u64 {
        let g = rng.random_range(0..4u32);
        let (input, output) = (
            400 + rng.random_range(40..300u32),
            rng.random_range(5..60u32),
        );
        trace.push_str(&format!("{},{input},{output},g{g},400\n", i * 200_000));
        group.push(g);
    }
    std::fs::write(dir.path().join("t.csv"), trace).unwrap();
    let cluster = "cluster: (groups: [(kv_blocks: 20000, max_num_seqs: 32,
        latency: Blackbox(alpha: [1000.0, 0.0, 0.0], beta: [3000.0, 30.0, 60.0]))])";
    let run = format!(
        "(seed: 2, {cluster}, workload: (traces: [(format: ServesimCsv, file: \"t.csv\")]))"
    );
    std::fs::write(dir.path().join("s.ron"), run).unwrap();
    crate::common::servesim_ok(&["run", "s.ron", "--out", "o"], dir.path());
    let mut rows = read_rows(&dir.path().join("o/requests.csv"));
    rows.sort_by_key(|r| r.u64("request_id"));
    let cached: u64 = rows.iter().map(|r| r.u64("cached_tokens")).sum();
    assert!(
        cached > 100 * 384,
        "the run shared its system prompts: {cached}"
    );
    // 4 characters per token: the system prompt's 1,600, then the request's own.
    let system = |g: u32| format!("<system prompt {g}>").repeat(100)[..1600].to_string();
    let report = |with_text: bool| -> Vec<serde_json::Value> {
        rows.iter()
            .map(|r| {
                let (id, input) = (r.u64("request_id"), r.u64("input_tokens") as usize);
                let own = format!("{id:08}") + &"q".repeat(4 * (input - 400) - 8);
                let text = system(group[id as usize]) + &own;
                let start = 4_000.0 + r.u64("arrival_us") as f64 / 1e6;
                let ttft = r.str("ttft_ms").parse::<f64>().unwrap() / 1e3;
                let e2e = r.str("e2e_ms").parse::<f64>().unwrap() / 1e3;
                let n = r.u64("output_tokens") as usize;
                let times: Vec<f64> = (0..n)
                    .map(|k| start + ttft + (e2e - ttft) * k as f64 / (n - 1).max(1) as f64)
                    .collect();
                let body = if with_text {
                    serde_json::json!({"max_tokens": n, "prompt": text}).to_string()
                } else {
                    "{}".to_string()
                };
                serde_json::json!({"start_time": start, "end_time": start + e2e,
                    "request": body, "response": "", "error": null,
                    "info": {"input_tokens": input, "output_tokens": n,
                        "output_token_times": times}})
            })
            .collect()
    };
    let server = parse(&format!(
        "(seed: 2, {cluster}, workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
            input_tokens: Constant(8), output_tokens: Constant(1))]))"
    ));
    let app = servesim::ServesimApp::new();
    let check = |with_text: bool| {
        let path = dir.path().join(format!("ip-{with_text}.json"));
        std::fs::write(&path, serde_json::to_string(&report(with_text)).unwrap()).unwrap();
        let m = measured::load(&path).unwrap();
        assert_eq!(m.requests.iter().all(|r| r.content.is_some()), with_text);
        fidelity::check_real(&app, &server, &m, None).unwrap()
    };
    let shared = check(true);
    for l in &shared.overall.lines {
        assert!(l.ape_pct < 0.01, "{l:?}");
    }
    let unique = check(false);
    let ttft = &unique.overall.lines[0];
    assert!(
        ttft.metric == "ttft" && ttft.simulated_ms > 2.0 * ttft.measured_ms,
        "{}",
        unique.to_text()
    );
    let figure = format!(
        "TTFT {:.0} % high: {:.1} ms for {:.1}",
        ttft.ape_pct, ttft.simulated_ms, ttft.measured_ms
    );
    assert!(
        fidelity_doc().contains(&figure),
        "docs/fidelity.md lacks: {figure}"
    );
}

/// docs/fidelity.md with its line breaks as spaces (a figure may straddle two lines).
fn fidelity_doc() -> String {
    crate::common::doc("fidelity")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A benchmark that did not stream gets each answer whole: E2E = TTFT, ITL 0. `calibrate`
/// fitted decode steps of 0.1 µs to it and `check-real` printed an "inf" APE beside a mean
/// that said it averaged the ITL; both now refuse the file with the fix (exit 2), and one
/// request that streamed is enough to read it.
#[test]
fn a_benchmark_that_did_not_stream_is_refused_by_check_real_and_calibrate() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("arrival_us,input_tokens,output_tokens,ttft_ms,e2e_ms\n");
    for k in 0..20 {
        csv += &format!("{},300,50,{},{}\n", k * 100_000, 40 + k % 7, 40 + k % 7);
    }
    // A one-token answer says nothing either way.
    csv += "2000000,300,1,41,41\n";
    std::fs::write(dir.path().join("whole.csv"), &csv).unwrap();
    std::fs::write(
        dir.path().join("streamed.csv"),
        csv.replace("100000,300,50,41,41", "100000,300,50,41,380"),
    )
    .unwrap();
    let quickstart = crate::common::root().join("scenarios/quickstart.ron");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = dir.path().join("report");
    let (scenario, whole) = (quickstart.to_str().unwrap(), dir.path().join("whole.csv"));
    let whole = whole.to_str().unwrap();
    for command in [
        vec![
            "check-real",
            scenario,
            whole,
            "--out",
            out.to_str().unwrap(),
        ],
        vec!["calibrate", scenario, whole, "--max-evals", "8"],
    ] {
        let done = run(&command);
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{command:?}: {err}");
        assert!(
            err.contains(
                "whole.csv: each of the 20 completed requests with more than one output token got them all at once (E2E = TTFT): the benchmark did not stream"
            ) && err.contains("hint: measure with streaming"),
            "{command:?}: {err}"
        );
        assert!(!out.exists(), "{command:?} wrote nothing");
    }
    let done = run(&[
        "check-real",
        quickstart.to_str().unwrap(),
        dir.path().join("streamed.csv").to_str().unwrap(),
        "--out",
        dir.path().join("streamed").to_str().unwrap(),
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
}
