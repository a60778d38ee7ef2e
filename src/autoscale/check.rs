//! Checks of the autoscaling part of a scenario: each scaled group's bounds and life-cycle
//! times, and a scaling policy with something to scale.

use crate::scenario::{Problem, Scenario};

/// Checks every group's `scaling` and `policies.autoscale` against them.
pub fn check(p: &mut Vec<Problem>, s: &Scenario) {
    for (i, g) in s.cluster.groups.iter().enumerate() {
        if let Some(sc) = &g.scaling {
            check_scaling(p, i, g.count, sc);
        }
    }
    if s.policies.autoscale != "static" && s.cluster.groups.iter().all(|g| g.scaling.is_none()) {
        p.push(
            Problem::new(
                "policies.autoscale",
                format!(
                    "`{}` scales groups with `scaling`, and no group has it",
                    s.policies.autoscale
                ),
            )
            .hint("give a group scaling: (min: 1, max: 8), or use \"static\""),
        );
    }
    check_pool_intervals(p, s);
}

/// A pool (`cheapest_first: 1`) is sized as one at each evaluation, from the groups due
/// then: its groups must share one interval, or each evaluation would size the pool from
/// part of it.
fn check_pool_intervals(p: &mut Vec<Problem>, s: &Scenario) {
    let params = &s.policies.autoscale_params;
    if params.get("cheapest_first") != Some(&1.0) {
        return;
    }
    let policy_default = if s.policies.autoscale == "slo_aware" {
        30.0
    } else {
        15.0
    };
    let policy_s = params.get("interval_s").copied().unwrap_or(policy_default);
    let mut first: Option<(usize, f64)> = None;
    for (i, g) in s.cluster.groups.iter().enumerate() {
        let Some(sc) = &g.scaling else { continue };
        let own = sc.interval_s.unwrap_or(policy_s);
        match first {
            None => first = Some((i, own)),
            Some((j, other)) if other != own => {
                p.push(
                    Problem::new(
                        format!("cluster.groups[{i}].scaling.interval_s"),
                        format!(
                            "with cheapest_first: 1 the autoscaled groups are sized as one pool, so they must share one evaluation interval: group {} is evaluated every {own} s, group {} every {other} s",
                            g.name,
                            s.cluster.groups[j].name
                        ),
                    )
                    .hint("give every pooled group the same scaling.interval_s, or leave it out (the policy's interval_s)"),
                );
                return;
            }
            Some(_) => {}
        }
    }
}

/// An autoscaled group's bounds and life-cycle times.
fn check_scaling(p: &mut Vec<Problem>, i: usize, count: u32, sc: &crate::scenario::ScalingSpec) {
    let at = |f: &str| format!("cluster.groups[{i}].scaling.{f}");
    let most = crate::scenario::MAX_INSTANCES;
    if sc.max == 0 || u64::from(sc.max) > most {
        p.push(Problem::new(
            at("max"),
            format!(
                "must be within 1..={}, got {}",
                crate::scenario::grouped(most),
                sc.max
            ),
        ));
    }
    if sc.min > sc.max {
        p.push(Problem::new(
            at("min"),
            format!("min ({}) is above max ({})", sc.min, sc.max),
        ));
    }
    if count < sc.min || count > sc.max {
        p.push(
            Problem::new(
                format!("cluster.groups[{i}].count"),
                format!(
                    "an autoscaled group starts with count instances, which must be within min..=max ({}..={}), got {count}",
                    sc.min, sc.max
                ),
            )
            .hint("count is the number serving at t = 0"),
        );
    }
    let mut seconds = |f: &str, v: Option<f64>| {
        if let Some(v) = v
            && !(v.is_finite() && (0.0..=1e9).contains(&v))
        {
            p.push(Problem::new(
                at(f),
                format!("must be seconds within 0..=10⁹, got {v}"),
            ));
        }
    };
    seconds("provision_s", Some(sc.provision_s));
    seconds("load_s", sc.load_s);
    seconds("warmup_s", Some(sc.warmup_s));
    seconds("scale_up_cooldown_s", Some(sc.scale_up_cooldown_s));
    seconds("scale_down_cooldown_s", Some(sc.scale_down_cooldown_s));
    if let Some(v) = sc.interval_s
        && !(v.is_finite() && (0.001..=1e9).contains(&v))
    {
        p.push(Problem::new(
            at("interval_s"),
            format!("must be seconds within 0.001..=10⁹, got {v}"),
        ));
    }
    crate::scenario::gb_per_s(p, &at("load_gb_per_s"), sc.load_gb_per_s);
    if !(sc.warmup_speed.is_finite() && sc.warmup_speed > 0.0 && sc.warmup_speed <= 1.0) {
        p.push(
            Problem::new(
                at("warmup_speed"),
                format!("must be within (0, 1], got {}", sc.warmup_speed),
            )
            .hint("0.5 = steps take twice as long while warming up"),
        );
    }
}

/// `scheduled` sizes outside a group's `scaling` bounds: the group stops at the bound, which is
/// more often a slip than an intent, so each is warned of.
pub fn scheduled_out_of_bounds(s: &Scenario) -> Vec<String> {
    if s.policies.autoscale != "scheduled" {
        return Vec::new();
    }
    let labels = s.labels().groups;
    let mut w = Vec::new();
    for (key, &size) in &s.policies.autoscale_params {
        let named = key.rsplit_once('@').map(|(g, _)| g);
        for ((i, g), label) in s.cluster.groups.iter().enumerate().zip(&labels) {
            let Some(sc) = &g.scaling else { continue };
            if named.is_some_and(|n| n != label) {
                continue;
            }
            let bound = if size > f64::from(sc.max) {
                ("max", sc.max)
            } else if size < f64::from(sc.min) {
                ("min", sc.min)
            } else {
                continue;
            };
            w.push(format!(
                "policies.autoscale_params `{key}`: size {size} is outside cluster.groups[{i}] \
                 ({label})'s scaling bounds {}..={}: it will serve {} (scaling.{})",
                sc.min, sc.max, bound.1, bound.0
            ));
        }
    }
    w
}

/// A `threshold` policy given one bound of its signal only moves one way: with `<signal>_high`
/// alone it adds instances and never removes one (a burst leaves the group at its largest for
/// the rest of the run), with `<signal>_low` alone it never adds one.
pub fn one_way_threshold(s: &Scenario) -> Vec<String> {
    if s.policies.autoscale != "threshold" || s.cluster.groups.iter().all(|g| g.scaling.is_none()) {
        return Vec::new();
    }
    let params = &s.policies.autoscale_params;
    ["utilization", "queue", "kv", "in_flight"]
        .iter()
        .filter_map(|signal| {
            let (high, low) = (format!("{signal}_high"), format!("{signal}_low"));
            match (params.contains_key(&high), params.contains_key(&low)) {
                (true, false) => Some(format!(
                    "policies.autoscale_params: {high} without {low}: the threshold policy adds \
                     instances and never removes one (after a burst the group stays at its \
                     largest); give {low} for it to scale down"
                )),
                (false, true) => Some(format!(
                    "policies.autoscale_params: {low} without {high}: the threshold policy \
                     removes instances and never adds one; give {high} for it to scale up"
                )),
                _ => None,
            }
        })
        .collect()
}
