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
mod always_busiest;
mod cached_blocks;
mod cost_escalation;
mod least_kv;
mod least_loaded;
mod least_outstanding;
mod prefix_aware;
pub mod prefix_index;
mod prefix_overlap;
mod priority;
mod queue_order;
mod random;
mod reject_all;
mod round_robin;
pub mod scaling;
mod session_affinity;
mod static_scale;
mod tenant_quota;
mod token_bucket;
pub mod weighted;

pub use always_admit::AlwaysAdmit;
pub use cached_blocks::{CachedBlocks, index_kv_events};
pub use least_loaded::LeastLoaded;
pub use priority::{Constant as ConstantPriority, default_class_priority};
pub use queue_order::Fcfs;
pub use reject_all::RejectAll;
pub use round_robin::RoundRobin;
pub use static_scale::StaticScale;

use std::collections::BTreeMap;

use bevy_app::{App, Plugin};
use bevy_ecs::prelude::*;

use crate::labels::Labels;
use crate::request::{PromptContent, RequestSpec};
use crate::time::{SimDuration, SimTime};

pub use crate::engine::InstanceSnapshot;

/// Everything a policy may need at construction.
#[derive(Clone, Copy, Debug)]
pub struct PolicyArgs<'a> {
    pub seed: u64,
    /// The policy's parameters from the scenario (validated against the entry's list).
    pub params: &'a BTreeMap<String, f64>,
    /// Tenant and SLO-class names, for policies keyed by them.
    pub labels: &'a Labels,
}

impl PolicyArgs<'_> {
    /// Parameter `name`, or `default` when the scenario does not give it.
    pub fn get(&self, name: &str, default: f64) -> f64 {
        self.params.get(name).copied().unwrap_or(default)
    }

    /// Parameter `name`, which must be finite and ≥ `min`.
    pub fn at_least(&self, name: &str, default: f64, min: f64) -> Result<f64, String> {
        let v = self.get(name, default);
        if v.is_finite() && v >= min {
            Ok(v)
        } else {
            Err(format!("{name} must be a finite number ≥ {min}, got {v}"))
        }
    }
}

/// Asks instances how much of a prompt they have cached (the real KV cache, as vLLM's
/// prefix-cache-aware routers do).
pub trait PrefixProbe {
    /// Leading prompt blocks of `content` cached on `instance`.
    fn cached_blocks(&self, instance: u32, content: &PromptContent, input_tokens: u32) -> u32;
}

/// A probe for tests and for routers that never look at caches.
pub struct NoProbe;

impl PrefixProbe for NoProbe {
    fn cached_blocks(&self, _: u32, _: &PromptContent, _: u32) -> u32 {
        0
    }
}

/// What a router sees when it decides.
pub struct RouterView<'a> {
    /// Instance snapshots, by index (possibly stale, see `snapshot_refresh_interval_us`).
    pub instances: &'a [InstanceSnapshot],
    pub probe: &'a dyn PrefixProbe,
    /// KV block size in tokens (for router-side prefix hashing).
    pub block_size: u32,
}

impl<'a> RouterView<'a> {
    /// A view without cache probing (tests, simple policies).
    pub fn of(instances: &'a [InstanceSnapshot]) -> Self {
        RouterView {
            instances,
            probe: &NoProbe,
            block_size: 16,
        }
    }

    pub fn routable(&self) -> impl Iterator<Item = &'a InstanceSnapshot> {
        self.instances.iter().filter(|s| s.routable)
    }
}

/// One candidate's score in a routing decision (for decision traces and regret).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredCandidate {
    pub instance: u32,
    pub score: f64,
    /// Named parts of the score (weighted scorers), for the trace.
    pub parts: Vec<(&'static str, f64)>,
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
    fn choose(&mut self, request: &RequestSpec, now: SimTime, view: &RouterView<'_>)
    -> Option<u32>;

    /// The candidates' scores of the last decision, if this policy scores (higher =
    /// better). Unscored policies are traced with −(effective load) as their score.
    fn last_scores(&self) -> Option<&[ScoredCandidate]> {
        None
    }

    /// True if the policy reads `view.probe` (the instances' caches). The probe answers from
    /// the instances' KV events, so a policy that reads it turns them on; otherwise it
    /// would see empty caches.
    fn wants_kv_events(&self) -> bool {
        false
    }
}

/// A request's priority in instance queues (higher = served first by priority orders).
pub trait PriorityPolicy: Send + Sync + 'static {
    /// `class_priority` is the request's SLO-class priority plus its workload priority;
    /// `age` is the time since arrival.
    fn priority(&self, request: &RequestSpec, class_priority: i32, age: SimDuration) -> f64;
}

/// Orders an instance's wait queue before each batch is formed.
pub trait QueueOrder: Send + Sync + 'static {
    /// True if the order never changes the queue (FCFS): sorting is skipped.
    fn is_fifo(&self) -> bool {
        false
    }
    /// Sort key: smaller runs first. `priority` comes from the priority policy.
    fn key(&self, request: &RequestSpec, arrival: SimTime, priority: f64) -> (f64, f64);
}

