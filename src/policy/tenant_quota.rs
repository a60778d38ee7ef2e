//! `tenant_quota`: a request-rate limit per tenant. Each tenant has a bucket of `burst`
//! requests refilled at `rate_per_s` (`tenant.<name>` overrides one tenant's rate: tenant
//! names live in their own namespace, so a tenant may be called `burst`); a request over
//! its tenant's quota is rejected.

use std::collections::BTreeMap;

use super::token_bucket::TokenBucket;
use super::{Admission, AdmissionEntry, AdmissionPolicy, InstanceSnapshot};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: AdmissionEntry = AdmissionEntry {
    name: "tenant_quota",
    description: "per-tenant request rate limit (token bucket per tenant)",
    params: &[
        ("rate_per_s", "requests per second per tenant [10]"),
        ("burst", "requests a tenant may send at once [rate_per_s]"),
        (
            "tenant.<name>",
            "rate for that tenant, overriding rate_per_s",
        ),
    ],
    free_params: true,
    build: |a| {
        let rate = a.at_least("rate_per_s", 10.0, 0.0)?;
        let burst = a.at_least("burst", rate.max(1.0), 1.0)?;
        let mut buckets = Vec::new();
        for name in &a.labels.tenants {
            let key = format!("{TENANT}{name}");
            let r = a.params.get(&key).copied().unwrap_or(rate);
            if !r.is_finite() || r < 0.0 {
                return Err(format!("{key} must be a finite rate ≥ 0, got {r}"));
            }
            buckets.push(TokenBucket::new(burst, r));
        }
        for k in a.params.keys() {
            if ["rate_per_s", "burst"].contains(&k.as_str()) {
                continue;
            }
            match k.strip_prefix(TENANT) {
                Some(t) if a.labels.tenants.iter().any(|x| x == t) => {}
                Some(t) => {
                    return Err(format!(
                        "`{k}`: this workload has no tenant `{t}` (tenants: {})",
                        a.labels.tenants.join(", ")
                    ));
                }
                None if a.labels.tenants.contains(k) => {
                    return Err(format!(
                        "`{k}` is a tenant: write `{TENANT}{k}` for its rate"
                    ));
                }
                None => {
                    return Err(format!(
                        "`{k}` is neither a parameter nor `{TENANT}<tenant>`"
                    ));
                }
            }
        }
        Ok(Box::new(TenantQuota {
            buckets,
            _rates: a.params.clone(),
        }))
    },
};

/// Prefix of per-tenant rate parameters.
const TENANT: &str = "tenant.";

pub struct TenantQuota {
    buckets: Vec<TokenBucket>,
    _rates: BTreeMap<String, f64>,
}

impl AdmissionPolicy for TenantQuota {
    fn admit(&mut self, r: &RequestSpec, now: SimTime, _: &[InstanceSnapshot]) -> Admission {
        match self.buckets.get_mut(r.tenant as usize) {
            Some(b) => {
                if b.try_take(1.0, now) {
                    Admission::Admit
                } else {
                    Admission::Reject("tenant_quota")
                }
            }
            None => Admission::Admit,
        }
    }
}
