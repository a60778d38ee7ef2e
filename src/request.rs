//! Request entities: what was asked for, and what happened to it.
//!
//! A request is spawned in [`SimSystems::Arrive`](crate::SimSystems::Arrive) with
//! [`RequestSpec`] and [`Lifecycle`], stamped by the cluster stages as it is admitted, routed
//! and enqueued, and despawned in [`SimSystems::Record`](crate::SimSystems::Record) after its
//! CSV row is written (INV-1: every request ends in exactly one [`FinalState`]).
//! While it is on an instance, its per-token progress lives in the instance's
//! [`Seq`](crate::instance::Seq), not on the entity, so the hot path does no entity lookups.

use bevy_ecs::prelude::*;

use crate::time::{SimDuration, SimTime};

/// What a request asks for. Immutable after arrival.
#[derive(Component, Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Dense id in arrival order, starting at 0.
    pub id: u64,
    /// Index of the workload client that generated it.
    pub client: u32,
    /// Prompt length in tokens, including any shared prefix.
    pub input_tokens: u32,
    /// Number of output tokens the request will generate (at least 1).
    pub output_tokens: u32,
    /// Identity of the content of the prompt, block by block (drives prefix caching).
    pub content: PromptContent,
    /// Tenant index (names in [`crate::labels::Labels`]).
    pub tenant: u32,
    /// SLO class index (names in [`crate::labels::Labels`]).
    pub slo_class: u32,
    /// Priority from the workload (higher = more important).
    pub priority: i32,
    /// The multi-turn session and turn this request belongs to.
    pub session: Option<SessionRef>,
    /// The LoRA adapter it runs with (index into `Labels::adapters`); `None`: the base model.
    pub adapter: Option<u32>,
}

/// Salt of content ids under a LoRA adapter ([`PromptContent::for_adapter`]).
const ADAPTER_SALT: u64 = 0x6c6f_7261_5f61_6470;

/// A request's place in a multi-turn session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRef {
    pub id: u64,
    /// 0 for the first turn.
    pub turn: u32,
}

/// The prompt's content identity, from which KV block hashes are derived: a sequence of
/// segments, each a run of tokens with one content id. A block takes the id of the segment
/// holding its last token, chained with the blocks before it, so two prompts share a block
/// exactly when they share everything up to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptContent {
    /// A shared prefix (same id for every request of a prefix group) followed by tokens
    /// unique to this request (the common case; no allocation).
    Simple {
        /// Content id of the shared prefix; meaningless when `prefix_tokens` is 0.
        prefix_id: u64,
        /// Length of the shared prefix in tokens.
        prefix_tokens: u32,
        /// Content id of the rest of the prompt.
        unique_id: u64,
    },
    /// Arbitrary segments (multi-turn histories, trace block ids), by increasing end.
    Segments(std::sync::Arc<[Segment]>),
}

/// Tokens `[previous end, end)` of a prompt have content `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub id: u64,
    pub end: u32,
}

impl PromptContent {
    /// The same prompt under LoRA adapter `adapter`: its KV differs from the base model's and
    /// from every other adapter's, so every content id is salted with it (vLLM adds the
    /// adapter to a block's hash, `_gen_lora_extra_hash_keys`).
    pub fn for_adapter(self, adapter: Option<u32>) -> Self {
        let Some(a) = adapter else {
            return self;
        };
        let salt = |id: u64| crate::rng::mix(&[ADAPTER_SALT, u64::from(a), id]);
        match self {
            PromptContent::Simple {
                prefix_id,
                prefix_tokens,
                unique_id,
            } => PromptContent::Simple {
                prefix_id: salt(prefix_id),
                prefix_tokens,
                unique_id: salt(unique_id),
            },
            PromptContent::Segments(segs) => PromptContent::Segments(
                segs.iter()
                    .map(|s| Segment {
                        id: salt(s.id),
                        end: s.end,
                    })
                    .collect(),
            ),
        }
    }

    /// Content id of block `k` of `block_size` tokens.
    pub fn block_id(&self, k: u32, block_size: u32) -> u64 {
        let last = (k + 1) * block_size - 1;
        match self {
            PromptContent::Simple {
                prefix_id,
                prefix_tokens,
                unique_id,
            } => {
                if last < *prefix_tokens {
                    *prefix_id
                } else {
                    *unique_id
                }
            }
            PromptContent::Segments(segs) => {
                let i = segs.partition_point(|s| s.end <= last);
                segs.get(i).or(segs.last()).map_or(0, |s| s.id)
            }
        }
    }
}

