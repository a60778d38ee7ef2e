//! Checks of the outputs part of a scenario: fitness weights, decision and timeline
//! options.

use super::FITNESS_KEYS;
use crate::scenario::{Problem, Scenario, did_you_mean};

/// Fitness weights on cost where every group's `cost_per_gpu_hour` is 0 (its default): the
/// term is then the same for every run (1/(1 + 0)), so a search weighs nothing. A warning,
/// not an error, as a sweep may vary the price from 0.
pub fn unpriced_cost_fitness(s: &Scenario) -> Option<String> {
    let weighed: Vec<&str> = ["cost", "cost_per_mtok"]
        .into_iter()
        .filter(|k| s.outputs.fitness.get(*k).is_some_and(|w| *w != 0.0))
        .collect();
    let priced = s.cluster.groups.iter().any(|g| g.cost_per_gpu_hour > 0.0);
    (!weighed.is_empty() && !priced).then(|| {
        format!(
            "outputs.fitness weighs {}, but no group gives cost_per_gpu_hour (default 0): every \
             run costs nothing, so the term is the same for all; give each group the price of \
             its GPU-hour (assets/prices.ron lists the bundled ones)",
            weighed.join(" and ")
        )
    })
}

/// Checks `outputs`: known fitness keys with finite weights, the decision log's top-k, the
/// sampling interval and the timeline's window and request sample.
pub fn check_outputs(p: &mut Vec<Problem>, s: &Scenario) {
    for (k, v) in &s.outputs.fitness {
        if !FITNESS_KEYS.contains(&k.as_str()) {
            let hint = match did_you_mean(k, FITNESS_KEYS) {
                Some(x) => format!("did you mean \"{x}\"?"),
                None => format!("keys: {}", FITNESS_KEYS.join(", ")),
            };
            p.push(Problem::new(format!("outputs.fitness.{k}"), "unknown fitness key").hint(hint));
        } else if k == "joules_per_token" && s.energy.is_none() {
            p.push(
                Problem::new(
                    format!("outputs.fitness.{k}"),
                    "weighs energy, but the scenario has no energy block",
                )
                .hint("add `energy: ()` at the top level"),
            );
        } else if !(v.is_finite() && v.abs() <= 1e9) {
            // Weights are relative; two of 1.7e308 summed to an infinite fitness, printed as
            // `inf` and written as null.
            p.push(
                Problem::new(
                    format!("outputs.fitness.{k}"),
                    format!("weight must be a number in [-10⁹, 10⁹], got {v}"),
                )
                .hint(
                    "weights are relative: {\"ttft_mean\": 2.0, \"cost\": 1.0} weighs TTFT twice",
                ),
            );
        }
    }
    if s.outputs.worst_decisions > 1000 {
        p.push(Problem::new(
            "outputs.worst_decisions",
            format!("must be at most 1000, got {}", s.outputs.worst_decisions),
        ));
    }
    if s.outputs.decision_top_k == 0 {
        p.push(Problem::new("outputs.decision_top_k", "must be ≥ 1"));
    }
    // An empty name is no directory: the run failed at its end with "cannot use output
    // directory : No such file or directory".
    if s.outputs.dir.trim().is_empty() {
        p.push(
            Problem::new("outputs.dir", "is empty: it names no directory")
                .hint("leave it out for ./out, or name a directory such as \"out/run1\""),
        );
    }
    if let Some(dt) = s.outputs.sample_interval_s
        && !(dt.is_finite() && dt >= 1e-6)
    {
        p.push(
            Problem::new(
                "outputs.sample_interval_s",
                format!("must be a number of seconds ≥ 0.000001, got {dt}"),
            )
            .hint("leave it out for about 1,000 samples per run"),
        );
    }
    if let Some((a, b)) = s.outputs.timeline_window_s
        && !(a.is_finite() && b.is_finite() && 0.0 <= a && a < b)
    {
        p.push(
            Problem::new(
                "outputs.timeline_window_s",
                format!("must be (start, end) with 0 ≤ start < end, got ({a}, {b})"),
            )
            .hint("e.g. (100.0, 160.0) for one minute from 100 s"),
        );
    }
    let r = s.outputs.timeline_request_sample;
    if !(r.is_finite() && r > 0.0 && r <= 1.0) {
        p.push(
            Problem::new(
                "outputs.timeline_request_sample",
                format!("must be a fraction in (0, 1], got {r}"),
            )
            .hint("0.01 draws one request in a hundred"),
        );
    }
}
