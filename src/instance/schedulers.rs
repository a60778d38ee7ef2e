//! Batch schedulers: how an instance forms each step's batch, selectable per group
//! (`scheduler`, `scheduler_params`). Every scheduler fills [`Scheduler::plan`] from the
//! running batch and the wait queue and uses the same KV cache, latency models, step
//! completion and invariants; one file plus one registration adds a new one
//! (`app.add_policy::<BatchFormation>(entry)`: batch formation is a policy family like
//! routing, [`BatchFormation`]).
//!
//! | name | source | rule |
//! |---|---|---|
//! | `vllm_v1` | vLLM v1 (default) | see [`super::batch`]: chunked prefill, running first, token budget |
//! | `vllm_v0` | vLLM v0 before chunked prefill | a step is all prefills (whole prompts, waiting requests admitted first) or all decodes, never mixed |
//! | `sarathi` | Sarathi-Serve (OSDI 2024) | stall-free batching: every decode first, then prefill chunks into a fixed `chunk_size` budget |
//! | `orca` | Orca (OSDI 2022) | iteration-level batching; KV for the whole request (prompt + output) reserved at admission, no preemption; whole prompts |
//! | `faster_transformer` | FasterTransformer | static request-level batches: a batch runs until every member finished; no one joins in between |
//! | `lightllm` | LightLLM router | admits while the estimated future peak of KV use (every running request to its end) fits; prefill steps and decode steps alternate |
//!
//! A new scheduler is one file and one registration:
//! ```
//! use servesim::instance::batch::Ordering;
//! use servesim::instance::schedulers::{BatchFormation, BatchScheduler, BatcherEntry};
//! use servesim::policy::PolicyAppExt;
//! use servesim::instance::{Limits, Planned, Scheduler};
//! use servesim::kv::KvCache;
//! use servesim::{RunOptions, SimTime, Simulation};
//!
//! /// One request at a time, start to end, its whole KV reserved up front.
//! struct OneAtATime;
//!
//! impl BatchScheduler for OneAtATime {
//!     fn form(&mut self, s: &mut Scheduler, kv: &mut KvCache, _: &Limits, now: SimTime, _: &Ordering<'_>) {
//!         s.plan.clear();
//!         if s.running.is_empty() {
//!             let Some(mut seq) = s.waiting.pop_front() else { return };
//!             let (content, input) = (seq.spec.content.clone(), seq.spec.input_tokens);
//!             if !kv.admit(&mut seq.kv, &content, input, 0, input + seq.spec.output_tokens) {
//!                 s.waiting.push_front(seq);
//!                 return;
//!             }
//!             seq.first_scheduled.get_or_insert(now);
//!             s.running.push(seq);
//!         }
//!         let seq = &s.running[0];
//!         let tokens = seq.known_tokens() - seq.progress;
//!         s.plan.push(Planned { slot: 0, tokens, prefill: seq.in_prefill(), context: seq.progress });
//!     }
//! }
//!
//! let mut app = servesim::default_app();
//! app.add_policy::<BatchFormation>(BatcherEntry {
//!     name: "one_at_a_time",
//!     description: "one request at a time",
//!     params: &[],
//!     free_params: false,
//!     build: |_| Ok(Box::new(OneAtATime)),
//! });
//! let catalog = app.world().resource::<servesim::policy::Catalog>();
//! let scenario = servesim::scenario::parse(
//!     "(cluster: (groups: [(scheduler: \"one_at_a_time\", kv_blocks: 100,
//!         latency: Blackbox(alpha: [0.0, 0.0, 0.0], beta: [1000.0, 0.0, 0.0]))]),
//!       workload: (clients: [(arrival: AllAtZero(count: 3), input_tokens: Constant(16),
//!         output_tokens: Constant(4))]))",
//!     "example.ron", &[], catalog,
//! ).unwrap();
//! let options = RunOptions { check_invariants: true, ..Default::default() };
//! let summary = Simulation::from_app(app, &scenario, options).unwrap().run().unwrap();
//! assert_eq!(summary.requests.completed, 3);
//! // 4 steps of 1 ms each, one request after the other: the last ends at 12 ms.
//! assert_eq!(summary.e2e_ms.max, Some(12.0));
//! ```

use bevy_app::App;
use bevy_ecs::prelude::*;

use super::batch::{Grow, Ordering, form_batch, grow_or_preempt, order_waiting};
use super::{Limits, Planned, Scheduler, Seq};
use crate::kv::KvCache;
use crate::policy::{Entry, PolicyAppExt, PolicyArgs, PolicyFamily};
use crate::time::SimTime;

