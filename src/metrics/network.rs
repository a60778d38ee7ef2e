//! The network's part of the summary (placement, load per level), registered by the
//! metrics plugin: the [`Network`] is built with the instances and used by the transfers,
//! and stays below the stages (it imports no summary type).

use super::{LevelSummary, NetworkSummary, PlaceSummary, Summary};
use crate::network::Network;

/// `summary.network`: each instance's place and each level's load over the run.
pub fn summarize(world: &mut bevy_ecs::world::World, summary: &mut Summary) {
    let Some(net) = world.get_resource::<Network>() else {
        return;
    };
    let t = &net.topology;
    let fabric = net.lock();
    let end_us = (summary.sim_duration_s * 1e6).round() as u64;
    let mut levels: Vec<LevelSummary> = Vec::new();
    for (id, link) in fabric.links.iter().enumerate() {
        let util = fabric.utilisation(id as crate::network::LinkId, end_us);
        let level = match levels.iter_mut().find(|l| l.level == link.level) {
            Some(l) => l,
            None => {
                levels.push(LevelSummary {
                    level: link.level.into(),
                    ..Default::default()
                });
                levels.last_mut().expect("just pushed")
            }
        };
        level.links += 1;
        level.transfers += link.transfers;
        level.gb += link.bytes / 1e9;
        level.utilisation_mean += util;
        if util > level.utilisation_max || level.busiest.is_empty() {
            level.utilisation_max = util;
            level.busiest = link.name.clone();
        }
    }
    for l in &mut levels {
        l.utilisation_mean /= f64::from(l.links.max(1));
    }
    summary.network = Some(NetworkSummary {
        nodes: t.nodes,
        racks: t.racks_used(),
        placement: t.placement.name().into(),
        instances: t
            .places
            .iter()
            .enumerate()
            .map(|(i, p)| PlaceSummary {
                instance: i as u32,
                node: p.node,
                rack: p.rack,
                nodes: p.nodes,
            })
            .collect(),
        levels,
    });
}
