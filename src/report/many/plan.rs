//! A plan's page (the best configuration, the Pareto front, every verdict) and a capacity
//! search's page (each limit with its interval over seeds).

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use super::super::chart::{BarChart, LineChart, Series, colour, esc};
use super::super::page::{ReportError, page, read_err};
use super::table::{MAX_TABLE_ROWS, Table, cell, more_rows, read_json};

pub(super) fn plan_page(dir: &Path) -> Result<String, ReportError> {
    let plan_path = dir.join("plan.csv");
    let plan = Table::read(&plan_path)?;
    let meta = dir.join("plan.json");
    let meta = if meta.is_file() {
        Some(read_json(&meta)?)
    } else {
        None
    };
    let get = |k: &str| meta.as_ref().and_then(|m| m.get(k)).cloned();
    let scenario = get("scenario")
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "?".into());
    let status = plan.need(&plan_path, "status")?;
    let count = |st: &str| plan.rows.iter().filter(|r| r[status] == st).count();
    // A shard's best is the best of its part only (`origin.shard`: [I, N]).
    let shard = get("origin")
        .and_then(|o| o.get("shard").cloned())
        .and_then(|s| Some((s.get(0)?.as_u64()?, s.get(1)?.as_u64()?)))
        .filter(|&(_, n)| n > 1);
    let part = match shard {
        Some((i, n)) => format!(
            ", shard {i}/{n}: {} of the plan's {}",
            plan.rows.len(),
            get("origin")
                .and_then(|o| o.get("configurations")?.as_u64())
                .filter(|&c| c > 0)
                .map_or("?".into(), |c| c.to_string())
        ),
        None => format!(": {}", plan.rows.len()),
    };
    let header = format!(
        "<p>plan of {} (group {}){part} configurations, {} runs; {} feasible, {} infeasible, {} dominated, {} excluded</p>",
        esc(&scenario),
        esc(get("group")
            .and_then(|v| v.as_str().map(String::from))
            .as_deref()
            .unwrap_or("?")),
        get("runs").map_or("?".into(), |v| v.to_string()),
        count("best") + count("feasible"),
        count("infeasible"),
        count("dominated"),
        count("excluded"),
    );
    let mut body = String::new();
    let config_cols = crate::plan::CONFIG_COLUMNS;
    // As `plan` labels a configuration (`H100 tp2 pp1 seqs64 tokens2048 vllm_v1 round_robin`).
    let prefixes = ["", "tp", "pp", "seqs", "tokens", "", "", "pd"];
    let label = |r: &[String]| {
        config_cols
            .iter()
            .zip(prefixes)
            .filter_map(|(c, p)| {
                plan.col(c)
                    .filter(|&i| !r[i].is_empty())
                    .map(|i| format!("{p}{}", r[i]))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let of_shard = if shard.is_some() {
        "of this shard "
    } else {
        ""
    };
    if let Some(best) = plan.rows.iter().find(|r| r[status] == "best") {
        let f = |c: &str| plan.col(c).map_or("–".into(), |i| cell(&best[i]));
        let _ = write!(
            body,
            r#"<section id="best"><h2>Cheapest configuration {of_shard}that meets every SLO</h2><p><b>{} × {}</b> = {} GPUs at {}/h; p99 TTFT {} ms, {} output tokens/s.</p><p class="note">{}{}</p></section>"#,
            f("instances"),
            esc(&label(best)),
            f("gpus"),
            f("price_per_hour"),
            f("ttft_p99_ms"),
            f("output_tokens_per_s"),
            esc(&best[plan.need(&plan_path, "reason")?]),
            if shard.is_some() {
                " Another shard may hold a cheaper one: <code>servesim merge</code> the shards' directories for the plan's answer."
            } else {
                ""
            }
        );
    } else {
        let _ = write!(
            body,
            r#"<section id="best"><h2>No configuration {of_shard}meets every SLO</h2><p class="note">Why each failed is in the table below.</p></section>"#
        );
    }
    let pareto_path = dir.join("pareto.csv");
    if pareto_path.is_file() {
        let front = Table::read(&pareto_path)?;
        let c = |n: &str| front.need(&pareto_path, n);
        let (price, ttft, tok, name, n) = (
            c("price_per_hour")?,
            c("ttft_p99_ms")?,
            c("output_tokens_per_s")?,
            c("configuration")?,
            c("instances")?,
        );
        let pts = |y: usize| -> Vec<(f64, f64)> {
            front
                .rows
                .iter()
                .filter_map(|r| Some((r[price].parse().ok()?, r[y].parse().ok()?)))
                .collect()
        };
        let line = |title: &str, y_label: &str, y: usize, step: bool| {
            LineChart {
                title: title.into(),
                x_label: "price per hour".into(),
                y_label: y_label.into(),
                series: vec![Series {
                    name: "Pareto front".into(),
                    colour: colour(0),
                    points: pts(y),
                    dashed: false,
                    markers: false,
                }],
                step,
                ..Default::default()
            }
            .svg()
        };
        let _ = write!(
            body,
            r#"<section id="pareto"><h2>Pareto front</h2><p class="note">Every passing run that no cheaper run beats on p99 TTFT.</p><div class="grid">{}{}</div><table class="pareto"><thead><tr><th>configuration</th><th>instances</th><th>price/h</th><th>TTFT p99 (ms)</th><th>output tok/s</th></tr></thead><tbody>"#,
            line("p99 TTFT against price", "p99 TTFT (ms)", ttft, true),
            line("throughput against price", "output tokens/s", tok, false)
        );
        for r in &front.rows {
            let _ = write!(
                body,
                "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r[name]),
                esc(&r[n]),
                cell(&r[price]),
                cell(&r[ttft]),
                cell(&r[tok])
            );
        }
        body.push_str("</tbody></table></section>");
    }
    // The configuration in one cell, then the verdict's columns, the reason last.
    let shown: Vec<usize> = (0..plan.header.len())
        .filter(|&i| {
            let h = plan.header[i].as_str();
            !config_cols.contains(&h) && h != "rank" && h != "reason"
        })
        .collect();
    let _ = write!(
        body,
        r#"<section id="configurations"><h2>Every configuration and its verdict</h2><table class="plan"><thead><tr><th>rank</th><th>configuration</th>"#
    );
    for &i in &shown {
        let _ = write!(body, "<th>{}</th>", esc(&plan.header[i].replace('_', " ")));
    }
    body.push_str("<th>reason</th></tr></thead><tbody>");
    let rank = plan.col("rank");
    let reason = plan.col("reason");
    for r in plan.rows.iter().take(MAX_TABLE_ROWS) {
        let _ = write!(
            body,
            "<tr><td>{}</td><th>{}</th>",
            rank.map_or("–".into(), |c| esc(&r[c])),
            esc(&label(r))
        );
        for &i in &shown {
            let _ = write!(body, "<td>{}</td>", cell(&r[i]));
        }
        let _ = write!(
            body,
            r#"<td class="reason">{}</td></tr>"#,
            reason.map_or(String::new(), |c| esc(&r[c]))
        );
    }
    body.push_str("</tbody></table>");
    more_rows(&mut body, plan.rows.len(), "plan.csv");
    body.push_str("</section>");
    Ok(page(&format!("plan of {scenario}"), &header, &body, ""))
}

/// An [`Estimate`] as `capacity.json` holds it, shown as `mean [low, high]`.
fn estimate(v: Option<&Value>, digits: usize) -> String {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return "–".into();
    };
    let f = |k: &str| v.get(k).and_then(Value::as_f64);
    match (f("mean"), f("low"), f("high")) {
        (Some(m), Some(l), Some(h)) => format!("{m:.digits$} [{l:.digits$}, {h:.digits$}]"),
        (Some(m), _, _) => format!("{m:.digits$}"),
        _ => "–".into(),
    }
}

pub(super) fn capacity_page(dir: &Path) -> Result<String, ReportError> {
    let path = dir.join("capacity.json");
    let c = read_json(&path)?;
    let limits = c
        .get("limits")
        .and_then(Value::as_array)
        .ok_or_else(|| read_err(&path, "no `limits` (is it a servesim capacity.json?)"))?;
    let scenario = c.get("scenario").and_then(Value::as_str).unwrap_or("?");
    let seeds = c.get("seeds").and_then(Value::as_array).map_or(0, Vec::len);
    let groups = c.get("groups").and_then(Value::as_array);
    let header = format!(
        "<p>capacity of {}{}: {} limit{} over {} seed{}, {} runs; {}{}</p>",
        esc(scenario),
        c.get("group")
            .and_then(Value::as_str)
            .map_or(String::new(), |g| format!(", group {} alone", esc(g))),
        limits.len(),
        if limits.len() == 1 { "" } else { "s" },
        seeds,
        if seeds == 1 { "" } else { "s" },
        c.get("runs").map_or("?".into(), Value::to_string),
        // Traces, sessions and staged arrivals state no one rate (it was shown as "?").
        c.get("stated_requests_per_s")
            .and_then(Value::as_f64)
            .map_or(
                "no one rate stated (req/s measured in each run's window)".into(),
                |r| { format!("stated rate {r:.3} req/s") }
            ),
        groups.map_or(String::new(), |g| format!(
            "; each of {} groups also searched alone",
            g.len()
        ))
    );
    let mut body = limits_section(&c, "limits", "Limits: mean [95 % interval] over seeds");
    if let Some(groups) = groups {
        let name = |g: &Value| {
            g.get("group")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        let sustained = |g: &Value| {
            g.pointer("/limits/0/requests_per_s/mean")
                .and_then(Value::as_f64)
                .unwrap_or(f64::NAN)
        };
        let chart = BarChart {
            title: "Sustained rate: the deployment and each group alone (mean over seeds)".into(),
            y_label: "requests/s".into(),
            categories: std::iter::once("deployment".to_string())
                .chain(groups.iter().map(name))
                .collect(),
            bars: vec![(
                "requests/s".into(),
                colour(0),
                std::iter::once(sustained(&c))
                    .chain(groups.iter().map(sustained))
                    .collect(),
            )],
            legend: false,
        };
        let _ = write!(
            body,
            r#"<section id="groups"><h2>Each group alone under the whole workload</h2><div class="grid">{}</div></section>"#,
            chart.svg()
        );
        for (k, g) in groups.iter().enumerate() {
            body.push_str(&limits_section(
                g,
                &format!("group-{k}"),
                &format!(
                    "Group {} alone: mean [95 % interval] over seeds",
                    esc(&name(g))
                ),
            ));
        }
    }
    Ok(page(&format!("capacity of {scenario}"), &header, &body, ""))
}

/// One capacity answer's limits: a table, a bar chart and its warnings.
fn limits_section(c: &Value, id: &str, title: &str) -> String {
    let mut body = format!(
        r#"<section id="{id}"><h2>{title}</h2><table class="limits"><thead><tr><th>criterion</th><th>holds when</th><th>requests/s</th><th>multiple of the stated rates</th><th>per seed</th><th>completed/s when overloaded</th></tr></thead><tbody>"#,
    );
    let mut bars = Vec::new();
    for l in c
        .get("limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = l.get("criterion").and_then(Value::as_str).unwrap_or("?");
        let per_seed = l
            .get("scale_per_seed")
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .map(|x| x.as_f64().map_or("–".into(), |x| format!("{x:.3}")))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let at_least = l.get("at_least").and_then(Value::as_bool) == Some(true);
        let _ = write!(
            body,
            r#"<tr><th>{}</th><td class="reason">{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(name),
            esc(l.get("holds_when").and_then(Value::as_str).unwrap_or("")),
            if at_least { "≥ " } else { "" },
            estimate(l.get("requests_per_s"), 2),
            estimate(l.get("scale"), 3),
            per_seed,
            estimate(l.get("overloaded_completed_per_s"), 2)
        );
        let mean = l
            .pointer("/requests_per_s/mean")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN);
        bars.push((name.to_string(), mean));
    }
    body.push_str("</tbody></table>");
    let chart = BarChart {
        title: "Largest rate each criterion allows (mean over seeds)".into(),
        y_label: "requests/s".into(),
        categories: bars.iter().map(|b| b.0.clone()).collect(),
        bars: vec![(
            "requests/s".into(),
            colour(0),
            bars.iter().map(|b| b.1).collect(),
        )],
        legend: false,
    };
    let _ = write!(body, r#"<div class="grid">{}</div>"#, chart.svg());
    if let Some(w) = c
        .get("warnings")
        .and_then(Value::as_array)
        .filter(|w| !w.is_empty())
    {
        body.push_str(r#"<h3>Warnings</h3><ul>"#);
        for x in w {
            let _ = write!(body, "<li>{}</li>", esc(x.as_str().unwrap_or("")));
        }
        body.push_str("</ul>");
    }
    body.push_str("</section>");
    body
}