/// Forms one instance's batches.
pub trait BatchScheduler: Send + Sync + 'static {
    /// Fills `sched.plan` (cleared first) with the next step: which running requests compute
    /// how many tokens, after moving waiting requests into `sched.running` (with their KV
    /// blocks) or preempted ones back to `sched.waiting` (front). Called only when the
    /// instance is free and has work.
    fn form(
        &mut self,
        sched: &mut Scheduler,
        kv: &mut KvCache,
        limits: &Limits,
        now: SimTime,
        ordering: &Ordering<'_>,
    );

    /// True if, given a running batch of decodes only (each emitted a token in the last step)
    /// and nothing to admit, this scheduler plans every running request for one token, in
    /// running order, growing KV blocks in that order, as vLLM v1 does. The instance then
    /// takes such steps without calling [`form`](Self::form), in O(1)
    /// (`instance::lockstep`). Default: false.
    fn lockstep_decodes(&self) -> bool {
        false
    }
}

/// A named batch scheduler constructor (parameters from `scheduler_params`).
pub type BatcherEntry = Entry<dyn BatchScheduler>;

/// An instance's batch scheduler (each instance has its own state).
#[derive(Component)]
pub struct Batcher(pub Box<dyn BatchScheduler>);

/// The batch-formation family: a group's `scheduler` (and `scheduler_params`) names one of
/// its members; each instance builds its own ([`Batcher`]).
pub struct BatchFormation;

impl PolicyFamily for BatchFormation {
    type Policy = dyn BatchScheduler;
    const NAME: &'static str = "scheduler";
}

/// Registers the built-in schedulers.
pub fn register_builtins(app: &mut App) {
    for e in [
        VLLM_V1,
        VLLM_V0,
        SARATHI,
        ORCA,
        FASTER_TRANSFORMER,
        LIGHTLLM,
    ] {
        app.add_policy::<BatchFormation>(e);
    }
}

/// A whole-number parameter ≥ 0 (0 = "use the group's max_num_seqs" where documented).
fn count(args: &PolicyArgs<'_>, name: &str, default: f64) -> Result<u32, String> {
    let v = args.at_least(name, default, 0.0)?;
    if v.fract() != 0.0 || v > 1e9 {
        return Err(format!("{name} must be a whole number, got {v}"));
    }
    Ok(v as u32)
}

/// Admits waiting requests, head first, up to `cap` running (0: `max_num_seqs`), each with KV
/// for its whole prompt + output reserved and no prefix-cache hits (Orca, FasterTransformer).
fn admit_whole_requests(
    s: &mut Scheduler,
    kv: &mut KvCache,
    l: &Limits,
    cap: u32,
    now: SimTime,
    o: &Ordering<'_>,
) {
    let cap = if cap == 0 { l.max_num_seqs } else { cap };
    order_waiting(s, now, o);
    while (s.running.len() as u32) < cap && admit_head(s, kv, |_, whole| whole, false, now) {}
}

/// Plans every running request (not in a pipeline micro-batch) for all it has left to
/// compute: a whole prompt, or one decode token.
fn plan_every_running(s: &mut Scheduler, l: &Limits, now: SimTime) {
    for i in 0..s.running.len() {
        let seq = &s.running[i];
        if l.pp > 1 && seq.busy_until > now {
            continue;
        }
        let (tokens, prefill) = (seq.known_tokens() - seq.progress, seq.in_prefill());
        plan(s, i, tokens.max(1), prefill);
    }
}

/// A prefill-only step (vLLM v0, LightLLM): waiting requests' whole prompts (a preempted
/// request recomputes all it knows), admitted head first while they fit the token budget,
/// `max_num_seqs`, `may_admit` and the KV cache; a prompt longer than the budget runs alone.
/// False if nothing was admitted.
fn prefill_step(
    s: &mut Scheduler,
    kv: &mut KvCache,
    l: &Limits,
    now: SimTime,
    o: &Ordering<'_>,
    use_cache: bool,
    mut may_admit: impl FnMut(&Seq, &Scheduler) -> bool,
) -> bool {
    order_waiting(s, now, o);
    let mut budget = l.max_num_batched_tokens;
    while (s.running.len() as u32) < l.max_num_seqs {
        let Some(head) = s.waiting.front() else { break };
        let need = head.known_tokens();
        if need > budget && !(s.plan.is_empty() && budget == l.max_num_batched_tokens) {
            break;
        }
        if !may_admit(head, s) || !admit_head(s, kv, |known, _| known, use_cache, now) {
            break;
        }
        let slot = s.running.len() - 1;
        let tokens = s.running[slot].known_tokens() - s.running[slot].progress;
        plan(s, slot, tokens, true);
        budget = budget.saturating_sub(tokens);
    }
    !s.plan.is_empty()
}

