//! Checks of the workload's part of a scenario.

use std::path::Path;

use super::{lengths, trace};
use crate::scenario::{ArrivalSpec, LengthSpec, Problem, Scenario, finite_positive};

/// Checks the workload's part of a scenario: its clients (rates, lengths, sessions,
/// timeouts, prompts that fit every group), traces, inference-perf load and stop
/// conditions, and that every file it names can be read.
pub fn check(s: &Scenario) -> Vec<Problem> {
    let mut p = Vec::new();
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
    // below that nothing can arrive at all. Past 10⁹ s the clock ends, so a run that went
    // on that long would stop there with an error, after days of wall time.
    for (path, v, without) in [
        (
            "workload.duration_s",
            w.duration_s,
            "leave it out to stop on num_requests or horizon_s",
        ),
        (
            "horizon_s",
            s.horizon_s,
            "leave it out to run until every request finishes",
        ),
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
        if let Some(v) = v
            && v.is_finite()
            && v > 1e9
        {
            p.push(
                Problem::new(path, format!("{v:e} s is past the 10⁹ s a run may reach"))
                    .hint(without),
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
    if w.aggregate_rate_per_s.is_some() && !w.clients.iter().any(|c| c.rate_share.is_some()) {
        p.push(
            Problem::new(
                "workload.aggregate_rate_per_s",
                "divides nothing: no client gives rate_share",
            )
            .hint("give the clients rate_share instead of rate_per_s, or remove it"),
        );
    }
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
                if needs_rate && r.is_finite() && r > 0.0 && r < 1e-6 {
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
                let rate = crate::workload::client_rate(s, c);
                if needs_rate && rate.is_finite() && rate > 0.0 && rate < 1e-6 {
                    p.push(
                        Problem::new(
                            at("rate_share"),
                            format!(
                                "gives {rate:.3e} req/s (aggregate_rate_per_s × its share of \
                                 the shares), less than one request in 11 days (10⁻⁶)"
                            ),
                        )
                        .hint("raise the share or workload.aggregate_rate_per_s"),
                    );
                }
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
        check_length(&mut p, &at("input_tokens"), &c.input_tokens, 0, "tokens");
        check_length(&mut p, &at("output_tokens"), &c.output_tokens, 1, "tokens");
        if c.shared_prefix_tokens == 0 && c.input_tokens.max_value() == Some(0) {
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
            crate::scenario::wait_seconds(
                &mut p,
                &at("timeout_s"),
                t,
                "seconds a client waits for a whole response",
            );
        }
        if let Some(sess) = &c.session {
            check_length(&mut p, &at("session.turns"), &sess.turns, 1, "turns");
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
            crate::scenario::wait_seconds(&mut p, &at("timeout_s"), x, "seconds a client waits");
        }
        if t.hash_block_tokens == 0 {
            p.push(
                Problem::new(at("hash_block_tokens"), "must be ≥ 1")
                    .hint("the tokens each Mooncake hash id covers (16 for RouteSim's sample, 512 for Mooncake's traces)"),
            );
        }
    }
    for (path, msg) in check_files(s) {
        p.push(Problem::new(path, msg));
    }
    check_adapters(&mut p, s);
    p
}

/// `workload.adapters`, the clients' `adapter` and the groups that must serve them.
fn check_adapters(p: &mut Vec<Problem>, s: &Scenario) {
    use crate::scenario::AdapterChoice;
    let w = &s.workload;
    let users: Vec<usize> = (0..w.clients.len())
        .filter(|&i| w.clients[i].adapter.is_some())
        .collect();
    let Some(set) = &w.adapters else {
        for i in users {
            p.push(
                Problem::new(
                    format!("workload.clients[{i}].adapter"),
                    "names an adapter, but the workload declares none",
                )
                .hint("add workload.adapters: (names: [\"sql\", \"chat\"]) or (count: 8)"),
            );
        }
        return;
    };
    let declared = set.names.len().max(set.count as usize);
    if declared > crate::scenario::AdapterSet::MAX {
        let path = if set.names.is_empty() {
            "count"
        } else {
            "names"
        };
        p.push(Problem::new(
            format!("workload.adapters.{path}"),
            format!(
                "at most {} adapters, got {declared}",
                crate::scenario::grouped(crate::scenario::AdapterSet::MAX as u64)
            ),
        ));
        return;
    }
    let names = set.all_names();
    if names.is_empty() {
        p.push(
            Problem::new("workload.adapters", "declares no adapter")
                .hint("give names: [\"sql\", …] or count: 8"),
        );
    }
    if !set.names.is_empty() && set.count > 0 {
        p.push(
            Problem::new("workload.adapters.count", "give names or count, not both")
                .hint("count names them lora0, lora1, …"),
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for (k, n) in set.names.iter().enumerate() {
        if n.is_empty() {
            p.push(Problem::new(
                format!("workload.adapters.names[{k}]"),
                "an adapter needs a name",
            ));
        } else if !seen.insert(n) {
            p.push(Problem::new(
                format!("workload.adapters.names[{k}]"),
                format!("`{n}` is named twice"),
            ));
        }
    }
    let unknown = |p: &mut Vec<Problem>, path: String, name: &str| {
        if !names.iter().any(|n| n == name) {
            let hint = crate::scenario::did_you_mean(name, names.iter().map(String::as_str))
                .map_or_else(
                    || {
                        format!(
                            "declared: {}",
                            crate::scenario::some_of(names.iter().map(String::as_str))
                        )
                    },
                    |n| format!("did you mean `{n}`?"),
                );
            p.push(Problem::new(path, format!("`{name}` is not in workload.adapters")).hint(hint));
        }
    };
    for name in set.ranks.keys() {
        unknown(p, format!("workload.adapters.ranks.{name}"), name);
    }
    let ranks = set.all_ranks();
    for (name, &r) in names.iter().zip(&ranks) {
        if r == 0 || r > 512 {
            let path = if set.ranks.contains_key(name) {
                format!("workload.adapters.ranks.{name}")
            } else {
                "workload.adapters.rank".to_string()
            };
            p.push(Problem::new(path, format!("must be 1–512, got {r}")));
        }
    }
    for i in users {
        let at = format!("workload.clients[{i}].adapter");
        match w.clients[i].adapter.as_ref().expect("a user") {
            AdapterChoice::Named(n) => unknown(p, at, n),
            AdapterChoice::Zipf(e) if !e.is_finite() || *e < 0.0 => p.push(Problem::new(
                at,
                format!("the Zipf exponent must be a finite number ≥ 0, got {e}"),
            )),
            AdapterChoice::Weighted(ws) => {
                for (n, &x) in ws {
                    unknown(p, format!("{at}.{n}"), n);
                    if !x.is_finite() || x < 0.0 {
                        p.push(Problem::new(
                            format!("{at}.{n}"),
                            format!("a weight must be a finite number ≥ 0, got {x}"),
                        ));
                    }
                }
                if !ws.values().any(|&x| x > 0.0) {
                    p.push(Problem::new(at, "give at least one adapter a weight > 0"));
                }
            }
            _ => {}
        }
    }
    // Every group that serves requests must serve adapters, with slots of a rank they fit.
    let widest = ranks.iter().copied().max().unwrap_or(0);
    for (i, g) in s.cluster.groups.iter().enumerate() {
        match &g.lora {
            None => p.push(
                Problem::new(
                    format!("cluster.groups[{i}].lora"),
                    "requests name LoRA adapters (workload.adapters), but this group serves none",
                )
                .hint("add lora: (max_loras: 4) to the group"),
            ),
            Some(l) if widest > l.max_lora_rank && l.max_lora_rank > 0 => p.push(
                Problem::new(
                    format!("cluster.groups[{i}].lora.max_lora_rank"),
                    format!(
                        "{} is below the rank-{widest} adapter of workload.adapters; vLLM refuses to load it",
                        l.max_lora_rank
                    ),
                )
                .hint(format!("set max_lora_rank: {widest}")),
            ),
            Some(_) => {}
        }
    }
}

/// Checks that every file a workload names can be read (streamed once); problems by path.
pub fn check_files(scenario: &Scenario) -> Vec<(String, String)> {
    let base: &Path = scenario.base_dir.as_path();
    let mut problems = Vec::new();
    let adapters = scenario
        .workload
        .adapters
        .as_ref()
        .map_or_else(Vec::new, |a| a.all_names());
    let labels = scenario.labels();
    for (i, t) in scenario.workload.traces.iter().enumerate() {
        // A bad factor or block size is its own field's error; reading rows with it would
        // report rows as wrong that are not (`hash_block_tokens: 0` read as 1).
        let factors_ok = [t.time_scale, t.rate_scale, t.token_scale]
            .iter()
            .all(|v| v.is_finite() && *v > 0.0);
        if !factors_ok || t.hash_block_tokens == 0 {
            continue;
        }
        let index = trace::RowLabelIndex::new(t, &labels, &scenario.policies.slo_classes);
        if let Err(e) = trace::check(t, base, &adapters, index) {
            problems.push((format!("workload.traces[{i}].file"), e));
        }
    }
    for (i, c) in scenario.workload.clients.iter().enumerate() {
        for (field, spec) in [
            ("input_tokens", &c.input_tokens),
            ("output_tokens", &c.output_tokens),
        ] {
            if let crate::scenario::LengthSpec::Empirical { file, column } = spec {
                // Output lengths must be ≥ 1: a zero would otherwise silently become 1.
                let min = u32::from(field == "output_tokens");
                match lengths::load_column(&base.join(file), column, min) {
                    Err(e) => problems.push((format!("workload.clients[{i}].{field}"), e)),
                    Ok(values)
                        if field == "input_tokens"
                            && c.shared_prefix_tokens == 0
                            && values.iter().all(|&v| v == 0) =>
                    {
                        problems.push((
                            format!("workload.clients[{i}].{field}"),
                            format!(
                                "{file}: every value of `{column}` is 0, so every prompt would be empty (give a shared prefix or another column)"
                            ),
                        ));
                    }
                    Ok(_) => {}
                }
            }
        }
    }
    problems
}

/// A length distribution of `unit`s (tokens, or a session's turns).
fn check_length(
    problems: &mut Vec<Problem>,
    path: &str,
    spec: &LengthSpec,
    min_allowed: u32,
    unit: &str,
) {
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
        if v > lengths::MAX_TOKENS {
            problems.push(Problem::new(
                format!("{path}{field}"),
                format!("at most 16,777,216 {unit}, got {v}"),
            ));
        }
    };
    match spec {
        LengthSpec::Constant(n) => {
            too_big(problems, "", *n);
            if *n < min_allowed {
                problems.push(Problem::new(
                    path,
                    format!("must be ≥ {min_allowed} {unit}, got {n}"),
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
            too_big(problems, ".max", *max);
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
            too_big(problems, ".max", *max);
            min_max(problems, (*min).max(min_allowed), *max);
        }
        LengthSpec::Exponential { mean, min, max } => {
            finite(problems, "mean", *mean, true);
            too_big(problems, ".max", *max);
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
            // Staged: Poisson at each rate (with `exact`, round(rate × duration) a stage);
            // ConstantTimer: exactly ⌊rate × duration⌋ a stage.
            let (sends, why): (fn(f64, f64) -> bool, &str) = match spec {
                ArrivalSpec::ConstantTimer { .. } => (
                    |rate, secs| (rate * secs).floor() >= 1.0,
                    "every stage sends ⌊rate_per_s × duration_s⌋ = 0 requests",
                ),
                ArrivalSpec::Staged { exact: true, .. } => (
                    |rate, secs| (rate * secs).round() >= 1.0,
                    "every stage sends round(rate_per_s × duration_s) = 0 requests",
                ),
                _ => (|rate, _| rate > 0.0, "every stage has rate_per_s 0"),
            };
            if !stages.is_empty() && !stages.iter().any(|st| sends(st.rate_per_s, st.duration_s)) {
                p.push(
                    Problem::new(format!("{path}.stages"), format!("{why}: nothing arrives"))
                        .hint("raise a stage's rate or duration"),
                );
            }
            for (k, st) in stages.iter().enumerate() {
                if !st.rate_per_s.is_finite() || st.rate_per_s < 0.0 {
                    p.push(Problem::new(
                        format!("{path}.stages[{k}].rate_per_s"),
                        format!("must be a finite number ≥ 0, got {}", st.rate_per_s),
                    ));
                }
                positive(p, &format!("stages[{k}].duration_s"), st.duration_s);
                if st.duration_s.is_finite() && st.duration_s > 1e9 {
                    p.push(Problem::new(
                        format!("{path}.stages[{k}].duration_s"),
                        format!("{:e} s is past the 10⁹ s a run may reach", st.duration_s),
                    ));
                }
            }
        }
    }
}

/// Most users (prompts × users per prompt × stages) an inference-perf load may expand into.
pub const MAX_INFERENCE_PERF_USERS: u64 = 100_000;

fn check_inference_perf(p: &mut Vec<Problem>, ip: &crate::scenario::InferencePerfSpec) {
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
        if v > lengths::MAX_TOKENS {
            p.push(Problem::new(
                at(&format!("shared_prefix.{field}")),
                format!("{v} is above the {} tokens allowed", lengths::MAX_TOKENS),
            ));
        }
    }
    if users.saturating_mul(ip.stages.len() as u64) > MAX_INFERENCE_PERF_USERS {
        p.push(Problem::new(
            at("shared_prefix"),
            format!(
                "{} system prompts × {} users each × {} {} is {} users, more than the {} allowed",
                crate::scenario::grouped(sp.num_unique_system_prompts.into()),
                crate::scenario::grouped(sp.num_users_per_system_prompt.into()),
                ip.stages.len(),
                if ip.stages.len() == 1 {
                    "stage"
                } else {
                    "stages"
                },
                crate::scenario::grouped(users.saturating_mul(ip.stages.len() as u64)),
                crate::scenario::grouped(MAX_INFERENCE_PERF_USERS)
            ),
        ));
    }
    if let Some(t) = ip.timeout_s {
        crate::scenario::wait_seconds(p, &at("timeout_s"), t, "seconds a client waits");
    }
}
