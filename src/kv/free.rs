//! The free list: a ring of block numbers in LRU order, with holes where prefix hits
//! took blocks back.

use super::{Block, NONE};

/// The free blocks in LRU order (head = least recently freed): a ring of block numbers.
/// A free block taken out of the middle (a prefix hit on it) leaves a hole (`NONE`) at the
/// position it was pushed at (`Block::free_seq`); holes are skipped at the head and squeezed
/// out when the ring is full (it has room for a quarter more entries than there are
/// blocks). Every other entry is a free block, so taking one reads nothing but the ring.
#[derive(Debug)]
pub(super) struct FreeQueue {
    pub(super) ring: std::collections::VecDeque<u32>,
    /// The position of `ring[0]` (positions count pushes, wrapping).
    pub(super) head: u32,
}

impl FreeQueue {
    /// Every block free, in block order.
    pub(super) fn new(blocks: &mut [Block]) -> Self {
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
    pub(super) fn pop(&mut self) -> u32 {
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
    #[inline(always)]
    pub(super) fn push(&mut self, b: u32, blocks: &mut [Block]) {
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
    pub(super) fn touch(&self, n: usize, blocks: &[Block]) {
        let mut any = 0;
        for &b in self.ring.iter().take(n) {
            if let Some(block) = blocks.get(b as usize) {
                any |= block.ref_count;
            }
        }
        std::hint::black_box(any);
    }

    /// Takes free block `b` out of the middle: leaves a hole where it was.
    pub(super) fn remove(&mut self, b: u32, blocks: &[Block]) {
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
    pub(super) fn compact(&mut self, blocks: &mut [Block]) {
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
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ring
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != NONE)
            .map(|(k, &b)| (b, self.head.wrapping_add(k as u32)))
    }
}
