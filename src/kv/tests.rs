//! The KV cache against hand-worked cases and a plain scan of its blocks.

use super::index::BlockIndex;
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

/// A crash's wipe: the same capacity on both tiers, nothing cached on either, every block
/// free, the cumulative counts kept, each cached block reported evicted.
#[test]
fn a_wiped_cache_forgets_every_block_and_keeps_its_counts() {
    let mut kv = KvCache::new(4, 4).with_cpu_tier(CpuTier::new(2, 1_000_000));
    kv.record_events(true);
    let a = content(0, 0, 11);
    let b = content(0, 0, 22);
    let mut sa = SeqBlocks::default();
    assert!(kv.admit(&mut sa, &a, 8, 0, 8));
    kv.register_full_blocks(&mut sa, &a, 8, 8);
    kv.release(&mut sa);
    // B takes all four blocks: a0 and a1 go to the CPU tier; B registers its own four.
    let mut sb = SeqBlocks::default();
    assert!(kv.admit(&mut sb, &b, 16, 0, 16));
    kv.register_full_blocks(&mut sb, &b, 16, 16);
    kv.release(&mut sb);
    let _ = kv.take_events().count();
    assert_eq!(kv.cached_by_tier().len(), 6);
    let (hits, misses) = (kv.hit_blocks, kv.miss_blocks);
    kv.wipe();
    assert_eq!((kv.total_blocks(), kv.free_blocks()), (4, 4));
    assert_eq!(
        kv.cpu.as_ref().map(|c| (c.capacity(), c.len())),
        Some((2, 0))
    );
    assert_eq!(kv.cpu.as_ref().unwrap().offloaded, 2);
    assert_eq!((kv.hit_blocks, kv.miss_blocks), (hits, misses));
    assert!(kv.cached_by_tier().is_empty());
    assert_eq!(kv.cached_prefix_blocks(&a, 8, 9), 0);
    let evicted = kv
        .take_events()
        .filter(|(k, _)| matches!(k, KvEventKind::Evicted { .. }))
        .count();
    assert_eq!(evicted, 6, "six cached blocks forgotten");
    assert!(kv.records_events());
    kv.audit().unwrap();
}
