//! `always_admit`: every request enters the cluster.

use super::{Admission, AdmissionEntry, AdmissionPolicy, InstanceSnapshot};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: AdmissionEntry = AdmissionEntry {
    name: "always_admit",
    description: "admit every request",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(AlwaysAdmit)),
};

#[derive(Debug, Default)]
pub struct AlwaysAdmit;

impl AdmissionPolicy for AlwaysAdmit {
    fn admit(&mut self, _: &RequestSpec, _: SimTime, _: &[InstanceSnapshot]) -> Admission {
        Admission::Admit
    }
}
