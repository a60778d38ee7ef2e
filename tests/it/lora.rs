//! Multi-LoRA (issue 33 item 2), worked out by hand on one Llama-3.1-8B / H100 instance whose
//! model steps cost 1,000 µs + 1 µs per prompt token + 100 µs per decode token (BLIS's
//! blackbox, no serving path). A rank-16 adapter is 83,886,080 bytes: read from storage at
//! 2 GB/s in 41,943.04 µs, copied over the 50 GB/s host link in 1,677.72 + 10 µs, 43,630 µs
//! together (whole µs down). The LoRA kernels of a step with one adapter: 8 kernels × 32
//! layers × 6 µs plus the adapter and the tokens' activations at 3.35 TB/s × 0.9: 1,619 µs
//! for 32 tokens, 1,565 µs for one.

use crate::common::{invalid, parse, read_rows, run, servesim, servesim_ok};

const LOAD_US: u64 = 43_630;
const PREFILL_US: u64 = 1_032 + 1_619;
const DECODE_US: u64 = 1_100 + 1_565;

fn group(lora: &str) -> String {
    format!(
        r#"(count: 1, model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 1000,
            latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 100.0]),
            lora: ({lora}))"#
    )
}

/// Clients each sending `count` requests of 32 prompt and 2 output tokens at t = 0 with
/// their adapter (`None`: the base model).
fn at_zero(lora: &str, adapters: &[Option<&str>]) -> String {
    let clients: Vec<String> = adapters
        .iter()
        .map(|a| {
            let adapter = a.map_or(String::new(), |a| format!("adapter: Named(\"{a}\"),"));
            format!(
                "(arrival: AllAtZero(count: 1), input_tokens: Constant(32), output_tokens: Constant(2), {adapter})"
            )
        })
        .collect();
    format!(
        r#"(seed: 5, cluster: (groups: [{}]),
           workload: (adapters: (names: ["a", "b"]), clients: [{}]))"#,
        group(lora),
        clients.join(", ")
    )
}

#[test]
fn an_adapter_load_holds_the_step_for_exactly_its_priced_time() {
    // The first request reads adapter a from storage and copies it to a slot before its
    // prefill; the second, later, finds it on the GPU.
    let sc = parse(&format!(
        r#"(seed: 5, cluster: (groups: [{}]),
           workload: (num_requests: 2, adapters: (names: ["a", "b"]),
             clients: [(rate_per_s: 1.0, arrival: Constant, input_tokens: Constant(32),
               output_tokens: Constant(2), adapter: Named("a"))]))"#,
        group("max_loras: 1")
    ));
    let (s, rows) = run(&sc);
    assert_eq!(rows[0].us("ttft_ms"), LOAD_US + PREFILL_US);
    assert_eq!(rows[0].us("e2e_ms"), LOAD_US + PREFILL_US + DECODE_US);
    assert_eq!(rows[1].us("ttft_ms"), PREFILL_US);
    assert_eq!(rows[0].str("adapter"), "a");
    let l = s.lora.as_ref().expect("a lora summary");
    assert_eq!((l.groups[0].loads, l.groups[0].activations), (1, 1));
    assert_eq!(l.groups[0].load_s, LOAD_US as f64 * 1e-6);
    assert_eq!(l.groups[0].steps_with_adapters, 4);
    assert_eq!(l.adapters[0].requests.name, "a");
    assert_eq!(
        (l.adapters[0].requests.completed, l.adapters[0].loads),
        (2, 1)
    );
    assert_eq!(
        (l.adapters[1].requests.injected, l.adapters[1].loads),
        (0, 0)
    );
    // The base model on the same instance: no load, no LoRA kernels.
    let (_, base) = run(&parse(&at_zero("max_loras: 1", &[None])));
    assert_eq!(base[0].us("ttft_ms"), 1_032);
    assert_eq!(base[0].str("adapter"), "");
}

