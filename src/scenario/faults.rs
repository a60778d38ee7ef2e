//! The faults schema: a scenario's `faults` block. Today it injects stragglers (an
//! instance's steps slowed by a factor for a window); the fault plugin (`crate::faults`)
//! applies it.

use serde::Deserialize;

/// A scenario's `faults` block.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FaultsSpec {
    /// Instances whose steps run slower for a while.
    pub stragglers: Vec<StragglerSpec>,
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
