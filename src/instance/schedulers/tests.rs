//! The built-in schedulers step by step, against hand-worked batches.

use super::*;
use crate::instance::Seq;
use crate::policy::{ConstantPriority, Fcfs, any_request};
use crate::request::Lifecycle;
use crate::scenario::PreemptionOrder;
use crate::slo::SloTable;

fn limits(max_num_seqs: u32, budget: u32) -> Limits {
    Limits::plain(max_num_seqs, budget)
}

/// (request id, tokens, prefill) of each step.
type Steps = Vec<Vec<(u64, u32, bool)>>;

/// Forms and applies steps until every request finished (as the Complete stage does:
/// progress, a token when the known tokens are computed, release when done).
fn run(
    name: &str,
    params: &[(&str, f64)],
    requests: &[(u32, u32)],
    kv_blocks: u32,
    l: Limits,
) -> Steps {
    let params: std::collections::BTreeMap<String, f64> =
        params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let labels = crate::labels::Labels::default();
    let entry = [
        VLLM_V1,
        VLLM_V0,
        SARATHI,
        ORCA,
        FASTER_TRANSFORMER,
        LIGHTLLM,
    ]
    .into_iter()
    .find(|e| e.name == name)
    .unwrap();
    let mut b = (entry.build)(&PolicyArgs::new(1, &params, &labels)).unwrap();
    let table = SloTable::default();
    let o = Ordering {
        order: &Fcfs,
        priority: &ConstantPriority,
        table: &table,
        preemption: PreemptionOrder::Tail,
    };
    let mut kv = KvCache::new(kv_blocks, 16);
    let mut s = Scheduler::default();
    for (id, &(input, output)) in requests.iter().enumerate() {
        let mut spec = any_request();
        spec.id = id as u64;
        spec.input_tokens = input;
        spec.output_tokens = output;
        spec.content = crate::request::PromptContent::Simple {
            prefix_id: 0,
            prefix_tokens: 0,
            unique_id: id as u64 + 1,
        };
        s.waiting
            .push_back(Seq::new(Entity::PLACEHOLDER, spec, Lifecycle::default()));
    }
    let mut steps = Vec::new();
    for step in 0..1000 {
        if !s.has_work() {
            return steps;
        }
        let now = SimTime(step);
        b.form(&mut s, &mut kv, &l, now, &o);
        steps.push(
            s.plan
                .iter()
                .map(|p| (s.running[p.slot as usize].spec.id, p.tokens, p.prefill))
                .collect(),
        );
        let plan = std::mem::take(&mut s.plan);
        for p in &plan {
            let q = &mut s.running[p.slot as usize];
            q.progress += p.tokens;
            if q.progress >= q.known_tokens() {
                q.generated += 1;
                if q.generated >= q.spec.output_tokens {
                    kv.release(&mut q.kv);
                }
            }
        }
        s.running.retain(|q| q.generated < q.spec.output_tokens);
        assert!(kv.conserves_blocks());
    }
    panic!("{name} did not finish: {steps:?}");
}

const P: bool = true;
const D: bool = false;

#[test]
fn vllm_v1_chunks_prefills_into_the_budget_running_first() {
    // A = 40 → 3 tokens, B = 30 → 2; budget 32.
    let steps = run("vllm_v1", &[], &[(40, 3), (30, 2)], 1000, limits(8, 32));
    assert_eq!(
        steps,
        vec![
            vec![(0, 32, P)],
            vec![(0, 8, P), (1, 24, P)],
            vec![(0, 1, D), (1, 6, P)],
            vec![(0, 1, D), (1, 1, D)],
        ]
    );
}

#[test]
fn vllm_v0_never_mixes_prefills_and_decodes() {
    // A's 40-token prompt exceeds the budget of 32 and runs alone; B's prefill comes
    // before any decode; then decodes only.
    let steps = run("vllm_v0", &[], &[(40, 3), (30, 2)], 1000, limits(8, 32));
    assert_eq!(
        steps,
        vec![
            vec![(0, 40, P)],
            vec![(1, 30, P)],
            vec![(0, 1, D), (1, 1, D)],
            vec![(0, 1, D)],
        ]
    );
}

