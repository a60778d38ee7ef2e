//! Turns an instance group's names and files into concrete models: the model config, the
//! GPU profile, the KV block count and the latency model. Used by validation (so every
//! problem is reported up front) and when the simulation is built.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::catalog::{Catalog, GroupFacts, PolicyArgs};
use crate::latency::{
    Blackbox, BlisRoofline, Coefficients, LatencyModel, MeasuredTable, PiecewiseLinear, Roofline,
    ServingPath, TrainedPhysics,
};
use crate::scenario::{
    BatchDefaults, InstanceGroup, LatencySpec, Memo, Problem, Scenario, TopologySpec,
};
use crate::setup::ResolvedGroup;

use super::features::{lora, nvme_tier, speculative};
use super::library::{load_gpu, load_model};

fn check_coefficients(
    p: &mut Vec<Problem>,
    at: &str,
    values: &[f64],
    lens: std::ops::RangeInclusive<usize>,
) {
    if !lens.contains(&values.len()) {
        let want = if lens.start() == lens.end() {
            lens.start().to_string()
        } else {
            format!("{} to {}", lens.start(), lens.end())
        };
        p.push(Problem::new(
            at,
            format!("must have {want} coefficients, got {}", values.len()),
        ));
    }
    for (k, v) in values.iter().enumerate() {
        if !v.is_finite() || *v < 0.0 {
            p.push(Problem::new(
                format!("{at}[{k}]"),
                format!("must be a finite number ≥ 0 (µs), got {v}"),
            ));
        } else if *v > 1e12 {
            p.push(Problem::new(
                format!("{at}[{k}]"),
                format!("{v:e} is more than 10¹² (µs: ~12 days per step or token)"),
            ));
        }
    }
}

fn three(v: &[f64]) -> [f64; 3] {
    [
        v.first().copied().unwrap_or(0.0),
        v.get(1).copied().unwrap_or(0.0),
        v.get(2).copied().unwrap_or(0.0),
    ]
}

/// A group resolved before: what it was resolved from (the group, the base directory and
/// the seed, the cluster's topology) and the result, kept in the scenario's [`Memo`] (one
/// slot per group index); a slot whose group was edited since resolves anew.
type Slot = (
    InstanceGroup,
    PathBuf,
    u64,
    Option<TopologySpec>,
    ResolvedGroup,
);

fn remembered(
    memo: &Memo,
    i: usize,
    g: &InstanceGroup,
    base: &Path,
    seed: u64,
    topology: Option<&TopologySpec>,
) -> Option<ResolvedGroup> {
    let slots = memo.0.lock().unwrap_or_else(|e| e.into_inner());
    let slot = slots.get(i)?.as_ref()?.downcast_ref::<Slot>()?;
    let (group, b, s, t, r) = slot;
    (group == g && b == base && *s == seed && t.as_ref() == topology).then(|| r.clone())
}

fn remember(memo: &Memo, i: usize, slot: Slot) {
    let mut slots = memo.0.lock().unwrap_or_else(|e| e.into_inner());
    if slots.len() <= i {
        slots.resize(i + 1, None);
    }
    slots[i] = Some(Arc::new(slot));
}

/// Group `i` of `s` resolved: from the scenario's [`Memo`] when validation (or an earlier
/// run) resolved this very group, otherwise read now (and remembered).
pub fn resolve_group(
    s: &Scenario,
    i: usize,
    catalog: &Catalog,
) -> Result<ResolvedGroup, Vec<Problem>> {
    let g = &s.cluster.groups[i];
    let topology = s.cluster.topology.as_ref();
    if let Some(r) = remembered(&s.memo, i, g, &s.base_dir, s.seed, topology) {
        return Ok(r);
    }
    let r = read_group(g, i, &s.base_dir, catalog, s.seed, topology)?;
    remember(
        &s.memo,
        i,
        (
            g.clone(),
            s.base_dir.clone(),
            s.seed,
            topology.cloned(),
            r.clone(),
        ),
    );
    Ok(r)
}

