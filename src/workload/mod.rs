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
pub mod inference_perf;
pub mod lengths;
pub mod trace;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

pub use arrival::Arrivals;
pub use lengths::Lengths;
pub use trace::{TraceReader, TraceRow};

use crate::engine::ClusterDelays;
use crate::engine::{AdmitDue, Event, EventQueue, Injected, SimClock, SimFault, WorkloadDue};
use crate::request::{FinalState, Lifecycle, PromptContent, RequestSpec, Segment, SessionRef};
use crate::rng::{self, fnv1a};
use crate::scenario::{ClientSpec, Scenario};
use crate::time::{SimDuration, SimTime};

/// Domain tag of request content ids (so they never equal prefix or pool ids).
const REQUEST_TAG: u64 = 0x7265_7175_6573_7401;
/// Domain tag of shared-prefix content ids.
const PREFIX_TAG: u64 = 0x7072_6566_6978_0002;

pub use crate::labels::Labels;

/// The workload: requests arrive ([`spawn_arrivals`] in [`SimSystems::Arrive`]; empties
/// `WorkloadDue::arrivals`, `session_turns`, `releases`, fills `AdmitDue`) and sessions and offline
/// batches go on when a request ends ([`continue_sessions`] then [`release_held`] in
/// [`SimSystems::Record`], after `metrics::record_finished`; empty `WorkloadDue::ended_turns` and
/// `ended_held`). Its setup step (`set_up_workload`) builds the [`Workload`] resource and primes the queue.
pub struct WorkloadPlugin;

impl bevy_app::Plugin for WorkloadPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        use crate::engine::{SimStep, SimStepFast, SimSystems};
        use crate::setup::SetupAppExt;
        app.add_setup(crate::setup::SetupStage::Workload, set_up_workload);
        for label in [SimStep.intern(), SimStepFast.intern()] {
            app.add_systems(
                label,
                (
                    spawn_arrivals.in_set(SimSystems::Arrive),
                    continue_sessions
                        .in_set(SimSystems::Record)
                        .after(crate::metrics::record_finished),
                    release_held
                        .in_set(SimSystems::Record)
                        .after(continue_sessions),
                ),
            );
        }
    }
}

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
    user_cycle: Option<inference_perf::UserCycle>,
    session: Option<SessionCfg>,
    timeout: Option<SimDuration>,
    /// Requests of an offline (`AllAtZero`) batch not yet let into the cluster.
    held: u64,
    tenant: u32,
    slo_class: u32,
    priority: i32,
    rng: ChaCha8Rng,
}

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
        tenant: u32,
        slo_class: u32,
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
    let total: f64 = w
        .clients
        .iter()
        .filter(|c| c.rate_per_s.is_none())
        .filter_map(|c| c.rate_share)
        .sum();
    match (w.aggregate_rate_per_s, c.rate_share) {
        (Some(agg), Some(share)) if total > 0.0 => agg * share / total,
        _ => 0.0,
    }
}

