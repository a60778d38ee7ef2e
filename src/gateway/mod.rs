//! The gateway's flow control (issue 34 item 3): priority bands between admission and
//! routing, a saturation detector over the instances' signals, dispatch while the
//! instances have room, and shedding with a reason.
//!
//! It follows llm-d's flow control (the Gateway API Inference Extension's endpoint picker,
//! `pkg/epp/flowcontrol` and `pkg/epp/saturationdetector`):
//!
//! - **Bands.** A request joins the band of its priority (the workload's `priority`; each
//!   priority not listed in `flow_control.bands` gets a band with `default_band`'s limits).
//!   Bands are served in strict priority order, highest first, first come first served
//!   within a band (llm-d's defaults: the global-strict fairness policy and FCFS ordering).
//! - **Saturation.** An instance has room while its waiting requests — its wait queue plus
//!   the requests routed to it and not yet there — are at most `queue_depth` and its KV
//!   cache use is at most `kv_util` (llm-d's detector reads vLLM's
//!   `vllm:num_requests_waiting` and `vllm:gpu_cache_usage_perc`; defaults 5 and 0.8). The
//!   cluster is saturated when no routable instance has room. The detector reads what the
//!   router reads (`policies.snapshot_refresh_interval_us` makes both stale, as scraped
//!   metrics are); the in-transit count is the gateway's own and always live. With no
//!   routable instance at all the cluster is saturated and requests wait in their bands,
//!   as llm-d's detector has it ("no pods … considered saturated (no capacity)", to let
//!   flow control queue them) — unless a group autoscales: then the gateway lets them
//!   through, so that routing parks them and asks for a cold start (scale from zero).
//! - **Dispatch.** While not saturated, the head of the highest non-empty band is routed,
//!   and the detector asks again. The gateway looks again whenever the instances may have
//!   gained room: at the end of every tick it checks, and if they have room and requests
//!   wait, it wakes itself at the same time.
//! - **Shedding.** A request reaching a band that holds `max_requests` is shed
//!   (`gateway_band_full`), or `gateway_full` when every band together holds
//!   `flow_control.max_requests`; one that has waited `max_wait_s` is shed
//!   (`gateway_wait_expired`, llm-d's request TTL). Shed requests end `rejected` with the
//!   reason in `summary.rejections`.
//!
//! Not modelled: llm-d's byte limits per band (ours count requests), displacement of queued
//! lower-priority requests by higher-priority ones, fairness between flows within a band.

mod check;
mod plugin;
#[cfg(test)]
mod tests;

pub use check::check;
pub use plugin::{FlowControlPlugin, run_gateway, wake_gateway};

use std::collections::VecDeque;

use bevy_ecs::prelude::*;

use crate::metrics::histogram::{COARSE, Histogram};
use crate::policy::InstanceSnapshot;
use crate::scenario::{FlowControlSpec, SaturationSpec};
use crate::time::{SimDuration, SimTime};

/// True when no routable instance has room (see the module docs); when none is routable
/// at all, `hold_when_none` (false when a group autoscales: requests then go on to routing,
/// which parks them for a cold start).
pub fn saturated(
    s: &SaturationSpec,
    instances: impl IntoIterator<Item = InstanceSnapshot>,
    hold_when_none: bool,
) -> bool {
    let mut routable = false;
    for i in instances {
        if !i.routable {
            continue;
        }
        routable = true;
        let waiting = u64::from(i.queue_depth) + u64::from(i.in_flight);
        let kv = if i.kv_total_blocks == 0 {
            1.0
        } else {
            f64::from(i.kv_used_blocks) / f64::from(i.kv_total_blocks)
        };
        if waiting <= u64::from(s.queue_depth) && kv <= s.kv_util {
            return false;
        }
    }
    routable || hold_when_none
}

/// What a `flow_control` block does, in one line (`servesim validate` prints it).
pub fn describe(fc: &FlowControlSpec) -> String {
    fn limits(max: Option<u32>, wait: Option<f64>) -> String {
        let max = max.map_or("no limit".to_string(), |m| format!("at most {m} waiting"));
        let wait = wait.map_or(String::new(), |w| {
            format!(", shed after {} s", crate::scenario::readable(w))
        });
        format!("{max}{wait}")
    }
    let mut bands: Vec<&crate::scenario::BandSpec> = fc.bands.iter().collect();
    bands.sort_by_key(|b| std::cmp::Reverse(b.priority));
    let mut parts: Vec<String> = bands
        .iter()
        .map(|b| {
            format!(
                "priority {}: {}",
                b.priority,
                limits(b.max_requests, b.max_wait_s)
            )
        })
        .collect();
    parts.push(format!(
        "other priorities: {}",
        limits(fc.default_band.max_requests, fc.default_band.max_wait_s)
    ));
    format!(
        "flow control: requests wait in the gateway while no instance has ≤ {} waiting and KV use ≤ {}{}; bands, highest first — {}",
        fc.saturation.queue_depth,
        fc.saturation.kv_util,
        fc.max_requests
            .map_or(String::new(), |m| format!("; at most {m} waiting in all")),
        parts.join("; ")
    )
}

