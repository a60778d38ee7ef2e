//! `servesim calibrate`: fit latency coefficients to a measured run by simulating it.
//!
//! Every candidate is scored by replaying all measured arrivals through the scenario's server
//! (so queueing and batching interact as they did for real) and comparing statistics of the
//! training requests' TTFT, E2E and mean inter-token latency with the measured ones (see
//! [`loss`]): the mean squared relative error. Every fifth request (by arrival) is held back
//! and reported on afterwards. The search is Nelder–Mead over the logarithms of the parameters
//! (a handful of dimensions, each evaluation a whole simulation, no gradients: a dozen lines
//! of simplex beat a solver dependency).
//!
//! Families:
//! - `Blackbox`: α0 (µs of queueing per request), β0 (µs per step), β1 (µs per prompt token
//!   computed), β2 (µs per decoding request). α1 and α2 stay 0: with per-request TTFT and E2E
//!   they cannot be told apart from β1 and β0.
//! - `TrainedPhysics`: scale factors on the bundled coefficients' prefill, decode, weight and
//!   fixed-overhead terms, plus α0.
//! - `Roofline`: our roofline's least measured terms, keeping its physics: the GEMM efficiency
//!   (prefill compute), the paged KV read's efficiency (what each decoding request adds to a
//!   step) and the fixed cost of a step, plus α0; every other field of the group's
//!   `Roofline(...)` stays as the scenario gives it.

use serde::Serialize;

use super::{MeasuredRequest, Report, compare_slice, replay_scenario, simulate};
use crate::latency::Coefficients;
use crate::scenario::{LatencySpec, Scenario};
use crate::setup::SimError;

/// What to fit.
/// Which coefficients a fit finds (`--model` on the command line, `model=` in Python).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Family {
    /// α0 and β0, β1, β2 of the blackbox model.
    Blackbox,
    /// Scale factors on the bundled trained-physics coefficients, and α0.
    TrainedPhysics,
    /// Our roofline's least measured terms (GEMM efficiency, paged KV read efficiency, step
    /// overhead) and α0, keeping its physics and the group's other fields.
    Roofline,
}

impl Family {
    /// Each family by its name, the command line's `--model` values.
    pub const NAMED: [(&'static str, Family); 3] = [
        ("blackbox", Family::Blackbox),
        ("trained-physics", Family::TrainedPhysics),
        ("roofline", Family::Roofline),
    ];

    /// The family called `name`, or what the names are.
    pub fn named(name: &str) -> Result<Family, String> {
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, f)| f)
            .ok_or_else(|| {
                let names: Vec<String> =
                    Self::NAMED.iter().map(|(n, _)| format!("{n:?}")).collect();
                format!("model={name:?}: one of {}", names.join(", "))
            })
    }
}

/// A finished fit.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    /// Fitted parameters by name.
    pub params: Vec<(String, f64)>,
    /// The latency model to paste into the scenario (RON).
    pub ron: String,
    /// Loss on the training requests (mean squared relative error of the matched statistics).
    pub train_loss: f64,
    /// Simulations run.
    pub evaluations: usize,
    /// The held-back fifth of the requests, replayed with the fitted model.
    pub holdout: Report,
    #[serde(skip)]
    pub latency: Option<LatencySpec>,
}

/// Bins per binned statistic.
const BINS: usize = 10;

/// The fewest measured requests a fit takes: eight to fit on, two held back.
pub const MIN_MEASURED: usize = 10;

/// The fewest simulations a fit may be given.
pub const MIN_EVALUATIONS: usize = 8;

fn is_holdout(i: usize) -> bool {
    i % 5 == 4
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A family's latency model at given parameter values.
type Build = Box<dyn Fn(&[f64]) -> LatencySpec>;

/// The names, starting values and model of a family.
struct Space {
    names: &'static [&'static str],
    start: Vec<f64>,
    build: Build,
}

fn blackbox(p: &[f64]) -> LatencySpec {
    LatencySpec::Blackbox {
        alpha: vec![p[0], 0.0, 0.0],
        beta: vec![p[1], p[2], p[3]],
    }
}

