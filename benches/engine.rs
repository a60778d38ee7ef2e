//! End-to-end and KV-cache benchmarks.
//!
//! - `e2e/10k_requests_4_instances` and `e2e/100k_requests_16_instances`: the
//!   `scenarios/cluster-16.ron` workload (Poisson, ~512 input / ~256 output tokens, ~8 req/s
//!   per instance), throughput in simulated requests per second. The tick count of each run
//!   is printed once so ticks/s = ticks / time.
//! - `peers/w1_1k_requests_1_instance`, `peers/w2_10k_requests_4_instances`,
//!   `peers/w3_100k_requests_16_instances`: `scenarios/bench/w1.ron` … `w3.ron`, the family
//!   the peers are compared on (Poisson at 8 req/s per instance, exactly 512 / 256 tokens,
//!   round robin, trained physics). Throughput in simulated requests per second; the tick count
//!   of each run is printed once (ns per tick = time / ticks). W4 and W5 are run by hand
//!   (docs/performance.md).
//! - `kv/admit_register_release_48_blocks`: one request's worth of block operations.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use servesim::kv::{KvCache, SeqBlocks};
use servesim::policy::Catalog;
use servesim::request::PromptContent;
use servesim::{RunOptions, Simulation, scenario};

fn load(overrides: &[(&str, &str)]) -> scenario::Scenario {
    load_file("scenarios/cluster-16.ron", overrides)
}

fn load_file(file: &str, overrides: &[(&str, &str)]) -> scenario::Scenario {
    let app = servesim::default_app();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    servesim::loader::load(&path, &o, app.world().resource::<Catalog>())
        .expect("bench scenario is valid")
}

fn run(sc: &scenario::Scenario) -> u64 {
    Simulation::new(sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap()
        .ticks
}

fn e2e(c: &mut Criterion) {
    let mut g = c.benchmark_group("e2e");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    for (name, n, count, rate) in [
        ("10k_requests_4_instances", 10_000u64, "4", "32.0"),
        ("100k_requests_16_instances", 100_000, "16", "128.0"),
    ] {
        let sc = load(&[
            ("workload.num_requests", &n.to_string()),
            ("cluster.groups[0].count", count),
            ("workload.clients[0].rate_per_s", rate),
        ]);
        eprintln!("{name}: {} ticks per run", run(&sc));
        g.throughput(Throughput::Elements(n));
        g.bench_function(name, |b| b.iter(|| black_box(run(&sc))));
    }
    g.finish();
}

fn peers(c: &mut Criterion) {
    let mut g = c.benchmark_group("peers");
    g.sample_size(10).measurement_time(Duration::from_secs(30));
    for (name, file, n) in [
        (
            "w1_1k_requests_1_instance",
            "scenarios/bench/w1.ron",
            1_000u64,
        ),
        (
            "w2_10k_requests_4_instances",
            "scenarios/bench/w2.ron",
            10_000,
        ),
        (
            "w3_100k_requests_16_instances",
            "scenarios/bench/w3.ron",
            100_000,
        ),
    ] {
        let sc = load_file(file, &[]);
        eprintln!("{name}: {} ticks per run", run(&sc));
        g.throughput(Throughput::Elements(n));
        g.bench_function(name, |b| b.iter(|| black_box(run(&sc))));
    }
    g.finish();
}

/// One request's KV life on `cache`: prefix lookup, admission of a 512-token prompt (256
/// tokens shared), registration, growth to 768 tokens, release: 48 blocks.
fn kv_cycle(cache: &mut KvCache, id: u64) -> u32 {
    let content = PromptContent::Simple {
        prefix_id: 1,
        prefix_tokens: 256,
        unique_id: id,
    };
    let mut seq = SeqBlocks::default();
    let cached = cache.cached_prefix_blocks(&content, 512, 512);
    assert!(cache.admit(&mut seq, &content, 512, cached, 512));
    cache.register_full_blocks(&mut seq, &content, 512, 512);
    assert!(cache.grow(&mut seq, 768));
    cache.release(&mut seq);
    cached
}

fn kv(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv");
    g.throughput(Throughput::Elements(48));
    let mut cache = KvCache::new(26_312, 16);
    let mut id = 0u64;
    g.bench_function("admit_register_release_48_blocks", |b| {
        b.iter(|| {
            id += 1;
            black_box(kv_cycle(&mut cache, id))
        })
    });
    // The same cycle spread over 64 caches in turn, as in a cluster of 64 instances (W4):
    // their blocks and indexes (~50 MB) do not fit the processor's caches, so what this
    // measures is how many cache misses a cycle waits for.
    let mut caches: Vec<KvCache> = (0..64).map(|_| KvCache::new(26_312, 16)).collect();
    let mut turn = 0;
    g.bench_function("admit_register_release_48_blocks_64_caches", |b| {
        b.iter(|| {
            id += 1;
            turn = (turn + 1) % caches.len();
            black_box(kv_cycle(&mut caches[turn], id))
        })
    });
    g.finish();
}

criterion_group!(benches, e2e, peers, kv);
criterion_main!(benches);
