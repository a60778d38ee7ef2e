//! The shared KV store (`cluster.kv_store`): one block store every instance of the cluster
//! reads and writes over its own link, as LMCache's remote backends and Mooncake Store are
//! used (a prefix computed on one instance is loaded by another instead of being
//! recomputed).
//!
//! A block written at `t` travels over the writer's link (`block_us` per block, one write
//! after another) and is visible to every instance from `ready = max(t, link free) +
//! block_us + latency_us`; until then a lookup misses. A hit loads the block into a fresh GPU
//! block before the step that needs it (priced by the Execute stage). The store keeps
//! `capacity` blocks, LRU or FIFO, and is not emptied when an instance crashes.

use std::sync::{Arc, Mutex};

use super::cpu::CpuTier;
use super::index::HashIndex;
use super::{KvEventKind, KvTier};

/// When the store is written (`cluster.kv_store.write`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreWrite {
    /// A block is written when it leaves the instance's last local tier (the GPU, the CPU
    /// tier or the NVMe tier, whichever is lowest).
    #[default]
    WriteBack,
    /// Every full prompt block is written as soon as it is computed (LMCache's default:
    /// KV is stored as the prefill produces it).
    WriteThrough,
}

impl StoreWrite {
    /// `write_back` or `write_through`, as outputs name it.
    pub fn name(self) -> &'static str {
        match self {
            StoreWrite::WriteBack => "write_back",
            StoreWrite::WriteThrough => "write_through",
        }
    }
}

/// The store's contents and counts, shared by every instance's [`StoreLink`].
#[derive(Debug)]
pub struct KvStore {
    /// The blocks, by content id; a slot's stamp is the time the block becomes readable.
    tier: CpuTier,
    /// The instance that wrote each block.
    writer: HashIndex,
    pub write: StoreWrite,
    /// Blocks written (each once per stay in the store).
    pub written: u64,
    /// Blocks loaded by an instance for a prefix hit.
    pub loaded: u64,
    /// Of those, blocks another instance had written.
    pub cross_instance_loaded: u64,
    /// Blocks dropped to make room.
    pub evicted: u64,
}

