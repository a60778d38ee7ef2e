//! Token-length samplers. Every sample is a whole number of tokens.

use std::path::Path;
use std::sync::Arc;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal, Normal, Zipf};

use crate::scenario::LengthSpec;
pub use crate::scenario::MAX_TOKENS;

/// A length distribution ready to sample.
#[derive(Clone, Debug)]
pub enum Lengths {
    Constant(u32),
    Uniform {
        min: u32,
        max: u32,
    },
    Normal {
        dist: Normal<f64>,
        min: u32,
        max: u32,
    },
    LogNormal {
        dist: LogNormal<f64>,
        min: u32,
        max: u32,
    },
    Exponential {
        dist: Exp<f64>,
        min: u32,
        max: u32,
    },
    Zipf(Zipf<f64>),
    Empirical(Arc<[u32]>),
}

fn clamp_round(x: f64, min: u32, max: u32) -> u32 {
    x.clamp(f64::from(min), f64::from(max)).round() as u32
}

impl Lengths {
    /// Builds the sampler; `base` resolves `Empirical` files. Parameters are validated.
    pub fn new(spec: &LengthSpec, base: &Path) -> Result<Self, String> {
        Ok(match spec {
            LengthSpec::Constant(n) => Lengths::Constant(*n),
            LengthSpec::Uniform { min, max } => Lengths::Uniform {
                min: *min,
                max: *max,
            },
            LengthSpec::Normal {
                mean,
                stdev,
                min,
                max,
            } => Lengths::Normal {
                dist: Normal::new(*mean, *stdev).map_err(|e| e.to_string())?,
                min: *min,
                max: *max,
            },
            LengthSpec::LogNormal {
                mu,
                sigma,
                min,
                max,
            } => Lengths::LogNormal {
                dist: LogNormal::new(*mu, *sigma).map_err(|e| e.to_string())?,
                min: *min,
                max: *max,
            },
            LengthSpec::Exponential { mean, min, max } => Lengths::Exponential {
                dist: Exp::new(1.0 / mean).map_err(|e| e.to_string())?,
                min: *min,
                max: *max,
            },
            LengthSpec::Zipf { max, exponent } => {
                Lengths::Zipf(Zipf::new(f64::from(*max), *exponent).map_err(|e| e.to_string())?)
            }
            LengthSpec::Empirical { file, column } => {
                Lengths::Empirical(load_column(&base.join(file), column, 0)?)
            }
        })
    }

    /// One sample, at most [`MAX_TOKENS`].
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        self.sample_raw(rng).min(MAX_TOKENS)
    }

    fn sample_raw(&self, rng: &mut ChaCha8Rng) -> u32 {
        match self {
            Lengths::Constant(n) => *n,
            Lengths::Uniform { min, max } => rng.random_range(*min..=*max),
            Lengths::Normal { dist, min, max } => clamp_round(dist.sample(rng), *min, *max),
            Lengths::LogNormal { dist, min, max } => clamp_round(dist.sample(rng), *min, *max),
            Lengths::Exponential { dist, min, max } => clamp_round(dist.sample(rng), *min, *max),
            Lengths::Zipf(z) => z.sample(rng) as u32,
            Lengths::Empirical(values) => values[rng.random_range(0..values.len())],
        }
    }
}

