//! `static`: the cluster keeps the size the scenario gives it; the autoscaler never ticks.

use super::{GroupSignals, ScaleEntry, ScalePolicy, ScaleTarget};
use crate::time::SimTime;

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
    fn next_evaluation(&self, _: SimTime, _: bool) -> Option<SimTime> {
        None
    }
    fn evaluate(&mut self, _: SimTime, _: &[GroupSignals]) -> Vec<ScaleTarget> {
        Vec::new()
    }
}
