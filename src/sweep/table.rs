//! The comparison table `sweep` and `merge` print.

use std::collections::BTreeMap;

use super::display_value;

/// Columns of the one-screen comparison table: (header, `sweep.csv` column).
pub(super) const COLUMNS: [(&str, &str); 8] = [
    ("done", "requests.completed"),
    ("req/s", "throughput.requests_per_s"),
    ("tok/s", "throughput.output_tokens_per_s"),
    ("TTFT p50", "ttft_ms.p50"),
    ("TTFT p99", "ttft_ms.p99"),
    ("E2E p99", "e2e_ms.p99"),
    ("SLO", "slo.attainment"),
    ("cost", "cost.total"),
];

/// The comparison table printed on stdout: one line per row of `sweep.csv`.
pub fn table(header: &[String], rows: &BTreeMap<usize, Vec<String>>) -> String {
    let col = |name: &str| header.iter().position(|h| h == name);
    let status = col("status").unwrap_or(0);
    let varied: Vec<usize> = (1..col("replica").unwrap_or(1)).collect();
    // Each run's seed follows its replica number (`seed`, or `run_seed` when seed is varied).
    let seed = col("replica").map(|c| c + 1);
    let replicas = rows
        .values()
        .any(|r| col("replica").is_some_and(|c| r[c] != "0"));
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut head = vec!["point".to_string()];
    head.extend(varied.iter().map(|&c| header[c].clone()));
    if replicas {
        head.push(seed.map_or("seed", |c| header[c].as_str()).to_string());
    }
    head.extend(COLUMNS.iter().map(|t| t.0.to_string()));
    lines.push(head);
    for r in rows.values() {
        let mut line = vec![r[0].clone()];
        line.extend(varied.iter().map(|&c| display_value(&r[c]).to_string()));
        if replicas {
            line.push(seed.map_or(String::new(), |c| r[c].clone()));
        }
        if r[status] != "ok" {
            line.push(r[status].clone());
        } else {
            for (_, metric) in COLUMNS {
                let v = col(metric).map_or("", |c| r[c].as_str());
                line.push(match v.parse::<f64>() {
                    Err(_) if metric == "slo.attainment" && v.is_empty() => "n/a".into(),
                    Ok(x) if metric == "slo.attainment" => format!("{x:.3}"),
                    Ok(x) if x.fract() == 0.0 && x.abs() < 1e12 => format!("{x:.0}"),
                    Ok(x) if x.abs() >= 100.0 => format!("{x:.1}"),
                    Ok(x) => format!("{x:.3}"),
                    Err(_) => v.to_string(),
                });
            }
        }
        lines.push(line);
    }
    layout(&lines, varied.len() + 1)
}

/// Lines of cells as aligned text: the first `left` columns left-aligned, the rest right; a
/// line's last cell is written as it is (an error message does not widen its column).
pub(super) fn layout(lines: &[Vec<String>], left: usize) -> String {
    use std::fmt::Write;
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|k| {
            lines
                .iter()
                .filter(|l| l.len() > k + 1 || k + 1 == lines[0].len())
                .filter_map(|l| l.get(k))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for l in lines {
        for (k, cell) in l.iter().enumerate() {
            let w = widths.get(k).copied().unwrap_or(0);
            if k + 1 == l.len() {
                let _ = write!(s, "{cell}");
            } else if k < left {
                let _ = write!(s, "{cell:<w$}  ");
            } else {
                let _ = write!(s, "{cell:>w$}  ");
            }
        }
        s.push('\n');
    }
    s
}
