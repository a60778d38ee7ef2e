//! The `servesim` binary: exit codes, error messages, byte-identical outputs.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::root;

fn servesim(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the binary runs")
}

/// `// expect: PATH @ LINE:COL : TEXT [| TEXT]` lines at the top of a fixture.
fn expectations(src: &str) -> Vec<(String, String, Vec<String>)> {
    // A fixture about byte-order marks starts with one.
    src.trim_start_matches('\u{feff}')
        .lines()
        .map_while(|l| l.strip_prefix("// expect: "))
        .map(|l| {
            let (path, rest) = l.split_once(" @ ").expect("PATH @ LINE:COL : TEXT");
            let (at, texts) = rest.split_once(" : ").expect("LINE:COL : TEXT");
            (
                path.to_string(),
                at.to_string(),
                texts.split(" | ").map(str::to_string).collect(),
            )
        })
        .collect()
}

#[test]
fn every_bad_fixture_fails_with_exit_code_2_naming_file_field_and_position() {
    let dir = root().join("tests/fixtures/bad");
    let mut fixtures: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ron"))
        .collect();
    fixtures.sort();
    assert!(
        fixtures.len() >= 40,
        "the catalogue has {} fixtures",
        fixtures.len()
    );
    for path in fixtures {
        let rel = format!(
            "tests/fixtures/bad/{}",
            path.file_name().unwrap().to_string_lossy()
        );
        let src = std::fs::read_to_string(&path).unwrap();
        let expect = expectations(&src);
        assert!(!expect.is_empty(), "{rel} has no `// expect:` line");
        let out_dir = tempfile::tempdir().unwrap();
        for args in [
            vec!["validate", rel.as_str()],
            vec![
                "run",
                rel.as_str(),
                "--out",
                out_dir.path().to_str().unwrap(),
            ],
        ] {
            let out = servesim(&args, &root());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{rel}: {stderr}");
            assert!(out.stdout.is_empty(), "{rel}: nothing on stdout");
            let n = expect.len();
            let header = format!("error: {rel}: {n} problem{}", if n == 1 { "" } else { "s" });
            assert!(
                stderr.starts_with(&header),
                "{rel}: expected `{header}`, got:\n{stderr}"
            );
            for (field, at, texts) in &expect {
                let line = if field.is_empty() {
                    format!("{rel}:{at}: ")
                } else {
                    format!("{rel}:{at}: {field}: ")
                };
                let found = stderr
                    .lines()
                    .position(|l| l.trim_start().starts_with(&line));
                let Some(i) = found else {
                    panic!("{rel}: no line starting `{line}` in:\n{stderr}");
                };
                let rest: String = stderr
                    .lines()
                    .skip(i)
                    .take(2)
                    .collect::<Vec<_>>()
                    .join("\n");
                for t in texts {
                    assert!(rest.contains(t.as_str()), "{rel}: `{t}` not in:\n{rest}");
                }
            }
            assert_eq!(
                std::fs::read_dir(out_dir.path()).unwrap().count(),
                0,
                "{rel}: nothing written"
            );
        }
    }
}

