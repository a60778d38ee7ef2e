//! Recording and row formatting, on bare worlds and by hand.

use super::*;
use crate::engine::{CheckInvariants, RecordDue, SimClock};
use crate::labels::Labels;
use crate::request::Lifecycle;
use crate::request::{FinalState, FinishedRequest};
use crate::slo::SloTable;
use crate::time::SimDuration;
use bevy_ecs::system::RunSystemOnce;
use std::io::Write as _;

/// `record_finished` alone on a bare world: a completed session turn of a source that
/// holds an offline batch back, and a rejected request.
#[test]
fn recording_writes_a_row_each_counts_them_tells_the_workload_and_despawns() {
    let mut world = World::new();
    for init in [
        World::init_resource::<Aggregates>,
        World::init_resource::<SloTable>,
        World::init_resource::<Labels>,
        World::init_resource::<crate::engine::WorkloadDue>,
        World::init_resource::<crate::engine::SimFault>,
        World::init_resource::<CheckInvariants>,
        World::init_resource::<SimClock>,
    ] {
        init(&mut world);
    }
    world.insert_resource(crate::engine::HeldBatches(vec![false, true]));
    let buffer = SharedBuffer::default();
    let mut memory = BufWriter::new(buffer.clone());
    memory.write_all(&csv_header(Default::default())).unwrap();
    world.insert_resource(RequestLog {
        memory: Some(memory),
        ..Default::default()
    });
    let (a, b) = (world.spawn_empty().id(), world.spawn_empty().id());
    let mut spec = crate::policy::any_request();
    spec.client = 1;
    spec.session = Some(crate::request::SessionRef { id: 7, turn: 0 });
    let mut done =
        FinishedRequest::unserved(a, spec, Default::default(), FinalState::Completed, Some(0));
    done.completed = Some(SimTime(900));
    done.generated_tokens = 10;
    let rejected = FinishedRequest::unserved(
        b,
        crate::policy::any_request(),
        Default::default(),
        FinalState::Rejected,
        None,
    );
    world.insert_resource(RecordDue(vec![done, rejected]));
    world.run_system_once(record_finished).unwrap();

    assert!(
        world.resource::<RecordDue>().0.is_empty(),
        "its list is emptied"
    );
    assert!(world.get_entity(a).is_err() && world.get_entity(b).is_err());
    let agg = world.resource::<Aggregates>();
    assert_eq!((agg.completed, agg.rejected, agg.output_tokens), (1, 1, 10));
    let w = world.resource::<crate::engine::WorkloadDue>();
    assert_eq!(
        w.ended_turns,
        [(7, FinalState::Completed, Some(SimTime(900)))]
    );
    assert_eq!(
        w.ended_held,
        [1],
        "source 1 holds a batch back; source 0 does not"
    );
    world
        .resource_mut::<RequestLog>()
        .memory
        .as_mut()
        .unwrap()
        .flush()
        .unwrap();
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.lines().count(), 3, "a header and two rows:\n{text}");
}

/// `fixed` against `core::fmt` on values built like mean ITLs (whole µs over a count, in
/// ms), on ties (x.xxx5 exactly representable) and on edges.
#[test]
fn three_decimals_are_what_core_fmt_prints() {
    let mut digits = itoa::Buffer::new();
    let mut check = |x: f64| {
        for d in [0, 1, 3, 6, 9] {
            let mut row = Vec::new();
            fixed(&mut row, x, d, &mut digits);
            let want = format!("{x:.*}", d as usize);
            assert_eq!(String::from_utf8(row).unwrap(), want, "{x:e} to {d}");
        }
    };
    for x in [
        0.0,
        0.0005,
        0.0015,
        0.0025,
        1.0625,
        2.5e-324,
        0.4995,
        0.9995,
        9.9995,
        1e15,
        -0.0,
        -1.25,
        0.05,
        0.25,
        0.35,
        2.5,
        1_099_511_627_775.5,
        1e300,
        f64::NAN,
        f64::INFINITY,
        123_456.000_000_5,
        0.000_000_000_5,
    ] {
        check(x);
    }
    for k in 0..4096u64 {
        check(k as f64 / 8192.0); // ties among these
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let sum = state % 10_000_000_000;
        let count = 1 + (state >> 40) % 5_000;
        check(sum as f64 / count as f64 / 1000.0);
    }
}

