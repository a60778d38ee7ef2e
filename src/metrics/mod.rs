//! Per-request rows and aggregates ([`SimSystems::Record`]).
//!
//! Each finished (or rejected / dropped) request gets one row in `requests.csv`, written as
//! it finishes, then its entity is despawned: memory is bounded by requests in flight; the
//! latency distributions are bounded-size [`histogram::Histogram`]s.
//!
//! [`SimSystems::Record`]: crate::SimSystems::Record

mod check;
pub mod histogram;
pub mod percentile;
mod summary;

pub use check::check_outputs;
pub use histogram::Histogram;
pub use percentile::Distribution;
pub use summary::{
    CostSummary, DisaggSummary, FITNESS_KEYS, Fairness, GroupUsage, InstanceSummary, KvEventCounts,
    KvSummary, PoolSummary, RequestCounts, RoutingSummary, SliceSummary, SloSummary, Summary,
    Throughput, cov, fitness_term, jain,
};

use std::fs::File;
use std::io::BufWriter;

use bevy_ecs::prelude::*;

use crate::engine::CheckInvariants;
use crate::engine::{RecordDue, SimClock};
use crate::labels::Labels;
use crate::request::{FinalState, FinishedRequest};
use crate::slo::SloTable;
use crate::time::{SimDuration, SimTime};

/// Per-request rows and aggregates: [`record_finished`] in [`SimSystems::Record`] (empties
/// `RecordDue`, fills `WorkloadDue::ended_turns` and `ended_held`, despawns recorded requests), in
/// both tick schedules. Sets up the `slo::SloTable`. When the run ends, [`assemble`] builds
/// the summary's core and runs the concerns' [`SummaryParts`] (each plugin registers its own
/// with [`SummaryAppExt::add_summary_part`]). Owns [`Aggregates`], [`SummaryExtras`],
/// [`KvEventTally`] and [`RequestLog`] (the simulation builder opens `requests.csv` into it).
pub struct MetricsPlugin;

impl bevy_app::Plugin for MetricsPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        use crate::engine::{SimStep, SimStepFast, SimSystems};
        use crate::setup::SetupAppExt;
        use bevy_ecs::schedule::ScheduleLabel;
        app.init_resource::<Aggregates>()
            .init_resource::<SummaryExtras>()
            .init_resource::<RequestLog>()
            .init_resource::<KvEventTally>()
            .init_resource::<SloTable>()
            .init_resource::<crate::kv::KvEvents>()
            .init_resource::<CheckInvariants>()
            .add_setup(crate::setup::SetupStage::Policies, set_up_metrics);
        for label in [SimStep.intern(), SimStepFast.intern()] {
            app.add_systems(label, record_finished.in_set(SimSystems::Record));
        }
    }
}

/// `SetupStage::Policies`: the SLO classes requests are judged by, and the KV-event counts
/// when `outputs.kv_events` asks for them (which turns the events on).
pub fn set_up_metrics(
    app: &mut bevy_app::App,
    ctx: &crate::setup::SetupCtx<'_>,
) -> Result<(), crate::setup::SimError> {
    let world = app.world_mut();
    let table = SloTable::new(
        world.resource::<Labels>(),
        &ctx.scenario.policies.slo_classes,
    );
    world.insert_resource(table);
    let count = ctx.scenario.outputs.kv_events;
    world.resource_mut::<KvEventTally>().on = count;
    world.resource_mut::<crate::kv::KvEvents>().0 |= count;
    Ok(())
}

/// A concern's part of the summary: fills its fields from the World when the run ends,
/// after [`assemble`] has filled the core (request counts, latency, throughput, tenants,
/// SLOs, rejections, extras). Parts run in the order their plugins registered them.
pub type SummaryPart = fn(&mut World, &mut Summary);

/// The registered summary parts.
#[derive(Resource, Default)]
pub struct SummaryParts(pub Vec<SummaryPart>);

/// Registers summary parts on an App.
pub trait SummaryAppExt {
    fn add_summary_part(&mut self, part: SummaryPart) -> &mut Self;
}

impl SummaryAppExt for bevy_app::App {
    fn add_summary_part(&mut self, part: SummaryPart) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<SummaryParts>()
            .0
            .push(part);
        self
    }
}

