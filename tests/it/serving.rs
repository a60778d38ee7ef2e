//! The serving path around the steps (`engine`): vLLM's async scheduling, the scheduler's CPU
//! work and the API server, worked out by hand on instances whose every step takes 1,000 µs.

use crate::common::{parse, run, trace_file};

/// One instance with 1,000 µs steps (blackbox β0) and the given `engine`, replaying
/// `rows` (`arrival_us,input_tokens,output_tokens`) from a trace.
fn scenario(engine: &str, rows: &str) -> (servesim::scenario::Scenario, tempfile::TempDir) {
    let (trace, dir) = trace_file(rows);
    let src = format!(
        "(seed: 1, cluster: (groups: [(kv_blocks: 1000, engine: {engine},
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
          workload: (traces: [(format: ServesimCsv, file: {:?})]))",
        trace.display().to_string()
    );
    (parse(&src), dir)
}

/// API server 500 µs + 1 µs per prompt token in, 50 µs + 10 µs per streamed chunk out; no
/// scheduler time.
const API: &str = "api_request_us: 500.0, api_us_per_prompt_token: 1.0, api_step_us: 50.0, \
                   api_us_per_output_token: 10.0, schedule_us: 0.0, schedule_us_per_request: 0.0";

#[test]
fn a_lone_request_on_an_idle_instance_waits_for_the_api_server_and_one_step() {
    for mode in ["true", "false"] {
        let (sc, _dir) = scenario(&format!("(async_scheduling: {mode}, {API})"), "0,100,4\n");
        let (_, rows) = run(&sc);
        let r = &rows[0];
        // Alone, its prompt waits out the tokenizer's whole 2,000 µs window; the engine has
        // it at 2,000 + 500 + 100 = 2,600 µs and, idle, schedules it at once: the prefill
        // step ends at 3,600 µs, its token leaves the API server 50 + 10 µs later.
        assert_eq!(r.us("scheduling_delay_ms"), 2_600, "async {mode}");
        assert_eq!(r.us("ttft_ms"), 3_660, "async {mode}");
        // Three decode steps: the last token at 6,600 µs, delivered 60 µs later.
        assert_eq!(r.us("e2e_ms"), 6_660, "async {mode}");
        assert_eq!(r.us("mean_itl_ms"), 1_000, "async {mode}");
        assert_eq!(r.u64("completion_us"), 6_600, "the engine's last step end");
    }
}

#[test]
fn prompts_within_one_tokenizer_window_go_on_together() {
    // Windows of 2,000 µs: the prompt at 0 opens one until 2,000 and the one at 1,500 joins
    // it; the one at 2,000 comes as it closes and opens the next, until 4,000, which the one
    // at 2,500 joins. Each reaches the engine 500 + 16 µs after its window closes: at 2,516,
    // 2,516, 4,516 and 4,516 µs, to an idle engine (one-token outputs finish in the prefill
    // step, [2516, 3516)).
    let rows = "0,16,1\n1500,16,1\n2000,16,1\n2500,16,1\n";
    let (sc, _dir) = scenario(&format!("(async_scheduling: false, {API})"), rows);
    let (_, r) = run(&sc);
    let delays: Vec<u64> = r.iter().map(|r| r.us("scheduling_delay_ms")).collect();
    assert_eq!(delays, [2_516, 1_016, 2_516, 2_016]);
    // A batch of at most one prompt: each waits its own whole window, and the second
    // prompt's engine time (1,500 + 2,516 = 4,016) finds the first's step over.
    let (sc, _dir) = scenario(
        &format!("(async_scheduling: false, tokenizer_batch: 1, {API})"),
        "0,16,1\n1500,16,1\n",
    );
    let (_, r) = run(&sc);
    let delays: Vec<u64> = r.iter().map(|r| r.us("scheduling_delay_ms")).collect();
    assert_eq!(delays, [2_516, 2_516]);
    // Without a window (vLLM after PR #45759) each reaches the engine 516 µs after it
    // arrives: at 516, 2,016, 2,516 and 3,016 µs; the third waits for the second's step,
    // [2016, 3016), and the fourth comes as it ends.
    let (sc, _dir) = scenario(
        &format!("(async_scheduling: false, tokenizer_window_us: 0.0, {API})"),
        rows,
    );
    let (_, r) = run(&sc);
    let delays: Vec<u64> = r.iter().map(|r| r.us("scheduling_delay_ms")).collect();
    assert_eq!(delays, [516, 516, 1_016, 516]);
}

