//! The serving path around a vLLM engine's steps: what stands between a client and its tokens
//! besides the GPU (read in [`SimSystems::Route`](crate::SimSystems::Route),
//! [`SimSystems::Batch`](crate::SimSystems::Batch), [`SimSystems::Execute`](crate::SimSystems::Execute)
//! and [`SimSystems::Complete`](crate::SimSystems::Complete); pure numbers and functions).
//!
//! A streamed chat request in vLLM v1 (0.11 onwards) goes through two processes:
//! - the **API server** (FastAPI on uvicorn, one asyncio event loop): parses the request,
//!   renders the chat template, tokenizes the prompt and hands an `EngineCoreRequest` to the
//!   engine core over ZeroMQ; for every engine step it receives the step's outputs,
//!   detokenizes them (`OutputProcessor.process_outputs`, in output order), wakes each
//!   request's `generate()` task and writes one SSE chunk per token;
//! - the **engine core** (`vllm/v1/engine/core.py`): a busy loop that takes new requests from
//!   its input queue between steps, schedules a step (`Scheduler.schedule()`), launches it and
//!   applies the sampled tokens (`update_from_output()`). With **async scheduling** (the default
//!   since vLLM 0.14.0, PR #27614; `step_with_batch_queue` with a batch queue of 2) the next
//!   step is scheduled while the current one runs on the GPU, so the scheduler's CPU work is
//!   hidden — and a request that reaches the engine while step N runs is first scheduled in
//!   step N+2 (the decision for N+1 was already taken when N started).
//!
//! The API server tokenizes prompts in micro-batches (vLLM 0.10 to 0.23,
//! `AsyncMicrobatchTokenizer` in `vllm/utils/async_utils.py`, PR #19334; PR #45759 removed it
//! for 0.24.0): the first prompt
//! opens a window of 2 ms in which up to 32 prompts gather before one batched tokenizer call,
//! so a prompt that arrives alone waits the whole window ([`TokenizerWindow`]).
//!
//! [`ServingPath`] holds the numbers of both; [`ServingPath::VLLM`] are vLLM 0.15.1's, measured
//! with vLLM's own classes by the scripts in `benches/frontend/` (see each constant).

use crate::scenario::{EnginePreset, EngineSpec};
use crate::time::{SimDuration, SimTime};

/// The serving path of an instance (see the module docs). All costs in µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServingPath {
    /// vLLM's async scheduling: a step is decided when the step before it starts, so a
    /// request becomes schedulable one step later; the engine's CPU work overlaps the GPU.
    pub async_scheduling: bool,
    /// Engine-core CPU work per step (`schedule()` + `update_from_output()`), µs: between two
    /// steps without async scheduling, overlapped (a step lasts at least this long) with it.
    pub schedule_us: f64,
    /// The same, per request in the step, µs.
    pub schedule_us_per_request: f64,
    /// API server, per request: HTTP, parsing, chat template, input processing and the hand-off
    /// to the engine core, µs. Delays the request's arrival at the engine.
    pub api_request_us: f64,
    /// API server, per prompt token (tokenization, block hashing), µs.
    pub api_us_per_prompt_token: f64,
    /// API server, per engine step with outputs: the engine-to-API-server hand-off and the
    /// output batch's fixed processing, µs.
    pub api_step_us: f64,
    /// API server, per streamed chunk (a request's tokens of one step: one token, or with
    /// speculative decoding its accepted tokens together, as vLLM's one `RequestOutput` per
    /// request and step): detokenization, the request's output object, waking its task,
    /// rendering and writing its SSE chunk, µs. A step's outputs are processed in batch
    /// order, so a request's chunk reaches its client after those before it.
    pub api_us_per_output_token: f64,
    /// API server: how long the tokenizer's micro-batch stays open after its first prompt, µs
    /// (0: every prompt is tokenized at once). See [`TokenizerWindow`].
    pub tokenizer_window_us: f64,
    /// API server: the most prompts one tokenizer micro-batch takes.
    pub tokenizer_batch: u32,
}

