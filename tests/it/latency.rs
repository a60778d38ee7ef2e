//! Latency models end to end: the bundled library, monotonicity, pipeline parallelism,
//! measured tables and derived KV capacity.

use std::process::Command;

use proptest::prelude::*;
use servesim::latency::{
    BatchShape, Blackbox, BlisRoofline, Coefficients, DEFAULT_REQUEST_OVERHEAD_US,
    DEFAULT_STEP_OVERHEAD_US, Extrapolation, LatencyModel, MeasuredTable, PiecewiseLinear,
    Roofline, StepItem, TrainedPhysics,
};
use servesim::model::{
    BUNDLED_MODELS, MemoryRule, ModelConfig, Replica, bundled_gpus, find_gpu, kv_capacity,
    kv_capacity_with,
};

use crate::common::{parse, root, run};

fn shape(items: &[StepItem]) -> BatchShape<'_> {
    BatchShape {
        items,
        prefill_tokens: items
            .iter()
            .filter(|i| i.prefill)
            .map(|i| i.new_tokens)
            .sum(),
        decode_tokens: items.iter().filter(|i| !i.prefill).count() as u32,
    }
}

fn prefill(n: u32, cached: u32) -> StepItem {
    StepItem {
        new_tokens: n,
        context_tokens: cached,
        input_tokens: n + cached,
        prefill: true,
    }
}

fn decode(ctx: u32) -> StepItem {
    StepItem {
        new_tokens: 1,
        context_tokens: ctx,
        input_tokens: ctx.min(512),
        prefill: false,
    }
}

/// Smallest power-of-two TP on which the model fits, and divides its heads.
fn min_tp(m: &ModelConfig, gpu: &str) -> Option<u32> {
    let g = find_gpu(gpu).unwrap();
    [1, 2, 4, 8].into_iter().find(|&tp| {
        // vLLM: KV heads split over TP, or replicated when there are fewer.
        m.heads.is_multiple_of(tp)
            && (m.kv_heads.is_multiple_of(tp) || tp.is_multiple_of(m.kv_heads))
            && kv_capacity(m, &g, tp, 1, 0.9, 16).is_ok()
    })
}

fn models_on(gpu: &str, id: &str) -> (Roofline, TrainedPhysics, BlisRoofline) {
    let m = ModelConfig::bundled(id).unwrap();
    let tp = min_tp(&m, gpu).unwrap_or(8);
    let g = find_gpu(gpu).unwrap();
    (
        Roofline {
            model: m.clone(),
            gpu: g.clone(),
            tp,
            alpha: [0.0; 3],
            step_overhead_us: DEFAULT_STEP_OVERHEAD_US,
            request_overhead_us: DEFAULT_REQUEST_OVERHEAD_US,
            // As a scenario gets it: the model's generation config decides.
            top_p_sort: m.default_top_p.is_some_and(|p| p < 1.0),
        },
        TrainedPhysics::new(m.clone(), g.clone(), tp, Coefficients::bundled()),
        BlisRoofline {
            model: m,
            gpu: g,
            tp,
            alpha: [0.0; 3],
        },
    )
}

#[test]
fn every_bundled_model_on_every_gpu_prices_steps_and_sizes_its_cache() {
    for (id, _) in BUNDLED_MODELS {
        let m = ModelConfig::bundled(id).unwrap();
        for g in bundled_gpus() {
            let (r, t, b) = models_on(&g.id, id);
            for model in [&r as &dyn LatencyModel, &t, &b] {
                let p = model.step_time(&shape(&[prefill(512, 0)])).unwrap();
                let d = model.step_time(&shape(&[decode(512)])).unwrap();
                assert!(
                    p.as_us() > 1 && d.as_us() > 1,
                    "{id} on {}: {p:?} {d:?}",
                    g.id
                );
                assert!(
                    p > d,
                    "{id} on {}: a 512-token prefill outlasts one decode",
                    g.id
                );
            }
            match kv_capacity(&m, &g, 1, 1, 0.9, 16) {
                Ok(c) => assert!(c.blocks > 0),
                Err(e) => assert!(e.contains("does not fit"), "{id} on {}: {e}", g.id),
            }
        }
    }
}