fn trained_physics(p: &[f64]) -> LatencySpec {
    let c = Coefficients::bundled();
    let mut beta = c.beta.clone();
    let scale = |beta: &mut Vec<f64>, idx: &[usize], s: f64| {
        for &i in idx {
            if let Some(b) = beta.get_mut(i) {
                *b *= s;
            }
        }
    };
    scale(&mut beta, &[0, 8], p[1]);
    scale(&mut beta, &[1, 9], p[2]);
    scale(&mut beta, &[2], p[3]);
    scale(&mut beta, &[4, 5, 6, 7], p[4]);
    let mut alpha = c.alpha.clone();
    alpha[0] = p[0];
    LatencySpec::TrainedPhysics {
        alpha: Some(alpha),
        beta: Some(beta),
    }
}

/// `base` (the group's own `Roofline(...)`, or every default) with α0, the GEMM efficiency,
/// the KV read's efficiency and the step overhead of `p`.
fn roofline(base: &LatencySpec, p: &[f64]) -> LatencySpec {
    let mut spec = base.clone();
    if let LatencySpec::Roofline {
        alpha,
        gemm_efficiency,
        kv_read_efficiency,
        step_overhead_us,
        ..
    } = &mut spec
    {
        // α1 and α2 stay as the group gives them.
        let mut a = alpha.clone().unwrap_or_else(|| vec![0.0; 3]);
        if let Some(a0) = a.first_mut() {
            *a0 = p[0];
        }
        *alpha = Some(a);
        *gemm_efficiency = Some(p[1]);
        *kv_read_efficiency = Some(p[2]);
        *step_overhead_us = Some(p[3]);
    }
    spec
}

fn space(family: Family, measured: &[MeasuredRequest], current: Option<&LatencySpec>) -> Space {
    let itl = median(measured.iter().filter_map(|m| m.itl_us).collect());
    let ttft = median(measured.iter().map(|m| m.ttft_us).collect());
    let input = median(measured.iter().map(|m| f64::from(m.input_tokens)).collect());
    match family {
        Family::Blackbox => Space {
            names: &[
                "alpha0_us",
                "beta0_us",
                "beta1_us_per_prefill_token",
                "beta2_us_per_decode",
            ],
            start: vec![
                (0.2 * ttft).max(1.0),
                (0.8 * itl).max(1.0),
                ((ttft - itl).max(0.0) / input.max(1.0)).max(0.01),
                (0.02 * itl).max(0.1),
            ],
            build: Box::new(blackbox),
        },
        Family::TrainedPhysics => Space {
            names: &[
                "alpha0_us",
                "prefill_scale",
                "decode_scale",
                "weight_scale",
                "overhead_scale",
            ],
            start: vec![(0.2 * ttft).max(1.0), 1.0, 1.0, 1.0, 1.0],
            build: Box::new(trained_physics),
        },
        Family::Roofline => {
            let base = match current {
                Some(spec @ LatencySpec::Roofline { .. }) => spec.clone(),
                _ => LatencySpec::default_roofline(),
            };
            // From the group's own values where it gives them, else the H100's physics.
            let ph = crate::model::GpuPhysics::default();
            let LatencySpec::Roofline {
                gemm_efficiency,
                bandwidth_efficiency,
                kv_read_efficiency,
                step_overhead_us,
                ..
            } = &base
            else {
                unreachable!("the base is a roofline")
            };
            let start = vec![
                (0.2 * ttft).max(1.0),
                gemm_efficiency.unwrap_or(ph.gemm_efficiency),
                kv_read_efficiency
                    .or(*bandwidth_efficiency)
                    .unwrap_or(ph.bandwidth_efficiency),
                step_overhead_us.unwrap_or(crate::latency::DEFAULT_STEP_OVERHEAD_US),
            ];
            Space {
                names: &[
                    "alpha0_us",
                    "gemm_efficiency",
                    "kv_read_efficiency",
                    "step_overhead_us",
                ],
                start,
                build: Box::new(move |p| roofline(&base, p)),
            }
        }
    }
}

