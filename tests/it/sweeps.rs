//! Sweeps at cluster scale: results kept as runs finish, `--resume` after a kill, merge
//! refusing shards run on edited inputs, intervals over replicas.

use crate::common::servesim;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_servesim"))
}

/// A copy of the quickstart in `dir` (so a test can edit it), 8 points.
fn setup(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.ron");
    let dst = dir.join("quickstart.ron");
    std::fs::copy(src, &dst).unwrap();
    dst
}

fn sweep_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "sweep",
        "quickstart.ron",
        "--set",
        "workload.num_requests=2000",
        "--vary",
        r#"policies.routing=["round_robin","least_loaded"]"#,
        "--vary",
        "workload.clients[0].rate_per_s=[6.0,9.0,12.0,15.0]",
        "--progress",
        "never",
        "--out",
        out,
    ];
    a.extend_from_slice(extra);
    a
}

fn data_rows(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count().saturating_sub(1))
        .unwrap_or(0)
}

#[test]
fn a_shard_killed_midway_and_resumed_merges_into_the_bytes_of_an_uninterrupted_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let run = |out: &str, extra: &[&str]| {
        let o = servesim(&sweep_args(out, extra), d);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let whole = run("whole", &[]);
    run("s0", &["--shard", "0/2"]);
    // Shard 1 is killed (SIGKILL: no chance to tidy up) once two of its four runs are kept.
    let mut child = bin()
        .args(sweep_args("s1", &["--shard", "1/2", "--jobs", "1"]))
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let progress = d.join("s1/sweep.progress.csv");
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the shard finished before it could be killed"
        );
        if data_rows(&progress) >= 2 {
            child.kill().unwrap();
            child.wait().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(!d.join("s1/sweep.csv").exists());
    let kept = data_rows(&progress);
    assert!((2..4).contains(&kept), "{kept} rows kept");
    // Resumed (on another thread count), it runs only the rest and says so.
    let resumed = run("s1", &["--shard", "1/2", "--resume", "--jobs", "2"]);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        err.contains(&format!("resuming: {kept} of 4 runs already finished")),
        "{err}"
    );
    assert!(
        !progress.exists(),
        "the progress files go once sweep.csv is in place"
    );
    let merged = servesim(&["merge", "s0", "s1", "--out", "merged"], d);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    for f in ["sweep.csv", "sweep.json"] {
        assert_eq!(
            std::fs::read(d.join("merged").join(f)).unwrap(),
            std::fs::read(d.join("whole").join(f)).unwrap(),
            "{f}"
        );
    }
    assert_eq!(merged.stdout, whole.stdout);
    // A shard's report says it is one; the merged sweep's does not.
    let page = |dir: &str| {
        assert!(servesim(&["report", dir], d).status.success());
        std::fs::read_to_string(d.join(dir).join("report.html")).unwrap()
    };
    assert!(page("s0").contains("sweep of quickstart.ron (shard 0/2: <code>servesim merge</code> the shards for the whole sweep): 4 runs of 4 points"));
    assert!(page("merged").contains("sweep of quickstart.ron: 8 runs of 8 points"));
}

