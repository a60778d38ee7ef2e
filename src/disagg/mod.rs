//! Prefill/decode disaggregation ([`SimSystems::Transfer`]): DistServe, Splitwise, vLLM/llm-d
//! P/D and Mooncake run prompts and decoding on separate pools and move each request's KV
//! cache between them.
//!
//! A request is routed (by `policies.routing`) to a `Prefill` or `Mixed` instance. On a
//! prefill instance its prompt runs as usual (chunked); the step that ends it ends its stay.
//! Which instance sends the client the first token is `cluster.pd_first_token`'s choice:
//! - `Decode` (default; vLLM's P/D proxy, llm-d): that step's token answers the proxy, which
//!   then hands the request to the decode instance's API server (its tokenizer micro-batch,
//!   [`TokenizerWindows`], then [`ServingPath::request_in`]) before the transfer can start;
//!   the decode instance recomputes the prompt's last token and samples the first itself, so
//!   the transfer is part of TTFT, not of the second token's ITL;
//! - `Prefill` (DistServe, Splitwise): that step's token, TTFT stamped there.
//!
//! At that step's end [`transfer_kv`]:
//! 1. picks a decode instance with `policies.decode_routing` (any routing policy, over the
//!    routable `Decode` instances that could ever hold the request: `max_model_len` and cache
//!    size may differ between decode groups); when none could, the request is dropped;
//! 2. queues the request there; in hand-off order, each reserves its prompt's blocks on the
//!    decode instance (prefix hits there need not be sent, as vLLM's NIXL connector reads
//!    only the blocks the decode side lacks): with vLLM's serving path once the request
//!    reached that instance's engine and at its scheduler's next decision (between steps,
//!    while fewer than `max_num_seqs` run), else at once (`reads_by_pull`). No room: it
//!    waits, head of line, and the wait is counted (`decode_kv_wait_ms`); nothing is dropped;
//! 3. sends the blocks: `bytes = blocks × block_size × KV bytes per token` (every layer and
//!    KV head of the model, at its dtype). The data starts `kv_link_latency_us` after the
//!    reservation, once both the source's and the destination's link are free, and flows at
//!    the slower end's rate (`kv_link_gb_per_s` × the instance's `tp × pp` GPUs, each with
//!    its own NIC): **per-NIC FIFO**. A link carries one transfer's data at a time, in the
//!    order they were started. A transfer engine pulls one request's blocks at full rate;
//!    FIFO drains a burst in the same total time as fair sharing but finishes the first
//!    requests sooner, and every time is exact to hand-compute (BLIS instead divides the
//!    bandwidth by the transfers active at the start and never rebalances).
//!    With `cluster.kv_transfer_layerwise` a transfer that starts the moment the prefill
//!    step ends streamed each layer during that step: only
//!    `max(wire / L, wire − step × (L − 1) / L)` of its `wire` time is left;
//! 4. when the last byte lands the request joins the decode instance's running batch from
//!    the step its scheduler can know of the landing ([`landing_joins_from`]; while
//!    `max_num_seqs` allows), with its prompt's KV in place, and decodes there. The transfer
//!    shows in its TTFT (with `pd_first_token: Prefill`, in its second token's ITL) and in
//!    E2E. The prefill instance frees its blocks: with vLLM's serving path from the step its
//!    scheduler can know of the read's end ([`sent_freed_from`]; until then they are in its
//!    `sent`), else at once.
//!
//! Requests in transit count on their decode instance (`in_flight` in the routers' view, and
//! INV-1). Per request: `prefill_instance`, `decode_instance`, `kv_transfer_ms` in
//! `requests.csv`; per run: `disaggregation` in `summary.json`.
//!
//! [`SimSystems::Transfer`]: crate::SimSystems::Transfer
//! [`ServingPath::request_in`]: crate::latency::ServingPath::request_in
//! [`TokenizerWindows`]: crate::latency::TokenizerWindows
//! [`landing_joins_from`]: crate::instance::batch::landing_joins_from
//! [`sent_freed_from`]: crate::instance::batch::sent_freed_from