#[test]
fn on_a_busy_instance_async_scheduling_schedules_a_new_request_one_step_later() {
    // A keeps the instance stepping every 1,000 µs from t = 0 (steps [0, 1000), [1000,
    // 2000), [2000, 3000), …); B reaches the engine at 2,300 µs, during the third step.
    let rows = "0,16,20\n2300,16,3\n";
    let engine = |mode: &str| {
        format!(
            "(async_scheduling: {mode}, api_request_us: 0.0, api_us_per_prompt_token: 0.0, api_step_us: 50.0, api_us_per_output_token: 10.0, schedule_us: 0.0, schedule_us_per_request: 0.0, tokenizer_window_us: 0.0)"
        )
    };
    let (sync, _d1) = scenario(&engine("false"), rows);
    let (_, s) = run(&sync);
    // Synchronous: the step after the one in flight, [3000, 4000), takes B; its token is
    // the second of that step's outputs (A's first): 4,000 + 50 + 2 × 10 − 2,300.
    assert_eq!(s[1].us("scheduling_delay_ms"), 700);
    assert_eq!(s[1].us("ttft_ms"), 1_770);
    let (asynchronous, _d2) = scenario(&engine("true"), rows);
    let (_, a) = run(&asynchronous);
    // Async: the step starting at 3,000 µs was decided at 2,000 µs, before B arrived; B
    // joins the one after it, [4000, 5000): exactly one step later.
    assert_eq!(a[1].us("scheduling_delay_ms"), 1_700);
    assert_eq!(a[1].us("ttft_ms"), 2_770);
    // A's own tokens are not delayed by the mode (its steps are back to back either way).
    assert_eq!(a[0].us("mean_itl_ms"), s[0].us("mean_itl_ms"));
    assert_eq!(a[0].us("ttft_ms"), 1_060);
}

#[test]
fn the_ttft_taken_apart_adds_up_by_hand_on_an_idle_and_a_busy_instance() {
    // The lone request of the first test: 2,000 µs in the tokenizer's window + 500 + 100 in
    // the API server to reach the instance, no wait, the 1,000 µs step, 60 µs out.
    let (sc, _dir) = scenario(&format!("(async_scheduling: true, {API})"), "0,100,4\n");
    let p = run(&sc).0.ttft_parts_ms;
    assert_eq!(p.requests, 1);
    let ms = |v: Option<f64>| (v.unwrap() * 1000.0).round() as u64;
    assert_eq!(
        [p.to_the_instance, p.waiting, p.prefill, p.token_out, p.ttft].map(ms),
        [2_600, 0, 1_000, 60, 3_660]
    );
    // The busy instance with async scheduling: A (arrives at 0) 0 + 0 + 1,000 + 60 µs; B
    // (at 2,300) reaches it at once, waits out the step in flight and the one decided,
    // [2300, 4000), prefills in [4000, 5000) and its token is the step's second: 50 + 20.
    let rows = "0,16,20\n2300,16,3\n";
    let engine = "(async_scheduling: true, api_request_us: 0.0, api_us_per_prompt_token: 0.0, \
                  api_step_us: 50.0, api_us_per_output_token: 10.0, schedule_us: 0.0, \
                  schedule_us_per_request: 0.0, tokenizer_window_us: 0.0)";
    let (sc, _dir) = scenario(engine, rows);
    let (summary, _) = run(&sc);
    let p = &summary.ttft_parts_ms;
    assert_eq!(p.requests, 2);
    // Means of the two: (0 + 0) / 2, (0 + 1,700) / 2, (1,000 + 1,000) / 2, (60 + 70) / 2.
    assert_eq!(
        [p.to_the_instance, p.waiting, p.prefill, p.token_out, p.ttft].map(ms),
        [0, 850, 1_000, 65, 1_915]
    );
    assert_eq!(
        ms(p.ttft),
        ms(summary.ttft_ms.mean),
        "every request is in them"
    );
    assert!(
        summary
            .to_text()
            .contains("ttft taken apart (mean ms): 0.000 to the instance + 0.850 waiting + 1.000 prefill + 0.065 token out = 1.915"),
        "{}",
        summary.to_text()
    );
}

