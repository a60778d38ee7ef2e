//! Per-request measurements of a real serving benchmark: a plain CSV, the per-request
//! outputs of vLLM's `benchmark_serving` / `vllm bench serve` JSON (`--save-result
//! --save-detailed`), or inference-perf's per-request report
//! (`per_request_lifecycle_metrics.json`, written with `report.request_lifecycle.per_request`).

use std::path::Path;

use crate::request::{PromptContent, Segment};
use crate::workload::TraceRow;

/// One measured request. Times in µs from the start of the benchmark.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRequest {
    pub arrival_us: u64,
    pub input_tokens: u32,
    /// Output tokens: those it produced, or (timed out) those it asked for.
    pub output_tokens: u32,
    /// Time to first token (0 for a request that timed out: not compared).
    pub ttft_us: f64,
    /// End-to-end latency; for a request that timed out, how long after its start it failed
    /// (0 if the file does not say).
    pub e2e_us: f64,
    /// Mean inter-token latency (time per output token after the first), if it has one.
    pub itl_us: Option<f64>,
    /// The benchmark stage the request belongs to, if the file says.
    pub stage: Option<String>,
    /// Its client gave up on it (a timeout): it is replayed as load and counted, not compared.
    pub timed_out: bool,
    /// What its prompt shares with others, when the file holds the prompts' text
    /// (inference-perf's report: see [`prompt_blocks`]); `None`: a prompt of its own.
    pub content: Option<PromptContent>,
}

/// A measured run as read: the requests to replay and those that cannot be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measurement {
    /// Completed and timed-out requests, by arrival (µs from the first).
    pub requests: Vec<MeasuredRequest>,
    /// Requests that failed otherwise (an HTTP error, a broken connection, an error the file
    /// does not explain, a timed-out request whose length it does not say): not replayed.
    pub failed: usize,
    /// What the reader could not use and said so (printed on stderr).
    pub notes: Vec<String>,
}

impl Measurement {
    /// Requests whose client timed out.
    pub fn timed_out(&self) -> usize {
        self.requests.iter().filter(|r| r.timed_out).count()
    }

    /// The client timeout the run shows, s: the median time from a timed-out request's start
    /// to its failure (a client's total timeout fires at the same age for every request).
    /// `None` when no request timed out or the file does not say when they failed.
    pub fn timeout_s(&self) -> Option<f64> {
        let mut ages: Vec<f64> = self
            .requests
            .iter()
            .filter(|r| r.timed_out && r.e2e_us > 0.0)
            .map(|r| r.e2e_us / 1e6)
            .collect();
        if ages.is_empty() {
            return None;
        }
        ages.sort_by(f64::total_cmp);
        Some(ages[ages.len() / 2])
    }

    /// The completed requests alone (what a fit is matched to).
    pub fn completed(&self) -> Vec<MeasuredRequest> {
        self.requests
            .iter()
            .filter(|r| !r.timed_out)
            .cloned()
            .collect()
    }
}

impl MeasuredRequest {
    /// The request as a trace row to replay (a prompt of its own unless its text said what
    /// it shares).
    pub fn trace_row(&self) -> TraceRow {
        TraceRow {
            arrival_us: self.arrival_us,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            content: self.content.clone(),
            adapter: None,
            tenant: None,
            slo_class: None,
        }
    }
}

/// Most rows a measured file may hold.
pub const MAX_ROWS: usize = 10_000_000;

