//! Arrival processes: each yields absolute arrival times (µs), lazily, one at a time.
//!
//! Renewal processes (Poisson, Constant, Gamma, Weibull) add inter-arrival times truncated
//! to whole µs and at least 1 µs; the first arrival is one inter-arrival time after t = 0
//! (BLIS). Gamma: shape 1/cv², scale mean·cv². Weibull: shape k solved from the cv by
//! bisection, scale mean/Γ(1 + 1/k).

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Gamma, Weibull};

use crate::scenario::{ArrivalSpec, Stage};

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error < 1e-13).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x)
    } else {
        let x = x - 1.0;
        let mut a = G[0];
        let t = x + 7.5;
        for (i, g) in G.iter().enumerate().skip(1) {
            a += g / (x + i as f64);
        }
        0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
    }
}

/// Weibull shape k whose coefficient of variation is `cv`.
pub fn weibull_shape(cv: f64) -> f64 {
    let cv_of = |k: f64| {
        (ln_gamma(1.0 + 2.0 / k) - 2.0 * ln_gamma(1.0 + 1.0 / k))
            .exp_m1()
            .sqrt()
    };
    let (mut lo, mut hi) = (0.02_f64, 500.0_f64); // cv decreases in k
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if cv_of(mid) > cv {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo * hi).sqrt()
}

/// An arrival process with its state.
#[derive(Clone, Debug)]
pub enum Arrivals {
    Renewal {
        dist: Interval,
        t: u64,
    },
    OnOff {
        exp: Exp<f64>,
        on_us: u64,
        off_us: u64,
        on_time: u64,
    },
    AllAtZero {
        remaining: u64,
    },
    Staged {
        stages: Vec<Stage>,
        mode: StageMode,
        k: usize,
        start_us: u64,
        t: u64,
        placed: u64,
        target: u64,
        frac: f64,
    },
    /// One arrival, one exponential gap after `start_us` (none if it falls at or after
    /// `end_us`): a session that starts at a random time in its window (BLIS).
    Once {
        start_us: u64,
        end_us: u64,
        exp: Exp<f64>,
        done: bool,
    },
}

/// How a stage places its arrivals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageMode {
    /// Poisson at the stage rate.
    Poisson,
    /// Exactly round(rate × duration), uniform order statistics.
    Uniform,
    /// Exactly ⌊rate × duration⌋, normalised exponential gaps (inference-perf's constant
    /// timer): the partial sums of n exponentials over their total are the order statistics
    /// of n − 1 uniforms followed by 1, so they can be drawn lazily.
    NormalizedExp,
}

impl Arrivals {
    /// A single arrival one Exp(`rate_per_s`) gap after `start_us`, dropped at `end_us`.
    pub fn once(start_us: u64, end_us: u64, rate_per_s: f64) -> Self {
        Arrivals::Once {
            start_us,
            end_us,
            exp: Exp::new(rate_per_s).expect("rate > 0 (validated)"),
            done: false,
        }
    }
}

/// Inter-arrival distribution of a renewal process (seconds).
#[derive(Clone, Copy, Debug)]
pub enum Interval {
    Exp(Exp<f64>),
    Const(f64),
    Gamma(Gamma<f64>),
    Weibull(Weibull<f64>),
}

impl Interval {
    fn sample_us(&self, rng: &mut ChaCha8Rng) -> u64 {
        let s = match self {
            Interval::Exp(d) => d.sample(rng),
            Interval::Const(s) => *s,
            Interval::Gamma(d) => d.sample(rng),
            Interval::Weibull(d) => d.sample(rng),
        };
        ((s * 1e6) as u64).max(1)
    }
}

/// ⌊rate × duration⌋, the arrivals of a constant-timer stage (inference-perf). A relative
/// epsilon makes e.g. 0.1 × 30 or (n / d) × d count as written despite rounding.
pub fn stage_requests(s: &Stage) -> u64 {
    (s.rate_per_s * s.duration_s * (1.0 + 1e-12)).floor() as u64
}

fn us(s: f64) -> u64 {
    (s * 1e6) as u64
}