mod check;
#[cfg(test)]
mod tests;

pub use check::check;

use bevy_ecs::prelude::*;

use crate::engine::{
    ClusterView, Event, EventQueue, InstanceDue, RecordDue, SimClock, SimStep, TransferDue,
};
use crate::engine::{InstanceSnapshot, SimSystems};
use crate::instance::{Handoff, Incoming, InstanceIndex, Instances, list_for_batch, refresh_view};
use crate::metrics::Histogram;
use crate::metrics::SummaryAppExt;
use crate::policy::{RouterView, RoutingPolicy};
use crate::request::{AssignedTo, FinalState};
use crate::scenario::Role;
use crate::setup::{SetupAppExt, SetupCtx, SetupStage, SimError, build_policy};
use crate::time::{SimDuration, SimTime};

/// The decode-side routing policy (`policies.decode_routing`).
#[derive(Resource)]
pub struct ActiveDecodeRouting(pub Box<dyn RoutingPolicy>);

/// One instance's end of the KV transfer fabric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvLink {
    pub role: Role,
    /// Bytes per µs over all the instance's GPUs.
    pub bytes_per_us: f64,
    pub latency: SimDuration,
    /// KV bytes of one token of the model (all layers and KV heads).
    pub bytes_per_token: f64,
    pub layers: u32,
}

/// Prefill/decode disaggregation: the instances' links and roles, and the transfers' state.
#[derive(Resource, Debug, Default)]
pub struct Disagg {
    /// True when the cluster has decode instances.
    pub enabled: bool,
    pub layerwise: bool,
    /// `cluster.pd_first_token: Decode` (vLLM's P/D proxy).
    pub first_token_on_decode: bool,
    /// By instance index.
    pub links: Vec<KvLink>,
    /// When each instance's link is next free to send / to receive.
    pub send_free: Vec<SimTime>,
    pub recv_free: Vec<SimTime>,
    /// Decode instances whose head incoming request waits for KV room.
    pub blocked: Vec<u32>,
    /// Prefill instances whose hand-offs found no routable decode instance: they stay in
    /// the instance's `handoff` list and are tried again on every tick until one is.
    pub unrouted: Vec<u32>,
    /// Link faults (the scenario's `faults.kv_links`): (instance, from, until, bandwidth
    /// left, transfers it slowed or held); empty without.
    pub link_faults: Vec<LinkFault>,
    /// With `cluster.topology`: the links transfers cross and share (then `send_free` and
    /// `recv_free` are not used).
    pub net: Option<crate::network::Network>,
    pub stats: TransferStats,
}

impl Disagg {
    /// True when the Transfer stage has work this tick.
    pub fn has_work(&self, due: &TransferDue, instances: &InstanceDue) -> bool {
        self.enabled
            && (!instances.handoffs.is_empty()
                || !instances.emptied.is_empty()
                || !due.transfers_done.is_empty()
                || !due.handed.is_empty()
                || !self.blocked.is_empty()
                || !self.unrouted.is_empty())
    }

    /// Role of instance `i`.
    pub fn role(&self, i: u32) -> Role {
        self.links.get(i as usize).map_or(Role::Mixed, |l| l.role)
    }
}

/// One degraded or severed KV link (`faults.kv_links`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFault {
    pub instance: u32,
    pub from: SimTime,
    pub until: SimTime,
    /// Fraction of the bandwidth left; 0 = severed.
    pub bandwidth: f64,
    /// Transfers that started in the window, or waited for its end.
    pub transfers: u64,
}