#[test]
fn sarathi_puts_decodes_first_and_chunks_prefills_into_the_fixed_budget() {
    // chunk_size 16: A's prompt takes 16 + 16 + 8; B's 30 go in as 8 + 15 + 7 around
    // A's decodes, which always come first.
    let steps = run(
        "sarathi",
        &[("chunk_size", 16.0)],
        &[(40, 3), (30, 2)],
        1000,
        limits(8, 2048),
    );
    assert_eq!(
        steps,
        vec![
            vec![(0, 16, P)],
            vec![(0, 16, P)],
            vec![(0, 8, P), (1, 8, P)],
            vec![(0, 1, D), (1, 15, P)],
            vec![(0, 1, D), (1, 7, P)],
            vec![(1, 1, D)],
        ]
    );
}

#[test]
fn orca_reserves_the_whole_request_and_batches_whole_prompts_with_decodes() {
    // Both whole prompts in the first iteration; KV for 43 and 32 tokens (3 + 2
    // blocks) held from admission. With 4 blocks only A fits until it is done.
    let steps = run("orca", &[], &[(40, 3), (30, 2)], 1000, limits(8, 32));
    assert_eq!(
        steps,
        vec![
            vec![(0, 40, P), (1, 30, P)],
            vec![(0, 1, D), (1, 1, D)],
            vec![(0, 1, D)],
        ]
    );
    let steps = run("orca", &[], &[(40, 3), (30, 2)], 4, limits(8, 32));
    assert_eq!(
        steps,
        vec![
            vec![(0, 40, P)],
            vec![(0, 1, D)],
            vec![(0, 1, D)],
            vec![(1, 30, P)],
            vec![(1, 1, D)],
        ]
    );
}

#[test]
fn faster_transformer_runs_static_batches_to_the_end() {
    // Batches of 2: A and B together; C waits until both finished although B ends
    // two steps before A.
    let steps = run(
        "faster_transformer",
        &[("max_batch_size", 2.0)],
        &[(40, 4), (30, 2), (20, 1)],
        1000,
        limits(8, 32),
    );
    assert_eq!(
        steps,
        vec![
            vec![(0, 40, P), (1, 30, P)],
            vec![(0, 1, D), (1, 1, D)],
            vec![(0, 1, D)],
            vec![(0, 1, D)],
            vec![(2, 20, P)],
        ]
    );
}

#[test]
fn lightllm_admits_only_when_the_future_peak_fits() {
    // 6 blocks of 16. A (40 → 20) alone peaks at ⌈60/16⌉ = 4 blocks. B (30 → 20) next to
    // A peaks at 4 + 4 = 8 > 6 while A has more than 2 tokens to go: with A at 57
    // tokens and 2 to go, 4 + ⌈32/16⌉ = 6 fits, after A's 18th token (step 19). The
    // KV cache itself had room for B from step 2 on (A holds 3 or 4 blocks).
    let steps = run("lightllm", &[], &[(40, 20), (30, 20)], 6, limits(8, 128));
    assert_eq!(steps[0], vec![(0, 40, P)]);
    for (k, step) in steps.iter().enumerate().take(18).skip(1) {
        assert_eq!(step, &vec![(0, 1, D)], "step {}", k + 1);
    }
    assert_eq!(steps[18], vec![(1, 30, P)]);
    assert_eq!(steps[19], vec![(0, 1, D), (1, 1, D)]);
    // A's last 2 tokens with B (steps 20–21), then B's 17 remaining decodes alone.
    assert_eq!(steps.len(), 19 + 2 + 17);
    // The estimate itself: the peak is at some request's last step.
    assert_eq!(future_peak_blocks(&mut [(40, 19), (30, 20)], 16), 8);
    assert_eq!(future_peak_blocks(&mut [(57, 2), (30, 20)], 16), 6);
    assert_eq!(future_peak_blocks(&mut [], 16), 0);
}