#[test]
fn max_loras_holds_another_adapter_back_until_a_slot_frees() {
    // One slot: b waits while a's request runs (prefill, then its decode), then reads its
    // own adapter from storage (host memory holds one adapter too).
    let (_, rows) = run(&parse(&at_zero("max_loras: 1", &[Some("a"), Some("b")])));
    let a_done = LOAD_US + PREFILL_US + DECODE_US;
    assert_eq!(rows[0].us("e2e_ms"), a_done);
    assert_eq!(rows[1].us("scheduling_delay_ms"), a_done);
    assert_eq!(rows[1].us("ttft_ms"), a_done + LOAD_US + PREFILL_US);
    // A base-model request is never held back, and two slots take both at once: one step
    // with both loads and one kernel pass over both adapters' 64 tokens.
    let (_, rows) = run(&parse(&at_zero(
        "max_loras: 1",
        &[Some("a"), Some("b"), None],
    )));
    assert_eq!(rows[2].us("scheduling_delay_ms"), 0);
    let (s, rows) = run(&parse(&at_zero("max_loras: 2", &[Some("a"), Some("b")])));
    assert_eq!(rows[0].us("ttft_ms"), rows[1].us("ttft_ms"));
    assert_eq!(s.lora.unwrap().groups[0].loads, 2);
    assert!(rows[0].us("ttft_ms") > 2 * LOAD_US + 1_064);
}

#[test]
fn host_memory_saves_the_storage_read_when_an_adapter_comes_back() {
    // a, b, a, b one second apart (a trace's adapter column), one GPU slot: every request
    // copies its adapter to the GPU; with room for two in host memory only the first two
    // read from storage.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "arrival_us,input_tokens,output_tokens,adapter\n\
         0,32,2,a\n1000000,32,2,b\n2000000,32,2,a\n3000000,32,2,b\n",
    )
    .unwrap();
    for (cpu, loads, ttft3) in [(1, 4, LOAD_US + PREFILL_US), (2, 2, 1_687 + PREFILL_US)] {
        std::fs::write(
            dir.path().join("s.ron"),
            format!(
                r#"(seed: 5, cluster: (groups: [{}]),
                   workload: (adapters: (names: ["a", "b"]),
                     traces: [(format: ServesimCsv, file: "t.csv")]))"#,
                group(&format!("max_loras: 1, max_cpu_loras: {cpu}"))
            ),
        )
        .unwrap();
        servesim_ok(&["run", "s.ron", "--out", "o"], dir.path());
        let rows = read_rows(&dir.path().join("o/requests.csv"));
        assert_eq!(rows[2].us("ttft_ms"), ttft3, "max_cpu_loras {cpu}");
        assert_eq!(rows[3].str("adapter"), "b");
        let s: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("o/summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(s["lora"]["groups"][0]["loads"], loads);
        assert_eq!(s["lora"]["groups"][0]["activations"], 4);
        // requests.csv replays as a trace, adapters included.
        std::fs::copy(dir.path().join("o/requests.csv"), dir.path().join("t.csv")).unwrap();
        servesim_ok(&["run", "s.ron", "--out", "o2"], dir.path());
        let replayed = read_rows(&dir.path().join("o2/requests.csv"));
        assert_eq!(replayed[2].us("ttft_ms"), ttft3);
        std::fs::write(
            dir.path().join("t.csv"),
            "arrival_us,input_tokens,output_tokens,adapter\n\
             0,32,2,a\n1000000,32,2,b\n2000000,32,2,a\n3000000,32,2,b\n",
        )
        .unwrap();
    }
    // A trace naming an adapter the workload does not declare stops with its line.
    std::fs::write(
        dir.path().join("t.csv"),
        "arrival_us,input_tokens,output_tokens,adapter\n0,32,2,a\n1000,32,2,sq1\n",
    )
    .unwrap();
    let out = servesim(&["run", "s.ron", "--out", "o3"], dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("t.csv:3: adapter `sq1` is not in workload.adapters"),
        "{err}"
    );
}

#[test]
fn each_adapter_caches_its_own_prefixes() {
    // The same 64-token system prompt (prefix group g) under a, a, b and the base model:
    // only a's second request finds it cached (vLLM salts block hashes with the adapter).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "arrival_us,input_tokens,output_tokens,prefix_group,prefix_tokens,adapter\n\
         0,80,2,g,64,a\n1000000,80,2,g,64,a\n2000000,80,2,g,64,b\n3000000,80,2,g,64,\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("s.ron"),
        format!(
            r#"(seed: 5, cluster: (groups: [{}]),
               workload: (adapters: (names: ["a", "b"]),
                 traces: [(format: ServesimCsv, file: "t.csv")]))"#,
            group("max_loras: 2")
        ),
    )
    .unwrap();
    servesim_ok(&["run", "s.ron", "--out", "o"], dir.path());
    let rows = read_rows(&dir.path().join("o/requests.csv"));
    let cached: Vec<u64> = rows.iter().map(|r| r.u64("cached_tokens")).collect();
    assert_eq!(cached, [0, 64, 0, 0]);
}