impl Arrivals {
    /// The process for `spec` at `rate_per_s` (ignored by `AllAtZero` and `Staged`).
    /// Parameters are validated beforehand.
    pub fn new(spec: &ArrivalSpec, rate_per_s: f64) -> Self {
        let mean = 1.0 / rate_per_s;
        let renewal = |dist| Arrivals::Renewal { dist, t: 0 };
        match spec {
            ArrivalSpec::Poisson => renewal(Interval::Exp(Exp::new(rate_per_s).expect("rate > 0"))),
            ArrivalSpec::Constant => renewal(Interval::Const(mean)),
            ArrivalSpec::Gamma { cv } => {
                let shape = 1.0 / (cv * cv);
                renewal(Interval::Gamma(
                    Gamma::new(shape, mean * cv * cv).expect("cv > 0"),
                ))
            }
            ArrivalSpec::Weibull { cv } => {
                let k = weibull_shape(*cv);
                let scale = mean / ln_gamma(1.0 + 1.0 / k).exp();
                renewal(Interval::Weibull(
                    Weibull::new(scale, k).expect("valid shape"),
                ))
            }
            ArrivalSpec::OnOff { on_s, off_s } => Arrivals::OnOff {
                exp: Exp::new(rate_per_s).expect("rate > 0"),
                on_us: us(*on_s).max(1),
                off_us: us(*off_s),
                on_time: 0,
            },
            ArrivalSpec::AllAtZero { count } => Arrivals::AllAtZero { remaining: *count },
            ArrivalSpec::Staged { stages, exact } => Self::staged(
                stages,
                if *exact {
                    StageMode::Uniform
                } else {
                    StageMode::Poisson
                },
            ),
            ArrivalSpec::ConstantTimer { stages } => Self::staged(stages, StageMode::NormalizedExp),
        }
    }

    /// Stages run back to back, each placing its arrivals as `mode` says.
    pub fn staged(stages: &[Stage], mode: StageMode) -> Self {
        let mut a = Arrivals::Staged {
            stages: stages.to_vec(),
            mode,
            k: 0,
            start_us: 0,
            t: 0,
            placed: 0,
            target: 0,
            frac: 0.0,
        };
        a.enter_stage(0, 0);
        a
    }

    fn enter_stage(&mut self, k: usize, start: u64) {
        if let Arrivals::Staged {
            stages,
            mode,
            k: sk,
            start_us,
            t,
            placed,
            target,
            frac,
            ..
        } = self
        {
            *sk = k;
            *start_us = start;
            *t = start;
            *placed = 0;
            *frac = 0.0;
            *target = stages.get(k).map_or(0, |s| {
                if *mode == StageMode::NormalizedExp {
                    stage_requests(s)
                } else {
                    (s.rate_per_s * s.duration_s).round() as u64
                }
            });
        }
    }

    /// The next arrival time (µs), or `None` when the process has ended.
    pub fn next_us(&mut self, rng: &mut ChaCha8Rng) -> Option<u64> {
        match self {
            Arrivals::Renewal { dist, t } => {
                *t = t.saturating_add(dist.sample_us(rng));
                Some(*t)
            }
            Arrivals::OnOff {
                exp,
                on_us,
                off_us,
                on_time,
            } => {
                *on_time = on_time.saturating_add(((exp.sample(rng) * 1e6) as u64).max(1));
                let cycles = *on_time / *on_us;
                Some(
                    cycles
                        .saturating_mul(on_us.saturating_add(*off_us))
                        .saturating_add(*on_time % *on_us),
                )
            }
            Arrivals::AllAtZero { remaining } => {
                if *remaining == 0 {
                    return None;
                }
                *remaining -= 1;
                Some(0)
            }
            Arrivals::Staged { .. } => self.next_staged(rng),
            Arrivals::Once {
                start_us,
                end_us,
                exp,
                done,
            } => {
                if *done {
                    return None;
                }
                *done = true;
                let at = start_us.saturating_add(((exp.sample(rng) * 1e6) as u64).max(1));
                (at < *end_us).then_some(at)
            }
        }
    }

