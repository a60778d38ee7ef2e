//! A sweep's page: any metric against any swept axis, points with their intervals, every
//! run's configuration beside its results, and each run's per-instance load.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use super::super::chart::{BarChart, LineChart, Series, colour, esc, label};
use super::super::page::{ReportError, page as whole_page, read_err};
use super::table::{MAX_TABLE_ROWS, Table, cell, more_rows, read_json};
use crate::interval::Estimate;
use crate::sweep::{INSTANCE_COLUMNS, METRICS};

/// Runs and instances in the per-instance load tables at most.
const MAX_LOAD_RUNS: usize = 500;
const MAX_LOAD_INSTANCES: usize = 64;

/// Headline columns of the per-run and per-point tables: (heading, `sweep.csv` column).
const HEADLINE: [(&str, &str); 10] = [
    ("done", "requests.completed"),
    ("req/s", "throughput.requests_per_s"),
    ("tok/s", "throughput.output_tokens_per_s"),
    ("TTFT p50", "ttft_ms.p50"),
    ("TTFT p99", "ttft_ms.p99"),
    ("ITL p99", "itl_ms.p99"),
    ("E2E p99", "e2e_ms.p99"),
    ("SLO", "slo.attainment"),
    ("KV hit", "kv.hit_rate"),
    ("cost", "cost.total"),
];

/// One point of a sweep: its axis values and the rows of its runs.
struct Point {
    values: Vec<String>,
    runs: Vec<usize>,
}

/// A sweep as the page needs it.
struct Sweep {
    table: Table,
    /// Columns of the axes (between `point` and `replica`).
    axes: Vec<usize>,
    status: usize,
    points: Vec<Point>,
}

impl Sweep {
    fn read(dir: &Path) -> Result<Sweep, ReportError> {
        let path = dir.join("sweep.csv");
        let table = Table::read(&path)?;
        let replica = table.need(&path, "replica")?;
        let status = table.need(&path, "status")?;
        let axes: Vec<usize> = (1..replica).collect();
        let mut points: Vec<Point> = Vec::new();
        let mut index: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        for (k, r) in table.rows.iter().enumerate() {
            crate::sweep::check_row(&table.header, r)
                .map_err(|e| read_err(&path, format!("line {}: {e}", k + 2)))?;
            let values: Vec<String> = axes.iter().map(|&c| r[c].clone()).collect();
            let p = *index.entry(values.clone()).or_insert_with(|| {
                points.push(Point {
                    values,
                    runs: Vec::new(),
                });
                points.len() - 1
            });
            points[p].runs.push(k);
        }
        Ok(Sweep {
            table,
            axes,
            status,
            points,
        })
    }

    fn ok(&self, row: usize) -> bool {
        self.table.rows[row][self.status] == "ok"
    }

    /// A metric's values over a point's successful runs.
    fn values(&self, p: &Point, col: usize) -> Vec<f64> {
        p.runs
            .iter()
            .filter(|&&r| self.ok(r))
            .filter_map(|&r| self.table.rows[r][col].parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .collect()
    }

    fn mean(&self, p: &Point, col: usize) -> f64 {
        let v = self.values(p, col);
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }

    /// The metrics with a value in some run, in [`METRICS`] order: (name, column).
    fn metrics(&self) -> Vec<(&'static str, usize)> {
        METRICS
            .iter()
            .filter_map(|m| Some((*m, self.table.col(m)?)))
            .filter(|&(_, c)| self.table.rows.iter().any(|r| !r[c].is_empty()))
            .collect()
    }

    fn axis_name(&self, a: usize) -> &str {
        &self.table.header[self.axes[a]]
    }

    /// The distinct values of axis `a`, in the order the sweep ran them.
    fn axis_values(&self, a: usize) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.values[a]) {
                seen.push(p.values[a].clone());
            }
        }
        seen
    }

    /// The chart of metric `col` (named `metric`) against axis `a`: a line per combination
    /// of the other axes' values when the axis is numeric, else grouped bars.
    fn chart(&self, a: usize, metric: &str, col: usize) -> String {
        let xs = self.axis_values(a);
        let others: Vec<usize> = (0..self.axes.len()).filter(|&b| b != a).collect();
        let mut combos: Vec<Vec<String>> = Vec::new();
        for p in &self.points {
            let c: Vec<String> = others.iter().map(|&b| p.values[b].clone()).collect();
            if !combos.contains(&c) {
                combos.push(c);
            }
        }
        let combo_name = |c: &[String]| {
            if c.is_empty() {
                metric.to_string()
            } else {
                others
                    .iter()
                    .zip(c)
                    .map(|(&b, v)| format!("{}={v}", short(self.axis_name(b))))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let at = |x: &str, c: &[String]| {
            self.points
                .iter()
                .find(|p| p.values[a] == x && others.iter().zip(c).all(|(&b, v)| p.values[b] == *v))
                .map_or(f64::NAN, |p| self.mean(p, col))
        };
        let title = format!("{metric} against {}", short(self.axis_name(a)));
        let numeric: Option<Vec<f64>> = xs.iter().map(|x| x.parse::<f64>().ok()).collect();
        match numeric {
            Some(nx) if xs.len() > 1 => {
                let series = combos
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut points: Vec<(f64, f64)> = xs
                            .iter()
                            .zip(&nx)
                            .map(|(x, &v)| (v, at(x, c)))
                            .filter(|p| p.1.is_finite())
                            .collect();
                        points.sort_by(|p, q| p.0.total_cmp(&q.0));
                        Series {
                            name: combo_name(c),
                            colour: colour(i),
                            points,
                            dashed: false,
                            markers: false,
                        }
                    })
                    .collect();
                LineChart {
                    title,
                    x_label: self.axis_name(a).to_string(),
                    y_label: metric.to_string(),
                    series,
                    ..Default::default()
                }
                .svg()
            }
            _ => BarChart {
                title,
                y_label: metric.to_string(),
                categories: xs.clone(),
                bars: combos
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        (
                            combo_name(c),
                            colour(i),
                            xs.iter().map(|x| at(x, c)).collect(),
                        )
                    })
                    .collect(),
                legend: true,
            }
            .svg(),
        }
    }
}

