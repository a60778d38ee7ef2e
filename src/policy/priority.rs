//! Priority policies (BLIS §6.2): a request's priority in priority-ordered queues.
//! `class_priority` = its SLO class's priority (critical 4, standard 3, batch −1,
//! sheddable −2, background −3 unless the scenario says otherwise) + its workload priority.

use super::{PriorityEntry, PriorityPolicy};
use crate::request::RequestSpec;
use crate::time::SimDuration;

/// `constant`: every request has the same priority (0).
pub(super) const CONSTANT: PriorityEntry = PriorityEntry {
    name: "constant",
    description: "every request has priority 0",
    params: &[],
    free_params: false,
    build: |_| Ok(Box::new(Constant)),
};

/// `slo_based`: class priority + age_weight · age in seconds (old requests rise).
pub(super) const SLO_BASED: PriorityEntry = PriorityEntry {
    name: "slo_based",
    description: "SLO-class priority + age_weight · seconds waited",
    params: &[("age_weight", "priority gained per second of age [0]")],
    free_params: false,
    build: |a| {
        Ok(Box::new(SloBased {
            age_weight: a.at_least("age_weight", 0.0, 0.0)?,
            sign: 1.0,
        }))
    },
};

/// `inverted_slo`: the reverse of the class order (a testing and comparison baseline).
pub(super) const INVERTED_SLO: PriorityEntry = PriorityEntry {
    name: "inverted_slo",
    description: "−(SLO-class priority) + age_weight · seconds waited",
    params: &[("age_weight", "priority gained per second of age [0]")],
    free_params: false,
    build: |a| {
        Ok(Box::new(SloBased {
            age_weight: a.at_least("age_weight", 0.0, 0.0)?,
            sign: -1.0,
        }))
    },
};

pub struct Constant;

impl PriorityPolicy for Constant {
    fn priority(&self, _: &RequestSpec, _: i32, _: SimDuration) -> f64 {
        0.0
    }
}

pub struct SloBased {
    age_weight: f64,
    sign: f64,
}

impl PriorityPolicy for SloBased {
    fn priority(&self, _: &RequestSpec, class_priority: i32, age: SimDuration) -> f64 {
        self.sign * f64::from(class_priority) + self.age_weight * age.as_secs_f64()
    }
}

pub use crate::slo::default_class_priority;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::any_request;

    #[test]
    fn slo_based_priority_grows_with_age_and_inverted_flips_classes() {
        let r = any_request();
        let slo = SloBased {
            age_weight: 2.0,
            sign: 1.0,
        };
        assert_eq!(slo.priority(&r, 4, SimDuration::ZERO), 4.0);
        assert_eq!(
            slo.priority(&r, -1, SimDuration::from_ms(3000)),
            5.0,
            "batch after 3 s passes a fresh critical"
        );
        let inv = SloBased {
            age_weight: 0.0,
            sign: -1.0,
        };
        assert!(inv.priority(&r, -1, SimDuration::ZERO) > inv.priority(&r, 4, SimDuration::ZERO));
        assert_eq!(Constant.priority(&r, 4, SimDuration::from_ms(9)), 0.0);
        assert_eq!(
            (
                default_class_priority("critical"),
                default_class_priority("interactive")
            ),
            (4, 3)
        );
    }
}
