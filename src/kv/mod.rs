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

mod cache;
mod cpu;
mod free;
mod index;
mod store;
#[cfg(test)]
mod tests;

pub use cache::{HolderCounts, KvCache, KvRecipe, LowerHits};
pub use cpu::CpuTier;
pub use store::{KvStore, StoreLink, StoreWrite, lock};

use bevy_ecs::prelude::*;

use crate::request::PromptContent;
use crate::time::SimTime;

/// No block (an empty link or slot).
const NONE: u32 = u32::MAX;

/// Where a cached block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvTier {
    Gpu,
    /// The CPU offload tier (`cpu_kv_blocks`).
    Cpu,
    /// The local NVMe tier below it (`nvme_kv_blocks`).
    Nvme,
    /// The cluster's shared store (`cluster.kv_store`).
    Store,
}

impl KvTier {
    pub fn name(self) -> &'static str {
        match self {
            KvTier::Gpu => "gpu",
            KvTier::Cpu => "cpu",
            KvTier::Nvme => "nvme",
            KvTier::Store => "store",
        }
    }
}

/// What happened to a KV block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvEventKind {
    /// A full prompt block computed (or received) here entered the GPU prefix cache.
    Stored,
    /// A cached block left a tier: on the GPU its slot was reused for other tokens; on the
    /// CPU or NVMe tier or the shared store it was the least recently used (or, FIFO, the
    /// oldest) when room was needed (or the instance was turned off: not the store's).
    Evicted { tier: KvTier },
    /// A block evicted from the GPU was copied to the CPU tier.
    Offloaded,
    /// A CPU-tier block was copied back into the GPU cache for a prefix hit.
    Reloaded,
    /// A block left the tier above for the NVMe tier, or was written to the shared store
    /// (by this instance).
    Written { tier: KvTier },
    /// A block of the NVMe tier or the shared store was loaded into the GPU cache for a
    /// prefix hit.
    Loaded { tier: KvTier },
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

#[derive(Clone, Copy, Debug)]
struct Block {
    /// Content hash of the block if registered in the index, else 0.
    hash: u64,
    ref_count: u32,
    /// While free: its position in the free ring (where a prefix hit on it leaves a hole).
    free_seq: u32,
}

/// The blocks one request holds, in token order, plus how far its prompt has been hashed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqBlocks {
    pub blocks: Vec<u32>,
    /// Number of leading blocks whose hash has been computed (registered or claimed).
    hashed: u32,
    /// Hash of block `hashed - 1` (chain state), 0 when `hashed == 0`.
    last_hash: u64,
    /// Hybrid attention: the blocks of the request's other KV cache groups (boxed: a
    /// request of a model without them pays one pointer).
    side: Option<Box<SideBlocks>>,
}

/// The blocks of a hybrid request's other KV cache groups (sliding-window windows,
/// linear-attention states, further full-attention groups), never content-addressed
/// ([`crate::model::KvLayout`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SideBlocks {
    blocks: Vec<u32>,
    /// The tokens they were last sized for.
    tokens: u32,
    /// Every layer sliding: the leading entries of the request's own block list that are
    /// behind its window, freed and [`NONE`] (vLLM's null block).
    gone: u32,
}

impl SeqBlocks {
    /// Entries of its own block list: one per `block_size` tokens (every layer sliding:
    /// including those behind the window, already freed).
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True if the request holds no block at all.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.side.is_none()
    }

    /// The blocks of its other KV cache groups (hybrid attention).
    pub fn side(&self) -> &[u32] {
        self.side.as_ref().map_or(&[], |s| &s.blocks)
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