/// Where a transfer between `from` and `to` that could start at `start` starts, and the
/// fraction of the bandwidth of each end it gets: a severed link (either end) holds it to the
/// window's end, a degraded one that holds its start slows it throughout (windows of one end
/// that overlap take the lowest bandwidth, as host and pipeline links do). Counts the
/// transfers each window touched.
pub fn through_faults(
    faults: &mut [LinkFault],
    from: u32,
    to: u32,
    mut start: SimTime,
) -> (SimTime, f64, f64) {
    let ends = |f: &LinkFault| f.instance == from || f.instance == to;
    let holds = |f: &LinkFault, t: SimTime| f.from <= t && t < f.until;
    while let Some(f) = faults
        .iter_mut()
        .find(|f| ends(f) && f.bandwidth == 0.0 && holds(f, start))
    {
        f.transfers += 1;
        start = f.until;
    }
    let (mut src, mut dst) = (1.0, 1.0);
    for f in faults.iter_mut().filter(|f| ends(f) && holds(f, start)) {
        f.transfers += 1;
        if f.instance == from {
            src = f.bandwidth.min(src);
        } else {
            dst = f.bandwidth.min(dst);
        }
    }
    (start, src, dst)
}

/// Transfer statistics, for `summary.json`.
#[derive(Debug, Default, Clone)]
pub struct TransferStats {
    pub transfers: u64,
    pub bytes: f64,
    pub blocks: u64,
    /// Blocks the decode instance already had (prefix hits there), not sent.
    pub blocks_cached: u64,
    /// The prefill's end to KV ready on the decode instance (µs).
    pub time: Histogram,
    /// Reservation to last byte: the link's share (µs).
    pub link_time: Histogram,
    /// The prefill's end to a decode-side KV reservation (µs); `waited` of them found no KV
    /// room at first.
    pub kv_wait: Histogram,
    pub waited: u64,
    /// Requests whose decode instance could never hold them (dropped).
    pub dropped: u64,
    /// With a topology: how much later each transfer ended than on an idle fabric (µs).
    pub contention: Histogram,
}

/// Prefill/decode disaggregation: [`transfer_kv`] in [`SimSystems::Transfer`] of SimStep
/// (hand-offs happen at step ends; such a run takes SimStep on every tick), added by
/// [`schedule_transfers`] when the cluster has decode instances (a run checking for work it
/// cannot have would pay for it on every tick). Empties `TransferDue` and
/// `InstanceDue::handoffs`; fills `InstanceDue::batch` and, for requests no decode instance
/// can hold, `RecordDue`. Owns [`Disagg`] and [`ActiveDecodeRouting`], which its setup
/// builds; shares the API servers' tokenizer batches (`latency::TokenizerWindows`) with the
/// router, for the decode instances'.
pub struct DisaggPlugin;

impl bevy_app::Plugin for DisaggPlugin {
    fn build(&self, app: &mut bevy_app::App) {
        app.init_resource::<Disagg>()
            .init_resource::<crate::kv::KvEvents>()
            .init_resource::<crate::latency::TokenizerWindows>()
            .add_setup(SetupStage::Policies, set_up_decode_routing)
            .add_setup(SetupStage::Cluster, set_up_links)
            .add_summary_part(summarize);
    }
}

/// Pools and KV transfers of a disaggregated cluster (`None` without decode instances).
fn pools_and_transfers(
    d: &Disagg,
    instances: &[crate::metrics::InstanceSummary],
    counters: &[crate::instance::InstanceCounters],
) -> Option<crate::metrics::DisaggSummary> {
    if !d.enabled {
        return None;
    }
    let mut pools: Vec<crate::metrics::PoolSummary> = Vec::new();
    for role in [
        crate::scenario::Role::Prefill,
        crate::scenario::Role::Decode,
        crate::scenario::Role::Mixed,
    ] {
        let mut pool = crate::metrics::PoolSummary {
            role: role.name().into(),
            ..Default::default()
        };
        for (k, inst) in instances.iter().enumerate() {
            if d.role(k as u32) != role {
                continue;
            }
            let c = &counters[k];
            pool.instances += 1;
            pool.busy_fraction += inst.busy_fraction;
            pool.prefill_tokens += c.prefill_tokens;
            pool.decode_tokens += c.decode_tokens;
            pool.completed += c.completed;
            pool.handed_off += c.handed_off;
        }
        if pool.instances > 0 {
            pool.busy_fraction /= f64::from(pool.instances);
            pools.push(pool);
        }
    }
    let s = &d.stats;
    Some(crate::metrics::DisaggSummary {
        pools,
        transfers: s.transfers,
        transfer_gb: s.bytes / 1e9,
        blocks_sent: s.blocks,
        blocks_cached_on_decode: s.blocks_cached,
        transfer_ms: s.time.summarize_ms(),
        link_ms: s.link_time.summarize_ms(),
        decode_kv_wait_ms: s.kv_wait.summarize_ms(),
        waited_for_kv: s.waited,
        dropped: s.dropped,
        contention_ms: d.net.is_some().then(|| s.contention.summarize_ms()),
        first_token_on_decode: d.first_token_on_decode,
    })
}