impl Workload {
    /// Builds every source and the labels; errors (unreadable files) name the source.
    /// `replay` adds an in-memory trace (tenant `replay`) after the scenario's sources.
    pub fn new(
        scenario: &Scenario,
        labels: &mut Labels,
        replay: Option<Arc<[TraceRow]>>,
    ) -> Result<Self, String> {
        let base = scenario.base_dir.as_path();
        let w = &scenario.workload;
        let mut sources = Vec::new();
        for (i, c) in w.clients.iter().enumerate() {
            let name = if c.name.is_empty() {
                format!("client{i}")
            } else {
                c.name.clone()
            };
            let at = |e: String| format!("workload.clients[{i}]: {e}");
            let session = match &c.session {
                Some(s) => Some(SessionCfg {
                    turns: Lengths::new(&s.turns, base).map_err(at)?,
                    think: secs(s.think_time_s),
                    accumulate: s.accumulate,
                }),
                None => None,
            };
            // An offline batch enters at most `offline_batch_window` requests at a time.
            let (arrival, held) = match c.arrival {
                crate::scenario::ArrivalSpec::AllAtZero { count } => {
                    let now = count.min(scenario.limits.offline_batch_window.max(1));
                    (
                        crate::scenario::ArrivalSpec::AllAtZero { count: now },
                        count - now,
                    )
                }
                ref other => (other.clone(), 0),
            };
            sources.push(Source::Client(Box::new(Client {
                arrivals: Arrivals::new(&arrival, client_rate(scenario, c)),
                held,
                input: Lengths::new(&c.input_tokens, base).map_err(at)?,
                output: Lengths::new(&c.output_tokens, base).map_err(at)?,
                prefix_tokens: c.shared_prefix_tokens,
                prefix_groups: c.prefix_groups.max(1),
                prefix_base: c
                    .prefix_group
                    .map_or(u64::MAX - 1_000_000 * i as u64, u64::from),
                pool: c.prompt_pool.map(|p| (p.max(1), Vec::new())),
                pool_next: 0,
                user_cycle: None,
                session,
                timeout: c.timeout_s.map(secs),
                tenant: labels.tenant(c.tenant.as_deref().unwrap_or(&name)),
                slo_class: labels.slo_class(c.slo_class.as_deref().unwrap_or("standard")),
                priority: c.priority,
                rng: rng::stream(scenario.seed, &format!("workload/{i}")),
            })));
        }
        for (i, t) in w.traces.iter().enumerate() {
            let reader = TraceReader::open(t, base, scenario.seed)
                .map_err(|e| format!("workload.traces[{i}]: {e}"))?;
            sources.push(Source::Trace {
                reader: TraceInput::File(Box::new(reader)),
                pending: None,
                tenant: labels.tenant(t.tenant.as_deref().unwrap_or(&format!("trace{i}"))),
                slo_class: labels.slo_class(t.slo_class.as_deref().unwrap_or("standard")),
                timeout: t.timeout_s.map(secs),
                client: (w.clients.len() + i) as u32,
            });
        }
        if let Some(ip) = &w.inference_perf {
            for c in inference_perf::sources(ip, scenario.seed, labels) {
                sources.push(Source::Client(Box::new(c)));
            }
        }
        if let Some(rows) = replay {
            let client = sources.len() as u32;
            sources.push(Source::Trace {
                reader: TraceInput::Memory(rows, 0),
                pending: None,
                tenant: labels.tenant("replay"),
                slo_class: labels.slo_class("standard"),
                timeout: None,
                client,
            });
        }
        Ok(Workload {
            sources,
            limit: w.num_requests,
            stop_at: w
                .duration_s
                .map_or(SimTime::MAX, |d| SimTime::ZERO + secs(d)),
            seed: scenario.seed,
            sessions: HashMap::new(),
            next_session: 0,
        })
    }

    /// The next arrival time of source `i`, reading ahead one trace row.
    pub fn next_time(&mut self, i: usize) -> Result<Option<SimTime>, String> {
        let t = match &mut self.sources[i] {
            Source::Client(c) => c.arrivals.next_us(&mut c.rng).map(SimTime),
            Source::Trace {
                reader, pending, ..
            } => {
                *pending = reader.next_row()?;
                pending.as_ref().map(|r| SimTime(r.arrival_us))
            }
        };
        Ok(t.filter(|&t| t <= self.stop_at))
    }

    /// Schedules every source's first arrival.
    pub fn prime(&mut self, queue: &mut EventQueue) -> Result<(), String> {
        for i in 0..self.sources.len() {
            if let Some(t) = self.next_time(i)? {
                queue.push(t, Event::Arrival { source: i as u32 });
            }
        }
        Ok(())
    }

    fn under_limit(&self, injected: u64) -> bool {
        self.limit.is_none_or(|l| injected < l)
    }

    /// The request a source emits now (and opens its session, if any).
    /// The request `source` emits now with its client timeout, if the workload's request
    /// limit allows one more (counted in `injected`).
    pub fn emit(
        &mut self,
        source: u32,
        injected: &mut Injected,
    ) -> Option<(RequestSpec, Option<SimDuration>)> {
        if !self.under_limit(injected.0) {
            return None;
        }
        let id = injected.0;
        injected.0 += 1;
        Some(self.make_request(source as usize, id))
    }

