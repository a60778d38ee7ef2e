//! A rough estimate of how much work a scenario asks for, so a run that will take minutes
//! says so before it starts (`servesim validate` and `run` print it on stderr).
//!
//! Work is counted in simulated output tokens: a run costs about
//! [`WALL_US_PER_OUTPUT_TOKEN`] µs of wall time per output token on the development machine
//! (100k requests × 256 tokens in ~3.5 s), plus [`WALL_US_PER_REQUEST`] per request.

use crate::scenario::{ArrivalSpec, InstanceGroup, LengthSpec, Scenario};

/// Measured wall time per simulated output token (release build), µs.
pub const WALL_US_PER_OUTPUT_TOKEN: f64 = 0.15;
/// Measured wall time per request beyond its tokens, µs.
pub const WALL_US_PER_REQUEST: f64 = 2.0;
/// Runs estimated longer than this (s) are announced.
pub const ANNOUNCE_AFTER_S: f64 = 120.0;

/// What a scenario will simulate, roughly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkEstimate {
    pub requests: f64,
    pub output_tokens: f64,
    /// Expected wall time of a release build, s.
    pub wall_s: f64,
}

/// The mean of a length distribution (clamped like sampling); `None` when a file decides.
pub fn mean_tokens(spec: &LengthSpec) -> Option<f64> {
    let clamp = |x: f64, lo: u32, hi: u32| x.clamp(f64::from(lo), f64::from(hi));
    let max = f64::from(crate::workload::lengths::MAX_TOKENS);
    Some(
        match *spec {
            LengthSpec::Constant(n) => f64::from(n),
            LengthSpec::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            LengthSpec::Normal { mean, min, max, .. } => clamp(mean, min, max),
            LengthSpec::LogNormal {
                mu,
                sigma,
                min,
                max,
            } => clamp((mu + sigma * sigma / 2.0).exp(), min, max),
            LengthSpec::Exponential { mean, min, max } => clamp(mean, min, max),
            LengthSpec::Zipf { max, exponent } => {
                // Σ k^(1−s) / Σ k^−s over the first terms (the tail adds little for s > 1).
                let n = max.min(100_000);
                let (mut num, mut den) = (0.0, 0.0);
                for k in 1..=n {
                    let p = f64::from(k).powf(-exponent);
                    num += f64::from(k) * p;
                    den += p;
                }
                num / den
            }
            LengthSpec::Empirical { .. } => return None,
        }
        .min(max),
    )
}

/// The work a scenario asks for, when its sources say how much (traces: counted from their
/// rows at validation; here they are left out).
pub fn estimate(s: &Scenario) -> WorkEstimate {
    let w = &s.workload;
    let horizon = [w.duration_s, s.horizon_s]
        .into_iter()
        .flatten()
        .fold(f64::INFINITY, f64::min);
    let mut requests = 0.0;
    let mut tokens = 0.0;
    for c in &w.clients {
        let rate = crate::workload::client_rate(s, c);
        let n = match &c.arrival {
            ArrivalSpec::AllAtZero { count } => *count as f64,
            ArrivalSpec::Staged { stages, .. } | ArrivalSpec::ConstantTimer { stages } => {
                stages.iter().map(|st| st.rate_per_s * st.duration_s).sum()
            }
            ArrivalSpec::OnOff { on_s, off_s } => {
                rate * horizon.min(1e12) * on_s / (on_s + off_s).max(1e-12)
            }
            _ => rate * horizon.min(1e12),
        };
        let turns = c
            .session
            .as_ref()
            .and_then(|x| mean_tokens(&x.turns))
            .unwrap_or(1.0);
        let n = n * turns;
        requests += n;
        tokens += n * mean_tokens(&c.output_tokens).unwrap_or(256.0);
    }
    if let Some(ip) = &w.inference_perf {
        let n: f64 = ip
            .stages
            .iter()
            .map(|st| crate::workload::inference_perf::stage_requests(st) as f64)
            .sum();
        requests += n;
        tokens += n * f64::from(ip.shared_prefix.output_len);
    }
    if let Some(limit) = w.num_requests
        && requests > limit as f64
    {
        tokens *= limit as f64 / requests;
        requests = limit as f64;
    }
    WorkEstimate {
        requests,
        output_tokens: tokens,
        wall_s: (tokens * WALL_US_PER_OUTPUT_TOKEN + requests * WALL_US_PER_REQUEST) / 1e6,
    }
}

