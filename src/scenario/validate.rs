//! Whole-scenario validation: every problem with its field path, at once.

use super::{ArrivalSpec, LengthSpec, Scenario};
use crate::policy::{Catalog, PolicyArgs, PolicyFamily, family};

/// One thing wrong with a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line and column in the scenario text, when known.
    pub location: Option<(usize, usize)>,
    /// Field path, e.g. `cluster.groups[0].kv_blocks`; empty for the whole file.
    pub path: String,
    /// What is wrong, including what was expected.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            location: None,
            path: path.into(),
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// The closest candidate to `name` by edit distance, if reasonably close.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 3.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Turns a RON/serde error into a message and a hint.
pub(super) fn explain_ron_error(code: &ron::Error) -> (String, Option<String>) {
    use ron::Error as E;
    match code {
        E::NoSuchStructField {
            expected, found, ..
        } => {
            let hint = match did_you_mean(found, expected.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("expected one of: {}", expected.join(", ")),
            };
            (format!("unknown field `{found}`"), Some(hint))
        }
        E::NoSuchEnumVariant {
            expected, found, ..
        } => {
            let hint = match did_you_mean(found, expected.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("expected one of: {}", expected.join(", ")),
            };
            (format!("unknown variant `{found}`"), Some(hint))
        }
        E::MissingStructField { field, outer } => (
            format!(
                "missing field `{field}`{}",
                outer
                    .as_ref()
                    .map(|o| format!(" in {o}"))
                    .unwrap_or_default()
            ),
            Some("add the field; docs/scenarios.md lists every field and its default".into()),
        ),
        E::IntegerOutOfBounds | E::ExpectedInteger => (
            format!("{code}: expected a whole number ≥ 0 in range for this field"),
            Some("counts and token lengths are non-negative integers, e.g. 16".into()),
        ),
        E::ExpectedFloat => (
            format!("{code}: expected a number"),
            Some("write numbers like 12.0 or 0.5 (not in quotes)".into()),
        ),
        other => (
            other.to_string(),
            Some("see docs/scenarios.md for the expected syntax".into()),
        ),
    }
}

fn finite_positive(problems: &mut Vec<Problem>, path: &str, v: f64, hint: &str) {
    if !v.is_finite() || v <= 0.0 {
        problems
            .push(Problem::new(path, format!("must be a finite number > 0, got {v}")).hint(hint));
    }
}

fn name_in_catalog(
    problems: &mut Vec<Problem>,
    path: &str,
    kind: &str,
    name: &str,
    names: &[&str],
) {
    if !names.contains(&name) {
        let hint = match did_you_mean(name, names.iter().copied()) {
            Some(s) => format!("did you mean \"{s}\"? (`servesim list policies` shows all)"),
            None => format!("known {kind} policies: {}", names.join(", ")),
        };
        problems.push(Problem::new(path, format!("unknown {kind} policy \"{name}\"")).hint(hint));
    }
}

fn check_length(problems: &mut Vec<Problem>, path: &str, spec: &LengthSpec, min_allowed: u32) {
    let min_max = |problems: &mut Vec<Problem>, min: u32, max: u32| {
        if min > max {
            problems.push(
                Problem::new(path, format!("min ({min}) is larger than max ({max})"))
                    .hint("swap them"),
            );
        }
        if min < min_allowed {
            problems.push(Problem::new(
                format!("{path}.min"),
                format!("must be ≥ {min_allowed}, got {min}"),
            ));
        }
    };
    let finite = |problems: &mut Vec<Problem>, field: &str, v: f64, positive: bool| {
        if !v.is_finite() || v < 0.0 || (positive && v == 0.0) {
            let bound = if positive { "> 0" } else { "≥ 0" };
            problems.push(Problem::new(
                format!("{path}.{field}"),
                format!("must be a finite number {bound}, got {v}"),
            ));
        }
    };
    let too_big = |problems: &mut Vec<Problem>, field: &str, v: u32| {
        if v > crate::workload::lengths::MAX_TOKENS {
            problems.push(Problem::new(
                format!("{path}{field}"),
                format!("at most 16,777,216 tokens, got {v}"),
            ));
        }
    };
    match spec {
        LengthSpec::Constant(n) => {
            too_big(problems, "", *n);
            if *n < min_allowed {
                problems.push(Problem::new(
                    path,
                    format!("must be ≥ {min_allowed} tokens, got {n}"),
                ));
            }
        }
        LengthSpec::Uniform { min, max } => {
            too_big(problems, ".max", *max);
            min_max(problems, *min, *max);
        }
        LengthSpec::Normal {
            mean,
            stdev,
            min,
            max,
        } => {
            if !mean.is_finite() {
                problems.push(Problem::new(
                    format!("{path}.mean"),
                    format!("must be finite, got {mean}"),
                ));
            }
            finite(problems, "stdev", *stdev, false);
            min_max(problems, *min, *max);
        }
        LengthSpec::LogNormal {
            mu,
            sigma,
            min,
            max,
        } => {
            if !mu.is_finite() {
                problems.push(Problem::new(
                    format!("{path}.mu"),
                    format!("must be finite, got {mu}"),
                ));
            }
            finite(problems, "sigma", *sigma, false);
            min_max(problems, (*min).max(min_allowed), *max);
        }
        LengthSpec::Exponential { mean, min, max } => {
            finite(problems, "mean", *mean, true);
            min_max(problems, (*min).max(min_allowed), *max);
        }
        LengthSpec::Zipf { max, exponent } => {
            if *max == 0 {
                problems.push(Problem::new(format!("{path}.max"), "must be ≥ 1"));
            }
            too_big(problems, ".max", *max);
            finite(problems, "exponent", *exponent, true);
        }
        LengthSpec::Empirical { .. } => {} // the file is checked with the other files
    }
}

