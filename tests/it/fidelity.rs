//! Fidelity of our roofline against kernel times measured on a real H100
//! (`../shared/reference/data/h100_torch_microbench.csv`, see its SOURCES.md entry).
//!
//! Every whole-layer CUDA-graph row (`layer_decode_graph`, `layer_prefill_graph`: RMSNorm,
//! QKV, SDPA against a context, O, SwiGLU MLP of one GPU's shard) is priced by
//! [`Roofline::layer_us`] with the same shape, and must be within 15 %. The benchmark's SDPA
//! passed one tensor as both K and V, so the layer is priced reading one KV tensor; a shard
//! is measured on one GPU, so its all-reduces are left out. Per step (× layers) the relative
//! error is the same.

use std::path::Path;

use servesim::latency::{LayerLoad, Roofline};
use servesim::model::{ModelConfig, find_gpu};

fn bench() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/reference/data/h100_torch_microbench.csv");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the fidelity data must be beside the project)",
            path.display()
        )
    })
}

fn roofline(bench_model: &str) -> Roofline {
    let (id, tp) = match bench_model {
        "llama-3.1-8b" => ("llama-3.1-8b-instruct", 1),
        "llama-2-7b" => ("llama-2-7b-hf", 1),
        "llama-2-70b-tp4" => ("llama-2-70b-hf", 4),
        "codellama-34b-tp2" => ("codellama-34b-instruct-hf", 2),
        other => panic!("unknown benchmark model {other}"),
    };
    Roofline {
        model: ModelConfig::bundled(id).unwrap(),
        gpu: find_gpu("H100").unwrap(),
        tp,
        alpha: [0.0; 3],
        step_overhead_us: 0.0,
        request_overhead_us: 0.0,
        top_p_sort: false,
    }
}

/// (model, kind, tokens, batch, context, measured µs, predicted µs) for every graph layer row.
pub fn layer_rows() -> Vec<(String, String, f64, f64, f64, f64, f64)> {
    let mut out = Vec::new();
    for line in bench().lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let kind = f[0];
        if kind != "layer_decode_graph" && kind != "layer_prefill_graph" {
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().unwrap();
        let (m, batch, ctx, measured) = (num(3), num(4), num(5), num(6));
        let r = roofline(f[1]);
        let load = if kind == "layer_decode_graph" {
            LayerLoad {
                tokens: batch,
                prefill_pairs: 0.0,
                decode_context: batch * ctx,
                ..Default::default()
            }
        } else {
            LayerLoad {
                tokens: m,
                prefill_pairs: m * (m + 1.0) / 2.0,
                decode_context: 0.0,
                ..Default::default()
            }
        };
        let predicted = r.layer_us(false, &load, 1.0) - 2.0 * r.allreduce_us(load.tokens);
        out.push((
            f[1].to_string(),
            kind.to_string(),
            m,
            batch,
            ctx,
            measured,
            predicted,
        ));
    }
    out
}