/// A span of simulated time past which `validate` and `run` warn that an input will keep the
/// run idle or waiting: one hour for a single transfer, a day between arrivals.
const SLOW_TRANSFER_S: f64 = 3600.0;
const SPARSE_ARRIVALS_S: f64 = 86_400.0;

/// The KV block sizes vLLM's `--block-size` accepts (`BlockSize` in `vllm/config/cache.py`,
/// vLLM 0.11 to 0.15).
const VLLM_BLOCK_SIZES: [u32; 7] = [1, 8, 16, 32, 64, 128, 256];

/// A group whose longest request (its `max_model_len`, else its model's context) does not fit
/// one request's share of its derived KV cache: vLLM refuses to start such a server
/// (`check_enough_kv_cache_memory` in `vllm/v1/core/kv_cache_utils.py`: "To serve at least one
/// request with the model's max seq len …"), where servesim serves requests up to what fits and
/// drops longer ones.
struct ContextOverCache {
    /// The longest request vLLM must hold, tokens.
    longest: u64,
    /// Where that length comes from: `max_model_len`, or the model's context.
    whose: String,
    /// What one request's share of the cache holds, tokens.
    fits: u64,
}

impl ContextOverCache {
    /// "max_model_len of 200,000 tokens does not fit the KV cache a request can take (…)".
    fn what(&self) -> String {
        use crate::scenario::grouped;
        format!(
            "{} of {} tokens does not fit the KV cache a request can take ({} tokens)",
            self.whose,
            grouped(self.longest),
            grouped(self.fits)
        )
    }
}

fn context_over_cache(
    g: &crate::scenario::InstanceGroup,
    r: &crate::setup::ResolvedGroup,
) -> Option<ContextOverCache> {
    // Blocks given are vLLM's `num_gpu_blocks_override`, which it takes without this check.
    if g.kv_blocks.is_some() {
        return None;
    }
    let (longest, whose) = match (g.max_model_len, &r.model) {
        (Some(len), _) => (u64::from(len), "max_model_len".to_string()),
        (None, Some(m)) if m.max_position_embeddings > 0 => (
            m.max_position_embeddings,
            format!("{}'s context (max_model_len left out)", m.id),
        ),
        _ => return None,
    };
    (longest > r.request_kv_tokens).then_some(ContextOverCache {
        longest,
        whose,
        fits: r.request_kv_tokens,
    })
}

/// Why vLLM would not start group `i` as the scenario gives it (its context does not fit its
/// derived KV cache) and what would, for `plan`, which leaves such a configuration out rather
/// than recommend a server that does not start; `None` when it would start (or the group does
/// not resolve: the loader has said why).
pub fn refused_at_start(
    s: &Scenario,
    i: usize,
    catalog: &crate::catalog::Catalog,
) -> Option<String> {
    let r = super::resolve_group(s, i, catalog).ok()?;
    let c = context_over_cache(&s.cluster.groups[i], &r)?;
    Some(format!(
        "{}; give max_model_len at most {} to plan it",
        c.what(),
        crate::scenario::grouped(c.fits)
    ))
}

