//! Synthetic workload: clients that emit requests lazily ([`SimSystems::Arrive`]).
//!
//! Each client keeps only its next arrival time in the event queue, so memory is constant
//! in the number of requests. Each client draws from its own random stream
//! (`workload/<client index>`): inter-arrival time, then input length, then output length.
//! Arrival times are truncated to whole µs and at least 1 µs apart; the first arrival is
//! one inter-arrival time after t = 0 (BLIS).
//!
//! [`SimSystems::Arrive`]: crate::SimSystems::Arrive

use bevy_ecs::prelude::*;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Normal};

use crate::engine::{Due, Event, EventQueue, Injected, SimClock};
use crate::request::{Lifecycle, PromptContent, RequestSpec};
use crate::rng;
use crate::scenario::{ArrivalSpec, ClientSpec, LengthSpec, Scenario};
use crate::time::{SimDuration, SimTime};

/// A token-length sampler.
#[derive(Clone, Copy, Debug)]
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
}

impl Lengths {
    pub fn new(spec: &LengthSpec) -> Self {
        match *spec {
            LengthSpec::Constant(n) => Lengths::Constant(n),
            LengthSpec::Uniform { min, max } => Lengths::Uniform { min, max },
            LengthSpec::Normal {
                mean,
                stdev,
                min,
                max,
            } => Lengths::Normal {
                dist: Normal::new(mean, stdev).expect("validated: finite mean, stdev ≥ 0"),
                min,
                max,
            },
        }
    }

    /// One sample: clamp then round for Normal (BLIS gaussian).
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match *self {
            Lengths::Constant(n) => n,
            Lengths::Uniform { min, max } => rng.random_range(min..=max),
            Lengths::Normal { dist, min, max } => {
                let x = dist.sample(rng).clamp(f64::from(min), f64::from(max));
                x.round() as u32
            }
        }
    }
}

/// Inter-arrival sampler.
#[derive(Clone, Copy, Debug)]
pub enum Arrivals {
    Poisson(Exp<f64>),
}

impl Arrivals {
    fn new(spec: ArrivalSpec, rate_per_s: f64) -> Self {
        match spec {
            ArrivalSpec::Poisson => {
                Arrivals::Poisson(Exp::new(rate_per_s).expect("validated: rate > 0"))
            }
        }
    }

    /// Time to the next arrival, truncated to µs, at least 1 µs.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> SimDuration {
        match self {
            Arrivals::Poisson(exp) => {
                SimDuration::from_secs_f64(exp.sample(rng)).max(SimDuration(1))
            }
        }
    }
}

/// One client's generator state.
#[derive(Debug)]
pub struct Client {
    pub arrivals: Arrivals,
    pub input: Lengths,
    pub output: Lengths,
    pub prefix_tokens: u32,
    pub prefix_id: u64,
    pub rng: ChaCha8Rng,
}

impl Client {
    pub fn new(seed: u64, index: usize, spec: &ClientSpec) -> Self {
        let group = spec.prefix_group.map_or(u64::MAX - index as u64, u64::from);
        Client {
            arrivals: Arrivals::new(spec.arrival, spec.rate_per_s),
            input: Lengths::new(&spec.input_tokens),
            output: Lengths::new(&spec.output_tokens),
            prefix_tokens: spec.shared_prefix_tokens,
            prefix_id: rng::fnv1a(format!("prefix/{seed}/{group}").as_bytes()),
            rng: rng::stream(seed, &format!("workload/{index}")),
        }
    }
}

/// Every client, and the global stop conditions.
#[derive(Resource, Debug)]
pub struct Workload {
    pub clients: Vec<Client>,
    /// Stop after this many requests (all clients).
    pub limit: Option<u64>,
    /// No arrival after this time.
    pub stop_at: SimTime,
    seed: u64,
}

impl Workload {
    pub fn new(scenario: &Scenario) -> Self {
        let w = &scenario.workload;
        Workload {
            clients: w
                .clients
                .iter()
                .enumerate()
                .map(|(i, c)| Client::new(scenario.seed, i, c))
                .collect(),
            limit: w.num_requests,
            stop_at: w.duration_s.map_or(SimTime::MAX, |d| {
                SimTime::ZERO + SimDuration::from_secs_f64(d)
            }),
            seed: scenario.seed,
        }
    }