#[test]
fn merge_refuses_shards_run_on_an_edited_scenario_and_resume_refuses_its_leftovers() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let scenario = setup(d);
    let args = |out: &'static str, shard: &'static str| {
        let mut a = sweep_args(out, &["--shard", shard]);
        a[3] = "workload.num_requests=100";
        a
    };
    assert!(servesim(&args("s0", "0/2"), d).status.success());
    // Shard 0's plan records the scenario's hash and the version.
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("s0/sweep.json")).unwrap()).unwrap();
    assert!(
        plan["inputs"]["quickstart.ron"]
            .as_str()
            .unwrap()
            .starts_with("fnv1a:"),
        "{plan}"
    );
    assert_eq!(plan["version"], env!("CARGO_PKG_VERSION"));
    // The scenario is edited (a routing change), then shard 1 runs.
    let text = std::fs::read_to_string(&scenario).unwrap();
    std::fs::write(&scenario, text.replace("least_loaded", "round_robin")).unwrap();
    assert!(servesim(&args("s1", "1/2"), d).status.success());
    let merged = servesim(&["merge", "s0", "s1", "--out", "merged"], d);
    assert_eq!(merged.status.code(), Some(2));
    let err = String::from_utf8_lossy(&merged.stderr);
    assert!(
        err.contains("were run on different inputs: quickstart.ron differs"),
        "{err}"
    );
    assert!(!d.join("merged/sweep.csv").exists());
    // What an attempt of shard 0 left before the edit is not resumed into a sweep of the
    // edited file.
    let leftover = d.join("s2");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::copy(
        d.join("s0/sweep.json"),
        leftover.join("sweep.progress.json"),
    )
    .unwrap();
    std::fs::copy(d.join("s0/sweep.csv"), leftover.join("sweep.progress.csv")).unwrap();
    let resumed = servesim(&[&args("s2", "0/2")[..], &["--resume"]].concat(), d);
    assert_eq!(resumed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(err.contains("its inputs were edited since"), "{err}");
    // Back to the original text, the same leftovers are resumed: nothing is run again.
    std::fs::write(&scenario, &text).unwrap();
    let resumed = servesim(&[&args("s2", "0/2")[..], &["--resume"]].concat(), d);
    assert!(resumed.status.success());
    assert!(
        String::from_utf8_lossy(&resumed.stderr).contains("resuming: 4 of 4 runs"),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(
        std::fs::read(d.join("s2/sweep.csv")).unwrap(),
        std::fs::read(d.join("s0/sweep.csv")).unwrap()
    );
}

/// A sweep records every file its runs read, the model's `config.json` and
/// `generation_config.json` and a GPU profile included (they were left out, so shards run on
/// an edited GPU file merged without a word); a model named by a directory beside the
/// scenario, without a slash, is that directory.
#[test]
fn a_sweep_records_the_model_and_gpu_files_its_runs_read() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    crate::common::model_dir(&d.join("my-model"), "llama-3.1-8b-instruct");
    std::fs::write(
        d.join("my-model/generation_config.json"),
        r#"{"top_p": 0.9}"#,
    )
    .unwrap();
    let gpu = |tb_per_s: &str| {
        format!(
            "(id: \"MyGPU\", tflops_bf16: 989.5, tflops_fp8: 1979.0, bandwidth_tb_per_s: {tb_per_s}, mfu_prefill: 0.45, mfu_decode: 0.30, memory_gib: 80.0, calibration: Datasheet)"
        )
    };
    std::fs::write(d.join("mine.ron"), gpu("3.35")).unwrap();
    std::fs::write(
        d.join("s.ron"),
        r#"(cluster: (groups: [(model: "my-model", gpu: "mine.ron")]),
            workload: (num_requests: 20, clients: [(rate_per_s: 5.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#,
    )
    .unwrap();
    let shard = |n: &str, out: &str| {
        servesim(
            &[
                "sweep",
                "s.ron",
                "--vary",
                "seed=[1,2]",
                "--shard",
                n,
                "--out",
                out,
                "--progress",
                "never",
            ],
            d,
        )
    };
    assert!(shard("0/2", "s0").status.success());
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("s0/sweep.json")).unwrap()).unwrap();
    let read: Vec<&String> = plan["inputs"].as_object().unwrap().keys().collect();
    assert_eq!(
        read,
        [
            "mine.ron",
            "my-model/config.json",
            "my-model/generation_config.json",
            "s.ron"
        ],
        "{plan}"
    );
    // The GPU file is edited before shard 1 runs: the shards do not merge.
    std::fs::write(d.join("mine.ron"), gpu("2.0")).unwrap();
    assert!(shard("1/2", "s1").status.success());
    let merged = servesim(&["merge", "s0", "s1", "--out", "m"], d);
    assert_eq!(merged.status.code(), Some(2));
    let err = String::from_utf8_lossy(&merged.stderr);
    assert!(
        err.contains("were run on different inputs: mine.ron differs"),
        "{err}"
    );
}

/// The Dockerfile of the Kubernetes recipe: built and run where a Docker daemon answers,
/// else read as Docker reads it (instructions, stages, what is copied from where).
#[test]
fn the_dockerfile_builds_an_image_that_runs_sweeps_or_at_least_reads_as_docker_reads_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    // Docker's reader: comments and blank lines dropped, `\` continues a line.
    let mut instructions: Vec<(String, String)> = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim();
        if pending.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(t);
        let (op, args) = pending.split_once(' ').unwrap_or((&pending, ""));
        instructions.push((op.to_uppercase(), args.trim().to_string()));
        pending.clear();
    }
    assert!(pending.is_empty(), "a continued line never ends");
    const KNOWN: [&str; 18] = [
        "FROM",
        "RUN",
        "CMD",
        "LABEL",
        "EXPOSE",
        "ENV",
        "ADD",
        "COPY",
        "ENTRYPOINT",
        "VOLUME",
        "USER",
        "WORKDIR",
        "ARG",
        "ONBUILD",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "SHELL",
        "MAINTAINER",
    ];
    for (op, _) in &instructions {
        assert!(KNOWN.contains(&op.as_str()), "unknown instruction {op}");
    }
    assert_eq!(instructions[0].0, "FROM", "a Dockerfile starts with FROM");
    // Stages: COPY --from names an earlier one.
    let mut stages = Vec::new();
    for (op, args) in &instructions {
        if op == "FROM" {
            let words: Vec<&str> = args.split_whitespace().collect();
            if let [_, as_, name] = words[..] {
                assert!(as_.eq_ignore_ascii_case("as"), "FROM image AS name: {args}");
                stages.push(name.to_string());
            }
        }
        if op == "COPY"
            && let Some(from) = args.strip_prefix("--from=")
        {
            let stage = from.split_whitespace().next().unwrap();
            assert!(stages.iter().any(|s| s == stage), "no stage {stage}");
        }
        if op == "ENTRYPOINT" || op == "CMD" {
            let v: Vec<String> = serde_json::from_str(args).expect("exec form: a JSON array");
            assert!(!v.is_empty());
        }
    }
    // The binary built is the binary copied, and what the build needs is not ignored.
    let build = instructions
        .iter()
        .find(|(op, a)| op == "RUN" && a.contains("cargo build"))
        .expect("a cargo build");
    assert!(build.1.contains("--release") && build.1.contains("--locked"));
    assert!(text.contains("/src/target/release/servesim /usr/local/bin/servesim"));
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    for needed in ["src", "Cargo.toml", "Cargo.lock", "assets", "scenarios"] {
        assert!(
            !ignored.lines().any(|l| l.trim() == needed),
            "{needed} ignored"
        );
    }
    // Where a daemon answers, the image is built and runs a sweep of a bundled scenario.
    let daemon = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !daemon {
        eprintln!("no Docker daemon: the Dockerfile was read, not built");
        return;
    }
    let built = Command::new("docker")
        .args(["build", "-q", "-t", "servesim-test", "."])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new("docker")
        .args([
            "run",
            "--rm",
            "servesim-test",
            "sweep",
            "/scenarios/quickstart.ron",
            "--set",
            "workload.num_requests=50",
            "--vary",
            "seed=[1,2]",
            "--out",
            "/tmp/sweep",
        ])
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(String::from_utf8_lossy(&ran.stdout).contains("point"));
}