/// What a scaling policy sees of one autoscaled group when it evaluates. Windowed signals
/// cover the time since the previous evaluation; the others are read at the evaluation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupSignals {
    /// Index of the group in `cluster.groups`.
    pub group: u32,
    /// Instances counted in the group's size: starting (provisioning, loading, warming up)
    /// or serving. Draining instances are not.
    pub current: u32,
    /// Of those, instances that have loaded their model (warming up or serving).
    pub ready: u32,
    pub min: u32,
    pub max: u32,
    /// Price of one instance-hour: GPUs per instance × `cost_per_gpu_hour`.
    pub instance_cost_per_hour: f64,
    /// Windowed: busy time of the group's instances / (ready instances × window).
    pub utilization: f64,
    /// Waiting and in-transit requests per ready instance (requests parked for want of
    /// any routable instance count here, as if on one instance when none is ready).
    pub queue_per_instance: f64,
    /// KV blocks in use / total over the ready instances.
    pub kv_usage: f64,
    /// Requests waiting, running or headed to the group per ready instance (parked too).
    pub in_flight_per_instance: f64,
    /// Windowed: p90 TTFT and p90 of per-request mean ITL of the group's requests that
    /// finished (ms); `None` if none finished.
    pub ttft_p90_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
}

/// A scaling policy's wish for one group: the engine clamps it to [min, max] and applies
/// the group's cooldowns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleTarget {
    pub group: u32,
    pub desired: u32,
    /// Why (the signal's name), for `scale_events.csv`.
    pub reason: &'static str,
    /// The signal's value.
    pub signal: f64,
}

/// Sizes autoscaled groups (those with `scaling`) at evaluation times it chooses.
pub trait ScalePolicy: Send + Sync + 'static {
    /// The first evaluation after `now` (or at `now` for the first call, at t = 0);
    /// `None` never evaluates again.
    fn next_evaluation(&self, now: SimTime, first: bool) -> Option<SimTime>;
    /// Desired sizes; groups left out keep their size.
    fn evaluate(&mut self, now: SimTime, groups: &[GroupSignals]) -> Vec<ScaleTarget>;
}

/// Evaluation every `interval`, the first one interval after t = 0 (when there is a window
/// of signals to look at): the usual `next_evaluation`.
pub fn every(interval: SimDuration, now: SimTime, _first: bool) -> Option<SimTime> {
    Some(now + interval)
}

/// (family, name, description, parameters) of a registered policy.
pub type PolicyInfo = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// A named, described policy constructor.
pub struct Entry<T: ?Sized> {
    pub name: &'static str,
    pub description: &'static str,
    /// Parameters it accepts: (name, meaning with default).
    pub params: &'static [(&'static str, &'static str)],
    /// Whether it accepts parameters named after tenants or SLO classes (free keys).
    pub free_params: bool,
    pub build: fn(&PolicyArgs<'_>) -> Result<Box<T>, String>,
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
pub type PriorityEntry = Entry<dyn PriorityPolicy>;
pub type QueueOrderEntry = Entry<dyn QueueOrder>;

/// Checks a policy's parameters by building it.
pub type ParamCheck = Box<dyn Fn(&PolicyArgs<'_>) -> Result<(), String> + Send + Sync>;

/// What validation and `servesim list` know of a batch scheduler (the constructor itself
/// lives with the instance stages, `crate::instance::schedulers`).
pub struct SchedulerInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub params: &'static [(&'static str, &'static str)],
    /// Builds the scheduler from its parameters and throws it away: the parameter check.
    pub check: ParamCheck,
}

/// Every policy the simulation can instantiate, by family and name.
#[derive(Resource, Default)]
pub struct Catalog {
    admission: Vec<AdmissionEntry>,
    routing: Vec<RoutingEntry>,
    autoscale: Vec<ScaleEntry>,
    priority: Vec<PriorityEntry>,
    scheduling: Vec<QueueOrderEntry>,
    schedulers: Vec<SchedulerInfo>,
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
    pub fn add_priority(&mut self, e: PriorityEntry) {
        insert(&mut self.priority, "priority", e);
    }
    pub fn add_scheduling(&mut self, e: QueueOrderEntry) {
        insert(&mut self.scheduling, "scheduling", e);
    }
    pub fn priority(&self) -> &[PriorityEntry] {
        &self.priority
    }
    pub fn scheduling(&self) -> &[QueueOrderEntry] {
        &self.scheduling
    }
    pub fn priority_names(&self) -> Vec<&'static str> {
        self.priority.iter().map(|e| e.name).collect()
    }
    pub fn scheduling_names(&self) -> Vec<&'static str> {
        self.scheduling.iter().map(|e| e.name).collect()
    }
    pub fn find_priority(&self, name: &str) -> Option<&PriorityEntry> {
        self.priority.iter().find(|e| e.name == name)
    }
    pub fn find_scheduling(&self, name: &str) -> Option<&QueueOrderEntry> {
        self.scheduling.iter().find(|e| e.name == name)
    }
    /// Registers a batch scheduler's description (see `BatcherAppExt`).
    pub fn add_scheduler_info(&mut self, info: SchedulerInfo) {
        assert!(
            self.schedulers.iter().all(|e| e.name != info.name),
            "batch scheduler `{}` registered twice",
            info.name
        );
        self.schedulers.push(info);
        self.schedulers.sort_by_key(|e| e.name);
    }
    pub fn schedulers(&self) -> &[SchedulerInfo] {
        &self.schedulers
    }
    pub fn find_scheduler(&self, name: &str) -> Option<&SchedulerInfo> {
        self.schedulers.iter().find(|e| e.name == name)
    }

