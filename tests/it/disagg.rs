//! Prefill/decode disaggregation: hand-computed timelines, link contention, back-pressure,
//! pools and determinism. Every run checks INV-1 (requests, including those in transfer) and
//! INV-4 (every KV reference held by a request, on both pools) on every tick.

use crate::common::{parse, run, run_keeping};

/// Llama-3.1-8B KV per token: 32 layers × 2 (K, V) × 8 KV heads × 128 dims × 2 bytes.
const KV_BYTES_PER_TOKEN: u64 = 32 * 2 * 8 * 128 * 2;

/// `prefill` prefill and `decode` decode instances with a blackbox latency (α = 0,
/// β = [1000, 1, 10]: a step is 1000 µs + 1 µs per prefill token + 10 µs per decode token).
fn pd(prefill: u32, decode: u32, cluster: &str, workload: &str) -> String {
    let group = |role: &str, count: u32| {
        format!(
            "(name: \"{}\", count: {count}, role: {role}, model: \"llama-3.1-8b-instruct\", kv_blocks: 1000,
              latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))",
            role.to_lowercase()
        )
    };
    format!(
        "(seed: 3, cluster: (groups: [{}, {}] {cluster}), workload: {workload})",
        group("Prefill", prefill),
        group("Decode", decode)
    )
}

fn all_at_zero(count: u32, input: u32, output: u32) -> String {
    format!(
        "(clients: [(arrival: AllAtZero(count: {count}), input_tokens: Constant({input}), output_tokens: Constant({output}))])"
    )
}

/// The scenario with the decode group's (the last group's) KV cache set to `blocks`.
fn with_decode_blocks(text: &str, blocks: u32) -> String {
    let at = text.rfind("kv_blocks: 1000").unwrap();
    let mut text = text.to_string();
    text.replace_range(
        at..at + "kv_blocks: 1000".len(),
        &format!("kv_blocks: {blocks}"),
    );
    text
}

/// µs to send `tokens` of KV over one 50 GB/s link (50,000 bytes/µs), rounded up.
fn wire_us(tokens: u64, bytes_per_us: u64) -> u64 {
    (tokens * KV_BYTES_PER_TOKEN).div_ceil(bytes_per_us)
}

/// The prefill instance sends the first token (DistServe's reading; vLLM's proxy, the
/// default, has the decode instance send it): the timelines worked out below assume it.
const PREFILL_FIRST: &str = ", pd_first_token: Prefill";

/// A group of one `role` instance with `blocks` KV blocks, steps of 1,000 µs + 1 µs a prefill
/// token + 10 µs a decode token, and the serving path of the timelines below (API server
/// 500 µs + 1 µs a prompt token in, 50 + 10 µs a chunk out, no scheduler time, no tokenizer
/// batch), with or without async scheduling; `extra` adds fields.
fn served_group(role: &str, blocks: u32, asynchronous: bool, extra: &str) -> String {
    format!(
        "(name: \"{role}\", role: {role}, model: \"llama-3.1-8b-instruct\", kv_blocks: {blocks}, {extra}
          engine: (async_scheduling: {asynchronous}, schedule_us: 0.0, schedule_us_per_request: 0.0,
            api_request_us: 500.0, api_us_per_prompt_token: 1.0, api_step_us: 50.0,
            api_us_per_output_token: 10.0, tokenizer_window_us: 0.0),
          latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))"
    )
}

/// One prefill (`prefill_blocks` KV blocks) and one decode instance (1,000), each a
/// [`served_group`], replaying `rows` (`arrival_us,input_tokens,output_tokens`) from a trace.
fn pd_traced(
    rows: &str,
    asynchronous: bool,
    prefill_blocks: u32,
) -> (servesim::scenario::Scenario, tempfile::TempDir) {
    let (trace, dir) = crate::common::trace_file(rows);
    let sc = parse(&format!(
        "(seed: 3, cluster: (groups: [{}, {}]), workload: (traces: [(format: ServesimCsv, file: {:?})]))",
        served_group("Prefill", prefill_blocks, asynchronous, ""),
        served_group("Decode", 1000, asynchronous, ""),
        trace.display().to_string()
    ));
    (sc, dir)
}

#[test]
fn a_lone_request_prefills_transfers_and_decodes_to_the_microsecond() {
    let sc = parse(&pd(1, 1, PREFILL_FIRST, &all_at_zero(1, 160, 3)));
    let (s, rows) = run(&sc);
    let r = &rows[0];
    // Prefill step at 0: 1000 + 160 = 1160 µs; the first token is at 1160 (TTFT).
    assert_eq!(r.us("ttft_ms"), 1160);
    assert_eq!(r.u64("prefill_instance"), 0);
    assert_eq!(r.u64("decode_instance"), 1);
    assert_eq!(r.u64("instance"), 1, "it finished on the decode instance");
    // 160 tokens = 10 blocks of 16: 20,971,520 bytes over 50,000 bytes/µs = 419.4 → 420 µs,
    // after the 50 µs link latency: KV lands at 1160 + 50 + 420 = 1630.
    let transfer = 50 + wire_us(160, 50_000);
    assert_eq!(transfer, 470);
    assert_eq!(r.us("kv_transfer_ms"), transfer);
    // Two decode steps of 1000 + 10 µs: tokens at 2640 and 3650.
    assert_eq!(r.u64("completion_us"), 1160 + 470 + 2 * 1010);
    assert_eq!(r.us("e2e_ms"), 3650);
    // ITL samples: 2640 − 1160 = 1480 (the transfer shows here), then 1010.
    assert_eq!(r.us("mean_itl_ms"), (1480 + 1010) / 2);
    let d = s
        .disaggregation
        .as_ref()
        .expect("a P/D run reports its transfers");
    assert_eq!(d.transfers, 1);
    assert_eq!(d.blocks_sent, 10);
    assert_eq!(d.transfer_gb, (160 * KV_BYTES_PER_TOKEN) as f64 / 1e9);
    assert_eq!(d.transfer_ms.max, Some(0.47));
    assert_eq!(d.waited_for_kv, 0);
    let pools: Vec<(&str, u32, u64, u64)> = d
        .pools
        .iter()
        .map(|p| (p.role.as_str(), p.instances, p.completed, p.handed_off))
        .collect();
    assert_eq!(pools, [("prefill", 1, 0, 1), ("decode", 1, 1, 0)]);
    assert_eq!(s.instances[0].prefill_tokens, 160);
    assert_eq!(s.instances[0].decode_tokens, 0);
    assert_eq!(s.instances[1].decode_tokens, 2);
}

