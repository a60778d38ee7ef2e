//! Paged KV cache of one instance: block table, LRU free list, prefix-hash index.
//!
//! Semantics follow vLLM's block manager as described for BLIS (MODELS.md §4.1):
//! - only **full prompt blocks** are hashed; a block's hash chains the previous block's hash
//!   with this block's content, so a hit on block k implies hits on blocks 0..k;
//! - freed blocks go to the **tail** of the free list and keep their hash, so a later request
//!   can claim them back (a prefix-cache hit); fresh blocks are taken from the **head** (the
//!   least recently freed), and only then lose their old hash;
//! - allocation is check-then-act: it either takes every block it needs or changes nothing;
//! - release walks a request's blocks in reverse, so the tail of a prefix is evicted first.
//!
//! Blocks live in a dense table inside the instance's [`KvCache`] component rather than as
//! one entity per block: every block operation is then a `Vec` index (~10 ns) instead of a
//! random `Query::get_mut` (20–100 ns), and no system ever iterates blocks on their own.
//! Every operation is O(1) per block touched (amortised: the index's rebuilds and the free
//! ring's compactions). Invariant INV-4: `allocated + free = total`.
//!
//! The free list is a ring of block numbers in LRU order (`FreeQueue`); a prefix hit on a
//! free block leaves a hole where the block was (each free block records its position),
//! holes are skipped at the head and squeezed out when the ring fills its room (a quarter
//! more entries than blocks). Taking a fresh block reads only the ring: the block record is
//! written, not read, unless the event log or a CPU tier needs the hash it loses.
//!
//! The prefix index (`BlockIndex`) is an open-addressing table of 4-byte slots, twice as many
//! as blocks, each a block number and a tag of its hash (the hash's bits above those the
//! block number takes), so a probe compares tags without touching the block table (a 16-byte
//! record); a cache costs about 29 bytes per block with the free ring (issue 10's budget is
//! 40). It is cleaned lazily: a slot is live only while its block still carries the hash. Reusing a block just clears its hash (no index probe); the table
//! is rebuilt from the blocks when live and stale slots fill 3/4 of it (amortised O(1)).
//!
//! A simulation of many instances touches a few blocks of each at random, so nearly every
//! block access is a cache miss; registration, admission and release read the slots and
//! records they will need first, with no branch on what they hold, so the misses overlap.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use bevy_ecs::prelude::*;

use crate::request::PromptContent;
use crate::time::SimTime;

const NONE: u32 = u32::MAX;

/// Where a cached block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvTier {
    Gpu,
    /// The CPU offload tier (`cpu_kv_blocks`).
    Cpu,
}

/// What happened to a KV block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvEventKind {
    /// A full prompt block computed (or received) here entered the GPU prefix cache.
    Stored,
    /// A cached block left a tier: on the GPU its slot was reused for other tokens; on the
    /// CPU tier it was the least recently used when room was needed (or the instance was
    /// turned off).
    Evicted { tier: KvTier },
    /// A block evicted from the GPU was copied to the CPU tier.
    Offloaded,
    /// A CPU-tier block was copied back into the GPU cache for a prefix hit.
    Reloaded,
    /// A block of a prefilled request arrived from prefill instance `from` (P/D). `block` is
    /// 0 for a prompt's partial last block (only full blocks are content-addressed).
    Transferred { from: u32 },
}

/// A block-level event of one instance's KV cache, as a Bevy [`Message`]: any system may
/// read them with a `MessageReader<KvEvent>` in [`SimSystems::Observe`] (which runs every
/// tick, after every stage that changes caches). Events are produced only while
/// [`KvEvents`] is on (a prefix-aware router, `outputs.kv_events`, or your plugin turns it
/// on); they keep the block table itself out of the ECS (a block is a `Vec` slot, not an
/// entity: see the module docs).
///
/// [`SimSystems::Observe`]: crate::SimSystems::Observe
#[derive(Message, Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvEvent {
    pub time: SimTime,
    pub instance: u32,
    /// Content id: the chained hash of the block's tokens (what prefix caching matches on).
    pub block: u64,
    pub kind: KvEventKind,
}

/// Whether instances record [`KvEvent`]s. Turn it on from your plugin with
/// `app.insert_resource(KvEvents(true))`; the simulation also turns it on when a routing policy
/// reads caches (`RoutingPolicy::wants_kv_events`) or the scenario sets `outputs.kv_events`.
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvEvents(pub bool);

/// Hasher for keys that are already uniformly mixed 64-bit hashes.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type HashIndex = HashMap<u64, u32, BuildHasherDefault<PassThrough>>;

#[derive(Clone, Copy, Debug)]
struct Block {
    /// Content hash of the block if registered in the index, else 0.
    hash: u64,
    ref_count: u32,
    /// While free: its position in the free ring (where a prefix hit on it leaves a hole).
    free_seq: u32,
}

/// Prefix index of a [`KvCache`]: hash -> block, open addressing with linear probing. A
/// slot is one `u32`: block number + 1 in the low `block_bits` bits (0: empty) and, above
/// them, the same bits of the hash it was indexed under (a tag), so a probe compares tags
/// without touching the block table (a false match, 1 in 2^17 for 26,312 blocks, is caught
/// by the block's own hash). See the module docs.
#[derive(Debug, Clone)]
struct BlockIndex {
    slots: Vec<u32>,
    /// The low bits of a slot that hold the block number + 1.
    block_mask: u32,
    /// Slots not empty (live or stale).
    occupied: usize,
}

impl BlockIndex {
    /// A table for `blocks` blocks: twice as many slots (at least 16).
    fn new(blocks: usize) -> Self {
        let block_bits = u32::BITS - (blocks as u32).leading_zeros();
        Self::with_mask(
            blocks,
            u32::MAX.checked_shr(u32::BITS - block_bits).unwrap_or(0),
        )
    }

    /// A table whose slots keep the block number + 1 under `block_mask` (`u32::MAX`: no
    /// tag, every probe reads the block's hash).
    fn with_mask(blocks: usize, block_mask: u32) -> Self {
        BlockIndex {
            slots: vec![0; (2 * blocks).max(16)],
            block_mask,
            occupied: 0,
        }
    }

