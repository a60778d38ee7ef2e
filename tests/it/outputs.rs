//! Output directories: never lose, mix or half-write results (issue 17, items 1–5).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common::root;

/// Every entry of `dir` (name, contents; directories as `<dir>`), sorted.
fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap_or_else(|_| b"<dir>".to_vec());
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

fn names(dir: &Path) -> Vec<String> {
    listing(dir).into_iter().map(|(n, _)| n).collect()
}

/// Writes results of an "earlier run" into `dir` and returns the directory's contents.
fn old_results(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::write(dir.join("requests.csv"), "old rows\n").unwrap();
    std::fs::write(dir.join("summary.json"), "{\"old\": true}\n").unwrap();
    listing(dir)
}

/// A run of the cluster-16 scenario long enough (5 M requests) to be stopped midway.
fn long_run(out: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["run", "scenarios/cluster-16.ron", "--out"])
        .arg(out)
        .args(["--set", "workload.num_requests=5000000"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until a run has staged its files in `dir` (it is then well under way).
fn wait_for_staging(dir: &Path) -> PathBuf {
    for _ in 0..1200 {
        let staging = std::fs::read_dir(dir).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .find(|p| p.join("requests.csv").exists())
        });
        if let Some(s) = staging {
            std::thread::sleep(Duration::from_millis(300));
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the run did not start within a minute");
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

#[test]
fn ctrl_c_sigterm_and_sighup_all_stop_the_run_and_leave_the_directory_as_it_was() {
    for sig in ["INT", "TERM", "HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let before = old_results(dir.path());
        let child = long_run(dir.path());
        wait_for_staging(dir.path());
        signal(&child, sig);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "SIG{sig}: {err}");
        assert!(
            err.contains("interrupted at simulated time")
                && err.contains("is as it was before this run"),
            "SIG{sig}: {err}"
        );
        assert!(out.stdout.is_empty());
        assert_eq!(
            listing(dir.path()),
            before,
            "SIG{sig}: old results untouched, no temporary files left"
        );
    }
}

#[test]
fn a_second_run_into_a_busy_directory_is_refused_and_the_first_is_unharmed() {
    let dir = tempfile::tempdir().unwrap();
    let before = old_results(dir.path());
    let first = long_run(dir.path());
    wait_for_staging(dir.path());
    let out = run(&[
        "run",
        "scenarios/quickstart.ron",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("another servesim run is writing its results to"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // The first run's staged rows are its own: no second writer shares its files.
    let staging = wait_for_staging(dir.path());
    signal(&first, "TERM");
    let first_out = first.wait_with_output().unwrap();
    assert_eq!(first_out.status.code(), Some(130));
    assert!(!staging.exists());
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn two_runs_one_after_the_other_into_one_directory_write_consistent_results() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    for n in ["300", "200"] {
        let out = run(&[
            "run",
            "scenarios/quickstart.ron",
            "--out",
            out_dir,
            "--set",
            &format!("workload.num_requests={n}"),
        ]);
        assert!(out.status.success());
        let rows = crate::common::read_rows(&dir.path().join("requests.csv"));
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(rows.len().to_string(), n);
        assert_eq!(summary["requests"]["injected"].to_string(), n);
    }
}

#[test]
fn what_a_killed_run_leaves_is_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let before = old_results(dir.path());
    let mut child = long_run(dir.path());
    let staging = wait_for_staging(dir.path());
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    assert!(
        staging.join("requests.csv").exists(),
        "the kill left its staging"
    );
    // An old-style partial too (what versions before staging directories left).
    std::fs::write(dir.path().join(".requests.csv.partial"), "torn").unwrap();
    let out = run(&[
        "run",
        "scenarios/quickstart.ron",
        "--out",
        dir.path().to_str().unwrap(),
        "--set",
        "workload.num_requests=20",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("removed what killed runs left in"), "{err}");
    assert_eq!(
        names(dir.path()),
        ["requests.csv", "summary.json", "timeseries.csv"]
    );
    assert_ne!(
        listing(dir.path()),
        before,
        "the new results replaced the old"
    );
}

#[test]
fn files_a_run_does_not_write_are_left_alone_and_it_says_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    // The directory holds a trace that the scenario replays, and earlier results.
    std::fs::copy(
        root().join("scenarios/data/splitwise_conv.csv"),
        dir.path().join("requests.csv"),
    )
    .unwrap();
    std::fs::write(dir.path().join("decisions.csv"), "old decisions\n").unwrap();
    let scenario = dir.path().join("s.ron");
    std::fs::write(
        &scenario,
        "(cluster: (groups: [(kv_blocks: 20000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 1.0, 10.0]))]),
          workload: (num_requests: 30, traces: [(format: VidurCsv, file: \"requests.csv\")]),
          outputs: (dir: \"unused\", requests_csv: false))",
    )
    .unwrap();
    let before = std::fs::read(dir.path().join("requests.csv")).unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let out = run(&["run", scenario.to_str().unwrap(), "--out", out_dir]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("wrote timeseries.csv, summary.json in"),
        "{err}"
    );
    assert!(
        err.contains("left alone in")
            && err.contains("requests.csv, decisions.csv (from an earlier run"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("requests.csv")).unwrap(),
        before
    );
    assert_eq!(
        names(dir.path()),
        [
            "decisions.csv",
            "requests.csv",
            "s.ron",
            "summary.json",
            "timeseries.csv"
        ]
    );

    // With every output off, nothing is written and nothing is claimed.
    let out = run(&[
        "run",
        scenario.to_str().unwrap(),
        "--out",
        out_dir,
        "--set",
        "outputs.summary_json=false",
        "--set",
        "outputs.timeseries_csv=false",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("no result file written (every output is off)"),
        "{err}"
    );
    assert!(!err.contains("wrote "), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("requests.csv")).unwrap(),
        before
    );

    // A run that would replace the trace it replays is refused before it starts.
    let out = run(&[
        "run",
        scenario.to_str().unwrap(),
        "--out",
        out_dir,
        "--set",
        "outputs.requests_csv=true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is an input of this run (workload.traces[0].file)"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("requests.csv")).unwrap(),
        before
    );
}

#[test]
fn a_failed_commit_puts_every_earlier_result_back() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("requests.csv"), "old rows\n").unwrap();
    // A non-empty directory named summary.json: its rename, the last, fails.
    std::fs::create_dir(dir.path().join("summary.json")).unwrap();
    std::fs::write(dir.path().join("summary.json/keep"), "k").unwrap();
    let before = listing(dir.path());
    let out = run(&[
        "run",
        "scenarios/quickstart.ron",
        "--out",
        dir.path().to_str().unwrap(),
        "--set",
        "workload.num_requests=20",
        "--trace",
        "decisions",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot move the results into place")
            && err.contains("every result file was put back as it was")
            && err.contains("is as it was before this run"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(listing(dir.path()), before);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("summary.json/keep")).unwrap(),
        "k"
    );
}

#[cfg(unix)]
#[test]
fn a_link_at_a_temporary_or_result_name_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    for name in [
        ".requests.csv.partial",
        ".summary.json.partial",
        "summary.json",
    ] {
        std::os::unix::fs::symlink(&victim, out_dir.join(name)).unwrap();
    }
    let out = run(&[
        "run",
        "scenarios/quickstart.ron",
        "--out",
        out_dir.to_str().unwrap(),
        "--set",
        "workload.num_requests=20",
    ]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(
        names(&out_dir),
        ["requests.csv", "summary.json", "timeseries.csv"]
    );
    assert!(
        !std::fs::symlink_metadata(out_dir.join("summary.json"))
            .unwrap()
            .is_symlink()
    );
}

#[test]
fn a_directory_holds_one_command_s_results_and_another_command_is_refused_there() {
    // A sweep written into a run's directory left both side by side, and `servesim report`
    // showed the sweep alone; a run into a sweep's directory likewise.
    let tmp = tempfile::tempdir().unwrap();
    let (runs, sweeps) = (tmp.path().join("run"), tmp.path().join("sweep"));
    let small = "workload.num_requests=20";
    let q = "scenarios/quickstart.ron";
    let out = run(&["run", q, "--set", small, "--out", runs.to_str().unwrap()]);
    assert!(out.status.success());
    let vary = "policies.routing=[\"round_robin\"]";
    let out = run(&[
        "sweep",
        q,
        "--set",
        small,
        "--vary",
        vary,
        "--out",
        sweeps.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let (run_files, sweep_files) = (listing(&runs), listing(&sweeps));
    let refused = |args: &[&str], dir: &Path, holds: &str, this: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "{} holds a {holds}'s results ({}); this {this}'s would be mixed with them",
                dir.display(),
                if holds == "run" {
                    "requests.csv, summary.json, timeseries.csv"
                } else {
                    "sweep.csv, sweep.json"
                }
            )),
            "{err}"
        );
    };
    let (r, s) = (runs.to_str().unwrap(), sweeps.to_str().unwrap());
    refused(
        &["sweep", q, "--set", small, "--vary", vary, "--out", r],
        &runs,
        "run",
        "sweep",
    );
    refused(
        &["run", q, "--set", small, "--out", s],
        &sweeps,
        "sweep",
        "run",
    );
    refused(
        &[
            "capacity",
            q,
            "--set",
            "workload.num_requests=200",
            "--replicas",
            "1",
            "--out",
            r,
        ],
        &runs,
        "run",
        "capacity search",
    );
    refused(
        &["plan", "scenarios/plan.ron", "--out", s],
        &sweeps,
        "sweep",
        "plan",
    );
    // Nothing was written or removed, and a run's own directory still takes its next run.
    assert_eq!((listing(&runs), listing(&sweeps)), (run_files, sweep_files));
    assert!(
        run(&["run", q, "--set", small, "--out", r])
            .status
            .success()
    );
}
