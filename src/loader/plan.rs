//! Checks of a scenario's `plan` block (what `servesim plan` searches): every name known, every list sensible, a price for
//! every GPU, and a group whose size and speed follow from what is varied.

use crate::catalog::Catalog;
use crate::model::price_of;
use crate::scenario::{
    InstanceGroup, LatencySpec, PlanSpec, Problem, Role, Scenario, did_you_mean,
};

/// Adds the `plan` block's problems (none when the scenario has no `plan`).
pub fn check(p: &mut Vec<Problem>, s: &Scenario, catalog: &Catalog) {
    let Some(plan) = &s.plan else {
        return;
    };
    let Some(g) = s.cluster.groups.get(plan.group) else {
        p.push(Problem::new(
            "plan.group",
            format!(
                "no group {} (the cluster has {})",
                plan.group,
                s.cluster.groups.len()
            ),
        ));
        return;
    };
    let gpus: Vec<String> = crate::model::bundled_gpus()
        .iter()
        .map(|g| g.id.clone())
        .collect();
    for (k, name) in plan.gpus.iter().enumerate() {
        if crate::model::find_gpu(name).is_none() {
            let hint = did_you_mean(name, gpus.iter().map(String::as_str))
                .map_or(format!("bundled: {}", gpus.join(", ")), |s| {
                    format!("did you mean \"{s}\"?")
                });
            p.push(
                Problem::new(format!("plan.gpus[{k}]"), format!("unknown GPU \"{name}\""))
                    .hint(hint),
            );
        }
    }
    let gpu_ids: Vec<String> = plan
        .gpus
        .iter()
        .map(|n| crate::model::find_gpu(n).map_or(n.clone(), |g| g.id.clone()))
        .collect();
    repeated(p, "gpus", &gpu_ids);
    repeated(p, "schedulers", &plan.schedulers);
    repeated(p, "routing", &plan.routing);
    let splits: Vec<String> = plan
        .pd_splits
        .iter()
        .map(|(a, b)| format!("({a}, {b})"))
        .collect();
    repeated(p, "pd_splits", &splits);
    for (field, list) in [
        ("tp", &plan.tp),
        ("pp", &plan.pp),
        ("max_num_seqs", &plan.max_num_seqs),
        ("max_num_batched_tokens", &plan.max_num_batched_tokens),
    ] {
        for (k, v) in list.iter().enumerate() {
            if *v == 0 {
                p.push(Problem::new(format!("plan.{field}[{k}]"), "must be ≥ 1"));
            }
        }
        repeated(p, field, list);
    }
    for (k, name) in plan.schedulers.iter().enumerate() {
        known::<crate::instance::schedulers::BatchFormation>(
            p,
            catalog,
            &format!("plan.schedulers[{k}]"),
            "scheduler",
            name,
        );
    }
    for (k, name) in plan.routing.iter().enumerate() {
        known::<crate::policy::family::Routing>(
            p,
            catalog,
            &format!("plan.routing[{k}]"),
            "routing policy",
            name,
        );
    }
    if plan.max_instances == 0 || plan.max_instances > 10_000 {
        p.push(Problem::new(
            "plan.max_instances",
            format!("must be in 1..=10000, got {}", plan.max_instances),
        ));
    }
    if let Some(b) = plan.bound
        && !(b.is_finite() && b > 0.0)
    {
        p.push(
            Problem::new(
                "plan.bound",
                format!("must be a finite price > 0 per hour, got {b}"),
            )
            .hint(
                "e.g. bound: Some(60.0), the price per hour of a deployment known to meet the SLOs",
            ),
        );
    }
    for (name, price) in &plan.prices {
        if crate::model::find_gpu(name).is_none() {
            p.push(Problem::new(
                format!("plan.prices.{name}"),
                format!("unknown GPU \"{name}\""),
            ));
        }
        if !(price.is_finite() && *price > 0.0 && *price <= crate::scenario::MAX_PRICE) {
            p.push(Problem::new(
                format!("plan.prices.{name}"),
                format!(
                    "must be a price per GPU-hour in (0, 10⁶] (as cost_per_gpu_hour), got {}",
                    crate::scenario::readable(*price)
                ),
            ));
        }
    }
    // Every GPU planned needs a price.
    let planned: Vec<&String> = if plan.gpus.is_empty() {
        g.gpu.iter().collect()
    } else {
        plan.gpus.iter().collect()
    };
    if planned.is_empty() {
        p.push(
            Problem::new(
                format!("cluster.groups[{}].gpu", plan.group),
                "the planned group names no GPU",
            )
            .hint("give the group a gpu, or plan.gpus"),
        );
    }
    for name in planned {
        if crate::model::find_gpu(name).is_some() && price_of(name, &plan.prices).is_none() {
            p.push(
                Problem::new("plan.prices", format!("no price for GPU \"{name}\""))
                    .hint(format!("e.g. prices: {{\"{name}\": 1.50}} (per GPU-hour); assets/prices.ron has defaults for some GPUs")),
            );
        }
    }
    // What is varied must change what the group's instances can do.
    let hardware_varies = !plan.gpus.is_empty() || !plan.tp.is_empty() || !plan.pp.is_empty();
    sized_by_plan(p, plan.group, g, hardware_varies);
    if !plan.pd_splits.is_empty() {
        check_pd_splits(p, s, plan, hardware_varies);
    }
}