/// vLLM's P/D proxy (`pd_first_token: Decode`): the prefill instance's token answers the
/// proxy, the decode instance's API server takes the request in, pulls the KV and samples
/// the first token after recomputing the prompt's last. Against the DistServe reading on the
/// same cluster, with an API server (500 µs + 1 µs per prompt token in, 50 µs per step +
/// 10 µs per token out) and no scheduling overlap.
#[test]
fn the_decode_instance_sends_the_first_token_behind_vllm_s_proxy_to_the_microsecond() {
    let engine = "engine: (async_scheduling: false, schedule_us: 0.0, schedule_us_per_request: 0.0, \
        api_request_us: 500.0, api_us_per_prompt_token: 1.0, api_step_us: 50.0, \
        api_us_per_output_token: 10.0, tokenizer_window_us: 0.0), latency: Blackbox";
    let scenario = |cluster: &str| {
        parse(&pd(1, 1, cluster, &all_at_zero(1, 160, 3)).replace("latency: Blackbox", engine))
    };
    let transfer = 50 + wire_us(160, 50_000); // 470 µs, as above
    // The prompt reaches the prefill engine at 500 + 160 = 660 µs; its step ends at
    // 660 + 1000 + 160 = 1820, and its token leaves the API server 50 + 10 µs later.
    let (s, rows) = run(&scenario(PREFILL_FIRST));
    let r = &rows[0];
    assert_eq!(r.us("ttft_ms"), 1880);
    assert_eq!(r.us("kv_transfer_ms"), transfer);
    // KV at 1820 + 470 = 2290; two decode steps of 1010 µs; the last token out 60 µs later.
    assert_eq!(r.u64("completion_us"), 2290 + 2 * 1010);
    assert_eq!(r.us("e2e_ms"), 4310 + 60);
    assert!(
        s.disaggregation
            .as_ref()
            .is_some_and(|d| !d.first_token_on_decode)
    );

    // The default, as explicit.
    let (s, rows) = run(&scenario(""));
    assert_eq!(rows, run(&scenario(", pd_first_token: Decode")).1);
    let r = &rows[0];
    // The answer reaches the proxy at 1880; the decode instance's API server takes the
    // request in (660 µs, as the prefill's did) by 2540; then the transfer: KV at 3010.
    assert_eq!(r.us("kv_transfer_ms"), 3010 - 1820);
    // A step recomputes the prompt's last token (1000 + 1 µs, a prefill token) and samples
    // the first: 4011, out at 4071.
    assert_eq!(r.us("ttft_ms"), 4071);
    assert_eq!(
        (r.u64("prefill_instance"), r.u64("decode_instance")),
        (0, 1)
    );
    // All three tokens come from the decode instance: two more steps of 1010 µs.
    assert_eq!(r.u64("completion_us"), 4011 + 2 * 1010);
    assert_eq!(r.us("e2e_ms"), 6031 + 60);
    assert_eq!(
        r.us("mean_itl_ms"),
        1010,
        "the transfer is in the TTFT, not the ITL"
    );
    assert_eq!(r.u64("generated_tokens"), 3);
    // TTFT taken apart: 660 to the prefill instance, no wait, 1820 − 660 + the hand-off and
    // the decode step = 3351 of "prefill", 60 out.
    let p = &s.ttft_parts_ms;
    assert_eq!(
        (p.to_the_instance, p.waiting, p.prefill, p.token_out),
        (Some(0.66), Some(0.0), Some(3.351), Some(0.06))
    );
    let d = s.disaggregation.as_ref().expect("a P/D run");
    assert!(d.first_token_on_decode);
    assert_eq!(d.transfer_ms.max, Some(1.19));
    assert_eq!(s.instances[0].prefill_tokens, 160);
    assert_eq!(
        (s.instances[1].prefill_tokens, s.instances[1].decode_tokens),
        (1, 2)
    );
    // A one-token answer is the decode instance's too (it ends on the prefill instance
    // otherwise).
    let one = parse(&pd(1, 1, "", &all_at_zero(1, 160, 1)).replace("latency: Blackbox", engine));
    let (_, rows) = run(&one);
    assert_eq!((rows[0].u64("instance"), rows[0].us("ttft_ms")), (1, 4071));
}

/// The decode instance's API server tokenizes the handed-off request again, in its own
/// micro-batch (vLLM 0.10-0.23's `AsyncMicrobatchTokenizer`): a request handed over alone
/// waits its whole window there.
#[test]
fn a_handed_off_request_waits_for_the_decode_instance_s_tokenizer_batch() {
    let engine = |window_us: u32| {
        format!(
            "engine: (async_scheduling: false, schedule_us: 0.0, schedule_us_per_request: 0.0, \
             api_request_us: 500.0, api_us_per_prompt_token: 1.0, api_step_us: 50.0, \
             api_us_per_output_token: 10.0, tokenizer_window_us: {window_us}.0), latency: Blackbox"
        )
    };
    // A window of 2 ms on the decode group only.
    let mut text = pd(1, 1, "", &all_at_zero(1, 160, 3));
    let at = text.rfind("latency: Blackbox").unwrap();
    text.replace_range(at..at + "latency: Blackbox".len(), &engine(2000));
    let text = text.replacen("latency: Blackbox", &engine(0), 1);
    let (_, rows) = run(&parse(&text));
    // As without a window (the test above), the answer reaches the proxy at 1880; the decode
    // instance's tokenizer batch closes 2000 µs later, its API server takes the request in by
    // 3880 + 660 = 4540, and the idle instance pulls it at once: KV at 4590 + 420 = 5010.
    // Its step recomputes the prompt's last token: 5010-6011, out at 6071.
    assert_eq!(rows[0].us("kv_transfer_ms"), 5010 - 1820);
    assert_eq!(rows[0].us("ttft_ms"), 6071);
}

#[test]
fn validate_says_which_instance_sends_the_first_token() {
    let dir = tempfile::tempdir().unwrap();
    let workload = all_at_zero(1, 160, 3);
    for (cluster, want) in [
        (
            "",
            "  P/D: the decode instances send every token, the first after the hand-off",
        ),
        (
            PREFILL_FIRST,
            "  P/D: the prefill instances send the first token, the decode instances the rest",
        ),
    ] {
        std::fs::write(dir.path().join("pd.ron"), pd(1, 1, cluster, &workload)).unwrap();
        let out = crate::common::servesim_ok(&["validate", "pd.ron"], dir.path());
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(out.contains(want), "{out}");
    }
}

/// vLLM's decode instance learns of a landing from the output of the first step launched
/// after it (its workers poll the connector as they launch a step): a request whose KV lands
/// during a step joins the second step after it, or with async scheduling (which launches one
/// step ahead) the fourth.
#[test]
fn a_landing_during_a_step_joins_the_second_step_after_it_or_the_fourth_with_async_scheduling() {
    let scenario = |asynchronous: bool| {
        let engine = format!(
            "engine: (async_scheduling: {asynchronous}, schedule_us: 0.0, schedule_us_per_request: 0.0, \
             api_request_us: 500.0, api_us_per_prompt_token: 1.0, api_step_us: 50.0, \
             api_us_per_output_token: 10.0, tokenizer_window_us: 0.0), latency: Blackbox"
        );
        parse(&pd(1, 1, "", &all_at_zero(2, 160, 3)).replace("latency: Blackbox", &engine))
    };
    // Both prompts reach the prefill instance at 660 µs and run in one step of
    // 1000 + 320 µs, to 1980. Their answers leave at 2040 and 2050 (50 + 10 µs a chunk, in
    // batch order); the decode instance's API server takes them in by 2700 and 2710. The
    // decode instance is idle: it pulls each at once, over shared links: 2750 to 3170 and
    // 3170 to 3590.
    // Request 0 lands on the idle instance: a step of 1000 + 1 µs (its prompt's last token)
    // from 3170 to 4171, first token out at 4231. Request 1 lands at 3590, during it.
    let ttft = |asynchronous| -> Vec<u64> {
        let (_, rows) = run(&scenario(asynchronous));
        rows.iter().map(|r| r.us("ttft_ms")).collect()
    };
    // Without async scheduling the launch at 4171 sees the landing; request 0 decodes alone
    // in that step (1010 µs, to 5181), and request 1 joins the step from 5181: 1000 + 1 + 10
    // µs, to 6192, its token the second out of that step (50 + 20 µs).
    assert_eq!(ttft(false), [4231, 6262]);
    // With it, the launch at 4171 is of the step after the one starting then, whose output
    // comes at its end: request 0 decodes alone from 4171 to 5181 and from 5181 to 6191 (its
    // third token), an empty step of 1 µs follows, and request 1 runs from 6192 to 7193,
    // alone (50 + 10 µs). (vLLM's engine, with nothing to run, polls at once: 1 µs sooner.)
    assert_eq!(ttft(true), [4231, 7253]);
}