impl ServingPath {
    /// vLLM 0.15.1 (async scheduling on, the default since 0.14.0), costs measured on an AMD
    /// EPYC (Zen 4) core with vLLM 0.15.1's own classes, CPU only:
    /// - `schedule_us` 14 + 7.7 per request: `Scheduler.schedule()` + `update_from_output()`
    ///   on a decoding batch of 1–128 requests (`benches/frontend/measure_vllm_scheduler.py`);
    /// - `api_request_us` 570 = 158 (vLLM's `ChatCompletionRequest` parse, chat template,
    ///   `EngineCoreRequest` msgpack round trip and the engine's `Request` with block hashes,
    ///   `measure_vllm_frontend.py`) + 365 (uvicorn/FastAPI request handling,
    ///   `measure_http_stream.py`) + 47 (one ZeroMQ IPC hop, `measure_zmq_handoff.py`);
    /// - `api_us_per_prompt_token` 1.15 (tokenizer + hashing slope, `measure_vllm_frontend.py`);
    /// - `api_step_us` 66 = 19 (output batch decode and processing, per step) + 47 (ZeroMQ hop);
    /// - `api_us_per_output_token` 30 = 24 (`OutputProcessor.process_outputs`, task wake-up,
    ///   `ChatCompletionStreamResponse` + `model_dump_json`) + 6 (ASGI send and HTTP chunk);
    /// - `tokenizer_window_us` 2000 and `tokenizer_batch` 32: `AsyncMicrobatchTokenizer`'s
    ///   `batch_wait_timeout_s` and `max_batch_size` defaults (vLLM 0.11.0 and 0.15.1 source;
    ///   vLLM PR #45759, June 2026, removed the batcher for this 2 ms wait: 0.24.0 has none, see
    ///   [`VllmRelease::NO_TOKENIZER_BATCH`](crate::scenario::VllmRelease::NO_TOKENIZER_BATCH)).
    pub const VLLM: ServingPath = ServingPath {
        async_scheduling: true,
        schedule_us: 14.0,
        schedule_us_per_request: 7.7,
        api_request_us: 570.0,
        api_us_per_prompt_token: 1.15,
        api_step_us: 66.0,
        api_us_per_output_token: 30.0,
        tokenizer_window_us: 2000.0,
        tokenizer_batch: 32,
    };

    /// vLLM before 0.14 (async scheduling off by default): the same costs, the scheduler's work
    /// between steps.
    pub const VLLM_SYNC: ServingPath = ServingPath {
        async_scheduling: false,
        ..ServingPath::VLLM
    };

    /// Nothing but the step (BLIS's reading: its models carry their own overheads as alphas).
    pub const BARE: ServingPath = ServingPath {
        async_scheduling: false,
        schedule_us: 0.0,
        schedule_us_per_request: 0.0,
        api_request_us: 0.0,
        api_us_per_prompt_token: 0.0,
        api_step_us: 0.0,
        api_us_per_output_token: 0.0,
        tokenizer_window_us: 0.0,
        tokenizer_batch: 32,
    };

    /// True if nothing is added to the step and the request (the BLIS reading).
    pub fn is_bare(&self) -> bool {
        *self == Self::BARE
    }

    /// True if a step's tokens take the API server any time ([`token_out`](Self::token_out)).
    pub fn streams_out(&self) -> bool {
        self.api_step_us > 0.0 || self.api_us_per_output_token > 0.0
    }

    /// The API server's work on a request before the engine sees it.
    pub fn request_in(&self, input_tokens: u32) -> SimDuration {
        SimDuration::from_us_f64(
            self.api_request_us + self.api_us_per_prompt_token * f64::from(input_tokens),
        )
    }

    /// The engine core's CPU work for a step of `requests` requests.
    pub fn schedule(&self, requests: u32) -> SimDuration {
        SimDuration::from_us_f64(
            self.schedule_us + self.schedule_us_per_request * f64::from(requests),
        )
    }

    /// How long a step priced at `gpu` occupies the instance: the GPU time plus the
    /// scheduler's work, or (async scheduling) the longer of the two.
    pub fn step(&self, gpu: SimDuration, requests: u32) -> SimDuration {
        if self.schedule_us == 0.0 && self.schedule_us_per_request == 0.0 {
            return gpu;
        }
        let cpu = self.schedule(requests);
        if self.async_scheduling {
            gpu.max(cpu)
        } else {
            gpu + cpu
        }
    }

    /// From a step's end to its chunk reaching the client, for the `position`-th (from 0)
    /// request of the step's outputs.
    pub fn token_out(&self, position: u32) -> SimDuration {
        SimDuration::from_us_f64(
            self.api_step_us + self.api_us_per_output_token * f64::from(position + 1),
        )
    }