#[test]
fn a_vllm_release_picks_its_scheduling_mode() {
    // The busy instance above: A steps every 1,000 µs, B reaches the engine at 2,300 µs.
    let rows = "0,16,20\n2300,16,3\n";
    let delay = |engine: &str| {
        let (sc, _dir) = scenario(
            &format!(
                "({engine}, api_request_us: 0.0, api_us_per_prompt_token: 0.0, api_step_us: 50.0, api_us_per_output_token: 10.0, schedule_us: 0.0, schedule_us_per_request: 0.0, tokenizer_window_us: 0.0)"
            ),
            rows,
        );
        run(&sc).1[1].us("scheduling_delay_ms")
    };
    // Before 0.14.0 vLLM scheduled between steps: B joins the step after the one in flight.
    for release in ["0.11", "0.13.0", "0.13.9"] {
        assert_eq!(delay(&format!("vllm: {release:?}")), 700, "{release}");
    }
    // From 0.14.0 on async scheduling is the default: one step later. Labels after the
    // numbers are read past; releases after 0.15 are priced as 0.15.1 (and warned of).
    for release in [
        "0.14.0",
        "v0.14",
        "0.15.1",
        "0.15.1rc2",
        "0.15.1+cu129",
        "0.18.0",
    ] {
        assert_eq!(delay(&format!("vllm: {release:?}")), 1_700, "{release}");
    }
    // A release names a preset; the fields given beside it still override its numbers
    // (vLLM 0.13 run with --async-scheduling).
    assert_eq!(delay("vllm: \"0.13.0\", async_scheduling: true"), 1_700);
}

#[test]
fn from_vllm_0_24_a_lone_prompt_does_not_wait_for_a_tokenizer_batch() {
    // The lone request of the first test: up to 0.23 its prompt waits out the tokenizer's
    // 2,000 µs window and reaches the engine at 2,000 + 500 + 100 µs; 0.24.0 has no
    // micro-batch (vLLM PR #45759), so at 600 µs. A window given beside the release stands.
    let delay = |engine: &str| {
        let (sc, _dir) = scenario(&format!("({engine}, {API})"), "0,100,4\n");
        run(&sc).1[0].us("scheduling_delay_ms")
    };
    assert_eq!(delay("vllm: \"0.15.1\""), 2_600);
    assert_eq!(delay("vllm: \"0.23.0\""), 2_600);
    assert_eq!(delay("vllm: \"0.24.0\""), 600);
    assert_eq!(delay("vllm: \"0.29.1\""), 600);
    assert_eq!(
        delay("vllm: \"0.24.0\", tokenizer_window_us: 1000.0"),
        1_600
    );
}