fn check_arrival(p: &mut Vec<Problem>, path: &str, spec: &ArrivalSpec) {
    let positive = |p: &mut Vec<Problem>, field: &str, v: f64| {
        if !v.is_finite() || v <= 0.0 {
            p.push(Problem::new(
                format!("{path}.{field}"),
                format!("must be a finite number > 0, got {v}"),
            ));
        }
    };
    match spec {
        ArrivalSpec::Poisson | ArrivalSpec::Constant => {}
        ArrivalSpec::Gamma { cv } | ArrivalSpec::Weibull { cv } => {
            positive(p, "cv", *cv);
            if cv.is_finite() && *cv > 20.0 {
                p.push(Problem::new(
                    format!("{path}.cv"),
                    format!("{cv} is too large (at most 20)"),
                ));
            }
            // Below 0.01 the shape parameter leaves the range where sampling is sound (a
            // gamma shape of 1/cv², a Weibull shape solved up to 500).
            if cv.is_finite() && *cv > 0.0 && *cv < 0.01 {
                p.push(
                    Problem::new(
                        format!("{path}.cv"),
                        format!("{cv:e} is too small (at least 0.01)"),
                    )
                    .hint("for (nearly) evenly spaced arrivals use `arrival: Constant`"),
                );
            }
        }
        ArrivalSpec::OnOff { on_s, off_s } => {
            positive(p, "on_s", *on_s);
            // Periods are whole µs on a 64-bit clock: keep them in [1 µs, 10⁹ s].
            if on_s.is_finite() && !(1e-6..=1e9).contains(on_s) {
                p.push(Problem::new(
                    format!("{path}.on_s"),
                    format!("must be between 1 µs (1e-6) and 10⁹ s, got {on_s:e}"),
                ));
            }
            if !off_s.is_finite() || !(0.0..=1e9).contains(off_s) {
                p.push(Problem::new(
                    format!("{path}.off_s"),
                    format!("must be a finite number in [0, 10⁹] s, got {off_s:e}"),
                ));
            }
        }
        ArrivalSpec::AllAtZero { count } => {
            if *count == 0 {
                p.push(Problem::new(format!("{path}.count"), "must be ≥ 1"));
            }
        }
        ArrivalSpec::Staged { stages, .. } | ArrivalSpec::ConstantTimer { stages } => {
            if stages.is_empty() {
                p.push(Problem::new(
                    format!("{path}.stages"),
                    "needs at least one stage",
                ));
            }
            for (k, st) in stages.iter().enumerate() {
                if !st.rate_per_s.is_finite() || st.rate_per_s < 0.0 {
                    p.push(Problem::new(
                        format!("{path}.stages[{k}].rate_per_s"),
                        format!("must be a finite number ≥ 0, got {}", st.rate_per_s),
                    ));
                }
                positive(p, &format!("stages[{k}].duration_s"), st.duration_s);
            }
        }
    }
}

/// A group's batch scheduler: a known name, known parameters that build.
fn check_scheduler(
    p: &mut Vec<Problem>,
    i: usize,
    g: &super::InstanceGroup,
    catalog: &Catalog,
    seed: u64,
) {
    let labels = crate::labels::Labels::default();
    check_member::<crate::instance::schedulers::BatchFormation>(
        p,
        catalog,
        "scheduler",
        &format!("cluster.groups[{i}].scheduler"),
        &format!("cluster.groups[{i}].scheduler_params"),
        &g.scheduler,
        &PolicyArgs::new(seed, &g.scheduler_params, &labels),
    );
}

