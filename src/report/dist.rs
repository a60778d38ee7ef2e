//! What `report` keeps of `requests.csv`, in memory bounded whatever the file's length.
//!
//! Up to [`EXACT_CAP`] completed requests every value is kept and quantiles are exact
//! (nearest rank). Past it the values move into log-spaced histograms of
//! [`BUCKETS_PER_OCTAVE`] buckets per doubling, whose quantiles are within 0.3 % of the exact
//! ones, and completions are binned by time into [`SLOTS`] histograms whose width doubles as
//! the run's end grows: 103 histograms of 64 KiB, ~7 MB per run, where keeping every value
//! costs 48 bytes per completed request.

/// Completed requests kept value by value; more are summarised in histograms.
pub const EXACT_CAP: usize = 1 << 20;
/// Histogram buckets per doubling of the value: a bucket spans 2^(1/128) − 1 = 0.54 %, and
/// its geometric middle is within 0.27 % of every value in it.
pub const BUCKETS_PER_OCTAVE: i32 = 128;
/// Doublings covered: 2⁻²⁰ ms (1 ns) to 2⁴⁴ ms (~560 years); values outside clamp to the ends.
const MIN_EXP: i32 = -20;
const MAX_EXP: i32 = 44;
/// Time slots of the latency-over-time chart (the chart's buckets are these).
pub const SLOTS: usize = 100;

/// The nearest-rank quantile of sorted values (NaN when empty).
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// A histogram of positive values on log-spaced buckets (zero and below counted apart).
#[derive(Clone, Debug)]
pub struct LogHist {
    counts: Vec<u64>,
    zero: u64,
    n: u64,
}

impl Default for LogHist {
    fn default() -> Self {
        LogHist {
            counts: vec![0; ((MAX_EXP - MIN_EXP) * BUCKETS_PER_OCTAVE) as usize],
            zero: 0,
            n: 0,
        }
    }
}

impl LogHist {
    pub fn add(&mut self, v: f64) {
        self.n += 1;
        if v <= 0.0 {
            self.zero += 1;
            return;
        }
        let last = self.counts.len() as i64 - 1;
        let i = ((v.log2() - f64::from(MIN_EXP)) * f64::from(BUCKETS_PER_OCTAVE)).floor() as i64;
        self.counts[i.clamp(0, last) as usize] += 1;
    }

    fn merge(&mut self, other: &LogHist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.zero += other.zero;
        self.n += other.n;
    }

    /// The nearest-rank quantile, as the geometric middle of its bucket (NaN when empty).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        if rank <= self.zero {
            return 0.0;
        }
        let mut seen = self.zero;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let e = f64::from(MIN_EXP) + (i as f64 + 0.5) / f64::from(BUCKETS_PER_OCTAVE);
                return e.exp2();
            }
        }
        unreachable!("the counts sum to n")
    }
}

/// The values of one metric: every one (sorted once read), or a histogram.
#[derive(Clone, Debug)]
pub enum Dist {
    Exact(Vec<f64>),
    Sketch(LogHist),
}

impl Default for Dist {
    fn default() -> Self {
        Dist::Exact(Vec::new())
    }
}

impl Dist {
    pub fn add(&mut self, v: f64) {
        match self {
            Dist::Exact(values) => values.push(v),
            Dist::Sketch(h) => h.add(v),
        }
    }

    /// Moves every value into a histogram.
    fn sketch(&mut self) {
        if let Dist::Exact(values) = self {
            let mut h = LogHist::default();
            values.iter().for_each(|&v| h.add(v));
            *self = Dist::Sketch(h);
        }
    }

