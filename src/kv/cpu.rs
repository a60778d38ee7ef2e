//! The tiers below the GPU of one instance: the CPU offload tier (prefix blocks evicted from
//! the GPU, LRU over host memory) and, below it, a local NVMe tier of the same shape. The
//! shared store ([`super::store`]) keeps its blocks in one too.

use super::index::HashIndex;
use super::{KvEventKind, KvTier, NONE};

/// vLLM-style CPU offload tier: a prefix block evicted from the GPU is copied to host memory
/// (LRU over `capacity` blocks); a later prefix hit on it is reloaded into a fresh GPU block
/// before the step that needs it. Transfers are counted here and priced by the Execute stage
/// into the step that caused them ([`KvCache::take_transfers`]).
#[derive(Debug)]
pub struct CpuTier {
    /// Which tier this is (`Cpu`, `Nvme` or `Store`): the events it records say so.
    pub(super) kind: KvTier,
    /// Evicts the oldest write instead of the least recently used block (hits do not
    /// refresh a block).
    pub(super) fifo: bool,
    pub(super) capacity: u32,
    pub(super) slots: Vec<CpuSlot>,
    pub(super) index: HashIndex,
    pub(super) head: u32,
    pub(super) tail: u32,
    /// Free slot ids (capacity not yet used).
    pub(super) unused: Vec<u32>,
    /// Reloads of blocks offloaded less than this long ago count as thrashing (µs).
    pub thrash_window_us: u64,
    /// Current time (µs), set by the batch stage before it allocates.
    pub now_us: u64,
    /// Blocks copied GPU → CPU (cumulative).
    pub offloaded: u64,
    /// Blocks copied CPU → GPU (cumulative); each is a CPU-tier prefix hit.
    pub reloaded: u64,
    /// Reloads of a block offloaded within `thrash_window_us`.
    pub thrashed: u64,
    /// Transfers since the last [`KvCache::take_transfers`]: (offloaded, reloaded).
    pub(super) pending: (u32, u32),
}

#[derive(Clone, Copy, Debug)]
pub(super) struct CpuSlot {
    pub(super) hash: u64,
    pub(super) offloaded_at: u64,
    pub(super) prev: u32,
    pub(super) next: u32,
}

impl CpuTier {
    /// An empty CPU tier of `capacity` blocks.
    pub fn new(capacity: u32, thrash_window_us: u64) -> Self {
        Self::of(KvTier::Cpu, capacity, thrash_window_us, false)
    }

    /// An empty tier of `kind` and `capacity` blocks, LRU or (`fifo`) first in, first out.
    pub fn of(kind: KvTier, capacity: u32, thrash_window_us: u64, fifo: bool) -> Self {
        CpuTier {
            kind,
            fifo,
            capacity,
            slots: Vec::new(),
            index: HashIndex::default(),
            head: NONE,
            tail: NONE,
            unused: Vec::new(),
            thrash_window_us,
            now_us: 0,
            offloaded: 0,
            reloaded: 0,
            thrashed: 0,
            pending: (0, 0),
        }
    }

    /// Blocks held.
    pub fn len(&self) -> u32 {
        self.index.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn contains(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    /// When block `hash` was written here (µs), if held.
    pub(super) fn stamp(&self, hash: u64) -> Option<u64> {
        self.index
            .get(&hash)
            .map(|&i| self.slots[i as usize].offloaded_at)
    }

    /// Which tier this is.
    pub fn kind(&self) -> KvTier {
        self.kind
    }

    pub(super) fn unlink(&mut self, i: u32) {
        let CpuSlot { prev, next, .. } = self.slots[i as usize];
        if prev == NONE {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    pub(super) fn push_tail(&mut self, i: u32) {
        self.slots[i as usize].prev = self.tail;
        self.slots[i as usize].next = NONE;
        if self.tail == NONE {
            self.head = i;
        } else {
            self.slots[self.tail as usize].next = i;
        }
        self.tail = i;
    }

    /// Copies a block evicted from the tier above to this one (the least recently used or,
    /// FIFO, the oldest block makes room, and is returned for the tier below). A block
    /// already held is only refreshed (LRU).
    pub(super) fn offload(
        &mut self,
        hash: u64,
        events: &mut Option<Vec<(KvEventKind, u64)>>,
    ) -> Option<u64> {
        if self.capacity == 0 {
            return None;
        }
        if let Some(&i) = self.index.get(&hash) {
            if !self.fifo {
                self.unlink(i);
                self.push_tail(i);
            }
            return None;
        }
        let mut evicted = None;
        let i = if let Some(i) = self.unused.pop() {
            i
        } else if (self.slots.len() as u32) < self.capacity {
            self.slots.push(CpuSlot {
                hash: 0,
                offloaded_at: 0,
                prev: NONE,
                next: NONE,
            });
            self.slots.len() as u32 - 1
        } else {
            let victim = self.head;
            self.unlink(victim);
            let old = self.slots[victim as usize].hash;
            self.index.remove(&old);
            if let Some(e) = events.as_mut() {
                e.push((KvEventKind::Evicted { tier: self.kind }, old));
            }
            evicted = Some(old);
            victim
        };
        self.slots[i as usize].hash = hash;
        self.slots[i as usize].offloaded_at = self.now_us;
        self.index.insert(hash, i);
        self.push_tail(i);
        if let Some(e) = events.as_mut() {
            let kind = match self.kind {
                KvTier::Cpu => KvEventKind::Offloaded,
                tier => KvEventKind::Written { tier },
            };
            e.push((kind, hash));
        }
        self.offloaded += 1;
        self.pending.0 += 1;
        evicted
    }

    /// Copies block `hash` back to the GPU (it stays here, most recently used unless FIFO);
    /// false if the tier no longer holds it.
    pub(super) fn reload(&mut self, hash: u64) -> bool {
        let Some(&i) = self.index.get(&hash) else {
            return false;
        };
        if self
            .now_us
            .saturating_sub(self.slots[i as usize].offloaded_at)
            < self.thrash_window_us
        {
            self.thrashed += 1;
        }
        if !self.fifo {
            self.unlink(i);
            self.push_tail(i);
        }
        self.reloaded += 1;
        self.pending.1 += 1;
        true
    }

    /// Checks the LRU list against the index.
    pub(super) fn audit(&self) -> Result<(), String> {
        let mut n = 0u32;
        let mut prev = NONE;
        let mut cur = self.head;
        while cur != NONE {
            let s = &self.slots[cur as usize];
            if s.prev != prev || self.index.get(&s.hash) != Some(&cur) {
                return Err(format!("{:?} tier list broken at slot {cur}", self.kind));
            }
            n += 1;
            if n > self.capacity {
                return Err(format!("{:?} tier list loops", self.kind));
            }
            prev = cur;
            cur = s.next;
        }
        if n != self.len() || n > self.capacity {
            return Err(format!(
                "{:?} tier holds {n} listed blocks, {} indexed, capacity {}",
                self.kind,
                self.len(),
                self.capacity
            ));
        }
        Ok(())
    }
}
