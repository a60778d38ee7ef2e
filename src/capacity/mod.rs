//! `servesim capacity`: the largest arrival rate a deployment sustains, and the largest at
//! which each declared SLO still holds, found by bisection on a multiple of the scenario's
//! arrival rates (the workload's shape kept: [`WorkloadSpec::scale_rates`]), separately for
//! each seed, with a 95 % interval over seeds ([`Estimate`]).
//!
//! **The stability test.** A run's requests are ordered by arrival; the first
//! [`WARM_UP`] of them are left out (the cluster starts empty). Over the window from the
//! last left-out arrival to the last arrival, the deployment *sustains* the rate when it
//! completes at least `served_share` (default [`SERVED_SHARE`]) as many requests as arrive:
//! a queue that stays bounded completes what arrives (its backlog at the window's end is
//! about what it was at the start), a queue that grows falls behind by the difference
//! between the two rates. Rejected, dropped and timed-out requests are not completions, so
//! a deployment that keeps up only by shedding does not sustain the rate. A service rate
//! below `served_share` × the offered rate always fails the test; between the two it may
//! pass, so the answer can be high by up to 1/`served_share` − 1 (3 %).
//!
//! **An SLO holds** at a rate when the rate is sustained and, of the class's requests that
//! arrive in the window, at least the class's `attainment` (default 0.99) meet every target
//! the class declares.
//!
//! **The search.** Per seed, every criterion (sustained, then each class with targets) keeps
//! a bracket: the largest multiple known to pass and the smallest known to fail. Starting at
//! 1×, the search doubles or halves until every criterion is bracketed (within
//! [`MIN_SCALE`]..[`MAX_SCALE`]), then runs the geometric midpoint of the widest bracket
//! until every bracket is narrower than the tolerance; each run updates every bracket it
//! falls into. Criteria are assumed monotone in the rate. The answer is the largest multiple
//! known to pass (never one that failed).

use serde::{Deserialize, Serialize};

use crate::interval::Estimate;
use crate::request::RequestSample;
use crate::scenario::{DEFAULT_ATTAINMENT, Scenario};
use crate::simulation::SimError;

mod groups;
mod text;

pub use groups::{group_alone, search_each_group};

/// Arrivals (by order) left out of the test as warm-up.
pub const WARM_UP: f64 = 0.25;
/// Default share of a window's arrivals that must be completed within it.
pub const SERVED_SHARE: f64 = 0.97;
/// Fewest arrivals the window must hold for the test to mean anything.
pub const MIN_WINDOW: usize = 40;
/// The search stays within these multiples of the scenario's rates.
pub const MAX_SCALE: f64 = 1024.0;
pub const MIN_SCALE: f64 = 1.0 / 1024.0;
/// The finest relative width a bracket may be asked to settle to: run-to-run noise is far
/// wider, and an `f64` bracket cannot be split much finer (at 10⁻¹⁶ its ends meet).
pub const MIN_TOLERANCE: f64 = 1e-6;
/// The most seeds one search takes (`capacity`, and each candidate of `plan`). Each seed is
/// a bisection of about ten runs, so this many are about the runs a sweep allows in one
/// invocation ([`MAX_RUNS_PER_SHARD`](crate::sweep::MAX_RUNS_PER_SHARD)).
pub const MAX_REPLICAS: u32 = 10_000;

/// Unless `replicas` is in [1, [`MAX_REPLICAS`]], what is wrong with it.
pub fn check_replicas(replicas: u32) -> Result<(), String> {
    if (1..=MAX_REPLICAS).contains(&replicas) {
        return Ok(());
    }
    Err(format!(
        "replicas must be in [1, {}], got {replicas} (each seed is a search of about ten \
         runs; the 95 % interval over 30 seeds is already within a few per cent)",
        crate::scenario::grouped(u64::from(MAX_REPLICAS))
    ))
}