/// The prices `plan.prices` gives for GPUs the plan does not consider (neither in
/// `plan.gpus` nor, without it, the group's own), as warnings: one price list may serve plans
/// over other GPUs, but a GPU priced and left out of `plan.gpus` is more often a slip.
pub fn unused_prices(s: &Scenario) -> Vec<String> {
    let Some(plan) = &s.plan else {
        return Vec::new();
    };
    let Some(g) = s.cluster.groups.get(plan.group) else {
        return Vec::new();
    };
    let planned: Vec<&String> = if plan.gpus.is_empty() {
        g.gpu.iter().collect()
    } else {
        plan.gpus.iter().collect()
    };
    let id = |name: &str| crate::model::find_gpu(name).map(|g| g.id);
    let ids: Vec<_> = planned.iter().filter_map(|n| id(n)).collect();
    plan.prices
        .keys()
        .filter(|name| id(name).is_some_and(|i| !ids.contains(&i)))
        .map(|name| {
            let names: Vec<&str> = planned.iter().map(|n| n.as_str()).collect();
            format!(
                "plan.prices.{name}: the plan does not consider {name} (it plans {}), so its price is unused; add it to plan.gpus to plan it",
                names.join(", ")
            )
        })
        .collect()
}

/// Checks of a group the plan sizes (and, when `hardware_varies`, re-equips).
fn sized_by_plan(p: &mut Vec<Problem>, index: usize, g: &InstanceGroup, hardware_varies: bool) {
    let at = |f: &str| format!("cluster.groups[{index}].{f}");
    if hardware_varies {
        if g.model.is_none() {
            p.push(
                Problem::new(
                    at("model"),
                    "plan varies the GPU or parallelism of a group without a model",
                )
                .hint("give the group a model, so its KV cache and step times follow the hardware"),
            );
        }
        if g.kv_blocks.is_some() {
            p.push(
                Problem::new(
                    at("kv_blocks"),
                    "is fixed, but plan varies the GPU or parallelism it follows from",
                )
                .hint("remove kv_blocks so each configuration derives its own"),
            );
        }
        if let Some(l) = &g.latency
            && !matches!(
                l,
                LatencySpec::Roofline { .. }
                    | LatencySpec::BlisRoofline { .. }
                    | LatencySpec::TrainedPhysics { .. }
            )
        {
            p.push(
                Problem::new(
                    at("latency"),
                    "prices steps the same on every GPU, but plan varies the GPU or parallelism",
                )
                .hint("use Roofline() (or leave latency out), which follows the hardware"),
            );
        }
    }
    if g.scaling.is_some() {
        p.push(
            Problem::new(at("scaling"), "plan sizes the group itself")
                .hint("remove scaling from the planned group"),
        );
    }
}

/// `pd_splits` size the planned `Prefill` group with the one `Decode` group.
fn check_pd_splits(p: &mut Vec<Problem>, s: &Scenario, plan: &PlanSpec, hardware_varies: bool) {
    let groups = &s.cluster.groups;
    if groups[plan.group].role != Role::Prefill {
        p.push(
            Problem::new(
                format!("cluster.groups[{}].role", plan.group),
                format!(
                    "plan.pd_splits sizes a Prefill group with the Decode group, but the planned group is {}",
                    groups[plan.group].role.name()
                ),
            )
            .hint("set plan.group to the Prefill group, or remove pd_splits"),
        );
    }
    let decodes: Vec<usize> = (0..groups.len())
        .filter(|&k| groups[k].role == Role::Decode)
        .collect();
    match decodes.as_slice() {
        [d] => sized_by_plan(p, *d, &groups[*d], hardware_varies),
        _ => p.push(
            Problem::new(
                "plan.pd_splits",
                format!(
                    "needs exactly one Decode group to size with the prefill group; the cluster has {}",
                    decodes.len()
                ),
            )
            .hint("give one group role: Decode (docs/disaggregation.md)"),
        ),
    }
    for (k, &(pre, dec)) in plan.pd_splits.iter().enumerate() {
        if pre == 0 || dec == 0 || pre > 64 || dec > 64 {
            p.push(
                Problem::new(
                    format!("plan.pd_splits[{k}]"),
                    format!("must be (prefill, decode) instances per unit, each in 1..=64, got ({pre}, {dec})"),
                )
                .hint("e.g. pd_splits: [(1, 1), (1, 2), (1, 3)]"),
            );
        }
    }
}

fn known<F: crate::catalog::PolicyFamily>(
    p: &mut Vec<Problem>,
    catalog: &Catalog,
    at: &str,
    kind: &str,
    name: &str,
) {
    if catalog.find::<F>(name).is_some() {
        return;
    }
    let names = catalog.names::<F>();
    let hint = did_you_mean(name, names.iter().copied())
        .map_or(format!("known: {}", names.join(", ")), |s| {
            format!("did you mean \"{s}\"?")
        });
    p.push(Problem::new(at, format!("unknown {kind} \"{name}\"")).hint(hint));
}

/// A value listed twice in `plan.<field>`: every candidate would be searched twice and
/// listed twice among the runners-up.
fn repeated<T: PartialEq + std::fmt::Display>(p: &mut Vec<Problem>, field: &str, list: &[T]) {
    for (k, v) in list.iter().enumerate() {
        if let Some(first) = list[..k].iter().position(|x| x == v) {
            p.push(
                Problem::new(
                    format!("plan.{field}[{k}]"),
                    format!("{v} is listed twice (also plan.{field}[{first}])"),
                )
                .hint("list each value once: every value is a set of candidates to search"),
            );
        }
    }
}
