//! # servesim — a discrete-event simulator of LLM inference serving clusters
//!
//! Requests arrive, pass admission, are routed to model-server instances, batched
//! vLLM-style against a paged KV cache and priced by a latency model; each leaves a row in
//! `requests.csv`, and the run leaves an aggregate `summary.json`.
//!
//! ```text
//!  workload ──▶ Arrive ──▶ Admit ──▶ Route ──(routing + queueing delay)──▶ Enqueue
//!                             │ rejected                                      │ dropped
//!                             ▼                                               ▼
//!  Record ◀── Advance (step end) ◀── Complete ◀── Execute ◀── Batch ◀── instance queue
//!     │
//!     └─▶ requests.csv row, aggregates, despawn            Check: invariants
//! ```
//!
//! ## Entities
//! - **Requests**: [`request::RequestSpec`] + [`request::Lifecycle`] (+ [`request::AssignedTo`]),
//!   spawned at arrival, despawned after their row is written.
//! - **Instances**: [`instance::Instance`], [`instance::Limits`], [`instance::Scheduler`]
//!   (wait queue, running batch and per-token progress), [`kv::KvCache`] (the block table,
//!   LRU free list and prefix index) and [`latency::Latency`].
//!
//! ## Time and ordering (the contract)
//! - Time is [`SimTime`]: integer microseconds. No float time anywhere.
//! - The [`EventQueue`] orders events by `(time, seq)`: every event due at a time is popped
//!   into its kind's work list in insertion order, and the stages then run in their fixed
//!   order, so the order between kinds never matters.
//! - One tick = one distinct event time: every event due at that time is popped into the
//!   work lists of their concerns ([`engine::InstanceDue`], [`engine::RouteDue`], …), then the [`SimStep`] schedule runs once, in the fixed
//!   [`SimSystems`] order: `Advance → Arrive → Admit → Route → Enqueue → Transfer → Batch →
//!   Execute → Complete → Autoscale → Observe → Record → Check`. A stage whose work list is
//!   empty is skipped (`Observe` has none and runs every tick).
//!   Zero-delay hand-offs (e.g. admission with no latency) go straight to the next stage's
//!   list within the same tick.
//! - Ties are broken on stable ids (request id, instance index), never on query order.
//! - Two systems of a tick that touch the same data must be ordered (by set or by
//!   `.before`/`.after`): an ambiguity is an error when the schedule is built
//!   ([`SetupError::Schedule`]), never a silent order-dependent result.
//! - A tick whose only events are step ends and enqueues runs [`SimStepFast`] (the instance
//!   pipeline alone), and so does a tick of new arrivals alone (Arrive, Admit and Route
//!   first), while [`SimStep`] holds built-in systems only; the other stages could have no
//!   work on such ticks, so results are the same.
//!
//! ## Determinism
//! Same scenario + seed ⇒ byte-identical stdout, CSV and JSON. Each subsystem draws from its
//! own ChaCha stream ([`rng::stream`]), so e.g. changing the router cannot change the
//! workload. No wall clock in the library (clippy `disallowed-methods`).
//!
//! ## Invariants (checked by [`SimSystems::Check`] with `--check-invariants` and in tests)
//! - **INV-1** request conservation: injected = completed + rejected + dropped + queued +
//!   running + in transit; each request ends in exactly one state.
//! - **INV-3** the clock never goes back.
//! - **INV-4** KV conservation: allocated + free = total GPU blocks, and the CPU tier holds
//!   no more than its capacity, per instance.
//! - **INV-5** causality: arrival ≤ admitted ≤ routed ≤ enqueued ≤ scheduled ≤ first token ≤
//!   completion.
//! - **INV-6** determinism (tested end to end).
//! - **INV-8** work conservation: an instance with work always has a step in flight.
//!
//! ## Extending
//! A new behaviour is a system in a [`SimSystems`] set, or a policy registered once by name.
//! ```
//! use servesim::bevy_app::App;
//! use servesim::policy::{PolicyAppExt, RouterView, RoutingEntry, RoutingPolicy, family};
//! use servesim::request::RequestSpec;
//! use servesim::SimTime;
//!
//! /// Always the last routable instance.
//! struct LastOne;
//! impl RoutingPolicy for LastOne {
//!     fn choose(&mut self, _: &RequestSpec, _: SimTime, view: &RouterView<'_>) -> Option<u32> {
//!         view.routable().last().map(|s| s.index)
//!     }
//! }
//!
//! let mut app = servesim::default_app();
//! app.add_policy::<family::Routing>(RoutingEntry {
//!     name: "last_one",
//!     description: "always the last instance",
//!     params: &[],
//!     free_params: false,
//!     build: |_| Ok(Box::new(LastOne)),
//! });
//! // A scenario may now say `policies: (routing: "last_one")`; build it with
//! // `Simulation::from_app(app, &scenario, options)`.
//! # assert!(app.world().resource::<servesim::policy::Catalog>().find::<servesim::policy::family::Routing>("last_one").is_some());
//! ```

