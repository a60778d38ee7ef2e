//! `reject_all`: no request enters the cluster (a baseline and a test of the rejection path).

use super::{Admission, AdmissionEntry, AdmissionPolicy, InstanceSnapshot};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: AdmissionEntry = AdmissionEntry {
    name: "reject_all",
    description: "reject every request",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(RejectAll)),
};

#[derive(Debug, Default)]
pub struct RejectAll;

impl AdmissionPolicy for RejectAll {
    fn admit(&mut self, _: &RequestSpec, _: SimTime, _: &[InstanceSnapshot]) -> Admission {
        Admission::Reject("reject_all")
    }
}
