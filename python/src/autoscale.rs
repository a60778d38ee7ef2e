//! Autoscaling in Python: an object with `interval_s` (seconds between evaluations, the first
//! one interval after t = 0; 15 when absent) that is called as `scaler(now_s, groups)` with a
//! `servesim.Group` view per autoscaled group and returns `{group: desired}` or
//! `{group: (desired, reason)}`, a group by index or name (the reason goes to `scale_events.csv`; groups left out keep
//! their size; the engine clamps to the group's [min, max] and applies its cooldowns, as
//! for the built-in policies).
//!
//! A scaler must be in place before the run's first evaluation is scheduled, which happens
//! while the run is set up, so it is installed by a set-up step (`autoscale=` of `run` and
//! `evaluate`) or built by the catalogue (a registered policy), never swapped in afterwards.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt};
use servesim::SimTime;
use servesim::policy::{GroupSignals, ScalePolicy, ScaleTarget};
use servesim::time::SimDuration;

use crate::RunError;
use crate::policies::{Failure, guarded, shown};

/// A desired size the scaler returned: a whole number ≥ 0 (one past `u32` asks for as many as
/// the group's `max` allows, which applies to every size), not a bool.
fn size(v: &Bound<'_, PyAny>) -> Option<u32> {
    if v.is_instance_of::<PyBool>() {
        return None;
    }
    v.extract::<u32>()
        .ok()
        .or_else(|| (v.is_instance_of::<PyInt>() && v.ge(0).unwrap_or(false)).then_some(u32::MAX))
}

/// An autoscaled group as a Python scaler sees it at an evaluation.
#[pyclass(frozen, get_all, module = "servesim")]
pub struct Group {
    /// Index of the group in `cluster.groups`, and its name.
    pub group: u32,
    pub name: String,
    /// Instances counted in the size (starting or serving; not draining), and of those the
    /// ones whose model is loaded.
    pub current: u32,
    pub ready: u32,
    pub min: u32,
    pub max: u32,
    /// Price of one instance-hour.
    pub instance_cost_per_hour: f64,
    /// Busy fraction over the window; waiting and in-transit requests per ready instance;
    /// KV blocks in use / total; requests in the system per ready instance.
    pub utilization: f64,
    pub queue_per_instance: f64,
    pub kv_usage: f64,
    pub in_flight_per_instance: f64,
    /// p90 TTFT and p90 mean ITL (ms) of the group's requests that finished in the window,
    /// None when none did.
    pub ttft_p90_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
}

#[pymethods]
impl Group {
    fn __repr__(&self) -> String {
        format!(
            "Group(group={}, name={:?}, current={}, ready={}, min={}, max={}, utilization={:.3}, in_flight_per_instance={:.2})",
            self.group,
            self.name,
            self.current,
            self.ready,
            self.min,
            self.max,
            self.utilization,
            self.in_flight_per_instance
        )
    }
}

/// The evaluation interval an object asks for (`interval_s`, default 15 s).
pub fn interval(py: Python<'_>, scaler: &Py<PyAny>) -> PyResult<SimDuration> {
    let b = scaler.bind(py);
    if !b.hasattr("interval_s")? {
        return Ok(SimDuration::from_secs_f64(15.0));
    }
    let given = b.getattr("interval_s")?;
    match given.extract::<f64>() {
        Ok(s) if s.is_finite() && s >= 1e-6 && !given.is_instance_of::<PyBool>() => {
            Ok(SimDuration::from_secs_f64(s))
        }
        _ => Err(PyValueError::new_err(format!(
            "the Python scaler's interval_s must be a finite number of seconds ≥ 1e-6 (the time between evaluations), got {}",
            shown(&given)
        ))),
    }
}

/// The group a scaler's key names: its index (`Group.group`) or its name (`Group.name`).
fn group_of(key: &Bound<'_, PyAny>, names: &[String]) -> PyResult<u32> {
    if !key.is_instance_of::<PyBool>()
        && let Ok(g) = key.extract::<u32>()
    {
        return Ok(g);
    }
    let named = key
        .extract::<String>()
        .ok()
        .and_then(|n| names.iter().position(|g| *g == n));
    named.map(|g| g as u32).ok_or_else(|| {
        RunError::new_err(format!(
            "the Python scaler's keys are groups, by index (Group.group) or name (Group.name); {} is neither (the groups: {})",
            shown(key),
            names.join(", ")
        ))
    })
}