/// Reads a measured run: `.json` as vLLM's benchmark result (an object) or inference-perf's
/// per-request report (an array), anything else as CSV. Requests come back sorted by arrival;
/// errors name the file (and line for CSV, request for JSON).
pub fn load(path: &Path) -> Result<Measurement, String> {
    use std::io::BufRead;
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let mut m = if json {
        // An array is inference-perf's report, read as a stream (it can be larger than any
        // file read whole); an object is vLLM's result.
        let mut reader = std::io::BufReader::new(crate::input::open_regular(path)?);
        let array = reader
            .fill_buf()
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            == Some(&b'[');
        if array {
            // Read as plain JSON first; only a report that is not (Python's `NaN`, or a
            // defect) is read again through the rewriting, which costs ~0.4 s per 100 MB.
            let rows = match read_inference_perf_rows(reader) {
                Err(e) if e.is_syntax() => read_inference_perf_rows(PythonJsonReader::new(
                    std::io::BufReader::new(crate::input::open_regular(path)?),
                )),
                read => read,
            };
            let (mut m, failed_starts) = rows.map_err(|e| format!("{}: {e}", path.display()))?;
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            match inference_perf_stages(dir) {
                Ok(stages) => assign_inference_perf_stages(&mut m, &failed_starts, &stages),
                Err(e) => m
                    .notes
                    .push(format!("{e}: the comparison is not split by stage")),
            }
            m
        } else {
            from_vllm_json(&crate::input::read_text(path)?)
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
    } else {
        from_csv(&crate::input::read_text(path)?, &path.display().to_string())?
    };
    let rows = &mut m.requests;
    if rows.iter().all(|r| r.timed_out) {
        let notes: String = m.notes.iter().map(|n| format!("\n    {n}")).collect();
        return Err(format!(
            "{}: no completed request to compare with ({} timed out, {} failed otherwise){notes}",
            path.display(),
            rows.len(),
            m.failed
        ));
    }
    // A benchmark that did not stream gets every token at once: what it calls TTFT is the
    // whole answer's time and its ITL is 0, which would be compared (and fitted) as if the
    // server decoded for free.
    let longer = rows.iter().filter(|r| !r.timed_out && r.output_tokens > 1);
    let (n, at_once) = longer.fold((0, 0), |(n, k), r| {
        (n + 1, k + usize::from(r.e2e_us <= r.ttft_us))
    });
    if n > 0 && at_once == n {
        return Err(format!(
            "{}: each of the {n} completed requests with more than one output token got them all at once (E2E = TTFT): the benchmark did not stream, so what it calls TTFT is the whole answer's time and nothing says how long decoding took\n    \
             hint: measure with streaming (`vllm bench serve` streams; inference-perf: `api.streaming: true`), which records when each token came",
            path.display()
        ));
    }
    rows.sort_by_key(|r| r.arrival_us);
    let t0 = rows[0].arrival_us;
    let span_s = (rows[rows.len() - 1].arrival_us - t0) as f64 / 1e6;
    if span_s > crate::engine::MAX_SIM_TIME.as_us() as f64 / 1e6 {
        return Err(format!(
            "{}: the requests arrive over {span_s:.3e} s, more than the 10⁹ s a run may reach",
            path.display()
        ));
    }
    for r in rows.iter_mut() {
        r.arrival_us -= t0;
    }
    Ok(m)
}

fn mean_itl(ttft: f64, e2e: f64, output: u32) -> Option<f64> {
    (output > 1).then(|| (e2e - ttft) / f64::from(output - 1))
}

/// A plain CSV with a header. Columns (any order, extra columns ignored): an arrival time
/// `arrival_s`, `arrival_ms` or `arrival_us`; `input_tokens`; `output_tokens`; `ttft_ms`;
/// `e2e_ms`; optionally `itl_ms` (mean inter-token latency of the request), `stage` and
/// `state`. With a `state`, `completed` rows are compared, `timed_out` rows replayed (their
/// `ttft_ms` and `e2e_ms` may be empty; `e2e_ms`, if given, is when the client gave up) and
/// other rows counted as failed. A servesim `requests.csv` qualifies.
pub fn from_csv(text: &str, file: &str) -> Result<Measurement, String> {
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = r.headers().map_err(|e| format!("{file}:1: {e}"))?.clone();
    crate::input::no_repeated_column(
        &headers,
        &[
            "arrival_s",
            "arrival_ms",
            "arrival_us",
            "input_tokens",
            "output_tokens",
            "ttft_ms",
            "e2e_ms",
            "itl_ms",
            "mean_itl_ms",
            "stage",
            "state",
        ],
        file,
    )?;
    let col = |name: &str| headers.iter().position(|h| h == name);
    let arrivals: Vec<&str> = ["arrival_s", "arrival_ms", "arrival_us"]
        .into_iter()
        .filter(|c| col(c).is_some())
        .collect();
    if arrivals.len() > 1 {
        return Err(format!(
            "{file}:1: {} arrival columns ({}): give one, in the unit it is written in",
            arrivals.len(),
            arrivals.join(", ")
        ));
    }
    let (arrival, scale) = if let Some(i) = col("arrival_s") {
        (i, 1e6)
    } else if let Some(i) = col("arrival_ms") {
        (i, 1e3)
    } else if let Some(i) = col("arrival_us") {
        (i, 1.0)
    } else {
        return Err(format!(
            "{file}:1: no arrival column (arrival_s, arrival_ms or arrival_us); columns: {}",
            headers.iter().collect::<Vec<_>>().join(", ")
        ));
    };
    let need = |name: &str| {
        col(name).ok_or_else(|| {
            format!(
                "{file}:1: no `{name}` column (columns: {})",
                headers.iter().collect::<Vec<_>>().join(", ")
            )
        })
    };
    let (input, output, ttft, e2e) = (
        need("input_tokens")?,
        need("output_tokens")?,
        need("ttft_ms")?,
        need("e2e_ms")?,
    );
    let (itl, stage, state) = (
        col("itl_ms").or(col("mean_itl_ms")),
        col("stage"),
        col("state"),
    );
    let mut out = Vec::new();
    let mut failed = 0;
    // States servesim never writes, with their first line and count: said, as a typo
    // (`Completed`, `success`) would otherwise count every row as failed without a word.
    let mut unknown: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for (k, rec) in r.records().enumerate() {
        let line = k + 2;
        if k >= MAX_ROWS {
            return Err(format!("{file}: more than {MAX_ROWS} rows"));
        }
        let rec = rec.map_err(|e| crate::input::csv_error(file, &e))?;
        let timed_out = match state.and_then(|i| rec.get(i)) {
            None | Some("completed") => false,
            Some("timed_out") => true,
            Some(other) => {
                failed += 1;
                if !crate::request::FinalState::NAMES.contains(&other) {
                    unknown.entry(other.to_string()).or_insert((line, 0)).1 += 1;
                }
                continue;
            }
        };
        let num = |i: usize, what: &str| -> Result<f64, String> {
            let s = rec.get(i).unwrap_or("");
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{file}:{line}: {what} = {s:?} is not a number ≥ 0"))
        };
        let tokens = |i: usize, what: &str| -> Result<u32, String> {
            let v = num(i, what)?;
            if v < 1.0 || v > f64::from(crate::workload::lengths::MAX_TOKENS) || v.fract() != 0.0 {
                return Err(format!(
                    "{file}:{line}: {what} = {v} is not a whole number of tokens in [1, {}]",
                    crate::workload::lengths::MAX_TOKENS
                ));
            }
            Ok(v as u32)
        };
        let arrival_us = num(arrival, "arrival")? * scale;
        if arrival_us > 1e15 {
            return Err(format!(
                "{file}:{line}: arrival = {:?} is out of range: an arrival is at most 10⁹ s \
                 (about 31 years)",
                rec.get(arrival).unwrap_or("")
            ));
        }
        let (input_tokens, output_tokens) = (
            tokens(input, "input_tokens")?,
            tokens(output, "output_tokens")?,
        );
        if timed_out {
            let given = rec.get(e2e).is_some_and(|s| !s.is_empty());
            out.push(MeasuredRequest {
                arrival_us: arrival_us as u64,
                input_tokens,
                output_tokens,
                ttft_us: 0.0,
                e2e_us: if given {
                    within_a_run(num(e2e, "e2e_ms")? * 1e3, || {
                        format!("{file}:{line}: e2e_ms = {:?}", rec.get(e2e).unwrap_or(""))
                    })?
                } else {
                    0.0
                },
                itl_us: None,
                stage: stage.and_then(|i| rec.get(i)).map(str::to_string),
                timed_out,
                content: None,
            });
            continue;
        }
        let latency = |i: usize, what: &str| -> Result<f64, String> {
            within_a_run(num(i, what)? * 1e3, || {
                format!("{file}:{line}: {what} = {:?}", rec.get(i).unwrap_or(""))
            })
        };
        let (ttft_us, e2e_us) = (latency(ttft, "ttft_ms")?, latency(e2e, "e2e_ms")?);
        if e2e_us < ttft_us {
            return Err(format!("{file}:{line}: e2e_ms is below ttft_ms"));
        }
        let itl_us = match itl {
            Some(i) if rec.get(i).is_some_and(|s| !s.is_empty()) => Some(latency(i, "itl_ms")?),
            _ => mean_itl(ttft_us, e2e_us, output_tokens),
        };
        out.push(MeasuredRequest {
            arrival_us: arrival_us as u64,
            input_tokens,
            output_tokens,
            ttft_us,
            e2e_us,
            itl_us,
            stage: stage.and_then(|i| rec.get(i)).map(str::to_string),
            timed_out,
            content: None,
        });
    }
    let notes = unknown
        .into_iter()
        .map(|(state, (line, n))| {
            format!(
                "{file}:{line}: state {state:?} ({n} row{}) is counted as failed: only `completed` rows are compared and `timed_out` rows replayed",
                if n == 1 { "" } else { "s" }
            )
        })
        .collect();
    Ok(Measurement {
        requests: out,
        failed,
        notes,
    })
}

/// JSON as Python's `json.dump` writes it: its `NaN`, `Infinity` and `-Infinity` (outside
/// strings; JSON has none of them) read as `null`, so a summary figure a benchmark could not
/// compute (the median of no inter-token gaps) does not make the whole file unreadable.
fn python_json(text: &str) -> Result<serde_json::Value, String> {
    let parse = |t: &str| serde_json::from_str(t).map_err(|e| format!("not JSON: {e}"));
    if !(text.contains("NaN") || text.contains("Infinity")) {
        return parse(text);
    }
    let mut out = Vec::with_capacity(text.len());
    let mut words = PythonWords::default();
    for &b in text.as_bytes() {
        words.push(b, &mut out);
    }
    words.finish(&mut out);
    // Only whole ASCII words were replaced, so the text is still UTF-8.
    parse(&String::from_utf8(out).expect("UTF-8 in, UTF-8 out"))
}

/// Python's three non-JSON numbers, each read as `null`.
const PYTHON_WORDS: [&[u8]; 3] = [b"NaN", b"Infinity", b"-Infinity"];

/// The byte-by-byte rewriting of [`python_json`], so that a report read as a stream reads
/// them too ([`PythonJsonReader`]). Copying runs of plain bytes whole measured no faster
/// (87 MB: 0.88–1.28 s against 0.92–1.30 s), so every byte goes through `push`.
#[derive(Default)]
struct PythonWords {
    in_string: bool,
    escaped: bool,
    /// The start of a word outside strings, while it may still become one.
    word: Vec<u8>,
}

impl PythonWords {
    fn push(&mut self, b: u8, out: &mut Vec<u8>) {
        if self.in_string {
            self.in_string = self.escaped || b != b'"';
            self.escaped = !self.escaped && b == b'\\';
            out.push(b);
            return;
        }
        if self.word.is_empty() && !matches!(b, b'N' | b'I' | b'-') {
            self.in_string = b == b'"';
            out.push(b);
            return;
        }
        self.word.push(b);
        if PYTHON_WORDS.contains(&self.word.as_slice()) {
            out.extend_from_slice(b"null");
            self.word.clear();
        } else if !PYTHON_WORDS.iter().any(|w| w.starts_with(&self.word)) {
            // Not one of them (a negative number, or JSON that fails as it would have):
            // as written.
            // A word's first byte always begins one, so `head` holds at least it.
            let word = std::mem::take(&mut self.word);
            let (last, head) = word.split_last().expect("a byte was pushed");
            out.extend_from_slice(head);
            self.push(*last, out);
        }
    }

    /// The end of the text: a word begun is written as it stands.
    fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.word);
    }
}

/// A reader of JSON as Python writes it: [`python_json`] for a file read as a stream.
struct PythonJsonReader<R> {
    inner: R,
    words: PythonWords,
    /// Rewritten bytes not yet read, from `at`.
    out: Vec<u8>,
    at: usize,
}

