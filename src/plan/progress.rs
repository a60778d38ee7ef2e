//! A plan's trials as they finish: with `--out`, each trial (a configuration at a size, over
//! every seed) is appended to `OUT/plan.progress.jsonl` and flushed, after a first line that
//! says what the plan runs ([`Origin`]). `plan --resume` with the same command reuses them:
//! the search is deterministic, so it asks for the same trials in the same order and gets
//! the same answer, byte for byte, running only what the killed attempt had not finished.
//! The file is removed once `plan.csv`, `pareto.csv` and `plan.json` are committed.
//!
//! Numbers are stored as the bits of their `f64`, so a reused trial is the trial that ran
//! (JSON text would turn NaN into null and may round a last digit).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{Config, Origin, Trial};
use crate::interval::Estimate;

/// The progress file in `--out`.
pub const FILE: &str = "plan.progress.jsonl";

/// One line: a trial of a configuration (by label) at `n` instances.
#[derive(Serialize, Deserialize)]
struct Line {
    config: String,
    n: u32,
    passes: bool,
    /// Bits of price per hour, p99 TTFT, output tokens/s, served share.
    bits: [u64; 4],
    /// Per target: bits of mean, low, high; seeds.
    attainment: Vec<(u64, Option<u64>, Option<u64>, usize)>,
    failed: Option<String>,
}

impl Line {
    fn of(config: String, n: u32, t: &Trial) -> Line {
        Line {
            config,
            n,
            passes: t.passes,
            bits: [
                t.price_per_hour,
                t.ttft_p99_ms,
                t.output_tokens_per_s,
                t.served_share,
            ]
            .map(f64::to_bits),
            attainment: t
                .attainment
                .iter()
                .map(|e| {
                    (
                        e.mean.to_bits(),
                        e.low.map(f64::to_bits),
                        e.high.map(f64::to_bits),
                        e.n,
                    )
                })
                .collect(),
            failed: t.failed.clone(),
        }
    }

    fn trial(&self) -> Trial {
        let [price, ttft, tokens, served] = self.bits.map(f64::from_bits);
        Trial {
            instances: self.n,
            passes: self.passes,
            price_per_hour: price,
            ttft_p99_ms: ttft,
            output_tokens_per_s: tokens,
            attainment: self
                .attainment
                .iter()
                .map(|&(mean, low, high, n)| Estimate {
                    mean: f64::from_bits(mean),
                    low: low.map(f64::from_bits),
                    high: high.map(f64::from_bits),
                    n,
                })
                .collect(),
            served_share: served,
            failed: self.failed.clone(),
        }
    }
}

/// The trials of this attempt (and those kept from an earlier one), and the file they go to.
#[derive(Debug)]
pub struct Trials {
    path: PathBuf,
    known: BTreeMap<(String, u32), Trial>,
    file: Mutex<File>,
}

impl Trials {
    /// Starts the progress file in `dir` for a plan of `origin`: with `resume`, keeps the
    /// trials an earlier attempt of the same plan finished there (refusing another plan's);
    /// else starts empty. The file is rewritten (aside, then renamed) and opened for appending.
    pub fn start(dir: &Path, origin: &Origin, resume: bool) -> Result<Trials, String> {
        let path = dir.join(FILE);
        let known = if resume && path.exists() {
            read(&path, origin)?
        } else {
            BTreeMap::new()
        };
        let mut text = serde_json::to_string(origin).map_err(|e| e.to_string())? + "\n";
        for ((label, n), t) in &known {
            let line = Line::of(label.clone(), *n, t);
            text += &(serde_json::to_string(&line).map_err(|e| e.to_string())? + "\n");
        }
        let tmp = dir.join(format!(".{FILE}.new"));
        std::fs::write(&tmp, text.as_bytes())
            .and_then(|()| File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| format!("cannot append to {}: {e}", path.display()))?;
        Ok(Trials {
            path,
            known,
            file: Mutex::new(file),
        })
    }

    /// Trials kept from an earlier attempt.
    pub fn kept(&self) -> usize {
        self.known.len()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The earlier attempt's trial of `config` at `n` instances, if it finished one.
    pub fn get(&self, config: &Config, n: u32) -> Option<Trial> {
        self.known.get(&(config.label(), n)).cloned()
    }

    /// Appends a finished trial and flushes it.
    pub fn record(&self, config: &Config, n: u32, t: &Trial) -> Result<(), String> {
        let line =
            serde_json::to_string(&Line::of(config.label(), n, t)).map_err(|e| e.to_string())?;
        let mut f = self.file.lock().expect("no thread panics holding it");
        f.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| f.flush())
            .map_err(|e| format!("cannot append to {}: {e}", self.path.display()))
    }
}

