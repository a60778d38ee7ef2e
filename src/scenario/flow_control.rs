//! The gateway's flow control schema: a scenario's `flow_control` block (priority bands, their
//! limits, and the saturation detector that decides when a queued request may go on to
//! routing). The gateway plugin (`crate::gateway`) runs it.

use serde::Deserialize;

/// A scenario's `flow_control` block: its presence puts a gateway queue between admission
/// and routing. `flow_control: ()` queues every priority in a band of its own with no limits
/// and llm-d's default saturation thresholds.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FlowControlSpec {
    /// When the instances count as saturated (requests then wait in their bands).
    pub saturation: SaturationSpec,
    /// Bands with limits of their own, by request priority (the workload's `priority`).
    pub bands: Vec<BandSpec>,
    /// The limits of a band for a priority not listed in `bands` (each such priority gets a
    /// band of its own). Default: no limits.
    pub default_band: BandLimits,
    /// Requests all bands may hold together; one arriving when they do is shed
    /// (`gateway_full`). Default: no limit.
    pub max_requests: Option<u32>,
}

/// The saturation detector's thresholds (llm-d's, with its defaults): an instance has room
/// while its waiting requests (wait queue plus those routed to it and not yet there) are
/// at most `queue_depth` and its KV cache use is at most `kv_util`; the cluster is saturated
/// when no routable instance has room.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SaturationSpec {
    /// Waiting requests per instance. Default 5.
    pub queue_depth: u32,
    /// KV blocks in use / all blocks, in (0, 1]. Default 0.8.
    pub kv_util: f64,
}

impl Default for SaturationSpec {
    fn default() -> Self {
        SaturationSpec {
            queue_depth: 5,
            kv_util: 0.8,
        }
    }
}

/// One priority band: the requests of this `priority` and the band's limits.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BandSpec {
    /// The requests' priority (higher is served first).
    pub priority: i32,
    /// Requests the band may hold; one arriving at a full band is shed
    /// (`gateway_band_full`). Default: no limit.
    #[serde(default)]
    pub max_requests: Option<u32>,
    /// Longest a request may wait in the band (seconds); it is shed then
    /// (`gateway_wait_expired`). Default: no limit.
    #[serde(default)]
    pub max_wait_s: Option<f64>,
}

/// A band's limits (`default_band`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BandLimits {
    pub max_requests: Option<u32>,
    pub max_wait_s: Option<f64>,
}
