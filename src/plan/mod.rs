//! `servesim plan`: the cheapest configuration of one instance group that meets every SLO of
//! the scenario at its workload's rate, the Pareto front of cost against p99 TTFT, and why
//! every other configuration lost.
//!
//! **Configurations** are the cartesian product of the `plan` block's lists (GPU, TP, PP,
//! `max_num_seqs`, `max_num_batched_tokens`, batch scheduler, routing; a list left out is
//! the group's own value). Each is loaded as the scenario with its values set; one the
//! loader refuses (the model does not fit the GPU's memory at that parallelism, a limit it
//! breaks) is *excluded* with the loader's reason, at no run.
//!
//! **Meeting the SLOs** at `n` instances means: a run of the scenario as written (its rate,
//! its seed; every seed with `--replicas`) is *sustained* and every SLO class with targets
//! reaches its attainment, by the test of `servesim capacity` ([`crate::capacity`]) over the
//! window after a 25 % warm-up. Meeting them is assumed to be monotone in `n`.
//!
//! **The search is a branch and bound** on the price per hour. Configurations are taken in
//! order of price per unit (GPUs per unit × price per GPU-hour), [`ROUND`] at a time
//! (in parallel), each against the best price found before its round:
//! - with a best price `C`, the most instances (units) that cost no more is
//!   `m = ⌊C / price per unit⌋` (a tie is searched, and decided on p99 TTFT); `m = 0` is
//!   *dominated* at no run;
//! - one run at `m` (or at `max_instances` before anything is found): failing it, the
//!   configuration cannot win (*infeasible* within the bound);
//! - passing it, a bisection on `n` in `1..=m` finds its fewest instances (*feasible*).
//!
//! The order of configurations and rounds does not depend on the number of threads, so the
//! answer and every configuration's status are the same on any machine.
//!
//! **Shards** (`--shard I/N`) search the configurations whose place in that order is I
//! modulo N, each with its own bound; [`merge`] joins them into the same best configuration
//! (they prune less, so they run more, unless all start from one `plan.bound`: the search
//! then begins as if a deployment at that price had been found). **Resume**: with `--out`, every finished trial is
//! appended to [`progress::FILE`]; `--resume` reuses them, and because the search is
//! deterministic it replays the same decisions, so the answer is byte-identical.

mod merge;
pub mod progress;
mod search;
mod write;

pub use merge::merge;
pub use search::*;
pub use write::CONFIG_COLUMNS;
