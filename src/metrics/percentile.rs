//! Exact distribution summaries (the reference for [`super::histogram`]) with BLIS/numpy linear-interpolation percentiles (MODELS.md §5.2):
//! rank = p/100·(n−1), value = v[⌊rank⌋] + (v[⌈rank⌉] − v[⌊rank⌋])·(rank − ⌊rank⌋).

use serde::Serialize;

/// count, mean and percentiles of a sample, in milliseconds. All null when empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Distribution {
    pub count: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Linear-interpolation percentile of a sorted slice (µs), or None if empty.
pub fn percentile_sorted(sorted: &[u64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = p / 100.0 * (n - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let (a, b) = (sorted[lo] as f64, sorted[hi] as f64);
    Some(a + (b - a) * (rank - lo as f64))
}

/// Summarises µs samples into a millisecond [`Distribution`]. Sorts in place.
pub fn summarize_us(samples: &mut [u64]) -> Distribution {
    samples.sort_unstable();
    let n = samples.len();
    if n == 0 {
        return Distribution::default();
    }
    let sum: u128 = samples.iter().map(|&x| u128::from(x)).sum();
    let ms = |us: f64| us / 1000.0;
    Distribution {
        count: n as u64,
        mean: Some(ms(sum as f64 / n as f64)),
        p50: percentile_sorted(samples, 50.0).map(ms),
        p90: percentile_sorted(samples, 90.0).map(ms),
        p95: percentile_sorted(samples, 95.0).map(ms),
        p99: percentile_sorted(samples, 99.0).map(ms),
        min: Some(ms(samples[0] as f64)),
        max: Some(ms(samples[n - 1] as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_linearly_between_ranks() {
        // numpy.percentile([1000, 2000, 3000, 4000], 90) = 3700.
        let mut v = vec![4000, 1000, 3000, 2000];
        let d = summarize_us(&mut v);
        assert_eq!(d.p90, Some(3.7));
        assert_eq!(d.p50, Some(2.5));
        assert_eq!(d.mean, Some(2.5));
        assert_eq!((d.min, d.max, d.count), (Some(1.0), Some(4.0), 4));
    }

    #[test]
    fn empty_samples_give_nulls() {
        assert_eq!(summarize_us(&mut []), Distribution::default());
    }
}
