//! A router-side approximate prefix index: per instance, the block hashes of prompts recently
//! routed there, as an LRU of bounded size (BLIS prefix-affinity: 10,000 blocks per
//! instance). The router keeps it itself from its own decisions, so it needs no signal
//! from the instances (always fresh, but blind to evictions).

use std::collections::{HashMap, VecDeque};

/// One instance's LRU of block hashes, with lazy deletion: O(1) amortised per touch.
#[derive(Debug, Default, Clone)]
pub struct BlockLru {
    stamp_of: HashMap<u64, u64>,
    order: VecDeque<(u64, u64)>,
    clock: u64,
}

impl BlockLru {
    pub fn contains(&self, h: u64) -> bool {
        self.stamp_of.contains_key(&h)
    }

    pub fn len(&self) -> usize {
        self.stamp_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stamp_of.is_empty()
    }

    /// Marks `h` most recently used, evicting the least recently used beyond `cap`.
    pub fn touch(&mut self, h: u64, cap: usize) {
        self.clock += 1;
        self.stamp_of.insert(h, self.clock);
        self.order.push_back((h, self.clock));
        while self.stamp_of.len() > cap {
            let Some((old, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.stamp_of.get(&old) == Some(&stamp) {
                self.stamp_of.remove(&old);
            }
        }
        // Keep the queue from growing without bound under repeated touches.
        if self.order.len() > 4 * cap.max(16) {
            let stamp_of = &self.stamp_of;
            self.order.retain(|(h, s)| stamp_of.get(h) == Some(s));
        }
    }
}

/// Per-instance LRUs.
#[derive(Debug, Default, Clone)]
pub struct PrefixIndex {
    pub per_instance: Vec<BlockLru>,
    pub capacity: usize,
}

impl PrefixIndex {
    pub fn new(capacity: usize) -> Self {
        PrefixIndex {
            per_instance: Vec::new(),
            capacity,
        }
    }

    fn ensure(&mut self, n: usize) {
        if self.per_instance.len() < n {
            self.per_instance.resize_with(n, BlockLru::default);
        }
    }

    /// Leading blocks of `hashes` the router believes instance `i` holds.
    pub fn leading_matches(&mut self, i: u32, hashes: &[u64]) -> usize {
        self.ensure(i as usize + 1);
        let lru = &self.per_instance[i as usize];
        hashes.iter().take_while(|h| lru.contains(**h)).count()
    }

    /// Blocks of `hashes` (anywhere) the router believes instance `i` holds.
    pub fn overlap(&mut self, i: u32, hashes: &[u64]) -> usize {
        self.ensure(i as usize + 1);
        let lru = &self.per_instance[i as usize];
        hashes.iter().filter(|h| lru.contains(**h)).count()
    }

    /// Records that `hashes` were routed to instance `i`.
    pub fn record(&mut self, i: u32, hashes: &[u64]) {
        self.ensure(i as usize + 1);
        let cap = self.capacity;
        for &h in hashes {
            self.per_instance[i as usize].touch(h, cap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lru_keeps_the_most_recent_blocks_within_capacity() {
        let mut l = BlockLru::default();
        for h in 1..=5 {
            l.touch(h, 3);
        }
        assert!(!l.contains(1) && !l.contains(2) && l.contains(3) && l.contains(5));
        l.touch(3, 3); // 3 becomes most recent
        l.touch(6, 3); // evicts 4
        assert!(l.contains(3) && !l.contains(4) && l.contains(5) && l.contains(6));
        for _ in 0..10_000 {
            l.touch(6, 3);
        }
        assert!(l.order.len() <= 64, "lazy entries are swept");
    }

    #[test]
    fn leading_matches_stop_at_the_first_miss_but_overlap_does_not() {
        let mut idx = PrefixIndex::new(100);
        idx.record(1, &[10, 11, 13]);
        assert_eq!(idx.leading_matches(1, &[10, 11, 12, 13]), 2);
        assert_eq!(idx.overlap(1, &[10, 11, 12, 13]), 3);
        assert_eq!(idx.leading_matches(0, &[10]), 0);
    }
}