#[test]
fn replicas_give_each_point_a_mean_and_interval_that_merging_shards_reproduces() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let run = |out: &str, extra: &[&str]| {
        let mut a = sweep_args(out, &["--replicas", "3"]);
        a[3] = "workload.num_requests=200";
        a.extend_from_slice(extra);
        let o = servesim(&a, d);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let whole = run("whole", &[]);
    let table = String::from_utf8(whole.stdout.clone()).unwrap();
    // One line per point (8), each metric as mean ± half-width.
    assert_eq!(table.lines().count(), 1 + 8, "{table}");
    assert!(table.lines().nth(1).unwrap().contains(" ± "), "{table}");
    // The per-point file, checked against the runs' rows by hand: point 5 is runs 15–17.
    let runs = crate::common::read_rows(&d.join("whole/sweep.csv"));
    let points = crate::common::read_rows(&d.join("whole/sweep-points.csv"));
    assert_eq!(points.len(), 8);
    let p99: Vec<f64> = runs[15..18]
        .iter()
        .map(|r| r.str("ttft_ms.p99").parse().unwrap())
        .collect();
    let mean = p99.iter().sum::<f64>() / 3.0;
    let sd = (p99.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let half = 4.303 * sd / 3f64.sqrt(); // t(0.975, 2 degrees of freedom)
    let got = |col: &str| -> f64 { points[5].str(col).parse().unwrap() };
    assert!((got("ttft_ms.p99.mean") - mean).abs() < 1e-9 * mean);
    assert!((got("ttft_ms.p99.high") - (mean + half)).abs() < 1e-3 * mean.max(1.0));
    assert_eq!(points[5].str("runs"), "3");
    // Shards merge into the same per-point file and table.
    run("s0", &["--shard", "0/2"]);
    run("s1", &["--shard", "1/2"]);
    let merged = servesim(&["merge", "s0", "s1", "--out", "merged"], d);
    assert!(merged.status.success());
    assert_eq!(merged.stdout, whole.stdout);
    assert_eq!(
        std::fs::read(d.join("merged/sweep-points.csv")).unwrap(),
        std::fs::read(d.join("whole/sweep-points.csv")).unwrap()
    );
}

#[test]
fn varying_the_seed_names_each_runs_seed_apart_from_the_varied_one() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let o = servesim(
        &[
            "sweep",
            "quickstart.ron",
            "--set",
            "workload.num_requests=30",
            "--vary",
            "seed=[1,5]",
            "--replicas",
            "2",
            "--progress",
            "never",
            "--out",
            "out",
        ],
        d,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(d.join("out/sweep.csv")).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    assert_eq!(
        header[..5],
        ["point", "seed", "replica", "run_seed", "status"]
    );
    let mut names = header.clone();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), header.len(), "a column name is written twice");
    // Replica r of a point runs the point's seed + r.
    let runs = crate::common::read_rows(&d.join("out/sweep.csv"));
    let cells = |col: &str| {
        runs.iter()
            .map(|r| r.str(col).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(cells("seed"), ["1", "1", "5", "5"]);
    assert_eq!(cells("replica"), ["0", "1", "0", "1"]);
    assert_eq!(cells("run_seed"), ["1", "2", "5", "6"]);
    // The report's table of runs shows each run's seed, not the point's, under its name.
    let o = servesim(&["report", "out"], d);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(d.join("out/report.html")).unwrap();
    assert!(
        page.contains("<th>replica</th><th>run_seed</th><th>status</th>"),
        "the runs' table heads"
    );
    assert!(
        page.contains("<td>1</td><td>6</td><td>ok</td>"),
        "point 1, replica 1"
    );
}

/// A sweep says what `run` would warn of, once per warning: plainly when every point has it,
/// else at the points that do. The quickstart's Llama-3.1-8B at 0.35 of an H100 (0.35 × 79.2 −
/// 14.96 weights − 3.73 profiling pass − 0.67 other = 8.36 GiB at 128 KiB a token) holds
/// 68,480 tokens of cache a request: its 131,072-token context does not fit, and vLLM would not
/// start it; at 0.5, 165,808.
#[test]
fn a_sweep_warns_once_per_warning_naming_the_points_it_holds_for() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    // A quick sweep of the quickstart over memory; its warnings.
    let warnings = |out: &str, memory: &str, extra: &[&str]| -> Vec<String> {
        let vary = format!("cluster.groups[0].gpu_memory_utilization=[{memory}]");
        let mut args = vec![
            "sweep",
            "quickstart.ron",
            "--set",
            "workload.num_requests=5",
            "--vary",
            &vary,
            "-q",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        let o = servesim(&args, d);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stderr)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("warning:"))
            .map(str::to_string)
            .collect()
    };
    let two = ["--replicas", "2"];
    let w = warnings(
        "out",
        "0.35,0.5",
        &[&two[..], &["--set", "cluster.groups[0].block_size=48"]].concat(),
    );
    // Every point: the block size vLLM does not offer, said once (not per point or replica).
    let block: Vec<_> = w.iter().filter(|w| w.contains("block_size = 48")).collect();
    assert_eq!(block.len(), 1, "{w:?}");
    assert!(
        block[0].starts_with("warning: cluster.groups[0].block_size"),
        "{w:?}"
    );
    // One point: the context its cache cannot hold.
    let context: Vec<_> = w
        .iter()
        .filter(|w| w.contains("vLLM refuses to start"))
        .collect();
    assert_eq!(context.len(), 1, "{w:?}");
    let at = "warning: at cluster.groups[0].gpu_memory_utilization=0.35: ";
    assert!(context[0].starts_with(at), "{w:?}");
    // A shard that holds only second replicas says it too.
    let w = warnings(
        "shard",
        "0.35,0.5",
        &[&two[..], &["--shard", "1/2"]].concat(),
    );
    assert!(w.iter().any(|w| w.starts_with(at)), "{w:?}");
    // Fourteen points each with its own wording: ten said, the rest counted.
    let memory = (26..40)
        .map(|m| format!("0.{m}"))
        .collect::<Vec<_>>()
        .join(",");
    let w = warnings("many", &memory, &[]);
    assert_eq!(w.len(), 11, "{w:?}");
    assert!(
        w[10].starts_with("warning: 4 more warnings, at 4 points"),
        "{w:?}"
    );
}