fn all_models() -> Vec<Box<dyn LatencyModel>> {
    let mut v: Vec<Box<dyn LatencyModel>> = vec![
        Box::new(Blackbox {
            alpha: [0.0; 3],
            beta: [6472.01, 19.797, 304.40],
        }),
        Box::new(PiecewiseLinear::default()),
    ];
    for id in [
        "llama-3.1-8b-instruct",
        "mixtral-8x7b-v0.1",
        "qwen3-30b-a3b",
        "llama-3.1-70b-instruct",
    ] {
        let (r, t, b) = models_on("H100", id);
        v.push(Box::new(r));
        v.push(Box::new(t));
        v.push(Box::new(b));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn more_tokens_or_more_context_is_never_priced_faster(
        prefills in proptest::collection::vec((1u32..2048, 0u32..4096), 0..4),
        decodes in proptest::collection::vec(1u32..8192, 0..64),
        extra_tokens in 1u32..512,
        extra_context in 1u32..4096,
    ) {
        prop_assume!(!prefills.is_empty() || !decodes.is_empty());
        let base: Vec<StepItem> = prefills.iter().map(|&(n, c)| prefill(n, c))
            .chain(decodes.iter().map(|&c| decode(c))).collect();
        // More new tokens on the first prefill (or one more decode request).
        let mut more_tokens = base.clone();
        match more_tokens.iter_mut().find(|i| i.prefill) {
            Some(p) => { p.new_tokens += extra_tokens; p.input_tokens += extra_tokens; }
            None => more_tokens.push(decode(1)),
        }
        // More context on every request.
        let more_context: Vec<StepItem> = base.iter().map(|i| StepItem {
            context_tokens: i.context_tokens + extra_context,
            input_tokens: i.input_tokens + if i.prefill { extra_context } else { 0 },
            ..*i
        }).collect();
        for m in all_models() {
            let t = m.step_time(&shape(&base)).unwrap();
            prop_assert!(m.step_time(&shape(&more_tokens)).unwrap() >= t);
            prop_assert!(m.step_time(&shape(&more_context)).unwrap() >= t);
        }
    }

    #[test]
    fn a_measured_table_is_monotone_if_its_measurements_are(
        p in 0u32..3000, d in 0u32..300, dp in 0u32..500, dd in 0u32..50,
    ) {
        let text = std::fs::read_to_string(root().join("scenarios/data/h100-llama8b-steps.csv")).unwrap();
        let t = MeasuredTable::parse(&text, "steps.csv", Extrapolation::Linear).unwrap();
        let at = |p: u32, d: u32| t.step_time(&BatchShape { items: &[], prefill_tokens: p, decode_tokens: d }).unwrap();
        prop_assert!(at(p + dp, d + dd) >= at(p, d));
    }
}

#[test]
fn two_pipeline_stages_keep_two_micro_batches_in_flight() {
    // Blackbox step 1000 µs whatever the batch, pp = 2, no model so only the 5 µs link
    // latency crosses stages: stage = 500 + 5 = 505 µs, a micro-batch takes 1000 + 5.
    // R1 prefills alone at t1 (first token t1 + 1005). R2 arrives during that stage and
    // starts when stage 0 frees, t1 + 505 (done t1 + 1510). At t1 + 1005 R1 is free but
    // stage 0 is busy until t1 + 1010; R1's decode then ends at
    // max(t1 + 1010 + 1005, t1 + 1510 + 505) = t1 + 2015.
    let sc = parse(
        "(seed: 3, cluster: (groups: [(count: 1, kv_blocks: 100, pp: 2,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
          workload: (num_requests: 2, clients: [(rate_per_s: 10000.0, input_tokens: Constant(16), output_tokens: Constant(2))]))",
    );
    let (s, rows) = run(&sc);
    let (r1, r2) = (&rows[0], &rows[1]);
    let (t1, t2) = (r1.u64("arrival_us"), r2.u64("arrival_us"));
    assert!(
        t2 < t1 + 505,
        "precondition: R2 arrives during the first stage"
    );
    assert_eq!(r1.us("ttft_ms"), 1005);
    assert_eq!(r2.us("ttft_ms"), t1 + 1510 - t2);
    assert_eq!(r1.u64("completion_us"), t1 + 2015);
    assert_eq!(r1.us("mean_itl_ms"), 1010);
    assert_eq!(s.instances[0].steps, 4);
}

#[test]
fn pipelining_raises_throughput_of_a_saturated_instance() {
    let src = |pp: u32| {
        format!(
            "(seed: 4, cluster: (groups: [(count: 1, pp: {pp}, model: \"llama-2-70b-hf\", gpu: \"A100-80\", tp: 2,
                latency: Roofline())]),
              workload: (num_requests: 150, clients: [(rate_per_s: 50.0, input_tokens: Constant(256), output_tokens: Constant(64))]))"
        )
    };
    let (one, _) = run(&parse(&src(1)));
    let (two, _) = run(&parse(&src(2)));
    assert!(
        two.throughput.output_tokens_per_s > 1.3 * one.throughput.output_tokens_per_s,
        "pp=2 {} vs pp=1 {} tok/s",
        two.throughput.output_tokens_per_s,
        one.throughput.output_tokens_per_s
    );
}

