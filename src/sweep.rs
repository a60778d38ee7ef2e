//! Parameter sweeps: the cartesian product of `--vary PATH=[v1,v2,...]` lists over one
//! scenario, run in parallel, one `sweep.csv` row per point (the varied values and every
//! scalar of the point's summary). A sweep can be split into shards (`--shard I/N` runs the
//! points whose index is I modulo N) and the shards' results merged into the `sweep.csv` a
//! single run gives.
//!
//! Every point is deterministic on its own: its scenario is the base scenario with the
//! point's values set, its seed the scenario's (or the varied `seed`), plus the replica
//! number. Which thread or machine runs it does not matter, so points share random
//! numbers across policies (differences come from the policy, not from the draw).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::metrics::Summary;

/// One `--vary`: a field path and the RON values it takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    pub path: String,
    pub values: Vec<String>,
}

/// What a sweep is: written to `sweep.json` so shards can be checked before merging.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The scenario file as given.
    pub scenario: String,
    /// `--set` overrides applied to every point.
    pub set: Vec<(String, String)>,
    pub axes: Vec<Axis>,
    /// Runs per point, with seeds `seed`, `seed + 1`, ….
    pub replicas: u32,
    /// This part's shard (index, count); (0, 1) for a whole sweep.
    pub shard: (u32, u32),
}

/// One run of a sweep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// Row number in the whole sweep (point × replicas + replica).
    pub index: usize,
    pub replica: u32,
    /// The value of each axis.
    pub values: Vec<String>,
}

/// Splits `PATH=[v1, v2, ...]` into the path and its RON values (commas inside brackets,
/// parentheses and strings do not split).
pub fn parse_axis(arg: &str) -> Result<Axis, String> {
    let example = "e.g. --vary 'policies.routing=[\"round_robin\",\"least_loaded\"]' or --vary cluster.groups[0].count=[2,4,8]";
    let Some((path, list)) = arg.split_once('=') else {
        return Err(format!(
            "--vary {arg}: expected PATH=[v1,v2,...], {example}"
        ));
    };
    let list = list.trim();
    let Some(inner) = list.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
        return Err(format!(
            "--vary {arg}: the values must be a bracketed list, {example}"
        ));
    };
    let mut values: Vec<String> = split_top(inner).into_iter().map(String::from).collect();
    if values.last().is_some_and(String::is_empty) {
        values.pop(); // a trailing comma
    }
    if values.is_empty() || values.iter().any(String::is_empty) {
        return Err(format!(
            "--vary {arg}: every value must be non-empty and there must be at least one, {example}"
        ));
    }
    let axis = Axis {
        path: path.trim().to_string(),
        values,
    };
    // Linked paths: every value must be a tuple with one element per path.
    for v in &axis.values {
        axis.assignments(v)
            .map_err(|e| format!("--vary {arg}: {e}"))?;
    }
    Ok(axis)
}

/// Splits `text` at top-level commas (not inside brackets, parentheses or strings).
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut quote) = (0i32, 0usize, None::<u8>);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(_) if c == b'\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'"' => quote = Some(c),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b',' if depth == 0 => {
                    parts.push(text[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            },
        }
        i += 1;
    }
    parts.push(text[start..].trim());
    parts
}

impl Axis {
    /// The field assignments of one of this axis's values. An axis over several linked paths
    /// (`a,b=[(1,2),(3,4)]`) sets each path to its element of the value's tuple, so fields
    /// that only make sense together vary together.
    pub fn assignments(&self, value: &str) -> Result<Vec<(String, String)>, String> {
        let paths = split_top(&self.path);
        if paths.len() == 1 {
            return Ok(vec![(self.path.clone(), value.to_string())]);
        }
        let parts = value
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .map(split_top)
            .filter(|p| p.len() == paths.len() && p.iter().all(|x| !x.is_empty()))
            .ok_or_else(|| {
                format!(
                    "{value} must be a tuple of {} values, one per linked path, e.g. ({})",
                    paths.len(),
                    vec!["…"; paths.len()].join(", ")
                )
            })?;
        Ok(paths
            .iter()
            .zip(parts)
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect())
    }
}

/// Parses `I/N` (0 ≤ I < N).
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--shard {s}: expected I/N with 0 ≤ I < N, e.g. --shard 0/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u32, u32) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The most runs one `sweep` invocation (one shard) takes on: more is split with `--shard`.
pub const MAX_RUNS_PER_SHARD: u64 = 100_000;

