//! The end of a run, metrics' part: the final diagnoses, `requests.csv` finished and
//! `summary.json` written.

use std::io::Write as _;

use bevy_ecs::prelude::*;

use super::{RequestLog, Summary, csv_header, fitness_term};
use crate::output::Outputs;
use crate::request::FinishedRequest;
use crate::scenario::Scenario;
use crate::setup::{RunError, SetupCtx, SetupError, SimError};

/// (blocks, block size) of the largest instance KV caches that may serve, for the diagnosis
/// of dropped requests: of the instances requests are routed to, and of the decode pool
/// (P/D disaggregation) if there is one.
#[derive(Resource, Clone, Copy, Debug, PartialEq, Eq)]
pub struct LargestCache {
    pub routed: (u32, u32),
    pub decode: Option<(u32, u32)>,
    /// The longest `max_model_len` of those instances and of the decode pool (`None`: some
    /// group has no limit).
    pub routed_len: Option<u32>,
    pub decode_len: Option<u32>,
}

impl Default for LargestCache {
    fn default() -> Self {
        LargestCache {
            routed: (0, 16),
            decode: None,
            routed_len: None,
            decode_len: None,
        }
    }
}

impl LargestCache {
    /// Of the groups that may have instances (autoscaled ones at their max).
    pub fn of(ctx: &SetupCtx<'_>) -> Self {
        let pool = |decode: bool| {
            ctx.scenario
                .cluster
                .groups
                .iter()
                .zip(ctx.resolved)
                .filter(|(g, _)| g.scaling.as_ref().map_or(g.count, |s| s.max) > 0)
                .filter(move |(g, _)| (g.role == crate::scenario::Role::Decode) == decode)
        };
        let longest = |decode: bool| {
            pool(decode)
                .map(|(_, r)| r.max_model_len)
                .reduce(|a, b| a.zip(b).map(|(a, b)| a.max(b)))
                .flatten()
        };
        let largest = |decode: bool| {
            pool(decode)
                .map(|(g, r)| (r.kv_blocks, g.block_size))
                .reduce(|best, c| {
                    if u64::from(c.0) * u64::from(c.1) > u64::from(best.0) * u64::from(best.1) {
                        c
                    } else {
                        best
                    }
                })
        };
        LargestCache {
            routed: largest(false).unwrap_or((0, 16)),
            decode: largest(true),
            routed_len: longest(false),
            decode_len: longest(true),
        }
    }
}

/// The requests still in the system when the run stopped, as the final Record pass saw
/// them (for observers that draw them).
#[derive(Resource, Default)]
pub struct Unfinished(pub Vec<FinishedRequest>);

/// `summary.json`, created when the run is set up (so that a name clash is an error before
/// the run), written when it ends.
#[derive(Resource, Default)]
pub struct SummaryFile(pub Option<std::io::BufWriter<std::fs::File>>);

/// `SetupStage::Outputs`: `requests.csv` (its header written) and `summary.json`, as the
/// scenario asks; the rows in memory the run options ask for.
pub(super) fn open_files(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let world = app.world_mut();
    let outputs = &ctx.scenario.outputs;
    let extra = super::ExtraColumns {
        energy: ctx.scenario.energy.is_some(),
        retries: ctx.scenario.faults.as_ref().is_some_and(|f| f.crashes_on()),
        speculative: ctx
            .scenario
            .cluster
            .groups
            .iter()
            .any(|g| g.speculative.is_some()),
        adapter: ctx.scenario.workload.adapters.is_some(),
    };
    let mut log = RequestLog {
        collect: ctx.options.collect.clone(),
        extra,
        ..Default::default()
    };
    if let Some(buffer) = &ctx.options.requests_csv_memory {
        let mut w = std::io::BufWriter::new(buffer.clone());
        w.write_all(&csv_header(extra))
            .map_err(|e| SimError::Internal {
                what: "requests in memory",
                message: e.to_string(),
            })?;
        log.memory = Some(w);
    }
    let mut files = world.resource_mut::<Outputs>();
    if outputs.requests_csv
        && let Some(mut writer) = files.create("requests.csv").map_err(SetupError::Outputs)?
    {
        writer
            .write_all(&csv_header(extra))
            .map_err(|e| SetupError::Output {
                path: files.staged_path("requests.csv"),
                message: e.to_string(),
            })?;
        log.writer = Some(writer);
    }
    let summary = if outputs.summary_json {
        files.create("summary.json").map_err(SetupError::Outputs)?
    } else {
        None
    };
    world.insert_resource(log);
    world.insert_resource(SummaryFile(summary));
    Ok(())
}

/// Why a run stopped, as its finish finds the event queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// No event was left.
    RanOut,
    /// The next event falls past the horizon.
    Horizon,
    /// Its caller finished it with events left before the horizon.
    Early,
}

