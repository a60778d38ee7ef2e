//! Injected faults (issue 34 item 1): **stragglers** and **crashes**.
//!
//! A scenario's `faults: (stragglers: [(instance, from_s, until_s, slowdown)])` slows every
//! step an instance starts in the window `slowdown` times (its GPU work, after the latency
//! model's price and any warm-up slowness; the engine core's CPU work around it is not
//! slowed), as a thermally throttled GPU or a noisy neighbour would. Windows of one instance
//! that overlap multiply. The summary's `faults` block gives, per straggler, the steps it
//! slowed and the SLO attainment of the requests that arrived before, during and after its
//! window, so a plan can see what one slow instance costs the cluster and how long the cost
//! outlasts it.
//!
//! `crashes`, `mtbf_s`, `repair_s`, `reload_s` and `on_crash` crash instances ([`crash`]):
//! everything on a crashed instance is taken down, a fixed-size group's instance serves again
//! after its repair and model reload, an autoscaled group's is off; the requests taken down
//! fail or are retried through the router. INV-10 checks that a down instance holds nothing.
//!
//! `kv_links` degrade or sever P/D KV-transfer links for a window (applied by the Transfer
//! stage: `crate::disagg::through_faults`); `host_links` and `pp_links` do the same for the
//! CPU KV tier's host link and the links between pipeline stages (windows on the instance's
//! scheduler, applied where its step is priced: `instance::through_windows`).

mod check;
pub mod crash;
mod plugin;
#[cfg(test)]
mod tests;

pub use check::check;
pub use plugin::{FaultsPlugin, Spans, tally_spans};

/// What `validate` says of a scenario's crashes: each listed crash, the MTBF, the down time
/// (`reloads`: each group's reload, described) and the policy.
pub fn describe_crashes(f: &crate::scenario::FaultsSpec, reloads: &[String]) -> Vec<String> {
    let mut out: Vec<String> = f
        .crashes
        .iter()
        .map(|c| format!("instance {} crashes at {} s", c.instance, c.at_s))
        .collect();
    if let Some(m) = f.mtbf_s {
        out.push(format!(
            "every instance crashes once per {m} s of its time up on average (MTBF, exponential; stream faults.mtbf.<instance>)"
        ));
    }
    out.push(format!(
        "a crashed instance is down {} s (repair), then reloads its model — {}",
        f.repair_s,
        reloads.join("; ")
    ));
    out.push(match &f.on_crash {
        crate::scenario::CrashPolicy::Fail => {
            "the requests a crash takes down fail (on_crash: Fail)".to_string()
        }
        crate::scenario::CrashPolicy::Retry {
            max_retries,
            backoff_s,
            max_backoff_s,
        } => format!(
            "the requests a crash takes down are sent again through the router up to {max_retries} times, after {backoff_s} s doubling to at most {max_backoff_s} s (on_crash: Retry)"
        ),
    });
    out
}
