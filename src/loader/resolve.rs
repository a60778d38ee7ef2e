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
use crate::model::{BUNDLED_MODELS, GpuProfile, ModelConfig, bundled_gpus, find_gpu};
use crate::scenario::{
    InstanceGroup, LatencySpec, Memo, Problem, Scenario, TopologySpec, did_you_mean,
};
use crate::setup::ResolvedGroup;

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.ends_with(".json") || s.ends_with(".ron")
}

fn load_model(name: &str, base: &Path) -> Result<ModelConfig, String> {
    if looks_like_path(name) {
        let mut path = base.join(name);
        if !path.exists() {
            // `meta-llama/Llama-2-7b-hf`, as vLLM's `--model` takes it: the bundled model of
            // that name (nothing is fetched from the Hub).
            if let Some(m) = crate::model::hub_repo_name(name).and_then(ModelConfig::bundled) {
                return Ok(m);
            }
            if let Some(repo) = crate::model::hub_repo_name(name) {
                return Err(match meant_model(repo) {
                    Some(m) => format!(
                        "no file {} and no bundled model \"{repo}\"; {m}",
                        path.display()
                    ),
                    None => format!(
                        "no file {} and no bundled model \"{repo}\"; servesim fetches nothing \
                         from the HuggingFace Hub: give the path of the model's config.json \
                         (with its generation_config.json beside it)",
                        path.display()
                    ),
                });
            }
        }
        // A model's directory, as vLLM loads one: its config.json.
        if path.is_dir() {
            let config = path.join("config.json");
            if !config.exists() {
                return Err(format!(
                    "{} is a directory without a config.json (a model's directory holds one)",
                    path.display()
                ));
            }
            path = config;
        }
        let text = crate::input::read_text(&path)?;
        // Named by its file, or by its directory when the file is a model directory's
        // config.json.
        let named = match path.file_stem() {
            Some(s) if s == "config" => path.parent().and_then(Path::file_name),
            stem => stem,
        };
        let id = named.map_or(name.to_string(), |s| s.to_string_lossy().into_owned());
        let m = ModelConfig::from_hf_json(&id, &text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        return match generation_config_beside(&path) {
            Some(g) => {
                let text = crate::input::read_text(&g)?;
                m.with_generation_config(&text)
                    .map_err(|e| format!("{}: {e}", g.display()))
            }
            None => Ok(m),
        };
    }
    ModelConfig::bundled(name).ok_or_else(|| match meant_model(name) {
        Some(m) => format!("unknown model \"{name}\"; {m} (`servesim list models`)"),
        None => format!(
            "unknown model \"{name}\" (`servesim list models` shows the bundled ones; or give \
             a path to a config.json)"
        ),
    })
}

/// What a model name that names no bundled model may have meant: a bundled id a few edits
/// away, or the bundled base of a fine-tune (`mixtral-8x7b-instruct-v0.1`, `llama-2-7b-chat-hf`:
/// the same architecture, not always the same sampling defaults).
fn meant_model(name: &str) -> Option<String> {
    let ids = || BUNDLED_MODELS.iter().map(|(k, _)| *k);
    if let Some(s) = did_you_mean(&name.to_ascii_lowercase(), ids()) {
        return Some(format!("did you mean \"{s}\"?"));
    }
    let base = |id: &str| -> String {
        id.to_ascii_lowercase()
            .split('-')
            .filter(|w| !matches!(*w, "instruct" | "chat" | "it"))
            .collect::<Vec<_>>()
            .join("-")
    };
    let wanted = base(name);
    let found = ids().find(|id| base(id) == wanted && !id.eq_ignore_ascii_case(name))?;
    Some(format!(
        "servesim bundles \"{found}\", the same model with or without instruction tuning, \
         which as a rule keeps its architecture (its steps, its KV cache): name it, or give the \
         model's own config.json (with generation_config.json, for its sampling defaults)"
    ))
}

/// The `generation_config.json` a model config file brings, as vLLM finds it in a model's
/// directory: `generation_config.json` beside a `config.json`, else `<name>.generation_config.json`
/// beside `<name>.json` (as the bundled models are kept).
fn generation_config_beside(config: &Path) -> Option<PathBuf> {
    let dir = config.parent()?;
    let stem = config.file_stem()?.to_string_lossy();
    let name = if stem == "config" {
        "generation_config.json".to_string()
    } else {
        format!("{stem}.generation_config.json")
    };
    Some(dir.join(name)).filter(|p| p.is_file())
}

fn load_gpu(name: &str, base: &Path) -> Result<GpuProfile, String> {
    if looks_like_path(name) {
        let path = base.join(name);
        let text = crate::input::read_text(&path)?;
        // As scenarios: an optional field takes its value bare or in `Some(…)`.
        let gpu: GpuProfile = ron::Options::default()
            .with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
            .from_str(&text)
            .map_err(|e| format!("{}:{}: {}", path.display(), e.span.start, e.code))?;
        let p = gpu.problems();
        return if p.is_empty() {
            Ok(gpu)
        } else {
            Err(format!("{}: {}", path.display(), p.join("; ")))
        };
    }
    find_gpu(name).ok_or_else(|| {
        let all = bundled_gpus();
        let names: Vec<&str> = all.iter().map(|g| g.id.as_str()).collect();
        let kin = crate::model::gpus_of_chip(name);
        if !kin.is_empty() {
            let ids: Vec<&str> = kin.iter().map(|g| g.id.as_str()).collect();
            return format!(
                "unknown GPU \"{name}\"; of that chip servesim bundles {}: name {} if it is your \
                 part (`servesim list hardware` shows peaks and other names); another part \
                 (a PCIe or NVL card, another memory size) has its own peaks: give them as a GPU \
                 profile file",
                ids.join(" and "),
                if ids.len() == 1 { "it" } else { "one" }
            );
        }
        // Compared as names match (`mi300` is one letter from `MI300X`), answered by id.
        let keys: Vec<String> = names.iter().map(|n| crate::model::gpu_key(n)).collect();
        let meant = did_you_mean(
            &crate::model::gpu_key(name),
            keys.iter().map(String::as_str),
        )
        .and_then(|k| keys.iter().position(|x| x == k))
        .map(|i| names[i]);
        match meant {
            Some(s) => {
                format!("unknown GPU \"{name}\"; did you mean \"{s}\"? (`servesim list hardware`)")
            }
            None => format!("unknown GPU \"{name}\"; bundled: {}", names.join(", ")),
        }
    })
}

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
    if !g.pp_link_gb_per_s.is_finite() || g.pp_link_gb_per_s <= 0.0 {
        p.push(Problem::new(
            at("pp_link_gb_per_s"),
            format!("must be a finite number > 0, got {}", g.pp_link_gb_per_s),
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
        None if matches!(&*spec, LatencySpec::Roofline { .. }) => ServingPath::VLLM,
        None => ServingPath::BARE,
    };
    for (f, msg) in serving.problems() {
        p.push(Problem::new(at(&format!("engine.{f}")), msg));
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
            ) {
                Ok(c) => Some(c.blocks),
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
    let max_model_len = g.max_model_len.or_else(|| {
        let m = model.as_ref()?;
        // A request lives in one data-parallel rank's cache.
        let cap = match kv_layout {
            Some(l) => l.max_tokens(kv_blocks?, g.block_size),
            None => u64::from(kv_blocks? / g.dp()) * u64::from(g.block_size),
        };
        let len = if m.max_position_embeddings > 0 {
            m.max_position_embeddings.min(cap)
        } else {
            cap
        };
        Some(len.min(u64::from(u32::MAX)) as u32)
    });
    let mut cpu_tier = None;
    if g.cpu_kv_blocks > 0 {
        for (f, v) in [
            ("host_link_gb_per_s", g.host_link_gb_per_s),
            ("host_link_latency_us", g.host_link_latency_us),
        ] {
            if let Some(v) = v
                && (!v.is_finite() || v < 0.0 || (f == "host_link_gb_per_s" && v == 0.0))
            {
                p.push(Problem::new(
                    at(f),
                    format!("must be a finite number > 0, got {v}"),
                ));
            }
        }
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
        max_model_len,
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

/// A group's multi-LoRA resolved from its model and GPU; problems go to `p` under
/// `cluster.groups[i].lora`.
fn lora(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    l: &crate::scenario::LoraSpec,
    g: &InstanceGroup,
    model: Option<&ModelConfig>,
    gpu: Option<&crate::model::GpuProfile>,
) -> Option<crate::latency::lora::LoraConfig> {
    let before = p.len();
    if l.max_loras == 0 {
        p.push(
            Problem::new(at("lora.max_loras"), "must be ≥ 1")
                .hint("adapters a step may use at once, e.g. 4"),
        );
    }
    if l.cpu_slots() < l.max_loras {
        p.push(
            Problem::new(
                at("lora.max_cpu_loras"),
                format!(
                    "{} is fewer than max_loras ({}); vLLM refuses it",
                    l.cpu_slots(),
                    l.max_loras
                ),
            )
            .hint("host memory holds at least the adapters the GPU slots do"),
        );
    }
    if l.max_lora_rank == 0 || l.max_lora_rank > 512 {
        p.push(Problem::new(
            at("lora.max_lora_rank"),
            format!("must be 1–512, got {}", l.max_lora_rank),
        ));
    }
    if !l.load_gb_per_s.is_finite() || l.load_gb_per_s <= 0.0 {
        p.push(Problem::new(
            at("lora.load_gb_per_s"),
            format!("must be a finite number > 0, got {}", l.load_gb_per_s),
        ));
    }
    if !l.load_latency_us.is_finite() || l.load_latency_us < 0.0 {
        p.push(Problem::new(
            at("lora.load_latency_us"),
            format!("must be a finite number ≥ 0, got {}", l.load_latency_us),
        ));
    }
    if g.scheduler != "vllm_v1" {
        p.push(
            Problem::new(
                at("lora"),
                format!(
                    "multi-LoRA runs on the vllm_v1 scheduler, not `{}`",
                    g.scheduler
                ),
            )
            .hint("remove `scheduler` or set it to \"vllm_v1\""),
        );
    }
    if g.pp > 1 {
        p.push(Problem::new(
            at("lora"),
            "multi-LoRA with pipeline parallelism (pp > 1) is not modelled",
        ));
    }
    if g.role != crate::scenario::Role::Mixed {
        p.push(Problem::new(
            at("lora"),
            "multi-LoRA on P/D instances (role Prefill or Decode) is not modelled",
        ));
    }
    let (Some(m), Some(gp)) = (model, gpu) else {
        p.push(
            Problem::new(at("lora"), "multi-LoRA needs `model` and `gpu`")
                .hint("they size an adapter in bytes and price its loads and kernels"),
        );
        return None;
    };
    if p.len() > before {
        return None;
    }
    let ph = &gp.physics;
    Some(crate::latency::lora::LoraConfig::new(
        m,
        gp,
        g.tp,
        l.max_loras,
        l.cpu_slots(),
        l.max_lora_rank,
        l.load_gb_per_s,
        l.load_latency_us,
        g.host_link_gb_per_s.unwrap_or(ph.host_link_gb_per_s),
        g.host_link_latency_us.unwrap_or(ph.host_link_latency_us),
    ))
}

/// A group's NVMe tier: (blocks, µs to read one block, fixed µs per step with reads). It sits
/// below the CPU tier (LMCache stages disk I/O through host memory); reads cross the host
/// link too, which the step prices with the CPU tier's reloads.
fn nvme_tier(
    g: &InstanceGroup,
    i: usize,
    model: Option<&ModelConfig>,
    has_cpu_tier: bool,
    p: &mut Vec<Problem>,
) -> Option<(u32, f64, f64)> {
    let at = |f: &str| format!("cluster.groups[{i}].{f}");
    if g.nvme_kv_blocks == 0 {
        for (f, set) in [
            ("nvme_read_gb_per_s", g.nvme_read_gb_per_s.is_some()),
            ("nvme_latency_us", g.nvme_latency_us.is_some()),
        ] {
            if set {
                p.push(
                    Problem::new(at(f), "is set but the group has no NVMe tier")
                        .hint("set nvme_kv_blocks, or leave the field out"),
                );
            }
        }
        return None;
    }
    let before = p.len();
    if !has_cpu_tier && g.cpu_kv_blocks == 0 {
        p.push(
            Problem::new(
                at("nvme_kv_blocks"),
                "an NVMe tier needs a CPU tier above it",
            )
            .hint("set cpu_kv_blocks too: blocks reach the disk through host memory"),
        );
    }
    let read = g.nvme_read_gb_per_s.unwrap_or(6.4);
    if !(read.is_finite() && read > 0.0) {
        p.push(Problem::new(
            at("nvme_read_gb_per_s"),
            format!("must be a finite number > 0, got {read}"),
        ));
    }
    let latency = match g.nvme_latency_us {
        Some(v) if v.is_finite() && (0.0..=1e9).contains(&v) => v,
        Some(v) => {
            p.push(Problem::new(
                at("nvme_latency_us"),
                format!("must be a number within 0..=10⁹ µs, got {v}"),
            ));
            0.0
        }
        None => {
            p.push(
                Problem::new(at("nvme_latency_us"), "is required with an NVMe tier").hint(
                    "measure your drive (fio, random reads of one KV block) and give it in µs",
                ),
            );
            0.0
        }
    };
    let Some(m) = model else {
        p.push(
            Problem::new(
                at("nvme_kv_blocks"),
                "an NVMe KV tier needs `model` and `gpu`",
            )
            .hint("they size a block in bytes"),
        );
        return None;
    };
    if p.len() > before {
        return None;
    }
    let per_block = crate::model::kv_bytes_per_token(m, g.tp, g.pp) * f64::from(g.block_size);
    Some((g.nvme_kv_blocks, per_block / (read * 1e3), latency))
}

/// A group's speculative decoding resolved: its acceptance rates (given, or the method's
/// published default) and, for every method but n-grams, its drafter priced by the
/// roofline on the drafter's own shape, with the memory the drafter takes from the KV
/// cache. Problems go to `p` under `cluster.groups[i].speculative`.
#[expect(
    clippy::too_many_arguments,
    reason = "the group, its resolved parts and the run's seed"
)]
fn speculative(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    sp: &crate::scenario::SpeculativeSpec,
    g: &InstanceGroup,
    model: Option<&crate::model::ModelConfig>,
    roofline_gpu: Option<&crate::model::GpuProfile>,
    base: &Path,
    seed: u64,
) -> Option<crate::latency::speculative::SpecConfig> {
    use crate::latency::speculative as spec;
    use crate::scenario::SpecMethod;
    let before = p.len();
    let k = sp.num_speculative_tokens;
    if !(1..=16).contains(&k) {
        p.push(
            Problem::new(
                at("speculative.num_speculative_tokens"),
                format!("must be within 1..=16, got {k}"),
            )
            .hint("vLLM's examples use 2–5 (each draft position is accepted less often)"),
        );
        return None;
    }
    let per_position = match &sp.acceptance {
        Some(a) => spec::per_position(a, k)
            .map_err(|e| p.push(Problem::new(at("speculative.acceptance"), e)))
            .ok(),
        None => {
            let d = spec::default_rates(&sp.method, k);
            if d.is_none() {
                p.push(
                    Problem::new(
                        at("speculative.acceptance"),
                        format!(
                            "missing: {} has no published acceptance to default to",
                            spec::method_name(&sp.method)
                        ),
                    )
                    .hint("give acceptance: Rate(0.6) or PerPosition([0.7, 0.5, 0.35]), as vLLM's spec_decode metrics report them for your drafter and data"),
                );
            }
            d
        }
    };
    let mut by_name = Vec::new();
    for (name, a) in &sp.acceptance_by_client {
        match spec::per_position(a, k) {
            Ok(r) => by_name.push((name.clone(), r)),
            Err(e) => p.push(Problem::new(
                at(&format!("speculative.acceptance_by_client.{name}")),
                e,
            )),
        }
    }
    if sp.draft_vocab.is_some() && !matches!(sp.method, SpecMethod::Eagle3) {
        p.push(
            Problem::new(
                at("speculative.draft_vocab"),
                "only an EAGLE-3 head has an LM head of its own",
            )
            .hint("leave it out, or use method: Eagle3"),
        );
    }
    if sp.draft_vocab == Some(0) {
        p.push(Problem::new(at("speculative.draft_vocab"), "must be ≥ 1"));
    }
    let mut draft_weights_gib = 0.0;
    let mut draft_kv_bytes_per_token = 0.0;
    let mut drafter: Option<Arc<dyn LatencyModel>> = None;
    if !matches!(sp.method, SpecMethod::Ngram) {
        let draft = match (&sp.method, model) {
            (SpecMethod::DraftModel(name), _) => match load_model(name, base) {
                Ok(d) => {
                    if g.tp > 0 && (d.heads % g.tp != 0 || d.kv_heads % g.tp != 0) {
                        p.push(Problem::new(
                            at("speculative.method"),
                            format!(
                                "the draft model {} has {} attention heads and {} KV heads; the group's tp {} must divide both (vLLM runs the drafter at the target's TP)",
                                d.id, d.heads, d.kv_heads, g.tp
                            ),
                        ));
                    }
                    let gib = crate::model::weight_memory_bytes(&d) / f64::from(1u32 << 30);
                    Some((d, gib))
                }
                Err(e) => {
                    p.push(Problem::new(at("speculative.method"), e));
                    None
                }
            },
            (_, Some(m)) => {
                let head = spec::head_config(
                    m,
                    &sp.method,
                    sp.draft_vocab.unwrap_or(spec::EAGLE3_DRAFT_VOCAB),
                );
                // The head shares the target's embedding.
                let shared = f64::from(head.vocab) * f64::from(head.hidden);
                let gib = (crate::model::weight_memory_bytes(&head) - shared * head.head_bytes)
                    / f64::from(1u32 << 30);
                Some((head, gib))
            }
            (_, None) => {
                if g.model.is_none() {
                    p.push(
                        Problem::new(
                            at("speculative.method"),
                            format!(
                                "a{} drafter is shaped after the group's model",
                                if matches!(sp.method, SpecMethod::Mtp) {
                                    "n MTP"
                                } else {
                                    "n EAGLE"
                                }
                            ),
                        )
                        .hint("give the group a model (and gpu), or use method: Ngram"),
                    );
                }
                None
            }
        };
        match (draft, roofline_gpu) {
            (Some((d, gib)), Some(gp)) => {
                draft_weights_gib = gib;
                draft_kv_bytes_per_token = crate::model::kv_bytes_per_token(&d, g.tp, 1);
                drafter = Some(Arc::new(Roofline {
                    model: d,
                    gpu: gp.clone(),
                    tp: g.tp.max(1),
                    alpha: [0.0; 3],
                    step_overhead_us: 0.0,
                    request_overhead_us: 0.0,
                    // vLLM's drafters propose greedily: no nucleus to sort.
                    top_p_sort: false,
                }));
            }
            (_, None) if !matches!(&*g.latency(), LatencySpec::Roofline { .. }) => {
                p.push(
                    Problem::new(
                        at("speculative.method"),
                        format!(
                            "pricing the {} drafter's passes needs the roofline latency model",
                            spec::method_name(&sp.method)
                        ),
                    )
                    .hint("use latency: Roofline() (or leave latency out), or method: Ngram, which drafts on the CPU"),
                );
            }
            _ => {} // a missing model or GPU is reported where it is resolved
        }
    }
    if p.len() > before {
        return None;
    }
    Some(spec::SpecConfig {
        method: spec::method_name(&sp.method),
        k,
        per_position: per_position?,
        by_client: Vec::new(),
        by_name,
        drafter,
        draft_weights_gib,
        draft_kv_bytes_per_token,
        seed: spec::draw_key(seed),
    })
}