    /// Schedules every client's first arrival.
    pub fn prime(&mut self, queue: &mut EventQueue) {
        for (i, c) in self.clients.iter_mut().enumerate() {
            let t = SimTime::ZERO + c.arrivals.sample(&mut c.rng);
            if t <= self.stop_at {
                queue.push(t, Event::Arrival { source: i as u32 });
            }
        }
    }
}

/// Spawns the requests arriving now and schedules each client's next arrival.
pub fn spawn_arrivals(
    mut commands: Commands,
    mut due: ResMut<Due>,
    clock: Res<SimClock>,
    mut workload: ResMut<Workload>,
    mut injected: ResMut<Injected>,
    mut queue: ResMut<EventQueue>,
    policies: Res<crate::cluster::ClusterDelays>,
) {
    let now = clock.now;
    let due = &mut *due;
    let workload = &mut *workload;
    let mut sources = std::mem::take(&mut due.arrivals);
    for &source in &sources {
        if workload.limit.is_some_and(|l| injected.0 >= l) {
            continue;
        }
        let id = injected.0;
        injected.0 += 1;
        let client = &mut workload.clients[source as usize];
        let question = client.input.sample(&mut client.rng);
        let output = client.output.sample(&mut client.rng).max(1);
        let spec = RequestSpec {
            id,
            client: source,
            input_tokens: client.prefix_tokens + question,
            output_tokens: output,
            content: PromptContent {
                prefix_id: client.prefix_id,
                prefix_tokens: client.prefix_tokens,
                unique_id: rng::fnv1a(format!("request/{}/{id}", workload.seed).as_bytes()),
            },
        };
        let entity = commands
            .spawn((
                spec,
                Lifecycle {
                    arrival: now,
                    ..Default::default()
                },
            ))
            .id();
        if policies.admission.as_us() == 0 {
            due.admit.push(entity);
        } else {
            queue.push(now + policies.admission, Event::Admit(entity));
        }
        let next = now + client.arrivals.sample(&mut client.rng);
        if next <= workload.stop_at && workload.limit.is_none_or(|l| injected.0 < l) {
            queue.push(next, Event::Arrival { source });
        }
    }
    sources.clear();
    due.arrivals = sources;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_inter_arrivals_have_the_right_mean_and_variance() {
        let a = Arrivals::new(ArrivalSpec::Poisson, 100.0);
        let mut r = rng::stream(1, "t");
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| a.sample(&mut r).as_us() as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        // Exp(100/s): mean 10,000 µs, sd 10,000 µs; truncation lowers the mean by ~0.5 µs.
        // Standard error of the mean = 10,000/√200,000 ≈ 22 µs; allow 4 standard errors.
        assert!((mean - 10_000.0).abs() < 90.0, "mean {mean}");
        assert!((var.sqrt() - 10_000.0).abs() < 200.0, "sd {}", var.sqrt());
    }

    #[test]
    fn clamped_normal_lengths_stay_in_bounds_and_round() {
        let l = Lengths::new(&LengthSpec::Normal {
            mean: 70.0,
            stdev: 35.0,
            min: 2,
            max: 200,
        });
        let mut r = rng::stream(2, "t");
        let xs: Vec<u32> = (0..100_000).map(|_| l.sample(&mut r)).collect();
        assert!(xs.iter().all(|&x| (2..=200).contains(&x)));
        let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len() as f64;
        // Clamping at 2 lifts the mean of N(70, 35) slightly: E ≈ 70.08 (the lower tail
        // below 2 has mass 2.6%); SE = 35/√1e5 ≈ 0.11.
        assert!((mean - 70.08).abs() < 0.5, "mean {mean}");
    }

    #[test]
    fn uniform_lengths_cover_both_ends() {
        let l = Lengths::new(&LengthSpec::Uniform { min: 3, max: 5 });
        let mut r = rng::stream(3, "t");
        let xs: Vec<u32> = (0..1000).map(|_| l.sample(&mut r)).collect();
        for v in 3..=5 {
            assert!(xs.contains(&v));
        }
        assert!(xs.iter().all(|&x| (3..=5).contains(&x)));
    }
}