    /// The slot a probe for `hash` starts at (the high bits of `hash` scaled to the table).
    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// The tag bits of `hash`, where a slot keeps them.
    #[inline]
    fn tag(&self, hash: u64) -> u32 {
        hash as u32 & !self.block_mask
    }

    /// The slot value of block `b` indexed under `hash`.
    #[inline]
    fn entry(&self, hash: u64, b: u32) -> u32 {
        self.tag(hash) | (b + 1)
    }

    /// Where `hash` is indexed: its block (`Ok`), or the empty slot that ends its probe
    /// (`Err`).
    #[inline]
    fn probe(&self, hash: u64, blocks: &[Block]) -> Result<u32, usize> {
        let tag = self.tag(hash);
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return Err(i);
            }
            if s & !self.block_mask == tag {
                let b = (s & self.block_mask) - 1;
                if blocks[b as usize].hash == hash {
                    return Ok(b);
                }
            }
            i += 1;
            if i == self.slots.len() {
                i = 0;
            }
        }
    }

    /// The block carrying `hash`, if it is indexed.
    #[inline]
    fn get(&self, hash: u64, blocks: &[Block]) -> Option<u32> {
        self.probe(hash, blocks).ok()
    }

    /// Indexes block `b` under `hash` and gives the block that hash, unless a block already
    /// carries it; true if it did.
    fn insert(&mut self, hash: u64, b: u32, blocks: &mut [Block]) -> bool {
        if 4 * (self.occupied + 1) > 3 * self.slots.len() {
            self.rebuild(blocks);
        }
        let Err(i) = self.probe(hash, blocks) else {
            return false;
        };
        self.slots[i] = self.entry(hash, b);
        self.occupied += 1;
        blocks[b as usize].hash = hash;
        true
    }

    /// Reads the first slot each of `hashes` probes from, with no branch on what it finds:
    /// the loads go out together and the probes that follow find their slots cached.
    #[inline]
    fn touch(&self, hashes: &[u64]) {
        let mut any = 0;
        for &h in hashes {
            any |= self.slots[self.home(h)];
        }
        std::hint::black_box(any);
    }

    /// Drops every stale slot: re-indexes the blocks that carry a hash.
    fn rebuild(&mut self, blocks: &[Block]) {
        self.slots.fill(0);
        self.occupied = 0;
        for (b, block) in blocks.iter().enumerate() {
            if block.hash == 0 {
                continue;
            }
            let mut i = self.home(block.hash);
            while self.slots[i] != 0 {
                i += 1;
                if i == self.slots.len() {
                    i = 0;
                }
            }
            self.slots[i] = self.entry(block.hash, b as u32);
            self.occupied += 1;
        }
    }
}

/// The free blocks in LRU order (head = least recently freed): a ring of block numbers.
/// A free block taken out of the middle (a prefix hit on it) leaves a hole (`NONE`) at the
/// position it was pushed at (`Block::free_seq`); holes are skipped at the head and squeezed
/// out when the ring is full (it has room for a quarter more entries than there are
/// blocks). Every other entry is a free block, so taking one reads nothing but the ring.
#[derive(Debug)]
struct FreeQueue {
    ring: std::collections::VecDeque<u32>,
    /// The position of `ring[0]` (positions count pushes, wrapping).
    head: u32,
}

impl FreeQueue {
    /// Every block free, in block order.
    fn new(blocks: &mut [Block]) -> Self {
        let n = blocks.len();
        let mut ring = std::collections::VecDeque::with_capacity(n + (n / 4).max(4));
        for (i, block) in blocks.iter_mut().enumerate() {
            block.free_seq = i as u32;
            ring.push_back(i as u32);
        }
        FreeQueue { ring, head: 0 }
    }

    /// Takes the least recently freed block off the head.
    #[inline]
    fn pop(&mut self) -> u32 {
        loop {
            let b = self
                .ring
                .pop_front()
                .expect("take_fresh on an empty free list");
            self.head = self.head.wrapping_add(1);
            if b != NONE {
                return b;
            }
        }
    }

    /// Appends free block `b` at the tail.
    #[inline]
    fn push(&mut self, b: u32, blocks: &mut [Block]) {
        if self.ring.len() == self.ring.capacity() {
            self.compact(blocks);
        }
        blocks[b as usize].free_seq = self.head.wrapping_add(self.ring.len() as u32);
        self.ring.push_back(b);
    }

    /// Reads the records of the next `n` blocks `pop` will hand out, with no branch on what
    /// they hold, so their cache misses overlap and the stores that take them hit (a store
    /// that misses holds up every later store, and a full store buffer stalls everything).
    #[inline]
    fn touch(&self, n: usize, blocks: &[Block]) {
        let mut any = 0;
        for &b in self.ring.iter().take(n) {
            if let Some(block) = blocks.get(b as usize) {
                any |= block.ref_count;
            }
        }
        std::hint::black_box(any);
    }

    /// Takes free block `b` out of the middle: leaves a hole where it was.
    fn remove(&mut self, b: u32, blocks: &[Block]) {
        let k = blocks[b as usize].free_seq.wrapping_sub(self.head) as usize;
        debug_assert_eq!(
            self.ring.get(k),
            Some(&b),
            "a free block is where it was pushed"
        );
        self.ring[k] = NONE;
    }

    /// Squeezes the holes out, keeping the order (amortised O(1) a hole: the ring has room
    /// for a quarter more entries than blocks, and only holes fill that room).
    fn compact(&mut self, blocks: &mut [Block]) {
        let mut kept = 0;
        for k in 0..self.ring.len() {
            let b = self.ring[k];
            if b != NONE {
                blocks[b as usize].free_seq = self.head.wrapping_add(kept as u32);
                self.ring[kept] = b;
                kept += 1;
            }
        }
        self.ring.truncate(kept);
    }

    /// The free blocks with the position each sits at, head first.
    fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ring
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != NONE)
            .map(|(k, &b)| (b, self.head.wrapping_add(k as u32)))
    }
}

/// The blocks one request holds, in token order, plus how far its prompt has been hashed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqBlocks {
    pub blocks: Vec<u32>,
    /// Number of leading blocks whose hash has been computed (registered or claimed).
    hashed: u32,
    /// Hash of block `hashed - 1` (chain state), 0 when `hashed == 0`.
    last_hash: u64,
}

