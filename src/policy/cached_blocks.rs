//! What routers see of the instances' caches: [`CachedBlocks`], built from their
//! [`KvEvent`](crate::kv::KvEvent)s by [`index_kv_events`] (in `SimSystems::Observe`).

use bevy_ecs::prelude::*;

use super::PrefixProbe;

/// The blocks each instance holds, as its [`KvEvent`](crate::kv::KvEvent)s tell (llm-d's
/// precise prefix scorer subscribes to vLLM's KV events the same way): by content id, on the
/// GPU, the CPU tier and/or the NVMe tier, and the blocks of the shared store (which any
/// instance may load). Prefix-aware routers read it through [`PrefixProbe`]; it is kept
/// only while KV events are on (a policy whose `wants_kv_events` is true turns them on).
#[derive(Resource, Debug, Default, Clone)]
pub struct CachedBlocks {
    /// Per instance: content id → tiers holding it (bit 0 GPU, bit 1 CPU, bit 2 NVMe).
    pub per_instance: Vec<std::collections::HashMap<u64, u8>>,
    /// The cluster's shared KV store (`cluster.kv_store`), which every instance can load
    /// from: content id → 1 while held.
    pub store: std::collections::HashMap<u64, u8>,
    pub block_size: u32,
    /// How far the events have been read: one cursor for the system's copies in both tick
    /// schedules (a `MessageReader` would give each copy its own and read events twice).
    pub cursor: bevy_ecs::message::MessageCursor<crate::kv::KvEvent>,
}

impl CachedBlocks {
    /// True if instance `i` holds block `hash` on any tier, or can load it from the shared
    /// store.
    pub fn holds(&self, i: u32, hash: u64) -> bool {
        self.per_instance
            .get(i as usize)
            .is_some_and(|m| m.contains_key(&hash))
            || self.store.contains_key(&hash)
    }
}

impl PrefixProbe for CachedBlocks {
    /// Leading full prompt blocks held, capped (as vLLM) so that one prompt token is left to
    /// compute.
    fn cached_blocks(
        &self,
        instance: u32,
        content: &crate::request::PromptContent,
        input: u32,
    ) -> u32 {
        let bs = self.block_size.max(1);
        let cap = (input / bs).min(input.saturating_sub(1) / bs);
        crate::kv::prompt_block_hashes(content, cap * bs, bs)
            .iter()
            .take_while(|&&h| self.holds(instance, h))
            .count() as u32
    }
}

/// Applies the instances' KV events to [`CachedBlocks`].
pub fn index_kv_events(
    events: Res<Messages<crate::kv::KvEvent>>,
    mut cached: ResMut<CachedBlocks>,
) {
    let CachedBlocks {
        per_instance,
        store,
        cursor,
        ..
    } = &mut *cached;
    for e in cursor.read(&events) {
        apply(per_instance, store, e);
    }
}

/// One event applied to the instances' tiers and the shared store.
fn apply(
    per_instance: &mut Vec<std::collections::HashMap<u64, u8>>,
    store: &mut std::collections::HashMap<u64, u8>,
    e: &crate::kv::KvEvent,
) {
    use crate::kv::{KvEventKind, KvTier};
    let i = e.instance as usize;
    if per_instance.len() <= i {
        per_instance.resize_with(i + 1, Default::default);
    }
    let map = &mut per_instance[i];
    let (set, clear) = match e.kind {
        KvEventKind::Stored | KvEventKind::Reloaded | KvEventKind::Loaded { .. } => (1, 0),
        KvEventKind::Offloaded => (2, 0),
        KvEventKind::Written { tier: KvTier::Nvme } => (4, 0),
        KvEventKind::Evicted { tier: KvTier::Gpu } => (0, 1),
        KvEventKind::Evicted { tier: KvTier::Cpu } => (0, 2),
        KvEventKind::Evicted { tier: KvTier::Nvme } => (0, 4),
        // The shared store: one set every instance reads.
        KvEventKind::Written { .. } => {
            store.insert(e.block, 1);
            return;
        }
        KvEventKind::Evicted { .. } => {
            store.remove(&e.block);
            return;
        }
        KvEventKind::Transferred { .. } => return,
    };
    let tiers = map.entry(e.block).or_default();
    *tiers = (*tiers | set) & !clear;
    if *tiers == 0 {
        map.remove(&e.block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvEvent, KvEventKind, KvTier};
    use crate::time::SimTime;

    fn event(instance: u32, block: u64, kind: KvEventKind) -> KvEvent {
        KvEvent {
            time: SimTime::ZERO,
            instance,
            block,
            kind,
        }
    }

    #[test]
    fn a_block_in_the_shared_store_counts_as_held_by_every_instance() {
        let mut c = CachedBlocks::default();
        let store = KvTier::Store;
        apply(
            &mut c.per_instance,
            &mut c.store,
            &event(0, 7, KvEventKind::Stored),
        );
        assert!(
            c.holds(0, 7) && !c.holds(1, 7),
            "a GPU block is its instance's"
        );
        apply(
            &mut c.per_instance,
            &mut c.store,
            &event(0, 7, KvEventKind::Written { tier: store }),
        );
        assert!(c.holds(1, 7) && c.holds(5, 7), "the store's is everyone's");
        // Evicted from the store by another instance's write: instance 0 still has it.
        apply(
            &mut c.per_instance,
            &mut c.store,
            &event(1, 7, KvEventKind::Evicted { tier: store }),
        );
        assert!(c.holds(0, 7) && !c.holds(1, 7));
        // The NVMe tier is the instance's own.
        apply(
            &mut c.per_instance,
            &mut c.store,
            &event(2, 9, KvEventKind::Written { tier: KvTier::Nvme }),
        );
        assert!(c.holds(2, 9) && !c.holds(0, 9));
        apply(
            &mut c.per_instance,
            &mut c.store,
            &event(2, 9, KvEventKind::Evicted { tier: KvTier::Nvme }),
        );
        assert!(!c.holds(2, 9));
    }
}