/// The statistics a fit matches, over the training requests: mean TTFT in each tenth of
/// the prompt lengths, mean E2E in each tenth of the output lengths, TTFT p50 and p90, mean
/// ITL in each tenth of the measured load, and mean ITL. Per-request errors would be a poor target: a change
/// of a few µs reshuffles which requests share a step, so each request's latency jumps while
/// these aggregates move smoothly.
fn targets(
    measured: &[MeasuredRequest],
    sim: Option<&[crate::metrics::RequestSample]>,
) -> Vec<f64> {
    let train: Vec<usize> = (0..measured.len()).filter(|&i| !is_holdout(i)).collect();
    let ttft = |i: usize| match sim {
        None => Some(measured[i].ttft_us),
        Some(s) => s[i].completed.then_some(s[i].ttft_us? as f64),
    };
    let e2e = |i: usize| match sim {
        None => Some(measured[i].e2e_us),
        Some(s) => s[i].completed.then_some(s[i].e2e_us? as f64),
    };
    let itl = |i: usize| match sim {
        None => measured[i].itl_us,
        Some(s) => s[i].mean_itl_us.filter(|_| measured[i].itl_us.is_some()),
    };
    let mut out = Vec::new();
    let binned =
        |out: &mut Vec<f64>, key: &dyn Fn(usize) -> u32, value: &dyn Fn(usize) -> Option<f64>| {
            let mut order = train.clone();
            order.sort_by_key(|&i| (key(i), i));
            for chunk in order.chunks(order.len().div_ceil(BINS).max(1)) {
                let v: Vec<f64> = chunk.iter().filter_map(|&i| value(i)).collect();
                // A request the candidate did not complete counts as ten times the measurement.
                let missing = chunk.len() - v.len();
                let m = measured_mean(chunk, &v, missing);
                out.push(m);
            }
        };
    binned(&mut out, &|i| measured[i].input_tokens, &ttft);
    binned(&mut out, &|i| measured[i].output_tokens, &e2e);
    let mut t: Vec<f64> = train.iter().filter_map(|&i| ttft(i)).collect();
    let [_, p50, p90, _] = super::stats(&mut t);
    out.extend([p50, p90]);
    // ITL against load: the measured requests in flight at each request's decode midpoint
    // separate the per-step cost from the per-request one.
    let load = concurrency(measured);
    binned(&mut out, &|i| load[i], &itl);
    let mut l: Vec<f64> = train.iter().filter_map(|&i| itl(i)).collect();
    out.push(super::stats(&mut l)[0]);
    out
}

/// For each measured request, how many measured requests were in flight halfway through
/// its decode.
fn concurrency(measured: &[MeasuredRequest]) -> Vec<u32> {
    let mut starts: Vec<f64> = measured.iter().map(|m| m.arrival_us as f64).collect();
    let mut ends: Vec<f64> = measured
        .iter()
        .map(|m| m.arrival_us as f64 + m.e2e_us)
        .collect();
    starts.sort_by(f64::total_cmp);
    ends.sort_by(f64::total_cmp);
    measured
        .iter()
        .map(|m| {
            let t = m.arrival_us as f64 + (m.ttft_us + m.e2e_us) / 2.0;
            let started = starts.partition_point(|&x| x <= t);
            let ended = ends.partition_point(|&x| x < t);
            started.saturating_sub(ended) as u32
        })
        .collect()
}

fn measured_mean(chunk: &[usize], v: &[f64], missing: usize) -> f64 {
    let sum: f64 = v.iter().sum();
    let mean = if v.is_empty() {
        0.0
    } else {
        sum / v.len() as f64
    };
    if missing == 0 {
        mean
    } else {
        (sum + 10.0 * mean.max(1.0) * missing as f64) / chunk.len() as f64
    }
}

/// The constant queueing delay that makes the simulated mean TTFT of the training requests
/// equal the measured one (never negative).
fn alpha0_shift(measured: &[MeasuredRequest], sim: &[crate::metrics::RequestSample]) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for (i, (m, s)) in measured.iter().zip(sim).enumerate() {
        if let (false, true, Some(t)) = (is_holdout(i), s.completed, s.ttft_us) {
            sum += m.ttft_us - t as f64;
            n += 1;
        }
    }
    if n == 0 {
        0.0
    } else {
        (sum / n as f64).max(0.0)
    }
}

