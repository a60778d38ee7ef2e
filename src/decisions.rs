//! Routing decisions and what is kept of them: the regret statistics ([`RoutingStats`],
//! with the worst decisions when asked) and `decisions.csv` ([`DecisionLog`]): one row per
//! routing decision and one per anomaly the instances and the autoscaler detected.
//! Routing (`crate::cluster`) sets it up and calls [`trace_decision`]; nothing here imports
//! routing.

use bevy_ecs::prelude::*;

use crate::policy::ScoredCandidate;
use crate::setup::{RunError, SetupCtx, SetupError, SimError};
use crate::time::SimTime;

/// Regret statistics of routing decisions (BLIS counterfactual regret).
#[derive(Resource, Debug, Default, Clone)]
pub struct RoutingStats {
    pub decisions: u64,
    pub regret_sum: f64,
    pub regret_max: f64,
    /// `outputs.worst_decisions`: how many of the highest-regret decisions to keep.
    pub worst_k: usize,
    /// Those decisions, highest regret first (ties: earliest).
    pub worst: Vec<crate::metrics::WorstDecision>,
}

impl RoutingStats {
    /// Keeps `d` if it is among the `worst_k` highest regrets so far.
    fn keep_if_worst(&mut self, d: crate::metrics::WorstDecision) {
        if self.worst.len() == self.worst_k
            && self.worst.last().is_none_or(|w| w.regret >= d.regret)
        {
            return;
        }
        let at = self.worst.partition_point(|w| w.regret >= d.regret);
        self.worst.insert(at, d);
        self.worst.truncate(self.worst_k);
    }
}

/// Streaming `decisions.csv` (present only when decision tracing is on).
#[derive(Resource, Default)]
pub struct DecisionLog {
    pub writer: Option<csv::Writer<std::io::BufWriter<std::fs::File>>>,
    pub top_k: usize,
    pub error: Option<String>,
}

/// `SetupStage::Outputs`: `decisions.csv` (its header written) when the scenario or the run
/// options ask for it.
pub(crate) fn open_decisions(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let outputs = &ctx.scenario.outputs;
    if !(ctx.options.trace_decisions || outputs.decisions_csv) {
        return Ok(());
    }
    let world = app.world_mut();
    let mut files = world.resource_mut::<crate::output::Outputs>();
    let Some(file) = files.create("decisions.csv").map_err(SetupError::Outputs)? else {
        return Ok(());
    };
    let mut writer = csv::Writer::from_writer(file);
    writer
        .write_record(DECISION_COLUMNS)
        .map_err(|e| SetupError::Output {
            path: files.staged_path("decisions.csv"),
            message: e.to_string(),
        })?;
    world.insert_resource(DecisionLog {
        writer: Some(writer),
        top_k: outputs.decision_top_k as usize,
        error: None,
    });
    use bevy_ecs::schedule::ScheduleLabel;
    for label in [
        crate::engine::SimStep.intern(),
        crate::engine::SimStepFast.intern(),
    ] {
        app.add_systems(
            label,
            write_anomaly_rows.in_set(crate::engine::SimSystems::Observe),
        );
    }
    Ok(())
}

/// Writes the anomalies detected since the last tick (by the instances, by time and index,
/// then by scaling) as rows of `decisions.csv`: `chosen` is the instance (empty for
/// scaling), `kind` and `detail` say what happened.
fn write_anomaly_rows(
    mut log: ResMut<DecisionLog>,
    mut others: ResMut<crate::instance::AnomalyLog>,
    mut instances: Query<(&crate::instance::Instance, &mut crate::instance::Scheduler)>,
) {
    let log = &mut *log;
    let mut rows: Vec<(u32, crate::instance::AnomalyRow)> = Vec::new();
    for (instance, mut sched) in &mut instances {
        if let Some(r) = sched.anomaly_rows.as_mut().filter(|r| !r.is_empty()) {
            rows.extend(r.drain(..).map(|row| (instance.index, row)));
        }
    }
    rows.sort_by_key(|(i, row)| (row.time, *i));
    let scaling = others.0.drain(..).map(|row| (u32::MAX, row));
    for (i, row) in rows.into_iter().chain(scaling) {
        let Some(w) = log.writer.as_mut().filter(|_| log.error.is_none()) else {
            return;
        };
        let at = if i == u32::MAX {
            String::new()
        } else {
            i.to_string()
        };
        let record = [
            row.time.as_us().to_string(),
            row.request.map_or(String::new(), |r| r.to_string()),
            at,
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            row.kind.to_string(),
            row.detail,
        ];
        if let Err(e) = w.write_record(record) {
            log.error = Some(e.to_string());
        }
    }
}

