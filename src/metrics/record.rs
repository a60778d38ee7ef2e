//! The Record stage: each finished request's row, aggregates and SLO, then its entity
//! despawned; KV-event counts.

use bevy_ecs::prelude::*;

use super::{Aggregates, KvEventTally, RequestLog, RequestSample, format_row, slot};
use crate::engine::{CheckInvariants, RecordDue, SimClock};
use crate::labels::Labels;
use crate::request::{FinalState, FinishedRequest};
use crate::slo::SloTable;
use crate::time::{SimDuration, SimTime};

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
            KvEventKind::Evicted { tier: KvTier::Nvme } => c.evicted_from_nvme += 1,
            KvEventKind::Evicted {
                tier: KvTier::Store,
            } => c.evicted_from_store += 1,
            KvEventKind::Written {
                tier: KvTier::Store,
            } => c.written_to_store += 1,
            KvEventKind::Written { .. } => c.written_to_nvme += 1,
            KvEventKind::Loaded {
                tier: KvTier::Store,
            } => c.loaded_from_store += 1,
            KvEventKind::Loaded { .. } => c.loaded_from_nvme += 1,
        }
    }
}

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
                timed_out: f.state == FinalState::TimedOut,
                arrival_us: f.lifecycle.arrival.as_us(),
                completed_us: f.completed.map(|c| c.as_us()),
                slo_class: f.spec.slo_class,
                good,
                ttft_us: f.ttft.map(|d| d.as_us()),
                e2e_us: f.e2e.map(|d| d.as_us()),
                mean_itl_us: (f.itl_count > 0)
                    .then(|| f.itl_sum.as_us() as f64 / f64::from(f.itl_count)),
                ttft_parts: f.ttft_parts(),
            });
    }
    if let Some(i) = f.instance {
        slot(&mut agg.per_instance, i as usize).add(f, good);
    }
    slot(&mut agg.per_tenant, f.spec.tenant as usize).add(f, good);
    slot(&mut agg.per_class, f.spec.slo_class as usize).add(f, good);
    if let Some(a) = f.spec.adapter {
        slot(&mut agg.per_adapter, a as usize).add(f, good);
    }
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
        FinalState::Failed => agg.failed += 1,
        FinalState::Queued | FinalState::Running | FinalState::InTransit => {}
    }
    if let Some(t) = f.ttft {
        agg.ttft.record(t.as_us());
    }
    if let Some(d) = f.scheduling_delay() {
        agg.scheduling_delay.record(d.as_us());
    }
    if let Some(p) = f.ttft_parts() {
        agg.ttft_parts.add(p);
    }
    agg.preemptions += u64::from(f.preemptions);
    let RequestLog {
        writer,
        error,
        scratch,
        memory,
        extra,
        ..
    } = log;
    use std::io::Write as _;
    if (writer.is_none() && memory.is_none()) || error.is_some() {
        return;
    }
    format_row(scratch, f, labels, *extra);
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