fn residual(want: &[f64], got: &[f64]) -> Vec<f64> {
    want.iter()
        .zip(got)
        .filter(|(w, _)| w.is_finite() && **w > 0.0)
        .map(|(w, g)| (if g.is_finite() { *g } else { 10.0 * w } - w) / w)
        .collect()
}

fn mean_sq(r: &[f64]) -> f64 {
    r.iter().map(|x| x * x).sum::<f64>() / r.len().max(1) as f64
}

/// The Levenberg–Marquardt step: (JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr.
fn lm_step(jac: &[Vec<f64>], r: &[f64], lambda: f64) -> Option<Vec<f64>> {
    let n = jac.first()?.len();
    let mut a = vec![vec![0.0; n + 1]; n];
    for (row, ri) in jac.iter().zip(r) {
        for i in 0..n {
            for j in 0..n {
                a[i][j] += row[i] * row[j];
            }
            a[i][n] -= row[i] * ri;
        }
    }
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += lambda * row[i].max(1e-12);
    }
    // Gaussian elimination with partial pivoting.
    for c in 0..n {
        let p = (c..n).max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))?;
        a.swap(c, p);
        if a[c][c].abs() < 1e-300 {
            return None;
        }
        let pivot = a[c].clone();
        for row in a.iter_mut().skip(c + 1) {
            let f = row[c] / pivot[c];
            for (x, p) in row.iter_mut().zip(&pivot).skip(c) {
                *x -= f * p;
            }
        }
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[i][k] * x[k]).sum();
        x[i] = (a[i][n] - s) / a[i][i];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Mean squared relative error between the simulated and measured [`targets`].
pub fn loss(measured: &[MeasuredRequest], sim: &[crate::metrics::RequestSample]) -> f64 {
    mean_sq(&residual(
        &targets(measured, None),
        &targets(measured, Some(sim)),
    ))
}

/// What makes a fit impossible before it starts (the command line's bad input, exit 2): a
/// group the scenario does not have, a roofline or trained-physics fit of a group without a
/// model or GPU, too few measured requests to fit on and hold back, or too few
/// simulations. `names` are the caller's words for the group, the budget and the family,
/// whose name replaces `{}` (`["--group", "--max-evals", "--model {}"]` on the command
/// line).
pub fn input_problem(
    scenario: &Scenario,
    group: usize,
    measured: usize,
    max_evaluations: usize,
    family: Family,
    names: [&str; 3],
) -> Option<String> {
    let [group_name, budget_name, family_name] = names;
    let groups = scenario.cluster.groups.len();
    if group >= groups {
        return Some(format!(
            "{group_name} {group}: the scenario has {groups} instance group{}",
            if groups == 1 { "" } else { "s" }
        ));
    }
    let g = &scenario.cluster.groups[group];
    let missing: Vec<&str> = [("model", g.model.is_none()), ("gpu", g.gpu.is_none())]
        .into_iter()
        .filter_map(|(field, none)| none.then_some(field))
        .collect();
    if family != Family::Blackbox && !missing.is_empty() {
        let name = Family::NAMED
            .iter()
            .find(|(_, f)| *f == family)
            .map_or("", |(n, _)| n);
        return Some(format!(
            "{} fits a model computed from the group's model and GPU, and cluster.groups[{group}] has no {}: give {}, or fit the blackbox model",
            family_name.replace("{}", name),
            missing.join(" and no "),
            if missing.len() == 1 { "it" } else { "them" }
        ));
    }
    if measured < MIN_MEASURED {
        return Some(format!(
            "{measured} measured request{} too few to fit a latency model: calibrate fits on four fifths of them and reports its error on the fifth it holds back, so it needs at least {MIN_MEASURED}; measure a longer run, or compare this one with `servesim check-real`",
            if measured == 1 { " is" } else { "s are" }
        ));
    }
    (max_evaluations < MIN_EVALUATIONS).then(|| {
        format!(
            "{budget_name} {max_evaluations}: a fit needs at least {MIN_EVALUATIONS} simulations (the default is 400)"
        )
    })
}

