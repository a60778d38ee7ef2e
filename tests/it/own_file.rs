//! docs/extending.md "Write a result file of your own": a plugin that owns a file as the
//! built-in concerns own theirs — created in the run's `Outputs` when the run is set up,
//! written by a system of its own, flushed by a finish step, committed with every other result
//! (and never when the run fails).

use std::io::{BufWriter, Write};

use servesim::bevy_app::{App, Plugin};
use servesim::bevy_ecs::prelude::*;
use servesim::engine::InstanceDue;
use servesim::instance::InstanceSystems;
use servesim::metrics::{FinishStage, Summary, SummaryAppExt};
use servesim::output::Outputs;
use servesim::setup::{SetupAppExt, SetupCtx, SetupStage};
use servesim::{RunError, SetupError, SimClock, SimError, SimStep, SimSystems};

/// `steps.csv`: one row per step an instance starts (its time and instance).
pub struct StepLog;

#[derive(Resource)]
struct StepFile {
    file: BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    /// The first failed write, reported when the run ends.
    error: Option<std::io::Error>,
}

impl Plugin for StepLog {
    fn build(&self, app: &mut App) {
        app.add_setup(SetupStage::Outputs, open_step_log)
            .add_finish_step(FinishStage::Concerns, finish_step_log);
    }
}

/// Creates the file (none when the run writes no files) and adds the system that writes it.
fn open_step_log(app: &mut App, _: &SetupCtx<'_>) -> Result<(), SimError> {
    let mut outputs = app.world_mut().resource_mut::<Outputs>();
    let Some(mut file) = outputs.create("steps.csv").map_err(SetupError::Outputs)? else {
        return Ok(());
    };
    let path = outputs.staged_path("steps.csv");
    writeln!(file, "time_us,instance").map_err(|e| SetupError::Output {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let log = StepFile {
        file,
        path,
        error: None,
    };
    app.insert_resource(log).add_systems(
        SimStep,
        log_steps
            .in_set(SimSystems::Execute)
            .before(InstanceSystems::Execute),
    );
    Ok(())
}

/// The instances that start a step now (read before `execute_steps` empties the list).
fn log_steps(due: Res<InstanceDue>, clock: Res<SimClock>, mut log: ResMut<StepFile>) {
    for instance in &due.execute {
        if let Err(e) = writeln!(log.file, "{},{instance}", clock.now.as_us()) {
            log.error.get_or_insert(e);
        }
    }
}

/// Flushes the file; a failed write fails the run, and then no result file is committed.
fn finish_step_log(world: &mut World, _: &mut Summary) -> Result<(), SimError> {
    let Some(mut log) = world.remove_resource::<StepFile>() else {
        return Ok(());
    };
    let flushed = log.file.flush();
    match log.error.map_or(flushed, Err) {
        Ok(()) => Ok(()),
        Err(e) => Err(RunError::Output {
            path: log.path,
            message: e.to_string(),
        }
        .into()),
    }
}

fn scenario() -> servesim::scenario::Scenario {
    crate::common::parse(
        r#"(cluster: (groups: [(count: 2, kv_blocks: 2000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [2000.0, 10.0, 100.0]))]),
          workload: (num_requests: 100, clients: [(rate_per_s: 20.0, input_tokens: Uniform(min: 16, max: 400),
            output_tokens: Uniform(min: 1, max: 60))]))"#,
    )
}

fn app() -> App {
    let mut app = servesim::default_app();
    app.add_plugins(StepLog);
    app
}

#[test]
fn a_plugin_writes_its_own_file_with_the_runs_results() {
    let dir = tempfile::tempdir().unwrap();
    let options = servesim::RunOptions {
        out_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let s = servesim::Simulation::from_app(app(), &scenario(), options)
        .unwrap()
        .run()
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("steps.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("time_us,instance"));
    let mut per_instance = [0u64; 2];
    let mut last = 0;
    for line in lines {
        let (t, i) = line.split_once(',').unwrap();
        let t: u64 = t.parse().unwrap();
        assert!(t >= last, "rows in time order");
        last = t;
        per_instance[i.parse::<usize>().unwrap()] += 1;
    }
    // Every step the summary counts, each logged once, at its instance.
    for inst in &s.instances {
        assert!(inst.steps > 0);
        assert_eq!(per_instance[inst.index as usize], inst.steps);
    }
    // Beside the built-in results, committed together (nothing left staged).
    assert!(dir.path().join("summary.json").exists());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with('.')),
        "staging left behind: {names:?}"
    );
}

#[test]
fn without_an_output_directory_the_plugin_writes_nothing_and_costs_no_tick() {
    let sim = servesim::Simulation::from_app(app(), &scenario(), Default::default()).unwrap();
    assert!(
        sim.uses_fast_ticks(),
        "no file, no system: the fast ticks stay on"
    );
    let s = sim.run().unwrap();
    assert_eq!(s.requests.completed, 100);
}

#[test]
fn a_failed_run_commits_neither_its_file_nor_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let options = servesim::RunOptions {
        out_dir: Some(dir.path().to_path_buf()),
        interrupt: Some(stop),
        ..Default::default()
    };
    let err = servesim::Simulation::from_app(app(), &scenario(), options)
        .unwrap()
        .run()
        .unwrap_err();
    assert!(
        matches!(err, SimError::Run(RunError::Interrupted(_))),
        "{err}"
    );
    assert!(!dir.path().join("steps.csv").exists());
    assert!(!dir.path().join("summary.json").exists());
}