/// `FinishStage::Concerns`: `decisions.csv` flushed (or its first write error).
pub(crate) fn finish_decisions(
    world: &mut World,
    _: &mut crate::metrics::Summary,
) -> Result<(), SimError> {
    let path = world
        .resource::<crate::output::Outputs>()
        .staged_path("decisions.csv");
    let mut log = world.resource_mut::<DecisionLog>();
    let (writer, error) = (log.writer.take(), log.error.take());
    crate::output::finish_streamed(writer, error)
        .map_err(|message| RunError::Output { path, message }.into())
}

/// Column names of `decisions.csv`.
pub const DECISION_COLUMNS: [&str; 10] = [
    "time_us",
    "request_id",
    "chosen",
    "chosen_score",
    "best",
    "best_score",
    "regret",
    "top_candidates",
    "kind",
    "detail",
];

/// Counts one decision and its regret (the best candidate's score minus the chosen one's,
/// at least 0), which it returns.
fn record_regret(stats: &mut RoutingStats, gap: f64) -> f64 {
    let regret = gap.max(0.0);
    stats.decisions += 1;
    stats.regret_sum += regret;
    stats.regret_max = stats.regret_max.max(regret);
    regret
}

/// A routing decision: counts it and its regret (best candidate score − chosen score, for
/// scored policies, else with −(effective load) as the score), keeps it among the worst
/// when asked, and writes its `decisions.csv` row when tracing.
pub(crate) fn trace_decision(
    stats: &mut RoutingStats,
    log: &mut DecisionLog,
    scored: Option<&[ScoredCandidate]>,
    instances: &[crate::policy::InstanceSnapshot],
    now: SimTime,
    id: u64,
    chosen: u32,
) {
    // Unscored policies: each routable instance scores −(effective load). Without a
    // decision trace the regret needs no list of candidates (one pass, no allocation).
    let unscored = !matches!(scored, Some(c) if !c.is_empty());
    if unscored && log.writer.is_none() {
        // The best score is the least load (the first instance with it wins ties); the
        // regret −chosen − (−least) is chosen − least, exactly, in f64.
        let least = instances
            .iter()
            .filter(|s| s.routable)
            .map(|s| s.effective_load())
            .min();
        if let Some(least) = least {
            // Instances are listed by index.
            let chosen_load = match instances.get(chosen as usize) {
                Some(s) if s.index == chosen => s.routable.then(|| s.effective_load()),
                _ => instances
                    .iter()
                    .find(|s| s.index == chosen && s.routable)
                    .map(|s| s.effective_load()),
            }
            .unwrap_or(least);
            let regret = record_regret(stats, -f64::from(least) - -f64::from(chosen_load));
            if stats.worst_k > 0 && regret > 0.0 {
                let best = instances
                    .iter()
                    .find(|s| s.routable && s.effective_load() == least)
                    .map_or(chosen, |s| s.index);
                stats.keep_if_worst(crate::metrics::WorstDecision {
                    time_us: now.as_us(),
                    request_id: id,
                    chosen,
                    best,
                    regret,
                });
            }
        }
        return;
    }
    let cands = candidates(scored, instances);
    let Some((best, chosen_score)) = judged(&cands, chosen) else {
        return;
    };
    let regret = record_regret(stats, best.score - chosen_score);
    if stats.worst_k > 0 && regret > 0.0 {
        stats.keep_if_worst(crate::metrics::WorstDecision {
            time_us: now.as_us(),
            request_id: id,
            chosen,
            best: best.instance,
            regret,
        });
    }
    write_decision(log, &cands, now, id, chosen, "route");
}

