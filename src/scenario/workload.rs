//! `workload`: synthetic clients, sessions, traces and inference-perf loads.

use serde::Deserialize;

use super::cluster::{default_block_size, one};

/// The traffic: synthetic clients and/or trace replays, and when to stop generating.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Stop after this many requests in total (all sources, session turns included).
    /// Default: unlimited.
    #[serde(default)]
    pub num_requests: Option<u64>,
    /// Stop generating arrivals after this simulated time (seconds). Default: unlimited.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Total rate shared by clients that give `rate_share` instead of `rate_per_s`.
    #[serde(default)]
    pub aggregate_rate_per_s: Option<f64>,
    /// Synthetic traffic sources.
    #[serde(default)]
    pub clients: Vec<ClientSpec>,
    /// Recorded traces to replay (streamed from disk).
    #[serde(default)]
    pub traces: Vec<TraceSpec>,
    /// An inference-perf load: staged rates over a shared-prefix user population.
    #[serde(default)]
    pub inference_perf: Option<InferencePerfSpec>,
    /// The LoRA adapters requests may name (clients' `adapter`, a trace's `adapter`
    /// column); served by groups with `lora` (docs/lora.md). Absent: none.
    #[serde(default)]
    pub adapters: Option<AdapterSet>,
}

/// The LoRA adapters of a workload (`workload.adapters`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdapterSet {
    /// Their names, in order.
    #[serde(default)]
    pub names: Vec<String>,
    /// Without `names`: this many adapters named `lora0`, `lora1`, …
    #[serde(default)]
    pub count: u32,
    /// LoRA rank of every adapter. Default 16.
    #[serde(default = "default_adapter_rank")]
    pub rank: u32,
    /// Rank of particular adapters, by name, overriding `rank`.
    #[serde(default)]
    pub ranks: std::collections::BTreeMap<String, u32>,
}

fn default_adapter_rank() -> u32 {
    16
}

impl AdapterSet {
    /// The most adapters a workload declares. Each is a name and a rank everywhere it can be
    /// served; S-LoRA served 2,000 from one server, so this is far past any deployment.
    pub const MAX: usize = 100_000;

    /// The adapters' names, in order (`names`, or `lora0` … for `count`; a `count` past
    /// [`MAX`](Self::MAX), which validation refuses, yields the first `MAX`, so that
    /// nothing read before validation allocates for billions).
    pub fn all_names(&self) -> Vec<String> {
        if self.names.is_empty() {
            (0..(self.count as usize).min(Self::MAX))
                .map(|k| format!("lora{k}"))
                .collect()
        } else {
            self.names.clone()
        }
    }

    /// Each adapter's rank, in the order of [`all_names`](Self::all_names).
    pub fn all_ranks(&self) -> Vec<u32> {
        self.all_names()
            .iter()
            .map(|n| self.ranks.get(n).copied().unwrap_or(self.rank))
            .collect()
    }
}

/// Which adapter a client's requests run with (`workload.clients[i].adapter`); a session
/// keeps its first turn's.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub enum AdapterChoice {
    /// This one, by name.
    Named(String),
    /// Any of `workload.adapters`, equally likely.
    Uniform,
    /// The k-th of `workload.adapters` (from 1) with probability ∝ 1/k^exponent: a few
    /// popular adapters and a long tail.
    Zipf(f64),
    /// These, with these relative weights.
    Weighted(std::collections::BTreeMap<String, f64>),
}

impl WorkloadSpec {
    /// Multiplies every arrival rate by `factor` (> 0), keeping the workload's shape: client
    /// and aggregate rates, stage rates (stage lengths kept), inference-perf stage rates and
    /// trace replay rates. Session clients' rates are session arrivals. Fails for a source
    /// without a rate (`AllAtZero`: every request at t = 0).
    pub fn scale_rates(&mut self, factor: f64) -> Result<(), String> {
        if let Some(r) = &mut self.aggregate_rate_per_s {
            *r *= factor;
        }
        for (i, c) in self.clients.iter_mut().enumerate() {
            if let Some(r) = &mut c.rate_per_s {
                *r *= factor;
            }
            match &mut c.arrival {
                ArrivalSpec::AllAtZero { .. } => {
                    return Err(format!(
                        "workload.clients[{i}] sends every request at t = 0 (AllAtZero): it has no rate to scale"
                    ));
                }
                ArrivalSpec::Staged { stages, .. } | ArrivalSpec::ConstantTimer { stages } => {
                    stages.iter_mut().for_each(|s| s.rate_per_s *= factor);
                }
                _ => {}
            }
        }
        for t in &mut self.traces {
            t.rate_scale *= factor;
        }
        if let Some(ip) = &mut self.inference_perf {
            ip.stages.iter_mut().for_each(|s| s.rate_per_s *= factor);
        }
        Ok(())
    }

