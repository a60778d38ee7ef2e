//! The fast tick (issue 10): ticks whose only events are step ends and enqueues run the
//! instance pipeline alone, and ticks of new arrivals only the Arrive, Admit and Route stages
//! before it. It must change nothing but the cost, and step aside whenever SimStep holds a
//! system it does not know (a user's), so that system always runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use servesim::bevy_ecs::prelude::*;
use servesim::{RunOptions, SimStep, SimSystems, Simulation};

use super::common::parse;

const SCENARIO: &str = r#"(
    cluster: (groups: [(count: 3, kv_blocks: 2000, max_num_seqs: 16,
        latency: Blackbox(alpha: [1000.0, 0.0, 0.0], beta: [2000.0, 10.0, 100.0]))]),
    policies: (routing: "round_robin"),
    workload: (num_requests: 600, clients: [
        (rate_per_s: 30.0, input_tokens: Uniform(min: 16, max: 600), output_tokens: Uniform(min: 1, max: 200),
         shared_prefix_tokens: 64, prefix_groups: 4),
        (name: "chat", rate_per_s: 5.0, input_tokens: Constant(100), output_tokens: Constant(20),
         session: (turns: Constant(3), think_time_s: 0.5)),
    ]),
)"#;

/// Counts the ticks on which a system in the Complete stage ran.
#[derive(Resource, Clone, Default)]
struct Seen(Arc<AtomicU64>);

fn count_completes(seen: Res<Seen>) {
    seen.0.fetch_add(1, Ordering::Relaxed);
}

/// Runs the scenario; returns the summary, whether fast ticks were used, the ticks the user
/// system saw, and how many times the driver was called (a fast tick may run several ticks).
fn run(
    with_user_system: bool,
    check: bool,
    dir: &std::path::Path,
) -> (servesim::metrics::Summary, bool, u64, u64) {
    run_scenario(SCENARIO, with_user_system, check, dir)
}