/// vLLM's decode instance reserves a handed-off request's blocks and starts pulling its KV
/// at its scheduler's next decision: at once when idle, else when the running step ends, and
/// not while `max_num_seqs` requests run.
#[test]
fn a_decode_instance_pulls_a_handed_off_request_s_kv_between_steps_while_it_has_room() {
    let scenario = |decode_seqs: u32| {
        parse(&format!(
            "(seed: 3, cluster: (groups: [{}, {}]), workload: (clients: [
                (arrival: AllAtZero(count: 1), input_tokens: Constant(160), output_tokens: Constant(10)),
                (arrival: AllAtZero(count: 1), input_tokens: Constant(160), output_tokens: Constant(1))]))",
            served_group("Prefill", 1000, false, "max_num_seqs: 1,"),
            served_group("Decode", 1000, false, &format!("max_num_seqs: {decode_seqs},"))
        ))
    };
    // Both reach the prefill instance at 660 µs (500 + 160 µs in); it runs one at a time:
    // request 0 to 1820, request 1 to 2980. Request 0 is answered at 1880, handed to the idle
    // decode instance at 2540 (660 µs in), pulled at once: 2590 to 3010 (50 µs of latency,
    // 420 of wire), and its first step (its prompt's last token) runs 3010-4011; then it
    // decodes, 1010 µs a step: 4011-5021, 5021-6031, ...
    // Request 1, answered at 3040, is handed at 3700, during the step to 4011.
    let rows = |decode_seqs| {
        let (_, mut rows) = run(&scenario(decode_seqs));
        rows.sort_by_key(|r| r.u64("request_id"));
        rows.iter()
            .map(|r| (r.us("ttft_ms"), r.us("kv_transfer_ms")))
            .collect::<Vec<_>>()
    };
    // Pulled when that step ends: 4061 to 4481, from the prefill's end 1501 µs. It lands
    // during the step 4011-5021; the launch at 5021 sees it and it joins the step from 6031:
    // 1000 + 1 + 10 µs, to 7042, its token the second out of that step (50 + 20 µs).
    assert_eq!(rows(128), [(4071, 3010 - 1820), (7112, 1501)]);
    // With one request at a time, it waits for request 0's last step (its tenth token, at
    // 4011 + 9 × 1010 = 13101): pulled 13151 to 13571 onto an idle instance, which takes it
    // at once: 13571-14572, alone (50 + 10 µs).
    assert_eq!(rows(1), [(4071, 3010 - 1820), (14632, 13571 - 2980)]);
}

/// vLLM's prefill instance frees a handed-off request's blocks only when its scheduler hears
/// that the decode instance has read them (`finished_sending`, polled as its workers launch a
/// step and reported in that step's output), not the moment the read ends: a prompt that
/// needs those blocks waits a step more.
#[test]
fn a_prefill_instance_frees_the_blocks_of_a_read_after_the_step_that_hears_of_it() {
    // Requests A, D, B, C: (arrival µs, prompt tokens), one output token each. The prefill
    // instance holds 40 blocks: A, B and C take 10 each, D 20.
    let (sc, _dir) = pd_traced("0,160,1\n900,320,1\n2000,160,1\n2010,160,1\n", false, 40);
    let (s, rows) = run(&sc);
    assert_eq!(s.requests.completed, 4, "{:?}", s.requests);
    // Prefill instance: A reaches it at 660 µs (500 + 160 µs in), its step 660-1820; D at
    // 900 + 820 = 1720, its step 1820-3140. B and C reach it at 2660 and 2670, during D's
    // step. A's answer (1880) is handed to the idle decode instance at 2540, which pulls it
    // at once: its KV lands at 2590 + 420 = 3010, during D's step. At D's end (3140) A's 10
    // blocks are still held, for the step launched then is the first to poll for the read:
    // with D's 20 (being sent) and B's 10 the cache is full, and B runs alone, 3140-4300.
    // That step's output frees A's blocks: C runs 4300-5460.
    let delays: Vec<u64> = rows.iter().map(|r| r.us("scheduling_delay_ms")).collect();
    assert_eq!(delays, [660, 920, 3140 - 2000, 4300 - 2010]);
    // (Freed as the read ended, B and C would both have run 3140-4460: C's delay 1,130 µs.)
    // C's KV: after B's, on the decode instance's link (B was pulled at 5910, at the end of
    // the decode step that recomputed D's last token, over 5960-6380), so 6380-6800.
    assert_eq!(rows[3].us("kv_transfer_ms"), 6800 - 5460);
}

/// vLLM's engine takes one more step after a step that finished requests, to report them,
/// and polls for finished reads as it launches it: a prefill instance left with nothing to
/// run frees the blocks of the reads that landed during its last step as that step ends.
#[test]
fn a_prefill_instance_left_without_work_frees_the_blocks_read_during_its_last_step() {
    // A, D and E: a prefill instance of 30 blocks (A and E take 10, D 20).
    let (sc, _dir) = pd_traced("0,160,1\n900,320,1\n2840,160,1\n", false, 30);
    let (s, rows) = run(&sc);
    assert_eq!(s.requests.completed, 3, "{:?}", s.requests);
    // As above: A's step 660-1820, D's 1820-3140, A's KV lands at 3010. D's step ends with
    // nothing left to run: the step vLLM's engine takes to report D polls, and A's blocks
    // are free. E reaches the engine at 2840 + 660 = 3500, while D's 20 blocks are still
    // being sent (D is handed over at 3860 and pulled at 4011), and runs at once. (Held until
    // the instance stepped again, they would cost E an empty step: 1 µs.)
    let delays: Vec<u64> = rows.iter().map(|r| r.us("scheduling_delay_ms")).collect();
    assert_eq!(delays, [660, 920, 660]);
}

/// The same when the last step's request times out during it: vLLM's engine takes a step to
/// report the aborted request, and that step polls. (The blocks of the read stayed held until
/// the instance stepped again.)
#[test]
fn a_prefill_instance_whose_last_request_timed_out_frees_the_blocks_read_during_its_step() {
    // A and E in one trace, D (timed out 2 ms after it arrives) in another: a prefill
    // instance of 30 blocks; A takes 10, D 20, and E 30 (29 for its prompt, one more for
    // its token).
    let (a_e, _d1) = crate::common::trace_file("0,160,1\n2840,464,1\n");
    let (d, _d2) = crate::common::trace_file("900,320,1\n");
    let sc = parse(&format!(
        "(seed: 3, cluster: (groups: [{}, {}]), workload: (traces: [
            (format: ServesimCsv, file: {:?}), (format: ServesimCsv, file: {:?}, timeout_s: 0.002)]))",
        served_group("Prefill", 30, false, ""),
        served_group("Decode", 1000, false, ""),
        a_e.display().to_string(),
        d.display().to_string()
    ));
    let (s, rows) = run(&sc);
    assert_eq!(
        (s.requests.completed, s.requests.timed_out),
        (2, 1),
        "{:?}",
        s.requests
    );
    // As above: A's step 660-1820 and its KV lands at 3010, during D's step 1820-3140. D
    // times out at 2900, mid-step, and frees its blocks; its step ends with nothing left to
    // run and nothing to hand off, and the step that reports D polls: A's blocks are free.
    // E reaches the engine at 2840 + 500 + 464 = 3804 and runs at once on all 30 blocks.
    // (Held until the instance stepped again, A's blocks would cost E an empty step: 1 µs.)
    let e = rows
        .iter()
        .find(|r| r.u64("input_tokens") == 464)
        .expect("E's row");
    assert_eq!(e.us("scheduling_delay_ms"), 964);
}

/// With async scheduling the step a prefill instance runs after another was decided when
/// that one started: a prompt that reached the engine during it joins the step after, which
/// vLLM's engine launches at once when the one decided is empty. The prompt used to wait for
/// the instance's hand-off in transit to land instead.
#[test]
fn a_prompt_reaching_an_async_prefill_engine_mid_step_does_not_wait_for_a_transfer() {
    let (sc, _dir) = pd_traced("0,160,1\n500,160,1\n", true, 1000);
    let (_, rows) = run(&sc);
    // A reaches the idle prefill engine at 660 µs and runs at once, 660-1820; B reaches it at
    // 1160, after that step's start, when the next had been decided (empty): an empty step of
    // 1 µs, then B, 1821-2981. (It used to wait for A's KV to land, at 3010.)
    assert_eq!(rows[1].us("scheduling_delay_ms"), 1821 - 500);
    // A: handed to the idle decode instance at 2540, KV 2590-3010, its step 3010-4011. B:
    // answered at 3041, handed at 3701 during that step, pulled at its end: KV 4061-4481,
    // onto the idle instance: 4481-5482, out at 5542.
    let ttft: Vec<u64> = rows.iter().map(|r| r.us("ttft_ms")).collect();
    assert_eq!(ttft, [4071, 5542 - 500]);
}

