//! `servesim report` on a sweep, a plan, a capacity and a search directory: the metric-against-axis
//! charts carry the means of the runs, every run's configuration sits beside its results,
//! the per-instance load matches each run's own summary, and the page works in a browser.

use crate::common::{read_rows, servesim};
use servesim::report::chart::label;
use std::path::Path;

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two routers × two rates × two seeds on the quickstart's two instances, each run kept.
fn sweep(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("sw");
    let root = env!("CARGO_MANIFEST_DIR");
    ok(&servesim(
        &[
            "sweep",
            &format!("{root}/scenarios/quickstart.ron"),
            "--set",
            "workload.num_requests=300",
            "--vary",
            r#"policies.routing=["round_robin","least_kv"]"#,
            "--vary",
            "workload.clients[0].rate_per_s=[10.0,40.0]",
            "--replicas",
            "2",
            "--keep-outputs",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        dir,
    ));
    ok(&servesim(&["report", out.to_str().unwrap()], dir));
    out
}

fn page(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("report.html")).unwrap()
}

#[test]
fn a_sweep_s_page_charts_run_means_lists_each_run_s_configuration_and_its_instance_load() {
    let tmp = tempfile::tempdir().unwrap();
    let out = sweep(tmp.path());
    let html = page(&out);
    let rows = read_rows(&out.join("sweep.csv"));
    assert_eq!(rows.len(), 8);

    // One chart per metric with a value and per axis; only the chosen one is shown.
    let figures = html.matches(r#"<figure class="by-axis""#).count();
    let metrics = servesim::sweep::METRICS
        .iter()
        .filter(|m| rows.iter().any(|r| !r.str(m).is_empty()))
        .count();
    assert_eq!(figures, 2 * metrics);
    assert_eq!(
        html.matches(r#"<figure class="by-axis" data-metric="ttft_ms.p99" data-axis="0">"#)
            .count(),
        1,
        "p99 TTFT against the first axis is shown first"
    );
    assert_eq!(html.matches(" hidden>").count(), figures - 1);

    // The routing axis is not numeric: bars, one per rate, each the mean of the point's two
    // seeds, computed here from sweep.csv.
    for router in ["round_robin", "least_kv"] {
        for rate in ["10.0", "40.0"] {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| {
                    r.str("policies.routing") == router
                        && r.str("workload.clients[0].rate_per_s") == rate
                })
                .map(|r| r.str("ttft_ms.p99").parse::<f64>().unwrap())
                .collect();
            assert_eq!(v.len(), 2);
            let bar = format!(
                "<title>rate_per_s={rate}: {router} = {}</title>",
                label((v[0] + v[1]) / 2.0)
            );
            assert!(html.contains(&bar), "no bar {bar}");
        }
    }
    // The rate axis is numeric: a line per router.
    let rate_chart = html
        .split(r#"<figure class="by-axis" data-metric="ttft_ms.p99" data-axis="1" hidden>"#)
        .nth(1)
        .and_then(|s| s.split("</figure>").next())
        .expect("p99 TTFT against the rate");
    assert_eq!(rate_chart.matches(r#"class="series""#).count(), 2);
    assert!(rate_chart.contains(r#"data-name="routing=least_kv""#));

    // Every run's configuration beside its results.
    for r in &rows {
        let cells = format!(
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>ok</td><td>{}</td>",
            r.str("point"),
            r.str("policies.routing"),
            r.str("workload.clients[0].rate_per_s"),
            r.str("replica"),
            r.str("seed"),
            r.str("requests.completed"),
        );
        assert!(html.contains(&cells), "no row {cells}");
    }
    assert!(html.contains("<h2>Points: mean ± 95 % half-width over seeds</h2>"));

    // Per-instance load: each run's columns are its own summary's instances, and they add up.
    for r in &rows {
        let point = r.str("point").parse::<usize>().unwrap();
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("point-{point:04}/summary.json"))).unwrap(),
        )
        .unwrap();
        let instances = summary["instances"].as_array().unwrap();
        let completed: Vec<u64> = r
            .str("instances.completed")
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(
            completed,
            instances
                .iter()
                .map(|i| i["completed"].as_u64().unwrap())
                .collect::<Vec<_>>()
        );
        assert_eq!(completed.iter().sum::<u64>(), r.u64("requests.completed"));
        let busy: Vec<f64> = r
            .str("instances.busy_fraction")
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        for (b, i) in busy.iter().zip(instances) {
            assert!((b - i["busy_fraction"].as_f64().unwrap()).abs() <= 5e-5);
        }
    }
    assert!(html.contains("<caption>requests completed per instance</caption>"));
    assert!(html.contains("<caption>KV hit rate per instance</caption>"));
    // Round robin over two instances splits 300 requests 150/150: spread exactly 1.
    assert!(html.contains(
        "<tr><th>run 0: routing=round_robin, rate_per_s=10.0</th><td>150</td><td>150</td><td>1</td></tr>"
    ));
}

#[test]
fn a_sweep_s_page_renders_in_a_real_browser_and_its_selects_show_one_chart() {
    let Some(browser) = crate::observe::chromium() else {
        assert!(
            std::env::var_os("SERVESIM_REQUIRE_BROWSER").is_none(),
            "no Chromium found: apt-get install chromium (or set SERVESIM_CHROMIUM)"
        );
        eprintln!("skipped: no Chromium (apt-get install chromium to run this test)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = sweep(tmp.path());
    let url = format!("file://{}", out.join("report.html").display());
    let profile = tempfile::tempdir().unwrap();
    let dom = crate::observe::headless(
        &browser,
        profile.path(),
        &["--virtual-time-budget=2000", "--dump-dom", &url],
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let root_tag = dom.split("<head>").next().unwrap_or("");
    assert!(root_tag.contains(r#"data-ready="1""#), "{root_tag}");
    assert!(!root_tag.contains("data-script-errors"), "{root_tag}");
    let figures = dom.matches(r#"<figure class="by-axis""#).count();
    assert!(figures > 10);
    // After the script ran, exactly the selected chart is visible.
    assert_eq!(
        dom.matches(r#"hidden="""#).count(),
        figures - 1,
        "{root_tag}"
    );
}

#[test]
fn plan_and_capacity_directories_get_their_own_pages_and_mixing_them_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = env!("CARGO_MANIFEST_DIR");
    let scenario = format!("{root}/scenarios/quickstart.ron");
    ok(&servesim(
        &[
            "capacity",
            &scenario,
            "--set",
            "workload.num_requests=1500",
            "--replicas",
            "2",
            "--out",
            "cap",
            "-q",
        ],
        dir,
    ));
    ok(&servesim(&["report", "cap"], dir));
    let cap: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cap/capacity.json")).unwrap())
            .unwrap();
    let rate = &cap["limits"][0]["requests_per_s"];
    let shown = format!(
        "<td>{:.2} [{:.2}, {:.2}]</td>",
        rate["mean"].as_f64().unwrap(),
        rate["low"].as_f64().unwrap(),
        rate["high"].as_f64().unwrap()
    );
    let html = page(&dir.join("cap"));
    assert!(html.contains(&shown), "no {shown}");
    assert!(html.contains("<th>sustained</th>"));
    assert!(html.contains("runs; stated rate 12.000 req/s</p>"));
    // A staged workload states no one rate: said so, where a "?" stood.
    ok(&servesim(
        &[
            "capacity",
            &scenario,
            "--set",
            "workload.num_requests=400",
            "--set",
            "workload.clients[0].arrival=Staged(stages: [(rate_per_s: 6.0, duration_s: 10.0), (rate_per_s: 18.0, duration_s: 60.0)])",
            "--replicas",
            "1",
            "--out",
            "staged",
            "-q",
        ],
        dir,
    ));
    ok(&servesim(&["report", "staged"], dir));
    assert!(
        page(&dir.join("staged"))
            .contains("runs; no one rate stated (req/s measured in each run's window)</p>")
    );

    // A plan over two TP degrees of the quickstart's model.
    std::fs::write(
        dir.join("plan.ron"),
        std::fs::read_to_string(&scenario)
            .unwrap()
            .trim_end()
            .trim_end_matches(')')
            .trim_end()
            .trim_end_matches(',')
            .to_string()
            + r#", plan: (gpus: ["H100"], tp: [1, 2], max_instances: 4, prices: {"H100": 2.0}))"#,
    )
    .unwrap();
    let planned = servesim(
        &[
            "plan",
            "plan.ron",
            "--set",
            "workload.num_requests=600",
            "--out",
            "pl",
            "-q",
        ],
        dir,
    );
    ok(&planned);
    ok(&servesim(&["report", "pl"], dir));
    let html = page(&dir.join("pl"));
    let plan = read_rows(&dir.join("pl/plan.csv"));
    let front = read_rows(&dir.join("pl/pareto.csv"));
    assert!(!front.is_empty());
    let best = plan.iter().find(|r| r.str("status") == "best").unwrap();
    assert!(html.contains(&format!(
        "<b>{} × H100 tp{} pp1 seqs",
        best.str("instances"),
        best.str("tp")
    )));
    for r in &front {
        assert!(html.contains(&format!("<tr><th>{}</th>", r.str("configuration"))));
    }
    assert_eq!(
        html.matches(r#"<td class="reason">"#).count(),
        plan.len(),
        "one row per configuration"
    );
    assert!(html.contains("p99 TTFT against price"));

    // A plan directory beside a run directory: refused, naming what to do; nothing written.
    ok(&servesim(
        &[
            "run",
            &scenario,
            "--set",
            "workload.num_requests=50",
            "--out",
            "one",
            "-q",
        ],
        dir,
    ));
    let mixed = servesim(&["report", "one", "pl", "--out", "both.html"], dir);
    assert_eq!(mixed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&mixed.stderr);
    assert!(
        err.contains("pl holds a plan's results: report it on its own"),
        "{err}"
    );
    assert!(!dir.join("both.html").exists());
}

#[test]
fn a_search_directory_draws_every_trial_and_the_front_and_names_what_is_missing() {
    // Four trials minimising (ttft, cost): 0 and 2 form the front, 1 is dominated by 0,
    // 3 is infeasible (it would dominate everything).
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let s = dir.join("s");
    std::fs::create_dir(&s).unwrap();
    std::fs::write(
        s.join("search.csv"),
        "trial,ttft_p99_ms,cost_per_mtok,feasible,pareto,weight\n\
         0,90.5,1.25,true,true,0.5\n\
         1,95.0,1.30,true,false,1.5\n\
         2,120.0,0.90,true,true,2.5\n\
         3,10.0,0.10,false,false,3.5\n",
    )
    .unwrap();
    std::fs::write(
        s.join("search.json"),
        r#"{"objectives": ["ttft_p99_ms", "cost_per_mtok"], "directions": ["minimize", "minimize"], "parameters": ["weight"], "scenario": "autoscaling", "tool": "optuna", "trials": 4}"#,
    )
    .unwrap();
    ok(&servesim(&["report", "s"], dir));
    let html = page(&s);
    assert!(
        html.contains(
            "search of autoscaling by optuna: 4 trials, 3 feasible, 2 on the Pareto front"
        )
    );
    // The front's rows, sorted by cost, with their parameter; every trial in the second table.
    let row = r#"<tr class="front"><th>"#;
    let front: Vec<&str> = html
        .match_indices(row)
        .map(|(i, _)| &html[i + row.len()..i + row.len() + 1])
        .collect();
    assert_eq!(front, ["2", "0"]);
    assert_eq!(html.matches(r#"<tr class="trial">"#).count(), 4);
    assert!(html.contains("<td>2.500</td>"));
    // Three feasible dots, one infeasible, and the front's step line through two points.
    let dots = |name: &str| {
        let at = html
            .find(&format!(r#"<g class="markers" data-name="{name}""#))
            .unwrap();
        html[at..]
            .split("</g>")
            .next()
            .unwrap()
            .matches("<circle")
            .count()
    };
    assert_eq!((dots("feasible trials"), dots("infeasible trials")), (3, 1));
    let at = html
        .find(r#"<path class="series" data-name="Pareto front" d="M"#)
        .unwrap();
    let d = html[at..].split("\" stroke").next().unwrap();
    assert_eq!(d.matches('H').count(), 1, "{d}");

    // A search.json without directions, or a missing objective column: exit 2, saying which.
    std::fs::write(s.join("search.json"), r#"{"objectives": ["ttft_p99_ms"]}"#).unwrap();
    let out = servesim(&["report", "s"], dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no `directions` list"));
    std::fs::write(
        s.join("search.json"),
        r#"{"objectives": ["latency"], "directions": ["minimize"]}"#,
    )
    .unwrap();
    let out = servesim(&["report", "s"], dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no `latency` column"));
    // A cell write_search would not write: drawn as nothing, or counted infeasible, before.
    std::fs::write(
        s.join("search.json"),
        r#"{"objectives": ["ttft_p99_ms"], "directions": ["minimize"]}"#,
    )
    .unwrap();
    for (rows, said) in [
        (
            "0,90.5,yes,true",
            r#"row 2 (trial 0): `feasible` is "yes", not true or false"#,
        ),
        (
            "0,90.5,true,true\n1,fast,true,false",
            r#"row 3 (trial 1): `ttft_p99_ms` is "fast", not a number (or empty for none)"#,
        ),
    ] {
        std::fs::write(
            s.join("search.csv"),
            format!("trial,ttft_p99_ms,feasible,pareto\n{rows}\n"),
        )
        .unwrap();
        let out = servesim(&["report", "s"], dir);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
    }
    std::fs::write(
        s.join("search.csv"),
        "trial,ttft_p99_ms,feasible,pareto\n0,,true,true\n",
    )
    .unwrap();
    ok(&servesim(&["report", "s"], dir));
}
