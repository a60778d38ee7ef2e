//! Autoscaling (issue 9): hand-computed decisions, exact life-cycle delays, drains that lose
//! nothing, cooldowns, cold starts and cost arithmetic, all with invariants on every tick.

use std::path::Path;

use proptest::prelude::*;
use servesim::metrics::Summary;
use servesim::{RunOptions, Simulation};

use crate::common::{Row, parse, read_rows, run_keeping};

/// Runs with invariant checks; returns the summary, requests.csv rows (by id) and
/// scale_events.csv rows.
fn run(src: &str) -> (Summary, Vec<Row>, Vec<Row>) {
    let (summary, rows, dir) = run_keeping(&parse(src));
    let events = events(dir.path());
    (summary, rows, events)
}

fn events(dir: &Path) -> Vec<Row> {
    read_rows(&dir.join("scale_events.csv"))
}

/// (time µs, instance, event) of every row.
fn timeline(events: &[Row]) -> Vec<(u64, u64, String)> {
    events
        .iter()
        .map(|e| {
            let t: f64 = e.str("time_s").parse().unwrap();
            (
                (t * 1e6).round() as u64,
                e.u64("instance"),
                e.str("event").to_string(),
            )
        })
        .collect()
}

/// 1 ms per step whatever the batch (Blackbox β0 = 1000 µs), no overheads.
const ONE_MS: &str = "latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0])";

#[test]
fn target_tracking_follows_the_hand_computed_sequence() {
    // 12 requests at t = 0 on the one instance, each 25,000 output tokens: one batch of
    // 1 prefill step + 24,999 decode steps of 1 ms, done by t = 25.001 s. A trickle client
    // (one 1-token request every 10.01 s) keeps the run going; it is never in the system
    // at an evaluation (t = 10, 20, ...). Target 4 in flight per instance, tolerance 0.1,
    // scale-down stabilisation 25 s:
    //   t = 10: 12 / 1 = 12 → ceil(1 × 12/4) = 3 → instances 1 and 2 start (provision and
    //           load 0 s: serving at once);
    //   t = 20: 12 / 3 = 4 → ratio 1, within tolerance: hold;
    //   t = 30: 0 → recommends 0, but 3 was recommended at t = 10 and 20 (≤ 25 s ago): hold;
    //   t = 40: the highest recommendation within 25 s is t = 20's 3: hold;
    //   t = 50: recommendations at 30, 40, 50 are all 0 → min 1: instances 2 and 1 turn off
    //           (idle: no drain), the higher index first.
    let (s, rows, events) = run(&format!(
        "(horizon_s: 55.0,
          cluster: (groups: [(count: 1, kv_blocks: 100000, max_num_seqs: 64, {ONE_MS},
            scaling: (min: 1, max: 8, provision_s: 0.0, load_s: 0.0))]),
          policies: (autoscale: \"target_tracking\", autoscale_params: {{\"target_in_flight\": 4.0,
            \"tolerance\": 0.1, \"scale_down_stabilization_s\": 25.0, \"interval_s\": 10.0}}),
          workload: (clients: [
            (arrival: AllAtZero(count: 12), input_tokens: Constant(8), output_tokens: Constant(25000)),
            (rate_per_s: 0.0999000999000999, arrival: Constant, input_tokens: Constant(8), output_tokens: Constant(1)),
          ]))"
    ));
    let big_done: Vec<u64> = rows
        .iter()
        .filter(|r| r.u64("output_tokens") == 25_000)
        .map(|r| r.u64("completion_us"))
        .collect();
    assert_eq!(big_done.len(), 12);
    // Request 0 starts alone at t = 0 (arrivals at one time take one tick each); the
    // other 11 join the batch 1 ms later.
    assert!(
        big_done.iter().all(|&c| c == 25_000_000 || c == 25_001_000),
        "{big_done:?}"
    );
    let t = timeline(&events);
    let s10 = 10_000_000;
    assert_eq!(
        t,
        vec![
            (s10, 1, "provisioning".into()),
            (s10, 2, "provisioning".into()),
            (s10, 1, "loading".into()),
            (s10, 2, "loading".into()),
            (s10, 1, "serving".into()),
            (s10, 2, "serving".into()),
            (50_000_000, 2, "off".into()),
            (50_000_000, 1, "off".into()),
        ],
        "{t:?}"
    );
    assert_eq!(events[0].str("signal"), "12.000000");
    assert_eq!(events[0].str("reason"), "in_flight");
    // Instances on: 1 for 10 s, 3 for 40 s, 1 from 50 s to the run's last event.
    let g = &s.groups[0];
    assert_eq!((g.scale_ups, g.scale_downs, g.max_instances), (2, 2, 3));
    let end = s.sim_duration_s;
    assert!(end > 50.0 && end <= 55.0);
    let instance_s = 10.0 + 3.0 * 40.0 + (end - 50.0);
    assert!((g.mean_instances - instance_s / end).abs() < 1e-9, "{g:?}");
    assert!((g.gpu_hours - instance_s / 3600.0).abs() < 1e-12);
}

