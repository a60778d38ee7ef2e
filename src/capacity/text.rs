//! The table `servesim capacity` prints.

use super::{Capacity, MIN_SCALE};

impl Capacity {
    /// The table `capacity` prints.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "capacity of {}{} ({} seed{}, {} runs, brackets within {} %):",
            self.scenario,
            self.group
                .as_ref()
                .map_or(String::new(), |g| format!(", group {g} alone")),
            self.seeds.len(),
            if self.seeds.len() == 1 { "" } else { "s" },
            self.runs,
            self.tolerance * 100.0
        );
        match self.stated_requests_per_s {
            Some(r) => {
                let _ = writeln!(s, "  the scenario offers {r} req/s (1×)");
            }
            None => {
                let _ = writeln!(
                    s,
                    "  the scenario states no one rate (traces, sessions or staged arrivals): req/s is measured in each run's window"
                );
            }
        }
        let interval = if self.seeds.len() > 1 {
            " (mean [95 % interval])"
        } else {
            ""
        };
        let _ = writeln!(s, "  largest rate{interval} at which");
        for l in &self.limits {
            let what = match l.criterion.strip_prefix("slo:") {
                Some(class) => format!("SLO {class} holds"),
                None => "the deployment keeps up".to_string(),
            };
            let value = match (&l.requests_per_s, &l.scale) {
                (Some(r), Some(x)) => format!(
                    "{}{} req/s  ({}×)",
                    if l.at_least { "≥ " } else { "" },
                    r.show(2),
                    x.show(3)
                ),
                _ => format!("none: fails even at {}× the scenario's rates", MIN_SCALE),
            };
            let _ = writeln!(s, "    {what:<28} {value}");
            if let Some(o) = &l.overloaded_completed_per_s {
                let _ = writeln!(
                    s,
                    "    {:<28} {} req/s completed at the smallest rate that failed",
                    "",
                    o.show(2)
                );
            }
            let _ = writeln!(s, "      ({})", l.holds_when);
        }
        if !self.groups.is_empty() {
            s.push_str(&self.groups_text());
        }
        s
    }

    /// `--each-group`: the sustained rate of each group alone beside the deployment's, then
    /// each group's own table.
    fn groups_text(&self) -> String {
        use std::fmt::Write;
        let sustained = |c: &Capacity| {
            c.limits
                .first()
                .and_then(|l| l.requests_per_s.as_ref())
                .map(|r| (r.show(2), r.mean))
        };
        let mut s = String::from("each group alone under the whole workload keeps up to\n");
        let mut sum = 0.0;
        for g in &self.groups {
            let (shown, mean) = sustained(g).unwrap_or_else(|| ("none".into(), 0.0));
            sum += mean;
            let _ = writeln!(
                s,
                "    {:<28} {shown} req/s",
                g.group.as_deref().unwrap_or("?")
            );
        }
        if let Some((shown, _)) = sustained(self) {
            let _ = writeln!(
                s,
                "    {:<28} {sum:.2} req/s, against {shown} req/s for the deployment",
                "sum of the groups' means"
            );
        }
        for g in &self.groups {
            s.push('\n');
            s.push_str(&g.text());
        }
        s
    }
}