/// An autoscaled group's bounds and life-cycle times.
fn check_scaling(p: &mut Vec<Problem>, i: usize, count: u32, sc: &super::ScalingSpec) {
    let at = |f: &str| format!("cluster.groups[{i}].scaling.{f}");
    if sc.max == 0 || sc.max > 10_000 {
        p.push(Problem::new(
            at("max"),
            format!("must be within 1..=10,000, got {}", sc.max),
        ));
    }
    if sc.min > sc.max {
        p.push(Problem::new(
            at("min"),
            format!("min ({}) is above max ({})", sc.min, sc.max),
        ));
    }
    if count < sc.min || count > sc.max {
        p.push(
            Problem::new(
                format!("cluster.groups[{i}].count"),
                format!(
                    "an autoscaled group starts with count instances, which must be within min..=max ({}..={}), got {count}",
                    sc.min, sc.max
                ),
            )
            .hint("count is the number serving at t = 0"),
        );
    }
    let mut seconds = |f: &str, v: Option<f64>| {
        if let Some(v) = v
            && !(v.is_finite() && (0.0..=1e9).contains(&v))
        {
            p.push(Problem::new(
                at(f),
                format!("must be seconds within 0..=10⁹, got {v}"),
            ));
        }
    };
    seconds("provision_s", Some(sc.provision_s));
    seconds("load_s", sc.load_s);
    seconds("warmup_s", Some(sc.warmup_s));
    seconds("scale_up_cooldown_s", Some(sc.scale_up_cooldown_s));
    seconds("scale_down_cooldown_s", Some(sc.scale_down_cooldown_s));
    if let Some(v) = sc.interval_s
        && !(v.is_finite() && (0.001..=1e9).contains(&v))
    {
        p.push(Problem::new(
            at("interval_s"),
            format!("must be seconds within 0.001..=10⁹, got {v}"),
        ));
    }
    if !(sc.load_gb_per_s.is_finite() && sc.load_gb_per_s >= 1e-3 && sc.load_gb_per_s <= 1e6) {
        p.push(Problem::new(
            at("load_gb_per_s"),
            format!("must be within 0.001..=10⁶ GB/s, got {}", sc.load_gb_per_s),
        ));
    }
    if !(sc.warmup_speed.is_finite() && sc.warmup_speed > 0.0 && sc.warmup_speed <= 1.0) {
        p.push(
            Problem::new(
                at("warmup_speed"),
                format!("must be within (0, 1], got {}", sc.warmup_speed),
            )
            .hint("0.5 = steps take twice as long while warming up"),
        );
    }
}

/// Fitness keys (MODELS.md §5.2 normalisation).
pub const FITNESS_KEYS: [&str; 10] = [
    "ttft_mean",
    "ttft_p50",
    "ttft_p99",
    "e2e_mean",
    "e2e_p50",
    "e2e_p99",
    "requests_per_s",
    "output_tokens_per_s",
    "cost",
    "cost_per_mtok",
];

/// A member of family `F` named `name` (at `name_at`, called a `kind` policy) with
/// `args.params` (at `params_at`): a known name, parameters it takes, and parameters it
/// accepts (it is built and thrown away).
pub(super) fn check_member<F: PolicyFamily>(
    p: &mut Vec<Problem>,
    catalog: &Catalog,
    kind: &str,
    name_at: &str,
    params_at: &str,
    name: &str,
    args: &PolicyArgs<'_>,
) {
    let Some(e) = catalog.find::<F>(name) else {
        name_in_catalog(p, name_at, kind, name, &catalog.names::<F>());
        return;
    };
    if !e.free_params {
        for k in args.params.keys() {
            if !e.params.iter().any(|(n, _)| n == k) {
                let known: Vec<&str> = e.params.iter().map(|(n, _)| *n).collect();
                let hint = match did_you_mean(k, known.iter().copied()) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None if known.is_empty() => format!("{name} takes no parameters"),
                    None => format!("{name} takes: {}", known.join(", ")),
                };
                p.push(
                    Problem::new(
                        format!("{params_at}.{k}"),
                        format!("unknown parameter of {name}"),
                    )
                    .hint(hint),
                );
            }
        }
    }
    if let Err(msg) = (e.build)(args) {
        p.push(Problem::new(params_at, msg));
    }
}

/// A cluster-wide policy `policies.<family>` with `policies.<family>_params`.
fn check_policy<F: PolicyFamily>(
    p: &mut Vec<Problem>,
    catalog: &Catalog,
    field: &str,
    name: &str,
    params: &std::collections::BTreeMap<String, f64>,
    labels: &crate::labels::Labels,
    seed: u64,
) {
    check_member::<F>(
        p,
        catalog,
        field,
        &format!("policies.{field}"),
        &format!("policies.{field}_params"),
        name,
        &PolicyArgs::new(seed, params, labels),
    );
}