#[test]
fn provisioning_load_and_warm_up_are_exact_to_the_microsecond() {
    // Scale from zero: the first request (t = 0) parks and starts a cold start:
    // provisioning 12.5 s, loading 7.25 s, warm-up 3 s at half speed, not routable until
    // warm. It is enqueued at 22.75 s, when the instance turns routable (warm); its 1 + 9
    // steps of 1 ms end at 22.760 s.
    let (s, rows, events) = run(&format!(
        "(cluster: (groups: [(count: 0, kv_blocks: 1000, {ONE_MS},
            scaling: (min: 0, max: 1, provision_s: 12.5, load_s: 7.25, warmup_s: 3.0,
              warmup_speed: 0.5, routable_during_warmup: false))]),
          workload: (clients: [(arrival: AllAtZero(count: 1), input_tokens: Constant(8), output_tokens: Constant(10))]))"
    ));
    assert_eq!(
        timeline(&events),
        vec![
            (0, 0, "provisioning".into()),
            (12_500_000, 0, "loading".into()),
            (19_750_000, 0, "warming_up".into()),
            (22_750_000, 0, "serving".into()),
        ]
    );
    assert_eq!(events[0].str("reason"), "cold_start");
    let r = &rows[0];
    assert_eq!(r.str("state"), "completed");
    assert_eq!(r.us("scheduling_delay_ms"), 22_750_000);
    assert_eq!(r.u64("completion_us"), 22_760_000);
    assert_eq!(s.groups[0].cold_starts, 1);

    // A derived load time: one GPU's share of the weights / load_gb_per_s.
    let src = "(cluster: (groups: [(count: 0, model: \"llama-3.1-8b-instruct\", gpu: \"H100\", tp: 2,
            latency: TrainedPhysics(),
            scaling: (min: 0, max: 1, provision_s: 0.0, load_gb_per_s: 4.0))]),
          workload: (clients: [(arrival: AllAtZero(count: 1), input_tokens: Constant(8), output_tokens: Constant(2))]))";
    let (_, _, events) = run(src);
    let model = servesim::model::ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
    let load_s = servesim::model::params(&model) * model.weight_bytes / 2.0 / 4e9;
    // About 16 GB of bf16 weights, half per GPU, at 4 GB/s: about 2 s.
    assert!((1.9..2.1).contains(&load_s), "{load_s}");
    let t = timeline(&events);
    assert_eq!((t[1].0, t[1].2.as_str()), (0, "loading"));
    assert_eq!(t[2].2, "serving");
    assert_eq!(t[2].0, (load_s * 1e6) as u64, "{t:?}");
}

