//! `tenant_quota`: a request-rate limit per tenant. Each tenant has a bucket of `burst`
//! requests refilled at `rate_per_s` (a parameter named after a tenant overrides its rate);
//! a request over its tenant's quota is rejected.

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
        ("<tenant>", "rate for that tenant, overriding rate_per_s"),
    ],
    free_params: true,
    build: |a| {
        let rate = a.at_least("rate_per_s", 10.0, 0.0)?;
        let burst = a.at_least("burst", rate.max(1.0), 1.0)?;
        let mut buckets = Vec::new();
        for name in &a.labels.tenants {
            let r = a.params.get(name).copied().unwrap_or(rate);
            if !r.is_finite() || r < 0.0 {
                return Err(format!("{name} must be a finite rate ≥ 0, got {r}"));
            }
            buckets.push(TokenBucket::new(burst, r));
        }
        for k in a.params.keys() {
            if !["rate_per_s", "burst"].contains(&k.as_str()) && !a.labels.tenants.contains(k) {
                return Err(format!(
                    "`{k}` is neither a parameter nor a tenant of this workload"
                ));
            }
        }
        Ok(Box::new(TenantQuota {
            buckets,
            _rates: a.params.clone(),
        }))
    },
};

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