    /// Schedules the next arrival of `source` (one arrived now), unless the request limit
    /// is reached; a source that fails (a trace row that cannot be read) faults the run.
    pub fn schedule_next(
        &mut self,
        source: u32,
        injected: &Injected,
        queue: &mut EventQueue,
        fault: &mut SimFault,
    ) {
        if !self.under_limit(injected.0) {
            return;
        }
        match self.next_time(source as usize) {
            Ok(Some(t)) => queue.push(t, Event::Arrival { source }),
            Ok(None) => {}
            Err(e) => {
                fault.0.get_or_insert(crate::engine::Fault::Workload(e));
            }
        }
    }

    pub fn make_request(&mut self, source: usize, id: u64) -> (RequestSpec, Option<SimDuration>) {
        let seed = self.seed;
        let unique = rng::mix(&[REQUEST_TAG, seed, id]);
        match &mut self.sources[source] {
            Source::Trace {
                pending,
                tenant,
                slo_class,
                timeout,
                client,
                ..
            } => {
                let row = pending
                    .take()
                    .expect("a trace arrival has its row read ahead");
                let content = row.content.unwrap_or(PromptContent::Simple {
                    prefix_id: 0,
                    prefix_tokens: 0,
                    unique_id: unique,
                });
                let spec = RequestSpec {
                    id,
                    client: *client,
                    input_tokens: row.input_tokens,
                    output_tokens: row.output_tokens,
                    content,
                    tenant: *tenant,
                    slo_class: *slo_class,
                    priority: 0,
                    session: None,
                };
                (spec, *timeout)
            }
            Source::Client(c) => {
                let mut question = c.input.sample(&mut c.rng);
                let output = c.output.sample(&mut c.rng).max(1);
                let mut group = if let Some(cycle) = &mut c.user_cycle {
                    cycle.next_prompt()
                } else if c.prefix_groups > 1 {
                    c.rng.random_range(0..c.prefix_groups)
                } else {
                    0
                };
                let mut unique_id = unique;
                if let Some((size, pool)) = &mut c.pool {
                    // Prompts in rotation: the k-th use of a slot repeats it exactly.
                    let slot = (c.pool_next % u64::from(*size)) as usize;
                    c.pool_next += 1;
                    if slot == pool.len() {
                        pool.push((
                            question,
                            fnv1a(format!("pool/{seed}/{source}/{slot}").as_bytes()),
                            group,
                        ));
                    }
                    (question, unique_id, group) = pool[slot];
                }
                let prefix_id = rng::mix(&[
                    PREFIX_TAG,
                    seed,
                    c.prefix_base.wrapping_add(u64::from(group)),
                ]);
                let input = c.prefix_tokens.saturating_add(question);
                let content = PromptContent::Simple {
                    prefix_id,
                    prefix_tokens: c.prefix_tokens,
                    unique_id,
                };
                let mut spec = RequestSpec {
                    id,
                    client: source as u32,
                    input_tokens: input.max(1),
                    output_tokens: output,
                    content,
                    tenant: c.tenant,
                    slo_class: c.slo_class,
                    priority: c.priority,
                    session: None,
                };
                if let Some(cfg) = &c.session {
                    let turns = cfg.turns.sample(&mut c.rng).max(1);
                    let sid = self.next_session;
                    self.next_session += 1;
                    let mut history = Vec::new();
                    if cfg.accumulate {
                        if c.prefix_tokens > 0 {
                            history.push(Segment {
                                id: prefix_id,
                                end: c.prefix_tokens,
                            });
                        }
                        history.push(Segment {
                            id: unique_id,
                            end: spec.input_tokens,
                        });
                        history.push(Segment {
                            id: unique_id ^ 0x6f75_7470_7574,
                            end: spec.input_tokens + output,
                        });
                    }
                    self.sessions.insert(
                        sid,
                        Session {
                            source: source as u32,
                            turns_left: turns - 1,
                            turn: 0,
                            prefix_id,
                            history,
                        },
                    );
                    spec.session = Some(SessionRef { id: sid, turn: 0 });
                }
                let timeout = c.timeout;
                (spec, timeout)
            }
        }
    }

