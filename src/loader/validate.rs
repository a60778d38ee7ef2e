//! Whole-scenario validation: every problem with its field path, at once. Each concern
//! checks its own part (`workload::check`, `instance::check_group`, `policy::check`,
//! `autoscale::check`, `disagg::check`, `network::check`, `metrics::check_outputs`); this adds what is the whole scenario's (and `plan.rs`, the `plan`
//! block):
//! the whole scenario's: the horizon, the size of the cluster and the memory it needs.

use crate::catalog::Catalog;
use crate::scenario::{Problem, Scenario, finite_positive};

/// Checks everything serde could not: ranges, finiteness, names, cross-field rules.
pub(super) fn validate(s: &Scenario, catalog: &Catalog) -> Vec<Problem> {
    let mut p = Vec::new();
    if let Some(h) = s.horizon_s {
        finite_positive(
            &mut p,
            "horizon_s",
            h,
            "simulated seconds; omit it to run until all requests finish",
        );
    }
    if s.cluster.groups.is_empty() {
        p.push(
            Problem::new("cluster.groups", "the cluster has no instance groups").hint(
                "add at least one group, e.g. (count: 1, kv_blocks: 8192, latency: Blackbox(...))",
            ),
        );
    }
    // Autoscaled groups are spawned at their max.
    let spawned =
        |g: &crate::scenario::InstanceGroup| g.scaling.as_ref().map_or(g.count, |x| x.max);
    let instances: u64 = s.cluster.groups.iter().map(|g| u64::from(spawned(g))).sum();
    if instances > crate::scenario::MAX_INSTANCES {
        p.push(
            Problem::new(
                "cluster.groups",
                format!(
                    "{instances} instances in all; at most {}",
                    crate::scenario::grouped(crate::scenario::MAX_INSTANCES)
                ),
            )
            .hint("simulate a representative slice of the cluster"),
        );
    }
    // A group's name labels its instances' results (summary.json's groups, timeseries.csv,
    // scale_events.csv) and names it to `capacity --group`: two groups of one name would
    // read as one.
    let labels = s.labels().groups;
    for (i, name) in labels.iter().enumerate() {
        let at = format!("cluster.groups[{i}].name");
        if let Some(j) = labels[..i].iter().position(|n| n == name) {
            let unnamed = if s.cluster.groups[j].name.is_empty() {
                " (its default name)"
            } else {
                ""
            };
            p.push(
                Problem::new(
                    at,
                    format!("\"{name}\" is also the name of cluster.groups[{j}]{unnamed}"),
                )
                .hint("give each group a name of its own: it labels the group's results and names it to capacity --group"),
            );
        } else {
            one_line(&mut p, at, name);
        }
    }
    // The other names that label results: one line each.
    for (i, c) in s.workload.clients.iter().enumerate() {
        one_line(&mut p, format!("workload.clients[{i}].name"), &c.name);
        if let Some(t) = &c.tenant {
            one_line(&mut p, format!("workload.clients[{i}].tenant"), t);
        }
    }
    for (i, t) in s.workload.traces.iter().enumerate() {
        if let Some(name) = &t.tenant {
            one_line(&mut p, format!("workload.traces[{i}].tenant"), name);
        }
    }
    for (k, c) in s.policies.slo_classes.iter().enumerate() {
        one_line(&mut p, format!("policies.slo_classes[{k}].name"), &c.name);
    }
    if let Some(a) = &s.workload.adapters {
        for (k, name) in a.names.iter().enumerate() {
            one_line(&mut p, format!("workload.adapters.names[{k}]"), name);
        }
    }
    let mut table_bytes = 0.0;
    let mut nodes = Vec::new();
    for (i, g) in s.cluster.groups.iter().enumerate() {
        crate::instance::check_group(&mut p, s, i, catalog);
        let resolved = super::resolve_group(s, i, catalog);
        // A group that does not resolve has its own errors; its node is not asked for.
        nodes.push(
            resolved
                .as_ref()
                .ok()
                .map(|r| r.gpu.as_ref().and_then(|g| g.node)),
        );
        match resolved {
            Ok(r) => {
                crate::energy::check_group(&mut p, s, i, &r);
                super::hybrid::check(&mut p, s, i, &r);
                table_bytes += f64::from(spawned(g))
                    * (f64::from(r.kv_blocks) * GPU_BLOCK_BYTES
                        + f64::from(g.cpu_kv_blocks + g.nvme_kv_blocks) * CPU_BLOCK_BYTES);
            }
            Err(problems) => p.extend(problems),
        }
    }
    if let Some(st) = &s.cluster.kv_store {
        table_bytes += f64::from(st.blocks) * CPU_BLOCK_BYTES;
    }
    crate::instance::check_kv_store(&mut p, s);
    crate::network::check(&mut p, s, &nodes);
    check_limits(&mut p, s, table_bytes);
    crate::policy::check(&mut p, s, catalog);
    crate::metrics::check_outputs(&mut p, s);
    crate::disagg::check(&mut p, s, catalog);
    crate::autoscale::check(&mut p, s);
    crate::energy::check(&mut p, s);
    crate::gateway::check(&mut p, s);
    crate::faults::check(&mut p, s);
    super::plan::check(&mut p, s, catalog);
    p.extend(crate::workload::check(s));
    p
}

/// Memory one GPU KV block costs the simulator once used (block row, prefix-index entry and
/// its share of the index's slack), bytes; measured ~120.
pub const GPU_BLOCK_BYTES: f64 = 128.0;
/// Memory one CPU-tier block costs (LRU slot and index entry), bytes.
pub const CPU_BLOCK_BYTES: f64 = 64.0;

fn check_limits(p: &mut Vec<Problem>, s: &crate::scenario::Scenario, table_bytes: f64) {
    let l = &s.limits;
    if !l.max_memory_gib.is_finite() || l.max_memory_gib <= 0.0 {
        p.push(Problem::new(
            "limits.max_memory_gib",
            format!("must be a finite number > 0, got {}", l.max_memory_gib),
        ));
    } else {
        let gib = table_bytes / f64::from(1u32 << 30);
        if gib > l.max_memory_gib {
            p.push(
                Problem::new(
                    "cluster.groups",
                    format!(
                        "the KV block tables need about {gib:.1} GiB ({GPU_BLOCK_BYTES} bytes per GPU block, {CPU_BLOCK_BYTES} per CPU-tier block, every instance), above limits.max_memory_gib = {}",
                        l.max_memory_gib
                    ),
                )
                .hint("simulate fewer instances or blocks, or raise limits.max_memory_gib if the machine has the memory"),
            );
        }
    }
    if l.max_in_flight == 0 {
        p.push(Problem::new("limits.max_in_flight", "must be ≥ 1"));
    }
    if l.max_waiting_per_instance == Some(0) {
        p.push(
            Problem::new("limits.max_waiting_per_instance", "must be ≥ 1")
                .hint("omit it for an unbounded queue"),
        );
    }
    if l.offline_batch_window == 0 {
        p.push(Problem::new("limits.offline_batch_window", "must be ≥ 1"));
    }
}

/// A name that labels results (a CSV cell, a table's column on stdout) is one line: a control
/// character (a line break, a tab) in it is refused.
fn one_line(p: &mut Vec<Problem>, at: String, name: &str) {
    if name.chars().any(char::is_control) {
        p.push(Problem::new(
            at,
            format!("{name:?} holds a control character (a line break, a tab…): a name is one line of text"),
        ));
    }
}
