//! Measured step times (a user CSV), interpolated multilinearly.
//!
//! Format: a header naming the key columns, then one row per measured batch shape:
//!
//! ```text
//! prefill_tokens,decode_tokens,step_us
//! 0,1,7100
//! 0,64,9800
//! 512,1,21000
//! 512,64,24500
//! ```
//!
//! Keys: `prefill_tokens` (Σ prompt tokens computed in the step) and `decode_tokens`
//! (number of decoding requests), optionally `context_tokens` (Σ tokens already in KV over
//! the batch). The rows must form a full grid over the distinct key values. Between grid
//! points the step time is interpolated linearly along each key; outside the grid the
//! [`Extrapolation`] policy decides. Lines starting with `#` are comments.

use std::path::Path;

use super::{BatchShape, LatencyError, LatencyModel};
pub use crate::scenario::Extrapolation;
use crate::time::SimDuration;

/// A step-time table over 2 or 3 keys.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredTable {
    /// Key names in column order.
    pub keys: Vec<String>,
    /// Sorted distinct values of each key.
    pub axes: Vec<Vec<f64>>,
    /// Step times (µs) in row-major order over `axes`.
    pub values: Vec<f64>,
    pub extrapolation: Extrapolation,
    /// Where the table came from, for messages.
    pub source: String,
}

const KEYS: [&str; 3] = ["prefill_tokens", "decode_tokens", "context_tokens"];

/// Most rows (grid cells) a measured table may have.
pub const MAX_CELLS: usize = 1 << 22;

impl MeasuredTable {
    /// Reads a table; errors name the file and line.
    pub fn load(path: &Path, extrapolation: Extrapolation) -> Result<Self, String> {
        let text = crate::input::read_text(path)?;
        Self::parse(&text, &path.display().to_string(), extrapolation)
    }