    /// The next turn of session `sid`, if it is still open.
    fn make_turn(&mut self, sid: u64, id: u64) -> Option<(RequestSpec, Option<SimDuration>)> {
        let seed = self.seed;
        let mut s = self.sessions.remove(&sid)?;
        let Source::Client(c) = &mut self.sources[s.source as usize] else {
            return None;
        };
        let cfg = c
            .session
            .as_ref()
            .expect("sessions come from session clients");
        let question = c.input.sample(&mut c.rng).max(1);
        let output = c.output.sample(&mut c.rng).max(1);
        let unique_id = rng::mix(&[REQUEST_TAG, seed, id]);
        let (input, content) = if cfg.accumulate {
            let before = s.history.last().map_or(0, |x| x.end);
            let input = before.saturating_add(question).min(lengths::MAX_TOKENS * 4);
            s.history.push(Segment {
                id: unique_id,
                end: input,
            });
            let content = PromptContent::Segments(Arc::from(s.history.as_slice()));
            s.history.push(Segment {
                id: unique_id ^ 0x6f75_7470_7574,
                end: input.saturating_add(output),
            });
            (input, content)
        } else {
            (
                c.prefix_tokens.saturating_add(question),
                PromptContent::Simple {
                    prefix_id: s.prefix_id,
                    prefix_tokens: c.prefix_tokens,
                    unique_id,
                },
            )
        };
        s.turn += 1;
        s.turns_left -= 1;
        let spec = RequestSpec {
            id,
            client: s.source,
            input_tokens: input,
            output_tokens: output,
            content,
            tenant: c.tenant,
            slo_class: c.slo_class,
            priority: c.priority,
            session: Some(SessionRef {
                id: sid,
                turn: s.turn,
            }),
        };
        let timeout = c.timeout;
        self.sessions.insert(sid, s);
        Some((spec, timeout))
    }

    /// Which sources hold part of an offline batch back.
    pub fn held_sources(&self) -> Vec<bool> {
        self.sources
            .iter()
            .map(|s| matches!(s, Source::Client(c) if c.held > 0))
            .collect()
    }

    /// Open sessions (bounded by concurrent conversations, not by requests).
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }
}

/// `SetupStage::Workload`: the workload's sources (their tenants and classes join the
/// labels), their first arrivals on the event queue, and which hold offline batches back.
pub fn set_up_workload(
    app: &mut bevy_app::App,
    ctx: &crate::setup::SetupCtx<'_>,
) -> Result<(), crate::setup::SimError> {
    use crate::setup::SimError;
    let world = app.world_mut();
    let mut labels = world.remove_resource::<Labels>().unwrap_or_default();
    let made = Workload::new(ctx.scenario, &mut labels, ctx.replay.clone());
    world.insert_resource(labels);
    let mut workload = made.map_err(SimError::Workload)?;
    workload
        .prime(&mut world.resource_mut::<EventQueue>())
        .map_err(SimError::Workload)?;
    world.insert_resource(crate::engine::HeldBatches(workload.held_sources()));
    world.insert_resource(workload);
    Ok(())
}

/// Spawns a request that arrived at `arrival`.
fn spawn(commands: &mut Commands, spec: RequestSpec, arrival: SimTime) -> Entity {
    commands
        .spawn((
            spec,
            Lifecycle {
                arrival,
                ..Default::default()
            },
        ))
        .id()
}

/// Where a request that arrived at `arrival` (now, or t = 0 for a held offline batch) goes
/// next: its client timeout is set, and it is up for admission now (`admit`) or after the
/// admission delay.
pub fn send_on(
    entity: Entity,
    arrival: SimTime,
    timeout: Option<SimDuration>,
    now: SimTime,
    admit: &mut Vec<Entity>,
    queue: &mut EventQueue,
    delays: &ClusterDelays,
) {
    if let Some(t) = timeout {
        queue.push((arrival + t).max(now), Event::Timeout { request: entity });
    }
    if delays.admission.as_us() == 0 {
        admit.push(entity);
    } else {
        queue.push(now + delays.admission, Event::Admit(entity));
    }
}