/// Prefill/decode disaggregation: prefill groups need decode groups and the other way
/// round, both need a model (it sizes the KV moved) and share the block size; the decode
/// routing policy is checked only when it is used.
fn check_disaggregation(p: &mut Vec<Problem>, s: &Scenario, catalog: &Catalog) {
    use super::Role;
    let groups = &s.cluster.groups;
    let has = |r: Role| groups.iter().any(|g| g.role == r);
    for (i, g) in groups.iter().enumerate() {
        let at = |f: &str| format!("cluster.groups[{i}].{f}");
        if !(g.kv_link_gb_per_s.is_finite() && g.kv_link_gb_per_s > 0.0) {
            p.push(Problem::new(
                at("kv_link_gb_per_s"),
                format!("must be a finite number > 0, got {}", g.kv_link_gb_per_s),
            ));
        }
        if !(g.kv_link_latency_us.is_finite() && (0.0..=1e9).contains(&g.kv_link_latency_us)) {
            p.push(Problem::new(
                at("kv_link_latency_us"),
                format!(
                    "must be a number within 0..=10⁹ µs, got {}",
                    g.kv_link_latency_us
                ),
            ));
        }
        if g.role == Role::Mixed {
            continue;
        }
        if let Some(sc) = &g.scaling
            && sc.min == 0
        {
            p.push(
                Problem::new(
                    at("scaling.min"),
                    format!(
                        "a {} group cannot scale to zero: requests would have no {} instance to go to",
                        g.role.name(),
                        g.role.name()
                    ),
                )
                .hint("use min: 1 or more (scale to zero works for Mixed groups)"),
            );
        }
        if g.model.is_none() {
            p.push(
                Problem::new(
                    at("model"),
                    format!(
                        "a {} group needs a model: it sizes the KV blocks sent between prefill and decode instances",
                        g.role.name()
                    ),
                )
                .hint("set model: \"llama-3.1-8b-instruct\" (or a path to a config.json)"),
            );
        }
        let other = if g.role == Role::Prefill {
            Role::Decode
        } else {
            Role::Prefill
        };
        if !has(other) {
            p.push(
                Problem::new(
                    at("role"),
                    format!(
                        "a {} group needs a {} group to work with, and the cluster has none",
                        g.role.name(),
                        other.name()
                    ),
                )
                .hint(
                    "add a group with role: Prefill and one with role: Decode, or use role: Mixed",
                ),
            );
        }
        if let Some((j, first)) = groups
            .iter()
            .enumerate()
            .find(|(_, o)| o.role != Role::Mixed)
        {
            if j < i && first.block_size != g.block_size {
                p.push(Problem::new(
                    at("block_size"),
                    format!(
                        "{} tokens, but cluster.groups[{j}] has {}: prefill and decode groups must use one block size",
                        g.block_size, first.block_size
                    ),
                ));
            }
            if j < i && first.model != g.model {
                p.push(Problem::new(
                    at("model"),
                    format!(
                        "{:?}, but cluster.groups[{j}] serves {:?}: prefill and decode groups must serve one model",
                        g.model.as_deref().unwrap_or(""),
                        first.model.as_deref().unwrap_or("")
                    ),
                ));
            }
        }
    }
    if has(Role::Decode) {
        let pol = &s.policies;
        check_policy::<family::Routing>(
            p,
            catalog,
            "decode_routing",
            &pol.decode_routing,
            &pol.decode_routing_params,
            &crate::labels::Labels::of_scenario(s),
            s.seed,
        );
    }
}

