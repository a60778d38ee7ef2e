//! Checks of a scenario's `faults` block.

use crate::scenario::{Problem, Scenario};

/// Each straggler names an instance of the cluster (groups spawn `count`, autoscaled ones
/// their `max`), an ordered window and a slowdown ≥ 1; each crash an instance and a time;
/// the MTBF, repair, reload and retry figures are finite and in range.
pub fn check(p: &mut Vec<Problem>, s: &Scenario) {
    let Some(f) = &s.faults else {
        return;
    };
    let instances: u64 = s
        .cluster
        .groups
        .iter()
        .map(|g| u64::from(g.scaling.as_ref().map_or(g.count, |x| x.max)))
        .sum();
    for (k, c) in f.crashes.iter().enumerate() {
        let at = |field: &str| format!("faults.crashes[{k}].{field}");
        exists(p, at("instance"), c.instance, instances);
        seconds(p, at("at_s"), c.at_s, 0.0);
    }
    for (name, links) in [
        ("kv_links", &f.kv_links),
        ("host_links", &f.host_links),
        ("pp_links", &f.pp_links),
    ] {
        for (k, l) in links.iter().enumerate() {
            link_window(p, s, name, k, l, instances);
        }
    }
    if let Some(m) = f.mtbf_s {
        seconds(p, "faults.mtbf_s".into(), m, 1.0);
    }
    seconds(p, "faults.repair_s".into(), f.repair_s, 0.0);
    if let Some(r) = f.reload_s {
        seconds(p, "faults.reload_s".into(), r, 0.0);
    }
    if let crate::scenario::CrashPolicy::Retry {
        max_retries,
        backoff_s,
        max_backoff_s,
    } = f.on_crash
    {
        if max_retries == 0 || max_retries > 100 {
            p.push(
                Problem::new(
                    "faults.on_crash.max_retries",
                    format!("must be 1 to 100, got {max_retries}"),
                )
                .hint("use on_crash: Fail for no retries"),
            );
        }
        seconds(p, "faults.on_crash.backoff_s".into(), backoff_s, 0.0);
        seconds(
            p,
            "faults.on_crash.max_backoff_s".into(),
            max_backoff_s,
            0.0,
        );
        if max_backoff_s.is_finite() && backoff_s.is_finite() && max_backoff_s < backoff_s {
            p.push(Problem::new(
                "faults.on_crash.max_backoff_s",
                format!("must be ≥ backoff_s ({backoff_s} s), got {max_backoff_s} s"),
            ));
        }
    }
    for (k, st) in f.stragglers.iter().enumerate() {
        let at = |field: &str| format!("faults.stragglers[{k}].{field}");
        exists(p, at("instance"), st.instance, instances);
        seconds(p, at("from_s"), st.from_s, 0.0);
        seconds(p, at("until_s"), st.until_s, 0.0);
        if st.from_s.is_finite() && st.until_s.is_finite() && st.until_s <= st.from_s {
            p.push(
                Problem::new(
                    at("until_s"),
                    format!(
                        "must be after from_s ({} s), got {} s",
                        st.from_s, st.until_s
                    ),
                )
                .hint("the window is [from_s, until_s)"),
            );
        }
        if !st.slowdown.is_finite() || st.slowdown < 1.0 || st.slowdown > 1e6 {
            p.push(
                Problem::new(
                    at("slowdown"),
                    format!("must be a finite factor in [1, 10⁶], got {}", st.slowdown),
                )
                .hint("2.0 makes each step take twice as long"),
            );
        }
    }
}

/// `instance` names an instance of the cluster's `instances`.
fn exists(p: &mut Vec<Problem>, field: String, instance: u32, instances: u64) {
    if u64::from(instance) >= instances {
        p.push(
            Problem::new(
                field,
                format!(
                    "instance {instance} does not exist: the cluster has {instances} (0 to {})",
                    instances.saturating_sub(1)
                ),
            )
            .hint("instances are numbered across groups in order, as in requests.csv"),
        );
    }
}

/// A time in seconds: finite, ≥ `min` and within the clock's range (10⁹ s).
fn seconds(p: &mut Vec<Problem>, field: String, v: f64, min: f64) {
    if !v.is_finite() || v < min || v > 1e9 {
        p.push(Problem::new(
            field,
            format!("must be a finite time in [{min}, 10⁹] s, got {v}"),
        ));
    }
}

/// The role of the group instance `i` belongs to (`None` past the last).
/// One link window of `faults.<name>`: an instance of the cluster with such a link, an
/// ordered window, a bandwidth fraction.
fn link_window(
    p: &mut Vec<Problem>,
    s: &Scenario,
    name: &str,
    k: usize,
    l: &crate::scenario::LinkFaultSpec,
    instances: u64,
) {
    let at = |field: &str| format!("faults.{name}[{k}].{field}");
    exists(p, at("instance"), l.instance, instances);
    seconds(p, at("from_s"), l.from_s, 0.0);
    seconds(p, at("until_s"), l.until_s, 0.0);
    if l.from_s.is_finite() && l.until_s.is_finite() && l.until_s <= l.from_s {
        p.push(
            Problem::new(
                at("until_s"),
                format!("must be after from_s ({} s), got {} s", l.from_s, l.until_s),
            )
            .hint("the window is [from_s, until_s)"),
        );
    }
    if !(0.0..=1.0).contains(&l.bandwidth) {
        p.push(
            Problem::new(
                at("bandwidth"),
                format!("must be a fraction in [0, 1], got {}", l.bandwidth),
            )
            .hint("0.25 leaves a quarter of the link; 0 severs it"),
        );
    }
    let Some(g) = group_of(s, l.instance) else {
        return;
    };
    let (has, what, hint) = match name {
        "kv_links" => (
            g.role != crate::scenario::Role::Mixed,
            "serves both phases: it sends no KV over a link",
            "kv_links degrade the P/D transfer links of Prefill and Decode instances",
        ),
        "host_links" => (
            g.cpu_kv_blocks > 0,
            "has no CPU KV tier: nothing crosses its host link",
            "host_links degrade the link of a group with cpu_kv_blocks",
        ),
        _ => (
            g.pp > 1,
            "has one pipeline stage: it has no link between stages",
            "pp_links degrade the stage-to-stage links of a group with pp > 1",
        ),
    };
    if !has {
        p.push(Problem::new(at("instance"), format!("instance {} {what}", l.instance)).hint(hint));
    }
}

/// The group instance `i` belongs to (groups spawn `count`, autoscaled ones their `max`).
fn group_of(s: &Scenario, i: u32) -> Option<&crate::scenario::InstanceGroup> {
    let mut first = 0u64;
    for g in &s.cluster.groups {
        let n = u64::from(g.scaling.as_ref().map_or(g.count, |x| x.max));
        if u64::from(i) < first + n {
            return Some(g);
        }
        first += n;
    }
    None
}
