//! Injected faults (issue 34 item 1, in part): **stragglers**. A scenario's
//! `faults: (stragglers: [(instance, from_s, until_s, slowdown)])` slows every step an
//! instance starts in the window `slowdown` times (its GPU work, after the latency model's
//! price and any warm-up slowness; the engine core's CPU work around it is not slowed), as a
//! thermally throttled GPU or a noisy neighbour would. Windows of one instance that overlap
//! multiply. The summary's `faults` block gives, per straggler, the steps it slowed and the
//! SLO attainment of the requests that arrived before, during and after its window, so a
//! plan can see what one slow instance costs the cluster and how long the cost outlasts it.
//!
//! Not yet: instance crashes (MTBF, repair, fail or retry policies), degraded or severed
//! links; see the issue.

mod check;
mod plugin;
#[cfg(test)]
mod tests;

pub use check::check;
pub use plugin::{FaultsPlugin, Spans, tally_spans};
