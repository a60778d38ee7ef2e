//! Latency models: how long a batch step takes, and where the fixed overheads land.
//!
//! Used in [`SimSystems::Execute`](crate::SimSystems::Execute) (step time) and
//! [`SimSystems::Route`](crate::SimSystems::Route) (queueing delay). Each model is one file
//! behind [`LatencyModel`]; a scenario picks one per instance group through
//! [`LatencySpec`](crate::scenario::LatencySpec).
//!
//! The three BLIS overhead ("alpha") terms (MODELS.md §2.1):
//! - [`LatencyModel::queueing_delay`] delays a request's arrival in the instance queue (clock
//!   effect), so it sits inside TTFT, E2E and scheduling delay;
//! - [`LatencyModel::output_token_overhead`] is added once to TTFT and to every ITL sample,
//!   without moving the clock;
//! - [`LatencyModel::post_decode_overhead`] is added once to E2E, without moving the clock.

mod blackbox;
mod blis_roofline;
mod expert;
pub mod hybrid;
pub mod lora;
mod piecewise;
mod roofline;
mod serving;
pub mod speculative;
mod table;
mod trained_physics;

pub use blackbox::Blackbox;
pub use blis_roofline::BlisRoofline;
pub use expert::{ExpertParallel, MoeLayerCost, WideEp};
pub use piecewise::PiecewiseLinear;
pub use roofline::{
    DEFAULT_REQUEST_OVERHEAD_US, DEFAULT_STEP_OVERHEAD_US, LayerLoad, Roofline,
    TOP_P_SORT_FIXED_US, TOP_P_SORT_US_PER_ROW, TOP_P_SORT_VOCAB,
};
pub use serving::{ServingPath, TokenizerWindow, TokenizerWindows};
pub use table::{Extrapolation, MeasuredTable};
pub use trained_physics::{Coefficients, TrainedPhysics};

use bevy_ecs::prelude::*;

use crate::time::SimDuration;

/// One request's share of a batch step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepItem {
    /// Tokens computed for this request in the step (1 for a decode).
    pub new_tokens: u32,
    /// Tokens of this request already in the KV cache before the step (ProgressIndex),
    /// including prefix-cache hits.
    pub context_tokens: u32,
    /// The request's prompt length.
    pub input_tokens: u32,
    /// True while the request is still computing its prompt.
    pub prefill: bool,
}

/// The shape of a batch step as the latency model sees it.
#[derive(Clone, Copy, Debug)]
pub struct BatchShape<'a> {
    pub items: &'a [StepItem],
    /// Σ new tokens of prefill items (cache misses only).
    pub prefill_tokens: u32,
    /// Number of decode items.
    pub decode_tokens: u32,
}

/// Prices batch steps. Implementations must be pure functions of their inputs so that runs
/// are deterministic. Durations are truncated to whole microseconds, once, by the model.
pub trait LatencyModel: Send + Sync + 'static {
    /// Wall time of one step over `batch`, ≥ 1 µs. An error (e.g. a batch outside a
    /// measured table) stops the run with that message.
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError>;

    /// [`step_time`](Self::step_time) of a step of `decodes` requests computing one token
    /// each, with `context_tokens` tokens in their caches in all (Σ `context_tokens` of the
    /// items), if the model can price it from these two sums; `None` (the default) if it
    /// needs the items. When `Some`, it must equal `step_time` on any such items: the
    /// instance prices a running batch of decodes in lockstep this way, in O(1) per step
    /// (`instance::lockstep`).
    fn decode_step_time(
        &self,
        _decodes: u32,
        _context_tokens: u64,
    ) -> Option<Result<SimDuration, LatencyError>> {
        None
    }

    /// Delay between routing and arrival in the instance queue (BLIS QueueingTime).
    fn queueing_delay(&self, _input_tokens: u32) -> SimDuration {
        SimDuration::ZERO
    }

    /// Added to TTFT once and to each ITL sample (BLIS OutputTokenProcessingTime).
    fn output_token_overhead(&self) -> SimDuration {
        SimDuration::ZERO
    }

    /// Added to E2E once for requests with output (BLIS PostDecodeFixedOverhead).
    fn post_decode_overhead(&self) -> SimDuration {
        SimDuration::ZERO
    }

    /// Steps within the batch limits (`max_num_seqs` requests, `max_num_batched_tokens`
    /// tokens) that [`step_time`](Self::step_time) will refuse to price, in words, for
    /// `validate` to warn of before a run stops at the first one; `None` (the default) when
    /// it prices them all.
    fn unpriced_steps(&self, _max_num_seqs: u32, _max_num_batched_tokens: u32) -> Option<String> {
        None
    }
}

/// BLIS's alpha overheads [α0 µs, α1 µs per input token, α2 µs per output token] as the
/// blackbox and roofline models use them: queueing delay α0 + α1·input, α2 per token.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Alpha(pub [f64; 3]);

impl Alpha {
    pub fn queueing_delay(&self, input_tokens: u32) -> SimDuration {
        SimDuration::from_us_f64(self.0[0] + self.0[1] * f64::from(input_tokens))
    }

    pub fn output_token_overhead(&self) -> SimDuration {
        SimDuration::from_us_f64(self.0[2])
    }
}

/// Why a step could not be priced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LatencyError(pub String);

/// The latency-model family: a group's `latency: Named(name: …, params: …)` names one of its
/// members (registered with `app.add_policy::<LatencyModels>(entry)`); its build sees the
/// group's model, GPU, tp and pp in `PolicyArgs::group`. The built-in models have typed
/// `LatencySpec` forms of their own (they take arrays, tables and files).
pub struct LatencyModels;

impl crate::catalog::PolicyFamily for LatencyModels {
    type Policy = dyn LatencyModel;
    const NAME: &'static str = "latency";
}

/// The latency model of an instance (per instance, so heterogeneous clusters work).
#[derive(Component, Clone)]
pub struct Latency(pub std::sync::Arc<dyn LatencyModel>);
