//! What routers see of the instances' caches: [`CachedBlocks`], built from their
//! [`KvEvent`](crate::kv::KvEvent)s by [`index_kv_events`] (in `SimSystems::Observe`).

use bevy_ecs::prelude::*;

use super::PrefixProbe;

/// The blocks each instance holds, as its [`KvEvent`](crate::kv::KvEvent)s tell (llm-d's
/// precise prefix scorer subscribes to vLLM's KV events the same way): by content id, on the
/// GPU and/or the CPU tier. Prefix-aware routers read it through [`PrefixProbe`]; it is kept
/// only while KV events are on (a policy whose `wants_kv_events` is true turns them on).
#[derive(Resource, Debug, Default, Clone)]
pub struct CachedBlocks {
    /// Per instance: content id → tiers holding it (bit 0 GPU, bit 1 CPU).
    pub per_instance: Vec<std::collections::HashMap<u64, u8>>,
    pub block_size: u32,
    /// How far the events have been read: one cursor for the system's copies in both tick
    /// schedules (a `MessageReader` would give each copy its own and read events twice).
    pub cursor: bevy_ecs::message::MessageCursor<crate::kv::KvEvent>,
}

impl CachedBlocks {
    /// True if instance `i` holds block `hash` on any tier.
    pub fn holds(&self, i: u32, hash: u64) -> bool {
        self.per_instance
            .get(i as usize)
            .is_some_and(|m| m.contains_key(&hash))
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
    use crate::kv::{KvEventKind, KvTier};
    let cached = &mut *cached;
    for e in cached.cursor.read(&events) {
        let i = e.instance as usize;
        if cached.per_instance.len() <= i {
            cached.per_instance.resize_with(i + 1, Default::default);
        }
        let map = &mut cached.per_instance[i];
        let (set, clear) = match e.kind {
            KvEventKind::Stored | KvEventKind::Reloaded => (1, 0),
            KvEventKind::Offloaded => (2, 0),
            KvEventKind::Evicted { tier: KvTier::Gpu } => (0, 1),
            KvEventKind::Evicted { tier: KvTier::Cpu } => (0, 2),
            KvEventKind::Transferred { .. } => continue,
        };
        let tiers = map.entry(e.block).or_default();
        *tiers = (*tiers | set) & !clear;
        if *tiers == 0 {
            map.remove(&e.block);
        }
    }
}
