//! Your own `servesim`: the standard command line with a routing policy and a summary system
//! of your own. Every command — `run`, `validate`, `sweep`, `check-real`, `calibrate`,
//! `list` — builds its apps from the `ServesimApp` handed over, so it knows both:
//!
//! ```sh
//! cargo run --release --example custom_cli -- list policies            # lists last_one
//! cargo run --release --example custom_cli -- run scenarios/quickstart.ron \
//!     --set 'policies.routing="last_one"'                              # prints steps_total
//! cargo run --release --example custom_cli -- sweep scenarios/quickstart.ron \
//!     --vary 'policies.routing=["last_one","round_robin"]'             # sweep.csv `extras`
//! ```

use std::process::ExitCode;

use servesim::bevy_ecs::prelude::*;
use servesim::instance::Scheduler;
use servesim::metrics::SummaryExtras;
use servesim::policy::{PolicyAppExt, RouterView, RoutingEntry, RoutingPolicy, family};
use servesim::request::RequestSpec;
use servesim::{ServesimApp, SimFinish, SimTime};

/// Always the last routable instance.
struct LastOne;

impl RoutingPolicy for LastOne {
    fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
        view.routable().last().map(|s| s.index)
    }
}

const LAST_ONE: RoutingEntry = RoutingEntry {
    name: "last_one",
    description: "always the last routable instance",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LastOne)),
};

/// Steps taken by every instance together, in the summary's `extras`.
fn count_steps(instances: Query<&Scheduler>, mut extras: ResMut<SummaryExtras>) {
    let steps: u64 = instances.iter().map(|s| s.counters.steps).sum();
    extras.0.insert("steps_total".into(), steps.into());
}

fn main() -> ExitCode {
    let app = ServesimApp::new().with(|app| {
        app.add_policy::<family::Routing>(LAST_ONE);
        app.add_systems(SimFinish, count_steps);
    });
    servesim::cli::main(app)
}
