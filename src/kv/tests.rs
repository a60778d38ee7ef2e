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
fn the_holders_check_finds_a_miscount_and_forgets_it() {
    let mut kv = KvCache::new(10, 16);
    let (mut a, mut b) = (SeqBlocks::default(), SeqBlocks::default());
    assert!(kv.admit(&mut a, &content(1, 0, 7), 33, 0, 33));
    assert!(kv.admit(&mut b, &content(2, 0, 8), 16, 0, 16));
    let mut scratch = HolderCounts::default();
    kv.check_holders([&a, &b].into_iter(), &mut scratch)
        .unwrap();
    // A block named twice, a holder missing, a block past the end.
    let twice = a.clone();
    let err = kv
        .check_holders([&a, &b, &twice].into_iter(), &mut scratch)
        .unwrap_err();
    assert!(
        err.contains("has reference count 1 but 2 requests hold it"),
        "{err}"
    );
    let err = kv
        .check_holders([&a].into_iter(), &mut scratch)
        .unwrap_err();
    assert_eq!(err, "4 blocks are allocated but requests hold 3");
    let mut stray = SeqBlocks::default();
    stray.blocks.push(10);
    let err = kv
        .check_holders([&a, &b, &stray].into_iter(), &mut scratch)
        .unwrap_err();
    assert_eq!(err, "a request holds block 10, past the cache's end");
    // What the failed checks counted is not carried into the next.
    kv.check_holders([&b, &a].into_iter(), &mut scratch)
        .unwrap();
    kv.release(&mut a);
    kv.check_holders([&b].into_iter(), &mut scratch).unwrap();
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

fn store(capacity: u32, write: StoreWrite) -> std::sync::Arc<std::sync::Mutex<KvStore>> {
    std::sync::Arc::new(std::sync::Mutex::new(KvStore::new(capacity, write, false)))
}

/// Traced by hand: a 4-block GPU cache of 4-token blocks, a 1-block CPU tier, a 1-block NVMe
/// tier and a write-back store whose link moves a block in 10 µs after 100 µs of latency.
#[test]
fn evicted_blocks_fall_down_the_tiers_and_come_back_from_each() {
    let s = store(10, StoreWrite::WriteBack);
    let mut kv = KvCache::new(4, 4)
        .with_cpu_tier(CpuTier::new(1, 0))
        .with_nvme_tier(CpuTier::of(KvTier::Nvme, 1, 0, false))
        .with_store(StoreLink::new(s.clone(), 0, 10.0, 100.0));
    kv.record_events(true);
    let a = content(0, 0, 11); // 16 tokens: a0..a3
    let b = content(0, 0, 22);
    let mut sa = SeqBlocks::default();
    assert!(kv.admit(&mut sa, &a, 16, 0, 16));
    kv.register_full_blocks(&mut sa, &a, 16, 16);
    kv.release(&mut sa); // free list [3, 2, 1, 0]: a3 goes first
    let _ = kv.take_events().count();
    // B takes all four blocks, unregistered: a3, a2, a1, a0 leave the GPU in that order.
    // a3 → CPU; a2 → CPU, pushing a3 → NVMe; a1 → CPU, a2 → NVMe, a3 → store (sent by
    // 10 µs, readable at 110); a0 → CPU, a1 → NVMe, a2 → store (20 µs, readable at 120).
    let mut sb = SeqBlocks::default();
    assert!(kv.admit(&mut sb, &b, 16, 0, 16));
    let mut kinds = std::collections::HashMap::new();
    for (k, _) in kv.take_events() {
        *kinds.entry(k).or_insert(0) += 1;
    }
    let count = |k| kinds.get(&k).copied().unwrap_or(0);
    assert_eq!(count(KvEventKind::Evicted { tier: KvTier::Gpu }), 4);
    assert_eq!(count(KvEventKind::Offloaded), 4);
    assert_eq!(count(KvEventKind::Evicted { tier: KvTier::Cpu }), 3);
    assert_eq!(count(KvEventKind::Written { tier: KvTier::Nvme }), 3);
    assert_eq!(count(KvEventKind::Evicted { tier: KvTier::Nvme }), 2);
    assert_eq!(
        count(KvEventKind::Written {
            tier: KvTier::Store
        }),
        2
    );
    let h: Vec<u64> = prompt_block_hashes(&a, 16, 4);
    assert!(kv.cpu.as_ref().unwrap().contains(h[0]));
    assert!(kv.nvme.as_ref().unwrap().contains(h[1]));
    assert!(lock(&s).ready(h[3], 110) && !lock(&s).ready(h[2], 119));
    kv.release(&mut sb); // unregistered: reusing these blocks evicts nothing
    // A again (the cap leaves its last block to compute): a0 on the CPU, a1 on the NVMe
    // tier, a2 in the store but not readable before 120 µs.
    kv.set_now(115);
    assert_eq!(kv.cached_prefix_blocks(&a, 16, 16), 2);
    kv.set_now(120);
    assert_eq!(kv.cached_prefix_blocks(&a, 16, 16), 3);
    let mut sa = SeqBlocks::default();
    assert!(kv.admit(&mut sa, &a, 16, 3, 16));
    let loads: Vec<KvEventKind> = kv.take_events().map(|(k, _)| k).collect();
    assert_eq!(
        loads,
        [
            KvEventKind::Reloaded,
            KvEventKind::Loaded { tier: KvTier::Nvme },
            KvEventKind::Loaded {
                tier: KvTier::Store
            },
        ]
    );
    assert_eq!(kv.take_transfers(), (4, 1), "4 offloads, 1 CPU reload");
    assert_eq!(kv.take_loads(), (1, 1));
    assert_eq!(kv.take_loads(), (0, 0), "taken once");
    {
        let st = lock(&s);
        assert_eq!(
            (st.written, st.loaded, st.cross_instance_loaded, st.evicted),
            (2, 1, 0, 0)
        );
    }
    assert_eq!(kv.hit_blocks, 3);
    kv.audit().unwrap();
    // A crash empties the instance's tiers, not the store.
    kv.release(&mut sa);
    kv.wipe();
    assert!(kv.cpu.as_ref().unwrap().is_empty() && kv.nvme.as_ref().unwrap().is_empty());
    assert_eq!(lock(&s).len(), 2);
    assert_eq!(kv.cached_prefix_blocks(&a, 16, 16), 0, "a0 is gone");
}

#[test]
fn a_block_written_through_by_one_instance_is_a_hit_on_another_once_readable() {
    // Instance 0 computes a 16-token prompt at 0 µs: its four blocks are sent one after the
    // other (10 µs each) and readable 100 µs later: at 110, 120, 130 and 140 µs.
    let s = store(10, StoreWrite::WriteThrough);
    let a = content(0, 0, 11);
    let mut kv0 = KvCache::new(8, 4).with_store(StoreLink::new(s.clone(), 0, 10.0, 100.0));
    let mut sa = SeqBlocks::default();
    assert!(kv0.admit(&mut sa, &a, 16, 0, 16));
    kv0.register_full_blocks(&mut sa, &a, 16, 16);
    assert_eq!(lock(&s).written, 4);
    let mut kv1 = KvCache::new(8, 4).with_store(StoreLink::new(s.clone(), 1, 10.0, 100.0));
    kv1.set_now(109);
    assert_eq!(kv1.cached_prefix_blocks(&a, 16, 16), 0);
    kv1.set_now(125);
    assert_eq!(kv1.cached_prefix_blocks(&a, 16, 16), 2);
    let mut s1 = SeqBlocks::default();
    assert!(kv1.admit(&mut s1, &a, 16, 2, 16));
    assert_eq!(kv1.take_loads(), (0, 2));
    // Instance 1 computes the rest: blocks 2 and 3 are in the store already (nothing sent).
    kv1.register_full_blocks(&mut s1, &a, 16, 16);
    let st = lock(&s);
    assert_eq!((st.written, st.loaded, st.cross_instance_loaded), (4, 2, 2));
}

#[test]
fn a_fifo_tier_drops_the_oldest_write_even_if_it_was_just_hit() {
    for (fifo, kept, dropped) in [(false, 1, 2), (true, 2, 1)] {
        let mut t = CpuTier::of(KvTier::Nvme, 2, 0, fifo);
        let mut events = Some(Vec::new());
        assert_eq!(t.offload(1, &mut events), None);
        assert_eq!(t.offload(2, &mut events), None);
        assert!(t.reload(1));
        assert_eq!(t.offload(3, &mut events), Some(dropped), "fifo {fifo}");
        assert!(t.contains(kept) && t.contains(3) && !t.contains(dropped));
        t.audit().unwrap();
        assert_eq!(
            events.unwrap().last(),
            Some(&(KvEventKind::Written { tier: KvTier::Nvme }, 3))
        );
    }
}

#[test]
fn a_full_store_evicts_and_forgets_the_writer() {
    let s = store(2, StoreWrite::WriteBack);
    let mut link = StoreLink::new(s.clone(), 3, 0.0, 0.0);
    let mut events = None;
    for h in [10, 11, 12] {
        link.put(h, &mut events);
    }
    let st = lock(&s);
    assert_eq!((st.len(), st.written, st.evicted), (2, 3, 1));
    assert!(!st.ready(10, 0) && st.ready(11, 0) && st.ready(12, 0));
    st.audit().unwrap();
}

/// A model with one full-attention group and two sliding-window groups over 8 tokens, in
/// 4-token blocks, traced by hand.
fn sliding_layout() -> crate::model::KvLayout {
    crate::model::KvLayout {
        group_layers: 1,
        full_groups: 1,
        sliding_groups: 2,
        window: 8,
        linear_groups: 0,
        state_blocks: 0,
        page_bytes: 1.0,
    }
}

#[test]
fn a_sliding_window_frees_the_blocks_it_has_moved_past() {
    let mut kv = KvCache::new(40, 4).with_layout(sliding_layout());
    let p = content(0, 0, 7);
    let mut s = SeqBlocks::default();
    // A 12-token prompt in one chunk: 3 full-attention blocks and, computed before it
    // nothing, 3 blocks in each sliding group: 9.
    assert!(kv.admit(&mut s, &p, 12, 0, 12));
    assert_eq!((s.blocks.len(), s.side().len()), (3, 6));
    assert_eq!(kv.free_blocks(), 31);
    // Decoding token 13 (12 computed): the window keeps tokens 5.. → blocks from
    // ⌊(12 + 1 − 8)/4⌋ = 1 on: 4 blocks − 1 in each group. One full block more.
    assert!(kv.grow(&mut s, 13));
    assert_eq!((s.blocks.len(), s.side().len()), (4, 6));
    // Up to token 20 (19 computed): blocks from ⌊12/4⌋ = 3 of 5: 2 per group.
    for t in 14..=20 {
        assert!(kv.grow(&mut s, t));
    }
    assert_eq!((s.blocks.len(), s.side().len()), (5, 4));
    assert_eq!(kv.free_blocks(), 40 - 9);
    let mut seen = HolderCounts::default();
    kv.check_holders(std::iter::once(&s), &mut seen).unwrap();
    kv.audit().unwrap();
    // Asking again for what is held changes nothing.
    assert!(kv.grow(&mut s, 20));
    assert_eq!(kv.free_blocks(), 31);
    kv.release(&mut s);
    assert!(s.is_empty());
    assert_eq!(kv.free_blocks(), 40);
    kv.audit().unwrap();
}

#[test]
fn a_hybrid_allocation_is_all_or_nothing() {
    // 12 blocks: a 12-token prompt needs 3 + 6; a second one does not fit and takes none.
    let mut kv = KvCache::new(12, 4).with_layout(sliding_layout());
    let (mut a, mut b) = (SeqBlocks::default(), SeqBlocks::default());
    assert!(kv.admit(&mut a, &content(0, 0, 1), 12, 0, 12));
    assert!(!kv.admit(&mut b, &content(0, 0, 2), 12, 0, 12));
    assert!(b.is_empty());
    assert_eq!(kv.free_blocks(), 3);
    // Growing A to 13 tokens: a full-attention block more; each sliding group moves on
    // to blocks 1..=3, still 3.
    assert!(kv.grow(&mut a, 13));
    assert_eq!(kv.free_blocks(), 2);
    // A request that needs more than is free takes nothing.
    assert!(!kv.grow(&mut a, 40));
    assert_eq!(
        (a.blocks.len(), a.side().len(), kv.free_blocks()),
        (4, 6, 2)
    );
}

#[test]
fn linear_attention_states_are_held_whole_and_give_no_prefix_hits() {
    let layout = crate::model::KvLayout {
        sliding_groups: 0,
        window: 0,
        linear_groups: 3,
        state_blocks: 5,
        ..sliding_layout()
    };
    let mut kv = KvCache::new(100, 4).with_layout(layout);
    let p = content(9, 16, 1);
    let mut s = SeqBlocks::default();
    assert!(kv.admit(&mut s, &p, 16, 0, 16));
    assert_eq!((s.blocks.len(), s.side().len()), (4, 15));
    kv.register_full_blocks(&mut s, &p, 16, 16);
    // The same prompt again: its blocks are cached, but the state at their end is not.
    assert_eq!(kv.cached_prefix_blocks(&p, 16, 16), 0);
    for t in 17..=40 {
        assert!(kv.grow(&mut s, t));
    }
    assert_eq!((s.blocks.len(), s.side().len()), (10, 15));
    kv.release(&mut s);
    assert_eq!(kv.free_blocks(), 100);
    kv.audit().unwrap();
}

/// Every layer sliding (Mistral-7B-v0.1): one group, a window of 8 tokens in 4-token
/// blocks, so a hit needs its last ⌈7/4⌉ = 2 blocks cached.
fn all_sliding_layout() -> crate::model::KvLayout {
    crate::model::KvLayout {
        full_groups: 0,
        sliding_groups: 1,
        ..sliding_layout()
    }
}

#[test]
fn a_window_over_every_layer_frees_its_own_blocks_behind_it() {
    let mut kv = KvCache::new(20, 4).with_layout(all_sliding_layout());
    let p = content(0, 0, 3);
    let mut s = SeqBlocks::default();
    assert!(kv.admit(&mut s, &p, 12, 0, 12));
    kv.register_full_blocks(&mut s, &p, 12, 12);
    assert_eq!((s.len(), s.side().len(), kv.free_blocks()), (3, 0, 17));
    // Token 13 (12 computed): the window keeps blocks from ⌊(12 + 1 − 8)/4⌋ = 1 on, so
    // block 0 is freed (null in the list) as block 3 is taken.
    assert!(kv.grow(&mut s, 13));
    assert_eq!((s.len(), kv.free_blocks()), (4, 17));
    assert_eq!(s.blocks[0], NONE);
    // Up to token 20 (19 computed): blocks from ⌊12/4⌋ = 3 of 5 are held: 2.
    for t in 14..=20 {
        assert!(kv.grow(&mut s, t));
    }
    assert_eq!((s.len(), kv.free_blocks()), (5, 18));
    let mut seen = HolderCounts::default();
    kv.check_holders(std::iter::once(&s), &mut seen).unwrap();
    kv.audit().unwrap();
    // The freed prompt blocks keep their hashes on the free list.
    assert_eq!(kv.cached_prefix_blocks(&p, 12, 12), 2);
    kv.release(&mut s);
    assert!(s.is_empty());
    assert_eq!(kv.free_blocks(), 20);
    kv.audit().unwrap();
}

#[test]
fn a_window_hit_needs_only_the_blocks_the_window_reads() {
    let mut kv = KvCache::new(40, 4).with_layout(all_sliding_layout());
    let p = content(5, 32, 0);
    // A: a 32-token prompt in four 8-token chunks, then one decode. The window frees
    // blocks 1, 0 (computed 16), 3, 2 (24), 5, 4 (32): newest first, to the free list's tail.
    let mut a = SeqBlocks::default();
    assert!(kv.admit(&mut a, &p, 32, 0, 8));
    for (computed, next) in [(8, 16), (16, 24), (24, 32), (32, 33)] {
        kv.register_full_blocks(&mut a, &p, 32, computed);
        assert!(kv.grow(&mut a, next));
    }
    assert_eq!((a.len(), kv.free_blocks()), (9, 40 - 3));
    kv.release(&mut a);
    // The 31 never-used blocks and then the first two freed (blocks 1 and 0 of A's
    // prompt) go to another request: A's prompt blocks 0 and 1 are evicted.
    let mut other = SeqBlocks::default();
    assert!(kv.admit(&mut other, &content(9, 0, 9), 132, 0, 132));
    // The same prompt again: blocks 0 and 1 miss, 2..=6 are cached, and the window of a
    // 7-block hit reads only blocks 5 and 6 (2 in a row): a hit of 7 blocks (capped below
    // 8 so the last token is computed). A model with full attention would hit nothing.
    assert_eq!(kv.cached_prefix_blocks(&p, 32, 32), 7);
    let mut b = SeqBlocks::default();
    assert!(kv.admit(&mut b, &p, 32, 7, 32));
    // Blocks behind the window of 28 computed tokens, ⌊(29 − 8)/4⌋ = 5, are null; blocks 5
    // and 6 are claimed back from the free list; block 7 is fresh.
    assert_eq!(b.len(), 8);
    assert!(b.blocks[..5].iter().all(|&x| x == NONE));
    assert_eq!(kv.free_blocks(), 40 - 33 - 3);
    assert_eq!((kv.hit_blocks, kv.miss_blocks), (7, 8 + 33 + 1));
    let mut seen = HolderCounts::default();
    kv.check_holders([&other, &b].into_iter(), &mut seen)
        .unwrap();
    kv.audit().unwrap();
    kv.release(&mut b);
    kv.release(&mut other);
    assert_eq!(kv.free_blocks(), 40);
    kv.audit().unwrap();
}

#[test]
fn prompt_blocks_freed_before_registration_keep_the_hash_chain_going() {
    // A 32-token prompt computed at once, then a decode before its blocks are registered:
    // blocks before ⌊(32 + 1 − 8)/4⌋ = 6 are freed unregistered. Registering then skips
    // them but chains their hashes, so blocks 6 and 7 are indexed under the prompt's
    // hashes: a request sharing the 32 tokens hits 8 blocks (the window's last 2 cached).
    let mut kv = KvCache::new(30, 4).with_layout(all_sliding_layout());
    let a_prompt = content(7, 32, 1);
    let mut a = SeqBlocks::default();
    assert!(kv.admit(&mut a, &a_prompt, 32, 0, 32));
    assert!(kv.grow(&mut a, 33));
    assert!(a.blocks[..6].iter().all(|&x| x == NONE));
    kv.register_full_blocks(&mut a, &a_prompt, 32, 32);
    assert_eq!(kv.cached_prefix_blocks(&content(7, 32, 2), 36, 36), 8);
    kv.audit().unwrap();
    kv.release(&mut a);
    assert_eq!(kv.free_blocks(), 30);
}
