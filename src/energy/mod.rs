//! Energy: what the GPUs draw, step by step, and what that makes per request, per output
//! token and for the run (`energy:` in a scenario; docs/energy.md).
//!
//! The model (one instance of `tp` GPUs per pipeline stage):
//! - **idle** (`idle_w` per GPU): an instance that is on (any phase but off: provisioning,
//!   loading, warming up, serving, draining) and runs no step;
//! - **a step** of `dt` seconds keeps `tp` GPUs busy for `dt` in all (each of `pp` stages for
//!   `dt / pp`) at `floor_w + (max_w − floor_w) · u` per GPU, where u is the step's
//!   utilisation: u = min(1, F / (tp · dt · peak) + R · b / (tp · dt · bandwidth)), F the
//!   step's FLOPs (2 · active parameters per token computed, 2 · vocab · hidden per request
//!   for its logits row, 4 · layers · heads · head_dim per query–key pair of attention),
//!   R the tokens of KV the step's attention reads (a decode: its context; a prefill chunk:
//!   its prompt so far) and b the KV bytes per token of the whole model. This is the form of
//!   the vLLM semantic router's fleet simulator (docs/fleet-sim/power-model): the weight
//!   stream every step pays is in `floor_w`, the work a batch adds (tensor-core FLOPs, KV
//!   reads) raises power towards `max_w`.
//! - Each request is charged its share of the steps it took part in, in proportion to the
//!   tokens computed for it (a lockstep decode step: equal shares). Idle time is charged to
//!   no request: Σ requests' energy = the steps' energy, exactly (tested).
//! - The run's GPU energy = steps + idle; the facility's = GPU energy × `pue`.
//!
//! Every term costs nothing when `energy` is absent: no meter exists, the step pays one
//! `Option` test.

mod plugin;
#[cfg(test)]
mod tests;

pub use crate::instance::energy::{Meter, StepWork};
pub use crate::metrics::{EnergySummary, GroupEnergy};
pub use crate::model::flops_per_token;
pub use crate::scenario::{EnergySpec, PowerFigures};
pub use plugin::{EnergyPlugin, check, check_group, power_of};