#[test]
fn a_drain_finishes_every_request_on_the_instance_and_takes_no_new_ones() {
    // Two instances, least-loaded routing, 4 req/s of 2-second requests (2,000 steps of
    // 1 ms); at t = 5 s the schedule asks for one instance: one drains, finishes what it
    // has, then turns off.
    let (s, rows, events) = run(&format!(
        "(cluster: (groups: [(count: 2, kv_blocks: 100000, {ONE_MS}, cost_per_gpu_hour: 3.0,
            scaling: (min: 1, max: 2, provision_s: 0.0, load_s: 0.0))]),
          policies: (routing: \"least_loaded\", autoscale: \"scheduled\", autoscale_params: {{\"5\": 1}}),
          workload: (num_requests: 60, clients: [(rate_per_s: 4.0, arrival: Constant,
            input_tokens: Constant(8), output_tokens: Constant(2000))]))"
    ));
    assert_eq!(s.requests.completed, 60, "nothing is lost in a drain");
    let t = timeline(&events);
    assert_eq!(t.len(), 2, "{t:?}");
    let (drain_at, drained, ref ev) = t[0];
    assert_eq!((drain_at, ev.as_str()), (5_000_000, "draining"));
    assert_eq!(t[1].1, drained);
    assert_eq!(t[1].2, "off");
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.u64("instance") == drained)
        .collect();
    assert!(!mine.is_empty());
    let last = mine.iter().map(|r| r.u64("completion_us")).max().unwrap();
    assert_eq!(t[1].0, last, "off when its last request completes");
    assert!(
        mine.iter().all(|r| r.u64("arrival_us") <= drain_at),
        "no request routed to a draining instance"
    );
    // Cost: one instance on for the whole run, the other until `last`.
    let end = s.sim_duration_s;
    let gpu_hours = (end + last as f64 / 1e6) / 3600.0;
    let g = &s.groups[0];
    assert!((g.gpu_hours - gpu_hours).abs() < 1e-9, "{g:?}");
    assert!((g.cost - 3.0 * gpu_hours).abs() < 1e-9);
    assert!((s.cost.total - g.cost).abs() < 1e-12);
    let mtok = s.throughput.output_tokens as f64 / 1e6;
    assert!((s.cost.per_million_output_tokens.unwrap() - g.cost / mtok).abs() < 1e-9);
}

/// A scale-down that cancels the instance parked requests wait for (the schedule asks for
/// none at 0.5 s, while the one it started at 0 provisions) left them parked for ever: the
/// run ended with them "in transit" and the "servesim bug" warning (and, with MTBF crashes
/// drawing on, never ended). As when they were parked, a cold start now serves them.
#[test]
fn a_schedule_that_cancels_what_parked_requests_wait_for_gives_them_a_cold_start() {
    // Provisioning 1 s, no load: the schedule's instance (t = 0) would serve from 1 s; it
    // is cancelled at 0.5 s and the cold start then serves from 1.5 s. Four requests
    // (8 tokens, 2 steps of 1 ms) arrive at 0.1 s, 0.2 s, ...
    let (s, rows, events) = run(&format!(
        "(cluster: (groups: [(name: \"g\", count: 0, kv_blocks: 1000, {ONE_MS},
            scaling: (min: 0, max: 1, provision_s: 1.0, load_s: 0.0))]),
          policies: (autoscale: \"scheduled\", autoscale_params: {{\"0\": 1, \"0.5\": 0}}),
          workload: (num_requests: 4, clients: [(rate_per_s: 10.0, arrival: Constant,
            input_tokens: Constant(8), output_tokens: Constant(2))]))"
    ));
    assert_eq!(s.requests.completed, 4, "{:?}", s.warnings);
    let t: Vec<(u64, String)> = timeline(&events).into_iter().map(|e| (e.0, e.2)).collect();
    let at = |us: u64, what: &str| (us, what.to_string());
    assert_eq!(
        t,
        [
            at(0, "provisioning"),
            at(500_000, "cancelled"),
            at(500_000, "provisioning"),
            at(1_500_000, "loading"),
            at(1_500_000, "serving"),
        ]
    );
    assert_eq!(events[2].str("reason"), "cold_start");
    // Each request's first token: the 1.5 s start + its prefill step (1 ms) at the latest.
    for r in &rows {
        let first = r.u64("arrival_us") + r.us("ttft_ms");
        assert!((1_500_000..=1_504_000).contains(&first), "{first}");
    }
}

/// A scheduled size past a group's bounds stops at the bound, and the run says so.
#[test]
fn a_scheduled_size_outside_the_bounds_is_served_at_the_bound_and_warned_of() {
    let src = format!(
        "(cluster: (groups: [(name: \"g\", count: 1, kv_blocks: 1000, {ONE_MS},
            scaling: (min: 1, max: 2, provision_s: 0.0, load_s: 0.0))]),
          policies: (autoscale: \"scheduled\", autoscale_params: {{\"0\": 3, \"g@1\": 0}}),
          workload: (num_requests: 20, clients: [(rate_per_s: 10.0, arrival: Constant,
            input_tokens: Constant(8), output_tokens: Constant(2))]))"
    );
    let (s, _, _) = run(&src);
    assert_eq!(s.groups[0].max_instances, 2);
    assert_eq!(
        s.groups[0].scale_downs, 1,
        "up to max 2 at 0 s, down to min 1 at 1 s"
    );
    let app = servesim::default_app();
    let warnings = servesim::loader::estimate::slow_inputs(
        &parse(&src),
        app.world().resource::<servesim::policy::Catalog>(),
    );
    for expected in [
        "`0`: size 3 is outside cluster.groups[0] (g)'s scaling bounds 1..=2: it will serve 2 (scaling.max)",
        "`g@1`: size 0 is outside cluster.groups[0] (g)'s scaling bounds 1..=2: it will serve 1 (scaling.min)",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(expected)),
            "{warnings:?}"
        );
    }
}

