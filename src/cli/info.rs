//! `servesim validate`, `servesim list` and `servesim report`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::{
    ListArgs, ListWhat, ReportArgs, ValidateArgs, announce, finish_interrupted_commits, load,
    parse_overrides,
};
use crate::catalog::Catalog;
use crate::{ServesimApp, scenario};

/// How a derived KV cache's memory was found, per GPU: what the rule starts from and what it
/// sets aside.
fn kv_memory_line(r: &crate::setup::ResolvedGroup, g: &scenario::InstanceGroup) -> Option<String> {
    let (c, m, gpu) = (r.kv_sizing.as_ref()?, r.model.as_ref()?, r.gpu.as_ref()?);
    let gpus = f64::from(g.gpus().max(1));
    let per = |gib: f64| format!("{:.2}", gib / gpus);
    let spare = c.available_gib - c.weights_gib - c.activation_gib - c.non_torch_gib;
    let util = g.gpu_memory_utilization;
    let set_aside = if let crate::model::MemoryRule::Vllm { tokens, rows } = c.rule {
        let pass = if c.sampler_peak {
            format!(
                "its sampler over {} rows of {} logits",
                crate::scenario::grouped(rows.into()),
                crate::scenario::grouped(m.vocab.into())
            )
        } else {
            format!(
                "a forward pass of {} tokens",
                crate::scenario::grouped(tokens.into())
            )
        };
        format!(
            "{util} × {:.1} GiB (what CUDA reports) − {} weights − {} vLLM's profiling pass ({pass}) − {} other",
            gpu.memory_gib - crate::model::CUDA_WITHHELD_GIB,
            per(c.weights_gib),
            per(c.activation_gib),
            per(c.non_torch_gib)
        )
    } else {
        format!(
            "{util} × {} GiB − {} weights − {} activations and other (BLIS's rule)",
            gpu.memory_gib,
            per(c.weights_gib),
            per(c.activation_gib + c.non_torch_gib)
        )
    };
    Some(format!("{set_aside} = {} GiB for KV", per(spare)))
}

