//! `servesim evaluate`: what a policy search needs from one candidate — named objectives in
//! [0, 1] and their weighted combination, the raw metrics per SLO class, the anomaly counts,
//! the checks a reviewer would make (every request accounted for, no class starved, load
//! shed), and a trace summary written for an LLM to read (the worst routing decisions with
//! their regret, tenant and instance outliers). Over one or more seeds, run in parallel;
//! the result does not depend on the thread count.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::metrics::{Anomalies, Summary, WorstDecision};
use crate::scenario::Scenario;
use crate::setup::{RunError, SimError};

/// The objectives, each in [0, 1] and higher-is-better (docs/evaluate.md defines each).
pub const OBJECTIVES: [&str; 7] = [
    "ttft_p99",
    "itl_p99",
    "e2e_p99",
    "slo_attainment",
    "served",
    "cost",
    "fairness",
];

/// Latency scales (ms) of the latency objectives: 1 / (1 + p99 / scale).
const TTFT_SCALE_MS: f64 = 100.0;
const ITL_SCALE_MS: f64 = 10.0;
const E2E_SCALE_MS: f64 = 1000.0;
/// Below this share of requests completed, a candidate is flagged as shedding load.
pub const SERVED_FLAG: f64 = 0.97;

/// Settings of an evaluation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seeds: the scenario's seed, +1, … (at least 1).
    pub seeds: u32,
    pub jobs: usize,
    /// Worst routing decisions listed.
    pub worst: u32,
    /// Weight of each objective in `combined` (a name left out weighs 1; 0 leaves it out).
    pub weights: BTreeMap<String, f64>,
    /// Set from elsewhere (Ctrl-C in Python), it stops every run at its next tick.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            seeds: 1,
            jobs: 1,
            worst: 5,
            weights: BTreeMap::new(),
            interrupt: None,
        }
    }
}

/// One SLO class's (or the whole run's) metrics over every seed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassMetrics {
    pub name: String,
    pub injected: u64,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    pub good: u64,
    /// good / injected over every seed; `None` without a target.
    pub attainment: Option<f64>,
    /// Mean over seeds of each seed's p99 (seeds without a sample left out).
    pub ttft_p99_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
}

/// What a reviewer checks before believing a fitness.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Checks {
    /// In every seed, injected = completed + rejected + dropped + timed out + left queued,
    /// running or in transit.
    pub accounted: bool,
    /// Completed / injected over every seed.
    pub served_share: f64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    /// Left queued, running or in transit when the run stopped.
    pub unfinished: u64,
    /// SLO classes whose completed share is below half the run's.
    pub starved_classes: Vec<String>,
    /// Each reason not to trust the fitness as it stands (empty: none).
    pub flags: Vec<String>,
}

/// A tenant or instance far from the rest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outlier {
    pub name: String,
    pub why: String,
}

/// The trace summary for a reader (an LLM reflecting on the candidate).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Trace {
    /// Highest-regret routing decisions over every seed (with the seed), highest first.
    pub worst_decisions: Vec<(u64, WorstDecision)>,
    pub tenant_outliers: Vec<Outlier>,
    pub instance_outliers: Vec<Outlier>,
    /// Where the mean TTFT goes, over every seed (`summary.json`'s `ttft_parts_ms`).
    pub ttft_parts_ms: crate::metrics::TtftPartsSummary,
    /// All of it in plain words.
    pub text: String,
}

/// What `evaluate` answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evaluation {
    pub scenario: String,
    pub seeds: Vec<u64>,
    /// Each objective's mean over seeds.
    pub fitness: BTreeMap<String, f64>,
    /// Σ weight · objective / Σ weight, times `served` (so shedding load never pays).
    pub combined: f64,
    pub weights: BTreeMap<String, f64>,
    pub overall: ClassMetrics,
    pub classes: Vec<ClassMetrics>,
    /// Summed over seeds.
    pub anomalies: Anomalies,
    pub checks: Checks,
    pub trace: Trace,
}