/// Found by random feature combinations: a decode instance that held back a request whose
/// KV landed during its last step, with nothing else to run, waited for a transfer that
/// itself waited for the blocks the held-back request kept, and never stepped again (20
/// requests left in transit). It now takes an empty step of 1 µs, as an idle engine polls.
#[test]
fn a_held_back_landing_is_taken_after_an_empty_step_not_left_waiting_for_its_own_blocks() {
    // The prefill instance schedules between steps, the decode instance (30 blocks) ahead.
    let text = format!(
        "(seed: 3, cluster: (groups: [{}, {}]), workload: (clients: [
            (arrival: AllAtZero(count: 2), input_tokens: Constant(160), output_tokens: Constant(1)),
            (arrival: AllAtZero(count: 1), input_tokens: Constant(400), output_tokens: Constant(1))]))",
        served_group("Prefill", 1000, false, ""),
        served_group("Decode", 30, true, "")
    );
    let (s, rows) = run(&parse(&text));
    assert_eq!(s.requests.completed, 3, "{:?}", s.requests);
    // Prefill: the two short prompts (in at 660 µs) in a step to 1980, the long one (in at
    // 900) in the next, to 3380. The short ones reach the idle decode instance at 2700 and
    // 2710, reserve 10 blocks each and land at 3170 and 3590 (2750 + 420 µs of wire each,
    // one after the other). The decode instance takes the first at once: 3170–4171, done.
    // The second landed during that step: with async scheduling it joins the fourth step
    // after it, so three empty steps of 1 µs (4171–4174) bring it: 4174–5175. The long one
    // (answered at 3440, handed at 4340, during that step) waits for its end, and for 25
    // blocks, which its end frees: sent 5225 to 6274, it runs 6274–7275.
    let mut ttft: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r.u64("input_tokens"), r.us("ttft_ms")))
        .collect();
    ttft.sort_unstable();
    assert_eq!(ttft, [(160, 4171 + 60), (160, 5175 + 60), (400, 7275 + 60)]);
}

#[test]
fn two_transfers_from_one_prefill_instance_queue_on_its_link() {
    // A 1 GB/s link (1,000 bytes/µs): 10 blocks take 20,972 µs on the wire. The two requests
    // prefill one after the other (first tokens at 1160 and 2320) and go to two decode
    // instances (least_kv: the first has the first request's blocks reserved). The first is
    // sent from 1210 to 22,182; the second reserves at 2320 but its data waits for the
    // prefill instance's link: 22,182 to 43,154.
    let text = pd(1, 2, PREFILL_FIRST, &all_at_zero(2, 160, 2)).replace(
        "kv_blocks: 1000,",
        "kv_blocks: 1000, kv_link_gb_per_s: 1.0,",
    );
    let (s, rows) = run(&parse(&text));
    let wire = wire_us(160, 1_000);
    assert_eq!(wire, 20_972);
    let ttft: Vec<u64> = rows.iter().map(|r| r.us("ttft_ms")).collect();
    assert_eq!(ttft, [1160, 2320]);
    let transfers: Vec<u64> = rows.iter().map(|r| r.us("kv_transfer_ms")).collect();
    let second_done = 1160 + 50 + wire + wire;
    assert_eq!(transfers, [50 + wire, second_done - 2320]);
    let decode: Vec<u64> = rows.iter().map(|r| r.u64("decode_instance")).collect();
    assert_eq!(decode, [1, 2], "one per decode instance");
    let d = s.disaggregation.unwrap();
    assert_eq!(
        d.link_ms.max,
        Some((second_done - 2320) as f64 / 1000.0),
        "reservation to last byte"
    );
    assert_eq!(d.waited_for_kv, 0, "the link wait is not a KV wait");
    // Each decodes its one remaining token in 1010 µs.
    let done: Vec<u64> = rows.iter().map(|r| r.u64("completion_us")).collect();
    assert_eq!(done, [1160 + 50 + wire + 1010, second_done + 1010]);
}

#[test]
fn layerwise_transfer_hides_the_part_that_overlaps_the_last_prefill_step() {
    // 1,600 tokens (100 blocks): the prefill step is 1000 + 1600 = 2600 µs; the wire time
    // 209,715,200 / 50,000 = 4194.3 µs. Streamed over 32 layers during the step, what is
    // left is max(4194.3/32, 4194.3 − 2600·31/32) = 1675.5 → 1676 µs after the latency.
    let plain = parse(&pd(1, 1, "", &all_at_zero(1, 1600, 2)));
    let layered = parse(&pd(
        1,
        1,
        ", kv_transfer_layerwise: true",
        &all_at_zero(1, 1600, 2),
    ));
    let wire = 1600.0 * KV_BYTES_PER_TOKEN as f64 / 50_000.0;
    let left = (wire / 32.0).max(wire - 2600.0 * 31.0 / 32.0).ceil() as u64;
    assert_eq!(left, 1676);
    assert_eq!(
        run(&plain).1[0].us("kv_transfer_ms"),
        50 + wire.ceil() as u64
    );
    assert_eq!(run(&layered).1[0].us("kv_transfer_ms"), 50 + left);
}

#[test]
fn link_bandwidth_and_latency_come_from_both_ends_and_scale_with_gpus() {
    // The decode group's link is slower (10 GB/s per GPU) and farther (200 µs): the slower
    // end sets the rate, the larger latency applies. With tp: 2 on both ends each instance
    // has two such links.
    let slow = ", kv_link_gb_per_s: 10.0, kv_link_latency_us: 200.0";
    let sc = parse(
        &pd(1, 1, "", &all_at_zero(1, 160, 2))
            .replace("role: Decode,", &format!("role: Decode, tp: 2 {slow},"))
            .replace("role: Prefill,", "role: Prefill, tp: 2,"),
    );
    let (_, rows) = run(&sc);
    assert_eq!(rows[0].us("kv_transfer_ms"), 200 + wire_us(160, 2 * 10_000));
}

#[test]
fn a_full_decode_instance_holds_transfers_back_and_counts_the_wait() {
    // Decode KV of 30 blocks; each request needs 10 blocks for its prompt and grows to 13 by
    // its last token (160 + 40 tokens): at most two fit at once, the others wait in order.
    let text = pd(1, 1, "", &all_at_zero(8, 160, 40));
    let sc = parse(&text);
    let sc_small = parse(&with_decode_blocks(&text, 30));
    let (big, big_rows) = run(&sc);
    let (s, rows) = run(&sc_small);
    assert_eq!(s.requests.completed, 8, "nothing is dropped");
    let d = s.disaggregation.as_ref().unwrap();
    assert!(d.waited_for_kv >= 5, "{} waited", d.waited_for_kv);
    assert!(d.decode_kv_wait_ms.max.unwrap() > 10.0);
    assert_eq!(big.disaggregation.as_ref().unwrap().waited_for_kv, 0);
    // The waits show in the transfers, and requests still arrive on the decode side in
    // hand-off order.
    let slowest = rows.iter().map(|r| r.us("kv_transfer_ms")).max().unwrap();
    let unhindered = big_rows
        .iter()
        .map(|r| r.us("kv_transfer_ms"))
        .max()
        .unwrap();
    assert!(slowest > 5 * unhindered, "{slowest} vs {unhindered}");
    let mut landed: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.u64("arrival_us") + r.us("ttft_ms") + r.us("kv_transfer_ms"),
                r.u64("request_id"),
            )
        })
        .collect();
    landed.sort();
    let order: Vec<u64> = landed.iter().map(|x| x.1).collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
}

#[test]
fn the_front_router_never_picks_a_decode_instance_and_every_request_is_disaggregated() {
    let workload =
        "(num_requests: 400, clients: [(rate_per_s: 40.0, input_tokens: Uniform(min: 16, max: 900),
        output_tokens: Uniform(min: 1, max: 60), shared_prefix_tokens: 64, prefix_groups: 4)])";
    let sc = parse(&pd(2, 3, "", workload).replace(
        "(seed: 3,",
        "(seed: 3, policies: (routing: \"least_loaded\", decode_routing: \"weighted\"),",
    ));
    let (s, rows) = run(&sc);
    assert_eq!(s.requests.completed, 400);
    for r in &rows {
        assert!(r.u64("prefill_instance") < 2, "{:?}", r.0);
        // Every request, one-token answers too, gets its tokens from a decode instance.
        let d = r.u64("decode_instance");
        assert!((2..5).contains(&d) && r.u64("instance") == d);
        assert!(!r.str("kv_transfer_ms").is_empty());
    }
    assert!(rows.iter().any(|r| r.u64("output_tokens") == 1));
    let d = s.disaggregation.unwrap();
    assert_eq!(d.transfers, 400);
    assert!(
        d.blocks_cached_on_decode > 0,
        "shared prefixes are found on the decode side and not sent again"
    );
}

