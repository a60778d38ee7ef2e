//! Placing instances on nodes and racks, and building the links between them.

use super::fabric::{Fabric, LinkId};
use crate::scenario::{NodeFigures, PlacementSpec, Problem, Scenario, TopologySpec};

/// One group as the topology sees it.
#[derive(Clone, Debug)]
pub struct GroupShape {
    /// GPUs of one instance (`tp × pp`).
    pub gpus: u32,
    /// Instances spawned (an autoscaled group's `max`).
    pub instances: u32,
    /// Its GPU's id (nodes hold one kind of GPU) and usual node.
    pub gpu: String,
    pub node: Option<NodeFigures>,
}

impl GroupShape {
    /// Group `g` as the topology sees it, on GPU `gpu` (its resolved profile).
    pub fn of(g: &crate::scenario::InstanceGroup, gpu: Option<&crate::model::GpuProfile>) -> Self {
        GroupShape {
            gpus: g.gpus(),
            instances: g.scaling.as_ref().map_or(g.count, |s| s.max),
            gpu: gpu.map_or_else(String::new, |p| p.id.clone()),
            node: gpu.and_then(|p| p.node),
        }
    }
}

/// Where one instance sits and its own links.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    /// Its (first) node and rack.
    pub node: u32,
    pub rack: u32,
    /// Nodes it spans (more than one only when it has more GPUs than a node).
    pub nodes: u32,
    /// NVLink out and in, NIC out and in.
    pub nvlink: (LinkId, LinkId),
    pub nic: (LinkId, LinkId),
}

/// The placed cluster: each instance's place and the links of every level.
#[derive(Clone, Debug)]
pub struct Topology {
    /// The links, none reserved yet.
    pub fabric: Fabric,
    /// By instance index.
    pub places: Vec<Place>,
    /// Each rack's uplink (up, down); empty when one rack holds every node.
    pub racks: Vec<(LinkId, LinkId)>,
    /// The store's own bandwidth (in, out), when limited.
    pub store: Option<(LinkId, LinkId)>,
    /// Nodes in use.
    pub nodes: u32,
    pub nvlink_latency_us: f64,
    pub nic_latency_us: f64,
    pub rack_latency_us: f64,
    /// Per group: (GPUs per node, NVLink GB/s per GPU, NIC GB/s per GPU) used.
    pub figures: Vec<(u32, f64, f64)>,
    pub placement: PlacementSpec,
}

/// The node figures group `node` gets: the scenario's, else its GPU's; the fields neither
/// gives, as problems.
fn figures(
    spec: &TopologySpec,
    node: Option<&NodeFigures>,
) -> Result<(u32, f64, f64), Vec<&'static str>> {
    let gpus = spec.gpus_per_node.or(node.map(|n| n.gpus));
    let nvlink = spec.nvlink_gb_per_s.or(node.map(|n| n.nvlink_gb_per_s));
    let nic = spec.nic_gb_per_s.or(node.and_then(|n| n.nic_gb_per_s));
    match (gpus, nvlink, nic) {
        (Some(g), Some(v), Some(n)) => Ok((g, v, n)),
        _ => Err([
            ("gpus_per_node", gpus.is_none()),
            ("nvlink_gb_per_s", nvlink.is_none()),
            ("nic_gb_per_s", nic.is_none()),
        ]
        .into_iter()
        .filter(|x| x.1)
        .map(|x| x.0)
        .collect()),
    }
}