/// Diagnoses of a run's outcome that a user should not miss.
pub fn diagnose(s: &Summary, largest: LargestCache, stopped: Stopped) -> Vec<String> {
    let r = &s.requests;
    let mut w = Vec::new();
    let holds = |(blocks, size): (u32, u32), len: Option<u32>| {
        format!(
            "{} × {size} tokens = {} tokens{}",
            crate::scenario::counted(u64::from(blocks), "block"),
            u64::from(blocks) * u64::from(size),
            len.map(|m| format!("; the longest max_model_len is {m}"))
                .unwrap_or_default()
        )
    };
    // P/D: requests no decode instance can hold are dropped after their prefill.
    let after_prefill = s.disaggregation.as_ref().map_or(0, |d| d.dropped);
    let at_entry = r.dropped.saturating_sub(after_prefill);
    if at_entry > 0 {
        w.push(format!(
            "{} of {} requests were dropped as unservable: prompt + output exceeds max_model_len or what their instance's KV cache can hold (the largest holds {})",
            at_entry,
            r.injected,
            holds(largest.routed, largest.routed_len)
        ));
    }
    if after_prefill > 0 {
        w.push(format!(
            "{} of {} requests were dropped as unservable after their prefill: prompt + output exceeds, on every decode instance, max_model_len or what its KV cache can hold (the largest decode cache holds {}); give the decode pool more KV blocks or a longer max_model_len",
            after_prefill,
            r.injected,
            holds(largest.decode.unwrap_or((0, 16)), largest.decode_len)
        ));
    }
    if r.injected > 0 && r.rejected == r.injected {
        // By admission, for want of a routable instance, a full queue: say which.
        let why: Vec<String> = s
            .rejections
            .iter()
            .map(|(reason, n)| format!("{reason}: {n}"))
            .collect();
        w.push(format!("every request was rejected ({})", why.join(", ")));
    }
    let left = r.queued + r.running + r.in_transit;
    if left > 0 {
        w.push(match stopped {
            // Nothing scheduled could move them on: a policy of the user's that never places
            // them (a decode router that routes nowhere), or a stall of ours.
            Stopped::RanOut => format!(
                "{left} requests were still in the system when no event was left to move them on (no horizon stopped the run); unless a policy of your own holds them, this is a servesim bug: please report it with the scenario"
            ),
            Stopped::Horizon => {
                format!("{left} requests were still in the system when the run stopped (horizon)")
            }
            Stopped::Early => format!(
                "{left} requests were still in the system when the run was finished before its end"
            ),
        });
    }
    if r.timed_out * 10 > r.injected {
        w.push(format!(
            "{} of {} requests timed out",
            r.timed_out, r.injected
        ));
    }
    if r.injected == 0 {
        w.push(
            "no request arrived: the workload's first arrival falls after workload.duration_s or horizon_s (a source's first arrival comes one inter-arrival gap after t = 0); lengthen them or raise the rate"
                .into(),
        );
    }
    w
}

/// `FinishStage::Run`: the diagnoses, as summary warnings.
pub(super) fn diagnose_run(world: &mut World, summary: &mut Summary) -> Result<(), SimError> {
    let next = world.resource::<crate::engine::EventQueue>().peek_time();
    let stopped = match next {
        None => Stopped::RanOut,
        Some(t) if t > world.resource::<crate::engine::SimClock>().horizon => Stopped::Horizon,
        Some(_) => Stopped::Early,
    };
    let found = diagnose(summary, *world.resource::<LargestCache>(), stopped);
    summary.warnings.extend(found);
    Ok(())
}

/// `FinishStage::Concerns`: `requests.csv` and the rows in memory, flushed.
pub(super) fn finish_requests(world: &mut World, _: &mut Summary) -> Result<(), SimError> {
    let path = world.resource::<Outputs>().staged_path("requests.csv");
    let mut log = world.resource_mut::<RequestLog>();
    if let Some(mut m) = log.memory.take() {
        m.flush().map_err(|e| SimError::Internal {
            what: "requests in memory",
            message: e.to_string(),
        })?;
    }
    let (writer, error) = (log.writer.take(), log.error.take());
    crate::output::finish_streamed(writer, error)
        .map_err(|message| RunError::Output { path, message }.into())
}

/// `FinishStage::Summary`: the fitness the scenario weighs, and `summary.json`.
pub(super) fn write_summary(world: &mut World, summary: &mut Summary) -> Result<(), SimError> {
    let fitness = &world.resource::<Scenario>().outputs.fitness;
    if !fitness.is_empty() {
        summary.fitness = Some(
            fitness
                .iter()
                .map(|(k, w)| w * fitness_term(k, summary))
                .sum(),
        );
    }
    let Some(mut w) = world.resource_mut::<SummaryFile>().0.take() else {
        return Ok(());
    };
    let path = world.resource::<Outputs>().staged_path("summary.json");
    let io = |e: std::io::Error| RunError::Output {
        path: path.clone(),
        message: e.to_string(),
    };
    w.write_all(summary.to_json_file().as_bytes()).map_err(io)?;
    w.into_inner()
        .map_err(|e| io(e.into_error()))?
        .sync_all()
        .map_err(io)?;
    Ok(())
}