/// One priority band: its limits, its queue (request, time it joined) and its counts.
#[derive(Debug, Clone)]
pub struct Band {
    pub priority: i32,
    pub max_requests: Option<u32>,
    pub max_wait: Option<SimDuration>,
    pub queue: VecDeque<(Entity, SimTime)>,
    pub arrived: u64,
    pub shed_full: u64,
    pub dispatched: u64,
    pub shed_expired: u64,
    pub timed_out: u64,
    pub peak_waiting: u64,
    pub wait: Histogram,
}

impl Band {
    fn new(priority: i32, max_requests: Option<u32>, max_wait_s: Option<f64>) -> Self {
        Band {
            priority,
            max_requests,
            max_wait: max_wait_s.map(SimDuration::from_secs_f64),
            queue: VecDeque::new(),
            arrived: 0,
            shed_full: 0,
            dispatched: 0,
            shed_expired: 0,
            timed_out: 0,
            peak_waiting: 0,
            wait: Histogram::with_bits(COARSE),
        }
    }
}

/// The gateway (present only when the scenario has `flow_control`): its bands, highest
/// priority first, and its detector's thresholds.
#[derive(Resource, Debug, Clone)]
pub struct Gateway {
    pub saturation: SaturationSpec,
    pub bands: Vec<Band>,
    /// Limits of a band for a priority not listed in the scenario.
    default_band: (Option<u32>, Option<f64>),
    pub max_requests: Option<u32>,
    /// Requests waiting in all bands.
    pub waiting: u64,
    /// Since when some request has waited (None while the bands are empty), and the time
    /// of earlier such spells.
    waiting_since: Option<SimTime>,
    pub waiting_time: SimDuration,
    /// A wake-up at the current time is in the event queue.
    wake_pending: bool,
    /// The time of the pending wake-up for the earliest end of a head's longest wait.
    deadline: Option<SimTime>,
    /// A wake-up at this time routed nothing: the end-of-tick check does not wake the
    /// gateway again at the same time (so signals that change within a time cannot loop).
    idle_wake: Option<SimTime>,
}

impl Gateway {
    /// The gateway a scenario's `flow_control` block describes (its bands sorted by
    /// priority, highest first).
    pub fn new(spec: &FlowControlSpec) -> Self {
        let mut bands: Vec<Band> = spec
            .bands
            .iter()
            .map(|b| Band::new(b.priority, b.max_requests, b.max_wait_s))
            .collect();
        bands.sort_by_key(|b| std::cmp::Reverse(b.priority));
        Gateway {
            saturation: spec.saturation.clone(),
            bands,
            default_band: (spec.default_band.max_requests, spec.default_band.max_wait_s),
            max_requests: spec.max_requests,
            waiting: 0,
            waiting_since: None,
            waiting_time: SimDuration(0),
            wake_pending: false,
            deadline: None,
            idle_wake: None,
        }
    }

    /// The index of the band of `priority`, made with the default limits if it has none.
    pub fn band_of(&mut self, priority: i32) -> usize {
        match self
            .bands
            .binary_search_by_key(&std::cmp::Reverse(priority), |b| {
                std::cmp::Reverse(b.priority)
            }) {
            Ok(k) => k,
            Err(k) => {
                let (max, wait) = self.default_band;
                self.bands.insert(k, Band::new(priority, max, wait));
                k
            }
        }
    }

    /// Why a request reaching band `k` now is shed, if it is.
    pub fn full(&self, k: usize) -> Option<&'static str> {
        let band = &self.bands[k];
        if self
            .max_requests
            .is_some_and(|m| self.waiting >= u64::from(m))
        {
            Some("gateway_full")
        } else if band
            .max_requests
            .is_some_and(|m| band.queue.len() as u64 >= u64::from(m))
        {
            Some("gateway_band_full")
        } else {
            None
        }
    }

    /// Keeps the time during which some request waited, after the bands changed at `now`.
    pub fn account(&mut self, now: SimTime) {
        match (self.waiting > 0, self.waiting_since) {
            (true, None) => self.waiting_since = Some(now),
            (false, Some(since)) => {
                self.waiting_time += now.since(since);
                self.waiting_since = None;
            }
            _ => {}
        }
    }

    /// The time during which some request waited, up to `now`.
    pub fn waited_until(&self, now: SimTime) -> SimDuration {
        self.waiting_time + self.waiting_since.map_or(SimDuration(0), |s| now.since(s))
    }
}
