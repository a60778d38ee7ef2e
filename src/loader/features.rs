//! A group's optional serving features resolved against its model and GPU: multi-LoRA, the
//! NVMe tier below the CPU tier, and speculative decoding with its drafter. Used by
//! [`resolve_group`](super::resolve_group); problems go under the group's own paths.

use std::path::Path;
use std::sync::Arc;

use super::library::load_model;
use crate::latency::{LatencyModel, Roofline};
use crate::model::{GpuProfile, ModelConfig};
use crate::scenario::{InstanceGroup, LatencySpec, Problem};

/// A group's multi-LoRA resolved from its model and GPU; problems go to `p` under
/// `cluster.groups[i].lora`.
pub(super) fn lora(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    l: &crate::scenario::LoraSpec,
    g: &InstanceGroup,
    model: Option<&ModelConfig>,
    gpu: Option<&GpuProfile>,
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
    crate::scenario::gb_per_s(p, &at("lora.load_gb_per_s"), l.load_gb_per_s);
    crate::scenario::latency_us(p, &at("lora.load_latency_us"), l.load_latency_us);
    if g.scheduler != "vllm_v1" {
        p.push(
            Problem::new(
                at("lora"),
                format!(
                    "multi-LoRA runs on the vllm_v1 scheduler, not {}",
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
pub(super) fn nvme_tier(
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
    crate::scenario::gb_per_s(p, &at("nvme_read_gb_per_s"), read);
    let latency = match g.nvme_latency_us {
        Some(v) if crate::scenario::latency_us(p, &at("nvme_latency_us"), v) => v,
        Some(_) => 0.0,
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
pub(super) fn speculative(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    sp: &crate::scenario::SpeculativeSpec,
    g: &InstanceGroup,
    model: Option<&ModelConfig>,
    roofline_gpu: Option<&GpuProfile>,
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
