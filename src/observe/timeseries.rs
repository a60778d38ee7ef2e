//! `timeseries.csv`: the state of every instance and of the cluster, sampled every
//! `outputs.sample_interval_s` of simulated time and streamed to disk (memory stays flat).
//!
//! Sampling needs no events of its own: the state of a discrete-event simulation only
//! changes at ticks, so before each tick the driver writes every sample time that falls
//! before it, with the state as the previous tick left it. A row at time `t` therefore shows
//! the state after every event at or before `t`; its rates and counts cover `(t − Δ, t]`.
//!
//! Between two ticks nothing changes, so the rows of one idle span differ only in their time
//! after its first (which counts what the tick before did). A span of more than
//! [`IDLE_ROWS`] sample times is written as its first two rows and its last: the rows left out
//! would repeat the second. The file then grows with the work simulated, never with simulated
//! time alone (a trace whose arrivals are years apart writes a few rows per arrival).

use std::fs::File;
use std::io::BufWriter;

use bevy_ecs::prelude::*;

use crate::engine::Injected;
use crate::instance::{InstanceIndex, Scheduler};
use crate::instance::{Phase, Power};
use crate::kv::KvCache;
use crate::metrics::Aggregates;
use crate::scenario::Scenario;
use crate::time::{SimDuration, SimTime};

/// Columns of `timeseries.csv`. Rows with `instance` = `all` are cluster-wide sums.
pub const COLUMNS: [&str; 15] = [
    "time_s",
    "instance",
    "group",
    "phase",
    "waiting",
    "running",
    "in_flight",
    "kv_used_blocks",
    "kv_total_blocks",
    "cpu_kv_used_blocks",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "completed",
    "arrivals",
    "instances_up",
];

/// The column `timeseries.csv` ends with when the scenario has `flow_control`: requests
/// waiting in the gateway's bands (on the `all` rows; empty on an instance's).
pub const GATEWAY_COLUMN: &str = "gateway_waiting";

/// Sample times of one idle span (between two ticks) written in full; a longer span is
/// written as its first two rows and its last.
pub const IDLE_ROWS: u64 = 100;

/// Rows a run gets when `sample_interval_s` is left out.
pub const TARGET_SAMPLES: f64 = 1000.0;

/// The sample interval of a scenario: the one given, else about a thousandth of the run
/// rounded to 1, 2 or 5 × 10ⁿ seconds (1 s when the run's length is not set).
pub fn interval(scenario: &Scenario) -> SimDuration {
    interval_of(
        scenario.outputs.sample_interval_s,
        scenario.workload.duration_s,
        scenario.horizon_s,
    )
}

