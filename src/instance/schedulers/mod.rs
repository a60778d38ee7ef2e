//! Batch schedulers: how an instance forms each step's batch, selectable per group
//! (`scheduler`, `scheduler_params`). Every scheduler fills [`Scheduler::plan`] from the
//! running batch and the wait queue and uses the same KV cache, latency models, step
//! completion and invariants; one file plus one registration adds a new one
//! (`app.add_policy::<BatchFormation>(entry)`: batch formation is a policy family like
//! routing, [`BatchFormation`]).
//!
//! | name | source | rule |
//! |---|---|---|
//! | `vllm_v1` | vLLM v1 (default) | see [`vllm`]: chunked prefill, running first, token budget |
//! | `vllm_v0` | vLLM v0 before chunked prefill | a step is all prefills (whole prompts, waiting requests admitted first) or all decodes, never mixed |
//! | `sarathi` | Sarathi-Serve (OSDI 2024) | stall-free batching: every decode first, then prefill chunks into a fixed `chunk_size` budget |
//! | `orca` | Orca (OSDI 2022) | iteration-level batching; KV for the whole request (prompt + output) reserved at admission, no preemption; whole prompts |
//! | `faster_transformer` | FasterTransformer | static request-level batches: a batch runs until every member finished; no one joins in between |
//! | `lightllm` | LightLLM router | admits while the estimated future peak of KV use (every running request to its end) fits; prefill steps and decode steps alternate |
//!
//! The building blocks the built-ins share (admitting the head of the queue, growing or
//! preempting, ordering the wait queue) are in [`blocks`].
//!
//! A new scheduler is one file and one registration:
//! ```
//! use servesim::instance::schedulers::{BatchFormation, BatchScheduler, BatcherEntry, Ordering};
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
//! let scenario = servesim::loader::parse(
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

pub mod blocks;
mod faster_transformer;
mod lightllm;
mod orca;
mod sarathi;
#[cfg(test)]
mod tests;
pub mod vllm;

pub use faster_transformer::FASTER_TRANSFORMER;
pub use lightllm::{LIGHTLLM, future_peak_blocks};
pub use orca::ORCA;
pub use sarathi::SARATHI;
pub use vllm::{VLLM_V0, VLLM_V1, form_batch};

use bevy_ecs::prelude::*;

use super::{Limits, Scheduler, Seq};
use crate::catalog::{Entry, PolicyArgs, PolicyFamily};
use crate::kv::KvCache;
use crate::policy::{PriorityPolicy, QueueOrder};
use crate::scenario::PreemptionOrder;
use crate::slo::SloTable;
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

    /// True if this scheduler admits a request only with KV for its whole prompt + output
    /// reserved (Orca, FasterTransformer, LightLLM's peak estimate), rather than growing it
    /// to prompt + output − 1 tokens (the last token is never fed back) as vLLM does. The
    /// unservable check ([`crate::instance::servable`]) asks the same of the cache, so a
    /// request the scheduler could never admit is dropped at once instead of stalling the
    /// instance. Default: false.
    fn reserves_whole_request(&self) -> bool {
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

/// A whole-number parameter within `min..=10⁹` (0 = "use the group's max_num_seqs" where
/// documented).
fn count(args: &PolicyArgs<'_>, name: &str, default: f64, min: u32) -> Result<u32, String> {
    let v = args.get(name, default);
    if v.fract() == 0.0 && (f64::from(min)..=1e9).contains(&v) {
        Ok(v as u32)
    } else {
        Err(format!(
            "{name} must be a whole number within {min}..=10⁹, got {v}"
        ))
    }
}

/// How preemption victims are chosen.
#[derive(Resource, Debug, Clone, Copy, Default)]
pub struct SchedulingConfig {
    pub preemption: PreemptionOrder,
}

/// The priority and queue order policies, as batch formation uses them.
pub struct Ordering<'a> {
    pub order: &'a dyn QueueOrder,
    pub priority: &'a dyn PriorityPolicy,
    pub table: &'a SloTable,
    pub preemption: PreemptionOrder,
}

impl Ordering<'_> {
    pub fn priority_of(&self, seq: &Seq, now: SimTime) -> f64 {
        self.priority.priority(
            &seq.spec,
            self.table.class_priority(&seq.spec),
            now.since(seq.lifecycle.arrival),
        )
    }
}

/// Maps f64 to an integer with the same total order (for stable integer sort keys).
fn ordered(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

/// The queue policies batch formation uses.
#[derive(bevy_ecs::system::SystemParam)]
pub struct QueuePolicies<'w> {
    order: Res<'w, crate::policy::Active<crate::policy::family::Scheduling>>,
    priority: Res<'w, crate::policy::Active<crate::policy::family::Priority>>,
    table: Res<'w, crate::slo::SloTable>,
    config: Res<'w, SchedulingConfig>,
}

impl QueuePolicies<'_> {
    /// How batch formation orders and preempts requests.
    pub fn ordering(&self) -> Ordering<'_> {
        Ordering {
            order: &*self.order.0,
            priority: &*self.priority.0,
            table: &self.table,
            preemption: self.config.preemption,
        }
    }

    /// The SLO classes (for recording).
    pub fn slo(&self) -> &crate::slo::SloTable {
        &self.table
    }
}
