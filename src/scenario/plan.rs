//! `plan`: the search space of `servesim plan` (which configurations of one instance group
//! to price against the scenario's SLOs at its workload's rate).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The configurations `servesim plan` considers: the cartesian product of every list given
/// (a list left out is the group's own value), each at 1..=`max_instances` instances.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// Index of the instance group planned. Default 0.
    #[serde(default)]
    pub group: usize,
    /// GPUs (bundled ids or aliases, `servesim list hardware`).
    #[serde(default)]
    pub gpus: Vec<String>,
    /// Tensor-parallel degrees.
    #[serde(default)]
    pub tp: Vec<u32>,
    /// Pipeline-parallel degrees.
    #[serde(default)]
    pub pp: Vec<u32>,
    #[serde(default)]
    pub max_num_seqs: Vec<u32>,
    #[serde(default)]
    pub max_num_batched_tokens: Vec<u32>,
    /// Batch schedulers (`servesim list schedulers`).
    #[serde(default)]
    pub schedulers: Vec<String>,
    /// Routing policies (`policies.routing`).
    #[serde(default)]
    pub routing: Vec<String>,
    /// Prefill/decode splits to consider when the planned group is a `Prefill` group:
    /// `(prefill, decode)` instances per unit, e.g. `[(1, 1), (1, 3)]`; each configuration is
    /// then sized in units, and the scenario's `Decode` group runs the same configuration.
    /// Empty (the default): the planned group alone is sized.
    #[serde(default)]
    pub pd_splits: Vec<(u32, u32)>,
    /// The most instances (units, with `pd_splits`) of one configuration. Default 64.
    #[serde(default = "default_max_instances")]
    pub max_instances: u32,
    /// Price of one GPU-hour by GPU, overriding the bundled defaults
    /// (`assets/prices.ron`, with their sources).
    #[serde(default)]
    pub prices: BTreeMap<String, f64>,
    /// What "cheapest" means. Default `CostPerHour`.
    #[serde(default)]
    pub objective: PlanObjective,
    /// A price per hour no answer may exceed: the search starts with it as the best found,
    /// so nothing dearer is run. Give every shard the same bound (e.g. the deployment run
    /// today, or a budget) and the shards prune as one search does. A bound below the
    /// cheapest answer leaves nothing that meets the SLOs. Default none.
    #[serde(default)]
    pub bound: Option<f64>,
}

fn default_max_instances() -> u32 {
    64
}

/// What `servesim plan` minimises.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub enum PlanObjective {
    /// The deployment's price per hour: instances × GPUs per instance × price per GPU-hour.
    #[default]
    CostPerHour,
    /// Its price per million output tokens served at the workload's rate.
    CostPerMillionTokens,
}
