//! Workloads: synthetic clients and trace replays, generated lazily
//! ([`SimSystems::Arrive`]), with multi-turn sessions continued as turns complete
//! ([`SimSystems::Record`]).
//!
//! Each source keeps only its next arrival in the event queue, so memory is constant in the
//! number of requests (sessions keep one small record per open session). Each client draws
//! from its own random stream (`workload/<client index>`): inter-arrival time, then prompt
//! length, output length, prefix group and session length.
//!
//! [`SimSystems::Arrive`]: crate::SimSystems::Arrive
//! [`SimSystems::Record`]: crate::SimSystems::Record

pub mod arrival;
mod check;
pub mod inference_perf;
pub mod lengths;
mod plugin;
mod sources;
pub mod trace;

use std::collections::HashMap;
use std::sync::Arc;

use bevy_ecs::prelude::*;
use rand_chacha::ChaCha8Rng;

pub use arrival::Arrivals;
pub use check::{MAX_INFERENCE_PERF_USERS, check, check_files};
pub use lengths::Lengths;
pub use plugin::{
    WorkloadPlugin, WorkloadSystems, continue_sessions, release_held, send_on, set_up_workload,
    spawn_arrivals,
};
pub use trace::{TraceReader, TraceRow};

/// Requests replayed from memory (a measured run, for `check-real` and `calibrate`), each
/// abandoned by its client `timeout` after its arrival if one is given.
#[derive(Clone, Debug)]
pub struct Replay {
    pub rows: Arc<[TraceRow]>,
    pub timeout: Option<SimDuration>,
}

use crate::request::Segment;
use crate::scenario::{ClientSpec, Scenario};
use crate::time::{SimDuration, SimTime};

/// Domain tag of request content ids (so they never equal prefix or pool ids).
const REQUEST_TAG: u64 = 0x7265_7175_6573_7401;
/// Domain tag of shared-prefix content ids.
const PREFIX_TAG: u64 = 0x7072_6566_6978_0002;

pub use crate::labels::Labels;

#[derive(Debug, Clone)]
struct SessionCfg {
    turns: Lengths,
    think: SimDuration,
    accumulate: bool,
}

type PoolSlot = (u32, u64, u32);

/// One synthetic client.
#[derive(Debug)]
pub struct Client {
    arrivals: Arrivals,
    input: Lengths,
    output: Lengths,
    prefix_tokens: u32,
    prefix_groups: u32,
    prefix_base: u64,
    /// Prompt pool: its size and the (question tokens, content id, prefix group) of each slot.
    pool: Option<(u32, Vec<PoolSlot>)>,
    pool_next: u64,
    /// Users taking turns pick the prefix group (inference-perf open loop), else random.
    user_cycle: Option<UserCycle>,
    session: Option<SessionCfg>,
    timeout: Option<SimDuration>,
    /// Requests of an offline (`AllAtZero`) batch not yet let into the cluster.
    held: u64,
    tenant: u32,
    slo_class: u32,
    priority: i32,
    /// The LoRA adapter its requests run with.
    adapter: Option<AdapterPick>,
    rng: ChaCha8Rng,
}

/// How a client picks its requests' adapter: always one, or by a draw keyed on the seed and
/// the request id (so adapters never shift the client's other draws) against cumulative
/// weights.
#[derive(Debug, Clone)]
enum AdapterPick {
    One(u32),
    /// (cumulative probability, adapter), increasing; the last is 1.
    Drawn(Vec<(f64, u32)>),
}

impl AdapterPick {
    fn pick(&self, seed: u64, id: u64) -> u32 {
        match self {
            AdapterPick::One(a) => *a,
            AdapterPick::Drawn(cdf) => {
                let h = crate::rng::mix(&[ADAPTER_TAG, seed, id]);
                let u = (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                let k = cdf.partition_point(|&(c, _)| c <= u).min(cdf.len() - 1);
                cdf[k].1
            }
        }
    }
}

/// Domain tag of the adapter draws.
const ADAPTER_TAG: u64 = 0x6164_6170_7465_7203;

/// Where a trace source's rows come from.
pub enum TraceInput {
    /// Streamed from a file.
    File(Box<TraceReader>),
    /// Held in memory (replaying a measured run); the index of the next row.
    Memory(Arc<[TraceRow]>, usize),
}

impl TraceInput {
    fn next_row(&mut self) -> Result<Option<TraceRow>, String> {
        match self {
            TraceInput::File(r) => r.next_row(),
            TraceInput::Memory(rows, next) => {
                let row = rows.get(*next).cloned();
                *next += 1;
                Ok(row)
            }
        }
    }
}

/// A source of requests.
pub enum Source {
    Client(Box<Client>),
    Trace {
        reader: TraceInput,
        pending: Option<TraceRow>,
        /// The entry's labels, for rows that name none (`None` when every row names one).
        tenant: Option<u32>,
        slo_class: Option<u32>,
        timeout: Option<SimDuration>,
        client: u32,
    },
}

#[derive(Debug, Clone)]
struct Session {
    source: u32,
    turns_left: u32,
    turn: u32,
    prefix_id: u64,
    /// Its adapter, kept for every turn.
    adapter: Option<u32>,
    /// Segments of the last prompt plus its output (accumulate mode).
    history: Vec<Segment>,
}

/// Every source, open sessions and the global stop conditions.
#[derive(Resource)]
pub struct Workload {
    pub sources: Vec<Source>,
    /// Stop after this many requests (all sources).
    pub limit: Option<u64>,
    /// No arrival after this time.
    pub stop_at: SimTime,
    seed: u64,
    sessions: HashMap<u64, Session>,
    next_session: u64,
}

fn secs(s: f64) -> SimDuration {
    SimDuration::from_secs_f64(s)
}

/// The rate of client `c` (validated: given directly or as a share of the aggregate).
pub fn client_rate(scenario: &Scenario, c: &ClientSpec) -> f64 {
    if let Some(r) = c.rate_per_s {
        return r;
    }
    let w = &scenario.workload;
    let shares = || {
        w.clients
            .iter()
            .filter(|c| c.rate_per_s.is_none())
            .filter_map(|c| c.rate_share)
    };
    let total: f64 = shares().sum();
    match (w.aggregate_rate_per_s, c.rate_share) {
        (Some(agg), Some(share))
            if total > 0.0 && (agg * share).is_finite() && total.is_finite() =>
        {
            agg * share / total
        }
        // Shares near f64::MAX add up to infinity (and inf / inf is NaN): normalise by the
        // largest first.
        (Some(agg), Some(share)) if total > 0.0 => {
            let largest = shares().fold(0.0, f64::max);
            agg * (share / largest) / shares().map(|s| s / largest).sum::<f64>()
        }
        _ => 0.0,
    }
}

/// Users taking turns (open loop): request k goes to user k mod `users`, whose system
/// prompt is user / `per_prompt`.
#[derive(Clone, Copy, Debug)]
pub struct UserCycle {
    pub users: u32,
    pub per_prompt: u32,
    pub next: u64,
}

impl UserCycle {
    /// The prompt (prefix group) of the next request.
    pub fn next_prompt(&mut self) -> u32 {
        let user = (self.next % u64::from(self.users)) as u32;
        self.next += 1;
        user / self.per_prompt
    }
}