/// One SLO class with latency targets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The class's name.
    pub class: String,
    /// Its label index (`RequestSample::slo_class`).
    #[serde(skip)]
    pub index: u32,
    /// Share of its requests that must meet the targets.
    pub attainment: f64,
    /// The targets, e.g. `TTFT ≤ 200 ms, ITL ≤ 9 ms`.
    pub targets: String,
}

/// The classes of `scenario` that declare targets, in label order.
pub fn targets(scenario: &Scenario) -> Vec<Target> {
    let labels = scenario.labels();
    let mut out = Vec::new();
    for (index, name) in labels.slo_classes.iter().enumerate() {
        let Some(spec) = scenario
            .policies
            .slo_classes
            .iter()
            .find(|c| &c.name == name && c.has_targets())
        else {
            continue;
        };
        let parts: Vec<String> = [
            ("TTFT", spec.ttft_ms),
            ("ITL", spec.itl_ms),
            ("E2E", spec.e2e_ms),
        ]
        .iter()
        .filter_map(|(what, v)| v.map(|v| format!("{what} ≤ {v} ms")))
        .collect();
        out.push(Target {
            class: name.clone(),
            index: index as u32,
            attainment: spec.attainment.unwrap_or(DEFAULT_ATTAINMENT),
            targets: parts.join(", "),
        });
    }
    out
}

/// What one run measured over its window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Window {
    /// Arrivals in the window.
    pub arrivals: usize,
    /// Completions in the window / arrivals in it.
    pub served_share: f64,
    /// Arrivals per second in the window.
    pub offered_per_s: f64,
    /// Completions per second in the window: the deployment's throughput, its capacity when
    /// the rate is more than it sustains.
    pub completed_per_s: f64,
    /// Requests arrived and not completed when the window starts.
    pub in_flight_at_start: usize,
    /// Arrivals up to the window's start (the warm-up's, and the one that opens it).
    pub warm_up_arrivals: usize,
    /// Per target: the share of the class's window arrivals that met its targets (NaN when
    /// the class had none).
    pub attainment: Vec<f64>,
}

impl Window {
    /// Measures a run's samples (one per request, any order).
    pub fn measure(samples: &[RequestSample], targets: &[Target]) -> Result<Window, String> {
        let mut arrivals: Vec<u64> = samples.iter().map(|s| s.arrival_us).collect();
        arrivals.sort_unstable();
        let first = (arrivals.len() as f64 * WARM_UP).floor() as usize;
        let (Some(&start), Some(&end)) = (arrivals.get(first), arrivals.last()) else {
            return Err("the run had no requests".into());
        };
        let inside = |t: u64| t > start && t <= end;
        let count = arrivals.iter().filter(|&&t| inside(t)).count();
        if count < MIN_WINDOW || end == start {
            return Err(format!(
                "a run has {} requests, {count} of them after its first {:.0} % (the warm-up): the stability test needs at least {MIN_WINDOW} there; raise workload.num_requests or workload.duration_s",
                arrivals.len(),
                WARM_UP * 100.0
            ));
        }
        let completed = samples
            .iter()
            .filter(|s| s.completed_us.is_some_and(inside))
            .count();
        let done_before = samples
            .iter()
            .filter(|s| s.completed_us.is_some_and(|c| c <= start))
            .count();
        let in_flight_at_start = (first + 1).saturating_sub(done_before);
        let attainment = targets
            .iter()
            .map(|t| {
                let (mut n, mut good) = (0usize, 0usize);
                for s in samples
                    .iter()
                    .filter(|s| s.slo_class == t.index && inside(s.arrival_us))
                {
                    n += 1;
                    good += usize::from(s.good);
                }
                if n == 0 {
                    f64::NAN
                } else {
                    good as f64 / n as f64
                }
            })
            .collect();
        Ok(Window {
            arrivals: count,
            served_share: completed as f64 / count as f64,
            offered_per_s: count as f64 / ((end - start) as f64 / 1e6),
            completed_per_s: completed as f64 / ((end - start) as f64 / 1e6),
            in_flight_at_start,
            warm_up_arrivals: first + 1,
            attainment,
        })
    }