/// A parked request whose client timed out stayed on the parked list: the run could not end
/// while it was there (nothing left means nothing parked) and autoscaling counted it as
/// waiting, evaluating on; with MTBF crashes keeping every cold start from serving, such a run
/// never ended (found by random feature combinations). Timed out, it leaves the list.
#[test]
fn parked_requests_that_time_out_leave_the_parked_list_and_the_run_ends() {
    // Three requests at 0.1, 0.2, 0.3 s with a 0.5 s timeout; the cold start at 0.1 s takes
    // 10 s: each times out parked, the last at 0.8 s, and the run ends there.
    let (s, rows, events) = run(&format!(
        "(cluster: (groups: [(name: \"g\", count: 0, kv_blocks: 1000, {ONE_MS},
            scaling: (min: 0, max: 2, provision_s: 10.0, load_s: 0.0))]),
          policies: (autoscale: \"threshold\", autoscale_params: {{\"queue_high\": 4.0, \"interval_s\": 1.0}}),
          workload: (num_requests: 3, clients: [(rate_per_s: 10.0, arrival: Constant,
            input_tokens: Constant(8), output_tokens: Constant(2), timeout_s: 0.5)]))"
    ));
    assert_eq!(s.requests.timed_out, 3);
    assert!(rows.iter().all(|r| r.str("state") == "timed_out"));
    assert!(
        (s.sim_duration_s - 0.8).abs() < 1e-9,
        "{}",
        s.sim_duration_s
    );
    let t: Vec<(u64, String)> = timeline(&events).into_iter().map(|e| (e.0, e.2)).collect();
    assert_eq!(t, [(100_000, "provisioning".to_string())]);
}

#[test]
fn cooldowns_space_the_scale_ups() {
    // A queue that never drains (one long request per instance slot, max_num_seqs 1) keeps
    // the queue signal high; interval 10 s, scale-up cooldown 25 s: ups at 10, 40, 70 s.
    let (s, _, events) = run(&format!(
        "(horizon_s: 75.0,
          cluster: (groups: [(count: 1, kv_blocks: 100000, max_num_seqs: 1, {ONE_MS},
            scaling: (min: 1, max: 10, provision_s: 0.0, load_s: 0.0, scale_up_cooldown_s: 25.0))]),
          policies: (autoscale: \"threshold\", autoscale_params: {{\"queue_high\": 1.0, \"interval_s\": 10.0}}),
          workload: (clients: [(arrival: AllAtZero(count: 50), input_tokens: Constant(8), output_tokens: Constant(1000000))]))"
    ));
    let ups: Vec<u64> = timeline(&events)
        .into_iter()
        .filter(|e| e.2 == "provisioning")
        .map(|e| e.0 / 1_000_000)
        .collect();
    assert_eq!(ups, vec![10, 40, 70]);
    assert_eq!(s.groups[0].scale_ups, 3);
}

#[test]
fn an_idle_pool_scales_to_zero_and_cold_starts_when_work_returns() {
    // Bursts of 60 s every 300 s; target tracking scales to zero in the gap, and each
    // burst begins with a cold start (20 s provisioning + 10 s load).
    let (s, rows, events) = run(
        "(cluster: (groups: [(count: 0, kv_blocks: 5000,
            latency: Blackbox(alpha: [1000.0, 0.0, 0.0], beta: [5000.0, 1.0, 50.0]),
            scaling: (min: 0, max: 3, provision_s: 20.0, load_s: 10.0))]),
          policies: (autoscale: \"target_tracking\",
            autoscale_params: {\"target_in_flight\": 8.0, \"scale_down_stabilization_s\": 30.0, \"interval_s\": 10.0}),
          workload: (duration_s: 600.0, clients: [(rate_per_s: 4.0, arrival: OnOff(on_s: 60.0, off_s: 240.0),
            input_tokens: Constant(256), output_tokens: Constant(64))]))",
    );
    assert_eq!(s.requests.completed, s.requests.injected);
    let g = &s.groups[0];
    assert_eq!(g.cold_starts, 2, "{events:?}");
    let offs = timeline(&events)
        .into_iter()
        .filter(|e| e.2 == "off")
        .count();
    assert!(offs >= 1, "scaled to zero between the bursts");
    // Every request waited out at least the part of the cold start after its arrival.
    let first = rows
        .iter()
        .map(|r| r.us("scheduling_delay_ms"))
        .max()
        .unwrap();
    assert!(first >= 29_000_000, "{first}");
    assert!(g.mean_instances < 1.0);
}

