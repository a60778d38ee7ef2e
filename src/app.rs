//! The one place an [`App`] is assembled: [`ServesimApp`].
//!
//! Every command (`run`, `validate`, `sweep`, `check-real`, `calibrate`, `list`) and the
//! Python package build their apps from a `ServesimApp`, so a plugin, policy or system added
//! to it works in all of them: a sweep's points and a calibration's trial runs each get a
//! fresh app built the same way, and scenarios are validated against the catalog of that
//! same app. A program of your own is a few lines (`examples/custom_cli.rs`):
//!
//! ```no_run
//! use servesim::ServesimApp;
//!
//! fn main() -> std::process::ExitCode {
//!     let app = ServesimApp::new().with(|app| {
//!         // app.add_plugins(MyPlugin); app.add_policy::<family::Routing>(MY_ROUTER);
//!         let _ = app;
//!     });
//!     servesim::cli::main(app)
//! }
//! ```

use std::sync::Arc;

use bevy_app::App;

use crate::catalog::Catalog;
use crate::loader::ScenarioError;
use crate::metrics::Summary;
use crate::scenario::Scenario;
use crate::setup::RunOptions;
use crate::simulation::{SimError, Simulation};

/// Builds servesim apps: the built-in plugins ([`SimPlugins`](crate::SimPlugins)), then every
/// extension given to [`with`](Self::with), in order. Cheap to clone and shareable across
/// threads (a sweep builds one app per point).
#[derive(Clone, Default)]
pub struct ServesimApp {
    extensions: Vec<Extension>,
}

/// One addition to every app a [`ServesimApp`] builds.
type Extension = Arc<dyn Fn(&mut App) + Send + Sync>;

impl std::fmt::Debug for ServesimApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServesimApp({} extensions)", self.extensions.len())
    }
}

impl ServesimApp {
    /// The built-in plugins only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also does what `extend` does to every app built: add plugins, policies, systems,
    /// setup steps or summary parts.
    pub fn with(mut self, extend: impl Fn(&mut App) + Send + Sync + 'static) -> Self {
        self.extensions.push(Arc::new(extend));
        self
    }

    /// A fresh app.
    pub fn build(&self) -> App {
        let mut app = App::empty();
        app.add_plugins(crate::SimPlugins);
        for extend in &self.extensions {
            extend(&mut app);
        }
        app
    }

    /// Loads and validates a scenario file against this app's catalog.
    pub fn load(
        &self,
        path: &std::path::Path,
        overrides: &[(String, String)],
    ) -> Result<Scenario, ScenarioError> {
        let app = self.build();
        crate::loader::load(path, overrides, app.world().resource::<Catalog>())
    }

    /// Parses and validates scenario text (`file` names it in messages).
    pub fn parse(
        &self,
        text: &str,
        file: &str,
        overrides: &[(String, String)],
    ) -> Result<Scenario, ScenarioError> {
        let app = self.build();
        crate::loader::parse(text, file, overrides, app.world().resource::<Catalog>())
    }

    /// What `servesim run` and `validate` warn of before a run (an input vLLM would refuse, a
    /// release newer than those modelled, a unit that looks wrong, a plan price never used): one message each, without
    /// the "warning: " the CLI puts before it.
    pub fn input_warnings(&self, scenario: &Scenario) -> Vec<String> {
        let app = self.build();
        let mut said =
            crate::loader::estimate::slow_inputs(scenario, app.world().resource::<Catalog>());
        said.extend(crate::loader::unused_prices(scenario));
        said
    }

    /// A simulation of `scenario`, ready to run, on a fresh app.
    pub fn simulation(
        &self,
        scenario: &Scenario,
        options: RunOptions,
    ) -> Result<Simulation, SimError> {
        Simulation::from_app(self.build(), scenario, options)
    }

    /// Builds and runs a simulation of `scenario`.
    pub fn run(&self, scenario: &Scenario, options: RunOptions) -> Result<Summary, SimError> {
        self.simulation(scenario, options)?.run()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_app_gets_every_extension_in_order() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let builder = ServesimApp::new()
            .with(move |_| {
                seen.fetch_add(1, Ordering::Relaxed);
            })
            .with(|app| {
                app.insert_resource(crate::engine::SimClock::default());
            });
        let a = builder.build();
        let b = builder.clone().build();
        assert_eq!(calls.load(Ordering::Relaxed), 2, "once per app");
        assert!(a.world().contains_resource::<Catalog>(), "built-ins first");
        assert!(b.world().contains_resource::<crate::engine::SimClock>());
    }

    #[test]
    fn an_app_interrupt_stops_every_run_without_a_flag_of_its_own() {
        use std::sync::atomic::AtomicBool;
        let set = Arc::new(AtomicBool::new(true));
        let flag = set.clone();
        let app = ServesimApp::new().with(move |app| {
            app.insert_resource(crate::setup::AppInterrupt(flag.clone()));
        });
        // 2,000 requests: several hundred ticks (the flag is read between runs of fast ticks).
        let sc = app
            .parse(
                "(cluster: (groups: [(kv_blocks: 1000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 1.0]))]), \
                 workload: (num_requests: 2000, clients: [(rate_per_s: 10.0, input_tokens: Constant(32), output_tokens: Constant(4))]))",
                "t.ron",
                &[],
            )
            .unwrap();
        let e = app.run(&sc, RunOptions::default()).unwrap_err();
        assert!(
            e.to_string().starts_with("interrupted at simulated time"),
            "{e}"
        );
        let own = RunOptions {
            interrupt: Some(Arc::new(AtomicBool::new(false))),
            ..Default::default()
        };
        assert_eq!(app.run(&sc, own).unwrap().requests.completed, 2000);
        set.store(false, Ordering::Relaxed);
        assert_eq!(
            app.run(&sc, RunOptions::default())
                .unwrap()
                .requests
                .completed,
            2000
        );
    }
}