#[test]
fn kv_blocks_and_max_model_len_are_derived_from_model_and_gpu() {
    let sc = parse(
        "(cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", latency: Roofline())]),
          workload: (num_requests: 5, clients: [(rate_per_s: 5.0, input_tokens: Constant(100), output_tokens: Constant(10))]))",
    );
    let (s, _) = run(&sc);
    // vLLM's start-up profile on an H100 with `vllm serve`'s 1,024 requests and 8,192 tokens:
    // 0.9 × (80 − 0.8) = 71.28 GiB, less 8,030,261,248 × 2 B = 14.9575 GiB of weights, the
    // sampler's peak (1,024 rows × 128,256 logits × 30 B + 8,192 hidden rows × 4,096 × 2 B =
    // 4,007,133,184 B = 3.73193 GiB, above the forward pass's 8,192 × 3 × 14,336 × 2 B) and
    // 0.67 GiB other: 51.92054 GiB, of 2 MiB blocks ⌊26,583.3⌋.
    assert_eq!(s.instances[0].kv_total_blocks, 26_583);
    // The BLIS reading keeps BLIS's rule: (72 − 14.9575 − 5.5 − 0.15) GiB → ⌊26,312.5⌋.
    let bare = parse(
        "(cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", latency: Roofline(), engine: (preset: Bare))]),
          workload: (num_requests: 5, clients: [(rate_per_s: 5.0, input_tokens: Constant(100), output_tokens: Constant(10))]))",
    );
    assert_eq!(run(&bare).0.instances[0].kv_total_blocks, 26_312);
    // 131,072 positions > 26,583·16 = 425,328? No: the model's context length is smaller.
    let huge = parse(
        "(cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", latency: Roofline())]),
          workload: (num_requests: 2, clients: [(rate_per_s: 5.0, input_tokens: Constant(131000), output_tokens: Constant(100))]))",
    );
    let (s, _) = run(&huge);
    assert_eq!(
        s.requests.dropped, 2,
        "131,100 tokens exceed the 131,072-token context"
    );
}

#[test]
fn list_models_and_hardware_show_the_library() {
    let run = |what: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(["list", what])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let models = run("models");
    for (id, _) in BUNDLED_MODELS {
        assert!(models.contains(id), "{id}");
    }
    assert!(
        models.contains(
            "the HuggingFace repository id vLLM's --model takes (meta-llama/Llama-2-7b-hf)"
        ),
        "{models}"
    );
    let hw = run("hardware");
    for id in ["H100", "H200", "A100-80", "A100-40", "L40S"] {
        assert!(hw.contains(id), "{id}");
    }
    // Asked for as a group's `gpu` names them, the same list.
    assert_eq!(run("gpus"), hw);
    // Every column stands apart from the next: the node column's widest header, "node
    // GPUs/NVL/NIC", once ran into "aliases".
    let header: Vec<&str> = hw.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header.last(), Some(&"aliases"), "{header:?}");
    assert!(header.contains(&"GPUs/NVL/NIC"), "{header:?}");
    let h100: Vec<&str> = hw.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(h100[..2], ["H100", "989.5"]);
    let node = h100.iter().position(|w| *w == "8/450/50").unwrap();
    assert_eq!(h100[node + 1], "H100-SXM,", "{h100:?}");
    assert_eq!(h100.last(), Some(&"h100"), "{h100:?}");
}

/// The latency chapter's table of single-request latencies, regenerated from the models.
fn readme_table() -> String {
    let mut t = String::from(
        "| model | TP | roofline TTFT | roofline ITL | BLIS roofline TTFT | BLIS roofline ITL | trained-physics TTFT | trained-physics ITL | piecewise TTFT | piecewise ITL |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let pw = PiecewiseLinear::default();
    for (id, _) in BUNDLED_MODELS {
        let m = ModelConfig::bundled(id).unwrap();
        let Some(tp) = min_tp(&m, "H100") else {
            t.push_str(&format!(
                "| {id} | does not fit on 8×H100 | | | | | | | | |\n"
            ));
            continue;
        };
        let (r, tphys, blis) = models_on("H100", id);
        let ms = |us: u64| format!("{:.2}", us as f64 / 1000.0);
        let cells = |m: &dyn LatencyModel| {
            let ttft = m.queueing_delay(512).as_us()
                + m.step_time(&shape(&[prefill(512, 0)])).unwrap().as_us()
                + m.output_token_overhead().as_us();
            let itl = m.step_time(&shape(&[decode(512)])).unwrap().as_us()
                + m.output_token_overhead().as_us();
            format!("{} | {}", ms(ttft), ms(itl))
        };
        t.push_str(&format!(
            "| {id} | {tp} | {} | {} | {} | {} |\n",
            cells(&r),
            cells(&blis),
            cells(&tphys),
            cells(&pw)
        ));
    }
    t
}

#[test]
fn the_docs_latency_table_matches_the_models() {
    let readme = crate::common::doc("latency");
    let table = readme_table();
    assert!(
        readme.contains(&table),
        "docs/latency.md is out of date; the table should read:\n{table}"
    );
}

#[test]
fn a_scenario_can_bring_its_own_model_config_and_gpu_profile() {
    let fixtures = root().join("tests/fixtures");
    let src = format!(
        "(cluster: (groups: [(model: \"{}\", gpu: \"{}\", latency: Roofline())]),
          workload: (num_requests: 20, clients: [(rate_per_s: 50.0, input_tokens: Constant(100), output_tokens: Constant(10))]))",
        fixtures.join("models/tiny-llama.json").display(),
        fixtures.join("golden-h100.ron").display()
    );
    let (s, rows) = run(&parse(&src));
    assert_eq!(s.requests.completed, 20);
    // The tiny model's own numbers reach the KV sizing: per token 4·2·64·4·2 = 4,096 B,
    // 64 KiB per block, weights (3-matrix FFN) tiny; vLLM's profile on an 80 GiB GPU named
    // neither A100 (1,024 requests, 8,192 tokens): 71.28 GiB less 0.67 other and a sampler of
    // 1,024 × 1,000 × 30 B + 8,192 × 512 × 2 B (0.036 GiB) ≈ 1.15M blocks.
    let m = ModelConfig::from_hf_json(
        "tiny",
        &std::fs::read_to_string(fixtures.join("models/tiny-llama.json")).unwrap(),
    )
    .unwrap();
    let g: servesim::model::GpuProfile =
        ron::from_str(&std::fs::read_to_string(fixtures.join("golden-h100.ron")).unwrap()).unwrap();
    assert_eq!(
        s.instances[0].kv_total_blocks,
        kv_capacity_with(
            &m,
            &g,
            Replica {
                tp: 1,
                pp: 1,
                dp: 1
            },
            0.9,
            16,
            (0.0, 0.0),
            MemoryRule::Vllm {
                tokens: 8192,
                rows: 1024
            }
        )
        .unwrap()
        .blocks
    );
    assert!((1_150_000..1_160_000).contains(&s.instances[0].kv_total_blocks));
    assert!(rows.iter().all(|r| r.str("state") == "completed"));
}