#[test]
fn every_measured_layer_is_predicted_within_15_percent() {
    let rows = layer_rows();
    assert_eq!(rows.len(), 52, "40 decode + 12 prefill graph rows");
    let mut worst = (0.0f64, String::new());
    let mut bad = Vec::new();
    for (model, kind, m, batch, ctx, measured, predicted) in &rows {
        let err = (predicted - measured) / measured;
        let label = format!(
            "{model} {kind} m={m} batch={batch} ctx={ctx}: measured {measured} µs, predicted {predicted:.1} µs ({:+.1} %)",
            err * 100.0
        );
        eprintln!("{label}");
        if err.abs() > worst.0 {
            worst = (err.abs(), label.clone());
        }
        if err.abs() > 0.15 {
            bad.push(label);
        }
    }
    eprintln!("worst: {}", worst.1);
    assert!(
        bad.is_empty(),
        "{} rows off by more than 15 %:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// vLLM's own fused-MoE kernel times on an H100 (`benchmarks/kernels/benchmark_moe.py`,
/// "Kernel time" of `fused_experts` per batch size), as published in vLLM PR #24700
/// (2025-09): Mixtral-8x7B-Instruct bf16 at TP2 with its tuned config, and Qwen3-30B-A3B
/// fp8 (block-quantized) at TP1 with that PR's defaults. (batch, µs).
const MIXTRAL_TP2_BF16: [(f64, f64); 15] = [
    (1.0, 144.03),
    (2.0, 229.28),
    (4.0, 351.10),
    (8.0, 434.98),
    (16.0, 471.49),
    (24.0, 478.27),
    (32.0, 487.35),
    (48.0, 487.85),
    (64.0, 483.14),
    (96.0, 494.42),
    (128.0, 491.39),
    (256.0, 536.77),
    (512.0, 662.33),
    (1024.0, 833.72),
    (1536.0, 1122.93),
];
const QWEN3_30B_A3B_FP8: [(f64, f64); 13] = [
    (1.0, 40.44),
    (2.0, 56.15),
    (4.0, 78.10),
    (8.0, 118.64),
    (16.0, 164.64),
    (24.0, 193.48),
    (32.0, 210.07),
    (48.0, 230.59),
    (64.0, 237.26),
    (96.0, 244.33),
    (128.0, 247.67),
    (256.0, 262.38),
    (512.0, 286.24),
];

fn moe_errors(id: &str, tp: u32, weight_bytes: f64, measured: &[(f64, f64)]) -> Vec<f64> {
    let mut model = ModelConfig::bundled(id).unwrap();
    model.weight_bytes = weight_bytes;
    let r = Roofline {
        model,
        gpu: find_gpu("H100").unwrap(),
        tp,
        alpha: [0.0; 3],
        step_overhead_us: 0.0,
        request_overhead_us: 0.0,
        top_p_sort: false,
    };
    measured
        .iter()
        .map(|&(b, us)| r.moe_experts_us(b) / us - 1.0)
        .collect()
}

#[test]
fn the_fused_moe_experts_match_vllms_kernel_benchmark() {
    // Mixtral TP2 is what `moe_overlap_exponent` was fitted to: within 11 % at every batch
    // size from 1 to 1,536 tokens, 3 % on average.
    let e = moe_errors("mixtral-8x7b-v0.1", 2, 2.0, &MIXTRAL_TP2_BF16);
    let mean = e.iter().map(|x| x.abs()).sum::<f64>() / e.len() as f64;
    assert!(e.iter().all(|x| x.abs() < 0.11), "{e:?}");
    assert!(mean < 0.035, "mean |error| {mean}");
    // Held out: Qwen3-30B-A3B (128 small experts, fp8 with block scales) is priced 10–40 %
    // fast: per-expert tiles and the activations' fp8 quantization, which the roofline does
    // not see, weigh more with experts this small (docs/fidelity.md). The test pins that
    // range so a change of either kind is noticed.
    let q = moe_errors("qwen3-30b-a3b", 1, 1.0, &QWEN3_30B_A3B_FP8);
    assert!(q.iter().all(|x| (-0.42..-0.05).contains(x)), "{q:?}");
}

/// vLLM's paged decode attention on an H100, as profiled in vLLM issue #9471 (2024-10, vLLM
/// 0.6.4, `FLASH_ATTN` backend, torch profiler): FlashAttention-2's `flash_fwd_splitkv_kernel`
/// took 138.797 µs on average over 32,768 calls — 32 layers × 1,024 decode steps of one batch
/// of 64 Llama-3.1-8B requests with 1,024-token prompts and 1,024 output tokens, KV cache in
/// bf16 in vLLM's 16-token blocks, K and V read as separate tensors. The context read per call
/// runs from 1,025 to 2,048 tokens, 1,536 on average. That is 402.7 MB per call, 2.90 TB/s:
/// 87 % of the H100 SXM's 3.35 TB/s (a PCIe H100 could not reach it).
const VLLM_9471_SPLITKV_US: f64 = 138.797;

#[test]
fn paged_decode_attention_reads_kv_as_fast_as_vllms_measured_kernel() {
    let r = roofline("llama-3.1-8b");
    let decode = |context: f64| LayerLoad {
        tokens: 64.0,
        prefill_pairs: 0.0,
        decode_context: 64.0 * context,
        ..Default::default()
    };
    // The layer's KV-read term alone: the same layer with and without the context.
    let kv_read_us = r.layer_us(false, &decode(1536.0), 2.0) - r.layer_us(false, &decode(0.0), 2.0);
    let err = kv_read_us / VLLM_9471_SPLITKV_US - 1.0;
    eprintln!(
        "KV read: ours {kv_read_us:.1} µs, vLLM's kernel {VLLM_9471_SPLITKV_US} µs ({:+.1} %)",
        err * 100.0
    );
    // Ours reads at 90 % of peak, the kernel reached 87 %: 3.8 % fast. More than 10 % either
    // way would mean the bandwidth efficiency moved away from what paged decoding achieves.
    assert!((-0.10..0.0).contains(&err), "{err}");
}

/// vLLM's custom all-reduce on 4 H100s above 512 KiB runs its two-stage kernel
/// (`csrc/custom_all_reduce.cuh`), measured by `benchmark_device_communicators.py` in vLLM
/// PR #24111 and again in PR #24532 (`ca_2stage`, bf16 rows of 8,192), µs:
/// (MiB, #24111, #24532).
const VLLM_TP4_TWO_STAGE_US: [(f64, f64, f64); 6] = [
    (0.5, 17.0, 17.0),
    (1.0, 18.0, 18.0),
    (1.5, 27.0, 25.0),
    (2.0, 27.0, 26.0),
    (3.0, 35.0, 35.0),
    (4.0, 43.0, 42.0),
];

#[test]
fn decode_sized_all_reduces_on_four_gpus_match_vllms_measured_two_stage_kernel() {
    // A model with rows of 8,192 (Llama-2-70B) on 4 bundled H100s: 64 rows per 1 MiB.
    let r = roofline("llama-2-70b-tp4");
    // Each point within 12 % (the fit's worst is 1.5 MiB, −8.3 %, and 1 MiB, +11.6 %), 6 % on
    // average; the plain ring at 360 GB/s + 8 µs was 37–44 % fast from 1.5 MiB on.
    check_points(
        VLLM_TP4_TWO_STAGE_US.map(|(mib, a, b)| {
            (
                format!("{mib} MiB (µs)"),
                r.allreduce_us(mib * 64.0),
                (a + b) / 2.0,
            )
        }),
        0.12,
        0.06,
    );
}

/// `ours / measured − 1` for each `(label, ours, measured)`, printed: every one within `each`
/// and their mean size within `mean`.
fn check_points(points: impl IntoIterator<Item = (String, f64, f64)>, each: f64, mean: f64) {
    let errors: Vec<f64> = points
        .into_iter()
        .map(|(label, ours, measured)| {
            let err = ours / measured - 1.0;
            eprintln!(
                "{label}: ours {ours:.3}, measured {measured} ({:+.1} %)",
                err * 100.0
            );
            err
        })
        .collect();
    assert!(errors.iter().all(|e| e.abs() < each), "{errors:?}");
    let size = errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len() as f64;
    assert!(size < mean, "mean |error| {size}");
}

/// A scenario of one request to the cluster `groups` opens (`(group…)]`, then anything else
/// of the cluster), to validate.
fn one_request(groups: &str) -> String {
    format!(
        r#"(cluster: (groups: [{groups}),
            workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#
    )
}

#[test]
fn the_two_stage_band_is_shown_and_left_out_where_vllm_would_not_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let scenario = |latency: &str, topology: &str| {
        one_request(&format!(
            r#"(model: "llama-2-70b-hf", gpu: "H100", tp: 4{latency})]{topology}"#
        ))
    };
    let validate = |name: &str, text: String| {
        std::fs::write(dir.join(name), text).unwrap();
        let out = crate::common::servesim_ok(&["validate", name], dir);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let line = "all-reduce over 4 GPUs: vLLM's two-stage custom kernel from 512 KiB to 8 MiB (12.6 µs + bus 210 GB/s, measured)";
    // Default: the roofline with the H100's band; 128 rows of 8,192 = 2 MiB → 27.6 µs.
    let out = validate("plain.ron", scenario("", ""));
    assert!(
        out.contains(line) && out.contains("all-reduce takes 27.6 µs"),
        "{out}"
    );
    // A scenario that prices its own all-reduce replaces the band too.
    let out = validate(
        "own.ron",
        scenario(", latency: Roofline(allreduce_latency_us: 9.0)", ""),
    );
    assert!(!out.contains("two-stage"), "{out}");
    // A TP group over two nodes of 2 GPUs all-reduces with NCCL, not the custom kernel.
    let out = validate(
        "spans.ron",
        scenario("", ", topology: (gpus_per_node: 2, nic_gb_per_s: 50.0)"),
    );
    assert!(
        !out.contains("two-stage") && out.contains("spans 2 nodes"),
        "{out}"
    );
    // BLIS's models keep BLIS's reading: no band.
    let out = validate("blis.ron", scenario(", latency: BlisRoofline()", ""));
    assert!(!out.contains("two-stage"), "{out}");
    // A GPU file carries its own band; a band for two GPUs (which always run the one-stage
    // kernel) is refused with why.
    let gpu = |band: &str| {
        format!(
            r#"(id: "MyGPU", tflops_bf16: 989.5, tflops_fp8: 1979.0, bandwidth_tb_per_s: 3.35, mfu_prefill: 0.45, mfu_decode: 0.30, memory_gib: 80.0, calibration: Datasheet,
                physics: (two_stage_allreduce: Some(({band}, from_bytes: 524288.0, below_bytes: 8388608.0, latency_us: 20.0, gb_per_s: 100.0))))"#
        )
    };
    std::fs::write(dir.join("mine.ron"), gpu("tp: 4")).unwrap();
    let own_gpu = r#"(cluster: (groups: [(model: "llama-2-70b-hf", gpu: "mine.ron", tp: 4)]),
        workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))]))"#;
    let out = validate("own_gpu.ron", own_gpu.to_string());
    // 128 rows of 8,192: 20 + 1.5 · 2 MiB / 100 GB/s = 51.5 µs.
    assert!(
        out.contains("(20 µs + bus 100 GB/s, measured)") && out.contains("takes 51.5 µs"),
        "{out}"
    );
    std::fs::write(dir.join("mine.ron"), gpu("tp: 2")).unwrap();
    std::fs::write(dir.join("own_gpu.ron"), own_gpu).unwrap();
    let bad = crate::common::servesim(&["validate", "own_gpu.ron"], dir);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "{err}");
    assert!(
        err.contains("physics.two_stage_allreduce.tp must be at least 3"),
        "{err}"
    );
}

