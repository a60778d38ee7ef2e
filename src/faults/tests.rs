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

mod crashes {
    use crate::engine::EventQueue;
    use crate::faults::crash::Crashes;
    use crate::scenario::CrashPolicy;
    use crate::time::{SimDuration, SimTime};

    fn two(mtbf_s: Option<f64>) -> Crashes {
        Crashes::new(
            CrashPolicy::Fail,
            SimDuration(1000),
            vec![SimDuration::ZERO; 2],
            vec![false; 2],
            mtbf_s,
            7,
            &[],
        )
    }

    #[test]
    fn degraded_spans_open_with_the_first_instance_down_and_close_with_the_last_up() {
        let mut c = two(None);
        c.went_down(0, SimTime(100));
        c.went_down(1, SimTime(150));
        c.came_up(0, SimTime(200));
        assert!(!c.degraded_at(SimTime(99)));
        assert!(c.degraded_at(SimTime(100)) && c.degraded_at(SimTime(250)));
        c.came_up(1, SimTime(300));
        assert!(!c.degraded_at(SimTime(300)), "until is out");
        c.went_down(1, SimTime(400));
        assert!(c.degraded_at(SimTime(10_000)), "open while down");
        // 100 + 150 closed, 600 open at 1,000.
        assert_eq!(c.down_until(SimTime(1000)), SimDuration(850));
    }

    #[test]
    fn mtbf_draws_are_exponential_with_their_mean_and_per_instance() {
        let mut c = two(Some(10.0));
        let mut q = EventQueue::default();
        let n = 20_000;
        let mut sum = 0.0;
        for _ in 0..n {
            c.draw(0, SimTime::ZERO, &mut q);
            sum += c.next_mtbf[0].unwrap().as_us() as f64 / 1e6;
        }
        let mean = sum / f64::from(n);
        // Standard error 10 / √20,000 ≈ 0.07 s.
        assert!((mean - 10.0).abs() < 0.3, "mean {mean}");
        let mut a = two(Some(10.0));
        let mut b = two(Some(10.0));
        a.draw(1, SimTime::ZERO, &mut q);
        b.draw(0, SimTime::ZERO, &mut q);
        b.draw(1, SimTime::ZERO, &mut q);
        assert_eq!(a.next_mtbf[1], b.next_mtbf[1], "streams of their own");
    }
}
