//! Autoscaling: the life of an instance and the scaling stage.
//!
//! An autoscaled group (one with `scaling`) is spawned with `max` instances, of which
//! `count` serve from t = 0 and the rest are off (with an empty KV cache, so an off
//! instance costs no memory). Life of an instance:
//!
//! ```text
//! off → provisioning (provision_s) → loading (load_s) → warming up (warmup_s) → serving
//!                                                                   ↓ scale down
//!                                                 off ← draining (until its work is done)
//! ```
//!
//! A scale-down first cancels instances that are still starting (newest first), then
//! drains the serving instances with the least work: a draining instance is not routable,
//! finishes every request already on or headed to it, then turns off and drops its KV
//! cache. A scale-up first takes back draining instances (they still hold the model), then
//! provisions off ones (lowest index first). While no instance anywhere is routable, the
//! router parks requests instead of rejecting them ([`Parked`]) and a cold start begins in
//! the cheapest autoscaled group that has room; parked requests are routed the moment an
//! instance becomes routable.
//!
//! GPU time accrues from provisioning until off (you pay for a node while it boots and
//! drains). Every transition is a row of `scale_events.csv`.

mod check;
mod life;
mod plugin;
mod scaling;
#[cfg(test)]
mod tests;

pub use check::{check, one_way_threshold, scheduled_out_of_bounds};
pub use life::{advance_phases, crash_off};
pub use plugin::{
    AutoscalePlugin, close_accounts, set_up_groups, set_up_policy, stop_on_event_write_error,
    summarize,
};
pub use scaling::{evaluate_scaling, sample_latencies};

pub use crate::instance::{Phase, Power};
pub use crate::kv::KvRecipe;

use std::fs::File;
use std::io::BufWriter;

use bevy_ecs::prelude::*;

use crate::instance::Scheduler;
use crate::kv::KvCache;
use crate::time::{SimDuration, SimTime};

/// Life-cycle timings and bounds of an autoscaled group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub min: u32,
    pub max: u32,
    /// The group's own evaluation interval (`None`: the policy's schedule).
    pub interval: Option<SimDuration>,
    pub provision: SimDuration,
    pub load: SimDuration,
    pub warmup: SimDuration,
    pub warmup_speed: f64,
    pub routable_during_warmup: bool,
    pub up_cooldown: SimDuration,
    pub down_cooldown: SimDuration,
}

/// One instance group's scaling state and accounting.
#[derive(Clone, Debug, Default)]
pub struct GroupScaling {
    pub name: String,
    /// `None` for a fixed-size group.
    pub timing: Option<Timing>,
    /// Instance indices of the group.
    pub instances: Vec<u32>,
    pub gpus_per_instance: u32,
    pub cost_per_gpu_hour: f64,
    /// Instances on (any phase but off), and since when that number holds.
    pub on: u32,
    pub since: SimTime,
    /// ∫ instances on dt, time at `max`, most on at once.
    pub instance_time: SimDuration,
    pub time_at_max: SimDuration,
    pub peak: u32,
    pub scale_ups: u64,
    pub scale_downs: u64,
    pub cold_starts: u64,
    pub last_up: Option<SimTime>,
    pub last_action: Option<SimTime>,
    /// The direction (up: true) and time of the group's last scaling action.
    pub last_move: Option<(bool, SimTime)>,
    /// Actions opposite to the previous one within the larger cooldown of it.
    pub oscillations: u64,
    /// Σ busy time of the group's instances at the previous evaluation.
    pub busy_mark: SimDuration,
    /// The group's next evaluation, and the start of its current window.
    pub next_eval: Option<SimTime>,
    pub window_start: SimTime,
    /// TTFT (µs) and mean ITL (µs) of requests that finished since the previous evaluation.
    pub ttft_window: Vec<u64>,
    pub itl_window: Vec<f64>,
}

impl GroupScaling {
    fn max(&self) -> u32 {
        self.timing.map_or(self.instances.len() as u32, |t| t.max)
    }

    /// Moves the on-count step function to `now`, then sets it to `on`.
    fn set_on(&mut self, now: SimTime, on: u32) {
        self.advance(now);
        self.on = on;
        self.peak = self.peak.max(on);
    }

    fn advance(&mut self, now: SimTime) {
        let dt = now.since(self.since);
        self.instance_time += SimDuration(dt.as_us() * u64::from(self.on));
        if self.on >= self.max() {
            self.time_at_max += dt;
        }
        self.since = now;
    }
}

/// The scaling state of the cluster.
#[derive(Resource, Default)]
pub struct Autoscaler {
    pub groups: Vec<GroupScaling>,
    /// Instances draining now.
    pub draining: Vec<u32>,
    /// `scale_events.csv`, when written.
    pub events: Option<csv::Writer<BufWriter<File>>>,
    pub write_error: Option<String>,
    /// True when some group autoscales (collect latency samples, park requests).
    pub active: bool,
    /// `decisions.csv` rows of scale oscillations, until they are written (only while it is).
    pub anomaly_rows: Option<Vec<crate::instance::AnomalyRow>>,
}

/// Column names of `scale_events.csv`.
pub const SCALE_EVENT_COLUMNS: [&str; 8] = [
    "time_s",
    "group",
    "instance",
    "event",
    "reason",
    "signal",
    "group_instances",
    "group_serving",
];

struct Ctx<'a> {
    now: SimTime,
    power: &'a mut Power,
    sched: &'a mut Scheduler,
    kv: &'a mut KvCache,
}

impl Autoscaler {
    #[expect(clippy::too_many_arguments, reason = "one row of scale_events.csv")]
    fn log(
        &mut self,
        now: SimTime,
        g: usize,
        instance: u32,
        event: &str,
        reason: &str,
        signal: f64,
        serving: u32,
    ) {
        let on = self.groups[g].on;
        let name = crate::labels::csv_safe(&self.groups[g].name).into_owned();
        if let Some(w) = self.events.as_mut()
            && self.write_error.is_none()
        {
            let row = [
                format!("{:.6}", now.as_us() as f64 / 1e6),
                name,
                instance.to_string(),
                event.to_string(),
                reason.to_string(),
                if signal.is_finite() {
                    format!("{signal:.6}")
                } else {
                    String::new()
                },
                on.to_string(),
                serving.to_string(),
            ];
            if let Err(e) = w.write_record(row) {
                self.write_error = Some(e.to_string());
            }
        }
    }
}
