//! Building a simulation from a scenario, running it, and collecting its results.

use std::path::PathBuf;

use bevy_app::App;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::Schedules;

use crate::autoscale::{Autoscaler, evaluate_scaling};
use crate::catalog::Catalog;
use crate::cluster::{DecisionLog, admit_requests, route_requests};
use crate::engine::{self, Fault, Injected, SimClock, SimFault, SimStep, SimStepFast, SimSystems};
use crate::instance::spawn::Groups;
use crate::instance::{self, InstanceIndex, Scheduler};
use crate::invariants::CheckInvariants;
use crate::kv::KvCache;
use crate::metrics::{self, Aggregates, RequestLog, Summary};
use crate::output::{OutputDir, OutputError};
use crate::scenario::Scenario;
pub use crate::setup::SimError;
use crate::setup::{SetupCtx, SetupSteps};
use crate::time::{SimDuration, SimTime};
use crate::workload::spawn_arrivals;

/// Refuses to run when a result file would replace a file the scenario reads (a trace in
/// the output directory, say): results never overwrite an input.
fn refuse_overwriting_inputs(
    scenario: &Scenario,
    dir: &std::path::Path,
    written: &[&str],
) -> Result<(), SimError> {
    let inputs: Vec<(String, PathBuf)> = scenario
        .input_files()
        .into_iter()
        .filter_map(|(field, p)| Some((field, std::fs::canonicalize(p).ok()?)))
        .collect();
    for name in written {
        let Ok(target) = std::fs::canonicalize(dir.join(name)) else {
            continue; // not there yet: replaces nothing
        };
        if let Some((field, _)) = inputs.iter().find(|(_, p)| *p == target) {
            return Err(SimError::Outputs(OutputError::Unusable(format!(
                "{} is an input of this run ({field}) and would be replaced by its {name}; \
                 give --out another directory (or move the input)",
                dir.join(name).display()
            ))));
        }
    }
    Ok(())
}

/// Diagnoses of a run's outcome that a user should not miss.
fn diagnose(s: &Summary, (blocks, block_size): (u32, u32)) -> Vec<String> {
    let r = &s.requests;
    let mut w = Vec::new();
    if r.dropped > 0 {
        w.push(format!(
            "{} of {} requests were dropped as unservable: prompt + output exceeds max_model_len or what their instance's KV cache can hold (the largest holds {} blocks × {} tokens = {} tokens)",
            r.dropped,
            r.injected,
            blocks,
            block_size,
            u64::from(blocks) * u64::from(block_size)
        ));
    }
    if r.injected > 0 && r.rejected == r.injected {
        w.push("every request was rejected by admission".into());
    }
    let left = r.queued + r.running + r.in_transit;
    if left > 0 {
        w.push(format!(
            "{left} requests were still in the system when the run stopped (horizon)"
        ));
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

/// Adds the KV event systems to both tick schedules: `instance::publish_kv_events`, then the
/// routers' index (`policy::index_kv_events`) and, with `count`, the per-instance tally
/// (`metrics::count_kv_events`). A run without KV events schedules none of them.
fn schedule_kv_events(app: &mut App, count: bool) {
    use bevy_ecs::schedule::ScheduleLabel;
    use instance::publish_kv_events;
    for label in [SimStep.intern(), crate::engine::SimStepFast.intern()] {
        app.add_systems(
            label,
            (
                publish_kv_events.in_set(SimSystems::Observe),
                crate::policy::index_kv_events
                    .in_set(SimSystems::Observe)
                    .after(publish_kv_events),
            ),
        );
        if count {
            app.add_systems(
                label,
                metrics::count_kv_events
                    .in_set(SimSystems::Observe)
                    .after(publish_kv_events),
            );
        }
    }
}

/// The built-in SimStep systems that SimStepFast may stand in for without running them
/// itself: those of stages that have no work on its ticks (Enqueue's timeouts, Autoscale),
/// the four instance systems it runs as one, and the control plane's (SimStepFast runs them
/// too, on ticks of arrivals).
fn covered_systems() -> Vec<std::any::TypeId> {
    fn id<M>(s: impl IntoSystem<(), (), M>) -> std::any::TypeId {
        IntoSystem::into_system(s).system_type()
    }
    vec![
        id(spawn_arrivals),
        id(admit_requests),
        id(route_requests),
        id(instance::enqueue_requests),
        id(instance::expire_requests),
        id(evaluate_scaling),
        id(instance::retire_steps),
        id(instance::batch::form_batches),
        id(instance::step::execute_steps),
        id(instance::step::complete_steps),
    ]
}

/// An [`App`] with every built-in plugin: read its [`Catalog`] to validate scenarios, add
/// your own plugins and policies, then hand it to [`Simulation::from_app`]. The same as
/// `ServesimApp::new().build()`; to make every command use your additions, give them to a
/// [`ServesimApp`](crate::ServesimApp).
pub fn default_app() -> App {
    crate::ServesimApp::new().build()
}

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Check every invariant after every tick (panics on a violation: a simulator bug).
    pub check_invariants: bool,
    /// Output directory; `None` writes no files.
    pub out_dir: Option<PathBuf>,
    /// Write `decisions.csv` (also on with the scenario's `outputs.decisions_csv`).
    pub trace_decisions: bool,
    /// Set from outside (e.g. a Ctrl-C handler) to stop the run; nothing is committed.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Requests to replay from memory, in addition to the scenario's workload (a measured
    /// run for `check-real` and `calibrate`).
    pub replay: Option<std::sync::Arc<[crate::workload::TraceRow]>>,
    /// Collects one [`RequestSample`](crate::metrics::RequestSample) per request.
    pub collect: Option<std::sync::Arc<std::sync::Mutex<Vec<crate::metrics::RequestSample>>>>,
    /// Writes the bytes `requests.csv` would hold into this buffer (no file needed).
    pub requests_csv_memory: Option<crate::metrics::SharedBuffer>,
    /// Told how far the run has got every [`PROGRESS_EVERY`] ticks (a progress bar).
    pub progress: Option<ProgressHook>,
}

/// Ticks between two calls of a [`ProgressHook`].
pub const PROGRESS_EVERY: u64 = 4096;

/// How far a run has got.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Simulated time.
    pub now: SimTime,
    pub ticks: u64,
    /// Requests that arrived so far, and those that left (completed, rejected, dropped,
    /// timed out).
    pub injected: u64,
    pub ended: u64,
}

