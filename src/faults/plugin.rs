//! The fault plugin: with the scenario's `faults`, each straggler's window on its
//! instance, the crash state and systems ([`super::crash`]), a Record-stage tally of the
//! requests arriving before, during and after each fault, and the summary's `faults` part;
//! nothing at all otherwise.

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use super::crash::{Crashes, any_marked, crash_and_restart, faults_due, lose_arrivals};
use crate::engine::{Event, EventQueue, RecordDue, SimStep, SimSystems};
use crate::instance::{InstanceIndex, Scheduler};
use crate::metrics::{
    CrashEvent, CrashesSummary, FaultsSummary, LinkFaultSummary, ListedCrash, SpanSlo,
    StragglerSummary, Summary, SummaryAppExt,
};
use crate::request::{FinalState, FinishedRequest};
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError};
use crate::slo::SloTable;
use crate::time::{SimDuration, SimTime};

/// Injects the scenario's faults (stragglers, crashes; KV-link faults are the Transfer stage's) and
/// reports them in the summary.
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
        let from = SimTime::ZERO + SimDuration::from_secs_f64(st.from_s);
        let until = SimTime::ZERO + SimDuration::from_secs_f64(st.until_s);
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
    // Degraded or severed host and pipeline links: windows on their instances' schedulers.
    for (host, links) in [(true, &f.host_links), (false, &f.pp_links)] {
        for l in links {
            let window = crate::instance::LinkWindow {
                from: SimTime::ZERO + SimDuration::from_secs_f64(l.from_s),
                until: SimTime::ZERO + SimDuration::from_secs_f64(l.until_s),
                bandwidth: l.bandwidth,
                touched: 0,
            };
            if let Some(mut sched) = index
                .get(l.instance as usize)
                .and_then(|&e| world.get_mut::<Scheduler>(e))
            {
                if host {
                    sched.host_faults.push(window);
                } else {
                    sched.pp_faults.push(window);
                }
            }
        }
    }
    world.insert_resource(spans);
    app.add_systems(
        SimStep,
        tally_spans
            .in_set(SimSystems::Record)
            .before(crate::metrics::MetricsSystems::Record),
    );
    if f.crashes_on() {
        set_up_crashes(app, ctx, f);
    }
    Ok(())
}