#[test]
fn cheapest_first_grows_the_cheap_pool_before_the_dear_one() {
    // Two pools behind one router, each starting with one instance; the schedule-free
    // threshold policy pools them and adds the cheap ones first.
    let (s, _, events) = run(&format!(
        "(horizon_s: 25.0,
          cluster: (groups: [
            (name: \"dear\", count: 1, kv_blocks: 100000, max_num_seqs: 1, {ONE_MS}, cost_per_gpu_hour: 10.0,
              scaling: (min: 1, max: 4, provision_s: 0.0, load_s: 0.0)),
            (name: \"cheap\", count: 1, kv_blocks: 100000, max_num_seqs: 1, {ONE_MS}, cost_per_gpu_hour: 1.0,
              scaling: (min: 1, max: 2, provision_s: 0.0, load_s: 0.0)),
          ]),
          policies: (autoscale: \"threshold\", autoscale_params: {{\"queue_high\": 1.0, \"step\": 2,
            \"interval_s\": 10.0, \"cheapest_first\": 1}}),
          workload: (clients: [(arrival: AllAtZero(count: 50), input_tokens: Constant(8), output_tokens: Constant(1000000))]))"
    ));
    let started: Vec<String> = events
        .iter()
        .filter(|e| e.str("event") == "provisioning")
        .map(|e| format!("{}@{}", e.str("group"), e.str("time_s")))
        .collect();
    // t = 10: pool of 2 → 4: cheap fills to its max (1 more), dear takes the other.
    // t = 20: 4 → 6: cheap is full, dear gets both.
    assert_eq!(
        started,
        [
            "dear@10.000000",
            "cheap@10.000000",
            "dear@20.000000",
            "dear@20.000000"
        ]
    );
    assert_eq!(s.groups[1].max_instances, 2);
    assert_eq!(s.groups[0].max_instances, 4);
}

#[test]
fn bad_scaling_settings_are_located_errors() {
    let app = servesim::default_app();
    let err = servesim::loader::parse(
        "(cluster: (groups: [(count: 5, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 0.0, 0.0]),
            scaling: (min: 3, max: 2, warmup_speed: 0.0, provision_s: -1.0))]),
          policies: (autoscale: \"target_tracking\", autoscale_params: {\"target_utilization\": 0.5, \"target_queue\": 2.0}),
          workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(1))]))",
        "bad.ron",
        &[],
        app.world().resource::<servesim::policy::Catalog>(),
    )
    .unwrap_err()
    .to_string();
    for want in [
        "cluster.groups[0].scaling.min: min (3) is above max (2)",
        "cluster.groups[0].count: an autoscaled group starts with count instances",
        "cluster.groups[0].scaling.warmup_speed: must be within (0, 1]",
        "cluster.groups[0].scaling.provision_s: must be seconds",
        "give one signal, not utilization and queue",
    ] {
        assert!(err.contains(want), "missing {want:?} in\n{err}");
    }
    let err = servesim::loader::parse(
        "(cluster: (groups: [(latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 0.0, 0.0]))]),
          policies: (autoscale: \"threshold\", autoscale_params: {\"queue_high\": 2.0}),
          workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(1))]))",
        "bad.ron",
        &[],
        app.world().resource::<servesim::policy::Catalog>(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("no group has it"), "{err}");
}

