//! The driver: builds a simulation from an app and a scenario ([`Simulation::from_app`]),
//! steps it ([`Simulation::tick`], [`Simulation::run`]) and finishes it. Everything a run
//! is made of (resources, entities, systems, result files, the summary's parts) comes from
//! the plugins' setup and finish steps; the driver orders them, ticks and commits the files.

use std::path::PathBuf;

use bevy_app::App;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::Schedules;

use crate::catalog::Catalog;
use crate::engine::{self, Injected, SimClock, SimFault, SimStep};
use crate::invariants::CheckInvariants;
use crate::metrics::{self, Aggregates, FinishSteps, Summary, Unfinished};
use crate::output::Outputs;
use crate::scenario::Scenario;
use crate::setup::{PROGRESS_EVERY, Progress, ProgressHook, RunOptions, SetupCtx, SetupSteps};
pub use crate::setup::{RunError, SetupError, SimError};
use crate::time::{SimDuration, SimTime};

/// An [`App`] with every built-in plugin: read its [`Catalog`] to validate scenarios, add
/// your own plugins and policies, then hand it to [`Simulation::from_app`]. The same as
/// `ServesimApp::new().build()`; to make every command use your additions, give them to a
/// [`ServesimApp`](crate::ServesimApp).
pub fn default_app() -> App {
    crate::ServesimApp::new().build()
}

/// What a successful run did with its output directory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputReport {
    /// The directory, when the run had one and wrote to it.
    pub dir: Option<PathBuf>,
    /// Result files this run wrote (replacing any of the same name).
    pub written: Vec<String>,
    /// Result files already there that this run did not write (from an earlier run).
    pub earlier: Vec<String>,
    /// Leftovers of killed runs removed before this run wrote anything.
    pub cleaned: Vec<String>,
    /// Files of a run killed while committing its results, moved into place (that commit
    /// finished) before this run wrote anything.
    pub completed: Vec<String>,
}

impl OutputReport {
    /// What the run left of an earlier run's files in its directory, as `run` and Python's
    /// `run(out=…)` say it; `None` when it left none.
    pub fn earlier_note(&self) -> Option<String> {
        let dir = self.dir.as_ref()?;
        (!self.earlier.is_empty()).then(|| {
            format!(
                "left alone in {}: {} (from an earlier run; this run does not write {})",
                dir.display(),
                self.earlier.join(", "),
                if self.earlier.len() == 1 {
                    "it"
                } else {
                    "them"
                }
            )
        })
    }
}

/// A ready-to-run simulation: the ECS world and the tick schedules.
pub struct Simulation {
    world: World,
    schedule: Schedule,
    /// The instance pipeline alone, for ticks of step ends only (`None` when SimStep holds
    /// systems other than the built-in ones).
    fast: Option<Schedule>,
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    progress: Option<ProgressHook>,
    /// `limits.max_in_flight`.
    max_in_flight: u64,
}

impl Simulation {
    /// Builds a simulation of `scenario` with the built-in plugins.
    pub fn new(scenario: &Scenario, options: RunOptions) -> Result<Self, SimError> {
        Self::from_app(default_app(), scenario, options)
    }

    /// Builds a simulation of `scenario` from an app (built-ins plus your plugins): the
    /// scenario, its labels, the clock and the output directory go into the World, then
    /// each plugin's setup steps build their parts, stage by stage.
    pub fn from_app(
        mut app: App,
        scenario: &Scenario,
        options: RunOptions,
    ) -> Result<Self, SimError> {
        let world = app.world_mut();
        let catalog = world.remove_resource::<Catalog>().unwrap_or_default();
        // The scenario's groups, resolved once (validation already read their files).
        let resolved = (0..scenario.cluster.groups.len())
            .map(|g| crate::loader::resolve_group(scenario, g, &catalog))
            .collect::<Result<Vec<_>, _>>()
            .map_err(SetupError::Group)?;
        world.insert_resource(scenario.clone());
        world.insert_resource(scenario.labels());
        world.insert_resource(SimClock {
            now: SimTime::ZERO,
            ticks: 0,
            horizon: scenario.horizon_s.map_or(SimTime::MAX, |h| {
                SimTime::ZERO + SimDuration::from_secs_f64(h)
            }),
        });
        world.insert_resource(Outputs::new(
            options.out_dir.clone(),
            crate::loader::input_files(scenario),
        ));
        let steps = world
            .get_resource::<SetupSteps>()
            .map(SetupSteps::ordered)
            .unwrap_or_default();
        let ctx = SetupCtx {
            scenario,
            resolved: &resolved,
            catalog: &catalog,
            options: &options,
        };
        for step in steps {
            step(&mut app, &ctx)?;
        }
        app.world_mut().insert_resource(catalog);
        app.finish();
        app.cleanup();
        let mut schedule = app
            .world_mut()
            .resource_mut::<Schedules>()
            .remove(SimStep)
            .expect("EnginePlugin creates the SimStep schedule");
        if let Err(e) = schedule.initialize(app.world_mut()) {
            return Err(SetupError::Schedule(e.to_string(schedule.graph(), app.world())).into());
        }
        let fast = crate::fast::take_fast_schedule(&mut app, &schedule);
        let interrupt = options.interrupt.or_else(|| {
            app.world()
                .get_resource::<crate::setup::AppInterrupt>()
                .map(|i| i.0.clone())
        });
        Ok(Simulation {
            world: std::mem::take(app.world_mut()),
            schedule,
            fast,
            interrupt,
            progress: options.progress,
            max_in_flight: scenario.limits.max_in_flight,
        })
    }