/// A decode-only step: one token for every running request, preempting the tail
/// (recompute) when the KV cache cannot grow (vLLM v0, LightLLM).
fn decode_step(s: &mut Scheduler, kv: &mut KvCache, l: &Limits, now: SimTime, o: &Ordering<'_>) {
    let mut preempted = false;
    let mut i = 0;
    while i < s.running.len() {
        if l.pp > 1 && s.running[i].busy_until > now {
            i += 1;
            continue;
        }
        let target = s.running[i].progress + 1;
        match grow_or_preempt(s, kv, i, target, now, o, &mut preempted) {
            Grow::Fits => {}
            Grow::Wait => {
                i += 1;
                continue;
            }
            Grow::Stop => break,
        }
        plan(s, i, 1, false);
        i += 1;
    }
}

fn plan(sched: &mut Scheduler, slot: usize, tokens: u32, prefill: bool) {
    let context = sched.running[slot].progress;
    sched.plan.push(Planned {
        slot: slot as u32,
        tokens,
        prefill,
        context,
    });
}

/// Moves the head of the wait queue into the running batch with `reserve` tokens of KV
/// (prefix-cache hits claimed when `use_cache`); false if it does not fit.
fn admit_head(
    sched: &mut Scheduler,
    kv: &mut KvCache,
    reserve: impl Fn(u32, u32) -> u32,
    use_cache: bool,
    now: SimTime,
) -> bool {
    let Some(head) = sched.waiting.front_mut() else {
        return false;
    };
    let known = head.known_tokens();
    let cached = if use_cache {
        kv.cached_prefix_blocks(&head.spec.content, head.spec.input_tokens, known)
    } else {
        0
    };
    let start = cached * kv.block_size();
    let content = head.spec.content.clone();
    let input = head.spec.input_tokens;
    let want = reserve(known, head.spec.input_tokens + head.spec.output_tokens).max(start);
    if !kv.admit(&mut head.kv, &content, input, cached, want) {
        return false;
    }
    let mut seq = sched.waiting.pop_front().expect("head exists");
    seq.progress = start;
    seq.cached_tokens = start;
    seq.first_scheduled.get_or_insert(now);
    sched.running.push(seq);
    true
}

// ---------------------------------------------------------------------------------------

pub const VLLM_V1: BatcherEntry = BatcherEntry {
    name: "vllm_v1",
    description: "vLLM v1 (default): running requests first, chunked prefill into the token budget, tail preemption",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(VllmV1)),
};

struct VllmV1;

impl BatchScheduler for VllmV1 {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        form_batch(s, kv, l, now, o);
    }

    fn lockstep_decodes(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------

pub const VLLM_V0: BatcherEntry = BatcherEntry {
    name: "vllm_v0",
    description: "vLLM v0 without chunked prefill: a prefill step of whole prompts whenever a waiting request fits, else a decode step; never mixed",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(VllmV0)),
};

struct VllmV0;

impl BatchScheduler for VllmV0 {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        if !prefill_step(s, kv, l, now, o, true, |_, _| true) {
            decode_step(s, kv, l, now, o);
        }
    }
}

// ---------------------------------------------------------------------------------------

pub const SARATHI: BatcherEntry = BatcherEntry {
    name: "sarathi",
    description: "Sarathi-Serve stall-free batching: every running decode first, then prefill chunks (running, then waiting) into a fixed chunk_size token budget",
    params: &[(
        "chunk_size",
        "tokens per step, decodes included (default 512)",
    )],
    free_params: false,
    build: |args| {
        let chunk = count(args, "chunk_size", 512.0)?;
        if chunk == 0 {
            return Err("chunk_size must be ≥ 1".into());
        }
        Ok(Box::new(Sarathi { chunk }))
    },
};

struct Sarathi {
    chunk: u32,
}