/// What `validate` prints of a scenario: per group its model, GPU, parallelism and KV cache
/// (with the GPU memory it takes when the model is known), and the expected work.
fn setup(sc: &scenario::Scenario, catalog: &Catalog) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for (i, g) in sc.cluster.groups.iter().enumerate() {
        let name = if g.name.is_empty() {
            format!("group{i}")
        } else {
            g.name.clone()
        };
        let Ok(r) = crate::loader::resolve_group(sc, i, catalog) else {
            continue; // validation already reported it
        };
        let model = r.model.as_ref().map_or("-".to_string(), |m| m.id.clone());
        let gpu = r.gpu.as_ref().map_or("-".to_string(), |x| x.id.clone());
        let memory = r.model.as_ref().map_or(String::new(), |m| {
            let block = r.kv_layout.map_or_else(
                || crate::model::kv_bytes_per_token(m, g.tp, g.pp) * f64::from(g.block_size),
                |l| l.page_bytes,
            );
            let bytes = block * f64::from(r.kv_blocks) / f64::from(g.dp());
            format!(" ({:.1} GiB per GPU)", bytes / f64::from(1u32 << 30))
        });
        let derived = match (g.kv_blocks, r.batch_defaults) {
            (Some(_), _) => "",
            (None, scenario::BatchDefaults::Blis) => ", derived by BLIS's rule",
            (None, _) => ", derived as vLLM's memory profile sizes them",
        };
        let _ = write!(
            s,
            "  {name}: {} × {model} on {} × {gpu} (tp {}, pp {}{}); {} KV blocks of {} tokens{derived}{memory}",
            g.count,
            g.gpus(),
            g.tp,
            g.pp,
            if g.dp() > 1 {
                format!(", dp {}", g.dp())
            } else {
                String::new()
            },
            r.kv_blocks,
            g.block_size
        );
        if g.cpu_kv_blocks > 0 {
            let _ = write!(s, " + {} CPU-tier blocks", g.cpu_kv_blocks);
        }
        if let Some(m) = r.model.as_ref().filter(|m| {
            g.weight_dtype.is_some() || g.kv_cache_dtype.is_some() || m.weight_bytes != m.act_bytes
        }) {
            // What vLLM leaves unquantised (the embedding and LM head; with some checkpoints
            // the attention projections) is said beside the bytes of the rest.
            let mut kept = Vec::new();
            if m.attn_weight_bytes != m.weight_bytes {
                kept.push(format!("attention at {} B", m.attn_weight_bytes));
            }
            if m.head_bytes != m.weight_bytes {
                kept.push(format!("embedding and LM head at {} B", m.head_bytes));
            }
            let kept = if kept.is_empty() {
                String::new()
            } else {
                format!("; {}", kept.join(", "))
            };
            let _ = write!(
                s,
                "; weights {} ({} B each{kept}: {:.1} GiB), KV cache {} ({} B per element)",
                g.weight_dtype.as_deref().unwrap_or("as the model"),
                m.weight_bytes,
                crate::model::weight_memory_bytes(m) / f64::from(1u32 << 30),
                g.kv_cache_dtype.as_deref().unwrap_or("auto"),
                m.kv_bytes
            );
        }
        if let Some(sc) = &g.scaling {
            let _ = write!(
                s,
                "; autoscaled {}..={} instances ({} at start)",
                sc.min, sc.max, g.count
            );
        }
        let _ = writeln!(s);
        if let Some(line) = kv_memory_line(&r, g) {
            let _ = writeln!(s, "    KV memory per GPU: {line}");
        }
        let release = g.engine.as_ref().and_then(|e| e.release());
        let _ = writeln!(
            s,
            "    serving path{}: {}",
            release.map_or(String::new(), |r| format!(" (vLLM {r})")),
            r.serving.describe(g.pp)
        );
        let _ = writeln!(s, "    steps: {}", step_examples(&r));
        if let Some(line) = step_overhead_line(g) {
            let _ = writeln!(s, "    step overhead: {line}");
        }
        if let Some(line) = two_stage_line(&r, g.tp) {
            let _ = writeln!(s, "    {line}");
        }
        if let Some(line) = sampling_line(&r, g) {
            let _ = writeln!(s, "    sampling: {line}");
        }
        if let Some(line) = batch_limits_line(&r, g) {
            let _ = writeln!(s, "    batch limits: {line}");
        }
        if let Some(line) = r.speculative.as_ref().map(|c| speculative_line(c, g, &r)) {
            let _ = writeln!(s, "    speculative: {line}");
        }
        if let Some(w) = &r.expert_parallel {
            let _ = writeln!(s, "    expert parallel: {}", expert_line(w));
        }
        if let Some(m) = r.model.as_ref().filter(|m| m.kinds.priced_by_kind()) {
            let _ = writeln!(
                s,
                "    attention: {}",
                hybrid_line(m, r.kv_layout, g.block_size)
            );
        }
        if sc.cluster.topology.is_none()
            && let Some(gpu) = &r.gpu
            && let Some(node) = &gpu.node
            && let Some(bus) =
                crate::network::spanning_allreduce(None, Some(node), g.tp, &gpu.physics)
        {
            let _ = writeln!(
                s,
                "    tp {} spans {} nodes of {} {} GPUs: the roofline's all-reduce runs at {bus:.1} GB/s (bus) over NVLink and the NICs",
                g.tp,
                g.tp.div_ceil(node.gpus.max(1)),
                node.gpus,
                gpu.id
            );
        }
        if let Some(c) = &r.lora {
            let r16 = c.max_rank;
            let _ = writeln!(
                s,
                "    LoRA: max_loras {} ({:.3} GiB of GPU slots, taken from the KV cache), max_cpu_loras {}, rank ≤ {r16}: a rank-{r16} adapter is {:.1} MB, read from storage in {:.1} ms, copied to a slot in {:.2} ms; LoRA kernels add {:.2} ms to a 32-token step with one adapter",
                c.max_loras,
                c.slots_gib(),
                c.max_cpu_loras,
                c.adapter_bytes(r16) / 1e6,
                c.disk_us(r16) / 1e3,
                c.host_us(r16) / 1e3,
                c.kernel_us(32, 1) / 1e3
            );
        }
        if let Some(gpu) = &r.gpu {
            let _ = writeln!(s, "    {}: {}", gpu.id, gpu.calibration.note());
        }
        if let Some((blocks, block_us, latency)) = r.nvme_tier {
            let _ = writeln!(
                s,
                "    NVMe KV tier: {blocks} blocks ({}), a block read in {block_us:.1} µs + {latency} µs a step",
                g.nvme_kv_eviction.name()
            );
        }
        if let Some(st) = &sc.cluster.kv_store
            && let Some(m) = &r.model
            && sc.cluster.topology.is_none()
        {
            let block_us = crate::instance::spawn::SharedKvStore::block_us(st.link(), g, &r);
            let bytes = crate::model::kv_bytes_per_token(m, 1, 1) * f64::from(g.block_size);
            let _ = writeln!(
                s,
                "    shared KV store: a block of {:.2} MiB moves in {:.1} µs over the instance's {} × {} GB/s links (+ {} µs)",
                bytes / f64::from(1u32 << 20),
                block_us,
                g.tp.max(1) * g.pp.max(1),
                st.link(),
                st.latency_us
            );
        }
        if sc.energy.is_some()
            && let Some(p) = crate::energy::power_of(g, &r)
        {
            let _ = writeln!(
                s,
                "    energy: per GPU {} W idle, {}–{} W in a step as its utilisation grows ({})",
                p.idle_w,
                p.floor_w,
                p.max_w,
                if g.power.is_some() {
                    "the group's power"
                } else {
                    "the GPU profile's power, assets/gpus.ron"
                }
            );
        }
    }
    if let Some(st) = &sc.cluster.kv_store {
        let _ = writeln!(
            s,
            "  shared KV store: {} blocks, {}, {} eviction; every instance reads and writes it",
            st.blocks,
            match st.write {
                crate::scenario::StoreWriteSpec::WriteBack => "write-back",
                crate::scenario::StoreWriteSpec::WriteThrough => "write-through",
            },
            st.eviction.name()
        );
    }
    if sc
        .cluster
        .groups
        .iter()
        .any(|g| g.role == crate::scenario::Role::Decode)
    {
        let _ = writeln!(
            s,
            "  P/D: {}",
            match sc.cluster.pd_first_token {
                crate::scenario::PdFirstToken::Decode => {
                    "the decode instances send every token, the first after the hand-off, the KV transfer and a decode step (vLLM's P/D proxy: the prefill instance's one token answers the proxy; cluster.pd_first_token: Prefill sends it from the prefill instance)"
                }
                crate::scenario::PdFirstToken::Prefill => {
                    "the prefill instances send the first token, the decode instances the rest (cluster.pd_first_token: Prefill, as DistServe; behind vLLM's P/D proxy the decode instance sends it)"
                }
            }
        );
    }
    if let Some(t) = &sc.cluster.topology {
        topology_lines(&mut s, sc, t, catalog);
    }
    if let Some(f) = &sc.faults {
        for st in &f.stragglers {
            let _ = writeln!(
                s,
                "  fault: instance {} runs its steps ×{} from {} s to {} s (straggler)",
                st.instance, st.slowdown, st.from_s, st.until_s
            );
        }
        for (what, links) in [
            ("KV link", &f.kv_links),
            ("host link", &f.host_links),
            ("pipeline link", &f.pp_links),
        ] {
            for l in links {
                let _ = writeln!(
                    s,
                    "  fault: instance {}'s {what} keeps {} of its bandwidth from {} s to {} s{}",
                    l.instance,
                    l.bandwidth,
                    l.from_s,
                    l.until_s,
                    if l.bandwidth == 0.0 { " (severed)" } else { "" }
                );
            }
        }
        if f.crashes_on() {
            let reloads: Vec<String> = sc
                .cluster
                .groups
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let name = if g.name.is_empty() {
                        format!("group{i}")
                    } else {
                        g.name.clone()
                    };
                    if g.scaling.is_some() {
                        return format!("{name}: off, its autoscaling decides");
                    }
                    let derived = crate::loader::resolve_group(sc, i, catalog)
                        .ok()
                        .and_then(|r| r.model)
                        .map_or(0.0, |m| {
                            crate::model::load_s(&m, crate::model::Replica::of(g), 2.0)
                        });
                    match f.reload_s {
                        Some(r) => format!("{name}: {r} s"),
                        None => format!(
                            "{name}: {derived:.1} s (its GPU's share of the weights at 2 GB/s)"
                        ),
                    }
                })
                .collect();
            for line in crate::faults::describe_crashes(f, &reloads) {
                let _ = writeln!(s, "  fault: {line}");
            }
        }
    }
    if let Some(fc) = &sc.flow_control {
        let _ = writeln!(s, "  {}", crate::gateway::describe(fc));
    }
    let w = crate::loader::estimate::estimate(sc);
    if w.requests > 0.0 {
        let _ = writeln!(
            s,
            "  workload: about {:.0} requests and {:.0} output tokens (~{:.1} s of wall time in a release build){}",
            w.requests,
            w.output_tokens,
            w.wall_s,
            if sc.workload.traces.is_empty() {
                ""
            } else {
                ", plus the traces"
            }
        );
    }
    s
}

