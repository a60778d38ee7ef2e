//! The KV cache of one instance: its block table and operations (admit, grow, register,
//! release), the audit of INV-4, and the recipe instances are built from.

use bevy_ecs::prelude::*;

use super::cpu::CpuTier;
use super::free::FreeQueue;
use super::index::BlockIndex;
use super::store::StoreLink;
use super::{Block, KvEventKind, KvTier, NONE, SeqBlocks, SideBlocks, block_content, chain_hash};
use crate::model::KvLayout;
use crate::request::PromptContent;

/// Scratch space of [`KvCache::check_holders`]: a count per block, all zero between calls,
/// and the blocks counted in this call.
#[derive(Default)]
pub struct HolderCounts {
    counts: Vec<u32>,
    touched: Vec<u32>,
}

/// The KV cache of one instance.
#[derive(Component, Debug)]
pub struct KvCache {
    pub(super) block_size: u32,
    pub(super) blocks: Vec<Block>,
    pub(super) free_queue: FreeQueue,
    pub(super) free: u32,
    pub(super) allocated: u32,
    pub(super) index: BlockIndex,
    /// Prompt blocks served from the cache at admission (cumulative).
    pub hit_blocks: u64,
    /// Prompt blocks that had to be computed at admission (cumulative).
    pub miss_blocks: u64,
    /// Of `hit_blocks`, those loaded from a tier below the GPU, by tier. The tiers' own
    /// load counters also count loads that are not prompt admissions (a P/D decode
    /// instance's prefix taken from the shared store instead of over the wire).
    pub lower_hits: LowerHits,
    /// The CPU offload tier, if the instance has one.
    pub cpu: Option<CpuTier>,
    /// The NVMe tier below the CPU tier, if the instance has one.
    pub nvme: Option<Box<CpuTier>>,
    /// The instance's link to the cluster's shared KV store, if there is one.
    pub store: Option<Box<StoreLink>>,
    /// True when any tier lies below the GPU (the hot paths check only this).
    pub(super) lower: bool,
    /// Block events since the last [`KvCache::take_events`], while recording.
    pub(super) events: Option<Vec<(KvEventKind, u64)>>,
    /// Hybrid attention: how a request's blocks are spread over the KV cache groups.
    pub(super) layout: Option<KvLayout>,
}

/// Prompt blocks an admission found below the GPU, by the tier it loaded them from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowerHits {
    pub cpu: u64,
    pub nvme: u64,
    pub store: u64,
}

