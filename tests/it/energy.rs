//! docs/extending.md: an energy meter as a researcher writes it — one file (this
//! one) and one line (`app.add_plugins(EnergyMeter)`) — reports busy GPU-seconds per instance
//! and the energy they took in `summary.json`.

use servesim::bevy_app::{App, Plugin};
use servesim::bevy_ecs::prelude::*;
use servesim::instance::{Instance, Limits, Scheduler};
use servesim::metrics::SummaryExtras;

/// Busy GPU-seconds per instance, and their energy at `watts` per busy GPU.
pub struct EnergyMeter {
    pub watts: f64,
}

#[derive(Resource)]
struct Watts(f64);

impl Plugin for EnergyMeter {
    fn build(&self, app: &mut App) {
        app.insert_resource(Watts(self.watts))
            .add_systems(servesim::SimFinish, report_energy);
    }
}

fn report_energy(
    instances: Query<(&Instance, &Scheduler, &Limits)>,
    watts: Res<Watts>,
    mut extras: ResMut<SummaryExtras>,
) {
    let mut busy = vec![0.0; instances.iter().count()];
    for (inst, sched, limits) in &instances {
        let gpus = f64::from(limits.tp * limits.pp);
        busy[inst.index as usize] = sched.counters.busy.as_secs_f64() * gpus;
    }
    let kwh = busy.iter().sum::<f64>() * watts.0 / 3.6e6;
    extras.0.insert("busy_gpu_seconds".into(), busy.into());
    extras.0.insert("energy_kwh".into(), kwh.into());
}

#[test]
fn the_energy_meter_is_one_file_and_one_line() {
    let mut app = servesim::default_app();
    app.add_plugins(EnergyMeter { watts: 700.0 });
    let sc = crate::common::parse(
        r#"(cluster: (groups: [(count: 2, tp: 2, kv_blocks: 2000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [2000.0, 10.0, 100.0]))]),
          workload: (num_requests: 200, clients: [(rate_per_s: 20.0, input_tokens: Uniform(min: 16, max: 400),
            output_tokens: Uniform(min: 1, max: 80))]))"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let sim = servesim::Simulation::from_app(
        app,
        &sc,
        servesim::RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        sim.uses_fast_ticks(),
        "a SimFinish system costs the run nothing"
    );
    let s = sim.run().unwrap();
    // Against the summary's own per-instance busy fractions: busy = fraction × duration.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let busy = json["extras"]["busy_gpu_seconds"].as_array().unwrap();
    assert_eq!(busy.len(), 2);
    for (k, inst) in s.instances.iter().enumerate() {
        let want = inst.busy_fraction * s.sim_duration_s * 2.0;
        let got = busy[k].as_f64().unwrap();
        assert!(
            got > 0.0 && (got - want).abs() < 1e-6 * want,
            "{got} vs {want}"
        );
    }
    let total: f64 = busy.iter().map(|b| b.as_f64().unwrap()).sum();
    let kwh = json["extras"]["energy_kwh"].as_f64().unwrap();
    assert!((kwh - total * 700.0 / 3.6e6).abs() < 1e-12);
    assert_eq!(s.extras["energy_kwh"], json["extras"]["energy_kwh"]);
}

// ---- The built-in energy accounts (`energy:` in a scenario; docs/energy.md). ----

#[test]
fn one_request_is_charged_its_steps_by_hand() {
    // Blackbox steps (β = 5,000 µs + 1 µs per prefill token + 10 µs per decode): a 100-token
    // prompt and 3 output tokens take one 5,100-µs prefill step and two 5,010-µs decode
    // steps, 15,120 µs. floor_w = max_w = 400 W, so a step draws 400 W whatever its
    // utilisation: 400 W · 0.01512 s = 6.048 J, all the request's. The rest of the run the
    // GPU idles at 50 W.
    let sc = crate::common::parse(
        r#"(cluster: (groups: [(count: 1, model: "llama-3.1-8b-instruct", gpu: "H100",
            kv_blocks: 100, power: (idle_w: 50.0, floor_w: 400.0, max_w: 400.0),
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 1.0, 10.0]))]),
          workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(100),
            output_tokens: Constant(3))]),
          energy: ())"#,
    );
    let (summary, rows) = crate::common::run(&sc);
    assert_eq!(rows[0].str("energy_j"), "6.048");
    let e = summary.energy.expect("energy block");
    assert!((e.step_kwh * 3.6e6 - 6.048).abs() < 1e-9, "{}", e.step_kwh);
    let idle = 50.0 * (summary.sim_duration_s - 0.015_12);
    assert!(
        (e.idle_kwh * 3.6e6 - idle).abs() < 1e-6,
        "{} vs {idle}",
        e.idle_kwh * 3.6e6
    );
    assert_eq!(e.facility_kwh, e.gpu_kwh, "pue 1 by default");
    assert!((e.joules_per_output_token.unwrap() - (6.048 + idle) / 3.0).abs() < 1e-6);
    assert!((e.groups[0].busy_gpu_hours * 3600.0 - 0.015_12).abs() < 1e-12);
}

