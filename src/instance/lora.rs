//! Multi-LoRA on an instance, as vLLM's v1 engine serves it (`cluster.groups[i].lora`,
//! docs/lora.md).
//!
//! - **Scheduling** (`vllm/v1/core/sched/scheduler.py`): the adapters of the running
//!   requests a step schedules count against `max_loras`; a waiting request whose adapter
//!   is not among them once `max_loras` are is skipped for this step (it keeps its place)
//!   and the queue goes on behind it ([`may_join`](Adapters::may_join)).
//! - **Slots** (`LRUCacheWorkerLoRAManager`): host memory holds up to `max_cpu_loras`
//!   adapters and the GPU `max_loras`, each least recently used first out. Before a step
//!   runs, the step's adapters are activated in batch order: one not in host memory is read
//!   from storage first (evicting host memory's oldest, which also leaves the GPU), then one
//!   not on the GPU is copied into a slot (evicting the GPU's oldest). The step waits for
//!   both ([`Adapters::prepare`]).
//! - **Kernels**: a step with any adapter pays the LoRA kernels
//!   ([`LoraConfig::kernel_us`]).
//!
//! What the routers see of it is published in [`crate::engine::ClusterView::adapters`].

use std::sync::Arc;

use crate::latency::lora::LoraConfig;
use crate::time::SimDuration;

/// An instance's adapters: its group's configuration, what its host memory and GPU slots
/// hold, and what it counted.
#[derive(Debug)]
pub struct Adapters {
    pub cfg: Arc<LoraConfig>,
    /// Each adapter's rank (by index, `workload.adapters`).
    pub ranks: Arc<[u32]>,
    /// In host memory, least recently used first.
    pub cpu: Vec<u32>,
    /// In GPU slots, least recently used first.
    pub gpu: Vec<u32>,
    /// Reads from storage, copies to a GPU slot, per adapter.
    pub loads: Vec<u64>,
    pub activations: Vec<u64>,
    /// Σ µs steps waited for loads and copies, and Σ µs of LoRA kernels.
    pub load_us: u64,
    pub kernel_us: u64,
    /// Steps that ran with at least one adapter.
    pub steps: u64,
    /// The step's adapters, in batch order (scratch).
    step: Vec<u32>,
    /// The adapters of the requests batch formation has scheduled so far (scratch).
    pub(crate) joined: Vec<u32>,
}

impl Adapters {
    pub fn new(cfg: Arc<LoraConfig>, ranks: Arc<[u32]>) -> Self {
        let n = ranks.len();
        Adapters {
            cfg,
            ranks,
            cpu: Vec::new(),
            gpu: Vec::new(),
            loads: vec![0; n],
            activations: vec![0; n],
            load_us: 0,
            kernel_us: 0,
            steps: 0,
            step: Vec::new(),
            joined: Vec::new(),
        }
    }

    /// Forgets every adapter held (a crash or a restart empties host and GPU memory).
    pub fn clear(&mut self) {
        self.cpu.clear();
        self.gpu.clear();
    }

    /// vLLM's `max_loras` rule: a request with `adapter` may join a step whose scheduled
    /// requests use `scheduled` adapters.
    pub fn may_join(&self, scheduled: &[u32], adapter: Option<u32>) -> bool {
        match adapter {
            None => true,
            Some(a) => scheduled.contains(&a) || (scheduled.len() as u32) < self.cfg.max_loras,
        }
    }

    /// Makes the step's adapters (`adapters`, in batch order, repeats allowed) resident and
    /// prices the step's LoRA work over `tokens` tokens: (µs waited for loads and copies,
    /// µs of kernels).
    pub fn prepare(
        &mut self,
        adapters: impl Iterator<Item = Option<u32>>,
        tokens: u32,
    ) -> (SimDuration, SimDuration) {
        self.step.clear();
        for a in adapters.flatten() {
            if !self.step.contains(&a) {
                self.step.push(a);
            }
        }
        if self.step.is_empty() {
            return (SimDuration::ZERO, SimDuration::ZERO);
        }
        let mut load = 0.0;
        for k in 0..self.step.len() {
            let a = self.step[k];
            let rank = self
                .ranks
                .get(a as usize)
                .copied()
                .unwrap_or(self.cfg.max_rank);
            if touch(&mut self.cpu, a) {
                if self.cpu.len() as u32 > self.cfg.max_cpu_loras {
                    let out = self.cpu.remove(0);
                    self.gpu.retain(|&x| x != out);
                }
                load += self.cfg.disk_us(rank);
                self.loads[a as usize] += 1;
            }
            if touch(&mut self.gpu, a) {
                if self.gpu.len() as u32 > self.cfg.max_loras {
                    self.gpu.remove(0);
                }
                load += self.cfg.host_us(rank);
                self.activations[a as usize] += 1;
            }
        }
        let load = SimDuration::from_us_f64(load);
        let kernels = SimDuration::from_us_f64(self.cfg.kernel_us(tokens, self.step.len() as u32));
        self.load_us += load.as_us();
        self.kernel_us += kernels.as_us();
        self.steps += 1;
        (load, kernels)
    }
}