/// The crash state (each group's reload time, the listed crashes and the first MTBF draws)
/// and its systems: crashes and restarts in Advance, arrivals at down instances in Enqueue.
fn set_up_crashes(app: &mut App, ctx: &SetupCtx<'_>, f: &crate::scenario::FaultsSpec) {
    let world = app.world_mut();
    let groups = world.resource::<crate::instance::spawn::Groups>().clone();
    let mut reload = Vec::new();
    let mut autoscaled = Vec::new();
    let mut weights = Vec::new();
    let net = world.get_resource::<crate::network::Network>().cloned();
    for (group, info) in ctx.scenario.cluster.groups.iter().zip(&groups.0) {
        let gpus = group.gpus();
        let over_net = match (&net, &info.resolved.model) {
            (Some(net), Some(m)) if f.reload_s.is_none() && group.scaling.is_none() => {
                Some((net, m))
            }
            _ => None,
        };
        let derived = info.resolved.model.as_ref().map_or(0.0, |m| {
            crate::model::load_s(m, crate::model::Replica::of(group), 2.0)
        });
        let d = SimDuration::from_secs_f64(f.reload_s.unwrap_or(derived));
        for i in info.instances() {
            reload.push(d);
            autoscaled.push(group.scaling.is_some());
            weights.push(over_net.map(|(net, m)| {
                net.weight_load(i, crate::model::weight_memory_bytes(m), 2.0, gpus)
            }));
        }
    }
    let listed: Vec<(u32, SimTime)> = f
        .crashes
        .iter()
        .map(|c| {
            (
                c.instance,
                SimTime::ZERO + SimDuration::from_secs_f64(c.at_s),
            )
        })
        .collect();
    let n = reload.len() as u32;
    let mut crashes = Crashes::new(
        f.on_crash.clone(),
        SimDuration::from_secs_f64(f.repair_s),
        reload,
        autoscaled,
        f.mtbf_s,
        ctx.scenario.seed,
        &listed,
    );
    crashes.weights = weights;
    {
        let mut queue = world.resource_mut::<EventQueue>();
        for &(instance, at) in &listed {
            queue.push(at, Event::Crash { instance });
        }
        for i in 0..n {
            crashes.draw(i, SimTime::ZERO, &mut queue);
        }
    }
    world.insert_resource(crashes);
    app.add_systems(
        SimStep,
        (
            crash_and_restart
                .in_set(SimSystems::Advance)
                .after(crate::instance::InstanceSystems::Retire)
                .after(crate::autoscale::advance_phases)
                .run_if(faults_due),
            lose_arrivals
                .in_set(SimSystems::Enqueue)
                .after(crate::instance::enqueue_requests)
                .before(crate::instance::expire_requests)
                .run_if(any_marked),
        ),
    );
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

/// Counts a request that ended into the crash tallies: healthy or degraded by its arrival,
/// the spans of each listed crash, completions after a retry.
fn count_crash(c: &mut Crashes, f: &FinishedRequest, slo: &SloTable) {
    let good = crate::metrics::meets_slo(f, slo);
    let completed = f.state == FinalState::Completed;
    let add = |x: &mut [u64; 3]| {
        x[0] += 1;
        x[1] += u64::from(completed);
        x[2] += u64::from(good);
    };
    let arrival = f.lifecycle.arrival;
    if c.degraded_at(arrival) {
        add(&mut c.degraded_slo);
    } else {
        add(&mut c.healthy);
    }
    for l in &mut c.listed {
        let k = if arrival < l.at {
            0
        } else if arrival < l.until {
            1
        } else {
            2
        };
        add(&mut l.spans[k]);
    }
    c.completed_after_retry += u64::from(completed && f.lifecycle.retries > 0);
}

/// Record stage: counts each request that ended into the spans of every straggler and,
/// with crashes, into the crash tallies.
pub fn tally_spans(
    due: Res<RecordDue>,
    slo: Res<SloTable>,
    mut spans: ResMut<Spans>,
    mut crashes: Option<ResMut<Crashes>>,
) {
    for f in &due.0 {
        count(&mut spans, f, &slo);
        if let Some(c) = crashes.as_deref_mut() {
            count_crash(c, f, &slo);
        }
    }
}

/// The faults' part of the summary (only with `faults`); the requests still in the system
/// when the run stopped count as arrived, not completed.
fn summarize(world: &mut World, summary: &mut Summary) {
    let Some(mut spans) = world.get_resource::<Spans>().cloned() else {
        return;
    };
    let slo = world.resource::<SloTable>().clone();
    let mut crashes = world.remove_resource::<Crashes>();
    if let Some(left) = world.get_resource::<crate::metrics::Unfinished>() {
        for f in &left.0 {
            count(&mut spans, f, &slo);
            if let Some(c) = crashes.as_mut() {
                count_crash(c, f, &slo);
            }
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
    let one = |[arrived, completed, good]: [u64; 3]| SpanSlo {
        arrived,
        completed,
        good,
        attainment: (targeted && arrived > 0).then(|| good as f64 / arrived as f64),
    };
    let crashes = crashes.map(|c| {
        let end = world.resource::<crate::engine::SimClock>().now;
        let secs = |t: SimTime| t.as_us() as f64 / 1e6;
        let fixed = c.autoscaled.iter().filter(|a| !**a).count();
        let down = c.down_until(end);
        let run = end.as_us() as f64 * fixed as f64;
        CrashesSummary {
            policy: c.policy.name().to_string(),
            max_retries: match c.policy {
                crate::scenario::CrashPolicy::Fail => 0,
                crate::scenario::CrashPolicy::Retry { max_retries, .. } => max_retries,
            },
            mtbf_s: c.mtbf_s,
            repair_s: c.repair.as_us() as f64 / 1e6,
            crashes: c.events.len() as u64,
            skipped: c.skipped,
            down_s: down.as_us() as f64 / 1e6,
            availability: (run > 0.0).then(|| 1.0 - down.as_us() as f64 / run),
            lost: c.lost,
            failed: c.failed,
            retried: c.retried,
            completed_after_retry: c.completed_after_retry,
            healthy: one(c.healthy),
            degraded: one(c.degraded_slo),
            events: c
                .events
                .iter()
                .map(|x| CrashEvent {
                    instance: x.instance,
                    at_s: secs(x.at),
                    back_s: x.back.map(secs),
                    cause: if x.listed { "listed" } else { "mtbf" }.to_string(),
                    lost: x.lost,
                })
                .collect(),
            listed: c
                .listed
                .iter()
                .map(|l| ListedCrash {
                    instance: l.instance,
                    at_s: secs(l.at),
                    happened: l.happened,
                    before: one(l.spans[0]),
                    during: one(l.spans[1]),
                    after: one(l.spans[2]),
                })
                .collect(),
        }
    });
    if crashes.is_some() {
        summary.requests.failed = Some(world.resource::<crate::metrics::Aggregates>().failed);
    }
    let kv_links = world
        .get_resource::<crate::disagg::Disagg>()
        .map(|x| {
            x.link_faults
                .iter()
                .map(|l| LinkFaultSummary {
                    instance: l.instance,
                    from_s: l.from.as_us() as f64 / 1e6,
                    until_s: l.until.as_us() as f64 / 1e6,
                    bandwidth: l.bandwidth,
                    transfers: l.transfers,
                })
                .collect()
        })
        .unwrap_or_default();
    // Host and pipeline link windows, in the scenario's order, with the steps each touched.
    let index = world.resource::<InstanceIndex>().0.clone();
    let windows = |host: bool, specs: &[crate::scenario::LinkFaultSpec]| {
        let mut seen: std::collections::BTreeMap<u32, usize> = Default::default();
        specs
            .iter()
            .map(|l| {
                let k = seen.entry(l.instance).or_default();
                let touched = index
                    .get(l.instance as usize)
                    .and_then(|&e| world.get::<Scheduler>(e))
                    .and_then(|s| {
                        let w = if host { &s.host_faults } else { &s.pp_faults };
                        w.get(*k).map(|w| w.touched)
                    })
                    .unwrap_or(0);
                *k += 1;
                LinkFaultSummary {
                    instance: l.instance,
                    from_s: l.from_s,
                    until_s: l.until_s,
                    bandwidth: l.bandwidth,
                    transfers: touched,
                }
            })
            .collect::<Vec<_>>()
    };
    let spec = world.resource::<crate::scenario::Scenario>().faults.clone();
    let (host_links, pp_links) = spec.map_or((Vec::new(), Vec::new()), |f| {
        (windows(true, &f.host_links), windows(false, &f.pp_links))
    });
    summary.faults = Some(FaultsSummary {
        kv_links,
        host_links,
        pp_links,
        crashes,
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
