//! The instance plugin's part of setting a run up: its queue policies, then one entity per
//! instance of every group (with its limits, TP/PP, KV cache, latency model and batch
//! scheduler), the [`InstanceIndex`], the routers' [`ClusterView`] and the [`Groups`]
//! other concerns read (autoscaling, P/D links, outputs).

use bevy_app::App;

use super::schedulers::{BatchFormation, Batcher};
use super::{Instance, InstanceBundle, InstanceIndex, Limits, Scheduler, snapshot};
use crate::engine::ClusterView;
use crate::kv::{KvCache, KvRecipe};
use crate::labels::Labels;
use crate::policy::{Active, BuildError, GroupFacts, PolicyArgs, family};
use crate::scenario::InstanceGroup;
use crate::setup::ResolvedGroup;
use crate::setup::{SetupCtx, SetupError, SimError, build_policy};
use crate::time::SimDuration;

/// The instance groups as set up, in `cluster.groups` order.
#[derive(bevy_ecs::prelude::Resource, Default, Clone)]
pub struct Groups(pub Vec<GroupInfo>);

/// One instance group as set up.
#[derive(Clone)]
pub struct GroupInfo {
    /// `name`, or `group<i>`.
    pub name: String,
    /// Its model, GPU, KV capacity and latency model.
    pub resolved: ResolvedGroup,
    /// Its instances: `first..first + spawned` (an autoscaled group spawns `max`, of which
    /// the first `count` start on).
    pub first: u32,
    pub spawned: u32,
}

impl GroupInfo {
    /// Instance indices of the group.
    pub fn instances(&self) -> std::ops::Range<u32> {
        self.first..self.first + self.spawned
    }
}

/// The cluster's shared KV store (`cluster.kv_store`), when the scenario has one: its
/// contents and counts, and the link every GPU has to it.
#[derive(bevy_ecs::resource::Resource, Clone, Debug)]
pub struct SharedKvStore {
    pub store: std::sync::Arc<std::sync::Mutex<crate::kv::KvStore>>,
    pub link_gb_per_s: f64,
    pub latency_us: f64,
}

impl SharedKvStore {
    /// An empty store as `cluster.kv_store` describes it.
    pub fn new(spec: &crate::scenario::KvStoreSpec) -> Self {
        use crate::scenario::{Eviction, StoreWriteSpec};
        let write = match spec.write {
            StoreWriteSpec::WriteBack => crate::kv::StoreWrite::WriteBack,
            StoreWriteSpec::WriteThrough => crate::kv::StoreWrite::WriteThrough,
        };
        SharedKvStore {
            store: std::sync::Arc::new(std::sync::Mutex::new(crate::kv::KvStore::new(
                spec.blocks,
                write,
                spec.eviction == Eviction::Fifo,
            ))),
            link_gb_per_s: spec.link(),
            latency_us: spec.latency_us,
        }
    }

    /// µs to move one block of `group` over an instance's link to a store whose GPUs'
    /// links carry `link_gb_per_s`: the block's bytes (every layer and KV head) over its
    /// `tp × pp` GPUs' links in parallel.
    pub fn block_us(link_gb_per_s: f64, group: &InstanceGroup, resolved: &ResolvedGroup) -> f64 {
        let bytes = resolved.kv_bytes_per_token * f64::from(group.block_size);
        let gpus = f64::from(group.tp.max(1) * group.pp.max(1));
        bytes / (link_gb_per_s * 1e3 * gpus)
    }
}

/// How to build the KV cache of an instance of `group` (when it is, or comes, on).
pub fn kv_recipe(
    group: &InstanceGroup,
    resolved: &ResolvedGroup,
    store: Option<&SharedKvStore>,
    net: Option<&crate::network::Network>,
) -> KvRecipe {
    let block_bytes = resolved.kv_bytes_per_token * f64::from(group.block_size);
    KvRecipe {
        blocks: resolved.kv_blocks,
        block_size: group.block_size,
        cpu: resolved.cpu_tier.map(|(blocks, _, _)| {
            (
                blocks,
                SimDuration::from_secs_f64(group.cpu_kv_thrash_window_s).as_us(),
            )
        }),
        nvme: resolved.nvme_tier.map(|(blocks, _, _)| {
            (
                blocks,
                group.nvme_kv_eviction == crate::scenario::Eviction::Fifo,
            )
        }),
        store: store.map(|s| {
            let block_us = SharedKvStore::block_us(s.link_gb_per_s, group, resolved);
            (s.store.clone(), block_us, s.latency_us)
        }),
        store_net: store.and(net).map(|n| (n.clone(), block_bytes)),
        layout: resolved.kv_layout,
    }
}

/// `SetupStage::Policies`: the queue order and priority policies batch formation uses.
pub fn set_up_queue_policies(app: &mut App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let p = &ctx.scenario.policies;
    let labels = app.world().resource::<Labels>();
    let priority =
        build_policy::<family::Priority>(ctx, labels, "priority", &p.priority, &p.priority_params)?;
    let order = build_policy::<family::Scheduling>(
        ctx,
        labels,
        "scheduling",
        &p.scheduling,
        &Default::default(),
    )?;
    app.insert_resource(Active::<family::Priority>(priority))
        .insert_resource(Active::<family::Scheduling>(order))
        .insert_resource(super::schedulers::SchedulingConfig {
            preemption: p.preemption,
        });
    Ok(())
}