/// Disaggregation's part of the summary (after the instances'): pools and transfers, when
/// there are decode instances.
pub fn summarize(world: &mut World, summary: &mut crate::metrics::Summary) {
    let index = world.resource::<InstanceIndex>().0.clone();
    let counters: Vec<crate::instance::InstanceCounters> = index
        .iter()
        .map(|&e| {
            world
                .get::<crate::instance::Scheduler>(e)
                .expect("instance has a scheduler")
                .counters
        })
        .collect();
    summary.disaggregation =
        pools_and_transfers(world.resource::<Disagg>(), &summary.instances, &counters);
}

fn disaggregated(ctx: &SetupCtx<'_>) -> bool {
    ctx.scenario
        .cluster
        .groups
        .iter()
        .any(|g| g.role == Role::Decode)
}

/// `SetupStage::Policies`: the decode routing policy, when there are decode instances (it
/// turns KV events on if it reads caches).
pub fn set_up_decode_routing(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    if !disaggregated(ctx) {
        return Ok(());
    }
    let p = &ctx.scenario.policies;
    let labels = app.world().resource::<crate::labels::Labels>();
    let routing = build_policy::<crate::policy::family::Routing>(
        ctx,
        labels,
        "decode_routing",
        &p.decode_routing,
        &p.decode_routing_params,
    )?;
    app.world_mut().resource_mut::<crate::kv::KvEvents>().0 |= routing.wants_kv_events();
    app.insert_resource(ActiveDecodeRouting(routing));
    Ok(())
}

/// `SetupStage::Cluster`: every instance's KV link; the Transfer stage when there are
/// decode instances.
pub fn set_up_links(app: &mut bevy_app::App, ctx: &SetupCtx<'_>) -> Result<(), SimError> {
    let groups = app
        .world()
        .resource::<crate::instance::spawn::Groups>()
        .clone();
    let mut links = Vec::new();
    for (group, info) in ctx.scenario.cluster.groups.iter().zip(&groups.0) {
        let gpus = f64::from(group.tp.max(1) * group.pp.max(1));
        for _ in info.instances() {
            links.push(KvLink {
                role: group.role,
                bytes_per_us: group.kv_link() * 1e3 * gpus,
                latency: SimDuration::from_us_f64(group.kv_link_latency_us),
                bytes_per_token: info.resolved.kv_bytes_per_token,
                layers: info.resolved.layers,
            });
        }
    }
    let enabled = disaggregated(ctx);
    let net = app
        .world()
        .get_resource::<crate::network::Network>()
        .cloned();
    let link_faults = ctx
        .scenario
        .faults
        .iter()
        .flat_map(|f| &f.kv_links)
        .map(|l| LinkFault {
            instance: l.instance,
            from: SimTime::ZERO + SimDuration::from_secs_f64(l.from_s),
            until: SimTime::ZERO + SimDuration::from_secs_f64(l.until_s),
            bandwidth: l.bandwidth,
            transfers: 0,
        })
        .collect();
    app.insert_resource(Disagg {
        enabled,
        link_faults,
        net,
        layerwise: ctx.scenario.cluster.kv_transfer_layerwise,
        first_token_on_decode: ctx.scenario.cluster.pd_first_token
            == crate::scenario::PdFirstToken::Decode,
        send_free: vec![SimTime::ZERO; links.len()],
        recv_free: vec![SimTime::ZERO; links.len()],
        links,
        ..Default::default()
    });
    if enabled {
        schedule_transfers(app);
    }
    Ok(())
}

