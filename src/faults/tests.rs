//! Stragglers on their own.

use crate::instance::step::slowed;
use crate::time::{SimDuration, SimTime};

#[test]
fn a_step_is_slowed_by_every_window_that_holds_its_start() {
    let w = [
        (SimTime(100), SimTime(200), 2.0),
        (SimTime(150), SimTime(300), 3.0),
    ];
    let d = SimDuration(1000);
    assert_eq!(slowed(d, SimTime(99), &w), d, "before");
    assert_eq!(slowed(d, SimTime(100), &w), SimDuration(2000), "from is in");
    assert_eq!(
        slowed(d, SimTime(150), &w),
        SimDuration(6000),
        "overlaps multiply"
    );
    assert_eq!(
        slowed(d, SimTime(200), &w),
        SimDuration(3000),
        "until is out"
    );
    assert_eq!(slowed(d, SimTime(300), &w), d);
}