#[test]
fn a_point_that_fails_to_load_is_named_by_its_values() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let o = servesim(
        &[
            "sweep",
            "quickstart.ron",
            "--vary",
            "cluster.groups[0].kv_blocks=[4096,0]",
            "--vary",
            r#"policies.routing=["round_robin","least_loaded"]"#,
            "--replicas",
            "2",
            "-q",
            "--out",
            "out",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    // Both routings fail with kv_blocks=0 (each twice, as replicas): one error, the first
    // point named and the other counted; the --vary values are not called --set.
    let head = "error: quickstart.ron (at cluster.groups[0].kv_blocks=0, \
                policies.routing=round_robin, and 1 other point): 1 problem";
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(err.contains(head), "{err}");
    assert!(
        err.contains("cluster.groups[0].kv_blocks: must be > 0"),
        "{err}"
    );
    assert!(!err.contains("--set"), "{err}");
    assert!(!d.join("out/sweep.csv").exists());
    // With a --set as well, the label says so.
    let o = servesim(
        &[
            "sweep",
            "quickstart.ron",
            "--set",
            "workload.num_requests=5",
            "--vary",
            "cluster.groups[0].kv_blocks=[0,4096]",
            "-q",
            "--out",
            "out2",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("quickstart.ron (at cluster.groups[0].kv_blocks=0, after --set): 1 problem"),
        "{err}"
    );
}