/// Rows are formatted by hand; the csv crate is the independent check, byte for byte,
/// on names that need quoting and fields that are empty or not.
#[test]
fn a_row_is_what_the_csv_crate_writes() {
    let labels = Labels {
        tenants: vec!["plain".into(), "a,b".into(), "say \"hi\"".into()],
        slo_classes: vec!["two\nlines".into(), "cr\r".into(), String::new()],
        groups: vec![],
        adapters: vec![],
    };
    let entity = Entity::from_raw_u32(3).unwrap();
    let mut rows = Vec::new();
    for k in 0..3u32 {
        let mut spec = crate::policy::any_request();
        spec.id = 1_000_000_007 * u64::from(k);
        spec.tenant = k;
        spec.slo_class = k;
        spec.session = (k == 1).then_some(crate::request::SessionRef { id: 9, turn: 2 });
        let lifecycle = Lifecycle {
            arrival: SimTime(12_345 * u64::from(k)),
            ..Default::default()
        };
        let mut f =
            FinishedRequest::unserved(entity, spec, lifecycle, FinalState::Completed, Some(k));
        if k > 0 {
            f.ttft = Some(SimDuration(1_000_999 * u64::from(k)));
            f.e2e = Some(SimDuration(7));
            f.itl_sum = SimDuration(1_234_567);
            f.itl_count = 3 * k;
            f.completed = Some(SimTime(99));
            f.kv_transfer = Some(SimDuration(1_000));
            f.decode_instance = Some(k);
        }
        rows.push(f);
    }
    let mut want = csv::Writer::from_writer(Vec::new());
    want.write_record(CSV_COLUMNS).unwrap();
    let mut got = csv_header(Default::default());
    let mut row = Vec::new();
    for f in &rows {
        let fields = [
            f.spec.id.to_string(),
            f.spec.client.to_string(),
            labels.tenants[f.spec.tenant as usize].clone(),
            labels.slo_classes[f.spec.slo_class as usize].clone(),
            f.spec.session.map(|s| s.id.to_string()).unwrap_or_default(),
            f.spec
                .session
                .map(|s| s.turn.to_string())
                .unwrap_or_default(),
            f.instance.map(|i| i.to_string()).unwrap_or_default(),
            f.state.as_str().to_string(),
            f.lifecycle.arrival.as_us().to_string(),
            f.spec.input_tokens.to_string(),
            f.spec.output_tokens.to_string(),
            f.generated_tokens.to_string(),
            f.cached_tokens.to_string(),
            f.scheduling_delay()
                .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                .unwrap_or_default(),
            f.ttft
                .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                .unwrap_or_default(),
            f.e2e
                .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                .unwrap_or_default(),
            f.mean_itl()
                .map(|us| format!("{:.3}", us / 1000.0))
                .unwrap_or_default(),
            f.preemptions.to_string(),
            f.completed
                .map(|t| t.as_us().to_string())
                .unwrap_or_default(),
            f.prefill_instance
                .map(|i| i.to_string())
                .unwrap_or_default(),
            f.decode_instance.map(|i| i.to_string()).unwrap_or_default(),
            f.kv_transfer
                .map(|d| format!("{:.3}", d.as_us() as f64 / 1000.0))
                .unwrap_or_default(),
        ];
        assert_eq!(fields.len(), CSV_COLUMNS.len());
        want.write_record(&fields).unwrap();
        format_row(&mut row, f, &labels, Default::default());
        got.extend_from_slice(&row);
    }
    let want = want.into_inner().unwrap();
    assert_eq!(
        String::from_utf8(got).unwrap(),
        String::from_utf8(want).unwrap()
    );
}

#[test]
fn ttft_parts_of_several_runs_are_weighed_by_their_requests() {
    let run = |requests, v: f64| TtftPartsSummary {
        requests,
        ttft: Some(4.0 * v),
        to_the_instance: Some(v),
        waiting: Some(v),
        prefill: Some(v),
        token_out: Some(v),
    };
    let none = TtftPartsSummary::default();
    // (1 × 2 + 3 × 6) / 4 = 5; a run without such a request weighs nothing.
    let pooled = TtftPartsSummary::pooled([&run(1, 2.0), &run(3, 6.0), &none]);
    assert_eq!(pooled, run(4, 5.0));
    assert_eq!(TtftPartsSummary::pooled([&none]), none);
}