/// Where group `g`'s batch limits come from when it leaves them out, on `gpu`: vLLM's serving
/// path takes `vllm serve`'s defaults for the GPU, the BLIS reading BLIS's.
fn batch_defaults(g: &InstanceGroup, gpu: Option<&crate::model::GpuProfile>) -> BatchDefaults {
    let vllm_path = g.engine_preset() != crate::scenario::EnginePreset::Bare;
    match gpu {
        Some(gp) if vllm_path => BatchDefaults::vllm(gp.memory_gib, &gp.id),
        _ if vllm_path => BatchDefaults::Vllm { large: false },
        _ => BatchDefaults::Blis,
    }
}

/// Where group `g`'s omitted batch limits come from on the GPU named `gpu` (a plan's
/// candidate), and the longest sequence they are derived for (its `max_model_len` or its
/// model's context length): the arguments of [`batch_limits`](crate::scenario::batch_limits).
pub fn batch_defaults_on(
    g: &InstanceGroup,
    gpu: &str,
    base: &Path,
) -> (BatchDefaults, Option<u32>) {
    let profile = load_gpu(gpu, base).ok();
    let model = g.model.as_deref().and_then(|m| load_model(m, base).ok());
    (
        batch_defaults(g, profile.as_ref()),
        longest_sequence(g, model.as_ref()),
    )
}

/// vLLM's `max_model_len` as its batch defaults read it: the group's, or the model's context
/// length (not capped by the KV cache, which vLLM checks apart).
fn longest_sequence(g: &InstanceGroup, model: Option<&crate::model::ModelConfig>) -> Option<u32> {
    g.max_model_len.or_else(|| {
        let m = model?;
        (m.max_position_embeddings > 0)
            .then(|| m.max_position_embeddings.min(u32::MAX.into()) as u32)
    })
}