/// Clients whose shortest request (shared prefix, shortest prompt and shortest answer) is
/// longer than any group's instances hold (their KV cache for one request and their
/// `max_model_len`, given or derived): every request they send will be dropped as
/// unservable, which the run only says at its end.
fn never_served(s: &Scenario, catalog: &crate::catalog::Catalog) -> Vec<String> {
    let groups: Vec<(usize, u64)> = (0..s.cluster.groups.len())
        .filter_map(|i| {
            let r = super::resolve_group(s, i, catalog).ok()?;
            let len = r.max_model_len.map_or(u64::MAX, u64::from);
            Some((i, r.request_kv_tokens.min(len)))
        })
        .collect();
    // A group that does not resolve has its own error; nothing is said then.
    let Some(&(most_at, most)) = groups.iter().max_by_key(|(_, n)| *n) else {
        return Vec::new();
    };
    if groups.len() < s.cluster.groups.len() {
        return Vec::new();
    }
    let mut w = Vec::new();
    for (i, c) in s.workload.clients.iter().enumerate() {
        // An empirical file's lengths are not known here (its smallest reads as 0).
        let prompt = u64::from(c.shared_prefix_tokens) + u64::from(c.input_tokens.min_value());
        let shortest = prompt + u64::from(c.output_tokens.min_value().max(1)) - 1;
        if shortest > most {
            w.push(format!(
                "workload.clients[{i}]: its shortest request ({} prompt tokens and {} output tokens) is longer than any instance holds (at most {} tokens of one request, cluster.groups[{most_at}]: its KV cache and max_model_len): every request it sends will be dropped as unservable",
                crate::scenario::grouped(prompt),
                crate::scenario::grouped(u64::from(c.output_tokens.min_value())),
                crate::scenario::grouped(most)
            ));
        }
    }
    w
}

/// The built-in batch schedulers that take no `long_prefill_token_threshold` (vLLM v0 runs
/// whole prompts, the others have their own budgets); a scheduler of the user's may read it.
const BUILT_IN_WITHOUT_THRESHOLD: [&str; 5] = [
    "vllm_v0",
    "sarathi",
    "orca",
    "faster_transformer",
    "lightllm",
];