impl<R: std::io::BufRead> PythonJsonReader<R> {
    /// The rewritten stream, buffered again for serde_json's byte-at-a-time reads.
    fn new(inner: R) -> std::io::BufReader<Self> {
        std::io::BufReader::new(PythonJsonReader {
            inner,
            words: PythonWords::default(),
            out: Vec::new(),
            at: 0,
        })
    }
}

impl<R: std::io::BufRead> std::io::Read for PythonJsonReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.out.len() {
            self.out.clear();
            self.at = 0;
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                self.words.finish(&mut self.out);
                if self.out.is_empty() {
                    return Ok(0);
                }
                break;
            }
            let n = chunk.len();
            for &b in chunk {
                self.words.push(b, &mut self.out);
            }
            self.inner.consume(n);
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// vLLM's benchmark result JSON: parallel arrays `input_lens`, `output_lens`, `ttfts` (s),
/// `itls` (per request, the gaps between its tokens in s), `start_times` (s, any origin),
/// optional `e2els` (s) and `errors` (a non-empty string marks a failed request: counted, not
/// replayed, as the file does not say how long its answer was to be).
pub fn from_vllm_json(text: &str) -> Result<Measurement, String> {
    let v = python_json(text)?;
    let array = |key: &str| -> Result<&Vec<serde_json::Value>, String> {
        v.get(key).and_then(|a| a.as_array()).ok_or_else(|| {
            format!("no `{key}` array: is this a vLLM benchmark result saved with --save-result --save-detailed?")
        })
    };
    let (inputs, outputs, ttfts, starts) = (
        array("input_lens")?,
        array("output_lens")?,
        array("ttfts")?,
        array("start_times")?,
    );
    let itls = array("itls").ok();
    let e2els = array("e2els").ok();
    let errors = array("errors").ok();
    let n = inputs.len();
    if [outputs.len(), ttfts.len(), starts.len()]
        .iter()
        .any(|&m| m != n)
    {
        return Err(format!(
            "input_lens, output_lens, ttfts and start_times have different lengths ({n}, {}, {}, {})",
            outputs.len(),
            ttfts.len(),
            starts.len()
        ));
    }
    for (key, a) in [("itls", itls), ("e2els", e2els), ("errors", errors)] {
        if let Some(a) = a.filter(|a| a.len() != n) {
            let entries = if a.len() == 1 { "entry" } else { "entries" };
            return Err(format!(
                "{key} has {} {entries} for {n} requests: the arrays are one entry per request",
                a.len()
            ));
        }
    }
    if n > MAX_ROWS {
        return Err(format!("more than {MAX_ROWS} requests"));
    }
    let mut out = Vec::with_capacity(n);
    let mut failed = 0;
    let max_tokens = f64::from(crate::workload::lengths::MAX_TOKENS);
    for i in 0..n {
        // vLLM writes "" for a request that succeeded and the error's text otherwise.
        match errors.and_then(|e| e.get(i)) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) if s.is_empty() => {}
            Some(serde_json::Value::String(_)) => {
                failed += 1;
                continue;
            }
            Some(other) => {
                return Err(format!(
                    "request {i}: errors[{i}] = {other} is not an error message (\"\" when the request succeeded)"
                ));
            }
        }
        // The CSV reader's checks, located by request index and array.
        let f = |a: &serde_json::Value, what: &dyn Fn() -> String| {
            // `what` names the entry, "ttfts[3]" or "itls[3][17]", when it is wrong.
            a.as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    // Python's NaN and Infinity read as null (`python_json`).
                    let a = if a.is_null() {
                        "null (or NaN, Infinity)".to_string()
                    } else {
                        a.to_string()
                    };
                    format!("request {i}: {} = {a} is not a number ≥ 0", what())
                })
        };
        let tokens = |a: &serde_json::Value, what: &dyn Fn() -> String| -> Result<f64, String> {
            let v = f(a, what)?;
            if v > max_tokens || v.fract() != 0.0 {
                return Err(format!(
                    "request {i}: {} = {v} is not a whole number of tokens in [1, {max_tokens}]",
                    what()
                ));
            }
            Ok(v)
        };
        let input = tokens(&inputs[i], &|| format!("input_lens[{i}]"))?;
        let output = tokens(&outputs[i], &|| format!("output_lens[{i}]"))?;
        if input < 1.0 || output < 1.0 {
            failed += 1; // failed or empty request
            continue;
        }
        let ttft_us = within_a_run(f(&ttfts[i], &|| format!("ttfts[{i}]"))? * 1e6, || {
            format!("request {i}: ttfts[{i}] = {} s", ttfts[i])
        })?;
        let gaps: Vec<f64> = match itls.and_then(|a| a.get(i)) {
            None => Vec::new(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(j, x)| f(x, &|| format!("itls[{i}][{j}]")))
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "request {i}: itls[{i}] = {other} is not a list of gaps in seconds"
                ));
            }
        };
        let e2e_us = match e2els.and_then(|a| a.get(i)) {
            Some(x) => within_a_run(f(x, &|| format!("e2els[{i}]"))? * 1e6, || {
                format!("request {i}: e2els[{i}] = {x} s")
            })?,
            // Without either array nothing says when a longer answer ended.
            None if itls.is_none() && output > 1.0 => {
                return Err(format!(
                    "request {i}: output_lens[{i}] = {output} but neither `itls` nor `e2els` says when its last token came; save the benchmark with --save-result --save-detailed"
                ));
            }
            None => within_a_run(ttft_us + gaps.iter().sum::<f64>() * 1e6, || {
                format!("request {i}: ttfts[{i}] + the sum of itls[{i}]")
            })?,
        };
        if e2e_us < ttft_us {
            return Err(format!(
                "request {i}: e2els[{i}] = {} s is below ttfts[{i}] = {} s",
                e2e_us / 1e6,
                ttft_us / 1e6
            ));
        }
        let start = f(&starts[i], &|| format!("start_times[{i}]"))?;
        if start > MAX_START_S {
            return Err(format!(
                "request {i}: start_times[{i}] = {start:e} s is out of range (at most {MAX_START_S:e} s)"
            ));
        }
        let output_tokens = output as u32;
        out.push(MeasuredRequest {
            arrival_us: (start * 1e6) as u64,
            input_tokens: input as u32,
            output_tokens,
            ttft_us,
            e2e_us,
            itl_us: if gaps.is_empty() {
                mean_itl(ttft_us, e2e_us, output_tokens)
            } else {
                Some(gaps.iter().sum::<f64>() * 1e6 / gaps.len() as f64)
            },
            stage: None,
            timed_out: false,
            content: None,
        });
    }
    Ok(Measurement {
        requests: out,
        failed,
        notes: Vec::new(),
    })
}

/// inference-perf's per-request report (`per_request_lifecycle_metrics.json`): an array with
/// one object per request, `start_time` and `end_time` (s, `time.perf_counter()`: any origin)
/// and `info` with the prompt's `input_tokens`, the `output_tokens` and the
/// `output_token_times` (s, the same clock) at which content reached the client. Both layouts
/// are read: `info` holding the three (inference-perf to early 2026), or (later)
/// `info.request_metrics.text.input_tokens` and `info.response_metrics` holding the other two.
/// TTFT is the first token's time − `start_time` (inference-perf's own), E2E `end_time` −
/// `start_time`, and the mean ITL the span of the token times over `output_tokens` − 1. The
/// report does not say each request's stage ([`load`] takes it from the stage summaries beside
/// the report: [`assign_inference_perf_stages`]).
///
/// A request whose `error.error_type` is `TimeoutError` (its client's `request_timeout`
/// fired) is kept as timed out: it asked for the `max_tokens` of its `request` body, and its
/// prompt length, which inference-perf records as 0 for a failed request, is estimated from
/// the prompt's characters at the tokens per character of the completed requests (their
/// mean prompt if the bodies hold no text). Any other error, a timed-out request without a
/// `max_tokens`, and an empty prompt or answer are counted as failed.
pub fn from_inference_perf_json(text: &str) -> Result<Measurement, String> {
    read_inference_perf(text.as_bytes())
}