/// The last part of a field path (`workload.clients[0].rate_per_s` → `rate_per_s`) for
/// titles and legends; tables and axis labels keep the whole path.
fn short(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// Shows the chart of the metric and axis chosen in the two selects.
const PICK_SCRIPT: &str = r#"
(function(){
  var m=document.getElementById('pick-metric'),a=document.getElementById('pick-axis');
  if(!m||!a){return;}
  function show(){
    document.querySelectorAll('figure.by-axis').forEach(function(f){
      f.hidden=!(f.getAttribute('data-metric')===m.value&&f.getAttribute('data-axis')===a.value);
    });
  }
  m.addEventListener('change',show);a.addEventListener('change',show);show();
})();
"#;

pub(super) fn page(dir: &Path) -> Result<String, ReportError> {
    let sweep = Sweep::read(dir)?;
    let meta = dir.join("sweep.json");
    let meta = if meta.is_file() {
        Some(read_json(&meta)?)
    } else {
        None
    };
    let scenario = meta
        .as_ref()
        .and_then(|m| m.get("scenario"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let replicas = meta
        .as_ref()
        .and_then(|m| m.get("replicas"))
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let failed = (0..sweep.table.rows.len())
        .filter(|&r| !sweep.ok(r))
        .count();
    // A shard holds part of the sweep's points (`shard`: [I, N]): said, as a plan shard's is.
    let shard = meta
        .as_ref()
        .and_then(|m| m.get("shard"))
        .and_then(|s| Some((s.get(0)?.as_u64()?, s.get(1)?.as_u64()?)))
        .filter(|&(_, n)| n > 1)
        .map_or(String::new(), |(i, n)| {
            format!(" (shard {i}/{n}: <code>servesim merge</code> the shards for the whole sweep)")
        });
    let header = format!(
        "<p>sweep of {}{shard}: {} run{} of {} point{}{}{}; axes: {}</p>",
        esc(&scenario),
        sweep.table.rows.len(),
        if sweep.table.rows.len() == 1 { "" } else { "s" },
        sweep.points.len(),
        if sweep.points.len() == 1 { "" } else { "s" },
        if replicas > 1 {
            format!(" ({replicas} seeds each)")
        } else {
            String::new()
        },
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        },
        (0..sweep.axes.len())
            .map(|a| format!(
                "<code>{}</code> = {}",
                esc(sweep.axis_name(a)),
                esc(&sweep.axis_values(a).join(", "))
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let mut body = String::new();
    // Charts of every metric against every axis; the selects show one at a time.
    let metrics = sweep.metrics();
    let default_metric = if metrics.iter().any(|m| m.0 == "ttft_ms.p99") {
        "ttft_ms.p99"
    } else {
        metrics.first().map_or("", |m| m.0)
    };
    if !sweep.axes.is_empty() && !metrics.is_empty() {
        let _ = write!(
            body,
            r#"<section id="by-axis"><h2>A metric against a swept axis</h2><p><label>metric <select id="pick-metric">"#
        );
        for (m, _) in &metrics {
            let _ = write!(
                body,
                r#"<option value="{m}"{}>{m}</option>"#,
                if *m == default_metric {
                    " selected"
                } else {
                    ""
                }
            );
        }
        body.push_str(r#"</select></label> <label>against <select id="pick-axis">"#);
        for a in 0..sweep.axes.len() {
            let _ = write!(
                body,
                r#"<option value="{a}">{}</option>"#,
                esc(sweep.axis_name(a))
            );
        }
        let _ = write!(
            body,
            r#"</select></label></p><p class="note">Each value is the mean over the point's successful runs{}; one line (or bar) per value of the other axes.</p><div class="grid">"#,
            if replicas > 1 {
                " (its 95 % interval is in the points table below)"
            } else {
                ""
            }
        );
        for a in 0..sweep.axes.len() {
            for &(m, col) in &metrics {
                let _ = write!(
                    body,
                    r#"<figure class="by-axis" data-metric="{m}" data-axis="{a}"{}>{}</figure>"#,
                    if m == default_metric && a == 0 {
                        ""
                    } else {
                        " hidden"
                    },
                    sweep.chart(a, m, col)
                );
            }
        }
        body.push_str("</div></section>");
    }
    if replicas > 1 {
        body.push_str(&points_table(&sweep));
    }
    body.push_str(&runs_table(&sweep));
    body.push_str(&load_tables(&sweep));
    Ok(whole_page(
        &format!("sweep of {scenario}"),
        &header,
        &body,
        PICK_SCRIPT,
    ))
}

/// The axis-value cells of a point.
fn axis_cells(s: &mut String, values: &[String]) {
    for v in values {
        let _ = write!(s, "<td>{}</td>", esc(v));
    }
}

fn axis_heads(s: &mut String, sweep: &Sweep) {
    for a in 0..sweep.axes.len() {
        let _ = write!(s, "<th>{}</th>", esc(sweep.axis_name(a)));
    }
}

/// Per point: each headline metric's mean and 95 % interval over its seeds.
fn points_table(sweep: &Sweep) -> String {
    let mut s = String::from(
        r#"<section id="points"><h2>Points: mean ± 95 % half-width over seeds</h2><table class="points"><thead><tr><th>point</th>"#,
    );
    axis_heads(&mut s, sweep);
    s.push_str("<th>runs</th><th>failed</th>");
    for (h, _) in HEADLINE {
        let _ = write!(s, "<th>{h}</th>");
    }
    s.push_str("</tr></thead><tbody>");
    for (k, p) in sweep.points.iter().enumerate().take(MAX_TABLE_ROWS) {
        let _ = write!(s, "<tr><th>{k}</th>");
        axis_cells(&mut s, &p.values);
        let ok = p.runs.iter().filter(|&&r| sweep.ok(r)).count();
        let _ = write!(s, "<td>{}</td><td>{}</td>", p.runs.len(), p.runs.len() - ok);
        for (_, m) in HEADLINE {
            let v = sweep
                .table
                .col(m)
                .map(|c| sweep.values(p, c))
                .unwrap_or_default();
            let text = if v.is_empty() {
                "–".to_string()
            } else {
                let e = Estimate::of(&v);
                let d = if e.mean.abs() >= 100.0 { 1 } else { 3 };
                match e.high {
                    Some(h) => format!("{:.d$} ± {:.d$}", e.mean, h - e.mean),
                    None => format!("{:.d$}", e.mean),
                }
            };
            let _ = write!(s, "<td>{text}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    more_rows(&mut s, sweep.points.len(), "sweep-points.csv");
    s.push_str("</section>");
    s
}

/// Every run: its configuration (point, axis values, replica, seed) beside its results.
fn runs_table(sweep: &Sweep) -> String {
    let t = &sweep.table;
    let mut s = String::from(
        r#"<section id="runs"><h2>Runs: configuration and results</h2><table class="runs"><thead><tr><th>run</th>"#,
    );
    axis_heads(&mut s, sweep);
    // Each run's seed follows its replica (`seed`, or `run_seed` when seed is itself varied).
    let replica = t.col("replica");
    let seed = replica.map(|c| c + 1);
    let _ = write!(
        s,
        "<th>replica</th><th>{}</th><th>status</th>",
        seed.map_or("seed", |c| t.header[c].as_str())
    );
    for (h, _) in HEADLINE {
        let _ = write!(s, "<th>{h}</th>");
    }
    s.push_str("</tr></thead><tbody>");
    let col = |name: &str| t.col(name);
    for r in t.rows.iter().take(MAX_TABLE_ROWS) {
        let _ = write!(s, "<tr><th>{}</th>", esc(&r[0]));
        let values: Vec<String> = sweep.axes.iter().map(|&c| r[c].clone()).collect();
        axis_cells(&mut s, &values);
        for c in [replica, seed] {
            let _ = write!(s, "<td>{}</td>", c.map_or("–".into(), |c| esc(&r[c])));
        }
        let _ = write!(s, "<td>{}</td>", esc(&r[sweep.status]));
        for (_, m) in HEADLINE {
            let _ = write!(s, "<td>{}</td>", col(m).map_or("–".into(), |c| cell(&r[c])));
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    more_rows(&mut s, t.rows.len(), "sweep.csv");
    s.push_str("</section>");
    s
}

/// Per-instance load of every run (the `instances.*` columns): requests completed, busy
/// fraction and KV hit rate per instance, with the spread (max ÷ mean) that explains a
/// routing result; and a chart of requests per instance for up to 12 runs.
fn load_tables(sweep: &Sweep) -> String {
    let t = &sweep.table;
    let cols: Vec<Option<usize>> = INSTANCE_COLUMNS.iter().map(|c| t.col(c)).collect();
    let Some(completed) = cols[0] else {
        return String::new();
    };
    let split = |r: &[String], c: Option<usize>| -> Vec<f64> {
        c.map(|c| {
            r[c].split_whitespace()
                .map(|v| v.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .unwrap_or_default()
    };
    let runs: Vec<&Vec<String>> = t.rows.iter().filter(|r| !r[completed].is_empty()).collect();
    if runs.is_empty() {
        return String::new();
    }
    let width = runs
        .iter()
        .map(|r| split(r, cols[0]).len())
        .max()
        .unwrap_or(0)
        .min(MAX_LOAD_INSTANCES);
    let mut s = String::from(
        r#"<section id="instance-load"><h2>Per-instance load</h2><p class="note">Spread is the busiest instance's value over the mean across instances (1 = even).</p>"#,
    );
    let run_label = |r: &[String]| {
        let mut parts: Vec<String> = sweep
            .axes
            .iter()
            .map(|&c| format!("{}={}", short(&t.header[c]), r[c]))
            .collect();
        if let Some(c) = t.col("replica").filter(|&c| r[c] != "0") {
            parts.push(format!("replica {}", r[c]));
        }
        format!("run {}: {}", r[0], parts.join(", "))
    };
    // Requests per instance, one bar per run, for a first look.
    let first_seed = |r: &[String]| t.col("replica").is_none_or(|c| r[c] == "0");
    let shown: Vec<&&Vec<String>> = runs.iter().filter(|r| first_seed(r)).take(12).collect();
    if width <= 32 {
        let chart = BarChart {
            title: "Requests completed per instance".into(),
            y_label: "requests".into(),
            categories: (0..width).map(|i| i.to_string()).collect(),
            bars: shown
                .iter()
                .enumerate()
                .map(|(i, r)| (run_label(r), colour(i), split(r, cols[0])))
                .collect(),
            legend: true,
        };
        let _ = write!(s, r#"<div class="grid">{}</div>"#, chart.svg());
    }
    for (q, (title, digits)) in [
        ("requests completed", 0usize),
        ("busy fraction", 3),
        ("KV hit rate", 3),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = write!(
            s,
            r#"<table class="load"><caption>{title} per instance</caption><thead><tr><th>run</th>"#
        );
        for i in 0..width {
            let _ = write!(s, "<th>{i}</th>");
        }
        s.push_str("<th>spread</th></tr></thead><tbody>");
        for r in runs.iter().take(MAX_LOAD_RUNS) {
            let v = split(r, cols[q]);
            let _ = write!(s, "<tr><th>{}</th>", esc(&run_label(r)));
            for i in 0..width {
                let _ = write!(
                    s,
                    "<td>{}</td>",
                    v.get(i)
                        .filter(|x| x.is_finite())
                        .map_or("–".into(), |x| format!("{x:.digits$}"))
                );
            }
            let _ = write!(s, "<td>{}</td></tr>", spread(&v).map_or("–".into(), label));
        }
        s.push_str("</tbody></table>");
    }
    if runs.len() > MAX_LOAD_RUNS {
        let _ = write!(
            s,
            r#"<p class="note">The first {MAX_LOAD_RUNS} of {} runs; every run is in sweep.csv.</p>"#,
            runs.len()
        );
    }
    s.push_str("</section>");
    s
}

/// The largest value over the mean (`None` without values or with a zero mean).
fn spread(v: &[f64]) -> Option<f64> {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (!v.is_empty() && mean > 0.0).then(|| v.iter().copied().fold(f64::MIN, f64::max) / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_busiest_over_the_mean() {
        assert_eq!(spread(&[1.0, 3.0]), Some(1.5));
        assert_eq!(spread(&[2.0, 2.0, 2.0]), Some(1.0));
        assert_eq!(spread(&[0.0, 0.0]), None);
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[f64::NAN, 4.0]), Some(1.0));
    }
}