/// The summary of a run that ended: the core from the aggregates (what every request did),
/// then each concern's part ([`SummaryParts`]: instances and the KV cache, routing,
/// disaggregation, autoscaling and cost). `counts` holds the requests still in the system
/// by where they were (queued, running, in transit).
pub fn assemble(
    world: &mut World,
    scenario: &str,
    seed: u64,
    mut counts: RequestCounts,
) -> Summary {
    let agg = world.resource::<Aggregates>().clone();
    let clock = *world.resource::<SimClock>();
    counts.injected = world.resource::<crate::engine::Injected>().0;
    counts.completed = agg.completed;
    counts.rejected = agg.rejected;
    counts.dropped = agg.dropped;
    counts.timed_out = agg.timed_out;
    let secs = clock.now.as_us() as f64 / 1e6;
    let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
    let labels = world.resource::<Labels>();
    let slice = |name: &str, b: Option<&Breakdown>| {
        let b = b.cloned().unwrap_or_default();
        SliceSummary {
            name: name.to_string(),
            injected: b.injected,
            completed: b.completed,
            rejected: b.rejected,
            dropped: b.dropped,
            timed_out: b.timed_out,
            output_tokens: b.output_tokens,
            good: b.good,
            slo_attainment: if b.injected == 0 {
                0.0
            } else {
                b.good as f64 / b.injected as f64
            },
            ttft_ms: b.ttft.summarize_ms(),
            e2e_ms: b.e2e.summarize_ms(),
        }
    };
    let tenants: Vec<SliceSummary> = labels
        .tenants
        .iter()
        .enumerate()
        .map(|(i, n)| slice(n, agg.per_tenant.get(i)))
        .collect();
    let slo_classes: Vec<SliceSummary> = labels
        .slo_classes
        .iter()
        .enumerate()
        .map(|(i, n)| slice(n, agg.per_class.get(i)))
        .collect();
    let tenant_tokens: Vec<f64> = tenants.iter().map(|t| t.output_tokens as f64).collect();
    let injected = counts.injected;
    let instances = world
        .resource::<crate::engine::ClusterView>()
        .instances
        .len();
    let mut summary = Summary {
        scenario: scenario.to_string(),
        seed,
        requests: counts,
        sim_duration_s: secs,
        ticks: clock.ticks,
        throughput: Throughput {
            requests_per_s: per_s(agg.completed),
            input_tokens_per_s: per_s(agg.input_tokens),
            output_tokens_per_s: per_s(agg.output_tokens),
            input_tokens: agg.input_tokens,
            output_tokens: agg.output_tokens,
        },
        ttft_ms: agg.ttft.summarize_ms(),
        itl_ms: agg.itl.summarize_ms(),
        e2e_ms: agg.e2e.summarize_ms(),
        scheduling_delay_ms: agg.scheduling_delay.summarize_ms(),
        preemptions: agg.preemptions,
        rejections: world
            .get_resource::<crate::engine::Rejections>()
            .map(|r| r.0.iter().map(|(k, v)| (k.to_string(), *v)).collect())
            .unwrap_or_default(),
        slo: SloSummary {
            good: agg.good,
            attainment: if injected == 0 {
                0.0
            } else {
                agg.good as f64 / injected as f64
            },
            goodput_per_s: per_s(agg.good),
        },
        fairness: Fairness {
            jain_tenant_output_tokens: jain(&tenant_tokens),
            ..Default::default()
        },
        extras: world.resource::<SummaryExtras>().0.clone(),
        kv_events: {
            let t = world.resource::<KvEventTally>();
            t.on.then(|| {
                (0..instances)
                    .map(|i| KvEventCounts {
                        instance: i as u32,
                        ..t.per_instance.get(i).cloned().unwrap_or_default()
                    })
                    .collect()
            })
        },
        tenants,
        slo_classes,
        ..Default::default()
    };
    let parts = world
        .get_resource::<SummaryParts>()
        .map(|p| p.0.clone())
        .unwrap_or_default();
    for part in parts {
        part(world, &mut summary);
    }
    summary
}

/// Results of your own systems, by name, for `summary.json` (`extras`) and the text summary:
/// fill it from a system in `SimFinish` (or during the run).
#[derive(Resource, Debug, Default, Clone)]
pub struct SummaryExtras(pub std::collections::BTreeMap<String, serde_json::Value>);

