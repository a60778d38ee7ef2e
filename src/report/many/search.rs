//! A policy search's page (`search.csv`, `search.json`, written by `servesim.report.write_search`
//! from Optuna, GEPA, OpenEvolve or a script): every trial against the first two objectives
//! with the Pareto front drawn through the front's trials, the front with its parameters,
//! and every trial.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use super::super::chart::{LineChart, Series, colour, esc};
use super::super::page::{ReportError, page, read_err};
use super::table::{MAX_TABLE_ROWS, Table, cell, more_rows, read_json};

/// Grey for the trials that are neither on the front nor infeasible.
const TRIAL_COLOUR: usize = 8;

pub(super) fn page_of(dir: &Path) -> Result<String, ReportError> {
    let meta_path = dir.join("search.json");
    let meta = read_json(&meta_path)?;
    let strings = |k: &str| -> Result<Vec<String>, ReportError> {
        meta.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .ok_or_else(|| {
                read_err(
                    &meta_path,
                    format!("no `{k}` list (write it with servesim.report.write_search)"),
                )
            })
    };
    let objectives = strings("objectives")?;
    let directions = strings("directions")?;
    if objectives.is_empty() || directions.len() != objectives.len() {
        return Err(read_err(
            &meta_path,
            "`objectives` and `directions` must be two lists of the same, non-zero length",
        ));
    }
    let text = |k: &str| {
        meta.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let csv_path = dir.join("search.csv");
    let t = Table::read(&csv_path)?;
    let trial = t.need(&csv_path, "trial")?;
    let feasible = t.need(&csv_path, "feasible")?;
    let pareto = t.need(&csv_path, "pareto")?;
    let obj: Vec<usize> = objectives
        .iter()
        .map(|o| t.need(&csv_path, o))
        .collect::<Result<_, _>>()?;
    // What write_search writes: true or false, and a number or nothing. Another cell would be
    // drawn as nothing, or its trial counted infeasible, without a word.
    for (k, r) in t.rows.iter().enumerate() {
        let at = |c: usize, what: &str| {
            read_err(
                &csv_path,
                format!(
                    "row {} (trial {}): `{}` is {:?}, not {what}",
                    k + 2,
                    r[trial],
                    t.header[c],
                    r[c]
                ),
            )
        };
        for c in [feasible, pareto] {
            if r[c] != "true" && r[c] != "false" {
                return Err(at(c, "true or false"));
            }
        }
        for &c in &obj {
            if !r[c].is_empty() && r[c].parse::<f64>().is_err() {
                return Err(at(c, "a number (or empty for none)"));
            }
        }
    }
    let params: Vec<usize> = (0..t.header.len())
        .filter(|i| ![trial, feasible, pareto].contains(i) && !obj.contains(i))
        .collect();
    let yes = |r: &[String], c: usize| r[c] == "true";
    let on_front = t.rows.iter().filter(|r| yes(r, pareto)).count();
    let n_feasible = t.rows.iter().filter(|r| yes(r, feasible)).count();
    let header = format!(
        "<p>search{}{}: {} trials, {} feasible, {} on the Pareto front; objectives {}</p>",
        if text("scenario").is_empty() {
            String::new()
        } else {
            format!(" of {}", esc(&text("scenario")))
        },
        if text("tool").is_empty() {
            String::new()
        } else {
            format!(" by {}", esc(&text("tool")))
        },
        t.rows.len(),
        n_feasible,
        on_front,
        objectives
            .iter()
            .zip(&directions)
            .map(|(o, d)| format!("{} ({d})", esc(o)))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let num = |r: &[String], c: usize| r[c].parse::<f64>().ok();
    let mut body = String::new();
    // The chart: the second objective across, the first up (as a plan draws TTFT against
    // price); with one objective, each trial's value in trial order.
    let chart = if obj.len() >= 2 {
        let (y, x) = (obj[0], obj[1]);
        let points = |keep: &dyn Fn(&[String]) -> bool| -> Vec<(f64, f64)> {
            t.rows
                .iter()
                .filter(|r| keep(r))
                .filter_map(|r| Some((num(r, x)?, num(r, y)?)))
                .collect()
        };
        let mut front = points(&|r: &[String]| yes(r, pareto));
        front.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        // The trials' own range, not one from 0: trials of a search often differ by a few %.
        let ys: Vec<f64> = points(&|_: &[String]| true)
            .into_iter()
            .map(|p| p.1)
            .filter(|y| y.is_finite())
            .collect();
        let (lo, hi) = ys
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &y| {
                (a.min(y), b.max(y))
            });
        let pad = if hi > lo {
            (hi - lo) * 0.08
        } else {
            lo.abs().max(1.0) * 0.05
        };
        LineChart {
            title: format!("{} against {}", objectives[0], objectives[1]),
            x_label: objectives[1].clone(),
            y_label: objectives[0].clone(),
            series: vec![
                Series {
                    name: "Pareto front".into(),
                    colour: colour(0),
                    points: front,
                    dashed: false,
                    markers: false,
                },
                Series {
                    name: "feasible trials".into(),
                    colour: colour(TRIAL_COLOUR),
                    points: points(&|r: &[String]| yes(r, feasible)),
                    dashed: false,
                    markers: true,
                },
                Series {
                    name: "infeasible trials".into(),
                    colour: colour(1),
                    points: points(&|r: &[String]| !yes(r, feasible)),
                    dashed: false,
                    markers: true,
                },
            ],
            // Minimising both, the steps bound the region the front dominates.
            step: directions[0] == directions[1],
            y_range: lo.is_finite().then_some((lo - pad, hi + pad)),
            ..Default::default()
        }
    } else {
        LineChart {
            title: format!("{} by trial", objectives[0]),
            x_label: "trial".into(),
            y_label: objectives[0].clone(),
            series: vec![Series {
                name: "trials".into(),
                colour: colour(TRIAL_COLOUR),
                points: t
                    .rows
                    .iter()
                    .filter_map(|r| Some((num(r, trial)?, num(r, obj[0])?)))
                    .collect(),
                dashed: false,
                markers: true,
            }],
            ..Default::default()
        }
    };
    let _ = write!(
        body,
        r#"<section id="front"><h2>Pareto front</h2><p class="note">Feasible trials no other feasible trial beats on every objective, as the search tool marked them.</p><div class="grid">{}</div>"#,
        chart.svg()
    );
    let head = |body: &mut String, extra: &[&str]| {
        body.push_str("<thead><tr><th>trial</th>");
        for o in &objectives {
            let _ = write!(body, "<th>{}</th>", esc(o));
        }
        for e in extra {
            let _ = write!(body, "<th>{e}</th>");
        }
        for &p in &params {
            let _ = write!(body, "<th>{}</th>", esc(&t.header[p]));
        }
        body.push_str("</tr></thead><tbody>");
    };
    let row = |body: &mut String, r: &[String], class: &str, extra: &[usize]| {
        let _ = write!(body, r#"<tr class="{class}"><th>{}</th>"#, esc(&r[trial]));
        for &c in obj.iter().chain(extra).chain(&params) {
            let _ = write!(body, "<td>{}</td>", cell(&r[c]));
        }
        body.push_str("</tr>");
    };
    body.push_str(r#"<table class="search">"#);
    head(&mut body, &[]);
    let mut front: Vec<&Vec<String>> = t.rows.iter().filter(|r| yes(r, pareto)).collect();
    front.sort_by(|a, b| {
        let k = |r: &[String]| num(r, obj[obj.len().min(2) - 1]).unwrap_or(f64::INFINITY);
        k(a).total_cmp(&k(b))
    });
    for r in front.iter().take(MAX_TABLE_ROWS) {
        row(&mut body, r, "front", &[]);
    }
    body.push_str("</tbody></table>");
    more_rows(&mut body, front.len(), "search.csv");
    body.push_str(r#"</section><section id="trials"><h2>Every trial</h2><table class="search">"#);
    head(&mut body, &["feasible", "on the front"]);
    for r in t.rows.iter().take(MAX_TABLE_ROWS) {
        row(&mut body, r, "trial", &[feasible, pareto]);
    }
    body.push_str("</tbody></table>");
    more_rows(&mut body, t.rows.len(), "search.csv");
    body.push_str("</section>");
    Ok(page(
        &format!("search of {}", text("scenario")),
        &header,
        &body,
        "",
    ))
}
