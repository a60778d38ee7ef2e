//! `policies`: the cluster-wide policies by name, their parameters, the control plane's
//! delays and the SLO classes.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Cluster-level policies, by catalog name (`servesim list policies`), with parameters.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySpec {
    /// Admission policy. Default `always_admit`.
    pub admission: String,
    pub admission_params: BTreeMap<String, f64>,
    /// Request priority policy. Default `constant`.
    pub priority: String,
    pub priority_params: BTreeMap<String, f64>,
    /// Instance wait-queue order. Default `fcfs`.
    pub scheduling: String,
    /// Which running request is preempted when KV runs out. Default `Tail`.
    pub preemption: PreemptionOrder,
    /// Routing policy. Default `round_robin`.
    pub routing: String,
    pub routing_params: BTreeMap<String, f64>,
    /// Routing policy that picks the decode instance of a prefilled request (P/D
    /// disaggregation; any routing policy, over `Decode` instances only). Default `least_kv`.
    pub decode_routing: String,
    pub decode_routing_params: BTreeMap<String, f64>,
    /// Autoscaling policy. Default `static`.
    pub autoscale: String,
    pub autoscale_params: BTreeMap<String, f64>,
    /// Delay between arrival and the admission decision (µs). Default 0.
    pub admission_latency_us: u64,
    /// Delay between the routing decision and reaching the instance (µs). Default 0.
    pub routing_latency_us: u64,
    /// How often routers re-read instance-reported signals (µs); 0 = live. Default 0.
    pub snapshot_refresh_interval_us: u64,
    /// SLO classes: priority and latency targets for attainment (goodput).
    pub slo_classes: Vec<SloClassSpec>,
}

impl Default for PolicySpec {
    fn default() -> Self {
        PolicySpec {
            admission: "always_admit".into(),
            admission_params: BTreeMap::new(),
            priority: "constant".into(),
            priority_params: BTreeMap::new(),
            scheduling: "fcfs".into(),
            preemption: PreemptionOrder::Tail,
            routing: "round_robin".into(),
            routing_params: BTreeMap::new(),
            decode_routing: "least_kv".into(),
            decode_routing_params: BTreeMap::new(),
            autoscale: "static".into(),
            autoscale_params: BTreeMap::new(),
            admission_latency_us: 0,
            routing_latency_us: 0,
            snapshot_refresh_interval_us: 0,
            slo_classes: Vec::new(),
        }
    }
}

/// Preemption victim choice.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum PreemptionOrder {
    /// The tail of the running batch (vLLM).
    #[default]
    Tail,
    /// The lowest-priority running request (latest arrival among equals).
    Priority,
}

/// An SLO class: its priority and its latency targets (unset = no target).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SloClassSpec {
    pub name: String,
    /// Default: critical 4, standard 3, batch −1, sheddable −2, background −3, others 3.
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Target on the request's mean inter-token latency.
    #[serde(default)]
    pub itl_ms: Option<f64>,
    #[serde(default)]
    pub e2e_ms: Option<f64>,
    /// The fraction of the class's requests that must meet every target for the SLO to
    /// hold (`capacity` searches for the largest rate at which it does): 0.99 makes the
    /// targets p99 targets. Default 0.99.
    #[serde(default)]
    pub attainment: Option<f64>,
}

/// The attainment an SLO class must reach when it does not say ([`SloClassSpec::attainment`]).
pub const DEFAULT_ATTAINMENT: f64 = 0.99;

impl SloClassSpec {
    /// Whether the class declares any latency target.
    pub fn has_targets(&self) -> bool {
        self.ttft_ms.is_some() || self.itl_ms.is_some() || self.e2e_ms.is_some()
    }
}