impl BatchScheduler for Sarathi {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        let mut budget = self.chunk;
        let mut preempted = false;
        // Pass 1: decodes; pass 2: prefill chunks of running requests.
        for decodes in [true, false] {
            let mut i = 0;
            while i < s.running.len() && budget > 0 {
                let seq = &s.running[i];
                if seq.in_prefill() == decodes || (l.pp > 1 && seq.busy_until > now) {
                    i += 1;
                    continue;
                }
                let tokens = if decodes {
                    1
                } else {
                    (seq.known_tokens() - seq.progress).min(budget)
                };
                let target = seq.progress + tokens;
                // A prefill chunk may preempt only while nothing is planned: the victims
                // (the tail) could be decodes planned in the first pass.
                if !decodes && !s.plan.is_empty() {
                    if !kv.grow(&mut s.running[i].kv, target) {
                        break;
                    }
                } else {
                    match grow_or_preempt(s, kv, i, target, now, o, &mut preempted) {
                        Grow::Fits => {}
                        Grow::Wait => {
                            i += 1;
                            continue;
                        }
                        Grow::Stop => break,
                    }
                }
                plan(s, i, tokens, !decodes);
                budget -= tokens;
                i += 1;
            }
        }
        if preempted {
            return;
        }
        // Pass 3: new requests, a chunk each, into what is left.
        order_waiting(s, now, o);
        while (s.running.len() as u32) < l.max_num_seqs && budget > 0 {
            let b = budget;
            let bs = kv.block_size();
            // Reserve the cached prefix plus this step's chunk.
            let Some(head) = s.waiting.front() else { break };
            let cached = kv.cached_prefix_blocks(
                &head.spec.content,
                head.spec.input_tokens,
                head.known_tokens(),
            ) * bs;
            let chunk = (head.known_tokens() - cached).min(b);
            if !admit_head(s, kv, |_, _| cached + chunk, true, now) {
                break;
            }
            let slot = s.running.len() - 1;
            plan(s, slot, chunk, true);
            budget -= chunk;
        }
    }
}

// ---------------------------------------------------------------------------------------

pub const ORCA: BatcherEntry = BatcherEntry {
    name: "orca",
    description: "Orca iteration-level batching: whole prompts and decodes together, KV for prompt + output reserved at admission (no paging gains, no preemption), no prefix cache",
    params: &[(
        "max_batch_size",
        "most requests in a batch (default 0 = the group's max_num_seqs)",
    )],
    free_params: false,
    build: |args| {
        Ok(Box::new(Orca {
            cap: count(args, "max_batch_size", 0.0)?,
        }))
    },
};

struct Orca {
    cap: u32,
}

impl BatchScheduler for Orca {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        admit_whole_requests(s, kv, l, self.cap, now, o);
        plan_every_running(s, l, now);
    }
}

// ---------------------------------------------------------------------------------------

pub const FASTER_TRANSFORMER: BatcherEntry = BatcherEntry {
    name: "faster_transformer",
    description: "FasterTransformer static batching: a batch of up to max_batch_size requests (KV for prompt + output reserved) runs until all finish; new requests wait for the next batch",
    params: &[(
        "max_batch_size",
        "requests per batch (default 0 = the group's max_num_seqs)",
    )],
    free_params: false,
    build: |args| {
        Ok(Box::new(FasterTransformer {
            cap: count(args, "max_batch_size", 0.0)?,
        }))
    },
};

struct FasterTransformer {
    cap: u32,
}

impl BatchScheduler for FasterTransformer {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        // A new batch only when the last one has finished.
        if s.running.is_empty() {
            admit_whole_requests(s, kv, l, self.cap, now, o);
        }
        plan_every_running(s, l, now);
    }
}

// ---------------------------------------------------------------------------------------

pub const LIGHTLLM: BatcherEntry = BatcherEntry {
    name: "lightllm",
    description: "LightLLM router: admit a waiting request only if the estimated future peak of KV use (every running request growing to its full output) still fits; a prefill step for new requests, else a decode step",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(LightLlm)),
};

struct LightLlm;

/// LightLLM's estimate: with requests growing one token per step from `current` tokens for
/// `remaining` more steps, the most KV blocks they hold at once (at some request's last step).
pub fn future_peak_blocks(requests: &mut [(u32, u32)], block_size: u32) -> u64 {
    // By remaining steps, longest last: when request k ends (after r_k steps), every
    // request with r ≥ r_k holds current + r_k tokens.
    requests.sort_by_key(|&(_, r)| r);
    let mut peak = 0u64;
    for k in 0..requests.len() {
        let r = requests[k].1;
        let held: u64 = requests[k..]
            .iter()
            .map(|&(c, _)| u64::from((c + r).div_ceil(block_size)))
            .sum();
        peak = peak.max(held);
    }
    peak
}

