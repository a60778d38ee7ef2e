//! inference-perf's staged shared-prefix load, expanded into workload sources.
//!
//! A population of `prompts × users per prompt` users, each with its system prompt (shared by
//! the prompt's users, so it hits the prefix cache) and a question. Two readings
//! ([`InferencePerfReading`]):
//! - **open loop** (what inference-perf sends): one source per load, each stage's timer
//!   emitting exactly ⌊rate × duration⌋ requests (constant timer) or Poisson arrivals, the
//!   users taking turns; a user's prompt (system prompt + question) is generated once and
//!   repeated each time round, as inference-perf's `SharedPrefixDataGenerator` cycles through
//!   its pre-generated prompts, so from the second round on whole prompts hit the cache;
//!   BLIS's reading gives every request a new question;
//! - **BLIS** (`sim/workload/inference_perf.go`, how BLIS's goldens were made): every user of
//!   every stage is a source of its own. With multi-turn chat a user is one closed-loop session:
//!   it starts one exponential gap (at rate / users) into its stage and sends its even share of
//!   the stage's ⌊rate × duration⌋ requests, each ⌊users / rate⌋ s after the previous one
//!   completed. Without it, a user sends its share with normalised-exponential gaps over a single
//!   stage, or Poisson arrivals at rate / users within its stage's window.

use super::arrival::{Arrivals, StageMode};
use super::{Client, Labels, Lengths, SessionCfg, UserCycle};
use crate::rng;
use crate::scenario::{InferencePerfReading, InferencePerfSpec, Stage};
use crate::time::SimDuration;

/// Tenant label of every inference-perf request.
pub const TENANT: &str = crate::labels::INFERENCE_PERF_TENANT;
/// Base of the prefix-group ids of the system prompts (disjoint from client groups).
const PROMPT_BASE: u64 = 0x6970_0000_0000_0000;
/// BLIS's default timeout of session requests (µs).
const BLIS_SESSION_TIMEOUT_US: u64 = 300_000_000;

/// `total` split over `n` as evenly as possible, the first `total % n` getting one more.
pub fn share(total: u64, n: u64, i: u64) -> u64 {
    total / n + u64::from(i < total % n)
}

pub use super::arrival::stage_requests;

/// The sources of an inference-perf load, appended after the scenario's other sources
/// (`first_client` is the client index the first one gets).
pub fn sources(ip: &InferencePerfSpec, seed: u64, labels: &mut Labels) -> Vec<Client> {
    let sp = &ip.shared_prefix;
    let per_prompt = sp.num_users_per_system_prompt;
    let users = sp.num_unique_system_prompts * per_prompt;
    let tenant = labels.tenant(TENANT);
    let slo_class = labels.slo_class(crate::labels::DEFAULT_SLO_CLASS);
    let timeout_us = ip.timeout_s.map(SimDuration::from_secs_f64);
    let client = |arrivals, prefix_group: u64, session, timeout, stream: String| Client {
        arrivals,
        input: Lengths::Constant(sp.question_len),
        output: Lengths::Constant(sp.output_len),
        prefix_tokens: sp.system_prompt_len,
        prefix_groups: 1,
        prefix_base: PROMPT_BASE + prefix_group,
        pool: None,
        pool_next: 0,
        user_cycle: None,
        session,
        timeout,
        held: 0,
        tenant,
        slo_class,
        priority: 0,
        adapter: None,
        rng: rng::stream(seed, &stream),
    };
    let open = |mode| {
        let mut c = client(
            Arrivals::staged(&ip.stages, mode),
            0,
            None,
            timeout_us,
            "workload/inference_perf".into(),
        );
        c.prefix_groups = sp.num_unique_system_prompts;
        c.user_cycle = Some(UserCycle {
            users,
            per_prompt,
            next: 0,
        });
        // inference-perf generates one question per user once (`_generate_prompts`) and
        // sends `prompts[i % len(prompts)]`: a user's prompt is the same every time round.
        c.pool = Some((users.max(1), Vec::new()));
        vec![c]
    };
    match ip.reading {
        InferencePerfReading::OpenLoop => open(StageMode::NormalizedExp),
        InferencePerfReading::OpenLoopPoisson => open(StageMode::Poisson),
        InferencePerfReading::Blis => {
            let mut out = Vec::new();
            let single = ip.stages.len() == 1;
            let mut start_us = 0u64;
            for (k, stage) in ip.stages.iter().enumerate() {
                let duration_us = SimDuration::from_secs_f64(stage.duration_s).as_us();
                let end_us = if single {
                    u64::MAX
                } else {
                    start_us.saturating_add(duration_us)
                };
                let total = stage_requests(stage);
                let user_rate = stage.rate_per_s / f64::from(users);
                for u in 0..users {
                    let rounds = share(total, u64::from(users), u64::from(u));
                    let stream = format!("workload/inference_perf/{k}/{u}");
                    let prompt = u64::from(u / per_prompt);
                    if sp.enable_multi_turn_chat {
                        if rounds == 0 {
                            continue;
                        }
                        let think = SimDuration((f64::from(users) / stage.rate_per_s * 1e6) as u64);
                        let session = SessionCfg {
                            turns: Lengths::Constant(rounds.min(u64::from(u32::MAX)) as u32),
                            think,
                            accumulate: false,
                        };
                        let timeout = timeout_us.or(Some(SimDuration(BLIS_SESSION_TIMEOUT_US)));
                        out.push(client(
                            Arrivals::once(start_us, end_us, user_rate),
                            prompt,
                            Some(session),
                            timeout,
                            stream,
                        ));
                    } else {
                        let arrivals = if single {
                            if rounds == 0 {
                                continue;
                            }
                            let own = Stage {
                                rate_per_s: rounds as f64 / stage.duration_s,
                                duration_s: stage.duration_s,
                            };
                            Arrivals::staged(&[own], StageMode::NormalizedExp)
                        } else {
                            let idle = Stage {
                                rate_per_s: 0.0,
                                duration_s: start_us as f64 / 1e6,
                            };
                            let own = Stage {
                                rate_per_s: user_rate,
                                duration_s: stage.duration_s,
                            };
                            Arrivals::staged(&[idle, own], StageMode::Poisson)
                        };
                        out.push(client(arrivals, prompt, None, timeout_us, stream));
                    }
                }
                start_us = start_us.saturating_add(duration_us);
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        // BLIS: distributeRequestsEvenly(10, 3) = [4, 3, 3].
        assert_eq!(
            (0..3).map(|i| share(10, 3, i)).collect::<Vec<_>>(),
            [4, 3, 3]
        );
        let total: u64 = (0..45).map(|i| share(1500, 45, i)).sum();
        assert_eq!(total, 1500);
    }

    #[test]
    fn stage_requests_are_rate_times_duration_rounded_down() {
        let s = |r, d| Stage {
            rate_per_s: r,
            duration_s: d,
        };
        assert_eq!(stage_requests(&s(2.5, 600.0)), 1500);
        assert_eq!(stage_requests(&s(0.1, 30.0)), 3);
        assert_eq!(stage_requests(&s(0.7, 10.0)), 7);
        assert_eq!(stage_requests(&s(0.35, 10.0)), 3);
    }

    #[test]
    fn users_take_turns_and_map_to_their_prompt() {
        let mut c = UserCycle {
            users: 6,
            per_prompt: 2,
            next: 0,
        };
        let prompts: Vec<u32> = (0..8).map(|_| c.next_prompt()).collect();
        assert_eq!(prompts, [0, 0, 1, 1, 2, 2, 0, 0]);
    }
}
