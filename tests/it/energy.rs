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
