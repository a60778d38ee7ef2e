//! The plan's search: configurations, trials, the branch and bound, and what it writes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::price_of;

use crate::capacity::{SERVED_SHARE, Target, Window};
use crate::interval::Estimate;
use crate::scenario::{PlanObjective, PlanSpec, Scenario};

/// Configurations searched at once against one bound.
pub const ROUND: usize = 4;

/// One configuration of the planned group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub gpu: String,
    pub tp: u32,
    pub pp: u32,
    /// Data-parallel attention ranks of an instance (the group's `expert_parallel.dp`).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub dp: u32,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub scheduler: String,
    pub routing: String,
    /// Price of one GPU-hour.
    pub price_per_gpu_hour: f64,
    /// With `plan.pd_splits`: (prefill, decode) instances per unit; the prefill and the
    /// decode group both run this configuration.
    #[serde(default)]
    pub pd_split: Option<(u32, u32)>,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

impl Config {
    /// GPUs of one unit: its instances' dp × tp × pp each.
    pub fn gpus_per_unit(&self) -> u32 {
        self.instances_per_unit() * self.dp.max(1) * self.tp * self.pp
    }

    /// Instances per unit: 1, or a P/D split's prefill + decode instances.
    pub fn instances_per_unit(&self) -> u32 {
        self.pd_split.map_or(1, |(p, d)| p + d)
    }

    /// Price of one unit-hour (one instance, or a P/D split's instances).
    pub fn price_per_unit(&self) -> f64 {
        f64::from(self.gpus_per_unit()) * self.price_per_gpu_hour
    }

    /// `H100 tp4 pp1 seqs256 tokens8192 vllm_v1 least_loaded` (` dp2` after `pp` with
    /// data-parallel ranks, ` pd1:3` at the end with a split).
    pub fn label(&self) -> String {
        format!(
            "{} tp{} pp{}{} seqs{} tokens{} {} {}{}",
            self.gpu,
            self.tp,
            self.pp,
            if self.dp > 1 {
                format!(" dp{}", self.dp)
            } else {
                String::new()
            },
            self.max_num_seqs,
            self.max_num_batched_tokens,
            self.scheduler,
            self.routing,
            self.pd_split
                .map_or(String::new(), |(p, d)| format!(" pd{p}:{d}"))
        )
    }

    /// What one unit is, in words: `instance`, or `unit (1 prefill + 3 decode)`.
    pub fn unit(&self) -> String {
        match self.pd_split {
            Some((p, d)) => format!("unit ({p} prefill + {d} decode)"),
            None => "instance".into(),
        }
    }

    /// The overrides that make the scenario this configuration at `n` units: `group` (and,
    /// with a P/D split, the decode group `decode`) set to it.
    pub fn overrides(&self, group: usize, decode: Option<usize>, n: u32) -> Vec<(String, String)> {
        let mut o = Vec::new();
        let mut set = |group: usize, count: u32| {
            let g = |f: &str| format!("cluster.groups[{group}].{f}");
            o.extend([
                (g("gpu"), format!("{:?}", self.gpu)),
                (g("tp"), self.tp.to_string()),
                (g("pp"), self.pp.to_string()),
                (g("max_num_seqs"), self.max_num_seqs.to_string()),
                (
                    g("max_num_batched_tokens"),
                    self.max_num_batched_tokens.to_string(),
                ),
                (g("scheduler"), format!("{:?}", self.scheduler)),
                (
                    g("cost_per_gpu_hour"),
                    format!("{:?}", self.price_per_gpu_hour),
                ),
                (g("count"), count.to_string()),
            ]);
        };
        match (self.pd_split, decode) {
            (Some((p, d)), Some(decode)) => {
                set(group, p * n);
                set(decode, d * n);
            }
            _ => set(group, n),
        }
        o.push((
            "policies.routing".to_string(),
            format!("{:?}", self.routing),
        ));
        o
    }
}