#[test]
fn mixed_instances_serve_beside_the_pools_and_runs_are_deterministic() {
    let text = pd(1, 1, "", "(num_requests: 300, clients: [(rate_per_s: 30.0, input_tokens: Uniform(min: 16, max: 600), output_tokens: Uniform(min: 2, max: 50))])")
        .replace(
            "groups: [",
            "groups: [(name: \"mixed\", count: 1, model: \"llama-3.1-8b-instruct\", kv_blocks: 1000, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0])), ",
        )
        .replace("(seed: 3,", "(seed: 3, policies: (routing: \"round_robin\"),");
    let sc = parse(&text);
    let (s, rows, a) = run_keeping(&sc);
    let (_, _, b) = run_keeping(&sc);
    for f in ["requests.csv", "summary.json", "timeseries.csv"] {
        assert_eq!(
            std::fs::read(a.path().join(f)).unwrap(),
            std::fs::read(b.path().join(f)).unwrap(),
            "{f} differs between two runs"
        );
    }
    let on_mixed: Vec<_> = rows
        .iter()
        .filter(|r| r.u64("prefill_instance") == 0)
        .collect();
    assert_eq!(
        on_mixed.len(),
        150,
        "round robin over the mixed and the prefill instance"
    );
    for r in on_mixed {
        assert_eq!(
            r.u64("decode_instance"),
            0,
            "a mixed instance decodes its own"
        );
        assert_eq!(r.str("kv_transfer_ms"), "");
    }
    let roles: Vec<&str> = s
        .disaggregation
        .as_ref()
        .unwrap()
        .pools
        .iter()
        .map(|p| p.role.as_str())
        .collect();
    assert_eq!(roles, ["prefill", "decode", "mixed"]);
    let json = std::fs::read_to_string(a.path().join("summary.json")).unwrap();
    assert!(json.contains("\"disaggregation\""));
}

#[test]
fn a_cluster_without_decode_instances_reports_no_disaggregation() {
    let sc = parse(
        "(cluster: (groups: [(kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))]),
          workload: (clients: [(arrival: AllAtZero(count: 2), input_tokens: Constant(32), output_tokens: Constant(3))]))",
    );
    let (s, rows, dir) = run_keeping(&sc);
    assert!(s.disaggregation.is_none());
    let json = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
    assert!(!json.contains("disaggregation"));
    for r in &rows {
        assert_eq!(
            (r.u64("prefill_instance"), r.u64("decode_instance")),
            (0, 0)
        );
    }
}

#[test]
fn timeouts_during_a_transfer_free_both_ends() {
    // The decode instance holds two requests at once (30 blocks); the rest wait for KV and
    // time out there or in transfer; their blocks on both pools are freed (INV-4 every tick).
    let text = pd(
        1,
        1,
        "",
        "(clients: [(arrival: AllAtZero(count: 12), input_tokens: Constant(160), output_tokens: Constant(40), timeout_s: 0.06)])",
    );
    let (s, rows) = run(&parse(&with_decode_blocks(&text, 30)));
    assert!(s.requests.timed_out > 0 && s.requests.completed > 0);
    assert_eq!(s.requests.timed_out + s.requests.completed, 12);
    let timed_out = |r: &&crate::common::Row| r.str("state") == "timed_out";
    assert!(
        rows.iter()
            .filter(timed_out)
            .any(|r| r.u64("instance") == 1 && r.str("kv_transfer_ms").is_empty()),
        "some time out on their way to the decode instance"
    );
    assert!(
        rows.iter()
            .filter(timed_out)
            .any(|r| r.u64("instance") == 1 && !r.str("kv_transfer_ms").is_empty()),
        "some time out decoding"
    );
}

#[test]
fn bad_disaggregation_settings_are_reported_together() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    let text = "(cluster: (groups: [
            (role: Prefill, kv_blocks: 100, kv_link_gb_per_s: 0.0, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 0.0, 0.0])),
            (role: Prefill, model: \"llama-3.1-8b-instruct\", block_size: 32, kv_blocks: 100, latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1.0, 0.0, 0.0]),
              scaling: (min: 0, max: 2)),
        ]),
        policies: (decode_routing: \"nope\"),
        workload: (clients: [(input_tokens: Constant(8), output_tokens: Constant(2))]))";
    let e = servesim::loader::parse(text, "pd.ron", &[], catalog)
        .unwrap_err()
        .to_string();
    for want in [
        "cluster.groups[0].kv_link_gb_per_s",
        "cluster.groups[0].model: a prefill group needs a model",
        "cluster.groups[0].role: a prefill group needs a decode group",
        "cluster.groups[1].block_size",
        "cluster.groups[1].scaling.min: a prefill group cannot scale to zero",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    // The decode routing policy is checked with decode instances and without (a misspelt
    // name passed unread without them).
    let unknown = "policies.decode_routing: unknown decode_routing policy \"nope\"";
    assert!(e.contains(unknown), "{e}");
    let text = text.replacen("(role: Prefill, model", "(role: Decode, model", 1);
    let e = servesim::loader::parse(&text, "pd.ron", &[], catalog)
        .unwrap_err()
        .to_string();
    assert!(e.contains(unknown), "{e}");
}

/// A decode routing policy given where no group decodes is not used, and validate says so; a
/// P/D scenario's is not warned of.
#[test]
fn a_decode_routing_policy_without_decode_groups_is_warned_of() {
    let said = crate::common::stderr_in_root;
    let unused = "warning: policies.decode_routing = \"round_robin\" is not used: it picks the decode instance of a prefill/decode hand-off, and no group has role: Decode";
    let e = said(&[
        "validate",
        "scenarios/quickstart.ron",
        "--set",
        "policies.decode_routing=\"round_robin\"",
    ]);
    assert!(e.contains(unused), "{e}");
    for quiet in [
        &["validate", "scenarios/quickstart.ron"][..],
        &[
            "validate",
            "scenarios/pd-disaggregation.ron",
            "--set",
            "policies.decode_routing=\"round_robin\"",
        ],
    ] {
        let e = said(quiet);
        assert!(!e.contains("decode_routing"), "{quiet:?}: {e}");
    }
}

/// The cluster's P/D settings given where no group prefills are not used, and validate says
/// so; `pd_first_token: Decode` is the default and cannot be told from it, so only `Prefill`
/// is warned of. A P/D scenario's are not.
#[test]
fn p_d_settings_without_a_prefill_group_are_warned_of() {
    let said = crate::common::stderr_in_root;
    let layerwise = "warning: cluster.kv_transfer_layerwise = true is not used: it streams a prompt's KV to the decode instance layer by layer, and no group has role: Prefill";
    let first = "warning: cluster.pd_first_token = Prefill is not used: it says which instance of a prefill/decode hand-off sends the first token, and no group has role: Prefill";
    let e = said(&[
        "validate",
        "scenarios/quickstart.ron",
        "--set",
        "cluster.kv_transfer_layerwise=true",
        "--set",
        "cluster.pd_first_token=Prefill",
    ]);
    assert!(e.contains(layerwise) && e.contains(first), "{e}");
    let e = said(&[
        "validate",
        "scenarios/quickstart.ron",
        "--set",
        "cluster.pd_first_token=Decode",
    ]);
    assert!(!e.contains("cluster."), "{e}");
    let e = said(&[
        "validate",
        "scenarios/pd-disaggregation.ron",
        "--set",
        "cluster.kv_transfer_layerwise=true",
        "--set",
        "cluster.pd_first_token=Prefill",
    ]);
    assert!(!e.contains("is not used"), "{e}");
}

