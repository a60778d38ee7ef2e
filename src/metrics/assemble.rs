//! The summary of a run that ended: its core from the aggregates, then each concern's part.

use bevy_ecs::prelude::*;

use super::{
    Aggregates, Breakdown, Fairness, KvEventCounts, KvEventTally, RequestCounts, SliceSummary,
    SloSummary, Summary, SummaryExtras, SummaryParts, Throughput, jain,
};
use crate::engine::SimClock;
use crate::labels::Labels;

/// The summary of a run that ended: the core from the aggregates (what every request did),
/// then each concern's part ([`SummaryParts`]: instances and the KV cache, routing,
/// disaggregation, autoscaling and cost). `counts` holds the requests still in the system
/// by where they were (queued, running, in transit).
pub fn assemble(
    world: &mut World,
    scenario: &str,
    seed: u64,
    mut counts: RequestCounts,
) -> Summary {
    let agg = world.resource::<Aggregates>().clone();
    let clock = *world.resource::<SimClock>();
    counts.injected = world.resource::<crate::engine::Injected>().0;
    counts.completed = agg.completed;
    counts.rejected = agg.rejected;
    counts.dropped = agg.dropped;
    counts.timed_out = agg.timed_out;
    let secs = clock.now.as_us() as f64 / 1e6;
    let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
    let labels = world.resource::<Labels>();
    let slo_table = world.resource::<crate::slo::SloTable>();
    let has_targets =
        |c: &crate::slo::SloClass| c.ttft.is_some() || c.itl.is_some() || c.e2e.is_some();
    let any_targets = slo_table.classes.iter().any(has_targets);
    let slice = |name: &str, b: Option<&Breakdown>, targeted: bool| {
        let b = b.cloned().unwrap_or_default();
        SliceSummary {
            name: name.to_string(),
            injected: b.injected,
            completed: b.completed,
            rejected: b.rejected,
            dropped: b.dropped,
            timed_out: b.timed_out,
            output_tokens: b.output_tokens,
            good: b.good,
            slo_attainment: targeted.then(|| {
                if b.injected == 0 {
                    0.0
                } else {
                    b.good as f64 / b.injected as f64
                }
            }),
            ttft_ms: b.ttft.summarize_ms(),
            e2e_ms: b.e2e.summarize_ms(),
        }
    };
    let tenants: Vec<SliceSummary> = labels
        .tenants
        .iter()
        .enumerate()
        .map(|(i, n)| slice(n, agg.per_tenant.get(i), any_targets))
        .collect();
    let slo_classes: Vec<SliceSummary> = labels
        .slo_classes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let targeted = slo_table.classes.get(i).is_some_and(has_targets);
            slice(n, agg.per_class.get(i), targeted)
        })
        .collect();
    // Per LoRA adapter (their loads are the instances' part).
    let lora = (!labels.adapters.is_empty()).then(|| crate::metrics::LoraSummary {
        adapters: labels
            .adapters
            .iter()
            .enumerate()
            .map(|(i, n)| crate::metrics::AdapterSummary {
                requests: slice(n, agg.per_adapter.get(i), any_targets),
                ..Default::default()
            })
            .collect(),
        groups: Vec::new(),
    });
    let tenant_tokens: Vec<f64> = tenants.iter().map(|t| t.output_tokens as f64).collect();
    let injected = counts.injected;
    let instances = world
        .resource::<crate::engine::ClusterView>()
        .instances
        .len();
    let mut summary = Summary {
        scenario: scenario.to_string(),
        seed,
        requests: counts,
        sim_duration_s: secs,
        ticks: clock.ticks,
        throughput: Throughput {
            requests_per_s: per_s(agg.completed),
            input_tokens_per_s: per_s(agg.input_tokens),
            output_tokens_per_s: per_s(agg.output_tokens),
            input_tokens: agg.input_tokens,
            output_tokens: agg.output_tokens,
        },
        ttft_ms: agg.ttft.summarize_ms(),
        itl_ms: agg.itl.summarize_ms(),
        e2e_ms: agg.e2e.summarize_ms(),
        scheduling_delay_ms: agg.scheduling_delay.summarize_ms(),
        ttft_parts_ms: agg.ttft_parts.into(),
        preemptions: agg.preemptions,
        rejections: world
            .get_resource::<crate::engine::Rejections>()
            .map(|r| r.0.iter().map(|(k, v)| (k.to_string(), *v)).collect())
            .unwrap_or_default(),
        slo: SloSummary {
            good: agg.good,
            attainment: any_targets.then(|| {
                if injected == 0 {
                    0.0
                } else {
                    agg.good as f64 / injected as f64
                }
            }),
            goodput_per_s: any_targets.then(|| per_s(agg.good)),
        },
        fairness: Fairness {
            jain_tenant_output_tokens: jain(&tenant_tokens),
            ..Default::default()
        },
        extras: world.resource::<SummaryExtras>().0.clone(),
        kv_events: {
            let t = world.resource::<KvEventTally>();
            t.on.then(|| {
                (0..instances)
                    .map(|i| KvEventCounts {
                        instance: i as u32,
                        ..t.per_instance.get(i).cloned().unwrap_or_default()
                    })
                    .collect()
            })
        },
        tenants,
        slo_classes,
        lora,
        ..Default::default()
    };
    let parts = world
        .get_resource::<SummaryParts>()
        .map(|p| p.0.clone())
        .unwrap_or_default();
    for part in parts {
        part(world, &mut summary);
    }
    summary
}
