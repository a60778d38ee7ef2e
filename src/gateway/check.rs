//! Checks of a scenario's `flow_control` block.

use crate::scenario::{Problem, Scenario};

/// Checks the detector's thresholds, each band's limits and that no priority has two bands.
pub fn check(p: &mut Vec<Problem>, s: &Scenario) {
    let Some(fc) = &s.flow_control else {
        return;
    };
    let kv = fc.saturation.kv_util;
    if !kv.is_finite() || kv <= 0.0 || kv > 1.0 {
        p.push(
            Problem::new(
                "flow_control.saturation.kv_util",
                format!("must be a fraction in (0, 1], got {kv}"),
            )
            .hint("KV blocks in use / all blocks above which an instance has no room; llm-d's default is 0.8"),
        );
    }
    limits(
        p,
        "flow_control.default_band",
        fc.default_band.max_requests,
        fc.default_band.max_wait_s,
    );
    if fc.max_requests == Some(0) {
        p.push(
            Problem::new(
                "flow_control.max_requests",
                "must be at least 1: a gateway that holds nothing sheds every request",
            )
            .hint("leave it out for no limit on all bands together"),
        );
    }
    for (k, b) in fc.bands.iter().enumerate() {
        let at = format!("flow_control.bands[{k}]");
        limits(p, &at, b.max_requests, b.max_wait_s);
        if let Some(j) = fc.bands[..k].iter().position(|o| o.priority == b.priority) {
            p.push(
                Problem::new(
                    format!("{at}.priority"),
                    format!(
                        "priority {} already has a band (flow_control.bands[{j}])",
                        b.priority
                    ),
                )
                .hint("give each priority one band"),
            );
        }
    }
}

fn limits(p: &mut Vec<Problem>, at: &str, max_requests: Option<u32>, max_wait_s: Option<f64>) {
    if max_requests == Some(0) {
        p.push(
            Problem::new(
                format!("{at}.max_requests"),
                "must be at least 1: a band that holds nothing sheds every request of its priority",
            )
            .hint("leave it out for no limit, or reject these requests with an admission policy"),
        );
    }
    if let Some(w) = max_wait_s {
        crate::scenario::wait_seconds(
            p,
            &format!("{at}.max_wait_s"),
            w,
            "leave it out to let requests wait until routed or given up by their client",
        );
    }
}