impl SeqBlocks {
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// Mixes a chained block hash (splitmix64 finaliser over the inputs). Never returns 0.
fn chain_hash(prev: u64, content: u64, block_index: u64) -> u64 {
    let mut z = prev ^ content.rotate_left(17) ^ block_index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.max(1)
}

/// The chained hashes of a prompt's full blocks (the same hashes the cache indexes), for
/// router-side prefix indexes.
pub fn prompt_block_hashes(
    content: &PromptContent,
    input_tokens: u32,
    block_size: u32,
) -> Vec<u64> {
    let mut h = 0;
    (0..input_tokens / block_size.max(1))
        .map(|k| {
            h = chain_hash(h, block_content(content, k, block_size), u64::from(k));
            h
        })
        .collect()
}

fn block_content(content: &PromptContent, k: u32, block_size: u32) -> u64 {
    content.block_id(k, block_size)
}

/// The KV cache of one instance.
#[derive(Component, Debug)]
pub struct KvCache {
    block_size: u32,
    blocks: Vec<Block>,
    free_queue: FreeQueue,
    free: u32,
    allocated: u32,
    index: BlockIndex,
    /// Prompt blocks served from the cache at admission (cumulative).
    pub hit_blocks: u64,
    /// Prompt blocks that had to be computed at admission (cumulative).
    pub miss_blocks: u64,
    /// The CPU offload tier, if the instance has one.
    pub cpu: Option<CpuTier>,
    /// Block events since the last [`KvCache::take_events`], while recording.
    events: Option<Vec<(KvEventKind, u64)>>,
}

/// vLLM-style CPU offload tier: a prefix block evicted from the GPU is copied to host memory
/// (LRU over `capacity` blocks); a later prefix hit on it is reloaded into a fresh GPU block
/// before the step that needs it. Transfers are counted here and priced by the Execute stage
/// into the step that caused them ([`KvCache::take_transfers`]).
#[derive(Debug)]
pub struct CpuTier {
    capacity: u32,
    slots: Vec<CpuSlot>,
    index: HashIndex,
    head: u32,
    tail: u32,
    /// Free slot ids (capacity not yet used).
    unused: Vec<u32>,
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
    pending: (u32, u32),
}

#[derive(Clone, Copy, Debug)]
struct CpuSlot {
    hash: u64,
    offloaded_at: u64,
    prev: u32,
    next: u32,
}

impl CpuTier {
    /// An empty tier of `capacity` blocks.
    pub fn new(capacity: u32, thrash_window_us: u64) -> Self {
        CpuTier {
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

    fn unlink(&mut self, i: u32) {
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

    fn push_tail(&mut self, i: u32) {
        self.slots[i as usize].prev = self.tail;
        self.slots[i as usize].next = NONE;
        if self.tail == NONE {
            self.head = i;
        } else {
            self.slots[self.tail as usize].next = i;
        }
        self.tail = i;
    }

    /// Copies a block evicted from the GPU to the tier (the least recently used block makes
    /// room). A block already held is only refreshed.
    fn offload(&mut self, hash: u64, events: &mut Option<Vec<(KvEventKind, u64)>>) {
        if self.capacity == 0 {
            return;
        }
        if let Some(&i) = self.index.get(&hash) {
            self.unlink(i);
            self.push_tail(i);
            return;
        }
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
                e.push((KvEventKind::Evicted { tier: KvTier::Cpu }, old));
            }
            victim
        };
        self.slots[i as usize].hash = hash;
        self.slots[i as usize].offloaded_at = self.now_us;
        self.index.insert(hash, i);
        self.push_tail(i);
        if let Some(e) = events.as_mut() {
            e.push((KvEventKind::Offloaded, hash));
        }
        self.offloaded += 1;
        self.pending.0 += 1;
    }

    /// Copies block `hash` back to the GPU (it stays on the CPU, most recently used); false
    /// if the tier no longer holds it.
    fn reload(&mut self, hash: u64) -> bool {
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
        self.unlink(i);
        self.push_tail(i);
        self.reloaded += 1;
        self.pending.1 += 1;
        true
    }

    /// Checks the LRU list against the index.
    fn audit(&self) -> Result<(), String> {
        let mut n = 0u32;
        let mut prev = NONE;
        let mut cur = self.head;
        while cur != NONE {
            let s = &self.slots[cur as usize];
            if s.prev != prev || self.index.get(&s.hash) != Some(&cur) {
                return Err(format!("CPU tier list broken at slot {cur}"));
            }
            n += 1;
            if n > self.capacity {
                return Err("CPU tier list loops".into());
            }
            prev = cur;
            cur = s.next;
        }
        if n != self.len() || n > self.capacity {
            return Err(format!(
                "CPU tier holds {n} listed blocks, {} indexed, capacity {}",
                self.len(),
                self.capacity
            ));
        }
        Ok(())
    }
}

impl KvCache {
    /// A cache of `total_blocks` blocks of `block_size` tokens, all free.
    pub fn new(total_blocks: u32, block_size: u32) -> Self {
        assert!(
            block_size > 0,
            "block size must be positive (validated upstream)"
        );
        let n = total_blocks as usize;
        let mut blocks = vec![
            Block {
                hash: 0,
                ref_count: 0,
                free_seq: 0,
            };
            n
        ];
        let free_queue = FreeQueue::new(&mut blocks);
        KvCache {
            block_size,
            blocks,
            free_queue,
            free: total_blocks,
            allocated: 0,
            index: BlockIndex::new(n),
            hit_blocks: 0,
            miss_blocks: 0,
            cpu: None,
            events: None,
        }
    }

    /// Starts or stops recording block events ([`KvEvent`]).
    pub fn record_events(&mut self, on: bool) {
        if on != self.events.is_some() {
            self.events = on.then(Vec::new);
        }
    }

    /// True while recording block events.
    pub fn records_events(&self) -> bool {
        self.events.is_some()
    }

    /// Records an event (when recording).
    pub fn note(&mut self, kind: KvEventKind, block: u64) {
        if let Some(e) = self.events.as_mut() {
            e.push((kind, block));
        }
    }

