//! The fault plugin: with the scenario's `faults`, each straggler's window on its
//! instance, a Record-stage tally of the requests arriving before, during and after it,
//! and the summary's `faults` part; nothing at all otherwise.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use crate::engine::{RecordDue, SimStep, SimSystems};
use crate::instance::{InstanceIndex, Scheduler};
use crate::metrics::{FaultsSummary, SpanSlo, StragglerSummary, Summary, SummaryAppExt};
use crate::request::{FinalState, FinishedRequest};
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError};
use crate::slo::SloTable;
use crate::time::SimTime;

/// Injects the scenario's faults (stragglers) and reports them in the summary.
pub struct FaultsPlugin;

impl Plugin for FaultsPlugin {
    fn build(&self, app: &mut App) {
        app.add_setup(SetupStage::Cluster, set_up_faults)
            .add_summary_part(summarize);
    }
}

/// Per straggler: its window and the requests that arrived before, during and after it.
#[derive(Resource, Debug, Default, Clone)]
pub struct Spans(pub Vec<Straggler>);

#[derive(Debug, Default, Clone)]
pub struct Straggler {
    pub instance: u32,
    pub from: SimTime,
    pub until: SimTime,
    pub slowdown: f64,
    /// before, during, after: (arrived, completed, good).
    pub spans: [(u64, u64, u64); 3],
}

/// `SetupStage::Cluster`: each straggler's window on its instance's scheduler, and the
/// tally in the Record stage.
fn set_up_faults(app: &mut App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let Some(f) = &ctx.scenario.faults else {
        return Ok(());
    };
    let world = app.world_mut();
    let index = world.resource::<InstanceIndex>().0.clone();
    let mut spans = Spans::default();
    for st in &f.stragglers {
        let from = SimTime::ZERO + crate::time::SimDuration::from_secs_f64(st.from_s);
        let until = SimTime::ZERO + crate::time::SimDuration::from_secs_f64(st.until_s);
        if let Some(mut sched) = index
            .get(st.instance as usize)
            .and_then(|&e| world.get_mut::<Scheduler>(e))
        {
            sched.slowdowns.push((from, until, st.slowdown));
        }
        spans.0.push(Straggler {
            instance: st.instance,
            from,
            until,
            slowdown: st.slowdown,
            ..Default::default()
        });
    }
    world.insert_resource(spans);
    app.add_systems(
        SimStep,
        tally_spans
            .in_set(SimSystems::Record)
            .before(crate::metrics::MetricsSystems::Record),
    );
    Ok(())
}

/// Which span of `s` a request arriving at `arrival` belongs to: 0 before, 1 during, 2 after.
fn span(s: &Straggler, arrival: SimTime) -> usize {
    if arrival < s.from {
        0
    } else if arrival < s.until {
        1
    } else {
        2
    }
}

fn count(spans: &mut Spans, f: &FinishedRequest, slo: &SloTable) {
    let good = crate::metrics::meets_slo(f, slo);
    for s in &mut spans.0 {
        let k = span(s, f.lifecycle.arrival);
        let c = &mut s.spans[k];
        c.0 += 1;
        c.1 += u64::from(f.state == FinalState::Completed);
        c.2 += u64::from(good);
    }
}

/// Record stage: counts each request that ended into the spans of every straggler.
pub fn tally_spans(due: Res<RecordDue>, slo: Res<SloTable>, mut spans: ResMut<Spans>) {
    for f in &due.0 {
        count(&mut spans, f, &slo);
    }
}

/// The faults' part of the summary (only with `faults`); the requests still in the system
/// when the run stopped count as arrived, not completed.
fn summarize(world: &mut World, summary: &mut Summary) {
    let Some(mut spans) = world.get_resource::<Spans>().cloned() else {
        return;
    };
    let slo = world.resource::<SloTable>().clone();
    if let Some(left) = world.get_resource::<crate::metrics::Unfinished>() {
        for f in &left.0 {
            count(&mut spans, f, &slo);
        }
    }
    let targeted = slo
        .classes
        .iter()
        .any(|c| c.ttft.is_some() || c.itl.is_some() || c.e2e.is_some());
    let index = world.resource::<InstanceIndex>().0.clone();
    let steps_in = |s: &Straggler| -> u64 {
        index
            .get(s.instance as usize)
            .and_then(|&e| world.get::<Scheduler>(e))
            .map_or(0, |sched| sched.counters.slowed_steps)
    };
    summary.faults = Some(FaultsSummary {
        stragglers: spans
            .0
            .iter()
            .map(|s| {
                let one = |(arrived, completed, good): (u64, u64, u64)| SpanSlo {
                    arrived,
                    completed,
                    good,
                    attainment: (targeted && arrived > 0).then(|| good as f64 / arrived as f64),
                };
                StragglerSummary {
                    instance: s.instance,
                    from_s: s.from.as_us() as f64 / 1e6,
                    until_s: s.until.as_us() as f64 / 1e6,
                    slowdown: s.slowdown,
                    steps_slowed: steps_in(s),
                    before: one(s.spans[0]),
                    during: one(s.spans[1]),
                    after: one(s.spans[2]),
                }
            })
            .collect(),
    });
}