    /// Removes the staged output files and releases the output directory (after a failure).
    pub fn discard_outputs(&mut self) {
        if let Some(mut outputs) = self.world.remove_resource::<Outputs>() {
            drop(outputs.take());
        }
    }

    /// Runs one tick; false when no event is left within the horizon.
    pub fn tick(&mut self) -> bool {
        engine::tick_observed(&mut self.world, &mut self.schedule, self.fast.as_mut())
    }

    /// Whether ticks of step ends only run the instance pipeline alone
    /// ([`SimStepFast`](crate::SimStepFast)): true unless systems other than the built-in
    /// ones are in [`SimStep`].
    pub fn uses_fast_ticks(&self) -> bool {
        self.fast.is_some()
    }

    /// The ECS world (for inspection in tests and tools).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Mutable world access (for custom set-up before running).
    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// Runs to the end (no events left, or the horizon reached) and finishes.
    pub fn run(self) -> Result<Summary, SimError> {
        self.run_reporting().map(|(summary, _)| summary)
    }

    /// [`run`](Self::run), also saying which result files were written.
    pub fn run_reporting(mut self) -> Result<(Summary, OutputReport), SimError> {
        let interrupt = self.interrupt.clone();
        // Checked by simulated ticks (a fast tick may run several).
        let (mut overload_at, mut progress_at) = (256u64, PROGRESS_EVERY);
        self.world.resource_mut::<engine::FastLoop>().check_at = overload_at;
        while self.tick() && !metrics::nothing_left(&self.world) {
            if interrupt
                .as_ref()
                .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            {
                self.discard_outputs();
                return Err(RunError::Interrupted(self.world.resource::<SimClock>().now).into());
            }
            let ticks = self.world.resource::<SimClock>().ticks;
            if ticks >= overload_at {
                overload_at = ticks + 256;
                // A run of fast ticks stops there too.
                self.world.resource_mut::<engine::FastLoop>().check_at = overload_at;
                if let Some(msg) = metrics::overloaded(&self.world, self.max_in_flight) {
                    self.discard_outputs();
                    return Err(RunError::Fault(msg).into());
                }
            }
            if ticks >= progress_at {
                progress_at = ticks + PROGRESS_EVERY;
                if let Some(hook) = &self.progress {
                    (hook.0)(&self.progress_now());
                }
            }
        }
        if let Some(msg) = self.world.resource::<SimFault>().0.clone() {
            self.discard_outputs();
            return Err(RunError::Fault(msg).into());
        }
        self.finish_reporting()
    }

    /// How far the run has got.
    pub fn progress_now(&self) -> Progress {
        let clock = self.world.resource::<SimClock>();
        Progress {
            now: clock.now,
            ticks: clock.ticks,
            injected: self.world.resource::<Injected>().0,
            ended: self.world.resource::<Aggregates>().ended(),
        }
    }

    /// Records every request still in the system, computes the summary and commits the
    /// output files.
    pub fn finish(self) -> Result<Summary, SimError> {
        self.finish_reporting().map(|(summary, _)| summary)
    }

    /// [`finish`](Self::finish), also saying which result files were written.
    pub fn finish_reporting(mut self) -> Result<(Summary, OutputReport), SimError> {
        let summary = match self.finish_steps() {
            Ok(s) => s,
            Err(e) => {
                self.discard_outputs();
                return Err(e);
            }
        };
        let Some(out) = self
            .world
            .get_resource_mut::<Outputs>()
            .and_then(|mut o| o.take())
        else {
            return Ok((summary, OutputReport::default()));
        };
        let report = OutputReport {
            dir: Some(out.path().to_path_buf()),
            earlier: out.earlier_files(),
            cleaned: out.cleaned().to_vec(),
            completed: out.completed().to_vec(),
            written: out.commit().map_err(RunError::Outputs)?,
        };
        Ok((summary, report))
    }

    /// The final Record pass over the requests still in the system (rows, aggregates,
    /// despawn, as for every request that ended during the run), your systems' last word
    /// ([`SimFinish`](crate::SimFinish)), the summary (its core and each concern's part),
    /// then each plugin's finish steps (diagnoses, result files, `summary.json`).
    fn finish_steps(&mut self) -> Result<Summary, SimError> {
        let world = &mut self.world;
        let check = world.resource::<CheckInvariants>().0;
        let (left, counts) = crate::instance::report::unfinished(world, check);
        {
            use bevy_ecs::system::RunSystemOnce;
            world.insert_resource(Unfinished(left.clone()));
            world.resource_mut::<engine::RecordDue>().0 = left;
            world
                .run_system_once(metrics::record_finished)
                .map_err(|e| SimError::Internal {
                    what: "the final Record pass",
                    message: e.to_string(),
                })?;
            let mut due = world.resource_mut::<engine::WorkloadDue>();
            due.ended_turns.clear();
            due.ended_held.clear();
        }
        let _ = world.try_run_schedule(engine::SimFinish);
        let (name, seed) = {
            let s = world.resource::<Scenario>();
            (s.name.clone(), s.seed)
        };
        let mut summary = metrics::assemble(world, &name, seed, counts);
        let steps = world
            .get_resource::<FinishSteps>()
            .map(FinishSteps::ordered)
            .unwrap_or_default();
        for step in steps {
            step(world, &mut summary)?;
        }
        Ok(summary)
    }
}