/// Receives [`Progress`] during a run; it must not take long (it runs on the simulation
/// thread).
#[derive(Clone)]
pub struct ProgressHook(pub std::sync::Arc<dyn Fn(&Progress) + Send + Sync>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
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
}

/// A ready-to-run simulation: the ECS world and the tick schedule.
pub struct Simulation {
    world: World,
    schedule: Schedule,
    scenario_name: String,
    seed: u64,
    /// The output directory, locked, with this run's staged files.
    out: Option<OutputDir>,
    write_summary: bool,
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    progress: Option<ProgressHook>,
    fitness: std::collections::BTreeMap<String, f64>,
    /// (blocks, block size) of the largest instance KV cache, for diagnoses.
    largest_cache: (u32, u32),
    /// `limits.max_in_flight` and `limits.max_waiting_per_instance`.
    max_in_flight: u64,
    max_waiting_per_instance: Option<u32>,
    /// Samples `timeseries.csv` before each tick.
    timeseries: Option<crate::observe::timeseries::TimeSeries>,
    /// The instance pipeline alone, for ticks of step ends only (`None` when SimStep holds
    /// systems other than the built-in ones).
    fast: Option<Schedule>,
}

impl Simulation {
    /// Builds a simulation of `scenario` with the built-in plugins.
    pub fn new(scenario: &Scenario, options: RunOptions) -> Result<Self, SimError> {
        Self::from_app(default_app(), scenario, options)
    }

