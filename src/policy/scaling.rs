//! Autoscaling policies: `threshold`, `target_tracking` (Kubernetes HPA arithmetic),
//! `slo_aware` and `scheduled`. Each sizes every autoscaled group on its own, or — with
//! `cheapest_first: 1` — sizes the autoscaled groups together from their pooled signals and
//! adds the cheapest instances first and removes the dearest first (heterogeneous pools).
//!
//! The engine (`crate::autoscale`) clamps what a policy asks for to each group's
//! [min, max] and applies its cooldowns; policies only do arithmetic on [`GroupSignals`].

use std::collections::VecDeque;

use super::{GroupSignals, PolicyArgs, ScaleEntry, ScalePolicy, ScaleTarget, every};
use crate::time::{SimDuration, SimTime};

/// A windowed or instantaneous signal a policy can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signal {
    Utilization,
    Queue,
    Kv,
    InFlight,
}

impl Signal {
    /// True for the signals that are fractions of capacity (never above 1).
    fn is_fraction(self) -> bool {
        matches!(self, Signal::Utilization | Signal::Kv)
    }

    const ALL: [(Signal, &'static str); 4] = [
        (Signal::Utilization, "utilization"),
        (Signal::Queue, "queue"),
        (Signal::Kv, "kv"),
        (Signal::InFlight, "in_flight"),
    ];

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map_or("", |x| x.1)
    }

    fn of(self, g: &GroupSignals) -> f64 {
        match self {
            Signal::Utilization => g.utilization,
            Signal::Queue => g.queue_per_instance,
            Signal::Kv => g.kv_usage,
            Signal::InFlight => g.in_flight_per_instance,
        }
    }
}

/// The one signal whose parameter (`prefix` + name + `suffix`) is given, if exactly one is.
fn one_signal(args: &PolicyArgs<'_>, keys: &[(&str, &str)]) -> Result<Signal, String> {
    let given: Vec<Signal> = Signal::ALL
        .iter()
        .filter(|(_, n)| {
            keys.iter()
                .any(|(pre, suf)| args.params.contains_key(&format!("{pre}{n}{suf}")))
        })
        .map(|(s, _)| *s)
        .collect();
    match given.as_slice() {
        [s] => Ok(*s),
        [] => Err(format!(
            "give one signal: {}",
            Signal::ALL
                .iter()
                .map(|(_, n)| format!("{}{n}{}", keys[0].0, keys[0].1))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Err(format!(
            "give one signal, not {}",
            given
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(" and ")
        )),
    }
}

fn interval(args: &PolicyArgs<'_>, default_s: f64) -> Result<SimDuration, String> {
    let s = args.at_least("interval_s", default_s, 0.001)?;
    if s > 1e9 {
        return Err(format!("interval_s must be ≤ 10⁹ s, got {s}"));
    }
    Ok(SimDuration::from_secs_f64(s))
}

fn flag(args: &PolicyArgs<'_>, name: &str) -> Result<bool, String> {
    let v = args.get(name, 0.0);
    if v == 0.0 || v == 1.0 {
        Ok(v == 1.0)
    } else {
        Err(format!("{name} must be 0 or 1, got {v}"))
    }
}

fn step(args: &PolicyArgs<'_>) -> Result<u32, String> {
    let v = args.at_least("step", 1.0, 1.0)?;
    if v.fract() != 0.0 || v > 1e6 {
        return Err(format!("step must be a whole number of instances, got {v}"));
    }
    Ok(v as u32)
}

/// The autoscaled groups pooled into one: sums of sizes, ready-weighted signals, the
/// worst (highest) windowed latency.
fn pooled(groups: &[GroupSignals]) -> GroupSignals {
    let ready: f64 = groups.iter().map(|g| f64::from(g.ready)).sum();
    let weigh = |f: fn(&GroupSignals) -> f64| {
        if ready == 0.0 {
            groups.iter().map(f).fold(0.0, f64::max)
        } else {
            groups
                .iter()
                .map(|g| f(g) * f64::from(g.ready))
                .sum::<f64>()
                / ready
        }
    };
    let worst = |f: fn(&GroupSignals) -> Option<f64>| {
        groups
            .iter()
            .filter_map(f)
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))))
    };
    GroupSignals {
        group: u32::MAX,
        current: groups.iter().map(|g| g.current).sum(),
        ready: groups.iter().map(|g| g.ready).sum(),
        min: groups.iter().map(|g| g.min).sum(),
        max: groups.iter().map(|g| g.max).sum(),
        instance_cost_per_hour: 0.0,
        utilization: weigh(|g| g.utilization),
        queue_per_instance: weigh(|g| g.queue_per_instance),
        kv_usage: weigh(|g| g.kv_usage),
        in_flight_per_instance: weigh(|g| g.in_flight_per_instance),
        ttft_p90_ms: worst(|g| g.ttft_p90_ms),
        itl_p90_ms: worst(|g| g.itl_p90_ms),
    }
}

