//! What Python policies see beyond the routers' snapshot: each instance's life-cycle state and
//! the duration of its last step, and the cluster's time and sizes per group (serving,
//! starting — scale-ups in progress —, draining). A system refreshes it before each routing
//! decision in runs whose Python policies ask for it (`wants_cluster = True`, [`plugin`]);
//! other runs, and the runs of the command line and of Rust policies, never pay for it.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use servesim::bevy_app::App;
use servesim::bevy_ecs;
use servesim::bevy_ecs::prelude::*;
use servesim::bevy_ecs::world::World;
use servesim::engine::{FastLoop, RouteDue};
use servesim::instance::{Instance, Phase, Power, Scheduler};
use servesim::{SimClock, SimStep, SimStepFast, SimSystems};

/// One instance's state and last step (ms; None before its first).
#[derive(Clone, Debug, Default)]
pub struct InstanceLive {
    pub state: &'static str,
    pub last_step_ms: Option<f64>,
}

/// The cluster's time and, per group, instances by life-cycle state.
#[derive(Clone, Debug, Default)]
pub struct LiveData {
    pub now_s: f64,
    pub instances: Vec<InstanceLive>,
    /// (serving, starting, draining) per group, by group index.
    pub groups: Vec<(u32, u32, u32)>,
}

/// Shared between the refreshing system and the policies' views.
#[derive(Resource, Clone, Debug, Default)]
pub struct Live(pub Arc<Mutex<LiveData>>);

/// The cluster as a Python policy sees it (`wants_cluster = True` on a router or an
/// admission policy adds it as a third argument).
#[pyclass(frozen, get_all, module = "servesim")]
pub struct Cluster {
    /// Simulated time of the decision, seconds.
    pub now_s: f64,
    /// Per group (by index): its name and its instances serving, starting (provisioning,
    /// loading or warming up: scale-ups under way) and draining (scale-downs under way).
    pub groups: Vec<(String, u32, u32, u32)>,
}

#[pymethods]
impl Cluster {
    fn __repr__(&self) -> String {
        format!("Cluster(now_s={}, groups={:?})", self.now_s, self.groups)
    }
}

impl Live {
    pub fn cluster(&self, names: &[String]) -> Cluster {
        let d = self.0.lock().map(|d| d.clone()).unwrap_or_default();
        Cluster {
            now_s: d.now_s,
            groups: d
                .groups
                .iter()
                .enumerate()
                .map(|(g, &(s, st, dr))| (names.get(g).cloned().unwrap_or_default(), s, st, dr))
                .collect(),
        }
    }
}

/// Adds the refreshing system (and the [`Live`] resource) to an app: in [`SimStep`] before
/// routing, and in [`SimStepFast`] before its one system (which routes arrivals inside), so
/// that fast ticks stay allowed.
pub fn plugin(app: &mut App) {
    app.init_resource::<Live>()
        .add_systems(
            SimStep,
            refresh
                .after(SimSystems::Admit)
                .before(SimSystems::Route)
                .run_if(|d: Res<RouteDue>| !d.0.is_empty()),
        )
        .add_systems(
            SimStepFast,
            refresh.before(SimSystems::Advance).run_if(never),
        );
}

/// For policies that want the live views: ticks of arrivals run [`SimStep`], which refreshes
/// the views before routing (a fast tick routes arrivals inside its one system, after a run
/// of step ends it may have gone through past the refresh). Runs of step ends stay fast;
/// results are the same either way (fast ticks are byte-identical by design).
pub fn every_tick(world: &mut World) {
    world.resource_mut::<FastLoop>().arrivals = false;
}

/// In [`SimStepFast`] only so that fast ticks stay allowed (they may not stand in for a
/// schedule with systems of its own); it has nothing to refresh there.
fn never() -> bool {
    false
}

fn refresh(
    live: Res<Live>,
    clock: Res<SimClock>,
    labels: Res<servesim::labels::Labels>,
    instances: Query<(&Instance, &Scheduler, Option<&Power>)>,
) {
    let Ok(mut d) = live.0.lock() else {
        return;
    };
    d.now_s = clock.now.as_us() as f64 / 1e6;
    d.groups.clear();
    d.groups.resize(labels.groups.len(), (0, 0, 0));
    for (inst, sched, power) in &instances {
        let phase = power.map_or(Phase::Serving, |p| p.phase);
        let i = inst.index as usize;
        if d.instances.len() <= i {
            d.instances.resize(i + 1, InstanceLive::default());
        }
        let last = (sched.step_done > sched.step_started)
            .then(|| (sched.step_done.as_us() - sched.step_started.as_us()) as f64 / 1e3);
        d.instances[i] = InstanceLive {
            state: phase.name(),
            last_step_ms: last,
        };
        if let Some(g) = d.groups.get_mut(inst.group as usize) {
            match phase {
                Phase::Serving => g.0 += 1,
                Phase::Provisioning | Phase::Loading | Phase::WarmingUp => g.1 += 1,
                Phase::Draining => g.2 += 1,
                Phase::Off => {}
            }
        }
    }
}
