//! `outputs`: which result files a run writes and how.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Where results go.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    /// Output directory (created if missing; `--out` overrides). Default `out`.
    pub dir: String,
    /// Write `requests.csv`. Default true.
    pub requests_csv: bool,
    /// Write `summary.json`. Default true.
    pub summary_json: bool,
    /// Write `decisions.csv`, one row per routing decision (also `--trace decisions`).
    pub decisions_csv: bool,
    /// Candidates listed per decision in `decisions.csv`. Default 3.
    pub decision_top_k: u32,
    /// Weights of a fitness score (keys: `ttft_mean`, `ttft_p50`, `ttft_p99`, `e2e_mean`,
    /// `e2e_p50`, `e2e_p99`, `requests_per_s`, `output_tokens_per_s`, `cost`,
    /// `cost_per_mtok`). Default: none.
    pub fitness: BTreeMap<String, f64>,
    /// Write `scale_events.csv` (instance life-cycle events). Default true; written only
    /// when a group has `scaling`.
    pub scale_events_csv: bool,
    /// Write `timeseries.csv`: per instance and cluster-wide state sampled every
    /// `sample_interval_s` of simulated time. Default true.
    pub timeseries_csv: bool,
    /// Simulated seconds between `timeseries.csv` samples. Default: about a thousandth of
    /// the run (`workload.duration_s` or `horizon_s`), rounded to 1, 2 or 5 × 10ⁿ; 1 s when
    /// neither is set.
    pub sample_interval_s: Option<f64>,
    /// Write `timeline.json`, a Chrome trace-event file for Perfetto UI or
    /// chrome://tracing (also `--trace timeline`). Default false.
    pub timeline_json: bool,
    /// Only steps and requests overlapping this simulated-time window (start, end), in
    /// seconds, go into `timeline.json` (also `--trace-window START..END`). Default: all.
    pub timeline_window_s: Option<(f64, f64)>,
    /// Fraction of requests drawn as spans in `timeline.json` (chosen by request id, so the
    /// same requests at every run; also `--trace-sample`). Default 1.
    pub timeline_request_sample: f64,
    /// Write `report.html` after the run (also `servesim run --report`). Default false.
    pub report_html: bool,
    /// Record the instances' KV block events (stored, evicted, offloaded, reloaded,
    /// transferred) and count them per instance in `summary.json` (`kv_events`). On anyway,
    /// without the counts, when a routing policy reads caches. Default false.
    pub kv_events: bool,
    /// Keep the routing decisions of highest regret (best score − chosen score), at most this
    /// many, in `summary.json` `routing.worst` (`servesim evaluate` reads them). Default 0.
    pub worst_decisions: u32,
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec {
            dir: "out".into(),
            requests_csv: true,
            summary_json: true,
            decisions_csv: false,
            decision_top_k: 3,
            fitness: BTreeMap::new(),
            scale_events_csv: true,
            timeseries_csv: true,
            sample_interval_s: None,
            timeline_json: false,
            timeline_window_s: None,
            timeline_request_sample: 1.0,
            report_html: false,
            kv_events: false,
            worst_decisions: 0,
        }
    }
}