    fn next_staged(&mut self, rng: &mut ChaCha8Rng) -> Option<u64> {
        loop {
            let Arrivals::Staged {
                stages,
                mode,
                k,
                start_us,
                t,
                placed,
                target,
                frac,
            } = self
            else {
                unreachable!()
            };
            let stage = *stages.get(*k)?;
            let end = start_us.saturating_add(us(stage.duration_s));
            if *mode == StageMode::NormalizedExp {
                if *placed + 1 < *target {
                    // Next order statistic of `target - 1` uniforms on [start, end).
                    let left = (*target - 1 - *placed) as f64;
                    let v: f64 = rng.random();
                    *frac += (1.0 - *frac) * (1.0 - v.powf(1.0 / left));
                    *placed += 1;
                    let at = *start_us + (*frac * (end - *start_us) as f64) as u64;
                    *t = at.max(*t).min(end);
                    return Some(*t);
                }
                if *placed + 1 == *target {
                    *placed += 1;
                    *t = end;
                    return Some(end);
                }
            } else if *mode == StageMode::Uniform {
                if *placed < *target {
                    // Next order statistic of `target` uniforms on [start, end).
                    let left = (*target - *placed) as f64;
                    let v: f64 = rng.random();
                    *frac += (1.0 - *frac) * (1.0 - v.powf(1.0 / left));
                    *placed += 1;
                    let at = *start_us + (*frac * (end - *start_us) as f64) as u64;
                    *t = at.max(*t).min(end.saturating_sub(1).max(*start_us));
                    return Some(*t);
                }
            } else if stage.rate_per_s > 0.0 {
                // Piecewise-constant Poisson: memorylessness lets us restart at a boundary.
                let gap = ((Exp::new(stage.rate_per_s).expect("rate > 0").sample(rng) * 1e6)
                    as u64)
                    .max(1);
                if t.saturating_add(gap) < end {
                    *t += gap;
                    return Some(*t);
                }
            }
            let next = *k + 1;
            if end == u64::MAX {
                return None; // the stages run past the end of time
            }
            self.enter_stage(next, end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng;

    #[test]
    fn ln_gamma_matches_known_values() {
        assert!((ln_gamma(1.0)).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    #[test]
    fn weibull_shape_inverts_the_cv() {
        // k = 1 is the exponential (cv 1); k = 2 (Rayleigh) has cv 0.5227.
        assert!((weibull_shape(1.0) - 1.0).abs() < 1e-6);
        assert!((weibull_shape(0.522_723) - 2.0).abs() < 1e-3);
    }

    fn stats(a: &mut Arrivals, n: usize) -> (f64, f64) {
        let mut r = rng::stream(5, "t");
        let mut prev = 0;
        let xs: Vec<f64> = (0..n)
            .map(|_| {
                let t = a.next_us(&mut r).unwrap();
                let d = (t - prev) as f64;
                prev = t;
                d
            })
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn renewal_processes_have_the_asked_mean_and_cv() {
        // 100 req/s: mean gap 10,000 µs. With n = 200,000 the standard error of the mean is
        // cv·10,000/√n ≤ 3·22 µs; of the sample cv, about cv/√(2n)·√(kurtosis term) — we allow
        // 4 standard errors of the mean and 5 % on the cv.
        for (spec, cv) in [
            (ArrivalSpec::Poisson, 1.0),
            (ArrivalSpec::Gamma { cv: 3.0 }, 3.0),
            (ArrivalSpec::Gamma { cv: 0.5 }, 0.5),
            (ArrivalSpec::Weibull { cv: 2.0 }, 2.0),
            (ArrivalSpec::Weibull { cv: 0.5 }, 0.5),
        ] {
            let (mean, got_cv) = stats(&mut Arrivals::new(&spec, 100.0), 200_000);
            let se = cv * 10_000.0 / (200_000f64).sqrt();
            assert!(
                (mean - 10_000.0).abs() < 4.0 * se + 1.0,
                "{spec:?}: mean {mean}"
            );
            assert!(
                (got_cv - cv).abs() < 0.05 * cv.max(1.0),
                "{spec:?}: cv {got_cv}"
            );
        }
        let (mean, cv) = stats(&mut Arrivals::new(&ArrivalSpec::Constant, 100.0), 1000);
        assert_eq!((mean, cv), (10_000.0, 0.0));
    }

    #[test]
    fn poisson_inter_arrivals_pass_a_kolmogorov_smirnov_test() {
        // H0: gaps ~ Exp(100/s). D = sup |F_n − F|; reject at 1 % if D > 1.628/√n.
        let mut a = Arrivals::new(&ArrivalSpec::Poisson, 100.0);
        let mut r = rng::stream(13, "t");
        let n = 20_000;
        let mut prev = 0;
        let mut gaps: Vec<f64> = (0..n)
            .map(|_| {
                let t = a.next_us(&mut r).unwrap();
                let g = (t - prev) as f64 / 1e6;
                prev = t;
                g
            })
            .collect();
        gaps.sort_by(f64::total_cmp);
        let d = gaps
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                // Truncation to whole µs shifts each sample down by < 1 µs: compare at x + 0.5 µs.
                let f = 1.0 - (-100.0 * (x + 0.5e-6)).exp();
                (f - i as f64 / n as f64)
                    .abs()
                    .max(((i + 1) as f64 / n as f64 - f).abs())
            })
            .fold(0.0, f64::max);
        assert!(d < 1.628 / (n as f64).sqrt(), "D = {d}");
        // And it can fail: the same sample against Exp(90/s) is rejected.
        let d_wrong = gaps
            .iter()
            .enumerate()
            .map(|(i, &x)| ((1.0 - (-90.0 * x).exp()) - i as f64 / n as f64).abs())
            .fold(0.0, f64::max);
        assert!(d_wrong > 1.628 / (n as f64).sqrt(), "D = {d_wrong}");
    }

    #[test]
    fn all_at_zero_emits_exactly_count_arrivals_at_time_zero() {
        let mut a = Arrivals::new(&ArrivalSpec::AllAtZero { count: 7 }, 0.0);
        let mut r = rng::stream(14, "t");
        let ts: Vec<u64> = std::iter::from_fn(|| a.next_us(&mut r)).collect();
        assert_eq!(ts, vec![0; 7]);
    }

    #[test]
    fn on_off_arrivals_fall_only_in_on_periods_at_the_on_rate() {
        let mut a = Arrivals::new(
            &ArrivalSpec::OnOff {
                on_s: 1.0,
                off_s: 3.0,
            },
            1000.0,
        );
        let mut r = rng::stream(6, "t");
        let ts: Vec<u64> = (0..40_000).map(|_| a.next_us(&mut r).unwrap()).collect();
        assert!(ts.iter().all(|t| t % 4_000_000 < 1_000_000));
        // 40,000 arrivals at 1000/s of on-time = 40 s on = 40 cycles of 4 s.
        let last = *ts.last().unwrap() as f64 / 1e6;
        assert!((last - 160.0).abs() < 4.0, "{last}");
    }

    #[test]
    fn exact_stages_place_exactly_rate_times_duration_arrivals() {
        let stages = vec![
            Stage {
                rate_per_s: 10.0,
                duration_s: 5.0,
            },
            Stage {
                rate_per_s: 0.0,
                duration_s: 2.0,
            },
            Stage {
                rate_per_s: 3.5,
                duration_s: 2.0,
            },
        ];
        let mut a = Arrivals::new(
            &ArrivalSpec::Staged {
                stages,
                exact: true,
            },
            0.0,
        );
        let mut r = rng::stream(7, "t");
        let ts: Vec<u64> = std::iter::from_fn(|| a.next_us(&mut r)).collect();
        let count = |lo: u64, hi: u64| ts.iter().filter(|&&t| t >= lo && t < hi).count();
        assert_eq!(count(0, 5_000_000), 50);
        assert_eq!(count(5_000_000, 7_000_000), 0);
        assert_eq!(count(7_000_000, 9_000_000), 7);
        assert_eq!(ts.len(), 57);
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn poisson_stages_follow_each_stage_rate() {
        let stages = vec![
            Stage {
                rate_per_s: 200.0,
                duration_s: 50.0,
            },
            Stage {
                rate_per_s: 20.0,
                duration_s: 50.0,
            },
        ];
        let mut a = Arrivals::new(
            &ArrivalSpec::Staged {
                stages,
                exact: false,
            },
            0.0,
        );
        let mut r = rng::stream(8, "t");
        let ts: Vec<u64> = std::iter::from_fn(|| a.next_us(&mut r)).collect();
        let first = ts.iter().filter(|&&t| t < 50_000_000).count() as f64;
        let second = ts.len() as f64 - first;
        // Poisson counts: 10,000 ± 100 and 1,000 ± 32 (one sd); allow 4 sd.
        assert!((first - 10_000.0).abs() < 400.0, "{first}");
        assert!((second - 1_000.0).abs() < 127.0, "{second}");
        assert!(ts.iter().all(|&t| t < 100_000_000));
    }
}

#[cfg(test)]
mod timer_tests {
    use super::*;
    use crate::rng;

    #[test]
    fn the_constant_timer_has_normalised_exponential_gaps() {
        // n normalised exponentials over duration D: every gap has mean D/n, and the k-th
        // arrival is at D·Beta(k, n − k) with mean D·k/n. Check over 2,000 draws of a
        // 10-arrival, 10 s stage: mean of the 5th arrival 5 s (sd of the mean ≈ 0.034 s).
        let stages = [Stage {
            rate_per_s: 1.0,
            duration_s: 10.0,
        }];
        let mut rng = rng::stream(9, "timer");
        let mut fifth = 0.0;
        let mut first_gap = 0.0;
        let runs = 2000;
        for _ in 0..runs {
            let mut a = Arrivals::staged(&stages, StageMode::NormalizedExp);
            let t: Vec<u64> = std::iter::from_fn(|| a.next_us(&mut rng)).collect();
            assert_eq!(t.len(), 10);
            assert_eq!(*t.last().unwrap(), 10_000_000);
            assert!(t.windows(2).all(|w| w[0] <= w[1]));
            fifth += t[4] as f64 / 1e6 / f64::from(runs);
            first_gap += t[0] as f64 / 1e6 / f64::from(runs);
        }
        assert!((fifth - 5.0).abs() < 0.15, "{fifth}");
        assert!((first_gap - 1.0).abs() < 0.1, "{first_gap}");
    }

    #[test]
    fn a_single_session_start_is_one_gap_into_its_window_or_never() {
        let mut rng = rng::stream(1, "once");
        let mut a = Arrivals::once(5_000_000, 6_000_000, 1000.0);
        let t = a.next_us(&mut rng).unwrap();
        assert!((5_000_001..6_000_000).contains(&t));
        assert_eq!(a.next_us(&mut rng), None);
        // A rate so low the gap overshoots the window: no session.
        let mut late = Arrivals::once(0, 1, 1e-9);
        assert_eq!(late.next_us(&mut rng), None);
    }
}