impl BatchScheduler for LightLlm {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        let (bs, total) = (kv.block_size(), u64::from(kv.total_blocks()));
        // (tokens held, steps left) of every running request.
        let steps_left = |q: &Seq| q.spec.output_tokens.saturating_sub(q.generated);
        let mut load: Vec<(u32, u32)> = s
            .running
            .iter()
            .map(|q| (q.progress, steps_left(q)))
            .collect();
        let fits = |head: &Seq, _: &Scheduler| {
            load.push((head.known_tokens(), steps_left(head)));
            let fits = future_peak_blocks(&mut load.clone(), bs) <= total;
            if !fits {
                load.pop();
            }
            fits
        };
        if !prefill_step(s, kv, l, now, o, false, fits) {
            decode_step(s, kv, l, now, o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::Seq;
    use crate::instance::batch::SloTable;
    use crate::policy::{ConstantPriority, Fcfs, any_request};
    use crate::request::Lifecycle;
    use crate::scenario::PreemptionOrder;

    fn limits(max_num_seqs: u32, budget: u32) -> Limits {
        Limits::plain(max_num_seqs, budget)
    }

    /// (request id, tokens, prefill) of each step.
    type Steps = Vec<Vec<(u64, u32, bool)>>;

    /// Forms and applies steps until every request finished (as the Complete stage does:
    /// progress, a token when the known tokens are computed, release when done).
    fn run(
        name: &str,
        params: &[(&str, f64)],
        requests: &[(u32, u32)],
        kv_blocks: u32,
        l: Limits,
    ) -> Steps {
        let params: std::collections::BTreeMap<String, f64> =
            params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let labels = crate::labels::Labels::default();
        let entry = [
            VLLM_V1,
            VLLM_V0,
            SARATHI,
            ORCA,
            FASTER_TRANSFORMER,
            LIGHTLLM,
        ]
        .into_iter()
        .find(|e| e.name == name)
        .unwrap();
        let mut b = (entry.build)(&PolicyArgs::new(1, &params, &labels)).unwrap();
        let table = SloTable::default();
        let o = Ordering {
            order: &Fcfs,
            priority: &ConstantPriority,
            table: &table,
            preemption: PreemptionOrder::Tail,
        };
        let mut kv = KvCache::new(kv_blocks, 16);
        let mut s = Scheduler::default();
        for (id, &(input, output)) in requests.iter().enumerate() {
            let mut spec = any_request();
            spec.id = id as u64;
            spec.input_tokens = input;
            spec.output_tokens = output;
            spec.content = crate::request::PromptContent::Simple {
                prefix_id: 0,
                prefix_tokens: 0,
                unique_id: id as u64 + 1,
            };
            s.waiting
                .push_back(Seq::new(Entity::PLACEHOLDER, spec, Lifecycle::default()));
        }
        let mut steps = Vec::new();
        for step in 0..1000 {
            if !s.has_work() {
                return steps;
            }
            let now = SimTime(step);
            b.form(&mut s, &mut kv, &l, now, &o);
            steps.push(
                s.plan
                    .iter()
                    .map(|p| (s.running[p.slot as usize].spec.id, p.tokens, p.prefill))
                    .collect(),
            );
            let plan = std::mem::take(&mut s.plan);
            for p in &plan {
                let q = &mut s.running[p.slot as usize];
                q.progress += p.tokens;
                if q.progress >= q.known_tokens() {
                    q.generated += 1;
                    if q.generated >= q.spec.output_tokens {
                        kv.release(&mut q.kv);
                    }
                }
            }
            s.running.retain(|q| q.generated < q.spec.output_tokens);
            assert!(kv.conserves_blocks());
        }
        panic!("{name} did not finish: {steps:?}");
    }

    const P: bool = true;
    const D: bool = false;

    #[test]
    fn vllm_v1_chunks_prefills_into_the_budget_running_first() {
        // A = 40 → 3 tokens, B = 30 → 2; budget 32.
        let steps = run("vllm_v1", &[], &[(40, 3), (30, 2)], 1000, limits(8, 32));
        assert_eq!(
            steps,
            vec![
                vec![(0, 32, P)],
                vec![(0, 8, P), (1, 24, P)],
                vec![(0, 1, D), (1, 6, P)],
                vec![(0, 1, D), (1, 1, D)],
            ]
        );
    }

    #[test]
    fn vllm_v0_never_mixes_prefills_and_decodes() {
        // A's 40-token prompt exceeds the budget of 32 and runs alone; B's prefill comes
        // before any decode; then decodes only.
        let steps = run("vllm_v0", &[], &[(40, 3), (30, 2)], 1000, limits(8, 32));
        assert_eq!(
            steps,
            vec![
                vec![(0, 40, P)],
                vec![(1, 30, P)],
                vec![(0, 1, D), (1, 1, D)],
                vec![(0, 1, D)],
            ]
        );
    }

    #[test]
    fn sarathi_puts_decodes_first_and_chunks_prefills_into_the_fixed_budget() {
        // chunk_size 16: A's prompt takes 16 + 16 + 8; B's 30 go in as 8 + 15 + 7 around
        // A's decodes, which always come first.
        let steps = run(
            "sarathi",
            &[("chunk_size", 16.0)],
            &[(40, 3), (30, 2)],
            1000,
            limits(8, 2048),
        );
        assert_eq!(
            steps,
            vec![
                vec![(0, 16, P)],
                vec![(0, 16, P)],
                vec![(0, 8, P), (1, 8, P)],
                vec![(0, 1, D), (1, 15, P)],
                vec![(0, 1, D), (1, 7, P)],
                vec![(1, 1, D)],
            ]
        );
    }

    #[test]
    fn orca_reserves_the_whole_request_and_batches_whole_prompts_with_decodes() {
        // Both whole prompts in the first iteration; KV for 43 and 32 tokens (3 + 2
        // blocks) held from admission. With 4 blocks only A fits until it is done.
        let steps = run("orca", &[], &[(40, 3), (30, 2)], 1000, limits(8, 32));
        assert_eq!(
            steps,
            vec![
                vec![(0, 40, P), (1, 30, P)],
                vec![(0, 1, D), (1, 1, D)],
                vec![(0, 1, D)],
            ]
        );
        let steps = run("orca", &[], &[(40, 3), (30, 2)], 4, limits(8, 32));
        assert_eq!(
            steps,
            vec![
                vec![(0, 40, P)],
                vec![(0, 1, D)],
                vec![(0, 1, D)],
                vec![(1, 30, P)],
                vec![(1, 1, D)],
            ]
        );
    }

    #[test]
    fn faster_transformer_runs_static_batches_to_the_end() {
        // Batches of 2: A and B together; C waits until both finished although B ends
        // two steps before A.
        let steps = run(
            "faster_transformer",
            &[("max_batch_size", 2.0)],
            &[(40, 4), (30, 2), (20, 1)],
            1000,
            limits(8, 32),
        );
        assert_eq!(
            steps,
            vec![
                vec![(0, 40, P), (1, 30, P)],
                vec![(0, 1, D), (1, 1, D)],
                vec![(0, 1, D)],
                vec![(0, 1, D)],
                vec![(2, 20, P)],
            ]
        );
    }

    #[test]
    fn lightllm_admits_only_when_the_future_peak_fits() {
        // 6 blocks of 16. A (40 → 20) alone peaks at ⌈60/16⌉ = 4 blocks. B (30 → 20) next to
        // A peaks at 4 + 4 = 8 > 6 while A has more than 2 tokens to go: with A at 57
        // tokens and 2 to go, 4 + ⌈32/16⌉ = 6 fits, after A's 18th token (step 19). The
        // KV cache itself had room for B from step 2 on (A holds 3 or 4 blocks).
        let steps = run("lightllm", &[], &[(40, 20), (30, 20)], 6, limits(8, 128));
        assert_eq!(steps[0], vec![(0, 40, P)]);
        for (k, step) in steps.iter().enumerate().take(18).skip(1) {
            assert_eq!(step, &vec![(0, 1, D)], "step {}", k + 1);
        }
        assert_eq!(steps[18], vec![(1, 30, P)]);
        assert_eq!(steps[19], vec![(0, 1, D), (1, 1, D)]);
        // A's last 2 tokens with B (steps 20–21), then B's 17 remaining decodes alone.
        assert_eq!(steps.len(), 19 + 2 + 17);
        // The estimate itself: the peak is at some request's last step.
        assert_eq!(future_peak_blocks(&mut [(40, 19), (30, 20)], 16), 8);
        assert_eq!(future_peak_blocks(&mut [(57, 2), (30, 20)], 16), 6);
        assert_eq!(future_peak_blocks(&mut [], 16), 0);
    }
}
