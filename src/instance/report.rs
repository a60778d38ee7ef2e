//! The instance plugin's part of a run's end: the requests still on the instances (and on
//! their way to one), recorded like every other request in a final Record pass, and the
//! instances' part of the summary.

use bevy_ecs::prelude::*;

use super::{InstanceIndex, Scheduler};
use crate::kv::KvCache;
use crate::metrics::{InstanceSummary, KvSummary, RequestCounts, Summary};
use crate::request::{FinalState, FinishedRequest, Lifecycle, RequestSpec};

/// The requests still in the system when the run stopped, instance by instance (waiting,
/// running, handed off, arrived, incoming, leaving), then those in transit by id; and how
/// many of each. With `check`, every KV cache is audited (INV-4) on the way.
pub fn unfinished(world: &mut World, check: bool) -> (Vec<FinishedRequest>, RequestCounts) {
    let index = world.resource::<InstanceIndex>().0.clone();
    let mut left: Vec<FinishedRequest> = Vec::new();
    let mut counts = RequestCounts::default();
    for (i, &e) in index.iter().enumerate() {
        let i = i as u32;
        let mut sched = world
            .get_mut::<Scheduler>(e)
            .expect("instance has a scheduler");
        sched.settle();
        let sched = world.get::<Scheduler>(e).expect("instance has a scheduler");
        if check {
            let kv = world.get::<KvCache>(e).expect("instance has a KV cache");
            if let Err(msg) = kv.audit() {
                panic!("INV-4 at end: instance {i}: {msg}");
            }
        }
        for seq in &sched.waiting {
            counts.queued += 1;
            left.push(seq.finish(FinalState::Queued, i, None, None));
        }
        for seq in &sched.running {
            counts.running += 1;
            left.push(seq.finish(FinalState::Running, i, None, None));
        }
        for seq in sched.handoff.iter().map(|h| &h.seq).chain(&sched.arrived) {
            counts.running += 1;
            left.push(seq.finish(FinalState::Running, i, None, None));
        }
        for t in &sched.incoming {
            counts.in_transit += 1;
            left.push(t.handoff.seq.finish(FinalState::InTransit, i, None, None));
        }
        for f in &sched.leaving {
            counts.running += 1;
            let mut f = f.clone();
            f.state = FinalState::Running;
            f.completed = None;
            f.e2e = None;
            left.push(f);
        }
    }
    // A step's tokens are priced when it is formed; the first token of one still in flight
    // when the run stopped (its horizon, or its caller) comes after the last event run: not
    // produced in this run.
    let now = world.resource::<crate::engine::SimClock>().now;
    for f in &mut left {
        if f.first_token.is_some_and(|t| t > now) {
            f.first_token = None;
            f.ttft = None;
            f.generated_tokens = 0;
        }
    }
    let mut transit: Vec<FinishedRequest> = world
        .query::<(Entity, &RequestSpec, &Lifecycle)>()
        .iter(world)
        .filter(|(_, _, l)| l.enqueued.is_none())
        .map(|(e, s, l)| FinishedRequest::unserved(e, s.clone(), *l, FinalState::InTransit, None))
        .collect();
    transit.sort_by_key(|f| f.spec.id);
    counts.in_transit += transit.len() as u64;
    left.extend(transit);
    (left, counts)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The instances' part of the summary: one row per instance (with its group's name, its
/// busy fraction and latency), the KV cache totals, and the spread of work over instances.
pub fn summarize(world: &mut World, summary: &mut Summary) {
    let index = world.resource::<InstanceIndex>().0.clone();
    let names: Vec<String> = world
        .get_resource::<super::spawn::Groups>()
        .map(|g| {
            g.0.iter()
                .flat_map(|g| g.instances().map(|_| g.name.clone()))
                .collect()
        })
        .unwrap_or_default();
    let duration = world.resource::<crate::engine::SimClock>().now.as_us();
    let agg = world.resource::<crate::metrics::Aggregates>();
    let (mut hit, mut miss) = (0u64, 0u64);
    // Prompt hits by the tier they were loaded from (the tiers' own load counts also hold
    // P/D decode instances' prefix loads, which are not prompt admissions).
    let mut below = crate::kv::LowerHits::default();
    let (mut offloaded, mut reloaded, mut thrashed) = (0u64, 0u64, 0u64);
    let mut nvme: Option<crate::metrics::KvTierSummary> = None;
    for (i, &e) in index.iter().enumerate() {
        let sched = world.get::<Scheduler>(e).expect("instance has a scheduler");
        let kv = world.get::<KvCache>(e).expect("instance has a KV cache");
        hit += kv.hit_blocks;
        miss += kv.miss_blocks;
        below.cpu += kv.lower_hits.cpu;
        below.nvme += kv.lower_hits.nvme;
        below.store += kv.lower_hits.store;
        if let Some(c) = &kv.cpu {
            offloaded += c.offloaded;
            reloaded += c.reloaded;
            thrashed += c.thrashed;
        }
        if let Some(c) = &kv.nvme {
            let n = nvme.get_or_insert_with(Default::default);
            n.capacity_blocks += u64::from(c.capacity());
            n.written_blocks += c.offloaded;
            n.loaded_blocks += c.reloaded;
        }
        let c = sched.counters;
        summary.anomalies.priority_inversions += c.priority_inversions;
        summary.anomalies.hol_blocking += c.hol_blocking;
        let latency = agg.per_instance.get(i);
        summary.instances.push(InstanceSummary {
            index: i as u32,
            group: names.get(i).cloned().unwrap_or_default(),
            completed: c.completed,
            dropped: c.dropped,
            preemptions: c.preemptions,
            steps: c.steps,
            busy_fraction: if duration == 0 {
                0.0
            } else {
                c.busy.as_us().min(duration) as f64 / duration as f64
            },
            prefill_tokens: c.prefill_tokens,
            decode_tokens: c.decode_tokens,
            kv_total_blocks: kv.total_blocks(),
            kv_hit_rate: kv.hit_rate(),
            ttft_ms: latency.map(|b| b.ttft.summarize_ms()).unwrap_or_default(),
            e2e_ms: latency.map(|b| b.e2e.summarize_ms()).unwrap_or_default(),
        });
    }
    let completed: Vec<f64> = summary
        .instances
        .iter()
        .map(|i| i.completed as f64)
        .collect();
    summary.fairness.jain_instance_completed = crate::metrics::jain(&completed);
    summary.fairness.cov_instance_completed = crate::metrics::cov(&completed);
    if let Some(n) = nvme.as_mut() {
        n.hit_rate = ratio(below.nvme, hit + miss);
    }
    let store = world
        .get_resource::<super::spawn::SharedKvStore>()
        .map(|s| {
            let s = crate::kv::lock(&s.store);
            crate::metrics::KvStoreSummary {
                write: s.write.name().into(),
                capacity_blocks: u64::from(s.capacity()),
                held_blocks: u64::from(s.len()),
                written_blocks: s.written,
                evicted_blocks: s.evicted,
                loaded_blocks: s.loaded,
                cross_instance_loaded_blocks: s.cross_instance_loaded,
                hit_rate: ratio(below.store, hit + miss),
            }
        });
    summary.kv = KvSummary {
        hit_rate: ratio(hit, hit + miss),
        hit_blocks: hit,
        miss_blocks: miss,
        gpu_hit_rate: ratio(hit - below.total(), hit + miss),
        cpu_hit_rate: ratio(below.cpu, hit + miss),
        offloaded_blocks: offloaded,
        reloaded_blocks: reloaded,
        thrashing_rate: ratio(thrashed, reloaded),
        nvme,
        store,
    };
    summary.anomalies.kv_thrashing = thrashed;
}

/// The summary's `speculative` part: each group with speculative decoding, its instances'
/// counts summed.
pub fn summarize_speculative(world: &mut World, summary: &mut Summary) {
    let Some(groups) = world.get_resource::<super::spawn::Groups>() else {
        return;
    };
    let groups = groups.0.clone();
    let index = world.resource::<InstanceIndex>().0.clone();
    for info in &groups {
        let Some(cfg) = &info.resolved.speculative else {
            continue;
        };
        let mut out = crate::metrics::SpeculativeSummary {
            group: info.name.clone(),
            method: cfg.method.to_string(),
            num_speculative_tokens: cfg.k,
            configured_per_position: cfg.per_position.clone(),
            per_position: vec![0.0; cfg.k as usize],
            ..Default::default()
        };
        let mut at_position = vec![0u64; cfg.k as usize];
        let mut draft_us = 0u64;
        for i in info.instances() {
            let sched = world
                .get::<Scheduler>(index[i as usize])
                .expect("instance has a scheduler");
            if let Some(s) = &sched.spec {
                out.verifications += s.verifies;
                out.drafted += s.drafted;
                out.accepted += s.accepted;
                draft_us += s.draft_us;
                for (n, m) in at_position.iter_mut().zip(&s.accepted_per_position) {
                    *n += m;
                }
            }
        }
        out.draft_s = draft_us as f64 * 1e-6;
        out.acceptance_rate = (out.drafted > 0).then(|| out.accepted as f64 / out.drafted as f64);
        out.mean_acceptance_length =
            (out.verifications > 0).then(|| 1.0 + out.accepted as f64 / out.verifications as f64);
        if out.verifications > 0 {
            out.per_position = at_position
                .iter()
                .map(|&n| n as f64 / out.verifications as f64)
                .collect();
        }
        summary.speculative.push(out);
    }
}

/// The summary's `lora` part: each group serving adapters, its instances' loads and times
/// summed, and each adapter's rank and loads.
pub fn summarize_lora(world: &mut World, summary: &mut Summary) {
    let Some(groups) = world.get_resource::<super::spawn::Groups>() else {
        return;
    };
    let groups = groups.0.clone();
    if !groups.iter().any(|g| g.resolved.lora.is_some()) {
        return;
    }
    let index = world.resource::<InstanceIndex>().0.clone();
    let lora = summary.lora.get_or_insert_with(Default::default);
    for info in &groups {
        let Some(cfg) = &info.resolved.lora else {
            continue;
        };
        let mut out = crate::metrics::LoraGroupSummary {
            group: info.name.clone(),
            max_loras: cfg.max_loras,
            max_cpu_loras: cfg.max_cpu_loras,
            max_lora_rank: cfg.max_rank,
            slots_gib: cfg.slots_gib(),
            ..Default::default()
        };
        let (mut load_us, mut kernel_us) = (0u64, 0u64);
        for i in info.instances() {
            let sched = world
                .get::<Scheduler>(index[i as usize])
                .expect("instance has a scheduler");
            let Some(a) = &sched.lora else {
                continue;
            };
            out.steps_with_adapters += a.steps;
            out.loads += a.loads.iter().sum::<u64>();
            out.activations += a.activations.iter().sum::<u64>();
            load_us += a.load_us;
            kernel_us += a.kernel_us;
            for (k, adapter) in lora.adapters.iter_mut().enumerate() {
                adapter.rank = a.ranks.get(k).copied().unwrap_or(0);
                adapter.loads += a.loads.get(k).copied().unwrap_or(0);
                adapter.activations += a.activations.get(k).copied().unwrap_or(0);
            }
        }
        out.load_s = load_us as f64 * 1e-6;
        out.kernel_s = kernel_us as f64 * 1e-6;
        lora.groups.push(out);
    }
}
