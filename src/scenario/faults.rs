//! The faults schema: a scenario's `faults` block — stragglers (an instance's steps slowed
//! by a factor for a window), degraded or severed links (KV transfer, host, pipeline), and
//! crashes (at a time or with an MTBF, then repair and model
//! reload; the requests on a crashed instance failed or retried). The fault plugin
//! (`crate::faults`) applies it.

use serde::Deserialize;

/// A scenario's `faults` block.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FaultsSpec {
    /// Instances whose steps run slower for a while.
    pub stragglers: Vec<StragglerSpec>,
    /// Instances that crash at a given time.
    pub crashes: Vec<CrashSpec>,
    /// KV-transfer links (P/D) degraded or severed for a while.
    pub kv_links: Vec<LinkFaultSpec>,
    /// Host links (the CPU KV tier's offloads and reloads) degraded or severed for a while.
    pub host_links: Vec<LinkFaultSpec>,
    /// Links between pipeline stages (`pp` > 1) degraded or severed for a while.
    pub pp_links: Vec<LinkFaultSpec>,
    /// Mean time between failures of each instance, seconds of its time up: crashes drawn
    /// from an exponential distribution (a seeded stream of their own). `None`: none.
    pub mtbf_s: Option<f64>,
    /// Down time after a crash before the instance starts again (detecting the failure,
    /// restarting the server). Default 30 s: Kubernetes' liveness probe defaults,
    /// `periodSeconds` 10 × `failureThreshold` 3.
    pub repair_s: f64,
    /// Model load after the repair, seconds. Default: one GPU's share of the weights at
    /// 2 GB/s (as autoscaling's `load_s`); 0 without a model.
    pub reload_s: Option<f64>,
    /// What happens to the requests on a crashed instance (and those reaching it while it is
    /// down). Default `Fail`.
    pub on_crash: CrashPolicy,
}

impl Default for FaultsSpec {
    fn default() -> Self {
        FaultsSpec {
            stragglers: Vec::new(),
            crashes: Vec::new(),
            kv_links: Vec::new(),
            host_links: Vec::new(),
            pp_links: Vec::new(),
            mtbf_s: None,
            repair_s: 30.0,
            reload_s: None,
            on_crash: CrashPolicy::Fail,
        }
    }
}

impl FaultsSpec {
    /// True when instances may crash (listed crashes or an MTBF).
    pub fn crashes_on(&self) -> bool {
        !self.crashes.is_empty() || self.mtbf_s.is_some()
    }
}

/// One straggler: every step instance `instance` starts in [`from_s`, `until_s`) takes
/// `slowdown` times as long on its GPUs (a throttled GPU, a noisy neighbour).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StragglerSpec {
    /// The instance's index (as in `requests.csv`: instances numbered across groups in
    /// order, from 0).
    pub instance: u32,
    pub from_s: f64,
    pub until_s: f64,
    /// ≥ 1: how many times as long a step takes.
    pub slowdown: f64,
}

/// One link fault: instance `instance`'s link (its KV-transfer link for `kv_links`, its host
/// link for `host_links`, the links between its pipeline stages for `pp_links`) keeps
/// `bandwidth` of its bandwidth in [`from_s`, `until_s`); 0 severs it. A transfer that starts
/// in the window runs at that bandwidth throughout; on a severed link it starts when the
/// window ends.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkFaultSpec {
    pub instance: u32,
    pub from_s: f64,
    pub until_s: f64,
    /// The fraction of the link's bandwidth left, in [0, 1]; 0 = severed.
    pub bandwidth: f64,
}

/// One crash: instance `instance` fails at `at_s` (if it is up then).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CrashSpec {
    pub instance: u32,
    pub at_s: f64,
}

/// The requests a crash takes down.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum CrashPolicy {
    /// They end `failed` (the client sees an error).
    Fail,
    /// The client sends each again through the router, after `backoff_s` doubling with each
    /// retry up to `max_backoff_s`, at most `max_retries` times (then it fails). The retry
    /// starts from its prompt: the KV it had is lost. Defaults: OpenAI's Python client's
    /// (2 retries, 0.5 s doubling to at most 8 s; without its jitter).
    Retry {
        #[serde(default = "default_max_retries")]
        max_retries: u32,
        #[serde(default = "default_backoff_s")]
        backoff_s: f64,
        #[serde(default = "default_max_backoff_s")]
        max_backoff_s: f64,
    },
}

impl CrashPolicy {
    /// The wait before retry number `n` (from 1), seconds; `None` when the budget is spent.
    pub fn backoff(&self, n: u32) -> Option<f64> {
        match self {
            CrashPolicy::Fail => None,
            CrashPolicy::Retry {
                max_retries,
                backoff_s,
                max_backoff_s,
            } => (n <= *max_retries).then(|| {
                (backoff_s * 2f64.powi(n.saturating_sub(1).min(1000) as i32)).min(*max_backoff_s)
            }),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            CrashPolicy::Fail => "fail",
            CrashPolicy::Retry { .. } => "retry",
        }
    }
}

fn default_max_retries() -> u32 {
    2
}
fn default_backoff_s() -> f64 {
    0.5
}
fn default_max_backoff_s() -> f64 {
    8.0
}