    pub fn parse(text: &str, source: &str, extrapolation: Extrapolation) -> Result<Self, String> {
        let mut rdr = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let headers = rdr.headers().map_err(|e| format!("{source}: {e}"))?.clone();
        crate::input::no_repeated_column(&headers, &[&["step_us"][..], &KEYS].concat(), source)?;
        let col = |name: &str| headers.iter().position(|h| h == name);
        let Some(step_col) = col("step_us") else {
            return Err(format!(
                "{source}:1: no `step_us` column (header: {})",
                headers.iter().collect::<Vec<_>>().join(",")
            ));
        };
        for h in headers.iter() {
            if h != "step_us" && !KEYS.contains(&h) {
                return Err(format!(
                    "{source}:1: unknown column `{h}`; expected {} and step_us",
                    KEYS.join(", ")
                ));
            }
        }
        let keys: Vec<&str> = KEYS.iter().copied().filter(|k| col(k).is_some()).collect();
        if keys.len() < 2 || !keys.contains(&"prefill_tokens") || !keys.contains(&"decode_tokens") {
            return Err(format!(
                "{source}:1: needs columns prefill_tokens and decode_tokens (context_tokens optional)"
            ));
        }
        let mut rows: Vec<(Vec<f64>, f64)> = Vec::new();
        let mut lines: Vec<u64> = Vec::new();
        for rec in rdr.records() {
            let rec = rec.map_err(|e| crate::input::csv_error(source, &e))?;
            let line = rec.position().map_or(0, |p| p.line());
            let num = |i: usize, name: &str| -> Result<f64, String> {
                let s = rec.get(i).unwrap_or("");
                s.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        format!("{source}:{line}: {name} = {s:?} is not a finite number ≥ 0")
                    })
            };
            let key: Vec<f64> = keys
                .iter()
                .map(|k| num(col(k).expect("present"), k))
                .collect::<Result<_, _>>()?;
            let step = num(step_col, "step_us")?;
            // As the coefficients of the other models: a step longer than ~12 days is a slip
            // of unit, and one past the clock's range could not be simulated.
            if step > 1e12 {
                return Err(format!(
                    "{source}:{line}: step_us = {step:e} is more than 10¹² µs (~12 days a step)"
                ));
            }
            rows.push((key, step));
            lines.push(line);
        }
        if rows.is_empty() {
            return Err(format!("{source}: no rows"));
        }
        let mut axes: Vec<Vec<f64>> = vec![Vec::new(); keys.len()];
        for (key, _) in &rows {
            for (a, v) in axes.iter_mut().zip(key) {
                a.push(*v);
            }
        }
        for a in &mut axes {
            a.sort_by(f64::total_cmp);
            a.dedup();
        }
        // Check that the rows form a full grid before any dense array exists: each row is one
        // cell, so a grid has exactly as many cells as rows (a few distinct values per key can
        // otherwise imply billions of cells).
        if rows.len() > MAX_CELLS {
            return Err(format!(
                "{source}: {} rows is more than the {MAX_CELLS} a table may have",
                rows.len()
            ));
        }
        let index_of = |key: &[f64]| -> u128 {
            axes.iter().zip(key).fold(0u128, |idx, (a, v)| {
                idx * a.len() as u128
                    + a.binary_search_by(|x| x.total_cmp(v))
                        .expect("value is on its axis") as u128
            })
        };
        let cells: u128 = axes.iter().map(|a| a.len() as u128).product();
        let mut order: Vec<(u128, usize)> = rows
            .iter()
            .enumerate()
            .map(|(i, (key, _))| (index_of(key), i))
            .collect();
        order.sort_unstable();
        if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0) {
            let shape: Vec<String> = keys
                .iter()
                .zip(&rows[w[1].1].0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            return Err(format!(
                "{source}:{}: {} is measured twice (first on line {})",
                lines[w[1].1],
                shape.join(", "),
                lines[w[0].1]
            ));
        }
        if cells != rows.len() as u128 {
            // The first cell no row fills.
            let missing = order
                .iter()
                .enumerate()
                .find(|(k, (idx, _))| *idx != *k as u128)
                .map_or(order.len() as u128, |(k, _)| k as u128);
            let mut rest = missing;
            let mut point = vec![0.0; axes.len()];
            for (i, a) in axes.iter().enumerate().rev() {
                point[i] = a[(rest % a.len() as u128) as usize];
                rest /= a.len() as u128;
            }
            return Err(format!(
                "{source}: not a full grid: no row for {} (every combination of the key values must be measured; the key values imply {cells} rows, the file has {})",
                keys.iter()
                    .zip(&point)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                rows.len()
            ));
        }
        let mut values = vec![0.0; rows.len()];
        for (idx, i) in order {
            values[idx as usize] = rows[i].1;
        }
        Ok(MeasuredTable {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            axes,
            values,
            extrapolation,
            source: source.to_string(),
        })
    }

    /// Interpolated step time (µs) at `point` (one value per key).
    pub fn lookup(&self, point: &[f64]) -> Result<f64, String> {
        // Per axis: lower index and fraction towards the next point.
        let mut cell = Vec::with_capacity(self.axes.len());
        for ((axis, &x), key) in self.axes.iter().zip(point).zip(&self.keys) {
            let (lo_v, hi_v) = (axis[0], axis[axis.len() - 1]);
            if (x < lo_v || x > hi_v) && self.extrapolation == Extrapolation::Error {
                return Err(format!(
                    "{}: a step with {key} = {x} is outside the measured range {lo_v}..={hi_v}; measure it, or set extrapolation: Clamp or Linear",
                    self.source
                ));
            }
            if axis.len() == 1 {
                cell.push((0, 0.0));
                continue;
            }
            let x = if self.extrapolation == Extrapolation::Clamp {
                x.clamp(lo_v, hi_v)
            } else {
                x
            };
            let i = axis.partition_point(|&a| a <= x).clamp(1, axis.len() - 1) - 1;
            let f = (x - axis[i]) / (axis[i + 1] - axis[i]);
            cell.push((i, f));
        }
        // Multilinear blend of the 2^k corners.
        let k = self.axes.len();
        let mut total = 0.0;
        for corner in 0..(1usize << k) {
            let mut weight = 1.0;
            let mut idx = 0;
            for (a, &(i, f)) in cell.iter().enumerate() {
                let up = (corner >> (k - 1 - a)) & 1 == 1;
                let len = self.axes[a].len();
                let j = if len == 1 { 0 } else { i + usize::from(up) };
                weight *= if len == 1 {
                    if up { 0.0 } else { 1.0 }
                } else if up {
                    f
                } else {
                    1.0 - f
                };
                idx = idx * len + j;
            }
            if weight != 0.0 {
                total += weight * self.values[idx];
            }
        }
        Ok(total.max(1.0))
    }
}

impl LatencyModel for MeasuredTable {
    fn step_time(&self, batch: &BatchShape<'_>) -> Result<SimDuration, LatencyError> {
        let mut point = vec![
            f64::from(batch.prefill_tokens),
            f64::from(batch.decode_tokens),
        ];
        if self.keys.len() == 3 {
            point.push(
                batch
                    .items
                    .iter()
                    .map(|i| f64::from(i.context_tokens))
                    .sum(),
            );
        }
        self.lookup(&point)
            .map(SimDuration::from_us_f64)
            .map_err(LatencyError)
    }