/// The work lists the Transfer stage empties and fills.
#[derive(bevy_ecs::system::SystemParam)]
pub struct TransferWork<'w> {
    transfers: ResMut<'w, TransferDue>,
    instances: ResMut<'w, InstanceDue>,
    record: ResMut<'w, RecordDue>,
}

/// Adds [`transfer_kv`] to SimStep. Not to [`SimStepFast`](crate::engine::SimStepFast):
/// its one instance system forms batches in the Advance stage, before Transfer, while a
/// hand-off's transfer frees a prefill instance's blocks or drops its request (no decode
/// instance could hold it) before that instance forms its next batch, as SimStep orders
/// them. A run with the Transfer stage therefore takes SimStep on every tick (the schedule
/// it holds is not one SimStepFast may stand in for).
pub fn schedule_transfers(app: &mut bevy_app::App) {
    app.add_systems(
        SimStep,
        transfer_kv
            .in_set(SimSystems::Transfer)
            .run_if(|d: Res<TransferDue>, i: Res<InstanceDue>, x: Res<Disagg>| x.has_work(&d, &i)),
    );
}

/// Hands prefilled requests to decode instances, starts the KV transfers that have room,
/// and moves the requests whose KV arrived onto their decode instance.
#[expect(
    clippy::too_many_arguments,
    reason = "a system's parameters are its signature"
)]
pub fn transfer_kv(
    mut due: TransferWork,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut disagg: ResMut<Disagg>,
    mut routing: ResMut<ActiveDecodeRouting>,
    mut view: ResMut<ClusterView>,
    mut queue: ResMut<EventQueue>,
    mut assigned: Query<&mut AssignedTo>,
    cached: Res<crate::policy::CachedBlocks>,
    mut decode_view: Local<Vec<InstanceSnapshot>>,
    mut ready: Local<Vec<(u32, Handoff)>>,
    mut instances: Instances,
    mut log: ResMut<crate::decisions::DecisionLog>,
    mut tokenizers: ResMut<crate::latency::TokenizerWindows>,
) {
    let now = clock.now;
    let x = &mut *disagg;
    // A handed-off request reaching its decode engine only wakes the instance's transfers,
    // which `blocked` lists.
    due.transfers.handed.clear();
    arrive(&mut due, now, &index, x, &mut view, &mut instances);

    // Hand-offs due now, by prefill instance, then those that waited for a decode instance.
    let mut from = std::mem::take(&mut due.instances.handoffs);
    reads_heard_at_last_step(&from, &index, &mut view, &mut instances);
    reads_heard_at_last_step(&due.instances.emptied, &index, &mut view, &mut instances);
    due.instances.emptied.clear();
    from.append(&mut x.unrouted);
    from.sort_unstable();
    from.dedup();
    for &p in &from {
        let (mut sched, ..) = instances
            .get_mut(index.0[p as usize])
            .expect("instance entity exists for the whole run");
        let n = sched.handoff.partition_point(|h| h.ready <= now);
        sched.outbound += n as u32;
        ready.extend(sched.handoff.drain(..n).map(|h| (p, h)));
    }
    from.clear();
    due.instances.handoffs = from;

    let block_size = cached.block_size.max(1);
    let mut ready = ready.drain(..);
    while let Some((p, h)) = ready.next() {
        // The decode instances that could ever hold the request (groups may differ in
        // `max_model_len` and cache size); only those are candidates.
        let mut any_holds = false;
        decode_view.clear();
        decode_view.extend(view.instances.iter().map(|s| {
            let holds = x.role(s.index) == Role::Decode && {
                let (_, kv, _, limits, _) = instances
                    .get(index.0[s.index as usize])
                    .expect("instance entity exists for the whole run");
                crate::instance::servable(&h.seq.spec, kv, limits)
            };
            any_holds |= holds;
            InstanceSnapshot {
                routable: s.routable && holds,
                ..*s
            }
        }));
        if !any_holds {
            let (mut sched, mut kv, ..) = instances
                .get_mut(index.0[p as usize])
                .expect("instance entity exists for the whole run");
            let mut seq = h.seq;
            kv.release(&mut seq.kv);
            sched.outbound -= 1;
            sched.counters.dropped += 1;
            x.stats.dropped += 1;
            due.record
                .0
                .push(seq.finish(FinalState::Dropped, p, None, None));
            list_for_batch(&mut due.instances, p, &mut sched);
            refresh_view(&mut view, p, &sched, &kv);
            continue;
        }
        let rv = RouterView {
            instances: &decode_view,
            probe: &*cached,
            block_size,
            adapters: &[],
        };
        let Some(d) = routing.0.choose(&h.seq.spec, now, &rv) else {
            // No decode instance that could hold it is routable: this and every later
            // hand-off of this pass go back to their prefill instance, in order, until one is.
            let mut back: Vec<(u32, Handoff)> = vec![(p, h)];
            back.extend(ready.by_ref());
            for (p, h) in back.into_iter().rev() {
                let (mut sched, ..) = instances
                    .get_mut(index.0[p as usize])
                    .expect("instance entity exists for the whole run");
                sched.outbound -= 1;
                sched.handoff.insert(0, h);
                if !x.unrouted.contains(&p) {
                    x.unrouted.push(p);
                }
            }
            break;
        };
        crate::decisions::trace_decode_decision(
            &mut log,
            routing.0.last_scores(),
            &decode_view,
            now,
            h.seq.spec.id,
            d,
        );
        if let Ok(mut a) = assigned.get_mut(h.seq.entity) {
            a.0 = d;
        }
        view.instances[d as usize].in_flight += 1;
        let (mut sched, _, _, limits, _) = instances
            .get_mut(index.0[d as usize])
            .expect("instance entity exists for the whole run");
        // vLLM's P/D proxy: the prefill instance's answer reaches the proxy, which sends the
        // request to this instance's API server; it tokenizes the prompt again (in its
        // micro-batch) and hands the request to the engine.
        let handed = h.proxy_answer.map_or(h.ready, |answer| {
            let at = h.ready + answer;
            at + tokenizers.wait(d, at, &limits.serving)
                + limits.serving.request_in(h.seq.spec.input_tokens)
        });
        if handed > now && reads_by_pull(x, limits) {
            queue.push(handed, Event::HandedOff { instance: d });
        }
        sched.incoming.push_back(Incoming {
            handoff: h,
            from: p,
            reserved: Default::default(),
            done: None,
            sent_from: 0,
            handed,
            waited: false,
        });
        if !x.blocked.contains(&d) {
            x.blocked.push(d);
        }
    }
    start_transfers(now, &index, x, &mut view, &mut queue, &mut instances);
}