#[test]
fn a_missing_file_and_a_bad_override_are_input_errors() {
    let out = servesim(&["validate", "no/such.ron"], &root());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such.ron: 1 problem"));
    let out = servesim(
        &["run", "scenarios/quickstart.ron", "--set", "seed"],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected PATH=VALUE"));
    // A value without a path is the same mistake, not a RON syntax error.
    let out = servesim(
        &["run", "scenarios/quickstart.ron", "--set", " =3"],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--set  =3: expected PATH=VALUE"));
    let out = servesim(
        &["sweep", "scenarios/quickstart.ron", "--vary", "=[1,2]"],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--vary =[1,2]: expected PATH=[v1,v2,...]")
    );
    // A negative number is a bad value, not an unexpected argument.
    for (args, want) in [
        (
            &["run", "scenarios/quickstart.ron", "--seed", "-3"][..],
            "invalid value '-3' for '--seed <SEED>': expected a whole number from 0 to 18,446,744,073,709,551,615, got \"-3\"",
        ),
        // clap's own "invalid digit found in string", and a negative shard taken for a flag.
        (
            &["plan", "scenarios/plan.ron", "--runners-up", "-2"][..],
            "invalid value '-2' for '--runners-up <RUNNERS_UP>': expected a whole number ≥ 0, got \"-2\"",
        ),
        (
            &[
                "calibrate",
                "scenarios/quickstart.ron",
                "m.csv",
                "--group",
                "-1",
            ][..],
            "invalid value '-1' for '--group <GROUP>': expected a whole number ≥ 0, got \"-1\"",
        ),
        (
            &[
                "sweep",
                "scenarios/quickstart.ron",
                "--vary",
                "seed=[1]",
                "--shard",
                "-1/2",
            ][..],
            "--shard -1/2: expected I/N with 0 ≤ I < N",
        ),
        (
            &[
                "capacity",
                "scenarios/quickstart.ron",
                "--tolerance",
                "-0.5",
            ][..],
            "the tolerance must be in [10⁻⁶, 1], got -0.5",
        ),
        (
            &["run", "scenarios/quickstart.ron", "--max-wall-s", "-1"][..],
            "--max-wall-s must be a finite number of seconds > 0, got -1",
        ),
        // --jobs 0 ran on one thread, though omitting --jobs means every core.
        (
            &["evaluate", "scenarios/quickstart.ron", "--jobs", "0"][..],
            "0 threads cannot run anything: give 1 or more, or omit --jobs to use every core",
        ),
        (
            &[
                "sweep",
                "scenarios/quickstart.ron",
                "--vary",
                "seed=[1]",
                "--jobs",
                "-2",
            ][..],
            "expected a whole number of threads ≥ 1, got \"-2\"",
        ),
    ] {
        let out = servesim(args, &root());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // A path with an empty field name was applied as something else: `.seed` was reported
    // as a duplicate field `seed`, `seed.` as a number expected.
    for (path, why) in [
        (".seed", "has an empty field name"),
        ("seed.", "has an empty field name"),
        ("cluster..groups", "has an empty field name"),
    ] {
        let set = format!("{path}=1");
        let out = servesim(&["run", "scenarios/quickstart.ron", "--set", &set], &root());
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{path}: {why}")), "{err}");
    }
    // A path set twice (only the last would count), or the seed by --set and --seed.
    let out = servesim(
        &[
            "run",
            "scenarios/quickstart.ron",
            "--set",
            "cluster.groups[0].count=2",
            "--set",
            " cluster.groups[0].count = 4",
        ],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--set cluster.groups[0].count is given twice (=2 and =4)")
    );
    let out = servesim(
        &[
            "run",
            "scenarios/quickstart.ron",
            "--set",
            "seed=3",
            "--seed",
            "5",
        ],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the seed is given twice (--set seed=3 and --seed 5)")
    );
    let out = servesim(
        &[
            "validate",
            "scenarios/quickstart.ron",
            "--set",
            "cluster.groups[0].kv_blocks=0",
        ],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("(after --set)") && err.contains("cluster.groups[0].kv_blocks: must be > 0"),
        "{err}"
    );
    // A flag that sets a field for the user names itself: an error in a run given no --set
    // does not say "after --set", and a --set of the same field is a conflict, not a field
    // "given twice".
    let out = servesim(
        &[
            "run",
            "scenarios/quickstart.ron",
            "--seed",
            "3",
            "--trace",
            "timeline",
            "--trace-window",
            "1..2",
            "--out",
            "/nonexistent/never",
            "--set",
            "cluster.groups[0].max_num_seqs=0",
        ],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("quickstart.ron (after --set, --seed, --trace timeline, --trace-window):"),
        "{err}"
    );
    let out = servesim(
        &[
            "run",
            "scenarios/quickstart.ron",
            "--trace",
            "timeline",
            "--set",
            "outputs.timeline_json=false",
        ],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "--trace timeline sets outputs.timeline_json, which --set \
             outputs.timeline_json=false sets too: give one of them"
        ),
        "{err}"
    );
}

#[test]
fn set_reaches_map_keys_and_refuses_values_that_smuggle_in_fields() {
    // 60 requests at t = 0 of 100 prompt tokens; a bucket of 1,000 tokens admits 10. The
    // scenario names no admission parameters: --set writes the map and its keys.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.ron");
    std::fs::write(
        &path,
        "(cluster: (groups: [(kv_blocks: 1000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [100.0, 1.0, 10.0]))]),
          policies: (admission: \"token_bucket\"),
          workload: (clients: [(arrival: AllAtZero(count: 60), input_tokens: Constant(100), output_tokens: Constant(2))]),
          outputs: (requests_csv: false, summary_json: false))",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let out = servesim(
        &[
            "run",
            p,
            "--format",
            "json",
            "--set",
            "policies.admission_params.capacity=1000.0",
            "--set",
            "policies.admission_params.refill_per_s=0.0",
        ],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["requests"]["rejected"], 50, "{s}");
    assert_eq!(s["rejections"]["token_bucket"], 50);

    // A value that carries another field along is refused, not spliced in.
    let out = servesim(
        &["validate", p, "--set", "seed=1, horizon_s: 0.001"],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("seed: `, horizon_s: 0.001` outside brackets: a --set value is one RON value"),
        "{err}"
    );
    let out = servesim(
        &[
            "validate",
            p,
            "--set",
            "policies.admission_params.capacity=1.0}, routing: \"x\", a: {",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unbalanced `}`"));
}

fn run_to(dir: &Path, extra: &[&str]) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut args = vec![
        "run",
        "scenarios/quickstart.ron",
        "--out",
        dir.to_str().unwrap(),
        "--set",
        "workload.num_requests=400",
    ];
    args.extend_from_slice(extra);
    let out = servesim(&args, &root());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.stdout,
        std::fs::read(dir.join("requests.csv")).unwrap(),
        std::fs::read(dir.join("summary.json")).unwrap(),
        std::fs::read(dir.join("timeseries.csv")).unwrap(),
    )
}

#[test]
fn two_runs_are_byte_identical_and_another_seed_differs() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let first = run_to(a.path(), &[]);
    let second = run_to(b.path(), &[]);
    assert_eq!(
        first, second,
        "stdout, requests.csv, summary.json and timeseries.csv are byte-identical"
    );
    let other = run_to(c.path(), &["--seed", "43"]);
    assert_ne!(first.0, other.0);
    assert_ne!(first.1, other.1);
    assert_ne!(first.2, other.2);
    assert_ne!(first.3, other.3);
    // Only the three result files, no temporaries left behind.
    let mut names: Vec<String> = std::fs::read_dir(a.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["requests.csv", "summary.json", "timeseries.csv"]);
}

#[test]
fn json_format_prints_the_summary_file_contents() {
    let d = tempfile::tempdir().unwrap();
    let (stdout, _, json, _) = run_to(d.path(), &["--format", "json", "--check-invariants"]);
    assert_eq!(stdout, json);
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["requests"]["injected"], 400);
    assert_eq!(v["requests"]["completed"], 400);
}