    /// Problems with the numbers (field name, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        for (f, v) in [
            ("schedule_us", self.schedule_us),
            ("schedule_us_per_request", self.schedule_us_per_request),
            ("api_request_us", self.api_request_us),
            ("api_us_per_prompt_token", self.api_us_per_prompt_token),
            ("api_step_us", self.api_step_us),
            ("api_us_per_output_token", self.api_us_per_output_token),
            ("tokenizer_window_us", self.tokenizer_window_us),
        ] {
            if !v.is_finite() || !(0.0..=1e7).contains(&v) {
                p.push((f, format!("must be a number of µs in [0, 10⁷], got {v}")));
            }
        }
        if self.tokenizer_batch == 0 {
            p.push((
                "tokenizer_batch",
                "must be at least 1 (prompts per tokenizer micro-batch), got 0".into(),
            ));
        }
        p
    }

    /// One line for `servesim validate`, for a group of `pp` pipeline stages.
    pub fn describe(&self, pp: u32) -> String {
        if self.is_bare() {
            return "step only (no scheduler or API server time: the BLIS reading)".into();
        }
        format!(
            "{}; scheduler {} µs + {} µs/request per step ({}); API server {} µs + {} µs/prompt token in, {} µs + {} µs per chunk out (a chunk per request and step)",
            if self.async_scheduling && pp > 1 {
                "async scheduling with pipeline parallelism (vLLM 0.15: pp micro-batches in flight; a request waits for its token before its next step)"
            } else if self.async_scheduling {
                "async scheduling (vLLM ≥ 0.14: a new request joins the step after next)"
            } else {
                "synchronous scheduling (vLLM ≤ 0.13)"
            },
            self.schedule_us,
            self.schedule_us_per_request,
            if self.async_scheduling {
                "overlaps the GPU step"
            } else {
                "between steps"
            },
            self.api_request_us,
            self.api_us_per_prompt_token,
            self.api_step_us,
            self.api_us_per_output_token,
        ) + &if self.tokenizer_window_us > 0.0 {
            format!(
                "; prompts tokenized in micro-batches of up to {} gathered for {} µs (vLLM's AsyncMicrobatchTokenizer: a lone prompt waits it all)",
                self.tokenizer_batch, self.tokenizer_window_us
            )
        } else {
            "; each prompt tokenized at once".into()
        }
    }
}

impl Default for ServingPath {
    fn default() -> Self {
        Self::BARE
    }
}

impl ServingPath {
    /// The numbers a group's `engine` stands for.
    pub fn of(spec: &EngineSpec) -> Self {
        let s = spec;
        let mut p = match s.resolved_preset() {
            EnginePreset::Vllm => ServingPath::VLLM,
            EnginePreset::VllmSync => ServingPath::VLLM_SYNC,
            EnginePreset::Bare => ServingPath::BARE,
        };
        if s.release()
            .is_some_and(|r| r >= crate::scenario::VllmRelease::NO_TOKENIZER_BATCH)
        {
            p.tokenizer_window_us = 0.0;
        }
        if let Some(v) = s.async_scheduling {
            p.async_scheduling = v;
        }
        for (slot, v) in [
            (&mut p.schedule_us, s.schedule_us),
            (&mut p.schedule_us_per_request, s.schedule_us_per_request),
            (&mut p.api_request_us, s.api_request_us),
            (&mut p.api_us_per_prompt_token, s.api_us_per_prompt_token),
            (&mut p.api_step_us, s.api_step_us),
            (&mut p.api_us_per_output_token, s.api_us_per_output_token),
            (&mut p.tokenizer_window_us, s.tokenizer_window_us),
        ] {
            if let Some(v) = v {
                *slot = v;
            }
        }
        if let Some(n) = s.tokenizer_batch {
            p.tokenizer_batch = n;
        }
        p
    }
}

/// One API server's tokenizer micro-batch, as vLLM's `AsyncMicrobatchTokenizer` gathers it:
/// the first prompt to reach the batcher opens a window of `tokenizer_window_us`; prompts
/// arriving before it closes join, up to `tokenizer_batch`; at its close the batch is
/// tokenized and each prompt goes on. A prompt arriving after the close, or to a full batch,
/// opens the next window.
///
/// Two simplifications, both confined to bursts of more than `tokenizer_batch` prompts
/// within one window at one server: a full batch is released at its window's close (vLLM
/// releases it when the last prompt joins, at most one window earlier), and the batch's
/// tokenization is priced per prompt (`api_us_per_prompt_token`) rather than run one batch
/// after another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenizerWindow {
    /// When the open window closes (none open when it has passed).
    pub closes_at: SimTime,
    /// Prompts in it so far.
    pub prompts: u32,
}

impl TokenizerWindow {
    /// How long a prompt reaching the batcher at `at` waits for its batch to close, the
    /// window updated.
    pub fn wait(&mut self, at: SimTime, path: &ServingPath) -> SimDuration {
        if path.tokenizer_window_us <= 0.0 {
            return SimDuration::ZERO;
        }
        if at < self.closes_at && self.prompts < path.tokenizer_batch {
            self.prompts += 1;
        } else {
            *self = TokenizerWindow {
                closes_at: at + SimDuration::from_us_f64(path.tokenizer_window_us),
                prompts: 1,
            };
        }
        self.closes_at.since(at)
    }
}