/// Inputs that will leave a run idle or waiting for long simulated spans (a KV or host link
/// so slow that one prompt's KV takes hours to move, alpha overheads that hold a prompt for
/// hours, arrivals days apart), a step token budget below the batch limit, a block size vLLM
/// does not offer or a context the KV cache cannot hold (vLLM refuses all three), as
/// warnings. The run handles them (idle spans cost nothing, see docs/guarantees.md), but they
/// are more often a wrong unit or a slip than an intent.
pub fn slow_inputs(s: &Scenario, catalog: &crate::catalog::Catalog) -> Vec<String> {
    let mut w = Vec::new();
    let prompts: Vec<f64> = s
        .workload
        .clients
        .iter()
        .filter_map(|c| mean_tokens(&c.input_tokens))
        .collect();
    let prompt = if prompts.is_empty() {
        1024.0
    } else {
        prompts.iter().sum::<f64>() / prompts.len() as f64
    };
    let span = |secs: f64| {
        if secs >= 86_400.0 * 1e6 {
            format!("{:.1e} days", secs / 86_400.0)
        } else if secs >= 86_400.0 {
            format!("{:.1} days", secs / 86_400.0)
        } else {
            format!("{:.1} hours", secs / 3600.0)
        }
    };
    for (i, g) in s.cluster.groups.iter().enumerate() {
        let Ok(r) = super::resolve_group(s, i, catalog) else {
            continue;
        };
        if g.block_size > 0 && !VLLM_BLOCK_SIZES.contains(&g.block_size) {
            w.push(format!(
                "cluster.groups[{i}].block_size = {}: vLLM's --block-size is one of {} (`BlockSize` in vllm/config/cache.py); this runs as a what-if",
                g.block_size,
                VLLM_BLOCK_SIZES.map(|b| b.to_string()).join(", ")
            ));
        }
        if let Some(note) = newer_release(g) {
            w.push(format!("cluster.groups[{i}].engine.vllm: {note}"));
        }
        if let (Some(len), Some(m)) = (g.max_model_len, &r.model)
            && m.max_position_embeddings > 0
            && u64::from(len) > m.max_position_embeddings
        {
            // vLLM's `_get_and_verify_max_len` (vllm/config/model.py) raises unless the
            // environment says VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.
            w.push(format!(
                "cluster.groups[{i}].max_model_len = {} is above {}'s context of {} tokens \
                 (max_position_embeddings, with its RoPE scaling): vLLM refuses it (\"User-specified \
                 max_model_len … is greater than the derived max_model_len\") unless \
                 VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and warns that positions past the context give \
                 NaN; this runs as a what-if",
                crate::scenario::grouped(len.into()),
                m.id,
                crate::scenario::grouped(m.max_position_embeddings)
            ));
        }
        if let Some(note) = cache_over_memory(g, &r) {
            w.push(format!("cluster.groups[{i}].kv_blocks = {note}"));
        }
        if let Some(c) = context_over_cache(g, &r) {
            let fits = crate::scenario::grouped(c.fits);
            w.push(format!(
                "cluster.groups[{i}]: {}: vLLM refuses to start such a server (\"To serve at least \
                 one request with the model's max seq len …\"); here requests longer than {fits} \
                 tokens are dropped. Give max_model_len at most {fits}, as vLLM's message asks, \
                 or more KV memory",
                c.what()
            ));
        }
        if let Some(m) = r
            .model
            .as_ref()
            .filter(|m| m.multimodal && g.kv_blocks.is_none())
        {
            w.push(format!(
                "cluster.groups[{i}]: {} is multimodal: vLLM also loads its vision encoder and profiles it with the largest image input, memory the derived KV cache does not set aside (Llama-4-Scout-FP8 on 2 H100s: 43 % more blocks than vLLM sized); give kv_blocks from vLLM's start-up log (\"GPU KV cache size: N tokens\" ÷ block_size)",
                m.id
            ));
        }
        if let Some(note) = r
            .latency
            .unpriced_steps(r.max_num_seqs, r.max_num_batched_tokens)
        {
            w.push(format!("cluster.groups[{i}].latency: {note}"));
        }
        if g.long_prefill_token_threshold > 0
            && BUILT_IN_WITHOUT_THRESHOLD.contains(&g.scheduler.as_str())
        {
            w.push(format!(
                "cluster.groups[{i}].long_prefill_token_threshold is not used: it caps a prefill chunk of the vllm_v1 scheduler, and the {} scheduler does not read it",
                g.scheduler
            ));
        }
        if g.lora.is_some() && s.workload.adapters.is_none() {
            w.push(format!(
                "cluster.groups[{i}].lora: the workload declares no adapters (workload.adapters), so no request uses LoRA: the block only takes its adapter slots' memory from the KV cache"
            ));
        }
        if r.max_num_batched_tokens < r.max_num_seqs {
            w.push(format!(
                "cluster.groups[{i}].max_num_batched_tokens = {} is below max_num_seqs = {}{}: vLLM refuses this (its scheduler config requires max_num_batched_tokens ≥ max_num_seqs); here a step takes at most {} tokens, so at most that many requests advance per step",
                r.max_num_batched_tokens,
                r.max_num_seqs,
                if g.max_num_seqs.is_none() { " (its default)" } else { "" },
                r.max_num_batched_tokens
            ));
        }
        let gpus = f64::from(g.tp.max(1) * g.pp.max(1));
        if g.role != crate::scenario::Role::Mixed && r.kv_bytes_per_token > 0.0 {
            let secs = prompt * r.kv_bytes_per_token / (g.kv_link() * 1e9 * gpus);
            if secs > SLOW_TRANSFER_S {
                w.push(format!(
                    "cluster.groups[{i}].kv_link_gb_per_s = {}: moving one mean prompt's KV ({prompt:.0} tokens, {:.1} MB) to the decode pool takes {} — every request waits that long (is it in GB/s?)",
                    g.kv_link(),
                    prompt * r.kv_bytes_per_token / 1e6,
                    span(secs)
                ));
            }
        }
        let delay = r
            .latency
            .queueing_delay(prompt.round() as u32)
            .as_secs_f64();
        if delay > SLOW_TRANSFER_S {
            w.push(format!(
                "cluster.groups[{i}].latency: its alpha overheads hold one mean prompt ({prompt:.0} tokens) {} before it reaches the engine — every request waits that long (are the alphas in µs?)",
                span(delay)
            ));
        }
        if let Some((_, us_per_block, _)) = r.cpu_tier {
            let secs = (prompt / f64::from(g.block_size.max(1))).ceil() * us_per_block / 1e6;
            if secs > SLOW_TRANSFER_S {
                w.push(format!(
                    "cluster.groups[{i}]: the CPU KV tier's host link moves one mean prompt's blocks in {} (is host_link_gb_per_s in GB/s?)",
                    span(secs)
                ));
            }
        }
    }
    w.extend(never_served(s, catalog));
    w.extend(crate::autoscale::scheduled_out_of_bounds(s));
    w.extend(crate::autoscale::one_way_threshold(s));
    let defaults = crate::scenario::PolicySpec::default();
    if (s.policies.decode_routing != defaults.decode_routing
        || !s.policies.decode_routing_params.is_empty())
        && !s
            .cluster
            .groups
            .iter()
            .any(|g| g.role == crate::scenario::Role::Decode)
    {
        w.push(format!(
            "policies.decode_routing = {:?} is not used: it picks the decode instance of a prefill/decode hand-off, and no group has role: Decode",
            s.policies.decode_routing
        ));
    }
    if !s
        .cluster
        .groups
        .iter()
        .any(|g| g.role == crate::scenario::Role::Prefill)
    {
        // Both settle a prefill/decode hand-off; without one they pass unread.
        let c = &s.cluster;
        let pd_only = [
            (
                c.kv_transfer_layerwise,
                "kv_transfer_layerwise = true",
                "streams a prompt's KV to the decode instance layer by layer",
            ),
            (
                c.pd_first_token == crate::scenario::PdFirstToken::Prefill,
                "pd_first_token = Prefill",
                "says which instance of a prefill/decode hand-off sends the first token",
            ),
        ];
        for (_, given, what) in pd_only.into_iter().filter(|(set, ..)| *set) {
            w.push(format!(
                "cluster.{given} is not used: it {what}, and no group has role: Prefill"
            ));
        }
    }
    w.extend(sessionless_affinity(s));
    w.extend(crate::policy::unclassed_sources(s));
    w.extend(crate::metrics::unpriced_cost_fitness(s));
    if s.policies.priority != "constant" {
        let given = format!("policies.priority = {:?}", s.policies.priority);
        w.extend(priority_unused(s, &given));
    }
    for (i, c) in s.workload.clients.iter().enumerate() {
        for (field, spec) in [
            ("input_tokens", &c.input_tokens),
            ("output_tokens", &c.output_tokens),
        ] {
            if let Some(note) = clamped_length(spec) {
                w.push(format!("workload.clients[{i}].{field}: {note}"));
            }
        }
        // These take no rate: one given is not used (a sweep may vary the arrival of a client
        // whose rate the other arrivals use, so this is a warning, not an error).
        let unused = match c.arrival {
            ArrivalSpec::AllAtZero { .. } => Some("AllAtZero sends its count at t = 0"),
            ArrivalSpec::Staged { .. } | ArrivalSpec::ConstantTimer { .. } => {
                Some("staged arrivals take their rates from their stages")
            }
            _ => None,
        };
        if let Some(why) = unused {
            let given = [("rate_per_s", c.rate_per_s), ("rate_share", c.rate_share)];
            if let Some((field, _)) = given.iter().find(|(_, v)| v.is_some()) {
                w.push(format!("workload.clients[{i}].{field} is not used: {why}"));
            }
            continue;
        }
        let rate = crate::workload::client_rate(s, c);
        if rate > 0.0 && 1.0 / rate > SPARSE_ARRIVALS_S {
            w.push(format!(
                "workload.clients[{i}]: requests arrive about every {} ({rate:.3e} req/s): the run will be idle most of its simulated time (is the rate per second?)",
                span(1.0 / rate)
            ));
        }
    }
    w
}