/// A decode step of 128 requests at 2,400 tokens of context each (the saturated regime of
/// issue 28's real runs), ms, on our roofline with its default overheads, reading the paged
/// KV cache at `kv_read` of peak bandwidth.
fn saturated_step_ms(id: &str, tp: u32, kv_read: f64) -> f64 {
    use servesim::latency::{
        BatchShape, DEFAULT_REQUEST_OVERHEAD_US, DEFAULT_STEP_OVERHEAD_US, LatencyModel, StepItem,
    };
    let mut gpu = find_gpu("H100").unwrap();
    gpu.physics.kv_read_efficiency = Some(kv_read);
    let model = ModelConfig::bundled(id).unwrap();
    let r = Roofline {
        // As a scenario gets it: sorting for a nucleus where the model's generation
        // config samples with one (Llama-2's top-p 0.9).
        top_p_sort: model.default_top_p.is_some_and(|p| p < 1.0),
        model,
        gpu,
        tp,
        alpha: [0.0; 3],
        step_overhead_us: DEFAULT_STEP_OVERHEAD_US,
        request_overhead_us: DEFAULT_REQUEST_OVERHEAD_US,
    };
    let items = vec![
        StepItem {
            new_tokens: 1,
            context_tokens: 2400,
            input_tokens: 934,
            prefill: false,
        };
        128
    ];
    let shape = BatchShape {
        items: &items,
        prefill_tokens: 0,
        decode_tokens: 128,
    };
    r.step_time(&shape).unwrap().as_us() as f64 / 1e3
}

