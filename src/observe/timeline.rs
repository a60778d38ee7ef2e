//! `timeline.json`: a Chrome trace-event file (the JSON object format) that Perfetto UI
//! (ui.perfetto.dev) and chrome://tracing open. Timestamps are simulated µs.
//!
//! - Process "instances": one track per instance, one slice per batch step (`X` events;
//!   args: batch size, prefill and decode tokens, step µs) and counters of its wait queue,
//!   running batch and KV blocks in use at each step start (`C` events).
//! - Process "requests": one async span per sampled request from arrival to its end, with
//!   nested "queued + prefill" (arrival to first token) and "decode" (first token to
//!   completion) spans (`b`/`e` events, id = request id); within the first, for a request
//!   never preempted or retried, "to the instance" (admission, the gateway's bands, routing,
//!   the serving path's intake), "waiting" (in the instance's queue) and "prefill" (its
//!   first step's start to its first token; [`crate::request::TtftParts`]).
//!
//! Bounded by a simulated-time window and a request sample rate (chosen by request id,
//! so the same requests appear at every run). Events are streamed, not kept.

use std::fs::File;
use std::io::{BufWriter, Write};

use bevy_ecs::prelude::*;

use crate::engine::{InstanceDue, RecordDue, SimClock, SimFault};
use crate::instance::{InstanceIndex, Scheduler};
use crate::kv::KvCache;
use crate::request::{FinalState, FinishedRequest};
use crate::time::SimTime;

const INSTANCES_PID: u32 = 1;
const REQUESTS_PID: u32 = 2;

/// The open `timeline.json` and its bounds.
#[derive(Resource)]
pub struct Timeline {
    writer: Option<BufWriter<File>>,
    /// Simulated-time window, µs (inclusive).
    window: (u64, u64),
    /// Requests whose id hashes below this are drawn.
    sample_below: u64,
    first: bool,
    /// Requests in the window, and those of them drawn (the sample can leave none).
    pub requests_in_window: u64,
    pub requests_drawn: u64,
    /// Bytes written so far.
    pub bytes: u64,
    /// The first write error; the run stops on it.
    pub error: Option<String>,
}

/// A well-mixed hash of a request id (splitmix64's finaliser).
fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Timeline {
    /// The start of the simulated-time window drawn, µs (0 without a window).
    pub fn window_start_us(&self) -> u64 {
        self.window.0
    }

    /// Starts the file: the trace header and a name for every instance track.
    pub fn new(
        file: File,
        window_s: Option<(f64, f64)>,
        request_sample: f64,
        groups: &[String],
    ) -> std::io::Result<Self> {
        let window = window_s.map_or((0, u64::MAX), |(a, b)| {
            ((a * 1e6).round() as u64, (b * 1e6).round() as u64)
        });
        let sample_below = if request_sample >= 1.0 {
            u64::MAX
        } else {
            (request_sample.max(0.0) * u64::MAX as f64) as u64
        };
        let mut t = Timeline {
            writer: Some(BufWriter::with_capacity(1 << 16, file)),
            window,
            sample_below,
            first: true,
            requests_in_window: 0,
            requests_drawn: 0,
            bytes: 0,
            error: None,
        };
        t.raw("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"clock\":\"simulated microseconds\"},\"traceEvents\":[\n");
        t.event(&format!(
            r#"{{"ph":"M","name":"process_name","pid":{INSTANCES_PID},"args":{{"name":"instances"}}}}"#
        ));
        t.event(&format!(
            r#"{{"ph":"M","name":"process_name","pid":{REQUESTS_PID},"args":{{"name":"requests"}}}}"#
        ));
        for (i, g) in groups.iter().enumerate() {
            let name = serde_json::to_string(&format!("instance {i} ({g})"))
                .unwrap_or_else(|_| "\"instance\"".into());
            t.event(&format!(
                r#"{{"ph":"M","name":"thread_name","pid":{INSTANCES_PID},"tid":{i},"args":{{"name":{name}}}}}"#
            ));
        }
        Ok(t)
    }

    fn raw(&mut self, s: &str) {
        if let Some(w) = &mut self.writer
            && self.error.is_none()
        {
            if let Err(e) = w.write_all(s.as_bytes()) {
                self.error = Some(e.to_string());
            }
            self.bytes += s.len() as u64;
        }
    }

    fn event(&mut self, e: &str) {
        if self.first {
            self.first = false;
        } else {
            self.raw(",\n");
        }
        self.raw(e);
    }

    fn overlaps(&self, start: u64, end: u64) -> bool {
        start <= self.window.1 && end >= self.window.0
    }

    /// Whether a request is drawn (by id only, so every run draws the same ones).
    pub fn sampled(&self, id: u64) -> bool {
        self.sample_below == u64::MAX || mix(id) < self.sample_below
    }

    fn step(&mut self, instance: u32, start: SimTime, end: SimTime, s: &Scheduler, kv: &KvCache) {
        let (a, b) = (start.as_us(), end.as_us());
        if !self.overlaps(a, b) {
            return;
        }
        let (mut prefill, mut decode) = (0u32, 0u32);
        for p in &s.plan {
            if p.prefill {
                prefill += p.tokens;
            } else {
                decode += p.tokens;
            }
        }
        let name = match (prefill > 0, decode > 0) {
            (true, true) => "mixed step",
            (true, false) => "prefill step",
            (false, true) => "decode step",
            (false, false) => "empty step",
        };
        self.event(&format!(
            r#"{{"ph":"X","name":"{name}","pid":{INSTANCES_PID},"tid":{instance},"ts":{a},"dur":{},"args":{{"batch":{},"prefill_tokens":{prefill},"decode_tokens":{decode},"step_us":{}}}}}"#,
            b - a,
            s.plan.len(),
            b - a
        ));
        self.event(&format!(
            r#"{{"ph":"C","name":"instance {instance}","pid":{INSTANCES_PID},"tid":{instance},"ts":{a},"args":{{"waiting":{},"running":{},"kv_blocks_used":{}}}}}"#,
            s.waiting.len(),
            s.running.len(),
            kv.allocated_blocks()
        ));
    }

    fn request(&mut self, f: &FinishedRequest, now: SimTime) {
        let id = f.spec.id;
        let start = f.lifecycle.arrival.as_us();
        let end = f.completed.unwrap_or(now).as_us().max(start);
        if !self.overlaps(start, end) {
            return;
        }
        self.requests_in_window += 1;
        if !self.sampled(id) {
            return;
        }
        self.requests_drawn += 1;
        let instance = f.instance.map_or("null".to_string(), |i| i.to_string());
        let span = |ph: char, name: &str, ts: u64, args: &str| {
            format!(
                r#"{{"ph":"{ph}","cat":"request","name":"{name}","id":{id},"pid":{REQUESTS_PID},"tid":0,"ts":{ts}{args}}}"#
            )
        };
        let args = format!(
            r#","args":{{"state":"{}","instance":{instance},"input_tokens":{},"output_tokens":{},"generated_tokens":{},"cached_tokens":{},"preemptions":{}}}"#,
            f.state.as_str(),
            f.spec.input_tokens,
            f.spec.output_tokens,
            f.generated_tokens,
            f.cached_tokens,
            f.preemptions
        );
        let label = format!("request {id}");
        self.event(&span('b', &label, start, &args));
        if f.state == FinalState::Completed
            && let Some(first) = f.first_token
        {
            let first = first.as_us().clamp(start, end);
            self.event(&span('b', "queued + prefill", start, ""));
            // Its parts, for a request that went once through them (no crash's retry, no
            // preemption): reaching the instance's queue, waiting there, and the steps to
            // its first token (the token's way out follows the span).
            if let Some(parts) = f.ttft_parts() {
                let mut at = start;
                for (name, d) in [
                    ("to the instance", parts.to_the_instance),
                    ("waiting", parts.waiting),
                    ("prefill", parts.prefill),
                ] {
                    self.event(&span('b', name, at, ""));
                    at += d.as_us();
                    self.event(&span('e', name, at, ""));
                }
            }
            self.event(&span('e', "queued + prefill", first, ""));
            self.event(&span('b', "decode", first, ""));
            self.event(&span('e', "decode", end, ""));
        }
        self.event(&span('e', &label, end, ""));
    }

    /// Ends the JSON and returns the file, flushed.
    pub fn finish(mut self) -> Result<File, String> {
        self.raw("\n]}\n");
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let w = self.writer.take().expect("finished once");
        w.into_inner().map_err(|e| e.into_error().to_string())
    }
}