#[test]
fn a_cpu_tier_turns_recomputed_prefixes_into_reloads_that_steps_pay_for() {
    // Llama-2-7B (512 KiB of KV per token, 8 MiB per 16-token block) with a GPU cache of
    // 64 blocks: 40 prompts of 512 tokens (32 blocks each) cycle through a pool of 4, so
    // each prompt is evicted before it comes back. With a CPU tier the repeats reload.
    let src = |cpu: u32| {
        format!(
            "(seed: 3, cluster: (groups: [(model: \"llama-2-7b-hf\", gpu: \"H100\", kv_blocks: 64,
                cpu_kv_blocks: {cpu}, max_num_seqs: 1, latency: Roofline())]),
              workload: (num_requests: 40, clients: [(rate_per_s: 2.0, input_tokens: Constant(512),
                output_tokens: Constant(4), prompt_pool: 4)]))"
        )
    };
    let (without, _) = run(&parse(&src(0)));
    let (with, rows) = run(&parse(&src(256)));
    assert_eq!(without.kv.reloaded_blocks, 0);
    assert_eq!(
        without.kv.hit_blocks, 0,
        "every repeat was evicted: nothing to hit"
    );
    // 4 first uses compute their prompts; 36 repeats reload 31 of 32 blocks each (the
    // last block is recomputed: one token must be).
    assert_eq!(with.kv.reloaded_blocks, 36 * 31);
    assert_eq!(with.kv.hit_blocks, 36 * 31);
    assert!((with.kv.cpu_hit_rate - 36.0 * 31.0 / (40.0 * 32.0)).abs() < 1e-12);
    assert_eq!(with.kv.gpu_hit_rate, 0.0);
    assert!(with.kv.offloaded_blocks >= 4 * 32);
    let cached: u64 = rows.iter().map(|r| r.u64("cached_tokens")).sum();
    assert_eq!(cached, 36 * 31 * 16);
    // A reload of 31 blocks over the 50 GB/s host link: 10 µs + 31 × 8 MiB / 50 GB/s
    // = 5.21 ms, less than recomputing 496 tokens (≈ 9 ms on the roofline); TTFT drops.
    assert!(with.ttft_ms.mean.unwrap() < without.ttft_ms.mean.unwrap());
}

#[test]
fn roofline_defaults_can_be_overridden_in_the_scenario() {
    // Halving the GEMM efficiency slows a compute-bound prefill; a 1 ms step overhead adds
    // exactly 600 µs over the default 400 µs to a lone request's every step.
    let src = |latency: &str| {
        format!(
            "(cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", kv_blocks: 2000,
                latency: {latency})]),
              workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(2000),
                output_tokens: Constant(3))]))"
        )
    };
    let (base, base_rows) = run(&parse(&src("Roofline()")));
    let (slow, _) = run(&parse(&src("Roofline(gemm_efficiency: 0.38)")));
    assert!(slow.ttft_ms.mean.unwrap() > 1.5 * base.ttft_ms.mean.unwrap());
    let (over, over_rows) = run(&parse(&src("Roofline(step_overhead_us: 1000.0)")));
    // Three steps (prefill + two decodes), each 600 µs longer.
    assert_eq!(
        over_rows[0].u64("completion_us") - base_rows[0].u64("completion_us"),
        1800
    );
    assert!(over.itl_ms.mean.unwrap() > base.itl_ms.mean.unwrap());
    // Reading the paged KV cache at half the speed leaves the prefill (no cached context to
    // read) exactly as it was and slows the two decodes, which read 2,000 tokens each.
    let (kv, kv_rows) = run(&parse(&src("Roofline(kv_read_efficiency: 0.45)")));
    assert_eq!(kv_rows[0].us("ttft_ms"), base_rows[0].us("ttft_ms"));
    assert!(kv.itl_ms.mean.unwrap() > base.itl_ms.mean.unwrap());
}