    fn unpriced_steps(&self, max_num_seqs: u32, max_num_batched_tokens: u32) -> Option<String> {
        if self.extrapolation != Extrapolation::Error {
            return None;
        }
        // What a step within the limits can hold: 0 to the budget of prompt tokens, 0 to
        // max_num_seqs decodes (each takes a token of the budget). Context is not bounded
        // by the limits, so its axis is not checked here.
        let reach = [
            (
                "prefill_tokens",
                f64::from(max_num_batched_tokens),
                "max_num_batched_tokens",
            ),
            (
                "decode_tokens",
                f64::from(max_num_seqs.min(max_num_batched_tokens)),
                "max_num_seqs",
            ),
        ];
        let outside: Vec<String> = reach
            .iter()
            .filter_map(|&(key, most, limit)| {
                let axis = &self.axes[self.keys.iter().position(|k| k == key)?];
                let (lo, hi) = (axis[0], axis[axis.len() - 1]);
                let from = if lo > 0.0 {
                    format!(" from {lo}, where a step may have 0")
                } else {
                    String::new()
                };
                let to = if hi < most {
                    let and = if lo > 0.0 { "," } else { "" };
                    format!("{and} up to {hi}, where a step may reach {most} ({limit})")
                } else {
                    String::new()
                };
                (lo > 0.0 || hi < most).then(|| format!("{key} only{from}{to}"))
            })
            .collect();
        (!outside.is_empty()).then(|| {
            format!(
                "{} measures {}: with extrapolation: Error the run stops at the first step outside; measure those steps, lower the limit, or set extrapolation: Clamp or Linear",
                self.source,
                outside.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = "# measured on a test bench\nprefill_tokens,decode_tokens,step_us\n0,1,100\n0,65,740\n1000,1,2100\n1000,65,2740\n";

    #[test]
    fn grid_points_are_exact_and_midpoints_interpolate() {
        let t = MeasuredTable::parse(GRID, "t.csv", Extrapolation::Error).unwrap();
        assert_eq!(t.lookup(&[0.0, 1.0]).unwrap(), 100.0);
        assert_eq!(t.lookup(&[1000.0, 65.0]).unwrap(), 2740.0);
        // decode 33 is halfway: 100 + 320 = 420 at 0 prefill, 2420 at 1000; 500 → 1420.
        assert_eq!(t.lookup(&[0.0, 33.0]).unwrap(), 420.0);
        assert_eq!(t.lookup(&[500.0, 33.0]).unwrap(), 1420.0);
    }

    #[test]
    fn steps_the_limits_allow_outside_the_grid_are_named_before_the_run() {
        // GRID: prefill 0..=1000, decode 1..=65.
        let t = MeasuredTable::parse(GRID, "t.csv", Extrapolation::Error).unwrap();
        assert_eq!(
            t.unpriced_steps(128, 2048).unwrap(),
            "t.csv measures prefill_tokens only up to 1000, where a step may reach 2048 \
             (max_num_batched_tokens); decode_tokens only from 1, where a step may have 0, up \
             to 65, where a step may reach 128 (max_num_seqs): with extrapolation: Error the \
             run stops at the first step outside; measure those steps, lower the limit, or set \
             extrapolation: Clamp or Linear"
        );
        // Decodes take a token of the budget each: 64 seqs within a budget of 1000 fit.
        let full = "prefill_tokens,decode_tokens,step_us\n0,0,1\n0,64,2\n1000,0,3\n1000,64,4\n";
        let t = MeasuredTable::parse(full, "f.csv", Extrapolation::Error).unwrap();
        assert_eq!(t.unpriced_steps(64, 1000), None);
        assert_eq!(
            t.unpriced_steps(256, 1000).map(|n| n.contains("reach 256")),
            Some(true)
        );
        assert_eq!(t.unpriced_steps(256, 64), None);
        // Clamp and Linear price every step.
        for e in [Extrapolation::Clamp, Extrapolation::Linear] {
            let t = MeasuredTable::parse(GRID, "t.csv", e).unwrap();
            assert_eq!(t.unpriced_steps(128, 2048), None);
        }
    }

    #[test]
    fn outside_the_grid_the_policy_decides() {
        let e = MeasuredTable::parse(GRID, "t.csv", Extrapolation::Error).unwrap();
        let msg = e.lookup(&[2000.0, 1.0]).unwrap_err();
        assert!(
            msg.contains("t.csv")
                && msg.contains("prefill_tokens = 2000")
                && msg.contains("0..=1000"),
            "{msg}"
        );
        let c = MeasuredTable::parse(GRID, "t.csv", Extrapolation::Clamp).unwrap();
        assert_eq!(c.lookup(&[2000.0, 1.0]).unwrap(), 2100.0);
        let l = MeasuredTable::parse(GRID, "t.csv", Extrapolation::Linear).unwrap();
        assert_eq!(l.lookup(&[2000.0, 1.0]).unwrap(), 4100.0);
        assert_eq!(l.lookup(&[0.0, 129.0]).unwrap(), 1380.0);
    }

    #[test]
    fn three_keys_interpolate_trilinearly() {
        let mut text = String::from("prefill_tokens,decode_tokens,context_tokens,step_us\n");
        for p in [0, 100] {
            for d in [1, 3] {
                for c in [0, 1000] {
                    text.push_str(&format!("{p},{d},{c},{}\n", 10 + p + 20 * d + c / 10));
                }
            }
        }
        let t = MeasuredTable::parse(&text, "t.csv", Extrapolation::Error).unwrap();
        // The table is linear in every key, so interpolation reproduces the formula.
        assert_eq!(
            t.lookup(&[50.0, 2.0, 500.0]).unwrap(),
            10.0 + 50.0 + 40.0 + 50.0
        );
    }

    #[test]
    fn malformed_tables_are_rejected_with_file_and_line() {
        let bad = "prefill_tokens,decode_tokens,step_us\n0,1,100\n0,x,3\n";
        assert!(
            MeasuredTable::parse(bad, "b.csv", Extrapolation::Error)
                .unwrap_err()
                .starts_with("b.csv:3: decode_tokens")
        );
        let holey = "prefill_tokens,decode_tokens,step_us\n0,1,100\n10,2,200\n";
        let e = MeasuredTable::parse(holey, "h.csv", Extrapolation::Error).unwrap_err();
        // Cells in order (0,1) (0,2) (10,1) (10,2): the first one missing is (0, 2).
        assert!(
            e.contains("not a full grid: no row for prefill_tokens=0, decode_tokens=2"),
            "{e}"
        );
        // A step past the bound of the other models' coefficients.
        let long = "prefill_tokens,decode_tokens,step_us\n0,1,1e20\n";
        let e = MeasuredTable::parse(long, "l.csv", Extrapolation::Error).unwrap_err();
        assert_eq!(
            e,
            "l.csv:2: step_us = 1e20 is more than 10¹² µs (~12 days a step)"
        );
        // A row cut short: the line, and its width against the header (the csv crate says
        // "found record with 1 fields, but the previous record has 3 fields").
        let short = "prefill_tokens,decode_tokens,step_us\n0,1,100\n5\n";
        let e = MeasuredTable::parse(short, "s.csv", Extrapolation::Error).unwrap_err();
        assert_eq!(e, "s.csv:3: 1 field where the header has 3");
        let twice = "prefill_tokens,decode_tokens,step_us\n0,1,100\n5,1,150\n0,1,200\n";
        let e = MeasuredTable::parse(twice, "t.csv", Extrapolation::Error).unwrap_err();
        assert_eq!(
            e,
            "t.csv:4: prefill_tokens=0, decode_tokens=1 is measured twice (first on line 2)"
        );
    }

    #[test]
    fn a_diagonal_that_implies_a_huge_grid_is_rejected_without_allocating_it() {
        // 3,000 rows on a diagonal of three keys imply 2.7·10¹⁰ cells: an error naming the
        // first missing cell, computed from the rows alone.
        let mut t = String::from("prefill_tokens,decode_tokens,context_tokens,step_us\n");
        for i in 0..3000 {
            t.push_str(&format!("{i},{i},{i},{}\n", 100 + i));
        }
        let e = MeasuredTable::parse(&t, "d.csv", Extrapolation::Error).unwrap_err();
        assert!(
            e.contains("imply 27000000000 rows, the file has 3000"),
            "{e}"
        );
        assert!(
            e.contains("no row for prefill_tokens=0, decode_tokens=0, context_tokens=1"),
            "{e}"
        );
        assert!(
            MeasuredTable::parse("a,b\n1,2\n", "n.csv", Extrapolation::Error)
                .unwrap_err()
                .contains("step_us")
        );
    }
}
