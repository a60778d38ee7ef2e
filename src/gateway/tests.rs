//! The saturation detector and the bands on their own.

use super::*;
use crate::scenario::{BandSpec, FlowControlSpec};

fn instance(queue: u32, in_flight: u32, used: u32, routable: bool) -> InstanceSnapshot {
    InstanceSnapshot {
        index: 0,
        queue_depth: queue,
        batch_size: 7,
        in_flight,
        kv_used_blocks: used,
        kv_total_blocks: 100,
        routable,
    }
}

#[test]
fn an_instance_has_room_up_to_both_thresholds_inclusive() {
    let s = SaturationSpec {
        queue_depth: 5,
        kv_util: 0.8,
    };
    assert!(
        !saturated(&s, [instance(5, 0, 80, true)], true),
        "at both thresholds"
    );
    assert!(
        !saturated(&s, [instance(3, 2, 10, true)], true),
        "3 waiting + 2 on their way"
    );
    assert!(
        saturated(&s, [instance(5, 1, 10, true)], true),
        "one on its way too many"
    );
    assert!(
        saturated(&s, [instance(0, 0, 81, true)], true),
        "KV above 0.8"
    );
    // One instance with room is enough; one that is not routable does not count.
    assert!(!saturated(
        &s,
        [instance(9, 0, 90, true), instance(0, 0, 0, true)],
        true
    ));
    assert!(saturated(
        &s,
        [instance(9, 0, 90, true), instance(0, 0, 0, false)],
        true
    ));
    // Nothing routable at all: saturated, as llm-d's detector has it with no pods; with a
    // group that autoscales, requests go on to routing (which parks them for a cold start).
    assert!(saturated(&s, [instance(0, 0, 0, false)], true));
    assert!(saturated(&s, [], true));
    assert!(!saturated(&s, [instance(0, 0, 0, false)], false));
    assert!(!saturated(&s, [], false));
    assert!(
        saturated(&s, [instance(5, 1, 10, true)], false),
        "routable but full"
    );
    // An instance without KV blocks has no room.
    let mut empty = instance(0, 0, 0, true);
    empty.kv_total_blocks = 0;
    assert!(saturated(&s, [empty], true));
}

#[test]
fn bands_are_kept_highest_priority_first_and_unlisted_priorities_get_the_default_limits() {
    let spec = FlowControlSpec {
        bands: vec![
            BandSpec {
                priority: -1,
                max_requests: Some(3),
                max_wait_s: None,
            },
            BandSpec {
                priority: 4,
                max_requests: None,
                max_wait_s: Some(0.5),
            },
        ],
        default_band: crate::scenario::BandLimits {
            max_requests: Some(1),
            max_wait_s: Some(2.0),
        },
        ..Default::default()
    };
    let mut g = Gateway::new(&spec);
    let order = |g: &Gateway| g.bands.iter().map(|b| b.priority).collect::<Vec<_>>();
    assert_eq!(order(&g), [4, -1]);
    assert_eq!(g.band_of(4), 0);
    let k = g.band_of(1);
    assert_eq!(order(&g), [4, 1, -1]);
    assert_eq!(k, 1);
    assert_eq!(
        (g.bands[k].max_requests, g.bands[k].max_wait),
        (Some(1), Some(SimDuration(2_000_000)))
    );
    assert_eq!(g.band_of(-7), 3);
    assert_eq!(g.bands[0].max_wait, Some(SimDuration(500_000)));
}

#[test]
fn a_band_or_the_gateway_at_its_limit_is_full() {
    let spec = FlowControlSpec {
        bands: vec![BandSpec {
            priority: 0,
            max_requests: Some(2),
            max_wait_s: None,
        }],
        max_requests: Some(3),
        ..Default::default()
    };
    let mut g = Gateway::new(&spec);
    let k = g.band_of(0);
    let e = Entity::from_raw_u32(1).unwrap();
    assert_eq!(g.full(k), None);
    g.bands[k].queue.extend([(e, SimTime(0)), (e, SimTime(0))]);
    g.waiting = 2;
    assert_eq!(g.full(k), Some("gateway_band_full"));
    let other = g.band_of(5);
    assert_eq!(g.full(other), None, "no limit of its own, one left overall");
    g.waiting = 3;
    assert_eq!(g.full(other), Some("gateway_full"));
}

#[test]
fn the_time_with_requests_waiting_adds_up_over_spells() {
    let mut g = Gateway::new(&FlowControlSpec::default());
    g.waiting = 1;
    g.account(SimTime(100));
    g.waiting = 0;
    g.account(SimTime(350));
    g.waiting = 2;
    g.account(SimTime(1000));
    assert_eq!(g.waited_until(SimTime(1100)), SimDuration(350));
}

#[test]
fn validate_names_a_long_wait_as_written_short() {
    // 1e300 s printed as its 301 digits.
    let spec = FlowControlSpec {
        bands: vec![BandSpec {
            priority: 1,
            max_requests: None,
            max_wait_s: Some(1e300),
        }],
        ..Default::default()
    };
    let line = describe(&spec);
    assert!(
        line.contains("priority 1: no limit, shed after 1e300 s; other priorities: no limit"),
        "{line}"
    );
}
