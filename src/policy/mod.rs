//! Cluster policies (admission, routing, autoscaling) and the catalog that names them.
//!
//! Each policy is one file implementing a trait here, registered **once** by name with
//! [`PolicyAppExt::add_policy`] and its [`family`] in [`PoliciesPlugin`]; every family —
//! these five, batch formation and latency models — goes through the one mechanism of
//! [`catalog`](PolicyFamily). Scenario validation and
//! `servesim list policies` both read the [`Catalog`] resource, so a policy registered by a
//! user's own plugin is selectable from a scenario like a built-in one.
//!
//! Policies see read-only [`InstanceSnapshot`]s (what a real control point can observe),
//! never instance internals.

mod always_admit;
mod always_busiest;
mod cached_blocks;
mod check;
mod cost_escalation;
mod least_kv;
mod least_loaded;
mod least_outstanding;
mod plugin;
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

pub use crate::catalog::{
    Active, BuildError, Catalog, Entry, GroupFacts, PolicyAppExt, PolicyArgs, PolicyFamily,
    PolicyInfo,
};
pub use always_admit::AlwaysAdmit;
pub use cached_blocks::{CachedBlocks, index_kv_events};
pub use check::{check, check_policy, unclassed_sources};
pub use least_loaded::LeastLoaded;
pub use plugin::PoliciesPlugin;
pub use priority::{Constant as ConstantPriority, default_class_priority};
pub use queue_order::Fcfs;
pub use reject_all::RejectAll;
pub use round_robin::RoundRobin;
pub use static_scale::StaticScale;

use crate::request::{PromptContent, RequestSpec};
use crate::time::{SimDuration, SimTime};

pub use crate::engine::InstanceSnapshot;

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
    /// Per instance, the LoRA adapters it serves (fresh, not staled; empty unless a group
    /// has `lora`).
    pub adapters: &'a [crate::engine::InstanceAdapters],
}

impl<'a> RouterView<'a> {
    /// A view without cache probing (tests, simple policies).
    pub fn of(instances: &'a [InstanceSnapshot]) -> Self {
        RouterView {
            instances,
            probe: &NoProbe,
            block_size: 16,
            adapters: &[],
        }
    }

    pub fn routable(&self) -> impl Iterator<Item = &'a InstanceSnapshot> + Clone {
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

pub type AdmissionEntry = Entry<dyn AdmissionPolicy>;
pub type RoutingEntry = Entry<dyn RoutingPolicy>;
pub type ScaleEntry = Entry<dyn ScalePolicy>;
pub type PriorityEntry = Entry<dyn PriorityPolicy>;
pub type QueueOrderEntry = Entry<dyn QueueOrder>;

/// The cluster-wide policy families (marker types for [`Catalog`], [`Active`] and
/// [`PolicyAppExt::add_policy`]); each is named after its `policies.<name>` field.
pub mod family {
    use super::*;

    /// A marker type for a family: its doc, trait object and name.
    macro_rules! family {
        ($(#[$doc:meta])* $marker:ident: $policy:ty, $name:literal) => {
            $(#[$doc])*
            pub struct $marker;
            impl PolicyFamily for $marker {
                type Policy = $policy;
                const NAME: &'static str = $name;
            }
        };
    }

    family!(
        /// `policies.admission`: [`AdmissionPolicy`].
        Admission: dyn AdmissionPolicy, "admission"
    );
    family!(
        /// `policies.priority`: [`PriorityPolicy`].
        Priority: dyn PriorityPolicy, "priority"
    );
    family!(
        /// `policies.scheduling`: the instance wait-queue order, [`QueueOrder`].
        Scheduling: dyn QueueOrder, "scheduling"
    );
    family!(
        /// `policies.routing` (and `policies.decode_routing`): [`RoutingPolicy`].
        Routing: dyn RoutingPolicy, "routing"
    );
    family!(
        /// `policies.autoscale`: [`ScalePolicy`].
        Autoscale: dyn ScalePolicy, "autoscale"
    );
}

/// How a router breaks ties: the best of the candidates (index, value) — the highest value
/// with `High`, the lowest with `Low` — and among equals the first index after the previous
/// pick, wrapping round, so that equal instances are taken in turn and an idle cluster is
/// filled evenly rather than from the lowest index. Remembers the pick.
#[derive(Clone, Copy, Debug, Default)]
pub struct InTurn {
    last: Option<u32>,
}

/// Which end of the values is best, for [`InTurn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Best {
    High,
    Low,
}

impl InTurn {
    pub fn pick<T: PartialOrd + Copy>(
        &mut self,
        candidates: impl Iterator<Item = (u32, T)> + Clone,
        best: Best,
    ) -> Option<u32> {
        let better = |a: T, b: T| match best {
            Best::High => a > b,
            Best::Low => a < b,
        };
        let top = candidates
            .clone()
            .map(|c| c.1)
            .reduce(|a, b| if better(b, a) { b } else { a })?;
        let tied = || candidates.clone().filter(move |c| c.1 == top).map(|c| c.0);
        let last = self.last;
        let chosen = tied()
            .find(|&i| last.is_none_or(|l| i > l))
            .or_else(|| tied().next())?;
        self.last = Some(chosen);
        Some(chosen)
    }
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
        adapter: None,
    }
}