/// Moves `a` to the most recently used end of `lru`; true if it was not there (pushed).
fn touch(lru: &mut Vec<u32>, a: u32) -> bool {
    match lru.iter().position(|&x| x == a) {
        Some(i) => {
            lru.remove(i);
            lru.push(a);
            false
        }
        None => {
            lru.push(a);
            true
        }
    }
}

/// What an instance reports of its adapters to the routers (vLLM's
/// `vllm:lora_requests_info`): the distinct adapters of its `running` and of its `waiting`
/// requests, in first-seen order.
#[inline(never)]
pub(crate) fn report(
    out: &mut crate::engine::InstanceAdapters,
    running: impl Iterator<Item = Option<u32>>,
    waiting: impl Iterator<Item = Option<u32>>,
) {
    fn distinct(out: &mut Vec<u32>, adapters: impl Iterator<Item = Option<u32>>) {
        out.clear();
        for a in adapters.flatten() {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    distinct(&mut out.running, running);
    distinct(&mut out.waiting, waiting);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapters(max_loras: u32, max_cpu_loras: u32) -> Adapters {
        let m = crate::model::ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
        let gpu = crate::model::find_gpu("H100").unwrap();
        let cfg = LoraConfig::new(
            &m,
            &gpu,
            1,
            max_loras,
            max_cpu_loras,
            16,
            2.0,
            0.0,
            50.0,
            10.0,
        );
        Adapters::new(Arc::new(cfg), Arc::from(vec![16, 16, 16, 8]))
    }

    #[test]
    fn a_new_adapter_is_read_then_copied_and_a_resident_one_costs_nothing() {
        let mut a = adapters(2, 2);
        // From storage (41,943.04 µs) and over the host link (1,687.7216 µs): 43,630.76 µs,
        // whole µs down.
        let (load, _) = a.prepare([Some(0), None, Some(0)].into_iter(), 3);
        assert_eq!(load, SimDuration(43_630));
        let (load, kernels) = a.prepare([Some(0)].into_iter(), 1);
        assert_eq!(load, SimDuration::ZERO);
        assert!(kernels > SimDuration::ZERO);
        // A rank-8 adapter moves half the bytes: 20,971.52 + 848.8608 µs.
        let (load, _) = a.prepare([Some(3)].into_iter(), 1);
        assert_eq!(load, SimDuration(21_820));
        assert_eq!((a.loads[0], a.activations[0]), (1, 1));
        // No adapter: nothing at all.
        assert_eq!(
            a.prepare([None, None].into_iter(), 2),
            (SimDuration::ZERO, SimDuration::ZERO)
        );
    }

    #[test]
    fn host_memory_keeps_what_the_gpu_slots_drop() {
        let mut a = adapters(1, 2);
        a.prepare([Some(0)].into_iter(), 1);
        a.prepare([Some(1)].into_iter(), 1);
        // Adapter 0 left its GPU slot but stays in host memory: a copy only.
        let (load, _) = a.prepare([Some(0)].into_iter(), 1);
        assert_eq!(load, SimDuration(1_687));
        assert_eq!(a.gpu, vec![0]);
        assert_eq!(a.cpu, vec![1, 0]);
        // A third adapter pushes the least recently used (1) out of host memory.
        a.prepare([Some(2)].into_iter(), 1);
        assert_eq!(a.cpu, vec![0, 2]);
        assert_eq!(a.loads, vec![1, 1, 1, 0]);
        assert_eq!(a.activations, vec![2, 1, 1, 0]);
    }

    #[test]
    fn max_loras_admits_a_known_adapter_or_a_free_slot_only() {
        let a = adapters(2, 2);
        assert!(a.may_join(&[], Some(0)));
        assert!(a.may_join(&[0], Some(1)));
        assert!(a.may_join(&[0, 1], Some(1)));
        assert!(!a.may_join(&[0, 1], Some(2)));
        assert!(a.may_join(&[0, 1], None));
    }
}