/// KV block events per instance (`outputs.kv_events`), counted by [`count_kv_events`] from
/// the [`KvEvent`](crate::kv::KvEvent) messages.
#[derive(Resource, Debug, Default, Clone)]
pub struct KvEventTally {
    pub on: bool,
    pub per_instance: Vec<KvEventCounts>,
    /// Shared by the system's copies in both tick schedules (see `policy::CachedBlocks`).
    pub cursor: bevy_ecs::message::MessageCursor<crate::kv::KvEvent>,
}

/// Counts the KV events of the tick into [`KvEventTally`].
pub fn count_kv_events(events: Res<Messages<crate::kv::KvEvent>>, mut tally: ResMut<KvEventTally>) {
    use crate::kv::{KvEventKind, KvTier};
    let tally = &mut *tally;
    for e in tally.cursor.read(&events) {
        let i = e.instance as usize;
        if tally.per_instance.len() <= i {
            tally.per_instance.resize_with(i + 1, Default::default);
        }
        let c = &mut tally.per_instance[i];
        c.instance = e.instance;
        match e.kind {
            KvEventKind::Stored => c.stored += 1,
            KvEventKind::Evicted { tier: KvTier::Gpu } => c.evicted += 1,
            KvEventKind::Evicted { tier: KvTier::Cpu } => c.evicted_from_cpu += 1,
            KvEventKind::Offloaded => c.offloaded += 1,
            KvEventKind::Reloaded => c.reloaded += 1,
            KvEventKind::Transferred { .. } => c.transferred_in += 1,
        }
    }
}

/// Column names of `requests.csv`, in order.
pub const CSV_COLUMNS: [&str; 22] = [
    "request_id",
    "client",
    "tenant",
    "slo_class",
    "session",
    "turn",
    "instance",
    "state",
    "arrival_us",
    "input_tokens",
    "output_tokens",
    "generated_tokens",
    "cached_tokens",
    "scheduling_delay_ms",
    "ttft_ms",
    "e2e_ms",
    "mean_itl_ms",
    "preemptions",
    "completion_us",
    "prefill_instance",
    "decode_instance",
    "kv_transfer_ms",
];

/// INV-5 for one request that ended at `now`.
pub fn check_causality(f: &FinishedRequest, now: SimTime) {
    let l = &f.lifecycle;
    let chain = [
        ("arrival", Some(l.arrival)),
        ("admitted", l.admitted),
        ("routed", l.routed),
        ("enqueued", l.enqueued),
        ("scheduled", f.scheduled),
        ("first token", f.first_token),
        ("completed", f.completed),
    ];
    let mut prev: Option<(&str, SimTime)> = None;
    for (name, t) in chain {
        let Some(t) = t else { continue };
        if let Some((pname, pt)) = prev {
            assert!(
                pt <= t,
                "INV-5 at {now}: request {} has {pname} {pt} after {name} {t}",
                f.spec.id
            );
        }
        prev = Some((name, t));
    }
    if let Some(c) = f.completed {
        assert!(
            c <= now,
            "INV-5 at {now}: request {} recorded before its completion {c}",
            f.spec.id
        );
    }
    if let Some(t) = f.first_token {
        assert!(
            t <= crate::engine::MAX_SIM_TIME,
            "INV-5 at {now}: request {} has a first token at {t}, past the clock's range",
            f.spec.id
        );
    }
}

/// Streaming writer of `requests.csv` (absent when the scenario turns it off).
#[derive(Resource, Default)]
pub struct RequestLog {
    /// `requests.csv`, its header written ([`csv_header`]); rows by [`format_row`].
    pub writer: Option<BufWriter<File>>,
    /// First write error; reported when the run ends.
    pub error: Option<String>,
    /// Reused row buffer.
    pub scratch: Vec<u8>,
    /// Per-request samples for in-process consumers (`check-real`, `calibrate`).
    pub collect: Option<std::sync::Arc<std::sync::Mutex<Vec<RequestSample>>>>,
    /// The same rows as `requests.csv`, into memory (the Python package).
    pub memory: Option<BufWriter<SharedBuffer>>,
}