/// The network (`cluster.topology`), for `validate`: each group's nodes and links, where its
/// instances sit, a TP all-reduce that crosses nodes, the racks' uplinks and the store's path.
fn topology_lines(
    s: &mut String,
    sc: &scenario::Scenario,
    t: &scenario::TopologySpec,
    catalog: &Catalog,
) {
    use std::fmt::Write as _;
    let resolved: Vec<_> = (0..sc.cluster.groups.len())
        .map(|i| crate::loader::resolve_group(sc, i, catalog).ok())
        .collect();
    let shapes: Vec<_> = sc
        .cluster
        .groups
        .iter()
        .zip(&resolved)
        .map(|(g, r)| crate::network::GroupShape::of(g, r.as_ref().and_then(|r| r.gpu.as_ref())))
        .collect();
    let topo = crate::network::Topology::build(t, &shapes, sc.cluster.kv_store.is_some());
    let _ = writeln!(
        s,
        "  topology: {} on {} in {} (placement: {})",
        crate::scenario::counted(topo.places.len() as u64, "instance"),
        crate::scenario::counted(u64::from(topo.nodes), "node"),
        crate::scenario::counted(u64::from(topo.racks_used()), "rack"),
        t.placement.name()
    );
    let mut first = 0usize;
    for (i, (g, shape)) in sc.cluster.groups.iter().zip(&shapes).enumerate() {
        let (gpn, nvlink, nic) = topo.figures[i];
        let places = &topo.places[first..first + shape.instances as usize];
        first += shape.instances as usize;
        let nodes: Vec<String> = places
            .iter()
            .map(|p| {
                if p.nodes > 1 {
                    format!("{}–{}", p.node, p.node + p.nodes - 1)
                } else {
                    p.node.to_string()
                }
            })
            .collect();
        let name = if g.name.is_empty() {
            format!("group{i}")
        } else {
            g.name.clone()
        };
        let _ = writeln!(
            s,
            "    {name}: nodes of {gpn} GPUs, NVLink {nvlink} GB/s and NIC {nic} GB/s per GPU per direction{}; instances on nodes [{}]",
            if t.gpus_per_node.is_none() || t.nic_gb_per_s.is_none() {
                " (GPU defaults from assets/gpus.ron where not given)"
            } else {
                ""
            },
            nodes.join(", ")
        );
        if let Some(gpu) = resolved[i].as_ref().and_then(|r| r.gpu.as_ref())
            && let Some(bus) =
                crate::network::spanning_allreduce(Some(t), gpu.node.as_ref(), g.tp, &gpu.physics)
        {
            let _ = writeln!(
                s,
                "    {name}: tp {} spans {} nodes: the roofline's all-reduce runs in each node over NVLink ({} GB/s bus) and between nodes over the NICs ({:.1} GB/s bus): {:.1} GB/s in all (+ {} µs)",
                g.tp,
                g.tp.div_ceil(gpn),
                gpu.physics.allreduce_gb_per_s,
                crate::network::NIC_BUS_SHARE * nic,
                bus,
                t.nic_latency_us
            );
        }
    }
    for (k, &(up, _)) in topo.racks.iter().enumerate() {
        let link = &topo.fabric.links[up as usize];
        let _ = writeln!(
            s,
            "    rack {k}: uplink {} GB/s per direction{}",
            link.bytes_per_us / 1e3,
            if t.rack_uplink_gb_per_s.is_some() {
                ""
            } else {
                " (non-blocking: its nodes' NICs)"
            }
        );
    }
    if sc.cluster.kv_store.is_some() {
        let _ = writeln!(
            s,
            "    shared KV store: at the spine, over each instance's NICs{}; {}",
            if topo.racks.is_empty() {
                ""
            } else {
                " and its rack's uplink"
            },
            match t.store_gb_per_s {
                Some(gb) => format!("the store itself moves {gb} GB/s each way"),
                None => "no limit of the store's own".into(),
            }
        );
    }
}

