//! The network between nodes (`cluster.topology`): where each instance sits (node, rack) and
//! the links its KV transfers cross, shared with every other transfer that crosses them.
//!
//! Levels, each a pair of links (one per direction) with a bandwidth:
//! - **NVLink** of an instance: `nvlink_gb_per_s` × its GPUs, used by a transfer to another
//!   instance of the same node;
//! - **NIC** of an instance: `nic_gb_per_s` × its GPUs (one RDMA NIC per GPU, as in a DGX),
//!   used by a transfer to another node or to the shared KV store;
//! - **rack uplink**: `rack_uplink_gb_per_s` per rack, used by every transfer that leaves or
//!   enters the rack (to another rack, to and from the store, which sits at the spine);
//! - **store**: the shared KV store's own bandwidth (`store_gb_per_s`), when given.
//!
//! A transfer reserves its path on the [`Fabric`] when it starts: first come, first served per
//! link, a later transfer gets what the earlier ones leave free (so two transfers of the same
//! size on one link end at one and two times the time of one). Its finish time is known when it
//! starts, so a step that waits for a load is priced at once. Who uses it: P/D KV transfers
//! ([`crate::disagg`]), writes to and loads from the shared store ([`crate::kv::StoreLink`]).
//! Cross-node tensor parallelism is priced by the latency model (see [`cross_node_allreduce`]).
//! Its summary part is the metrics plugin's (`metrics/network.rs`).

mod fabric;
mod place;
#[cfg(test)]
mod tests;

pub use fabric::{Fabric, Link, LinkId, Reserved};
pub use place::{GroupShape, Place, Topology, check};

use std::sync::{Arc, Mutex};

/// The cluster's topology and the shared fabric (a resource when the scenario has a
/// `cluster.topology`).
#[derive(bevy_ecs::resource::Resource, Clone, Debug)]
pub struct Network {
    pub topology: Arc<Topology>,
    pub fabric: Arc<Mutex<Fabric>>,
}

impl Network {
    pub fn new(topology: Topology) -> Self {
        let fabric = Arc::new(Mutex::new(topology.fabric.clone()));
        Network {
            topology: Arc::new(topology),
            fabric,
        }
    }

    /// The fabric's lock: the simulation runs on one thread, so it is never contended.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Fabric> {
        lock(&self.fabric)
    }
}

/// The fabric's lock (never contended: one thread).
pub fn lock(fabric: &Mutex<Fabric>) -> std::sync::MutexGuard<'_, Fabric> {
    fabric
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An instance's way to the shared KV store over the fabric.
#[derive(Clone, Debug)]
pub struct StorePath {
    pub fabric: Arc<Mutex<Fabric>>,
    /// Instance → store, and back.
    pub write: Vec<LinkId>,
    pub read: Vec<LinkId>,
    /// Latency the levels add, µs.
    pub latency_us: f64,
    /// Bytes of one KV block.
    pub block_bytes: f64,
}

impl StorePath {
    /// When `blocks` blocks sent from `start_us` on are through (µs).
    pub fn send(&self, read: bool, now_us: u64, start_us: u64, blocks: u32) -> u64 {
        let path = if read { &self.read } else { &self.write };
        lock(&self.fabric)
            .reserve(
                path,
                now_us,
                start_us,
                f64::from(blocks) * self.block_bytes,
                f64::INFINITY,
            )
            .done_us
    }
}

/// Loading an instance's weights over the fabric (an autoscaled start or a restart after a
/// crash, when the load time is derived): every GPU reads its share from storage at the spine
/// at the storage's per-GPU rate, over its NIC (and its rack's downlink), after what is
/// already on those links.
#[derive(Clone, Debug)]
pub struct WeightLoad {
    pub fabric: Arc<Mutex<Fabric>>,
    pub path: Vec<LinkId>,
    /// The instance's weights (all its GPUs' shares), bytes.
    pub bytes: f64,
    /// The storage's rate over all its GPUs, bytes per µs.
    pub cap: f64,
}

impl WeightLoad {
    /// When weights whose load starts at `start_us` are in (µs).
    pub fn done_us(&self, now_us: u64, start_us: u64) -> u64 {
        lock(&self.fabric)
            .reserve(&self.path, now_us, start_us, self.bytes, self.cap)
            .done_us
    }
}

impl Network {
    /// Instance `i`'s weight load of `bytes` read at `gb_per_s` per GPU over `gpus` GPUs.
    pub fn weight_load(&self, i: u32, bytes: f64, gb_per_s: f64, gpus: u32) -> WeightLoad {
        let place = self.topology.places[i as usize];
        let mut path = vec![place.nic.1];
        if let Some(&(_, down)) = self.topology.racks.get(place.rack as usize) {
            path.insert(0, down);
        }
        WeightLoad {
            fabric: self.fabric.clone(),
            path,
            bytes,
            cap: gb_per_s * 1e3 * f64::from(gpus.max(1)),
        }
    }
}

/// The all-reduce bus bandwidth of a TP group of `tp` GPUs under topology `t` (else the GPU
/// profile's node figures `node`), when it spans nodes; `None` when it fits in one.
pub fn spanning_allreduce(
    t: Option<&crate::scenario::TopologySpec>,
    node: Option<&crate::scenario::NodeFigures>,
    tp: u32,
    physics: &crate::model::GpuPhysics,
) -> Option<f64> {
    let gpn = t.and_then(|t| t.gpus_per_node).or(node.map(|n| n.gpus))?;
    let nic = t
        .and_then(|t| t.nic_gb_per_s)
        .or(node.and_then(|n| n.nic_gb_per_s))?;
    (tp > gpn)
        .then(|| cross_node_allreduce(tp, gpn, physics.allreduce_gb_per_s, NIC_BUS_SHARE * nic))
}

/// Share of a NIC's line rate an all-reduce's bus bandwidth reaches: the H100's measured
/// share of its NVLink (360 of 450 GB/s per direction), as `assets/gpus.ron` assumes for
/// every fabric it has not measured.
pub const NIC_BUS_SHARE: f64 = 0.8;

/// Achieved bus bandwidth of a tensor-parallel all-reduce over `tp` GPUs that spans nodes of
/// `gpus_per_node`, GB/s, priced as NCCL's hierarchical pattern: reduce-scatter and
/// all-gather inside each node over NVLink at `nvlink_bus` (the GPU's measured all-reduce
/// bus bandwidth), and between nodes an all-reduce of each GPU's 1/`gpus_per_node` share over
/// its own NIC at `nic_bus`:
/// `t = 2(g−1)/g · B/nvlink_bus + 2(m−1)/m · (B/g)/nic_bus`, with `m = tp / g` nodes, returned
/// as the bus bandwidth `2(tp−1)/tp · B / t` the roofline's formula takes. `tp ≤ g`: `nvlink_bus`.
pub fn cross_node_allreduce(tp: u32, gpus_per_node: u32, nvlink_bus: f64, nic_bus: f64) -> f64 {
    let g = f64::from(gpus_per_node.max(1));
    let tp = f64::from(tp.max(1));
    if tp <= g {
        return nvlink_bus;
    }
    let m = (tp / g).ceil();
    let per_byte = 2.0 * (g - 1.0) / g / nvlink_bus + 2.0 * (m - 1.0) / m / (g * nic_bus);
    2.0 * (tp - 1.0) / tp / per_byte
}