fn interval_of(given: Option<f64>, duration_s: Option<f64>, horizon_s: Option<f64>) -> SimDuration {
    if let Some(dt) = given {
        return SimDuration::from_secs_f64(dt).max(SimDuration(1));
    }
    let length = [duration_s, horizon_s]
        .into_iter()
        .flatten()
        .filter(|x| x.is_finite() && *x > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !length.is_finite() {
        return SimDuration::from_secs_f64(1.0);
    }
    SimDuration::from_secs_f64(nice(length / TARGET_SAMPLES)).max(SimDuration(1))
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `x` (x > 0).
pub fn nice(x: f64) -> f64 {
    let decade = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|v| *v >= x * (1.0 - 1e-12))
        .unwrap_or(10.0 * decade)
}

/// Counters at the previous sample, to turn totals into per-interval figures.
#[derive(Clone, Copy, Default)]
struct Seen {
    prefill: u64,
    decode: u64,
    completed: u64,
}

/// The sampler: the open file and what the previous sample saw.
#[derive(bevy_ecs::prelude::Resource)]
pub struct TimeSeries {
    interval: SimDuration,
    /// The next sample time.
    next: SimTime,
    /// The previous sample time (rates are per second since then).
    last: SimTime,
    writer: csv::Writer<BufWriter<File>>,
    scratch: Scratch,
    groups: Vec<String>,
    seen: Vec<Seen>,
    cluster: (u64, u64),
    /// The first write error; the run stops on it.
    pub error: Option<String>,
    /// Rows end with [`GATEWAY_COLUMN`].
    gateway: bool,
}

impl TimeSeries {
    /// A sampler writing to `file` (header included) for instances in `groups` order; with
    /// `gateway`, rows end with [`GATEWAY_COLUMN`].
    pub fn new(
        file: File,
        interval: SimDuration,
        groups: Vec<String>,
        gateway: bool,
    ) -> csv::Result<Self> {
        let mut writer = csv::Writer::from_writer(BufWriter::with_capacity(1 << 16, file));
        if gateway {
            writer.write_record(COLUMNS.iter().chain([&GATEWAY_COLUMN]))?;
        } else {
            writer.write_record(COLUMNS)?;
        }
        Ok(TimeSeries {
            interval,
            next: SimTime::ZERO + interval,
            last: SimTime::ZERO,
            writer,
            scratch: Scratch::default(),
            seen: vec![Seen::default(); groups.len()],
            groups: groups
                .iter()
                .map(|g| crate::labels::csv_safe(g).into_owned())
                .collect(),
            cluster: (0, 0),
            error: None,
            gateway,
        })
    }

    /// Writes every sample time before `t` (the time of the tick about to run).
    #[inline]
    /// The next sample time: a tick at or before it writes no row.
    pub fn next_sample(&self) -> SimTime {
        self.next
    }

    pub fn before_tick(&mut self, world: &World, t: SimTime) {
        if t > self.next && self.error.is_none() {
            // Sample times before t: next, next + Δ, …, next + (n − 1)Δ.
            let n = (t.as_us() - self.next.as_us()).div_ceil(self.interval.as_us().max(1));
            self.write_idle_span(world, n);
        }
    }

    /// Writes the next `n` sample times, over which nothing changes: all of them when they
    /// are at most [`IDLE_ROWS`], else the first two and the last.
    fn write_idle_span(&mut self, world: &World, n: u64) {
        let step = self.interval.as_us().max(1);
        let mut k = 0;
        while k < n && self.error.is_none() {
            if k == 2 && n > IDLE_ROWS {
                // Rows 2 … n − 2 would repeat row 1 with only the time changed.
                self.next = SimTime(self.next.as_us().saturating_add((n - 1 - k) * step));
                k = n - 1;
            }
            let at = self.next;
            self.write(world, at);
            self.next += self.interval;
            k += 1;
        }
    }

    /// At the end of a run at `end`: every sample time up to `end`, then one last row at
    /// `end` itself when it falls between two sample times. Returns the file, flushed.
    pub fn finish(mut self, world: &World, end: SimTime) -> Result<File, String> {
        if self.next <= end {
            // Sample times up to end: next, …, next + (n − 1)Δ ≤ end.
            let n = (end.as_us() - self.next.as_us()) / self.interval.as_us().max(1) + 1;
            self.write_idle_span(world, n);
        }
        if self.error.is_none() && self.last < end {
            self.write(world, end);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        let buf = self.writer.into_inner().map_err(|e| e.to_string())?;
        buf.into_inner().map_err(|e| e.to_string())
    }

    fn write(&mut self, world: &World, at: SimTime) {
        if let Err(e) = self.write_rows(world, at) {
            self.error = Some(e.to_string());
        }
        self.last = at;
    }

    fn write_rows(&mut self, world: &World, at: SimTime) -> csv::Result<()> {
        let span = (at.as_us().saturating_sub(self.last.as_us())) as f64 / 1e6;
        let rate = |n: u64| if span > 0.0 { n as f64 / span } else { 0.0 };
        let time = at.as_us() as f64 / 1e6;
        let index = &world.resource::<InstanceIndex>().0;
        let mut total = Row::default();
        for (i, &e) in index.iter().enumerate() {
            let (Some(sched), Some(kv)) = (world.get::<Scheduler>(e), world.get::<KvCache>(e))
            else {
                continue;
            };
            let phase = world.get::<Power>(e).map_or(Phase::Serving, |p| p.phase);
            let c = sched.counters;
            let seen = std::mem::replace(
                &mut self.seen[i],
                Seen {
                    prefill: c.prefill_tokens,
                    decode: c.decode_tokens,
                    completed: c.completed,
                },
            );
            // A crashed instance (faults) is down whatever its life-cycle phase says.
            let up = matches!(phase, Phase::Serving | Phase::WarmingUp) && !sched.down;
            let row = Row {
                waiting: sched.waiting.len() as u64,
                running: sched.running.len() as u64,
                in_flight: sched.resident() as u64,
                kv_used: u64::from(kv.allocated_blocks()),
                kv_total: u64::from(kv.total_blocks()),
                cpu_used: kv.cpu.as_ref().map_or(0, |c| u64::from(c.len())),
                prefill: c.prefill_tokens - seen.prefill,
                decode: c.decode_tokens - seen.decode,
                completed: c.completed - seen.completed,
                up: u64::from(up),
            };
            total.add(&row);
            let mut f = Fields::new(&mut self.scratch);
            f.fixed(time, 6);
            f.int(i as u64);
            f.text(&self.groups[i]);
            f.text(if sched.down { "down" } else { phase.name() });
            for n in [row.waiting, row.running, row.in_flight, row.kv_used] {
                f.int(n);
            }
            f.int(row.kv_total);
            f.int(row.cpu_used);
            f.fixed(rate(row.prefill), 1);
            f.fixed(rate(row.decode), 1);
            f.int(row.completed);
            f.text("");
            f.int(row.up);
            if self.gateway {
                f.text("");
            }
            f.write(&mut self.writer)?;
        }
        let injected = world.resource::<Injected>().0;
        let agg = world.resource::<Aggregates>();
        let (seen_injected, seen_completed) =
            std::mem::replace(&mut self.cluster, (injected, agg.completed));
        let mut f = Fields::new(&mut self.scratch);
        f.fixed(time, 6);
        f.text("all");
        f.text("");
        f.text("");
        f.int(total.waiting);
        f.int(total.running);
        f.int(injected.saturating_sub(agg.ended()));
        f.int(total.kv_used);
        f.int(total.kv_total);
        f.int(total.cpu_used);
        f.fixed(rate(total.prefill), 1);
        f.fixed(rate(total.decode), 1);
        f.int(agg.completed - seen_completed);
        f.int(injected - seen_injected);
        f.int(total.up);
        if self.gateway {
            f.int(
                world
                    .get_resource::<crate::gateway::Gateway>()
                    .map_or(0, |g| g.waiting),
            );
        }
        f.write(&mut self.writer)
    }
}

/// One row's fields, formatted into a reused buffer (no allocation, no `core::fmt`) and
/// handed to the csv writer, which quotes them as it would any strings.
struct Fields<'a> {
    scratch: &'a mut Scratch,
}

/// Reused by every row: the field bytes, where each field ends, and itoa's buffer.
#[derive(Default)]
struct Scratch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    digits: itoa::Buffer,
}

