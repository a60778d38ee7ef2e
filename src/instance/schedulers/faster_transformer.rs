//! FasterTransformer's static request-level batches.

use super::blocks::{admit_whole_requests, plan_every_running};
use super::{BatchScheduler, BatcherEntry, Ordering, count};
use crate::instance::{Limits, Scheduler};
use crate::kv::KvCache;
use crate::time::SimTime;
pub const FASTER_TRANSFORMER: BatcherEntry = BatcherEntry {
    name: "faster_transformer",
    description: "FasterTransformer static batching: a batch of up to max_batch_size requests (KV for prompt + output reserved) runs until all finish; new requests wait for the next batch",
    params: &[(
        "max_batch_size",
        "requests per batch (default 0 = the group's max_num_seqs)",
    )],
    free_params: false,
    build: |args| {
        Ok(Box::new(FasterTransformer {
            cap: count(args, "max_batch_size", 0.0, 0)?,
        }))
    },
};

struct FasterTransformer {
    cap: u32,
}

impl BatchScheduler for FasterTransformer {
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
        // A new batch only when the last one has finished.
        if s.running.is_empty() {
            admit_whole_requests(s, kv, l, self.cap, now, o);
        }
        plan_every_running(s, l, now);
    }
}