#[test]
fn adapter_slots_come_out_of_the_kv_cache() {
    // Llama-3.1-8B on an H100 leaves 51.92054 GiB for 26,583 blocks of 2 MiB (vLLM's profile,
    // tests/it/latency.rs). Four rank-16 slots take 4 × 83,886,080 bytes = 0.3125 GiB:
    // ⌊51.60804 × 512⌋ = 26,423 blocks; eight, ⌊51.29554 × 512⌋ = 26,263.
    let dir = tempfile::tempdir().unwrap();
    for (slots, blocks) in [(4, 26_423), (8, 26_263)] {
        std::fs::write(
            dir.path().join("s.ron"),
            format!(
                r#"(cluster: (groups: [(model: "llama-3.1-8b-instruct", gpu: "H100",
                     lora: (max_loras: {slots}))]),
                   workload: (num_requests: 1, clients: [(rate_per_s: 1.0,
                     input_tokens: Constant(8), output_tokens: Constant(8))]))"#
            ),
        )
        .unwrap();
        let out = servesim(&["validate", "s.ron"], dir.path());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("{blocks} KV blocks")),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("a rank-16 adapter is 83.9 MB"), "{text}");
    }
}

#[test]
fn lora_affinity_routing_reads_fewer_adapters_than_round_robin() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/lora.ron");
    let src = std::fs::read_to_string(path).unwrap();
    let src = src.replace("num_requests: 4000", "num_requests: 1500");
    let (affine, rows) = run(&parse(&src));
    let rr = src.replace(
        r#"routing: "weighted",
        routing_params: {"lora_affinity": 2.0, "queue_depth": 1.0, "kv_utilization": 1.0},"#,
        r#"routing: "round_robin","#,
    );
    assert_ne!(rr, src);
    let (spread, _) = run(&parse(&rr));
    let loads = |s: &servesim::metrics::Summary| s.lora.as_ref().unwrap().groups[0].loads;
    assert!(
        2 * loads(&affine) < loads(&spread),
        "{} vs {}",
        loads(&affine),
        loads(&spread)
    );
    // Zipf(1) over 32 adapters: the first is asked for 1/H(32) = 24.6 % of the time.
    let first = rows.iter().filter(|r| r.str("adapter") == "lora0").count() as f64;
    let named = rows.iter().filter(|r| !r.str("adapter").is_empty()).count() as f64;
    assert!((first / named - 0.246).abs() < 0.03, "{}", first / named);
}

