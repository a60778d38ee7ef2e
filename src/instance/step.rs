//! Pricing and applying a batch step ([`SimSystems::Execute`], [`SimSystems::Complete`]).
//!
//! Metric definitions (BLIS, MODELS.md §5.1, with α2 = output-token overhead and α1 =
//! post-decode overhead of the instance's latency model):
//! - TTFT = end of the step that emits the first token + α2 − arrival;
//! - each later token gives one ITL sample = its time − the previous token's time + α2
//!   (equal to step time + α2 between consecutive steps; a preemption stall shows up in
//!   the sample after it, as a client would see it);
//! - E2E = TTFT + Σ ITL + α1.
//!
//! [`SimSystems::Execute`]: crate::SimSystems::Execute
//! [`SimSystems::Complete`]: crate::SimSystems::Complete

use bevy_ecs::prelude::*;

use super::{InstanceIndex, Instances, Limits, Scheduler, refresh_view};
use crate::engine::{ClusterView, Event, EventQueue, InstanceDue, SimClock, SimFault};
use crate::kv::KvCache;
use crate::latency::Latency;
use crate::latency::{BatchShape, ServingPath, StepItem};
use crate::metrics::Aggregates;
use crate::request::FinalState;
use crate::time::{SimDuration, SimTime};

/// Prices the batch of every instance that formed one and schedules its end.
pub fn execute_steps(
    mut due: ResMut<InstanceDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut queue: ResMut<EventQueue>,
    mut items: Local<Vec<StepItem>>,
    mut fault: ResMut<SimFault>,
    mut instances: Instances,
) {
    execute(
        &mut due,
        clock.now,
        &index,
        &mut queue,
        &mut items,
        &mut fault,
        &mut instances,
    );
}

pub(crate) fn execute(
    due: &mut InstanceDue,
    now: SimTime,
    index: &InstanceIndex,
    queue: &mut EventQueue,
    items: &mut Vec<StepItem>,
    fault: &mut SimFault,
    instances: &mut Instances,
) {
    let mut listed = std::mem::take(&mut due.execute);
    for &i in &listed {
        let (mut sched, mut kv, latency, limits, _) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        if execute_one(
            i, &mut sched, &mut kv, latency, limits, now, queue, items, fault,
        ) {
            due.complete.push(i);
        }
    }
    listed.clear();
    due.execute = listed;
}