#[test]
fn prefill_and_decode_must_share_the_kv_cache_dtype_and_auto_is_the_default_s_name() {
    // vLLM's NIXL connector puts the cache dtype in its compatibility hash: pools that lay KV
    // out differently cannot hand it over. `auto` given is the default left out.
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    let dtype = |prefill: &str, decode: &str| {
        let text = pd(1, 1, "", &all_at_zero(1, 8, 2))
            .replacen("role: Prefill,", &format!("role: Prefill, {prefill}"), 1)
            .replacen("role: Decode,", &format!("role: Decode, {decode}"), 1);
        servesim::loader::parse(&text, "pd.ron", &[], catalog).map_err(|e| e.to_string())
    };
    assert!(dtype("kv_cache_dtype: \"auto\",", "").is_ok());
    assert!(dtype("", "kv_cache_dtype: \"auto\",").is_ok());
    assert!(dtype("kv_cache_dtype: \"fp8\",", "kv_cache_dtype: \"fp8\",").is_ok());
    let e = dtype("kv_cache_dtype: \"auto\",", "kv_cache_dtype: \"fp8\",").unwrap_err();
    assert!(
        e.contains("cluster.groups[1].kv_cache_dtype: \"fp8\", but cluster.groups[0] has \"auto\""),
        "{e}"
    );
}

#[test]
fn the_bundled_comparison_shows_what_readme_says() {
    // docs/disaggregation.md "Mixed against 1P:3D and 2P:2D": one prefill instance cannot
    // keep up; with two, each first token comes after its transfer and a decode step (vLLM's
    // proxy, the default), so mixed has the better TTFT, ITL and SLO attainment. Read as
    // DistServe does (the prefill instance sends the first token), two give the best TTFT.
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/pd-disaggregation.ron");
    let run_with = |roles: [(&str, u32); 2], first: &str| {
        let mut set = vec![("cluster.pd_first_token".to_string(), first.to_string())];
        for (g, (role, count)) in roles.iter().enumerate() {
            set.push((format!("cluster.groups[{g}].role"), role.to_string()));
            set.push((format!("cluster.groups[{g}].count"), count.to_string()));
        }
        let sc = servesim::loader::load(&path, &set, catalog).unwrap();
        servesim::Simulation::new(&sc, Default::default())
            .unwrap()
            .run()
            .unwrap()
    };
    let mixed = run_with([("Mixed", 2), ("Mixed", 2)], "Decode");
    let one = run_with([("Prefill", 1), ("Decode", 3)], "Decode");
    let two = run_with([("Prefill", 2), ("Decode", 2)], "Decode");
    let distserve = run_with([("Prefill", 2), ("Decode", 2)], "Prefill");
    assert!(mixed.disaggregation.is_none());
    let prefill_busy = one.disaggregation.as_ref().unwrap().pools[0].busy_fraction;
    assert!(prefill_busy > 0.95, "{prefill_busy}");
    let attainment = |s: &servesim::metrics::Summary| s.slo.attainment.unwrap();
    assert!(attainment(&one) < 0.1, "{}", attainment(&one));
    assert!(mixed.ttft_ms.p99 < two.ttft_ms.p99 && mixed.ttft_ms.p50 < two.ttft_ms.p50);
    assert!(mixed.itl_ms.p99 < two.itl_ms.p99 && mixed.itl_ms.p50 < two.itl_ms.p50);
    assert!(attainment(&mixed) > attainment(&two) && attainment(&two) > 0.9);
    // The same split, its first tokens from the prefill instances: the best TTFT of all,
    // the transfer in the second token's ITL instead.
    assert!(distserve.ttft_ms.p99 < mixed.ttft_ms.p99 && distserve.ttft_ms.p50 < mixed.ttft_ms.p50);
    assert!(two.itl_ms.p99 < distserve.itl_ms.p99);
    // ~786 MB per request (6,000 tokens × 128 KiB) over 50 GB/s: ~16 ms of wire time.
    let t = two.disaggregation.unwrap().transfer_ms;
    assert!((15.0..25.0).contains(&t.p50.unwrap()), "{t:?}");
}

/// A decode routing policy that never finds an instance.
struct Nowhere;
impl servesim::policy::RoutingPolicy for Nowhere {
    fn choose(
        &mut self,
        _: &servesim::request::RequestSpec,
        _: servesim::SimTime,
        _: &servesim::policy::RouterView<'_>,
    ) -> Option<u32> {
        None
    }
}

/// [`Nowhere`] as a routing policy to register.
fn nowhere() -> servesim::policy::RoutingEntry {
    servesim::policy::RoutingEntry {
        name: "nowhere",
        description: "never routes",
        params: &[],
        free_params: false,
        build: |_| Ok(Box::new(Nowhere)),
    }
}

