//! One app for every command: `examples/custom_cli.rs` adds a routing policy (`last_one`) and
//! a summary system (`steps_total` in `extras`) to a `ServesimApp` and hands it to the
//! standard command line; every command must know both.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{read_rows, root};

/// The example's binary, built by `cargo test` beside this test binary
/// (`target/<profile>/examples/custom_cli`).
fn custom_cli() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    let bin = profile.join("examples").join("custom_cli");
    if !bin.exists() {
        // `cargo test` builds the examples with the tests; a run filtered to this binary
        // (`--test it`) does not.
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", "custom_cli"])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(status.success() && bin.exists(), "{}", bin.display());
    }
    bin
}

fn cli(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn ok(bin: &Path, args: &[&str]) -> Output {
    let out = cli(bin, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const LAST_ONE: &str = "policies.routing=\"last_one\"";
const SMALL: &str = "workload.num_requests=60";
const UNSHARED: &str = "workload.clients[0].shared_prefix_tokens=0";

#[test]
fn a_custom_policy_and_system_work_in_list_validate_and_run() {
    let bin = custom_cli();
    let list = ok(&bin, &["list", "policies"]);
    assert!(String::from_utf8_lossy(&list.stdout).contains("last_one"));
    ok(
        &bin,
        &["validate", "scenarios/quickstart.ron", "--set", LAST_ONE],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &bin,
        &[
            "run",
            "scenarios/quickstart.ron",
            "--set",
            LAST_ONE,
            "--set",
            SMALL,
            "--out",
            dir.path().to_str().unwrap(),
        ],
    );
    let rows = read_rows(&dir.path().join("requests.csv"));
    assert_eq!(rows.len(), 60);
    assert!(rows.iter().all(|r| r.str("instance") == "1"), "last_one");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let steps: u64 = summary["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["steps"].as_u64().unwrap())
        .sum();
    assert_eq!(summary["extras"]["steps_total"].as_u64(), Some(steps));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("steps_total: {steps}")));
    // The standard binary does not know the policy.
    let plain = cli(
        Path::new(env!("CARGO_BIN_EXE_servesim")),
        &["validate", "scenarios/quickstart.ron", "--set", LAST_ONE],
    );
    assert_eq!(plain.status.code(), Some(2));
}

#[test]
fn a_custom_policy_and_system_work_in_a_sweep() {
    let bin = custom_cli();
    let dir = tempfile::tempdir().unwrap();
    ok(
        &bin,
        &[
            "sweep",
            "scenarios/quickstart.ron",
            "--set",
            SMALL,
            "--vary",
            "policies.routing=[\"last_one\",\"round_robin\"]",
            "--out",
            dir.path().to_str().unwrap(),
            "--jobs",
            "2",
        ],
    );
    let rows = read_rows(&dir.path().join("sweep.csv"));
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.str("status"), "ok");
        let extras: serde_json::Value = serde_json::from_str(r.str("extras")).unwrap();
        assert!(extras["steps_total"].as_u64().unwrap() > 0);
    }
    assert_eq!(rows[0].str("fairness.jain_instance_completed"), "0.5");
}

#[test]
fn a_custom_policy_works_in_check_real() {
    let bin = custom_cli();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    ok(
        &bin,
        &[
            "run",
            "scenarios/quickstart.ron",
            "--set",
            LAST_ONE,
            "--set",
            SMALL,
            "--set",
            UNSHARED,
            "--out",
            run_dir.to_str().unwrap(),
            "-q",
        ],
    );
    // Replaying a run through the scenario that made it gives 0 % on every line, with the
    // custom policy the replay's app must know (prompts replay as unique, so the run's share
    // nothing).
    let out = ok(
        &bin,
        &[
            "check-real",
            "scenarios/quickstart.ron",
            run_dir.join("requests.csv").to_str().unwrap(),
            "--set",
            LAST_ONE,
            "--set",
            UNSHARED,
            "--out",
            dir.path().join("check").to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // TTFT and E2E exactly; ITL to the 3 decimals of requests.csv's mean_itl_ms.
    assert!(report["mean_ape_pct"].as_f64().unwrap() < 1e-3, "{report}");
    for line in report["overall"]["lines"].as_array().unwrap() {
        if line["metric"] != "itl" {
            assert_eq!(line["ape_pct"].as_f64(), Some(0.0), "{line}");
        }
    }
}