/// A threshold given one bound of its signal moves one way only: validate says which.
#[test]
fn a_threshold_with_one_bound_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let warned = |params: &str| {
        std::fs::write(
            dir.path().join("t.ron"),
            format!(
                "(cluster: (groups: [(count: 1, kv_blocks: 100, scaling: (min: 1, max: 3),
                    latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 0.0, 0.0]))]),
                  policies: (autoscale: \"threshold\", autoscale_params: {{{params}}}),
                  workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(1))]))"
            ),
        )
        .unwrap();
        let out = crate::common::servesim(&["validate", "t.ron"], dir.path());
        assert!(out.status.success());
        String::from_utf8(out.stderr)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("warning: policies.autoscale_params"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        warned(r#""queue_high": 2.0"#),
        [
            "warning: policies.autoscale_params: queue_high without queue_low: the threshold policy adds instances and never removes one (after a burst the group stays at its largest); give queue_low for it to scale down"
        ]
    );
    assert_eq!(
        warned(r#""kv_low": 0.2"#),
        [
            "warning: policies.autoscale_params: kv_low without kv_high: the threshold policy removes instances and never adds one; give kv_high for it to scale up"
        ]
    );
    assert!(warned(r#""queue_high": 2.0, "queue_low": 0.5"#).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, rng_seed: proptest::test_runner::RngSeed::Fixed(9), ..ProptestConfig::default() })]

    /// Random policies and life-cycle parameters: every invariant holds on every tick,
    /// nothing is lost, the group stays within its bounds.
    #[test]
    fn scaling_with_random_parameters_keeps_every_invariant(
        policy in 0usize..4,
        min in 0u32..2,
        extra in 1u32..4,
        provision in 0.0f64..20.0,
        load in 0.0f64..10.0,
        warmup in 0.0f64..5.0,
        speed in 0.2f64..1.0,
        routable_warm in any::<bool>(),
        interval in 1.0f64..15.0,
        cooldown in 0.0f64..20.0,
        seed in 0u64..1000,
    ) {
        let max = min + extra;
        let params = match policy {
            0 => format!("\"threshold\", autoscale_params: {{\"queue_high\": 2.0, \"queue_low\": 0.5, \"interval_s\": {interval}}}"),
            1 => format!("\"target_tracking\", autoscale_params: {{\"target_in_flight\": 6.0, \"scale_down_stabilization_s\": 20.0, \"interval_s\": {interval}}}"),
            2 => format!("\"slo_aware\", autoscale_params: {{\"target_ttft_p90_ms\": 200.0, \"interval_s\": {interval}}}"),
            _ => format!("\"scheduled\", autoscale_params: {{\"0\": {max}, \"40\": {min}, \"80\": {max}}}"),
        };
        let (s, _, _) = run(&format!(
            "(seed: {seed}, cluster: (groups: [(count: {min}, kv_blocks: 3000,
                latency: Blackbox(alpha: [500.0, 0.0, 0.0], beta: [4000.0, 2.0, 60.0]),
                scaling: (min: {min}, max: {max}, provision_s: {provision}, load_s: {load}, warmup_s: {warmup},
                  warmup_speed: {speed}, routable_during_warmup: {routable_warm},
                  scale_up_cooldown_s: {cooldown}, scale_down_cooldown_s: {cooldown}))]),
              policies: (routing: \"least_loaded\", autoscale: {params}),
              workload: (duration_s: 120.0, clients: [(rate_per_s: 6.0, arrival: OnOff(on_s: 30.0, off_s: 30.0),
                input_tokens: Uniform(min: 16, max: 512), output_tokens: Uniform(min: 1, max: 200))]))"
        ));
        prop_assert_eq!(s.requests.completed + s.requests.rejected, s.requests.injected);
        prop_assert_eq!(s.requests.rejected, 0);
        prop_assert!(s.groups[0].max_instances <= max);
    }
}