#[test]
fn validate_names_the_release_and_what_a_newer_one_changed() {
    let validate = |engine: &str, tp: u32| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("g.ron"),
            format!(
                r#"(cluster: (groups: [(model: "llama-2-7b-hf", gpu: "H100", tp: {tp}, engine: {engine})]),
                    workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                        input_tokens: Constant(64), output_tokens: Constant(8))]))"#
            ),
        )
        .unwrap();
        let out = crate::common::servesim_ok(&["validate", "g.ron"], dir.path());
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (out, err) = validate("(vllm: \"0.13.0\")", 1);
    assert!(
        out.contains("serving path (vLLM 0.13.0): synchronous scheduling (vLLM ≤ 0.13)"),
        "{out}"
    );
    assert!(!err.contains("warning"), "{err}");
    let (out, err) = validate("(vllm: \"0.15.1\")", 2);
    assert!(
        out.contains("serving path (vLLM 0.15.1): async scheduling"),
        "{out}"
    );
    assert!(!err.contains("warning"), "{err}");
    // Newer than what the serving path was taken from: priced as 0.15.1, with the changes
    // vLLM's pull requests made since (the all-reduce ones only where there is one).
    let (_, err) = validate("(vllm: \"0.18.0\")", 2);
    assert!(
        err.contains("warning: cluster.groups[0].engine.vllm: vLLM 0.18.0 is newer than the releases servesim's serving path was taken from (0.11 to 0.15.1): it is priced as 0.15.1."),
        "{err}"
    );
    // Before 0.24 the tokenizer's micro-batch is still there; the fused all-reduce is said
    // where there is an all-reduce. (PR #33839's NCCL symmetric-memory ranges are opt-in,
    // VLLM_USE_NCCL_SYMM_MEM=1, so not said.)
    assert!(
        !err.contains("PR #45759") && err.contains("PR #34299") && !err.contains("PR #33839"),
        "{err}"
    );
    let (out, err) = validate("(vllm: \"1.0.0\")", 1);
    assert!(
        err.contains("it is priced as 0.15.1, without the API server's 2 ms tokenizer micro-batch (vLLM PR #45759 removed it; 0.24.0 no longer has it).")
            && !err.contains("PR #34299"),
        "{err}"
    );
    assert!(out.contains("; each prompt tokenized at once"), "{out}");
}

#[test]
fn a_vllm_release_servesim_cannot_read_or_does_not_model_is_an_error() {
    let err = |engine: &str| {
        crate::common::invalid(&format!(
            "(cluster: (groups: [(model: \"llama-2-7b-hf\", gpu: \"H100\", engine: {engine})]), workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(10), output_tokens: Constant(2))]))"
        ))
    };
    let e = err("(vllm: \"0.10.2\")");
    assert!(
        e.contains(
            "cluster.groups[0].engine.vllm: vLLM 0.10.2 is older than the releases modelled"
        ) && e.contains("preset: VllmSync"),
        "{e}"
    );
    for bad in ["latest", "", "0", "1.2.3.4", "0.x.1"] {
        let e = err(&format!("(vllm: {bad:?})"));
        assert!(
            e.contains(&format!(
                "cluster.groups[0].engine.vllm: must be a vLLM release such as \"0.15.1\" or \"0.13\", got {bad:?}"
            )),
            "{bad}: {e}"
        );
    }
    let e = err("(vllm: \"0.15.1\", preset: Vllm)");
    assert!(e.contains("engine.vllm: is given beside `preset`"), "{e}");
}

#[test]
fn without_async_scheduling_the_scheduler_runs_between_steps() {
    let engine = |mode: &str| {
        format!(
            "(async_scheduling: {mode}, api_request_us: 100.0, api_us_per_prompt_token: 0.0, api_step_us: 0.0, api_us_per_output_token: 0.0, schedule_us: 200.0, schedule_us_per_request: 30.0, tokenizer_window_us: 0.0)"
        )
    };
    // Two requests reach the engine together (at 100 µs) and run every step side by side.
    let rows = "0,16,5\n0,16,5\n";
    let (sync, _d1) = scenario(&engine("false"), rows);
    let (_, s) = run(&sync);
    // Each step: 1,000 µs on the GPU + 200 + 2 × 30 µs of scheduling.
    assert_eq!(s[0].us("ttft_ms"), 100 + 1_260);
    assert_eq!(s[0].us("mean_itl_ms"), 1_260);
    assert_eq!(s[0].us("e2e_ms"), 100 + 5 * 1_260);
    let (asynchronous, _d2) = scenario(&engine("true"), rows);
    let (_, a) = run(&asynchronous);
    // Async: the 260 µs overlap the GPU's 1,000.
    assert_eq!(a[0].us("ttft_ms"), 100 + 1_000);
    assert_eq!(a[0].us("e2e_ms"), 100 + 5_000);
}