/// Each instance's API-server tokenizer micro-batch ([`TokenizerWindow`]), by instance index:
/// a routed request's wait in it is part of its `cluster::Router::delay`; under vLLM's P/D
/// proxy a decode instance's API server tokenizes the handed-off request again.
#[derive(bevy_ecs::prelude::Resource, Default)]
pub struct TokenizerWindows(pub Vec<TokenizerWindow>);

impl TokenizerWindows {
    /// How long a prompt reaching instance `i`'s API server at `at` waits for its batch.
    pub fn wait(&mut self, i: u32, at: SimTime, path: &ServingPath) -> SimDuration {
        let windows = &mut self.0;
        if windows.len() <= i as usize {
            windows.resize(i as usize + 1, Default::default());
        }
        windows[i as usize].wait(at, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_is_between_steps_without_async_scheduling_and_hidden_with_it() {
        let gpu = SimDuration(8_000);
        // 14 + 7.7 × 40 = 322 µs.
        assert_eq!(ServingPath::VLLM_SYNC.step(gpu, 40), SimDuration(8_322));
        assert_eq!(ServingPath::VLLM.step(gpu, 40), gpu);
        // A step shorter than the scheduler's work lasts as long as the work.
        assert_eq!(
            ServingPath::VLLM.step(SimDuration(100), 40),
            SimDuration(322)
        );
        assert_eq!(ServingPath::BARE.step(gpu, 40), gpu);
    }

    #[test]
    fn tokens_leave_the_api_server_in_output_order() {
        let v = ServingPath::VLLM;
        // 66 + 30 per token up to and including this one.
        assert_eq!(v.token_out(0), SimDuration(96));
        assert_eq!(v.token_out(39), SimDuration(66 + 30 * 40));
        // 570 + 1.15 × 590 = 1248.5 µs, truncated.
        assert_eq!(v.request_in(590), SimDuration(1248));
        assert_eq!(ServingPath::BARE.token_out(7), SimDuration::ZERO);
        assert_eq!(ServingPath::BARE.request_in(590), SimDuration::ZERO);
    }

    #[test]
    fn a_lone_prompt_waits_the_whole_tokenizer_window_and_company_waits_what_is_left() {
        let v = ServingPath::VLLM;
        let mut w = TokenizerWindow::default();
        assert_eq!(w.wait(SimTime(10_000), &v), SimDuration(2_000));
        // Joins the window opened at 10 000 µs: closes at 12 000.
        assert_eq!(w.wait(SimTime(10_500), &v), SimDuration(1_500));
        assert_eq!(w.wait(SimTime(11_999), &v), SimDuration(1));
        // At the close itself the batch has gone (vLLM's `timeout <= 0: break`): a new one.
        assert_eq!(w.wait(SimTime(12_000), &v), SimDuration(2_000));
        assert_eq!(w.closes_at, SimTime(14_000));
        // A full batch takes no more: the 33rd prompt of a burst opens the next window.
        let mut w = TokenizerWindow::default();
        for _ in 0..32 {
            assert_eq!(w.wait(SimTime(100), &v), SimDuration(2_000));
        }
        assert_eq!(w.wait(SimTime(101), &v), SimDuration(2_000));
        assert_eq!((w.closes_at, w.prompts), (SimTime(2_101), 1));
        // Without a window (BLIS's reading, or `tokenizer_window_us: 0`) nothing waits.
        assert_eq!(w.wait(SimTime(102), &ServingPath::BARE), SimDuration::ZERO);
    }

    #[test]
    fn validate_says_what_async_scheduling_does_with_and_without_a_pipeline() {
        let v = ServingPath::VLLM;
        assert!(v.describe(1).starts_with(
            "async scheduling (vLLM ≥ 0.14: a new request joins the step after next);"
        ));
        // With pipeline stages nothing is held back (batch::decided_at), so validate
        // must not say a new request waits a step.
        let piped = v.describe(2);
        assert!(
            piped.starts_with("async scheduling with pipeline parallelism")
                && !piped.contains("step after next"),
            "{piped}"
        );
        assert!(
            ServingPath::VLLM_SYNC
                .describe(2)
                .starts_with("synchronous scheduling")
        );
    }

    #[test]
    fn bad_numbers_are_named() {
        let bad = ServingPath {
            api_request_us: f64::NAN,
            schedule_us_per_request: -1.0,
            tokenizer_batch: 0,
            ..ServingPath::VLLM
        };
        let names: Vec<&str> = bad.problems().iter().map(|p| p.0).collect();
        assert_eq!(
            names,
            [
                "schedule_us_per_request",
                "api_request_us",
                "tokenizer_batch"
            ]
        );
    }
}