impl Plan {
    /// Runs in the whole sweep (call [`check_size`](Self::check_size) first: it may not fit).
    pub fn len(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product::<usize>() * self.replicas as usize
    }

    /// Checks the plan before anything is allocated for it: replicas ≥ 1, a shard I/N with
    /// I < N, and at most [`MAX_RUNS_PER_SHARD`] runs in this shard. Returns the runs in the
    /// whole sweep.
    pub fn check_size(&self) -> Result<u64, String> {
        let (i, n) = self.shard;
        if n == 0 || i >= n {
            return Err(format!("shard {i}/{n}: expected I/N with 0 ≤ I < N"));
        }
        if self.replicas == 0 {
            return Err("replicas must be at least 1".into());
        }
        let points = self
            .axes
            .iter()
            .try_fold(1u64, |acc, a| acc.checked_mul(a.values.len() as u64));
        let total = points.and_then(|p| p.checked_mul(u64::from(self.replicas)));
        let per_shard = total.map(|t| (t + u64::from(n) - 1 - u64::from(i)) / u64::from(n));
        match (points, total, per_shard) {
            (Some(_), Some(total), Some(runs))
                if runs <= MAX_RUNS_PER_SHARD && usize::try_from(total).is_ok() =>
            {
                Ok(total)
            }
            _ => {
                let shown =
                    |x: Option<u64>| x.map_or("more than 2^64".to_string(), |v| v.to_string());
                let shards = total.map_or("many".into(), |t| {
                    t.div_ceil(MAX_RUNS_PER_SHARD).to_string()
                });
                Err(format!(
                    "this sweep is {} runs ({} points × {} replicas){}; one invocation runs at most {MAX_RUNS_PER_SHARD}: split it with --shard I/{shards} (run each part, then `servesim merge` them), or vary fewer values",
                    shown(total),
                    shown(points),
                    self.replicas,
                    if n > 1 {
                        format!(", {} in shard {i}/{n}", shown(per_shard))
                    } else {
                        String::new()
                    },
                ))
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The runs of this shard, in order; the last axis varies fastest, replicas innermost.
    pub fn points(&self) -> Vec<Point> {
        let (shard, shards) = (self.shard.0 as usize, self.shard.1.max(1) as usize);
        (shard..self.len())
            .step_by(shards)
            .map(|index| {
                let replica = (index % self.replicas as usize) as u32;
                let mut rest = index / self.replicas as usize;
                let mut values = vec![String::new(); self.axes.len()];
                for (k, axis) in self.axes.iter().enumerate().rev() {
                    values[k] = axis.values[rest % axis.values.len()].clone();
                    rest /= axis.values.len();
                }
                Point {
                    index,
                    replica,
                    values,
                }
            })
            .collect()
    }

    /// The overrides of one point: the `--set`s, then its values.
    pub fn overrides(&self, point: &Point) -> Vec<(String, String)> {
        let mut o = self.set.clone();
        for (a, v) in self.axes.iter().zip(&point.values) {
            o.extend(a.assignments(v).expect("checked when the axis was parsed"));
        }
        o
    }

    /// The header of `sweep.csv`.
    pub fn header(&self) -> Vec<String> {
        let mut h = vec!["point".to_string()];
        h.extend(self.axes.iter().map(|a| a.path.clone()));
        h.extend(["replica", "seed", "status"].map(String::from));
        h.extend(METRICS.iter().map(|m| m.to_string()));
        h.push("extras".into());
        h
    }
}

/// A value as a table shows it: strings without their quotes.
pub fn display_value(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(v)
}

/// Every scalar of a summary, as dotted paths (arrays — instances, tenants, groups,
/// warnings — and the per-reason rejection map left out so every point has the same
/// columns).
pub const METRICS: [&str; 64] = [
    "requests.injected",
    "requests.completed",
    "requests.rejected",
    "requests.dropped",
    "requests.timed_out",
    "requests.queued",
    "requests.running",
    "requests.in_transit",
    "sim_duration_s",
    "ticks",
    "throughput.requests_per_s",
    "throughput.input_tokens_per_s",
    "throughput.output_tokens_per_s",
    "throughput.input_tokens",
    "throughput.output_tokens",
    "ttft_ms.mean",
    "ttft_ms.p50",
    "ttft_ms.p90",
    "ttft_ms.p95",
    "ttft_ms.p99",
    "ttft_ms.max",
    "itl_ms.mean",
    "itl_ms.p50",
    "itl_ms.p90",
    "itl_ms.p95",
    "itl_ms.p99",
    "itl_ms.max",
    "e2e_ms.mean",
    "e2e_ms.p50",
    "e2e_ms.p90",
    "e2e_ms.p95",
    "e2e_ms.p99",
    "e2e_ms.max",
    "scheduling_delay_ms.mean",
    "scheduling_delay_ms.p50",
    "scheduling_delay_ms.p99",
    "preemptions",
    "kv.hit_rate",
    "kv.gpu_hit_rate",
    "kv.cpu_hit_rate",
    "kv.offloaded_blocks",
    "kv.reloaded_blocks",
    "kv.thrashing_rate",
    "slo.good",
    "slo.attainment",
    "slo.goodput_per_s",
    "fairness.jain_tenant_output_tokens",
    "fairness.jain_instance_completed",
    "fairness.cov_instance_completed",
    "routing.decisions",
    "routing.mean_regret",
    "routing.max_regret",
    "cost.gpu_hours",
    "cost.total",
    "cost.per_million_output_tokens",
    "fitness",
    "ttft_ms.count",
    "e2e_ms.count",
    "itl_ms.count",
    "disaggregation.transfers",
    "disaggregation.transfer_ms.mean",
    "disaggregation.transfer_ms.p99",
    "disaggregation.decode_kv_wait_ms.p99",
    "disaggregation.waited_for_kv",
];

/// The metric columns of one summary, in [`METRICS`] order.
pub fn metric_values(summary: &Summary) -> Vec<String> {
    let json = serde_json::to_value(summary).unwrap_or(Value::Null);
    METRICS
        .iter()
        .map(|m| {
            let pointer = format!("/{}", m.replace('.', "/"));
            match json.pointer(&pointer) {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                _ => String::new(),
            }
        })
        .collect()
}

/// The `extras` column: the results of systems of one's own (`SummaryExtras`) as compact
/// JSON, empty when there are none.
pub fn extras_value(summary: &Summary) -> String {
    if summary.extras.is_empty() {
        return String::new();
    }
    serde_json::to_string(&summary.extras).unwrap_or_default()
}

/// One finished row of `sweep.csv`.
pub fn row(
    plan: &Plan,
    point: &Point,
    seed: u64,
    outcome: &Result<Summary, String>,
) -> Vec<String> {
    let mut r = vec![point.index.to_string()];
    r.extend(point.values.iter().map(|v| display_value(v).to_string()));
    r.push(point.replica.to_string());
    r.push(seed.to_string());
    match outcome {
        Ok(summary) => {
            r.push("ok".into());
            r.extend(metric_values(summary));
            r.push(extras_value(summary));
        }
        Err(e) => {
            r.push(format!("error: {e}"));
            r.extend(METRICS.iter().map(|_| String::new()));
            r.push(String::new());
        }
    }
    debug_assert_eq!(r.len(), plan.header().len());
    r
}

/// `sweep.csv` bytes: the header, then the rows sorted by point.
pub fn to_csv(plan: &Plan, rows: &BTreeMap<usize, Vec<String>>) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(plan.header()).map_err(|e| e.to_string())?;
    for r in rows.values() {
        w.write_record(r.iter().map(|c| crate::labels::csv_safe(c).into_owned()))
            .map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// Columns of the one-screen comparison table: (header, `sweep.csv` column).
const TABLE: [(&str, &str); 8] = [
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
    use std::fmt::Write;
    let col = |name: &str| header.iter().position(|h| h == name);
    let status = col("status").unwrap_or(0);
    let varied: Vec<usize> = (1..col("replica").unwrap_or(1)).collect();
    let replicas = rows
        .values()
        .any(|r| col("replica").is_some_and(|c| r[c] != "0"));
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut head = vec!["point".to_string()];
    head.extend(varied.iter().map(|&c| header[c].clone()));
    if replicas {
        head.push("seed".into());
    }
    head.extend(TABLE.iter().map(|t| t.0.to_string()));
    lines.push(head);
    for r in rows.values() {
        let mut line = vec![r[0].clone()];
        line.extend(varied.iter().map(|&c| display_value(&r[c]).to_string()));
        if replicas {
            line.push(col("seed").map_or(String::new(), |c| r[c].clone()));
        }
        if r[status] != "ok" {
            line.push(r[status].clone());
        } else {
            for (_, metric) in TABLE {
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
    for l in &lines {
        for (k, cell) in l.iter().enumerate() {
            let w = widths.get(k).copied().unwrap_or(0);
            if k + 1 == l.len() {
                let _ = write!(s, "{cell}");
            } else if k == 0 || k <= varied.len() {
                let _ = write!(s, "{cell:<w$}  ");
            } else {
                let _ = write!(s, "{cell:>w$}  ");
            }
        }
        s.push('\n');
    }
    s
}

/// Runs `points` (each with its loaded scenario) on `jobs` threads; `keep` gives each run
/// an output directory `point-NNNN` under it. `done` is told after every finished run.
/// Stops taking new runs once `interrupt` is set (then returns `None`).
pub fn run(
    app: &crate::ServesimApp,
    plan: &Plan,
    points: Vec<(Point, crate::scenario::Scenario)>,
    jobs: usize,
    keep: Option<&std::path::Path>,
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    done: &(dyn Fn(&Point, &Result<Summary, String>) + Sync),
) -> Option<BTreeMap<usize, Vec<String>>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(BTreeMap::new());
    let stopped = || {
        interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    };
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, points.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some((point, scenario)) = points.get(k) else {
                        break;
                    };
                    if stopped() {
                        break;
                    }
                    let options = crate::RunOptions {
                        out_dir: keep.map(|d| d.join(format!("point-{:04}", point.index))),
                        interrupt: interrupt.clone(),
                        ..Default::default()
                    };
                    let outcome = app.run(scenario, options).map_err(|e| e.to_string());
                    if stopped() {
                        break;
                    }
                    done(point, &outcome);
                    let r = row(plan, point, scenario.seed, &outcome);
                    rows.lock()
                        .expect("no thread panics holding it")
                        .insert(point.index, r);
                }
            });
        }
    });
    if stopped() {
        return None;
    }
    Some(rows.into_inner().expect("no thread panicked"))
}