/// Requests whose KV landed now: the decode instance takes the request, the prefill instance
/// frees its blocks (or holds them until its scheduler hears of it: [`reads_by_pull`]).
fn arrive(
    due: &mut TransferWork,
    now: SimTime,
    index: &InstanceIndex,
    x: &mut Disagg,
    view: &mut ClusterView,
    instances: &mut Instances,
) {
    let mut done = std::mem::take(&mut due.transfers.transfers_done);
    done.sort_unstable();
    done.dedup();
    for &d in &done {
        loop {
            let (mut sched, mut kv, _, limits, _) = instances
                .get_mut(index.0[d as usize])
                .expect("instance entity exists for the whole run");
            let Some(pos) = sched
                .incoming
                .iter()
                .position(|t| t.done.is_some_and(|t| t <= now))
            else {
                break;
            };
            let t = sched.incoming.remove(pos).expect("position is valid");
            let mut seq = t.handoff.seq;
            let mut src_blocks = std::mem::replace(&mut seq.kv, t.reserved);
            if kv.records_events() {
                let bs = kv.block_size();
                let full =
                    crate::kv::prompt_block_hashes(&seq.spec.content, seq.spec.input_tokens, bs);
                let from = crate::kv::KvEventKind::Transferred { from: t.from };
                for k in t.sent_from..kv.blocks_for(seq.spec.input_tokens) {
                    kv.note(from, full.get(k as usize).copied().unwrap_or(0));
                }
            }
            // The prompt's blocks are now computed here: later requests may hit them (and,
            // write-through, the shared store receives them now).
            if kv.store.is_some() {
                kv.set_now(now.as_us());
            }
            kv.register_full_blocks(
                &mut seq.kv,
                &seq.spec.content,
                seq.spec.input_tokens,
                seq.progress,
            );
            let took = now.since(t.handoff.ready);
            seq.kv_transfer = Some(took);
            seq.joins_from = crate::instance::batch::landing_joins_from(&sched, limits, now);
            x.stats.time.record(took.as_us());
            sched.arrived.push_back(seq);
            let slot = &mut view.instances[d as usize];
            slot.in_flight = slot.in_flight.saturating_sub(1);
            list_for_batch(&mut due.instances, d, &mut sched);
            refresh_view(view, d, &sched, &kv);
            let (mut src, mut src_kv, _, src_limits, _) = instances
                .get_mut(index.0[t.from as usize])
                .expect("instance entity exists for the whole run");
            if reads_by_pull(x, src_limits) {
                let from = crate::instance::batch::sent_freed_from(&src, src_limits, now);
                src.sent.push((from, src_blocks));
            } else {
                src_kv.release(&mut src_blocks);
            }
            src.outbound -= 1;
            list_for_batch(&mut due.instances, t.from, &mut src);
            refresh_view(view, t.from, &src, &src_kv);
        }
    }
    done.clear();
    due.transfers.transfers_done = done;
}