#[test]
fn a_kv_read_efficiency_outside_zero_to_one_is_refused_with_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = |latency: &str| {
        format!(
            "(cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", latency: {latency})]),
              workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(20),
                output_tokens: Constant(3))]))"
        )
    };
    std::fs::write(
        dir.path().join("s.ron"),
        scenario("Roofline(kv_read_efficiency: 1.5)"),
    )
    .unwrap();
    let out = crate::common::servesim(&["validate", "s.ron"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("cluster.groups[0].latency.kv_read_efficiency: must be in (0, 1], got 1.5"),
        "{err}"
    );
    // A GPU file may carry it too, bare or as `Some(…)` like a scenario's optional fields.
    for value in ["0.6", "Some(0.6)"] {
        std::fs::write(
            dir.path().join("g.ron"),
            format!(
                "(id: \"G\", tflops_bf16: 989.5, tflops_fp8: 1979.0, bandwidth_tb_per_s: 3.35,
                  mfu_prefill: 0.45, mfu_decode: 0.30, memory_gib: 80.0, calibration: Datasheet,
                  physics: (kv_read_efficiency: {value}))"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("s.ron"),
            scenario("Roofline()").replace("\"H100\"", "\"g.ron\""),
        )
        .unwrap();
        crate::common::servesim_ok(&["validate", "s.ron"], dir.path());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// A lockstep decode step is priced from (decodes, Σ context); for the models that do so
    /// it must be exactly what the items give, for every bundled model (dense, MoE, TP > 1).
    #[test]
    fn a_decode_step_priced_from_its_sums_is_priced_as_its_items(
        model in 0..BUNDLED_MODELS.len(),
        contexts in proptest::collection::vec(1u32..100_000, 1..300),
    ) {
        let items: Vec<StepItem> = contexts.iter().map(|&c| decode(c)).collect();
        let n = items.len() as u32;
        let context: u64 = contexts.iter().map(|&c| u64::from(c)).sum();
        let (_, trained, _) = models_on("H100", BUNDLED_MODELS[model].0);
        prop_assert_eq!(
            trained.decode_step_time(n, context).expect("priced from sums").unwrap(),
            trained.step_time(&shape(&items)).unwrap()
        );
        let blackbox = Blackbox { alpha: [0.0; 3], beta: [6472.01, 19.797, 304.40] };
        prop_assert_eq!(
            blackbox.decode_step_time(n, context).expect("priced from sums").unwrap(),
            blackbox.step_time(&shape(&items)).unwrap()
        );
    }
}

/// A model named as vLLM's `--model` takes it (a HuggingFace repository id, or a model's
/// directory) is the model of that name; a fine-tune servesim does not bundle points at the
/// bundled model it was tuned from or to; an id nothing matches says the Hub is not read.
#[test]
fn models_answer_to_their_hub_ids_and_directories_and_a_missing_fine_tune_names_its_kin() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let validate = |model: &str| validate_group(dir, model, "H100");
    for (hub, id) in [
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b-hf"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b-v0.1"),
        (
            "codellama/CodeLlama-34b-Instruct-hf",
            "codellama-34b-instruct-hf",
        ),
    ] {
        let (code, out) = validate(hub);
        assert_eq!(code, Some(0), "{hub}: {out}");
        assert!(
            out.contains(&format!("1 × {id} on 2 × H100")),
            "{hub}: {out}"
        );
    }
    // A directory holding a config.json is that model, before any bundled name.
    crate::common::model_dir(&dir.join("meta-llama/Llama-2-7b-hf"), "mistral-7b-v0.1");
    let (code, out) = validate("meta-llama/Llama-2-7b-hf");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 × Llama-2-7b-hf on 2 × H100"), "{out}");
    assert!(
        out.contains("32 sliding-window over 4096 tokens"),
        "the directory's Mistral config: {out}"
    );
    for (name, says) in [
        (
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "no bundled model \"Mixtral-8x7B-Instruct-v0.1\"; servesim bundles \"mixtral-8x7b-v0.1\", the same model with or without instruction tuning",
        ),
        (
            "llama-2-7b-chat-hf",
            "unknown model \"llama-2-7b-chat-hf\"; servesim bundles \"llama-2-7b-hf\"",
        ),
        (
            "codellama-34b-hf",
            "servesim bundles \"codellama-34b-instruct-hf\"",
        ),
        (
            "meta-llama/Llama-2-7b-hff",
            "no bundled model \"Llama-2-7b-hff\"; did you mean \"llama-2-7b-hf\"?",
        ),
        (
            "meta-llama/Meta-Llama-3-8B",
            "servesim fetches nothing from the HuggingFace Hub: give the path of the model's config.json",
        ),
    ] {
        let (code, out) = validate(name);
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(out.contains(says), "{name}: {out}");
    }
    std::fs::create_dir(dir.join("empty")).unwrap();
    let (code, out) = validate("./empty");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("empty is a directory without a config.json"),
        "{out}"
    );
    // GPUs likewise: as nvidia-smi names them, and a hint that stays with the chip named.
    let (code, out) = validate_group(dir, "llama-2-7b-hf", "NVIDIA H100 80GB HBM3");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("on 2 × H100 (tp 2"), "{out}");
    for (name, says) in [
        (
            "A100",
            "of that chip servesim bundles A100-80 and A100-40: name one",
        ),
        (
            "H100-PCIe",
            "of that chip servesim bundles H100: name it if it is your part",
        ),
        ("mi300", "did you mean \"MI300X\"?"),
    ] {
        let (code, out) = validate_group(dir, "llama-2-7b-hf", name);
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(out.contains(says), "{name}: {out}");
    }
}

