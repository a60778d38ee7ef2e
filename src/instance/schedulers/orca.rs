//! Orca's iteration-level batching (OSDI 2022).

use super::blocks::{admit_whole_requests, plan_every_running};
use super::{BatchScheduler, BatcherEntry, Ordering, count};
use crate::instance::{Limits, Scheduler};
use crate::kv::KvCache;
use crate::time::SimTime;
pub const ORCA: BatcherEntry = BatcherEntry {
    name: "orca",
    description: "Orca iteration-level batching: whole prompts and decodes together, KV for prompt + output reserved at admission (no paging gains, no preemption), no prefix cache",
    params: &[(
        "max_batch_size",
        "most requests in a batch (default 0 = the group's max_num_seqs)",
    )],
    free_params: false,
    build: |args| {
        Ok(Box::new(Orca {
            cap: count(args, "max_batch_size", 0.0, 0)?,
        }))
    },
};

struct Orca {
    cap: u32,
}

impl BatchScheduler for Orca {
    fn reserves_whole_request(&self) -> bool {
        true
    }

    fn form(
        &mut self,
        s: &mut Scheduler,
        kv: &mut KvCache,
        l: &Limits,
        now: SimTime,
        o: &Ordering<'_>,
    ) {
        s.plan.clear();
        admit_whole_requests(s, kv, l, self.cap, now, o);
        plan_every_running(s, l, now);
    }
}