pub mod app;
pub mod autoscale;
pub mod capacity;
pub mod catalog;
#[cfg(feature = "cli")]
pub mod cli;
pub mod cluster;
pub mod decisions;
pub mod disagg;
pub mod energy;
pub mod engine;
pub mod evaluate;
pub mod fast;
pub mod faults;
pub mod fidelity;
pub mod gateway;
pub mod input;
pub mod instance;
pub mod interval;
pub mod invariants;
pub mod kv;
pub mod labels;
pub mod latency;
pub mod loader;
pub mod metrics;
pub mod model;
pub mod network;
pub mod observe;
pub mod output;
pub mod parallel;
pub mod plan;
pub mod policy;
pub mod report;
pub mod request;
pub mod rng;
pub mod scenario;
pub mod setup;
pub mod slo;
pub mod sweep;
pub mod time;
pub mod workload;

mod simulation;

pub use app::ServesimApp;
pub use bevy_app;
pub use bevy_ecs;
pub use engine::{EventQueue, Fault, SimClock, SimFinish, SimStep, SimStepFast, SimSystems};
pub use setup::{PROGRESS_EVERY, Progress, ProgressHook, RunOptions};
pub use simulation::{OutputReport, RunError, SetupError, SimError, Simulation, default_app};
pub use time::{SimDuration, SimTime};

use bevy_app::{PluginGroup, PluginGroupBuilder};

/// Every built-in plugin, one per concern, each in its concern's file (its doc lists its
/// systems, their sets and the work lists they empty and fill): [`engine::EnginePlugin`]
/// (clock, queue, work lists, stage order), [`policy::PoliciesPlugin`] (the policy catalog),
/// [`workload::WorkloadPlugin`], [`cluster::AdmissionPlugin`], [`cluster::RoutingPlugin`],
/// [`instance::InstancePlugin`], [`fast::FastTicksPlugin`] (fast ticks; without it every
/// tick runs [`SimStep`]), [`disagg::DisaggPlugin`], [`autoscale::AutoscalePlugin`],
/// [`metrics::MetricsPlugin`] and [`invariants::InvariantsPlugin`].
///
/// Disable one and add your own to replace a built-in stage:
/// ```
/// use servesim::bevy_app::{App, Plugin, PluginGroup};
/// use servesim::bevy_ecs::prelude::*;
/// use servesim::{SimStep, SimSystems};
///
/// /// Instead of the built-in checks: only that the clock never passes an hour.
/// struct HourCap;
/// impl Plugin for HourCap {
///     fn build(&self, app: &mut App) {
///         app.add_systems(
///             SimStep,
///             (|clock: Res<servesim::SimClock>| {
///                 assert!(clock.now.as_us() <= 3_600_000_000, "past an hour");
///             })
///             .in_set(SimSystems::Check),
///         );
///     }
/// }
///
/// let mut app = App::empty();
/// app.add_plugins(
///     servesim::SimPlugins
///         .build()
///         .disable::<servesim::invariants::InvariantsPlugin>(),
/// );
/// app.add_plugins(HourCap);
/// let catalog = app.world().resource::<servesim::policy::Catalog>();
/// let scenario = servesim::loader::parse(
///     "(cluster: (groups: [(kv_blocks: 2000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [5000.0, 1.0, 10.0]))]),
///       workload: (num_requests: 20, clients: [(rate_per_s: 5.0, input_tokens: Constant(64),
///                                                output_tokens: Constant(8))]))",
///     "doc.ron",
///     &[],
///     catalog,
/// )
/// .unwrap();
/// let sim = servesim::Simulation::from_app(app, &scenario, Default::default()).unwrap();
/// // A system of your own in SimStep: every tick runs the full schedule, so it always runs.
/// assert!(!sim.uses_fast_ticks());
/// assert_eq!(sim.run().unwrap().requests.completed, 20);
/// ```
pub struct SimPlugins;

impl PluginGroup for SimPlugins {
    fn build(self) -> PluginGroupBuilder {
        PluginGroupBuilder::start::<Self>()
            .add(engine::EnginePlugin)
            .add(policy::PoliciesPlugin)
            .add(workload::WorkloadPlugin)
            .add(cluster::AdmissionPlugin)
            .add(cluster::RoutingPlugin)
            .add(instance::InstancePlugin)
            .add(fast::FastTicksPlugin)
            .add(disagg::DisaggPlugin)
            .add(autoscale::AutoscalePlugin)
            .add(energy::EnergyPlugin)
            .add(gateway::FlowControlPlugin)
            .add(faults::FaultsPlugin)
            .add(observe::ObservePlugin)
            .add(metrics::MetricsPlugin)
            .add(invariants::InvariantsPlugin)
    }
}
