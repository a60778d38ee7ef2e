//! Simulated time: integer microseconds, never floats.
//!
//! Every event carries a [`SimTime`]; every delay is a [`SimDuration`]. Latency models may
//! compute in `f64` but must convert once, explicitly, with [`SimDuration::from_us_f64`].

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point on the simulated clock, in microseconds since the start of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

/// A span of simulated time, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// Microseconds since the start of the run.
    pub fn as_us(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`; zero if `earlier` is later (never underflows).
    pub fn since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    pub const ZERO: SimDuration = SimDuration(0);

    pub fn from_us(us: u64) -> Self {
        SimDuration(us)
    }

    pub fn from_ms(ms: u64) -> Self {
        SimDuration(ms.saturating_mul(1_000))
    }

    /// Converts a non-negative float number of microseconds by truncation (BLIS rounds
    /// every latency term this way). NaN and negatives become zero; huge values saturate.
    pub fn from_us_f64(us: f64) -> Self {
        if us.is_nan() || us <= 0.0 {
            SimDuration(0)
        } else if us >= u64::MAX as f64 {
            SimDuration(u64::MAX)
        } else {
            SimDuration(us as u64)
        }
    }

    /// Converts seconds to microseconds by truncation, as [`SimDuration::from_us_f64`], except
    /// that a product within rounding error of a whole microsecond is that microsecond: a
    /// scenario's `1.001` s is 1,001,000 µs, though 1.001 × 10⁶ is 1000999.9999999999 in
    /// binary floating point.
    pub fn from_secs_f64(s: f64) -> Self {
        let us = s * 1e6;
        let whole = us.round();
        if (us - whole).abs() <= whole.abs() * 4.0 * f64::EPSILON {
            Self::from_us_f64(whole)
        } else {
            Self::from_us_f64(us)
        }
    }

    pub fn as_us(self) -> u64 {
        self.0
    }

    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / 1_000.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, rhs: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, rhs: SimDuration) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, rhs: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for SimDuration {
    fn add_assign(&mut self, rhs: SimDuration) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Sub for SimTime {
    type Output = SimDuration;
    /// Saturating difference; use [`SimTime::since`] where the intent should be explicit.
    fn sub(self, rhs: SimTime) -> SimDuration {
        self.since(rhs)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_conversion_truncates_and_never_goes_negative() {
        assert_eq!(SimDuration::from_us_f64(10.99), SimDuration(10));
        assert_eq!(SimDuration::from_us_f64(-3.0), SimDuration(0));
        assert_eq!(SimDuration::from_us_f64(f64::NAN), SimDuration(0));
        assert_eq!(
            SimDuration::from_us_f64(f64::INFINITY),
            SimDuration(u64::MAX)
        );
        assert_eq!(SimDuration::from_secs_f64(0.1), SimDuration(100_000));
        // Seconds as written: 1.001 × 10⁶ is 1000999.9999999999 in f64, and 2.01 × 10⁶
        // 2009999.9999999998: each is its whole µs.
        assert_eq!(SimDuration::from_secs_f64(1.001), SimDuration(1_001_000));
        assert_eq!(SimDuration::from_secs_f64(2.01), SimDuration(2_010_000));
        assert_eq!(
            SimDuration::from_secs_f64(1e9),
            SimDuration(1_000_000_000_000_000)
        );
        // A fraction of a microsecond is still cut off.
        assert_eq!(
            SimDuration::from_secs_f64(1.0000015),
            SimDuration(1_000_001)
        );
        assert_eq!(SimDuration::from_secs_f64(2.9999999e-6), SimDuration(2));
    }

    #[test]
    fn time_arithmetic_saturates() {
        assert_eq!(SimTime(5).since(SimTime(9)), SimDuration(0));
        assert_eq!(SimTime(u64::MAX) + SimDuration(1), SimTime(u64::MAX));
        assert_eq!(format!("{}", SimTime(1_500_000)), "1.500000s");
    }
}