#[test]
fn every_joule_of_the_steps_is_charged_to_a_request() {
    // P/D (a request's energy follows it to its decode instance), an autoscaled group (off
    // instances draw nothing: idle is the GPU time on less the busy time), tp 2 and a pue.
    let sc = crate::common::parse(
        r#"(seed: 4, cluster: (groups: [
            (name: "prefill", count: 1, role: Prefill, model: "llama-3.1-8b-instruct",
             gpu: "H100", tp: 2, latency: Roofline()),
            (name: "decode", count: 1, role: Decode, model: "llama-3.1-8b-instruct",
             gpu: "H100", latency: Roofline(),
             scaling: (min: 1, max: 3, provision_s: 1.0, load_s: 1.0, interval_s: 2.0))]),
          policies: (autoscale: "threshold", autoscale_params: {"in_flight_high": 16.0, "in_flight_low": 2.0}),
          workload: (num_requests: 600, clients: [(rate_per_s: 40.0,
            input_tokens: Uniform(min: 64, max: 2000), output_tokens: Uniform(min: 1, max: 200))]),
          energy: (pue: 1.25, price_per_kwh: 0.2))"#,
    );
    let (summary, rows) = crate::common::run(&sc);
    assert_eq!(summary.requests.completed, 600);
    let e = summary.energy.expect("energy block");
    let charged: f64 = rows
        .iter()
        .map(|r| r.str("energy_j").parse::<f64>().unwrap())
        .sum();
    let steps_j = e.step_kwh * 3.6e6;
    // Each row is rounded to the millijoule.
    assert!(
        (charged - steps_j).abs() <= 0.0005 * rows.len() as f64,
        "{charged} J charged, {steps_j} J in steps"
    );
    assert!(
        rows.iter()
            .all(|r| r.str("energy_j").parse::<f64>().unwrap() > 0.0)
    );
    for (g, usage) in e.groups.iter().zip(&summary.groups) {
        let p = g.power.unwrap();
        assert_eq!(g.gpu_hours, usage.gpu_hours);
        let idle = p.idle_w * (usage.gpu_hours - g.busy_gpu_hours) * 3600.0;
        assert!((g.idle_kwh * 3.6e6 - idle).abs() < 1e-6 * idle.max(1.0));
        assert!(g.mean_utilisation > 0.0 && g.mean_utilisation < 1.0);
        // Between floor and max per busy GPU-second.
        let per_busy = g.step_kwh * 3.6e6 / (g.busy_gpu_hours * 3600.0);
        assert!(per_busy > p.floor_w && per_busy < p.max_w, "{per_busy} W");
    }
    assert!(summary.groups[1].scale_ups > 0, "the decode group scaled");
    assert!((e.gpu_kwh - e.step_kwh - e.idle_kwh).abs() < 1e-12);
    assert!((e.facility_kwh - 1.25 * e.gpu_kwh).abs() < 1e-12);
    assert!((e.electricity_cost - 0.2 * e.facility_kwh).abs() < 1e-12);
    let tokens = summary.throughput.output_tokens as f64;
    assert!((e.joules_per_output_token.unwrap() - e.facility_kwh * 3.6e6 / tokens).abs() < 1e-9);
}

#[test]
fn a_retried_request_keeps_the_energy_of_its_crashed_attempt() {
    // A crash takes down the requests on instance 1 and they are sent again: the steps
    // their first attempt took part in were metered, so that energy stays theirs (it was
    // dropped with the attempt: the rows added up to 2,617 J less than the steps on
    // scenarios/crashes.ron).
    let sc = crate::common::parse(
        r#"(seed: 3, cluster: (groups: [(count: 2, model: "llama-3.1-8b-instruct", gpu: "H100",
             latency: Roofline())]),
          workload: (num_requests: 400, clients: [(rate_per_s: 40.0,
            input_tokens: Uniform(min: 64, max: 2000), output_tokens: Uniform(min: 20, max: 200))]),
          faults: (crashes: [(instance: 1, at_s: 3.0)], on_crash: Retry()),
          energy: ())"#,
    );
    let (summary, rows) = crate::common::run(&sc);
    assert_eq!(summary.requests.completed, 400);
    let retried: Vec<_> = rows.iter().filter(|r| r.str("retries") != "0").collect();
    assert!(!retried.is_empty(), "the crash took requests down");
    let charged: f64 = rows
        .iter()
        .map(|r| r.str("energy_j").parse::<f64>().unwrap())
        .sum();
    let steps_j = summary.energy.expect("energy block").step_kwh * 3.6e6;
    assert!(
        (charged - steps_j).abs() <= 0.0005 * rows.len() as f64,
        "{charged} J charged, {steps_j} J in steps"
    );
}