impl KvStore {
    /// An empty store of `capacity` blocks.
    pub fn new(capacity: u32, write: StoreWrite, fifo: bool) -> Self {
        KvStore {
            tier: CpuTier::of(KvTier::Store, capacity, 0, fifo),
            writer: HashIndex::default(),
            write,
            written: 0,
            loaded: 0,
            cross_instance_loaded: 0,
            evicted: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.tier.capacity()
    }

    /// Blocks held.
    pub fn len(&self) -> u32 {
        self.tier.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tier.is_empty()
    }

    /// True if block `hash` is held and readable at `now_us`.
    pub fn ready(&self, hash: u64, now_us: u64) -> bool {
        self.tier.stamp(hash).is_some_and(|t| t <= now_us)
    }

    /// Writes block `hash` from `instance`, readable from `ready_us`; false if it was held
    /// already (nothing is sent).
    fn put(
        &mut self,
        hash: u64,
        instance: u32,
        ready_us: u64,
        events: &mut Option<Vec<(KvEventKind, u64)>>,
    ) -> bool {
        if self.tier.capacity() == 0 {
            return false;
        }
        if self.tier.contains(hash) {
            // Refreshed (LRU); the first copy stays.
            self.tier.offload(hash, events);
            return false;
        }
        self.tier.now_us = ready_us;
        if let Some(old) = self.tier.offload(hash, events) {
            self.writer.remove(&old);
            self.evicted += 1;
        }
        self.writer.insert(hash, instance);
        self.written += 1;
        true
    }

    /// Loads block `hash` for `instance` at `now_us`; false if not held or not yet readable.
    fn load(&mut self, hash: u64, instance: u32, now_us: u64) -> bool {
        if !self.ready(hash, now_us) {
            return false;
        }
        self.tier.now_us = now_us;
        self.tier.reload(hash);
        self.loaded += 1;
        if self.writer.get(&hash) != Some(&instance) {
            self.cross_instance_loaded += 1;
        }
        true
    }

    /// Checks the block list against the index.
    pub fn audit(&self) -> Result<(), String> {
        self.tier.audit()?;
        if self.writer.len() != self.tier.len() as usize {
            return Err(format!(
                "the KV store holds {} blocks but knows the writer of {}",
                self.tier.len(),
                self.writer.len()
            ));
        }
        Ok(())
    }
}

/// One instance's link to the shared [`KvStore`].
#[derive(Clone, Debug)]
pub struct StoreLink {
    pub store: Arc<Mutex<KvStore>>,
    pub instance: u32,
    /// Time to move one block over this instance's link (µs).
    pub block_us: f64,
    /// Fixed latency of a write, and of the loads of one step (µs).
    pub latency_us: f64,
    /// Cached `store.write == WriteThrough`.
    pub(super) write_through: bool,
    pub(super) now_us: u64,
    /// When the link is free for the next write (µs).
    link_free_us: f64,
    /// Loads since the last [`super::KvCache::take_loads`].
    pub(super) pending_loads: u32,
    /// Blocks this instance loaded from the store (cumulative).
    pub loaded: u64,
    /// With `cluster.topology`: the links to the store and back, shared with every other
    /// transfer that crosses them (then `block_us` is not used).
    pub path: Option<crate::network::StorePath>,
}

impl StoreLink {
    pub fn new(store: Arc<Mutex<KvStore>>, instance: u32, block_us: f64, latency_us: f64) -> Self {
        let write_through = lock(&store).write == StoreWrite::WriteThrough;
        StoreLink {
            store,
            instance,
            block_us,
            latency_us,
            write_through,
            now_us: 0,
            link_free_us: 0.0,
            pending_loads: 0,
            loaded: 0,
            path: None,
        }
    }

    /// µs from `now_us` until `blocks` blocks loaded from the store now are in: the
    /// latency, then the blocks over this instance's link (or, with a topology, over the
    /// links of its path, after the transfers already on them).
    pub fn load_us(&self, now_us: u64, blocks: u32) -> f64 {
        match &self.path {
            None => self.latency_us + f64::from(blocks) * self.block_us,
            Some(p) => {
                let start = now_us + (self.latency_us + p.latency_us).ceil() as u64;
                (p.send(true, now_us, start, blocks) - now_us) as f64
            }
        }
    }

    /// True if the store holds block `hash`, readable now.
    pub(super) fn ready(&self, hash: u64) -> bool {
        lock(&self.store).ready(hash, self.now_us)
    }

    /// Sends block `hash` to the store (after the link's earlier writes).
    pub(super) fn put(&mut self, hash: u64, events: &mut Option<Vec<(KvEventKind, u64)>>) {
        let now = self.now_us as f64;
        let sent = match &self.path {
            None => self.link_free_us.max(now) + self.block_us,
            // A block the store holds is not sent (put refreshes it); only a new one takes
            // its share of the links.
            Some(_) if lock(&self.store).tier.contains(hash) => now,
            Some(p) => p.send(false, self.now_us, self.now_us, 1) as f64 + p.latency_us,
        };
        let ready = (sent + self.latency_us).ceil() as u64;
        if lock(&self.store).put(hash, self.instance, ready, events) {
            self.link_free_us = sent;
        }
    }

    /// Loads block `hash` from the store; false if it is not readable now.
    pub(super) fn load(&mut self, hash: u64) -> bool {
        let hit = lock(&self.store).load(hash, self.instance, self.now_us);
        if hit {
            self.pending_loads += 1;
            self.loaded += 1;
        }
        hit
    }
}

/// The store's lock: the simulation runs on one thread, so it is never contended or
/// poisoned by another.
pub fn lock(store: &Mutex<KvStore>) -> std::sync::MutexGuard<'_, KvStore> {
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
