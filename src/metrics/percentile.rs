//! Distribution summaries with BLIS/numpy linear-interpolation percentiles (MODELS.md §5.2):
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

/// Summarises a histogram of µs values (value → count), exactly as if every sample were
/// listed: the percentile is interpolated between the values at ranks ⌊r⌋ and ⌈r⌉.
pub fn summarize_histogram_us(hist: impl IntoIterator<Item = (u64, u64)>) -> Distribution {
    let mut pairs: Vec<(u64, u64)> = hist.into_iter().filter(|&(_, c)| c > 0).collect();
    pairs.sort_unstable();
    let n: u64 = pairs.iter().map(|&(_, c)| c).sum();
    if n == 0 {
        return Distribution::default();
    }
    let at = |k: u64| -> f64 {
        let mut seen = 0;
        for &(v, c) in &pairs {
            seen += c;
            if k < seen {
                return v as f64;
            }
        }
        pairs[pairs.len() - 1].0 as f64
    };
    let pct = |p: f64| {
        let rank = p / 100.0 * (n - 1) as f64;
        let lo = rank.floor() as u64;
        let hi = rank.ceil() as u64;
        let (a, b) = (at(lo), at(hi));
        (a + (b - a) * (rank - lo as f64)) / 1000.0
    };
    let sum: u128 = pairs
        .iter()
        .map(|&(v, c)| u128::from(v) * u128::from(c))
        .sum();
    Distribution {
        count: n,
        mean: Some(sum as f64 / n as f64 / 1000.0),
        p50: Some(pct(50.0)),
        p90: Some(pct(90.0)),
        p95: Some(pct(95.0)),
        p99: Some(pct(99.0)),
        min: Some(pairs[0].0 as f64 / 1000.0),
        max: Some(pairs[pairs.len() - 1].0 as f64 / 1000.0),
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
    fn histogram_summary_equals_the_expanded_sample_summary() {
        let hist = [(7_000u64, 3u64), (1_000, 2), (4_000, 1), (9_500, 4)];
        let mut expanded: Vec<u64> = hist
            .iter()
            .flat_map(|&(v, c)| std::iter::repeat_n(v, c as usize))
            .collect();
        assert_eq!(summarize_histogram_us(hist), summarize_us(&mut expanded));
    }

    #[test]
    fn empty_samples_give_nulls() {
        assert_eq!(summarize_us(&mut []), Distribution::default());
        assert_eq!(summarize_histogram_us([]), Distribution::default());
    }
}