    /// Builds a simulation of `scenario` from an app (built-ins plus your plugins).
    pub fn from_app(
        mut app: App,
        scenario: &Scenario,
        options: RunOptions,
    ) -> Result<Self, SimError> {
        // The scenario's groups, resolved once (validation already read their files).
        let world = app.world_mut();
        let catalog = world.remove_resource::<Catalog>().unwrap_or_default();
        let resolved = (0..scenario.cluster.groups.len())
            .map(|g| crate::loader::resolve_group(scenario, g, &catalog))
            .collect::<Result<Vec<_>, _>>()
            .map_err(SimError::Group)?;
        world.insert_resource(scenario.labels());
        world.insert_resource(SimClock {
            now: SimTime::ZERO,
            ticks: 0,
            horizon: scenario.horizon_s.map_or(SimTime::MAX, |h| {
                SimTime::ZERO + SimDuration::from_secs_f64(h)
            }),
        });
        // Each plugin builds its part, stage by stage.
        let steps = world
            .get_resource::<SetupSteps>()
            .map(SetupSteps::ordered)
            .unwrap_or_default();
        let ctx = SetupCtx {
            scenario,
            resolved: &resolved,
            catalog: &catalog,
            check_invariants: options.check_invariants,
            replay: options.replay.clone(),
        };
        for step in steps {
            step(&mut app, &ctx)?;
        }
        let world = app.world_mut();
        world.insert_resource(catalog);
        // Each instance's group name.
        let group_names: Vec<String> = world
            .get_resource::<Groups>()
            .map(|g| {
                g.0.iter()
                    .flat_map(|g| g.instances().map(|_| g.name.clone()))
                    .collect()
            })
            .unwrap_or_default();
        // The largest KV cache (blocks × block size), for the overload diagnosis.
        let largest_cache = scenario
            .cluster
            .groups
            .iter()
            .zip(&resolved)
            .filter(|(g, _)| g.scaling.as_ref().map_or(g.count, |s| s.max) > 0)
            .map(|(g, r)| (r.kv_blocks, g.block_size))
            .fold((0u32, 16u32), |best, c| {
                if u64::from(c.0) * u64::from(c.1) > u64::from(best.0) * u64::from(best.1) {
                    c
                } else {
                    best
                }
            });
        // KV events: on when a router reads caches, the scenario counts them, or a plugin
        // turned them on (the setups said so in `KvEvents`).
        let kv_events = world
            .get_resource::<crate::kv::KvEvents>()
            .is_some_and(|k| k.0);
        if kv_events {
            let mut caches = world.query::<&mut KvCache>();
            for mut kv in caches.iter_mut(world) {
                kv.record_events(true);
            }
        }
        let disaggregated = world
            .get_resource::<crate::disagg::Disagg>()
            .is_some_and(|d| d.enabled);
        let autoscaled = world.get_resource::<Autoscaler>().is_some_and(|a| a.active);

        let outputs = &scenario.outputs;
        let decisions = options.trace_decisions || outputs.decisions_csv;
        let scale_events = autoscaled && outputs.scale_events_csv;
        let mut out = match &options.out_dir {
            Some(dir)
                if outputs.requests_csv
                    || outputs.summary_json
                    || decisions
                    || scale_events
                    || outputs.timeseries_csv
                    || outputs.timeline_json =>
            {
                let names = [
                    ("requests.csv", outputs.requests_csv),
                    ("decisions.csv", decisions),
                    ("summary.json", outputs.summary_json),
                    ("scale_events.csv", scale_events),
                    ("timeseries.csv", outputs.timeseries_csv),
                    ("timeline.json", outputs.timeline_json),
                ];
                let written: Vec<&str> = names.iter().filter(|n| n.1).map(|n| n.0).collect();
                refuse_overwriting_inputs(scenario, dir, &written)?;
                Some(OutputDir::open(dir)?)
            }
            _ => None,
        };
        if let Some(out) = &mut out
            && outputs.requests_csv
        {
            use std::io::Write as _;
            let mut writer = out.create("requests.csv")?;
            writer
                .write_all(&metrics::csv_header())
                .map_err(|e| SimError::Output {
                    path: out.staged_path("requests.csv"),
                    message: e.to_string(),
                })?;
            world.insert_resource(RequestLog {
                writer: Some(writer),
                error: None,
                scratch: Vec::new(),
                collect: None,
                memory: None,
            });
        }
        if let Some(out) = &mut out
            && decisions
        {
            let mut writer = csv::Writer::from_writer(out.create("decisions.csv")?);
            writer
                .write_record(crate::cluster::DECISION_COLUMNS)
                .map_err(|e| SimError::Output {
                    path: out.staged_path("decisions.csv"),
                    message: e.to_string(),
                })?;
            world.insert_resource(DecisionLog {
                writer: Some(writer),
                top_k: outputs.decision_top_k as usize,
                error: None,
            });
        }

        if let Some(out) = &mut out
            && scale_events
        {
            let mut writer = csv::Writer::from_writer(out.create("scale_events.csv")?);
            writer
                .write_record(crate::autoscale::SCALE_EVENT_COLUMNS)
                .map_err(|e| SimError::Output {
                    path: out.staged_path("scale_events.csv"),
                    message: e.to_string(),
                })?;
            world.resource_mut::<Autoscaler>().events = Some(writer);
        }

        let timeseries = match &mut out {
            Some(out) if outputs.timeseries_csv => {
                let file =
                    out.create("timeseries.csv")?
                        .into_inner()
                        .map_err(|e| SimError::Output {
                            path: out.staged_path("timeseries.csv"),
                            message: e.into_error().to_string(),
                        })?;
                Some(
                    crate::observe::timeseries::TimeSeries::new(
                        file,
                        crate::observe::timeseries::interval(scenario),
                        group_names.clone(),
                    )
                    .map_err(|e| SimError::Output {
                        path: out.staged_path("timeseries.csv"),
                        message: e.to_string(),
                    })?,
                )
            }
            _ => None,
        };
        if let Some(out) = &mut out
            && outputs.timeline_json
        {
            let created = out.create("timeline.json")?;
            let io = |e: String| SimError::Output {
                path: out.staged_path("timeline.json"),
                message: e,
            };
            let file = created
                .into_inner()
                .map_err(|e| io(e.into_error().to_string()))?;
            let timeline = crate::observe::timeline::Timeline::new(
                file,
                outputs.timeline_window_s,
                outputs.timeline_request_sample,
                &group_names,
            )
            .map_err(|e| io(e.to_string()))?;
            world.insert_resource(timeline);
            app.add_systems(
                SimStep,
                (
                    crate::observe::timeline::draw_steps
                        .in_set(SimSystems::Complete)
                        .before(instance::step::complete_steps),
                    crate::observe::timeline::draw_requests
                        .in_set(SimSystems::Record)
                        .before(metrics::record_finished),
                ),
            );
        }
        let world = app.world_mut();
        if let Some(c) = &options.collect {
            world.resource_mut::<RequestLog>().collect = Some(c.clone());
        }
        if let Some(buffer) = &options.requests_csv_memory {
            use std::io::Write as _;
            let mut w = std::io::BufWriter::new(buffer.clone());
            w.write_all(&metrics::csv_header())
                .map_err(|e| SimError::Internal {
                    what: "requests in memory",
                    message: e.to_string(),
                })?;
            world.resource_mut::<RequestLog>().memory = Some(w);
        }
        // The KV-event systems would cost a little every tick: only runs that use them pay.
        if kv_events {
            schedule_kv_events(&mut app, scenario.outputs.kv_events);
        }
        app.finish();
        app.cleanup();
        let mut schedule = app
            .world_mut()
            .resource_mut::<Schedules>()
            .remove(SimStep)
            .expect("EnginePlugin creates the SimStep schedule");
        if let Err(e) = schedule.initialize(app.world_mut()) {
            return Err(SimError::Schedule(
                e.to_string(schedule.graph(), app.world()),
            ));
        }
        // The fast schedule serves only apps whose SimStep holds built-in systems alone.
        let fast = app
            .world_mut()
            .resource_mut::<Schedules>()
            .remove(SimStepFast)
            .and_then(|mut fast| {
                fast.initialize(app.world_mut()).ok()?;
                // Without the fast-tick system (its plugin left out) it would run nothing.
                let has_pipeline = fast.systems().is_ok_and(|mut systems| {
                    let id = IntoSystem::into_system(crate::fast::fast_ticks).system_type();
                    systems.any(|(_, s)| s.system_type() == id)
                });
                (has_pipeline && engine::fast_ticks_allowed(&schedule, &fast, &covered_systems()))
                    .then_some(fast)
            });
        // Fast ticks may run on by themselves unless every tick must be seen.
        let check = app.world().resource::<CheckInvariants>().0;
        let on = fast.is_some() && !check && !kv_events && !disaggregated;
        // Ticks of arrivals may run SimStepFast unless a routed request may have to wait for
        // a cold start (the Autoscale stage would have work on such a tick).
        let parking = app
            .world()
            .get_resource::<crate::cluster::Parked>()
            .is_some_and(|p| p.enabled);
        let mut fast_loop = app.world_mut().resource_mut::<engine::FastLoop>();
        fast_loop.on = on;
        fast_loop.arrivals = on && !parking;
        let world = std::mem::take(app.world_mut());
        Ok(Simulation {
            world,
            schedule,
            scenario_name: scenario.name.clone(),
            seed: scenario.seed,
            out,
            interrupt: options.interrupt.clone(),
            progress: options.progress.clone(),
            largest_cache,
            write_summary: scenario.outputs.summary_json,
            fitness: scenario.outputs.fitness.clone(),
            max_in_flight: scenario.limits.max_in_flight,
            max_waiting_per_instance: scenario.limits.max_waiting_per_instance,
            timeseries,
            fast,
        })
    }