#[test]
fn the_paged_kv_read_range_is_the_one_the_fidelity_chapter_gives() {
    // Paged decode attention's bandwidth on vLLM's Hopper kernel is measured only in part
    // (docs/fidelity.md): 90 % (ours), 87 % (FA2, vLLM issue #9471), 55 % (FA3 on 8-token
    // pages, flash-attention issue #1572). The chapter's table gives the saturated step at
    // each; every figure in it must be what the roofline prices.
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fidelity.md")).unwrap();
    let models = [
        ("CodeLlama-34B TP 2", "codellama-34b-instruct-hf", 2),
        ("Llama-2-70B TP 4", "llama-2-70b-hf", 4),
        ("Mixtral-8x7B TP 2", "mixtral-8x7b-v0.1", 2),
    ];
    let mut rows = Vec::new();
    for (name, id, tp) in models {
        let [base, fa2, fa3] = [0.90, 0.87, 0.55].map(|e| saturated_step_ms(id, tp, e));
        let pct = |x: f64| format!("{:+.0} %", (x / base - 1.0) * 100.0);
        let row = format!(
            "| {name} | {base:.1} ms | {fa2:.1} ms ({}) | {fa3:.1} ms ({}) |",
            pct(fa2),
            pct(fa3)
        );
        eprintln!("{row}");
        rows.push(row);
        // Reading KV slower can only lengthen the step, and by no more than its share.
        assert!(base < fa2 && fa2 < fa3, "{name}: {base} {fa2} {fa3}");
    }
    for row in &rows {
        assert!(
            doc.contains(row.as_str()),
            "docs/fidelity.md lacks the row\n{row}"
        );
    }
}