/// Prefill instances whose step ended now, handing requests off or having lost them to client
/// timeouts during it: vLLM's engine takes one more step after a step that finished requests,
/// or after requests were aborted, to report them (`Scheduler.has_requests` holds while
/// `finished_req_ids` does), and its workers poll for finished reads as they launch it
/// (`get_finished`). So an instance left with nothing to run frees the blocks of every read
/// that has landed (which [`sent_freed_from`] would have it keep until it steps again).
///
/// [`sent_freed_from`]: crate::instance::batch::sent_freed_from
fn reads_heard_at_last_step(
    ended: &[u32],
    index: &InstanceIndex,
    view: &mut ClusterView,
    instances: &mut Instances,
) {
    for &p in ended {
        let (mut sched, mut kv, ..) = instances
            .get_mut(index.0[p as usize])
            .expect("instance entity exists for the whole run");
        if sched.sent.is_empty() || !sched.in_flight.is_empty() || sched.has_work() {
            continue;
        }
        for (_, mut blocks) in sched.sent.drain(..) {
            kv.release(&mut blocks);
        }
        refresh_view(view, p, &sched, &kv);
    }
}

/// True if instance `limits`' engine moves KV as vLLM's does with the NIXL connector, where
/// the decode side reads:
/// - a decode instance reserves an incoming request's blocks and starts pulling its KV at
///   its scheduler's decisions: its scheduler allocates the blocks when it first meets the
///   request in its wait queue (at once when idle, else at the end of the running step; not
///   while `max_num_seqs` requests run: `Scheduler.schedule`), and its worker starts the read
///   as it launches the step so decided (`start_load_kv`);
/// - a prefill instance frees a request's blocks once its scheduler hears that the read is
///   done ([`sent_freed_from`]).
///
/// Not with a layer-wise push (the prefill instance sends as it computes) nor without vLLM's
/// serving path (the BLIS reading: the transfer starts at the hand-off, and the blocks are
/// free when it lands).
///
/// [`sent_freed_from`]: crate::instance::batch::sent_freed_from
fn reads_by_pull(x: &Disagg, limits: &crate::instance::Limits) -> bool {
    !x.layerwise && !limits.serving.is_bare()
}