/// A group's speculative decoding, for `validate`: its acceptance and where it came from,
/// the drafter's memory, and what a verifying step of 32 requests costs.
fn speculative_line(
    c: &crate::latency::speculative::SpecConfig,
    g: &scenario::InstanceGroup,
    r: &crate::setup::ResolvedGroup,
) -> String {
    use crate::latency::{BatchShape, StepItem};
    let sp = g.speculative.as_ref().expect("resolved from it");
    let rates: Vec<String> = c.per_position.iter().map(|p| format!("{p:.3}")).collect();
    let source = match (&sp.acceptance, c.method) {
        (Some(_), _) => "as given",
        (None, "eagle3") => "vLLM's measured EAGLE-3 baseline",
        (None, _) => "DeepSeek-V3's reported MTP acceptance",
    };
    let mut line = format!(
        "{} k={}; accepted per position {} ({source}): {:.2} tokens per verification",
        c.method,
        c.k,
        rates.join(", "),
        c.expected_tokens_per_step()
    );
    if !c.by_name.is_empty() {
        let names: Vec<&str> = c.by_name.iter().map(|(n, _)| n.as_str()).collect();
        line += &format!(" (own rates for {})", names.join(", "));
    }
    if c.drafter.is_none() {
        return line + "; drafted on the CPU (no GPU time, no memory)";
    }
    line += &format!(
        "; drafter {:.2} GiB of weights, {:.0} B of KV per token per GPU",
        c.draft_weights_gib, c.draft_kv_bytes_per_token
    );
    let item = |n| StepItem {
        new_tokens: n,
        context_tokens: 1024,
        input_tokens: 512,
        prefill: false,
    };
    let verify = vec![item(1 + c.k); 32];
    let plain = vec![item(1); 32];
    let price = |m: &dyn crate::latency::LatencyModel, items: &[StepItem]| {
        m.step_time(&BatchShape {
            items,
            prefill_tokens: 0,
            decode_tokens: items.iter().map(|i| i.new_tokens).sum(),
        })
        .map(|t| t.as_us() as f64 / 1e3)
    };
    let mut spec = crate::instance::speculative::Speculation::new(std::sync::Arc::new(c.clone()));
    if let (Ok(t), Ok(d), Ok(p)) = (
        price(r.latency.as_ref(), &verify),
        spec.draft_time(&verify).map(|d| d.as_us() as f64 / 1e3),
        price(r.latency.as_ref(), &plain),
    ) {
        line += &format!(
            "; 32 requests at 1,024 tokens of context: {t:.2} ms to verify + {d:.2} ms to draft (a plain decode step: {p:.2} ms)",
        );
    }
    line
}