/// A P/D hand-off's decode-side decision (`policies.decode_routing`), as a `decisions.csv`
/// row of kind `decode_route` scored as [`trace_decision`] scores a routing decision. Only
/// the row: the summary's routing statistics count the routing of arrivals, as before.
pub(crate) fn trace_decode_decision(
    log: &mut DecisionLog,
    scored: Option<&[ScoredCandidate]>,
    instances: &[crate::policy::InstanceSnapshot],
    now: SimTime,
    id: u64,
    chosen: u32,
) {
    if log.writer.is_none() || log.error.is_some() {
        return;
    }
    let cands = candidates(scored, instances);
    write_decision(log, &cands, now, id, chosen, "decode_route");
}

/// The candidates a decision is judged among: the policy's scores, or for an unscored policy
/// each routable instance scored −(effective load).
fn candidates<'a>(
    scored: Option<&'a [ScoredCandidate]>,
    instances: &[crate::policy::InstanceSnapshot],
) -> std::borrow::Cow<'a, [ScoredCandidate]> {
    match scored {
        Some(c) if !c.is_empty() => std::borrow::Cow::Borrowed(c),
        _ => instances
            .iter()
            .filter(|s| s.routable)
            .map(|s| ScoredCandidate {
                instance: s.index,
                score: -f64::from(s.effective_load()),
                parts: Vec::new(),
            })
            .collect(),
    }
}

/// The best candidate (the highest score, the lowest index among equals) and the chosen
/// one's score (the best's when the chosen was not scored).
fn judged(cands: &[ScoredCandidate], chosen: u32) -> Option<(&ScoredCandidate, f64)> {
    let best = cands
        .iter()
        .fold(None::<&ScoredCandidate>, |b, c| match b {
            Some(b) if b.score > c.score || (b.score == c.score && b.instance < c.instance) => {
                Some(b)
            }
            _ => Some(c),
        })?;
    let chosen_score = cands
        .iter()
        .find(|c| c.instance == chosen)
        .map_or(best.score, |c| c.score);
    Some((best, chosen_score))
}

/// One decision's row of `decisions.csv`: the chosen and the best candidate's scores, the
/// regret (best − chosen, at least 0), and the `top_k` best candidates.
fn write_decision(
    log: &mut DecisionLog,
    cands: &[ScoredCandidate],
    now: SimTime,
    id: u64,
    chosen: u32,
    kind: &str,
) {
    // Nothing to compute without a file to write (the routing of every arrival comes here).
    if log.writer.is_none() || log.error.is_some() {
        return;
    }
    let Some((best, chosen_score)) = judged(cands, chosen) else {
        return;
    };
    let regret = (best.score - chosen_score).max(0.0);
    if let Some(w) = log.writer.as_mut()
        && log.error.is_none()
    {
        let mut top: Vec<&ScoredCandidate> = cands.iter().collect();
        top.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(a.instance.cmp(&b.instance))
        });
        let list = top
            .iter()
            .take(log.top_k)
            .map(|c| {
                let parts: Vec<String> =
                    c.parts.iter().map(|(n, v)| format!("{n}={v:.4}")).collect();
                format!("{}:{:.4}[{}]", c.instance, c.score, parts.join(";"))
            })
            .collect::<Vec<_>>()
            .join("|");
        let row = [
            now.as_us().to_string(),
            id.to_string(),
            chosen.to_string(),
            format!("{chosen_score:.6}"),
            best.instance.to_string(),
            format!("{:.6}", best.score),
            format!("{regret:.6}"),
            list,
            kind.to_string(),
            String::new(),
        ];
        if let Err(e) = w.write_record(row) {
            log.error = Some(e.to_string());
        }
    }
}
