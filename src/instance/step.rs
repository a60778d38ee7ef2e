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

use super::{InstanceIndex, Scheduler, refresh_view};
use crate::engine::{ClusterView, Due, Event, EventQueue, SimClock};
use crate::kv::KvCache;
use crate::latency::{BatchShape, Latency, StepItem};
use crate::metrics::Aggregates;
use crate::request::FinalState;
use crate::time::SimDuration;

/// Prices the batch of every instance that formed one and schedules its end.
pub fn execute_steps(
    mut due: ResMut<Due>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut queue: ResMut<EventQueue>,
    mut items: Local<Vec<StepItem>>,
    mut instances: Query<(&mut Scheduler, &Latency)>,
) {
    let now = clock.now;
    let due = &mut *due;
    let mut listed = std::mem::take(&mut due.execute);
    for &i in &listed {
        let (mut sched, latency) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        items.clear();
        let mut prefill_tokens = 0;
        let mut decode_tokens = 0;
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
                decode_tokens += 1;
            }
        }
        // An empty batch (everything preempted this step) still takes 1 µs, so the
        // instance keeps a step pending (INV-8) and retries next tick.
        let dt = if items.is_empty() {
            SimDuration(1)
        } else {
            latency
                .0
                .step_time(&BatchShape {
                    items: &items,
                    prefill_tokens,
                    decode_tokens,
                })
                .max(SimDuration(1))
        };
        let end = now + dt;
        sched.step_end = Some(end);
        let c = &mut sched.counters;
        c.steps += 1;
        c.busy += dt;
        c.prefill_tokens += u64::from(prefill_tokens);
        c.decode_tokens += u64::from(decode_tokens);
        queue.push(end, Event::StepFinished { instance: i });
        due.complete.push(i);
    }
    listed.clear();
    due.execute = listed;
}

/// Applies the token progress of every batch priced this tick.
pub fn complete_steps(
    mut due: ResMut<Due>,
    index: Res<InstanceIndex>,
    mut view: ResMut<ClusterView>,
    mut agg: ResMut<Aggregates>,
    mut instances: Query<(&mut Scheduler, &mut KvCache, &Latency)>,
) {
    let due = &mut *due;
    let mut listed = std::mem::take(&mut due.complete);
    for &i in &listed {
        let (mut sched, mut kv, latency) = instances
            .get_mut(index.0[i as usize])
            .expect("instance entity exists for the whole run");
        let end = sched.step_end.expect("a priced step has an end");
        let alpha2 = latency.0.output_token_overhead();
        let alpha1 = latency.0.post_decode_overhead();
        let sched = &mut *sched;
        let mut any_done = false;
        // Consecutive decodes share one sample value: count runs, not tokens.
        let mut run: Option<(u64, u64)> = None;
        for p in &sched.plan {
            let seq = &mut sched.running[p.slot as usize];
            seq.progress += p.tokens;
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
            seq.generated += 1;
            if seq.first_token.is_none() {
                seq.first_token = Some(end);
                seq.ttft = Some(end.since(seq.lifecycle.arrival) + alpha2);
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
                kv.release(&mut seq.kv);
                any_done = true;
            }
        }
        if let Some((v, n)) = run {
            agg.itl.record_n(v, n);
        }
        if any_done {
            let Scheduler {
                running,
                leaving,
                counters,
                ..
            } = sched;
            running.retain(|seq| {
                if seq.generated < seq.spec.output_tokens {
                    return true;
                }
                counters.completed += 1;
                let e2e = seq.ttft.map(|t| t + seq.itl_sum + alpha1);
                leaving.push(seq.finish(FinalState::Completed, i, Some(end), e2e));
                false
            });
        }
        refresh_view(&mut view, i, sched, &kv);
    }
    listed.clear();
    due.complete = listed;
}
