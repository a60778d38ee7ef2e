//! Sarathi-Serve's stall-free batching (OSDI 2024).

use super::blocks::{Grow, admit_head, grow_or_preempt, order_waiting, plan};
use super::{BatchScheduler, BatcherEntry, Ordering, count};
use crate::instance::{Limits, Scheduler};
use crate::kv::KvCache;
use crate::time::SimTime;
pub const SARATHI: BatcherEntry = BatcherEntry {
    name: "sarathi",
    description: "Sarathi-Serve stall-free batching: every running decode first, then prefill chunks (running, then waiting) into a fixed chunk_size token budget",
    params: &[(
        "chunk_size",
        "tokens per step, decodes included (default 512)",
    )],
    free_params: false,
    build: |args| {
        let chunk = count(args, "chunk_size", 512.0, 1)?;
        Ok(Box::new(Sarathi { chunk }))
    },
};

struct Sarathi {
    chunk: u32,
}

impl BatchScheduler for Sarathi {
    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        let mut budget = self.chunk;
        let mut preempted = false;
        // Pass 1: decodes; pass 2: prefill chunks of running requests.
        for decodes in [true, false] {
            let mut i = 0;
            while i < s.running.len() && budget > 0 {
                let seq = &s.running[i];
                if seq.in_prefill() == decodes || (l.pp > 1 && seq.busy_until > now) {
                    i += 1;
                    continue;
                }
                let tokens = if decodes {
                    1
                } else {
                    (seq.known_tokens() - seq.progress).min(budget)
                };
                let target = seq.progress + tokens;
                // A prefill chunk may preempt only while nothing is planned: the victims
                // (the tail) could be decodes planned in the first pass.
                if !decodes && !s.plan.is_empty() {
                    if !kv.grow(&mut s.running[i].kv, target) {
                        break;
                    }
                } else {
                    match grow_or_preempt(s, kv, i, target, now, o, &mut preempted) {
                        Grow::Fits => {}
                        Grow::Wait => {
                            i += 1;
                            continue;
                        }
                        Grow::Stop => break,
                    }
                }
                plan(s, i, tokens, !decodes);
                budget -= tokens;
                i += 1;
            }
        }
        if preempted {
            return;
        }
        // Pass 3: new requests, a chunk each, into what is left.
        order_waiting(s, now, o);
        while (s.running.len() as u32) < l.max_num_seqs && budget > 0 {
            let b = budget;
            let bs = kv.block_size();
            // Reserve the cached prefix plus this step's chunk.
            let Some(head) = s.waiting.front() else { break };
            let cached = kv.cached_prefix_blocks(
                &head.spec.content,
                head.spec.input_tokens,
                head.known_tokens(),
            ) * bs;
            let chunk = (head.known_tokens() - cached).min(b);
            if !admit_head(s, kv, |_, _| cached + chunk, true, now) {
                break;
            }
            let slot = s.running.len() - 1;
            plan(s, slot, chunk, true);
            budget -= chunk;
        }
    }
}