#[test]
fn the_api_server_delivers_a_steps_tokens_in_batch_order() {
    // Three requests prefill together; their first tokens leave 10 µs apart.
    let (sc, _dir) = scenario(
        &format!("(async_scheduling: false, {API})"),
        "0,1,2\n0,1,2\n0,1,2\n",
    );
    let (_, rows) = run(&sc);
    // Prompts of one token, tokenized in one batch at the window's close (2,000 µs): in the
    // engine at 2,501 µs; the step ends at 3,501; tokens out at 3,501 + 50 + 10·k for
    // k = 1, 2, 3.
    let ttft: Vec<u64> = rows.iter().map(|r| r.us("ttft_ms")).collect();
    assert_eq!(ttft, [3_561, 3_571, 3_581]);
    // The second tokens are delivered in the same order, so each E2E is TTFT + one step.
    let e2e: Vec<u64> = rows.iter().map(|r| r.us("e2e_ms")).collect();
    assert_eq!(e2e, [4_561, 4_571, 4_581]);
}

#[test]
fn an_api_server_slower_than_the_steps_is_a_warning() {
    // n requests of five output tokens reach the engine at 0 µs; steps take 1,000 µs. The
    // first is scheduled alone (step 1, one token); the other n − 1 prefill beside its first
    // decode (step 2) and all decode together through step 5 (n tokens a step); step 6
    // finishes the last n − 1. A step of k tokens costs the API server 50 + 10·k µs: for
    // n = 96, 1,010 µs after each of steps 2–5, so steps 3–6 arrive while the step before
    // them is still being streamed (4 of 6); for n = 95, 1,000 µs, done as the next arrives.
    let engine = "(async_scheduling: false, api_request_us: 0.0, api_us_per_prompt_token: 0.0, \
                  api_step_us: 50.0, api_us_per_output_token: 10.0, tokenizer_window_us: 0.0, \
                  schedule_us: 0.0, schedule_us_per_request: 0.0)";
    let warning = |n: usize| {
        let (sc, _dir) = scenario(engine, &"0,16,5\n".repeat(n));
        let (summary, rows) = run(&sc);
        assert_eq!(rows.len(), n);
        // The last request's last token: the (n − 1)-th of step 6, delivered on time.
        assert_eq!(rows[n - 1].us("e2e_ms"), 6_000 + 50 + 10 * (n as u64 - 1));
        let found: Vec<String> = summary
            .warnings
            .into_iter()
            .filter(|w| w.contains("API server"))
            .collect();
        assert!(found.len() <= 1, "{found:?}");
        found.into_iter().next()
    };
    let w = warning(96).expect("a warning at 96 tokens a step");
    assert!(
        w.contains("instance 0's API server was still streaming")
            && w.contains("on 4 of its 6 steps (66.7 %)")
            && w.contains("(50 µs + 10 µs per request's chunk, up to 96 chunks a step)"),
        "{w}"
    );
    assert_eq!(warning(95), None);
    // BLIS's reading has no API server to fall behind.
    let (sc, _dir) = scenario("(preset: Bare)", &"0,16,5\n".repeat(200));
    assert!(!run(&sc).0.warnings.iter().any(|w| w.contains("API server")));
}

#[test]
fn validate_says_whether_the_api_server_keeps_up_with_a_step_of_128() {
    // Llama-3.1-8B on an H100 (quickstart): a decode step of 128 takes 15.90 ms. Its API
    // server streams the step's 128 chunks in 66 + 30 × 128 = 3,906 µs by default, and in
    // 66 + 200 × 128 = 25,666 µs at 200 µs a chunk.
    let steps = |set: &[&str]| {
        let mut args = vec!["validate", "scenarios/quickstart.ron"];
        for s in set {
            args.extend(["--set", s]);
        }
        let out = crate::common::servesim_ok(&args, &crate::common::root());
        let out = String::from_utf8(out.stdout).unwrap();
        out.lines()
            .find(|l| l.trim_start().starts_with("steps:"))
            .expect("a steps line")
            .to_string()
    };
    let line = steps(&[]);
    assert!(
        line.ends_with("its API server streams those 128 chunks in 3.91 ms (it keeps up)"),
        "{line}"
    );
    let line = steps(&["cluster.groups[0].engine=(api_us_per_output_token: 200.0)"]);
    assert!(
        line.contains("streams those 128 chunks in 25.67 ms (longer than the step"),
        "{line}"
    );
    // BLIS's reading has no API server.
    let line = steps(&["cluster.groups[0].engine=(preset: Bare)"]);
    assert!(!line.contains("API server"), "{line}");
}