    /// Whether the cluster was still filling up when the window opened: more than half the
    /// warm-up's arrivals were still in flight, so the warm-up lasted less than about two of
    /// their stays, and the window's shortfall may be the cluster filling rather than falling
    /// behind.
    pub fn still_filling(&self) -> bool {
        2 * self.in_flight_at_start > self.warm_up_arrivals
    }

    /// Whether each criterion holds: sustained, then each target in order.
    pub fn verdicts(&self, targets: &[Target], served_share: f64) -> Vec<bool> {
        let sustained = self.served_share >= served_share;
        std::iter::once(sustained)
            .chain(
                targets
                    .iter()
                    .zip(&self.attainment)
                    .map(|(t, &a)| sustained && (a.is_nan() || a >= t.attainment)),
            )
            .collect()
    }
}

/// One criterion's bracket in one seed's search.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bracket {
    /// Largest multiple of the scenario's rates known to pass.
    pub passes: Option<f64>,
    /// Smallest multiple known to fail.
    pub fails: Option<f64>,
}

impl Bracket {
    fn record(&mut self, scale: f64, holds: bool) {
        let within = self.passes.is_none_or(|p| scale > p) && self.fails.is_none_or(|f| scale < f);
        if !within {
            return; // outside the bracket (noise against monotonicity): the bracket stands
        }
        if holds {
            self.passes = Some(scale);
        } else {
            self.fails = Some(scale);
        }
    }

    /// The next multiple to run for this criterion, or `None` when it is settled.
    fn next(&self, tolerance: f64) -> Option<f64> {
        match (self.passes, self.fails) {
            (None, Some(f)) => (f > MIN_SCALE).then_some((f / 2.0).max(MIN_SCALE)),
            (Some(p), None) => (p < MAX_SCALE).then_some((p * 2.0).min(MAX_SCALE)),
            // The midpoint must split the bracket, or the search would run it again forever.
            (Some(p), Some(f)) => {
                Some((p * f).sqrt()).filter(|&mid| f / p > 1.0 + tolerance && p < mid && mid < f)
            }
            (None, None) => Some(1.0),
        }
    }
}

/// One seed's search: its brackets, the window at each criterion's answer, and its runs.
#[derive(Clone, Debug)]
pub struct SeedSearch {
    pub seed: u64,
    pub brackets: Vec<Bracket>,
    /// The window of the run at each criterion's `passes`.
    pub at_answer: Vec<Option<Window>>,
    /// The window of the run at each criterion's `fails` (`None` also when that run was
    /// stopped by `limits.max_in_flight`).
    pub at_failure: Vec<Option<Window>>,
    pub runs: u32,
}

/// Searches one seed: `run` simulates the scenario at a multiple of its rates and returns
/// the window it measured.
pub fn search_seed(
    seed: u64,
    targets: &[Target],
    tolerance: f64,
    served_share: f64,
    mut run: impl FnMut(f64) -> Result<Option<Window>, String>,
) -> Result<SeedSearch, String> {
    let criteria = 1 + targets.len();
    let mut s = SeedSearch {
        seed,
        brackets: vec![Bracket::default(); criteria],
        at_answer: vec![None; criteria],
        at_failure: vec![None; criteria],
        runs: 0,
    };
    // Unbracketed criteria first (toward the bracket), then the widest bracket.
    while let Some(scale) = next_scale(&s.brackets, tolerance) {
        // No window: the run overloaded past `limits.max_in_flight`, failing everything.
        let window = run(scale)?;
        s.runs += 1;
        let verdicts = match &window {
            Some(w) => w.verdicts(targets, served_share),
            None => vec![false; criteria],
        };
        for (k, holds) in verdicts.into_iter().enumerate() {
            let before = s.brackets[k];
            s.brackets[k].record(scale, holds);
            if s.brackets[k].passes != before.passes {
                s.at_answer[k] = window.clone();
            }
            if s.brackets[k].fails != before.fails {
                s.at_failure[k] = window.clone();
            }
        }
    }
    Ok(s)
}