    /// (family, name, description, params) of every policy, for `servesim list policies`.
    pub fn describe(&self) -> Vec<PolicyInfo> {
        let mut v = Vec::new();
        v.extend(
            self.admission
                .iter()
                .map(|e| ("admission", e.name, e.description, e.params)),
        );
        v.extend(
            self.priority
                .iter()
                .map(|e| ("priority", e.name, e.description, e.params)),
        );
        v.extend(
            self.scheduling
                .iter()
                .map(|e| ("scheduling", e.name, e.description, e.params)),
        );
        v.extend(
            self.routing
                .iter()
                .map(|e| ("routing", e.name, e.description, e.params)),
        );
        v.extend(
            self.autoscale
                .iter()
                .map(|e| ("autoscale", e.name, e.description, e.params)),
        );
        v.extend(
            self.schedulers
                .iter()
                .map(|e| ("scheduler", e.name, e.description, e.params)),
        );
        v
    }
}

/// Registers policies on an [`App`]; the one place a policy name is declared.
pub trait PolicyAppExt {
    fn add_admission_policy(&mut self, entry: AdmissionEntry) -> &mut Self;
    fn add_routing_policy(&mut self, entry: RoutingEntry) -> &mut Self;
    fn add_autoscale_policy(&mut self, entry: ScaleEntry) -> &mut Self;
    fn add_priority_policy(&mut self, entry: PriorityEntry) -> &mut Self;
    fn add_queue_order(&mut self, entry: QueueOrderEntry) -> &mut Self;
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
    fn add_priority_policy(&mut self, entry: PriorityEntry) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<Catalog>()
            .add_priority(entry);
        self
    }
    fn add_queue_order(&mut self, entry: QueueOrderEntry) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<Catalog>()
            .add_scheduling(entry);
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
            .add_admission_policy(token_bucket::ENTRY)
            .add_admission_policy(tenant_quota::ENTRY)
            .add_priority_policy(priority::CONSTANT)
            .add_priority_policy(priority::SLO_BASED)
            .add_priority_policy(priority::INVERTED_SLO)
            .add_queue_order(queue_order::FCFS)
            .add_queue_order(queue_order::PRIORITY_FCFS)
            .add_queue_order(queue_order::SJF)
            .add_queue_order(queue_order::REVERSE_PRIORITY)
            .add_routing_policy(round_robin::ENTRY)
            .add_routing_policy(random::ENTRY)
            .add_routing_policy(least_loaded::ENTRY)
            .add_routing_policy(least_outstanding::ENTRY)
            .add_routing_policy(least_kv::ENTRY)
            .add_routing_policy(always_busiest::ENTRY)
            .add_routing_policy(session_affinity::ENTRY)
            .add_routing_policy(cost_escalation::ENTRY)
            .add_routing_policy(prefix_overlap::ENTRY)
            .add_routing_policy(prefix_aware::ENTRY)
            .add_routing_policy(weighted::ENTRY)
            .add_autoscale_policy(static_scale::ENTRY)
            .add_autoscale_policy(scaling::THRESHOLD)
            .add_autoscale_policy(scaling::TARGET_TRACKING)
            .add_autoscale_policy(scaling::SLO_AWARE)
            .add_autoscale_policy(scaling::SCHEDULED);
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

/// The active priority policy.
#[derive(Resource)]
pub struct ActivePriority(pub Box<dyn PriorityPolicy>);

/// The active instance queue order.
#[derive(Resource)]
pub struct ActiveQueueOrder(pub Box<dyn QueueOrder>);

/// Tie-break: among candidates, the highest score wins, then the lowest index.
pub fn argmax(scores: impl IntoIterator<Item = (u32, f64)>) -> Option<u32> {
    let mut best: Option<(u32, f64)> = None;
    for (i, s) in scores {
        if best.is_none_or(|(bi, bs)| s > bs || (s == bs && i < bi)) {
            best = Some((i, s));
        }
    }
    best.map(|(i, _)| i)
}

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