/// `vllm serve` on a GPU of 70 GiB or more that is not an A100 defaults to 1,024 requests and
/// 8,192 tokens a step (vLLM's `EngineArgs.get_batch_defaults`), elsewhere to servesim's 256
/// and 2,048: validate says so where the two differ and the group runs servesim's.
#[test]
fn validate_says_which_batch_limits_a_group_left_out_and_whose_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for (gpu, line) in [
        (
            "H100",
            "1,024 requests and 8,192 tokens a step: `vllm serve`'s defaults on the H100",
        ),
        (
            "MI300X",
            "1,024 requests and 8,192 tokens a step: `vllm serve`'s defaults on the MI300X",
        ),
        (
            "A100-80",
            "256 requests and 2,048 tokens a step: `vllm serve`'s defaults on the A100-80",
        ),
        (
            "L40S",
            "256 requests and 2,048 tokens a step: `vllm serve`'s defaults on the L40S",
        ),
    ] {
        let (code, out) = validate_group(dir, "llama-2-7b-hf", gpu);
        assert_eq!(code, Some(0), "{gpu}: {out}");
        assert!(
            out.contains(&format!("batch limits: {line}")),
            "{gpu}: {out}"
        );
    }
    // One limit given: the other derived from it as vLLM does, and said so; both given: no line.
    for (limits, line) in [
        (
            "max_num_batched_tokens: 512",
            Some(
                "512 requests and 512 tokens a step: max_num_batched_tokens as given, max_num_seqs from `vllm serve`'s defaults on the H100",
            ),
        ),
        (
            "max_num_seqs: 64",
            Some(
                "64 requests and 8,192 tokens a step: max_num_seqs as given, the budget from `vllm serve`'s defaults on the H100",
            ),
        ),
        (
            "latency: TrainedPhysics()",
            Some("256 requests and 2,048 tokens a step: BLIS's defaults (the BLIS reading"),
        ),
        ("max_num_seqs: 64, max_num_batched_tokens: 512", None),
    ] {
        std::fs::write(
            dir.join("l.ron"),
            format!(
                r#"(cluster: (groups: [(model: "llama-2-7b-hf", gpu: "H100", {limits})]),
                    workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                        input_tokens: Constant(64), output_tokens: Constant(8))]))"#
            ),
        )
        .unwrap();
        let out = crate::common::servesim_ok(&["validate", "l.ron"], dir);
        let out = String::from_utf8_lossy(&out.stdout);
        match line {
            Some(line) => assert!(
                out.contains(&format!("batch limits: {line}")),
                "{limits}: {out}"
            ),
            None => assert!(!out.contains("batch limits:"), "{limits}: {out}"),
        }
    }
}

/// What `servesim validate` prints on stderr for one group of the given fields serving one
/// short request.
fn validate_stderr(group: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("g.ron"),
        format!(
            r#"(cluster: (groups: [({group})]),
                workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                    input_tokens: Constant(64), output_tokens: Constant(8))]))"#
        ),
    )
    .unwrap();
    let out = crate::common::servesim_ok(&["validate", "g.ron"], dir.path());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_context_the_derived_cache_cannot_hold_is_warned_of_as_vllm_refuses_it() {
    // Llama-3.1-8B on an A100-40 by BLIS's rule (the BLIS reading): 7,880 blocks of 16 =
    // 126,080 tokens, short of its 131,072.
    let warning = |extra: &str| {
        validate_stderr(&format!(
            r#"model: "llama-3.1-8b-instruct", gpu: "A100-40"{extra}"#
        ))
    };
    let bare = ", engine: (preset: Bare)";
    let w = warning(bare);
    assert!(
        w.contains("warning: cluster.groups[0]: llama-3.1-8b-instruct's context (max_model_len left out) of 131,072 tokens does not fit the KV cache a request can take (126,080 tokens): vLLM refuses to start such a server"),
        "{w}"
    );
    assert!(w.contains("Give max_model_len at most 126,080"), "{w}");
    let w = warning(", engine: (preset: Bare), max_model_len: 200000");
    assert!(
        w.contains("max_model_len of 200,000 tokens does not fit"),
        "{w}"
    );
    // What fits, and blocks given (vLLM's num_gpu_blocks_override, taken unchecked), pass.
    assert!(!warning(", engine: (preset: Bare), max_model_len: 126080").contains("does not fit"));
    assert!(!warning(", engine: (preset: Bare), kv_blocks: 100").contains("does not fit"));
    // vLLM's own profile leaves more: 0.9 × 39.2 − 14.9575 − 0.67 GiB less a sampler of 256
    // rows (0.9330 GiB) is 9,584 blocks, 153,344 tokens; 200,000 still do not fit.
    assert!(!warning("").contains("does not fit"));
    assert!(warning(", max_model_len: 200000").contains("(153,344 tokens)"));
}