/// Cluster-side timestamps of a request (the instance side is carried in its `Seq`).
#[derive(Component, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifecycle {
    pub arrival: SimTime,
    pub admitted: Option<SimTime>,
    pub routed: Option<SimTime>,
    pub enqueued: Option<SimTime>,
    /// Times a crash took it down and it was sent again (faults' retry policy).
    pub retries: u32,
    /// The energy of the steps its attempts that a crash took down took part in,
    /// nanojoules (`energy` with `on_crash: Retry`): its next attempt starts from it, so
    /// that the requests' shares still add up to the steps' energy.
    pub retried_energy_nj: u64,
}

/// The instance a request was routed to.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssignedTo(pub u32);

/// How a request's life ended (each request has exactly one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FinalState {
    /// Generated all its output tokens.
    Completed,
    /// Refused by the admission policy.
    Rejected,
    /// Could never be served by its instance (prompt or whole sequence larger than the KV
    /// cache or `max_model_len`).
    Dropped,
    /// Abandoned by its client: not finished within its timeout.
    TimedOut,
    /// Still waiting in an instance queue when the run stopped (horizon reached).
    Queued,
    /// Still running on an instance when the run stopped.
    Running,
    /// Admitted but not yet in an instance queue when the run stopped.
    InTransit,
    /// Taken down by an instance crash and not retried (faults: the `Fail` policy, or its
    /// retries spent).
    Failed,
}

impl FinalState {
    /// Every `as_str`, as `requests.csv` writes them in its `state` column.
    pub const NAMES: [&'static str; 8] = [
        "completed",
        "rejected",
        "dropped",
        "timed_out",
        "queued",
        "running",
        "in_transit",
        "failed",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FinalState::Completed => "completed",
            FinalState::Rejected => "rejected",
            FinalState::Dropped => "dropped",
            FinalState::TimedOut => "timed_out",
            FinalState::Queued => "queued",
            FinalState::Running => "running",
            FinalState::InTransit => "in_transit",
            FinalState::Failed => "failed",
        }
    }
}

/// Everything the Record stage needs to write a request's row and update aggregates.
/// Produced by whichever stage ends the request; consumed and the entity despawned in Record.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedRequest {
    pub entity: Entity,
    pub spec: RequestSpec,
    pub lifecycle: Lifecycle,
    pub state: FinalState,
    pub instance: Option<u32>,
    /// Prompt tokens served from the prefix cache at the last (re)admission.
    pub cached_tokens: u32,
    /// Output tokens actually generated.
    pub generated_tokens: u32,
    /// First time the request was scheduled into a batch in its last attempt (a preemption's
    /// re-admission does not move it; `requests.csv`'s scheduling delay is measured to it).
    pub scheduled: Option<SimTime>,
    /// End of the step that produced the first output token (last prefill wins).
    pub first_token: Option<SimTime>,
    /// End of the step that produced the last output token (clock time).
    pub completed: Option<SimTime>,
    /// Time to first token including the output-token overhead (alpha2).
    pub ttft: Option<SimDuration>,
    /// End-to-end latency including all latency-model overheads.
    pub e2e: Option<SimDuration>,
    /// Sum of inter-token latency samples and their count (output tokens − 1).
    pub itl_sum: SimDuration,
    pub itl_count: u32,
    pub preemptions: u32,
    /// Instance that ran its prompt (on a mixed instance, or with `pd_first_token: Prefill`,
    /// it also produced the first output token).
    pub prefill_instance: Option<u32>,
    /// P/D: the decode instance the request reached, which produced its output tokens (with
    /// `pd_first_token: Prefill`, all but the first); none before it got there.
    pub decode_instance: Option<u32>,
    /// The prefill's end to KV ready on the decode instance (P/D disaggregation): the hand-off
    /// through vLLM's proxy, waiting for decode-side KV room, for the link, and the transfer.
    pub kv_transfer: Option<SimDuration>,
    /// Its share of the energy of the steps it took part in, nanojoules (0 without
    /// `energy`).
    pub energy_nj: u64,
    /// Speculative decoding: draft tokens verified for it, and accepted (0 without).
    pub drafted: u32,
    pub accepted: u32,
}

impl FinishedRequest {
    /// A request that ends before reaching an instance's batch (rejected, dropped, in transit).
    pub fn unserved(
        entity: Entity,
        spec: RequestSpec,
        lifecycle: Lifecycle,
        state: FinalState,
        instance: Option<u32>,
    ) -> Self {
        FinishedRequest {
            entity,
            spec,
            lifecycle,
            state,
            instance,
            cached_tokens: 0,
            generated_tokens: 0,
            scheduled: None,
            first_token: None,
            completed: None,
            ttft: None,
            e2e: None,
            itl_sum: SimDuration::ZERO,
            itl_count: 0,
            preemptions: 0,
            prefill_instance: None,
            decode_instance: None,
            kv_transfer: None,
            energy_nj: lifecycle.retried_energy_nj,
            drafted: 0,
            accepted: 0,
        }
    }

