//! A sweep's results as they finish: every finished run's row is appended to
//! `OUT/sweep.progress.csv` (and flushed) beside the sweep's plan in
//! `OUT/sweep.progress.json`, so a sweep killed by a time limit, a pre-emption (Slurm
//! `--requeue`, a Kubernetes Job retry) or Ctrl-C loses only the runs in flight:
//! `sweep --resume` with the same command keeps the finished rows and runs the rest. Both
//! files are removed once `sweep.csv` and `sweep.json` are committed.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Plan;

/// The finished rows, as `sweep.csv` rows (unsorted, raw cells).
pub const ROWS: &str = "sweep.progress.csv";
/// The plan the rows belong to.
pub const PLAN: &str = "sweep.progress.json";

/// The rows an earlier attempt of `plan` finished in `dir` (none when it left nothing). A
/// last row cut short by a kill is dropped (that run is done again).
pub fn finished(dir: &Path, plan: &Plan) -> Result<BTreeMap<usize, Vec<String>>, String> {
    let plan_path = dir.join(PLAN);
    let rows_path = dir.join(ROWS);
    if !plan_path.exists() || !rows_path.exists() {
        return Ok(BTreeMap::new());
    }
    let text = crate::input::read_text(&plan_path)?;
    let earlier: Plan =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", plan_path.display()))?;
    if &earlier != plan {
        let what = if earlier.inputs != plan.inputs {
            "its inputs were edited since"
        } else if earlier.version != plan.version {
            "another servesim version ran it"
        } else {
            "the scenario path, --vary, --set, --replicas or --shard differ"
        };
        return Err(format!(
            "{} holds the finished runs of another sweep ({what}): run the command that started it, or remove {} and {} to start over",
            dir.display(),
            plan_path.display(),
            rows_path.display()
        ));
    }
    let header = plan.header();
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(crate::input::open_lines(&rows_path)?);
    let got: Vec<String> = reader
        .headers()
        .map_err(|e| format!("{}: {e}", rows_path.display()))?
        .iter()
        .map(String::from)
        .collect();
    if got != header {
        return Err(format!(
            "{}: its columns are not this sweep's; remove it to start over",
            rows_path.display()
        ));
    }
    let in_shard: std::collections::BTreeSet<usize> =
        plan.points().iter().map(|p| p.index).collect();
    let mut rows = BTreeMap::new();
    let records: Vec<_> = reader.records().collect();
    // A row is whole once its line ends: a file that does not end in a newline was cut in
    // its last row, however many cells that row seems to have.
    let cut = ends_mid_line(&rows_path);
    let last = records.len().saturating_sub(1);
    for (k, record) in records.into_iter().enumerate() {
        let row: Option<Vec<String>> = record
            .ok()
            .map(|r| r.iter().map(String::from).collect::<Vec<_>>())
            .filter(|r| r.len() == header.len());
        let index = row.as_ref().and_then(|r| r[0].parse::<usize>().ok());
        match (row, index) {
            _ if cut && k == last => {}
            (Some(row), Some(i)) if in_shard.contains(&i) => {
                rows.insert(i, row);
            }
            // A kill mid-write leaves the last row short: that run is done again.
            _ if k == last => {}
            _ => {
                return Err(format!(
                    "{} line {}: not a row of this sweep; remove the file to start over",
                    rows_path.display(),
                    k + 2
                ));
            }
        }
    }
    Ok(rows)
}

fn ends_mid_line(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut last = [0u8];
    File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::End(-1))?;
            f.read_exact(&mut last)
        })
        .is_ok_and(|()| last[0] != b'\n')
}

/// Where this attempt appends its rows.
pub struct Progress {
    path: PathBuf,
    writer: Mutex<csv::Writer<File>>,
}