    /// Removes the staged output files and releases the output directory (after a failure).
    pub fn discard_outputs(&mut self) {
        // Writers hold the staged files open; dropping the directory removes them.
        self.world.resource_mut::<RequestLog>().writer = None;
        self.world.resource_mut::<DecisionLog>().writer = None;
        self.world.resource_mut::<Autoscaler>().events = None;
        self.timeseries = None;
        self.world
            .remove_resource::<crate::observe::timeline::Timeline>();
        self.out = None;
    }

    /// Runs one tick; false when no event is left within the horizon.
    pub fn tick(&mut self) -> bool {
        let fast = self.fast.as_mut();
        self.world.resource_mut::<engine::FastLoop>().until = self
            .timeseries
            .as_ref()
            .map_or(SimTime::MAX, |ts| ts.next_sample());
        let Some(ts) = &mut self.timeseries else {
            return engine::tick_observed(&mut self.world, &mut self.schedule, fast, |_, _| {});
        };
        let more = engine::tick_observed(&mut self.world, &mut self.schedule, fast, |world, t| {
            ts.before_tick(world, t)
        });
        if let Some(e) = &ts.error {
            // The first failed write stops the run, as for every result file.
            let now = self.world.resource::<SimClock>().now;
            self.world
                .resource_mut::<SimFault>()
                .0
                .get_or_insert_with(|| Fault::Write {
                    file: "timeseries.csv",
                    at: now,
                    error: e.clone(),
                });
            return false;
        }
        more
    }