#[test]
fn a_roofline_group_without_latency_or_engine_gets_the_roofline_and_vllms_serving_path() {
    let group = |extra: &str| {
        format!(
            "(seed: 3, cluster: (groups: [(model: \"llama-2-7b-hf\", gpu: \"H100\", kv_blocks: 4000{extra})]),
              workload: (num_requests: 40, clients: [(rate_per_s: 10.0, input_tokens: Constant(300), output_tokens: Constant(20))]))"
        )
    };
    let (implicit, rows_i) = run(&parse(&group("")));
    let (explicit, rows_e) = run(&parse(&group(
        ", latency: Roofline(), engine: (preset: Vllm)",
    )));
    assert_eq!(
        rows_i.iter().map(|r| r.us("ttft_ms")).collect::<Vec<_>>(),
        rows_e.iter().map(|r| r.us("ttft_ms")).collect::<Vec<_>>()
    );
    assert_eq!(implicit.ttft_ms.mean, explicit.ttft_ms.mean);
    // The bare path (BLIS's reading) is faster to the first token: no API server, and new
    // requests join the next step.
    let (bare, _) = run(&parse(&group(", engine: (preset: Bare)")));
    assert!(bare.ttft_ms.mean.unwrap() + 1.0 < implicit.ttft_ms.mean.unwrap());
}

#[test]
fn blis_models_keep_the_bare_step_unless_an_engine_is_given() {
    let group = |extra: &str| {
        format!(
            "(seed: 3, cluster: (groups: [(kv_blocks: 4000, latency: Blackbox(alpha: [1000.0, 1.0, 20.0], beta: [5000.0, 10.0, 50.0]){extra})]),
              workload: (num_requests: 40, clients: [(rate_per_s: 10.0, input_tokens: Constant(300), output_tokens: Constant(20))]))"
        )
    };
    let (plain, _) = run(&parse(&group("")));
    let (bare, _) = run(&parse(&group(", engine: (preset: Bare)")));
    assert_eq!(plain.ttft_ms.mean, bare.ttft_ms.mean);
    assert_eq!(plain.e2e_ms.mean, bare.e2e_ms.mean);
    let (vllm, _) = run(&parse(&group(", engine: (preset: Vllm)")));
    assert!(vllm.ttft_ms.mean > plain.ttft_ms.mean);
}

