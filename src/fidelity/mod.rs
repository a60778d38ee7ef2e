//! Fidelity tools: replay a measured benchmark run through a scenario's server and compare
//! (`servesim check-real`), or fit latency coefficients to it (`servesim calibrate`).
//!
//! The measured requests (arrival, prompt and output tokens) replace the scenario's workload;
//! its cluster, limits, KV cache and policies describe the server. Each request's simulated
//! TTFT, E2E and mean inter-token latency are paired with the measured ones by request.
//! Sits on top of the simulation: nothing below imports it.

pub mod calibrate;
pub mod measured;

use std::sync::{Arc, Mutex};

use serde::Serialize;

pub use measured::{MeasuredRequest, Measurement};

use crate::metrics::RequestSample;
use crate::scenario::Scenario;
use crate::setup::RunOptions;
use crate::setup::SimError;

/// The scenario with its workload replaced by nothing (the replay is added at run time) and
/// no output files.
pub fn replay_scenario(base: &Scenario) -> Scenario {
    let mut s = base.clone();
    s.workload.clients.clear();
    s.workload.traces.clear();
    s.workload.inference_perf = None;
    s.workload.num_requests = None;
    s.workload.duration_s = None;
    s.horizon_s = None;
    s.outputs.requests_csv = false;
    s.outputs.summary_json = false;
    s.outputs.decisions_csv = false;
    s
}

/// Replays `measured` through `scenario`'s server (already made a replay scenario), every
/// request abandoned by its client `timeout` after its arrival if one is given; returns one
/// sample per measured request, in the same order.
pub fn simulate(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    measured: &[MeasuredRequest],
    timeout: Option<crate::time::SimDuration>,
) -> Result<Vec<RequestSample>, SimError> {
    let rows: Arc<[crate::workload::TraceRow]> =
        measured.iter().map(MeasuredRequest::trace_row).collect();
    let collect = Arc::new(Mutex::new(Vec::with_capacity(measured.len())));
    app.run(
        scenario,
        RunOptions {
            replay: Some(crate::workload::Replay { rows, timeout }),
            collect: Some(collect.clone()),
            ..Default::default()
        },
    )?;
    let mut samples = std::mem::take(&mut *collect.lock().expect("the run has ended"));
    samples.sort_by_key(|s| s.id);
    Ok(samples)
}

/// The client timeout to replay with: `given` (s), else the one the measurement shows;
/// an error for a value that is not a time a run can reach.
pub fn replay_timeout(
    measured: &Measurement,
    given: Option<f64>,
) -> Result<Option<crate::time::SimDuration>, String> {
    let Some(s) = given.or_else(|| measured.timeout_s()) else {
        return Ok(None);
    };
    let max = crate::engine::MAX_SIM_TIME.as_us() as f64 / 1e6;
    if !(s > 0.0 && s <= max) {
        return Err(format!(
            "the client timeout must be a number of seconds in (0, {max:e}], got {}",
            crate::scenario::readable(s)
        ));
    }
    Ok(Some(crate::time::SimDuration::from_us_f64(s * 1e6)))
}

/// Mean, p50, p90, p99 (linear interpolation between order statistics).
pub fn stats(values: &mut [f64]) -> [f64; 4] {
    if values.is_empty() {
        return [f64::NAN; 4];
    }
    values.sort_by(f64::total_cmp);
    let q = |p: f64| {
        let x = p * (values.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        values[lo] + (values[hi] - values[lo]) * (x - lo as f64)
    };
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    [mean, q(0.5), q(0.9), q(0.99)]
}

/// One metric statistic, measured against simulated, in ms.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Line {
    pub metric: String,
    pub stat: String,
    pub measured_ms: f64,
    pub simulated_ms: f64,
    /// |simulated − measured| / measured, in percent; none (NaN, `null` in JSON) when the
    /// measured figure is 0 (a non-streaming benchmark's ITL).
    pub ape_pct: f64,
}