/// Prices instance `i`'s batch and schedules its end; true if a step was scheduled.
#[expect(
    clippy::too_many_arguments,
    reason = "the instance's parts and the tick's shared state"
)]
pub(crate) fn execute_one(
    i: u32,
    sched: &mut Scheduler,
    kv: &mut KvCache,
    latency: &Latency,
    limits: &Limits,
    now: SimTime,
    queue: &mut EventQueue,
    items: &mut Vec<StepItem>,
    fault: &mut SimFault,
) -> bool {
    items.clear();
    let mut prefill_tokens = 0;
    let mut decode_tokens = 0;
    // A lockstep step (every running request decodes) is priced from the batch's sums
    // when the model can.
    let mut priced = None;
    if sched.lockstep.active {
        let (decodes, context) = super::lockstep::shape(sched);
        decode_tokens = decodes;
        priced = latency.0.decode_step_time(decodes, context);
        if priced.is_none() {
            super::lockstep::items(sched, items);
        }
    } else {
        for p in &sched.plan {
            let seq = &sched.running[p.slot as usize];
            items.push(StepItem {
                new_tokens: p.tokens,
                context_tokens: p.context,
                input_tokens: seq.spec.input_tokens,
                prefill: p.prefill,
            });
            if p.prefill {
                prefill_tokens += p.tokens;
            } else {
                // One, or 1 + its drafts with speculative decoding.
                decode_tokens += p.tokens;
            }
        }
    }
    let empty = items.is_empty() && priced.is_none();
    sched.stalled_steps = if empty { sched.stalled_steps + 1 } else { 0 };
    // vLLM's engine steps, empty, when it has requests it cannot run yet, and an empty
    // batch is stepped (1 µs) here too when stepping is what runs them: (P/D, prefill side)
    // it polls for the reads whose blocks the instance holds
    // ([`sent_freed_from`](super::batch::sent_freed_from)); with async scheduling, the
    // requests waiting reached the engine after the batch was decided, and join the next.
    if empty
        && !(sched.in_flight.is_empty() && (!sched.sent.is_empty() || sched.left_out_arrivals))
        && (!sched.in_flight.is_empty()
            || sched.outbound > 0
            || !sched.handoff.is_empty()
            || (!sched.incoming.is_empty()
                && sched.arrived.is_empty()
                && !sched.preempted_forming
                && !kv.has_untaken_moves()))
    {
        // Everything runnable is in the pipeline: wait for a micro-batch to finish. Or
        // (P/D) the blocks the queue needs are still being sent: the transfer's end lists
        // the instance again; or they are held by hand-offs waiting for a routable decode
        // instance (all down or starting): their transfer's end lists it again; or (on a
        // decode instance) they are reserved for KV still arriving, held up by a severed
        // link perhaps: its arrival lists the instance again; or requests handed off to it
        // are still on their way to its engine: the Transfer stage starts their pulls when
        // they reach it (`Event::HandedOff`). Stepping empty meanwhile
        // would trip the progress watchdog before the link came back. (A batch emptied by
        // preemption is retried: the blocks freed may admit the queue; so is one that moved
        // blocks to or from a lower KV tier, which are priced as a step; so is one that held
        // back a landed request its scheduler cannot know of yet (`landing_joins_from`):
        // nothing else would list the instance again while the transfers behind it wait for
        // its blocks.)
        return false;
    }
    // An empty batch (everything preempted this step) still takes 1 µs, so the
    // instance keeps a step pending (INV-8) and retries next tick.
    // Blocks moved between the GPU and the tiers below it while this batch was formed.
    let (reload, offload) = if kv.has_lower_tiers() {
        tier_transfers(kv, sched, limits, now)
    } else {
        (SimDuration::ZERO, SimDuration::ZERO)
    };
    let compute = if empty {
        SimDuration(1)
    } else {
        let priced = priced.unwrap_or_else(|| {
            latency.0.step_time(&BatchShape {
                items,
                prefill_tokens,
                decode_tokens,
            })
        });
        match priced {
            Ok(dt) => dt.max(SimDuration(1)),
            Err(e) => {
                fault
                    .0
                    .get_or_insert_with(|| crate::engine::Fault::Pricing {
                        instance: i,
                        at: now,
                        error: e.to_string(),
                    });
                SimDuration(1)
            }
        }
    };
    // Speculative decoding: the drafter's passes follow the target's in the same step.
    let compute = match sched.spec.as_mut() {
        Some(spec) if !empty => match spec.draft_time(items) {
            Ok(draft) => compute + draft,
            Err(e) => {
                fault
                    .0
                    .get_or_insert_with(|| crate::engine::Fault::Pricing {
                        instance: i,
                        at: now,
                        error: format!("the drafter: {e}"),
                    });
                compute
            }
        },
        _ => compute,
    };
    // Multi-LoRA: the step's adapters are made resident first (loads and copies hold the
    // step), and its LoRA kernels follow the model's.
    let (compute, lora_load) = if sched.lora.is_none() || empty {
        (compute, SimDuration::ZERO)
    } else {
        let (load, kernels) = prepare_adapters(sched, prefill_tokens + decode_tokens);
        (compute + kernels, load)
    };
    let compute = match sched.warmup_speed {
        Some(speed) => SimDuration::from_us_f64(compute.as_us() as f64 / speed),
        None => compute,
    };
    // A straggler's steps (faults) take `slowdown` times as long while it lasts.
    let compute = if sched.slowdowns.is_empty() || empty {
        compute
    } else {
        if slowing(now, &sched.slowdowns) {
            sched.counters.slowed_steps += 1;
        }
        slowed(compute, now, &sched.slowdowns)
    };
    // The engine core's CPU work for the step: between steps, or hidden behind the GPU with
    // async scheduling (latency::ServingPath).
    let compute = if empty {
        compute
    } else {
        let requests = if sched.lockstep.active {
            decode_tokens
        } else {
            items.len() as u32
        };
        limits.serving.step(compute, requests)
    };
    let dt = reload + lora_load + compute.max(offload);
    if !empty && let Some(mut meter) = sched.energy.take() {
        meter_step(&mut meter, sched, items, decode_tokens, dt);
        sched.energy = Some(meter);
    }
    // Pipeline parallelism (Vidur): each of the pp stages runs 1/pp of the layers and
    // hands its activations to the next; the first stage frees after one stage, the
    // micro-batch finishes after all of them, never before the one ahead of it.
    let (stage, total) = if limits.pp <= 1 {
        (dt, dt)
    } else {
        let pp = u64::from(limits.pp);
        let tokens = f64::from(prefill_tokens + decode_tokens);
        let wire = tokens * limits.pp_bytes_per_token / limits.pp_link_bytes_per_us;
        // A degraded or severed link between stages (faults) slows the step's hand-offs; a
        // severed one holds the first until its window ends (the later ones follow it).
        let (wait, wire) = if sched.pp_faults.is_empty() {
            (0.0, wire)
        } else {
            super::through_windows(&mut sched.pp_faults, now, wire)
        };
        let wait = SimDuration::from_us_f64(wait);
        let comm = SimDuration::from_us_f64(wire) + limits.pp_link_latency;
        let stage = SimDuration(dt.as_us().div_ceil(pp)) + comm + wait;
        (
            stage,
            SimDuration(dt.as_us()) + SimDuration(comm.as_us() * (pp - 1)) + wait,
        )
    };
    let done = (now + total).max(sched.in_flight.back().map_or(SimTime::ZERO, |&t| t + stage));
    sched.step_end = Some(now + stage);
    sched.step_done = done;
    sched.step_started = now;
    sched.in_flight.push_back(done);
    let c = &mut sched.counters;
    c.steps += 1;
    c.busy += stage;
    c.prefill_tokens += u64::from(prefill_tokens);
    c.decode_tokens += u64::from(decode_tokens);
    queue.push(now + stage, Event::StepFinished { instance: i });
    if done != now + stage {
        queue.push(done, Event::StepFinished { instance: i });
    }
    true
}

