//! Lockstep decode steps (issue 10): a running batch that only decodes takes its steps in
//! O(1), keeping the requests' per-token fields behind. They must change nothing but the
//! cost. A run with invariant checks takes none (the checks read every request every tick),
//! so each scenario here is run both ways and every result file compared byte for byte;
//! the unchecked run must really have taken lockstep steps.

use servesim::instance::Scheduler;
use servesim::{RunOptions, Simulation};

use super::common::parse;

/// Runs `src` with or without invariant checks; returns the summary, the result files and
/// the largest lag seen (lockstep steps the running requests were behind by).
fn run(src: &str, check: bool) -> (servesim::metrics::Summary, Vec<Vec<u8>>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let sc = parse(src);
    let mut sim = Simulation::from_app(
        servesim::default_app(),
        &sc,
        RunOptions {
            check_invariants: check,
            out_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap();
    let mut lag = 0;
    while sim.tick() {
        let world = sim.world_mut();
        let mut q = world.query::<&Scheduler>();
        for s in q.iter(world) {
            lag = lag.max(s.lockstep.lag());
        }
    }
    let summary = sim.finish().unwrap();
    let files = ["requests.csv", "summary.json", "timeseries.csv"]
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)).unwrap())
        .collect();
    (summary, files, lag)
}

/// Both ways, byte for byte; lockstep steps taken only without checks.
fn same_both_ways(src: &str, min_lag: u32) -> servesim::metrics::Summary {
    let (checked, want, none) = run(src, true);
    let (fast, got, lag) = run(src, false);
    assert_eq!(none, 0, "a checked run takes no lockstep steps");
    assert!(lag >= min_lag, "lockstep lag reached only {lag}");
    assert_eq!(checked, fast);
    for (f, (a, b)) in ["requests.csv", "summary.json", "timeseries.csv"]
        .iter()
        .zip(want.iter().zip(&got))
    {
        assert!(a == b, "{f} differs with lockstep steps");
    }
    fast
}

#[test]
fn steady_decodes_take_lockstep_steps_and_change_nothing() {
    // Trained-physics prices a lockstep step from the batch's sums; random lengths give
    // completions and block growth at every phase; shared prefixes hit the cache.
    let s = same_both_ways(
        r#"(seed: 7,
        cluster: (groups: [(count: 2, model: "llama-3.1-8b-instruct", gpu: "H100",
            kv_blocks: 4000, max_num_seqs: 64, latency: TrainedPhysics())]),
        workload: (num_requests: 400, clients: [(rate_per_s: 20.0,
            input_tokens: Uniform(min: 16, max: 900), output_tokens: Uniform(min: 1, max: 300),
            shared_prefix_tokens: 64, prefix_groups: 3)]),
    )"#,
        20,
    );
    assert_eq!(s.requests.completed, 400);
}

#[test]
fn an_api_server_falling_behind_is_counted_in_lockstep_steps_too() {
    // 500 µs per streamed token: the 20-odd requests running cost the API server ~10 ms a
    // step, longer than the steps; the warning (and its counts) must be the same either way.
    let s = same_both_ways(
        r#"(seed: 7,
        cluster: (groups: [(model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 4000,
            max_num_seqs: 64, latency: TrainedPhysics(),
            engine: (api_us_per_output_token: 500.0))]),
        workload: (num_requests: 300, clients: [(rate_per_s: 10.0,
            input_tokens: Uniform(min: 16, max: 200), output_tokens: Uniform(min: 200, max: 300))]),
    )"#,
        20,
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("instance 0's API server was still streaming")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn energy_accounts_are_the_same_with_lockstep_steps() {
    // A lockstep step charges each running request 1/n of its energy in whole nanojoules,
    // settled later: the same sums, in requests.csv's energy_j and the summary's energy.
    let s = same_both_ways(
        r#"(seed: 9,
        cluster: (groups: [(count: 2, model: "llama-3.1-8b-instruct", gpu: "H100",
            kv_blocks: 4000, max_num_seqs: 64, latency: Roofline())]),
        workload: (num_requests: 300, clients: [(rate_per_s: 20.0,
            input_tokens: Uniform(min: 16, max: 900), output_tokens: Uniform(min: 1, max: 300))]),
        energy: (),
    )"#,
        20,
    );
    assert!(s.energy.unwrap().step_kwh > 0.0);
}

#[test]
fn kv_pressure_preemption_and_a_full_batch_change_nothing() {
    // Few blocks: due blocks are often missing (the scheduler preempts); max_num_seqs 8 keeps
    // the batch full with a queue behind it (FIFO: lockstep steps go on); block size 32.
    let s = same_both_ways(
        r#"(seed: 3,
        cluster: (groups: [(count: 2, kv_blocks: 90, block_size: 32, max_num_seqs: 8,
            latency: Blackbox(alpha: [100.0, 0.0, 5.0], beta: [2000.0, 10.0, 100.0]))]),
        workload: (num_requests: 300, clients: [(rate_per_s: 40.0,
            input_tokens: Uniform(min: 16, max: 700), output_tokens: Uniform(min: 20, max: 400))]),
    )"#,
        20,
    );
    assert!(s.preemptions > 0, "the cache was short");
}

#[test]
fn priority_orders_timeouts_and_item_priced_models_change_nothing() {
    // A non-FIFO queue order (the queue is re-sorted every step: no lockstep step while it
    // holds requests), client timeouts (a running request leaves mid-cohort), chunked
    // prefill, and the roofline (which prices the items: built from the lagging fields).
    let s = same_both_ways(
        r#"(seed: 11,
        cluster: (groups: [(count: 2, model: "llama-3.1-8b-instruct", gpu: "H100",
            kv_blocks: 3000, max_num_seqs: 16, long_prefill_token_threshold: 128,
            latency: Roofline())]),
        policies: (scheduling: "sjf"),
        workload: (num_requests: 300, clients: [(rate_per_s: 60.0, timeout_s: 4.0,
            input_tokens: Uniform(min: 16, max: 2000), output_tokens: Uniform(min: 1, max: 500))]),
    )"#,
        10,
    );
    assert!(
        s.requests.timed_out > 0,
        "some requests time out: {:?}",
        s.requests
    );
}

#[test]
fn a_queue_whose_head_does_not_fit_changes_nothing() {
    // Overloaded and short of blocks: the batch is not full but the queue's head does not
    // fit, so lockstep steps go on with requests waiting; shared prefixes put cached blocks
    // on the free list, which the steps' growth evicts (the head's hits among them).
    let s = same_both_ways(
        r#"(seed: 5,
        cluster: (groups: [(count: 2, kv_blocks: 420, max_num_seqs: 64,
            latency: Blackbox(alpha: [0.0, 0.0, 3.0], beta: [3000.0, 8.0, 150.0]))]),
        workload: (num_requests: 400, clients: [(rate_per_s: 80.0,
            input_tokens: Uniform(min: 64, max: 700), output_tokens: Uniform(min: 10, max: 300),
            shared_prefix_tokens: 128, prefix_groups: 3)]),
    )"#,
        20,
    );
    assert_eq!(s.requests.completed, 400);
    assert!(s.kv.hit_rate > 0.0, "prefixes were shared");
}