/// [`from_inference_perf_json`] from a reader, one request at a time: the report also holds
/// each request's raw response stream (hundreds of kB for a long answer), which is skipped
/// unread, so a report of several GB takes memory for its rows only.
pub fn read_inference_perf(reader: impl std::io::BufRead) -> Result<Measurement, String> {
    read_inference_perf_rows(PythonJsonReader::new(reader))
        .map(|(m, _)| m)
        .map_err(|e| e.to_string())
}

/// The requests of an inference-perf report read from `reader` (buffered: serde_json reads a
/// byte at a time, which `BufReader` serves fastest), and the start times (s) of the requests
/// that failed otherwise.
fn read_inference_perf_rows(
    reader: impl std::io::BufRead,
) -> Result<(Measurement, Vec<f64>), serde_json::Error> {
    use serde::Deserializer as _;
    let mut de = serde_json::Deserializer::from_reader(reader);
    de.deserialize_seq(InferencePerfRows)
        .and_then(|rows| de.end().map(|()| rows))
}

/// One stage of an inference-perf run as its summary gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct InferencePerfStage {
    pub id: u32,
    /// Requests it sent (`load_summary.count`).
    pub requests: u64,
    /// Its `load_summary.requested_rate`, req/s, if given.
    pub rate: Option<f64>,
}

/// The stage summaries inference-perf writes beside its per-request report
/// (`stage_<id>_lifecycle_metrics.json`), by id; none if there are none.
pub fn inference_perf_stages(dir: &Path) -> Result<Vec<InferencePerfStage>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut stages = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(digits) = name
            .to_str()
            .and_then(|n| n.strip_prefix("stage_"))
            .and_then(|n| n.strip_suffix("_lifecycle_metrics.json"))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let path = entry.path();
        let id = digits.parse::<u32>().map_err(|_| {
            format!(
                "{}: its stage number is past those inference-perf writes (0, 1, …)",
                path.display()
            )
        })?;
        let text = crate::input::read_text(&path)?;
        let v = python_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let load = v.get("load_summary");
        let count = load.and_then(|l| l.get("count"));
        let requests = count
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| match count {
                Some(c) => format!(
                    "{}: `load_summary.count` = {c} is not a whole number of requests",
                    path.display()
                ),
                None => format!(
                    "{}: no `load_summary.count`: is this an inference-perf stage summary?",
                    path.display()
                ),
            })?;
        let rate = load
            .and_then(|l| l.get("requested_rate"))
            .and_then(serde_json::Value::as_f64)
            .filter(|r| r.is_finite() && *r > 0.0);
        stages.push(InferencePerfStage { id, requests, rate });
    }
    stages.sort_by_key(|s| s.id);
    Ok(stages)
}

/// Names each request's stage from inference-perf's stage summaries: stages run one after
/// another, so the first `requests` of stage 0's count sent are stage 0's, and so on, the
/// requests that failed otherwise (`failed_starts`, s) counted in their place. If the counts
/// do not add up to the report's requests, no stage is named and a note says why.
pub fn assign_inference_perf_stages(
    m: &mut Measurement,
    failed_starts: &[f64],
    stages: &[InferencePerfStage],
) {
    if stages.is_empty() {
        return;
    }
    let counted: u64 = stages.iter().map(|s| s.requests).sum();
    let total = (m.requests.len() + m.failed) as u64;
    if counted != total || failed_starts.len() != m.failed {
        m.notes.push(format!(
            "the stage summaries beside the report count {counted} requests and the report holds {total}: the comparison is not split by stage"
        ));
        return;
    }
    // Every request's start (µs, the report's clock) and whether it is replayed (its row).
    let mut order: Vec<(u64, Option<usize>)> = m
        .requests
        .iter()
        .enumerate()
        .map(|(i, r)| (r.arrival_us, Some(i)))
        .chain(failed_starts.iter().map(|s| ((s * 1e6) as u64, None)))
        .collect();
    order.sort_by_key(|&(t, row)| (t, row.is_none()));
    let mut next = order.into_iter();
    for stage in stages {
        let name = match stage.rate {
            Some(r) => format!(
                "stage {} ({} req/s)",
                stage.id,
                crate::scenario::readable(r)
            ),
            None => format!("stage {}", stage.id),
        };
        for (_, row) in next.by_ref().take(stage.requests as usize) {
            if let Some(i) = row {
                m.requests[i].stage = Some(name.clone());
            }
        }
    }
}

/// The fields of one request of inference-perf's report that a comparison needs; every other
/// field (the raw response, chunk texts) is skipped.
#[derive(serde::Deserialize)]
struct InferencePerfEntry {
    start_time: Option<f64>,
    end_time: Option<f64>,
    info: Option<InferencePerfInfo>,
    /// The request body, a JSON string: how long a timed-out request's prompt and answer were.
    #[serde(default)]
    request: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct InferencePerfInfo {
    input_tokens: Option<f64>,
    output_tokens: Option<f64>,
    output_token_times: Option<Vec<f64>>,
    request_metrics: Option<InferencePerfRequest>,
    response_metrics: Option<InferencePerfResponse>,
}

#[derive(serde::Deserialize)]
struct InferencePerfRequest {
    text: Option<InferencePerfText>,
}

#[derive(serde::Deserialize)]
struct InferencePerfText {
    input_tokens: Option<f64>,
}

#[derive(serde::Deserialize)]
struct InferencePerfResponse {
    output_tokens: Option<f64>,
    output_token_times: Option<Vec<f64>>,
}

/// What a request body says of its size: the answer it asks for and its prompt's text
/// (`prompt` for completions, `messages` for chat).
#[derive(serde::Deserialize, Default)]
struct RequestBody {
    max_tokens: Option<f64>,
    max_completion_tokens: Option<f64>,
    prompt: Option<serde_json::Value>,
    messages: Option<serde_json::Value>,
}

impl RequestBody {
    /// The body of `request` (a JSON string, or already an object), if it is one.
    fn of(request: Option<&serde_json::Value>) -> Option<Self> {
        match request? {
            serde_json::Value::String(s) => serde_json::from_str(s).ok(),
            v @ serde_json::Value::Object(_) => serde_json::from_value(v.clone()).ok(),
            _ => None,
        }
    }

