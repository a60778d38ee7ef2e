//! KV block events: the router's event-fed view of every cache equals the caches themselves
//! on every tick; counts balance against what the caches hold at the end; the docs'
//! eviction counter works as written; turning events on changes no result.

use std::collections::{BTreeMap, HashSet};

use servesim::bevy_ecs::prelude::*;
use servesim::instance::Instance;
use servesim::kv::{KvCache, KvEvent, KvEventKind, KvEvents, KvTier};
use servesim::policy::CachedBlocks;
use servesim::policy::Catalog;
use servesim::{RunOptions, SimStep, SimSystems, Simulation};

/// Four instances with a CPU tier, precise-prefix routing, shared prefixes: many stores,
/// evictions, offloads and reloads.
const PREFIX_HEAVY: &str = r#"(seed: 5,
    cluster: (groups: [(count: 4, model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 600,
        cpu_kv_blocks: 400, latency: TrainedPhysics())]),
    policies: (routing: "weighted", routing_params: {"precise_prefix": 2.0, "queue_depth": 1.0}),
    workload: (num_requests: 600, clients: [(rate_per_s: 40.0, input_tokens: Uniform(min: 64, max: 1500),
        output_tokens: Uniform(min: 4, max: 60), shared_prefix_tokens: 512, prefix_groups: 12)]),
    outputs: (kv_events: true))"#;

fn parse_with(app: &servesim::bevy_app::App, text: &str) -> servesim::scenario::Scenario {
    servesim::loader::parse(text, "kv.ron", &[], app.world().resource::<Catalog>())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every tick, after the index is updated: for each instance, the blocks the events say it
/// holds are exactly the blocks its cache holds (both tiers).
fn index_matches_caches(
    cached: Res<CachedBlocks>,
    caches: Query<(&Instance, &KvCache)>,
    mut ticks: Local<u64>,
) {
    *ticks += 1;
    for (inst, kv) in &caches {
        let real: HashSet<u64> = kv.cached_by_tier().into_iter().map(|(h, _)| h).collect();
        let seen: HashSet<u64> = cached.per_instance[inst.index as usize]
            .keys()
            .copied()
            .collect();
        assert_eq!(real, seen, "instance {} after {} ticks", inst.index, *ticks);
    }
}

/// The built-in app plus [`index_matches_caches`] on every tick.
fn checking_app() -> servesim::bevy_app::App {
    let mut app = servesim::default_app();
    app.add_systems(
        SimStep,
        index_matches_caches
            .in_set(SimSystems::Observe)
            .after(servesim::policy::index_kv_events),
    );
    app
}

#[test]
fn the_routers_view_built_from_events_is_the_caches_on_every_tick() {
    let app = checking_app();
    let sc = parse_with(&app, PREFIX_HEAVY);
    let s = crate::common::run_app_checked(app, &sc);
    assert_eq!(s.requests.completed, 600);
    assert!(
        s.kv.hit_blocks > 1000 && s.kv.reloaded_blocks > 0,
        "{:?}",
        s.kv
    );
    let counts = s.kv_events.expect("outputs.kv_events is on");
    let total = |f: fn(&servesim::metrics::KvEventCounts) -> u64| counts.iter().map(f).sum::<u64>();
    assert!(total(|c| c.evicted) > 1000 && total(|c| c.evicted_from_cpu) > 0);
    // The caches' own counters agree with the events.
    assert_eq!(total(|c| c.offloaded), s.kv.offloaded_blocks);
    assert_eq!(total(|c| c.reloaded), s.kv.reloaded_blocks);
}

#[test]
fn instances_turned_off_and_on_report_their_caches_cleared() {
    // Two instances; at 5 s the schedule turns one off (its cache is dropped), at 10 s back
    // on (an empty cache); routed by cached prefixes.
    let app = checking_app();
    let sc = parse_with(
        &app,
        r#"(seed: 4,
        cluster: (groups: [(count: 2, kv_blocks: 400, cpu_kv_blocks: 100, model: "llama-3.1-8b-instruct", gpu: "H100",
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [2000.0, 2.0, 20.0]),
            scaling: (min: 1, max: 2, provision_s: 0.0, load_s: 0.0))]),
        policies: (routing: "weighted", autoscale: "scheduled", autoscale_params: {"5": 1, "10": 2}),
        workload: (duration_s: 15.0, clients: [(rate_per_s: 20.0, input_tokens: Uniform(min: 32, max: 600),
            output_tokens: Uniform(min: 2, max: 30), shared_prefix_tokens: 128, prefix_groups: 6)]),
        outputs: (kv_events: true))"#,
    );
    let s = Simulation::from_app(app, &sc, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    assert!(s.groups.iter().any(|g| g.scale_downs > 0), "{:?}", s.groups);
    assert!(s.kv_events.unwrap().iter().any(|c| c.evicted > 0));
}

