//! A group's `expert_parallel` block resolved against its model, GPU and the cluster's
//! topology (docs/expert-parallel.md).

use crate::latency::ExpertParallel;
use crate::model::{GpuProfile, ModelConfig};
use crate::network::NIC_BUS_SHARE;
use crate::scenario::{InstanceGroup, Problem, TopologySpec};

/// The group's expert parallelism, or `None` with its problems in `p` (under
/// `cluster.groups[i].expert_parallel`).
pub(super) fn expert_parallel(
    p: &mut Vec<Problem>,
    at: &dyn Fn(&str) -> String,
    g: &InstanceGroup,
    m: &ModelConfig,
    gpu: &GpuProfile,
    topology: Option<&TopologySpec>,
) -> Option<ExpertParallel> {
    let e = g.expert_parallel.as_ref()?;
    let before = p.len();
    let f = |name: &str| at(&format!("expert_parallel.{name}"));
    if e.dp == 0 {
        p.push(
            Problem::new(f("dp"), "must be ≥ 1")
                .hint("data-parallel attention ranks per instance, e.g. 8"),
        );
    }
    let gpus = e.dp.max(1).saturating_mul(g.tp.max(1));
    if e.dp > 0 && gpus < 2 {
        p.push(
            Problem::new(
                f("dp"),
                format!(
                    "expert parallelism needs dp × tp ≥ 2 GPUs, got dp {} × tp {}",
                    e.dp, g.tp
                ),
            )
            .hint("spread the experts over several GPUs, e.g. dp: 8"),
        );
    }
    if !m.is_moe() {
        p.push(
            Problem::new(at("expert_parallel"), format!("{} has no experts", m.id))
                .hint("expert parallelism is for MoE models; replicate a dense model with `count`"),
        );
    } else if gpus > m.experts {
        p.push(
            Problem::new(
                f("dp"),
                format!(
                    "{} GPUs for {} experts: some GPUs would hold none",
                    gpus, m.experts
                ),
            )
            .hint(format!("use at most {} GPUs (dp × tp)", m.experts)),
        );
    }
    if g.pp > 1 {
        p.push(
            Problem::new(
                at("expert_parallel"),
                "not with pipeline parallelism (pp > 1)",
            )
            .hint("use tp and dp"),
        );
    }
    if g.lora.is_some() {
        p.push(
            Problem::new(at("expert_parallel"), "not with `lora`")
                .hint("LoRA on expert-parallel instances is not modelled"),
        );
    }
    // The busiest GPU takes at most every row its experts can: T × min(k, N/E) of a mean of
    // T·k/E, so the ratio is at most E · min(k, N/E) / k. A larger one was capped there
    // silently.
    let (k, per_gpu) = (
        f64::from(m.experts_per_token.max(1)),
        f64::from(m.experts) / f64::from(gpus),
    );
    let most = f64::from(gpus) * k.min(per_gpu) / k;
    if !e.imbalance.is_finite() || e.imbalance < 1.0 {
        p.push(
            Problem::new(f("imbalance"), format!("must be ≥ 1, got {}", e.imbalance))
                .hint("the busiest GPU's routed tokens over the mean: 1 when perfectly balanced"),
        );
    } else if m.is_moe() && gpus <= m.experts && e.imbalance > most {
        p.push(
            Problem::new(
                f("imbalance"),
                format!(
                    "{} is more than the {} a step can reach: with {} experts of {} per token over {gpus} GPUs, the busiest takes at most every row its experts can",
                    e.imbalance,
                    crate::scenario::readable(most),
                    m.experts,
                    m.experts_per_token
                ),
            )
            .hint("the busiest GPU's routed tokens over the mean, as vLLM's EPLB logs its inverse (balancedness), e.g. 1.5"),
        );
    }
    for (name, v) in [
        ("nvlink_gb_per_s", e.nvlink_gb_per_s),
        ("rdma_gb_per_s", e.rdma_gb_per_s),
    ] {
        if let Some(v) = v {
            crate::scenario::gb_per_s(p, &f(name), v);
        }
    }
    if let Some(v) = e.latency_us {
        crate::scenario::latency_us(p, &f("latency_us"), v);
    }
    let node = gpu.node.as_ref();
    let per_node = topology
        .and_then(|t| t.gpus_per_node)
        .or(node.map(|n| n.gpus))
        .unwrap_or(u32::MAX);
    let spans = gpus > per_node;
    let nic = topology
        .and_then(|t| t.nic_gb_per_s)
        .or(node.and_then(|n| n.nic_gb_per_s));
    let rdma = e.rdma_gb_per_s.or(nic.map(|n| NIC_BUS_SHARE * n));
    if spans && rdma.is_none() {
        p.push(
            Problem::new(
                f("rdma_gb_per_s"),
                format!(
                    "the instance's {gpus} GPUs span nodes of {per_node}, and neither the topology nor {} gives a NIC rate",
                    gpu.id
                ),
            )
            .hint("give rdma_gb_per_s (per GPU), or cluster.topology.nic_gb_per_s"),
        );
    }
    if p.len() > before {
        return None;
    }
    let nvlink = e.nvlink_gb_per_s.unwrap_or_else(|| {
        topology
            .and_then(|t| t.nvlink_gb_per_s)
            .map_or(gpu.physics.allreduce_gb_per_s, |n| NIC_BUS_SHARE * n)
    });
    let nic_latency = if spans {
        topology.map_or(0.0, |t| t.nic_latency_us)
    } else {
        0.0
    };
    Some(ExpertParallel {
        dp: e.dp,
        imbalance: e.imbalance,
        nvlink_gb_per_s: nvlink,
        rdma_gb_per_s: rdma.unwrap_or(f64::INFINITY),
        gpus_per_node: per_node,
        latency_us: e
            .latency_us
            .unwrap_or(gpu.physics.allreduce_latency_us + nic_latency),
        all2all: e.all2all,
    })
}
