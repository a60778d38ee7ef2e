//! Trace replay, streamed from disk (one row in memory at a time).
//!
//! Formats: Vidur/Splitwise CSV (`arrived_at` s, `num_prefill_tokens`, `num_decode_tokens`),
//! Mooncake JSON lines (`timestamp` ms, `input_length`, `output_length`, `hash_ids`: one id
//! per `hash_block_tokens` prompt tokens, driving prefix caching), and servesim CSV
//! (`arrival_us`, `input_tokens`, `output_tokens`, optional `prefix_group`, `prefix_tokens`,
//! `adapter`, `tenant`, `slo_class`; other columns are not read; a row without a tenant or
//! class takes its `traces` entry's). Rows must be in non-decreasing time order. Timestamps
//! are multiplied by `time_scale / rate_scale`, token counts by `token_scale` (rounded, at
//! least 1; a Vidur trace's cut down, as Vidur does; the shared parts scale with the prompt);
//! times are rounded to the nearest µs.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::labels::Labels;
use crate::request::{PromptContent, Segment};
use crate::rng::fnv1a;
use crate::scenario::{MAX_ROW_LABELS, RowLabels, SloClassSpec, TraceFormat, TraceSpec};

/// One request read from a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRow {
    pub arrival_us: u64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prompt content when the trace says what is shared (Mooncake hash ids, prefix groups).
    pub content: Option<PromptContent>,
    /// The LoRA adapter (servesim CSV's `adapter` column, by name; index into
    /// `workload.adapters`).
    pub adapter: Option<u32>,
    /// The row's own tenant and SLO class (servesim CSV's `tenant` and `slo_class` columns;
    /// label indices), if it names them.
    pub tenant: Option<u32>,
    pub slo_class: Option<u32>,
}

/// How a trace's `tenant` and `slo_class` cells become label indices.
#[derive(Clone, Debug, Default)]
pub struct RowLabelIndex {
    tenants: HashMap<String, u32>,
    classes: HashMap<String, u32>,
    /// The classes `policies.slo_classes` declares: once any is, a row's must be one.
    declared: Vec<String>,
    /// Whether a row may leave a cell empty: some row did when the loader read the file.
    entry_tenant: bool,
    entry_class: bool,
}

impl RowLabelIndex {
    /// The index of `spec`'s row labels in `labels` (made by `Scenario::labels`, which
    /// holds them all).
    pub fn new(spec: &TraceSpec, labels: &Labels, declared: &[SloClassSpec]) -> Self {
        let index = |names: &[String], all: &[String]| {
            names
                .iter()
                .filter_map(|n| Some((n.clone(), all.iter().position(|a| a == n)? as u32)))
                .collect()
        };
        let rows = &spec.row_labels;
        RowLabelIndex {
            tenants: index(&rows.tenants, &labels.tenants),
            classes: index(&rows.slo_classes, &labels.slo_classes),
            declared: declared.iter().map(|c| c.name.clone()).collect(),
            entry_tenant: rows.entry_tenant_used,
            entry_class: rows.entry_class_used,
        }
    }

    /// The label index of a `tenant` (`class` false) or `slo_class` cell; `None` for an
    /// empty one, which takes the entry's label.
    fn get(&self, cell: Option<&str>, class: bool) -> Result<Option<u32>, String> {
        let what = if class { "slo_class" } else { "tenant" };
        let Some(name) = cell.map(crate::labels::from_csv).filter(|n| !n.is_empty()) else {
            if (class && !self.entry_class) || (!class && !self.entry_tenant) {
                return Err(format!(
                    "no {what}, though every row had one when the scenario was loaded: \
                     was the file changed since?"
                ));
            }
            return Ok(None);
        };
        if name.contains(['\n', '\r', '\t']) {
            return Err(format!(
                "{what} {name:?} holds a line break or a tab; a label is one line"
            ));
        }
        if class && !self.declared.is_empty() && !self.declared.iter().any(|d| d == name) {
            let hint =
                crate::scenario::did_you_mean(name, self.declared.iter().map(String::as_str))
                    .map_or(String::new(), |s| format!(" (did you mean `{s}`?)"));
            return Err(format!(
                "slo_class `{name}` is not one of policies.slo_classes ({}){hint}",
                self.declared.join(", ")
            ));
        }
        let map = if class { &self.classes } else { &self.tenants };
        match map.get(name) {
            Some(&k) => Ok(Some(k)),
            None if map.len() >= MAX_ROW_LABELS => Err(format!(
                "{what} `{name}` is past the first {} distinct {what}s the trace may name \
                 (each is a row of the summary's breakdown); merge the rest into fewer",
                crate::scenario::grouped(MAX_ROW_LABELS as u64)
            )),
            None => Err(format!(
                "{what} `{name}` was not in the file when the scenario was loaded: was the \
                 file changed since?"
            )),
        }
    }
}