#[test]
fn list_policies_names_every_built_in() {
    let out = servesim(&["list", "policies"], &root());
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for name in [
        "always_admit",
        "reject_all",
        "round_robin",
        "least_loaded",
        "static",
    ] {
        assert!(s.contains(name), "{name} missing from:\n{s}");
    }
}

#[test]
fn an_out_path_that_is_a_file_or_a_symlink_loop_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let looped = dir.path().join("loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    for (out, expect) in [
        (&file, "exists and is not a directory"),
        (&looped, "cannot be used"),
    ] {
        let o = servesim(
            &[
                "run",
                "scenarios/quickstart.ron",
                "--out",
                out.to_str().unwrap(),
            ],
            &root(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(expect), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn validate_prints_the_resolved_set_up() {
    // Llama-3.1-8B on one H100 with the BLIS reading (trained physics): 26,312 blocks by
    // BLIS's rule × 16 tokens × 128 KiB per token = 51.39 GiB; Llama-3.1-70B on the roofline
    // takes vLLM's profile; 600 requests of 200 output tokens.
    let o = servesim(&["validate", "scenarios/model-zoo.ron"], &root());
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("8b-tp1: 1 × llama-3.1-8b-instruct on 1 × H100 (tp 1, pp 1); 26312 KV blocks of 16 tokens, derived by BLIS's rule (51.4 GiB per GPU)"),
        "{out}"
    );
    assert!(
        out.contains("70b-tp4: 1 × llama-3.1-70b-instruct on 4 × H100 (tp 4, pp 1); 27821 KV blocks of 16 tokens, derived as vLLM's memory profile sizes them"),
        "{out}"
    );
    // Per GPU: 0.9 × 80 − 14.96 − (5.5 + 0.15) = 51.39 GiB; 0.9 × (80 − 0.8) − 131.44 / 4 −
    // 3.79 (1,024 × 128,256 × 30 B + 8,192 × 8,192 × 2 B) − 0.67 = 33.96 GiB.
    assert!(
        out.contains("    KV memory per GPU: 0.9 × 80 GiB − 14.96 weights − 5.65 activations and other (BLIS's rule) = 51.39 GiB for KV"),
        "{out}"
    );
    assert!(
        out.contains("    KV memory per GPU: 0.9 × 79.2 GiB (what CUDA reports) − 32.85 weights − 3.79 vLLM's profiling pass (its sampler over 1,024 rows of 128,256 logits) − 0.67 other = 33.96 GiB for KV"),
        "{out}"
    );
    assert!(out.contains("workload: about 600 requests"), "{out}");
}

#[test]
fn the_text_summary_shows_slo_attainment_goodput_and_each_tenant_and_class() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let run = |format: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "scenarios/multi-tenant.ron",
            "--out",
            d,
            "--format",
            format,
            "--set",
            "workload.num_requests=600",
        ];
        args.extend_from_slice(extra);
        let out = servesim(&args, &root());
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    // The scenario declares no target: attainment and goodput are n/a, not 1.000.
    let text = run("text", &[]);
    let json: serde_json::Value = serde_json::from_str(&run("json", &[])).unwrap();
    assert!(json["slo"]["attainment"].is_null() && json["slo"]["goodput_per_s"].is_null());
    assert!(
        text.contains("SLO: attainment n/a (no latency target declared)"),
        "{text}"
    );
    // With a TTFT target on `interactive` only: every number, and n/a for `batch`.
    let targets = [
        "--set",
        r#"policies.slo_classes=[(name: "interactive", ttft_ms: 30.0), (name: "batch")]"#,
    ];
    let text = run("text", &targets);
    let json: serde_json::Value = serde_json::from_str(&run("json", &targets)).unwrap();
    let slo = &json["slo"];
    let line = format!(
        "SLO: {} of {} requests good (attainment {:.4}), goodput {:.3} req/s",
        slo["good"],
        json["requests"]["injected"],
        slo["attainment"].as_f64().unwrap(),
        slo["goodput_per_s"].as_f64().unwrap()
    );
    assert!(text.contains(&line), "{line}\n{text}");
    assert!(slo["attainment"].as_f64().unwrap() < 1.0, "{line}");
    for (kind, list) in [("tenant", "tenants"), ("class", "slo_classes")] {
        let slices = json[list].as_array().unwrap();
        assert!(!slices.is_empty());
        for x in slices {
            let row = text
                .lines()
                .find(|l| l.starts_with(&format!("{kind} {} ", x["name"].as_str().unwrap())))
                .unwrap_or_else(|| panic!("no {kind} row for {}\n{text}", x["name"]));
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols[2], x["injected"].to_string(), "{row}");
            assert_eq!(cols[3], x["completed"].to_string(), "{row}");
            assert_eq!(cols[6], x["good"].to_string(), "{row}");
            let attainment = match x["slo_attainment"].as_f64() {
                Some(a) => format!("{a:.4}"),
                None => "n/a".into(),
            };
            assert_eq!(cols[7], attainment, "{row}");
            assert_eq!(
                x["slo_attainment"].is_null(),
                x["name"] == "batch",
                "only the class without targets has no attainment: {row}"
            );
            let ttft_p90: f64 = cols[8].parse().unwrap();
            assert!((ttft_p90 - x["ttft_ms"]["p90"].as_f64().unwrap()).abs() < 1e-3);
        }
    }
}