/// A given `kv_blocks` that no GPU of the group could hold beside the weights (and a
/// drafter's, and LoRA slots), even at `gpu_memory_utilization` 1.0 with nothing set aside
/// but vLLM's other memory: what the warning says after "kv_blocks = ".
fn cache_over_memory(g: &InstanceGroup, r: &crate::setup::ResolvedGroup) -> Option<String> {
    use crate::model::{CUDA_WITHHELD_GIB, VLLM_OTHER_GIB};
    let (blocks, m, gpu) = (g.kv_blocks?, r.model.as_ref()?, r.gpu.as_ref()?);
    let gib = f64::from(1u32 << 30);
    let (gpus, ranks) = (f64::from(g.gpus().max(1)), f64::from(g.dp()));
    let (draft_gib, draft_kv) = r.speculative.as_ref().map_or((0.0, 0.0), |c| {
        (c.draft_weights_gib, c.draft_kv_bytes_per_token)
    });
    let slots_gib = r.lora.as_ref().map_or(0.0, |l| l.slots_gib());
    let weights = crate::model::replica_weights_gib(m, crate::model::Replica::of(g)) / gpus;
    let extra = (draft_gib + slots_gib) * ranks / gpus;
    let block = r.kv_layout.map_or_else(
        || {
            let per_token = crate::model::kv_bytes_per_token(m, g.tp, g.pp) + draft_kv;
            (per_token * f64::from(g.block_size)).trunc()
        },
        |l| l.page_bytes,
    );
    let cache = block * f64::from(blocks) / ranks / gib;
    let memory = gpu.memory_gib - CUDA_WITHHELD_GIB;
    let need = weights + extra + VLLM_OTHER_GIB + cache;
    (need > memory).then(|| {
        let beside = match (draft_gib > 0.0, slots_gib > 0.0) {
            (false, false) => String::new(),
            (true, false) => " and its drafter's".into(),
            (false, true) => " and its LoRA slots".into(),
            (true, true) => ", its drafter's and its LoRA slots".into(),
        };
        format!(
            "{} ({cache:.1} GiB per GPU) with {}'s weights{beside} ({:.1} GiB per GPU) and \
             {VLLM_OTHER_GIB} GiB of other memory needs {need:.1} GiB on each GPU, more than the \
             {}'s {memory:.1} GiB: no vLLM server holds this, even at gpu_memory_utilization \
             1.0; this runs as a what-if (leave kv_blocks out to derive it, or use more GPUs: \
             tp)",
            crate::scenario::grouped(blocks.into()),
            m.id,
            weights + extra,
            gpu.id
        )
    })
}