/// Runs `workload` on one prefill and one decode instance with `policy` registered and used
/// as the decode routing policy, invariants checked every tick: the summary and the rows.
fn run_with_decode_policy(
    policy: servesim::policy::RoutingEntry,
    workload: &str,
) -> (servesim::metrics::Summary, Vec<crate::common::Row>) {
    use servesim::policy::PolicyAppExt;
    let name = policy.name;
    let mut app = servesim::default_app();
    app.add_policy::<servesim::policy::family::Routing>(policy);
    let text = pd(1, 1, PREFILL_FIRST, workload).replace(
        "(seed: 3,",
        &format!("(seed: 3, policies: (decode_routing: \"{name}\"),"),
    );
    let sc = servesim::loader::parse(
        &text,
        "pd.ron",
        &[],
        app.world().resource::<servesim::policy::Catalog>(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = servesim::Simulation::from_app(
        app,
        &sc,
        servesim::RunOptions {
            check_invariants: true,
            out_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap()
    .run()
    .unwrap();
    (
        s,
        crate::common::read_rows(&dir.path().join("requests.csv")),
    )
}

#[test]
fn hand_offs_with_no_decode_instance_wait_on_the_prefill_instance_accounted_for() {
    // Invariants every tick: the waiting requests and their blocks stay on the prefill
    // instance (INV-1, INV-4), and it does not spin empty steps while they wait.
    let (s, _) = run_with_decode_policy(nowhere(), &all_at_zero(4, 160, 3));
    assert_eq!(s.requests.running, 4, "all prefilled, none placed");
    assert_eq!(s.requests.completed, 0);
    // No horizon: the run stopped because nothing was left to happen.
    assert!(
        s.warnings.iter().any(|w| w.starts_with(
            "4 requests were still in the system when no event was left to move them on"
        )),
        "{:?}",
        s.warnings
    );
    assert_eq!(s.disaggregation.unwrap().transfers, 0);
    assert!(s.instances[0].steps <= 4, "{} steps", s.instances[0].steps);
}

/// A hand-off that times out frees its prompt's blocks on the prefill instance; a request
/// waiting for those blocks was not formed into a batch until the next arrival (INV-8 with
/// invariant checks; found by random feature combinations with P/D, crashes and timeouts).
#[test]
fn a_timed_out_hand_off_frees_its_blocks_for_the_next_request_at_once() {
    // 1,000 blocks of 16 tokens; a 9,000-token prompt holds 563. Request 1 prefills, then
    // waits for a decode instance that never comes; request 2 (a second later) computes 3
    // chunks of 2,048 tokens (384 blocks) in the 437 blocks left, the 4th does not fit: it
    // preempts itself, its blocks kept in the prefix cache. When request 1 times out (1.5 s
    // after its arrival) request 2 finds 6,144 tokens cached and computes the other 2,856:
    // (1,000 + 2,048) + (1,000 + 808) = 4,856 µs.
    let (s, rows) = run_with_decode_policy(
        nowhere(),
        "(num_requests: 2, clients: [(rate_per_s: 1.0, arrival: Constant, input_tokens: Constant(9000), output_tokens: Constant(3), timeout_s: 1.5)])",
    );
    assert_eq!(s.requests.timed_out, 2);
    let freed = rows[0].u64("arrival_us") + 1_500_000;
    let first = rows[1].u64("arrival_us") + rows[1].us("ttft_ms");
    assert_eq!(
        first,
        freed + 4_856,
        "request 2 goes on when request 1 frees its blocks"
    );
}

/// A decode routing policy that finds nothing before 50 ms, then the first routable instance.
struct Late;
impl servesim::policy::RoutingPolicy for Late {
    fn choose(
        &mut self,
        _: &servesim::request::RequestSpec,
        now: servesim::SimTime,
        view: &servesim::policy::RouterView<'_>,
    ) -> Option<u32> {
        (now.as_us() >= 50_000)
            .then(|| view.routable().next().map(|s| s.index))
            .flatten()
    }
}

#[test]
fn hand_offs_that_found_no_decode_instance_are_retried_until_one_is_found() {
    // Arrivals every 10 ms keep ticks coming.
    let (s, rows) = run_with_decode_policy(
        servesim::policy::RoutingEntry {
            name: "late",
            description: "nothing before 50 ms",
            params: &[],
            free_params: false,
            build: |_| Ok(Box::new(Late)),
        },
        "(num_requests: 10, clients: [(rate_per_s: 100.0, arrival: Constant, input_tokens: Constant(160), output_tokens: Constant(3))])",
    );
    assert_eq!(s.requests.completed, 10);
    for r in &rows {
        // First token at arrival + 1,160 µs; no transfer starts before 50 ms.
        let first = r.u64("arrival_us") + r.us("ttft_ms");
        let landed = first + r.us("kv_transfer_ms");
        assert!(
            landed >= 50_000 + 470,
            "request {} landed at {landed}",
            r.str("request_id")
        );
    }
}

/// Issue 30, class 5: when the decode pool is what cannot hold a request, the unservable
/// warning says so and cites the decode pool's capacity, not the prefill pool's.
#[test]
fn requests_no_decode_instance_can_hold_are_blamed_on_the_decode_pool() {
    // 160 + 40 − 1 = 199 tokens need 13 blocks of 16; the decode cache has 12 (192 tokens),
    // the prefill cache 1,000.
    let sc = parse(&with_decode_blocks(
        &pd(1, 1, "", &all_at_zero(4, 160, 40)),
        12,
    ));
    let (s, _) = run(&sc);
    assert_eq!(s.requests.dropped, 4);
    assert_eq!(s.disaggregation.as_ref().unwrap().dropped, 4);
    let w = s.warnings.join("\n");
    assert!(
        w.contains("4 of 4 requests were dropped as unservable after their prefill")
            && w.contains("the largest decode cache holds 12 blocks × 16 tokens = 192 tokens; the longest max_model_len is 192)"),
        "{w}"
    );
    assert!(
        !w.contains("1000 blocks"),
        "the prefill pool is not the limit: {w}"
    );
}

/// Decode groups may differ in `max_model_len` and cache size: a request one of them can never
/// hold goes to another that can, whatever the decode routing would pick; only what no decode
/// instance holds is dropped.
#[test]
fn a_decode_group_that_cannot_hold_a_request_is_passed_over_not_dropped_at() {
    // Decode instances 1 (group "decode") and 2 (group "short", 1,000 blocks and
    // `max_model_len`); round robin alternates 1, 2, 1, 2 while both are candidates.
    let with_short = |text: String, max_model_len: u32| {
        let short = format!(
            "(name: \"short\", count: 1, role: Decode, model: \"llama-3.1-8b-instruct\",
              kv_blocks: 1000, max_model_len: {max_model_len},
              latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 1.0, 10.0]))"
        );
        text.replacen(")] ", &format!("), {short}] "), 1).replacen(
            "(seed: 3,",
            "(seed: 3, policies: (decode_routing: \"round_robin\"),",
            1,
        )
    };
    let on = |rows: &[crate::common::Row], i: &str| {
        rows.iter()
            .filter(|r| r.str("decode_instance") == i)
            .count()
    };
    // "decode" has 1,000 blocks, "short" max_model_len 170. 100 + 40 = 140 tokens: both
    // hold these.
    let (s, rows, _dir) = run_keeping(&parse(&with_short(
        pd(1, 1, "", &all_at_zero(4, 100, 40)),
        170,
    )));
    assert_eq!(s.requests.completed, 4, "{:?}", s.warnings);
    assert_eq!(
        (on(&rows, "1"), on(&rows, "2")),
        (2, 2),
        "round robin over both"
    );
    // 160 + 40 = 200 tokens, above "short"'s max_model_len: all go to "decode".
    let (s, rows, _dir) = run_keeping(&parse(&with_short(
        pd(1, 1, "", &all_at_zero(4, 160, 40)),
        170,
    )));
    assert_eq!(
        (s.requests.completed, s.requests.dropped),
        (4, 0),
        "{:?}",
        s.warnings
    );
    assert_eq!(on(&rows, "1"), 4);
    // "decode" now holds 12 blocks (192 tokens), "short" max_model_len 300. 160 + 40 − 1 = 199
    // tokens need 13 blocks: all go to "short". 280 + 40 = 320 tokens: neither, so dropped
    // after their prefill and blamed on the decode pool.
    let two_lengths = "(clients: [(arrival: AllAtZero(count: 4), input_tokens: Constant(160), output_tokens: Constant(40)),
        (arrival: AllAtZero(count: 2), input_tokens: Constant(280), output_tokens: Constant(40))])";
    let text = with_short(with_decode_blocks(&pd(1, 1, "", two_lengths), 12), 300);
    let (s, rows, _dir) = run_keeping(&parse(&text));
    assert_eq!(
        (s.requests.completed, s.requests.dropped),
        (4, 2),
        "{:?}",
        s.warnings
    );
    assert_eq!(on(&rows, "2"), 4);
    let w = s.warnings.join("\n");
    assert!(
        w.contains("2 of 6 requests were dropped as unservable after their prefill")
            && w.contains("; the longest max_model_len is 300)"),
        "{w}"
    );
}