type Input = BufReader<crate::input::LineCapped<BufReader<File>>>;

enum Rows {
    Csv(csv::StringRecordsIntoIter<Input>, csv::StringRecord),
    Lines(std::io::Lines<Input>),
}

/// A trace being read.
pub struct TraceReader {
    format: TraceFormat,
    path: PathBuf,
    rows: Rows,
    line: u64,
    last_us: u64,
    time_factor: f64,
    token_scale: f64,
    hash_block: u32,
    seed: u64,
    /// `workload.adapters` by name, for the `adapter` column.
    adapters: Arc<HashMap<String, u32>>,
    /// The label indices the `tenant` and `slo_class` columns may name.
    labels: Arc<RowLabelIndex>,
}

#[derive(Deserialize)]
struct MooncakeRow {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// What is wrong with a Mooncake row serde could not read: the field (missing, or not a
/// number of the kind it takes) when the row is a JSON object, else the JSON error.
fn mooncake_error(text: &str, e: &serde_json::Error) -> String {
    use serde_json::Value;
    let Ok(Value::Object(row)) = serde_json::from_str::<Value>(text) else {
        let hint = if text.trim_start().starts_with('[') {
            " (a Mooncake trace is JSON Lines: one object per line, not an array)"
        } else {
            ""
        };
        return format!("{e}{hint}");
    };
    for (field, whole) in [
        ("timestamp", false),
        ("input_length", true),
        ("output_length", true),
    ] {
        match row.get(field) {
            None => return format!("no `{field}`"),
            Some(v) if whole && v.as_u64().is_none() => {
                return format!("`{field}` is {v}, not a whole number of tokens");
            }
            Some(v) if !whole && v.as_f64().is_none() => {
                return format!("`{field}` is {v}, not a number of milliseconds");
            }
            _ => {}
        }
    }
    match row.get("hash_ids") {
        Some(Value::Array(ids)) => match ids.iter().position(|x| x.as_u64().is_none()) {
            Some(k) => format!(
                "`hash_ids` item {} is {}, not a whole number (a block's hash)",
                k + 1,
                ids[k]
            ),
            None => e.to_string(),
        },
        Some(v) => format!("`hash_ids` is {v}, not a list of whole numbers"),
        None => e.to_string(),
    }
}

impl TraceReader {
    /// Opens a trace (relative paths against `base`).
    pub fn open(spec: &TraceSpec, base: &Path, seed: u64) -> Result<Self, String> {
        let path = base.join(&spec.file);
        let reader = crate::input::open_lines(&path)?;
        let rows = match spec.format {
            TraceFormat::Mooncake => Rows::Lines(reader.lines()),
            TraceFormat::VidurCsv | TraceFormat::ServesimCsv => {
                let mut r = csv::ReaderBuilder::new()
                    .trim(csv::Trim::All)
                    .from_reader(reader);
                let headers = r
                    .headers()
                    .map_err(|e| format!("{}:1: {e}", path.display()))?
                    .clone();
                let needed: &[&str] = if spec.format == TraceFormat::VidurCsv {
                    &["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
                } else {
                    &["arrival_us", "input_tokens", "output_tokens"]
                };
                let optional: &[&str] = if spec.format == TraceFormat::VidurCsv {
                    &[]
                } else {
                    &[
                        "prefix_group",
                        "prefix_tokens",
                        "adapter",
                        "tenant",
                        "slo_class",
                    ]
                };
                crate::input::no_repeated_column(
                    &headers,
                    &[needed, optional].concat(),
                    &path.display().to_string(),
                )?;
                for n in needed {
                    if !headers.iter().any(|h| h == *n) {
                        return Err(format!(
                            "{}:1: no `{n}` column for format {:?} (columns: {})",
                            path.display(),
                            spec.format,
                            headers.iter().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
                Rows::Csv(r.into_records(), headers)
            }
        };
        Ok(TraceReader {
            format: spec.format,
            path,
            rows,
            line: if matches!(spec.format, TraceFormat::Mooncake) {
                0
            } else {
                1
            },
            last_us: 0,
            time_factor: spec.time_scale / spec.rate_scale,
            token_scale: spec.token_scale,
            hash_block: spec.hash_block_tokens.max(1),
            seed,
            adapters: Arc::default(),
            labels: Arc::default(),
        })
    }

    /// The adapters an `adapter` column may name (`workload.adapters`, by name → index).
    pub fn with_adapters(mut self, adapters: Arc<HashMap<String, u32>>) -> Self {
        self.adapters = adapters;
        self
    }

    /// The tenants and SLO classes the `tenant` and `slo_class` columns may name.
    pub fn with_labels(mut self, labels: RowLabelIndex) -> Self {
        self.labels = Arc::new(labels);
        self
    }

    fn err(&self, msg: impl std::fmt::Display) -> String {
        format!("{}:{}: {msg}", self.path.display(), self.line)
    }

    fn tokens(&self, n: f64, what: &str, at_least: u32) -> Result<u32, String> {
        scaled(n, self.token_scale, what, at_least).map_err(|e| self.err(e))
    }

    /// The next row, `Ok(None)` at the end, or an error naming file and line.
    pub fn next_row(&mut self) -> Result<Option<TraceRow>, String> {
        let (time_s, input, output, content, adapter, tenant, slo_class) = match &mut self.rows {
            Rows::Lines(lines) => {
                let text = loop {
                    self.line += 1;
                    match lines.next() {
                        None => return Ok(None),
                        Some(Err(e)) => return Err(self.err(e)),
                        Some(Ok(l)) if l.trim().is_empty() || l.trim_start().starts_with('#') => {
                            continue;
                        }
                        Some(Ok(l)) => break l,
                    }
                };
                let row: MooncakeRow = serde_json::from_str(&text).map_err(|e| {
                    self.err(format!("not a Mooncake row: {}", mooncake_error(&text, &e)))
                })?;
                if row.input_length == 0 || row.output_length == 0 {
                    return Err(self.err(format!(
                        "input_length {} and output_length {} must both be ≥ 1",
                        row.input_length, row.output_length
                    )));
                }
                // hash_ids name the prompt's blocks: ⌊L/B⌋ (full blocks) or ⌈L/B⌉ of them.
                if !row.hash_ids.is_empty() {
                    let b = u64::from(self.hash_block);
                    let (lo, hi) = (row.input_length / b, row.input_length.div_ceil(b));
                    let n = row.hash_ids.len() as u64;
                    if n < lo || n > hi {
                        return Err(self.err(format!(
                            "{n} hash_ids for input_length {} with hash_block_tokens {b}: expected {lo}{}; set hash_block_tokens to the trace's block size",
                            row.input_length,
                            if hi > lo { format!(" or {hi}") } else { String::new() }
                        )));
                    }
                }
                let input = self.tokens(row.input_length as f64, "input_length", 1)?;
                let content = if row.hash_ids.is_empty() {
                    None
                } else {
                    // Block i of the trace covers tokens [i·B, (i+1)·B) of the prompt, times
                    // token_scale (the prompt grows or shrinks, so does each block's share).
                    let block = f64::from(self.hash_block) * self.token_scale;
                    let segs: Vec<Segment> = row
                        .hash_ids
                        .iter()
                        .enumerate()
                        .map(|(i, h)| Segment {
                            id: fnv1a(&h.to_le_bytes()) ^ 0x6d6f_6f6e,
                            end: ((i + 1) as f64 * block).round().min(f64::from(input)) as u32,
                        })
                        // A token_scale far below 1 can leave the first blocks no tokens.
                        .filter(|s| s.end > 0)
                        .collect();
                    (!segs.is_empty()).then(|| PromptContent::Segments(Arc::from(segs)))
                };
                (
                    row.timestamp / 1e3,
                    input,
                    self.tokens(row.output_length as f64, "output_length", 1)?,
                    content,
                    None,
                    None,
                    None,
                )
            }
            Rows::Csv(records, headers) => {
                let Some(rec) = records.next() else {
                    return Ok(None);
                };
                let rec =
                    rec.map_err(|e| crate::input::csv_error(&self.path.display().to_string(), &e))?;
                self.line = rec.position().map_or(self.line + 1, |p| p.line());
                let get = |name: &str| {
                    headers
                        .iter()
                        .position(|h| h == name)
                        .and_then(|i| rec.get(i))
                };
                let num = |name: &str| -> Result<f64, String> {
                    let s = get(name).unwrap_or("");
                    s.parse::<f64>().map_err(|_| {
                        format!(
                            "{}:{}: {name} = {s:?} is not a number",
                            self.path.display(),
                            self.line
                        )
                    })
                };
                let fmt = self.format;
                let (t, i, o) = if fmt == TraceFormat::VidurCsv {
                    (
                        num("arrived_at")?,
                        num("num_prefill_tokens")?,
                        num("num_decode_tokens")?,
                    )
                } else {
                    (
                        num("arrival_us")? / 1e6,
                        num("input_tokens")?,
                        num("output_tokens")?,
                    )
                };
                let at = |e: String| format!("{}:{}: {e}", self.path.display(), self.line);
                if i == 0.0 || o == 0.0 {
                    return Err(at(format!(
                        "input tokens {i} and output tokens {o} must both be ≥ 1"
                    )));
                }
                // Vidur's trace readers cut the scaled counts to whole tokens
                // (`astype(int)`, then at least 1); servesim's own rows round.
                let whole = if fmt == TraceFormat::VidurCsv {
                    f64::trunc
                } else {
                    f64::round
                };
                let input = scaled_by(i, self.token_scale, "input tokens", 1, whole).map_err(at)?;
                let output =
                    scaled_by(o, self.token_scale, "output tokens", 1, whole).map_err(at)?;
                let opt = |name: &str| get(name).filter(|s| !s.is_empty()).map(str::to_string);
                let content = match (
                    get("prefix_group").filter(|s| !s.is_empty()),
                    get("prefix_tokens"),
                ) {
                    (Some(g), Some(p)) => {
                        let p: u32 = p.parse().map_err(|_| {
                            format!(
                                "{}:{}: prefix_tokens = {p:?} is not a whole number",
                                self.path.display(),
                                self.line
                            )
                        })?;
                        if f64::from(p) > i {
                            return Err(format!(
                                "{}:{}: prefix_tokens {p} is more than the {i} input tokens",
                                self.path.display(),
                                self.line
                            ));
                        }
                        // Scaled like the prompt it is part of (at most all of it).
                        let p = scaled(f64::from(p), self.token_scale, "prefix_tokens", 0)
                            .map_err(at)?;
                        Some(PromptContent::Simple {
                            prefix_id: fnv1a(format!("trace-prefix/{g}").as_bytes()),
                            prefix_tokens: p.min(input),
                            unique_id: fnv1a(
                                format!(
                                    "trace/{}/{}/{}",
                                    self.seed,
                                    self.path.display(),
                                    self.line
                                )
                                .as_bytes(),
                            ),
                        })
                    }
                    _ => None,
                };
                let adapter = match opt("adapter") {
                    None => None,
                    Some(name) => match self.adapters.get(&name) {
                        Some(&k) => Some(k),
                        None => {
                            let mut known: Vec<&str> =
                                self.adapters.keys().map(String::as_str).collect();
                            known.sort_unstable();
                            let hint = crate::scenario::did_you_mean(&name, known)
                                .map_or(String::new(), |s| format!(" (did you mean `{s}`?)"));
                            return Err(format!(
                                "{}:{}: adapter `{name}` is not in workload.adapters{hint}",
                                self.path.display(),
                                self.line
                            ));
                        }
                    },
                };
                let tenant = self.labels.get(get("tenant"), false).map_err(at)?;
                let slo_class = self.labels.get(get("slo_class"), true).map_err(at)?;
                (t, input, output, content, adapter, tenant, slo_class)
            }
        };
        if !time_s.is_finite() || time_s < 0.0 {
            return Err(self.err(format!("timestamp {time_s} s must be a finite number ≥ 0")));
        }
        let scaled_s = time_s * self.time_factor;
        if scaled_s > 1e9 {
            return Err(self.err(format!(
                "timestamp {time_s} s × time_scale / rate_scale = {scaled_s:.3e} s is past the 10⁹ s a run may reach"
            )));
        }
        let arrival_us = (scaled_s * 1e6).round() as u64;
        if arrival_us < self.last_us {
            return Err(self.err(format!(
                "rows go back in time ({} µs after {} µs); sort the trace by time",
                arrival_us, self.last_us
            )));
        }
        self.last_us = arrival_us;
        Ok(Some(TraceRow {
            arrival_us,
            input_tokens: input,
            output_tokens: output,
            content,
            adapter,
            tenant,
            slo_class,
        }))
    }
}

/// `n` × `scale` tokens, rounded to the nearest whole token (at least `at_least`).
fn scaled(n: f64, scale: f64, what: &str, at_least: u32) -> Result<u32, String> {
    scaled_by(n, scale, what, at_least, f64::round)
}

/// `n` × `scale` tokens made whole by `whole` (at least `at_least`).
fn scaled_by(
    n: f64,
    scale: f64,
    what: &str,
    at_least: u32,
    whole: fn(f64) -> f64,
) -> Result<u32, String> {
    if !n.is_finite() || n < 0.0 {
        return Err(format!("{what} = {n} must be a finite number ≥ 0"));
    }
    let v = whole(n * scale);
    if v > f64::from(super::lengths::MAX_TOKENS) {
        let max = crate::scenario::grouped(u64::from(super::lengths::MAX_TOKENS));
        return Err(if scale == 1.0 {
            format!("{what} = {n} is more than {max} tokens")
        } else {
            format!("{what} {n} × token_scale {scale} = {v:.4e} is more than {max} tokens")
        });
    }
    Ok((v as u32).max(at_least))
}

/// The tenants and SLO classes a `ServesimCsv` trace's `tenant` and `slo_class` columns
/// name (streamed; at most [`MAX_ROW_LABELS`] of each are kept, the reader refuses the
/// rest). A file that cannot be read names none: [`check`] reports why.
pub fn row_labels(spec: &TraceSpec, base: &Path) -> RowLabels {
    if spec.format != TraceFormat::ServesimCsv {
        return RowLabels::ENTRY_ONLY;
    }
    let Ok(reader) = crate::input::open_lines(&base.join(&spec.file)) else {
        return RowLabels::ENTRY_ONLY;
    };
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(reader);
    let Ok(headers) = r.headers() else {
        return RowLabels::ENTRY_ONLY;
    };
    let column = |name: &str| headers.iter().position(|h| h == name);
    let (tenant, class) = (column("tenant"), column("slo_class"));
    if tenant.is_none() && class.is_none() {
        return RowLabels::ENTRY_ONLY;
    }
    // Per column (tenant, then class): the names in first-seen order, and whether a row
    // left it empty (or the file has no such column).
    let columns = [tenant, class];
    let mut entry = columns.map(|c| c.is_none());
    let (mut names, mut seen) = ([Vec::new(), Vec::new()], [HashSet::new(), HashSet::new()]);
    for rec in r.records() {
        let Ok(rec) = rec else { break };
        for (k, column) in columns.iter().enumerate() {
            let Some(i) = *column else { continue };
            match crate::labels::from_csv(rec.get(i).unwrap_or("")) {
                "" => entry[k] = true,
                n if names[k].len() < MAX_ROW_LABELS && seen[k].insert(n.to_string()) => {
                    names[k].push(n.to_string());
                }
                _ => {}
            }
        }
    }
    let [tenants, slo_classes] = names;
    RowLabels {
        tenants,
        slo_classes,
        entry_tenant_used: entry[0],
        entry_class_used: entry[1],
    }
}

/// Reads a whole trace once (streamed) to report its first problem up front; returns the
/// number of rows and the input / output token totals. `adapters`: the names an `adapter`
/// column may use (`workload.adapters`); `labels`, the tenants and classes the `tenant` and
/// `slo_class` columns may.
pub fn check(
    spec: &TraceSpec,
    base: &Path,
    adapters: &[String],
    labels: RowLabelIndex,
) -> Result<(u64, u64, u64), String> {
    let names = adapters
        .iter()
        .enumerate()
        .map(|(k, n)| (n.clone(), k as u32))
        .collect();
    let mut r = TraceReader::open(spec, base, 0)?
        .with_adapters(Arc::new(names))
        .with_labels(labels);
    let (mut n, mut i, mut o) = (0, 0, 0);
    while let Some(row) = r.next_row()? {
        n += 1;
        i += u64::from(row.input_tokens);
        o += u64::from(row.output_tokens);
    }
    if n == 0 {
        return Err(format!(
            "{}: the trace has no rows",
            base.join(&spec.file).display()
        ));
    }
    Ok((n, i, o))
}