/// On every decode instance with requests waiting for KV room, reserves blocks in hand-off
/// order and starts their transfers; the first that does not fit waits for the next try. An
/// engine that pulls at its decisions ([`reads_by_pull`]) takes only requests it has
/// been handed, and only between steps.
fn start_transfers(
    now: SimTime,
    index: &InstanceIndex,
    x: &mut Disagg,
    view: &mut ClusterView,
    queue: &mut EventQueue,
    instances: &mut Instances,
) {
    x.blocked.sort_unstable();
    let mut k = 0;
    while k < x.blocked.len() {
        let d = x.blocked[k];
        let (mut sched, mut kv, _, limits, _) = instances
            .get_mut(index.0[d as usize])
            .expect("instance entity exists for the whole run");
        let mut stuck = false;
        let mut unhanded = false;
        let dst = x.links[d as usize];
        let pulls = reads_by_pull(x, limits);
        let between_steps = sched.step_end.is_none();
        let room = sched.running.len() < limits.max_num_seqs as usize;
        for t in sched.incoming.iter_mut().filter(|t| t.done.is_none()) {
            let spec = &t.handoff.seq.spec;
            let input = spec.input_tokens;
            if pulls {
                if t.handed > now {
                    // Not in the engine's wait queue yet: those behind it may be.
                    unhanded = true;
                    continue;
                }
                if !(between_steps && room) {
                    stuck = true;
                    break;
                }
            }
            let cached = kv.cached_prefix_blocks(&spec.content, input, input + 1);
            // Not a prompt admission: the prefix hit rate counts prompts, decode-side hits
            // are `blocks_cached_on_decode`.
            let counted = (kv.hit_blocks, kv.miss_blocks, kv.lower_hits);
            let fits = kv.admit(&mut t.reserved, &spec.content, input, cached, input);
            (kv.hit_blocks, kv.miss_blocks, kv.lower_hits) = counted;
            if !fits {
                t.waited = true;
                stuck = true;
                break;
            }
            let src = x.links[t.from as usize];
            let blocks = kv.blocks_for(input).saturating_sub(cached);
            let bytes = f64::from(blocks) * f64::from(kv.block_size()) * src.bytes_per_token;
            let latency = src.latency.max(dst.latency);
            let earliest = now.max(t.handed) + latency;
            let mut start = if x.net.is_some() {
                earliest
            } else {
                earliest
                    .max(x.send_free[t.from as usize])
                    .max(x.recv_free[d as usize])
            };
            let (mut src_share, mut dst_share) = (1.0, 1.0);
            if !x.link_faults.is_empty() {
                (start, src_share, dst_share) =
                    through_faults(&mut x.link_faults, t.from, d, start);
            }
            let streamed = x.layerwise && start == t.handoff.ready + latency;
            let mut wire = match &x.net {
                None => bytes / (src.bytes_per_us * src_share).min(dst.bytes_per_us * dst_share),
                Some(net) => {
                    let (path, hops_us) = net.topology.path(t.from, d);
                    start += SimDuration::from_us_f64(hops_us);
                    // A degraded end (faults) holds the links as that much more data would.
                    let r = net.lock().reserve_slowed(
                        &path,
                        now.as_us(),
                        start.as_us(),
                        bytes,
                        f64::INFINITY,
                        src_share.min(dst_share),
                    );
                    x.stats.contention.record(r.done_us - r.alone_us);
                    (r.done_us - start.as_us()) as f64
                }
            };
            if streamed {
                let layers = f64::from(src.layers.max(1));
                let step = t.handoff.last_step.as_us() as f64;
                wire = (wire / layers).max(wire - step * (layers - 1.0) / layers);
            }
            let done = start + SimDuration::from_us_f64(wire.ceil());
            x.send_free[t.from as usize] = done;
            x.recv_free[d as usize] = done;
            t.done = Some(done);
            t.sent_from = cached;
            queue.push(done, Event::TransferDone { instance: d });
            let s = &mut x.stats;
            s.transfers += 1;
            s.bytes += bytes;
            s.blocks += u64::from(blocks);
            s.blocks_cached += u64::from(cached);
            s.kv_wait.record(now.since(t.handoff.ready).as_us());
            s.waited += u64::from(t.waited);
            s.link_time.record(done.since(now).as_us());
        }
        refresh_view(view, d, &sched, &kv);
        if stuck || unhanded {
            k += 1;
        } else {
            x.blocked.swap_remove(k);
        }
    }
}
