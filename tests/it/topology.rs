//! The network between nodes (`cluster.topology`): where a transfer goes (NVLink in a node,
//! NICs between nodes, rack uplinks between racks), how transfers share a link, the shared
//! store behind its own bandwidth, a TP group across nodes, and bad topologies. Worked out by
//! hand on Llama-3.1-8B KV (131,072 B a token: a 16-token block is 2,097,152 B) with blackbox
//! steps of 1,000 µs + 1 µs per prompt token + 10 (P/D) or 100 µs per decode token.

use crate::common::{assert_conserved, invalid, parse, read_rows, run, servesim, servesim_ok};

/// 160 prompt tokens of KV (10 blocks), bytes.
const PROMPT_BYTES: u64 = 160 * 131_072;

/// `prefill` prefill and `decode` decode instances of one GPU each, no GPU profile (so the
/// topology gives every figure), `count` requests of 160 prompt and 2 output tokens at 0.
fn pd(prefill: u32, decode: u32, topology: &str, count: u32) -> String {
    let group = |role: &str, n: u32| {
        format!(
            r#"(name: "{}", count: {n}, role: {role}, model: "llama-3.1-8b-instruct", kv_blocks: 1000,
               latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))"#,
            role.to_lowercase()
        )
    };
    format!(
        r#"(seed: 3, cluster: (groups: [{}, {}], topology: ({topology})),
           workload: (clients: [(arrival: AllAtZero(count: {count}), input_tokens: Constant(160),
             output_tokens: Constant(2))]))"#,
        group("Prefill", prefill),
        group("Decode", decode)
    )
}

fn transfers(text: &str) -> Vec<u64> {
    let (s, rows) = run(&parse(text));
    assert_conserved(&s, &rows);
    rows.iter().map(|r| r.us("kv_transfer_ms")).collect()
}

#[test]
fn a_transfer_crosses_nvlink_inside_a_node_and_the_nics_between_nodes() {
    let links =
        "nvlink_gb_per_s: 10.0, nic_gb_per_s: 1.0, nvlink_latency_us: 5.0, nic_latency_us: 7.0";
    // Two GPUs a node: both instances on node 0, 20,971,520 B over 10,000 B/µs = 2,097.2 →
    // 2,098 µs after the transfer's 50 µs and NVLink's 5 µs.
    assert_eq!(
        transfers(&pd(1, 1, &format!("gpus_per_node: 2, {links}"), 1)),
        [50 + 5 + PROMPT_BYTES.div_ceil(10_000)]
    );
    assert_eq!(PROMPT_BYTES.div_ceil(10_000), 2_098);
    // One GPU a node: over the NICs at 1,000 B/µs, 20,972 µs after 50 + 7.
    assert_eq!(
        transfers(&pd(1, 1, &format!("gpus_per_node: 1, {links}"), 1)),
        [50 + 7 + 20_972]
    );
}

#[test]
fn two_transfers_on_one_rack_uplink_take_twice_as_long_as_one() {
    // Prefill instances 0, 1 in rack 0, decode instances 2, 3 in rack 1, one GPU a node, two
    // nodes a rack; NICs of 10 GB/s, uplinks of 1 GB/s. Two requests prefill side by side
    // (first tokens at 1,160 µs) and go to different decode instances: their paths share
    // only the two uplinks. Alone, a transfer takes 20,972 µs on the uplink; the second
    // gets the uplink when the first is through: 41,944 µs.
    let racks = "gpus_per_node: 1, nvlink_gb_per_s: 10.0, nic_gb_per_s: 10.0, nodes_per_rack: 2, placement: RackPerGroup";
    let oversubscribed = format!("{racks}, rack_uplink_gb_per_s: 1.0");
    assert_eq!(transfers(&pd(2, 2, &oversubscribed, 1)), [50 + 20_972]);
    let text = pd(2, 2, &oversubscribed, 2);
    let (s, rows) = run(&parse(&text));
    let got: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.u64("prefill_instance"),
                r.u64("decode_instance"),
                r.us("kv_transfer_ms"),
            )
        })
        .collect();
    assert_eq!(got, [(0, 2, 50 + 20_972), (1, 3, 50 + 2 * 20_972)]);
    let d = s.disaggregation.as_ref().unwrap();
    assert_eq!(d.contention_ms.as_ref().unwrap().max, Some(20.972));
    let n = s.network.as_ref().expect("a network summary");
    assert_eq!((n.nodes, n.racks), (4, 2));
    let rack = n.levels.iter().find(|l| l.level == "rack").unwrap();
    // Two uplinks and two downlinks; each transfer crossed one of each.
    assert_eq!((rack.links, rack.transfers), (4, 4));
    assert!((rack.gb - 4.0 * PROMPT_BYTES as f64 / 1e9).abs() < 1e-12);
    // Non-blocking uplinks (the default: 2 × 10 GB/s) carry both at their NICs' rate.
    assert_eq!(transfers(&pd(2, 2, racks, 2)), [50 + 2_098, 50 + 2_098]);
    // Two transfers into one decode instance share its NIC in the same way.
    let one_decode = "gpus_per_node: 1, nvlink_gb_per_s: 10.0, nic_gb_per_s: 1.0";
    assert_eq!(
        transfers(&pd(2, 1, one_decode, 2)),
        [50 + 20_972, 50 + 2 * 20_972]
    );
}