/// Draws the steps priced this tick (reads [`InstanceDue::complete`] before
/// `complete_steps` empties it).
pub fn draw_steps(
    due: Res<InstanceDue>,
    clock: Res<SimClock>,
    index: Res<InstanceIndex>,
    mut timeline: ResMut<Timeline>,
    mut fault: ResMut<SimFault>,
    instances: Query<(&Scheduler, &KvCache)>,
) {
    for &i in &due.complete {
        let Ok((s, kv)) = instances.get(index.0[i as usize]) else {
            continue;
        };
        timeline.step(i, clock.now, s.step_done, s, kv);
    }
    stop_on_error(&timeline, &clock, &mut fault);
}

/// Draws the requests that ended this tick (reads [`RecordDue`] before `record_finished`
/// empties it).
pub fn draw_requests(
    due: Res<RecordDue>,
    clock: Res<SimClock>,
    mut timeline: ResMut<Timeline>,
    mut fault: ResMut<SimFault>,
) {
    for f in &due.0 {
        timeline.request(f, clock.now);
    }
    stop_on_error(&timeline, &clock, &mut fault);
}

/// Draws requests still in the system when the run ends (up to `now`).
pub fn draw_unfinished(timeline: &mut Timeline, left: &[FinishedRequest], now: SimTime) {
    for f in left {
        timeline.request(f, now);
    }
}

fn stop_on_error(timeline: &Timeline, clock: &SimClock, fault: &mut SimFault) {
    if let Some(e) = &timeline.error {
        fault.0.get_or_insert_with(|| crate::engine::Fault::Write {
            file: "timeline.json",
            at: clock.now,
            error: e.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_by_id_keeps_about_the_fraction_asked() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("t.json")).unwrap();
        let t = Timeline::new(file, None, 0.1, &[]).unwrap();
        let kept = (0..100_000u64).filter(|&id| t.sampled(id)).count();
        assert!((9_000..11_000).contains(&kept), "{kept}");
        let file = File::create(dir.path().join("u.json")).unwrap();
        let all = Timeline::new(file, None, 1.0, &[]).unwrap();
        assert!((0..1000u64).all(|id| all.sampled(id)));
    }

    #[test]
    fn the_window_bounds_what_is_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("t.json")).unwrap();
        let t = Timeline::new(file, Some((1.0, 2.0)), 1.0, &[]).unwrap();
        assert!(t.overlaps(500_000, 1_000_000));
        assert!(t.overlaps(1_500_000, 3_000_000));
        assert!(!t.overlaps(0, 999_999));
        assert!(!t.overlaps(2_000_001, 3_000_000));
    }
}
