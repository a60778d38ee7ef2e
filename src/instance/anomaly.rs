//! Overtaking in an instance's wait queue, the two failure modes batch formation can show
//! (docs/outputs.md, "Anomalies"):
//! - **head-of-line blocking**: a request is taken from the wait queue while a request that
//!   arrived before it (at the cluster) still waits in that queue;
//! - **priority inversion**: the same, where a waiting request that arrived before it also
//!   has a higher priority (the priority policy's value at that moment).
//!
//! Each request taken is counted at most once for each. FCFS takes requests in the order they
//! joined the queue, so it overtakes only when that order is not their arrival order (a
//! preempted request put back at the head, a request enqueued after a later arrival): the
//! check runs for a reordering queue order, or while [`Scheduler::unordered`] says so, and
//! costs nothing otherwise.

use super::schedulers::Ordering;
use super::{AnomalyRow, Scheduler};
use crate::time::SimTime;

/// Counts (and with `decisions.csv`, records) the overtaking by the batch just formed:
/// [`Scheduler::scheduled`] against what still waits. `O(waiting · log scheduled)`.
pub fn check_overtaking(sched: &mut Scheduler, now: SimTime, ordering: &Ordering<'_>) {
    let fifo = ordering.order.is_fifo();
    if sched.scheduled.is_empty() || (fifo && !sched.unordered) {
        return;
    }
    // Each request taken: (arrival, id, priority).
    let mut taken: Vec<(SimTime, u64, f64)> = sched
        .scheduled
        .iter()
        .filter_map(|&e| sched.running.iter().rev().find(|s| s.entity == e))
        .map(|s| (s.lifecycle.arrival, s.spec.id, ordering.priority_of(s, now)))
        .collect();
    taken.sort_by_key(|t| (t.0, t.1));
    // Bucket j: the waiting requests that arrived before taken[j] but not before
    // taken[j - 1]; each keeps its earliest arrival and its highest priority.
    let mut earliest: Vec<Option<(SimTime, u64)>> = vec![None; taken.len()];
    let mut highest: Vec<Option<(f64, u64)>> = vec![None; taken.len()];
    for w in &sched.waiting {
        let arrival = w.lifecycle.arrival;
        let j = taken.partition_point(|t| t.0 <= arrival);
        if j == taken.len() {
            continue;
        }
        let key = (arrival, w.spec.id);
        if earliest[j].is_none_or(|e| key < e) {
            earliest[j] = Some(key);
        }
        let p = ordering.priority_of(w, now);
        if highest[j].is_none_or(|h| p > h.0) {
            highest[j] = Some((p, w.spec.id));
        }
    }
    let mut first: Option<(SimTime, u64)> = None;
    let mut top: Option<(f64, u64)> = None;
    for (j, &(arrival, id, priority)) in taken.iter().enumerate() {
        if let Some(e) = earliest[j]
            && first.is_none_or(|f| e < f)
        {
            first = Some(e);
        }
        if let Some(h) = highest[j]
            && top.is_none_or(|t| h.0 > t.0)
        {
            top = Some(h);
        }
        let Some((waited_since, waiting)) = first else {
            continue;
        };
        sched.counters.hol_blocking += 1;
        if let Some(rows) = &mut sched.anomaly_rows {
            rows.push(AnomalyRow {
                time: now,
                kind: "hol_blocking",
                request: Some(id),
                detail: format!(
                    "request {id} (arrived {:.6} s) taken while request {waiting} (arrived {:.6} s) waits",
                    arrival.as_us() as f64 / 1e6,
                    waited_since.as_us() as f64 / 1e6
                ),
            });
        }
        if let Some((p, higher)) = top
            && p > priority
        {
            sched.counters.priority_inversions += 1;
            if let Some(rows) = &mut sched.anomaly_rows {
                rows.push(AnomalyRow {
                    time: now,
                    kind: "priority_inversion",
                    request: Some(id),
                        detail: format!(
                        "request {id} (priority {priority}) taken while request {higher} (priority {p}, arrived earlier) waits"
                    ),
                });
            }
        }
    }
    if fifo {
        sched.unordered = !sched
            .waiting
            .iter()
            .zip(sched.waiting.iter().skip(1))
            .all(|(a, b)| a.lifecycle.arrival <= b.lifecycle.arrival);
    }
}