/// Multi-LoRA: makes the planned step's adapters resident and prices its LoRA work over
/// `tokens` ([`super::lora::Adapters::prepare`]): (µs waited for loads, µs of kernels).
#[inline(never)]
fn prepare_adapters(sched: &mut Scheduler, tokens: u32) -> (SimDuration, SimDuration) {
    let Some(lora) = sched.lora.as_mut() else {
        return (SimDuration::ZERO, SimDuration::ZERO);
    };
    let running = &sched.running;
    lora.prepare(
        sched
            .plan
            .iter()
            .map(|p| running[p.slot as usize].spec.adapter),
        tokens,
    )
}

/// Meters a step of `dt` (energy on): its work from the lockstep batch's sums or the
/// plan, its energy charged to its requests in proportion to the tokens computed for them.
#[inline(never)]
fn meter_step(
    meter: &mut super::energy::Meter,
    sched: &mut Scheduler,
    items: &[StepItem],
    decodes: u32,
    dt: SimDuration,
) {
    use super::energy::StepWork;
    let dt_s = dt.as_us() as f64 * 1e-6;
    if sched.lockstep.active {
        // Every running request decodes one token: equal shares, settled with the rest.
        let work = if items.is_empty() {
            let (n, context) = super::lockstep::shape(sched);
            StepWork::decodes(n, context)
        } else {
            let mut w = StepWork::default();
            for it in items {
                w.add(it.new_tokens, it.context_tokens, it.prefill);
            }
            w
        };
        let joules = meter.step(&work, dt_s);
        sched.lockstep.energy_nj += nanojoules(joules / f64::from(decodes.max(1)));
        return;
    }
    let mut work = StepWork::default();
    for it in items {
        work.add(it.new_tokens, it.context_tokens, it.prefill);
    }
    let joules = meter.step(&work, dt_s);
    let per_token = joules / work.tokens.max(1.0);
    for p in &sched.plan {
        sched.running[p.slot as usize].energy_nj +=
            nanojoules(per_token * f64::from(p.tokens.max(1)));
    }
}