#[test]
fn a_max_model_len_above_the_models_context_is_warned_of_as_vllm_refuses_it() {
    // Llama-3.1-8B: 131,072 positions (its llama3 RoPE scaling already counted in them);
    // Llama-2-7B: 4,096. Blocks given, so that the KV cache is not what is warned of.
    let warning = |model: &str, len: u32| {
        validate_stderr(&format!(
            r#"model: "{model}", gpu: "H100", kv_blocks: 100000, max_model_len: {len}"#
        ))
    };
    let w = warning("llama-3.1-8b-instruct", 131_073);
    assert!(
        w.contains("warning: cluster.groups[0].max_model_len = 131,073 is above llama-3.1-8b-instruct's context of 131,072 tokens (max_position_embeddings, with its RoPE scaling): vLLM refuses it"),
        "{w}"
    );
    let w = warning("llama-2-7b-hf", 4_097);
    assert!(
        w.contains("max_model_len = 4,097 is above llama-2-7b-hf's context of 4,096 tokens"),
        "{w}"
    );
    for (model, len) in [("llama-3.1-8b-instruct", 131_072), ("llama-2-7b-hf", 4_096)] {
        assert!(!warning(model, len).contains("is above"), "{model} {len}");
    }
}

#[test]
fn a_given_kv_cache_no_gpu_could_hold_beside_the_weights_is_warned_of() {
    // Llama-3.1-8B: 16.06 GB of bf16 weights (14.96 GiB) and 128 KiB of KV a token, 2 MiB a
    // block of 16. An H100 reports 79.2 GiB: 33,000 blocks (64.45 GiB) + 14.96 + 0.67 GiB
    // of other memory is 80.08 GiB, too much; 32,000 (62.5 GiB) is 78.13 GiB and fits.
    let cache = |extra: &str| validate_stderr(&format!(r#"gpu: "H100", {extra}"#));
    let w = cache(r#"model: "llama-3.1-8b-instruct", kv_blocks: 33000"#);
    assert!(
        w.contains(
            "warning: cluster.groups[0].kv_blocks = 33,000 (64.5 GiB per GPU) with \
             llama-3.1-8b-instruct's weights (15.0 GiB per GPU) and 0.67 GiB of other memory \
             needs 80.1 GiB on each GPU, more than the H100's 79.2 GiB: no vLLM server holds this"
        ),
        "{w}"
    );
    // Llama-2-70B's 128.5 GiB of weights fit no H100 alone, whatever the cache; at tp 2 each
    // GPU holds 64.2 GiB of them and 2.4 GiB of 1,000 blocks.
    let w = cache(r#"model: "llama-2-70b-hf", kv_blocks: 1000"#);
    assert!(w.contains("needs 134.0 GiB on each GPU"), "{w}");
    for fits in [
        r#"model: "llama-3.1-8b-instruct", kv_blocks: 32000"#,
        r#"model: "llama-2-70b-hf", kv_blocks: 1000, tp: 2"#,
    ] {
        assert!(!cache(fits).contains("kv_blocks ="), "{fits}");
    }
}

#[test]
fn a_profiling_pass_too_large_for_the_gpu_says_so_and_what_to_lower() {
    let group = |model: &str, gpu: &str, extra: &str| {
        crate::common::invalid(&format!(
            r#"(cluster: (groups: [(model: "{model}", gpu: "{gpu}"{extra})]),
                workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                    input_tokens: Constant(64), output_tokens: Constant(8))]))"#
        ))
    };
    // 4,294,967,295 tokens of 86,016 B of MLP activations: far beyond an H100.
    let e = group(
        "llama-3.1-8b-instruct",
        "H100",
        ", max_num_seqs: 100000, max_num_batched_tokens: 4294967295",
    );
    assert!(
        e.contains("llama-3.1-8b-instruct does not fit: 71.3 GiB available on 1×H100")
            && e.contains("(vLLM's profiling pass of 4,294,967,295 tokens and 100,000 sampler rows)")
            && e.contains("use more GPUs (tp), lower max_num_batched_tokens or max_num_seqs, or give kv_blocks"),
        "{e}"
    );
    // Weights alone too large: smaller batch limits would not help, and it does not say so.
    let e = group("llama-3.1-70b-instruct", "L40S", "");
    assert!(
        e.contains("131.4 GiB of weights") && e.contains("use more GPUs (tp) or give kv_blocks"),
        "{e}"
    );
    assert!(!e.contains("lower max_num_batched_tokens"), "{e}");
}