/// Resolves group `i`; problems carry paths under `cluster.groups[i]`. Reads the group's
/// files; [`resolve_group`] reads them once.
fn read_group(
    g: &InstanceGroup,
    i: usize,
    base: &Path,
    catalog: &Catalog,
    seed: u64,
    topology: Option<&TopologySpec>,
) -> Result<ResolvedGroup, Vec<Problem>> {
    let at = |f: &str| format!("cluster.groups[{i}].{f}");
    let mut p = Vec::new();
    let model = match &g.model {
        Some(name) => load_model(name, base)
            .map_err(|e| p.push(Problem::new(at("model"), e)))
            .ok(),
        None => None,
    };
    let model = model.map(|mut m| {
        m.kinds.full_cache = g.disable_hybrid_kv_cache_manager;
        m
    });
    // A checkpoint quantised in a way we cannot read has weights of unknown size: serving
    // them at the model's dtype (16 bits for a 4-bit mxfp4 checkpoint) would be silent.
    if let Some(m) = model.as_ref()
        && let Some(method) = &m.unread_quantization
        && g.weight_dtype.is_none()
    {
        p.push(
            Problem::new(
                at("model"),
                format!(
                    "{} is quantised with `{method}` (its quantization_config), which servesim does not read: the size of its weights is unknown",
                    m.id
                ),
            )
            .hint("give the group's weight_dtype: int4 for 4-bit weights, fp8 or int8 for 8-bit"),
        );
    }
    // The model as the group serves it (quantised weights, KV cache).
    let model =
        match (
            model,
            g.weight_dtype.is_some() || g.kv_cache_dtype.is_some(),
        ) {
            (Some(m), true) => crate::model::dtype::quantised(
                m,
                g.weight_dtype.as_deref(),
                g.kv_cache_dtype.as_deref(),
            )
            .map_err(|e| {
                for (field, msg) in e {
                    p.push(Problem::new(at(field), msg));
                }
            })
            .ok(),
            (m, _) => {
                if m.is_none() && g.model.is_none() {
                    for (field, set) in [
                        ("weight_dtype", g.weight_dtype.is_some()),
                        ("kv_cache_dtype", g.kv_cache_dtype.is_some()),
                    ] {
                        if set {
                            p.push(Problem::new(at(field), "has no model to apply to").hint(
                                "give the group a model (and gpu), or leave the data type out",
                            ));
                        }
                    }
                }
                m
            }
        };
    let gpu = match &g.gpu {
        Some(name) => load_gpu(name, base)
            .map_err(|e| p.push(Problem::new(at("gpu"), e)))
            .ok(),
        None => None,
    };
    if g.tp == 0 {
        p.push(Problem::new(at("tp"), "must be ≥ 1"));
    }
    if g.pp == 0 {
        p.push(Problem::new(at("pp"), "must be ≥ 1"));
    }
    if g.block_size == 0 {
        p.push(Problem::new(at("block_size"), "must be > 0").hint("vLLM's default is 16 tokens"));
    }
    crate::scenario::gb_per_s(&mut p, &at("pp_link_gb_per_s"), g.pp_link_gb_per_s);
    // Past 10⁹ µs every pipelined step would end beyond the clock's reach.
    if g.pp_link_latency_us > 1_000_000_000 {
        p.push(Problem::new(
            at("pp_link_latency_us"),
            format!(
                "must be a number within 0..=10⁹ µs, got {}",
                g.pp_link_latency_us
            ),
        ));
    }
    if !(g.gpu_memory_utilization > 0.0 && g.gpu_memory_utilization <= 1.0) {
        p.push(Problem::new(
            at("gpu_memory_utilization"),
            format!("must be in (0, 1], got {}", g.gpu_memory_utilization),
        ));
    }
    if let Some(m) = &model {
        // vLLM (`QKVParallelLinear`): query heads split over TP; KV heads split too, or,
        // with fewer KV heads than GPUs, each replicated on tp / kv_heads of them.
        let kv_split = if g.tp > m.kv_heads {
            g.tp.is_multiple_of(m.kv_heads.max(1))
        } else {
            g.tp > 0 && m.kv_heads.is_multiple_of(g.tp)
        };
        if g.tp > 0 && (m.heads % g.tp != 0 || !kv_split) {
            p.push(
                Problem::new(
                    at("tp"),
                    format!(
                        "{} has {} attention heads and {} KV heads; tp {} must divide the attention heads and divide, or be a multiple of, the KV heads",
                        m.id, m.heads, m.kv_heads, g.tp
                    ),
                )
                .hint("use a tp that divides the head counts"),
            );
        }
        if g.pp > m.layers {
            p.push(Problem::new(
                at("pp"),
                format!(
                    "{} has only {} layers; pp {} is too many",
                    m.id, m.layers, g.pp
                ),
            ));
        }
    }
    let omitted = if g.latency.is_none() {
        " (latency omitted: the default is Roofline())"
    } else {
        ""
    };
    let needs = |p: &mut Vec<Problem>, what: &str| {
        if model.is_none() && g.model.is_none() {
            p.push(
                Problem::new(at("model"), format!("{what} needs a model{omitted}"))
                    .hint("set model: \"llama-3.1-8b-instruct\" (or a path to a config.json)"),
            );
        }
        if gpu.is_none() && g.gpu.is_none() {
            p.push(
                Problem::new(at("gpu"), format!("{what} needs a GPU{omitted}"))
                    .hint("set gpu: \"H100\" (`servesim list hardware`)"),
            );
        }
    };
    let spec = g.latency();
    // The GPU as the roofline prices it (its physics overridden by the scenario's), for a
    // speculative drafter.
    let mut roofline_gpu = None;
    let mut wide_ep = None;
    let mut roofline_physics = None;
    let mut top_p_sort = None;
    if g.expert_parallel.is_some() && !matches!(&*spec, LatencySpec::Roofline { .. }) {
        p.push(
            Problem::new(
                at("expert_parallel"),
                "expert parallelism is priced by the roofline latency model only",
            )
            .hint("use latency: Roofline() (or omit latency)"),
        );
    }
    let latency: Option<Arc<dyn LatencyModel>> = match &*spec {
        LatencySpec::Blackbox { alpha, beta } => {
            check_coefficients(&mut p, &at("latency.alpha"), alpha, 3..=3);
            check_coefficients(&mut p, &at("latency.beta"), beta, 3..=3);
            Some(Arc::new(Blackbox {
                alpha: three(alpha),
                beta: three(beta),
            }))
        }
        LatencySpec::BlisRoofline { alpha } => {
            needs(&mut p, "the BLIS roofline latency model");
            if let Some(a) = alpha {
                check_coefficients(&mut p, &at("latency.alpha"), a, 3..=3);
            }
            match (&model, &gpu) {
                (Some(m), Some(gp)) => Some(Arc::new(BlisRoofline {
                    model: m.clone(),
                    gpu: gp.clone(),
                    tp: g.tp.max(1),
                    alpha: alpha.as_deref().map_or([0.0; 3], three),
                })),
                _ => None,
            }
        }
        LatencySpec::Roofline {
            alpha,
            step_overhead_us,
            request_overhead_us,
            gemm_efficiency,
            attention_efficiency,
            bandwidth_efficiency,
            kv_read_efficiency,
            kernel_overhead_us,
            attention_overhead_us,
            allreduce_gb_per_s,
            allreduce_latency_us,
            elementwise_hidden_passes,
            elementwise_ffn_passes,
            moe_overlap_exponent,
            top_p,
        } => {
            needs(&mut p, "the roofline latency model");
            if let Some(v) = top_p
                && !(*v > 0.0 && *v <= 1.0)
            {
                p.push(Problem::new(
                    at("latency.top_p"),
                    format!("must be in (0, 1] (1: no nucleus), got {v}"),
                ));
            }
            if let Some(a) = alpha {
                check_coefficients(&mut p, &at("latency.alpha"), a, 3..=3);
            }
            for (f, v) in [
                ("step_overhead_us", step_overhead_us),
                ("request_overhead_us", request_overhead_us),
            ] {
                if let Some(v) = v
                    && (!v.is_finite() || !(0.0..=1e7).contains(v))
                {
                    p.push(Problem::new(
                        at(&format!("latency.{f}")),
                        format!("must be in [0, 10⁷] µs, got {v}"),
                    ));
                }
            }
            match (&model, &gpu) {
                (Some(m), Some(gp)) => {
                    let ep = super::expert::expert_parallel(&mut p, &at, g, m, gp, topology);
                    let mut gp = gp.clone();
                    let ph = &mut gp.physics;
                    for (slot, v) in [
                        (&mut ph.gemm_efficiency, gemm_efficiency),
                        (&mut ph.attention_efficiency, attention_efficiency),
                        (&mut ph.bandwidth_efficiency, bandwidth_efficiency),
                        (&mut ph.kernel_overhead_us, kernel_overhead_us),
                        (&mut ph.attention_overhead_us, attention_overhead_us),
                        (&mut ph.allreduce_gb_per_s, allreduce_gb_per_s),
                        (&mut ph.allreduce_latency_us, allreduce_latency_us),
                        (&mut ph.elementwise_hidden_passes, elementwise_hidden_passes),
                        (&mut ph.elementwise_ffn_passes, elementwise_ffn_passes),
                        (&mut ph.moe_overlap_exponent, moe_overlap_exponent),
                    ] {
                        if let Some(v) = v {
                            *slot = *v;
                        }
                    }
                    if kv_read_efficiency.is_some() {
                        ph.kv_read_efficiency = *kv_read_efficiency;
                    }
                    // An all-reduce the scenario prices itself replaces the measured
                    // two-stage band too.
                    if allreduce_gb_per_s.is_some() || allreduce_latency_us.is_some() {
                        ph.two_stage_allreduce = None;
                    }
                    // A TP group wider than a node all-reduces across nodes too (nodes as
                    // the topology or else the GPU profile describes them), with NCCL: vLLM's
                    // custom kernels need one NVLink domain.
                    if allreduce_gb_per_s.is_none()
                        && let Some(bus) =
                            crate::network::spanning_allreduce(topology, gp.node.as_ref(), g.tp, ph)
                    {
                        ph.allreduce_gb_per_s = bus;
                        ph.allreduce_latency_us += topology.map_or(0.0, |t| t.nic_latency_us);
                        ph.two_stage_allreduce = None;
                    }
                    for e in ph.problems() {
                        let (field, msg) = e
                            .strip_prefix("physics.")
                            .and_then(|r| r.split_once(' '))
                            .unwrap_or(("", &e));
                        p.push(Problem::new(
                            at(&format!("latency.{field}")),
                            msg.to_string(),
                        ));
                    }
                    roofline_gpu = Some(gp.clone());
                    roofline_physics = Some(gp.physics);
                    let roofline = Roofline {
                        model: m.clone(),
                        gpu: gp,
                        tp: g.tp.max(1),
                        alpha: alpha.as_deref().map_or([0.0; 3], three),
                        step_overhead_us: step_overhead_us
                            .unwrap_or(crate::latency::DEFAULT_STEP_OVERHEAD_US),
                        request_overhead_us: request_overhead_us
                            .unwrap_or(crate::latency::DEFAULT_REQUEST_OVERHEAD_US),
                        top_p_sort: top_p.or(m.default_top_p).is_some_and(|p| p < 1.0),
                    };
                    if roofline.top_p_sort {
                        top_p_sort = top_p.or(m.default_top_p);
                    }
                    match ep {
                        Some(ep) => {
                            let w = Arc::new(crate::latency::WideEp { roofline, ep });
                            wide_ep = Some(w.clone());
                            Some(w)
                        }
                        None => Some(Arc::new(roofline)),
                    }
                }
                _ => None,
            }
        }
        LatencySpec::TrainedPhysics { alpha, beta } => {
            needs(&mut p, "the trained-physics latency model");
            let mut c = Coefficients::bundled();
            if let Some(a) = alpha {
                check_coefficients(&mut p, &at("latency.alpha"), a, 3..=3);
                c.alpha = a.clone();
            }
            if let Some(b) = beta {
                check_coefficients(&mut p, &at("latency.beta"), b, 7..=11);
                c.beta = b.clone();
            }
            match (&model, &gpu) {
                (Some(m), Some(gp)) => Some(Arc::new(TrainedPhysics::new(
                    m.clone(),
                    gp.clone(),
                    g.tp.max(1),
                    c,
                ))),
                _ => None,
            }
        }
        LatencySpec::PiecewiseLinear {
            prefill_tokens_per_s,
            decode_tokens_per_s_at_1,
            saturation_batch,
            saturation_tokens_per_s,
        } => {
            for (f, v) in [
                ("prefill_tokens_per_s", *prefill_tokens_per_s),
                ("decode_tokens_per_s_at_1", *decode_tokens_per_s_at_1),
                ("saturation_tokens_per_s", *saturation_tokens_per_s),
            ] {
                if !v.is_finite() || v <= 0.0 {
                    p.push(Problem::new(
                        at(&format!("latency.{f}")),
                        format!("must be a finite number > 0, got {v}"),
                    ));
                }
            }
            if *saturation_batch == 0 {
                p.push(Problem::new(at("latency.saturation_batch"), "must be ≥ 1"));
            }
            Some(Arc::new(PiecewiseLinear {
                prefill_tokens_per_s: *prefill_tokens_per_s,
                decode_tokens_per_s_at_1: *decode_tokens_per_s_at_1,
                saturation_batch: *saturation_batch,
                saturation_tokens_per_s: *saturation_tokens_per_s,
            }))
        }
        LatencySpec::MeasuredTable {
            file,
            extrapolation,
        } => match MeasuredTable::load(&base.join(file), *extrapolation) {
            Ok(t) => Some(Arc::new(t)),
            Err(e) => {
                p.push(
                    Problem::new(at("latency.file"), e)
                        .hint("docs/latency.md documents the CSV format"),
                );
                None
            }
        },
        LatencySpec::Named { name, params } => {
            let labels = crate::labels::Labels::default();
            let args = PolicyArgs::new(seed, params, &labels).in_group(GroupFacts {
                model: model.as_ref(),
                gpu: gpu.as_ref(),
                tp: g.tp,
                pp: g.pp,
            });
            let before = p.len();
            crate::catalog::check_member::<crate::latency::LatencyModels>(
                &mut p,
                catalog,
                "latency",
                &at("latency.name"),
                &at("latency.params"),
                name,
                &args,
            );
            if p.len() == before {
                catalog
                    .build::<crate::latency::LatencyModels>(name, &args)
                    .ok()
                    .map(Arc::from)
            } else {
                None
            }
        }
    };
    let serving = match &g.engine {
        Some(e) => ServingPath::of(e),
        None => ServingPath::of(&crate::scenario::EngineSpec {
            preset: Some(g.engine_preset()),
            ..Default::default()
        }),
    };
    for (f, msg) in serving.problems() {
        p.push(Problem::new(at(&format!("engine.{f}")), msg));
    }
    if let Some(e) = &g.engine {
        engine_release(&mut p, &at, e);
    }
    let speculative = g.speculative.as_ref().and_then(|sp| {
        speculative(
            &mut p,
            &at,
            sp,
            g,
            model.as_ref(),
            roofline_gpu.as_ref(),
            base,
            seed,
        )
    });
    let lora = g.lora.as_ref().and_then(|l| {
        lora(
            &mut p,
            &at,
            l,
            g,
            model.as_ref(),
            roofline_gpu.as_ref().or(gpu.as_ref()),
        )
    });
    let (draft_gib, draft_kv) = speculative.as_ref().map_or((0.0, 0.0), |c| {
        (c.draft_weights_gib, c.draft_kv_bytes_per_token)
    });
    // vLLM allocates the adapters' GPU slots beside the weights.
    let draft_gib = draft_gib + lora.as_ref().map_or(0.0, |c| c.slots_gib());
    let refused = model
        .as_ref()
        .is_some_and(|m| super::hybrid::refusals(&mut p, &at, g, m, draft_kv));
    let batch_defaults = batch_defaults(g, gpu.as_ref());
    let (max_num_seqs, max_num_batched_tokens) = crate::scenario::batch_limits(
        g.max_num_seqs,
        g.max_num_batched_tokens,
        batch_defaults,
        longest_sequence(g, model.as_ref()),
    );
    // vLLM's serving path sizes the cache as vLLM's start-up profile does; the BLIS reading
    // by BLIS's rule, as its conformance results were sized.
    let memory_rule = match batch_defaults {
        BatchDefaults::Blis => crate::model::MemoryRule::Blis,
        BatchDefaults::Vllm { .. } => crate::model::MemoryRule::Vllm {
            tokens: max_num_batched_tokens,
            rows: max_num_seqs.min(max_num_batched_tokens),
        },
    };
    let mut kv_sizing = None;
    let kv_blocks = match (g.kv_blocks, &model, &gpu) {
        _ if refused => None,
        (Some(0), _, _) => {
            p.push(Problem::new(at("kv_blocks"), "must be > 0").hint("KV cache size per instance in blocks, e.g. 8192; omit it to derive it from model and gpu"));
            None
        }
        (Some(b), _, _) => Some(b),
        (None, Some(m), Some(gp)) if g.block_size > 0 && g.tp > 0 && g.pp > 0 => {
            match crate::model::kv_capacity_with(
                m,
                gp,
                crate::model::Replica::of(g),
                g.gpu_memory_utilization,
                g.block_size,
                (draft_gib, draft_kv),
                memory_rule,
            ) {
                Ok(c) => {
                    let blocks = c.blocks;
                    kv_sizing = Some(c);
                    Some(blocks)
                }
                Err(e) => {
                    p.push(Problem::new(at("kv_blocks"), e));
                    None
                }
            }
        }
        // A block size, tp or pp of 0 leaves nothing to derive the cache from; each is
        // refused above with its own field.
        (None, Some(_), Some(_)) => None,
        (None, _, _) => {
            if g.model.is_none() || g.gpu.is_none() {
                p.push(
                    Problem::new(
                        at("kv_blocks"),
                        "missing: give kv_blocks, or model and gpu to derive it",
                    )
                    .hint(
                        "e.g. kv_blocks: 8192, or model: \"llama-3.1-8b-instruct\", gpu: \"H100\"",
                    ),
                );
            }
            None
        }
    };
    let kv_layout = model.as_ref().filter(|_| g.block_size > 0).and_then(|m| {
        crate::model::kv_layout(m, g.tp, g.block_size)
            .ok()
            .flatten()
    });
    // The most tokens one request can hold: it lives in one data-parallel rank's cache.
    let request_kv_tokens = kv_blocks.map(|blocks| match kv_layout {
        Some(l) => l.max_tokens(blocks, g.block_size),
        None => u64::from(blocks / g.dp()) * u64::from(g.block_size),
    });
    let max_model_len = g.max_model_len.or_else(|| {
        let m = model.as_ref()?;
        let cap = request_kv_tokens?;
        let len = if m.max_position_embeddings > 0 {
            m.max_position_embeddings.min(cap)
        } else {
            cap
        };
        Some(len.min(u64::from(u32::MAX)) as u32)
    });
    // The host link carries the CPU KV tier's blocks and LoRA adapters' copies to the GPU.
    if let Some(v) = g.host_link_gb_per_s {
        crate::scenario::gb_per_s(&mut p, &at("host_link_gb_per_s"), v);
    }
    if let Some(v) = g.host_link_latency_us {
        crate::scenario::latency_us(&mut p, &at("host_link_latency_us"), v);
    }
    let mut cpu_tier = None;
    if g.cpu_kv_blocks > 0 {
        if !g.cpu_kv_thrash_window_s.is_finite() || g.cpu_kv_thrash_window_s < 0.0 {
            p.push(Problem::new(
                at("cpu_kv_thrash_window_s"),
                format!(
                    "must be a finite number ≥ 0, got {}",
                    g.cpu_kv_thrash_window_s
                ),
            ));
        }
        match (&model, &gpu) {
            (Some(m), Some(gp)) => {
                let per_block =
                    crate::model::kv_bytes_per_token(m, g.tp, g.pp) * f64::from(g.block_size);
                let gbps = g
                    .host_link_gb_per_s
                    .unwrap_or(gp.physics.host_link_gb_per_s);
                let lat = g
                    .host_link_latency_us
                    .unwrap_or(gp.physics.host_link_latency_us);
                cpu_tier = Some((g.cpu_kv_blocks, per_block / (gbps * 1e3), lat));
            }
            _ => p.push(
                Problem::new(at("cpu_kv_blocks"), "a CPU KV tier needs `model` and `gpu`")
                    .hint("they size a block in bytes and give the host link bandwidth"),
            ),
        }
    }
    let nvme_tier = nvme_tier(g, i, model.as_ref(), cpu_tier.is_some(), &mut p);
    if !p.is_empty() {
        return Err(p);
    }
    Ok(ResolvedGroup {
        cpu_tier,
        nvme_tier,
        kv_bytes_per_token: model
            .as_ref()
            .map_or(0.0, |m| crate::model::kv_bytes_per_token(m, 1, 1)),
        layers: model.as_ref().map_or(1, |m| m.layers.max(1)),
        pp_bytes_per_token: model
            .as_ref()
            .map_or(0.0, |m| f64::from(m.hidden) * m.act_bytes),
        model,
        gpu,
        kv_blocks: kv_blocks.expect("no problems means blocks are known"),
        kv_sizing,
        max_model_len,
        request_kv_tokens: request_kv_tokens.expect("no problems means blocks are known"),
        max_num_seqs,
        max_num_batched_tokens,
        batch_defaults,
        latency: latency.expect("no problems means a latency model"),
        serving,
        roofline_physics,
        top_p_sort,
        speculative: speculative.map(Arc::new),
        lora: lora.map(Arc::new),
        expert_parallel: wide_ep,
        kv_layout,
    })
}