/// `session_affinity` routing where no source makes sessions (a client's `session`, or an
/// inference-perf load's multi-turn chat): it routes every request as `least_outstanding`.
fn sessionless_affinity(s: &Scenario) -> Vec<String> {
    let w = &s.workload;
    let sessions = w.clients.iter().any(|c| c.session.is_some())
        || w.inference_perf
            .as_ref()
            .is_some_and(|ip| ip.shared_prefix.enable_multi_turn_chat);
    let decodes = s
        .cluster
        .groups
        .iter()
        .any(|g| g.role == crate::scenario::Role::Decode);
    let p = &s.policies;
    [
        ("routing", &p.routing, true),
        ("decode_routing", &p.decode_routing, decodes),
    ]
    .into_iter()
    .filter(|&(_, name, used)| !sessions && used && name == "session_affinity")
    .map(|(field, _, _)| {
        format!(
            "policies.{field} = \"session_affinity\" keeps a session's turns on one \
                 instance, and no source makes sessions (a client's `session`, or \
                 inference_perf's enable_multi_turn_chat): every request goes to the least \
                 outstanding instance, as with \"least_outstanding\""
        )
    })
    .collect()
}

/// A priority policy (`given` names it) that orders nothing: the wait queues are served in
/// arrival order (`fcfs`) and preemption takes the batch's tail, so no decision reads a
/// priority (it only feeds the priority-inversion count).
pub fn priority_unused(s: &Scenario, given: &str) -> Option<String> {
    (s.policies.scheduling == "fcfs"
        && s.policies.preemption == crate::scenario::PreemptionOrder::Tail)
        .then(|| {
            format!(
                "{given} orders nothing here: scheduling \"fcfs\" serves each queue in arrival \
                 order and preemption takes the batch's tail; give policies.scheduling \
                 \"priority_fcfs\" or policies.preemption Priority for it to take effect"
            )
        })
}