/// The objectives of one run.
pub fn objectives(s: &Summary) -> BTreeMap<String, f64> {
    let lat = |ms: Option<f64>, scale: f64| ms.map_or(0.0, |v| 1.0 / (1.0 + v / scale));
    let served = if s.requests.injected == 0 {
        0.0
    } else {
        s.requests.completed as f64 / s.requests.injected as f64
    };
    let values = [
        lat(s.ttft_ms.p99, TTFT_SCALE_MS),
        lat(s.itl_ms.p99, ITL_SCALE_MS),
        lat(s.e2e_ms.p99, E2E_SCALE_MS),
        s.slo.attainment.unwrap_or(served),
        served,
        s.cost
            .per_million_output_tokens
            .map_or(0.0, |c| 1.0 / (1.0 + c)),
        // Nothing served is not fair, it is nothing (Jain's index of all zeros is 1).
        if s.throughput.output_tokens == 0 {
            0.0
        } else {
            s.fairness.jain_tenant_output_tokens
        },
    ];
    OBJECTIVES
        .iter()
        .zip(values)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// Evaluates `scenario` (loaded and validated) over `settings.seeds` seeds.
pub fn evaluate(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    settings: &Settings,
) -> Result<Evaluation, String> {
    evaluate_with(app, scenario, settings, &|_, _| Ok(()))
}

/// Unless `seeds` runs can be evaluated, what is wrong.
pub fn check_seeds(seeds: u32) -> Result<(), String> {
    let most = crate::sweep::MAX_RUNS_PER_SHARD;
    if (1..=most).contains(&u64::from(seeds)) {
        return Ok(());
    }
    Err(format!(
        "seeds must be in [1, {}], got {seeds} (one run each; split a larger study into \
         sweeps with `servesim sweep --replicas` and --shard)",
        crate::scenario::grouped(most),
    ))
}

/// [`evaluate`], with `prepare(seed, simulation)` called on each run before it starts (the
/// Python package installs its policies there, a fresh copy per seed).
pub fn evaluate_with(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    settings: &Settings,
    prepare: &(dyn Fn(u64, &mut crate::Simulation) -> Result<(), String> + Sync),
) -> Result<Evaluation, String> {
    check_seeds(settings.seeds)?;
    // Every unknown name and bad weight at once, not the first alone.
    let mut wrong = Vec::new();
    for (k, w) in &settings.weights {
        if !OBJECTIVES.contains(&k.as_str()) {
            let guess = crate::scenario::did_you_mean(k, OBJECTIVES.iter().copied())
                .map(|x| format!(" (did you mean \"{x}\"?)"))
                .unwrap_or_default();
            wrong.push(format!("no objective \"{k}\"{guess}"));
        } else if !(w.is_finite() && *w >= 0.0) {
            wrong.push(format!(
                "the weight of {k} must be finite and ≥ 0, got {}",
                crate::scenario::readable(*w)
            ));
        }
    }
    if !wrong.is_empty() {
        return Err(format!(
            "{}; the objectives: {}",
            wrong.join("; "),
            OBJECTIVES.join(", ")
        ));
    }
    let weights: BTreeMap<String, f64> = OBJECTIVES
        .iter()
        .map(|k| {
            (
                k.to_string(),
                settings.weights.get(*k).copied().unwrap_or(1.0),
            )
        })
        .collect();
    if weights.values().sum::<f64>() <= 0.0 {
        return Err("every weight is 0: give at least one objective a weight".into());
    }
    let seeds: Vec<u64> = (0..settings.seeds)
        .map(|r| scenario.seed.wrapping_add(u64::from(r)))
        .collect();
    let runs = crate::parallel::per_seed(&seeds, settings.jobs, |seed| {
        let mut sc = scenario.clone();
        sc.seed = seed;
        sc.outputs.worst_decisions = settings.worst;
        let run = app
            .simulation(
                &sc,
                crate::RunOptions {
                    interrupt: settings.interrupt.clone(),
                    ..Default::default()
                },
            )
            .map_err(|e| format!("seed {seed}: {e}"))
            .and_then(|mut sim| {
                prepare(seed, &mut sim).map_err(|e| format!("seed {seed}: {e}"))?;
                Ok(sim.run())
            })?;
        match run {
            Ok(s) => Ok(Ok(s)),
            Err(SimError::Run(RunError::Fault(f @ crate::engine::Fault::Overloaded { .. }))) => {
                Ok(Err(f.to_string()))
            }
            Err(e) => Err(format!("seed {seed}: {e}")),
        }
    })?;
    Ok(assemble(scenario, &seeds, &runs, &weights, settings.worst))
}

/// Joins the runs (each a summary, or why it overloaded) into the evaluation.
fn assemble(
    scenario: &Scenario,
    seeds: &[u64],
    runs: &[Result<Summary, String>],
    weights: &BTreeMap<String, f64>,
    worst: u32,
) -> Evaluation {
    let n = runs.len() as f64;
    let mut e = Evaluation {
        scenario: scenario.name.clone(),
        seeds: seeds.to_vec(),
        weights: weights.clone(),
        ..Default::default()
    };
    for k in OBJECTIVES {
        e.fitness.insert(k.to_string(), 0.0);
    }
    let summaries: Vec<(u64, &Summary)> = seeds
        .iter()
        .zip(runs)
        .filter_map(|(&seed, r)| r.as_ref().ok().map(|s| (seed, s)))
        .collect();
    for (&seed, r) in seeds.iter().zip(runs) {
        if let Err(why) = r {
            e.checks.flags.push(format!(
                "seed {seed} overloaded and stopped ({why}): every objective is 0 for it"
            ));
        }
    }
    for (_, s) in &summaries {
        for (k, v) in objectives(s) {
            *e.fitness.get_mut(&k).expect("every objective") += v / n;
        }
        let a = &s.anomalies;
        e.anomalies.priority_inversions += a.priority_inversions;
        e.anomalies.hol_blocking += a.hol_blocking;
        e.anomalies.scale_oscillations += a.scale_oscillations;
        e.anomalies.kv_thrashing += a.kv_thrashing;
    }
    // Weights are relative: scaled by the largest first, so that finite weights whose sum
    // would overflow (1e308 twice) still give their weighted mean, not 0.
    let largest = weights.values().copied().fold(0.0, f64::max);
    let total: f64 = weights.values().map(|w| w / largest).sum();
    let weighted: f64 = weights
        .iter()
        .map(|(k, w)| w / largest * e.fitness[k])
        .sum();
    e.combined = weighted / total * e.fitness["served"];
    e.overall = class_metrics("all", summaries.iter().map(|(_, s)| whole(s)));
    let classes: Vec<String> = summaries
        .first()
        .map(|(_, s)| s.slo_classes.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    e.classes = classes
        .iter()
        .enumerate()
        .map(|(k, name)| {
            class_metrics(
                name,
                summaries
                    .iter()
                    .filter_map(|(_, s)| s.slo_classes.get(k).cloned()),
            )
        })
        .collect();
    e.checks = checks(
        &summaries,
        &e.overall,
        &e.classes,
        std::mem::take(&mut e.checks.flags),
    );
    e.trace = trace(&summaries, worst as usize);
    e.trace.text = text(&e);
    e
}

/// A run's totals as one slice.
fn whole(s: &Summary) -> crate::metrics::SliceSummary {
    crate::metrics::SliceSummary {
        name: "all".into(),
        injected: s.requests.injected,
        completed: s.requests.completed,
        rejected: s.requests.rejected,
        dropped: s.requests.dropped,
        timed_out: s.requests.timed_out,
        output_tokens: s.throughput.output_tokens,
        good: s.slo.good,
        slo_attainment: s.slo.attainment,
        ttft_ms: s.ttft_ms.clone(),
        e2e_ms: s.e2e_ms.clone(),
    }
}

fn class_metrics(
    name: &str,
    slices: impl Iterator<Item = crate::metrics::SliceSummary>,
) -> ClassMetrics {
    let mut m = ClassMetrics {
        name: name.to_string(),
        ..Default::default()
    };
    let (mut ttft, mut e2e, mut targeted) = (Vec::new(), Vec::new(), false);
    for s in slices {
        m.injected += s.injected;
        m.completed += s.completed;
        m.rejected += s.rejected;
        m.dropped += s.dropped;
        m.timed_out += s.timed_out;
        m.good += s.good;
        targeted |= s.slo_attainment.is_some();
        ttft.extend(s.ttft_ms.p99);
        e2e.extend(s.e2e_ms.p99);
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    m.attainment = (targeted && m.injected > 0).then(|| m.good as f64 / m.injected as f64);
    m.ttft_p99_ms = mean(&ttft);
    m.e2e_p99_ms = mean(&e2e);
    m
}

fn checks(
    summaries: &[(u64, &Summary)],
    overall: &ClassMetrics,
    classes: &[ClassMetrics],
    mut flags: Vec<String>,
) -> Checks {
    let mut c = Checks {
        accounted: true,
        ..Default::default()
    };
    for (seed, s) in summaries {
        let r = &s.requests;
        let ended = r.accounted();
        if ended != r.injected {
            c.accounted = false;
            flags.push(format!(
                "seed {seed}: {} requests injected but {ended} accounted for",
                r.injected
            ));
        }
        c.unfinished += r.queued + r.running + r.in_transit;
    }
    c.rejected = overall.rejected;
    c.dropped = overall.dropped;
    c.timed_out = overall.timed_out;
    c.served_share = if overall.injected == 0 {
        0.0
    } else {
        overall.completed as f64 / overall.injected as f64
    };
    if c.served_share < SERVED_FLAG {
        flags.push(format!(
            "sheds load: only {:.1} % of requests completed ({} rejected, {} dropped, {} timed out, {} unfinished); the combined score is multiplied by the share served",
            c.served_share * 100.0,
            c.rejected,
            c.dropped,
            c.timed_out,
            c.unfinished
        ));
    }
    for k in classes {
        if k.injected > 0 && (k.completed as f64 / k.injected as f64) < 0.5 * c.served_share {
            c.starved_classes.push(k.name.clone());
            flags.push(format!(
                "starves class {}: {} of {} completed, against {:.1} % overall",
                k.name,
                k.completed,
                k.injected,
                c.served_share * 100.0
            ));
        }
    }
    c.flags = flags;
    c
}

fn trace(summaries: &[(u64, &Summary)], worst: usize) -> Trace {
    let mut t = Trace::default();
    let mut all: Vec<(u64, WorstDecision)> = summaries
        .iter()
        .flat_map(|(seed, s)| s.routing.worst.iter().map(|w| (*seed, w.clone())))
        .collect();
    all.sort_by(|a, b| {
        b.1.regret
            .total_cmp(&a.1.regret)
            .then(a.0.cmp(&b.0))
            .then(a.1.time_us.cmp(&b.1.time_us))
    });
    all.truncate(worst);
    t.worst_decisions = all;
    t.ttft_parts_ms =
        crate::metrics::TtftPartsSummary::pooled(summaries.iter().map(|(_, s)| &s.ttft_parts_ms));
    // Tenants: served share or p90 TTFT far from the run's (first seed's slices, summed).
    let mut tenants: BTreeMap<&str, (u64, u64, Vec<f64>)> = BTreeMap::new();
    let mut run_p90 = Vec::new();
    for (_, s) in summaries {
        run_p90.extend(s.ttft_ms.p90);
        for x in &s.tenants {
            let e = tenants.entry(&x.name).or_default();
            e.0 += x.injected;
            e.1 += x.completed;
            e.2.extend(x.ttft_ms.p90);
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let (injected, completed) = tenants
        .values()
        .fold((0, 0), |(i, c), x| (i + x.0, c + x.1));
    let share = |c: u64, i: u64| if i == 0 { 0.0 } else { c as f64 / i as f64 };
    let run_share = share(completed, injected);
    let run_p90 = mean(&run_p90);
    if tenants.len() > 1 {
        for (name, (i, c, p90)) in &tenants {
            let mine = share(*c, *i);
            let p90 = mean(p90);
            let mut why = Vec::new();
            if mine + 0.1 < run_share {
                why.push(format!(
                    "{:.1} % completed against {:.1} % overall",
                    mine * 100.0,
                    run_share * 100.0
                ));
            }
            if let (Some(p), Some(r)) = (p90, run_p90)
                && p > 2.0 * r
            {
                why.push(format!("p90 TTFT {p:.1} ms against {r:.1} ms overall"));
            }
            if !why.is_empty() {
                t.tenant_outliers.push(Outlier {
                    name: name.to_string(),
                    why: why.join("; "),
                });
            }
        }
    }
    // Instances: completed requests and busy fraction far from the mean (over seeds).
    let count = summaries.first().map_or(0, |(_, s)| s.instances.len());
    let mut done = vec![0.0; count];
    let mut busy = vec![0.0; count];
    for (_, s) in summaries {
        for (k, x) in s.instances.iter().enumerate().take(count) {
            done[k] += x.completed as f64;
            busy[k] += x.busy_fraction / summaries.len() as f64;
        }
    }
    let mean_done = done.iter().sum::<f64>() / count.max(1) as f64;
    if count > 1 && mean_done > 0.0 {
        for k in 0..count {
            let ratio = done[k] / mean_done;
            if !(0.5..=1.5).contains(&ratio) {
                t.instance_outliers.push(Outlier {
                    name: format!("instance {k}"),
                    why: format!(
                        "{:.2}× the mean requests completed (busy {:.1} % of the time)",
                        ratio,
                        busy[k] * 100.0
                    ),
                });
            }
        }
    }
    t
}

/// The trace summary in plain words (a few hundred at most).
fn text(e: &Evaluation) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let f = &e.fitness;
    let _ = write!(
        s,
        "Evaluation of {} over {} seed{}: combined score {:.4}. Objectives (0 to 1, higher is better): {}. ",
        e.scenario,
        e.seeds.len(),
        if e.seeds.len() == 1 { "" } else { "s" },
        e.combined,
        OBJECTIVES
            .iter()
            .map(|k| format!("{k} {:.3}", f[*k]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let o = &e.overall;
    let _ = write!(
        s,
        "{} of {} requests completed ({} rejected, {} dropped, {} timed out); p99 TTFT {}, p99 E2E {}. ",
        o.completed,
        o.injected,
        o.rejected,
        o.dropped,
        o.timed_out,
        ms(o.ttft_p99_ms),
        ms(o.e2e_p99_ms)
    );
    let p = &e.trace.ttft_parts_ms;
    if p.requests > 0 {
        let _ = write!(
            s,
            "Mean TTFT {} ({} requests never preempted or retried): {} to the instance, {} waiting in its queue, {} prefill, {} token out. ",
            ms(p.ttft),
            p.requests,
            ms(p.to_the_instance),
            ms(p.waiting),
            ms(p.prefill),
            ms(p.token_out)
        );
    }
    for c in &e.classes {
        let _ = write!(
            s,
            "Class {}: {} of {} completed, attainment {}, p99 TTFT {}. ",
            c.name,
            c.completed,
            c.injected,
            c.attainment
                .map_or("n/a".to_string(), |a| format!("{:.3}", a)),
            ms(c.ttft_p99_ms)
        );
    }
    let a = &e.anomalies;
    let _ = write!(
        s,
        "Anomalies: {} head-of-line blocking, {} priority inversions, {} scale oscillations, {} KV thrashing reloads. ",
        a.hol_blocking, a.priority_inversions, a.scale_oscillations, a.kv_thrashing
    );
    if e.checks.flags.is_empty() {
        s.push_str(
            "Checks: every request is accounted for, no class is starved, no load is shed. ",
        );
    } else {
        let _ = write!(s, "Warnings: {}. ", e.checks.flags.join("; "));
    }
    if !e.trace.worst_decisions.is_empty() {
        let list: Vec<String> = e
            .trace
            .worst_decisions
            .iter()
            .map(|(seed, w)| {
                format!(
                    "request {} at {:.3} s (seed {seed}) went to instance {} while instance {} scored {:.3} better",
                    w.request_id,
                    w.time_us as f64 / 1e6,
                    w.chosen,
                    w.best,
                    w.regret
                )
            })
            .collect();
        let _ = write!(s, "Worst routing decisions: {}. ", list.join("; "));
    }
    for (what, list) in [
        ("Tenant", &e.trace.tenant_outliers),
        ("Instance", &e.trace.instance_outliers),
    ] {
        for x in list {
            let _ = write!(s, "{what} outlier {}: {}. ", x.name, x.why);
        }
    }
    s.trim_end().to_string()
}

fn ms(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.1} ms"))
}
