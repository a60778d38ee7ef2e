//! One mechanism for every policy family: a latency model of our own is one file (the model
//! below) plus one registration; the built-in families are all in the one catalog; groups are
//! resolved once (at validation), not again when the run is built.

use servesim::latency::{BatchShape, LatencyError, LatencyModel, LatencyModels};
use servesim::policy::{Catalog, Entry, PolicyAppExt, PolicyArgs};
use servesim::{RunOptions, SimDuration, Simulation};

/// `step_us` per step plus `per_token_us` per token of the batch, spread over the group's
/// tensor-parallel GPUs.
struct PerToken {
    step_us: f64,
    per_token_us: f64,
    tp: f64,
}

impl LatencyModel for PerToken {
    fn step_time(&self, b: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        let tokens = f64::from(b.prefill_tokens + b.decode_tokens);
        Ok(SimDuration::from_us_f64(
            self.step_us + self.per_token_us * tokens / self.tp,
        ))
    }
}

const PER_TOKEN: Entry<dyn LatencyModel> = Entry {
    name: "per_token",
    description: "step_us + per_token_us × tokens / tp",
    params: &[
        ("step_us", "µs per step (default 1000)"),
        ("per_token_us", "µs per token on one GPU (default 1)"),
    ],
    free_params: false,
    build: |a: &PolicyArgs<'_>| {
        Ok(Box::new(PerToken {
            step_us: a.at_least("step_us", 1000.0, 1.0)?,
            per_token_us: a.at_least("per_token_us", 1.0, 0.0)?,
            tp: f64::from(a.group.tp.max(1)),
        }))
    },
};

fn app() -> servesim::bevy_app::App {
    let mut app = servesim::default_app();
    app.add_policy::<LatencyModels>(PER_TOKEN);
    app
}

fn parse(
    app: &servesim::bevy_app::App,
    latency: &str,
) -> Result<servesim::scenario::Scenario, String> {
    let text = format!(
        "(cluster: (groups: [(tp: 2, kv_blocks: 1000, latency: {latency})]),
          workload: (clients: [(arrival: AllAtZero(count: 1), input_tokens: Constant(100),
                                output_tokens: Constant(3))]))"
    );
    servesim::loader::parse(
        &text,
        "families.ron",
        &[],
        app.world().resource::<Catalog>(),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn a_latency_model_of_our_own_prices_every_step() {
    let app = app();
    let sc = parse(
        &app,
        r#"Named(name: "per_token", params: {"step_us": 1000.0, "per_token_us": 2.0})"#,
    )
    .unwrap();
    let s = crate::common::run_app_checked(app, &sc);
    // Prefill: 1000 + 2 × 100 / 2 = 1100 µs (first token); two decodes of 1000 + 2 × 1 / 2.
    assert_eq!(s.requests.completed, 1);
    assert_eq!(s.ttft_ms.max, Some(1.1));
    assert_eq!(s.e2e_ms.max, Some(3.102));
}

#[test]
fn a_named_latency_model_is_validated_like_any_policy() {
    let app = app();
    let err = parse(&app, r#"Named(name: "per_tokn")"#).unwrap_err();
    assert!(err.contains("cluster.groups[0].latency.name"), "{err}");
    assert!(err.contains("did you mean \"per_token\""), "{err}");
    let err = parse(&app, r#"Named(name: "per_token", params: {"step": 5.0})"#).unwrap_err();
    assert!(
        err.contains("cluster.groups[0].latency.params.step"),
        "{err}"
    );
    assert!(err.contains("did you mean \"step_us\""), "{err}");
    let err = parse(
        &app,
        r#"Named(name: "per_token", params: {"step_us": -1.0})"#,
    )
    .unwrap_err();
    assert!(err.contains("cluster.groups[0].latency.params"), "{err}");
    assert!(err.contains("step_us must be a finite number ≥ 1"), "{err}");
    // Without the registration the name is unknown.
    let plain = servesim::default_app();
    let err = parse(&plain, r#"Named(name: "per_token")"#).unwrap_err();
    assert!(err.contains("unknown latency"), "{err}");
}

#[test]
fn every_family_is_in_the_one_catalog() {
    let app = app();
    let catalog = app.world().resource::<Catalog>();
    assert_eq!(
        catalog.families(),
        [
            "admission",
            "priority",
            "scheduling",
            "routing",
            "autoscale",
            "scheduler",
            "latency"
        ]
    );
    let listed: Vec<(&str, &str)> = catalog
        .describe()
        .into_iter()
        .map(|(f, n, _, _)| (f, n))
        .collect();
    for want in [
        ("routing", "round_robin"),
        ("scheduler", "vllm_v1"),
        ("latency", "per_token"),
        ("autoscale", "threshold"),
    ] {
        assert!(listed.contains(&want), "{want:?} in {listed:?}");
    }
    // Built by name, with its parameters.
    let params = [("step_us".to_string(), 10.0)].into();
    let labels = Default::default();
    let model = catalog
        .build::<LatencyModels>("per_token", &PolicyArgs::new(0, &params, &labels))
        .unwrap();
    let shape = BatchShape {
        items: &[],
        prefill_tokens: 4,
        decode_tokens: 0,
    };
    assert_eq!(model.step_time(&shape).unwrap(), SimDuration(14));
    assert!(matches!(
        catalog.build::<LatencyModels>("nope", &PolicyArgs::new(0, &params, &labels)),
        Err(servesim::policy::BuildError::Unknown { .. })
    ));
}

#[test]
fn groups_are_resolved_once_at_validation() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("steps.csv");
    std::fs::write(
        &table,
        "prefill_tokens,decode_tokens,step_us\n0,0,1000\n0,64,2000\n4096,0,9000\n4096,64,10000\n",
    )
    .unwrap();
    let file = dir.path().join("s.ron");
    std::fs::write(
        &file,
        r#"(cluster: (groups: [(kv_blocks: 1000, latency: MeasuredTable(file: "steps.csv"))]),
            workload: (num_requests: 20, clients: [(rate_per_s: 10.0, input_tokens: Constant(64),
                                                   output_tokens: Constant(4))]))"#,
    )
    .unwrap();
    let app = servesim::default_app();
    let sc = servesim::loader::load(&file, &[], app.world().resource::<Catalog>()).unwrap();
    // The table is gone: the run uses what validation read.
    std::fs::remove_file(&table).unwrap();
    let s = Simulation::new(&sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(s.requests.completed, 20);
    // An edited group is resolved anew, from the files as they are now.
    let mut edited = sc.clone();
    edited.cluster.groups[0].kv_blocks = Some(2000);
    let err = Simulation::new(&edited, RunOptions::default())
        .err()
        .expect("the table is gone");
    assert!(err.to_string().contains("steps.csv"), "{err}");
}