/// How a group's experts are spread and what one MoE layer of a decode step costs, for
/// `validate`.
fn expert_line(w: &crate::latency::WideEp) -> String {
    let ep = &w.ep;
    let e = w.ep_size();
    let m = &w.roofline.model;
    let nodes = e.div_ceil(ep.gpus_per_node.max(1));
    let per_rank = 16.0;
    let busiest = crate::latency::LayerLoad {
        tokens: per_rank,
        decode_context: per_rank * 1025.0,
        logit_rows: per_rank,
        ..Default::default()
    };
    let c = w.moe_layer(&busiest, per_rank * f64::from(ep.dp));
    let between = if nodes > 1 {
        format!(
            ", {} GB/s per GPU between its {nodes} nodes",
            ep.rdma_gb_per_s
        )
    } else {
        String::from(" (one node)")
    };
    format!(
        "{} experts over EP {e} (dp {} × tp {}), {:.1} per GPU; all-to-all {:?} at {} GB/s per GPU in a node{between}, {} µs each way; imbalance {}. One MoE layer of a decode step of {} requests (16 per rank, 1,024 tokens of context): rank {:.0} µs, experts {:.0} µs, dispatch {:.0} µs, combine {:.0} µs",
        m.experts,
        ep.dp,
        w.roofline.tp,
        f64::from(m.experts) / f64::from(e),
        ep.all2all,
        ep.nvlink_gb_per_s,
        ep.latency_us,
        ep.imbalance,
        16 * ep.dp,
        c.rank_us,
        c.experts_us,
        c.dispatch_us,
        c.combine_us,
    )
}

/// `validate`'s line when vLLM's measured two-stage all-reduce prices part of a roofline
/// group's all-reduces: its band, its numbers and a 128-decode step's all-reduce.
fn two_stage_line(r: &crate::setup::ResolvedGroup, tp: u32) -> Option<String> {
    let ph = r.roofline_physics.as_ref()?;
    let b = ph.two_stage_allreduce.filter(|b| b.tp == tp)?;
    let m = r.model.as_ref()?;
    let size = |x: f64| {
        if x >= f64::from(1u32 << 20) {
            format!("{} MiB", x / f64::from(1u32 << 20))
        } else {
            format!("{} KiB", x / 1024.0)
        }
    };
    let example = b
        .time_us(tp, 128.0 * f64::from(m.hidden) * m.act_bytes)
        .map(|us| format!("; 128 decodes' all-reduce takes {us:.1} µs"))
        .unwrap_or_default();
    Some(format!(
        "all-reduce over {tp} GPUs: vLLM's two-stage custom kernel from {} to {} ({} µs + bus {} GB/s, measured), a ring at {} GB/s + {} µs otherwise{example}",
        size(b.from_bytes),
        size(b.below_bytes),
        b.latency_us,
        b.gb_per_s,
        ph.allreduce_gb_per_s,
        ph.allreduce_latency_us,
    ))
}

/// `validate`'s line when a group leaves a batch limit out: what it runs and whose default
/// that is.
fn batch_limits_line(
    r: &crate::setup::ResolvedGroup,
    g: &crate::scenario::InstanceGroup,
) -> Option<String> {
    use crate::scenario::{BatchDefaults, grouped};
    if g.max_num_seqs.is_some() && g.max_num_batched_tokens.is_some() {
        return None;
    }
    let gpu = r.gpu.as_ref().map_or("the GPU", |gp| gp.id.as_str());
    let whose = match r.batch_defaults {
        BatchDefaults::Blis => {
            "BLIS's defaults (the BLIS reading; `vllm serve` takes 1,024 and 8,192 on GPUs of \
             ≥ 70 GiB but A100s)"
                .to_string()
        }
        BatchDefaults::Vllm { .. } => format!(
            "`vllm serve`'s defaults on the {gpu} (vLLM's `EngineArgs.get_batch_defaults`: \
             1,024 and 8,192 on GPUs of ≥ 70 GiB but A100s, else 256 and 2,048)"
        ),
    };
    let given = match (g.max_num_seqs, g.max_num_batched_tokens) {
        (Some(_), None) => "max_num_seqs as given, the budget from ",
        (None, Some(_)) => "max_num_batched_tokens as given, max_num_seqs from ",
        _ => "",
    };
    Some(format!(
        "{} requests and {} tokens a step: {given}{whose}",
        grouped(r.max_num_seqs.into()),
        grouped(r.max_num_batched_tokens.into()),
    ))
}

