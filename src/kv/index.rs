//! The prefix index: block hash → block, open addressing over 4-byte slots (see the
//! module docs of [`kv`](super)).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::Block;

/// Hasher for keys that are already uniformly mixed 64-bit hashes.
#[derive(Default)]
pub(super) struct PassThrough(u64);

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

pub(super) type HashIndex = HashMap<u64, u32, BuildHasherDefault<PassThrough>>;

/// Prefix index of a [`KvCache`]: hash -> block, open addressing with linear probing. A
/// slot is one `u32`: block number + 1 in the low `block_bits` bits (0: empty) and, above
/// them, the same bits of the hash it was indexed under (a tag), so a probe compares tags
/// without touching the block table (a false match, 1 in 2^17 for 26,312 blocks, is caught
/// by the block's own hash). See the module docs.
#[derive(Debug, Clone)]
pub(super) struct BlockIndex {
    pub(super) slots: Vec<u32>,
    /// The low bits of a slot that hold the block number + 1.
    pub(super) block_mask: u32,
    /// Slots not empty (live or stale).
    pub(super) occupied: usize,
}

impl BlockIndex {
    /// A table for `blocks` blocks: twice as many slots (at least 16).
    pub(super) fn new(blocks: usize) -> Self {
        let block_bits = u32::BITS - (blocks as u32).leading_zeros();
        Self::with_mask(
            blocks,
            u32::MAX.checked_shr(u32::BITS - block_bits).unwrap_or(0),
        )
    }

    /// A table whose slots keep the block number + 1 under `block_mask` (`u32::MAX`: no
    /// tag, every probe reads the block's hash).
    pub(super) fn with_mask(blocks: usize, block_mask: u32) -> Self {
        BlockIndex {
            slots: vec![0; (2 * blocks).max(16)],
            block_mask,
            occupied: 0,
        }
    }

    /// The slot a probe for `hash` starts at (the high bits of `hash` scaled to the table).
    #[inline]
    pub(super) fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// The tag bits of `hash`, where a slot keeps them.
    #[inline]
    pub(super) fn tag(&self, hash: u64) -> u32 {
        hash as u32 & !self.block_mask
    }

    /// The slot value of block `b` indexed under `hash`.
    #[inline]
    pub(super) fn entry(&self, hash: u64, b: u32) -> u32 {
        self.tag(hash) | (b + 1)
    }

    /// Where `hash` is indexed: its block (`Ok`), or the empty slot that ends its probe
    /// (`Err`).
    #[inline]
    pub(super) fn probe(&self, hash: u64, blocks: &[Block]) -> Result<u32, usize> {
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
    pub(super) fn get(&self, hash: u64, blocks: &[Block]) -> Option<u32> {
        self.probe(hash, blocks).ok()
    }

    /// Indexes block `b` under `hash` and gives the block that hash, unless a block already
    /// carries it; true if it did.
    pub(super) fn insert(&mut self, hash: u64, b: u32, blocks: &mut [Block]) -> bool {
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
    pub(super) fn touch(&self, hashes: &[u64]) {
        let mut any = 0;
        for &h in hashes {
            any |= self.slots[self.home(h)];
        }
        std::hint::black_box(any);
    }

    /// Drops every stale slot: re-indexes the blocks that carry a hash.
    pub(super) fn rebuild(&mut self, blocks: &[Block]) {
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