/// A group's `engine.vllm`: a release servesim models (0.11 onwards), and not beside a
/// `preset` (each names the numbers to start from).
fn engine_release(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    e: &crate::scenario::EngineSpec,
) {
    use crate::scenario::VllmRelease;
    let Some(text) = &e.vllm else {
        return;
    };
    match VllmRelease::parse(text) {
        Err(msg) => p.push(
            Problem::new(at("engine.vllm"), msg)
                .hint("the release `vllm --version` prints; or give a `preset` instead"),
        ),
        Ok(r) if r < VllmRelease::OLDEST => p.push(
            Problem::new(
                at("engine.vllm"),
                format!(
                    "vLLM {r} is older than the releases modelled: servesim's serving path is vLLM's v1 engine core, {} onwards (0.11 removed the v0 engine)",
                    VllmRelease::OLDEST
                ),
            )
            .hint("give `preset: VllmSync` to price it as vLLM 0.11–0.13 runs, knowing earlier releases differ"),
        ),
        Ok(_) if e.preset.is_some() => p.push(
            Problem::new(at("engine.vllm"), "is given beside `preset`: each names the numbers to start from")
                .hint("keep one: `vllm` picks the preset its release runs (VllmSync before 0.14.0, Vllm from it)"),
        ),
        Ok(_) => {}
    }
}