/// `validate`'s line when a roofline group's requests sample with a nucleus: where its
/// top-p comes from and what sorting the logits adds to a step.
fn sampling_line(
    r: &crate::setup::ResolvedGroup,
    g: &crate::scenario::InstanceGroup,
) -> Option<String> {
    let p = r.top_p_sort?;
    let m = r.model.as_ref()?;
    let given = matches!(
        &*g.latency(),
        crate::scenario::LatencySpec::Roofline { top_p: Some(_), .. }
    );
    let from = if given {
        "the scenario's latency.top_p"
    } else {
        "the model's generation_config.json, which vLLM applies to requests that set none"
    };
    let per_row = crate::latency::TOP_P_SORT_US_PER_ROW * f64::from(m.vocab)
        / crate::latency::TOP_P_SORT_VOCAB;
    Some(format!(
        "top-p {p} ({from}): each step sorts its logits rows, {} µs + {per_row:.2} µs per request (vLLM 0.15's sampler, measured); Roofline(top_p: 1.0) for greedy clients",
        crate::latency::TOP_P_SORT_FIXED_US
    ))
}

/// The roofline's time in every step besides its kernels and the top-p sort, for `validate`:
/// the scenario's, or the defaults, which are assumed (docs/fidelity.md, "What is still
/// assumed"). Other latency models carry their own overheads in their coefficients.
fn step_overhead_line(g: &crate::scenario::InstanceGroup) -> Option<String> {
    let crate::scenario::LatencySpec::Roofline {
        step_overhead_us,
        request_overhead_us,
        ..
    } = &*g.latency()
    else {
        return None;
    };
    let whence = match (step_overhead_us, request_overhead_us) {
        (Some(_), Some(_)) => "as the scenario gives them",
        (Some(_), None) => "step_overhead_us as the scenario gives it, the other assumed",
        (None, Some(_)) => "request_overhead_us as the scenario gives it, the other assumed",
        (None, None) => {
            "plain sampling, logits, input copies, graph launches: assumed, not measured; \
             Roofline(step_overhead_us: …, request_overhead_us: …) or `servesim calibrate \
             --model roofline` replaces them"
        }
    };
    Some(format!(
        "{} µs + {} µs per request in each step besides its kernels ({whence})",
        step_overhead_us.unwrap_or(crate::latency::DEFAULT_STEP_OVERHEAD_US),
        request_overhead_us.unwrap_or(crate::latency::DEFAULT_REQUEST_OVERHEAD_US),
    ))
}

/// What a group's steps cost, for `validate`: the latency model's price of a decode step of
/// 1, 32 and 128 requests at 1,024 tokens of context each, with the scheduler's work as the
/// serving path places it.
fn step_examples(r: &crate::setup::ResolvedGroup) -> String {
    use crate::latency::{BatchShape, StepItem};
    let mut parts = Vec::new();
    let mut api = String::new();
    for n in [1u32, 32, 128] {
        let items = vec![
            StepItem {
                new_tokens: 1,
                context_tokens: 1024,
                input_tokens: 512,
                prefill: false,
            };
            n as usize
        ];
        let shape = BatchShape {
            items: &items,
            prefill_tokens: 0,
            decode_tokens: n,
        };
        let step = match r.latency.step_time(&shape) {
            Ok(t) => r.serving.step(t, n),
            Err(e) => return format!("cannot price a decode step: {e}"),
        };
        parts.push(format!("{:.2} ms for {n}", step.as_us() as f64 / 1e3));
        if n == 128 && r.serving.streams_out() {
            // The API server's output work for the step's 128 chunks, against the step: the
            // run warns when steps outlast it (`warn_busy_api_servers`).
            let out = r.serving.token_out(n - 1);
            api = format!(
                "; its API server streams those 128 chunks in {:.2} ms ({})",
                out.as_us() as f64 / 1e3,
                if out <= step {
                    "it keeps up"
                } else {
                    "longer than the step: at that batch it falls behind, and a run that gets there warns"
                }
            );
        }
    }
    format!(
        "a decode step at 1,024 tokens of context each takes {} requests{api}",
        parts.join(", ")
    )
}

