//! `cluster.topology`: the nodes and racks the instances sit on and the links between them,
//! and the node figures of a GPU profile (its defaults).

use serde::{Deserialize, Serialize};

/// Where the instances sit and what connects them (`cluster.topology`). Absent: every
/// instance has its own links (`kv_link_gb_per_s`, the store's `link_gb_per_s`) that no other
/// instance shares. Present: KV transfers between instances, and to and from the shared KV
/// store, cross the links of the levels between them and share them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// GPUs of one node, all joined by the node's NVLink (or Infinity Fabric) domain.
    /// Default: the GPU profile's `node.gpus`.
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
    /// Nodes of one rack, which share the rack's uplink. Default: one rack holds every node
    /// (no uplink).
    #[serde(default)]
    pub nodes_per_rack: Option<u32>,
    /// Each GPU's NVLink bandwidth inside its node, per direction, GB/s. Default: the GPU
    /// profile's `node.nvlink_gb_per_s`.
    #[serde(default)]
    pub nvlink_gb_per_s: Option<f64>,
    /// Each GPU's network card (RDMA NIC) between nodes, per direction, GB/s. Default: the
    /// GPU profile's `node.nic_gb_per_s`.
    #[serde(default)]
    pub nic_gb_per_s: Option<f64>,
    /// A rack's uplink to the spine, per direction, GB/s. Default: non-blocking, the sum of
    /// its nodes' NICs (as in NVIDIA's DGX SuperPOD full fat-tree compute fabric); less is an
    /// oversubscribed rack.
    #[serde(default)]
    pub rack_uplink_gb_per_s: Option<f64>,
    /// Latency each level adds to a transfer that crosses it, µs (on top of the transfer's
    /// own set-up: `kv_link_latency_us`, the store's `latency_us`). Default 0.
    #[serde(default)]
    pub nvlink_latency_us: f64,
    #[serde(default)]
    pub nic_latency_us: f64,
    #[serde(default)]
    pub rack_latency_us: f64,
    /// The shared KV store's own bandwidth, each way, GB/s: what all instances' writes (and
    /// all their loads) share. Default: no limit of its own (its clients' links limit it).
    #[serde(default)]
    pub store_gb_per_s: Option<f64>,
    /// How instances are placed on nodes. Default `Pack`.
    #[serde(default)]
    pub placement: PlacementSpec,
}

/// How instances are placed (`cluster.topology.placement`). Instances are placed in group
/// order; an instance never straddles nodes unless it has more GPUs than a node (then it
/// takes whole nodes of its own).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum PlacementSpec {
    /// Each instance on the first node of its GPU with room for it.
    #[default]
    Pack,
    /// As `Pack`, but each group starts on a node of its own.
    NodePerGroup,
    /// As `Pack`, but each group starts in a rack of its own.
    RackPerGroup,
}

impl PlacementSpec {
    pub fn name(self) -> &'static str {
        match self {
            PlacementSpec::Pack => "pack",
            PlacementSpec::NodePerGroup => "node per group",
            PlacementSpec::RackPerGroup => "rack per group",
        }
    }
}

/// A GPU's usual node (`node` of a GPU profile): the defaults of `cluster.topology`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFigures {
    /// GPUs in one NVLink (or Infinity Fabric) domain.
    pub gpus: u32,
    /// Each GPU's bandwidth into that domain, per direction, GB/s.
    pub nvlink_gb_per_s: f64,
    /// Each GPU's NIC between nodes, per direction, GB/s; absent when no reference system
    /// fixes it.
    #[serde(default, deserialize_with = "some_f64")]
    pub nic_gb_per_s: Option<f64>,
}

/// Reads a number into an `Option` field without RON's implicit-`Some` (GPU files).
fn some_f64<'de, D>(d: D) -> Result<Option<f64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    f64::deserialize(d).map(Some)
}

/// Reads `node: (…)` into an `Option` field, with or without RON's implicit-`Some`.
pub fn deserialize_node<'de, D>(d: D) -> Result<Option<NodeFigures>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    NodeFigures::deserialize(d).map(Some)
}