/// What a group's `engine.vllm` release changed after the releases servesim's serving path
/// was taken from (0.11–0.15), as far as vLLM's pull requests say: the one change whose
/// release is known is modelled (no tokenizer micro-batch from 0.24.0), the others named.
fn newer_release(g: &crate::scenario::InstanceGroup) -> Option<String> {
    use crate::scenario::VllmRelease;
    let e = g.engine.as_ref()?;
    let r = e.release()?;
    let m = VllmRelease::MEASURED;
    if (r.major, r.minor) <= (m.major, m.minor) {
        return None;
    }
    let modelled = if r >= VllmRelease::NO_TOKENIZER_BATCH && e.tokenizer_window_us.is_none() {
        format!(
            ", without the API server's 2 ms tokenizer micro-batch (vLLM PR #45759 removed it; {} no longer has it)",
            VllmRelease::NO_TOKENIZER_BATCH
        )
    } else {
        String::new()
    };
    // (NCCL symmetric memory's new size ranges, PR #33839, stay behind
    // VLLM_USE_NCCL_SYMM_MEM=1, off by default: not a change to what a default server runs.)
    let not_modelled = if g.tp > 1 {
        " A change since 0.15 to what it prices that is not modelled: FlashInfer's fused all-reduce + RMSNorm turned on by default on Hopper with TP > 1 (PR #34299, February 2026)"
    } else {
        ""
    };
    Some(format!(
        "vLLM {r} is newer than the releases servesim's serving path was taken from (0.11 to {m}): it is priced as {m}{modelled}.{not_modelled}"
    ))
}

/// The warnings of many runs (`found`: each run's label, unique, and its warnings), each said
/// once: plainly when every run has it, else after the labels of the runs that have it (five
/// named, the rest counted); past ten warnings the rest are counted in one (a sweep over a
/// memory or length axis can give each point its own wording of one warning). `what` names a run ("point"),
/// `how` says how `servesim validate` reproduces one ("with a point's values as --set").
/// What `sweep` and `plan` print, and Python's `sweep` and `plan` issue.
pub fn said_once(found: &[(String, Vec<String>)], what: &str, how: &str) -> Vec<String> {
    const NAMED: usize = 5;
    const SAID: usize = 10;
    let mut said: Vec<(&str, Vec<&str>)> = Vec::new();
    for (at, warnings) in found {
        for w in warnings {
            match said.iter_mut().find(|(t, _)| *t == w) {
                Some((_, ats)) => ats.push(at),
                None => said.push((w, vec![at])),
            }
        }
    }
    let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    let mut lines: Vec<String> = said
        .iter()
        .take(SAID)
        .map(|(w, at)| {
            if at.len() == found.len() {
                (*w).to_string()
            } else {
                let more = match at.len().saturating_sub(NAMED) {
                    0 => String::new(),
                    n => format!(" and {n} more {what}{}", if n == 1 { "" } else { "s" }),
                };
                let named = at.iter().take(NAMED).copied().collect::<Vec<_>>();
                format!("at {}{more}: {w}", named.join("; "))
            }
        })
        .collect();
    if said.len() > SAID {
        let runs = said[SAID..]
            .iter()
            .flat_map(|(_, at)| at)
            .collect::<std::collections::HashSet<_>>()
            .len();
        lines.push(format!(
            "{} more warnings, at {} (`servesim validate` {how} says them)",
            said.len() - SAID,
            plural(runs, what)
        ));
    }
    lines
}