/// Checks a scenario and prints what it resolves to.
pub(crate) fn validate(app: &ServesimApp, a: ValidateArgs) -> ExitCode {
    let ValidateArgs { scenario, set } = a;
    let built = app.build();
    let catalog = built.world().resource::<Catalog>();
    let overrides = match parse_overrides(&set, None) {
        Ok(o) => o,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match load(&scenario, &overrides, catalog) {
        Ok(sc) => {
            outln!("{}: ok", scenario.display());
            out!("{}", setup(&sc, catalog));
            announce(&sc, catalog);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Writes a report page of earlier runs.
pub(crate) fn report(a: ReportArgs) -> ExitCode {
    let ReportArgs { dirs, out } = a;
    let out = out.unwrap_or_else(|| match dirs.as_slice() {
        [one] => one.join("report.html"),
        _ => PathBuf::from("report.html"),
    });
    // What cannot be read is bad input (exit 2); a page that cannot be written, a failure (1).
    let out = match super::run::page_target(&out) {
        Ok(out) => out,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if out.is_dir() {
        noteln!(
            "error: --out {} is a directory: give the page's file name, e.g. --out {}",
            out.display(),
            out.join("report.html").display()
        );
        return ExitCode::from(2);
    }
    let same = |a: &PathBuf| std::fs::canonicalize(a).unwrap_or_else(|_| a.clone());
    for (k, d) in dirs.iter().enumerate() {
        if let Some(first) = dirs[..k].iter().find(|e| same(e) == same(d)) {
            noteln!(
                "error: {} and {} are the same directory: give each run once",
                first.display(),
                d.display()
            );
            return ExitCode::from(2);
        }
    }
    // A page written into a results directory under a result file's name (`--out
    // run/summary.json`, `--out sweep/sweep.csv`) replaced a result: the one it reports on, or
    // another command's. There it must be an .html file.
    let html = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html"));
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let reported = dirs.iter().any(|d| same(d) == same(&parent.to_path_buf()));
    let held = crate::output::Results::held_in(parent).map(|(kind, _)| kind.name());
    if !html && (reported || held.is_some()) {
        noteln!(
            "error: --out {} is in {}, which holds a {}'s results, where a page not named *.html could replace a result file; give it an .html name, e.g. --out {}",
            out.display(),
            parent.display(),
            held.unwrap_or("run"),
            parent.join("report.html").display()
        );
        return ExitCode::from(2);
    }
    if let Err(code) = finish_interrupted_commits(&dirs) {
        return code;
    }
    let page = match crate::report::report(&dirs) {
        Ok(page) => page,
        Err(e) => {
            noteln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match super::run::write_page(&page, &out) {
        Ok(()) => {
            noteln!("servesim: report in {}", out.display());
            ExitCode::SUCCESS
        }
        Err((code, e)) => {
            noteln!("error: {e}");
            ExitCode::from(code)
        }
    }
}

/// Lists models, GPUs, policies or schedulers.
pub(crate) fn list(app: &ServesimApp, a: ListArgs) -> ExitCode {
    let built = app.build();
    let catalog = built.world().resource::<Catalog>();
    match a.what {
        ListWhat::Models => {
            outln!(
                "{:<44}{:>7}{:>8}{:>7}{:>5}{:>8}{:>10}  {:<11}top_p",
                "model",
                "layers",
                "hidden",
                "heads",
                "kv",
                "experts",
                "params_b",
                "weights"
            );
            for (id, _) in crate::model::BUNDLED_MODELS {
                let m = crate::model::ModelConfig::bundled(id).expect("bundled models parse");
                // The nucleus its bundled generation_config.json gives requests that set
                // none ("-": no file bundled, vLLM's neutral 1).
                let top_p = m.default_top_p.map_or("-".to_string(), |p| p.to_string());
                outln!(
                    "{:<44}{:>7}{:>8}{:>7}{:>5}{:>8}{:>10.2}  {:<11}{top_p}",
                    m.id,
                    m.layers,
                    m.hidden,
                    m.heads,
                    m.kv_heads,
                    m.experts,
                    crate::model::params(&m) / 1e9,
                    format!("{} B/param", m.weight_bytes)
                );
            }
            outln!(
                "a group's model: an id above (any case, or a unique prefix), the HuggingFace repository id vLLM's --model takes (meta-llama/Llama-2-7b-hf), or a path to a config.json or a model's directory; top_p: the nucleus its generation_config.json gives requests that set none (- for none bundled)"
            );
            ExitCode::SUCCESS
        }
        ListWhat::Hardware => {
            outln!(
                "{:<10}{:>10}{:>10}{:>8}{:>8}{:>8}{:>8}{:>18}  {:<12}{:<19}aliases",
                "gpu",
                "bf16 TF",
                "fp8 TF",
                "TB/s",
                "mfu_p",
                "mfu_d",
                "GiB",
                "W idle/floor/max",
                "calibration",
                "node GPUs/NVL/NIC"
            );
            for g in crate::model::bundled_gpus() {
                outln!(
                    "{:<10}{:>10}{:>10}{:>8}{:>8}{:>8}{:>8}{:>18}  {:<12}{:<19}{}",
                    g.id,
                    g.tflops_bf16,
                    g.tflops_fp8,
                    g.bandwidth_tb_per_s,
                    g.mfu_prefill,
                    g.mfu_decode,
                    g.memory_gib,
                    g.power.map_or("-".to_string(), |p| format!(
                        "{}/{}/{}",
                        p.idle_w, p.floor_w, p.max_w
                    )),
                    g.calibration.name(),
                    g.node.map_or("-".to_string(), |n| format!(
                        "{}/{}/{}",
                        n.gpus,
                        n.nvlink_gb_per_s,
                        n.nic_gb_per_s.map_or("-".to_string(), |x| x.to_string())
                    )),
                    g.aliases.join(", ")
                );
            }
            outln!(
                "calibration: measured = our roofline fitted to kernels measured on the GPU; same die = a measured GPU's compute die; datasheet = peaks only, the H100's efficiencies assumed; power (watts per GPU, docs/energy.md): max the datasheet's board power, floor the H100's ML.ENERGY figure scaled by max, idle assumed 10 % of max; node (cluster.topology's defaults, docs/topology.md): GPUs per NVLink domain / NVLink and NIC GB/s per GPU per direction, - where no reference system fixes it"
            );
            ExitCode::SUCCESS
        }
        what @ (ListWhat::Policies | ListWhat::Schedulers) => {
            let mut family = "";
            let only = (what == ListWhat::Schedulers).then_some("scheduler");
            for (fam, name, description, params) in catalog.describe() {
                if only.is_some_and(|f| f != fam) {
                    continue;
                }
                if fam != family {
                    outln!("{fam}:");
                    family = fam;
                }
                outln!("  {name:<20} {description}");
                for (p, meaning) in params {
                    outln!("    {:<32} {meaning}", format!("{fam}_params.{p}"));
                }
            }
            ExitCode::SUCCESS
        }
    }
}

/// The `validate` line of a hybrid-attention group: its layers' kinds and how its KV cache
/// holds them.
fn hybrid_line(
    m: &crate::model::ModelConfig,
    layout: Option<crate::model::KvLayout>,
    block_size: u32,
) -> String {
    let k = &m.kinds;
    if k.is_sparse() {
        return format!(
            "{} MLA layers with DeepSeek sparse attention: a query attends over the {} cached tokens its lightning indexer ({} heads × {}) scores highest; the indexer caches {} B per token and layer beside the latent row",
            m.attention_layers(),
            k.index_topk,
            k.index_heads,
            k.index_dim,
            k.index_key_bytes()
        );
    }
    let mut kinds =
        crate::scenario::counted(u64::from(m.full_attention_layers()), "full-attention layer");
    if k.sliding > 0 {
        kinds += &format!(", {} sliding-window over {} tokens", k.sliding, k.window);
    }
    if k.linear > 0 {
        kinds += &format!(", {} linear-attention (recurrent state)", k.linear);
    }
    let Some(l) = layout else {
        return format!(
            "{kinds}; KV cache as full attention for every layer (disable_hybrid_kv_cache_manager)"
        );
    };
    let window = l.window.div_ceil(block_size) + 1;
    let mut per_request = format!("{} per {block_size} tokens", l.full_groups);
    if l.slides_main() {
        per_request = format!(
            "at most {} for its window{}; a prefix-cache hit needs its last {} blocks cached",
            l.sliding_groups.saturating_mul(window),
            if l.sliding_groups > 1 { "s" } else { "" },
            l.window_hit_blocks(block_size)
        );
    } else if l.sliding_groups > 0 {
        per_request += &format!(
            " + at most {} for the windows",
            l.sliding_groups.saturating_mul(window)
        );
    }
    if l.linear_groups > 0 {
        per_request += &format!(
            " + {} for the states; no prefix-cache hits",
            l.linear_groups.saturating_mul(l.state_blocks)
        );
    }
    format!(
        "{kinds}; KV cache in groups of {} ({} full, {} sliding, {} linear), {:.2} MiB blocks; a request holds {per_request}",
        crate::scenario::counted(u64::from(l.group_layers), "layer"),
        l.full_groups,
        l.sliding_groups,
        l.linear_groups,
        l.page_bytes / f64::from(1u32 << 20)
    )
}