/// Joules as whole nanojoules (rounded).
fn nanojoules(joules: f64) -> u64 {
    (joules * 1e9).round() as u64
}

/// Applies the token progress of every batch priced this tick.
pub fn complete_steps(
    mut due: ResMut<InstanceDue>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    mut agg: ResMut<Aggregates>,
    mut fault: ResMut<SimFault>,
    mut instances: Instances,
) {
    complete(
        &mut due,
        &index,
        &mut view,
        &mut agg,
        &mut fault,
        &mut instances,
    );
}

pub(crate) fn complete(
    due: &mut InstanceDue,
    index: &InstanceIndex,
    view: &mut ClusterView,
    agg: &mut Aggregates,
    fault: &mut SimFault,
    instances: &mut Instances,
) {
    let mut listed = std::mem::take(&mut due.complete);
    for &i in &listed {
        let (mut sched, mut kv, latency, limits, _) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        complete_one(i, &mut sched, &mut kv, latency, limits, view, agg, fault);
    }
    listed.clear();
    due.complete = listed;
}

/// The slowdown of a step starting at `now` on an instance slowed in `windows` (from,
/// until, slowdown): the product of every window's that holds `now` (1 outside them).
fn factor(now: SimTime, windows: &[(SimTime, SimTime, f64)]) -> f64 {
    windows
        .iter()
        .filter(|(from, until, _)| *from <= now && now < *until)
        .map(|w| w.2)
        .product()
}

/// True when a window of `windows` holds `now`.
fn slowing(now: SimTime, windows: &[(SimTime, SimTime, f64)]) -> bool {
    windows
        .iter()
        .any(|(from, until, _)| *from <= now && now < *until)
}

/// `compute` for a step starting at `now` on an instance slowed in `windows`.
pub fn slowed(
    compute: SimDuration,
    now: SimTime,
    windows: &[(SimTime, SimTime, f64)],
) -> SimDuration {
    let factor = factor(now, windows);
    if factor == 1.0 {
        compute
    } else {
        SimDuration::from_us_f64(compute.as_us() as f64 * factor)
    }
}

/// The drafts accepted of the `d` a decode verified (speculative decoding; only a group
/// with it plans a decode of more than one token), counted on the request.
#[inline(never)]
fn verify(spec: Option<&mut super::speculative::Speculation>, seq: &mut super::Seq, d: u32) -> u32 {
    let spec = spec.expect("only speculative decoding plans a decode of several tokens");
    let a = spec.accept(seq.spec.id, seq.spec.client, seq.generated, d);
    seq.drafted += d;
    seq.accepted += a;
    a
}

/// The copies between the GPU and the tiers below it that the batch just formed caused: how
/// long the step waits for its loads, and how long its offloads take.
///
/// Loads must land before the step computes on them: CPU-tier copies and NVMe reads cross
/// the host link (fixed latency + blocks × per-block time), NVMe reads also the drive, store
/// loads the instance's link to the store; the step waits for the slowest. Offloads are
/// copied out asynchronously (vLLM's offloading connector) and only lengthen a step they
/// outlast.
#[inline(never)]
fn tier_transfers(
    kv: &mut KvCache,
    sched: &mut Scheduler,
    limits: &Limits,
    now: SimTime,
) -> (SimDuration, SimDuration) {
    let (offloaded, reloaded) = kv.take_transfers();
    let (nvme, stored) = if kv.has_remote_tiers() {
        kv.take_loads()
    } else {
        (0, 0)
    };
    // A degraded or severed host link (faults) slows the transfers that start in its window.
    let mut transfer_us = |blocks: u32| {
        if blocks == 0 {
            0.0
        } else if sched.host_faults.is_empty() {
            limits.host_latency_us + f64::from(blocks) * limits.host_block_us
        } else {
            let wire = f64::from(blocks) * limits.host_block_us;
            let (wait, wire) = super::through_windows(&mut sched.host_faults, now, wire);
            limits.host_latency_us + wait + wire
        }
    };
    let reload = SimDuration::from_us_f64(transfer_us(reloaded + nvme));
    let reload = if nvme == 0 && stored == 0 {
        reload
    } else {
        let disk = if nvme == 0 {
            0.0
        } else {
            limits.nvme_latency_us + f64::from(nvme) * limits.nvme_block_us
        };
        let store = match kv.store.as_ref() {
            Some(s) if stored > 0 => s.load_us(now.as_us(), stored),
            _ => 0.0,
        };
        reload.max(SimDuration::from_us_f64(disk.max(store)))
    };
    let offload = SimDuration::from_us_f64(transfer_us(offloaded));
    (reload, offload)
}