/// The comparison of one slice of requests (all, or one stage).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Slice {
    pub name: String,
    /// Requests compared (completed in both the measurement and the simulation).
    pub requests: usize,
    /// Requests whose client gave up, in the measurement and in the simulation.
    pub timeouts: Timeouts,
    pub lines: Vec<Line>,
    /// Where the simulated mean TTFT of the requests compared goes (those never preempted or
    /// retried).
    pub simulated_ttft_parts_ms: crate::metrics::TtftPartsSummary,
}

/// Requests abandoned by their client (timed out), measured and simulated.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Timeouts {
    pub measured: usize,
    pub simulated: usize,
}

impl Timeouts {
    /// "measured 1600, simulated 1432 (-10.5 %)".
    pub fn describe(&self) -> String {
        let change = if self.measured > 0 {
            format!(
                " ({:+.1} %)",
                (self.simulated as f64 / self.measured as f64 - 1.0) * 100.0
            )
        } else {
            String::new()
        };
        format!(
            "measured {}, simulated {}{change}",
            self.measured, self.simulated
        )
    }
}

impl Slice {
    /// The mean lines whose APE could be computed (measured mean above 0).
    fn means_with_ape(&self) -> impl Iterator<Item = &Line> {
        self.lines
            .iter()
            .filter(|l| l.stat == "mean" && l.ape_pct.is_finite())
    }

    /// Mean of the APEs of the TTFT, ITL and E2E means (those that could be computed); NaN
    /// (`null` in JSON) when none could.
    pub fn mean_ape_pct(&self) -> f64 {
        let (sum, n) = self
            .means_with_ape()
            .fold((0.0, 0), |(sum, n), l| (sum + l.ape_pct, n + 1));
        if n == 0 { f64::NAN } else { sum / n as f64 }
    }

    /// "mean APE of the TTFT, ITL and E2E means: 4.2 %", naming only the means it averages
    /// and why one is left out.
    fn describe_mean_ape(&self) -> String {
        let upper = |m: &str| m.to_uppercase();
        let used: Vec<String> = self.means_with_ape().map(|l| upper(&l.metric)).collect();
        let left: Vec<String> = self
            .lines
            .iter()
            .filter(|l| l.stat == "mean" && !l.ape_pct.is_finite())
            .map(|l| upper(&l.metric))
            .collect();
        let why = match left.len() {
            0 => String::new(),
            1 => format!(" ({}: its measured mean is 0, no APE)", left[0]),
            _ => format!(" ({}: their measured means are 0, no APE)", join_and(&left)),
        };
        if used.is_empty() {
            format!("mean APE: n/a{why}")
        } else {
            format!(
                "mean APE of the {} means: {:.1} %{why}",
                join_and(&used),
                self.mean_ape_pct()
            )
        }
    }
}

/// "a", "a and b", "a, b and c".
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The `check-real` report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// Measured requests replayed: completed and timed out.
    pub measured_requests: usize,
    /// Measured requests that failed otherwise (not replayed).
    pub measured_failed: usize,
    /// The client timeout replayed, s (`None`: none, every request waits as long as it takes).
    pub timeout_s: Option<f64>,
    /// Requests completed in the measurement that the simulation did not complete (timed
    /// out, dropped…).
    pub not_completed_in_simulation: usize,
    /// What the measured file's reader could not use (say, stage summaries that do not add
    /// up to the report's requests).
    pub notes: Vec<String>,
    pub overall: Slice,
    pub stages: Vec<Slice>,
    /// Mean of the APEs of TTFT, ITL and E2E means: one number to track.
    pub mean_ape_pct: f64,
}

