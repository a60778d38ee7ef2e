//! `token_bucket` (BLIS §6.1): a bucket of `capacity` tokens, full at the start, refilled at
//! `refill_per_s`; a request costs its input tokens and is admitted iff the bucket holds
//! at least that many.

use super::{Admission, AdmissionEntry, AdmissionPolicy, InstanceSnapshot};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: AdmissionEntry = AdmissionEntry {
    name: "token_bucket",
    description: "admit while a token bucket (cost = input tokens) has room",
    params: &[
        ("capacity", "bucket size in tokens [10000]"),
        ("refill_per_s", "tokens added per second [1000]"),
    ],
    free_params: false,
    build: |a| {
        Ok(Box::new(TokenBucket::new(
            a.at_least("capacity", 10_000.0, 0.0)?,
            a.at_least("refill_per_s", 1_000.0, 0.0)?,
        )))
    },
};

#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    capacity: f64,
    refill_per_us: f64,
    tokens: f64,
    last: SimTime,
}

impl TokenBucket {
    pub fn new(capacity: f64, refill_per_s: f64) -> Self {
        TokenBucket {
            capacity,
            refill_per_us: refill_per_s / 1e6,
            tokens: capacity,
            last: SimTime::ZERO,
        }
    }

    /// Takes `cost` tokens if available.
    pub fn try_take(&mut self, cost: f64, now: SimTime) -> bool {
        let elapsed = now.since(self.last).as_us() as f64;
        self.tokens = (self.tokens + elapsed * self.refill_per_us).min(self.capacity);
        self.last = now;
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

impl AdmissionPolicy for TokenBucket {
    fn admit(&mut self, r: &RequestSpec, now: SimTime, _: &[InstanceSnapshot]) -> Admission {
        if self.try_take(f64::from(r.input_tokens), now) {
            Admission::Admit
        } else {
            Admission::Reject("token_bucket")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::any_request;

    #[test]
    fn the_bucket_admits_its_capacity_then_refills_at_its_rate() {
        let mut b = TokenBucket::new(25.0, 10.0); // requests cost 10 tokens
        let r = any_request();
        let t0 = SimTime(0);
        assert_eq!(b.admit(&r, t0, &[]), Admission::Admit);
        assert_eq!(b.admit(&r, t0, &[]), Admission::Admit);
        assert_eq!(
            b.admit(&r, t0, &[]),
            Admission::Reject("token_bucket"),
            "5 left"
        );
        // 0.5 s later: 5 + 5 = 10 tokens.
        assert_eq!(b.admit(&r, SimTime(500_000), &[]), Admission::Admit);
        // Never above capacity: after an hour, 25 → two admits.
        let later = SimTime(3_600_000_000);
        assert_eq!(b.admit(&r, later, &[]), Admission::Admit);
        assert_eq!(b.admit(&r, later, &[]), Admission::Admit);
        assert_eq!(b.admit(&r, later, &[]), Admission::Reject("token_bucket"));
    }
}
