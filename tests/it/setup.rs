//! Setting a run up: each plugin builds its own part from the scenario in fixed stages; a
//! setup step of your own sees what the stages before it built, and its error stops the
//! build.

use servesim::SetupError;
use servesim::bevy_app::App;
use servesim::bevy_ecs::prelude::*;
use servesim::instance::InstanceIndex;
use servesim::instance::spawn::Groups;
use servesim::setup::{SetupAppExt, SetupCtx, SetupStage, SimError};
use servesim::{RunOptions, Simulation};

const SCENARIO: &str = r#"(cluster: (groups: [
        (name: "small", count: 2, kv_blocks: 500,
         latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0])),
        (name: "big", count: 1, tp: 2, kv_blocks: 900,
         scaling: (min: 1, max: 3),
         latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [800.0, 1.0, 10.0]))]),
      workload: (num_requests: 30, clients: [(rate_per_s: 20.0, input_tokens: Constant(64),
                                               output_tokens: Constant(8))]))"#;

/// What each user step saw: (stage, instances spawned so far).
#[derive(Resource, Default)]
struct Seen(Vec<(&'static str, usize)>);

/// Notes how many instances a step of `stage` finds spawned.
fn note(app: &mut App, stage: &'static str) {
    let n = app
        .world()
        .get_resource::<InstanceIndex>()
        .map_or(0, |i| i.0.len());
    app.world_mut().resource_mut::<Seen>().0.push((stage, n));
}

#[test]
fn setup_steps_run_by_stage_and_see_what_earlier_stages_built() {
    let mut app = servesim::default_app();
    app.init_resource::<Seen>();
    // Registered in the opposite order of their stages: the stage decides.
    app.add_setup(SetupStage::Cluster, |app: &mut App, _: &SetupCtx<'_>| {
        note(app, "cluster");
        Ok(())
    });
    app.add_setup(SetupStage::Policies, |app: &mut App, _: &SetupCtx<'_>| {
        note(app, "policies");
        Ok(())
    });
    let sc = crate::common::parse(SCENARIO);
    let sim = Simulation::from_app(app, &sc, RunOptions::default()).unwrap();
    let world = sim.world();
    // 2 + an autoscaled group spawns its max (3): 5 instances, spawned by the instance plugin.
    assert_eq!(
        world.resource::<Seen>().0,
        [("policies", 0), ("cluster", 5)]
    );
    let groups = &world.resource::<Groups>().0;
    assert_eq!(groups.len(), 2);
    assert_eq!(
        (groups[0].name.as_str(), groups[0].instances()),
        ("small", 0..2)
    );
    assert_eq!(
        (groups[1].name.as_str(), groups[1].instances()),
        ("big", 2..5)
    );
    assert_eq!(groups[1].resolved.kv_blocks, 900);
    // Each instance carries its group's TP on its entity; the autoscale plugin's life-cycle
    // state is on every instance (the two spare ones of "big" are off).
    let index = &world.resource::<InstanceIndex>().0;
    let tp: Vec<u32> = index
        .iter()
        .map(|&e| world.get::<servesim::instance::Limits>(e).unwrap().tp)
        .collect();
    assert_eq!(tp, [1, 1, 2, 2, 2]);
    let off = index
        .iter()
        .filter(|&&e| {
            world.get::<servesim::autoscale::Power>(e).unwrap().phase
                == servesim::autoscale::Phase::Off
        })
        .count();
    assert_eq!(off, 2);
    assert_eq!(sim.run().unwrap().requests.completed, 30);
}

#[test]
fn a_setup_step_that_fails_stops_the_build_with_its_error() {
    let mut app = servesim::default_app();
    app.add_setup(SetupStage::Workload, |_: &mut App, ctx: &SetupCtx<'_>| {
        Err(SetupError::Workload(format!(
            "refusing {} groups",
            ctx.scenario.cluster.groups.len()
        ))
        .into())
    });
    let sc = crate::common::parse(SCENARIO);
    match Simulation::from_app(app, &sc, RunOptions::default()) {
        Err(SimError::Setup(SetupError::Workload(m))) => assert_eq!(m, "refusing 2 groups"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("the failing step was not run"),
    }
}

#[test]
fn each_concern_adds_its_part_of_the_summary_and_a_plugin_left_out_adds_none() {
    use servesim::bevy_app::PluginGroup;
    use servesim::metrics::{Summary, SummaryAppExt};
    // Without the autoscaling plugin: no groups, no cost, and the run is the same.
    let sc = crate::common::parse(&SCENARIO.replace("scaling: (min: 1, max: 3),", ""));
    let full = Simulation::new(&sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    let mut app = App::empty();
    app.add_plugins(
        servesim::SimPlugins
            .build()
            .disable::<servesim::autoscale::AutoscalePlugin>(),
    );
    // A part of your own runs after the built-in ones and sees what they filled.
    app.add_summary_part(|_: &mut World, s: &mut Summary| {
        let n = s.instances.len();
        s.warnings.push(format!("{n} instances"));
    });
    let without = Simulation::from_app(app, &sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(full.groups.len(), 2);
    assert!(full.cost.gpu_hours > 0.0);
    assert!(without.groups.is_empty());
    assert_eq!(without.cost.gpu_hours, 0.0);
    assert_eq!(without.warnings, ["3 instances"]);
    assert_eq!(without.requests, full.requests);
    assert_eq!(without.e2e_ms, full.e2e_ms);
    assert_eq!(without.instances, full.instances);
}