/// [`run`] on a scenario of one's own.
fn run_scenario(
    scenario: &str,
    with_user_system: bool,
    check: bool,
    dir: &std::path::Path,
) -> (servesim::metrics::Summary, bool, u64, u64) {
    let sc = parse(scenario);
    let mut app = servesim::default_app();
    let seen = Seen::default();
    if with_user_system {
        app.insert_resource(seen.clone());
        app.add_systems(SimStep, count_completes.in_set(SimSystems::Complete));
    }
    let mut sim = Simulation::from_app(
        app,
        &sc,
        RunOptions {
            check_invariants: check,
            out_dir: Some(dir.to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap();
    let fast = sim.uses_fast_ticks();
    let mut calls = 0;
    while sim.tick() {
        calls += 1;
    }
    let summary = sim.finish().unwrap();
    (summary, fast, seen.0.load(Ordering::Relaxed), calls)
}

#[test]
fn fast_ticks_change_nothing_and_step_aside_for_a_user_system() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (built_in, fast, _, checked_calls) = run(false, true, dirs[0].path());
    assert!(fast, "the built-in app uses fast ticks");
    assert_eq!(
        checked_calls, built_in.ticks,
        "with invariant checks every tick is its own driver call"
    );
    let (with_user, fast, completes, _) = run(true, false, dirs[1].path());
    assert!(!fast, "a user system in SimStep turns fast ticks off");
    // The user's system ran on every tick whose Complete stage had work: at least once per
    // step-end tick, which is most ticks.
    assert!(
        completes * 2 > with_user.ticks,
        "{completes} of {} ticks",
        with_user.ticks
    );
    // Without checks a fast tick runs the following step-only ticks itself.
    let (looped, _, _, calls) = run(false, false, dirs[2].path());
    assert!(
        calls * 2 < looped.ticks,
        "{calls} driver calls for {} ticks",
        looped.ticks
    );
    assert_eq!(built_in, with_user);
    assert_eq!(built_in, looped);
    for f in ["requests.csv", "summary.json", "timeseries.csv"] {
        let want = std::fs::read(dirs[0].path().join(f)).unwrap();
        for d in &dirs[1..] {
            assert!(
                want == std::fs::read(d.path().join(f)).unwrap(),
                "{f} differs with fast ticks"
            );
        }
    }
}

/// Ticks of arrivals alone run SimStepFast (the control plane's stages, then the instance
/// pipeline) unless invariants are checked: requests routed with no delay join their queue
/// and are batched in their arrival's tick, admission rejects some, clients time out, an
/// admission delay sends requests on through Admit events, and a group that scales from
/// zero parks requests (its arrival ticks would need the Autoscale stage: they take SimStep).
/// Every result (the routing decision trace too) must be what SimStep alone gives.
#[test]
fn arrival_ticks_change_nothing() {
    let zero_delay = r#"(
        cluster: (groups: [(count: 2, kv_blocks: 600, max_num_seqs: 8,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1500.0, 8.0, 60.0]))]),
        policies: (routing: "least_loaded", admission: "token_bucket",
            admission_params: {"capacity": 20000.0, "refill_per_s": 9000.0}),
        workload: (num_requests: 500, clients: [
            (rate_per_s: 60.0, input_tokens: Uniform(min: 16, max: 500), output_tokens: Uniform(min: 1, max: 120),
             shared_prefix_tokens: 48, prefix_groups: 3, timeout_s: 1.5),
            (name: "chat", rate_per_s: 4.0, input_tokens: Constant(80), output_tokens: Constant(16),
             session: (turns: Constant(2), think_time_s: 0.2)),
        ]),
        outputs: (decisions_csv: true),
    )"#;
    let delayed = zero_delay.replace(
        r#"routing: "least_loaded","#,
        r#"routing: "least_loaded", admission_latency_us: 700,"#,
    );
    let parked = r#"(
        cluster: (groups: [(count: 0, kv_blocks: 1000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 5.0, 50.0]),
            scaling: (min: 0, max: 2, provision_s: 2.0, load_s: 1.0))]),
        policies: (autoscale: "target_tracking", autoscale_params: {"target_in_flight": 4.0, "interval_s": 1.0}),
        workload: (num_requests: 300, clients: [(rate_per_s: 20.0, input_tokens: Uniform(min: 8, max: 200),
            output_tokens: Uniform(min: 1, max: 50))]),
    )"#;
    for (name, scenario) in [
        ("zero delay", zero_delay),
        ("admission delay", delayed.as_str()),
        ("parked", parked),
    ] {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (checked, _, _, checked_calls) = run_scenario(scenario, false, true, dirs[0].path());
        assert_eq!(
            checked_calls, checked.ticks,
            "{name}: every tick through SimStep"
        );
        let (fast, _, _, calls) = run_scenario(scenario, false, false, dirs[1].path());
        if name != "parked" {
            assert!(
                calls * 2 < fast.ticks,
                "{name}: {calls} calls, {} ticks",
                fast.ticks
            );
        }
        assert!(
            checked.requests.completed > 0 && checked.requests.injected >= 300,
            "{name}: {:?}",
            checked.requests
        );
        assert_eq!(checked, fast, "{name}");
        for f in [
            "requests.csv",
            "summary.json",
            "timeseries.csv",
            "decisions.csv",
        ] {
            let (a, b) = (dirs[0].path().join(f), dirs[1].path().join(f));
            if name == "parked" && !a.exists() {
                continue; // written by the zero-delay runs only
            }
            assert!(
                std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
                "{name}: {f} differs with fast arrival ticks"
            );
        }
    }
}

/// Fast ticks are a plugin of their own: left out, every tick runs SimStep, with the same
/// results.
#[test]
fn without_the_fast_tick_plugin_every_tick_runs_simstep_alike() {
    use servesim::bevy_app::{App, PluginGroup};
    let sc = parse(SCENARIO);
    let mut app = App::empty();
    app.add_plugins(
        servesim::SimPlugins
            .build()
            .disable::<servesim::fast::FastTicksPlugin>(),
    );
    let without = Simulation::from_app(app, &sc, RunOptions::default()).unwrap();
    assert!(!without.uses_fast_ticks());
    let with = Simulation::from_app(servesim::default_app(), &sc, RunOptions::default()).unwrap();
    assert!(with.uses_fast_ticks());
    let (without, with) = (without.run().unwrap(), with.run().unwrap());
    assert!(without.requests.completed > 500, "{:?}", without.requests);
    assert_eq!(without, with);
}