/// A length distribution that puts nearly all its draws (more than 99.8 %) outside its
/// [min, max], so they are clamped to one bound and the client sends (nearly) a constant
/// length: more often a slip (a swapped min and mean, `mu` given as a length rather than its
/// logarithm) than an intent. A `Normal` whose mean lies more than three standard deviations
/// outside, a `LogNormal` whose `mu` does in log space, an `Exponential` whose draws fall
/// below `min` or above `max` that often.
fn clamped_length(spec: &LengthSpec) -> Option<String> {
    // One tail of a normal beyond three standard deviations: 0.135 %.
    const TAIL: f64 = 0.00135;
    let outside = |centre: f64, spread: f64, lo: f64, hi: f64| {
        if centre - 3.0 * spread > hi {
            Some(true)
        } else if centre + 3.0 * spread < lo {
            Some(false)
        } else {
            None
        }
    };
    // 1e-300 as 1e-300, not 300 zeros.
    let num = |v: f64| {
        if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
            format!("{v:e}")
        } else {
            format!("{v}")
        }
    };
    let (above, what, min, max) = match *spec {
        LengthSpec::Normal {
            mean,
            stdev,
            min,
            max,
        } => (
            outside(mean, stdev, f64::from(min), f64::from(max))?,
            format!(
                "Normal(mean: {}, stdev: {}) lies more than three stdev outside [{min}, {max}]",
                num(mean),
                num(stdev)
            ),
            min,
            max,
        ),
        LengthSpec::LogNormal {
            mu,
            sigma,
            min,
            max,
        } => {
            let (lo, hi) = (f64::from(min.max(1)).ln(), f64::from(max).ln());
            (
                outside(mu, sigma, lo, hi)?,
                format!(
                    "LogNormal(mu: {}, sigma: {}) lies more than three sigma outside \
                     [ln {min}, ln {max}] = [{lo:.2}, {hi:.2}] (mu is the logarithm of the \
                     median length)",
                    num(mu),
                    num(sigma)
                ),
                min,
                max,
            )
        }
        LengthSpec::Exponential { mean, min, max } => {
            // P(X > max) = e^(−max/mean); P(X < min) = 1 − e^(−min/mean).
            let above = (-f64::from(max) / mean).exp() > 1.0 - TAIL;
            if !above && (-f64::from(min) / mean).exp() >= TAIL {
                return None;
            }
            let side = if above {
                format!("above its max ({max})")
            } else {
                format!("below its min ({min})")
            };
            (
                above,
                format!(
                    "Exponential(mean: {}) puts more than 99.8 % of its draws {side}",
                    num(mean)
                ),
                min,
                max,
            )
        }
        _ => return None,
    };
    let bound = if above { max } else { min };
    Some(format!("{what}: nearly every length is clamped to {bound}"))
}

impl WorkEstimate {
    /// A line for stderr when the run will take a while, else `None`.
    pub fn announcement(&self) -> Option<String> {
        (self.wall_s.is_finite() && self.wall_s > ANNOUNCE_AFTER_S).then(|| {
            format!(
                "this scenario simulates about {:.3e} requests and {:.3e} output tokens: expect roughly {:.0} minutes of wall time in a release build (--max-wall-s stops a run cleanly)",
                self.requests,
                self.output_tokens,
                self.wall_s / 60.0
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_runs_warnings_are_said_once_each() {
        let run =
            |at: &str, w: &[&str]| (at.to_string(), w.iter().map(|s| s.to_string()).collect());
        let found: Vec<(String, Vec<String>)> = vec![
            run("a", &["every", "two"]),
            run("b", &["every"]),
            run("c", &["every", "two"]),
        ];
        assert_eq!(
            said_once(&found, "point", "so"),
            ["every", "at a; c: two"],
            "plainly when all have it, else after those that have it"
        );
        // Seven runs with one warning, another on its own: five named, the rest counted.
        let mut found: Vec<(String, Vec<String>)> =
            (1..=7).map(|i| run(&format!("p{i}"), &["w"])).collect();
        found.push(run("p8", &[]));
        assert_eq!(
            said_once(&found, "point", "so"),
            ["at p1; p2; p3; p4; p5 and 2 more points: w"]
        );
        // Twelve distinct warnings at two runs: ten said, two counted with their runs.
        let words: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
        let found = vec![
            ("x".to_string(), words[..11].to_vec()),
            ("y".to_string(), vec![words[11].clone()]),
        ];
        let said = said_once(&found, "configuration", "with its values");
        assert_eq!(said.len(), 11);
        assert_eq!(said[0], "at x: w0");
        assert_eq!(
            said[10],
            "2 more warnings, at 2 configurations (`servesim validate` with its values says them)"
        );
    }

    #[test]
    fn means_of_the_length_distributions() {
        assert_eq!(mean_tokens(&LengthSpec::Constant(7)), Some(7.0));
        assert_eq!(
            mean_tokens(&LengthSpec::Uniform { min: 10, max: 20 }),
            Some(15.0)
        );
        let z = mean_tokens(&LengthSpec::Zipf {
            max: 2,
            exponent: 1.0,
        })
        .unwrap();
        // P(1) = 2/3, P(2) = 1/3: mean 4/3.
        assert!((z - 4.0 / 3.0).abs() < 1e-12);
    }
}