#[test]
fn loads_from_the_store_share_its_bandwidth() {
    // Three H100 instances (one a node, NICs at 20.97152 GB/s: 100 µs a block) and a store
    // that moves 2.097152 GB/s (1,000 µs a block) each way, 500 µs latency, write-through.
    // Request 0 (instance 0) writes its 5 blocks, readable by 6,580 µs. At 1 s requests 1 and
    // 2 (instances 1, 2) both load the 4 prefix blocks: the first in 500 + 4,000 µs, the
    // second after it, in 500 + 8,000 µs; each then prefills 16 tokens in 1,016 µs. Without
    // the store's own limit both load at their NICs' rate: 500 + 400 µs.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "arrival_us,input_tokens,output_tokens,prefix_group,prefix_tokens\n\
         0,80,1,a,64\n1000000,80,1,a,64\n1000000,80,1,a,64\n",
    )
    .unwrap();
    let scenario = |store: &str| {
        format!(
            r#"(seed: 5, cluster: (groups: [(count: 3, kv_blocks: 1000, model: "llama-3.1-8b-instruct",
                 gpu: "H100", latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]))],
                 kv_store: (blocks: 100, latency_us: 500.0, write: WriteThrough),
                 topology: (gpus_per_node: 1, nic_gb_per_s: 20.97152{store})),
               policies: (routing: "round_robin"),
               workload: (traces: [(format: ServesimCsv, file: "t.csv")]))"#
        )
    };
    for (store, ttft) in [
        (
            ", store_gb_per_s: 2.097152",
            [500 + 4_000 + 1_016, 500 + 8_000 + 1_016],
        ),
        ("", [500 + 400 + 1_016, 500 + 400 + 1_016]),
    ] {
        std::fs::write(dir.path().join("s.ron"), scenario(store)).unwrap();
        servesim_ok(&["run", "s.ron", "--out", "o"], dir.path());
        let rows = read_rows(&dir.path().join("o/requests.csv"));
        let got: Vec<u64> = rows[1..].iter().map(|r| r.us("ttft_ms")).collect();
        assert_eq!(got, ttft, "{store}");
        assert_eq!(rows[2].u64("cached_tokens"), 64);
    }
}

#[test]
fn a_tp_group_wider_than_a_node_all_reduces_over_the_nics_too() {
    let text = |topology: &str| {
        format!(
            r#"(cluster: (groups: [(count: 1, tp: 8, model: "llama-3.1-70b-instruct", gpu: "H100")]{topology}),
               workload: (clients: [(arrival: AllAtZero(count: 1), input_tokens: Constant(512),
                 output_tokens: Constant(16))]))"#
        )
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.ron"),
        text(", topology: (gpus_per_node: 4)"),
    )
    .unwrap();
    let out = servesim(&["validate", "s.ron"], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    // TP8 over nodes of 4 GPUs: NVLink bus 360 GB/s (the H100's), NIC bus 0.8 × 50 = 40;
    // per byte 2·3/4/360 + 2·1/2/(4·40) = 0.0104167 s/GB, so the bus bandwidth the
    // roofline's 2(tp−1)/tp formula takes is (14/8) / 0.0104167 = 168.0 GB/s.
    assert!(
        stdout.contains("tp 8 spans 2 nodes")
            && stdout.contains("(40.0 GB/s bus): 168.0 GB/s in all"),
        "{stdout}"
    );
    assert!(stdout.contains("instances on nodes [0–1]"), "{stdout}");
    let (near, _) = run(&parse(&text("")));
    let (across, _) = run(&parse(&text(", topology: (gpus_per_node: 4)")));
    assert!(
        across.itl_ms.mean.unwrap() > near.itl_ms.mean.unwrap(),
        "slower all-reduces: {:?} vs {:?}",
        across.itl_ms.mean,
        near.itl_ms.mean
    );
    assert_eq!(across.network.as_ref().unwrap().instances[0].nodes, 2);
}