/// An energy meter as a user would write it: busy steps counted in the Execute stage.
#[derive(Resource, Clone, Default)]
struct Meter(Arc<AtomicU64>);

fn meter(due: Res<servesim::engine::InstanceDue>, meter: Res<Meter>) {
    meter
        .0
        .fetch_add(due.execute.len() as u64, Ordering::Relaxed);
}

#[test]
fn an_unordered_system_that_shares_a_stages_data_is_refused_and_an_ordered_one_sees_the_work() {
    let sc = parse(SCENARIO);
    // Unordered against execute_steps, which empties the list it reads: refused.
    let mut app = servesim::default_app();
    app.insert_resource(Meter::default());
    app.add_systems(SimStep, meter.in_set(SimSystems::Execute));
    let err = match Simulation::from_app(app, &sc, RunOptions::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("an ambiguous system was accepted"),
    };
    assert!(err.contains("does not build"), "{err}");
    assert!(err.contains(".before(...) or .after(...)"), "{err}");
    // Ordered before it: every step is seen.
    let mut app = servesim::default_app();
    let m = Meter::default();
    app.insert_resource(m.clone());
    app.add_systems(
        SimStep,
        meter
            .in_set(SimSystems::Execute)
            .before(servesim::instance::step::execute_steps),
    );
    let summary = Simulation::from_app(app, &sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    let steps: u64 = summary.instances.iter().map(|i| i.steps).sum();
    assert_eq!(m.0.load(Ordering::Relaxed), steps);
    // The lists are one resource per concern: a system in Execute that reads only the
    // admission list shares nothing with execute_steps and needs no order against it.
    let mut app = servesim::default_app();
    app.add_systems(
        SimStep,
        (|admit: Res<servesim::engine::AdmitDue>| assert!(admit.0.is_empty()))
            .in_set(SimSystems::Execute),
    );
    let summary = Simulation::from_app(app, &sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    assert!(summary.requests.completed > 0);
}

#[test]
fn a_run_that_stops_says_why_in_a_typed_fault() {
    let mut sc = parse(SCENARIO);
    sc.limits.max_in_flight = 2;
    match Simulation::new(&sc, RunOptions::default()).unwrap().run() {
        Err(servesim::SimError::Run(servesim::RunError::Fault(servesim::Fault::Overloaded {
            in_flight,
            limit,
            ..
        }))) => {
            assert_eq!(limit, 2);
            assert!(in_flight > 2);
        }
        other => panic!("expected an overload, got {other:?}"),
    }
}

#[test]
fn a_scenario_that_skipped_validation_fails_with_a_typed_error() {
    use servesim::{SetupError, SimError};
    // Valid, then broken behind validation's back, as a program building scenarios might.
    let mut sc = parse(SCENARIO);
    sc.policies.routing = "weighted".into();
    sc.policies
        .routing_params
        .insert("queue_depth".into(), -1.0);
    match Simulation::new(&sc, RunOptions::default()) {
        Err(SimError::Setup(SetupError::Policy { path, message })) => {
            assert_eq!(path, "policies.routing");
            assert!(message.contains("queue_depth"), "{message}");
        }
        other => panic!("{:?}", other.err()),
    }
    let mut sc = parse(SCENARIO);
    sc.cluster.groups[0].model = Some("no-such-model".into());
    match Simulation::new(&sc, RunOptions::default()) {
        Err(e @ SimError::Setup(SetupError::Group(_))) => {
            let SimError::Setup(SetupError::Group(problems)) = &e else {
                unreachable!()
            };
            assert_eq!(problems[0].path, "cluster.groups[0].model");
            assert!(
                e.to_string().contains("unknown model \"no-such-model\""),
                "{e}"
            );
        }
        other => panic!("{:?}", other.err()),
    }
}
