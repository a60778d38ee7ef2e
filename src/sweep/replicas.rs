//! A sweep with `--replicas K` (K ≥ 2) summarised per point: every metric's mean over the
//! point's successful runs and the 95 % confidence interval of that mean (Student's t over
//! the seeds, [`Estimate`]), in `sweep-points.csv` and in the table `sweep` prints.

use std::collections::BTreeMap;

use super::{METRICS, Plan, display_value};
use crate::interval::Estimate;

/// The per-point file, written beside `sweep.csv` when there are replicas.
pub const FILE: &str = "sweep-points.csv";

/// Columns of `sweep-points.csv`: the point, its values, its runs, then each metric's mean,
/// low and high.
pub fn header(plan: &Plan) -> Vec<String> {
    let mut h = vec!["point".to_string()];
    h.extend(plan.axes.iter().map(|a| a.path.clone()));
    h.extend(["runs", "failed"].map(String::from));
    for m in METRICS {
        h.extend(["mean", "low", "high"].map(|s| format!("{m}.{s}")));
    }
    h
}

/// One point's runs: (point number, its axis values, ok runs' metric values).
struct PointRuns<'a> {
    values: &'a [String],
    runs: usize,
    ok: Vec<&'a [String]>,
}

fn group<'a>(
    plan: &Plan,
    rows: &'a BTreeMap<usize, Vec<String>>,
) -> BTreeMap<usize, PointRuns<'a>> {
    let header = plan.header();
    let status = header.iter().position(|h| h == "status").unwrap_or(0);
    let first_metric = status + 1;
    let axes = plan.axes.len();
    let mut points: BTreeMap<usize, PointRuns<'a>> = BTreeMap::new();
    for (&index, r) in rows {
        let p = points
            .entry(index / plan.replicas.max(1) as usize)
            .or_insert(PointRuns {
                values: &r[1..=axes],
                runs: 0,
                ok: Vec::new(),
            });
        p.runs += 1;
        if r[status] == "ok" {
            p.ok.push(&r[first_metric..first_metric + METRICS.len()]);
        }
    }
    points
}

/// The estimate of metric `k` over a point's ok runs (`None` when no run has a value).
fn estimate(ok: &[&[String]], k: usize) -> Option<Estimate> {
    let values: Vec<f64> = ok.iter().filter_map(|r| r[k].parse().ok()).collect();
    (!values.is_empty()).then(|| Estimate::of(&values))
}

