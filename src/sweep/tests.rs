//! Sweep plans, tables and merging.

use std::path::PathBuf;

use super::*;

fn plan(axes: &[(&str, &[&str])], replicas: u32, shard: (u32, u32)) -> Plan {
    Plan {
        scenario: "s.ron".into(),
        set: vec![],
        axes: axes
            .iter()
            .map(|(p, v)| Axis {
                path: p.to_string(),
                values: v.iter().map(|x| x.to_string()).collect(),
            })
            .collect(),
        replicas,
        shard,
        inputs: [("s.ron".to_string(), "fnv1a:0000000000000001".to_string())].into(),
        version: VERSION.into(),
    }
}

#[test]
fn a_sweep_too_large_for_one_invocation_is_refused_before_anything_is_allocated() {
    let ten: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
    // 10 × 10 × 10 × 10 × 10 points × 1 replica = 100,000: the most one shard runs.
    let axes = [("a", &ten[..]); 5];
    assert_eq!(plan(&axes, 1, (0, 1)).check_size(), Ok(100_000));
    let err = plan(&axes, 2, (0, 1)).check_size().unwrap_err();
    assert!(
        err.contains("200000 runs") && err.contains("--shard I/2"),
        "{err}"
    );
    // Split in two, each shard holds 100,000 runs: within the bound.
    assert_eq!(plan(&axes, 2, (1, 2)).check_size(), Ok(200_000));
    // Replicas near u32::MAX over two points, or axes whose product overflows: refused.
    let err = plan(&[("a", &["1", "2"])], u32::MAX, (0, 1))
        .check_size()
        .unwrap_err();
    assert!(err.contains("8589934590 runs"), "{err}");
    let huge = [("a", &ten[..]); 20];
    assert!(
        plan(&huge, 1, (0, 1))
            .check_size()
            .unwrap_err()
            .contains("more than 2^64")
    );
    // A tampered shard or replica count.
    assert!(plan(&axes[..1], 1, (3, 2)).check_size().is_err());
    assert!(plan(&axes[..1], 0, (0, 1)).check_size().is_err());
    // Points of a shard step through the sweep without visiting the others.
    let p = plan(&axes[..1], 3, (1, 4));
    let got: Vec<usize> = p.points().iter().map(|x| x.index).collect();
    assert_eq!(got, [1, 5, 9, 13, 17, 21, 25, 29]);
}