/// The stored fingerprints (FNV-1a of each file's bytes).
const STDOUT_FNV: u64 = 0x388d_149d_bee5_ba3b;
const REQUESTS_FNV: u64 = 0xaabf_364c_d1d5_de0a;
const SUMMARY_FNV: u64 = 0x6ae8_2595_10a7_bf65;
const TIMESERIES_FNV: u64 = 0x152a_321b_4a16_c603;

/// FNV-1a, 64 bits (stable across Rust versions, unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Determinism against a stored fingerprint, not only run against run: the bytes of the
/// quickstart (400 requests) as of this commit. A change to any of them must be deliberate:
/// say which in the commit and update these numbers.
#[test]
fn the_quickstart_outputs_match_their_stored_fingerprint() {
    let d = tempfile::tempdir().unwrap();
    let (stdout, requests, summary, timeseries) = run_to(d.path(), &[]);
    let got = [
        fnv1a(&stdout),
        fnv1a(&requests),
        fnv1a(&summary),
        fnv1a(&timeseries),
    ];
    assert_eq!(
        got,
        [STDOUT_FNV, REQUESTS_FNV, SUMMARY_FNV, TIMESERIES_FNV],
        "stdout, requests.csv, summary.json, timeseries.csv"
    );
}

/// Issue 30, class 7: an unquoted string given to --set is told to quote it, with the
/// command to type.
#[test]
fn an_unquoted_string_in_set_is_told_to_quote_it() {
    let out = servesim(
        &[
            "validate",
            "scenarios/quickstart.ron",
            "--set",
            "policies.routing=prefix_aware",
        ],
        &root(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            r#"hint: a string is quoted, also on the command line: --set 'policies.routing="prefix_aware"', --vary 'policies.routing=["prefix_aware"]'"#
        ),
        "{err}"
    );
}