    /// Whether ticks of step ends only run the instance pipeline alone ([`SimStepFast`]):
    /// true unless systems other than the built-in ones are in [`SimStep`].
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
        while self.tick() {
            if interrupt
                .as_ref()
                .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            {
                self.discard_outputs();
                return Err(SimError::Interrupted(self.world.resource::<SimClock>().now));
            }
            let ticks = self.world.resource::<SimClock>().ticks;
            if ticks >= overload_at {
                overload_at = ticks + 256;
                // A run of fast ticks stops there too.
                self.world.resource_mut::<engine::FastLoop>().check_at = overload_at;
                if let Some(msg) = self.overloaded() {
                    self.discard_outputs();
                    return Err(SimError::Fault(msg));
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
            return Err(SimError::Fault(msg));
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

    /// A diagnosis when more requests are in the system than `limits.max_in_flight`.
    fn overloaded(&self) -> Option<Fault> {
        let injected = self.world.resource::<Injected>().0;
        let agg = self.world.resource::<Aggregates>();
        let in_flight = injected.saturating_sub(agg.ended());
        if in_flight <= self.max_in_flight {
            return None;
        }
        Some(Fault::Overloaded {
            in_flight,
            limit: self.max_in_flight,
            at: self.world.resource::<SimClock>().now,
            injected,
            completed: agg.completed,
        })
    }

    /// Records every request still in the system, computes the summary and commits the
    /// output files.
    pub fn finish(self) -> Result<Summary, SimError> {
        self.finish_reporting().map(|(summary, _)| summary)
    }

    /// [`finish`](Self::finish), also saying which result files were written.
    pub fn finish_reporting(mut self) -> Result<(Summary, OutputReport), SimError> {
        let summary = match self.finish_inner() {
            Ok(s) => s,
            Err(e) => {
                self.discard_outputs();
                return Err(e);
            }
        };
        let Some(out) = self.out.take() else {
            return Ok((summary, OutputReport::default()));
        };
        let report = OutputReport {
            dir: Some(out.path().to_path_buf()),
            earlier: out.earlier_files(),
            cleaned: out.cleaned().to_vec(),
            written: out.commit()?,
        };
        Ok((summary, report))
    }

    fn finish_inner(&mut self) -> Result<Summary, SimError> {
        let world = &mut self.world;
        let check = world.resource::<CheckInvariants>().0;
        let now = world.resource::<SimClock>().now;

        // A final pass of the Record system over the requests still in the system, as for
        // every request that ended during the run (rows, aggregates, despawn).
        let (left, counts) = crate::instance::report::unfinished(world, check);
        {
            use bevy_ecs::system::RunSystemOnce;
            world.resource_mut::<engine::RecordDue>().0 = left.clone();
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

        // Your systems' last word (SimFinish), then the summary: its core and each concern's
        // part.
        let _ = world.try_run_schedule(engine::SimFinish);
        let mut summary = metrics::assemble(world, &self.scenario_name, self.seed, counts);
        if let Some(mut scaler) = world.get_resource_mut::<Autoscaler>() {
            if let Some(err) = scaler.write_error.take() {
                return Err(SimError::Output {
                    path: PathBuf::from("scale_events.csv"),
                    message: err,
                });
            }
            if let Some(out) = &self.out
                && let Some(writer) = scaler.events.take()
            {
                let path = out.staged_path("scale_events.csv");
                let io = |e: String| SimError::Output {
                    path: path.clone(),
                    message: e,
                };
                writer
                    .into_inner()
                    .map_err(|e| io(e.to_string()))?
                    .into_inner()
                    .map_err(|e| io(e.to_string()))?
                    .sync_all()
                    .map_err(|e| io(e.to_string()))?;
            }
        }
        let diagnosed = diagnose(&summary, self.largest_cache);
        summary.warnings.extend(diagnosed);
        if self.max_waiting_per_instance.is_none() {
            let peak = world
                .resource::<InstanceIndex>()
                .0
                .iter()
                .enumerate()
                .map(|(i, &e)| {
                    let c = world.get::<Scheduler>(e).expect("instance").counters;
                    (c.peak_waiting, i)
                })
                .max();
            if let Some((n, i)) = peak.filter(|p| p.0 > 10_000) {
                summary.warnings.push(format!(
                    "instance {i}'s wait queue reached {n} requests: the load exceeds what it serves; \
                     vLLM has no queue cap either, but limits.max_waiting_per_instance sheds the excess \
                     (rejected as queue_full) and keeps memory bounded"
                ));
            }
        }
        if !self.fitness.is_empty() {
            summary.fitness = Some(
                self.fitness
                    .iter()
                    .map(|(k, w)| w * metrics::fitness_term(k, &summary))
                    .sum(),
            );
        }
        if let Some(mut m) = world.resource_mut::<RequestLog>().memory.take() {
            std::io::Write::flush(&mut m).map_err(|e| SimError::Internal {
                what: "requests in memory",
                message: e.to_string(),
            })?;
        }
        // Finish every staged file; the caller then moves them all into place together.
        let Some(out) = &mut self.out else {
            return Ok(summary);
        };
        let io = |name: &str, e: String| SimError::Output {
            path: out.staged_path(name),
            message: e,
        };
        if let Some(mut timeline) = world.remove_resource::<crate::observe::timeline::Timeline>() {
            crate::observe::timeline::draw_unfinished(&mut timeline, &left, now);
            let mb = timeline.bytes as f64 / 1e6;
            if mb > 300.0 {
                summary.warnings.push(format!(
                    "timeline.json is {mb:.0} MB: chrome://tracing struggles past ~300 MB and Perfetto UI past ~1 GB; \
                     narrow it with --trace-window START..END or --trace-sample FRACTION"
                ));
            }
            timeline
                .finish()
                .and_then(|f| f.sync_all().map_err(|e| e.to_string()))
                .map_err(|e| io("timeline.json", e))?;
        }
        if let Some(ts) = self.timeseries.take() {
            ts.finish(world, now)
                .and_then(|f| f.sync_all().map_err(|e| e.to_string()))
                .map_err(|e| io("timeseries.csv", e))?;
        }
        let mut dlog = world.resource_mut::<DecisionLog>();
        if let Some(err) = dlog.error.take() {
            return Err(io("decisions.csv", err));
        }
        if let Some(writer) = dlog.writer.take() {
            let buf = writer
                .into_inner()
                .map_err(|e| io("decisions.csv", e.to_string()))?;
            buf.into_inner()
                .map_err(|e| io("decisions.csv", e.to_string()))?
                .sync_all()
                .map_err(|e| io("decisions.csv", e.to_string()))?;
        }
        let mut log = world.resource_mut::<RequestLog>();
        if let Some(err) = log.error.take() {
            return Err(io("requests.csv", err));
        }
        if let Some(writer) = log.writer.take() {
            writer
                .into_inner()
                .map_err(|e| io("requests.csv", e.to_string()))?
                .sync_all()
                .map_err(|e| io("requests.csv", e.to_string()))?;
        }
        if self.write_summary {
            let json = summary.to_json_file();
            let mut w = out.create("summary.json")?;
            let io = |e: std::io::Error| SimError::Output {
                path: out.staged_path("summary.json"),
                message: e.to_string(),
            };
            use std::io::Write as _;
            w.write_all(json.as_bytes()).map_err(io)?;
            w.into_inner()
                .map_err(|e| io(e.into_error()))?
                .sync_all()
                .map_err(io)?;
        }
        Ok(summary)
    }
}