/// vLLM 0.15's top-p sampler (`apply_top_k_top_p`: PyTorch sorts every row) timed alone by
/// vLLM's sampler benchmarks, PyTorch column: (rows, vocabulary, ms, vLLM PR). The 64-row
/// point is `topp_partial` (half the rows with a nucleus; PyTorch sorts every row anyway).
const VLLM_TOP_P_SORT_MS: [(f64, f64, f64, u32); 7] = [
    (1.0, 32_768.0, 0.094, 42191),
    (64.0, 32_768.0, 0.370, 40376),
    (128.0, 32_768.0, 0.626, 40376),
    (512.0, 32_768.0, 1.694, 40376),
    (512.0, 32_768.0, 2.252, 33538),
    (1024.0, 32_768.0, 4.236, 33538),
    (128.0, 131_072.0, 2.318, 40376),
];

#[test]
fn the_top_p_sort_matches_vllms_sampler_benchmarks() {
    let mut r = roofline("llama-2-7b");
    r.top_p_sort = true;
    // Every point within 30 % (the worst: PR #40376's 512 rows, +26 %, where PR #33538 has
    // the same size 33 % slower); mean 7 %.
    check_points(
        VLLM_TOP_P_SORT_MS.map(|(rows, vocab, ms, pr)| {
            r.model.vocab = vocab as u32;
            (
                format!("{rows} × {vocab}, PR #{pr} (ms)"),
                r.top_p_sort_us(rows, rows) / 1e3,
                ms,
            )
        }),
        0.30,
        0.10,
    );
}