/// A shard's (or a whole sweep's) results read back: its plan and rows by point.
pub struct Part {
    pub dir: PathBuf,
    pub plan: Plan,
    pub header: Vec<String>,
    pub rows: BTreeMap<usize, Vec<String>>,
}

impl Part {
    /// Reads `sweep.json` and `sweep.csv` of `dir`.
    pub fn read(dir: &std::path::Path) -> Result<Part, String> {
        let json = dir.join("sweep.json");
        let text = crate::input::read_text(&json).map_err(|e| {
            format!(
                "{e} (is {} the --out of a `servesim sweep`?)",
                dir.display()
            )
        })?;
        let plan: Plan =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
        plan.check_size()
            .map_err(|e| format!("{}: {e} (was it edited?)", json.display()))?;
        let path = dir.join("sweep.csv");
        let mut reader = csv::Reader::from_reader(crate::input::open_lines(&path)?);
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| format!("{}: {e}", path.display()))?
            .iter()
            .map(String::from)
            .collect();
        if header != plan.header() {
            return Err(format!(
                "{}: its columns are not those of the sweep in {} (written by another servesim version?)",
                path.display(),
                json.display()
            ));
        }
        let mut rows = BTreeMap::new();
        for (line, record) in reader.records().enumerate() {
            let record = record.map_err(|e| format!("{}: {e}", path.display()))?;
            let row: Vec<String> = record.iter().map(String::from).collect();
            let index: usize = row[0].parse().map_err(|_| {
                format!(
                    "{} line {}: `{}` is not a point number",
                    path.display(),
                    line + 2,
                    row[0]
                )
            })?;
            if rows.insert(index, row).is_some() {
                return Err(format!("{}: point {index} appears twice", path.display()));
            }
        }
        Ok(Part {
            dir: dir.to_path_buf(),
            plan,
            header,
            rows,
        })
    }
}