/// `SetupStage::Instances`: one entity per instance, group by group.
pub fn spawn_instances(app: &mut App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let scenario = ctx.scenario;
    let world = app.world_mut();
    let labels = world.resource::<Labels>().clone();
    let mut index = Vec::new();
    let mut view = Vec::new();
    let mut adapters = Vec::new();
    let mut groups = Vec::new();
    let store = scenario.cluster.kv_store.as_ref().map(SharedKvStore::new);
    if let Some(s) = &store {
        world.insert_resource(s.clone());
    }
    let net = scenario.cluster.topology.as_ref().map(|t| {
        let shapes: Vec<crate::network::GroupShape> = scenario
            .cluster
            .groups
            .iter()
            .zip(ctx.resolved)
            .map(|(g, r)| crate::network::GroupShape::of(g, r.gpu.as_ref()))
            .collect();
        crate::network::Network::new(crate::network::Topology::build(t, &shapes, store.is_some()))
    });
    if let Some(n) = &net {
        world.insert_resource(n.clone());
    }
    for (g, group) in scenario.cluster.groups.iter().enumerate() {
        let resolved = ctx.resolved[g].clone();
        let name = if group.name.is_empty() {
            format!("group{g}")
        } else {
            group.name.clone()
        };
        let spawned = group.scaling.as_ref().map_or(group.count, |s| s.max);
        let recipe = kv_recipe(group, &resolved, store.as_ref(), net.as_ref());
        let facts = GroupFacts {
            model: resolved.model.as_ref(),
            gpu: resolved.gpu.as_ref(),
            tp: group.tp.max(1),
            pp: group.pp.max(1),
        };
        let args = PolicyArgs::new(scenario.seed, &group.scheduler_params, &labels).in_group(facts);
        let first = index.len() as u32;
        // Speculative decoding, with its per-client rates placed by client index.
        let spec = resolved
            .speculative
            .as_ref()
            .map(|c| std::sync::Arc::new(c.for_clients(&scenario.client_names())));
        // Multi-LoRA, with every adapter's rank by index.
        let ranks: std::sync::Arc<[u32]> = scenario
            .workload
            .adapters
            .as_ref()
            .map_or_else(Vec::new, |a| a.all_ranks())
            .into();
        let traced = ctx.options.trace_decisions || scenario.outputs.decisions_csv;
        for k in 0..spawned {
            let i = index.len() as u32;
            let on = k < group.count;
            // An instance that is off holds no KV cache until it is provisioned.
            let kv = if on {
                recipe.build(i)
            } else {
                KvCache::new(0, group.block_size)
            };
            let scheduler = Scheduler {
                unroutable: !on,
                anomaly_rows: traced.then(Vec::new),
                spec: spec
                    .clone()
                    .map(|c| Box::new(super::speculative::Speculation::new(c))),
                lora: resolved
                    .lora
                    .clone()
                    .map(|c| Box::new(super::lora::Adapters::new(c, ranks.clone()))),
                ..Default::default()
            };
            let batcher = ctx
                .catalog
                .build::<BatchFormation>(&group.scheduler, &args)
                .map_err(|e| match e {
                    BuildError::Unknown { name, .. } => SetupError::UnknownPolicy {
                        family: "scheduler",
                        name,
                    },
                    BuildError::Params(message) => SetupError::Policy {
                        path: format!("cluster.groups[{g}].scheduler"),
                        message,
                    },
                })?;
            view.push(snapshot(i, &scheduler, &kv, 0));
            adapters.push(crate::engine::InstanceAdapters {
                max_loras: resolved.lora.as_ref().map_or(0, |c| c.max_loras),
                ..Default::default()
            });
            let e = world
                .spawn(InstanceBundle {
                    instance: Instance {
                        index: i,
                        group: g as u32,
                    },
                    limits: Limits {
                        // Data-parallel ranks each bring their own budgets; a request's
                        // chunk stays within one rank's.
                        max_num_seqs: resolved.max_num_seqs.saturating_mul(group.dp()),
                        max_num_batched_tokens: resolved
                            .max_num_batched_tokens
                            .saturating_mul(group.dp()),
                        long_prefill_token_threshold: match group.dp() {
                            1 => group.long_prefill_token_threshold,
                            _ => match group.long_prefill_token_threshold {
                                0 => resolved.max_num_batched_tokens,
                                t => t.min(resolved.max_num_batched_tokens),
                            },
                        },
                        max_model_len: resolved.max_model_len,
                        tp: group.tp.max(1),
                        pp: group.pp.max(1),
                        pp_bytes_per_token: resolved.pp_bytes_per_token,
                        pp_link_bytes_per_us: group.pp_link_gb_per_s * 1e3,
                        host_block_us: resolved.cpu_tier.map_or(0.0, |t| t.1),
                        host_latency_us: resolved.cpu_tier.map_or(0.0, |t| t.2),
                        nvme_block_us: resolved.nvme_tier.map_or(0.0, |t| t.1),
                        nvme_latency_us: resolved.nvme_tier.map_or(0.0, |t| t.2),
                        max_waiting: scenario.limits.max_waiting_per_instance,
                        pp_link_latency: SimDuration(group.pp_link_latency_us),
                        role: group.role,
                        first_token_on_decode: group.role == crate::scenario::Role::Prefill
                            && scenario.cluster.pd_first_token
                                == crate::scenario::PdFirstToken::Decode,
                        serving: resolved.serving,
                        streams_out: resolved.serving.streams_out(),
                        reserves_whole: batcher.reserves_whole_request(),
                    },
                    scheduler,
                    kv,
                    latency: crate::latency::Latency(resolved.latency.clone()),
                })
                .insert(Batcher(batcher))
                .id();
            index.push(e);
        }
        groups.push(GroupInfo {
            name,
            resolved,
            first,
            spawned,
        });
    }
    world.insert_resource(InstanceIndex(index));
    let adapters = if adapters.iter().any(|a| a.max_loras > 0) {
        adapters
    } else {
        Vec::new()
    };
    world.insert_resource(ClusterView {
        instances: view,
        adapters,
    });
    world.insert_resource(Groups(groups));
    Ok(())
}
