//! `session_affinity` (RouteSim): every turn of a session goes where its first turn went
//! (while that instance is routable); new sessions and requests outside sessions go to the
//! least outstanding instance. Above `max_sessions` remembered sessions, the older half is
//! forgotten.

use std::collections::HashMap;

use super::{InTurn, RouterView, RoutingEntry, RoutingPolicy};
use crate::request::RequestSpec;
use crate::time::SimTime;

pub(super) const ENTRY: RoutingEntry = RoutingEntry {
    name: "session_affinity",
    description: "sticky per session; otherwise least outstanding",
    params: &[(
        "max_sessions",
        "sessions remembered before the older half is dropped [100000]",
    )],
    free_params: false,
    build: |a| {
        Ok(Box::new(SessionAffinity {
            sticky: HashMap::new(),
            max: a.at_least("max_sessions", 100_000.0, 2.0)? as usize,
            ties: InTurn::default(),
        }))
    },
};

pub struct SessionAffinity {
    /// session → (instance, last use)
    sticky: HashMap<u64, (u32, u64)>,
    max: usize,
    /// Ties of the least-outstanding pick, taken in turn.
    ties: InTurn,
}

impl RoutingPolicy for SessionAffinity {
    fn choose(&mut self, r: &RequestSpec, now: SimTime, view: &RouterView<'_>) -> Option<u32> {
        let session = r.session.map(|s| s.id);
        if let Some(sid) = session
            && let Some((i, used)) = self.sticky.get_mut(&sid)
            && view.instances.get(*i as usize).is_some_and(|s| s.routable)
        {
            *used = now.as_us();
            return Some(*i);
        }
        let pick = super::least_outstanding::pick(view, &mut self.ties)?;
        if let Some(sid) = session {
            if self.sticky.len() >= self.max {
                let mut stamps: Vec<u64> = self.sticky.values().map(|v| v.1).collect();
                stamps.sort_unstable();
                let cut = stamps[stamps.len() / 2];
                self.sticky.retain(|_, v| v.1 >= cut);
            }
            self.sticky.insert(sid, (pick, now.as_us()));
        }
        Some(pick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{any_request, snapshot};
    use crate::request::SessionRef;

    #[test]
    fn turns_stick_to_the_first_instance_until_it_is_unroutable() {
        let mut view = vec![snapshot(0, 5, 0, 0), snapshot(1, 0, 0, 0)];
        let mut p = SessionAffinity {
            sticky: HashMap::new(),
            max: 10,
            ties: InTurn::default(),
        };
        let mut r = any_request();
        r.session = Some(SessionRef { id: 7, turn: 0 });
        assert_eq!(p.choose(&r, SimTime(0), &RouterView::of(&view)), Some(1));
        view[1].queue_depth = 100;
        assert_eq!(
            p.choose(&r, SimTime(1), &RouterView::of(&view)),
            Some(1),
            "sticky despite load"
        );
        view[1].routable = false;
        assert_eq!(p.choose(&r, SimTime(2), &RouterView::of(&view)), Some(0));
    }
}
