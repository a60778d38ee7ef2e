use super::*;
use crate::scenario::{NodeFigures, PlacementSpec, TopologySpec};

fn h100() -> Option<NodeFigures> {
    Some(NodeFigures {
        gpus: 8,
        nvlink_gb_per_s: 450.0,
        nic_gb_per_s: Some(50.0),
    })
}

fn group(gpus: u32, instances: u32) -> GroupShape {
    GroupShape {
        gpus,
        instances,
        gpu: "H100".into(),
        node: h100(),
    }
}

#[test]
fn pack_fills_each_node_before_the_next_and_never_splits_an_instance() {
    // 3 × TP2, then 2 × TP4: nodes of 8 hold 2+2+2 (+ no room for a TP4), then 4+4.
    let t = Topology::build(&TopologySpec::default(), &[group(2, 3), group(4, 2)], false);
    let nodes: Vec<u32> = t.places.iter().map(|p| p.node).collect();
    assert_eq!(nodes, [0, 0, 0, 1, 1]);
    assert_eq!(t.nodes, 2);
    // Each instance's NIC carries 50 GB/s per GPU.
    let nic = &t.fabric.links[t.places[3].nic.0 as usize];
    assert_eq!(nic.bytes_per_us, 4.0 * 50e3);
}

#[test]
fn a_group_can_start_on_its_own_node_or_rack_and_wide_instances_take_whole_nodes() {
    let spec = TopologySpec {
        nodes_per_rack: Some(2),
        placement: PlacementSpec::RackPerGroup,
        ..Default::default()
    };
    // Group 0: one TP1 (node 0, rack 0). Group 1: a TP16 (nodes 2–3, rack 1), then a TP8.
    let t = Topology::build(&spec, &[group(1, 1), group(16, 1), group(8, 1)], false);
    let at: Vec<(u32, u32, u32)> = t.places.iter().map(|p| (p.node, p.rack, p.nodes)).collect();
    assert_eq!(at, [(0, 0, 1), (2, 1, 2), (4, 2, 1)]);
    // Nodes 1 and 5 are slots left empty to start a rack: 4 nodes in use, 3 racks.
    assert_eq!((t.nodes, t.racks_used()), (4, 3));
    let spec = TopologySpec {
        placement: PlacementSpec::NodePerGroup,
        ..Default::default()
    };
    let t = Topology::build(&spec, &[group(1, 2), group(1, 1)], false);
    let nodes: Vec<u32> = t.places.iter().map(|p| p.node).collect();
    assert_eq!(nodes, [0, 0, 1]);
}

#[test]
fn a_path_crosses_nvlink_in_a_node_nics_between_nodes_and_uplinks_between_racks() {
    let spec = TopologySpec {
        nodes_per_rack: Some(1),
        nvlink_latency_us: 1.0,
        nic_latency_us: 2.0,
        rack_latency_us: 3.0,
        ..Default::default()
    };
    // Instances 0, 1 on node 0 (TP4 each), instance 2 on node 1 (rack 1).
    let t = Topology::build(&spec, &[group(4, 3)], true);
    let (p01, l01) = t.path(0, 1);
    assert_eq!(p01, [t.places[0].nvlink.0, t.places[1].nvlink.1]);
    assert_eq!(l01, 1.0);
    let (p02, l02) = t.path(0, 2);
    assert_eq!(
        p02,
        [
            t.places[0].nic.0,
            t.racks[0].0,
            t.racks[1].1,
            t.places[2].nic.1
        ]
    );
    assert_eq!(l02, 5.0);
    // The non-blocking default: a rack's uplink carries its node's eight NICs.
    assert_eq!(
        t.fabric.links[t.racks[0].0 as usize].bytes_per_us,
        8.0 * 50e3
    );
    let (w, r, l) = t.store_paths(2);
    assert_eq!(w, [t.places[2].nic.0, t.racks[1].0]);
    assert_eq!(r, [t.places[2].nic.1, t.racks[1].1]);
    assert_eq!(l, 5.0);
}

#[test]
fn a_tp_group_across_two_nodes_all_reduces_hierarchically() {
    // TP16 over two 8-GPU nodes, NVLink bus 360, NIC bus 40 GB/s: per byte
    // 2·7/8/360 + 2·1/2/(8·40) = 0.0048611 + 0.003125 = 0.0079861 s/GB, so the bus
    // bandwidth the roofline's 2(tp−1)/tp formula takes is (30/16) / 0.0079861 = 234.78.
    let bus = cross_node_allreduce(16, 8, 360.0, 40.0);
    assert!((bus - 234.78).abs() < 0.01, "{bus}");
    assert_eq!(cross_node_allreduce(8, 8, 360.0, 40.0), 360.0);
}
