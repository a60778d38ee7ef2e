//! Fuzzes scenario parsing, validation, `--set` overrides and a short checked run.
//! Any panic is a bug: bad input must come back as a `ScenarioError`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use servesim::policy::Catalog;
use servesim::{RunOptions, Simulation, scenario};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // An optional first line `#set path=value` exercises the override splicer.
    let (overrides, src) = match text.strip_prefix("#set ").and_then(|t| t.split_once('\n')) {
        Some((o, rest)) => match o.split_once('=') {
            Some((p, v)) => (vec![(p.to_string(), v.to_string())], rest),
            None => (Vec::new(), text),
        },
        None => (Vec::new(), text),
    };
    let app = servesim::default_app();
    let parsed = servesim::loader::parse(
        src,
        "fuzz.ron",
        &overrides,
        app.world().resource::<Catalog>(),
    );
    let Ok(mut sc) = parsed else {
        let _ = parsed.map_err(|e| e.to_string());
        return;
    };
    // Keep each run small: the point is reaching every stage with odd settings.
    let instances: u64 = sc.cluster.groups.iter().map(|g| u64::from(g.count)).sum();
    if instances > 32
        || sc
            .cluster
            .groups
            .iter()
            .any(|g| g.kv_blocks.unwrap_or(0) > 200_000)
    {
        return;
    }
    sc.workload.num_requests = Some(sc.workload.num_requests.unwrap_or(60).min(60));
    sc.horizon_s = Some(sc.horizon_s.unwrap_or(30.0).min(30.0));
    if let Ok(sim) = Simulation::from_app(
        app,
        &sc,
        RunOptions {
            check_invariants: true,
            ..Default::default()
        },
    ) {
        let _ = sim.run();
    }
});