    fn finish(&mut self) {
        if let Dist::Exact(values) = self {
            values.sort_by(f64::total_cmp);
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Dist::Exact(v) => v.len(),
            Dist::Sketch(h) => h.n as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The nearest-rank quantile (NaN when empty).
    pub fn quantile(&self, q: f64) -> f64 {
        match self {
            Dist::Exact(sorted) => nearest_rank(sorted, q),
            Dist::Sketch(h) => h.quantile(q),
        }
    }
}

/// TTFT by completion time: every (completion s, TTFT ms), or [`SLOTS`] histograms of
/// `width` seconds each from t = 0.
#[derive(Clone, Debug)]
pub enum ByTime {
    Exact(Vec<(f64, f64)>),
    Sketch { width: f64, slots: Vec<LogHist> },
}

impl Default for ByTime {
    fn default() -> Self {
        ByTime::Exact(Vec::new())
    }
}

impl ByTime {
    pub fn add(&mut self, t: f64, v: f64) {
        match self {
            ByTime::Exact(pairs) => pairs.push((t, v)),
            ByTime::Sketch { width, slots } => {
                // Widen the slots (merging neighbours) until t falls in one.
                while t > *width * SLOTS as f64 {
                    for i in 0..SLOTS / 2 {
                        let (a, b) = (2 * i, 2 * i + 1);
                        let mut m = std::mem::take(&mut slots[a]);
                        m.merge(&slots[b]);
                        slots[i] = m;
                    }
                    for s in &mut slots[SLOTS / 2..] {
                        *s = LogHist::default();
                    }
                    *width *= 2.0;
                }
                let i = ((t / *width).ceil() as usize).clamp(1, SLOTS) - 1;
                if v.is_finite() {
                    slots[i].add(v);
                }
            }
        }
    }

    fn sketch(&mut self) {
        if let ByTime::Exact(pairs) = self {
            let end = pairs.iter().map(|p| p.0).fold(0.0f64, f64::max);
            let mut s = ByTime::Sketch {
                width: (end / SLOTS as f64).max(1e-6),
                slots: vec![LogHist::default(); SLOTS],
            };
            pairs.iter().for_each(|&(t, v)| s.add(t, v));
            *self = s;
        }
    }

    fn finish(&mut self) {
        if let ByTime::Exact(pairs) = self {
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }

    /// (middle of the slot, p50, p99) of every slot with a finite TTFT: `SLOTS` slots up to
    /// the last completion.
    pub fn p50_p99(&self) -> Vec<(f64, f64, f64)> {
        let mut out = Vec::new();
        match self {
            ByTime::Exact(pairs) => {
                let Some(end) = pairs.last().map(|d| d.0) else {
                    return out;
                };
                let width = (end / SLOTS as f64).max(1e-6);
                let (mut i, mut bucket) = (0, Vec::new());
                for b in 0..SLOTS {
                    let hi = width * (b + 1) as f64;
                    bucket.clear();
                    while i < pairs.len() && (pairs[i].0 <= hi || b + 1 == SLOTS) {
                        if pairs[i].1.is_finite() {
                            bucket.push(pairs[i].1);
                        }
                        i += 1;
                    }
                    if bucket.is_empty() {
                        continue;
                    }
                    bucket.sort_by(f64::total_cmp);
                    let (p50, p99) = (nearest_rank(&bucket, 0.5), nearest_rank(&bucket, 0.99));
                    out.push((hi - width / 2.0, p50, p99));
                }
            }
            ByTime::Sketch { width, slots } => {
                for (b, h) in slots.iter().enumerate() {
                    if h.n > 0 {
                        let mid = width * (b as f64 + 0.5);
                        out.push((mid, h.quantile(0.5), h.quantile(0.99)));
                    }
                }
            }
        }
        out
    }
}

/// What `requests.csv` says about completed requests.
#[derive(Debug, Default)]
pub struct Requests {
    /// ms.
    pub ttft: Dist,
    pub itl: Dist,
    pub e2e: Dist,
    /// TTFT (ms) by completion (s).
    pub done: ByTime,
    /// Completed requests read.
    pub completed: usize,
    /// Rows read, whatever their state.
    pub rows: u64,
    /// Past which the values move into histograms ([`EXACT_CAP`] but in tests).
    cap: usize,
}

impl Requests {
    pub fn new(cap: usize) -> Self {
        Requests {
            cap,
            ..Default::default()
        }
    }

    /// One completed request (NaN where a value is missing).
    pub fn add(&mut self, ttft: f64, e2e: f64, itl: f64, done_s: f64) {
        self.completed += 1;
        if self.completed - 1 == self.cap {
            for d in [&mut self.ttft, &mut self.itl, &mut self.e2e] {
                d.sketch();
            }
            self.done.sketch();
        }
        for (d, v) in [
            (&mut self.ttft, ttft),
            (&mut self.e2e, e2e),
            (&mut self.itl, itl),
        ] {
            if v.is_finite() {
                d.add(v);
            }
        }
        if done_s.is_finite() {
            self.done.add(done_s, ttft);
        }
    }

    /// Sorts what was kept exactly.
    pub fn finish(&mut self) {
        for d in [&mut self.ttft, &mut self.itl, &mut self.e2e] {
            d.finish();
        }
        self.done.finish();
    }

    /// The values of `metric` (`ttft`, `itl`, anything else: `e2e`).
    pub fn metric(&self, metric: &str) -> &Dist {
        match metric {
            "ttft" => &self.ttft,
            "itl" => &self.itl,
            _ => &self.e2e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 5,000 requests with a heavy tail, read with room for 1,000 exact: every quantile
    /// within 0.3 % of the exact one, and the time slots cover the run.
    #[test]
    fn past_the_cap_quantiles_stay_within_a_third_of_a_percent() {
        let mut exact = Requests::new(usize::MAX);
        let mut sketch = Requests::new(1_000);
        for i in 0..5_000u32 {
            let x = f64::from(i);
            let ttft = 5.0 + (x * 0.618).fract() * 40.0 + if i % 97 == 0 { 900.0 } else { 0.0 };
            let (e2e, itl, t) = (ttft * 30.0, 0.01 + x / 1e4, x / 10.0);
            exact.add(ttft, e2e, itl, t);
            sketch.add(ttft, e2e, itl, t);
        }
        exact.finish();
        sketch.finish();
        assert!(matches!(sketch.ttft, Dist::Sketch(_)));
        assert!(matches!(exact.ttft, Dist::Exact(_)));
        for m in ["ttft", "itl", "e2e"] {
            assert_eq!(sketch.metric(m).len(), 5_000);
            for q in [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
                let (a, b) = (exact.metric(m).quantile(q), sketch.metric(m).quantile(q));
                assert!(
                    (b / a - 1.0).abs() < 0.003,
                    "{m} q{q}: exact {a}, sketch {b}"
                );
            }
        }
        let slots = sketch.done.p50_p99();
        assert!(slots.len() >= SLOTS / 2, "{} slots", slots.len());
        assert!(slots.last().unwrap().0 < 500.0 && slots.last().unwrap().0 > 450.0);
        assert!(slots.iter().all(|s| (5.0..950.0).contains(&s.1)));
    }

    #[test]
    fn slots_widen_by_merging_neighbours_without_losing_a_value() {
        let mut t = ByTime::Exact(vec![(1.0, 1.0)]);
        t.sketch();
        for k in 0..1000 {
            t.add(f64::from(k), 2.0);
        }
        let ByTime::Sketch { width, slots } = &t else {
            panic!()
        };
        assert!(*width * SLOTS as f64 >= 999.0);
        assert_eq!(slots.iter().map(|s| s.n).sum::<u64>(), 1001);
    }

    #[test]
    fn a_histogram_counts_zero_and_clamps_extremes() {
        let mut h = LogHist::default();
        for v in [0.0, 1e-30, 1.0, 1e30] {
            h.add(v);
        }
        assert_eq!(h.quantile(0.25), 0.0);
        assert!(h.quantile(0.5) < 1e-5);
        assert!((h.quantile(0.75) - 1.0).abs() < 0.003);
        assert!(h.quantile(1.0) > 1e13);
    }
}