#[test]
fn event_counts_balance_against_what_each_cache_holds_at_the_end() {
    let app = servesim::default_app();
    let sc = parse_with(&app, PREFIX_HEAVY);
    let mut sim = Simulation::from_app(app, &sc, RunOptions::default()).unwrap();
    while sim.tick() {}
    let world = sim.world_mut();
    let mut held = BTreeMap::new();
    for (inst, kv) in world.query::<(&Instance, &KvCache)>().iter(world) {
        let mut gpu = 0u64;
        let mut cpu = 0u64;
        for (_, tier) in kv.cached_by_tier() {
            match tier {
                KvTier::Gpu => gpu += 1,
                KvTier::Cpu => cpu += 1,
                t => panic!("no {t:?} tier in this scenario"),
            }
        }
        held.insert(inst.index, (gpu, cpu));
    }
    let s = sim.finish().unwrap();
    for c in s.kv_events.unwrap() {
        let (gpu, cpu) = held[&c.instance];
        assert_eq!(
            c.stored + c.reloaded - c.evicted,
            gpu,
            "GPU blocks of instance {}",
            c.instance
        );
        assert_eq!(
            c.offloaded - c.evicted_from_cpu,
            cpu,
            "CPU blocks of instance {}",
            c.instance
        );
    }
}

// docs/extending.md's example, as written there.
#[derive(Resource, Default)]
struct Evictions(std::collections::BTreeMap<u32, u64>);

fn count_evictions(mut events: MessageReader<KvEvent>, mut n: ResMut<Evictions>) {
    for e in events
        .read()
        .filter(|e| e.kind == KvEventKind::Evicted { tier: KvTier::Gpu })
    {
        *n.0.entry(e.instance).or_default() += 1;
    }
}

#[test]
fn the_docs_eviction_counter_counts_what_the_summary_counts() {
    let mut app = servesim::default_app();
    app.insert_resource(KvEvents(true))
        .init_resource::<Evictions>()
        .add_systems(
            SimStep,
            count_evictions
                .in_set(SimSystems::Observe)
                .after(servesim::instance::publish_kv_events),
        );
    // Round robin does not read caches and the scenario does not ask for events: the plugin's
    // KvEvents(true) alone turns them on.
    let text = PREFIX_HEAVY
        .replace(
            r#"routing: "weighted", routing_params: {"precise_prefix": 2.0, "queue_depth": 1.0}"#,
            r#"routing: "round_robin""#,
        )
        .replace("outputs: (kv_events: true)", "outputs: (kv_events: false)");
    let sc = parse_with(&app, &text);
    let mut sim = Simulation::from_app(app, &sc, RunOptions::default()).unwrap();
    while sim.tick() {}
    let mine = sim.world().resource::<Evictions>().0.clone();
    assert_eq!(mine.len(), 4, "every instance evicted something: {mine:?}");
    // The same run with the built-in counts on.
    let with_counts = servesim::default_app();
    let sc2 = parse_with(
        &with_counts,
        &text.replace("kv_events: false", "kv_events: true"),
    );
    let s = Simulation::from_app(with_counts, &sc2, RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    let theirs: BTreeMap<u32, u64> = s
        .kv_events
        .unwrap()
        .iter()
        .map(|c| (c.instance, c.evicted))
        .collect();
    assert_eq!(mine, theirs);
}

#[test]
fn turning_kv_events_on_changes_no_result() {
    let text = PREFIX_HEAVY.replace(
        r#"routing: "weighted", routing_params: {"precise_prefix": 2.0, "queue_depth": 1.0}"#,
        r#"routing: "least_loaded""#,
    );
    let app = servesim::default_app();
    let on = parse_with(&app, &text);
    let off = parse_with(&app, &text.replace("kv_events: true", "kv_events: false"));
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut summaries = Vec::new();
    for (sc, dir) in [&on, &off].into_iter().zip(&dirs) {
        summaries.push(
            Simulation::new(
                sc,
                RunOptions {
                    out_dir: Some(dir.path().to_path_buf()),
                    ..Default::default()
                },
            )
            .unwrap()
            .run()
            .unwrap(),
        );
    }
    assert_eq!(
        std::fs::read(dirs[0].path().join("requests.csv")).unwrap(),
        std::fs::read(dirs[1].path().join("requests.csv")).unwrap()
    );
    let (mut a, b) = (summaries.remove(0), summaries.remove(0));
    assert!(a.kv_events.take().is_some() && b.kv_events.is_none());
    assert_eq!(a, b, "everything but the counts is the same");
}

#[test]
fn pd_transfers_show_as_transferred_blocks_on_the_decode_side() {
    let text = r#"(seed: 2, cluster: (groups: [
        (count: 1, role: Prefill, model: "llama-3.1-8b-instruct", kv_blocks: 2000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0])),
        (count: 2, role: Decode, model: "llama-3.1-8b-instruct", kv_blocks: 2000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))]),
        policies: (decode_routing: "weighted"),
        workload: (num_requests: 200, clients: [(rate_per_s: 30.0, input_tokens: Uniform(min: 20, max: 700), output_tokens: Uniform(min: 2, max: 40), shared_prefix_tokens: 256, prefix_groups: 3)]),
        outputs: (kv_events: true))"#;
    let app = servesim::default_app();
    // With invariant checks on every tick, rows read back and conservation checked.
    let (s, rows) = crate::common::run(&parse_with(&app, text));
    let d = s.disaggregation.as_ref().unwrap();
    let counts = s.kv_events.unwrap();
    assert_eq!(
        counts[0].transferred_in, 0,
        "the prefill instance receives nothing"
    );
    assert_eq!(
        counts[1].transferred_in + counts[2].transferred_in,
        d.blocks_sent
    );
    assert!(
        d.blocks_cached_on_decode > 0,
        "decode-side prefix hits are not sent"
    );
    // Every request with more than one token went through a decode instance.
    assert!(
        rows.iter()
            .filter(|r| r.u64("output_tokens") > 1)
            .all(|r| r.u64("decode_instance") >= 1)
    );
}
