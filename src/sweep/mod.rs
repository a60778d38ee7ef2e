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
    /// What every point read, by path relative to the scenario's directory: the scenario
    /// file and each file it names (traces, tables, length distributions), as `fnv1a:` and
    /// the FNV-1a 64 hash of its bytes. Shards run on edited inputs are not merged.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// The servesim version that ran it.
    #[serde(default)]
    pub version: String,
}

/// The servesim version a sweep records.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Hashes every file the scenarios read ([`Plan::inputs`]).
pub fn hash_inputs<'a>(
    scenarios: impl IntoIterator<Item = &'a crate::scenario::Scenario>,
) -> Result<BTreeMap<String, String>, String> {
    use std::io::Read;
    let mut out = BTreeMap::new();
    for sc in scenarios {
        for (_, path) in crate::loader::input_files(sc) {
            let key = path
                .strip_prefix(&sc.base_dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            if out.contains_key(&key) {
                continue;
            }
            let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
            let mut file = std::fs::File::open(&path).map_err(cannot)?;
            let mut buf = vec![0u8; 1 << 16];
            let mut h = crate::rng::FNV1A_OFFSET;
            loop {
                let n = file.read(&mut buf).map_err(cannot)?;
                if n == 0 {
                    break;
                }
                h = crate::rng::fnv1a_continue(h, &buf[..n]);
            }
            out.insert(key, format!("fnv1a:{h:016x}"));
        }
    }
    Ok(out)
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

/// Two values of an axis that set the field alike: equal as written, or the same number
/// (`1` and `1.0` of a rate; whole numbers compared exactly, beyond f64's precision).
fn same_value(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.trim().parse::<i128>(), b.trim().parse::<i128>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => matches!((a.trim().parse::<f64>(), b.trim().parse::<f64>()), (Ok(x), Ok(y)) if x == y),
    }
}

/// Splits `PATH=[v1, v2, ...]` into the path and its RON values (commas inside brackets,
/// parentheses and strings do not split).
pub fn parse_axis(arg: &str) -> Result<Axis, String> {
    let example = "e.g. --vary 'policies.routing=[\"round_robin\",\"least_loaded\"]' or --vary cluster.groups[0].count=[2,4,8]";
    let Some((path, list)) = arg.split_once('=').filter(|(p, _)| !p.trim().is_empty()) else {
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
    for (k, v) in values.iter().enumerate() {
        if let Some(first) = values[..k].iter().position(|w| same_value(w, v)) {
            let what = if values[first] == *v {
                format!("{v} is listed twice")
            } else {
                format!("{} and {v} are the same number", values[first])
            };
            return Err(format!(
                "--vary {arg}: {what} (values {first} and {k}): its points would run twice alike; --replicas K runs each point with K seeds"
            ));
        }
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

    /// Unless every field is given one value per point, what is contradictory: a path varied
    /// by two axes (only the later would count, and `sweep.csv` would hold two columns of
    /// the same name), or varied and also `--set` (the `--set` would be silently overridden).
    pub fn check_paths(&self) -> Result<(), String> {
        let mut varied: BTreeMap<&str, &str> = BTreeMap::new();
        for axis in &self.axes {
            for path in split_top(&axis.path) {
                inert(path.trim())?;
                if let Some(first) = varied.insert(path, &axis.path) {
                    return Err(format!(
                        "--vary {path} is given twice (in --vary {first}=… and --vary {}=…): \
                         put all its values in one list",
                        axis.path
                    ));
                }
            }
        }
        if let Some((path, value)) = self.set.iter().find(|(p, _)| varied.contains_key(p.trim())) {
            return Err(format!(
                "{} is both varied (--vary) and set (--set {path}={value}): the --set would \
                 never count; drop it or add its value to the --vary list",
                path.trim()
            ));
        }
        self.check_seeds()
    }

    /// The column of the seed each run ran: `seed`, or `run_seed` when `seed` is itself varied
    /// (the axis's column holds the point's seed then; two columns named `seed` read badly:
    /// pandas renames the second `seed.1`, polars refuses the file).
    pub fn seed_column(&self) -> &'static str {
        if self.axes.iter().any(|a| a.path.trim() == "seed") {
            "run_seed"
        } else {
            "seed"
        }
    }

    /// Replica r of a point runs its seed + r, so varied seeds closer than `--replicas` apart
    /// would run some seeds at two points (`seed=[1,2]` with 2 replicas runs seed 2 twice),
    /// and their replicas would not be independent samples.
    fn check_seeds(&self) -> Result<(), String> {
        let replicas = u64::from(self.replicas);
        let Some(axis) = self.axes.iter().find(|a| a.path.trim() == "seed") else {
            return Ok(());
        };
        if replicas < 2 {
            return Ok(());
        }
        let mut seeds: Vec<u64> = axis
            .values
            .iter()
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        seeds.sort_unstable();
        match seeds.windows(2).find(|w| w[1] - w[0] < replicas) {
            Some(w) => Err(format!(
                "--vary seed=… with --replicas {replicas}: replica r runs seed + r, so seeds {} \
                 and {} would share runs; space the seeds at least {replicas} apart \
                 (e.g. seed=[{}, {}]) or drop --replicas",
                w[0],
                w[1],
                w[0],
                w[0].saturating_add(replicas)
            )),
            None => Ok(()),
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

    /// A point's values as its messages name it: `path=value, ...` (strings unquoted).
    pub fn describe(&self, values: &[String]) -> String {
        self.axes
            .iter()
            .zip(values)
            .map(|(a, v)| format!("{}={}", a.path, display_value(v)))
            .collect::<Vec<_>>()
            .join(", ")
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
        h.extend(["replica", self.seed_column(), "status"].map(String::from));
        h.extend(METRICS.iter().map(|m| m.to_string()));
        h.extend(INSTANCE_COLUMNS.iter().map(|m| m.to_string()));
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
pub const METRICS: [&str; 72] = [
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
    "energy.facility_kwh",
    "energy.mean_power_w",
    "energy.joules_per_output_token",
    "energy.electricity_cost",
    "ttft_parts_ms.to_the_instance",
    "ttft_parts_ms.waiting",
    "ttft_parts_ms.prefill",
    "ttft_parts_ms.token_out",
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

/// Per-instance load, one column per quantity, each holding one value per instance in index
/// order separated by spaces (`"498 502"`): what `report` shows to explain a routing result.
pub const INSTANCE_COLUMNS: [&str; 3] = [
    "instances.completed",
    "instances.busy_fraction",
    "instances.kv_hit_rate",
];

/// The [`INSTANCE_COLUMNS`] of one summary (fractions to four decimals).
pub fn instance_values(summary: &Summary) -> [String; 3] {
    let join = |f: &dyn Fn(&crate::metrics::InstanceSummary) -> String| {
        summary
            .instances
            .iter()
            .map(f)
            .collect::<Vec<_>>()
            .join(" ")
    };
    [
        join(&|i| i.completed.to_string()),
        join(&|i| format!("{:.4}", i.busy_fraction)),
        join(&|i| format!("{:.4}", i.kv_hit_rate)),
    ]
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
            r.extend(instance_values(summary));
            r.push(extras_value(summary));
        }
        Err(e) => {
            r.push(format!("error: {e}"));
            r.extend(METRICS.iter().map(|_| String::new()));
            r.extend(INSTANCE_COLUMNS.iter().map(|_| String::new()));
            r.push(String::new());
        }
    }
    debug_assert_eq!(r.len(), plan.header().len());
    r
}

/// What is wrong with a `sweep.csv` row under `header` (of [`Plan::header`]), if anything: its
/// status must be `ok` or an `error: …`, and its result cells as [`row`] writes them (numbers,
/// or empty where a run had no value or failed; per-instance columns numbers separated by
/// spaces; `extras` a JSON object), so that a row edited by hand or written by another tool
/// is refused instead of merged or drawn.
pub fn check_row(header: &[String], row: &[String]) -> Result<(), String> {
    if row.len() != header.len() {
        return Err(format!(
            "{} fields where the header has {}",
            row.len(),
            header.len()
        ));
    }
    let Some(status) = header.iter().position(|h| h == "status") else {
        return Err("no `status` column".into());
    };
    let ok = row[status] == "ok";
    if !ok && !row[status].starts_with("error: ") {
        return Err(format!(
            "column `status`: expected `ok` or `error: …`, got \"{}\"",
            row[status].chars().take(40).collect::<String>()
        ));
    }
    for (name, cell) in header.iter().zip(row).skip(status + 1) {
        if cell.is_empty() {
            continue;
        }
        let (fine, expected) = match name.as_str() {
            _ if !ok => (false, "nothing for a run that failed"),
            n if INSTANCE_COLUMNS.contains(&n) => (
                cell.split(' ').all(|v| v.parse::<f64>().is_ok()),
                "numbers separated by spaces",
            ),
            "extras" => (
                serde_json::from_str::<serde_json::Map<String, Value>>(cell).is_ok(),
                "a JSON object",
            ),
            _ => (cell.parse::<f64>().is_ok(), "a number"),
        };
        if !fine {
            return Err(format!(
                "column `{name}`: expected {expected}, got \"{}\"",
                cell.chars().take(40).collect::<String>()
            ));
        }
    }
    Ok(())
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

/// What [`run`] tells after each run: the point, its outcome and its `sweep.csv` row.
pub type RunDone<'a> = dyn Fn(&Point, &Result<Summary, String>, &[String]) + Sync + 'a;

/// Runs `points` (each with its loaded scenario) on `jobs` threads; `keep` gives each run
/// an output directory `point-NNNN` under it. `done` is told after every finished run, with
/// its row.
/// Stops taking new runs once `interrupt` is set (then returns `None`).
pub fn run(
    app: &crate::ServesimApp,
    plan: &Plan,
    points: Vec<(Point, crate::scenario::Scenario)>,
    jobs: usize,
    keep: Option<&std::path::Path>,
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    done: &RunDone<'_>,
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
                    let r = row(plan, point, scenario.seed, &outcome);
                    done(point, &outcome, &r);
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

mod merge;
pub mod progress;
pub mod replicas;
mod table;
#[cfg(test)]
mod tests;

pub use merge::{Part, merge};
pub use table::table;

/// A field no run of a sweep reads: varying it would give points that are all alike.
fn inert(path: &str) -> Result<(), String> {
    if path == "outputs.dir" {
        return Err(
            "--vary outputs.dir: a sweep writes no run there (sweep.csv and sweep.json go to \
             --out, each point's files to OUT/point-NNNN with --keep-outputs), so every point \
             would be alike"
                .into(),
        );
    }
    if path == "plan" || path.starts_with("plan.") {
        return Err(format!(
            "--vary {path}: the plan block is read by `servesim plan` only, never by a run, so \
             every point would be alike; vary the group's own fields instead \
             (--vary 'cluster.groups[0].tp=[1,2]')"
        ));
    }
    Ok(())
}