/// The trials in `path`, checked to belong to a plan of `origin`. A last line cut short by a
/// kill is dropped (that trial runs again).
fn read(path: &Path, origin: &Origin) -> Result<BTreeMap<(String, u32), Trial>, String> {
    let text = crate::input::read_text(path)?;
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    let earlier: Origin = serde_json::from_str(first.trim_end()).map_err(|e| {
        format!(
            "{}: its first line is not a plan's description ({e}); remove it to start over",
            path.display()
        )
    })?;
    if &earlier != origin {
        let what = if earlier.inputs != origin.inputs {
            "its inputs were edited since"
        } else if earlier.version != origin.version {
            "another servesim version ran it"
        } else {
            "the scenario path, --set, --replicas or --shard differ"
        };
        return Err(format!(
            "{} holds the trials of another plan ({what}): run the command that started it, or remove {} to start over",
            path.parent().unwrap_or(Path::new(".")).display(),
            path.display()
        ));
    }
    let mut known = BTreeMap::new();
    for (k, line) in lines.enumerate() {
        if !line.ends_with('\n') {
            break; // cut by a kill
        }
        let l: Line = serde_json::from_str(line.trim_end()).map_err(|e| {
            format!(
                "{}: line {} is not a trial ({e}); remove the file to start over",
                path.display(),
                k + 2
            )
        })?;
        known.insert((l.config.clone(), l.n), l.trial());
    }
    Ok(known)
}

/// Removes the progress file (once the plan's files are committed).
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(FILE));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            file: "p.ron".into(),
            set: vec![],
            replicas: 1,
            shard: (0, 1),
            configurations: 4,
            inputs: BTreeMap::from([("p.ron".into(), "fnv1a:1".into())]),
            version: "0".into(),
        }
    }

    fn config() -> Config {
        Config {
            gpu: "H100".into(),
            tp: 1,
            pp: 1,
            dp: 1,
            max_num_seqs: 8,
            max_num_batched_tokens: 64,
            scheduler: "vllm_v1".into(),
            routing: "round_robin".into(),
            price_per_gpu_hour: 2.0,
            pd_split: None,
        }
    }

    fn trial(n: u32) -> Trial {
        Trial {
            instances: n,
            passes: n > 2,
            price_per_hour: 2.0 * f64::from(n),
            ttft_p99_ms: f64::NAN,
            output_tokens_per_s: 0.1 + 0.2,
            attainment: vec![Estimate::of(&[0.97, 0.991])],
            served_share: 1.0 / 3.0,
            failed: (n <= 2).then(|| "seed 1: falls behind".into()),
        }
    }

    #[test]
    fn trials_come_back_bit_for_bit_and_a_cut_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let t = Trials::start(dir.path(), &origin(), false).unwrap();
        t.record(&config(), 2, &trial(2)).unwrap();
        t.record(&config(), 3, &trial(3)).unwrap();
        drop(t);
        // A kill in the middle of a third line.
        let path = dir.path().join(FILE);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"config":"H100 tp1"#).unwrap();
        let t = Trials::start(dir.path(), &origin(), true).unwrap();
        assert_eq!(t.kept(), 2);
        let back = t.get(&config(), 2).unwrap();
        assert!(back.ttft_p99_ms.is_nan());
        assert_eq!(back.output_tokens_per_s.to_bits(), (0.1f64 + 0.2).to_bits());
        assert_eq!(back.attainment, trial(2).attainment);
        // (NaN ≠ NaN, so compared as printed: Rust prints each f64 so that it reads back.)
        assert_eq!(
            format!("{:?}", t.get(&config(), 3).unwrap()),
            format!("{:?}", trial(3))
        );
        assert!(t.get(&config(), 4).is_none());
        // The rewritten file ends in a newline and holds the two trials.
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.ends_with('\n'));
        // Without --resume the file starts over.
        assert_eq!(
            Trials::start(dir.path(), &origin(), false).unwrap().kept(),
            0
        );
    }

    #[test]
    fn another_plan_s_trials_are_refused_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        Trials::start(dir.path(), &origin(), false)
            .unwrap()
            .record(&config(), 2, &trial(2))
            .unwrap();
        let mut edited = origin();
        edited.inputs.insert("p.ron".into(), "fnv1a:2".into());
        let e = Trials::start(dir.path(), &edited, true).unwrap_err();
        assert!(
            e.contains("another plan (its inputs were edited since)"),
            "{e}"
        );
        let mut sharded = origin();
        sharded.shard = (1, 2);
        let e = Trials::start(dir.path(), &sharded, true).unwrap_err();
        assert!(e.contains("--shard differ"), "{e}");
    }
}