/// Fits `family` for instance group `group` of `scenario` to `measured` with at most
/// `max_evaluations` simulations.
pub fn calibrate(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    group: usize,
    measured: &[MeasuredRequest],
    family: Family,
    max_evaluations: usize,
) -> Result<Fit, SimError> {
    if let Some(problem) = input_problem(
        scenario,
        group,
        measured.len(),
        max_evaluations,
        family,
        ["group", "max_evaluations", "family {}"],
    ) {
        return Err(SimError::Calibration(problem));
    }
    let base = replay_scenario(scenario);
    let sp = space(
        family,
        measured,
        scenario.cluster.groups[group].latency.as_ref(),
    );
    let want = targets(measured, None);
    let evaluations = std::cell::Cell::new(0usize);
    let mut failure = None;
    // Relative residuals of the matched statistics at log-parameters θ (every parameter but
    // α0). α0 is solved, not searched: a constant queueing delay shifts every request's
    // arrival at the instance by the same amount, so the schedule is the same, only later,
    // and TTFT and E2E grow by exactly α0. Simulating with α0 = 0 and taking α0 as the mean
    // TTFT shortfall removes the dimension that trades against the per-token prefill cost.
    let mut residuals = |theta: &[f64]| -> Option<(Vec<f64>, f64)> {
        evaluations.set(evaluations.get() + 1);
        let p: Vec<f64> = std::iter::once(0.0)
            .chain(theta.iter().map(|t| t.exp()))
            .collect();
        let mut sc = base.clone();
        sc.cluster.groups[group].latency = Some((sp.build)(&p));
        match simulate(app, &sc, measured, None) {
            Ok(mut sim) => {
                let alpha0 = alpha0_shift(measured, &sim);
                for s in &mut sim {
                    let shift = alpha0.round() as u64;
                    s.ttft_us = s.ttft_us.map(|t| t + shift);
                    s.e2e_us = s.e2e_us.map(|t| t + shift);
                }
                Some((residual(&want, &targets(measured, Some(&sim))), alpha0))
            }
            Err(e) => {
                failure.get_or_insert(e);
                None
            }
        }
    };
    let start: Vec<f64> = sp.start[1..].iter().map(|x| x.ln()).collect();
    // A simplex search finds the basin (robust from a rough start); Levenberg–Marquardt
    // with Jacobians from ±3 % differences then walks the floor of the valley, which a
    // simplex does poorly: the loss is smooth at the scale of a few percent but flat in
    // tiny steps (a simulation changes in whole µs and whole batches).
    let coarse = max_evaluations * 2 / 5;
    let (mut best, mut best_loss) = nelder_mead(
        &mut |theta: &[f64]| residuals(theta).map_or(f64::INFINITY, |r| mean_sq(&r.0)),
        &start,
        0.7,
        coarse,
    );
    let mut lambda = 1e-3;
    let mut h = 0.03;
    while evaluations.get() + 2 * best.len() < max_evaluations && h > 0.002 {
        let Some((r0, _)) = residuals(&best) else {
            break;
        };
        let mut jac = vec![vec![0.0; best.len()]; r0.len()];
        let mut ok = true;
        for j in 0..best.len() {
            let (mut up, mut down) = (best.clone(), best.clone());
            up[j] += h;
            down[j] -= h;
            let (Some((a, _)), Some((b, _))) = (residuals(&up), residuals(&down)) else {
                ok = false;
                break;
            };
            for (i, row) in jac.iter_mut().enumerate() {
                row[j] = (a[i] - b[i]) / (2.0 * h);
            }
        }
        if !ok {
            break;
        }
        let mut improved = false;
        for _ in 0..4 {
            let Some(delta) = lm_step(&jac, &r0, lambda) else {
                break;
            };
            let cand: Vec<f64> = best.iter().zip(&delta).map(|(x, d)| x + d).collect();
            let v = residuals(&cand).map_or(f64::INFINITY, |r| mean_sq(&r.0));
            if v < best_loss {
                (best, best_loss) = (cand, v);
                lambda = (lambda / 3.0).max(1e-7);
                improved = true;
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            h /= 3.0;
        }
    }
    if !best_loss.is_finite() {
        return Err(failure
            .unwrap_or_else(|| SimError::Calibration("no candidate could be simulated".into())));
    }
    let alpha0 = residuals(&best).map_or(0.0, |r| r.1);
    let p: Vec<f64> = std::iter::once(alpha0)
        .chain(best.iter().map(|t| t.exp()))
        .collect();
    let latency = (sp.build)(&p);
    let mut sc = base.clone();
    sc.cluster.groups[group].latency = Some(latency.clone());
    let sim = simulate(app, &sc, measured, None)?;
    if let Some(e) = super::none_completed(&sim, "the scenario's cluster with the fitted model") {
        return Err(e);
    }
    let holdout_slice = compare_slice("held-back 20 %", measured, &sim, is_holdout);
    let holdout = Report {
        measured_requests: measured
            .iter()
            .enumerate()
            .filter(|(i, _)| is_holdout(*i))
            .count(),
        measured_failed: 0,
        timeout_s: None,
        notes: Vec::new(),
        not_completed_in_simulation: sim
            .iter()
            .enumerate()
            .filter(|(i, s)| is_holdout(*i) && !s.completed)
            .count(),
        mean_ape_pct: holdout_slice.mean_ape_pct(),
        overall: holdout_slice,
        stages: Vec::new(),
    };
    Ok(Fit {
        params: sp
            .names
            .iter()
            .zip(&p)
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        ron: ron_snippet(&latency),
        train_loss: best_loss,
        evaluations: evaluations.get(),
        holdout,
        latency: Some(latency),
    })
}

fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.6}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `latency:` line of a scenario group.
pub fn ron_snippet(l: &LatencySpec) -> String {
    match l {
        LatencySpec::Blackbox { alpha, beta } => {
            format!(
                "latency: Blackbox(alpha: [{}], beta: [{}]),",
                list(alpha),
                list(beta)
            )
        }
        LatencySpec::TrainedPhysics {
            alpha: Some(a),
            beta: Some(b),
        } => format!(
            "latency: TrainedPhysics(alpha: [{}], beta: [{}]),",
            list(a),
            list(b)
        ),
        LatencySpec::Roofline { alpha, .. } => {
            let fields: Vec<String> = alpha
                .iter()
                .map(|a| format!("alpha: [{}]", list(a)))
                .chain(
                    l.roofline_numbers()
                        .into_iter()
                        .map(|(name, v)| format!("{name}: {v:.6}")),
                )
                .collect();
            format!("latency: Roofline({}),", fields.join(", "))
        }
        other => format!("latency: {other:?},"),
    }
}