impl Topology {
    /// Places `groups`' instances in order and builds the links. `figures` must have been
    /// checked ([`check`]); a group without them is given 1-GPU nodes of 1 GB/s links.
    pub fn build(spec: &TopologySpec, groups: &[GroupShape], store: bool) -> Topology {
        let per_rack = spec.nodes_per_rack;
        let mut fabric = Fabric::default();
        let mut places = Vec::new();
        let mut figs = Vec::new();
        // Nodes: (GPU kind, free GPUs, NIC GB/s per GPU, GPUs).
        let mut nodes: Vec<(String, u32, f64, u32)> = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            let (gpn, nvlink, nic) = figures(spec, group.node.as_ref()).unwrap_or((1, 1.0, 1.0));
            figs.push((gpn, nvlink, nic));
            let gpn = gpn.max(1);
            // Where this group may start: on a fresh node or rack, or anywhere.
            let floor = match spec.placement {
                PlacementSpec::Pack => 0,
                _ if g == 0 => 0,
                PlacementSpec::NodePerGroup => nodes.len(),
                PlacementSpec::RackPerGroup => {
                    let r = per_rack.unwrap_or(1).max(1) as usize;
                    nodes.len().div_ceil(r) * r
                }
            };
            for k in 0..group.instances {
                let need = group.gpus.max(1);
                let span = need.div_ceil(gpn);
                let at = if span == 1 {
                    nodes
                        .iter()
                        .enumerate()
                        .skip(floor)
                        .find(|(_, n)| n.0 == group.gpu && n.1 >= need)
                        .map(|(i, _)| i)
                } else {
                    None
                };
                let node = match at {
                    Some(i) => i,
                    None => {
                        // New whole nodes, after empty padding nodes up to the floor.
                        while nodes.len() < floor {
                            nodes.push((String::new(), 0, 0.0, 0));
                        }
                        let first = nodes.len();
                        for _ in 0..span {
                            nodes.push((group.gpu.clone(), gpn, nic, gpn));
                        }
                        first
                    }
                };
                for n in &mut nodes[node..node + span as usize] {
                    n.1 = n.1.saturating_sub(need.min(gpn));
                }
                let i = places.len();
                let gpus = f64::from(need);
                let name = |what: &str| format!("{what} of instance {i} (group {g}, #{k})");
                places.push(Place {
                    node: node as u32,
                    rack: per_rack.map_or(0, |r| node as u32 / r.max(1)),
                    nodes: span,
                    nvlink: (
                        fabric.add_link(name("NVLink out"), "nvlink", nvlink * gpus),
                        fabric.add_link(name("NVLink in"), "nvlink", nvlink * gpus),
                    ),
                    nic: (
                        fabric.add_link(name("NIC out"), "nic", nic * gpus),
                        fabric.add_link(name("NIC in"), "nic", nic * gpus),
                    ),
                });
            }
        }
        let mut racks = Vec::new();
        if let Some(r) = per_rack {
            let r = r.max(1) as usize;
            for (k, chunk) in nodes.chunks(r).enumerate() {
                let full: f64 = chunk.iter().map(|n| n.2 * f64::from(n.3)).sum();
                let gb = spec
                    .rack_uplink_gb_per_s
                    .unwrap_or(full)
                    .max(f64::MIN_POSITIVE);
                racks.push((
                    fabric.add_link(format!("uplink of rack {k}"), "rack", gb),
                    fabric.add_link(format!("downlink of rack {k}"), "rack", gb),
                ));
            }
        }
        let store = match (store, spec.store_gb_per_s) {
            (true, Some(gb)) => Some((
                fabric.add_link("KV store in".into(), "store", gb),
                fabric.add_link("KV store out".into(), "store", gb),
            )),
            _ => None,
        };
        Topology {
            fabric,
            places,
            racks,
            store,
            // Slots a group skipped to start on a fresh rack hold no GPUs: not nodes in use.
            nodes: nodes.iter().filter(|n| n.3 > 0).count() as u32,
            nvlink_latency_us: spec.nvlink_latency_us,
            nic_latency_us: spec.nic_latency_us,
            rack_latency_us: spec.rack_latency_us,
            figures: figs,
            placement: spec.placement,
        }
    }

    /// The links a transfer from instance `from` to instance `to` crosses, and the latency
    /// their levels add (µs): NVLink inside a node, NICs between nodes, the two racks'
    /// uplinks between racks.
    pub fn path(&self, from: u32, to: u32) -> (Vec<LinkId>, f64) {
        let (a, b) = (self.places[from as usize], self.places[to as usize]);
        if a.node == b.node && a.nodes == 1 && b.nodes == 1 {
            return (vec![a.nvlink.0, b.nvlink.1], self.nvlink_latency_us);
        }
        if a.rack == b.rack || self.racks.is_empty() {
            return (vec![a.nic.0, b.nic.1], self.nic_latency_us);
        }
        (
            vec![
                a.nic.0,
                self.racks[a.rack as usize].0,
                self.racks[b.rack as usize].1,
                b.nic.1,
            ],
            self.nic_latency_us + self.rack_latency_us,
        )
    }

    /// The links from instance `i` to the store (at the spine, outside every rack) and
    /// back, and the latency their levels add (µs).
    pub fn store_paths(&self, i: u32) -> (Vec<LinkId>, Vec<LinkId>, f64) {
        let a = self.places[i as usize];
        let (mut write, mut read) = (vec![a.nic.0], vec![a.nic.1]);
        let mut latency = self.nic_latency_us;
        if let Some(&(up, down)) = self.racks.get(a.rack as usize) {
            write.push(up);
            read.push(down);
            latency += self.rack_latency_us;
        }
        if let Some((sin, sout)) = self.store {
            write.push(sin);
            read.push(sout);
        }
        (write, read, latency)
    }

    /// Racks in use.
    pub fn racks_used(&self) -> u32 {
        self.places.iter().map(|p| p.rack + 1).max().unwrap_or(0)
    }
}