/// The autoscaling chapter.s table is what the bundled scenario gives: two of its rows are
/// rerun here and compared with the numbers printed there.
#[test]
fn the_docs_cost_table_matches_the_bundled_scenario() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = crate::common::doc("autoscaling");
    let row = |prefix: &str| -> Vec<String> {
        let line = readme
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("docs/autoscaling.md has no row {prefix}"));
        line.split('|').map(|c| c.trim().to_string()).collect()
    };
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    for (prefix, sets) in [
        (
            "| `target_tracking`, `target_in_flight` 24 (the file)",
            vec![],
        ),
        (
            "| `scheduled` `{",
            vec![
                ("policies.autoscale", "\"scheduled\""),
                (
                    "policies.autoscale_params",
                    "{\"0\": 2, \"540\": 5, \"1500\": 3, \"2100\": 1}",
                ),
            ],
        ),
    ] {
        let sets: Vec<(String, String)> = sets
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let sc = servesim::loader::load(&root.join("scenarios/autoscaling.ron"), &sets, catalog)
            .unwrap();
        let s = Simulation::new(&sc, RunOptions::default())
            .unwrap()
            .run()
            .unwrap();
        let cols = row(prefix);
        let g = &s.groups[0];
        assert_eq!(
            cols[2],
            format!("{:.3}", s.slo.attainment.unwrap()),
            "{prefix}"
        );
        assert_eq!(cols[5], format!("{:.2}", g.gpu_hours), "{prefix}");
        assert_eq!(cols[6], format!("{:.2}", s.cost.total), "{prefix}");
        assert_eq!(
            cols[8],
            format!("{:.2} / {}", g.mean_instances, g.max_instances),
            "{prefix}"
        );
        // Cost is GPU-hours at $4.
        assert!((s.cost.total - 4.0 * g.gpu_hours).abs() < 1e-9);
    }
}

#[test]
fn each_group_may_evaluate_on_its_own_interval() {
    // Queues that never drain; group "fast" evaluates every 5 s, "slow" on the policy's 20 s.
    let (_, _, events) = run(&format!(
        "(horizon_s: 45.0,
          cluster: (groups: [
            (name: \"fast\", count: 1, kv_blocks: 100000, max_num_seqs: 1, {ONE_MS},
              scaling: (min: 1, max: 3, provision_s: 0.0, load_s: 0.0, interval_s: 5.0)),
            (name: \"slow\", count: 1, kv_blocks: 100000, max_num_seqs: 1, {ONE_MS},
              scaling: (min: 1, max: 3, provision_s: 0.0, load_s: 0.0)),
          ]),
          policies: (autoscale: \"threshold\", autoscale_params: {{\"queue_high\": 1.0, \"interval_s\": 20.0}}),
          workload: (clients: [(arrival: AllAtZero(count: 60), input_tokens: Constant(8), output_tokens: Constant(1000000))]))"
    ));
    let ups: Vec<String> = events
        .iter()
        .filter(|e| e.str("event") == "provisioning")
        .map(|e| format!("{}@{}", e.str("group"), e.str("time_s")))
        .collect();
    assert_eq!(
        ups,
        [
            "fast@5.000000",
            "fast@10.000000",
            "slow@20.000000",
            "slow@40.000000"
        ]
    );
}

/// Found by random P/D scenarios: every request of a decode instance timed out while its
/// step ran, and a scale-down that found it without requests switched it off with the step
/// still in flight (INV-9). A step in flight is work: the instance drains until it ends.
#[test]
fn an_instance_whose_requests_all_timed_out_mid_step_drains_before_it_is_off() {
    let (s, _, events) = run(r#"(seed: 963, cluster: (groups: [
            (name: "prefill", role: Prefill, model: "llama-2-7b-hf", gpu: "H100", kv_blocks: 400,
             latency: TrainedPhysics()),
            (name: "decode", count: 2, role: Decode, model: "llama-2-7b-hf", gpu: "H100",
             kv_blocks: 300, max_num_seqs: 16, latency: TrainedPhysics(),
             scaling: (min: 1, max: 4, provision_s: 1.0, warmup_s: 0.5))]),
          policies: (routing: "least_loaded", decode_routing: "least_loaded",
            autoscale: "target_tracking",
            autoscale_params: {"target_in_flight": 4.0, "interval_s": 1.0}),
          workload: (clients: [(arrival: AllAtZero(count: 100),
            input_tokens: LogNormal(mu: 6.0, sigma: 0.8, min: 8, max: 6000),
            output_tokens: Uniform(min: 1, max: 200), timeout_s: 1.0)]))"#);
    assert_eq!(s.requests.completed + s.requests.timed_out, 100);
    let t = timeline(&events);
    assert_eq!(t.len(), 2, "{t:?}");
    assert_eq!(
        (t[0].0, t[0].1, t[0].2.as_str()),
        (1_000_000, 2, "draining")
    );
    // Off when the step ends: a decode step of at most 16 requests takes milliseconds.
    assert_eq!((t[1].1, t[1].2.as_str()), (2, "off"));
    assert!(t[1].0 > 1_000_000 && t[1].0 < 1_100_000, "{t:?}");
}