/// Compares the requests `pick` selects: latencies of those completed in both, and how many
/// timed out in each.
pub fn compare_slice(
    name: &str,
    measured: &[MeasuredRequest],
    simulated: &[RequestSample],
    pick: impl Fn(usize) -> bool,
) -> Slice {
    let mut cols: [(Vec<f64>, Vec<f64>); 3] = Default::default();
    let mut n = 0;
    let mut timeouts = Timeouts::default();
    let mut parts = crate::metrics::TtftPartsTotal::default();
    for (i, (m, s)) in measured.iter().zip(simulated).enumerate() {
        if !pick(i) {
            continue;
        }
        timeouts.measured += usize::from(m.timed_out);
        timeouts.simulated += usize::from(s.timed_out);
        if m.timed_out || !s.completed {
            continue;
        }
        n += 1;
        if let Some(p) = s.ttft_parts {
            parts.add(p);
        }
        let (Some(ttft), Some(e2e)) = (s.ttft_us, s.e2e_us) else {
            continue;
        };
        cols[0].0.push(m.ttft_us / 1e3);
        cols[0].1.push(ttft as f64 / 1e3);
        cols[2].0.push(m.e2e_us / 1e3);
        cols[2].1.push(e2e as f64 / 1e3);
        if let (Some(a), Some(b)) = (m.itl_us, s.mean_itl_us) {
            cols[1].0.push(a / 1e3);
            cols[1].1.push(b / 1e3);
        }
    }
    let mut lines = Vec::new();
    for ((mut meas, mut sim), metric) in cols.into_iter().zip(["ttft", "itl", "e2e"]) {
        let (a, b) = (stats(&mut meas), stats(&mut sim));
        for (k, stat) in ["mean", "p50", "p90", "p99"].iter().enumerate() {
            lines.push(Line {
                metric: metric.into(),
                stat: (*stat).into(),
                measured_ms: a[k],
                simulated_ms: b[k],
                ape_pct: ((b[k] - a[k]) / a[k]).abs() * 100.0,
            });
        }
    }
    Slice {
        name: name.into(),
        requests: n,
        timeouts,
        lines,
        simulated_ttft_parts_ms: parts.into(),
    }
}

/// Replays and compares, overall and per stage (when the measurement names stages), every
/// request abandoned `timeout` after its arrival if one is given (see [`replay_timeout`]).
pub fn check_real(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    measurement: &Measurement,
    timeout: Option<crate::time::SimDuration>,
) -> Result<Report, SimError> {
    let measured = &measurement.requests[..];
    let sc = replay_scenario(scenario);
    let simulated = simulate(app, &sc, measured, timeout)?;
    if let Some(e) = none_completed(&simulated, "the scenario's cluster") {
        return Err(e);
    }
    let overall = compare_slice("all", measured, &simulated, |_| true);
    let mut names: Vec<&str> = Vec::new();
    for m in measured {
        if let Some(s) = m.stage.as_deref()
            && !names.contains(&s)
        {
            names.push(s);
        }
    }
    let stages = names
        .iter()
        .map(|name| {
            compare_slice(name, measured, &simulated, |i| {
                measured[i].stage.as_deref() == Some(name)
            })
        })
        .collect();
    Ok(Report {
        measured_requests: measured.len(),
        measured_failed: measurement.failed,
        timeout_s: timeout.map(|t| t.as_us() as f64 / 1e6),
        not_completed_in_simulation: measured
            .iter()
            .zip(&simulated)
            .filter(|(m, s)| !m.timed_out && !s.completed)
            .count(),
        notes: measurement.notes.clone(),
        mean_ape_pct: overall.mean_ape_pct(),
        overall,
        stages,
    })
}

/// An error when no replayed request completed: every comparison would be of nothing.
pub(crate) fn none_completed(
    simulated: &[crate::metrics::RequestSample],
    cluster: &str,
) -> Option<SimError> {
    if simulated.iter().any(|s| s.completed) {
        return None;
    }
    if !simulated.is_empty() && simulated.iter().all(|s| s.timed_out) {
        return Some(SimError::Calibration(format!(
            "none of the {} measured requests completed in the simulation: every one was \
             abandoned at the client timeout (--timeout-s, or the one the measured timeouts \
             show); there is nothing to compare",
            simulated.len()
        )));
    }
    Some(SimError::Calibration(format!(
        "none of the {} measured requests completed in the simulation: {cluster} cannot serve \
         them (run the scenario with the measured requests' lengths and read its warnings: \
         a KV cache or max_model_len below the prompts drops every request); there is nothing \
         to compare",
        simulated.len()
    )))
}