/// `cluster.topology`'s problems; `nodes[i]` is group i's GPU's node figures (`None`: the
/// group did not resolve, so its figures are not checked).
pub fn check(p: &mut Vec<Problem>, s: &Scenario, nodes: &[Option<Option<NodeFigures>>]) {
    let Some(t) = &s.cluster.topology else {
        return;
    };
    let at = |f: &str| format!("cluster.topology.{f}");
    for (f, v) in [
        ("gpus_per_node", t.gpus_per_node),
        ("nodes_per_rack", t.nodes_per_rack),
    ] {
        if let Some(v) = v
            && !(1..=4096).contains(&v)
        {
            p.push(Problem::new(
                at(f),
                format!("must be within 1..=4,096, got {v}"),
            ));
        }
    }
    for (f, v) in [
        ("nvlink_gb_per_s", t.nvlink_gb_per_s),
        ("nic_gb_per_s", t.nic_gb_per_s),
        ("rack_uplink_gb_per_s", t.rack_uplink_gb_per_s),
        ("store_gb_per_s", t.store_gb_per_s),
    ] {
        if let Some(v) = v {
            crate::scenario::gb_per_s(p, &at(f), v);
        }
    }
    for (f, v) in [
        ("nvlink_latency_us", t.nvlink_latency_us),
        ("nic_latency_us", t.nic_latency_us),
        ("rack_latency_us", t.rack_latency_us),
    ] {
        crate::scenario::latency_us(p, &at(f), v);
    }
    if t.rack_uplink_gb_per_s.is_some() && t.nodes_per_rack.is_none() {
        p.push(
            Problem::new(
                at("rack_uplink_gb_per_s"),
                "has no rack to apply to: every node is in one rack without `nodes_per_rack`",
            )
            .hint("give nodes_per_rack, e.g. nodes_per_rack: 4"),
        );
    }
    if t.placement == PlacementSpec::RackPerGroup && t.nodes_per_rack.is_none() {
        p.push(
            Problem::new(
                at("placement"),
                "`RackPerGroup` needs racks: give `nodes_per_rack`",
            )
            .hint("e.g. nodes_per_rack: 4"),
        );
    }
    if t.store_gb_per_s.is_some() && s.cluster.kv_store.is_none() {
        p.push(
            Problem::new(
                at("store_gb_per_s"),
                "there is no `cluster.kv_store` to limit",
            )
            .hint("add cluster.kv_store, or remove store_gb_per_s"),
        );
    }
    if let Some(st) = &s.cluster.kv_store
        && st.link_gb_per_s.is_some()
    {
        p.push(
            Problem::new(
                "cluster.kv_store.link_gb_per_s",
                "is not used with `cluster.topology`: the store is reached over each GPU's NIC (`topology.nic_gb_per_s`) and the rack uplinks",
            )
            .hint("remove it; limit the store itself with topology.store_gb_per_s"),
        );
    }
    for (i, g) in s.cluster.groups.iter().enumerate() {
        if g.kv_link_gb_per_s.is_some() {
            p.push(
                Problem::new(
                    format!("cluster.groups[{i}].kv_link_gb_per_s"),
                    "is not used with `cluster.topology`: KV transfers cross NVLink inside a node and the NICs between nodes (`topology.nvlink_gb_per_s`, `nic_gb_per_s`)",
                )
                .hint("remove it, or set the topology's links"),
            );
        }
        let Some(node) = nodes.get(i).copied().flatten() else {
            continue;
        };
        if let Err(missing) = figures(t, node.as_ref()) {
            let gpu = g.gpu.as_deref().unwrap_or("none");
            for f in missing {
                p.push(
                    Problem::new(
                        at(f),
                        format!(
                            "is needed: group {i}'s GPU ({gpu}) has no default for it (`list hardware` shows the GPUs with node figures)"
                        ),
                    )
                    .hint(format!("give it, e.g. {f}: {}", example(f))),
                );
            }
        }
    }
}

fn example(field: &str) -> &'static str {
    match field {
        "gpus_per_node" => "8",
        "nvlink_gb_per_s" => "450.0",
        _ => "50.0",
    }
}
