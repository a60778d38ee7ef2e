//! `static`: the cluster keeps the size the scenario gives it; the autoscaler never ticks.

use super::{InstanceSnapshot, ScaleDecision, ScaleEntry, ScalePolicy};
use crate::time::{SimDuration, SimTime};

pub(super) const ENTRY: ScaleEntry = ScaleEntry {
    name: "static",
    description: "fixed cluster size (no autoscaling)",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(StaticScale)),
};

#[derive(Debug, Default)]
pub struct StaticScale;

impl ScalePolicy for StaticScale {
    fn interval(&self) -> Option<SimDuration> {
        None
    }
    fn evaluate(&mut self, _: SimTime, _: &[InstanceSnapshot]) -> ScaleDecision {
        ScaleDecision::Hold
    }
}