#[test]
fn a_group_without_latency_and_model_is_told_what_the_default_needs() {
    let app = servesim::default_app();
    let err = servesim::loader::parse(
        "(cluster: (groups: [(kv_blocks: 100)]), workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(10), output_tokens: Constant(2))]))",
        "t.ron",
        &[],
        app.world().resource::<servesim::policy::Catalog>(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("cluster.groups[0].model")
            && err.contains("latency omitted: the default is Roofline()"),
        "{err}"
    );
}

#[test]
fn bad_engine_numbers_are_errors_with_their_path() {
    let app = servesim::default_app();
    let err = |engine: &str| {
        servesim::loader::parse(
            &format!("(cluster: (groups: [(model: \"llama-2-7b-hf\", gpu: \"H100\", engine: {engine})]), workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(10), output_tokens: Constant(2))]))"),
            "t.ron",
            &[],
            app.world().resource::<servesim::policy::Catalog>(),
        )
        .unwrap_err()
        .to_string()
    };
    let e = err("(api_step_us: -5.0)");
    assert!(
        e.contains("cluster.groups[0].engine.api_step_us") && e.contains("got -5"),
        "{e}"
    );
    let e = err("(tokenizer_window_us: 2000.0, tokenizer_batch: 0)");
    assert!(
        e.contains("cluster.groups[0].engine.tokenizer_batch") && e.contains("at least 1"),
        "{e}"
    );
    let e = err("(tokenizer_window_us: -1.0)");
    assert!(
        e.contains("cluster.groups[0].engine.tokenizer_window_us") && e.contains("got -1"),
        "{e}"
    );
    // A value far out of range is shown as written, not as the 301 digits Rust prints.
    let e = err("(api_us_per_output_token: 1e300)");
    assert!(
        e.contains("api_us_per_output_token: must be a number of µs in [0, 10⁷], got 1e300\n"),
        "{e}"
    );
}

/// The fidelity chapter's Llama-2-7B load at 4 req/s, run as written and with one term of the
/// serving path (or the top-p sort) switched off: every figure its table, its sum and its
/// request taken apart quote is what the simulator gives.
#[test]
fn the_fidelity_chapters_ttft_figures_are_what_the_simulator_gives() {
    let doc = crate::common::doc("fidelity");
    let ron = doc
        .split("```ron\n")
        .find(|b| b.starts_with("(seed: 42, cluster: (groups: [(model: \"llama-2-7b-hf\""))
        .and_then(|b| b.split("\n```").next())
        .expect("docs/fidelity.md has the 4 req/s Llama-2-7B load");
    let with = |extra: &str| {
        let src = ron.replacen(
            "max_num_batched_tokens: 2048)",
            &format!("max_num_batched_tokens: 2048{extra})"),
            1,
        );
        assert!(extra.is_empty() || src != ron, "the group takes {extra}");
        run(&parse(&src))
    };
    let mean = |extra: &str| with(extra).0.ttft_ms.mean.unwrap();
    let (all, rows) = with("");
    let full = all.ttft_ms.mean.unwrap();
    let bare = mean(", engine: (preset: Bare)");
    let off = |what: &str| full - mean(&format!(", engine: ({what})"));
    let quoted = [
        format!("All of it together: {bare:.1} ms (the bare step) → {full:.1} ms at 4 req/s"),
        format!("| +{:.1} ms (one step) |", off("async_scheduling: false")),
        format!(
            "| +{:.2} ms with the next row |",
            off("api_request_us: 0.0, api_us_per_prompt_token: 0.0")
        ),
        format!("| +{:.1} ms |", off("tokenizer_window_us: 0.0")),
        format!(
            "| +{:.2} ms with the next row |",
            off("api_step_us: 0.0, api_us_per_output_token: 0.0")
        ),
        format!(
            "| +{:.2} ms |",
            full - mean(", latency: Roofline(top_p: 1.0)")
        ),
        format!(
            "vLLM 0.13.0 {:.1} ms, 0.15.1 {full:.1} ms, 0.24.0 {:.1} ms.",
            mean(", engine: (vllm: \"0.13.0\")"),
            mean(", engine: (vllm: \"0.24.0\")")
        ),
    ];
    for q in &quoted {
        assert!(doc.contains(q.as_str()), "docs/fidelity.md lacks {q:?}");
    }
    // Request 300, taken apart: its arrival, its cached prompt and its TTFT.
    let r = rows.iter().find(|r| r.str("request_id") == "300").unwrap();
    let digits = r.str("arrival_us");
    let arrival: String = digits
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let sep = i > 0 && (digits.len() - i) % 3 == 0;
            sep.then_some(',').into_iter().chain([c])
        })
        .collect();
    assert!(
        doc.contains(&format!("it arrives at {arrival} µs")),
        "{arrival}"
    );
    assert_eq!((r.u64("input_tokens"), r.u64("cached_tokens")), (590, 576));
    let ttft = format!("| **TTFT** | | **{:.2}** |", r.us("ttft_ms") as f64 / 1e3);
    assert!(doc.contains(&ttft), "docs/fidelity.md lacks {ttft:?}");
}