impl<'a> Fields<'a> {
    fn new(scratch: &'a mut Scratch) -> Self {
        scratch.bytes.clear();
        scratch.ends.clear();
        Fields { scratch }
    }

    fn end(&mut self) {
        self.scratch.ends.push(self.scratch.bytes.len());
    }

    fn int(&mut self, n: u64) {
        let s = &mut *self.scratch;
        s.bytes.extend_from_slice(s.digits.format(n).as_bytes());
        self.end();
    }

    /// `x` with `decimals` decimals, as `format!("{x:.decimals$}")` prints it.
    fn fixed(&mut self, x: f64, decimals: u32) {
        let s = &mut *self.scratch;
        crate::metrics::fixed(&mut s.bytes, x, decimals, &mut s.digits);
        self.end();
    }

    fn text(&mut self, t: &str) {
        self.scratch.bytes.extend_from_slice(t.as_bytes());
        self.end();
    }

    fn write(self, writer: &mut csv::Writer<BufWriter<File>>) -> csv::Result<()> {
        let s = &*self.scratch;
        let mut start = 0;
        writer.write_record(s.ends.iter().map(|&end| {
            let field = &s.bytes[start..end];
            start = end;
            field
        }))
    }
}

#[derive(Default)]
struct Row {
    waiting: u64,
    running: u64,
    in_flight: u64,
    kv_used: u64,
    kv_total: u64,
    cpu_used: u64,
    prefill: u64,
    decode: u64,
    completed: u64,
    up: u64,
}

impl Row {
    fn add(&mut self, r: &Row) {
        self.waiting += r.waiting;
        self.running += r.running;
        self.in_flight += r.in_flight;
        self.kv_used += r.kv_used;
        self.kv_total += r.kv_total;
        self.cpu_used += r.cpu_used;
        self.prefill += r.prefill;
        self.decode += r.decode;
        self.completed += r.completed;
        self.up += r.up;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_rounds_up_to_one_two_five() {
        assert_eq!(nice(0.3), 0.5);
        assert_eq!(nice(0.6), 1.0);
        assert_eq!(nice(1.0), 1.0);
        assert_eq!(nice(1.2), 2.0);
        assert_eq!(nice(3.0), 5.0);
        assert_eq!(nice(0.012), 0.02);
        assert_eq!(nice(120.0), 200.0);
    }

    #[test]
    fn default_interval_is_a_thousandth_of_the_run() {
        let s = |x: f64| SimDuration::from_secs_f64(x);
        assert_eq!(interval_of(None, Some(600.0), None), s(1.0));
        assert_eq!(interval_of(None, Some(600.0), Some(60.0)), s(0.1));
        assert_eq!(interval_of(Some(0.25), Some(600.0), None), s(0.25));
        assert_eq!(interval_of(None, None, None), s(1.0));
        assert_eq!(interval_of(None, Some(0.0001), None), SimDuration(1));
    }
}