#[test]
fn a_cluster_under_stress_keeps_every_request_on_a_topology() {
    // Crash with retries, autoscaling (weights loaded over the fabric), P/D pools and the
    // shared store, all over an oversubscribed two-rack fabric (invariants on in every run).
    let group = |extra: &str| {
        format!(
            r#"(model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 400, cpu_kv_blocks: 100, {extra})"#
        )
    };
    let workload = r#"workload: (num_requests: 600, clients: [(rate_per_s: 20.0,
        input_tokens: Constant(64), output_tokens: Constant(32), shared_prefix_tokens: 256,
        prefix_groups: 4, timeout_s: 60.0)])"#;
    let net = "kv_store: (blocks: 5000, latency_us: 50.0, write: WriteThrough),
        topology: (gpus_per_node: 2, nodes_per_rack: 1, rack_uplink_gb_per_s: 5.0, store_gb_per_s: 20.0)";
    let crash = format!(
        r#"(seed: 9, cluster: (groups: [{}], {net}),
           policies: (routing: "round_robin", autoscale: "target_tracking",
             autoscale_params: {{"target_in_flight": 2.0, "interval_s": 2.0}}),
           faults: (crashes: [(instance: 0, at_s: 10.0)], repair_s: 2.0, reload_s: 1.0,
             on_crash: Retry()),
           {workload})"#,
        group("count: 2, scaling: (min: 1, max: 4, provision_s: 1.0, load_gb_per_s: 20.0)")
    );
    let (s, rows) = run(&parse(&crash));
    assert_conserved(&s, &rows);
    assert!(s.kv.store.as_ref().unwrap().cross_instance_loaded_blocks > 0);
    let n = s.network.as_ref().unwrap();
    assert_eq!((n.nodes, n.racks), (2, 2));
    assert!(
        n.levels
            .iter()
            .any(|l| l.level == "store" && l.transfers > 0)
    );
    let pd = format!(
        r#"(seed: 9, cluster: (groups: [{}, {}], {net}), {workload})"#,
        group("role: Prefill, count: 2"),
        group("role: Decode, count: 2")
    );
    let (s, rows) = run(&parse(&pd));
    assert_conserved(&s, &rows);
    assert_eq!(s.disaggregation.as_ref().unwrap().transfers, 600);
}

#[test]
fn bad_topologies_are_refused_with_the_reason() {
    let scenario = |group: &str, cluster: &str| {
        format!(
            r#"(cluster: (groups: [({group})]{cluster}),
               workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))]))"#
        )
    };
    let h100 = r#"model: "llama-3.1-8b-instruct", gpu: "H100""#;
    for (group, cluster, path, says) in [
        (
            h100,
            ", topology: (gpus_per_node: 0)",
            "cluster.topology.gpus_per_node",
            "must be within 1..=4,096",
        ),
        (
            h100,
            ", topology: (nic_gb_per_s: -1.0)",
            "cluster.topology.nic_gb_per_s",
            "must be a bandwidth within 0.001..=10⁶ GB/s, got -1",
        ),
        (
            h100,
            ", topology: (nic_latency_us: -1.0)",
            "cluster.topology.nic_latency_us",
            "must be a number within 0..=10⁹ µs",
        ),
        (
            h100,
            ", topology: (rack_uplink_gb_per_s: 100.0)",
            "cluster.topology.rack_uplink_gb_per_s",
            "no rack to apply to",
        ),
        (
            h100,
            ", topology: (placement: RackPerGroup)",
            "cluster.topology.placement",
            "needs racks",
        ),
        (
            h100,
            ", topology: (store_gb_per_s: 10.0)",
            "cluster.topology.store_gb_per_s",
            "no `cluster.kv_store`",
        ),
        (
            r#"model: "llama-3.1-8b-instruct", gpu: "H100", kv_link_gb_per_s: 25.0"#,
            ", topology: ()",
            "cluster.groups[0].kv_link_gb_per_s",
            "is not used with `cluster.topology`",
        ),
        (
            h100,
            ", kv_store: (blocks: 10, latency_us: 5.0, link_gb_per_s: 10.0), topology: ()",
            "cluster.kv_store.link_gb_per_s",
            "is not used with `cluster.topology`",
        ),
        (
            r#"model: "llama-3.1-8b-instruct", gpu: "L40S""#,
            ", topology: ()",
            "cluster.topology.gpus_per_node",
            "group 0's GPU (L40S) has no default",
        ),
        (
            r#"model: "llama-3.1-8b-instruct", gpu: "GB200""#,
            ", topology: ()",
            "cluster.topology.nic_gb_per_s",
            "group 0's GPU (GB200) has no default",
        ),
        (
            h100,
            ", topology: (placement: Scattered)",
            "cluster.topology.placement",
            "Scattered",
        ),
    ] {
        let e = invalid(&scenario(group, cluster));
        assert!(e.contains(path) && e.contains(says), "{cluster}: {e}");
    }
}