fn check_policies(p: &mut Vec<Problem>, s: &Scenario, catalog: &Catalog) {
    let pol = &s.policies;
    for (f, v) in [
        ("admission_latency_us", pol.admission_latency_us),
        ("routing_latency_us", pol.routing_latency_us),
        (
            "snapshot_refresh_interval_us",
            pol.snapshot_refresh_interval_us,
        ),
    ] {
        if v > 1_000_000_000_000 {
            p.push(Problem::new(
                format!("policies.{f}"),
                format!("{v} µs is more than 10¹² µs (~12 days)"),
            ));
        }
    }
    let labels = crate::labels::Labels::of_scenario(s);
    check_policy::<family::Admission>(
        p,
        catalog,
        "admission",
        &pol.admission,
        &pol.admission_params,
        &labels,
        s.seed,
    );
    check_policy::<family::Priority>(
        p,
        catalog,
        "priority",
        &pol.priority,
        &pol.priority_params,
        &labels,
        s.seed,
    );
    check_policy::<family::Scheduling>(
        p,
        catalog,
        "scheduling",
        &pol.scheduling,
        &Default::default(),
        &labels,
        s.seed,
    );
    check_policy::<family::Routing>(
        p,
        catalog,
        "routing",
        &pol.routing,
        &pol.routing_params,
        &labels,
        s.seed,
    );
    check_policy::<family::Autoscale>(
        p,
        catalog,
        "autoscale",
        &pol.autoscale,
        &pol.autoscale_params,
        &labels,
        s.seed,
    );
    for (i, c) in pol.slo_classes.iter().enumerate() {
        for (f, v) in [
            ("ttft_ms", c.ttft_ms),
            ("itl_ms", c.itl_ms),
            ("e2e_ms", c.e2e_ms),
        ] {
            if let Some(v) = v
                && (!v.is_finite() || v <= 0.0)
            {
                p.push(Problem::new(
                    format!("policies.slo_classes[{i}].{f}"),
                    format!("must be a finite number > 0 (ms), got {v}"),
                ));
            }
        }
        if pol.slo_classes[..i].iter().any(|o| o.name == c.name) {
            p.push(Problem::new(
                format!("policies.slo_classes[{i}].name"),
                format!("class \"{}\" is defined twice", c.name),
            ));
        }
    }
    // A class a source names must exist once any are declared: a typo would otherwise
    // create a class without targets whose attainment is always 1.
    if !pol.slo_classes.is_empty() {
        let declared: Vec<&str> = pol.slo_classes.iter().map(|c| c.name.as_str()).collect();
        let named = s
            .workload
            .clients
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("workload.clients[{i}].slo_class"), &c.slo_class))
            .chain(
                s.workload
                    .traces
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("workload.traces[{i}].slo_class"), &t.slo_class)),
            );
        for (path, name) in named {
            if let Some(name) = name
                && !declared.contains(&name.as_str())
            {
                let hint = match did_you_mean(name, declared.iter().copied()) {
                    Some(x) => format!("did you mean \"{x}\"?"),
                    None => format!(
                        "declare it in policies.slo_classes (declared: {})",
                        declared.join(", ")
                    ),
                };
                p.push(
                    Problem::new(path, format!("SLO class \"{name}\" is not declared")).hint(hint),
                );
            }
        }
    }
    for (k, v) in &s.outputs.fitness {
        if !FITNESS_KEYS.contains(&k.as_str()) {
            let hint = match did_you_mean(k, FITNESS_KEYS) {
                Some(x) => format!("did you mean \"{x}\"?"),
                None => format!("keys: {}", FITNESS_KEYS.join(", ")),
            };
            p.push(Problem::new(format!("outputs.fitness.{k}"), "unknown fitness key").hint(hint));
        } else if !v.is_finite() {
            p.push(Problem::new(
                format!("outputs.fitness.{k}"),
                format!("weight must be finite, got {v}"),
            ));
        }
    }
    if s.outputs.decision_top_k == 0 {
        p.push(Problem::new("outputs.decision_top_k", "must be ≥ 1"));
    }
    if let Some(dt) = s.outputs.sample_interval_s
        && !(dt.is_finite() && dt >= 1e-6)
    {
        p.push(
            Problem::new(
                "outputs.sample_interval_s",
                format!("must be a number of seconds ≥ 0.000001, got {dt}"),
            )
            .hint("leave it out for about 1,000 samples per run"),
        );
    }
    if let Some((a, b)) = s.outputs.timeline_window_s
        && !(a.is_finite() && b.is_finite() && 0.0 <= a && a < b)
    {
        p.push(
            Problem::new(
                "outputs.timeline_window_s",
                format!("must be (start, end) with 0 ≤ start < end, got ({a}, {b})"),
            )
            .hint("e.g. (100.0, 160.0) for one minute from 100 s"),
        );
    }
    let r = s.outputs.timeline_request_sample;
    if !(r.is_finite() && r > 0.0 && r <= 1.0) {
        p.push(
            Problem::new(
                "outputs.timeline_request_sample",
                format!("must be a fraction in (0, 1], got {r}"),
            )
            .hint("0.01 draws one request in a hundred"),
        );
    }
}