/// `n` and `noun`, plural unless `n` is 1: "1 request", "2 requests".
fn requests(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

impl Report {
    /// The deterministic text report.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} replayed, {} of them timed out; {} that completed did not complete in the simulation",
            requests(self.measured_requests, "measured request"),
            self.overall.timeouts.measured,
            self.not_completed_in_simulation
        );
        if self.measured_failed > 0 {
            let _ = writeln!(
                s,
                "{} failed otherwise and {} not replayed",
                requests(self.measured_failed, "measured request"),
                if self.measured_failed == 1 {
                    "was"
                } else {
                    "were"
                }
            );
        }
        for note in &self.notes {
            let _ = writeln!(s, "note: {note}");
        }
        match self.timeout_s {
            Some(t) => {
                let _ = writeln!(s, "client timeout {t} s");
            }
            None => {
                let _ = writeln!(
                    s,
                    "no client timeout: every request waits as long as it takes"
                );
            }
        }
        for slice in std::iter::once(&self.overall).chain(&self.stages) {
            // A measured file's stage name holding a line break or a tab (a quoted CSV
            // field) broke the table: shown escaped, in quotes.
            let name = if slice.name.chars().any(char::is_control) {
                format!("{:?}", slice.name)
            } else {
                slice.name.clone()
            };
            let _ = writeln!(s, "\n{name} ({})", requests(slice.requests, "request"));
            if self.timeout_s.is_some() || slice.timeouts != Timeouts::default() {
                let _ = writeln!(s, "timeouts: {}", slice.timeouts.describe());
            }
            let _ = writeln!(
                s,
                "{:<8}{:<6}{:>14} {:>14} {:>9}",
                "metric", "stat", "measured ms", "simulated ms", "APE %"
            );
            for l in &slice.lines {
                let ape = if l.ape_pct.is_finite() {
                    format!("{:.1}", l.ape_pct)
                } else {
                    "n/a".to_string()
                };
                let _ = writeln!(
                    s,
                    // A space between the columns: a 10-digit figure filled its width.
                    "{:<8}{:<6}{:>14.3} {:>14.3} {ape:>9}",
                    l.metric, l.stat, l.measured_ms, l.simulated_ms
                );
            }
            let p = &slice.simulated_ttft_parts_ms;
            if p.requests > 0 {
                let _ = writeln!(
                    s,
                    "simulated ttft taken apart (mean ms{}): {}",
                    if p.requests < slice.requests as u64 {
                        format!(
                            ", without the {} preempted or retried",
                            slice.requests as u64 - p.requests
                        )
                    } else {
                        String::new()
                    },
                    p.describe()
                );
            }
        }
        let _ = writeln!(s, "\n{}", self.overall.describe_mean_ape());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A benchmark that did not stream measures an ITL of 0: its APE was printed as "inf"
    /// and silently left out of a summary that still said it averaged TTFT, ITL and E2E.
    #[test]
    fn a_measured_mean_of_zero_has_no_ape_and_the_summary_says_it_left_it_out() {
        let line = |metric: &str, measured_ms: f64, simulated_ms: f64| Line {
            metric: metric.into(),
            stat: "mean".into(),
            measured_ms,
            simulated_ms,
            ape_pct: ((simulated_ms - measured_ms) / measured_ms).abs() * 100.0,
        };
        let slice = |itl: f64, others: f64| Slice {
            name: "all".into(),
            requests: 2,
            timeouts: Timeouts::default(),
            lines: vec![
                line("ttft", 50.0 * others, 40.0),
                line("itl", itl, 7.0),
                line("e2e", 100.0 * others, 110.0),
            ],
            simulated_ttft_parts_ms: Default::default(),
        };
        let all = slice(5.0, 1.0);
        assert_eq!(
            all.describe_mean_ape(),
            "mean APE of the TTFT, ITL and E2E means: 23.3 %"
        );
        let streamed_not = slice(0.0, 1.0);
        assert_eq!(streamed_not.mean_ape_pct(), 15.0, "(20 % + 10 %) / 2");
        assert_eq!(
            streamed_not.describe_mean_ape(),
            "mean APE of the TTFT and E2E means: 15.0 % (ITL: its measured mean is 0, no APE)"
        );
        let nothing = slice(0.0, 0.0);
        assert!(nothing.mean_ape_pct().is_nan());
        assert_eq!(
            nothing.describe_mean_ape(),
            "mean APE: n/a (TTFT, ITL and E2E: their measured means are 0, no APE)"
        );
        let report = Report {
            measured_requests: 2,
            measured_failed: 0,
            timeout_s: None,
            not_completed_in_simulation: 0,
            notes: Vec::new(),
            mean_ape_pct: streamed_not.mean_ape_pct(),
            overall: streamed_not,
            stages: Vec::new(),
        };
        let text = report.to_text();
        assert!(
            text.contains("\nitl     mean           0.000          7.000       n/a\n"),
            "{text}"
        );
        assert!(
            text.ends_with("(ITL: its measured mean is 0, no APE)\n"),
            "{text}"
        );
        // A figure as wide as its column stays apart from the next (a replay of TTFTs of
        // 10⁶ s printed "1000000938.0001000003738.500").
        let wide = Report {
            overall: slice(5.0, 2e7),
            ..report
        };
        let text = wide.to_text();
        assert!(
            text.contains("\nttft    mean  1000000000.000         40.000     100.0\n"),
            "{text}"
        );
    }

    /// The line under a table says how many requests the parts leave out, in the words the
    /// run's own line uses (it said "3 requests never preempted", counting those kept).
    #[test]
    fn the_simulated_ttft_parts_say_how_many_requests_they_leave_out() {
        let parts = |requests: u64| crate::metrics::TtftPartsSummary {
            requests,
            ttft: Some(10.0),
            to_the_instance: Some(1.0),
            waiting: Some(2.0),
            prefill: Some(3.0),
            token_out: Some(4.0),
        };
        let report = |kept: u64| Report {
            measured_requests: 5,
            measured_failed: 0,
            timeout_s: None,
            not_completed_in_simulation: 0,
            notes: Vec::new(),
            mean_ape_pct: f64::NAN,
            overall: Slice {
                name: "all".into(),
                requests: 5,
                timeouts: Timeouts::default(),
                lines: Vec::new(),
                simulated_ttft_parts_ms: parts(kept),
            },
            stages: Vec::new(),
        };
        let sum =
            "1.000 to the instance + 2.000 waiting + 3.000 prefill + 4.000 token out = 10.000";
        let text = report(3).to_text();
        let want = format!(
            "\nsimulated ttft taken apart (mean ms, without the 2 preempted or retried): {sum}\n"
        );
        assert!(text.contains(&want), "{text}");
        let text = report(5).to_text();
        assert!(
            text.contains(&format!("\nsimulated ttft taken apart (mean ms): {sum}\n")),
            "{text}"
        );
        assert!(!report(0).to_text().contains("taken apart"));
    }

    #[test]
    fn one_request_is_a_request() {
        let one = |name: &str| Slice {
            name: name.into(),
            requests: 1,
            timeouts: Timeouts::default(),
            lines: Vec::new(),
            simulated_ttft_parts_ms: Default::default(),
        };
        let report = |n: usize| Report {
            measured_requests: n,
            measured_failed: n,
            timeout_s: None,
            not_completed_in_simulation: 0,
            notes: Vec::new(),
            mean_ape_pct: f64::NAN,
            overall: one("all"),
            stages: vec![Slice {
                requests: 3,
                ..one("stage 1")
            }],
        };
        let text = report(1).to_text();
        for want in [
            "1 measured request replayed, 0 of them",
            "\n1 measured request failed otherwise and was not replayed\n",
            "\nall (1 request)\n",
            "\nstage 1 (3 requests)\n",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        let text = report(2).to_text();
        assert!(text.starts_with("2 measured requests replayed"), "{text}");
        assert!(text.contains("\n2 measured requests failed otherwise and were not"));
        // A stage name with a line break (a quoted CSV field) is shown escaped.
        let mut broken = report(1);
        broken.stages[0].name = "a,\nb".into();
        assert!(
            broken.to_text().contains("\n\"a,\\nb\" (3 requests)\n"),
            "{}",
            broken.to_text()
        );
    }

    #[test]
    fn percentiles_interpolate_between_order_statistics() {
        let mut v: Vec<f64> = (1..=11).map(f64::from).rev().collect();
        let [mean, p50, p90, p99] = stats(&mut v);
        assert_eq!((mean, p50, p90), (6.0, 6.0, 10.0));
        assert!((p99 - 10.9).abs() < 1e-12);
    }
}