/// A byte buffer several owners can read after the run.
#[derive(Clone, Debug, Default)]
pub struct SharedBuffer(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("buffer poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a finished request measured, in µs (for comparing with measurements).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestSample {
    pub id: u64,
    pub completed: bool,
    pub ttft_us: Option<u64>,
    pub e2e_us: Option<u64>,
    /// Mean inter-token latency (time per output token after the first).
    pub mean_itl_us: Option<f64>,
}

/// Totals for one slice of the requests (an instance, a tenant, an SLO class). Its
/// distributions use coarse buckets (within 1/256) to keep memory small.
#[derive(Debug, Clone)]
pub struct Breakdown {
    /// Requests recorded in this slice (every request is recorded exactly once).
    pub injected: u64,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    /// Completed requests that met every target of their SLO class.
    pub good: u64,
    pub output_tokens: u64,
    pub ttft: Histogram,
    pub e2e: Histogram,
}

impl Default for Breakdown {
    fn default() -> Self {
        Breakdown {
            injected: 0,
            completed: 0,
            rejected: 0,
            dropped: 0,
            timed_out: 0,
            good: 0,
            output_tokens: 0,
            ttft: Histogram::with_bits(histogram::COARSE),
            e2e: Histogram::with_bits(histogram::COARSE),
        }
    }
}

impl Breakdown {
    fn add(&mut self, f: &FinishedRequest, good: bool) {
        self.injected += 1;
        match f.state {
            FinalState::Completed => {
                self.completed += 1;
                self.output_tokens += u64::from(f.generated_tokens);
                if let Some(e) = f.e2e {
                    self.e2e.record(e.as_us());
                }
            }
            FinalState::Rejected => self.rejected += 1,
            FinalState::Dropped => self.dropped += 1,
            FinalState::TimedOut => self.timed_out += 1,
            _ => {}
        }
        if let Some(t) = f.ttft {
            self.ttft.record(t.as_us());
        }
        self.good += u64::from(good);
    }
}

fn slot(v: &mut Vec<Breakdown>, i: usize) -> &mut Breakdown {
    if v.len() <= i {
        v.resize_with(i + 1, Breakdown::default);
    }
    &mut v[i]
}

/// Whether a completed request met every latency target of its SLO class.
pub fn meets_slo(f: &FinishedRequest, slo: &SloTable) -> bool {
    if f.state != FinalState::Completed {
        return false;
    }
    let Some(class) = slo.classes.get(f.spec.slo_class as usize) else {
        return true;
    };
    let ok = |target: Option<SimDuration>, v: Option<f64>| match (target, v) {
        (Some(t), Some(v)) => v <= t.as_us() as f64,
        (Some(_), None) => false,
        (None, _) => true,
    };
    ok(class.ttft, f.ttft.map(|d| d.as_us() as f64))
        && ok(class.e2e, f.e2e.map(|d| d.as_us() as f64))
        && (f.itl_count == 0 || ok(class.itl, f.mean_itl()))
}

/// Running totals for the summary.
#[derive(Resource, Debug, Default, Clone)]
pub struct Aggregates {
    pub ttft: Histogram,
    pub e2e: Histogram,
    pub scheduling_delay: Histogram,
    /// Every inter-token sample (µs), recorded as tokens are emitted.
    pub itl: Histogram,
    pub completed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub timed_out: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    pub preemptions: u64,
    pub last_completion: SimTime,
    /// Completed requests meeting their SLO class's targets.
    pub good: u64,
    pub per_instance: Vec<Breakdown>,
    pub per_tenant: Vec<Breakdown>,
    pub per_class: Vec<Breakdown>,
}

impl Aggregates {
    /// Requests whose life ended (completed, rejected, dropped or timed out).
    pub fn ended(&self) -> u64 {
        self.completed + self.rejected + self.dropped + self.timed_out
    }
}

/// Appends one CSV field: quoted (quotes doubled) when it holds a comma, quote or line
/// break, as the csv crate writes it.
fn csv_field(row: &mut Vec<u8>, field: &[u8]) {
    if field
        .iter()
        .any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
    {
        row.push(b'"');
        for &b in field {
            if b == b'"' {
                row.push(b'"');
            }
            row.push(b);
        }
        row.push(b'"');
    } else {
        row.extend_from_slice(field);
    }
}

/// Appends `x` with `decimals` (at most 9) decimals exactly as `format!("{x:.decimals$}")`
/// does: the exact binary value rounded to a multiple of 10^-decimals, ties to even
/// (`core::fmt` costs ~1,800 instructions for it). Negative, non-finite or huge values
/// (≥ 2^40) go through `core::fmt`.
pub fn fixed(row: &mut Vec<u8>, x: f64, decimals: u32, digits: &mut itoa::Buffer) {
    debug_assert!(decimals <= 9);
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if !(0.0..1_099_511_627_776.0).contains(&x) || bits >> 63 == 1 {
        use std::io::Write as _;
        let _ = write!(row, "{x:.*}", decimals as usize);
        return;
    }
    // x = m · 2^e exactly; units of 10^-decimals = round(m · 10^decimals · 2^e).
    let frac = bits & ((1 << 52) - 1);
    let (m, e) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp - 1075)
    };
    let scale = 10u64.pow(decimals);
    let scaled = u128::from(m) * u128::from(scale);
    let units = if e >= 0 {
        scaled << e // x < 2^40: e ≤ -13 in fact
    } else if e <= -120 {
        0 // below 2^-67: rounds to zero at 9 decimals
    } else {
        let k = (-e) as u32;
        let q = scaled >> k;
        let rem = scaled & ((1u128 << k) - 1);
        let half = 1u128 << (k - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    let scale = u128::from(scale);
    row.extend_from_slice(digits.format(units / scale).as_bytes());
    if decimals > 0 {
        row.push(b'.');
        let f = digits.format(scale + units % scale); // a leading 1, then the zero-padded decimals
        row.extend_from_slice(&f.as_bytes()[1..]);
    }
}

/// The header line of `requests.csv`.
pub fn csv_header() -> Vec<u8> {
    let mut row = Vec::new();
    for (k, c) in CSV_COLUMNS.iter().enumerate() {
        if k > 0 {
            row.push(b',');
        }
        csv_field(&mut row, c.as_bytes());
    }
    row.push(b'\n');
    row
}

/// Formats the CSV row of a finished request, in [`CSV_COLUMNS`] order, into `row` (cleared
/// first), byte for byte as the csv crate would write it (fields quoted only when needed,
/// `\n` ends the row). Integers go through itoa and milliseconds are whole µs with three
/// decimals: `core::fmt` and a per-field CSV writer cost several hundred instructions a
/// field, and a row is mostly integers.
pub fn format_row(row: &mut Vec<u8>, f: &FinishedRequest, labels: &Labels) {
    row.clear();
    let mut digits = itoa::Buffer::new();
    let mut int = |row: &mut Vec<u8>, v: Option<u64>| {
        if let Some(v) = v {
            row.extend_from_slice(digits.format(v).as_bytes());
        }
        row.push(b',');
    };
    let mut whole_ms = itoa::Buffer::new();
    let mut ms = |row: &mut Vec<u8>, d: Option<SimDuration>| {
        if let Some(d) = d {
            let us = d.as_us();
            row.extend_from_slice(whole_ms.format(us / 1000).as_bytes());
            let frac = us % 1000;
            row.extend_from_slice(&[
                b'.',
                b'0' + (frac / 100) as u8,
                b'0' + (frac / 10 % 10) as u8,
                b'0' + (frac % 10) as u8,
            ]);
        }
        row.push(b',');
    };
    let text = |row: &mut Vec<u8>, s: &str| {
        csv_field(row, s.as_bytes());
        row.push(b',');
    };
    fn name(list: &[String], i: u32) -> &str {
        list.get(i as usize).map_or("", String::as_str)
    }
    int(row, Some(f.spec.id));
    int(row, Some(u64::from(f.spec.client)));
    text(row, name(&labels.tenants, f.spec.tenant));
    text(row, name(&labels.slo_classes, f.spec.slo_class));
    int(row, f.spec.session.map(|x| x.id));
    int(row, f.spec.session.map(|x| u64::from(x.turn)));
    int(row, f.instance.map(u64::from));
    text(row, f.state.as_str());
    int(row, Some(f.lifecycle.arrival.as_us()));
    int(row, Some(u64::from(f.spec.input_tokens)));
    int(row, Some(u64::from(f.spec.output_tokens)));
    int(row, Some(u64::from(f.generated_tokens)));
    int(row, Some(u64::from(f.cached_tokens)));
    ms(row, f.scheduling_delay());
    ms(row, f.ttft);
    ms(row, f.e2e);
    if let Some(us) = f.mean_itl() {
        fixed(row, us / 1000.0, 3, &mut itoa::Buffer::new());
    }
    row.push(b',');
    int(row, Some(u64::from(f.preemptions)));
    int(row, f.completed.map(|t| t.as_us()));
    int(row, f.prefill_instance.map(u64::from));
    int(row, f.decode_instance.map(u64::from));
    ms(row, f.kv_transfer);
    // The last field ends the row, not a comma.
    *row.last_mut().expect("a row has fields") = b'\n';
}

/// Adds a request that ended to the aggregates and the CSV.
pub fn record_one(
    f: &FinishedRequest,
    agg: &mut Aggregates,
    log: &mut RequestLog,
    labels: &Labels,
    slo: &SloTable,
) {
    let good = meets_slo(f, slo);
    agg.good += u64::from(good);
    if let Some(c) = &log.collect {
        c.lock()
            .expect("no panics while holding it")
            .push(RequestSample {
                id: f.spec.id,
                completed: f.state == FinalState::Completed,
                ttft_us: f.ttft.map(|d| d.as_us()),
                e2e_us: f.e2e.map(|d| d.as_us()),
                mean_itl_us: (f.itl_count > 0)
                    .then(|| f.itl_sum.as_us() as f64 / f64::from(f.itl_count)),
            });
    }
    if let Some(i) = f.instance {
        slot(&mut agg.per_instance, i as usize).add(f, good);
    }
    slot(&mut agg.per_tenant, f.spec.tenant as usize).add(f, good);
    slot(&mut agg.per_class, f.spec.slo_class as usize).add(f, good);
    match f.state {
        FinalState::Completed => {
            agg.completed += 1;
            agg.input_tokens += u64::from(f.spec.input_tokens);
            agg.output_tokens += u64::from(f.generated_tokens);
            agg.cached_tokens += u64::from(f.cached_tokens);
            if let Some(e) = f.e2e {
                agg.e2e.record(e.as_us());
            }
            if let Some(c) = f.completed {
                agg.last_completion = agg.last_completion.max(c);
            }
        }
        FinalState::Rejected => agg.rejected += 1,
        FinalState::Dropped => agg.dropped += 1,
        FinalState::TimedOut => agg.timed_out += 1,
        FinalState::Queued | FinalState::Running | FinalState::InTransit => {}
    }
    if let Some(t) = f.ttft {
        agg.ttft.record(t.as_us());
    }
    if let Some(d) = f.scheduling_delay() {
        agg.scheduling_delay.record(d.as_us());
    }
    agg.preemptions += u64::from(f.preemptions);
    let RequestLog {
        writer,
        error,
        scratch,
        memory,
        ..
    } = log;
    use std::io::Write as _;
    if (writer.is_none() && memory.is_none()) || error.is_some() {
        return;
    }
    format_row(scratch, f, labels);
    if let Some(w) = writer.as_mut()
        && let Err(e) = w.write_all(scratch)
    {
        *error = Some(e.to_string());
    }
    if let Some(m) = memory.as_mut()
        && error.is_none()
        && let Err(e) = m.write_all(scratch)
    {
        *error = Some(e.to_string());
    }
}

/// What recording a finished request needs besides the aggregates: the row writer, names,
/// which sources hold batches back, and commands to despawn it.
#[derive(bevy_ecs::system::SystemParam)]
pub struct Recorder<'w, 's> {
    commands: Commands<'w, 's>,
    labels: Res<'w, Labels>,
    log: ResMut<'w, RequestLog>,
    held: Res<'w, crate::engine::HeldBatches>,
    workload: ResMut<'w, crate::engine::WorkloadDue>,
}

impl<'w, 's> Recorder<'w, 's> {
    /// The commands that despawn recorded requests: commands given here apply before the
    /// despawns of requests recorded later.
    pub fn commands(&mut self) -> &mut Commands<'w, 's> {
        &mut self.commands
    }

    /// True when recording `finished` needs nothing but this (no session turn or held
    /// batch to tell the workload about): the instance pipeline's fast ticks may record them
    /// themselves.
    pub fn records_alone(&self, finished: &[FinishedRequest]) -> bool {
        finished.iter().all(|f| {
            f.spec.session.is_none()
                && !self
                    .held
                    .0
                    .get(f.spec.client as usize)
                    .copied()
                    .unwrap_or(false)
        })
    }

    /// Writes the rows of `due`, adds them to the aggregates and despawns them (ended
    /// session turns and held batches are handed to the workload's Record systems).
    pub fn record(
        &mut self,
        due: &mut RecordDue,
        now: SimTime,
        check: bool,
        slo: &SloTable,
        agg: &mut Aggregates,
        fault: &mut crate::engine::SimFault,
    ) {
        let mut finished = std::mem::take(&mut due.0);
        for f in &finished {
            if check {
                check_causality(f, now);
            }
            record_one(f, agg, &mut self.log, &self.labels, slo);
            if let Some(s) = f.spec.session {
                self.workload.ended_turns.push((s.id, f.state, f.completed));
            }
            if self
                .held
                .0
                .get(f.spec.client as usize)
                .copied()
                .unwrap_or(false)
            {
                self.workload.ended_held.push(f.spec.client);
            }
            self.commands.entity(f.entity).despawn();
        }
        finished.clear();
        due.0 = finished;
        // The first failed write stops the run (a full disk, say): simulating on would only
        // produce results that cannot be kept.
        if let Some(e) = &self.log.error {
            fault.0.get_or_insert_with(|| crate::engine::Fault::Write {
                file: "requests.csv",
                at: now,
                error: e.clone(),
            });
        }
    }
}

/// Writes the rows of the requests that ended this tick and despawns them.
pub fn record_finished(
    mut due: ResMut<RecordDue>,
    clock: Res<SimClock>,
    check: Res<CheckInvariants>,
    slo: Res<SloTable>,
    mut agg: ResMut<Aggregates>,
    mut fault: ResMut<crate::engine::SimFault>,
    mut recorder: Recorder,
) {
    recorder.record(&mut due, clock.now, check.0, &slo, &mut agg, &mut fault);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Lifecycle;
    use bevy_ecs::system::RunSystemOnce;
    use std::io::Write as _;

    /// `record_finished` alone on a bare world: a completed session turn of a source that
    /// holds an offline batch back, and a rejected request.
    #[test]
    fn recording_writes_a_row_each_counts_them_tells_the_workload_and_despawns() {
        let mut world = World::new();
        for init in [
            World::init_resource::<Aggregates>,
            World::init_resource::<SloTable>,
            World::init_resource::<Labels>,
            World::init_resource::<crate::engine::WorkloadDue>,
            World::init_resource::<crate::engine::SimFault>,
            World::init_resource::<CheckInvariants>,
            World::init_resource::<SimClock>,
        ] {
            init(&mut world);
        }
        world.insert_resource(crate::engine::HeldBatches(vec![false, true]));
        let buffer = SharedBuffer::default();
        let mut memory = BufWriter::new(buffer.clone());
        memory.write_all(&csv_header()).unwrap();
        world.insert_resource(RequestLog {
            memory: Some(memory),
            ..Default::default()
        });
        let (a, b) = (world.spawn_empty().id(), world.spawn_empty().id());
        let mut spec = crate::policy::any_request();
        spec.client = 1;
        spec.session = Some(crate::request::SessionRef { id: 7, turn: 0 });
        let mut done =
            FinishedRequest::unserved(a, spec, Default::default(), FinalState::Completed, Some(0));
        done.completed = Some(SimTime(900));
        done.generated_tokens = 10;
        let rejected = FinishedRequest::unserved(
            b,
            crate::policy::any_request(),
            Default::default(),
            FinalState::Rejected,
            None,
        );
        world.insert_resource(RecordDue(vec![done, rejected]));
        world.run_system_once(record_finished).unwrap();

        assert!(
            world.resource::<RecordDue>().0.is_empty(),
            "its list is emptied"
        );
        assert!(world.get_entity(a).is_err() && world.get_entity(b).is_err());
        let agg = world.resource::<Aggregates>();
        assert_eq!((agg.completed, agg.rejected, agg.output_tokens), (1, 1, 10));
        let w = world.resource::<crate::engine::WorkloadDue>();
        assert_eq!(
            w.ended_turns,
            [(7, FinalState::Completed, Some(SimTime(900)))]
        );
        assert_eq!(
            w.ended_held,
            [1],
            "source 1 holds a batch back; source 0 does not"
        );
        world
            .resource_mut::<RequestLog>()
            .memory
            .as_mut()
            .unwrap()
            .flush()
            .unwrap();
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 3, "a header and two rows:\n{text}");
    }

    /// `fixed` against `core::fmt` on values built like mean ITLs (whole µs over a count, in
    /// ms), on ties (x.xxx5 exactly representable) and on edges.
    #[test]
    fn three_decimals_are_what_core_fmt_prints() {
        let mut digits = itoa::Buffer::new();
        let mut check = |x: f64| {
            for d in [0, 1, 3, 6, 9] {
                let mut row = Vec::new();
                fixed(&mut row, x, d, &mut digits);
                let want = format!("{x:.*}", d as usize);
                assert_eq!(String::from_utf8(row).unwrap(), want, "{x:e} to {d}");
            }
        };
        for x in [
            0.0,
            0.0005,
            0.0015,
            0.0025,
            1.0625,
            2.5e-324,
            0.4995,
            0.9995,
            9.9995,
            1e15,
            -0.0,
            -1.25,
            0.05,
            0.25,
            0.35,
            2.5,
            1_099_511_627_775.5,
            1e300,
            f64::NAN,
            f64::INFINITY,
            123_456.000_000_5,
            0.000_000_000_5,
        ] {
            check(x);
        }
        for k in 0..4096u64 {
            check(k as f64 / 8192.0); // ties among these
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let sum = state % 10_000_000_000;
            let count = 1 + (state >> 40) % 5_000;
            check(sum as f64 / count as f64 / 1000.0);
        }
    }

    /// Rows are formatted by hand; the csv crate is the independent check, byte for byte,
    /// on names that need quoting and fields that are empty or not.
    #[test]
    fn a_row_is_what_the_csv_crate_writes() {
        let labels = Labels {
            tenants: vec!["plain".into(), "a,b".into(), "say \"hi\"".into()],
            slo_classes: vec!["two\nlines".into(), "cr\r".into(), String::new()],
            groups: vec![],
        };
        let entity = Entity::from_raw_u32(3).unwrap();
        let mut rows = Vec::new();
        for k in 0..3u32 {
            let mut spec = crate::policy::any_request();
            spec.id = 1_000_000_007 * u64::from(k);
            spec.tenant = k;
            spec.slo_class = k;
            spec.session = (k == 1).then_some(crate::request::SessionRef { id: 9, turn: 2 });
            let lifecycle = Lifecycle {
                arrival: SimTime(12_345 * u64::from(k)),
                ..Default::default()
            };
            let mut f =
                FinishedRequest::unserved(entity, spec, lifecycle, FinalState::Completed, Some(k));
            if k > 0 {
                f.ttft = Some(SimDuration(1_000_999 * u64::from(k)));
                f.e2e = Some(SimDuration(7));
                f.itl_sum = SimDuration(1_234_567);
                f.itl_count = 3 * k;
                f.completed = Some(SimTime(99));
                f.kv_transfer = Some(SimDuration(1_000));
                f.decode_instance = Some(k);
            }
            rows.push(f);
        }
        let mut want = csv::Writer::from_writer(Vec::new());
        want.write_record(CSV_COLUMNS).unwrap();
        let mut got = csv_header();
        let mut row = Vec::new();
        for f in &rows {
            let fields = [
                f.spec.id.to_string(),
                f.spec.client.to_string(),
                labels.tenants[f.spec.tenant as usize].clone(),
                labels.slo_classes[f.spec.slo_class as usize].clone(),
                f.spec.session.map(|s| s.id.to_string()).unwrap_or_default(),
                f.spec
                    .session
                    .map(|s| s.turn.to_string())
                    .unwrap_or_default(),
                f.instance.map(|i| i.to_string()).unwrap_or_default(),
                f.state.as_str().to_string(),
                f.lifecycle.arrival.as_us().to_string(),
                f.spec.input_tokens.to_string(),
                f.spec.output_tokens.to_string(),
                f.generated_tokens.to_string(),
                f.cached_tokens.to_string(),
                f.scheduling_delay()
                    .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                    .unwrap_or_default(),
                f.ttft
                    .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                    .unwrap_or_default(),
                f.e2e
                    .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                    .unwrap_or_default(),
                f.mean_itl()
                    .map(|us| format!("{:.3}", us / 1000.0))
                    .unwrap_or_default(),
                f.preemptions.to_string(),
                f.completed
                    .map(|t| t.as_us().to_string())
                    .unwrap_or_default(),
                f.prefill_instance
                    .map(|i| i.to_string())
                    .unwrap_or_default(),
                f.decode_instance.map(|i| i.to_string()).unwrap_or_default(),
                f.kv_transfer
                    .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                    .unwrap_or_default(),
            ];
            assert_eq!(fields.len(), CSV_COLUMNS.len());
            want.write_record(&fields).unwrap();
            format_row(&mut row, f, &labels);
            got.extend_from_slice(&row);
        }
        let want = want.into_inner().unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
}