#[test]
fn the_nucleus_comes_from_the_models_generation_config_or_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let scenario = |model: &str, latency: &str| {
        one_request(&format!(r#"(model: "{model}", gpu: "H100"{latency})]"#))
    };
    let validate = |name: &str, text: String| {
        std::fs::write(dir.join(name), text).unwrap();
        let out = crate::common::servesim(&["validate", name], dir);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // `list models` shows which bundled models bring a nucleus.
    let out = crate::common::servesim_ok(&["list", "models"], dir);
    let list = String::from_utf8_lossy(&out.stdout);
    let top_p = |id: &str| {
        let line = list.lines().find(|l| l.starts_with(id)).unwrap();
        line.split_whitespace().last().unwrap().to_string()
    };
    assert_eq!(top_p("llama-2-7b-hf"), "0.9", "{list}");
    assert_eq!(top_p("llama-3.1-8b-instruct"), "0.9", "{list}");
    assert_eq!(top_p("mixtral-8x7b-v0.1"), "-", "{list}");
    // Llama-2-7B's generation config samples with top-p 0.9: 90 µs + 3.91 µs per request.
    let (_, out, _) = validate("llama.ron", scenario("llama-2-7b-hf", ""));
    assert!(
        out.contains("sampling: top-p 0.9 (the model's generation_config.json")
            && out.contains("90 µs + 3.91 µs per request"),
        "{out}"
    );
    // Greedy clients (top_p 1), a model without a nucleus and BLIS's models: no sort.
    for (name, text) in [
        (
            "greedy.ron",
            scenario("llama-2-7b-hf", ", latency: Roofline(top_p: 1.0)"),
        ),
        ("mixtral.ron", scenario("mixtral-8x7b-v0.1", ", tp: 2")),
        (
            "blis.ron",
            scenario("llama-2-7b-hf", ", latency: BlisRoofline()"),
        ),
    ] {
        let (code, out, err) = validate(name, text);
        assert_eq!(code, Some(0), "{name}: {err}");
        assert!(!out.contains("sampling:"), "{name}: {out}");
    }
    // The scenario's own nucleus, on a model without one.
    let (_, out, _) = validate(
        "own.ron",
        scenario("mistral-7b-v0.1", ", latency: Roofline(top_p: 0.95)"),
    );
    assert!(
        out.contains("sampling: top-p 0.95 (the scenario's latency.top_p)"),
        "{out}"
    );
    // A model directory's generation_config.json beside its config.json, as vLLM reads it.
    let model = dir.join("my-model");
    crate::common::model_dir(&model, "mistral-7b-v0.1");
    std::fs::write(model.join("generation_config.json"), r#"{"top_p": 0.8}"#).unwrap();
    let (_, out, _) = validate("dir.ron", scenario("my-model/config.json", ""));
    assert!(
        out.contains("sampling: top-p 0.8 (the model's generation_config.json"),
        "{out}"
    );
    // A broken one, and a nucleus out of range, are errors that say where.
    std::fs::write(model.join("generation_config.json"), r#"{"top_p": 2}"#).unwrap();
    let (code, _, err) = validate("dir.ron", scenario("my-model/config.json", ""));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("generation_config.json: `top_p` must be in (0, 1], got 2"),
        "{err}"
    );
    let (code, _, err) = validate(
        "zero.ron",
        scenario("llama-2-7b-hf", ", latency: Roofline(top_p: 0.0)"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("latency.top_p") && err.contains("must be in (0, 1] (1: no nucleus), got 0"),
        "{err}"
    );
}

#[test]
fn derived_kv_blocks_against_the_counts_vllm_reported() {
    // BLIS's real deployments (`trained_physics_iter29.json`, H100s, gpu_memory_utilization
    // 0.9, 16-token blocks, max_num_seqs 128) give the KV blocks vLLM itself sized for each: a
    // measurement of vLLM's memory profiling. Both our derivations against them: BLIS's rule
    // (the BLIS reading's) and vLLM's profile (the serving path's, one constant of which,
    // `VLLM_OTHER_GIB`, is fitted to these rows); the chapter's table must hold exactly these
    // rows.
    use servesim::model::{MemoryRule, Replica, kv_capacity_with};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/reference/data/trained_physics_iter29.json");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let h100 = find_gpu("H100").unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for e in data["experiments"].as_array().unwrap() {
        assert_eq!(e["hardware"], "H100");
        assert_eq!(e["max_num_seqs"], 128);
        let id = e["model_config_dir"].as_str().unwrap();
        let id = id.rsplit('/').next().unwrap().to_string();
        let tp = e["tp"].as_u64().unwrap() as u32;
        let budget = e["max_num_batched_tokens"].as_u64().unwrap() as u32;
        let vllm = e["total_kv_blocks"].as_u64().unwrap();
        // Repeated runs of one deployment report one count.
        assert_eq!(*seen.entry((id, tp, budget)).or_insert(vllm), vllm);
    }
    assert_eq!(seen.len(), 9, "{seen:?}");
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fidelity.md")).unwrap();
    let thousands = crate::common::thousands;
    let percent = |e: f64| format!("{:+.1}", e * 100.0).replace('-', "−");
    let (mut blis, mut profile, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for ((id, tp, budget), vllm) in &seen {
        let model = ModelConfig::bundled(id).unwrap();
        let replica = Replica {
            tp: *tp,
            pp: 1,
            dp: 1,
        };
        let derive = |rule| {
            let c = kv_capacity_with(&model, &h100, replica, 0.9, 16, (0.0, 0.0), rule);
            f64::from(c.unwrap().blocks)
        };
        let by_blis = derive(MemoryRule::Blis);
        let by_profile = derive(MemoryRule::Vllm {
            tokens: *budget,
            rows: 128,
        });
        let vllm = *vllm as f64;
        let (e_blis, e_profile) = (by_blis / vllm - 1.0, by_profile / vllm - 1.0);
        let row = format!(
            "| `{id}` | {tp} | {} | {} | {} | {} % | {} | {} % |",
            thousands(f64::from(*budget)),
            thousands(vllm),
            thousands(by_blis),
            percent(e_blis),
            thousands(by_profile),
            percent(e_profile),
        );
        if !doc.contains(row.as_str()) {
            missing.push(row);
        }
        if id.starts_with("llama-4-scout") {
            // A multimodal FP8 model: its bf16 attention and LM head are counted, its vision
            // tower and vLLM's profiling of it are not.
            assert!((0.15..0.30).contains(&e_blis), "{id}: {e_blis}");
            assert!((0.35..0.50).contains(&e_profile), "{id}: {e_profile}");
        } else {
            blis.push(e_blis);
            profile.push(e_profile);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/fidelity.md lacks the rows\n{}",
        missing.join("\n")
    );
    // On text models BLIS's rule never gives more blocks than vLLM by over 1 % and at most 10 %
    // fewer: a one-GPU deployment of a 7B model loses 7–8 % of its cache. vLLM's profile is
    // within 1 % either way (its one fitted constant's worst held-out model: −1.05 %).
    assert!(blis.iter().all(|e| (-0.10..0.01).contains(e)), "{blis:?}");
    assert!(profile.iter().all(|e| e.abs() < 0.01), "{profile:?}");
    assert!(profile.iter().any(|e| *e > 0.0) && profile.iter().any(|e| *e < 0.0));
}