/// Checks everything serde could not: ranges, finiteness, names, cross-field rules.
pub(super) fn validate(s: &Scenario, catalog: &Catalog) -> Vec<Problem> {
    let mut p = Vec::new();
    if let Some(h) = s.horizon_s {
        finite_positive(
            &mut p,
            "horizon_s",
            h,
            "simulated seconds; omit it to run until all requests finish",
        );
    }
    if s.cluster.groups.is_empty() {
        p.push(
            Problem::new("cluster.groups", "the cluster has no instance groups").hint(
                "add at least one group, e.g. (count: 1, kv_blocks: 8192, latency: Blackbox(...))",
            ),
        );
    }
    // Autoscaled groups are spawned at their max.
    let spawned = |g: &super::InstanceGroup| g.scaling.as_ref().map_or(g.count, |x| x.max);
    let instances: u64 = s.cluster.groups.iter().map(|g| u64::from(spawned(g))).sum();
    if instances > 10_000 {
        p.push(
            Problem::new(
                "cluster.groups",
                format!("{instances} instances in all; at most 10,000"),
            )
            .hint("simulate a representative slice of the cluster"),
        );
    }
    let mut table_bytes = 0.0;
    for (i, g) in s.cluster.groups.iter().enumerate() {
        let at = |f: &str| format!("cluster.groups[{i}].{f}");
        if g.kv_blocks.is_some_and(|b| b > 1 << 24) {
            p.push(Problem::new(
                at("kv_blocks"),
                "at most 16,777,216 blocks per instance",
            ));
        }
        if g.block_size > 65_536 {
            p.push(Problem::new(
                at("block_size"),
                format!("at most 65,536 tokens, got {}", g.block_size),
            ));
        }
        for (f, v) in [("tp", g.tp), ("pp", g.pp)] {
            if v > 1024 {
                p.push(Problem::new(at(f), format!("at most 1,024, got {v}")));
            }
        }
        if g.count == 0 && g.scaling.is_none() {
            p.push(
                Problem::new(at("count"), "must be ≥ 1")
                    .hint("remove the group instead of giving it 0 instances (an autoscaled group may start at 0)"),
            );
        }
        if !(g.cost_per_gpu_hour.is_finite() && (0.0..=1e6).contains(&g.cost_per_gpu_hour)) {
            p.push(Problem::new(
                at("cost_per_gpu_hour"),
                format!(
                    "must be a number within 0..=10⁶, got {}",
                    g.cost_per_gpu_hour
                ),
            ));
        }
        if let Some(sc) = &g.scaling {
            check_scaling(&mut p, i, g.count, sc);
        }
        check_scheduler(&mut p, i, g, catalog, s.seed);
        if g.block_size == 0 {
            p.push(
                Problem::new(at("block_size"), "must be > 0").hint("vLLM's default is 16 tokens"),
            );
        }
        if g.max_num_seqs == 0 {
            p.push(Problem::new(at("max_num_seqs"), "must be > 0").hint("vLLM's default is 256"));
        }
        if g.max_num_batched_tokens == 0 {
            p.push(
                Problem::new(at("max_num_batched_tokens"), "must be > 0")
                    .hint("vLLM's default is 2048"),
            );
        }
        if g.max_model_len == Some(0) {
            p.push(Problem::new(at("max_model_len"), "must be > 0").hint("omit it for no limit"));
        }
        match s.resolve_group(i, catalog) {
            Ok(r) => {
                table_bytes += f64::from(spawned(g))
                    * (f64::from(r.kv_blocks) * GPU_BLOCK_BYTES
                        + f64::from(g.cpu_kv_blocks) * CPU_BLOCK_BYTES);
            }
            Err(problems) => p.extend(problems),
        }
    }
    check_limits(&mut p, s, table_bytes);
    check_policies(&mut p, s, catalog);
    check_disaggregation(&mut p, s, catalog);
    if s.policies.autoscale != "static" && s.cluster.groups.iter().all(|g| g.scaling.is_none()) {
        p.push(
            Problem::new(
                "policies.autoscale",
                format!(
                    "`{}` scales groups with `scaling`, and no group has it",
                    s.policies.autoscale
                ),
            )
            .hint("give a group scaling: (min: 1, max: 8), or use \"static\""),
        );
    }
    let w = &s.workload;
    if let Some(ip) = &w.inference_perf {
        check_inference_perf(&mut p, ip);
    }
    if w.clients.is_empty() && w.traces.is_empty() && w.inference_perf.is_none() {
        p.push(Problem::new("workload.clients", "the workload has no clients and no traces").hint(
            "add one, e.g. (rate_per_s: 10.0, input_tokens: Constant(512), output_tokens: Constant(128))",
        ));
    }
    if w.num_requests == Some(0) {
        p.push(
            Problem::new("workload.num_requests", "must be ≥ 1")
                .hint("omit it to stop on duration_s or horizon_s"),
        );
    }
    if let Some(d) = w.duration_s {
        finite_positive(
            &mut p,
            "workload.duration_s",
            d,
            "simulated seconds of arrivals",
        );
    }
    // Times are whole µs and every arrival process's first arrival is at least 1 µs in:
    // below that nothing can arrive at all.
    for (path, v) in [
        ("workload.duration_s", w.duration_s),
        ("horizon_s", s.horizon_s),
    ] {
        if let Some(v) = v
            && v.is_finite()
            && v > 0.0
            && v < 1e-6
        {
            p.push(
                Problem::new(
                    path,
                    format!("{v:e} s is shorter than 1 µs: no request can arrive"),
                )
                .hint("simulated time is counted in whole microseconds"),
            );
        }
    }
    if let Some(r) = w.aggregate_rate_per_s {
        finite_positive(
            &mut p,
            "workload.aggregate_rate_per_s",
            r,
            "total requests per second shared by rate_share",
        );
    }
    let bounded = |a: &ArrivalSpec| {
        matches!(
            a,
            ArrivalSpec::AllAtZero { .. }
                | ArrivalSpec::Staged { .. }
                | ArrivalSpec::ConstantTimer { .. }
        )
    };
    let sources_end = w
        .clients
        .iter()
        .all(|c| bounded(&c.arrival) && c.session.is_none())
        || w.clients.is_empty();
    if w.num_requests.is_none() && w.duration_s.is_none() && s.horizon_s.is_none() && !sources_end {
        p.push(
            Problem::new(
                "workload",
                "the workload never stops: no num_requests, duration_s or horizon_s",
            )
            .hint("set workload.num_requests, workload.duration_s or horizon_s"),
        );
    }
    for (i, c) in w.clients.iter().enumerate() {
        let at = |f: &str| format!("workload.clients[{i}].{f}");
        check_arrival(&mut p, &at("arrival"), &c.arrival);
        let needs_rate = !bounded(&c.arrival);
        match (c.rate_per_s, c.rate_share) {
            (Some(_), Some(_)) => p.push(Problem::new(
                at("rate_share"),
                "give rate_per_s or rate_share, not both",
            )),
            (Some(r), None) => {
                finite_positive(&mut p, &at("rate_per_s"), r, "mean requests per second");
                if r.is_finite() && r > 0.0 && r < 1e-6 {
                    p.push(
                        Problem::new(
                            at("rate_per_s"),
                            format!("{r:e} req/s is less than one request in 11 days (10⁻⁶)"),
                        )
                        .hint("simulated time is bounded at 10⁹ s"),
                    );
                }
            }
            (None, Some(sh)) => {
                finite_positive(&mut p, &at("rate_share"), sh, "a positive weight");
                if w.aggregate_rate_per_s.is_none() {
                    p.push(
                        Problem::new(at("rate_share"), "needs workload.aggregate_rate_per_s")
                            .hint("set the total rate the shares divide"),
                    );
                }
            }
            (None, None) if needs_rate => p.push(
                Problem::new(at("rate_per_s"), "missing: give rate_per_s or rate_share")
                    .hint("e.g. rate_per_s: 10.0"),
            ),
            (None, None) => {}
        }
        check_length(&mut p, &at("input_tokens"), &c.input_tokens, 0);
        check_length(&mut p, &at("output_tokens"), &c.output_tokens, 1);
        if c.shared_prefix_tokens == 0 && matches!(c.input_tokens, LengthSpec::Constant(0)) {
            p.push(
                Problem::new(at("input_tokens"), "every prompt would be empty")
                    .hint("give at least 1 input token or a shared prefix"),
            );
        }
        if c.prefix_groups == 0 {
            p.push(Problem::new(at("prefix_groups"), "must be ≥ 1"));
        }
        if c.prompt_pool == Some(0) {
            p.push(
                Problem::new(at("prompt_pool"), "must be ≥ 1")
                    .hint("omit it for a new prompt every time"),
            );
        }
        if let Some(t) = c.timeout_s {
            finite_positive(
                &mut p,
                &at("timeout_s"),
                t,
                "seconds a client waits for a whole response",
            );
        }
        if let Some(sess) = &c.session {
            check_length(&mut p, &at("session.turns"), &sess.turns, 1);
            if !sess.think_time_s.is_finite() || sess.think_time_s < 0.0 || sess.think_time_s > 1e9
            {
                p.push(Problem::new(
                    at("session.think_time_s"),
                    format!(
                        "must be a finite number in [0, 10⁹] s, got {}",
                        sess.think_time_s
                    ),
                ));
            }
        }
        // Every group must be able to hold at least the smallest request this client sends.
        let min_input = c
            .shared_prefix_tokens
            .saturating_add(c.input_tokens.min_value());
        for (gi, g) in s.cluster.groups.iter().enumerate() {
            if let Some(m) = g.max_model_len
                && min_input >= m
                && m > 0
            {
                p.push(
                    Problem::new(
                        at("input_tokens"),
                        format!("the shortest prompt ({min_input} tokens) does not fit max_model_len {m} of cluster.groups[{gi}]"),
                    )
                    .hint("shorten the prompts or raise max_model_len"),
                );
            }
        }
    }
    for (i, t) in w.traces.iter().enumerate() {
        let at = |f: &str| format!("workload.traces[{i}].{f}");
        for (f, v) in [
            ("time_scale", t.time_scale),
            ("rate_scale", t.rate_scale),
            ("token_scale", t.token_scale),
        ] {
            finite_positive(&mut p, &at(f), v, "a positive factor");
        }
        if let Some(x) = t.timeout_s {
            finite_positive(&mut p, &at("timeout_s"), x, "seconds a client waits");
        }
        if t.hash_block_tokens == 0 {
            p.push(
                Problem::new(at("hash_block_tokens"), "must be ≥ 1")
                    .hint("the tokens each Mooncake hash id covers (16 for RouteSim's sample, 512 for Mooncake's traces)"),
            );
        }
    }
    for (path, msg) in crate::workload::check_files(s) {
        p.push(Problem::new(path, msg));
    }
    p
}