    /// The prompt's text (a chat's message contents one after another), if the body holds
    /// any.
    fn prompt_text(&self) -> Option<String> {
        fn text(v: &serde_json::Value, out: &mut String) {
            match v {
                serde_json::Value::String(s) => out.push_str(s),
                serde_json::Value::Array(a) => a.iter().for_each(|x| text(x, out)),
                // A chat message's `content`, or a content part's `text`.
                serde_json::Value::Object(o) => {
                    if let Some(x) = o.get("content").or_else(|| o.get("text")) {
                        text(x, out);
                    }
                }
                _ => {}
            }
        }
        let mut out = String::new();
        text(self.prompt.as_ref().or(self.messages.as_ref())?, &mut out);
        (!out.is_empty()).then_some(out)
    }
}

/// Tokens per block of a derived prompt content: vLLM's default KV block.
pub const TEXT_BLOCK_TOKENS: u32 = 16;

/// Most bytes of prompt text kept while a report is read (to derive what prompts share).
const MAX_PROMPT_TEXT_BYTES: usize = 1 << 30;

/// What a prompt shares with others, from its text: one content id per block of
/// [`TEXT_BLOCK_TOKENS`] tokens, a hash of the text up to the block's end, the block's end
/// placed at `tokens_per_char` (the same for every prompt of a run, so prompts that begin
/// with the same text have the same first blocks, as their tokens do). Blocks past the end of
/// the text (a prompt of more tokens than its characters suggest) continue the whole text's
/// hash.
pub fn prompt_blocks(text: &str, input_tokens: u32, tokens_per_char: f64) -> PromptContent {
    const TEXT_SALT: u64 = 0x7465_7874_5f62_6c6b;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let blocks = input_tokens.div_ceil(TEXT_BLOCK_TOKENS);
    let mut hash = crate::rng::FNV1A_OFFSET;
    let mut fed = 0usize; // characters hashed so far
    let segments: std::sync::Arc<[Segment]> = (0..blocks)
        .map(|b| {
            let end = ((b + 1) * TEXT_BLOCK_TOKENS).min(input_tokens);
            let upto = ((f64::from(end) / tokens_per_char).round() as usize).min(chars.len());
            if upto > fed {
                let (from, to) = (chars[fed].0, chars.get(upto).map_or(text.len(), |c| c.0));
                hash = crate::rng::fnv1a_continue(hash, &text.as_bytes()[from..to]);
                fed = upto;
            }
            Segment {
                id: crate::rng::mix(&[TEXT_SALT, hash, u64::from(b)]),
                end,
            }
        })
        .collect();
    PromptContent::Segments(segments)
}

struct InferencePerfRows;

impl<'de> serde::de::Visitor<'de> for InferencePerfRows {
    type Value = (Measurement, Vec<f64>);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of requests (inference-perf's per_request_lifecycle_metrics.json)")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut m = Measurement::default();
        // Start times of the requests that failed otherwise, s (they count in their stage).
        let mut failed_starts = Vec::new();
        // Each replayed request's prompt text, while the report is read (to derive what the
        // prompts share), and the bytes kept.
        let mut texts: Vec<Option<String>> = Vec::new();
        let mut kept = 0usize;
        // Σ prompt tokens and Σ prompt characters of completed requests with a text.
        let (mut tokens, mut chars) = (0.0, 0.0);
        let mut i = 0usize;
        while let Some(e) = seq.next_element::<InferencePerfEntry>()? {
            let (row, text) = match inference_perf_row(i, e).map_err(serde::de::Error::custom)? {
                Row::Completed(row, body) => {
                    let text = RequestBody::of(body.as_ref()).and_then(|b| b.prompt_text());
                    if let Some(t) = &text {
                        tokens += f64::from(row.input_tokens);
                        chars += t.chars().count() as f64;
                    }
                    (row, text)
                }
                Row::TimedOut(row, text) => (row, text),
                Row::Failed(start) => {
                    m.failed += 1;
                    failed_starts.extend(start);
                    i += 1;
                    continue;
                }
            };
            m.requests.push(row);
            if kept <= MAX_PROMPT_TEXT_BYTES {
                kept += text.as_ref().map_or(0, String::len);
                texts.push(text);
                if kept > MAX_PROMPT_TEXT_BYTES {
                    texts.iter_mut().for_each(|t| *t = None);
                    m.notes.push(format!(
                        "the prompts hold more than {MAX_PROMPT_TEXT_BYTES} bytes of text: they are replayed as unique, not as sharing what their text shares"
                    ));
                }
            } else {
                texts.push(None);
            }
            i += 1;
            if i > MAX_ROWS {
                return Err(serde::de::Error::custom(format!(
                    "more than {MAX_ROWS} requests"
                )));
            }
        }
        let completed: Vec<f64> = m
            .requests
            .iter()
            .filter(|r| !r.timed_out)
            .map(|r| f64::from(r.input_tokens))
            .collect();
        let mean = completed.iter().sum::<f64>() / completed.len().max(1) as f64;
        let per_char = (chars > 0.0).then(|| tokens / chars);
        let max = f64::from(crate::workload::lengths::MAX_TOKENS);
        for (r, text) in m.requests.iter_mut().zip(texts) {
            // A timed-out request's prompt length, which the report does not record.
            if r.input_tokens == 0 {
                let guess = match (&text, per_char) {
                    (Some(t), Some(k)) => t.chars().count() as f64 * k,
                    _ => mean,
                };
                r.input_tokens = guess.round().clamp(1.0, max) as u32;
            }
            if let (Some(t), Some(k)) = (text, per_char) {
                r.content = Some(prompt_blocks(&t, r.input_tokens, k));
            }
        }
        Ok((m, failed_starts))
    }
}

/// One request of an inference-perf report as read.
enum Row {
    /// Completed, with its body (for the tokens per prompt character).
    Completed(MeasuredRequest, Option<serde_json::Value>),
    /// Its client timed out; its prompt's text if the body holds it (its `input_tokens` is
    /// 0 when inference-perf did not record them).
    TimedOut(MeasuredRequest, Option<String>),
    /// Failed otherwise, or nothing to replay (when it started, s, if the report says).
    Failed(Option<f64>),
}

/// Request `i` of an inference-perf report.
fn inference_perf_row(i: usize, e: InferencePerfEntry) -> Result<Row, String> {
    let at = |what: &str| format!("request {i}: {what}");
    let max_tokens = f64::from(crate::workload::lengths::MAX_TOKENS);
    let tokens = |v: Option<f64>, name: &str| -> Result<f64, String> {
        let v = v.ok_or_else(|| at(&format!("info has no `{name}`")))?;
        if !(0.0..=max_tokens).contains(&v) || v.fract() != 0.0 {
            return Err(at(&format!(
                "{name} = {v} is not a whole number of tokens in [0, {max_tokens}]"
            )));
        }
        Ok(v)
    };
    let seconds = |v: f64, what: &str| {
        if v.is_finite() && (0.0..=MAX_START_S).contains(&v) {
            Ok(v)
        } else {
            Err(at(&format!(
                "{what} = {} s is not a time in seconds within 0..=10¹²",
                crate::scenario::readable(v)
            )))
        }
    };
    if let Some(error) = &e.error
        && !error.is_null()
    {
        let timeout = error.get("error_type").and_then(|t| t.as_str()) == Some("TimeoutError");
        let body = RequestBody::of(e.request.as_ref());
        let asked = body
            .as_ref()
            .and_then(|b| b.max_tokens.or(b.max_completion_tokens));
        let failed = Row::Failed(e.start_time.filter(|s| s.is_finite()));
        let (Some(start), Some(end), Some(asked)) = (e.start_time, e.end_time, asked) else {
            return Ok(failed);
        };
        if !timeout || !(1.0..=max_tokens).contains(&asked) || asked.fract() != 0.0 {
            return Ok(failed);
        }
        let (start, end) = (seconds(start, "start_time")?, seconds(end, "end_time")?);
        if end < start {
            return Err(at(&format!(
                "end_time {end} s is before start_time {start} s"
            )));
        }
        within_a_run((end - start) * 1e6, || {
            at(&format!("end_time − start_time = {:e} s", end - start))
        })?;
        let recorded = e.info.and_then(|info| {
            info.input_tokens
                .or_else(|| info.request_metrics?.text?.input_tokens)
        });
        let input = match recorded {
            Some(v) => tokens(Some(v), "input_tokens")?,
            None => 0.0,
        };
        return Ok(Row::TimedOut(
            MeasuredRequest {
                arrival_us: (start * 1e6) as u64,
                input_tokens: input as u32,
                output_tokens: asked as u32,
                ttft_us: 0.0,
                e2e_us: (end - start) * 1e6,
                itl_us: None,
                stage: None,
                timed_out: true,
                content: None,
            },
            body.and_then(|b| b.prompt_text()),
        ));
    }
    let (Some(start), Some(end), Some(info)) = (e.start_time, e.end_time, e.info) else {
        return Err(at(
            "no `start_time`, `end_time` and `info`: is this inference-perf's per_request_lifecycle_metrics.json?",
        ));
    };
    let (request, response) = (info.request_metrics, info.response_metrics);
    let input = tokens(
        info.input_tokens
            .or_else(|| request.and_then(|r| r.text).and_then(|t| t.input_tokens)),
        "input_tokens",
    )?;
    let (later_output, later_times) =
        response.map_or((None, None), |r| (r.output_tokens, r.output_token_times));
    let output = tokens(info.output_tokens.or(later_output), "output_tokens")?;
    if input < 1.0 || output < 1.0 {
        return Ok(Row::Failed(Some(start))); // an empty prompt or answer: nothing to replay
    }
    let (start, end) = (seconds(start, "start_time")?, seconds(end, "end_time")?);
    let times = match info.output_token_times.or(later_times) {
        Some(t) if !t.is_empty() => t,
        _ => {
            return Err(at(
                "no output_token_times: measure with streaming (api.streaming: true) so each token's time is known",
            ));
        }
    };
    let (first, last) = (
        seconds(times[0], "output_token_times[0]")?,
        seconds(times[times.len() - 1], "the last output_token_times")?,
    );
    if first < start || end < first || last < first {
        return Err(at(&format!(
            "token times from {first} s to {last} s do not lie between start_time {start} s and end_time {end} s"
        )));
    }
    within_a_run((end - start) * 1e6, || {
        at(&format!("end_time − start_time = {:e} s", end - start))
    })?;
    let output_tokens = output as u32;
    Ok(Row::Completed(
        MeasuredRequest {
            arrival_us: (start * 1e6) as u64,
            input_tokens: input as u32,
            output_tokens,
            ttft_us: (first - start) * 1e6,
            e2e_us: (end - start) * 1e6,
            itl_us: (output_tokens > 1).then(|| (last - first) * 1e6 / (output - 1.0)),
            stage: None,
            timed_out: false,
            content: None,
        },
        e.request,
    ))
}

/// Latest start time a vLLM result may hold (any origin, so an epoch time passes): 10¹² s.
const MAX_START_S: f64 = 1e12;

/// Longest latency (TTFT, E2E, a mean gap) a measured request may report, µs: the 10⁹ s a
/// run may reach. A longer one is a unit mix-up or a corrupt file; read, it made the means
/// infinite and the comparison NaN.
const MAX_LATENCY_US: f64 = 1e15;

/// `us` if no longer than a run may reach, else an error: `described` names the field as the
/// file gives it, located.
fn within_a_run(us: f64, described: impl FnOnce() -> String) -> Result<f64, String> {
    if us <= MAX_LATENCY_US {
        Ok(us)
    } else {
        Err(format!(
            "{} is longer than the 10⁹ s a run may reach",
            described()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_csv_is_read_with_mean_itl_derived() {
        let csv = "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms,stage\n\
                   1.5,100,11,20,120,a\n0.5,50,1,10,10,b\n";
        let rows = from_csv(csv, "m.csv").unwrap().requests;
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].arrival_us, 1_500_000);
        assert_eq!(rows[0].itl_us, Some(10_000.0)); // (120 − 20) / 10 ms
        assert_eq!(rows[1].itl_us, None);
        assert_eq!(rows[0].stage.as_deref(), Some("a"));
    }

    #[test]
    fn a_bad_csv_row_names_its_line() {
        let csv = "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n0,10,5,1,2\n0,10,x,1,2\n";
        let e = from_csv(csv, "m.csv").unwrap_err();
        assert!(e.starts_with("m.csv:3: output_tokens"), "{e}");
        let e = from_csv("arrival,x\n", "m.csv").unwrap_err();
        assert!(e.contains("no arrival column"), "{e}");
        let e = from_csv("arrival_s,arrival_ms,x\n", "m.csv").unwrap_err();
        assert_eq!(
            e,
            "m.csv:1: 2 arrival columns (arrival_s, arrival_ms): give one, in the unit it is written in"
        );
        // Said as written, not as 300 digits of microseconds.
        let csv = "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n1e300,10,5,1,2\n";
        let e = from_csv(csv, "m.csv").unwrap_err();
        assert_eq!(
            e,
            "m.csv:2: arrival = \"1e300\" is out of range: an arrival is at most 10⁹ s (about 31 years)"
        );
    }

    #[test]
    fn vllm_json_gets_the_csv_readers_checks_located_by_request() {
        // One good request and, per case, a second one that breaks one rule.
        let case = |field: &str, value: &str| {
            let mut arrays = std::collections::BTreeMap::from([
                ("input_lens", "100".to_string()),
                ("output_lens", "3".to_string()),
                ("ttfts", "0.02".to_string()),
                ("e2els", "0.1".to_string()),
                ("start_times", "5.0".to_string()),
                ("itls", "[0.04, 0.04]".to_string()),
            ]);
            arrays.insert(field, value.to_string());
            let body: Vec<String> = arrays
                .iter()
                .map(|(k, v)| {
                    let good = match *k {
                        "itls" => "[0.04, 0.04]",
                        "errors" => "\"\"",
                        _ => "1",
                    };
                    format!("\"{k}\": [{good}, {v}]")
                })
                .collect();
            from_vllm_json(&format!("{{{}}}", body.join(", ")))
        };
        assert_eq!(case("ttfts", "0.02").unwrap().requests.len(), 2);
        for (field, value, says) in [
            (
                "itls",
                "[0.04, -0.01]",
                "itls[1][1] = -0.01 is not a number ≥ 0",
            ),
            (
                "itls",
                "[0.04, \"x\"]",
                "itls[1][1] = \"x\" is not a number ≥ 0",
            ),
            ("itls", "7", "itls[1] = 7 is not a list"),
            ("errors", "5", "errors[1] = 5 is not an error message"),
            (
                "e2els",
                "0.01",
                "e2els[1] = 0.01 s is below ttfts[1] = 0.02 s",
            ),
            ("ttfts", "\"fast\"", "ttfts[1] = \"fast\" is not a number"),
            (
                "start_times",
                "1e300",
                "start_times[1] = 1e300 s is out of range",
            ),
            (
                "input_lens",
                "1e12",
                "input_lens[1] = 1000000000000 is not a whole number",
            ),
            (
                "output_lens",
                "2.5",
                "output_lens[1] = 2.5 is not a whole number",
            ),
        ] {
            let e = case(field, value).unwrap_err();
            assert!(
                e.starts_with("request 1: ") && e.contains(says),
                "{field}: {e}"
            );
        }
    }

    #[test]
    fn inference_perf_reports_of_both_layouts_are_read_and_failures_skipped() {
        // Early 2026: `info` holds the counts and times; later, sub-objects do (and a
        // back-compatible `input_tokens` beside them, which is read first).
        let early = r#"[
            {"start_time": 100.0, "end_time": 100.5, "request": "{}", "response": "",
             "info": {"input_tokens": 590, "output_tokens": 5,
                      "output_token_times": [100.1, 100.2, 100.3, 100.4, 100.5]}, "error": null},
            {"start_time": 100.2, "end_time": 101.0, "info": {"input_tokens": 590,
             "output_tokens": 0, "output_token_times": []},
             "error": {"error_type": "TimeoutError", "error_msg": ""}}]"#;
        let later = r#"[{"start_time": 7.25, "end_time": 7.5, "error": null,
            "info": {"request_metrics": {"text": {"input_tokens": 300}},
                     "response_metrics": {"output_tokens": 3, "server_usage": null,
                        "chunk_times": [7.3, 7.4, 7.5], "output_token_times": [7.3, 7.4, 7.5]}}}]"#;
        let read = from_inference_perf_json(early).unwrap();
        // A timeout without a body saying how long its answer was to be cannot be replayed.
        assert_eq!(read.failed, 1);
        let rows = read.requests;
        assert_eq!(rows.len(), 1, "the failed request is not replayed");
        let r = &rows[0];
        assert_eq!(
            (r.arrival_us, r.input_tokens, r.output_tokens),
            (100_000_000, 590, 5)
        );
        assert!((r.ttft_us - 100_000.0).abs() < 1e-6);
        assert!((r.e2e_us - 500_000.0).abs() < 1e-6);
        assert!(
            (r.itl_us.unwrap() - 100_000.0).abs() < 1e-6,
            "(100.5 − 100.1) / 4 s"
        );
        let r = &from_inference_perf_json(later).unwrap().requests[0];
        assert_eq!((r.input_tokens, r.output_tokens), (300, 3));
        assert!((r.ttft_us - 50_000.0).abs() < 1e-6);
        assert!((r.itl_us.unwrap() - 100_000.0).abs() < 1e-6);
        // What cannot be read is said with the request's index.
        for (bad, says) in [
            (
                r#"[{"start_time": 1.0}]"#,
                "request 0: no `start_time`, `end_time` and `info`",
            ),
            (
                r#"[{"start_time": 1.0, "end_time": 2.0, "info": {"input_tokens": 5, "output_tokens": 2, "output_token_times": []}}]"#,
                "request 0: no output_token_times: measure with streaming",
            ),
            (
                r#"[{"start_time": 1.0, "end_time": 2.0, "info": {"output_tokens": 2}}]"#,
                "request 0: info has no `input_tokens`",
            ),
            (
                r#"[{"start_time": 1.0, "end_time": 2.0, "info": {"input_tokens": 5, "output_tokens": 2, "output_token_times": [0.5, 1.5]}}]"#,
                "do not lie between start_time 1 s and end_time 2 s",
            ),
            (
                r#"[{"start_time": -1.0, "end_time": 2.0, "info": {"input_tokens": 5, "output_tokens": 2, "output_token_times": [1.5, 1.6]}}]"#,
                "start_time = -1 s is not a time",
            ),
            (r#"{"x": 1}"#, "expected an array of requests"),
            (
                r#"[{"start_time": 1.0, "end_time": 2.0, "info": {"input_tokens": 2.5, "output_tokens": 2}}]"#,
                "input_tokens = 2.5 is not a whole number",
            ),
            (
                r#"[{"start_time": "x", "end_time": 2.0, "info": {}}]"#,
                "invalid type: string \"x\", expected f64",
            ),
        ] {
            let e = from_inference_perf_json(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// A latency past the 10⁹ s a run may reach was read: 1e308 ms made the means infinite,
    /// the table NaN and the mean APE "−0.0 %". Each reader refuses it where it stands; 10⁹ s
    /// itself is read.
    #[test]
    fn latencies_longer_than_a_run_may_reach_are_refused_where_they_stand() {
        let csv = |ttft: &str, e2e: &str| {
            from_csv(
                &format!(
                    "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n0,10,10,{ttft},{e2e}\n"
                ),
                "m.csv",
            )
        };
        assert_eq!(csv("5", "1e12").unwrap().requests[0].e2e_us, 1e15);
        let longer = " is longer than the 10⁹ s a run may reach";
        for (ttft, e2e, field) in [
            ("5", "1.1e12", r#"e2e_ms = "1.1e12""#),
            ("1e308", "1e308", r#"ttft_ms = "1e308""#),
        ] {
            assert_eq!(
                csv(ttft, e2e).unwrap_err(),
                format!("m.csv:2: {field}{longer}")
            );
        }
        let vllm = |ttft: &str, e2e: &str| {
            from_vllm_json(&format!(
                r#"{{"input_lens": [10], "output_lens": [10], "ttfts": [{ttft}], "e2els": [{e2e}], "start_times": [0.0]}}"#
            ))
        };
        assert_eq!(vllm("0.005", "1e9").unwrap().requests[0].e2e_us, 1e15);
        let e = vllm("1e308", "1e308").unwrap_err();
        assert!(
            e.starts_with("request 0: ttfts[0] = 1e")
                && e.ends_with("s is longer than the 10⁹ s a run may reach"),
            "{e}"
        );
        let e = vllm("0.005", "2e9").unwrap_err();
        assert!(e.starts_with("request 0: e2els[0] = 2"), "{e}");
        let ip = |end: f64| {
            from_inference_perf_json(&format!(
                r#"[{{"start_time": 0.0, "end_time": {end:?}, "error": null, "info": {{"input_tokens": 5,
                   "output_tokens": 2, "output_token_times": [1.0, {end:?}]}}}}]"#
            ))
        };
        assert_eq!(ip(1e9).unwrap().requests[0].e2e_us, 1e15);
        let e = ip(5e11).unwrap_err();
        assert!(
            e.starts_with(
                "request 0: end_time − start_time = 5e11 s is longer than the 10⁹ s a run may reach at line 2"
            ),
            "{e}"
        );
    }