/// The values metric `name` can take, to which `sweep-points.csv` cuts its interval: a
/// share (hit rates, attainment, Jain's index) lies in [0, 1], `fitness` is the user's
/// objective and may be anything, every other metric (counts, rates, latencies, costs) is
/// never negative.
fn range(name: &str) -> (f64, f64) {
    const SHARES: [&str; 7] = [
        "kv.hit_rate",
        "kv.gpu_hit_rate",
        "kv.cpu_hit_rate",
        "kv.thrashing_rate",
        "slo.attainment",
        "fairness.jain_tenant_output_tokens",
        "fairness.jain_instance_completed",
    ];
    if name == "fitness" {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else if SHARES.contains(&name) {
        (0.0, 1.0)
    } else {
        (0.0, f64::INFINITY)
    }
}

/// `sweep-points.csv` bytes.
pub fn to_csv(plan: &Plan, rows: &BTreeMap<usize, Vec<String>>) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header(plan)).map_err(|e| e.to_string())?;
    for (point, p) in group(plan, rows) {
        let mut r = vec![point.to_string()];
        r.extend(p.values.iter().map(|v| display_value(v).to_string()));
        r.push(p.runs.to_string());
        r.push((p.runs - p.ok.len()).to_string());
        for (k, name) in METRICS.iter().enumerate() {
            let (min, max) = range(name);
            match estimate(&p.ok, k).map(|e| e.within(min, max)) {
                Some(e) => {
                    let show = |x: Option<f64>| x.map_or(String::new(), |x| x.to_string());
                    r.extend([e.mean.to_string(), show(e.low), show(e.high)]);
                }
                None => r.extend([String::new(), String::new(), String::new()]),
            }
        }
        w.write_record(r.iter().map(|c| crate::labels::csv_safe(c).into_owned()))
            .map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// The table `sweep` prints with replicas: one line per point, each column `mean ± h` (h the
/// half-width of the 95 % interval).
pub fn table(plan: &Plan, rows: &BTreeMap<usize, Vec<String>>) -> String {
    let metric = |name: &str| METRICS.iter().position(|m| *m == name);
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut head = vec!["point".to_string()];
    head.extend(plan.axes.iter().map(|a| a.path.clone()));
    head.push("runs".into());
    head.extend(super::table::COLUMNS.iter().map(|t| t.0.to_string()));
    lines.push(head);
    for (point, p) in group(plan, rows) {
        let mut line = vec![point.to_string()];
        line.extend(p.values.iter().map(|v| display_value(v).to_string()));
        line.push(if p.ok.len() == p.runs {
            p.runs.to_string()
        } else {
            format!("{} ({} failed)", p.runs, p.runs - p.ok.len())
        });
        for (_, name) in super::table::COLUMNS {
            let cell = match metric(name).and_then(|k| estimate(&p.ok, k)) {
                None if name == "slo.attainment" && !p.ok.is_empty() => "n/a".to_string(),
                None => "–".to_string(),
                Some(e) => {
                    let half = e.high.map_or(0.0, |h| h - e.mean);
                    let d = if name == "slo.attainment" {
                        3
                    } else if e.mean.fract() == 0.0 && half.fract() == 0.0 && e.mean.abs() < 1e12 {
                        0
                    } else if e.mean.abs() >= 100.0 {
                        1
                    } else {
                        3
                    };
                    match e.high {
                        Some(h) => format!("{:.d$} ± {:.d$}", e.mean, h - e.mean, d = d),
                        None => format!("{:.d$}", e.mean, d = d),
                    }
                }
            };
            line.push(cell);
        }
        lines.push(line);
    }
    super::table::layout(&lines, plan.axes.len() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_point_gets_the_mean_and_t_interval_of_its_replicas() {
        let plan = Plan {
            scenario: "s.ron".into(),
            set: vec![],
            axes: vec![super::super::Axis {
                path: "a".into(),
                values: vec!["1".into(), "2".into()],
            }],
            replicas: 3,
            shard: (0, 1),
            inputs: Default::default(),
            version: String::new(),
        };
        let header = plan.header();
        let col = |name: &str| header.iter().position(|h| h == name).unwrap();
        let mut rows = BTreeMap::new();
        // Point 0: TTFT p99 of 1, 2, 3 ms; point 1: one failed run and 10, 10.
        for (i, (status, ttft)) in [
            ("ok", "1"),
            ("ok", "2"),
            ("ok", "3"),
            ("error: x", ""),
            ("ok", "10"),
            ("ok", "10"),
        ]
        .into_iter()
        .enumerate()
        {
            let mut r = vec![String::new(); header.len()];
            r[0] = i.to_string();
            r[1] = if i < 3 { "1" } else { "2" }.into();
            r[col("status")] = status.into();
            r[col("ttft_ms.p99")] = ttft.into();
            if i < 3 {
                r[col("kv.hit_rate")] = ["0.9", "1", "1"][i].into();
                r[col("fitness")] = ["-1", "-2", "-3"][i].into();
            }
            rows.insert(i, r);
        }
        let csv = String::from_utf8(to_csv(&plan, &rows).unwrap()).unwrap();
        let mut reader = csv::Reader::from_reader(csv.as_bytes());
        let h: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        let recs: Vec<Vec<String>> = reader
            .records()
            .map(|r| r.unwrap().iter().map(String::from).collect())
            .collect();
        let at = |r: usize, name: &str| recs[r][h.iter().position(|x| x == name).unwrap()].clone();
        assert_eq!((at(0, "runs"), at(0, "failed")), ("3".into(), "0".into()));
        // mean 2, sd 1, n 3: ± 4.303/√3 = 2.4843; the low end, −0.48 ms, is cut to 0 (a
        // latency is never negative); the table keeps the half-width.
        assert_eq!(at(0, "ttft_ms.p99.mean"), "2");
        assert_eq!(at(0, "ttft_ms.p99.low"), "0");
        let high: f64 = at(0, "ttft_ms.p99.high").parse().unwrap();
        assert!((high - (2.0 + 2.4843)).abs() < 1e-4, "{high}");
        // A hit rate of 0.9, 1, 1: 0.9667 ± 4.303 × 0.0577/√3 = ± 0.1434, cut at 1; fitness
        // (−1, −2, −3) keeps its t interval, −2 ± 2.4843.
        assert_eq!(at(0, "kv.hit_rate.high"), "1");
        let low: f64 = at(0, "kv.hit_rate.low").parse().unwrap();
        assert!((low - (0.96667 - 0.14337)).abs() < 1e-4, "{low}");
        let low: f64 = at(0, "fitness.low").parse().unwrap();
        assert!((low - (-2.0 - 2.4843)).abs() < 1e-4, "{low}");
        assert_eq!((at(1, "runs"), at(1, "failed")), ("3".into(), "1".into()));
        assert_eq!(at(1, "ttft_ms.p99.mean"), "10");
        assert_eq!(at(1, "ttft_ms.p99.high"), "10");
        let t = table(&plan, &rows);
        assert!(t.contains("2.000 ± 2.484"), "{t}");
        assert!(t.contains("3 (1 failed)"), "{t}");
    }
}
