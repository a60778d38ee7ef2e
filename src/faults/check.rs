//! Checks of a scenario's `faults` block.

use crate::scenario::{Problem, Scenario};

/// Each straggler names an instance of the cluster (groups spawn `count`, autoscaled ones
/// their `max`), an ordered window and a slowdown ≥ 1.
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
    for (k, st) in f.stragglers.iter().enumerate() {
        let at = |field: &str| format!("faults.stragglers[{k}].{field}");
        if u64::from(st.instance) >= instances {
            p.push(
                Problem::new(
                    at("instance"),
                    format!(
                        "instance {} does not exist: the cluster has {instances} (0 to {})",
                        st.instance,
                        instances.saturating_sub(1)
                    ),
                )
                .hint("instances are numbered across groups in order, as in requests.csv"),
            );
        }
        for (field, v) in [("from_s", st.from_s), ("until_s", st.until_s)] {
            if !v.is_finite() || v < 0.0 {
                p.push(Problem::new(
                    at(field),
                    format!("must be a finite time ≥ 0 s, got {v}"),
                ));
            }
        }
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
