//! Building the sources from the scenario and drawing their requests.

use std::collections::HashMap;
use std::sync::Arc;

use bevy_ecs::prelude::*;
use rand::RngExt;

use super::{
    Arrivals, Client, Labels, Lengths, PREFIX_TAG, REQUEST_TAG, Session, SessionCfg, Source,
    TraceInput, TraceReader, Workload, client_rate, inference_perf, lengths, secs,
};
use crate::engine::{Event, EventQueue, Injected, SimFault};
use crate::request::{PromptContent, RequestSpec, Segment, SessionRef};
use crate::rng::{self, fnv1a};
use crate::scenario::Scenario;
use crate::time::{SimDuration, SimTime};

impl Workload {
    /// Builds every source and the labels; errors (unreadable files) name the source.
    /// `replay` adds an in-memory trace (tenant `replay`) after the scenario's sources.
    pub fn new(
        scenario: &Scenario,
        labels: &mut Labels,
        replay: Option<super::Replay>,
    ) -> Result<Self, String> {
        let base = scenario.base_dir.as_path();
        let w = &scenario.workload;
        let mut sources = Vec::new();
        let adapter_names = w.adapters.as_ref().map_or(Vec::new(), |a| a.all_names());
        labels.adapters = adapter_names.clone();
        let adapters: Arc<HashMap<String, u32>> = Arc::new(
            adapter_names
                .iter()
                .enumerate()
                .map(|(k, n)| (n.clone(), k as u32))
                .collect(),
        );
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
                slo_class: labels.slo_class(
                    c.slo_class
                        .as_deref()
                        .unwrap_or(crate::labels::DEFAULT_SLO_CLASS),
                ),
                priority: c.priority,
                adapter: c
                    .adapter
                    .as_ref()
                    .map(|a| adapter_pick(a, &adapter_names, &adapters))
                    .transpose()
                    .map_err(at)?,
                rng: rng::stream(scenario.seed, &format!("workload/{i}")),
            })));
        }
        for (i, t) in w.traces.iter().enumerate() {
            let index = super::trace::RowLabelIndex::new(t, labels, &scenario.policies.slo_classes);
            let reader = TraceReader::open(t, base, scenario.seed)
                .map_err(|e| format!("workload.traces[{i}]: {e}"))?
                .with_adapters(adapters.clone())
                .with_labels(index);
            // The entry's labels, for rows that name none (none may when every row names
            // its own: interning them would add a tenant or class without requests).
            let rows = &t.row_labels;
            sources.push(Source::Trace {
                reader: TraceInput::File(Box::new(reader)),
                pending: None,
                tenant: rows
                    .entry_tenant_used
                    .then(|| labels.tenant(t.tenant.as_deref().unwrap_or(&format!("trace{i}")))),
                slo_class: rows.entry_class_used.then(|| {
                    labels.slo_class(
                        t.slo_class
                            .as_deref()
                            .unwrap_or(crate::labels::DEFAULT_SLO_CLASS),
                    )
                }),
                timeout: t.timeout_s.map(secs),
                client: (w.clients.len() + i) as u32,
            });
        }
        if let Some(ip) = &w.inference_perf {
            for c in inference_perf::sources(ip, scenario.seed, labels) {
                sources.push(Source::Client(Box::new(c)));
            }
        }
        if let Some(super::Replay { rows, timeout }) = replay {
            let client = sources.len() as u32;
            sources.push(Source::Trace {
                reader: TraceInput::Memory(rows, 0),
                pending: None,
                tenant: Some(labels.tenant("replay")),
                slo_class: Some(labels.slo_class(crate::labels::DEFAULT_SLO_CLASS)),
                timeout,
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

    pub(super) fn under_limit(&self, injected: u64) -> bool {
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
                let content = row
                    .content
                    .unwrap_or(PromptContent::Simple {
                        prefix_id: 0,
                        prefix_tokens: 0,
                        unique_id: unique,
                    })
                    .for_adapter(row.adapter);
                let spec = RequestSpec {
                    id,
                    client: *client,
                    input_tokens: row.input_tokens,
                    output_tokens: row.output_tokens,
                    content,
                    // The reader refuses a row without a label where the entry's is None.
                    tenant: row.tenant.or(*tenant).expect("a trace row's tenant"),
                    slo_class: row.slo_class.or(*slo_class).expect("a trace row's class"),
                    priority: 0,
                    session: None,
                    adapter: row.adapter,
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
                let adapter = c.adapter.as_ref().map(|a| a.pick(seed, id));
                let mut spec = RequestSpec {
                    id,
                    client: source as u32,
                    input_tokens: input.max(1),
                    output_tokens: output,
                    content: content.for_adapter(adapter),
                    tenant: c.tenant,
                    slo_class: c.slo_class,
                    priority: c.priority,
                    session: None,
                    adapter,
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
                            adapter,
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
    pub(super) fn make_turn(
        &mut self,
        sid: u64,
        id: u64,
    ) -> Option<(RequestSpec, Option<SimDuration>)> {
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
            content: content.for_adapter(s.adapter),
            tenant: c.tenant,
            slo_class: c.slo_class,
            priority: c.priority,
            session: Some(SessionRef {
                id: sid,
                turn: s.turn,
            }),
            adapter: s.adapter,
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

/// A client's adapter choice resolved against `workload.adapters` (`names` in order).
fn adapter_pick(
    choice: &crate::scenario::AdapterChoice,
    names: &[String],
    index: &HashMap<String, u32>,
) -> Result<super::AdapterPick, String> {
    use crate::scenario::AdapterChoice;
    let find = |name: &String| {
        index
            .get(name)
            .copied()
            .ok_or_else(|| format!("adapter `{name}` is not in workload.adapters"))
    };
    let weights: Vec<(f64, u32)> = match choice {
        AdapterChoice::Named(name) => return find(name).map(super::AdapterPick::One),
        AdapterChoice::Uniform => (0..names.len() as u32).map(|k| (1.0, k)).collect(),
        AdapterChoice::Zipf(s) => (0..names.len() as u32)
            .map(|k| (f64::from(k + 1).powf(-s), k))
            .collect(),
        AdapterChoice::Weighted(w) => w
            .iter()
            .map(|(n, &x)| find(n).map(|k| (x, k)))
            .collect::<Result<_, _>>()?,
    };
    let total: f64 = weights.iter().map(|w| w.0).sum();
    if weights.is_empty() || !total.is_finite() || total <= 0.0 {
        return Err("the adapter weights must be finite with a sum > 0".into());
    }
    let mut acc = 0.0;
    let mut cdf: Vec<(f64, u32)> = weights
        .into_iter()
        .map(|(w, k)| {
            acc += w / total;
            (acc, k)
        })
        .collect();
    if let Some(last) = cdf.last_mut() {
        last.0 = 1.0;
    }
    Ok(super::AdapterPick::Drawn(cdf))
}
