//! Checks of the cluster-wide policies in a scenario: known names with parameters they
//! take, the control plane's delays and the SLO classes.

use crate::catalog::{Catalog, PolicyArgs, PolicyFamily, check_member};
use crate::scenario::{Problem, Scenario, did_you_mean};

use super::family;

pub fn check(p: &mut Vec<Problem>, s: &Scenario, catalog: &Catalog) {
    let pol = &s.policies;
    for (f, v) in [
        ("admission_latency_us", pol.admission_latency_us),
        ("routing_latency_us", pol.routing_latency_us),
        (
            "snapshot_refresh_interval_us",
            pol.snapshot_refresh_interval_us,
        ),
    ] {
        if v > 1_000_000_000_000 {
            p.push(Problem::new(
                format!("policies.{f}"),
                format!("{v} µs is more than 10¹² µs (~12 days)"),
            ));
        }
    }
    let labels = s.labels();
    check_policy::<family::Admission>(
        p,
        catalog,
        "admission",
        &pol.admission,
        &pol.admission_params,
        &labels,
        s.seed,
    );
    check_policy::<family::Priority>(
        p,
        catalog,
        "priority",
        &pol.priority,
        &pol.priority_params,
        &labels,
        s.seed,
    );
    check_policy::<family::Scheduling>(
        p,
        catalog,
        "scheduling",
        &pol.scheduling,
        &Default::default(),
        &labels,
        s.seed,
    );
    check_policy::<family::Routing>(
        p,
        catalog,
        "routing",
        &pol.routing,
        &pol.routing_params,
        &labels,
        s.seed,
    );
    check_policy::<family::Autoscale>(
        p,
        catalog,
        "autoscale",
        &pol.autoscale,
        &pol.autoscale_params,
        &labels,
        s.seed,
    );
    for (i, c) in pol.slo_classes.iter().enumerate() {
        for (f, v) in [
            ("ttft_ms", c.ttft_ms),
            ("itl_ms", c.itl_ms),
            ("e2e_ms", c.e2e_ms),
        ] {
            if let Some(v) = v
                && (!v.is_finite() || v <= 0.0)
            {
                p.push(Problem::new(
                    format!("policies.slo_classes[{i}].{f}"),
                    format!("must be a finite number > 0 (ms), got {v}"),
                ));
            }
        }
        if let Some(a) = c.attainment
            && !(a > 0.0 && a <= 1.0)
        {
            p.push(
                Problem::new(
                    format!("policies.slo_classes[{i}].attainment"),
                    format!("must be a fraction in (0, 1], got {a}"),
                )
                .hint("e.g. attainment: 0.99 (99 % of the class's requests meet its targets)"),
            );
        }
        if pol.slo_classes[..i].iter().any(|o| o.name == c.name) {
            p.push(Problem::new(
                format!("policies.slo_classes[{i}].name"),
                format!("class \"{}\" is defined twice", c.name),
            ));
        }
    }
    // A class a source names must exist once any are declared: a typo would otherwise
    // create a class without targets whose attainment is always 1.
    if !pol.slo_classes.is_empty() {
        let declared: Vec<&str> = pol.slo_classes.iter().map(|c| c.name.as_str()).collect();
        let named = s
            .workload
            .clients
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("workload.clients[{i}].slo_class"), &c.slo_class))
            .chain(
                s.workload
                    .traces
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("workload.traces[{i}].slo_class"), &t.slo_class)),
            );
        for (path, name) in named {
            if let Some(name) = name
                && !declared.contains(&name.as_str())
            {
                let hint = match did_you_mean(name, declared.iter().copied()) {
                    Some(x) => format!("did you mean \"{x}\"?"),
                    None => format!(
                        "declare it in policies.slo_classes (declared: {})",
                        declared.join(", ")
                    ),
                };
                p.push(
                    Problem::new(path, format!("SLO class \"{name}\" is not declared")).hint(hint),
                );
            }
        }
    }
}

/// A cluster-wide policy `policies.<family>` with `policies.<family>_params`.
pub fn check_policy<F: PolicyFamily>(
    p: &mut Vec<Problem>,
    catalog: &Catalog,
    field: &str,
    name: &str,
    params: &std::collections::BTreeMap<String, f64>,
    labels: &crate::labels::Labels,
    seed: u64,
) {
    check_member::<F>(
        p,
        catalog,
        field,
        &format!("policies.{field}"),
        &format!("policies.{field}_params"),
        name,
        &PolicyArgs::new(seed, params, labels),
    );
}