/// Joins shards into the whole sweep: they must be shards of one plan, each once, and
/// together hold every point exactly once.
pub fn merge(parts: Vec<Part>) -> Result<(Plan, BTreeMap<usize, Vec<String>>), String> {
    let Some(first) = parts.first() else {
        return Err("no shard to merge".into());
    };
    let whole = Plan {
        shard: (0, 1),
        ..first.plan.clone()
    };
    let mut seen_shards = BTreeMap::new();
    let mut rows = BTreeMap::new();
    for part in &parts {
        let same = Plan {
            shard: (0, 1),
            ..part.plan.clone()
        } == whole;
        if !same {
            return Err(format!(
                "{} is a shard of another sweep than {} (scenario, --vary, --set or --replicas differ)",
                part.dir.display(),
                first.dir.display()
            ));
        }
        if part.plan.shard.1 != first.plan.shard.1 {
            return Err(format!(
                "{} was split into {} shards, {} into {}",
                part.dir.display(),
                part.plan.shard.1,
                first.dir.display(),
                first.plan.shard.1
            ));
        }
        if let Some(other) = seen_shards.insert(part.plan.shard.0, &part.dir) {
            return Err(format!(
                "{} and {} are the same shard {}/{}",
                other.display(),
                part.dir.display(),
                part.plan.shard.0,
                part.plan.shard.1
            ));
        }
        let expected: Vec<usize> = part.plan.points().iter().map(|p| p.index).collect();
        let got: Vec<usize> = part.rows.keys().copied().collect();
        if expected != got {
            return Err(format!(
                "{} holds {} of its shard's {} points: the shard did not finish",
                part.dir.display(),
                got.len(),
                expected.len()
            ));
        }
        rows.extend(part.rows.clone());
    }
    let shards = first.plan.shard.1;
    let missing: Vec<String> = (0..shards)
        .filter(|s| !seen_shards.contains_key(s))
        .map(|s| format!("{s}/{shards}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing shards: {}", missing.join(", ")));
    }
    Ok((whole, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(axes: &[(&str, &[&str])], replicas: u32, shard: (u32, u32)) -> Plan {
        Plan {
            scenario: "s.ron".into(),
            set: vec![],
            axes: axes
                .iter()
                .map(|(p, v)| Axis {
                    path: p.to_string(),
                    values: v.iter().map(|x| x.to_string()).collect(),
                })
                .collect(),
            replicas,
            shard,
        }
    }

    #[test]
    fn a_sweep_too_large_for_one_invocation_is_refused_before_anything_is_allocated() {
        let ten: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
        // 10 × 10 × 10 × 10 × 10 points × 1 replica = 100,000: the most one shard runs.
        let axes = [("a", &ten[..]); 5];
        assert_eq!(plan(&axes, 1, (0, 1)).check_size(), Ok(100_000));
        let err = plan(&axes, 2, (0, 1)).check_size().unwrap_err();
        assert!(
            err.contains("200000 runs") && err.contains("--shard I/2"),
            "{err}"
        );
        // Split in two, each shard holds 100,000 runs: within the bound.
        assert_eq!(plan(&axes, 2, (1, 2)).check_size(), Ok(200_000));
        // Replicas near u32::MAX over two points, or axes whose product overflows: refused.
        let err = plan(&[("a", &["1", "2"])], u32::MAX, (0, 1))
            .check_size()
            .unwrap_err();
        assert!(err.contains("8589934590 runs"), "{err}");
        let huge = [("a", &ten[..]); 20];
        assert!(
            plan(&huge, 1, (0, 1))
                .check_size()
                .unwrap_err()
                .contains("more than 2^64")
        );
        // A tampered shard or replica count.
        assert!(plan(&axes[..1], 1, (3, 2)).check_size().is_err());
        assert!(plan(&axes[..1], 0, (0, 1)).check_size().is_err());
        // Points of a shard step through the sweep without visiting the others.
        let p = plan(&axes[..1], 3, (1, 4));
        let got: Vec<usize> = p.points().iter().map(|x| x.index).collect();
        assert_eq!(got, [1, 5, 9, 13, 17, 21, 25, 29]);
    }

    #[test]
    fn axes_split_at_top_level_commas_only() {
        let a = parse_axis(r#"policies.routing=["round_robin", "a,b"]"#).unwrap();
        assert_eq!(a.path, "policies.routing");
        assert_eq!(a.values, vec![r#""round_robin""#, r#""a,b""#]);
        let a = parse_axis("x=[Constant(64), Uniform(min: 1, max: 9), [1,2]]").unwrap();
        assert_eq!(
            a.values,
            vec!["Constant(64)", "Uniform(min: 1, max: 9)", "[1,2]"]
        );
        assert!(parse_axis("x=1,2").is_err());
        assert!(parse_axis("x=[]").is_err());
        assert!(parse_axis("x=[1,,2]").is_err());
        assert!(parse_axis("nothing").is_err());
    }

    #[test]
    fn linked_paths_vary_together() {
        let a = parse_axis("g[0].role,g[0].count=[(Mixed, 2), (Prefill, 1)]").unwrap();
        assert_eq!(a.values, vec!["(Mixed, 2)", "(Prefill, 1)"]);
        assert_eq!(
            a.assignments(&a.values[1]).unwrap(),
            vec![
                ("g[0].role".to_string(), "Prefill".to_string()),
                ("g[0].count".to_string(), "1".to_string())
            ]
        );
        let plan = Plan {
            scenario: "s.ron".into(),
            set: vec![],
            axes: vec![a],
            replicas: 1,
            shard: (0, 1),
        };
        assert_eq!(plan.len(), 2, "one axis, not a product of its paths");
        let e = parse_axis("a,b=[(1, 2), (3)]").unwrap_err();
        assert!(e.contains("(3) must be a tuple of 2 values"), "{e}");
        assert!(parse_axis("a,b=[(1, 2, 3)]").is_err());
        assert!(parse_axis("a,b=[1]").is_err());
    }

    #[test]
    fn shards_parse() {
        assert_eq!(parse_shard("1/4"), Ok((1, 4)));
        assert!(parse_shard("4/4").is_err());
        assert!(parse_shard("0/0").is_err());
        assert!(parse_shard("a/2").is_err());
    }

    #[test]
    fn points_are_the_cartesian_product_last_axis_fastest() {
        let p = plan(&[("a", &["1", "2"]), ("b", &["x", "y", "z"])], 1, (0, 1));
        let pts = p.points();
        assert_eq!(pts.len(), 6);
        let vals: Vec<String> = pts.iter().map(|p| p.values.join("")).collect();
        assert_eq!(vals, ["1x", "1y", "1z", "2x", "2y", "2z"]);
        let r = plan(&[("a", &["1", "2"])], 3, (0, 1)).points();
        assert_eq!(r.len(), 6);
        assert_eq!(
            r.iter()
                .map(|p| (p.values[0].as_str(), p.replica))
                .collect::<Vec<_>>(),
            [("1", 0), ("1", 1), ("1", 2), ("2", 0), ("2", 1), ("2", 2)]
        );
    }

    #[test]
    fn shards_partition_the_points() {
        let whole = plan(&[("a", &["1", "2", "3"]), ("b", &["x", "y"])], 2, (0, 1));
        let mut all: Vec<usize> = Vec::new();
        for i in 0..5 {
            let part = Plan {
                shard: (i, 5),
                ..whole.clone()
            };
            all.extend(part.points().iter().map(|p| p.index));
        }
        all.sort_unstable();
        assert_eq!(all, (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn merge_refuses_gaps_duplicates_and_strangers() {
        let part = |i: u32, n: u32| {
            let plan = plan(&[("a", &["1", "2", "3"])], 1, (i, n));
            let rows = plan
                .points()
                .iter()
                .map(|p| (p.index, vec![p.index.to_string()]))
                .collect();
            Part {
                dir: PathBuf::from(format!("shard{i}")),
                header: plan.header(),
                plan,
                rows,
            }
        };
        let (whole, rows) = merge(vec![part(1, 2), part(0, 2)]).unwrap();
        assert_eq!(whole.shard, (0, 1));
        assert_eq!(rows.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
        assert!(
            merge(vec![part(0, 2)])
                .unwrap_err()
                .contains("missing shards: 1/2")
        );
        assert!(
            merge(vec![part(0, 2), part(0, 2)])
                .unwrap_err()
                .contains("same shard")
        );
        let mut short = part(1, 2);
        short.rows.clear();
        assert!(
            merge(vec![part(0, 2), short])
                .unwrap_err()
                .contains("did not finish")
        );
        let mut other = part(1, 2);
        other.plan.replicas = 2;
        assert!(
            merge(vec![part(0, 2), other])
                .unwrap_err()
                .contains("another sweep")
        );
    }
}