fn next_scale(brackets: &[Bracket], tolerance: f64) -> Option<f64> {
    let open = || {
        brackets
            .iter()
            .filter_map(|b| b.next(tolerance).map(|n| (b, n)))
    };
    if let Some((_, n)) = open().find(|(b, _)| b.passes.is_none() || b.fails.is_none()) {
        return Some(n);
    }
    open()
        .max_by(|(a, _), (b, _)| {
            let width = |b: &Bracket| b.fails.unwrap_or(1.0) / b.passes.unwrap_or(1.0);
            width(a).total_cmp(&width(b))
        })
        .map(|(_, n)| n)
}

/// One criterion's answer over seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Limit {
    /// `sustained` or `slo:<class>`.
    pub criterion: String,
    /// What must hold, in words.
    pub holds_when: String,
    /// The largest multiple of the scenario's rates that passed, per seed (`None`: not even
    /// [`MIN_SCALE`]).
    pub scale_per_seed: Vec<Option<f64>>,
    /// True when some seed passed at [`MAX_SCALE`]: the limit is at least that.
    pub at_least: bool,
    /// The multiple over seeds (absent when a seed passed at no multiple).
    pub scale: Option<Estimate>,
    /// The arrival rate (requests/s) over seeds: the multiple × the scenario's stated rate,
    /// or where it states none (traces, sessions), the rate measured in the window.
    pub requests_per_s: Option<Estimate>,
    /// `sustained` only: the completions per second in the window of the smallest rate that
    /// failed, over seeds: what the deployment serves when asked for more than it sustains
    /// (a second reading of its capacity, less affected by the cluster filling up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overloaded_completed_per_s: Option<Estimate>,
}

/// What `capacity` answers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Capacity {
    pub scenario: String,
    /// The instance group searched alone (`--group`), or none for the whole deployment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub seeds: Vec<u64>,
    pub tolerance: f64,
    pub served_share: f64,
    pub warm_up: f64,
    /// The scenario's stated mean rate (requests/s) at 1×, when it states one.
    pub stated_requests_per_s: Option<f64>,
    pub targets: Vec<Target>,
    /// Sustained first, then one per target.
    pub limits: Vec<Limit>,
    /// Simulations run, over every seed.
    pub runs: u32,
    /// What makes the answer less certain than its interval says.
    pub warnings: Vec<String>,
    /// `--each-group`: each instance group searched alone under the whole workload, in the
    /// cluster's order (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Capacity>,
}

/// A window shorter than this many times the requests in flight at its start is mostly
/// the cluster filling up (in-flight counts still growing toward their steady state), and
/// the test reads that as falling behind.
pub const WINDOW_PER_IN_FLIGHT: usize = 10;

/// Settings of a capacity search.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seeds: the scenario's seed, +1, … (at least 1).
    pub replicas: u32,
    /// Relative bracket width at which a criterion is settled (0.02 = 2 %).
    pub tolerance: f64,
    pub served_share: f64,
    /// Threads (seeds are searched in parallel).
    pub jobs: usize,
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Counts the runs finished so far (a progress bar reads it).
    pub runs_done: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    /// The multiple of the scenario's rates the latest run started at, as `f64::to_bits`
    /// (0 before the first; a progress bar reads it).
    pub scale_now: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Settings {
    /// Unless the tolerance, served share and replicas can be searched with, what is wrong
    /// (the command line checks before it opens its output directory).
    pub fn check(&self) -> Result<(), String> {
        if !(MIN_TOLERANCE..=1.0).contains(&self.tolerance) {
            return Err(format!(
                "the tolerance must be in [10⁻⁶, 1], got {} (e.g. 0.02 for 2 %)",
                crate::scenario::readable(self.tolerance)
            ));
        }
        if !(self.served_share > 0.0 && self.served_share <= 1.0) {
            return Err(format!(
                "the served share must be in (0, 1], got {}",
                crate::scenario::readable(self.served_share)
            ));
        }
        check_replicas(self.replicas)
    }
}