/// Spawns the requests arriving now (new arrivals and session turns) and schedules each
/// source's next arrival.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn spawn_arrivals(
    mut commands: Commands,
    mut due: ResMut<WorkloadDue>,
    mut admit: ResMut<AdmitDue>,
    clock: Res<SimClock>,
    mut workload: ResMut<Workload>,
    mut injected: ResMut<Injected>,
    mut queue: ResMut<EventQueue>,
    mut fault: ResMut<SimFault>,
    delays: Res<ClusterDelays>,
) {
    let now = clock.now;
    let due = &mut *due;
    let workload = &mut *workload;
    // New arrivals, then requests of held offline batches (they arrived with the batch, at
    // t = 0, and are not followed by another arrival of their own).
    let mut arrivals = std::mem::take(&mut due.arrivals);
    let mut releases = std::mem::take(&mut due.releases);
    let emitted = arrivals
        .iter()
        .map(|&s| (s, false))
        .chain(releases.iter().map(|&s| (s, true)));
    for (source, released) in emitted {
        let Some((spec, timeout)) = workload.emit(source, &mut injected) else {
            continue;
        };
        let arrival = if released { SimTime::ZERO } else { now };
        let entity = spawn(&mut commands, spec, arrival);
        send_on(
            entity,
            arrival,
            timeout,
            now,
            &mut admit.0,
            &mut queue,
            &delays,
        );
        if !released {
            workload.schedule_next(source, &injected, &mut queue, &mut fault);
        }
    }
    arrivals.clear();
    due.arrivals = arrivals;
    releases.clear();
    due.releases = releases;
    let mut turns = std::mem::take(&mut due.session_turns);
    for &sid in &turns {
        if !workload.under_limit(injected.0) {
            workload.sessions.remove(&sid);
            continue;
        }
        let id = injected.0;
        if let Some((spec, timeout)) = workload.make_turn(sid, id) {
            injected.0 += 1;
            let entity = spawn(&mut commands, spec, now);
            send_on(entity, now, timeout, now, &mut admit.0, &mut queue, &delays);
        }
    }
    turns.clear();
    due.session_turns = turns;
}

/// Schedules the next turn of every session whose turn ended this tick (closed loop:
/// completion + think time); ends sessions whose turn failed or that have no turns left.
pub fn continue_sessions(
    mut due: ResMut<WorkloadDue>,
    mut workload: ResMut<Workload>,
    mut queue: ResMut<EventQueue>,
) {
    let mut ended = std::mem::take(&mut due.ended_turns);
    for &(sid, state, completed) in &ended {
        let Some(s) = workload.sessions.get(&sid) else {
            continue;
        };
        let Source::Client(c) = &workload.sources[s.source as usize] else {
            continue;
        };
        let think = c
            .session
            .as_ref()
            .map_or(SimDuration::ZERO, |cfg| cfg.think);
        match (state, completed) {
            (FinalState::Completed, Some(t))
                if s.turns_left > 0 && t + think <= workload.stop_at =>
            {
                queue.push(t + think, Event::SessionTurn { session: sid });
            }
            _ => {
                workload.sessions.remove(&sid);
            }
        }
    }
    ended.clear();
    due.ended_turns = ended;
}

/// Lets one more request of a held offline batch in for each of the batch's requests that
/// finished this tick.
pub fn release_held(
    mut due: ResMut<WorkloadDue>,
    clock: Res<SimClock>,
    mut workload: ResMut<Workload>,
    mut queue: ResMut<EventQueue>,
) {
    let mut ended = std::mem::take(&mut due.ended_held);
    for &source in &ended {
        if let Source::Client(c) = &mut workload.sources[source as usize]
            && c.held > 0
        {
            c.held -= 1;
            queue.push(clock.now, Event::Release { source });
        }
    }
    ended.clear();
    due.ended_held = ended;
}

/// Checks that every file a workload names can be read (streamed once); problems by path.
pub fn check_files(scenario: &Scenario) -> Vec<(String, String)> {
    let base: &Path = scenario.base_dir.as_path();
    let mut problems = Vec::new();
    for (i, t) in scenario.workload.traces.iter().enumerate() {
        if let Err(e) = trace::check(t, base) {
            problems.push((format!("workload.traces[{i}].file"), e));
        }
    }
    for (i, c) in scenario.workload.clients.iter().enumerate() {
        for (field, spec) in [
            ("input_tokens", &c.input_tokens),
            ("output_tokens", &c.output_tokens),
        ] {
            if let crate::scenario::LengthSpec::Empirical { file, column } = spec {
                // Output lengths must be ≥ 1: a zero would otherwise silently become 1.
                let min = u32::from(field == "output_tokens");
                if let Err(e) = lengths::load_column(&base.join(file), column, min) {
                    problems.push((format!("workload.clients[{i}].{field}"), e));
                }
            }
        }
    }
    problems
}