/// Memory one GPU KV block costs the simulator once used (block row, prefix-index entry and
/// its share of the index's slack), bytes; measured ~120.
pub const GPU_BLOCK_BYTES: f64 = 128.0;
/// Memory one CPU-tier block costs (LRU slot and index entry), bytes.
pub const CPU_BLOCK_BYTES: f64 = 64.0;

fn check_limits(p: &mut Vec<Problem>, s: &super::Scenario, table_bytes: f64) {
    let l = &s.limits;
    if !l.max_memory_gib.is_finite() || l.max_memory_gib <= 0.0 {
        p.push(Problem::new(
            "limits.max_memory_gib",
            format!("must be a finite number > 0, got {}", l.max_memory_gib),
        ));
    } else {
        let gib = table_bytes / f64::from(1u32 << 30);
        if gib > l.max_memory_gib {
            p.push(
                Problem::new(
                    "cluster.groups",
                    format!(
                        "the KV block tables need about {gib:.1} GiB ({GPU_BLOCK_BYTES} bytes per GPU block, {CPU_BLOCK_BYTES} per CPU-tier block, every instance), above limits.max_memory_gib = {}",
                        l.max_memory_gib
                    ),
                )
                .hint("simulate fewer instances or blocks, or raise limits.max_memory_gib if the machine has the memory"),
            );
        }
    }
    if l.max_in_flight == 0 {
        p.push(Problem::new("limits.max_in_flight", "must be ≥ 1"));
    }
    if l.max_waiting_per_instance == Some(0) {
        p.push(
            Problem::new("limits.max_waiting_per_instance", "must be ≥ 1")
                .hint("omit it for an unbounded queue"),
        );
    }
    if l.offline_batch_window == 0 {
        p.push(Problem::new("limits.offline_batch_window", "must be ≥ 1"));
    }
}