#[test]
fn energy_off_changes_no_output() {
    // Without `energy`: no column, no summary block.
    let sc = crate::common::parse(
        r#"(cluster: (groups: [(count: 1, model: "llama-3.1-8b-instruct", gpu: "H100")]),
          workload: (num_requests: 20, clients: [(rate_per_s: 5.0, input_tokens: Constant(64),
            output_tokens: Constant(8))]))"#,
    );
    let (summary, rows) = crate::common::run(&sc);
    assert!(summary.energy.is_none());
    assert!(!rows[0].0.contains_key("energy_j"));
    let json = serde_json::to_value(&summary).unwrap();
    assert!(json.get("energy").is_none());
}

#[test]
fn bad_energy_inputs_are_located_errors() {
    let group = r#"model: "llama-3.1-8b-instruct", gpu: "H100""#;
    let wl = r#"workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(2))])"#;
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group})]), {wl}, energy: (pue: 0.5))"
    ));
    assert!(
        e.contains("energy.pue: must be a number within 1..=10, got 0.5"),
        "{e}"
    );
    for (bad, says) in [
        (
            "energy: (pue: 1e300)",
            "energy.pue: must be a number within 1..=10",
        ),
        (
            "energy: (pue: 1.2), cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", power: (idle_w: 1e300, floor_w: 1e300, max_w: 1e300))])",
            "power.idle_w: must be a number of watts per GPU within 0..=10⁵",
        ),
    ] {
        let src = if bad.contains("cluster") {
            format!("({wl}, {bad})")
        } else {
            format!("(cluster: (groups: [({group})]), {wl}, {bad})")
        };
        let e = crate::common::invalid(&src);
        assert!(e.contains(says), "{bad}: {e}");
    }
    // A price past 10⁶ a kWh (as cost_per_gpu_hour) printed a 300-digit electricity cost.
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group})]), {wl}, energy: (price_per_kwh: 1e300))"
    ));
    assert!(
        e.contains("energy.price_per_kwh: must be a number within 0..=10⁶"),
        "{e}"
    );
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group}, power: (idle_w: 1.0, floor_w: 2.0, max_w: 3.0))]), {wl})"
    ));
    assert!(
        e.contains("cluster.groups[0].power") && e.contains("no energy block"),
        "{e}"
    );
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group}, power: (idle_w: 500.0, floor_w: 300.0, max_w: 700.0))]), {wl}, energy: ())"
    ));
    assert!(e.contains("cluster.groups[0].power.floor_w"), "{e}");
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group}, power: (idle_w: 0.0, floor_w: 0.0, max_w: 0.0))]), {wl}, energy: ())"
    ));
    assert!(
        e.contains("cluster.groups[0].power.max_w: must be above 0"),
        "{e}"
    );
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 1.0, 1.0]))]), {wl}, energy: ())"
    ));
    assert!(
        e.contains("cluster.groups[0].model") && e.contains("energy needs"),
        "{e}"
    );
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group})]), {wl}, outputs: (fitness: {{\"joules_per_token\": 1.0}}))"
    ));
    assert!(e.contains("outputs.fitness.joules_per_token"), "{e}");
    // Located: line and column of the field.
    let e = crate::common::invalid(&format!(
        "(cluster: (groups: [({group})]), {wl},\n energy: (pue: -1.0))"
    ));
    assert!(e.contains("2:"), "{e}");
}

#[test]
fn the_docs_energy_table_matches_the_bundled_scenario() {
    let doc = crate::common::doc("energy");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    for gpu in ["H100", "B200"] {
        let line = doc
            .lines()
            .rfind(|l| l.starts_with(&format!("| {gpu} |")))
            .unwrap_or_else(|| panic!("docs/energy.md has no row for {gpu}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let sc = servesim::loader::load(
            &root.join("scenarios/energy.ron"),
            &[("cluster.groups[0].gpu".into(), format!("\"{gpu}\""))],
            catalog,
        )
        .unwrap();
        let s = crate::common::run_app_checked(servesim::default_app(), &sc);
        let e = s.energy.unwrap();
        let g = &e.groups[0];
        let got = [
            format!("{:.3}", s.itl_ms.p50.unwrap()),
            format!("{:.2}", g.mean_utilisation),
            format!("{:.0}", g.mean_power_w / 2.0),
            format!("{:.2}", e.joules_per_output_token.unwrap()),
        ];
        assert_eq!(&cells[2..6], &got.each_ref().map(String::as_str), "{gpu}");
    }
}
