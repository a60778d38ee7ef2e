//! What `plan` prints and writes: `plan.csv`, `pareto.csv` and the text answer.

use super::search::{Outcome, PlanResult, Status, sized};

/// The columns of `plan.csv` that name a configuration (the report reads them back).
pub const CONFIG_COLUMNS: [&str; 8] = [
    "gpu",
    "tp",
    "pp",
    "max_num_seqs",
    "max_num_batched_tokens",
    "scheduler",
    "routing",
    "pd_split",
];

impl PlanResult {
    /// The best outcome, if any configuration met every SLO.
    pub fn best(&self) -> Option<&Outcome> {
        self.outcomes.first().filter(|o| o.status == Status::Best)
    }

    /// `plan.csv`: one row per configuration.
    pub fn csv(&self) -> Result<Vec<u8>, String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut head: Vec<String> = ["rank"]
            .into_iter()
            .chain(CONFIG_COLUMNS)
            .chain([
                "price_per_gpu_hour",
                "status",
                "instances",
                "gpus",
                "price_per_hour",
                "price_per_million_tokens",
                "ttft_p99_ms",
                "output_tokens_per_s",
                "runs",
            ])
            .map(String::from)
            .collect();
        head.extend(
            self.targets
                .iter()
                .map(|t| format!("attainment.{}", t.class)),
        );
        head.push("reason".into());
        w.write_record(&head).map_err(|e| e.to_string())?;
        let num = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
        for (k, o) in self.outcomes.iter().enumerate() {
            let c = &o.config;
            let t = o.trial.as_ref();
            let mut r = vec![
                (k + 1).to_string(),
                c.gpu.clone(),
                c.tp.to_string(),
                c.pp.to_string(),
                c.max_num_seqs.to_string(),
                c.max_num_batched_tokens.to_string(),
                c.scheduler.clone(),
                c.routing.clone(),
                c.pd_split
                    .map_or(String::new(), |(p, d)| format!("{p}:{d}")),
                c.price_per_gpu_hour.to_string(),
                serde_json::to_value(o.status)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                o.instances.map_or(String::new(), |n| n.to_string()),
                o.instances
                    .map_or(String::new(), |n| (n * c.gpus_per_unit()).to_string()),
                num(o.price_per_hour),
                num(o.price_per_million_tokens),
                num(t.map(|t| t.ttft_p99_ms)),
                num(t.map(|t| t.output_tokens_per_s)),
                o.runs.to_string(),
            ];
            for k in 0..self.targets.len() {
                r.push(num(t.and_then(|t| t.attainment.get(k)).map(|e| e.mean)));
            }
            r.push(o.reason.clone());
            w.write_record(r.iter().map(|c| crate::labels::csv_safe(c).into_owned()))
                .map_err(|e| e.to_string())?;
        }
        w.into_inner().map_err(|e| e.to_string())
    }

    /// `pareto.csv`: the front, cheapest first.
    pub fn pareto_csv(&self) -> Result<Vec<u8>, String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "configuration",
            "instances",
            "gpus",
            "price_per_hour",
            "ttft_p99_ms",
            "output_tokens_per_s",
        ])
        .map_err(|e| e.to_string())?;
        for (k, t) in &self.pareto {
            let c = &self.outcomes[*k].config;
            w.write_record([
                c.label(),
                t.instances.to_string(),
                (t.instances * c.gpus_per_unit()).to_string(),
                t.price_per_hour.to_string(),
                t.ttft_p99_ms.to_string(),
                t.output_tokens_per_s.to_string(),
            ])
            .map_err(|e| e.to_string())?;
        }
        w.into_inner().map_err(|e| e.to_string())
    }

    /// The text `plan` prints.
    pub fn text(&self, runners_up: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let counts = |st: Status| self.outcomes.iter().filter(|o| o.status == st).count();
        // A shard's best is the best of its part only: said, so that it is not read as the
        // plan's answer.
        let (shard, shards) = self.origin.shard;
        let part = if shards > 1 && self.origin.configurations > 0 {
            format!(
                ", shard {shard}/{shards}: {} of the plan's {}",
                self.outcomes.len(),
                crate::scenario::counted(self.origin.configurations as u64, "configuration")
            )
        } else if shards > 1 {
            format!(
                ", shard {shard}/{shards}: {}",
                crate::scenario::counted(self.outcomes.len() as u64, "configuration")
            )
        } else {
            format!(
                ": {}",
                crate::scenario::counted(self.outcomes.len() as u64, "configuration")
            )
        };
        let _ = writeln!(
            s,
            "plan of {} (group {}){part}, {} ({}); {} feasible, {} infeasible, {} dominated, {} excluded",
            self.scenario,
            self.group,
            crate::scenario::counted(u64::from(self.runs), "run"),
            crate::scenario::counted(self.seeds.len() as u64, "seed"),
            counts(Status::Best) + counts(Status::Feasible),
            counts(Status::Infeasible),
            counts(Status::Dominated),
            counts(Status::Excluded),
        );
        let slos: Vec<String> = self
            .targets
            .iter()
            .map(|t| format!("{} ({} for {} %)", t.class, t.targets, t.attainment * 100.0))
            .collect();
        let _ = writeln!(
            s,
            "SLOs: sustained{}",
            if slos.is_empty() {
                " (no class declares a target)".to_string()
            } else {
                format!(", {}", slos.join(", "))
            }
        );
        let Some(best) = self.best() else {
            let _ = writeln!(
                s,
                "no configuration {}meets every SLO within plan.max_instances{}; why each failed:",
                if shards > 1 { "of this shard " } else { "" },
                self.bound
                    .map_or(String::new(), |b| format!(" and plan.bound ({b:.2}/h)"))
            );
            for o in self.outcomes.iter().take(runners_up) {
                let _ = writeln!(s, "  {}: {}", o.config.label(), o.reason);
            }
            if self.outcomes.len() > runners_up {
                let _ = writeln!(
                    s,
                    "  … {} more in plan.csv (--out)",
                    self.outcomes.len() - runners_up
                );
            }
            return s;
        };
        let c = &best.config;
        let n = best.instances.unwrap_or(0);
        let _ = writeln!(
            s,
            "best{}: {n} × {} = {} GPUs, {:.2}/h{}",
            if shards > 1 {
                " of this shard (`servesim merge` the shards' --out directories for the plan's)"
            } else {
                ""
            },
            c.label(),
            n * c.gpus_per_unit(),
            best.price_per_hour.unwrap_or(0.0),
            best.price_per_million_tokens
                .map_or(String::new(), |m| format!(
                    ", {m:.3} per million output tokens"
                ))
        );
        if let Some(t) = &best.trial {
            let margins: Vec<String> = self
                .targets
                .iter()
                .zip(&t.attainment)
                .map(|(tg, a)| {
                    format!(
                        "{} attained by {:.2} % (target {} %)",
                        tg.class,
                        a.mean * 100.0,
                        tg.attainment * 100.0
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "  margin: p99 TTFT {:.1} ms; completes {:.1} % of arrivals{}",
                t.ttft_p99_ms,
                t.served_share * 100.0,
                if margins.is_empty() {
                    String::new()
                } else {
                    format!("; {}", margins.join("; "))
                }
            );
        }
        match &best.one_fewer {
            Some(f) => {
                let _ = writeln!(
                    s,
                    "  with {} it fails: {}",
                    sized(f.instances, c),
                    f.failed.as_deref().unwrap_or("")
                );
            }
            None if n == 1 => {
                let _ = writeln!(s, "  (one instance is the fewest there can be)");
            }
            None => {}
        }
        let _ = writeln!(s, "Pareto front (price per hour against p99 TTFT):");
        for (k, t) in &self.pareto {
            let _ = writeln!(
                s,
                "  {:>9.2}/h  {:>9.1} ms  {} × {}",
                t.price_per_hour,
                t.ttft_p99_ms,
                t.instances,
                self.outcomes[*k].config.label()
            );
        }
        let _ = writeln!(s, "runners-up:");
        for o in self.outcomes.iter().skip(1).take(runners_up) {
            let _ = writeln!(s, "  {}: {}", o.config.label(), o.reason);
        }
        s
    }
}