/// Most users (prompts × users per prompt × stages) an inference-perf load may expand into.
pub const MAX_INFERENCE_PERF_USERS: u64 = 100_000;

fn check_inference_perf(p: &mut Vec<Problem>, ip: &super::InferencePerfSpec) {
    let at = |f: &str| format!("workload.inference_perf.{f}");
    if ip.stages.is_empty() {
        p.push(
            Problem::new(at("stages"), "needs at least one stage")
                .hint("e.g. stages: [(rate_per_s: 5.0, duration_s: 600.0)]"),
        );
    }
    let sp = &ip.shared_prefix;
    let users = u64::from(sp.num_unique_system_prompts) * u64::from(sp.num_users_per_system_prompt);
    for (k, st) in ip.stages.iter().enumerate() {
        if !st.rate_per_s.is_finite() || st.rate_per_s <= 0.0 {
            p.push(Problem::new(
                at(&format!("stages[{k}].rate_per_s")),
                format!("must be a finite number > 0, got {}", st.rate_per_s),
            ));
        } else if st.duration_s.is_finite() && st.duration_s > 0.0 {
            let n = (st.rate_per_s * st.duration_s).floor();
            if n < 1.0 {
                p.push(
                    Problem::new(
                        at(&format!("stages[{k}]")),
                        format!(
                            "rate × duration = {} gives no request",
                            st.rate_per_s * st.duration_s
                        ),
                    )
                    .hint("raise the rate or the duration"),
                );
            } else if n > 1e9 {
                p.push(Problem::new(
                    at(&format!("stages[{k}]")),
                    format!("{n} requests in one stage is more than the 10⁹ allowed"),
                ));
            }
        }
        if !st.duration_s.is_finite() || st.duration_s <= 0.0 || st.duration_s > 1e9 {
            p.push(Problem::new(
                at(&format!("stages[{k}].duration_s")),
                format!(
                    "must be a number of seconds in (0, 10⁹], got {}",
                    st.duration_s
                ),
            ));
        }
    }
    for (field, v) in [
        ("num_unique_system_prompts", sp.num_unique_system_prompts),
        (
            "num_users_per_system_prompt",
            sp.num_users_per_system_prompt,
        ),
        ("output_len", sp.output_len),
    ] {
        if v == 0 {
            p.push(Problem::new(
                at(&format!("shared_prefix.{field}")),
                "must be ≥ 1",
            ));
        }
    }
    if sp.system_prompt_len == 0 && sp.question_len == 0 {
        p.push(
            Problem::new(
                at("shared_prefix.question_len"),
                "a prompt needs at least one token",
            )
            .hint("set system_prompt_len or question_len above 0"),
        );
    }
    for (field, v) in [
        ("system_prompt_len", sp.system_prompt_len),
        ("question_len", sp.question_len),
        ("output_len", sp.output_len),
    ] {
        if v > crate::workload::lengths::MAX_TOKENS {
            p.push(Problem::new(
                at(&format!("shared_prefix.{field}")),
                format!(
                    "{v} is above the {} tokens allowed",
                    crate::workload::lengths::MAX_TOKENS
                ),
            ));
        }
    }
    if users.saturating_mul(ip.stages.len() as u64) > MAX_INFERENCE_PERF_USERS {
        p.push(Problem::new(
            at("shared_prefix"),
            format!(
                "{users} users × {} stages is more than the {MAX_INFERENCE_PERF_USERS} allowed",
                ip.stages.len()
            ),
        ));
    }
    if let Some(t) = ip.timeout_s
        && (!t.is_finite() || t <= 0.0)
    {
        p.push(Problem::new(
            at("timeout_s"),
            format!("must be a finite number > 0, got {t}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_near_misses_only() {
        let names = ["round_robin", "least_loaded"];
        assert_eq!(did_you_mean("round_robbin", names), Some("round_robin"));
        assert_eq!(did_you_mean("leastloaded", names), Some("least_loaded"));
        assert_eq!(did_you_mean("zzzzzzzzzzzzzzzz", names), None);
    }
}