/// Issue 30, class 5: a model named by a unique prefix or in another case is the same model
/// wherever a full name is accepted — here the P/D check that both pools serve one model.
#[test]
fn a_model_named_by_a_unique_prefix_is_the_same_model_in_both_pools() {
    let text = pd(1, 1, "", &all_at_zero(2, 160, 4));
    let first = text.find("llama-3.1-8b-instruct").unwrap();
    let mut short = text.clone();
    short.replace_range(first..first + "llama-3.1-8b-instruct".len(), "LLaMA-3.1-8B");
    let (s, _) = run(&parse(&short));
    assert_eq!(s.requests.completed, 2);
    // A different model is still refused.
    let other = text.replacen("llama-3.1-8b-instruct", "qwen2.5-7b-instruct", 1);
    let app = servesim::default_app();
    let err = servesim::loader::parse(
        &other,
        "test.ron",
        &[],
        app.world().resource::<servesim::policy::Catalog>(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("must serve one model"), "{err}");
}

#[test]
fn a_decode_instance_waits_for_kv_held_by_a_severed_link_instead_of_stepping_empty() {
    // Three 160-token prompts (10 blocks each) at 0 onto a decode cache of 31 blocks.
    // Request 0 is prefilled alone (0–1160 µs) and its KV arrives at 1630; requests 1 and 2
    // (prefilled 1160–2480) reserve 20 blocks there while the decode side's link is cut from
    // 2 ms to 1 s, leaving request 0 one block: it cannot grow past 176 tokens. The instance
    // stepped empty (1 µs each) until the progress watchdog stopped the run 0.1 s later.
    let src = with_decode_blocks(&pd(1, 1, "", &all_at_zero(3, 160, 20)), 31).replacen(
        "workload:",
        "faults: (kv_links: [(instance: 1, from_s: 0.002, until_s: 1.0, bandwidth: 0.0)]), workload:",
        1,
    );
    // The same with a CPU KV tier on the decode instance (whose empty steps were retried,
    // as they may move blocks between the tiers, and tripped the watchdog as well): it waits
    // once a try moved nothing.
    let tiered = src.replacen(
        "kv_blocks: 31",
        "gpu: \"H100\", kv_blocks: 31, cpu_kv_blocks: 100",
        1,
    );
    assert_ne!(tiered, src);
    for src in [src, tiered] {
        let (s, rows) = run(&parse(&src));
        assert_eq!(s.requests.completed, 3);
        let by_id = |id: u64| rows.iter().find(|r| r.u64("request_id") == id).unwrap();
        // The held transfers start at 1 s, 420 µs each, one after the other on the link.
        assert_eq!(by_id(1).us("kv_transfer_ms"), 1_000_000 + 420 - 2480);
        assert_eq!(by_id(2).us("kv_transfer_ms"), 1_000_000 + 2 * 420 - 2480);
        assert_eq!(by_id(0).us("kv_transfer_ms"), 470);
        // Request 0 finishes only once the blocks it waits for are free again.
        assert!(
            by_id(0).us("e2e_ms") > 1_000_000,
            "{}",
            by_id(0).us("e2e_ms")
        );
    }
}

#[test]
fn a_degraded_kv_link_slows_the_transfers_that_start_in_its_window_and_a_severed_one_holds_them() {
    // The lone request of the case above: its transfer could start at 1160 + 50 = 1210 µs.
    let transfer = |links: &str| {
        let src = pd(1, 1, "", &all_at_zero(1, 160, 3)).replacen(
            "workload:",
            &format!("faults: (kv_links: [{links}]), workload:"),
            1,
        );
        let (s, rows) = run(&parse(&src));
        let f = s.faults.unwrap();
        let touched: Vec<u64> = f.kv_links.iter().map(|l| l.transfers).collect();
        (rows[0].us("kv_transfer_ms"), touched)
    };
    // Half the prefill side's bandwidth: 20,971,520 bytes / 25,000 bytes/µs = 838.9 → 839.
    assert_eq!(
        transfer("(instance: 0, from_s: 0.0, until_s: 0.01, bandwidth: 0.5)"),
        (50 + wire_us(160, 25_000), vec![1])
    );
    assert_eq!(wire_us(160, 25_000), 839);
    // The decode side severed until 2 ms: the transfer starts then (2000 + 420 = 2420).
    assert_eq!(
        transfer("(instance: 1, from_s: 0.0, until_s: 0.002, bandwidth: 0.0)"),
        (2420 - 1160, vec![1])
    );
    // Held to 2 ms, it starts inside a half-bandwidth window of the other end.
    assert_eq!(
        transfer(
            "(instance: 1, from_s: 0.0, until_s: 0.002, bandwidth: 0.0),
             (instance: 0, from_s: 0.0015, until_s: 0.003, bandwidth: 0.5)"
        ),
        (2000 + 839 - 1160, vec![1, 1])
    );
    // Two windows of one end that overlap: the lowest bandwidth, a quarter (each window says
    // what the link keeps; 0.5 × 0.25 would keep less than either says).
    assert_eq!(
        transfer(
            "(instance: 0, from_s: 0.0, until_s: 0.01, bandwidth: 0.5),
             (instance: 0, from_s: 0.001, until_s: 0.01, bandwidth: 0.25)"
        ),
        (50 + wire_us(160, 12_500), vec![1, 1])
    );
    assert_eq!(wire_us(160, 12_500), 1678);
    // A window that has ended, or one of full bandwidth, changes nothing.
    assert_eq!(
        transfer("(instance: 0, from_s: 0.0, until_s: 0.0012, bandwidth: 0.0)"),
        (470, vec![0])
    );
    assert_eq!(
        transfer("(instance: 0, from_s: 0.0, until_s: 1.0, bandwidth: 1.0)"),
        (470, vec![1])
    );
}

#[test]
fn kv_link_faults_need_a_pd_instance_and_a_fraction() {
    for (links, path, says) in [
        (
            "(instance: 0, from_s: 0.0, until_s: 1.0, bandwidth: 1.5)",
            "faults.kv_links[0].bandwidth",
            "[0, 1]",
        ),
        (
            "(instance: 0, from_s: 2.0, until_s: 1.0, bandwidth: 0.5)",
            "faults.kv_links[0].until_s",
            "after from_s",
        ),
        (
            "(instance: 5, from_s: 0.0, until_s: 1.0, bandwidth: 0.5)",
            "faults.kv_links[0].instance",
            "does not exist",
        ),
    ] {
        let src = pd(1, 1, "", &all_at_zero(1, 160, 3)).replacen(
            "workload:",
            &format!("faults: (kv_links: [{links}]), workload:"),
            1,
        );
        let e = crate::common::invalid(&src);
        assert!(e.contains(path) && e.contains(says), "{links}: {e}");
    }
    let mixed = "(seed: 1, cluster: (groups: [(count: 1, kv_blocks: 100)]),
        faults: (kv_links: [(instance: 0, from_s: 0.0, until_s: 1.0, bandwidth: 0.5)]),
        workload: (num_requests: 1, clients: [(rate_per_s: 1.0, input_tokens: Constant(16),
          output_tokens: Constant(2))]))";
    let e = crate::common::invalid(mixed);
    assert!(
        e.contains("faults.kv_links[0].instance") && e.contains("serves both phases"),
        "{e}"
    );
}

/// Found by random scenarios: with async scheduling (the default serving path) a request
/// that reached a prefill instance during a step is held back from the step after it; when
/// the request that step handed off was then dropped (no decode cache could hold it), the
/// instance was not listed for its next batch on a tick of step ends, so the waiting request
/// sat until the next arrival — and the last one forever, reported as left at the horizon
/// (an INV-8 panic with invariant checks). A P/D run now takes SimStep on every tick, whose
/// Transfer stage runs before the next batch is formed.
#[test]
fn a_prefill_instance_goes_on_after_dropping_a_request_no_decode_cache_holds() {
    // 3,300 + 300 − 1 tokens need 225 blocks; the decode cache has 200. Arrivals every
    // 62.5 ms, while a 3,300-token prefill takes longer: each request reaches the instance
    // during the step before its own.
    let text = r#"(seed: 3,
        cluster: (pd_first_token: Prefill, groups: [
            (name: "p", count: 1, role: Prefill, model: "llama-3.1-8b-instruct", gpu: "H100"),
            (name: "d", count: 1, role: Decode, model: "llama-3.1-8b-instruct", gpu: "H100", kv_blocks: 200)]),
        workload: (num_requests: 3, clients: [(rate_per_s: 16.0, arrival: Constant,
            input_tokens: Constant(3300), output_tokens: Constant(300))]))"#;
    let sc = parse(text);
    let (s, rows) = run(&sc);
    assert_eq!(s.requests.dropped, 3, "{:?}", s.requests);
    assert_eq!(s.requests.queued, 0, "nothing is left waiting");
    // The prefills run back to back: a first token at most one prefill (the lone first
    // request's time to its first token, API server included) after the one before.
    let first: Vec<u64> = rows
        .iter()
        .map(|r| r.u64("arrival_us") + r.us("ttft_ms"))
        .collect();
    let prefill = rows[0].us("ttft_ms");
    for k in 1..first.len() {
        assert!(
            first[k] - first[k - 1] <= prefill,
            "request {k}: first token {} µs after the one before (a prefill takes {prefill} µs)",
            first[k] - first[k - 1]
        );
    }
    // Without invariant checks, the same.
    let dir = tempfile::tempdir().unwrap();
    let sim = servesim::Simulation::new(
        &sc,
        servesim::RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!sim.uses_fast_ticks(), "P/D takes SimStep on every tick");
    assert_eq!(sim.run().unwrap(), s);
}

/// `decisions.csv` of a P/D run holds the decode-side decision of every hand-off (kind
/// `decode_route`), after its arrival's routing, to a decode instance; the summary's routing
/// statistics still count the routing of arrivals.
#[test]
fn decisions_csv_holds_each_hand_off_s_decode_decision() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = crate::common::root().join("scenarios/pd-disaggregation.ron");
    crate::common::servesim_ok(
        &[
            "run",
            scenario.to_str().unwrap(),
            "--set",
            "workload.num_requests=120",
            "--trace",
            "decisions",
            "--out",
            "o",
            "-q",
        ],
        dir.path(),
    );
    let text = std::fs::read_to_string(dir.path().join("o/decisions.csv")).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let of = |kind: &str| -> std::collections::BTreeMap<u64, (u64, u32)> {
        rows.iter()
            .filter(|r| r[8] == kind)
            .map(|r| {
                (
                    r[1].parse().unwrap(),
                    (r[0].parse().unwrap(), r[2].parse().unwrap()),
                )
            })
            .collect()
    };
    let (routed, decoded) = (of("route"), of("decode_route"));
    assert_eq!((routed.len(), decoded.len()), (120, 120));
    // Instance 0 is the prefill pool; 1..=3 decode.
    for (id, (at, to)) in &decoded {
        let (routed_at, first) = routed[id];
        assert_eq!(first, 0, "request {id}");
        assert!((1..=3).contains(to) && *at > routed_at, "request {id}");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("o/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["routing"]["decisions"], 120);
}