    /// The mean request rate the workload states (requests/s over its on/off cycles), or
    /// `None` where it is not one rate stated up front: traces, session clients (whose turns
    /// follow completions), staged arrivals and inference-perf stages (their rate changes over
    /// the run, and `num_requests` may end it before the later stages: a mean over every stage
    /// is not what the run offered), and sources without a rate.
    pub fn nominal_rate(&self) -> Option<f64> {
        if !self.traces.is_empty() || self.inference_perf.is_some() {
            return None;
        }
        let shares: f64 = self.clients.iter().filter_map(|c| c.rate_share).sum();
        let mut total = 0.0;
        for c in &self.clients {
            if c.session.is_some() {
                return None;
            }
            let rate = match (c.rate_per_s, c.rate_share) {
                (Some(r), _) => r,
                (None, Some(share)) if shares > 0.0 => self.aggregate_rate_per_s? * share / shares,
                _ => return None,
            };
            total += match &c.arrival {
                ArrivalSpec::AllAtZero { .. }
                | ArrivalSpec::Staged { .. }
                | ArrivalSpec::ConstantTimer { .. } => return None,
                ArrivalSpec::OnOff { on_s, off_s } => rate * on_s / (on_s + off_s),
                _ => rate,
            };
        }
        Some(total)
    }
}

/// inference-perf's staged `shared_prefix` load (the generator behind BLIS's training and
/// golden data): `num_unique_system_prompts` × `num_users_per_system_prompt` users, each
/// request = the user's system prompt (`system_prompt_len` tokens, shared by the prompt's
/// users) + a new question (`question_len` tokens); exactly ⌊rate × duration⌋ requests per
/// stage.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InferencePerfSpec {
    /// Stages run back to back.
    pub stages: Vec<Stage>,
    pub shared_prefix: SharedPrefixSpec,
    /// How the load is read. Default `OpenLoop` (what inference-perf sends).
    #[serde(default)]
    pub reading: InferencePerfReading,
    /// Client timeout of every request (seconds). Default: none (`Blis` reading: 300 s, as
    /// BLIS gives session clients).
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// inference-perf's `data.shared_prefix` block (same field names).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixSpec {
    pub num_unique_system_prompts: u32,
    pub num_users_per_system_prompt: u32,
    pub system_prompt_len: u32,
    pub question_len: u32,
    pub output_len: u32,
    /// Users are multi-turn chat sessions (no context accumulation, as inference-perf).
    #[serde(default)]
    pub enable_multi_turn_chat: bool,
}

/// Two readings of an inference-perf load.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum InferencePerfReading {
    /// inference-perf itself: each stage's timer sends exactly ⌊rate × duration⌋ requests
    /// at the stage rate (`Constant`: normalised-exponential gaps, the last at the stage end;
    /// `Poisson`: exponential gaps); requests go to the users in turn.
    #[default]
    OpenLoop,
    /// `OpenLoop` with Poisson stage timers.
    OpenLoopPoisson,
    /// BLIS's expansion (`sim/workload/inference_perf.go`): with multi-turn chat, every user of
    /// every stage is a closed-loop session that starts one exponential gap (at rate / users)
    /// into its stage and sends its share of ⌊rate × duration⌋ requests, each
    /// ⌊users / rate⌋ s after the previous one completed; without it, each user sends its
    /// share with normalised-exponential gaps (one stage) or Poisson arrivals (several).
    Blis,
}

