//! Cluster policies (admission, routing, autoscaling) and the catalog that names them.
//!
//! Each policy is one file implementing a trait here, registered **once** by name through
//! the [`PolicyAppExt`] methods in [`PoliciesPlugin`]. Scenario validation and
//! `servesim list policies` both read the [`Catalog`] resource, so a policy registered by a
//! user's own plugin is selectable from a scenario like a built-in one.
//!
//! Policies see read-only [`InstanceSnapshot`]s (what a real control point can observe),
//! never instance internals.

mod always_admit;
mod least_loaded;
mod reject_all;
mod round_robin;
mod static_scale;

pub use always_admit::AlwaysAdmit;
pub use least_loaded::LeastLoaded;
pub use reject_all::RejectAll;
pub use round_robin::RoundRobin;
pub use static_scale::StaticScale;

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use crate::request::RequestSpec;
use crate::time::{SimDuration, SimTime};

/// What a router or admission controller can see of one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceSnapshot {
    pub index: u32,
    /// Requests in the instance's wait queue.
    pub queue_depth: u32,
    /// Requests in the instance's running batch.
    pub batch_size: u32,
    /// Requests routed to the instance that have not reached its queue yet (router-owned).
    pub in_flight: u32,
    pub kv_used_blocks: u32,
    pub kv_total_blocks: u32,
    /// False while provisioning, warming up or draining.
    pub routable: bool,
}

impl InstanceSnapshot {
    /// queue + batch + in-flight requests.
    pub fn effective_load(&self) -> u32 {
        self.queue_depth + self.batch_size + self.in_flight
    }
}

/// Everything a policy may need at construction.
#[derive(Clone, Copy, Debug)]
pub struct PolicyArgs {
    pub seed: u64,
}

/// An admission decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// Rejected, with a short reason for the counters.
    Reject(&'static str),
}

/// Decides whether an arriving request enters the cluster.
pub trait AdmissionPolicy: Send + Sync + 'static {
    fn admit(
        &mut self,
        request: &RequestSpec,
        now: SimTime,
        instances: &[InstanceSnapshot],
    ) -> Admission;
}

/// Picks the instance a request goes to. Must break ties on the lowest instance index.
pub trait RoutingPolicy: Send + Sync + 'static {
    /// Index of the chosen instance, or `None` if no instance is routable.
    fn choose(
        &mut self,
        request: &RequestSpec,
        now: SimTime,
        instances: &[InstanceSnapshot],
    ) -> Option<u32>;
}

/// A change to the cluster's size asked for by a scaling policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleDecision {
    Hold,
}

/// Adds and drains instances on a periodic tick.
pub trait ScalePolicy: Send + Sync + 'static {
    /// How often to evaluate; `None` never ticks.
    fn interval(&self) -> Option<SimDuration>;
    fn evaluate(&mut self, now: SimTime, instances: &[InstanceSnapshot]) -> ScaleDecision;
}

/// A named, described policy constructor.
pub struct Entry<T: ?Sized> {
    pub name: &'static str,
    pub description: &'static str,
    pub build: fn(&PolicyArgs) -> Box<T>,
}

impl<T: ?Sized> Clone for Entry<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for Entry<T> {}

pub type AdmissionEntry = Entry<dyn AdmissionPolicy>;
pub type RoutingEntry = Entry<dyn RoutingPolicy>;
pub type ScaleEntry = Entry<dyn ScalePolicy>;

/// Every policy the simulation can instantiate, by family and name.
#[derive(Resource, Default)]
pub struct Catalog {
    admission: Vec<AdmissionEntry>,
    routing: Vec<RoutingEntry>,
    autoscale: Vec<ScaleEntry>,
}

fn insert<T: ?Sized>(list: &mut Vec<Entry<T>>, family: &str, entry: Entry<T>) {
    assert!(
        list.iter().all(|e| e.name != entry.name),
        "{family} policy `{}` registered twice",
        entry.name
    );
    list.push(entry);
    list.sort_by_key(|e| e.name);
}