/// Reads one integer column of a CSV file, every value (rounded) at least `min` (errors name
/// the file and line).
pub fn load_column(path: &Path, column: &str, min: u32) -> Result<Arc<[u32]>, String> {
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(crate::input::open_lines(path)?);
    let headers = rdr
        .headers()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .clone();
    crate::input::no_repeated_column(&headers, &[column], &path.display().to_string())?;
    if headers.is_empty() {
        return Err(format!(
            "{}: the file is empty (expected a header row naming `{column}`)",
            path.display()
        ));
    }
    let Some(i) = headers.iter().position(|h| h == column) else {
        return Err(format!(
            "{}: no column `{column}` (columns: {})",
            path.display(),
            headers.iter().collect::<Vec<_>>().join(", ")
        ));
    };
    let mut values = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| crate::input::csv_error(&path.display().to_string(), &e))?;
        let line = rec.position().map_or(0, |p| p.line());
        let s = rec.get(i).unwrap_or("");
        let v: f64 = s.parse().map_err(|_| {
            format!(
                "{}:{line}: {column} = {s:?} is not a number",
                path.display()
            )
        })?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!(
                "{}:{line}: {column} = {s:?} must be a finite number ≥ 0",
                path.display()
            ));
        }
        if v.round() < f64::from(min) {
            return Err(format!(
                "{}:{line}: {column} = {s:?} is below {min} (every request generates at least one token)",
                path.display()
            ));
        }
        // As a trace's counts: a value past the limit is an error, not silently the limit.
        if v.round() > f64::from(MAX_TOKENS) {
            return Err(format!(
                "{}:{line}: {column} = {s:?} is above the {} tokens a prompt or output may have",
                path.display(),
                crate::scenario::grouped(MAX_TOKENS.into())
            ));
        }
        values.push(v.round() as u32);
    }
    if values.is_empty() {
        return Err(format!(
            "{}: column `{column}` has no values",
            path.display()
        ));
    }
    Ok(values.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng;

    fn moments(l: &Lengths, n: usize) -> (f64, f64) {
        let mut r = rng::stream(9, "t");
        let xs: Vec<f64> = (0..n).map(|_| f64::from(l.sample(&mut r))).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var)
    }

    #[test]
    fn each_distribution_has_its_mean_and_variance() {
        let base = Path::new("");
        let n = 200_000;
        // (spec, expected mean, expected variance) — unclamped closed forms; rounding adds
        // 1/12 to the variance of continuous ones. Tolerances: 4 standard errors of the mean,
        // 5 % on the variance.
        let cases = [
            (
                LengthSpec::Uniform { min: 10, max: 30 },
                20.0,
                (21.0 * 21.0 - 1.0) / 12.0,
            ),
            (
                LengthSpec::Normal {
                    mean: 500.0,
                    stdev: 50.0,
                    min: 0,
                    max: 10_000,
                },
                500.0,
                2500.0 + 1.0 / 12.0,
            ),
            // LogNormal(μ = 5, σ = 0.5): mean e^(μ+σ²/2), var (e^σ² − 1)e^(2μ+σ²).
            (
                LengthSpec::LogNormal {
                    mu: 5.0,
                    sigma: 0.5,
                    min: 0,
                    max: u32::MAX,
                },
                (5.125f64).exp(),
                (0.25f64.exp() - 1.0) * (10.25f64).exp() + 1.0 / 12.0,
            ),
            (
                LengthSpec::Exponential {
                    mean: 300.0,
                    min: 0,
                    max: u32::MAX,
                },
                300.0,
                90_000.0 + 1.0 / 12.0,
            ),
        ];
        for (spec, mean, var) in cases {
            let (m, v) = moments(&Lengths::new(&spec, base).unwrap(), n);
            let se = (var / n as f64).sqrt();
            assert!((m - mean).abs() < 4.0 * se, "{spec:?}: mean {m} vs {mean}");
            assert!((v / var - 1.0).abs() < 0.05, "{spec:?}: var {v} vs {var}");
        }
    }

    #[test]
    fn zipf_follows_its_power_law() {
        // P(1)/P(2) = 2^s for Zipf(s); with s = 1.2, P(1) = 1/H where H = Σ_{k≤100} k^−1.2.
        let z = Lengths::new(
            &LengthSpec::Zipf {
                max: 100,
                exponent: 1.2,
            },
            Path::new(""),
        )
        .unwrap();
        let mut r = rng::stream(10, "t");
        let n = 200_000;
        let xs: Vec<u32> = (0..n).map(|_| z.sample(&mut r)).collect();
        assert!(xs.iter().all(|&x| (1..=100).contains(&x)));
        let h: f64 = (1..=100).map(|k| (k as f64).powf(-1.2)).sum();
        let p1 = xs.iter().filter(|&&x| x == 1).count() as f64 / n as f64;
        let p2 = xs.iter().filter(|&&x| x == 2).count() as f64 / n as f64;
        assert!((p1 - 1.0 / h).abs() < 0.005, "{p1} vs {}", 1.0 / h);
        assert!((p1 / p2 - 2f64.powf(1.2)).abs() < 0.06, "{}", p1 / p2);
    }

    #[test]
    fn empirical_samples_only_values_of_the_column_in_proportion() {
        let dir = tempfile_dir();
        let path = dir.join("lens.csv");
        std::fs::write(&path, "a,len\nx,10\ny,10\nz,40\n").unwrap();
        let l = Lengths::new(
            &LengthSpec::Empirical {
                file: "lens.csv".into(),
                column: "len".into(),
            },
            &dir,
        )
        .unwrap();
        let (m, _) = moments(&l, 30_000);
        assert!((m - 20.0).abs() < 0.5, "{m}");
        let err = Lengths::new(
            &LengthSpec::Empirical {
                file: "lens.csv".into(),
                column: "nope".into(),
            },
            &dir,
        )
        .unwrap_err();
        assert!(err.contains("no column `nope`"), "{err}");
        std::fs::write(&path, "len\n5\nfive\n").unwrap();
        let err = load_column(&path, "len", 0).unwrap_err();
        assert!(err.ends_with(":3: len = \"five\" is not a number"), "{err}");
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("servesim-lengths-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