    /// The events recorded since the last call, oldest first.
    pub fn take_events(&mut self) -> impl Iterator<Item = (KvEventKind, u64)> + '_ {
        self.events.iter_mut().flat_map(|e| e.drain(..))
    }

    /// Every cached block by content id and tier: the GPU's prefix-cached blocks (in use or
    /// free), then the CPU tier's, least recently used first.
    pub fn cached_by_tier(&self) -> Vec<(u64, KvTier)> {
        let mut out: Vec<(u64, KvTier)> = self
            .blocks
            .iter()
            .filter(|b| b.hash != 0)
            .map(|b| (b.hash, KvTier::Gpu))
            .collect();
        if let Some(c) = &self.cpu {
            let mut cur = c.head;
            while cur != NONE {
                let slot = &c.slots[cur as usize];
                out.push((slot.hash, KvTier::Cpu));
                cur = slot.next;
            }
        }
        out
    }

    /// Records the eviction of every cached block on both tiers, before the cache is dropped
    /// (an instance turned off).
    pub fn note_cleared(&mut self) {
        if self.events.is_none() {
            return;
        }
        for (block, tier) in self.cached_by_tier() {
            self.note(KvEventKind::Evicted { tier }, block);
        }
    }

    /// Adds a CPU offload tier.
    pub fn with_cpu_tier(mut self, tier: CpuTier) -> Self {
        self.cpu = Some(tier);
        self
    }

    /// Blocks offloaded and reloaded since the last call (to be priced into this step).
    pub fn take_transfers(&mut self) -> (u32, u32) {
        self.cpu
            .as_mut()
            .map_or((0, 0), |c| std::mem::take(&mut c.pending))
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn total_blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    pub fn free_blocks(&self) -> u32 {
        self.free
    }

    /// Blocks held by at least one request.
    pub fn allocated_blocks(&self) -> u32 {
        self.allocated
    }

    /// Fraction of blocks held by requests, in [0, 1].
    pub fn utilization(&self) -> f64 {
        if self.blocks.is_empty() {
            0.0
        } else {
            f64::from(self.allocated) / self.blocks.len() as f64
        }
    }

    /// Prefix-cache hit rate so far: hit blocks / (hit + miss blocks); 0 before any admission.
    pub fn hit_rate(&self) -> f64 {
        let all = self.hit_blocks + self.miss_blocks;
        if all == 0 {
            0.0
        } else {
            self.hit_blocks as f64 / all as f64
        }
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size)
    }

    /// The block holding content `hash`, if the index entry for it is still valid.
    fn lookup(&self, hash: u64) -> Option<u32> {
        self.index.get(hash, &self.blocks)
    }

    /// Number of leading full prompt blocks present in the cache (free or in use), capped so
    /// that at least one of the `known_tokens` the request must have in KV is left to
    /// compute (vLLM recomputes the last token of a fully cached sequence). `known_tokens`
    /// is the prompt length for a new request, prompt + emitted tokens after a preemption.
    pub fn cached_prefix_blocks(
        &self,
        content: &PromptContent,
        input_tokens: u32,
        known_tokens: u32,
    ) -> u32 {
        let cap =
            (input_tokens / self.block_size).min(known_tokens.saturating_sub(1) / self.block_size);
        let mut h = 0;
        for k in 0..cap {
            h = chain_hash(h, block_content(content, k, self.block_size), u64::from(k));
            if self.lookup(h).is_none() && !self.cpu.as_ref().is_some_and(|c| c.contains(h)) {
                return k;
            }
        }
        cap
    }

    /// Admits a request: claims its first `cached_blocks` prompt blocks from the cache and
    /// fresh blocks so that `tokens` tokens fit. All or nothing; returns false (and changes
    /// nothing) if the free list cannot cover it.
    pub fn admit(
        &mut self,
        seq: &mut SeqBlocks,
        content: &PromptContent,
        input_tokens: u32,
        cached_blocks: u32,
        tokens: u32,
    ) -> bool {
        debug_assert!(
            seq.blocks.is_empty(),
            "admit on a request that holds blocks"
        );
        // Check: the hit blocks (on the GPU, or on the CPU tier to reload into fresh blocks),
        // and how many GPU blocks they take off the free list.
        let mut hits = Vec::with_capacity(cached_blocks as usize);
        let mut h = 0;
        let mut from_free = 0;
        for k in 0..cached_blocks {
            h = chain_hash(h, block_content(content, k, self.block_size), u64::from(k));
            match self.lookup(h) {
                Some(b) => {
                    if self.blocks[b as usize].ref_count == 0 {
                        from_free += 1;
                    }
                    hits.push((h, Some(b)));
                }
                None if self.cpu.as_ref().is_some_and(|c| c.contains(h)) => {
                    from_free += 1;
                    hits.push((h, None));
                }
                None => return false,
            }
        }
        let fresh = self.blocks_for(tokens).saturating_sub(cached_blocks);
        if from_free + fresh > self.free {
            return false;
        }
        // Act: claim GPU hits first, so reloads cannot evict them.
        for &(_, b) in &hits {
            if let Some(b) = b {
                self.claim(b);
            }
        }
        for (h, b) in hits {
            let b = match b {
                Some(b) => b,
                None => {
                    let b = self.take_fresh();
                    let indexed = self.index.insert(h, b, &mut self.blocks);
                    debug_assert!(indexed, "a CPU-tier hit is not on the GPU");
                    // (Its CPU copy may have just made room for an earlier block of this
                    // very admission: then nothing is reloaded, and the block counts as
                    // stored.)
                    let reloaded = self.cpu.as_mut().is_some_and(|c| c.reload(h));
                    let kind = if reloaded {
                        KvEventKind::Reloaded
                    } else {
                        KvEventKind::Stored
                    };
                    self.note(kind, h);
                    b
                }
            };
            seq.blocks.push(b);
        }
        seq.hashed = cached_blocks;
        seq.last_hash = h;
        self.free_queue.touch(fresh as usize, &self.blocks);
        for _ in 0..fresh {
            let b = self.take_fresh();
            seq.blocks.push(b);
        }
        let prompt_blocks = self.blocks_for(input_tokens);
        self.hit_blocks += u64::from(cached_blocks);
        self.miss_blocks += u64::from(prompt_blocks.saturating_sub(cached_blocks));
        true
    }

