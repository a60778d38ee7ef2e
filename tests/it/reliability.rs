//! Reliability: determinism at scale, interrupted and failed runs, diagnoses.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use servesim::policy::Catalog;
use servesim::{RunOptions, Simulation, scenario};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn outputs_hash(dir: &Path, stdout: &str) -> u64 {
    let mut h = DefaultHasher::new();
    stdout.hash(&mut h);
    for name in ["requests.csv", "summary.json", "decisions.csv"] {
        std::fs::read(dir.join(name)).unwrap().hash(&mut h);
    }
    h.finish()
}

#[test]
fn five_runs_of_a_10k_request_4_instance_scenario_hash_identically() {
    let app = servesim::default_app();
    let o = [
        ("workload.num_requests".to_string(), "10000".to_string()),
        ("cluster.groups[0].count".to_string(), "4".to_string()),
        (
            "workload.clients[0].rate_per_s".to_string(),
            "32.0".to_string(),
        ),
        ("policies.routing".to_string(), "\"weighted\"".to_string()),
    ];
    let sc = scenario::load(
        &root().join("scenarios/cluster-16.ron"),
        &o,
        app.world().resource::<Catalog>(),
    )
    .unwrap();
    let hashes: Vec<u64> = (0..5)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let opts = RunOptions {
                out_dir: Some(dir.path().to_path_buf()),
                trace_decisions: true,
                ..Default::default()
            };
            let s = Simulation::new(&sc, opts).unwrap().run().unwrap();
            assert_eq!(s.requests.completed, 10_000);
            outputs_hash(dir.path(), &s.to_text())
        })
        .collect();
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
}

/// Writes results of an "earlier run" into `dir` and returns the directory's contents.
fn old_results(dir: &Path) -> Vec<(String, Vec<u8>)> {
    for (name, text) in [
        ("requests.csv", "old rows\n"),
        ("summary.json", "{\"old\": true}\n"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    listing(dir)
}

fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn ctrl_c_stops_the_run_and_leaves_the_output_directory_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let before = old_results(dir.path());
    let child = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args([
            "run",
            "scenarios/cluster-16.ron",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .args(["--set", "workload.num_requests=5000000"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let it get well into the run, then interrupt as a terminal would.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted at simulated time")
            && err.contains("is as it was before this run"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(
        listing(dir.path()),
        before,
        "old results untouched, no temporary files left"
    );
}

#[test]
fn a_run_that_fails_midway_leaves_the_output_directory_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let before = old_results(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args([
            "run",
            "scenarios/measured-table.ron",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .args(["--set", "workload.clients[0].input_tokens=Constant(3000)"])
        .args(["--set", "cluster.groups[0].max_num_batched_tokens=4096"])
        .current_dir(root())
        .output()
        .unwrap();
    // A batch outside the measured table stops the run with a clear error …
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("prefill_tokens = ") && err.contains("outside the measured range 0..=2048"),
        "{err}"
    );
    assert!(err.contains("extrapolation: Clamp or Linear"), "{err}");
    // … and leaves no temporary file and the earlier results untouched.
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn a_new_run_replaces_every_result_and_leaves_none_stale() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args([
                "run",
                "scenarios/quickstart.ron",
                "--out",
                dir.path().to_str().unwrap(),
                "--set",
                "workload.num_requests=50",
            ])
            .args(extra)
            .current_dir(root())
            .output()
            .unwrap();
        assert!(out.status.success());
        listing(dir.path())
            .into_iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        run(&["--trace", "decisions"]),
        ["decisions.csv", "requests.csv", "summary.json"]
    );
    assert_eq!(
        run(&[]),
        ["requests.csv", "summary.json"],
        "the old decisions.csv is not left beside new results"
    );
}

#[test]
fn a_cache_too_small_for_any_prompt_ends_with_a_diagnosis_not_a_hang() {
    let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["run", "scenarios/quickstart.ron", "--out"])
        .arg(tempfile::tempdir().unwrap().path())
        .args([
            "--set",
            "cluster.groups[0].kv_blocks=4",
            "--set",
            "workload.num_requests=100",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: 100 of 100 requests were dropped as unservable")
            && err.contains("4 blocks × 16 tokens = 64 tokens"),
        "{err}"
    );
}
