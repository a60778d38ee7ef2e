//! SLO classes as the run uses them: per class (by label index) a priority and latency
//! targets. Plain data built from the scenario; batch formation orders by it and metrics
//! count good requests with it.

use bevy_ecs::prelude::*;

use crate::labels::Labels;
use crate::request::RequestSpec;
use crate::scenario::SloClassSpec;
use crate::time::SimDuration;

/// Per SLO class (by label index): priority and latency targets (µs).
#[derive(Resource, Debug, Clone, Default, PartialEq)]
pub struct SloTable {
    pub classes: Vec<SloClass>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SloClass {
    pub name: String,
    pub priority: i32,
    pub ttft: Option<SimDuration>,
    pub itl: Option<SimDuration>,
    pub e2e: Option<SimDuration>,
}

impl SloTable {
    pub fn new(labels: &Labels, specs: &[SloClassSpec]) -> Self {
        let ms = |v: Option<f64>| v.map(|x| SimDuration::from_us_f64(x * 1000.0));
        let classes = labels
            .slo_classes
            .iter()
            .map(|name| {
                let spec = specs.iter().find(|s| &s.name == name);
                SloClass {
                    name: name.clone(),
                    priority: spec
                        .and_then(|s| s.priority)
                        .unwrap_or_else(|| default_class_priority(name)),
                    ttft: ms(spec.and_then(|s| s.ttft_ms)),
                    itl: ms(spec.and_then(|s| s.itl_ms)),
                    e2e: ms(spec.and_then(|s| s.e2e_ms)),
                }
            })
            .collect();
        SloTable { classes }
    }

    /// The class priority of a request plus its workload priority (saturating: a client
    /// priority near i32::MAX in a high class stays on top instead of wrapping to the bottom).
    pub fn class_priority(&self, spec: &RequestSpec) -> i32 {
        self.classes
            .get(spec.slo_class as usize)
            .map_or(3, |c| c.priority)
            .saturating_add(spec.priority)
    }
}

/// Default priority of well-known SLO class names (BLIS); others are `standard` (3).
pub fn default_class_priority(name: &str) -> i32 {
    match name {
        "critical" => 4,
        "batch" => -1,
        "sheddable" => -2,
        "background" => -3,
        _ => 3,
    }
}