    /// Grows a running request's allocation so that `tokens` tokens fit. All or nothing.
    pub fn grow(&mut self, seq: &mut SeqBlocks, tokens: u32) -> bool {
        let need = self
            .blocks_for(tokens)
            .saturating_sub(seq.blocks.len() as u32);
        if need > self.free {
            return false;
        }
        for _ in 0..need {
            let b = self.take_fresh();
            seq.blocks.push(b);
        }
        true
    }

    /// Registers the hashes of prompt blocks that became full now that `computed_tokens`
    /// tokens of the request are in the cache. A block whose content is already indexed
    /// (another request computed it concurrently) stays unregistered.
    pub fn register_full_blocks(
        &mut self,
        seq: &mut SeqBlocks,
        content: &PromptContent,
        input_tokens: u32,
        computed_tokens: u32,
    ) {
        let full =
            (computed_tokens.min(input_tokens) / self.block_size).min(seq.blocks.len() as u32);
        // In chunks: the chunk's hashes first and their index slots touched together, so
        // the cache misses overlap instead of waiting on each probe (whose first branch goes
        // either way).
        let mut hashes = [0u64; 16];
        while seq.hashed < full {
            let first = seq.hashed;
            let n = (full - first).min(hashes.len() as u32) as usize;
            let mut h = seq.last_hash;
            for (i, slot) in hashes[..n].iter_mut().enumerate() {
                let k = first + i as u32;
                h = chain_hash(h, block_content(content, k, self.block_size), u64::from(k));
                *slot = h;
            }
            self.index.touch(&hashes[..n]);
            for (i, &h) in hashes[..n].iter().enumerate() {
                let b = seq.blocks[first as usize + i];
                if self.index.insert(h, b, &mut self.blocks) {
                    self.note(KvEventKind::Stored, h);
                }
            }
            seq.last_hash = h;
            seq.hashed += n as u32;
        }
    }

    /// Releases every block the request holds, last block first. Blocks whose reference
    /// count drops to zero join the tail of the free list with their hash kept.
    pub fn release(&mut self, seq: &mut SeqBlocks) {
        // Every block record read first, with no branch on what it holds: the cache misses
        // overlap instead of queueing behind the stores of the loop below.
        let mut any = 0;
        for &b in &seq.blocks {
            any |= self.blocks[b as usize].ref_count;
        }
        std::hint::black_box(any);
        while let Some(b) = seq.blocks.pop() {
            let block = &mut self.blocks[b as usize];
            debug_assert!(block.ref_count > 0, "release of a free block {b}");
            block.ref_count -= 1;
            if block.ref_count == 0 {
                self.push_free_tail(b);
            }
        }
        seq.hashed = 0;
        seq.last_hash = 0;
    }

    /// Checks INV-4 in O(1): allocated + free = total.
    pub fn conserves_blocks(&self) -> bool {
        self.allocated + self.free == self.total_blocks()
    }

    /// Checks that the requests holding blocks here account for every reference: each block
    /// in a holder's list is in use, its reference count equals the number of lists naming
    /// it, and the blocks named are exactly the allocated ones. O(references held); `seen`
    /// is scratch space.
    pub fn check_holders<'a>(
        &self,
        holders: impl Iterator<Item = &'a SeqBlocks>,
        seen: &mut std::collections::HashMap<u32, u32>,
    ) -> Result<(), String> {
        seen.clear();
        for h in holders {
            for &b in &h.blocks {
                *seen.entry(b).or_default() += 1;
            }
        }
        for (&b, &n) in seen.iter() {
            let Some(block) = self.blocks.get(b as usize) else {
                return Err(format!("a request holds block {b}, past the cache's end"));
            };
            if block.ref_count != n {
                return Err(format!(
                    "block {b} has reference count {} but {n} requests hold it",
                    block.ref_count
                ));
            }
        }
        if seen.len() != self.allocated as usize {
            return Err(format!(
                "{} blocks are allocated but requests hold {}",
                self.allocated,
                seen.len()
            ));
        }
        Ok(())
    }

    /// Full O(blocks) audit of the free list, reference counts and hash index.
    pub fn audit(&self) -> Result<(), String> {
        let mut on_list = vec![false; self.blocks.len()];
        let mut count = 0u32;
        for (b, at) in self.free_queue.iter() {
            let Some(block) = self.blocks.get(b as usize) else {
                return Err(format!("free list names block {b}, past the cache's end"));
            };
            if block.ref_count != 0 {
                return Err(format!(
                    "block {b} is on the free list with refcount {}",
                    block.ref_count
                ));
            }
            if on_list[b as usize] || block.free_seq != at {
                return Err(format!("block {b} is on the free list twice"));
            }
            on_list[b as usize] = true;
            count += 1;
        }
        if count != self.free {
            return Err(format!(
                "free list holds {count} blocks, counter says {}",
                self.free
            ));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            if !on_list[i] && b.ref_count == 0 {
                return Err(format!("block {i} has refcount 0 but is not free"));
            }
        }
        for (i, b) in self.blocks.iter().enumerate() {
            if b.hash != 0 && self.index.get(b.hash, &self.blocks) != Some(i as u32) {
                return Err(format!(
                    "block {i} carries a hash the index does not map to it"
                ));
            }
        }
        if 4 * self.index.occupied > 3 * self.index.slots.len() {
            return Err(format!(
                "prefix index fills {} of {} slots",
                self.index.occupied,
                self.index.slots.len()
            ));
        }
        if let Some(c) = &self.cpu {
            c.audit()?;
        }
        if !self.conserves_blocks() {
            return Err(format!(
                "allocated {} + free {} != total {}",
                self.allocated,
                self.free,
                self.total_blocks()
            ));
        }
        Ok(())
    }

    fn claim(&mut self, b: u32) {
        if self.blocks[b as usize].ref_count == 0 {
            self.free_queue.remove(b, &self.blocks);
            self.free -= 1;
            self.allocated += 1;
        }
        self.blocks[b as usize].ref_count += 1;
    }