impl Progress {
    /// Starts this attempt's files in `dir`: the plan, then the rows file with the header and
    /// `kept` (replacing what was there, written aside and renamed), open for appending.
    pub fn start(
        dir: &Path,
        plan: &Plan,
        kept: &BTreeMap<usize, Vec<String>>,
    ) -> Result<Progress, String> {
        let aside = |name: &str, bytes: &[u8]| -> Result<(), String> {
            let tmp = dir.join(format!(".{name}.new"));
            let path = dir.join(name);
            std::fs::write(&tmp, bytes)
                .and_then(|()| File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        let json = serde_json::to_string_pretty(plan).map_err(|e| e.to_string())? + "\n";
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(plan.header()).map_err(|e| e.to_string())?;
        for row in kept.values() {
            w.write_record(row).map_err(|e| e.to_string())?;
        }
        let rows = w.into_inner().map_err(|e| e.to_string())?;
        aside(ROWS, &rows)?;
        aside(PLAN, json.as_bytes())?;
        let path = dir.join(ROWS);
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| format!("cannot append to {}: {e}", path.display()))?;
        Ok(Progress {
            writer: Mutex::new(
                csv::WriterBuilder::new()
                    .has_headers(false)
                    .from_writer(file),
            ),
            path,
        })
    }

    /// Appends one finished row and flushes it to the file.
    pub fn append(&self, row: &[String]) -> Result<(), String> {
        let mut w = self.writer.lock().expect("no thread panics holding it");
        w.write_record(row)
            .and_then(|()| w.flush().map_err(csv::Error::from))
            .map_err(|e| format!("cannot append to {}: {e}", self.path.display()))
    }
}

/// Removes the progress files (once `sweep.csv` is committed).
pub fn remove(dir: &Path) {
    for name in [ROWS, PLAN] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            scenario: "s.ron".into(),
            set: vec![],
            axes: vec![super::super::Axis {
                path: "seed".into(),
                values: vec!["1".into(), "2".into(), "3".into()],
            }],
            replicas: 1,
            shard: (0, 1),
            inputs: Default::default(),
            version: super::super::VERSION.into(),
        }
    }

    fn row(plan: &Plan, i: usize) -> Vec<String> {
        let mut r = vec![i.to_string()];
        r.resize(plan.header().len(), "x,\"y\"".into());
        r
    }

    #[test]
    fn finished_rows_survive_a_kill_mid_row_and_belong_to_their_plan_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan();
        assert!(finished(dir.path(), &p).unwrap().is_empty());
        let progress = Progress::start(dir.path(), &p, &BTreeMap::new()).unwrap();
        progress.append(&row(&p, 2)).unwrap();
        progress.append(&row(&p, 0)).unwrap();
        drop(progress);
        // A kill while writing a third row leaves part of it: a few cells, or every cell but
        // the end of the last.
        let path = dir.path().join(ROWS);
        let whole = std::fs::read(&path).unwrap();
        let most_of_a_row = row(&p, 1).join(",");
        for cut in [&b"1,x,\"y"[..], most_of_a_row.as_bytes()] {
            let mut bytes = whole.clone();
            bytes.extend_from_slice(cut);
            std::fs::write(&path, &bytes).unwrap();
            let rows = finished(dir.path(), &p).unwrap();
            assert_eq!(rows.keys().copied().collect::<Vec<_>>(), [0, 2]);
        }
        let rows = finished(dir.path(), &p).unwrap();
        assert_eq!(rows[&2], row(&p, 2));
        // Restarting rewrites the file without the cut row, and appends after it.
        let progress = Progress::start(dir.path(), &p, &rows).unwrap();
        progress.append(&row(&p, 1)).unwrap();
        drop(progress);
        assert_eq!(finished(dir.path(), &p).unwrap().len(), 3);
        // Another sweep's plan is refused, naming what differs.
        let mut edited = p.clone();
        edited.inputs.insert("s.ron".into(), "fnv1a:1".into());
        let e = finished(dir.path(), &edited).unwrap_err();
        assert!(e.contains("inputs were edited"), "{e}");
        remove(dir.path());
        assert!(finished(dir.path(), &edited).unwrap().is_empty());
    }
}