#[test]
fn bad_adapters_and_slots_are_refused_with_the_reason() {
    let client = r#"(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8), adapter: Named("a"))"#;
    let sc = |lora: &str, adapters: &str, client: &str| {
        format!(
            r#"(cluster: (groups: [(model: "llama-3.1-8b-instruct", gpu: "H100", {lora})]),
               workload: ({adapters} clients: [{client}]))"#
        )
    };
    let ok = r#"adapters: (names: ["a", "b"]),"#;
    for (src, expected) in [
        (
            sc("lora: (max_loras: 0)", ok, client),
            "cluster.groups[0].lora.max_loras: must be ≥ 1",
        ),
        (
            sc("lora: (max_loras: 4, max_cpu_loras: 2)", ok, client),
            "2 is fewer than max_loras (4)",
        ),
        (
            sc(
                "lora: ()",
                r#"adapters: (names: ["a"], ranks: {"a": 64}),"#,
                client,
            ),
            "cluster.groups[0].lora.max_lora_rank: 16 is below the rank-64 adapter",
        ),
        (
            sc("lora: ()", ok, &client.replace("\"a\"", "\"c\"")),
            "workload.clients[0].adapter: `c` is not in workload.adapters",
        ),
        // Of 100,000 declared adapters the hint names a few (it listed all: a megabyte).
        (
            sc(
                "lora: ()",
                "adapters: (count: 100000),",
                &client.replace("\"a\"", "\"zzz\""),
            ),
            "hint: declared: lora0, lora1, lora2, lora3, lora4, lora5, lora6, lora7, … (100,000 in all)\n",
        ),
        (
            sc("lora: ()", "", client),
            "names an adapter, but the workload declares none",
        ),
        (
            sc("", ok, client),
            "cluster.groups[0].lora: requests name LoRA adapters",
        ),
        (
            sc("lora: (), scheduler: \"sarathi\"", ok, client),
            "multi-LoRA runs on the vllm_v1 scheduler, not sarathi",
        ),
        // The host link carries adapter copies without a CPU KV tier: a zero bandwidth made
        // every copy endless (the run stopped at 10⁹ s).
        (
            sc("lora: (), host_link_gb_per_s: 0.0", ok, client),
            "cluster.groups[0].host_link_gb_per_s: must be a bandwidth within 0.001..=10⁶ GB/s, got 0",
        ),
        (
            sc("lora: (load_latency_us: 1e300)", ok, client),
            "cluster.groups[0].lora.load_latency_us: must be a number within 0..=10⁹ µs, got 1e300",
        ),
        (
            sc("lora: (), host_link_latency_us: -5.0", ok, client),
            "cluster.groups[0].host_link_latency_us: must be a number within 0..=10⁹ µs, got -5",
        ),
        (
            sc(
                "lora: ()",
                r#"adapters: (names: ["a", "a"], count: 3),"#,
                client,
            ),
            "workload.adapters.names[1]: `a` is named twice",
        ),
        (
            sc(
                "lora: ()",
                ok,
                r#"(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8), adapter: Weighted({"a": 0.0}))"#,
            ),
            "give at least one adapter a weight > 0",
        ),
        // Four billion adapters would be 100 GB of names before anything ran.
        (
            sc("lora: ()", "adapters: (count: 4294967295),", client),
            "workload.adapters.count: at most 100,000 adapters, got 4294967295",
        ),
        (
            sc("lora: (load_gb_per_s: 0.0)", ok, client),
            "cluster.groups[0].lora.load_gb_per_s: must be a bandwidth within 0.001..=10⁶ GB/s, got 0",
        ),
        // 1e-300 passed as positive and stopped the run at 10⁹ s, naming the link.
        (
            sc("lora: (load_gb_per_s: 1e-300)", ok, client),
            "cluster.groups[0].lora.load_gb_per_s: must be a bandwidth within 0.001..=10⁶ GB/s, got 1e-300",
        ),
    ] {
        let err = invalid(&src);
        assert!(err.contains(expected), "expected {expected:?} in:\n{err}");
    }
    // LoRA needs the model's shape.
    let err = invalid(
        r#"(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 1.0, 1.0]), lora: ())]),
           workload: (clients: [(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))]))"#,
    );
    assert!(err.contains("multi-LoRA needs `model` and `gpu`"), "{err}");
    // A lora block with no adapters to serve runs, and is said to serve none.
    let plain = r#"(rate_per_s: 1.0, input_tokens: Constant(8), output_tokens: Constant(8))"#;
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    let warned = |src: &str| servesim::loader::estimate::slow_inputs(&parse(src), catalog);
    let unused = "cluster.groups[0].lora: the workload declares no adapters (workload.adapters), so no request uses LoRA: the block only takes its adapter slots' memory from the KV cache";
    assert!(
        warned(&sc("lora: ()", "num_requests: 1,", plain))
            .iter()
            .any(|w| w == unused)
    );
    let served = format!("num_requests: 1, {ok}");
    assert!(
        !warned(&sc("lora: ()", &served, client))
            .iter()
            .any(|w| w.contains("lora"))
    );
}

#[test]
fn the_docs_table_matches_the_bundled_scenario() {
    // docs/lora.md's first measured row is scenarios/lora.ron as bundled.
    let cells = crate::common::doc_row(
        "lora",
        "| `lora_affinity` 2, queue depth 1, KV 1 (as bundled)",
    );
    let (s, _) = crate::common::run_bundled("lora");
    let n = crate::common::thousands;
    let l = s.lora.as_ref().unwrap();
    let g = &l.groups[0];
    assert_eq!(cells[2], crate::common::mean_p99(&s.ttft_ms));
    assert_eq!(
        cells[3],
        format!(
            "{} / {}",
            n(s.tenants[0].ttft_ms.mean.unwrap()),
            n(s.tenants[1].ttft_ms.mean.unwrap())
        )
    );
    assert_eq!(cells[4], n(s.e2e_ms.mean.unwrap()));
    assert_eq!(cells[5], format!("{:.2}", s.itl_ms.mean.unwrap()));
    assert_eq!(cells[6], g.loads.to_string());
    assert_eq!(cells[7], g.activations.to_string());
}