/// Why a search stopped short.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// The scenario or a setting cannot be searched (exit 2).
    #[error("{0}")]
    Input(String),
    /// A run failed (exit 1).
    #[error("a run at {scale}× the scenario's rates (seed {seed}) failed: {error}")]
    Run {
        scale: f64,
        seed: u64,
        error: SimError,
    },
    #[error("interrupted")]
    Interrupted,
}

/// Searches `scenario` (loaded and validated).
pub fn search(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    settings: &Settings,
) -> Result<Capacity, CapacityError> {
    use std::sync::atomic::Ordering;
    settings.check().map_err(CapacityError::Input)?;
    scenario.workload.clone().scale_rates(1.0).map_err(|e| {
        CapacityError::Input(format!("capacity cannot vary this workload's rate: {e}"))
    })?;
    let targets = targets(scenario);
    let seeds: Vec<u64> = (0..settings.replicas)
        .map(|r| scenario.seed.wrapping_add(u64::from(r)))
        .collect();
    let stopped = || {
        settings
            .interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    };
    let one_seed = |seed: u64| -> Result<SeedSearch, CapacityError> {
        let mut failure = None;
        let result = search_seed(
            seed,
            &targets,
            settings.tolerance,
            settings.served_share,
            |scale| {
                if stopped() {
                    failure = Some(CapacityError::Interrupted);
                    return Err(String::new());
                }
                let mut sc = scenario.clone();
                sc.seed = seed;
                sc.workload
                    .scale_rates(scale)
                    .expect("checked before the search");
                let collect = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
                let options = crate::RunOptions {
                    collect: Some(collect.clone()),
                    interrupt: settings.interrupt.clone(),
                    ..Default::default()
                };
                if let Some(now) = &settings.scale_now {
                    now.store(scale.to_bits(), Ordering::Relaxed);
                }
                let ran = app.run(&sc, options);
                if let Some(d) = &settings.runs_done {
                    d.fetch_add(1, Ordering::Relaxed);
                }
                if let Err(error) = ran {
                    if matches!(
                        error,
                        SimError::Run(crate::setup::RunError::Fault(
                            crate::engine::Fault::Overloaded { .. }
                        ))
                    ) {
                        return Ok(None);
                    }
                    failure = Some(if stopped() {
                        CapacityError::Interrupted
                    } else {
                        CapacityError::Run { scale, seed, error }
                    });
                    return Err(String::new());
                }
                let samples = std::mem::take(&mut *collect.lock().expect("the run has ended"));
                Window::measure(&samples, &targets).map(Some).map_err(|e| {
                    failure = Some(CapacityError::Input(format!(
                        "at {scale}× the scenario's rates: {e}"
                    )));
                    String::new()
                })
            },
        );
        match (result, failure) {
            (Ok(s), _) => Ok(s),
            (Err(_), Some(f)) => Err(f),
            (Err(e), None) => Err(CapacityError::Input(e)),
        }
    };
    let searches = crate::parallel::per_seed(&seeds, settings.jobs, one_seed)?;
    let stated = scenario.workload.nominal_rate();
    let mut limits = Vec::new();
    for k in 0..=targets.len() {
        let scale_per_seed: Vec<Option<f64>> =
            searches.iter().map(|s| s.brackets[k].passes).collect();
        let all: Option<Vec<f64>> = scale_per_seed.iter().copied().collect();
        let rates: Option<Vec<f64>> = searches
            .iter()
            .map(|s| {
                let passes = s.brackets[k].passes?;
                match stated {
                    Some(r) => Some(passes * r),
                    None => s.at_answer[k].as_ref().map(|w| w.offered_per_s),
                }
            })
            .collect();
        let (criterion, holds_when) = if k == 0 {
            (
                "sustained".to_string(),
                format!(
                    "at least {:.0} % of the arrivals after the first {:.0} % are completed while they arrive",
                    settings.served_share * 100.0,
                    WARM_UP * 100.0
                ),
            )
        } else {
            let t = &targets[k - 1];
            (
                format!("slo:{}", t.class),
                format!(
                    "sustained, and {} for {} % of the class's requests",
                    t.targets,
                    t.attainment * 100.0
                ),
            )
        };
        let overloaded: Option<Vec<f64>> = searches
            .iter()
            .map(|s| s.at_failure[k].as_ref().map(|w| w.completed_per_s))
            .collect();
        limits.push(Limit {
            overloaded_completed_per_s: if k == 0 {
                overloaded.as_deref().map(rate)
            } else {
                None
            },
            criterion,
            holds_when,
            at_least: scale_per_seed.contains(&Some(MAX_SCALE)),
            scale: all.as_deref().map(rate),
            requests_per_s: rates.as_deref().map(rate),
            scale_per_seed,
        });
    }
    let mut warnings = Vec::new();
    let short: Vec<String> = searches
        .iter()
        .filter_map(|s| {
            let w = s.at_answer[0].as_ref()?;
            (w.arrivals < WINDOW_PER_IN_FLIGHT * w.in_flight_at_start).then(|| {
                format!(
                    "seed {}: {} arrivals, {} in flight",
                    s.seed, w.arrivals, w.in_flight_at_start
                )
            })
        })
        .collect();
    if !short.is_empty() {
        warnings.push(format!(
            "the runs are short for this deployment: at the answer the window holds fewer than {WINDOW_PER_IN_FLIGHT} × the requests in flight at its start ({}), so filling the cluster reads as falling behind and the answer may be low; raise workload.num_requests",
            short.join("; ")
        ));
    }
    Ok(Capacity {
        scenario: scenario.name.clone(),
        group: None,
        seeds,
        tolerance: settings.tolerance,
        served_share: settings.served_share,
        warm_up: WARM_UP,
        stated_requests_per_s: stated,
        targets,
        limits,
        runs: searches.iter().map(|s| s.runs).sum(),
        warnings,
        groups: Vec::new(),
    })
}