/// Counts a step of `chunks` streamed chunks (one per request with tokens) ending at `end`
/// against the instance's API server: the step is behind when the previous step's tokens
/// were still being streamed as its own arrived (the previous step's output work,
/// [`ServingPath::token_out`] of its last chunk, outlasted the gap between the two ends).
/// Each step's tokens are delivered a fixed time after its end, as if the API server were
/// free: vLLM's one event loop would deliver a behind step's later, which
/// `plugin::warn_busy_api_servers` says at the end of the run.
fn api_output(sched: &mut Scheduler, serving: &ServingPath, end: SimTime, chunks: u32) {
    let c = &mut sched.counters;
    c.api_steps += 1;
    c.api_behind += u64::from(end < sched.api_busy_until);
    c.api_peak_chunks = c.api_peak_chunks.max(chunks);
    sched.api_busy_until = end + serving.token_out(chunks.saturating_sub(1));
}

/// Applies the token progress of instance `i`'s batch priced this tick.
#[expect(
    clippy::too_many_arguments,
    reason = "the instance's parts and the tick's shared state"
)]
pub(crate) fn complete_one(
    i: u32,
    sched: &mut Scheduler,
    kv: &mut KvCache,
    latency: &Latency,
    limits: &Limits,
    view: &mut ClusterView,
    agg: &mut Aggregates,
    fault: &mut SimFault,
) {
    let hands_off = limits.role == crate::scenario::Role::Prefill;
    let end = sched.step_done;
    let alpha2 = latency.0.output_token_overhead();
    let serving = &limits.serving;
    if sched.lockstep.active {
        let (sample, n) = super::lockstep::complete(sched, end, alpha2);
        agg.itl.record_n(sample, n);
        if limits.streams_out {
            api_output(sched, serving, end, u32::try_from(n).unwrap_or(u32::MAX));
        }
        refresh_view(view, i, sched, kv);
        if let Some(msg) = super::watchdog(i, sched, kv) {
            fault.0.get_or_insert(crate::engine::Fault::NoProgress(msg));
        }
        return;
    }
    let alpha1 = latency.0.post_decode_overhead();
    // Write-through to the shared store sends the blocks the step computed as it ends.
    if kv.store.is_some() {
        kv.set_now(end.as_us());
    }
    let api = !serving.is_bare();
    // The step's tokens leave the API server in batch order (latency::ServingPath).
    let mut chunks = 0u32;
    let mut any_done = false;
    let mut any_handoff = false;
    // Consecutive decodes share one sample value: count runs, not tokens.
    let mut run: Option<(u64, u64)> = None;
    for p in &sched.plan {
        let seq = &mut sched.running[p.slot as usize];
        // Tokens the request emits: one, or (speculative decoding, a decode with drafts)
        // one plus the drafts accepted, which are all that stay computed.
        let (computed, emits) = if p.prefill || p.tokens == 1 {
            (p.tokens, 1)
        } else {
            let a = verify(sched.spec.as_deref_mut(), seq, p.tokens - 1);
            (1 + a, 1 + a)
        };
        seq.progress += computed;
        seq.busy_until = end;
        if p.prefill {
            kv.register_full_blocks(
                &mut seq.kv,
                &seq.spec.content,
                seq.spec.input_tokens,
                seq.progress,
            );
        }
        if seq.progress < seq.known_tokens() {
            continue; // a prefill chunk that did not reach the end of the prompt
        }
        // Its tokens leave in one chunk (vLLM's one `RequestOutput` per request and step,
        // speculative tokens together), after the chunks before it.
        chunks += 1;
        let delivery = if api {
            serving.token_out(chunks - 1)
        } else {
            SimDuration::ZERO
        };
        if limits.first_token_on_decode {
            // vLLM's P/D proxy: this token answers the proxy and is dropped. The decode
            // instance recomputes the prompt's last token and samples the first itself
            // (vLLM's `_update_waiting_for_remote_kv` counts the loaded prompt one short).
            seq.prefill_instance = Some(i);
            seq.proxy_answer = Some(delivery);
            seq.progress = seq.progress.saturating_sub(1);
            any_handoff = true;
            continue;
        }
        seq.generated += emits;
        if seq.first_token.is_none() {
            seq.first_token = Some(end);
            seq.prefill_instance.get_or_insert(i);
            seq.first_delivery = delivery;
            seq.ttft = Some(end.since(seq.lifecycle.arrival) + alpha2 + delivery);
        } else if emits > 1 {
            // Several tokens arrive together: each is one ITL sample, the gap split
            // evenly between them (so the request's mean ITL stays its time per token).
            let gap = end.since(seq.last_token).as_us();
            let n = u64::from(emits);
            seq.itl_sum += SimDuration(gap + alpha2.as_us() * n);
            seq.itl_count += emits;
            if let Some((v, k)) = run.take() {
                agg.itl.record_n(v, k);
            }
            let (q, r) = (gap / n, gap % n);
            agg.itl.record_n(q + alpha2.as_us(), n - r);
            if r > 0 {
                agg.itl.record_n(q + 1 + alpha2.as_us(), r);
            }
        } else {
            let sample = end.since(seq.last_token) + alpha2;
            seq.itl_sum += sample;
            seq.itl_count += 1;
            run = match run {
                Some((v, n)) if v == sample.as_us() => Some((v, n + 1)),
                Some((v, n)) => {
                    agg.itl.record_n(v, n);
                    Some((sample.as_us(), 1))
                }
                None => Some((sample.as_us(), 1)),
            };
        }
        seq.last_token = end;
        if seq.generated >= seq.spec.output_tokens {
            seq.last_delivery = delivery;
            kv.release(&mut seq.kv);
            any_done = true;
            // Blocks came free after this step was formed: the queue's head may fit now.
            sched.lockstep.head_blocked = false;
        } else if hands_off {
            any_handoff = true;
        }
    }
    if let Some((v, n)) = run {
        agg.itl.record_n(v, n);
    }
    if chunks > 0 && limits.streams_out {
        api_output(sched, serving, end, chunks);
    }
    if any_done {
        let Scheduler {
            running,
            leaving,
            counters,
            preemptions_at_completion: at_completion,
            ..
        } = sched;
        running.retain(|seq| {
            if seq.generated < seq.spec.output_tokens {
                return true;
            }
            counters.completed += 1;
            *at_completion = counters.preemptions;
            // The last token reaches the client after its own wait in the API server.
            let e2e = seq.ttft.map(|t| {
                SimDuration(
                    (t + seq.itl_sum + alpha1 + seq.last_delivery)
                        .as_us()
                        .saturating_sub(seq.first_delivery.as_us()),
                )
            });
            leaving.push(seq.finish(FinalState::Completed, i, Some(end), e2e));
            false
        });
    }
    if any_handoff {
        // P/D: a prefill instance hands every request that has its first token (and
        // needs more) to a decode instance at this step's end; its blocks stay here
        // until the transfer ends.
        let last_step = end.since(sched.step_started);
        let Scheduler {
            running,
            handoff,
            counters,
            preemptions_at_completion: at_completion,
            ..
        } = sched;
        for mut seq in running.extract_if(.., |s| s.generated >= 1 || s.proxy_answer.is_some()) {
            counters.handed_off += 1;
            *at_completion = counters.preemptions;
            let proxy_answer = seq.proxy_answer.take();
            handoff.push(super::Handoff {
                seq,
                ready: end,
                last_step,
                proxy_answer,
            });
        }
    }
    sched.note_cohort(end, limits);
    refresh_view(view, i, sched, kv);
    if let Some(msg) = super::watchdog(i, sched, kv) {
        fault.0.get_or_insert(crate::engine::Fault::NoProgress(msg));
    }
}
