//! A metric over seeds: its mean and a 95 % confidence interval for the mean (Student's t,
//! two-sided), as `capacity` and `sweep --replicas` report them.

use serde::{Deserialize, Deserializer, Serialize};

/// Two-sided 95 % quantiles of Student's t for 1..=30 degrees of freedom (any statistics
/// table, e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The t quantile for `df` degrees of freedom (the normal 1.960 past 30, where the table's
/// last entries are within 4 % of it).
pub fn t95(df: usize) -> f64 {
    match df {
        0 => f64::NAN,
        d if d <= T95.len() => T95[d - 1],
        _ => 1.960,
    }
}

/// A number JSON wrote as `null` (serde_json writes NaN so) read back as NaN: for results
/// read back from a file (`plan` shards).
pub fn null_as_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Option::<f64>::deserialize(d).map(|v| v.unwrap_or(f64::NAN))
}

/// Mean and 95 % interval of one metric over seeds; `low`/`high` are absent with one seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    #[serde(deserialize_with = "null_as_nan")]
    pub mean: f64,
    pub low: Option<f64>,
    pub high: Option<f64>,
    /// Seeds the estimate is over.
    pub n: usize,
}

impl Estimate {
    /// The estimate from one value per seed (none may be NaN).
    pub fn of(values: &[f64]) -> Estimate {
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Estimate {
                mean,
                low: None,
                high: None,
                n,
            };
        }
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t95(n - 1) * (var / n as f64).sqrt();
        Estimate {
            mean,
            low: Some(mean - half),
            high: Some(mean + half),
            n,
        }
    }

    /// The interval cut to the range the quantity can take (a rate is never negative, a
    /// share never above 1): a t interval over few seeds is wide (12.7 standard errors
    /// either side with two) and would otherwise reach past it.
    pub fn within(self, min: f64, max: f64) -> Estimate {
        Estimate {
            low: self.low.map(|l| l.clamp(min, max)),
            high: self.high.map(|h| h.clamp(min, max)),
            ..self
        }
    }

    /// `mean` or `mean [low, high]` with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        match (self.low, self.high) {
            (Some(l), Some(h)) => format!("{:.d$} [{:.d$}, {:.d$}]", self.mean, l, h, d = digits),
            _ => format!("{:.d$}", self.mean, d = digits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_cut_to_what_the_quantity_can_take() {
        // mean 1.5, sample sd 0.7071, n 2: half-width 12.706 × 0.5 = 6.353.
        let e = Estimate::of(&[1.0, 2.0]);
        assert!((e.low.unwrap() + 4.853).abs() < 1e-9, "{e:?}");
        let cut = e.clone().within(0.0, f64::INFINITY);
        assert_eq!((cut.low, cut.mean), (Some(0.0), 1.5));
        assert!((cut.high.unwrap() - 7.853).abs() < 1e-9);
        let share = e.within(0.0, 1.0);
        assert_eq!((share.low, share.high), (Some(0.0), Some(1.0)));
    }

    #[test]
    fn the_interval_of_three_values_is_the_t_interval_by_hand() {
        // mean 2, sample sd 1, n 3: half-width 4.303 × 1/√3 = 2.4843.
        let e = Estimate::of(&[1.0, 2.0, 3.0]);
        assert_eq!(e.mean, 2.0);
        assert!((e.low.unwrap() - (2.0 - 2.4843)).abs() < 1e-4);
        assert!((e.high.unwrap() - (2.0 + 2.4843)).abs() < 1e-4);
        assert_eq!(e.show(2), "2.00 [-0.48, 4.48]");
    }

    #[test]
    fn one_value_has_no_interval() {
        let e = Estimate::of(&[5.0]);
        assert_eq!((e.low, e.high), (None, None));
        assert_eq!(e.show(1), "5.0");
        assert_eq!(t95(100), 1.960);
    }
}