    /// Scheduling delay: first schedule time − arrival.
    pub fn scheduling_delay(&self) -> Option<SimDuration> {
        self.scheduled.map(|s| s.since(self.lifecycle.arrival))
    }

    /// Its TTFT taken apart, for a completed request that went once through its parts (no
    /// crash's retry, no preemption): `None` otherwise.
    pub fn ttft_parts(&self) -> Option<TtftParts> {
        if self.state != FinalState::Completed || self.lifecycle.retries > 0 || self.preemptions > 0
        {
            return None;
        }
        let arrival = self.lifecycle.arrival;
        let (queued, scheduled) = (self.lifecycle.enqueued?, self.scheduled?);
        let first = self.first_token?;
        if !(arrival <= queued && queued <= scheduled && scheduled <= first) {
            return None;
        }
        let steps_end = first.since(arrival);
        let ttft = self.ttft.filter(|t| *t >= steps_end)?;
        Some(TtftParts {
            to_the_instance: queued.since(arrival),
            waiting: scheduled.since(queued),
            prefill: first.since(scheduled),
            token_out: SimDuration(ttft.as_us() - steps_end.as_us()),
        })
    }

    /// Mean inter-token latency of this request (TPOT), if it produced ≥ 2 tokens.
    pub fn mean_itl(&self) -> Option<f64> {
        (self.itl_count > 0).then(|| self.itl_sum.as_us() as f64 / f64::from(self.itl_count))
    }
}

/// A request's TTFT in four consecutive parts that add up to it ([`FinishedRequest::ttft_parts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtftParts {
    /// Arrival to its instance's queue: admission, the gateway's bands, routing and its
    /// delays, the API server's intake and the tokenizer's micro-batch.
    pub to_the_instance: SimDuration,
    /// In the instance's queue until its first step starts (with async scheduling, the rest
    /// of the step in flight and the step already decided).
    pub waiting: SimDuration,
    /// From the start of its first step to the end of the step that emits its first token
    /// (its prefill, in chunks when it is chunked, beside the other requests of its steps).
    pub prefill: SimDuration,
    /// That token's way to the client: the API server's output processing (and a latency
    /// model's α2).
    pub token_out: SimDuration,
}

/// What a finished request measured, in µs (for comparing with measurements).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestSample {
    pub id: u64,
    pub completed: bool,
    /// Abandoned by its client (its timeout fired).
    pub timed_out: bool,
    /// When it arrived (µs of simulated time).
    pub arrival_us: u64,
    /// When it completed, if it did.
    pub completed_us: Option<u64>,
    /// Its SLO class (label index, as `Labels::slo_classes`).
    pub slo_class: u32,
    /// Whether it met every target of its SLO class.
    pub good: bool,
    pub ttft_us: Option<u64>,
    pub e2e_us: Option<u64>,
    /// Mean inter-token latency (time per output token after the first).
    pub mean_itl_us: Option<f64>,
    /// Its TTFT taken apart ([`FinishedRequest::ttft_parts`]).
    pub ttft_parts: Option<TtftParts>,
}

#[cfg(test)]
mod tests {
    use super::FinalState::*;
    use super::*;

    #[test]
    fn ttft_parts_tile_a_served_once_request_and_are_none_for_the_others() {
        let at = |us| Some(SimTime(us));
        let mut f = FinishedRequest::unserved(
            Entity::PLACEHOLDER,
            crate::policy::any_request(),
            Lifecycle {
                arrival: SimTime(1_000),
                enqueued: at(3_600),
                ..Default::default()
            },
            Completed,
            Some(0),
        );
        f.scheduled = at(5_000);
        f.first_token = at(6_000);
        f.ttft = Some(SimDuration(5_060));
        let parts = TtftParts {
            to_the_instance: SimDuration(2_600),
            waiting: SimDuration(1_400),
            prefill: SimDuration(1_000),
            token_out: SimDuration(60),
        };
        assert_eq!(f.ttft_parts(), Some(parts));
        // Taken through more than once, or not completed: no parts.
        for change in [
            |f: &mut FinishedRequest| f.preemptions = 1,
            |f: &mut FinishedRequest| f.lifecycle.retries = 1,
            |f: &mut FinishedRequest| f.state = TimedOut,
            |f: &mut FinishedRequest| f.lifecycle.enqueued = None,
            |f: &mut FinishedRequest| f.scheduled = Some(SimTime(3_000)),
        ] {
            let mut g = f.clone();
            change(&mut g);
            assert_eq!(g.ttft_parts(), None);
        }
    }

    #[test]
    fn final_state_names_are_what_as_str_writes_in_order() {
        let all = [
            Completed, Rejected, Dropped, TimedOut, Queued, Running, InTransit, Failed,
        ];
        assert_eq!(all.map(super::FinalState::as_str), super::FinalState::NAMES);
    }
}