impl Catalog {
    pub fn add_admission(&mut self, e: AdmissionEntry) {
        insert(&mut self.admission, "admission", e);
    }
    pub fn add_routing(&mut self, e: RoutingEntry) {
        insert(&mut self.routing, "routing", e);
    }
    pub fn add_autoscale(&mut self, e: ScaleEntry) {
        insert(&mut self.autoscale, "autoscale", e);
    }
    pub fn admission(&self) -> &[AdmissionEntry] {
        &self.admission
    }
    pub fn routing(&self) -> &[RoutingEntry] {
        &self.routing
    }
    pub fn autoscale(&self) -> &[ScaleEntry] {
        &self.autoscale
    }
    pub fn admission_names(&self) -> Vec<&'static str> {
        self.admission.iter().map(|e| e.name).collect()
    }
    pub fn routing_names(&self) -> Vec<&'static str> {
        self.routing.iter().map(|e| e.name).collect()
    }
    pub fn autoscale_names(&self) -> Vec<&'static str> {
        self.autoscale.iter().map(|e| e.name).collect()
    }
    pub fn find_admission(&self, name: &str) -> Option<&AdmissionEntry> {
        self.admission.iter().find(|e| e.name == name)
    }
    pub fn find_routing(&self, name: &str) -> Option<&RoutingEntry> {
        self.routing.iter().find(|e| e.name == name)
    }
    pub fn find_autoscale(&self, name: &str) -> Option<&ScaleEntry> {
        self.autoscale.iter().find(|e| e.name == name)
    }
}

/// Registers policies on an [`App`]; the one place a policy name is declared.
pub trait PolicyAppExt {
    fn add_admission_policy(&mut self, entry: AdmissionEntry) -> &mut Self;
    fn add_routing_policy(&mut self, entry: RoutingEntry) -> &mut Self;
    fn add_autoscale_policy(&mut self, entry: ScaleEntry) -> &mut Self;
}

impl PolicyAppExt for App {
    fn add_admission_policy(&mut self, entry: AdmissionEntry) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<Catalog>()
            .add_admission(entry);
        self
    }
    fn add_routing_policy(&mut self, entry: RoutingEntry) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<Catalog>()
            .add_routing(entry);
        self
    }
    fn add_autoscale_policy(&mut self, entry: ScaleEntry) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<Catalog>()
            .add_autoscale(entry);
        self
    }
}

/// Registers the built-in policies.
pub struct PoliciesPlugin;

impl Plugin for PoliciesPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<Catalog>()
            .add_admission_policy(always_admit::ENTRY)
            .add_admission_policy(reject_all::ENTRY)
            .add_routing_policy(round_robin::ENTRY)
            .add_routing_policy(least_loaded::ENTRY)
            .add_autoscale_policy(static_scale::ENTRY);
    }
}

/// The active admission policy.
#[derive(Resource)]
pub struct ActiveAdmission(pub Box<dyn AdmissionPolicy>);

/// The active routing policy.
#[derive(Resource)]
pub struct ActiveRouting(pub Box<dyn RoutingPolicy>);

/// The active scaling policy.
#[derive(Resource)]
pub struct ActiveScaling(pub Box<dyn ScalePolicy>);

#[cfg(test)]
pub(crate) fn snapshot(index: u32, queue: u32, batch: u32, in_flight: u32) -> InstanceSnapshot {
    InstanceSnapshot {
        index,
        queue_depth: queue,
        batch_size: batch,
        in_flight,
        kv_used_blocks: 0,
        kv_total_blocks: 100,
        routable: true,
    }
}

#[cfg(test)]
pub(crate) fn any_request() -> RequestSpec {
    RequestSpec {
        id: 0,
        client: 0,
        input_tokens: 10,
        output_tokens: 10,
        content: crate::request::PromptContent::Simple {
            prefix_id: 0,
            prefix_tokens: 0,
            unique_id: 1,
        },
        tenant: 0,
        slo_class: 0,
        priority: 0,
        session: None,
    }
}