/// Minimises `f` from `start` with a simplex of relative size `step`; returns the best point
/// and its value after at most `budget` evaluations (or when the simplex has converged).
pub fn nelder_mead(
    f: &mut impl FnMut(&[f64]) -> f64,
    start: &[f64],
    step: f64,
    budget: usize,
) -> (Vec<f64>, f64) {
    let n = start.len();
    let mut pts: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    let mut used = 0;
    let mut eval = |x: &[f64], used: &mut usize| {
        *used += 1;
        f(x)
    };
    pts.push((start.to_vec(), eval(start, &mut used)));
    for i in 0..n {
        let mut x = start.to_vec();
        x[i] += step;
        let v = eval(&x, &mut used);
        pts.push((x, v));
    }
    while used < budget {
        pts.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (pts[0].1, pts[n].1);
        if (worst - best).abs() <= 1e-10 * best.abs().max(1e-12) {
            break;
        }
        let centroid: Vec<f64> = (0..n)
            .map(|j| pts[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64)
            .collect();
        let towards = |t: f64| -> Vec<f64> {
            centroid
                .iter()
                .zip(&pts[n].0)
                .map(|(c, w)| c + t * (w - c))
                .collect()
        };
        let xr = towards(-1.0);
        let fr = eval(&xr, &mut used);
        if fr < pts[0].1 {
            let xe = towards(-2.0);
            let fe = eval(&xe, &mut used);
            pts[n] = if fe < fr { (xe, fe) } else { (xr, fr) };
        } else if fr < pts[n - 1].1 {
            pts[n] = (xr, fr);
        } else {
            let xc = if fr < pts[n].1 {
                towards(-0.5)
            } else {
                towards(0.5)
            };
            let fc = eval(&xc, &mut used);
            if fc < pts[n].1.min(fr) {
                pts[n] = (xc, fc);
            } else {
                // Shrink towards the best point.
                let b = pts[0].0.clone();
                for p in pts.iter_mut().skip(1) {
                    p.0 = b.iter().zip(&p.0).map(|(b, x)| b + 0.5 * (x - b)).collect();
                    p.1 = eval(&p.0, &mut used);
                }
            }
        }
    }
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    pts.swap_remove(0)
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "cli")]
    #[test]
    fn the_families_names_are_the_command_lines() {
        use clap::ValueEnum;
        for (name, family) in Family::NAMED {
            assert_eq!(family.to_possible_value().unwrap().get_name(), name);
            assert_eq!(Family::named(name), Ok(family));
        }
        assert_eq!(Family::value_variants().len(), Family::NAMED.len());
        assert_eq!(
            Family::named("physics").unwrap_err(),
            r#"model="physics": one of "blackbox", "trained-physics", "roofline""#
        );
    }

    use super::*;

    #[test]
    fn a_roofline_fit_sets_its_four_terms_and_keeps_the_groups_others() {
        let base: LatencySpec = ron::Options::default()
            .with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
            .from_str(
                "Roofline(alpha: [1.0, 2.0, 3.0], allreduce_gb_per_s: 300.0, gemm_efficiency: 0.7)",
            )
            .unwrap();
        let fitted = roofline(&base, &[10.0, 0.5, 0.6, 700.0]);
        let line = ron_snippet(&fitted);
        assert_eq!(
            line,
            "latency: Roofline(alpha: [10.000000, 2.000000, 3.000000], step_overhead_us: 700.000000, \
             gemm_efficiency: 0.500000, kv_read_efficiency: 0.600000, allreduce_gb_per_s: 300.000000),"
        );
        // The line is a scenario's latency that reads back as the fitted model.
        let back: LatencySpec = ron::Options::default()
            .with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
            .from_str(line.trim_start_matches("latency: ").trim_end_matches(','))
            .unwrap();
        assert_eq!(format!("{back:?}"), format!("{fitted:?}"));
        // The start is the group's own value where it gives one, else the defaults.
        let sp = space(Family::Roofline, &[], Some(&base));
        assert_eq!(sp.start[1..], [0.7, 0.9, 400.0]);
    }

    #[test]
    fn nelder_mead_finds_the_minimum_of_a_shifted_bowl() {
        let mut f = |x: &[f64]| (x[0] - 1.5).powi(2) + 3.0 * (x[1] + 0.5).powi(2) + 2.0;
        let (x, v) = nelder_mead(&mut f, &[0.0, 0.0], 0.5, 400);
        assert!(
            (x[0] - 1.5).abs() < 1e-3 && (x[1] + 0.5).abs() < 1e-3,
            "{x:?}"
        );
        assert!((v - 2.0).abs() < 1e-6);
    }

    #[test]
    fn the_snippet_is_a_latency_line_ron_can_read() {
        let s = ron_snippet(&blackbox(&[10.0, 5000.0, 20.0, 150.0]));
        assert_eq!(
            s,
            "latency: Blackbox(alpha: [10.000000, 0.000000, 0.000000], beta: [5000.000000, 20.000000, 150.000000]),"
        );
        let spec: LatencySpec =
            ron::from_str(s.trim_start_matches("latency: ").trim_end_matches(',')).unwrap();
        assert_eq!(spec, blackbox(&[10.0, 5000.0, 20.0, 150.0]));
    }
}
