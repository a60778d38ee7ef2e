//! Reading a shard back and joining shards (`servesim merge`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::Plan;

/// A shard's (or a whole sweep's) results read back: its plan and rows by point.
pub struct Part {
    pub dir: PathBuf,
    pub plan: Plan,
    pub header: Vec<String>,
    pub rows: BTreeMap<usize, Vec<String>>,
}

impl Part {
    /// Reads `sweep.json` and `sweep.csv` of `dir`.
    pub fn read(dir: &std::path::Path) -> Result<Part, String> {
        let json = dir.join("sweep.json");
        let text = crate::input::read_text(&json).map_err(|e| {
            format!(
                "{e} (is {} the --out of a `servesim sweep`?)",
                dir.display()
            )
        })?;
        let plan: Plan =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
        plan.check_size()
            .map_err(|e| format!("{}: {e} (was it edited?)", json.display()))?;
        let path = dir.join("sweep.csv");
        let mut reader = csv::Reader::from_reader(crate::input::open_lines(&path)?);
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| format!("{}: {e}", path.display()))?
            .iter()
            .map(String::from)
            .collect();
        if header != plan.header() {
            return Err(format!(
                "{}: its columns are not those of the sweep in {} (written by another servesim version?)",
                path.display(),
                json.display()
            ));
        }
        // Every point of the whole sweep, to check that a row says what its point is.
        let whole = Plan {
            shard: (0, 1),
            ..plan.clone()
        };
        let points: BTreeMap<usize, super::Point> =
            whole.points().into_iter().map(|p| (p.index, p)).collect();
        let mut rows = BTreeMap::new();
        for record in reader.records() {
            let record = record.map_err(|e| format!("{}: {e}", path.display()))?;
            let line = record.position().map_or(0, csv::Position::line);
            let at = || format!("{} line {line}", path.display());
            let row: Vec<String> = record.iter().map(String::from).collect();
            let index: usize = row[0]
                .parse()
                .map_err(|_| format!("{}: `{}` is not a point number", at(), row[0]))?;
            let Some(point) = points.get(&index) else {
                return Err(format!(
                    "{}: point {index} is not one of this sweep's {} points (was it edited?)",
                    at(),
                    points.len()
                ));
            };
            let said: Vec<&str> = row[1..=plan.axes.len() + 1]
                .iter()
                .map(String::as_str)
                .collect();
            let mut meant: Vec<&str> = point
                .values
                .iter()
                .map(|v| super::display_value(v))
                .collect();
            let replica = point.replica.to_string();
            meant.push(&replica);
            if said != meant {
                let named = |cells: &[&str]| {
                    header[1..]
                        .iter()
                        .zip(cells)
                        .map(|(h, c)| format!("{h} = {c}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(format!(
                    "{}: point {index} is {} in this sweep, but the row says {} (was it edited?)",
                    at(),
                    named(&meant),
                    named(&said)
                ));
            }
            super::check_row(&header, &row).map_err(|e| format!("{}: {e}", at()))?;
            if rows.insert(index, row).is_some() {
                return Err(format!("{}: point {index} appears twice", path.display()));
            }
        }
        Ok(Part {
            dir: dir.to_path_buf(),
            plan,
            header,
            rows,
        })
    }
}

fn shown(version: &str) -> &str {
    if version.is_empty() {
        "(a version that did not record it)"
    } else {
        version
    }
}

/// Joins shards into the whole sweep: they must be shards of one plan, each once, and
/// together hold every point exactly once.
pub fn merge(parts: Vec<Part>) -> Result<(Plan, BTreeMap<usize, Vec<String>>), String> {
    let Some(first) = parts.first() else {
        return Err("no shard to merge".into());
    };
    let whole = Plan {
        shard: (0, 1),
        ..first.plan.clone()
    };
    let mut seen_shards = BTreeMap::new();
    let mut rows = BTreeMap::new();
    for part in &parts {
        if part.plan.version != first.plan.version {
            return Err(format!(
                "{} was run by servesim {}, {} by servesim {}: rerun the shards with one version",
                part.dir.display(),
                shown(&part.plan.version),
                first.dir.display(),
                shown(&first.plan.version)
            ));
        }
        let changed: Vec<&str> = part
            .plan
            .inputs
            .iter()
            .filter(|(k, v)| first.plan.inputs.get(*k) != Some(*v))
            .chain(
                first
                    .plan
                    .inputs
                    .iter()
                    .filter(|(k, _)| !part.plan.inputs.contains_key(*k)),
            )
            .map(|(k, _)| k.as_str())
            .collect();
        if !changed.is_empty() {
            return Err(format!(
                "{} and {} were run on different inputs: {} differ{} (edited between the shards' runs?); rerun the shards run before the edit",
                part.dir.display(),
                first.dir.display(),
                changed.join(", "),
                if changed.len() == 1 { "s" } else { "" }
            ));
        }
        let same = Plan {
            shard: (0, 1),
            ..part.plan.clone()
        } == whole;
        if !same {
            return Err(format!(
                "{} is a shard of another sweep than {} (scenario, --vary, --set or --replicas differ)",
                part.dir.display(),
                first.dir.display()
            ));
        }
        if part.plan.shard.1 != first.plan.shard.1 {
            if let Some(whole) = [part, first].into_iter().find(|p| p.plan.shard.1 == 1) {
                return Err(format!(
                    "{} holds a whole sweep (merged, or run without --shard), not one of the shards: merge only the shards",
                    whole.dir.display()
                ));
            }
            return Err(format!(
                "{} was split into {} shards, {} into {}",
                part.dir.display(),
                part.plan.shard.1,
                first.dir.display(),
                first.plan.shard.1
            ));
        }
        if let Some(other) = seen_shards.insert(part.plan.shard.0, &part.dir) {
            return Err(format!(
                "{} and {} are the same shard {}/{}",
                other.display(),
                part.dir.display(),
                part.plan.shard.0,
                part.plan.shard.1
            ));
        }
        let expected: Vec<usize> = part.plan.points().iter().map(|p| p.index).collect();
        let got: Vec<usize> = part.rows.keys().copied().collect();
        if expected != got {
            return Err(format!(
                "{} holds {} of its shard's {} points: the shard did not finish",
                part.dir.display(),
                got.len(),
                expected.len()
            ));
        }
        rows.extend(part.rows.clone());
    }
    let shards = first.plan.shard.1;
    let missing: Vec<String> = (0..shards)
        .filter(|s| !seen_shards.contains_key(s))
        .map(|s| format!("{s}/{shards}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing shards: {}",
            crate::scenario::some_of(missing.iter().map(String::as_str))
        ));
    }
    Ok((whole, rows))
}