/// --set of a field of a block the scenario leaves out makes the block with that field
/// alone: the missing field it then lacks is explained, and the block asked for whole.
#[test]
fn set_into_an_absent_block_asks_for_the_block_whole() {
    let validate = |file: &str, set: &str| {
        let out = servesim(&["validate", file, "--set", set], &root());
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = validate(
        "scenarios/quickstart.ron",
        "cluster.groups[0].speculative.num_speculative_tokens=3",
    );
    assert!(
        err.contains(
            "cluster.groups[0].speculative: missing field `method`\n    hint: the scenario has \
             no `cluster.groups[0].speculative`, so setting \
             `cluster.groups[0].speculative.num_speculative_tokens` made one with that field \
             alone; give the block whole: `cluster.groups[0].speculative=(…)` with `method` \
             and the others it needs (docs/scenarios.md)"
        ),
        "{err}"
    );
    // A block the file writes keeps the usual hint.
    let dir = tempfile::tempdir().unwrap();
    let quick = std::fs::read_to_string(root().join("scenarios/quickstart.ron")).unwrap();
    let file = dir.path().join("store.ron");
    let with_store = quick.replacen("groups: [", "kv_store: (latency_us: 3.0), groups: [", 1);
    assert_ne!(with_store, quick);
    std::fs::write(&file, with_store).unwrap();
    let err = validate(file.to_str().unwrap(), "cluster.kv_store.latency_us=4.0");
    assert!(
        err.contains("cluster.kv_store: missing field `blocks`\n    hint: add the field"),
        "{err}"
    );
}

/// --set behind a RON attribute, and on a file RON cannot read.
#[test]
fn set_reaches_fields_behind_a_ron_attribute_and_a_syntax_error_is_said_first() {
    let dir = tempfile::tempdir().unwrap();
    let quick = std::fs::read_to_string(root().join("scenarios/quickstart.ron")).unwrap();
    let quick = quick.replace("out/quickstart", "out");
    let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
    write("attr.ron", format!("#![enable(implicit_some)]\n{quick}"));
    write("open.ron", format!("#![enable(implicit_some)\n{quick}"));
    let validate = |file: &str| {
        let o = servesim(
            &["validate", file, "--set", "workload.num_requests=7"],
            dir.path(),
        );
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    // It said "cannot set `workload.num_requests`: no such field is written".
    let (code, out) = validate("attr.ron");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("about 7 requests"), "{out}");
    // An unclosed attribute: the syntax error, not "no such field".
    let (code, out) = validate("open.ron");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("Expected closing `)]` after the enable attribute")
            && !out.contains("cannot set"),
        "{out}"
    );
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    // `servesim list hardware | head -1`: stdout closed before anything is written. Every
    // command then stops with status 141 (as SIGPIPE ends other tools), not a panic.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for args in [
        &["list", "hardware"][..],
        &[
            "run",
            "scenarios/quickstart.ron",
            "--set",
            "outputs.requests_csv=false",
            "--set",
            "outputs.summary_json=false",
            "--set",
            "outputs.timeseries_csv=false",
        ][..],
    ] {
        // The reading end is closed before the command starts, so its first write fails
        // whenever it comes (closing it after the spawn raced a command quick enough to
        // write everything into the pipe's buffer first, and exit 0).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(args)
            .current_dir(root)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
    }
}