/// Spreads a pooled size over the groups: growth goes to the cheapest instances first (to
/// each group's max), shrinkage comes from the dearest first (to each group's min). Ties
/// go by group index.
pub fn spread(total: u32, groups: &[GroupSignals]) -> Vec<u32> {
    let mut sizes: Vec<u32> = groups.iter().map(|g| g.current).collect();
    let now: u32 = sizes.iter().sum();
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| {
        groups[a]
            .instance_cost_per_hour
            .total_cmp(&groups[b].instance_cost_per_hour)
            .then(a.cmp(&b))
    });
    if total > now {
        let mut add = total - now;
        for &i in &order {
            let room = groups[i].max.saturating_sub(sizes[i]).min(add);
            sizes[i] += room;
            add -= room;
        }
    } else {
        let mut cut = now - total;
        for &i in order.iter().rev() {
            let spare = sizes[i].saturating_sub(groups[i].min).min(cut);
            sizes[i] -= spare;
            cut -= spare;
        }
    }
    sizes
}

/// Applies `decide` to each group, or to the pool spread cheapest-first.
fn decide_all(
    groups: &[GroupSignals],
    cheapest_first: bool,
    mut decide: impl FnMut(usize, &GroupSignals) -> Option<(u32, &'static str, f64)>,
) -> Vec<ScaleTarget> {
    if !cheapest_first {
        return groups
            .iter()
            .enumerate()
            .filter_map(|(k, g)| {
                decide(k, g).map(|(desired, reason, signal)| ScaleTarget {
                    group: g.group,
                    desired,
                    reason,
                    signal,
                })
            })
            .collect();
    }
    let pool = pooled(groups);
    let Some((total, reason, signal)) = decide(0, &pool) else {
        return Vec::new();
    };
    spread(total.clamp(pool.min, pool.max), groups)
        .into_iter()
        .zip(groups)
        .map(|(desired, g)| ScaleTarget {
            group: g.group,
            desired,
            reason,
            signal,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------

pub(super) const THRESHOLD: ScaleEntry = ScaleEntry {
    name: "threshold",
    description: "add `step` instances when a signal is above its high bound, remove `step` when below its low bound",
    params: &[
        (
            "utilization_high / utilization_low",
            "bounds on the windowed busy fraction (give one signal's bounds)",
        ),
        (
            "queue_high / queue_low",
            "bounds on waiting requests per ready instance",
        ),
        ("kv_high / kv_low", "bounds on the KV usage fraction"),
        (
            "in_flight_high / in_flight_low",
            "bounds on requests in the system per ready instance",
        ),
        (
            "step",
            "instances added or removed per evaluation (default 1)",
        ),
        ("interval_s", "evaluation interval (default 15)"),
        (
            "cheapest_first",
            "1: size the groups as one pool, cheapest instances first (default 0)",
        ),
    ],
    free_params: true,
    build: |args| {
        check_keys(
            args,
            &[
                "utilization_high",
                "utilization_low",
                "queue_high",
                "queue_low",
                "kv_high",
                "kv_low",
                "in_flight_high",
                "in_flight_low",
                "step",
                "interval_s",
                "cheapest_first",
            ],
        )?;
        let signal = one_signal(args, &[("", "_high"), ("", "_low")])?;
        let bound = |side: &str| -> Result<Option<f64>, String> {
            let key = format!("{}_{side}", signal.name());
            match args.params.get(&key) {
                None => Ok(None),
                Some(v) if signal.is_fraction() && *v > 1.0 => Err(format!(
                    "{key} is a fraction of capacity in [0, 1], got {v}: the signal never \
                     gets there, so this bound would never act"
                )),
                Some(v) if v.is_finite() && *v >= 0.0 => Ok(Some(*v)),
                Some(v) => Err(format!("{key} must be a finite number ≥ 0, got {v}")),
            }
        };
        let (high, low) = (bound("high")?, bound("low")?);
        if let (Some(h), Some(l)) = (high, low)
            && l >= h
        {
            return Err(format!(
                "{0}_low ({l}) must be below {0}_high ({h})",
                signal.name()
            ));
        }
        Ok(Box::new(Threshold {
            signal,
            high,
            low,
            step: step(args)?,
            interval: interval(args, 15.0)?,
            cheapest_first: flag(args, "cheapest_first")?,
        }))
    },
};

/// Rejects parameter names outside `known` (the entries take free keys only to allow the
/// `a / b` descriptions above).
fn check_keys(args: &PolicyArgs<'_>, known: &[&str]) -> Result<(), String> {
    for k in args.params.keys() {
        if !known.contains(&k.as_str()) {
            return Err(format!(
                "unknown parameter `{k}` (known: {})",
                known.join(", ")
            ));
        }
    }
    Ok(())
}

struct Threshold {
    signal: Signal,
    high: Option<f64>,
    low: Option<f64>,
    step: u32,
    interval: SimDuration,
    cheapest_first: bool,
}

impl ScalePolicy for Threshold {
    fn next_evaluation(&self, now: SimTime, first: bool) -> Option<SimTime> {
        every(self.interval, now, first)
    }

    fn evaluate(&mut self, _now: SimTime, groups: &[GroupSignals]) -> Vec<ScaleTarget> {
        let (signal, high, low, step) = (self.signal, self.high, self.low, self.step);
        decide_all(groups, self.cheapest_first, |_, g| {
            let v = signal.of(g);
            let desired = if high.is_some_and(|h| v > h) {
                g.current.saturating_add(step)
            } else if low.is_some_and(|l| v < l) {
                g.current.saturating_sub(step)
            } else {
                return None;
            };
            Some((desired, signal.name(), v))
        })
    }
}

// ---------------------------------------------------------------------------------------

pub(super) const TARGET_TRACKING: ScaleEntry = ScaleEntry {
    name: "target_tracking",
    description: "Kubernetes HPA: desired = ceil(ready × signal / target) outside a tolerance band, with stabilisation windows",
    params: &[
        (
            "target_utilization | target_queue | target_kv | target_in_flight",
            "the signal's target (give one)",
        ),
        (
            "tolerance",
            "no change while |signal/target − 1| ≤ tolerance (default 0.1)",
        ),
        (
            "scale_up_stabilization_s",
            "scale up only to the lowest size recommended within this window (default 0)",
        ),
        (
            "scale_down_stabilization_s",
            "scale down only to the highest size recommended within this window (default 300)",
        ),
        ("interval_s", "evaluation interval (default 15)"),
        (
            "cheapest_first",
            "1: size the groups as one pool, cheapest instances first (default 0)",
        ),
    ],
    free_params: true,
    build: |args| {
        check_keys(
            args,
            &[
                "target_utilization",
                "target_queue",
                "target_kv",
                "target_in_flight",
                "tolerance",
                "scale_up_stabilization_s",
                "scale_down_stabilization_s",
                "interval_s",
                "cheapest_first",
            ],
        )?;
        let signal = one_signal(args, &[("target_", "")])?;
        let key = format!("target_{}", signal.name());
        let target = args.get(&key, 0.0);
        if !(target.is_finite() && target > 0.0) {
            return Err(format!("{key} must be a finite number > 0, got {target}"));
        }
        if signal.is_fraction() && target > 1.0 {
            return Err(format!(
                "{key} is a fraction of capacity in (0, 1], got {target}: the signal never \
                 reaches it, so the group would never scale up"
            ));
        }
        let window = |name: &str, default: f64| -> Result<SimDuration, String> {
            let s = args.at_least(name, default, 0.0)?;
            if s > 1e9 {
                return Err(format!("{name} must be ≤ 10⁹ s, got {s}"));
            }
            Ok(SimDuration::from_secs_f64(s))
        };
        Ok(Box::new(TargetTracking {
            signal,
            target,
            tolerance: args.at_least("tolerance", 0.1, 0.0)?,
            up_window: window("scale_up_stabilization_s", 0.0)?,
            down_window: window("scale_down_stabilization_s", 300.0)?,
            interval: interval(args, 15.0)?,
            cheapest_first: flag(args, "cheapest_first")?,
            history: Default::default(),
        }))
    },
};

struct TargetTracking {
    signal: Signal,
    target: f64,
    tolerance: f64,
    up_window: SimDuration,
    down_window: SimDuration,
    interval: SimDuration,
    cheapest_first: bool,
    /// Recommendations (time, size) by group (`u32::MAX`: the pool), newest last.
    history: std::collections::BTreeMap<u32, VecDeque<(SimTime, u32)>>,
}

/// HPA's raw recommendation: ceil(ready × signal / target) outside the tolerance band.
/// With nothing ready, any demand asks for one instance.
pub fn hpa_recommendation(
    current: u32,
    ready: u32,
    value: f64,
    target: f64,
    tolerance: f64,
) -> u32 {
    let ratio = value / target;
    if (ratio - 1.0).abs() <= tolerance {
        return current;
    }
    if ready == 0 {
        return if value > 0.0 { current.max(1) } else { 0 };
    }
    let want = (f64::from(ready) * ratio - 1e-9).ceil();
    want.clamp(0.0, f64::from(u32::MAX)) as u32
}

impl ScalePolicy for TargetTracking {
    fn next_evaluation(&self, now: SimTime, first: bool) -> Option<SimTime> {
        every(self.interval, now, first)
    }

    fn evaluate(&mut self, now: SimTime, groups: &[GroupSignals]) -> Vec<ScaleTarget> {
        let (signal, target, tolerance) = (self.signal, self.target, self.tolerance);
        let (up, down) = (self.up_window, self.down_window);
        let keep = up.max(down);
        let history = &mut self.history;
        decide_all(groups, self.cheapest_first, |_, g| {
            let v = signal.of(g);
            let raw = hpa_recommendation(g.current, g.ready, v, target, tolerance);
            let h = history.entry(g.group).or_default();
            h.push_back((now, raw));
            while h.front().is_some_and(|&(t, _)| now.since(t) > keep) {
                h.pop_front();
            }
            let within = |w: SimDuration| h.iter().filter(move |&&(t, _)| now.since(t) <= w);
            let desired = if raw > g.current {
                // Scale up no further than the lowest recent recommendation.
                within(up)
                    .map(|&(_, r)| r)
                    .min()
                    .unwrap_or(raw)
                    .max(g.current)
            } else if raw < g.current {
                // Scale down no further than the highest recent recommendation.
                within(down)
                    .map(|&(_, r)| r)
                    .max()
                    .unwrap_or(raw)
                    .min(g.current)
            } else {
                raw
            };
            (desired != g.current).then_some((desired, signal.name(), v))
        })
    }
}

// ---------------------------------------------------------------------------------------

pub(super) const SLO_AWARE: ScaleEntry = ScaleEntry {
    name: "slo_aware",
    description: "add `step` instances while the windowed p90 TTFT (or ITL) misses its target, remove `step` when far below it",
    params: &[
        (
            "target_ttft_p90_ms | target_itl_p90_ms",
            "the latency target (give one)",
        ),
        (
            "low_fraction",
            "scale down when p90 < low_fraction × target, or nothing finished and nothing waits (default 0.5)",
        ),
        (
            "step",
            "instances added or removed per evaluation (default 1)",
        ),
        ("interval_s", "evaluation interval (default 30)"),
        (
            "cheapest_first",
            "1: size the groups as one pool, cheapest instances first (default 0)",
        ),
    ],
    free_params: true,
    build: |args| {
        check_keys(
            args,
            &[
                "target_ttft_p90_ms",
                "target_itl_p90_ms",
                "low_fraction",
                "step",
                "interval_s",
                "cheapest_first",
            ],
        )?;
        let (ttft, key) = match (
            args.params.get("target_ttft_p90_ms"),
            args.params.get("target_itl_p90_ms"),
        ) {
            (Some(_), None) => (true, "target_ttft_p90_ms"),
            (None, Some(_)) => (false, "target_itl_p90_ms"),
            _ => return Err("give one of target_ttft_p90_ms, target_itl_p90_ms".into()),
        };
        let target = args.get(key, 0.0);
        if !(target.is_finite() && target > 0.0) {
            return Err(format!("{key} must be a finite number > 0, got {target}"));
        }
        let low = args.at_least("low_fraction", 0.5, 0.0)?;
        if low >= 1.0 {
            return Err(format!("low_fraction must be below 1, got {low}"));
        }
        Ok(Box::new(SloAware {
            ttft,
            target,
            low,
            step: step(args)?,
            interval: interval(args, 30.0)?,
            cheapest_first: flag(args, "cheapest_first")?,
        }))
    },
};

struct SloAware {
    ttft: bool,
    target: f64,
    low: f64,
    step: u32,
    interval: SimDuration,
    cheapest_first: bool,
}

impl ScalePolicy for SloAware {
    fn next_evaluation(&self, now: SimTime, first: bool) -> Option<SimTime> {
        every(self.interval, now, first)
    }

    fn evaluate(&mut self, _now: SimTime, groups: &[GroupSignals]) -> Vec<ScaleTarget> {
        let (ttft, target, low, step) = (self.ttft, self.target, self.low, self.step);
        let reason = if ttft { "ttft_p90_ms" } else { "itl_p90_ms" };
        decide_all(groups, self.cheapest_first, |_, g| {
            let p90 = if ttft { g.ttft_p90_ms } else { g.itl_p90_ms };
            match p90 {
                Some(v) if v > target => Some((g.current.saturating_add(step), reason, v)),
                Some(v) if v < low * target => Some((g.current.saturating_sub(step), reason, v)),
                Some(_) => None,
                // Nothing finished: idle if nothing waits either; demand with no ready
                // instance needs one.
                None if g.in_flight_per_instance == 0.0 => {
                    Some((g.current.saturating_sub(step), reason, 0.0))
                }
                None if g.ready == 0 => Some((g.current.max(1), reason, 0.0)),
                None => None,
            }
        })
    }
}

// ---------------------------------------------------------------------------------------

pub(super) const SCHEDULED: ScaleEntry = ScaleEntry {
    name: "scheduled",
    description: "sizes at given times: keys \"<seconds>\" (every autoscaled group) or \"<group>@<seconds>\"",
    params: &[
        (
            "<seconds>",
            "size of every autoscaled group from that time on",
        ),
        ("<group>@<seconds>", "size of one group from that time on"),
    ],
    free_params: true,
    build: |args| {
        let mut plan = Vec::new();
        for (k, &size) in args.params {
            let (group, at) = match k.rsplit_once('@') {
                Some((g, t)) => {
                    let Some(i) = args.labels.groups.iter().position(|n| n == g) else {
                        return Err(format!(
                            "`{k}`: no group named `{g}` (groups: {})",
                            args.labels.groups.join(", ")
                        ));
                    };
                    (Some(i as u32), t)
                }
                None => (None, k.as_str()),
            };
            let t: f64 = at
                .trim()
                .parse()
                .map_err(|_| format!("`{k}`: expected \"<seconds>\" or \"<group>@<seconds>\""))?;
            if !(t.is_finite() && (0.0..=1e9).contains(&t)) {
                return Err(format!("`{k}`: the time must be within 0..=10⁹ s"));
            }
            if !(size.is_finite() && size >= 0.0 && size.fract() == 0.0 && size <= 1e6) {
                return Err(format!(
                    "`{k}`: the size must be a whole number of instances in 0..=1,000,000, got {size}"
                ));
            }
            plan.push((
                SimTime::ZERO + SimDuration::from_secs_f64(t),
                group,
                size as u32,
            ));
        }
        if plan.is_empty() {
            return Err("give at least one time: {\"0\": 2, \"3600\": 8}".into());
        }
        plan.sort_by_key(|&(t, g, _)| (t, g));
        // Two keys for one instant ("0" and "0.0"): which wins would depend on how they
        // are spelt.
        if let Some(w) = plan
            .windows(2)
            .find(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1))
        {
            let when = w[0].0.as_us() as f64 / 1e6;
            return Err(format!(
                "two sizes for the same group at {when} s ({} and {}): give one",
                w[0].2, w[1].2
            ));
        }
        Ok(Box::new(Scheduled { plan }))
    },
};

struct Scheduled {
    /// (time, group or all, size), by time.
    plan: Vec<(SimTime, Option<u32>, u32)>,
}

impl ScalePolicy for Scheduled {
    fn next_evaluation(&self, now: SimTime, first: bool) -> Option<SimTime> {
        self.plan
            .iter()
            .map(|p| p.0)
            .find(|&t| if first { t >= now } else { t > now })
    }

    fn evaluate(&mut self, now: SimTime, groups: &[GroupSignals]) -> Vec<ScaleTarget> {
        groups
            .iter()
            .filter_map(|g| {
                let size = self
                    .plan
                    .iter()
                    .rfind(|&&(t, who, _)| t <= now && who.is_none_or(|w| w == g.group))?
                    .2;
                Some(ScaleTarget {
                    group: g.group,
                    desired: size,
                    reason: "scheduled",
                    signal: now.as_us() as f64 / 1e6,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(group: u32, current: u32, cost: f64, min: u32, max: u32) -> GroupSignals {
        GroupSignals {
            group,
            current,
            ready: current,
            min,
            max,
            instance_cost_per_hour: cost,
            ..Default::default()
        }
    }

    #[test]
    fn hpa_arithmetic_matches_the_kubernetes_formula() {
        // 4 ready at 90 % against 60 %: ceil(4 × 1.5) = 6.
        assert_eq!(hpa_recommendation(4, 4, 0.9, 0.6, 0.1), 6);
        // Within the band: hold.
        assert_eq!(hpa_recommendation(4, 4, 0.64, 0.6, 0.1), 4);
        // 4 at 20 % against 60 %: ceil(4/3) = 2.
        assert_eq!(hpa_recommendation(4, 4, 0.2, 0.6, 0.1), 2);
        // An exact multiple does not round up: 3 × 0.8/0.4 = 6.
        assert_eq!(hpa_recommendation(3, 3, 0.8, 0.4, 0.0), 6);
        // Idle: zero; demand with nothing ready: one.
        assert_eq!(hpa_recommendation(2, 2, 0.0, 0.6, 0.1), 0);
        assert_eq!(hpa_recommendation(0, 0, 3.0, 1.0, 0.1), 1);
    }

    #[test]
    fn growth_goes_to_the_cheapest_pool_and_shrinkage_comes_from_the_dearest() {
        let groups = [g(0, 1, 8.0, 0, 4), g(1, 1, 2.0, 1, 3)];
        assert_eq!(
            spread(5, &groups),
            [2, 3],
            "cheap group fills to its max first"
        );
        assert_eq!(spread(1, &groups), [0, 1], "dear group empties first");
        assert_eq!(spread(0, &groups), [0, 1], "never below a group's min");
    }

    #[test]
    fn settings_that_could_never_act_are_refused() {
        let labels = crate::labels::Labels::default();
        let build = |entry: &ScaleEntry, p: &[(&str, f64)]| {
            let params: std::collections::BTreeMap<String, f64> =
                p.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            (entry.build)(&PolicyArgs::new(1, &params, &labels)).err()
        };
        // A utilisation or KV fraction never exceeds 1.
        let e = build(&TARGET_TRACKING, &[("target_utilization", 1.5)]).unwrap();
        assert!(e.contains("fraction of capacity in (0, 1], got 1.5"), "{e}");
        let e = build(&TARGET_TRACKING, &[("target_kv", 2.0)]).unwrap();
        assert!(e.contains("target_kv"), "{e}");
        assert!(build(&TARGET_TRACKING, &[("target_utilization", 1.0)]).is_none());
        assert!(build(&TARGET_TRACKING, &[("target_in_flight", 24.0)]).is_none());
        let e = build(&THRESHOLD, &[("utilization_high", 1.2)]).unwrap();
        assert!(e.contains("utilization_high is a fraction"), "{e}");
        assert!(build(&THRESHOLD, &[("queue_high", 12.0)]).is_none());
        // Two spellings of one instant.
        let e = build(&SCHEDULED, &[("0", 2.0), ("0.0", 3.0)]).unwrap();
        assert!(e.contains("two sizes for the same group at 0 s"), "{e}");
        assert!(build(&SCHEDULED, &[("0", 2.0), ("60", 3.0)]).is_none());
    }

    #[test]
    fn target_tracking_holds_a_scale_down_for_the_stabilisation_window() {
        let args = |p: &[(&str, f64)]| {
            p.iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let labels = crate::labels::Labels::default();
        let params = args(&[
            ("target_utilization", 0.5),
            ("scale_down_stabilization_s", 60.0),
            ("interval_s", 15.0),
        ]);
        let mut p = (TARGET_TRACKING.build)(&PolicyArgs::new(1, &params, &labels)).unwrap();
        let at = |s: f64| SimTime::ZERO + SimDuration::from_secs_f64(s);
        let with = |util: f64| {
            let mut x = g(0, 4, 1.0, 0, 10);
            x.utilization = util;
            [x]
        };
        // t = 0: 4 at 100 % → 8 (scale-up window 0: at once).
        assert_eq!(p.evaluate(at(0.0), &with(1.0))[0].desired, 8);
        // t = 15, 30: utilisation drops to 25 % → 2, but t = 0 recommended 8 within 60 s.
        assert!(p.evaluate(at(15.0), &with(0.25)).is_empty());
        assert!(p.evaluate(at(30.0), &with(0.25)).is_empty());
        // t = 75: the 8 of t = 0 has left the window; the highest left is 2 → 2.
        assert_eq!(p.evaluate(at(75.0), &with(0.25))[0].desired, 2);
    }
}