/// One synthetic traffic source (a client, tenant or user population).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// Label. Default: `client<i>`.
    #[serde(default)]
    pub name: String,
    /// Tenant the requests belong to. Default: the client's name.
    #[serde(default)]
    pub tenant: Option<String>,
    /// SLO class of the requests. Default `standard`.
    #[serde(default)]
    pub slo_class: Option<String>,
    /// Request priority (higher = more important). Default 0.
    #[serde(default)]
    pub priority: i32,
    /// Mean arrival rate (requests/s; sessions/s for session clients).
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// Share of `workload.aggregate_rate_per_s` (normalised over the clients that give one).
    #[serde(default)]
    pub rate_share: Option<f64>,
    /// Arrival process. Default `Poisson`.
    #[serde(default)]
    pub arrival: ArrivalSpec,
    /// Prompt tokens, in addition to any shared prefix (per turn for sessions).
    pub input_tokens: LengthSpec,
    /// Output tokens (each request generates exactly this many, at least 1).
    pub output_tokens: LengthSpec,
    /// Tokens of the system prompt shared by every request of a prefix group. Default 0.
    #[serde(default)]
    pub shared_prefix_tokens: u32,
    /// Number of prefix groups the client's requests are spread over (uniformly at random),
    /// each with its own system prompt. Default 1.
    #[serde(default = "one")]
    pub prefix_groups: u32,
    /// Base id of the client's prefix groups; clients with the same base share prompts.
    /// Default: groups of their own.
    #[serde(default)]
    pub prefix_group: Option<u32>,
    /// Reuse a fixed pool of this many whole prompts in rotation (same content and length
    /// each time round), so repeats hit the prefix cache in full. Default: every prompt new.
    #[serde(default)]
    pub prompt_pool: Option<u32>,
    /// Multi-turn sessions: each arrival starts a session of several turns.
    #[serde(default)]
    pub session: Option<SessionSpec>,
    /// The LoRA adapter its requests run with. Default: the base model.
    #[serde(default)]
    pub adapter: Option<AdapterChoice>,
    /// A request not finished this long after its arrival is abandoned (seconds).
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// Multi-turn conversations (closed loop).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Turns per session.
    pub turns: LengthSpec,
    /// Time between a turn's completion and the next turn's arrival (seconds).
    #[serde(default)]
    pub think_time_s: f64,
    /// Each turn's prompt = previous prompt + previous output + the new question.
    /// Default false (each turn is the shared prefix + a new question).
    #[serde(default)]
    pub accumulate: bool,
}

/// Inter-arrival process.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum ArrivalSpec {
    /// Exponential inter-arrival times.
    #[default]
    Poisson,
    /// Evenly spaced, 1/rate apart.
    Constant,
    /// Gamma inter-arrival times with this coefficient of variation (cv > 1 is bursty).
    Gamma { cv: f64 },
    /// Weibull inter-arrival times with this coefficient of variation.
    Weibull { cv: f64 },
    /// Poisson at the client's rate during `on_s`, silent for `off_s`, repeating.
    OnOff { on_s: f64, off_s: f64 },
    /// `count` requests all at t = 0 (offline batch).
    AllAtZero { count: u64 },
    /// Poisson stages run back to back; with `exact`, exactly round(rate × duration)
    /// arrivals are placed uniformly at random in each stage.
    Staged {
        stages: Vec<Stage>,
        #[serde(default)]
        exact: bool,
    },
    /// inference-perf's constant load timer per stage: exactly ⌊rate × duration⌋ arrivals
    /// whose gaps are exponential draws normalised to sum to the stage duration (the last
    /// arrival falls on the stage end).
    ConstantTimer { stages: Vec<Stage> },
}

/// One stage of a staged load.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub rate_per_s: f64,
    pub duration_s: f64,
}

/// A token-length distribution. Samples are whole tokens.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum LengthSpec {
    /// Always this many tokens.
    Constant(u32),
    /// Uniform over [min, max], inclusive.
    Uniform { min: u32, max: u32 },
    /// Normal(mean, stdev), clamped to [min, max], then rounded (BLIS gaussian).
    Normal {
        mean: f64,
        stdev: f64,
        min: u32,
        max: u32,
    },
    /// exp(N(mu, sigma)), clamped to [min, max], rounded.
    LogNormal {
        mu: f64,
        sigma: f64,
        #[serde(default)]
        min: u32,
        #[serde(default = "max_tokens")]
        max: u32,
    },
    /// Exponential with this mean, clamped to [min, max], rounded.
    Exponential {
        mean: f64,
        #[serde(default)]
        min: u32,
        #[serde(default = "max_tokens")]
        max: u32,
    },
    /// Zipf over 1..=max with exponent s: P(k) ∝ k^−s.
    Zipf { max: u32, exponent: f64 },
    /// Values drawn uniformly from a column of a CSV file (path relative to the scenario).
    Empirical { file: String, column: String },
}