    fn take_fresh(&mut self) -> u32 {
        let b = self.free_queue.pop();
        self.free -= 1;
        self.allocated += 1;
        // Only the event log and the CPU tier need the hash it loses: otherwise the block
        // record is written, not read (one cache miss fewer a block).
        if self.events.is_some() || self.cpu.is_some() {
            let evicted = self.blocks[b as usize].hash;
            if evicted != 0 {
                self.note(KvEventKind::Evicted { tier: KvTier::Gpu }, evicted);
                if let Some(c) = self.cpu.as_mut() {
                    c.offload(evicted, &mut self.events);
                }
            }
        }
        let block = &mut self.blocks[b as usize];
        // Invalidates its index entry, if any (see the module docs).
        block.hash = 0;
        block.ref_count = 1;
        b
    }

    fn push_free_tail(&mut self, b: u32) {
        self.free_queue.push(b, &mut self.blocks);
        self.free += 1;
        self.allocated -= 1;
    }
}

/// How to rebuild an instance's KV cache when it is provisioned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvRecipe {
    pub blocks: u32,
    pub block_size: u32,
    /// (CPU tier blocks, thrash window µs).
    pub cpu: Option<(u32, u64)>,
}

impl KvRecipe {
    pub fn build(&self) -> KvCache {
        let kv = KvCache::new(self.blocks, self.block_size);
        match self.cpu {
            Some((blocks, window)) => kv.with_cpu_tier(CpuTier::new(blocks, window)),
            None => kv,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(prefix_id: u64, prefix_tokens: u32, unique_id: u64) -> PromptContent {
        PromptContent::Simple {
            prefix_id,
            prefix_tokens,
            unique_id,
        }
    }

    /// Traced by hand: a 4-block GPU cache of 4-token blocks with a 2-block CPU tier.
    #[test]
    fn evicted_prefix_blocks_go_to_the_cpu_tier_and_come_back_on_a_hit() {
        let mut kv = KvCache::new(4, 4).with_cpu_tier(CpuTier::new(2, 1_000_000));
        let a = content(0, 0, 11); // 8-token prompt: blocks a0, a1
        let b = content(0, 0, 22); // 16-token prompt: four blocks of its own
        // A computes its prompt in blocks 0 and 1 and leaves; the free list is now
        // [2, 3, 1, 0] (release walks backwards), a0 and a1 still indexed.
        let mut sa = SeqBlocks::default();
        assert!(kv.admit(&mut sa, &a, 8, 0, 8));
        assert_eq!(sa.blocks, [0, 1]);
        kv.register_full_blocks(&mut sa, &a, 8, 8);
        kv.release(&mut sa);
        assert_eq!(kv.take_transfers(), (0, 0));
        // B needs all four blocks: taking 1 and 0 evicts a1 then a0 to the CPU tier.
        let mut sb = SeqBlocks::default();
        kv.cpu.as_mut().unwrap().now_us = 100;
        assert!(kv.admit(&mut sb, &b, 16, 0, 16));
        assert_eq!(sb.blocks, [2, 3, 1, 0]);
        assert_eq!(kv.take_transfers(), (2, 0));
        assert_eq!(kv.cpu.as_ref().unwrap().len(), 2);
        kv.release(&mut sb);
        // A again: a0 and a1 are on the CPU only; the cap (one token must be computed) stops
        // at a0. B released its blocks last first, so the free list is [0, 1, 3, 2]: the
        // reload of a0 takes block 0, A's second block block 1. Offloaded at 100 µs and
        // reloaded at 500,100 µs, within the 1 s window: one thrashing reload.
        assert_eq!(kv.cached_prefix_blocks(&a, 8, 8), 1);
        kv.cpu.as_mut().unwrap().now_us = 500_100;
        let mut sa = SeqBlocks::default();
        assert!(kv.admit(&mut sa, &a, 8, 1, 8));
        assert_eq!(sa.blocks, [0, 1]);
        assert_eq!(kv.take_transfers(), (0, 1));
        let cpu = kv.cpu.as_ref().unwrap();
        assert_eq!((cpu.offloaded, cpu.reloaded, cpu.thrashed), (2, 1, 1));
        assert_eq!(kv.hit_blocks, 1);
        // Block 0 carries a0 on the GPU again: a third request sharing it hits the GPU.
        assert_eq!(kv.lookup(chain_hash(0, a.block_id(0, 4), 0)), Some(0));
        kv.audit().unwrap();
        // A computes and registers both blocks and leaves (free list [3, 2, 1, 0]); B evicts
        // them again, but the CPU tier holds both already: nothing is copied.
        kv.register_full_blocks(&mut sa, &a, 8, 8);
        kv.release(&mut sa);
        let mut sb = SeqBlocks::default();
        assert!(kv.admit(&mut sb, &b, 16, 0, 16));
        assert_eq!(
            kv.take_transfers(),
            (0, 0),
            "both blocks were already on the CPU"
        );
        assert_eq!(kv.cpu.as_ref().unwrap().len(), 2);
        kv.audit().unwrap();
    }

    #[test]
    fn a_full_cpu_tier_drops_its_least_recently_used_block() {
        let mut t = CpuTier::new(2, 0);
        let mut events = Some(Vec::new());
        t.offload(1, &mut events);
        t.offload(2, &mut events);
        t.offload(1, &mut events); // refresh: 2 is now the oldest
        t.offload(3, &mut events);
        assert!(t.contains(1) && t.contains(3) && !t.contains(2));
        assert_eq!(t.offloaded, 3);
        t.audit().unwrap();
        let off = KvEventKind::Offloaded;
        let dropped = KvEventKind::Evicted { tier: KvTier::Cpu };
        assert_eq!(
            events.unwrap(),
            [(off, 1), (off, 2), (dropped, 2), (off, 3)],
            "a refresh is no event; the victim's drop comes before the new block"
        );
    }

    #[test]
    fn a_cache_records_stores_and_evictions_only_while_asked() {
        let mut kv = KvCache::new(2, 16);
        let mut a = SeqBlocks::default();
        assert!(kv.admit(&mut a, &content(1, 0, 7), 32, 0, 32));
        kv.register_full_blocks(&mut a, &content(1, 0, 7), 32, 32);
        assert_eq!(kv.take_events().count(), 0, "not recording");
        kv.release(&mut a);
        kv.record_events(true);
        let mut b = SeqBlocks::default();
        // Two fresh blocks: both cached blocks are reused (evicted), then b's stored.
        assert!(kv.admit(&mut b, &content(2, 0, 7), 32, 0, 32));
        kv.register_full_blocks(&mut b, &content(2, 0, 7), 32, 32);
        let events: Vec<(KvEventKind, u64)> = kv.take_events().collect();
        let gpu = KvEventKind::Evicted { tier: KvTier::Gpu };
        let old = prompt_block_hashes(&content(1, 0, 7), 32, 16);
        let new = prompt_block_hashes(&content(2, 0, 7), 32, 16);
        assert_eq!(
            events,
            [
                (gpu, old[1]),
                (gpu, old[0]),
                (KvEventKind::Stored, new[0]),
                (KvEventKind::Stored, new[1])
            ],
            "release frees the tail first, so it is reused first"
        );
        kv.note_cleared();
        let cleared: Vec<_> = kv.take_events().collect();
        assert_eq!(cleared.len(), 2);
        assert!(cleared.iter().all(|e| e.0 == gpu));
    }

    #[test]
    fn admission_takes_ceil_tokens_over_block_size_and_release_returns_them() {
        let mut kv = KvCache::new(10, 16);
        let mut seq = SeqBlocks::default();
        assert!(kv.admit(&mut seq, &content(1, 0, 7), 33, 0, 33));
        assert_eq!(seq.len(), 3);
        assert_eq!(kv.free_blocks(), 7);
        assert!(kv.grow(&mut seq, 48), "48 tokens still fit in 3 blocks");
        assert_eq!(seq.len(), 3);
        assert!(kv.grow(&mut seq, 49));
        assert_eq!(seq.len(), 4);
        kv.release(&mut seq);
        assert_eq!(kv.free_blocks(), 10);
        kv.audit().unwrap();
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut kv = KvCache::new(4, 16);
        let mut a = SeqBlocks::default();
        assert!(kv.admit(&mut a, &content(0, 0, 1), 48, 0, 48));
        let mut b = SeqBlocks::default();
        assert!(
            !kv.admit(&mut b, &content(0, 0, 2), 32, 0, 32),
            "needs 2, only 1 free"
        );
        assert!(b.is_empty());
        assert_eq!(kv.free_blocks(), 1);
        assert!(!kv.grow(&mut a, 80), "needs 2 more, only 1 free");
        assert_eq!(a.len(), 3);
        kv.audit().unwrap();
    }

    #[test]
    fn a_shared_prefix_is_found_after_its_owner_registers_it() {
        let mut kv = KvCache::new(100, 16);
        let first = content(9, 64, 1);
        let second = content(9, 64, 2);
        let mut a = SeqBlocks::default();
        assert_eq!(kv.cached_prefix_blocks(&first, 100, 100), 0);
        assert!(kv.admit(&mut a, &first, 100, 0, 100));
        // Prefill computed only 40 tokens so far: 2 full blocks, both inside the prefix.
        kv.register_full_blocks(&mut a, &first, 100, 40);
        assert_eq!(kv.cached_prefix_blocks(&second, 100, 100), 2);
        kv.register_full_blocks(&mut a, &first, 100, 100);
        // Blocks 0..4 are prefix (64 tokens), blocks 4 and 5 hold the first request's own
        // tokens, so the second request hits exactly the 4 prefix blocks.
        assert_eq!(kv.cached_prefix_blocks(&second, 100, 100), 4);
        assert_eq!(
            kv.cached_prefix_blocks(&first, 100, 100),
            6,
            "its own 6 full blocks"
        );
        let mut b = SeqBlocks::default();
        assert!(kv.admit(&mut b, &second, 100, 4, 100));
        assert_eq!(&b.blocks[..4], &a.blocks[..4], "shares the prefix blocks");
        assert_eq!(kv.allocated_blocks(), 7 + 3);
        assert_eq!(kv.hit_blocks, 4);
        assert_eq!(kv.miss_blocks, 7 + 3);
        kv.audit().unwrap();
    }

    #[test]
    fn a_fully_cached_prompt_still_computes_its_last_token() {
        let mut kv = KvCache::new(100, 16);
        let c = content(3, 64, 3);
        let mut a = SeqBlocks::default();
        assert!(kv.admit(&mut a, &c, 64, 0, 64));
        kv.register_full_blocks(&mut a, &c, 64, 64);
        assert_eq!(kv.cached_prefix_blocks(&c, 64, 64), 3, "(64 - 1) / 16");
        assert_eq!(kv.cached_prefix_blocks(&c, 65, 65), 4);
    }

    #[test]
    fn freed_blocks_keep_their_hash_until_reused_in_lru_order() {
        let mut kv = KvCache::new(4, 16);
        let c1 = content(0, 0, 1);
        let mut a = SeqBlocks::default();
        assert!(kv.admit(&mut a, &c1, 33, 0, 33));
        kv.register_full_blocks(&mut a, &c1, 33, 33);
        kv.release(&mut a);
        assert_eq!(kv.cached_prefix_blocks(&c1, 33, 33), 2, "hit after release");
        // Free list order now: [3 (never used), 2, 1, 0] — released in reverse. A 1-block
        // request takes block 3, then the next takes block 2 (unhashed partial block), then
        // block 1 (the second prompt block) loses its hash.
        let mut b = SeqBlocks::default();
        assert!(kv.admit(&mut b, &content(0, 0, 2), 16, 0, 16));
        assert_eq!(kv.cached_prefix_blocks(&c1, 33, 33), 2);
        let mut c = SeqBlocks::default();
        assert!(kv.admit(&mut c, &content(0, 0, 3), 32, 0, 32));
        assert_eq!(
            kv.cached_prefix_blocks(&c1, 33, 33),
            1,
            "the later prefix block went first"
        );
        kv.audit().unwrap();
    }

    #[test]
    fn claiming_a_free_cached_block_counts_against_the_free_list() {
        let mut kv = KvCache::new(3, 16);
        let c = content(5, 32, 1);
        let mut a = SeqBlocks::default();
        assert!(kv.admit(&mut a, &c, 33, 0, 33));
        kv.register_full_blocks(&mut a, &c, 33, 33);
        kv.release(&mut a);
        // The second request hits 2 blocks (both free) and needs 1 fresh: 3 of 3 free.
        let c2 = content(5, 32, 2);
        let mut b = SeqBlocks::default();
        assert_eq!(kv.cached_prefix_blocks(&c2, 40, 40), 2);
        assert!(kv.admit(&mut b, &c2, 40, 2, 40));
        assert_eq!(kv.free_blocks(), 0);
        kv.audit().unwrap();
    }

    #[test]
    fn the_prefix_index_stays_bounded_under_churn() {
        let mut kv = KvCache::new(8, 16);
        for id in 0..10_000 {
            let c = content(0, 0, id);
            let mut s = SeqBlocks::default();
            assert!(kv.admit(&mut s, &c, 64, 0, 64));
            kv.register_full_blocks(&mut s, &c, 64, 64);
            kv.release(&mut s);
        }
        assert!(4 * kv.index.occupied <= 3 * kv.index.slots.len());
        assert_eq!(kv.index.slots.len(), 16);
        assert!(
            kv.free_queue.ring.len() <= 8 + 4,
            "stale entries are squeezed out"
        );
        kv.audit().unwrap();
        // The newest request's blocks are still found.
        assert_eq!(kv.cached_prefix_blocks(&content(0, 0, 9_999), 65, 65), 4);
        assert_eq!(kv.cached_prefix_blocks(&content(0, 0, 0), 65, 65), 0);
    }

    /// The free queue against a plain LRU list: fresh blocks come off the head of the list
    /// in order, prefix hits take free blocks out of the middle, released blocks whose last
    /// holder lets go join the tail. Hits on free blocks leave holes in the ring, many times
    /// its spare room, so it is compacted again and again.
    #[test]
    fn the_free_queue_hands_out_blocks_in_lru_order_through_holes_and_compactions() {
        let total = 24u32;
        let mut kv = KvCache::new(total, 4);
        let mut lru: std::collections::VecDeque<u32> = (0..total).collect();
        let mut holders = vec![0u32; total as usize];
        let mut held: Vec<SeqBlocks> = Vec::new();
        let (mut x, mut free_hits, mut compactions) = (88172645463325252u64, 0, 0);
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 2 == 0 && !held.is_empty() {
                let mut s = held.swap_remove((x / 2) as usize % held.len());
                let before = kv.free_queue.ring.len();
                let mut freed = 0;
                for &b in s.blocks.iter().rev() {
                    holders[b as usize] -= 1;
                    if holders[b as usize] == 0 {
                        lru.push_back(b);
                        freed += 1;
                    }
                }
                kv.release(&mut s);
                if kv.free_queue.ring.len() < before + freed {
                    compactions += 1;
                }
            } else {
                // Three shared 8-token prefixes; most requests are all prefix.
                let c = content(x % 3, 8, step);
                let tokens = 9 + (x / 8 % 6) as u32;
                let cached = kv.cached_prefix_blocks(&c, tokens, tokens);
                let mut s = SeqBlocks::default();
                if !kv.admit(&mut s, &c, tokens, cached, tokens) {
                    continue;
                }
                for (k, &b) in s.blocks.iter().enumerate() {
                    if (k as u32) < cached {
                        if holders[b as usize] == 0 {
                            let at = lru.iter().position(|&f| f == b).expect("a free hit");
                            lru.remove(at);
                            free_hits += 1;
                        }
                    } else {
                        assert_eq!(lru.pop_front(), Some(b), "step {step}: LRU order");
                    }
                    holders[b as usize] += 1;
                }
                kv.register_full_blocks(&mut s, &c, tokens, tokens);
                held.push(s);
            }
            let listed: Vec<u32> = kv.free_queue.iter().map(|(b, _)| b).collect();
            assert_eq!(listed, Vec::from(lru.clone()), "step {step}");
            assert!(kv.free_queue.ring.len() <= kv.free_queue.ring.capacity());
        }
        kv.audit().unwrap();
        assert!(free_hits > 1_000, "{free_hits} hits on free blocks");
        assert!(compactions > 10, "{compactions} compactions");
    }

    /// The index against a scan of the blocks, through many rebuilds: a prefix is found
    /// exactly as far as blocks carrying its chain of hashes exist.
    #[test]
    fn the_index_agrees_with_a_scan_of_the_blocks_under_churn() {
        let mut kv = KvCache::new(40, 4);
        assert_eq!(kv.index.block_mask, 63, "40 blocks + 1 take 6 bits");
        churn_against_a_scan(&mut kv);
    }

    /// The same with no tag bits: every probe past a slot reads the block's hash (what a
    /// tag match that is false relies on).
    #[test]
    fn the_index_agrees_with_a_scan_when_every_tag_matches() {
        let mut kv = KvCache::new(40, 4);
        kv.index = BlockIndex::with_mask(40, u32::MAX);
        churn_against_a_scan(&mut kv);
    }

    fn churn_against_a_scan(kv: &mut KvCache) {
        let mut held: Vec<SeqBlocks> = Vec::new();
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..20_000u64 {
            let r = next();
            if r % 3 == 0 && !held.is_empty() {
                let k = (r / 3) as usize % held.len();
                let mut s = held.swap_remove(k);
                kv.release(&mut s);
            } else {
                // Eight shared prefixes of 8 tokens, unique tails; 12..24-token prompts.
                let c = content(r % 8, 8, step);
                let tokens = 12 + (r / 8 % 13) as u32;
                let cached = kv.cached_prefix_blocks(&c, tokens, tokens);
                let naive = prompt_block_hashes(&c, tokens, 4)
                    .iter()
                    .take(((tokens - 1) / 4) as usize)
                    .take_while(|h| kv.blocks.iter().any(|b| b.hash == **h))
                    .count() as u32;
                assert_eq!(cached, naive, "step {step}");
                let mut s = SeqBlocks::default();
                if kv.admit(&mut s, &c, tokens, cached, tokens) {
                    kv.register_full_blocks(&mut s, &c, tokens, tokens);
                    held.push(s);
                }
            }
            if step % 97 == 0 {
                kv.audit().unwrap();
            }
        }
        kv.audit().unwrap();
        assert_eq!(kv.index.slots.len(), 80);
    }
}