#[test]
fn a_derived_cache_for_a_multimodal_model_is_warned_of() {
    // vLLM loads and profiles a vision encoder servesim does not count: Llama-4-Scout (its
    // config's `vision_config`) and Gemma-3 (`Gemma3ForConditionalGeneration`).
    let stderr = |model: &str, extra: &str| {
        validate_stderr(&format!(r#"model: "{model}", gpu: "H100", tp: 2{extra}"#))
    };
    let scout = "llama-4-scout-17b-16e-instruct-fp8-dynamic";
    let w = stderr(scout, "");
    assert!(
        w.contains(&format!(
            "warning: cluster.groups[0]: {scout} is multimodal: vLLM also loads its vision encoder"
        )),
        "{w}"
    );
    assert!(w.contains("give kv_blocks from vLLM's start-up log"), "{w}");
    assert!(stderr("gemma-3-27b-it", "").contains("gemma-3-27b-it is multimodal"));
    // Blocks given, or a text model, say nothing of it.
    assert!(!stderr(scout, ", kv_blocks: 8253").contains("multimodal"));
    assert!(!stderr("llama-3.1-8b-instruct", "").contains("multimodal"));
}

/// 600 prompts of 8 tokens at once on one Llama-2-7B: the requests that wait for a whole
/// batch to finish (128 tokens each) before their first token.
fn waited_for_a_batch(gpu: &str, engine: &str) -> usize {
    let sc = parse(&format!(
        r#"(cluster: (groups: [(model: "llama-2-7b-hf", gpu: "{gpu}"{engine})]),
            workload: (num_requests: 600, clients: [(rate_per_s: 1000000.0,
                input_tokens: Constant(8), output_tokens: Constant(128))]))"#
    ));
    let (_, rows) = run(&sc);
    assert_eq!(rows.len(), 600);
    rows.iter().filter(|r| r.us("ttft_ms") > 400_000).count()
}

#[test]
fn a_group_left_at_its_defaults_batches_as_vllm_serve_would_on_its_gpu() {
    // `vllm serve` on an H100: 1,024 requests and 8,192 tokens a step, so all 600 prompts
    // (4,800 tokens) start in the first step.
    assert_eq!(waited_for_a_batch("H100", ""), 0);
    // On an A100 (and with the BLIS reading anywhere): 256 and 2,048, so 344 requests wait
    // for the first 256 to finish their 128 tokens (≥ 128 decode steps of ≥ 5 ms).
    assert_eq!(waited_for_a_batch("A100-80", ""), 344);
    assert_eq!(waited_for_a_batch("H100", ", engine: (preset: Bare)"), 344);
}

/// `servesim validate` of one request on a group of `model` on two `gpu`s: its exit code, and
/// its stdout and stderr together.
fn validate_group(dir: &std::path::Path, model: &str, gpu: &str) -> (Option<i32>, String) {
    let text = format!(
        r#"(cluster: (groups: [(model: "{model}", gpu: "{gpu}", tp: 2)]),
            workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                input_tokens: Constant(64), output_tokens: Constant(8))]))"#
    );
    std::fs::write(dir.join("g.ron"), text).unwrap();
    let out = crate::common::servesim(&["validate", "g.ron"], dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn validate_prints_the_roofline_s_per_step_overhead_and_whose_it_is() {
    let stdout = |latency: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("g.ron"),
            format!(
                r#"(cluster: (groups: [(model: "llama-3.1-8b-instruct", gpu: "H100"{latency})]),
                    workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                        input_tokens: Constant(64), output_tokens: Constant(8))]))"#
            ),
        )
        .unwrap();
        let out = crate::common::servesim_ok(&["validate", "g.ron"], dir.path());
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix("step overhead: "))
            .map(str::to_string)
    };
    // The defaults (400 µs and 5 µs per request) are assumptions, and say so.
    let default = stdout("").unwrap();
    assert!(
        default.starts_with("400 µs + 5 µs per request in each step besides its kernels")
            && default.contains("assumed, not measured"),
        "{default}"
    );
    let given =
        stdout(", latency: Roofline(step_overhead_us: 250, request_overhead_us: 2)").unwrap();
    assert_eq!(
        given,
        "250 µs + 2 µs per request in each step besides its kernels (as the scenario gives them)"
    );
    let half = stdout(", latency: Roofline(request_overhead_us: 2)").unwrap();
    assert!(
        half.starts_with("400 µs + 2 µs") && half.contains("the other assumed"),
        "{half}"
    );
    // BLIS's models carry their overheads in their coefficients: no such line.
    assert_eq!(stdout(", latency: TrainedPhysics()"), None);
}

#[test]
fn a_checkpoint_quantised_in_a_way_we_cannot_read_needs_its_weight_dtype() {
    // Llama-3.1-8B's config with an mxfp4 quantization_config: its weights' size is unknown
    // (it was served at 16 bits without a word); with weight_dtype int4 it is 4-bit.
    let dir = tempfile::tempdir().unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::root().join("assets/models/llama-3.1-8b-instruct.json"),
        )
        .unwrap(),
    )
    .unwrap();
    config["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    std::fs::write(dir.path().join("q.json"), config.to_string()).unwrap();
    let write = |extra: &str| {
        std::fs::write(
            dir.path().join("s.ron"),
            format!(
                r#"(cluster: (groups: [(model: "q.json", gpu: "H100"{extra})]),
                   workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                     input_tokens: Constant(8), output_tokens: Constant(2))]))"#
            ),
        )
        .unwrap();
    };
    write("");
    let out = crate::common::servesim(&["validate", "s.ron"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cluster.groups[0].model: q is quantised with `mxfp4`")
            && err.contains("give the group's weight_dtype"),
        "{err}"
    );
    write(r#", weight_dtype: "int4""#);
    let out = crate::common::servesim_ok(&["validate", "s.ron"], dir.path());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("weights int4 (0.5 B each"), "{text}");
}
