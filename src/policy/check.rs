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

/// Sources that name no SLO class when classes with targets are declared but the default,
/// [`DEFAULT_SLO_CLASS`](crate::labels::DEFAULT_SLO_CLASS), is not: their requests are in a
/// class without targets, so they count as meeting every SLO. Not an error, as classes may be
/// declared for their priorities alone; one warning names every such source.
pub fn unclassed_sources(s: &crate::scenario::Scenario) -> Option<String> {
    let classes = &s.policies.slo_classes;
    let default = crate::labels::DEFAULT_SLO_CLASS;
    if !classes.iter().any(|c| c.has_targets()) || classes.iter().any(|c| c.name == default) {
        return None;
    }
    let w = &s.workload;
    let clients = w
        .clients
        .iter()
        .enumerate()
        .filter(|(_, c)| c.slo_class.is_none());
    let traces = w
        .traces
        .iter()
        .enumerate()
        .filter(|(_, t)| t.slo_class.is_none() && t.row_labels.entry_class_used);
    let mut sources: Vec<String> = clients
        .map(|(i, _)| format!("workload.clients[{i}]"))
        .chain(traces.map(|(i, t)| {
            // A trace whose rows name classes, but not every row.
            let some = if t.row_labels.slo_classes.is_empty() {
                ""
            } else {
                " (its rows with an empty slo_class cell)"
            };
            format!("workload.traces[{i}]{some}")
        }))
        .collect();
    if w.inference_perf.is_some() {
        sources.push("workload.inference_perf".into());
    }
    (!sources.is_empty()).then(|| {
        let one = sources.len() == 1;
        let advice = if w.inference_perf.is_some() {
            // Its requests have no field to name a class in.
            format!("declare (name: \"{default}\", …), the class of an inference_perf load")
        } else {
            format!(
                "give {} an slo_class, or declare (name: \"{default}\", …)",
                if one { "it" } else { "each" }
            )
        };
        format!(
            "{} {} no slo_class, so {} requests are in \"{default}\", which policies.slo_classes \
             does not declare: they have no latency target and count as meeting the SLO in \
             attainment and goodput; {advice}",
            sources.join(", "),
            if one { "names" } else { "name" },
            if one { "its" } else { "their" },
        )
    })
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
