//! The policies plugin: the built-in members of the cluster-wide families, registered in
//! the [`Catalog`].

use bevy_app::{App, Plugin};

use super::{
    always_admit, always_busiest, cost_escalation, family, least_kv, least_loaded,
    least_outstanding, prefix_aware, prefix_overlap, priority, queue_order, random, reject_all,
    round_robin, scaling, session_affinity, static_scale, tenant_quota, token_bucket, weighted,
};
use crate::catalog::{Catalog, PolicyAppExt};

/// Registers the built-in members of the five cluster-wide families in the [`Catalog`]; no
/// systems. Each family's active member is built by the setup step of the plugin that uses
/// it (admission, routing, instance, autoscale).
pub struct PoliciesPlugin;

impl Plugin for PoliciesPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<Catalog>()
            .add_policy::<family::Admission>(always_admit::ENTRY)
            .add_policy::<family::Admission>(reject_all::ENTRY)
            .add_policy::<family::Admission>(token_bucket::ENTRY)
            .add_policy::<family::Admission>(tenant_quota::ENTRY)
            .add_policy::<family::Priority>(priority::CONSTANT)
            .add_policy::<family::Priority>(priority::SLO_BASED)
            .add_policy::<family::Priority>(priority::INVERTED_SLO)
            .add_policy::<family::Scheduling>(queue_order::FCFS)
            .add_policy::<family::Scheduling>(queue_order::PRIORITY_FCFS)
            .add_policy::<family::Scheduling>(queue_order::SJF)
            .add_policy::<family::Scheduling>(queue_order::REVERSE_PRIORITY)
            .add_policy::<family::Routing>(round_robin::ENTRY)
            .add_policy::<family::Routing>(random::ENTRY)
            .add_policy::<family::Routing>(least_loaded::ENTRY)
            .add_policy::<family::Routing>(least_outstanding::ENTRY)
            .add_policy::<family::Routing>(least_kv::ENTRY)
            .add_policy::<family::Routing>(always_busiest::ENTRY)
            .add_policy::<family::Routing>(session_affinity::ENTRY)
            .add_policy::<family::Routing>(cost_escalation::ENTRY)
            .add_policy::<family::Routing>(prefix_overlap::ENTRY)
            .add_policy::<family::Routing>(prefix_aware::ENTRY)
            .add_policy::<family::Routing>(weighted::ENTRY)
            .add_policy::<family::Autoscale>(static_scale::ENTRY)
            .add_policy::<family::Autoscale>(scaling::THRESHOLD)
            .add_policy::<family::Autoscale>(scaling::TARGET_TRACKING)
            .add_policy::<family::Autoscale>(scaling::SLO_AWARE)
            .add_policy::<family::Autoscale>(scaling::SCHEDULED);
    }
}