#[test]
fn axes_split_at_top_level_commas_only() {
    let a = parse_axis(r#"policies.routing=["round_robin", "a,b"]"#).unwrap();
    assert_eq!(a.path, "policies.routing");
    assert_eq!(a.values, vec![r#""round_robin""#, r#""a,b""#]);
    let a = parse_axis("x=[Constant(64), Uniform(min: 1, max: 9), [1,2]]").unwrap();
    assert_eq!(
        a.values,
        vec!["Constant(64)", "Uniform(min: 1, max: 9)", "[1,2]"]
    );
    assert!(parse_axis("x=1,2").is_err());
    assert!(parse_axis("x=[]").is_err());
    assert!(parse_axis("x=[1,,2]").is_err());
    assert!(parse_axis("nothing").is_err());
    // A value given twice would run its points twice alike (plan refuses the same).
    assert_eq!(
        parse_axis("seed=[1, 2, 1]").unwrap_err(),
        "--vary seed=[1, 2, 1]: 1 is listed twice (values 0 and 2): its points would run twice alike; --replicas K runs each point with K seeds"
    );
    // Also when written differently: a rate of 1 and 1.0, an exponent.
    assert!(
        parse_axis("r=[1.0, 2, 1]")
            .unwrap_err()
            .contains("1.0 and 1 are the same number (values 0 and 2)")
    );
    assert!(parse_axis("r=[2e1, 20]").is_err());
    // Whole numbers beyond f64's precision stay apart; so do different strings.
    assert!(parse_axis("seed=[18446744073709551615, 18446744073709551614]").is_ok());
    assert!(parse_axis(r#"p=["a", "b"]"#).is_ok());
}

#[test]
fn linked_paths_vary_together() {
    let a = parse_axis("g[0].role,g[0].count=[(Mixed, 2), (Prefill, 1)]").unwrap();
    assert_eq!(a.values, vec!["(Mixed, 2)", "(Prefill, 1)"]);
    assert_eq!(
        a.assignments(&a.values[1]).unwrap(),
        vec![
            ("g[0].role".to_string(), "Prefill".to_string()),
            ("g[0].count".to_string(), "1".to_string())
        ]
    );
    let plan = Plan {
        scenario: "s.ron".into(),
        set: vec![],
        axes: vec![a],
        replicas: 1,
        shard: (0, 1),
        inputs: Default::default(),
        version: VERSION.into(),
    };
    assert_eq!(plan.len(), 2, "one axis, not a product of its paths");
    let e = parse_axis("a,b=[(1, 2), (3)]").unwrap_err();
    assert!(e.contains("(3) must be a tuple of 2 values"), "{e}");
    assert!(parse_axis("a,b=[(1, 2, 3)]").is_err());
    assert!(parse_axis("a,b=[1]").is_err());
}

#[test]
fn shards_parse() {
    assert_eq!(parse_shard("1/4"), Ok((1, 4)));
    assert!(parse_shard("4/4").is_err());
    assert!(parse_shard("0/0").is_err());
    assert!(parse_shard("a/2").is_err());
}

#[test]
fn points_are_the_cartesian_product_last_axis_fastest() {
    let p = plan(&[("a", &["1", "2"]), ("b", &["x", "y", "z"])], 1, (0, 1));
    let pts = p.points();
    assert_eq!(pts.len(), 6);
    let vals: Vec<String> = pts.iter().map(|p| p.values.join("")).collect();
    assert_eq!(vals, ["1x", "1y", "1z", "2x", "2y", "2z"]);
    let r = plan(&[("a", &["1", "2"])], 3, (0, 1)).points();
    assert_eq!(r.len(), 6);
    assert_eq!(
        r.iter()
            .map(|p| (p.values[0].as_str(), p.replica))
            .collect::<Vec<_>>(),
        [("1", 0), ("1", 1), ("1", 2), ("2", 0), ("2", 1), ("2", 2)]
    );
}

#[test]
fn shards_partition_the_points() {
    let whole = plan(&[("a", &["1", "2", "3"]), ("b", &["x", "y"])], 2, (0, 1));
    let mut all: Vec<usize> = Vec::new();
    for i in 0..5 {
        let part = Plan {
            shard: (i, 5),
            ..whole.clone()
        };
        all.extend(part.points().iter().map(|p| p.index));
    }
    all.sort_unstable();
    assert_eq!(all, (0..12).collect::<Vec<_>>());
}

#[test]
fn merge_refuses_gaps_duplicates_and_strangers() {
    let part = |i: u32, n: u32| {
        let plan = plan(&[("a", &["1", "2", "3"])], 1, (i, n));
        let rows = plan
            .points()
            .iter()
            .map(|p| (p.index, vec![p.index.to_string()]))
            .collect();
        Part {
            dir: PathBuf::from(format!("shard{i}")),
            header: plan.header(),
            plan,
            rows,
        }
    };
    let (whole, rows) = merge(vec![part(1, 2), part(0, 2)]).unwrap();
    assert_eq!(whole.shard, (0, 1));
    assert_eq!(rows.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    assert!(
        merge(vec![part(0, 2)])
            .unwrap_err()
            .contains("missing shards: 1/2")
    );
    assert!(
        merge(vec![part(0, 2), part(0, 2)])
            .unwrap_err()
            .contains("same shard")
    );
    let mut short = part(1, 2);
    short.rows.clear();
    assert!(
        merge(vec![part(0, 2), short])
            .unwrap_err()
            .contains("did not finish")
    );
    let mut other = part(1, 2);
    other.plan.replicas = 2;
    assert!(
        merge(vec![part(0, 2), other])
            .unwrap_err()
            .contains("another sweep")
    );
    // A shard run after the scenario was edited, or by another version.
    let mut edited = part(1, 2);
    edited
        .plan
        .inputs
        .insert("s.ron".into(), "fnv1a:0000000000000002".into());
    let e = merge(vec![part(0, 2), edited]).unwrap_err();
    assert!(e.contains("different inputs: s.ron differs"), "{e}");
    let mut newer = part(1, 2);
    newer.plan.version = "9.9.9".into();
    let e = merge(vec![part(0, 2), newer]).unwrap_err();
    assert!(e.contains("by servesim 9.9.9"), "{e}");
}

#[test]
fn a_field_varied_twice_or_both_varied_and_set_is_refused() {
    let ok = plan(&[("seed", &["1", "2"]), ("x", &["3"])], 1, (0, 1));
    assert_eq!(ok.check_paths(), Ok(()));
    let twice = plan(&[("seed", &["1", "2"]), ("seed", &["3"])], 1, (0, 1));
    let err = twice.check_paths().unwrap_err();
    assert!(err.starts_with("--vary seed is given twice"), "{err}");
    // A linked axis counts each of its paths.
    let linked = plan(&[("a, b", &["(1, 2)"]), ("b", &["3"])], 1, (0, 1));
    let err = linked.check_paths().unwrap_err();
    assert!(err.contains("--vary a, b=… and --vary b=…"), "{err}");
    let mut set = ok.clone();
    set.set = vec![("x".into(), "9".into())];
    let err = set.check_paths().unwrap_err();
    assert!(
        err.starts_with("x is both varied (--vary) and set (--set x=9)"),
        "{err}"
    );
}

/// `--vary outputs.dir=["a","b"]` ran two identical points and wrote nothing to a or b;
/// `--vary plan.tp=…` two identical points too: refused, saying why.
#[test]
fn a_field_no_run_reads_is_not_varied() {
    let err = plan(&[("outputs.dir", &["\"a\"", "\"b\""])], 1, (0, 1))
        .check_paths()
        .unwrap_err();
    assert!(
        err.starts_with("--vary outputs.dir: a sweep writes no run there"),
        "{err}"
    );
    let err = plan(&[("seed, plan.tp", &["(1, [1])", "(2, [2])"])], 1, (0, 1))
        .check_paths()
        .unwrap_err();
    assert!(
        err.starts_with("--vary plan.tp: the plan block is read by `servesim plan` only"),
        "{err}"
    );
    // Other outputs fields change what each kept point writes; names that only start alike
    // are other fields.
    for path in ["outputs.report_html", "planet", "outputs.dirs"] {
        assert_eq!(
            plan(&[(path, &["1"])], 1, (0, 1)).check_paths(),
            Ok(()),
            "{path}"
        );
    }
}

#[test]
fn varied_seeds_closer_than_the_replicas_are_refused() {
    // Replica r runs seed + r: seeds 1 and 2 with two replicas both run seed 2.
    let close = plan(&[("seed", &["1", "2", "10"])], 2, (0, 1));
    let err = close.check_paths().unwrap_err();
    assert!(
        err.starts_with("--vary seed=… with --replicas 2: replica r runs seed + r, so seeds 1 and 2 would share runs"),
        "{err}"
    );
    assert!(err.contains("e.g. seed=[1, 3]"), "{err}");
    // Listed in any order; far enough apart, or one replica, they are independent.
    assert!(
        plan(&[("seed", &["10", "1"])], 9, (0, 1))
            .check_paths()
            .is_ok()
    );
    assert!(
        plan(&[("seed", &["10", "1"])], 10, (0, 1))
            .check_paths()
            .is_err()
    );
    assert!(
        plan(&[("seed", &["1", "2"])], 1, (0, 1))
            .check_paths()
            .is_ok()
    );
}