/// `scaler(now_s, groups) -> {group: desired}`.
pub struct PyScaler {
    pub f: Py<PyAny>,
    pub interval: SimDuration,
    /// Group names by index.
    pub groups: Vec<String>,
    /// Reported in `scale_events.csv` as the reason when the scaler gives none.
    pub reason: &'static str,
    /// Reasons given so far, leaked once each (`ScaleTarget` keeps a `&'static str`).
    pub reasons: Vec<&'static str>,
    pub failure: Failure,
}

impl PyScaler {
    pub fn new(
        f: Py<PyAny>,
        interval: SimDuration,
        groups: Vec<String>,
        reason: &'static str,
        failure: Failure,
    ) -> Self {
        PyScaler {
            f,
            interval,
            groups,
            reason,
            reasons: Vec::new(),
            failure,
        }
    }
}

fn keep(reasons: &mut Vec<&'static str>, reason: String) -> &'static str {
    if let Some(r) = reasons.iter().find(|r| **r == reason) {
        return r;
    }
    let leaked: &'static str = Box::leak(reason.into_boxed_str());
    reasons.push(leaked);
    leaked
}

impl ScalePolicy for PyScaler {
    fn next_evaluation(&self, now: SimTime, first: bool) -> Option<SimTime> {
        servesim::policy::every(self.interval, now, first)
    }

    fn evaluate(&mut self, now: SimTime, groups: &[GroupSignals]) -> Vec<ScaleTarget> {
        let names = &self.groups;
        let default_reason = self.reason;
        let reasons = &mut self.reasons;
        guarded(&self.failure, Vec::new(), |py| {
            let views = groups
                .iter()
                .map(|g| {
                    Bound::new(
                        py,
                        Group {
                            group: g.group,
                            name: names.get(g.group as usize).cloned().unwrap_or_default(),
                            current: g.current,
                            ready: g.ready,
                            min: g.min,
                            max: g.max,
                            instance_cost_per_hour: g.instance_cost_per_hour,
                            utilization: g.utilization,
                            queue_per_instance: g.queue_per_instance,
                            kv_usage: g.kv_usage,
                            in_flight_per_instance: g.in_flight_per_instance,
                            ttft_p90_ms: g.ttft_p90_ms,
                            itl_p90_ms: g.itl_p90_ms,
                        },
                    )
                })
                .collect::<PyResult<Vec<_>>>()?;
            let out = self.f.bind(py).call1((now.as_us() as f64 / 1e6, views))?;
            let wanted = out.cast::<PyDict>().map_err(|_| {
                RunError::new_err(
                    "the Python scaler must return a dict {group (index or name): desired size or (size, reason)}",
                )
            })?;
            let mut targets = Vec::with_capacity(wanted.len());
            for (k, v) in wanted.iter() {
                let group = group_of(&k, names)?;
                let sized = match size(&v) {
                    Some(d) => Some((d, default_reason)),
                    None => v
                        .extract::<(Bound<'_, PyAny>, String)>()
                        .ok()
                        .and_then(|(d, r)| Some((size(&d)?, keep(reasons, r)))),
                };
                let Some((desired, reason)) = sized else {
                    return Err(RunError::new_err(format!(
                        "the Python scaler's size for group {group} must be a whole number ≥ 0 (an int, not a bool) or (size, reason), got {}",
                        shown(&v)
                    )));
                };
                let Some(g) = groups.iter().find(|g| g.group == group) else {
                    return Err(RunError::new_err(format!(
                        "the Python scaler sized group {group}, which is not an autoscaled group"
                    )));
                };
                targets.push(ScaleTarget {
                    group,
                    desired,
                    reason,
                    signal: g.in_flight_per_instance,
                });
            }
            targets.sort_by_key(|t| t.group);
            Ok(targets)
        })
    }
}