impl LowerHits {
    pub fn total(&self) -> u64 {
        self.cpu + self.nvme + self.store
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
            lower_hits: LowerHits::default(),
            cpu: None,
            nvme: None,
            store: None,
            lower: false,
            events: None,
            layout: None,
        }
    }

    /// Lays the cache out for a hybrid-attention model: each request also holds the blocks
    /// of the model's other KV cache groups, and a model with linear-attention layers gets
    /// no prefix-cache hits (its recurrent state at a prefix's end is not kept: vLLM's
    /// `mamba_cache_mode` `none`).
    pub fn with_layout(mut self, layout: KvLayout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// The hybrid layout, if the model has one.
    pub fn layout(&self) -> Option<&KvLayout> {
        self.layout.as_ref()
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

    /// Every cached block of the instance by content id and tier: the GPU's prefix-cached
    /// blocks (in use or free), then the CPU tier's and the NVMe tier's, least recently used
    /// first (not the shared store's).
    pub fn cached_by_tier(&self) -> Vec<(u64, KvTier)> {
        let mut out: Vec<(u64, KvTier)> = self
            .blocks
            .iter()
            .filter(|b| b.hash != 0)
            .map(|b| (b.hash, KvTier::Gpu))
            .collect();
        for c in self.cpu.iter().chain(self.nvme.as_deref()) {
            let mut cur = c.head;
            while cur != NONE {
                let slot = &c.slots[cur as usize];
                out.push((slot.hash, c.kind));
                cur = slot.next;
            }
        }
        out
    }

    /// Records the eviction of every cached block on the instance's tiers, before the cache
    /// is dropped (an instance turned off).
    pub fn note_cleared(&mut self) {
        if self.events.is_none() {
            return;
        }
        for (block, tier) in self.cached_by_tier() {
            self.note(KvEventKind::Evicted { tier }, block);
        }
    }

    /// Empties the cache as a crash does: every block free and forgotten on the instance's
    /// tiers (the prefix cache, the CPU and NVMe tiers belong to the server), each cached block
    /// recorded as evicted; the cumulative hit counts and event recording are kept. Every
    /// request must have released its blocks first.
    pub fn wipe(&mut self) {
        debug_assert_eq!(self.allocated, 0, "wiped while blocks are held");
        self.note_cleared();
        let mut fresh = KvCache::new(self.total_blocks(), self.block_size);
        if let Some(c) = &self.cpu {
            let mut tier = CpuTier::new(c.capacity(), c.thrash_window_us);
            (tier.offloaded, tier.reloaded, tier.thrashed) = (c.offloaded, c.reloaded, c.thrashed);
            // Transfers not yet priced into a step never happen.
            tier.now_us = c.now_us;
            fresh = fresh.with_cpu_tier(tier);
        }
        if let Some(n) = &self.nvme {
            let mut tier = CpuTier::of(KvTier::Nvme, n.capacity(), 0, n.fifo);
            (tier.offloaded, tier.reloaded) = (n.offloaded, n.reloaded);
            tier.now_us = n.now_us;
            fresh = fresh.with_nvme_tier(tier);
        }
        // The shared store lives elsewhere: it keeps its blocks.
        if let Some(mut link) = self.store.take() {
            link.pending_loads = 0;
            fresh = fresh.with_store(*link);
        }
        fresh.hit_blocks = self.hit_blocks;
        fresh.miss_blocks = self.miss_blocks;
        fresh.lower_hits = self.lower_hits;
        fresh.events = self.events.take();
        fresh.layout = self.layout;
        *self = fresh;
    }

    /// Adds a CPU offload tier.
    pub fn with_cpu_tier(mut self, tier: CpuTier) -> Self {
        self.cpu = Some(tier);
        self.lower = true;
        self
    }

    /// Adds an NVMe tier (below the CPU tier: blocks the CPU tier evicts go there).
    pub fn with_nvme_tier(mut self, tier: CpuTier) -> Self {
        self.nvme = Some(Box::new(tier));
        self.lower = true;
        self
    }

    /// Connects the instance to the cluster's shared KV store.
    pub fn with_store(mut self, link: StoreLink) -> Self {
        self.store = Some(Box::new(link));
        self.lower = true;
        self
    }

    /// Sets the time the tiers below the GPU stamp and check blocks with (µs): the batch
    /// stage calls it before it admits.
    pub fn set_now(&mut self, now_us: u64) {
        if let Some(c) = self.cpu.as_mut() {
            c.now_us = now_us;
        }
        if let Some(c) = self.nvme.as_mut() {
            c.now_us = now_us;
        }
        if let Some(s) = self.store.as_mut() {
            s.now_us = now_us;
        }
    }

    /// Blocks loaded from the NVMe tier and from the shared store since the last call (to be
    /// priced into this step).
    pub fn take_loads(&mut self) -> (u32, u32) {
        let nvme = self
            .nvme
            .as_mut()
            .map_or(0, |c| std::mem::take(&mut c.pending).1);
        let store = self
            .store
            .as_mut()
            .map_or(0, |s| std::mem::take(&mut s.pending_loads));
        (nvme, store)
    }

    /// True if any tier lies below the GPU (the CPU or NVMe tier or the shared store).
    pub fn has_lower_tiers(&self) -> bool {
        self.lower
    }

    /// True if blocks moved between the GPU and a tier below it since the last
    /// [`take_transfers`](Self::take_transfers) and [`take_loads`](Self::take_loads): a step
    /// is to be priced for them.
    pub fn has_untaken_moves(&self) -> bool {
        self.cpu
            .iter()
            .chain(self.nvme.as_deref())
            .any(|c| c.pending != (0, 0))
            || self.store.as_ref().is_some_and(|s| s.pending_loads > 0)
    }

    /// True if the instance can load blocks from the NVMe tier or the shared store.
    pub fn has_remote_tiers(&self) -> bool {
        self.nvme.is_some() || self.store.is_some()
    }

    /// True if a tier below the GPU holds block `hash` (readable now).
    fn lower_holds(&self, hash: u64) -> bool {
        self.cpu.as_ref().is_some_and(|c| c.contains(hash))
            || self.nvme.as_ref().is_some_and(|c| c.contains(hash))
            || self.store.as_ref().is_some_and(|s| s.ready(hash))
    }

    /// Copies block `hash` from the highest tier below the GPU that holds it; the event that
    /// records it, or `None` if no tier holds it any more.
    fn load_lower(&mut self, hash: u64) -> Option<KvEventKind> {
        if self.cpu.as_mut().is_some_and(|c| c.reload(hash)) {
            return Some(KvEventKind::Reloaded);
        }
        if self.nvme.as_mut().is_some_and(|c| c.reload(hash)) {
            return Some(KvEventKind::Loaded { tier: KvTier::Nvme });
        }
        if self.store.as_mut().is_some_and(|s| s.load(hash)) {
            return Some(KvEventKind::Loaded {
                tier: KvTier::Store,
            });
        }
        None
    }

    /// Moves a block evicted from the GPU down the tiers: to the CPU tier; what that evicts
    /// to the NVMe tier; what leaves the last local tier to the shared store (write-back).
    fn spill(&mut self, hash: u64) {
        let mut down = Some(hash);
        if let Some(c) = self.cpu.as_mut() {
            down = c.offload(hash, &mut self.events);
        }
        if let (Some(h), Some(n)) = (down, self.nvme.as_mut()) {
            down = n.offload(h, &mut self.events);
        }
        if let (Some(h), Some(s)) = (down, self.store.as_mut())
            && !s.write_through
        {
            s.put(h, &mut self.events);
        }
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
    pub(super) fn lookup(&self, hash: u64) -> Option<u32> {
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
        if let Some(l) = &self.layout {
            return hybrid_prefix_hits(self, l, content, cap);
        }
        let mut h = 0;
        for k in 0..cap {
            h = chain_hash(h, block_content(content, k, self.block_size), u64::from(k));
            if self.lookup(h).is_none() && !(self.lower && self.lower_holds(h)) {
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
        // Hybrid: the other groups' blocks, and (every layer sliding) the hit blocks behind
        // the window, which are not held (null).
        let (side, skipped) = match &self.layout {
            Some(l) => hybrid_admission(l, self.block_size, tokens, cached_blocks),
            None => (0, 0),
        };
        // Check: the hit blocks (on the GPU, or on a tier below to load into fresh blocks),
        // and how many GPU blocks they take off the free list.
        let mut hits = Vec::with_capacity(cached_blocks as usize);
        let mut h = 0;
        let mut from_free = 0;
        for k in 0..skipped {
            h = chain_hash(h, block_content(content, k, self.block_size), u64::from(k));
        }
        for k in skipped..cached_blocks {
            h = chain_hash(h, block_content(content, k, self.block_size), u64::from(k));
            match self.lookup(h) {
                Some(b) => {
                    if self.blocks[b as usize].ref_count == 0 {
                        from_free += 1;
                    }
                    hits.push((h, Some(b)));
                }
                None if self.lower && self.lower_holds(h) => {
                    from_free += 1;
                    hits.push((h, None));
                }
                None => return false,
            }
        }
        let fresh = self.blocks_for(tokens).saturating_sub(cached_blocks);
        if from_free + fresh.saturating_add(side) > self.free {
            return false;
        }
        // Act: claim GPU hits first, so reloads cannot evict them.
        for &(_, b) in &hits {
            if let Some(b) = b {
                self.claim(b);
            }
        }
        if skipped > 0 {
            seq.blocks.resize(skipped as usize, NONE);
        }
        for (h, b) in hits {
            let b = match b {
                Some(b) => b,
                None => {
                    // Copied from where it is before its GPU block is taken, so the block
                    // that GPU block held cannot push it down a tier first. (An earlier
                    // block of this very admission may have pushed it out of every tier:
                    // then nothing is loaded, and the block counts as stored.)
                    let kind = self.load_lower(h).unwrap_or(KvEventKind::Stored);
                    match kind {
                        KvEventKind::Reloaded => self.lower_hits.cpu += 1,
                        KvEventKind::Loaded { tier: KvTier::Nvme } => self.lower_hits.nvme += 1,
                        KvEventKind::Loaded { .. } => self.lower_hits.store += 1,
                        _ => {}
                    }
                    let b = self.take_fresh();
                    let indexed = self.index.insert(h, b, &mut self.blocks);
                    debug_assert!(indexed, "a lower-tier hit is not on the GPU");
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
        if self.layout.is_some() {
            self.attach_side(seq, side, tokens, skipped);
        }
        let prompt_blocks = self.blocks_for(input_tokens);
        self.hit_blocks += u64::from(cached_blocks);
        self.miss_blocks += u64::from(prompt_blocks.saturating_sub(cached_blocks));
        true
    }

    /// Grows a running request's allocation so that `tokens` tokens fit. All or nothing.
    #[inline]
    pub fn grow(&mut self, seq: &mut SeqBlocks, tokens: u32) -> bool {
        if self.layout.is_some() {
            return self.grow_hybrid(seq, tokens);
        }
        self.grow_full(seq, tokens)
    }

    /// [`grow`](Self::grow) of a cache without a hybrid layout (every layer full
    /// attention): one block per `block_size` tokens.
    #[inline]
    pub fn grow_full(&mut self, seq: &mut SeqBlocks, tokens: u32) -> bool {
        debug_assert!(
            self.layout.is_none(),
            "a hybrid cache grows its other groups too"
        );
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

    /// [`grow`](Self::grow) with a hybrid layout: the request's own list's new blocks,
    /// and the other groups' blocks resized (a sliding window frees the blocks it has
    /// moved past, computed before this step; every layer sliding, so does the request's
    /// own list). All or nothing.
    #[inline(never)]
    fn grow_hybrid(&mut self, seq: &mut SeqBlocks, tokens: u32) -> bool {
        let layout = self.layout.expect("a hybrid cache");
        let (have, computed, gone) = seq
            .side
            .as_ref()
            .map_or((0, 0, 0), |s| (s.blocks.len() as u32, s.tokens, s.gone));
        if tokens <= computed {
            return true;
        }
        let need = self
            .blocks_for(tokens)
            .saturating_sub(seq.blocks.len() as u32);
        let target = layout.side_blocks(self.block_size, tokens, computed);
        let (surplus, deficit) = (have.saturating_sub(target), target.saturating_sub(have));
        let behind = if layout.slides_main() {
            layout
                .behind_window(self.block_size, computed)
                .clamp(gone, seq.blocks.len() as u32)
        } else {
            gone
        };
        if need.saturating_add(deficit) > self.free + surplus + (behind - gone) {
            return false;
        }
        // Newest first, as vLLM frees a window's skipped blocks.
        for i in (gone..behind).rev() {
            let b = std::mem::replace(&mut seq.blocks[i as usize], NONE);
            self.release_block(b);
        }
        let side = seq.side.get_or_insert_with(Box::default);
        side.gone = behind;
        for _ in 0..surplus {
            let b = side.blocks.pop().expect("counted");
            self.release_block(b);
        }
        for _ in 0..need {
            let b = self.take_fresh();
            seq.blocks.push(b);
        }
        for _ in 0..deficit {
            side.blocks.push(self.take_fresh());
        }
        side.tokens = tokens;
        true
    }

    /// Gives a hybrid request admitted with `tokens` tokens `side` fresh blocks of its
    /// other KV cache groups and the count of null entries (`skipped`) its own list starts
    /// with.
    #[inline(never)]
    fn attach_side(&mut self, seq: &mut SeqBlocks, side: u32, tokens: u32, skipped: u32) {
        let mut held = SideBlocks {
            blocks: Vec::with_capacity(side as usize),
            tokens,
            gone: skipped,
        };
        for _ in 0..side {
            held.blocks.push(self.take_fresh());
        }
        seq.side = Some(Box::new(held));
    }

    /// [`release`](Self::release) of a hybrid request: its own list's blocks, last first,
    /// down to the null entries behind a sliding window; then its other groups' blocks.
    #[inline(never)]
    fn release_hybrid(&mut self, seq: &mut SeqBlocks) {
        let side = seq.side.take().expect("a hybrid request");
        while seq.blocks.len() > side.gone as usize {
            let b = seq.blocks.pop().expect("counted");
            self.release_block(b);
        }
        seq.blocks.clear();
        for b in side.blocks {
            self.release_block(b);
        }
        seq.hashed = 0;
        seq.last_hash = 0;
    }

    /// Every layer sliding: moves a request's prompt hashing past the null entries behind
    /// its window (up to its `full` computed prompt blocks). They were freed before they
    /// could be registered, so there is nothing to index, but the hash chain goes on.
    #[inline(never)]
    fn hash_past_window(&self, seq: &mut SeqBlocks, content: &PromptContent, full: u32) {
        let gone = seq.side.as_ref().map_or(0, |s| s.gone).min(full);
        for k in seq.hashed..gone {
            seq.last_hash = chain_hash(
                seq.last_hash,
                block_content(content, k, self.block_size),
                u64::from(k),
            );
            seq.hashed = k + 1;
        }
    }

    /// Drops one reference to block `b`; a block no one holds joins the free list's tail.
    fn release_block(&mut self, b: u32) {
        let block = &mut self.blocks[b as usize];
        debug_assert!(block.ref_count > 0, "release of a free block {b}");
        block.ref_count -= 1;
        if block.ref_count == 0 {
            self.push_free_tail(b);
        }
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
        if seq.side.is_some() {
            self.hash_past_window(seq, content, full);
        }
        // In chunks: the chunk's hashes first and their index slots touched together, so
        // the cache misses overlap instead of waiting on each probe (whose first branch goes
        // either way).
        let mut hashes = [0u64; 16];
        let through = self.lower && self.store.as_ref().is_some_and(|s| s.write_through);
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
                    if through && let Some(s) = self.store.as_mut() {
                        s.put(h, &mut self.events);
                    }
                }
            }
            seq.last_hash = h;
            seq.hashed += n as u32;
        }
    }

    /// Releases every block the request holds, last block first. Blocks whose reference
    /// count drops to zero join the tail of the free list with their hash kept.
    pub fn release(&mut self, seq: &mut SeqBlocks) {
        if seq.side.is_some() {
            return self.release_hybrid(seq);
        }
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
    /// it, and the blocks named are exactly the allocated ones. O(references held);
    /// `scratch` is kept between calls (checked after every tick, a hash map per call made
    /// `--check-invariants` runs ~250× slower than without).
    pub fn check_holders<'a>(
        &self,
        holders: impl Iterator<Item = &'a SeqBlocks>,
        scratch: &mut HolderCounts,
    ) -> Result<(), String> {
        let HolderCounts { counts, touched } = scratch;
        if counts.len() < self.blocks.len() {
            counts.resize(self.blocks.len(), 0);
        }
        touched.clear();
        let mut past_end = None;
        for h in holders {
            for &b in h.blocks.iter().chain(h.side()).filter(|&&b| b != NONE) {
                match counts
                    .get_mut(b as usize)
                    .filter(|_| (b as usize) < self.blocks.len())
                {
                    Some(n) => {
                        if *n == 0 {
                            touched.push(b);
                        }
                        *n += 1;
                    }
                    None => past_end = Some(b),
                }
            }
        }
        // Every count is back to 0 before returning, whatever is found.
        let mut found =
            past_end.map(|b| format!("a request holds block {b}, past the cache's end"));
        for &b in touched.iter() {
            let n = std::mem::take(&mut counts[b as usize]);
            let block = &self.blocks[b as usize];
            if found.is_none() && block.ref_count != n {
                found = Some(format!(
                    "block {b} has reference count {} but {n} requests hold it",
                    block.ref_count
                ));
            }
        }
        if let Some(e) = found {
            return Err(e);
        }
        if touched.len() != self.allocated as usize {
            return Err(format!(
                "{} blocks are allocated but requests hold {}",
                self.allocated,
                touched.len()
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
        if let Some(c) = &self.nvme {
            c.audit()?;
        }
        if let Some(s) = &self.store {
            super::store::lock(&s.store).audit()?;
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
        // Only the event log and the tiers below need the hash it loses: otherwise the
        // block record is written, not read (one cache miss fewer a block).
        if self.events.is_some() || self.lower {
            let evicted = self.blocks[b as usize].hash;
            if evicted != 0 {
                self.note(KvEventKind::Evicted { tier: KvTier::Gpu }, evicted);
                if self.lower {
                    self.spill(evicted);
                }
            }
        }
        let block = &mut self.blocks[b as usize];
        // Invalidates its index entry, if any (see the module docs).
        block.hash = 0;
        block.ref_count = 1;
        b
    }

    #[inline(always)]
    fn push_free_tail(&mut self, b: u32) {
        self.free_queue.push(b, &mut self.blocks);
        self.free += 1;
        self.allocated -= 1;
    }
}

/// [`KvCache::cached_prefix_blocks`] of a hybrid cache, with at most `cap` blocks: none
/// with linear-attention layers (their recurrent state at a prefix's end is not kept:
/// vLLM's `mamba_cache_mode` `none`); on the full-attention group, the leading blocks
/// cached; with every layer sliding, as vLLM's `SlidingWindowManager` finds them: the
/// longest prefix whose last [`KvLayout::window_hit_blocks`] blocks are all cached (the
/// window reads no earlier block), or else the leading blocks cached.
#[cold]
fn hybrid_prefix_hits(kv: &KvCache, l: &KvLayout, content: &PromptContent, cap: u32) -> u32 {
    if l.linear_groups > 0 {
        return 0;
    }
    let need = l.window_hit_blocks(kv.block_size);
    let (mut h, mut run, mut best) = (0, 0, 0);
    for k in 0..cap {
        h = chain_hash(h, block_content(content, k, kv.block_size), u64::from(k));
        if kv.lookup(h).is_none() {
            if !l.slides_main() {
                break;
            }
            run = 0;
            continue;
        }
        run += 1;
        if run == k + 1 || run >= need {
            best = k + 1;
        }
    }
    best
}

/// A hybrid request admitted with `cached_blocks` prompt blocks cached, holding `tokens`
/// tokens after its first chunk: (its other groups' blocks, the leading hit blocks of its
/// own list behind a sliding window, which it does not hold).
#[cold]
fn hybrid_admission(l: &KvLayout, block_size: u32, tokens: u32, cached_blocks: u32) -> (u32, u32) {
    let computed = cached_blocks * block_size;
    let skipped = if l.slides_main() {
        l.behind_window(block_size, computed)
    } else {
        0
    };
    (l.side_blocks(block_size, tokens, computed), skipped)
}

/// How to rebuild an instance's KV cache when it is provisioned.
#[derive(Clone, Debug)]
pub struct KvRecipe {
    pub blocks: u32,
    pub block_size: u32,
    /// (CPU tier blocks, thrash window µs).
    pub cpu: Option<(u32, u64)>,
    /// (NVMe tier blocks, FIFO instead of LRU).
    pub nvme: Option<(u32, bool)>,
    /// The shared store and (µs per block over the instance's link, latency µs).
    pub store: Option<(std::sync::Arc<std::sync::Mutex<super::KvStore>>, f64, f64)>,
    /// With `cluster.topology`: the network the store is reached over, and a block's bytes.
    pub store_net: Option<(crate::network::Network, f64)>,
    /// Hybrid attention: how a request's blocks are spread over the KV cache groups.
    pub layout: Option<KvLayout>,
}

impl KvRecipe {
    /// The cache of instance `instance`.
    pub fn build(&self, instance: u32) -> KvCache {
        let mut kv = KvCache::new(self.blocks, self.block_size);
        if let Some(layout) = self.layout {
            kv = kv.with_layout(layout);
        }
        if let Some((blocks, window)) = self.cpu {
            kv = kv.with_cpu_tier(CpuTier::new(blocks, window));
        }
        if let Some((blocks, fifo)) = self.nvme {
            kv = kv.with_nvme_tier(CpuTier::of(KvTier::Nvme, blocks, 0, fifo));
        }
        if let Some((store, block_us, latency_us)) = &self.store {
            let mut link = StoreLink::new(store.clone(), instance, *block_us, *latency_us);
            if let Some((net, block_bytes)) = &self.store_net {
                let (write, read, latency_us) = net.topology.store_paths(instance);
                link.path = Some(crate::network::StorePath {
                    fabric: net.fabric.clone(),
                    write,
                    read,
                    latency_us,
                    block_bytes: *block_bytes,
                });
            }
            kv = kv.with_store(link);
        }
        kv
    }
}