#[test]
fn two_restarts_behind_one_rack_downlink_load_their_weights_one_after_the_other() {
    // Two single-GPU instances on two nodes of one rack crash at 10 s, are repaired in 1 s,
    // and load Llama-3.1-8B's weights (derived reload: read at 2 GB/s a GPU) over a 2 GB/s
    // downlink: the first takes the time it takes alone (as without a topology), the second
    // gets the downlink when the first is through: twice that (each within the µs its last
    // byte arrives in).
    let text = |topology: &str| {
        format!(
            r#"(seed: 2, cluster: (groups: [(count: 2, model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 500)]{topology}),
               faults: (crashes: [(instance: 0, at_s: 10.0), (instance: 1, at_s: 10.0)], repair_s: 1.0),
               workload: (num_requests: 200, clients: [(rate_per_s: 4.0, input_tokens: Constant(64),
                 output_tokens: Constant(8))]))"#
        )
    };
    let back = |text: &str| -> Vec<f64> {
        let (s, rows) = run(&parse(text));
        assert_conserved(&s, &rows);
        let c = s.faults.unwrap().crashes.unwrap();
        c.events.iter().map(|e| e.back_s.unwrap() - 11.0).collect()
    };
    let alone = back(&text(""));
    assert_eq!(alone.len(), 2);
    assert!(
        (alone[0] - alone[1]).abs() < 1e-9 && alone[0] > 7.0,
        "{alone:?}"
    );
    let shared = back(&text(
        ", topology: (gpus_per_node: 1, nodes_per_rack: 2, rack_uplink_gb_per_s: 2.0)",
    ));
    assert!(
        (shared[0] - alone[0]).abs() < 3e-6,
        "{shared:?} vs {alone:?}"
    );
    assert!(
        (shared[1] - 2.0 * alone[0]).abs() < 3e-6,
        "{shared:?} vs {alone:?}"
    );
}

#[test]
fn the_docs_uplink_table_matches_the_bundled_scenario() {
    let doc = crate::common::doc("topology");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    for gb in ["100", "25"] {
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {gb} GB/s")))
            .unwrap_or_else(|| panic!("docs/topology.md has no row for {gb} GB/s"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let sc = servesim::loader::load(
            &root.join("scenarios/topology.ron"),
            &[(
                "cluster.topology.rack_uplink_gb_per_s".into(),
                format!("{gb}.0"),
            )],
            catalog,
        )
        .unwrap();
        let s = crate::common::run_app_checked(servesim::default_app(), &sc);
        let d = s.disaggregation.as_ref().unwrap();
        let c = d.contention_ms.as_ref().unwrap();
        let thousands = |x: f64| {
            let s = format!("{x:.1}");
            let (int, frac) = s.split_once('.').unwrap();
            let n: u64 = int.parse().unwrap();
            if n >= 1000 {
                format!("{},{:03}.{frac}", n / 1000, n % 1000)
            } else {
                s
            }
        };
        let rack = s
            .network
            .as_ref()
            .unwrap()
            .levels
            .iter()
            .find(|l| l.level == "rack")
            .unwrap()
            .utilisation_max;
        let transfer = format!(
            "{:.1} / {:.1}",
            d.transfer_ms.mean.unwrap(),
            d.transfer_ms.p99.unwrap()
        );
        let want = [cells[3], cells[4], cells[5], cells[6]];
        // The contention column keeps two decimals below 1 ms and one above.
        let contention = |x: f64| {
            if x < 1.0 {
                format!("{x:.2}")
            } else {
                format!("{x:.1}")
            }
        };
        let got = [
            transfer,
            format!(
                "{} / {}",
                contention(c.mean.unwrap()),
                contention(c.p99.unwrap())
            ),
            thousands(s.e2e_ms.mean.unwrap()),
            format!("{:.1} %", 100.0 * rack),
        ];
        assert_eq!(got.each_ref().map(String::as_str), want, "{gb} GB/s");
    }
}