    #[test]
    fn inference_perf_timeouts_are_kept_with_their_asked_length_and_other_errors_counted() {
        // Two completed chat requests at 3 characters per token, then: a timeout whose
        // prompt length is not recorded (estimated from its 30 characters: 10 tokens), one
        // whose length is, one without a body, an HTTP error and a timeout without text in
        // its body (the completed requests' mean prompt: 150 tokens).
        let done = |start: f64, input: u32, text: &str| {
            format!(
                r#"{{"start_time": {start}, "end_time": {e}, "error": null,
                "request": "{{\"max_tokens\": 2, \"messages\": [{{\"role\": \"user\", \"content\": \"{text}\"}}]}}",
                "info": {{"input_tokens": {input}, "output_tokens": 2,
                          "output_token_times": [{t1}, {e}]}}}}"#,
                e = start + 0.5,
                t1 = start + 0.1
            )
        };
        let timeout = |start: f64, input: u32, request: &str, kind: &str| {
            format!(
                r#"{{"start_time": {start}, "end_time": {e}, "request": {request},
                "info": {{"input_tokens": {input}}},
                "error": {{"error_type": "{kind}", "error_msg": ""}}}}"#,
                e = start + 30.0
            )
        };
        let text = |n: usize| "x".repeat(n);
        let body = |max: u32, content: &str| {
            format!(
                r#""{{\"max_tokens\": {max}, \"messages\": [{{\"role\": \"user\", \"content\": [{{\"type\": \"text\", \"text\": \"{content}\"}}]}}]}}""#
            )
        };
        let rows = [
            done(1.0, 100, &text(300)),
            done(2.0, 200, &text(600)),
            timeout(3.0, 0, &body(64, &text(30)), "TimeoutError"),
            timeout(4.0, 77, &body(32, &text(30)), "TimeoutError"),
            timeout(5.0, 0, "null", "TimeoutError"),
            timeout(6.0, 0, &body(8, &text(30)), "HTTP Error 500"),
            timeout(7.0, 0, r#""{\"max_tokens\": 16}""#, "TimeoutError"),
        ];
        let m = from_inference_perf_json(&format!("[{}]", rows.join(","))).unwrap();
        assert_eq!((m.failed, m.timed_out()), (2, 3));
        let got: Vec<(u32, u32, bool)> = m
            .requests
            .iter()
            .map(|r| (r.input_tokens, r.output_tokens, r.timed_out))
            .collect();
        assert_eq!(
            got,
            [
                (100, 2, false),
                (200, 2, false),
                (10, 64, true),
                (77, 32, true),
                (150, 16, true)
            ]
        );
        assert_eq!(m.timeout_s(), Some(30.0));
        assert_eq!(m.completed().len(), 2);
    }

    #[test]
    fn csv_rows_that_timed_out_are_kept_and_other_states_counted() {
        let csv = "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms,state\n\
                   0,100,10,20,120,completed\n1,50,5,,,timed_out\n2,50,5,,25000,timed_out\n\
                   3,50,5,,,rejected\n";
        let m = from_csv(csv, "m.csv").unwrap();
        assert_eq!((m.requests.len(), m.timed_out(), m.failed), (3, 2, 1));
        assert_eq!(m.timeout_s(), Some(25.0));
        let e = from_csv(
            "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms,state\n0,100,10,20,120,completed\n1,0,5,,,timed_out\n",
            "m.csv",
        )
        .unwrap_err();
        assert!(e.starts_with("m.csv:3: input_tokens"), "{e}");
        assert!(m.notes.is_empty(), "{:?}", m.notes);
    }

    #[test]
    fn csv_states_servesim_never_writes_are_counted_as_failed_and_said() {
        let csv = "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms,state
\
                   0,100,10,20,120,completed\n1,50,5,20,60,Completed\n2,50,5,20,60,Completed\n\
                   3,50,5,20,60,success\n4,50,5,,,failed\n";
        let m = from_csv(csv, "m.csv").unwrap();
        assert_eq!((m.requests.len(), m.failed), (1, 4));
        assert_eq!(
            m.notes,
            [
                "m.csv:3: state \"Completed\" (2 rows) is counted as failed: only `completed` rows are compared and `timed_out` rows replayed",
                "m.csv:5: state \"success\" (1 row) is counted as failed: only `completed` rows are compared and `timed_out` rows replayed",
            ]
        );
        // With nothing left to compare, the error carries the notes.
        let dir = std::env::temp_dir().join(format!("servesim-states-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.csv");
        std::fs::write(
            &path,
            "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms,state\n0,1,1,1,1,ok\n1,1,1,,,timed_out\n",
        )
        .unwrap();
        let e = load(&path).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        let p = path.display();
        assert_eq!(
            e,
            format!(
                "{p}: no completed request to compare with (1 timed out, 1 failed otherwise)\n    \
                 {p}:2: state \"ok\" (1 row) is counted as failed: only `completed` rows are compared and `timed_out` rows replayed"
            )
        );
    }

    #[test]
    fn python_s_nan_and_infinity_read_as_null_outside_strings() {
        let v = python_json(
            r#"{"a": NaN, "b": [Infinity, -Infinity, 1.5], "c": "NaN \" Infinity", "d": "x\\"}"#,
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": null, "b": [null, null, 1.5], "c": "NaN \" Infinity", "d": "x\\"})
        );
        assert!(
            python_json("{\"a\": NaNa}")
                .unwrap_err()
                .starts_with("not JSON")
        );
        // A vLLM result whose summary holds a NaN reads; a NaN where a request's figure
        // belongs is that request's error.
        let body = r#""input_lens": [10, 20], "output_lens": [5, 5], "ttfts": [0.02, 0.03],
            "itls": [[0.01, 0.01, 0.01, 0.01], [0.01, 0.01, 0.01, 0.01]], "start_times": [0, 0.5]"#;
        let read = from_vllm_json(&format!("{{{body}, \"median_itl_ms\": NaN}}")).unwrap();
        assert_eq!(read.requests.len(), 2);
        let e = from_vllm_json(&format!("{{{}}}", body.replace("0.03", "NaN"))).unwrap_err();
        assert!(
            e.contains("ttfts[1] = null (or NaN, Infinity) is not a number ≥ 0"),
            "{e}"
        );
    }

    #[test]
    fn stage_summaries_say_what_is_wrong_with_a_count_and_name_a_rate_short() {
        let dir = tempfile::tempdir().unwrap();
        let write = |id: u32, summary: &str| {
            std::fs::write(
                dir.path()
                    .join(format!("stage_{id}_lifecycle_metrics.json")),
                summary,
            )
            .unwrap()
        };
        write(
            0,
            r#"{"load_summary": {"count": -20, "requested_rate": 8}}"#,
        );
        let e = inference_perf_stages(dir.path()).unwrap_err();
        assert!(
            e.ends_with("stage_0_lifecycle_metrics.json: `load_summary.count` = -20 is not a whole number of requests"),
            "{e}"
        );
        write(
            0,
            r#"{"load_summary": {"count": 1, "requested_rate": 1e300}}"#,
        );
        let stages = inference_perf_stages(dir.path()).unwrap();
        let mut m = from_inference_perf_json(
            r#"[{"start_time": 1.0, "end_time": 2.0, "error": null, "info": {"input_tokens": 10,
                 "output_tokens": 2, "output_token_times": [1.1, 2.0]}}]"#,
        )
        .unwrap();
        assign_inference_perf_stages(&mut m, &[], &stages);
        // Its 301 digits, before.
        assert_eq!(
            m.requests[0].stage.as_deref(),
            Some("stage 0 (1e300 req/s)")
        );
        // A stage number past 32 bits was not read as a stage, and nothing said so.
        let far = dir.path().join("stage_4294967296_lifecycle_metrics.json");
        std::fs::write(&far, r#"{"load_summary": {"count": 1}}"#).unwrap();
        let e = inference_perf_stages(dir.path()).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{}: its stage number is past those inference-perf writes (0, 1, …)",
                far.display()
            )
        );
        // A name that only looks like a summary is not one (as before).
        std::fs::remove_file(&far).unwrap();
        std::fs::write(dir.path().join("stage_x_lifecycle_metrics.json"), "{").unwrap();
        assert_eq!(inference_perf_stages(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_report_read_as_a_stream_reads_python_s_words_too() {
        use std::io::Read as _;
        // One byte at a time, so every word and escape is split across reads.
        let text = r#"{"a": NaN, "b": [Infinity, -Infinity, -1.5, 2], "c": "NaN \" -Infinity", "d": "x\\"}"#;
        let mut read = String::new();
        PythonJsonReader {
            inner: std::io::BufReader::with_capacity(1, text.as_bytes()),
            words: PythonWords::default(),
            out: Vec::new(),
            at: 0,
        }
        .read_to_string(&mut read)
        .unwrap();
        assert_eq!(
            read,
            r#"{"a": null, "b": [null, null, -1.5, 2], "c": "NaN \" -Infinity", "d": "x\\"}"#
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&read).unwrap(),
            python_json(text).unwrap()
        );
        // inference-perf's report with a NaN where a token's time belongs: that request's
        // error, not "expected value at line 1 column 1597".
        let row = |times: &str| {
            format!(
                r#"{{"start_time": 1.0, "end_time": 2.0, "error": null, "info": {{"input_tokens": 10,
                   "output_tokens": 2, "output_token_times": {times}}}}}"#
            )
        };
        let e =
            from_inference_perf_json(&format!("[{}, {}]", row("[1.1, 1.2]"), row("[1.1, NaN]")))
                .unwrap_err();
        assert!(e.contains("null"), "{e}");
    }

    #[test]
    fn a_report_file_with_python_s_words_is_read_again_through_the_rewriting() {
        // Read plain first, a NaN is a syntax error; `load` then reads the file again.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("per_request_lifecycle_metrics.json");
        let row = r#"{"start_time": 1.0, "end_time": 2.0, "error": null, "extra": NaN,
            "info": {"input_tokens": 10, "output_tokens": 2, "output_token_times": [1.1, 2.0]}}"#;
        std::fs::write(
            &path,
            format!("[{row}, {}]", row.replace("1.", "3.").replace("2.0", "4.0")),
        )
        .unwrap();
        let m = load(&path).unwrap();
        assert_eq!(m.requests.len(), 2);
        assert_eq!(m.requests[1].arrival_us, 2_000_000, "2 s after the first");
        // A report that is not JSON either way: the error where it stands.
        std::fs::write(&path, format!("[{row}, {{\"start_time\": 3.0,,}}]")).unwrap();
        let e = load(&path).unwrap_err();
        assert!(
            e.ends_with("key must be a string at line 2 column 117"),
            "{e}"
        );
    }

    #[test]
    fn vllm_json_is_read_per_request_and_failures_are_skipped() {
        let json = r#"{"input_lens": [100, 200, 300], "output_lens": [3, 0, 2],
            "ttfts": [0.05, 0.0, 0.04], "itls": [[0.01, 0.03], [], [0.02]],
            "start_times": [10.0, 10.5, 11.0], "errors": ["", "timeout", ""]}"#;
        let read = from_vllm_json(json).unwrap();
        assert_eq!(read.failed, 1, "counted, not replayed");
        let rows = read.requests;
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].input_tokens, 100);
        assert!((rows[0].e2e_us - 90_000.0).abs() < 1e-6);
        assert!((rows[0].itl_us.unwrap() - 20_000.0).abs() < 1e-6);
        assert_eq!(rows[1].arrival_us, 11_000_000);
        let e = from_vllm_json(r#"{"input_lens": []}"#).unwrap_err();
        assert!(e.contains("output_lens"), "{e}");
        // Neither gaps nor end times: nothing says when a longer answer ended (it would read
        // as E2E = TTFT and an ITL of 0). A one-token answer ends with its first token.
        let bare = r#"{"input_lens": [100, 100], "output_lens": [1, 10], "ttfts": [0.02, 0.03],
            "start_times": [0.0, 1.0]}"#;
        let e = from_vllm_json(bare).unwrap_err();
        assert!(
            e.starts_with("request 1: output_lens[1] = 10 but neither `itls` nor `e2els`"),
            "{e}"
        );
        let one = from_vllm_json(&bare.replace("[1, 10]", "[1, 1]")).unwrap();
        assert_eq!(one.requests[1].e2e_us, 30_000.0);
        // An array shorter than the others.
        let e = from_vllm_json(&bare.replace("\"start_times\"", "\"itls\": [[]], \"start_times\""))
            .unwrap_err();
        assert_eq!(
            e,
            "itls has 1 entry for 2 requests: the arrays are one entry per request"
        );
    }
}