/// A multiple or rate over seeds: never negative.
fn rate(values: &[f64]) -> Estimate {
    Estimate::of(values).within(0.0, f64::INFINITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(arrival_ms: u64, completed_ms: Option<u64>, good: bool) -> RequestSample {
        RequestSample {
            id: arrival_ms,
            completed: completed_ms.is_some(),
            timed_out: false,
            ttft_us: None,
            e2e_us: None,
            mean_itl_us: None,
            ttft_parts: None,
            arrival_us: arrival_ms * 1000,
            completed_us: completed_ms.map(|c| c * 1000),
            slo_class: 0,
            good,
        }
    }

    fn target() -> Target {
        Target {
            class: "standard".into(),
            index: 0,
            attainment: 0.9,
            targets: "TTFT ≤ 1 ms".into(),
        }
    }

    #[test]
    fn a_queue_that_falls_behind_fails_the_test_and_one_that_keeps_up_passes() {
        // 100 arrivals 10 ms apart. Keeping up: each done 5 ms after it arrives. Falling
        // behind: one completion every 20 ms from t = 5 ms (half the arrival rate).
        let keeps: Vec<_> = (0..100)
            .map(|i| sample(i * 10, Some(i * 10 + 5), true))
            .collect();
        let behind: Vec<_> = (0..100)
            .map(|i| sample(i * 10, Some(i * 20 + 5), i % 2 == 0))
            .collect();
        // Window: arrivals after the 25th's (t = 250 ms) up to t = 990 ms: 74 arrivals.
        let w = Window::measure(&keeps, &[target()]).unwrap();
        assert_eq!(w.arrivals, 74);
        // 74 completions (the one at 255 through 985) of 74 arrivals.
        assert_eq!(w.served_share, 1.0);
        assert_eq!(w.verdicts(&[target()], 0.97), vec![true, true]);
        let w = Window::measure(&behind, &[target()]).unwrap();
        // Completions at 20i + 5 in (250, 990]: i = 13..=49, 37 of 74.
        assert_eq!(w.served_share, 0.5);
        assert_eq!(w.verdicts(&[target()], 0.97), vec![false, false]);
        assert!((w.offered_per_s - 74.0 / 0.74).abs() < 1e-9);
    }

    #[test]
    fn an_slo_fails_below_its_attainment_even_when_the_queue_keeps_up() {
        // Every third request misses its target: attainment 2/3 < 0.9.
        let runs: Vec<_> = (0..100)
            .map(|i| sample(i * 10, Some(i * 10 + 5), i % 3 != 0))
            .collect();
        let w = Window::measure(&runs, &[target()]).unwrap();
        assert_eq!(w.verdicts(&[target()], 0.97), vec![true, false]);
    }

    #[test]
    fn too_short_a_run_is_refused_with_the_fix() {
        let runs: Vec<_> = (0..20).map(|i| sample(i, Some(i + 1), true)).collect();
        let e = Window::measure(&runs, &[]).unwrap_err();
        assert!(e.contains("raise workload.num_requests"), "{e}");
    }

    #[test]
    fn bisection_finds_a_known_threshold_within_the_tolerance() {
        // A deployment that keeps up below 3.7× and meets its SLO below 1.3×.
        let fake = |scale: f64| {
            Ok(Some(Window {
                arrivals: 100,
                served_share: if scale <= 3.7 { 1.0 } else { 0.5 },
                offered_per_s: scale,
                completed_per_s: 1.0,
                in_flight_at_start: 0,
                warm_up_arrivals: 25,
                attainment: vec![if scale <= 1.3 { 1.0 } else { 0.0 }],
            }))
        };
        let s = search_seed(1, &[target()], 0.01, 0.97, fake).unwrap();
        let sustained = s.brackets[0];
        let (p, f) = (sustained.passes.unwrap(), sustained.fails.unwrap());
        assert!(p <= 3.7 && f > 3.7 && f / p <= 1.01, "{p} {f}");
        let slo = s.brackets[1];
        let (p, f) = (slo.passes.unwrap(), slo.fails.unwrap());
        assert!(p <= 1.3 && f > 1.3 && f / p <= 1.01, "{p} {f}");
        // Brackets share runs: two bisections of ~8 halvings each, plus the bracketing.
        assert!(s.runs <= 20, "{} runs", s.runs);
    }

    #[test]
    fn a_bracket_too_narrow_to_split_is_settled_whatever_the_tolerance() {
        // Adjacent f64s: their geometric mean is one of them, which `record` ignores, so a
        // search that ran it would run it again forever.
        let p = 3.7_f64;
        let tight = Bracket {
            passes: Some(p),
            fails: Some(f64::from_bits(p.to_bits() + 1)),
        };
        assert_eq!(tight.next(0.0), None);
        let wide = Bracket {
            passes: Some(1.0),
            fails: Some(4.0),
        };
        assert_eq!(wide.next(0.0), Some(2.0));
        assert_eq!(wide.next(3.0), None);
    }

    #[test]
    fn a_deployment_that_never_fails_is_reported_as_at_least_the_largest_multiple() {
        let fine = |scale: f64| {
            Ok(Some(Window {
                arrivals: 100,
                served_share: 1.0,
                offered_per_s: scale,
                completed_per_s: 1.0,
                in_flight_at_start: 0,
                warm_up_arrivals: 25,
                attainment: vec![],
            }))
        };
        let s = search_seed(1, &[], 0.02, 0.97, fine).unwrap();
        assert_eq!(s.brackets[0].passes, Some(MAX_SCALE));
        assert_eq!(s.brackets[0].fails, None);
        let never = |_: f64| {
            Ok(Some(Window {
                arrivals: 100,
                served_share: 0.1,
                offered_per_s: 1.0,
                completed_per_s: 1.0,
                in_flight_at_start: 0,
                warm_up_arrivals: 25,
                attainment: vec![],
            }))
        };
        let s = search_seed(1, &[], 0.02, 0.97, never).unwrap();
        assert_eq!(s.brackets[0].passes, None);
        assert_eq!(s.brackets[0].fails, Some(MIN_SCALE));
    }
}
