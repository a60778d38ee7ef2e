//! Bounded-memory latency histograms (memory does not grow with the request count).
//!
//! Log-linear buckets: values below 2¹³ µs (8.192 ms) get a bucket each (exact); above,
//! every power-of-two range is split into 4,096 buckets, so a bucket spans at most
//! 1/4,096 (0.024 %) of its values. Each bucket keeps its sample count **and sum**, and a
//! sample rank falling in a bucket takes the bucket's mean: exact whenever the samples in a
//! bucket are equal (e.g. ITL samples, one value per step shape). Mean, min and max are
//! exact. Percentiles interpolate linearly between ranks ⌊r⌋ and ⌈r⌉, r = p/100·(n−1)
//! (MODELS.md §5.2).

use super::percentile::Distribution;

/// Sub-bucket bits of the run-wide distributions: buckets within 1/4,096 of their values.
pub const FINE: u32 = 12;
/// Sub-bucket bits of per-instance / tenant / class distributions: within 1/256.
pub const COARSE: u32 = 8;

/// Bucket index of a value in µs (monotone in the value) with `bits` sub-bucket bits.
fn bucket(v: u64, bits: u32) -> u32 {
    let sub = 1u64 << bits;
    if v < 2 * sub {
        return v as u32;
    }
    let magnitude = 63 - v.leading_zeros(); // ≥ bits + 1
    let shift = magnitude - bits;
    let within = (v >> shift) - sub; // in [0, sub)
    (2 * sub + u64::from(shift - 1) * sub + within) as u32
}

/// Buckets per page of a histogram: pages are allocated as samples reach them, so memory
/// follows the range of values seen, not the count.
const PAGE_BITS: u32 = 6;
const PAGE: usize = 1 << PAGE_BITS;

/// One page: each bucket's sample count and sum of values.
type Page = [(u64, u64); PAGE];

/// A histogram of µs samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    bits: u32,
    /// Bucket b's sample count and sum at `pages[b / PAGE][b % PAGE]`: an array lookup
    /// (no hashing), 16 bytes a bucket, and the buckets already in order for percentiles.
    pages: Vec<Option<Box<Page>>>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::with_bits(FINE)
    }
}

impl Histogram {
    /// A histogram exact below 2^(bits+1) µs and within 2^−bits of each value above.
    pub fn with_bits(bits: u32) -> Self {
        Histogram {
            bits,
            pages: Vec::new(),
            count: 0,
            sum: 0,
            min: 0,
            max: 0,
        }
    }

    /// Adds `n` samples of value `v` (µs).
    pub fn record_n(&mut self, v: u64, n: u64) {
        if n == 0 {
            return;
        }
        let k = bucket(v, self.bits) as usize;
        let page = k >> PAGE_BITS;
        if page >= self.pages.len() {
            self.pages.resize_with(page + 1, || None);
        }
        let b = &mut self.pages[page].get_or_insert_with(|| Box::new([(0, 0); PAGE]))[k % PAGE];
        b.0 += n;
        b.1 += v * n;
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += n;
        self.sum += u128::from(v) * u128::from(n);
    }

    pub fn record(&mut self, v: u64) {
        self.record_n(v, 1);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// count, mean, p50/p90/p95/p99, min, max in milliseconds.
    pub fn summarize_ms(&self) -> Distribution {
        if self.count == 0 {
            return Distribution::default();
        }
        // The buckets that hold samples, in order of value, with their means.
        let cells: Vec<(u64, f64)> = self
            .pages
            .iter()
            .flatten()
            .flat_map(|page| page.iter())
            .filter(|&&(c, _)| c > 0)
            .map(|&(c, s)| (c, s as f64 / c as f64))
            .collect();
        let n = self.count;
        let at = |rank: u64| -> f64 {
            let mut seen = 0;
            for &(c, mean) in &cells {
                seen += c;
                if rank < seen {
                    return mean;
                }
            }
            self.max as f64
        };
        let pct = |p: f64| {
            let r = p / 100.0 * (n - 1) as f64;
            let (lo, hi) = (r.floor() as u64, r.ceil() as u64);
            let (a, b) = (at(lo), at(hi));
            // Never report outside the exact extremes.
            let v = a + (b - a) * (r - lo as f64);
            v.clamp(self.min as f64, self.max as f64) / 1000.0
        };
        Distribution {
            count: n,
            mean: Some(self.sum as f64 / n as f64 / 1000.0),
            p50: Some(pct(50.0)),
            p90: Some(pct(90.0)),
            p95: Some(pct(95.0)),
            p99: Some(pct(99.0)),
            min: Some(self.min as f64 / 1000.0),
            max: Some(self.max as f64 / 1000.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::percentile::summarize_us;
    use crate::rng;
    use rand::RngExt;

    #[test]
    fn buckets_are_monotone_and_narrow() {
        let mut prev = 0;
        for v in (0..5_000_000u64).step_by(997) {
            let b = bucket(v, FINE);
            assert!(b >= prev);
            prev = b;
        }
        assert_eq!(bucket(8191, FINE), 8191);
        assert_eq!(bucket(8192, FINE), 8192);
        assert_eq!(bucket(8193, FINE), 8192, "width 2 from 8192 µs");
        assert_ne!(bucket(u64::MAX, FINE), bucket(u64::MAX / 2, FINE));
        assert_eq!(bucket(511, COARSE), 511);
        assert_eq!(
            bucket(513, COARSE),
            bucket(512, COARSE),
            "width 2 from 512 µs"
        );
    }

    #[test]
    fn below_8_ms_the_summary_is_exact() {
        let mut r = rng::stream(11, "t");
        let mut xs: Vec<u64> = (0..10_000).map(|_| r.random_range(0..8192u64)).collect();
        let mut h = Histogram::default();
        xs.iter().for_each(|&x| h.record(x));
        assert_eq!(h.summarize_ms(), summarize_us(&mut xs));
    }

    #[test]
    fn equal_samples_are_exact_at_any_magnitude() {
        let mut h = Histogram::default();
        h.record_n(25_000_123, 7);
        h.record_n(30_001, 3);
        let mut xs = vec![25_000_123; 7];
        xs.extend([30_001; 3]);
        assert_eq!(h.summarize_ms(), summarize_us(&mut xs));
    }

    #[test]
    fn large_values_are_within_the_bucket_width() {
        let mut r = rng::stream(12, "t");
        let mut xs: Vec<u64> = (0..20_000)
            .map(|_| r.random_range(10_000..20_000_000u64))
            .collect();
        let mut h = Histogram::default();
        xs.iter().for_each(|&x| h.record(x));
        let (a, b) = (h.summarize_ms(), summarize_us(&mut xs));
        assert_eq!(
            (a.count, a.mean, a.min, a.max),
            (b.count, b.mean, b.min, b.max)
        );
        for (x, y) in [(a.p50, b.p50), (a.p90, b.p90), (a.p99, b.p99)] {
            let (x, y) = (x.unwrap(), y.unwrap());
            assert!((x - y).abs() <= y / 4096.0, "{x} vs {y}");
        }
    }
}