/// Every configuration of `plan` over `scenario`'s group, in the order the lists give
/// (validated: every GPU has a price).
pub fn configurations(scenario: &Scenario, plan: &PlanSpec) -> Vec<Config> {
    let g = &scenario.cluster.groups[plan.group];
    let or = |list: &[u32], own: u32| {
        if list.is_empty() {
            vec![own]
        } else {
            list.to_vec()
        }
    };
    let or_opt = |list: &[u32], own: Option<u32>| -> Vec<Option<u32>> {
        if list.is_empty() {
            vec![own]
        } else {
            list.iter().copied().map(Some).collect()
        }
    };
    let or_s = |list: &[String], own: &str| {
        if list.is_empty() {
            vec![own.to_string()]
        } else {
            list.to_vec()
        }
    };
    let gpus = or_s(&plan.gpus, g.gpu.as_deref().unwrap_or(""));
    let splits: Vec<Option<(u32, u32)>> = if plan.pd_splits.is_empty() {
        vec![None]
    } else {
        plan.pd_splits.iter().copied().map(Some).collect()
    };
    let mut out = Vec::new();
    for gpu in &gpus {
        let price = price_of(gpu, &plan.prices).unwrap_or(f64::NAN);
        // A limit neither the plan nor the group gives takes the candidate GPU's default.
        let (defaults, max_len) = crate::loader::batch_defaults_on(g, gpu, &scenario.base_dir);
        for &tp in &or(&plan.tp, g.tp) {
            for &pp in &or(&plan.pp, g.pp) {
                for seqs in or_opt(&plan.max_num_seqs, g.max_num_seqs) {
                    for tokens in or_opt(&plan.max_num_batched_tokens, g.max_num_batched_tokens) {
                        let (seqs, tokens) =
                            crate::scenario::batch_limits(seqs, tokens, defaults, max_len);
                        for scheduler in &or_s(&plan.schedulers, &g.scheduler) {
                            for routing in &or_s(&plan.routing, &scenario.policies.routing) {
                                for &pd_split in &splits {
                                    out.push(Config {
                                        gpu: gpu.clone(),
                                        tp,
                                        pp,
                                        dp: g.dp(),
                                        max_num_seqs: seqs,
                                        max_num_batched_tokens: tokens,
                                        scheduler: scheduler.clone(),
                                        routing: routing.clone(),
                                        price_per_gpu_hour: price,
                                        pd_split,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// How a configuration fared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The cheapest that meets every SLO.
    Best,
    /// Meets every SLO at `instances`, at a higher price than the best.
    Feasible,
    /// Could not be cheaper than a configuration already found, whatever it did.
    Dominated,
    /// Fails an SLO at the most instances that could still be cheaper (or at
    /// `max_instances`).
    Infeasible,
    /// The loader refused it (does not fit, a limit).
    Excluded,
}

/// One run (over every seed) of a configuration at some size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub instances: u32,
    pub passes: bool,
    pub price_per_hour: f64,
    /// Mean over seeds.
    #[serde(deserialize_with = "crate::interval::null_as_nan")]
    pub ttft_p99_ms: f64,
    #[serde(deserialize_with = "crate::interval::null_as_nan")]
    pub output_tokens_per_s: f64,
    /// Per target (in [`PlanResult::targets`] order): attainment over seeds.
    pub attainment: Vec<Estimate>,
    /// Worst served share over seeds.
    #[serde(deserialize_with = "crate::interval::null_as_nan")]
    pub served_share: f64,
    /// Why it failed, when it did.
    pub failed: Option<String>,
}

/// A configuration's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub config: Config,
    /// Its place in the search's order over every configuration (cheapest instance first;
    /// shards take every N-th).
    pub position: usize,
    pub status: Status,
    /// Fewest instances meeting every SLO (feasible and best).
    pub instances: Option<u32>,
    pub price_per_hour: Option<f64>,
    pub price_per_million_tokens: Option<f64>,
    /// The trial at `instances` (feasible), or the failing trial (infeasible).
    pub trial: Option<Trial>,
    /// The trial at one instance fewer, when run (why no fewer will do).
    pub one_fewer: Option<Trial>,
    /// Every trial that met the SLOs (for the Pareto front, and for merging shards).
    pub passing: Vec<Trial>,
    /// Why it lost, in words.
    pub reason: String,
    pub runs: u32,
    /// What `servesim validate` would warn of in the configuration (not for one excluded):
    /// said once by `plan`, not kept in `plan.json`.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// What a plan ran: what `merge` checks shards share and `--resume` checks an earlier
/// attempt shares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The scenario file as given.
    pub file: String,
    pub set: Vec<(String, String)>,
    pub replicas: u32,
    /// (I, N): the configurations whose place in the search's order is I modulo N.
    pub shard: (u32, u32),
    /// How many configurations the whole plan holds (all its shards together); 0 in a
    /// `plan.json` written before it was recorded.
    #[serde(default)]
    pub configurations: usize,
    /// The FNV-1a hash of the scenario and of every file it names, by path relative to it.
    pub inputs: std::collections::BTreeMap<String, String>,
    pub version: String,
}

/// What `plan` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanResult {
    pub origin: Origin,
    pub scenario: String,
    pub group: String,
    pub objective: PlanObjective,
    pub seeds: Vec<u64>,
    pub targets: Vec<Target>,
    /// `plan.bound`: the price per hour the search started from, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
    /// Every configuration, cheapest first (best, then feasible by price, then the rest).
    pub outcomes: Vec<Outcome>,
    /// Every trial that met the SLOs and is not beaten on both price and p99 TTFT by
    /// another: (configuration index in `outcomes`, trial).
    pub pareto: Vec<(usize, Trial)>,
    pub runs: u32,
}

/// Settings of a plan search.
#[derive(Clone, Debug)]
pub struct Settings {
    pub replicas: u32,
    pub jobs: usize,
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// (I, N): search only the configurations whose place in the order is I modulo N.
    pub shard: (u32, u32),
    /// Trials of an earlier attempt to reuse, and where to record new ones (`--out`).
    pub trials: Option<std::sync::Arc<super::progress::Trials>>,
    /// Counts the configurations decided so far (a progress bar reads it).
    pub decided: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replicas: 1,
            jobs: 1,
            interrupt: None,
            shard: (0, 1),
            trials: None,
            decided: None,
        }
    }
}

/// What a search of `scenario` (at `path`, with `overrides`) runs, for `plan.json`, shards
/// and `--resume`.
pub fn origin(
    path: &Path,
    overrides: &[(String, String)],
    scenario: &Scenario,
    replicas: u32,
    shard: (u32, u32),
) -> Result<Origin, String> {
    Ok(Origin {
        file: path.display().to_string(),
        set: overrides.to_vec(),
        replicas,
        shard,
        configurations: scenario
            .plan
            .as_ref()
            .map_or(0, |spec| configurations(scenario, spec).len()),
        inputs: crate::sweep::hash_inputs([scenario])?,
        version: crate::sweep::VERSION.to_string(),
    })
}

/// Why a plan stopped short.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Run(String),
    #[error("interrupted")]
    Interrupted,
}

/// Searches the plan of the scenario at `path` (with `overrides`), already loaded as
/// `scenario`.
pub fn search(
    app: &crate::ServesimApp,
    path: &Path,
    overrides: &[(String, String)],
    scenario: &Scenario,
    settings: &Settings,
) -> Result<PlanResult, PlanError> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Some(spec) = &scenario.plan else {
        return Err(PlanError::Input(format!(
            "{} has no plan block: add plan: (gpus: [...], tp: [...], ...) (docs/capacity.md)",
            path.display()
        )));
    };
    crate::capacity::check_replicas(settings.replicas).map_err(PlanError::Input)?;
    let (shard, shards) = settings.shard;
    if shards == 0 || shard >= shards {
        return Err(PlanError::Input(format!(
            "shard {shard}/{shards}: give I/N with I < N"
        )));
    }
    let origin = origin(path, overrides, scenario, settings.replicas, settings.shard)
        .map_err(PlanError::Input)?;
    let targets = crate::capacity::targets(scenario);
    let seeds: Vec<u64> = (0..settings.replicas)
        .map(|r| scenario.seed.wrapping_add(u64::from(r)))
        .collect();
    let mut all = configurations(scenario, spec);
    // Cheapest instance first; the list's own order among equals. A shard takes every N-th.
    all.sort_by(|a, b| a.price_per_unit().total_cmp(&b.price_per_unit()));
    let configs: Vec<(usize, Config)> = all
        .into_iter()
        .enumerate()
        .filter(|(j, _)| *j % shards as usize == shard as usize)
        .collect();
    let built = app.build();
    let catalog = built.world().resource::<crate::catalog::Catalog>();
    let ctx = Ctx {
        app,
        path,
        overrides,
        catalog,
        group: spec.group,
        decode: (!spec.pd_splits.is_empty())
            .then(|| {
                scenario
                    .cluster
                    .groups
                    .iter()
                    .position(|g| g.role == crate::scenario::Role::Decode)
            })
            .flatten(),
        targets: &targets,
        seeds: &seeds,
        interrupt: settings.interrupt.as_ref(),
        trials: settings.trials.as_deref(),
    };
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(configs.len());
    let mut best: Option<Bound> = spec.bound.map(|price| Bound {
        price,
        found: false,
    });
    for round in configs.chunks(ROUND) {
        let bound = best;
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<Outcome, PlanError>>>> =
            Mutex::new((0..round.len()).map(|_| None).collect());
        std::thread::scope(|scope| {
            for _ in 0..settings.jobs.clamp(1, round.len()) {
                scope.spawn(|| {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some((position, config)) = round.get(k) else {
                            break;
                        };
                        let r = ctx
                            .decide(config, bound, spec.max_instances)
                            .map(|o| Outcome {
                                position: *position,
                                ..o
                            });
                        results.lock().expect("no thread panics holding it")[k] = Some(r);
                        if let Some(d) = &settings.decided {
                            d.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        for r in results.into_inner().expect("no thread panicked") {
            let outcome = r.expect("every configuration was decided")?;
            if let Some(p) = outcome.price_per_hour
                && best.is_none_or(|b| p <= b.price)
            {
                best = Some(Bound {
                    price: p,
                    found: true,
                });
            }
            outcomes.push(outcome);
        }
    }
    Ok(finish(
        Header {
            origin,
            scenario: scenario.name.clone(),
            group: scenario.cluster.groups[spec.group].name.clone(),
            objective: spec.objective,
            seeds,
            targets,
            bound: spec.bound,
        },
        outcomes,
    ))
}

/// The price per hour a configuration must match: the best found before its round, or
/// `plan.bound` until something is found below it.
#[derive(Clone, Copy, Debug)]
struct Bound {
    price: f64,
    found: bool,
}

impl Bound {
    fn what(&self) -> &'static str {
        if self.found {
            "the best found"
        } else {
            "plan.bound"
        }
    }
}

/// What every configuration's search needs.
struct Ctx<'a> {
    app: &'a crate::ServesimApp,
    path: &'a Path,
    overrides: &'a [(String, String)],
    catalog: &'a crate::catalog::Catalog,
    group: usize,
    /// The decode group a P/D split sizes with the planned (prefill) group.
    decode: Option<usize>,
    targets: &'a [Target],
    seeds: &'a [u64],
    interrupt: Option<&'a std::sync::Arc<std::sync::atomic::AtomicBool>>,
    trials: Option<&'a super::progress::Trials>,
}

impl Ctx<'_> {
    fn load(&self, config: &Config, n: u32) -> Result<Scenario, String> {
        let mut o = self.overrides.to_vec();
        o.extend(config.overrides(self.group, self.decode, n));
        crate::loader::load(self.path, &o, self.catalog).map_err(|e| {
            e.problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// The configuration at `n` instances on every seed: an earlier attempt's trial, or run
    /// now (and recorded).
    fn trial(&self, config: &Config, n: u32) -> Result<Trial, PlanError> {
        if let Some(t) = self.trials.and_then(|k| k.get(config, n)) {
            return Ok(t);
        }
        let t = self.run_trial(config, n)?;
        if let Some(k) = self.trials {
            k.record(config, n, &t).map_err(PlanError::Run)?;
        }
        Ok(t)
    }

    /// Runs the configuration at `n` instances on every seed.
    fn run_trial(&self, config: &Config, n: u32) -> Result<Trial, PlanError> {
        use std::sync::atomic::Ordering;
        let sc = self.load(config, n).map_err(PlanError::Input)?;
        let (mut ttft, mut tokens, mut served) = (0.0, 0.0, f64::INFINITY);
        let mut attainment: Vec<Vec<f64>> = vec![Vec::new(); self.targets.len()];
        let mut failed = None;
        for &seed in self.seeds {
            if self.interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                return Err(PlanError::Interrupted);
            }
            let mut run = sc.clone();
            run.seed = seed;
            let collect = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let options = crate::RunOptions {
                collect: Some(collect.clone()),
                interrupt: self.interrupt.cloned(),
                ..Default::default()
            };
            let summary = match self.app.run(&run, options) {
                Ok(s) => s,
                Err(e) if self.interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) => {
                    let _ = e;
                    return Err(PlanError::Interrupted);
                }
                Err(crate::simulation::SimError::Run(crate::setup::RunError::Fault(
                    crate::engine::Fault::Overloaded { .. },
                ))) => {
                    failed.get_or_insert_with(|| {
                        format!("seed {seed}: overloaded past limits.max_in_flight")
                    });
                    served = 0.0;
                    continue;
                }
                Err(e) => {
                    return Err(PlanError::Run(format!(
                        "{} at {n} instances (seed {seed}): {e}",
                        config.label()
                    )));
                }
            };
            let samples = std::mem::take(&mut *collect.lock().expect("the run has ended"));
            let w = Window::measure(&samples, self.targets)
                .map_err(|e| PlanError::Input(format!("{}: {e}", config.label())))?;
            ttft += summary.ttft_ms.p99.unwrap_or(f64::NAN);
            tokens += summary.throughput.output_tokens_per_s;
            served = served.min(w.served_share);
            for (k, a) in w.attainment.iter().enumerate() {
                attainment[k].push(*a);
            }
            let verdicts = w.verdicts(self.targets, SERVED_SHARE);
            if failed.is_none() {
                if !verdicts[0] {
                    let short = if w.still_filling() {
                        format!(
                            "; the run may be too short to tell: {} of the first {} arrivals \
                             (the warm-up) were still in flight when the window opened, and a \
                             cluster still filling up reads as falling behind (raise \
                             workload.num_requests)",
                            w.in_flight_at_start, w.warm_up_arrivals
                        )
                    } else {
                        String::new()
                    };
                    failed = Some(format!(
                        "seed {seed}: falls behind (completes {:.1} % of arrivals){short}",
                        w.served_share * 100.0
                    ));
                } else if let Some(k) = verdicts[1..].iter().position(|v| !v) {
                    let t = &self.targets[k];
                    failed = Some(format!(
                        "seed {seed}: SLO {} met by {:.2} % < {} % ({})",
                        t.class,
                        w.attainment[k] * 100.0,
                        t.attainment * 100.0,
                        t.targets
                    ));
                }
            }
        }
        let runs = self.seeds.len() as f64;
        Ok(Trial {
            instances: n,
            passes: failed.is_none(),
            price_per_hour: f64::from(n) * config.price_per_unit(),
            ttft_p99_ms: ttft / runs,
            output_tokens_per_s: tokens / runs,
            attainment: attainment
                .iter()
                .map(|v| {
                    let v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
                    if v.is_empty() {
                        Estimate::of(&[f64::NAN])
                    } else {
                        Estimate::of(&v).within(0.0, 1.0)
                    }
                })
                .collect(),
            served_share: served,
            failed,
        })
    }

    /// Decides one configuration against the best price so far.
    fn decide(
        &self,
        config: &Config,
        bound: Option<Bound>,
        max_instances: u32,
    ) -> Result<Outcome, PlanError> {
        let mut outcome = Outcome {
            config: config.clone(),
            position: 0,
            status: Status::Excluded,
            instances: None,
            price_per_hour: None,
            price_per_million_tokens: None,
            trial: None,
            one_fewer: None,
            passing: Vec::new(),
            reason: String::new(),
            runs: 0,
            warnings: Vec::new(),
        };
        let sc = match self.load(config, 1) {
            Ok(sc) => sc,
            Err(e) => {
                outcome.reason = format!("excluded: {e}");
                return Ok(outcome);
            }
        };
        let refused = |i: usize| crate::loader::estimate::refused_at_start(&sc, i, self.catalog);
        let why = refused(self.group)
            .map(|w| format!("vLLM would not start it: {w}"))
            .or_else(|| {
                let d = self.decode?;
                refused(d).map(|w| format!("vLLM would not start its decode group: {w}"))
            });
        if let Some(why) = why {
            outcome.reason = format!("excluded: {why}");
            return Ok(outcome);
        }
        outcome.warnings = crate::loader::estimate::slow_inputs(&sc, self.catalog);
        let per_unit = config.price_per_unit();
        let cap = match bound {
            Some(best) => most_units(best.price, per_unit, max_instances),
            None => max_instances,
        };
        if let Some(best) = bound
            && cap == 0
        {
            outcome.status = Status::Dominated;
            outcome.reason = format!(
                "dominated: one {} costs {per_unit:.2}/h, more than {} ({:.2}/h)",
                config.unit(),
                best.what(),
                best.price
            );
            return Ok(outcome);
        }
        let at_cap = self.trial(config, cap)?;
        outcome.runs += self.seeds.len() as u32;
        if !at_cap.passes {
            outcome.status = Status::Infeasible;
            outcome.reason = match bound {
                Some(best) => format!(
                    "cannot match {} ({:.2}/h): at {} ({:.2}/h, the most that would not cost more) it fails: {}",
                    best.what(),
                    best.price,
                    sized(cap, config),
                    at_cap.price_per_hour,
                    at_cap.failed.as_deref().unwrap_or("")
                ),
                None => format!(
                    "fails even at plan.max_instances = {cap}: {}",
                    at_cap.failed.as_deref().unwrap_or("")
                ),
            };
            outcome.trial = Some(at_cap);
            return Ok(outcome);
        }
        // Fewest instances that pass: bisection on (fails at lo, passes at hi].
        outcome.passing.push(at_cap.clone());
        let (mut lo, mut hi, mut passing, mut failing) = (0u32, cap, at_cap, None::<Trial>);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let t = self.trial(config, mid)?;
            outcome.runs += self.seeds.len() as u32;
            if t.passes {
                hi = mid;
                outcome.passing.push(t.clone());
                passing = t;
            } else {
                lo = mid;
                failing = Some(t);
            }
        }
        outcome.status = Status::Feasible;
        outcome.instances = Some(hi);
        outcome.price_per_hour = Some(passing.price_per_hour);
        outcome.price_per_million_tokens = (passing.output_tokens_per_s > 0.0)
            .then(|| passing.price_per_hour / (passing.output_tokens_per_s * 3600.0 / 1e6));
        outcome.one_fewer = failing.filter(|f| f.instances + 1 == hi);
        outcome.trial = Some(passing);
        Ok(outcome)
    }
}

/// The most units at `per_unit` that cost no more than `best` (at most `max`): a
/// configuration that can tie is searched, so a tie is decided on p99 TTFT rather than on the
/// search's order. The relative 1e-9 keeps a quotient such as 0.3 / 0.1 = 2.999… from losing
/// the tie to rounding.
fn most_units(best: f64, per_unit: f64, max: u32) -> u32 {
    (((best / per_unit) * (1.0 + 1e-9)).floor() as u32).min(max)
}

/// `1 instance`, `3 instances`; with a P/D split `2 units (1 prefill + 3 decode each)`.
pub(super) fn sized(n: u32, c: &Config) -> String {
    let s = if n == 1 { "" } else { "s" };
    match c.pd_split {
        Some((p, d)) => format!("{n} unit{s} ({p} prefill + {d} decode each)"),
        None => format!("{n} instance{s}"),
    }
}

/// What a plan's result says besides its outcomes.
pub(super) struct Header {
    pub(super) origin: Origin,
    pub(super) scenario: String,
    pub(super) group: String,
    pub(super) objective: PlanObjective,
    pub(super) seeds: Vec<u64>,
    pub(super) targets: Vec<Target>,
    pub(super) bound: Option<f64>,
}

/// Ranks the outcomes (given in the search's order), names the best, builds the Pareto front
/// and the runners-up's reasons.
pub(super) fn finish(head: Header, mut outcomes: Vec<Outcome>) -> PlanResult {
    let objective = |o: &Outcome| match head.objective {
        PlanObjective::CostPerHour => o.price_per_hour,
        PlanObjective::CostPerMillionTokens => o.price_per_million_tokens,
    };
    // Feasible by the objective (ties: cheaper per hour, then lower p99 TTFT, then the
    // search's order), then the rest by price per instance.
    let ttft = |o: &Outcome| o.trial.as_ref().map_or(f64::INFINITY, |t| t.ttft_p99_ms);
    let mut order: Vec<usize> = (0..outcomes.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&outcomes[a], &outcomes[b]);
        match (objective(x), objective(y)) {
            (Some(p), Some(q)) => p
                .total_cmp(&q)
                .then(
                    x.price_per_hour
                        .unwrap_or(0.0)
                        .total_cmp(&y.price_per_hour.unwrap_or(0.0)),
                )
                .then(ttft(x).total_cmp(&ttft(y)))
                .then(a.cmp(&b)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.cmp(&b),
        }
    });
    let mut sorted: Vec<Outcome> = order.into_iter().map(|k| outcomes[k].clone()).collect();
    outcomes.clear();
    let best_value = sorted.first().and_then(objective);
    if let Some(b) = best_value {
        sorted[0].status = Status::Best;
        sorted[0].reason = "the cheapest that meets every SLO".into();
        let best_ttft = ttft(&sorted[0]);
        for o in sorted.iter_mut().skip(1) {
            if o.status == Status::Feasible
                && let Some(v) = objective(o)
            {
                let n = o.instances.unwrap_or(0);
                o.reason = if v > b {
                    format!(
                        "meets every SLO with {}, but costs {:.1} % more",
                        sized(n, &o.config),
                        (v / b - 1.0) * 100.0
                    )
                } else if ttft(o) > best_ttft {
                    format!(
                        "ties with the best on price ({}), with a higher p99 TTFT ({:.1} ms against {best_ttft:.1})",
                        sized(n, &o.config),
                        ttft(o)
                    )
                } else {
                    format!(
                        "ties with the best on price ({}) and p99 TTFT ({:.1} ms); the best comes first in the search's order",
                        sized(n, &o.config),
                        ttft(o)
                    )
                };
            }
        }
    }
    // Pareto front over every passing trial: price per hour against p99 TTFT.
    let mut passing: Vec<(usize, Trial)> = sorted
        .iter()
        .enumerate()
        .flat_map(|(k, o)| o.passing.iter().map(move |t| (k, t.clone())))
        .collect();
    passing.sort_by(|a, b| {
        a.1.price_per_hour
            .total_cmp(&b.1.price_per_hour)
            .then(a.1.ttft_p99_ms.total_cmp(&b.1.ttft_p99_ms))
    });
    let mut pareto = Vec::new();
    let mut lowest = f64::INFINITY;
    for (k, t) in passing {
        if t.ttft_p99_ms < lowest {
            lowest = t.ttft_p99_ms;
            pareto.push((k, t));
        }
    }
    let runs = sorted.iter().map(|o| o.runs).sum();
    PlanResult {
        origin: head.origin,
        scenario: head.scenario,
        group: head.group,
        objective: head.objective,
        seeds: head.seeds,
        targets: head.targets,
        bound: head.bound,
        outcomes: sorted,
        pareto,
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_keeps_every_size_that_could_tie() {
        assert_eq!(most_units(60.0, 12.0, 64), 5);
        assert_eq!(most_units(59.99, 12.0, 64), 4);
        assert_eq!(most_units(0.3, 0.1, 64), 3); // 0.3 / 0.1 = 2.9999999999999996
        assert_eq!(most_units(11.0, 12.0, 64), 0);
        assert_eq!(most_units(1e6, 1.0, 64), 64);
    }

    #[test]
    fn a_batch_limit_left_out_takes_each_candidate_gpus_default() {
        let app = crate::default_app();
        let catalog = app.world().resource::<crate::catalog::Catalog>();
        let plan = |group: &str, lists: &str| {
            let src = format!(
                r#"(cluster: (groups: [(model: "llama-3.1-8b-instruct", gpu: "H100"{group})]),
                    workload: (num_requests: 10, clients: [(rate_per_s: 1.0,
                        input_tokens: Constant(64), output_tokens: Constant(8))]),
                    plan: (gpus: ["A100-80", "H100"], max_instances: 4,
                        prices: {{"A100-80": 1.0, "H100": 2.0}}{lists}))"#
            );
            let s = crate::loader::parse(&src, "p.ron", &[], catalog).unwrap();
            let p = s.plan.clone().unwrap();
            configurations(&s, &p)
                .iter()
                .map(|c| (c.gpu.clone(), c.max_num_seqs, c.max_num_batched_tokens))
                .collect::<Vec<_>>()
        };
        let a100 = |s, t| ("A100-80".to_string(), s, t);
        let h100 = |s, t| ("H100".to_string(), s, t);
        // `vllm serve`'s defaults per GPU (roofline: vLLM's serving path).
        assert_eq!(plan("", ""), [a100(256, 2048), h100(1024, 8192)]);
        // The group's own limits hold on every GPU.
        assert_eq!(
            plan(", max_num_seqs: 64, max_num_batched_tokens: 4096", ""),
            [a100(64, 4096), h100(64, 4096)]
        );
        // A listed budget: the default max_num_seqs is at most it, as in vLLM.
        assert_eq!(
            plan("", ", max_num_batched_tokens: [512]"),
            [a100(256, 512), h100(512, 512)]
        );
        // The BLIS reading keeps BLIS's 256 and 2,048 everywhere.
        assert_eq!(
            plan(", latency: TrainedPhysics()", ""),
            [a100(256, 2048), h100(256, 2048)]
        );
    }

    #[test]
    fn a_configuration_prices_its_gpus_and_sets_every_varied_field() {
        let c = Config {
            gpu: "H100".into(),
            tp: 4,
            pp: 2,
            dp: 1,
            max_num_seqs: 128,
            max_num_batched_tokens: 8192,
            scheduler: "vllm_v1".into(),
            routing: "round_robin".into(),
            price_per_gpu_hour: 3.0,
            pd_split: None,
        };
        assert_eq!(c.price_per_unit(), 24.0);
        let o = c.overrides(1, None, 5);
        assert!(o.contains(&("cluster.groups[1].count".into(), "5".into())));
        assert!(o.contains(&("cluster.groups[1].gpu".into(), "\"H100\"".into())));
        assert!(o.contains(&("policies.routing".into(), "\"round_robin\"".into())));
        assert_eq!(
            c.label(),
            "H100 tp4 pp2 seqs128 tokens8192 vllm_v1 round_robin"
        );
        // A P/D split: one unit is 1 prefill + 3 decode instances, both groups set.
        let pd = Config {
            pd_split: Some((1, 3)),
            ..c
        };
        assert_eq!(pd.price_per_unit(), 96.0);
        let o = pd.overrides(0, Some(2), 5);
        assert!(o.contains(&("cluster.groups[0].count".into(), "5".into())));
        assert!(o.contains(&("cluster.groups[2].count".into(), "15".into())));
        assert!(o.contains(&("cluster.groups[2].tp".into(), "4".into())));
        assert!(pd.label().ends_with("round_robin pd1:3"));
        // Two data-parallel ranks an instance: twice the GPUs of each.
        let dp = Config {
            dp: 2,
            ..pd.clone()
        };
        assert_eq!((dp.gpus_per_unit(), dp.price_per_unit()), (64, 192.0));
        assert_eq!(pd.unit(), "unit (1 prefill + 3 decode)");
    }
}