/// The longest prompt or output a request may have (2²⁴ tokens), and the most turns a
/// session may have: validation refuses distributions that ask for more, and samples are
/// capped at it. It is also the `max` of a `LogNormal` or `Exponential` that gives none.
pub const MAX_TOKENS: u32 = 1 << 24;

fn max_tokens() -> u32 {
    MAX_TOKENS
}

impl LengthSpec {
    /// Smallest value the distribution can produce (0 for Empirical, unknown up front).
    pub fn min_value(&self) -> u32 {
        match *self {
            LengthSpec::Constant(n) => n,
            LengthSpec::Uniform { min, .. }
            | LengthSpec::Normal { min, .. }
            | LengthSpec::LogNormal { min, .. }
            | LengthSpec::Exponential { min, .. } => min,
            LengthSpec::Zipf { .. } => 1,
            LengthSpec::Empirical { .. } => 0,
        }
    }

    /// Largest value the distribution can produce (None for Empirical, unknown up front).
    pub fn max_value(&self) -> Option<u32> {
        match *self {
            LengthSpec::Constant(n) => Some(n),
            LengthSpec::Uniform { max, .. }
            | LengthSpec::Normal { max, .. }
            | LengthSpec::LogNormal { max, .. }
            | LengthSpec::Exponential { max, .. }
            | LengthSpec::Zipf { max, .. } => Some(max),
            LengthSpec::Empirical { .. } => None,
        }
    }
}

/// A trace to replay.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// `VidurCsv`, `Mooncake` or `ServesimCsv`.
    pub format: TraceFormat,
    /// Path relative to the scenario file.
    pub file: String,
    /// Multiplies timestamps (2.0 = half the rate). Default 1.
    #[serde(default = "unit")]
    pub time_scale: f64,
    /// Multiplies the arrival rate (divides timestamps). Default 1.
    #[serde(default = "unit")]
    pub rate_scale: f64,
    /// Multiplies token counts (rounded, at least 1; `VidurCsv`'s cut down, as Vidur does).
    /// Default 1.
    #[serde(default = "unit")]
    pub token_scale: f64,
    /// Tokens per `hash_ids` entry (Mooncake). Default 16.
    #[serde(default = "default_block_size")]
    pub hash_block_tokens: u32,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub slo_class: Option<String>,
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What a `ServesimCsv` trace's own `tenant` and `slo_class` columns name: read from the
    /// file by the loader, never written in a scenario.
    #[serde(skip)]
    pub row_labels: RowLabels,
}

/// The tenants and SLO classes a `ServesimCsv` trace's rows name (its `tenant` and
/// `slo_class` columns), each in order of first appearance and at most
/// [`MAX_ROW_LABELS`] of each; a row that leaves a cell empty (or a file without the
/// column) takes its `traces` entry's label.
#[derive(Clone, Debug, PartialEq)]
pub struct RowLabels {
    pub tenants: Vec<String>,
    pub slo_classes: Vec<String>,
    /// Some row takes the entry's tenant (an empty cell, or no `tenant` column).
    pub entry_tenant_used: bool,
    /// Some row takes the entry's SLO class.
    pub entry_class_used: bool,
}

impl RowLabels {
    /// What a trace whose file has neither column (or could not be read) uses.
    pub const ENTRY_ONLY: RowLabels = RowLabels {
        tenants: Vec::new(),
        slo_classes: Vec::new(),
        entry_tenant_used: true,
        entry_class_used: true,
    };
}

impl Default for RowLabels {
    fn default() -> Self {
        RowLabels::ENTRY_ONLY
    }
}

/// The most distinct tenants, or SLO classes, one trace's rows may name (each is a row of
/// the summary's per-tenant or per-class breakdown).
pub const MAX_ROW_LABELS: usize = 1000;

fn unit() -> f64 {
    1.0
}

/// Trace file formats.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum TraceFormat {
    /// Vidur/Splitwise CSV: `arrived_at` (s), `num_prefill_tokens`, `num_decode_tokens`.
    VidurCsv,
    /// Mooncake JSON lines: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// servesim CSV: `arrival_us`, `input_tokens`, `output_tokens`, optional `prefix_group`,
    /// `prefix_tokens`, `adapter`, `tenant`, `slo_class` (other columns are not read). A
    /// `requests.csv` output, sorted by arrival, replays as is.
    ServesimCsv,
}
