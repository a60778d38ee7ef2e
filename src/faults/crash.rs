//! Instance crashes: at listed times or drawn from an MTBF, each takes its instance down with
//! everything on it (queued, running and finishing requests, KV transfers to and from it,
//! its KV cache on both tiers); a fixed-size group's instance serves again after
//! `repair_s` + `reload_s`, an autoscaled group's is off and its policy decides. The requests
//! taken down, and those reaching a down instance, fail or are retried through the router.

use bevy_ecs::prelude::*;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::engine::{ClusterView, Event, EventQueue, FaultDue, InstanceDue, RecordDue};
use crate::instance::{InstanceIndex, Scheduler, Seq, list_for_batch, refresh_view};
use crate::kv::{KvCache, SeqBlocks};
use crate::request::{AssignedTo, FinalState, FinishedRequest, Lifecycle, RequestSpec};
use crate::scenario::CrashPolicy;
use crate::time::{SimDuration, SimTime};

/// The crash state of a run (only when the scenario's `faults` has crashes).
#[derive(Resource, Debug)]
pub struct Crashes {
    pub policy: CrashPolicy,
    pub repair: SimDuration,
    /// Model reload per instance (its group's).
    pub reload: Vec<SimDuration>,
    /// With `cluster.topology` and a derived reload: each instance's weights load over the
    /// fabric after its repair (replaces `reload`); empty otherwise.
    pub weights: Vec<Option<crate::network::WeightLoad>>,
    /// Instances of autoscaled groups (a crash turns them off).
    pub autoscaled: Vec<bool>,
    pub mtbf_s: Option<f64>,
    /// One stream per instance (with an MTBF).
    pub(super) rngs: Vec<ChaCha8Rng>,
    /// The next MTBF crash of each instance, if drawn.
    pub(super) next_mtbf: Vec<Option<SimTime>>,
    /// Instances marked down (requests reaching them are lost), until they serve again.
    pub(super) marked: Vec<u32>,
    /// Per instance: since when it is down awaiting its restart (fixed-size groups).
    pub(super) down_since: Vec<Option<SimTime>>,
    pub(super) down_time: SimDuration,
    /// Intervals in which one or more instances were down (the last may be open: MAX).
    pub(super) degraded: Vec<(SimTime, SimTime)>,
    pub(super) down_now: u32,
    /// Every crash that happened: (instance, at, back, listed, lost).
    pub(super) events: Vec<CrashRecord>,
    /// Per instance: its crash awaiting a restart (index into `events`).
    pub(super) open: Vec<Option<usize>>,
    /// The listed crashes, by time.
    pub(super) listed: Vec<Listed>,
    pub(super) skipped: u64,
    pub(super) lost: u64,
    pub(super) failed: u64,
    pub(super) retried: u64,
    pub(super) completed_after_retry: u64,
    /// (arrived, completed, good) of the requests arriving while all were up / some down.
    pub(super) healthy: [u64; 3],
    pub(super) degraded_slo: [u64; 3],
    /// Crashes in a row with requests in the system and no step run, request arrived or
    /// request ended between them, and that progress count at the last crash
    /// ([`NO_PROGRESS_CRASHES`]).
    pub(super) idle_crashes: u32,
    pub(super) progress: u64,
}

/// Crashes in a row with nothing served between them after which the run stops: instances
/// crash before they are up (an MTBF shorter than the start or repair), and requests that
/// wait without a timeout would wait for ever. A start that succeeds even 1 time in 100
/// ends such a streak at 1,000 but with probability 0.99¹⁰⁰⁰ ≈ 4 × 10⁻⁵.
pub const NO_PROGRESS_CRASHES: u32 = 1000;

#[derive(Debug, Clone)]
pub(super) struct CrashRecord {
    pub instance: u32,
    pub at: SimTime,
    pub back: Option<SimTime>,
    pub listed: bool,
    pub lost: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Listed {
    pub instance: u32,
    pub at: SimTime,
    pub happened: bool,
    /// Until its instance serves again (MAX while down or never).
    pub until: SimTime,
    /// before, during, after: (arrived, completed, good).
    pub spans: [[u64; 3]; 3],
}

impl Crashes {
    /// A run's crash state; `listed` = (instance, at) in any order.
    pub fn new(
        policy: CrashPolicy,
        repair: SimDuration,
        reload: Vec<SimDuration>,
        autoscaled: Vec<bool>,
        mtbf_s: Option<f64>,
        seed: u64,
        listed: &[(u32, SimTime)],
    ) -> Self {
        let n = reload.len();
        let mut listed: Vec<Listed> = listed
            .iter()
            .map(|&(instance, at)| Listed {
                instance,
                at,
                happened: false,
                until: SimTime::MAX,
                spans: [[0; 3]; 3],
            })
            .collect();
        listed.sort_by_key(|l| (l.at, l.instance));
        listed.dedup_by_key(|l| (l.at, l.instance));
        Crashes {
            policy,
            repair,
            reload,
            weights: Vec::new(),
            autoscaled,
            mtbf_s,
            rngs: match mtbf_s {
                Some(_) => (0..n)
                    .map(|i| crate::rng::stream(seed, &format!("faults.mtbf.{i}")))
                    .collect(),
                None => Vec::new(),
            },
            next_mtbf: vec![None; n],
            marked: Vec::new(),
            down_since: vec![None; n],
            down_time: SimDuration::ZERO,
            degraded: Vec::new(),
            down_now: 0,
            events: Vec::new(),
            open: vec![None; n],
            listed,
            skipped: 0,
            lost: 0,
            failed: 0,
            retried: 0,
            completed_after_retry: 0,
            healthy: [0; 3],
            degraded_slo: [0; 3],
            idle_crashes: 0,
            progress: 0,
        }
    }

    /// Draws instance `i`'s next MTBF crash from `from` and schedules it (not past the
    /// clock's range).
    pub(super) fn draw(&mut self, i: u32, from: SimTime, queue: &mut EventQueue) {
        let Some(mtbf) = self.mtbf_s else {
            return;
        };
        let u: f64 = self.rngs[i as usize].random();
        let gap = -mtbf * (1.0 - u).ln();
        let at = from.as_us() as f64 + (gap * 1e6).ceil();
        if at.is_finite() && at < crate::engine::MAX_SIM_TIME.as_us() as f64 {
            let at = SimTime(at as u64);
            self.next_mtbf[i as usize] = Some(at);
            queue.push(at, Event::Crash { instance: i });
        }
    }

    /// True when one or more instances were down when a request arrived at `t`.
    pub(super) fn degraded_at(&self, t: SimTime) -> bool {
        let k = self.degraded.partition_point(|&(from, _)| from <= t);
        k > 0 && t < self.degraded[k - 1].1
    }

    pub(super) fn went_down(&mut self, i: u32, now: SimTime) {
        self.down_since[i as usize] = Some(now);
        if self.down_now == 0 {
            self.degraded.push((now, SimTime::MAX));
        }
        self.down_now += 1;
    }

    pub(super) fn came_up(&mut self, i: u32, now: SimTime) {
        if let Some(since) = self.down_since[i as usize].take() {
            self.down_time += now.since(since);
            self.down_now -= 1;
            if self.down_now == 0
                && let Some(last) = self.degraded.last_mut()
            {
                last.1 = now;
            }
        }
    }

    /// Down time including the instances still down at `end`.
    pub(super) fn down_until(&self, end: SimTime) -> SimDuration {
        self.down_since
            .iter()
            .flatten()
            .fold(self.down_time, |acc, &since| acc + end.since(since))
    }
}

/// A request a crash took down, as it was.
enum Lost {
    /// On the instance (or in KV transfer to or from it).
    Seq(Seq),
    /// Its last step was in flight.
    Leaving(FinishedRequest),
    /// It reached the instance while it was down.
    Arriving(Entity),
}

/// Advance stage (after steps retire and phases end): restarts first, then crashes, in
/// instance order.
pub fn crash_and_restart(world: &mut World) {
    let now = world.resource::<crate::engine::SimClock>().now;
    let (mut crashes, mut restarts) = {
        let mut due = world.resource_mut::<FaultDue>();
        (
            std::mem::take(&mut due.crashes),
            std::mem::take(&mut due.restarts),
        )
    };
    restarts.sort_unstable();
    restarts.dedup();
    for &i in &restarts {
        restart(world, i, now);
    }
    crashes.sort_unstable();
    crashes.dedup();
    for &i in &crashes {
        crash(world, i, now);
    }
}

/// Instance `i` serves again (a fixed-size group's, after its repair and reload).
fn restart(world: &mut World, i: u32, now: SimTime) {
    let e = world.resource::<InstanceIndex>().0[i as usize];
    world.resource_scope(|world, mut c: Mut<Crashes>| {
        if c.down_since[i as usize].is_none() {
            return;
        }
        c.came_up(i, now);
        if let Some(k) = c.open[i as usize].take() {
            c.events[k].back = Some(now);
        }
        for l in c
            .listed
            .iter_mut()
            .filter(|l| l.instance == i && l.happened)
        {
            l.until = l.until.min(now);
        }
        let mut queue = world.resource_mut::<EventQueue>();
        c.draw(i, now, &mut queue);
    });
    mark(world, e, i, false);
    // Requests parked for want of a routable instance (autoscaling) may go now.
    if world
        .get_resource::<crate::engine::Parked>()
        .is_some_and(|p| !p.requests.is_empty())
    {
        world.resource_mut::<EventQueue>().push(now, Event::Unpark);
    }
}

/// Marks instance `i` (entity `e`) down (unroutable) or up again, and updates the view.
fn mark(world: &mut World, e: Entity, i: u32, down: bool) {
    world.resource_scope(|world, mut view: Mut<ClusterView>| {
        let mut q = world.query::<(&mut Scheduler, &KvCache)>();
        let (mut sched, kv) = q.get_mut(world, e).expect("instance exists");
        sched.down = down;
        sched.unroutable = down;
        refresh_view(&mut view, i, &sched, kv);
    });
}

/// Instance `i` crashes now, if this is one of its crashes and it is up.
fn crash(world: &mut World, i: u32, now: SimTime) {
    let e = world.resource::<InstanceIndex>().0[i as usize];
    let (listed, mtbf) = {
        let c = world.resource::<Crashes>();
        (
            c.listed.iter().any(|l| l.instance == i && l.at == now),
            c.next_mtbf[i as usize] == Some(now),
        )
    };
    if !listed && !mtbf {
        return; // a draw superseded by a restart's
    }
    let autoscaled = world.resource::<Crashes>().autoscaled[i as usize];
    let down = world.get::<Scheduler>(e).is_some_and(|s| s.down)
        || world
            .get::<crate::instance::Power>(e)
            .is_some_and(|p| p.phase == crate::instance::Phase::Off);
    let skipped = world.resource_scope(|world, mut c: Mut<Crashes>| {
        if mtbf {
            c.next_mtbf[i as usize] = None;
        }
        if down {
            c.skipped += 1;
            // An autoscaled instance that is off draws again from now (it has no restart).
            if mtbf && autoscaled {
                c.draw(i, now, &mut world.resource_mut::<EventQueue>());
            }
        }
        down
    });
    if skipped {
        return;
    }
    let lost = take_down(world, i);
    if autoscaled {
        crate::autoscale::crash_off(world, i, now);
        // Requests parked for the cold start it was (or for another) would wait for an
        // arrival to ask again, and with none to come, for ever: ask now.
        if world
            .get_resource::<crate::engine::Parked>()
            .is_some_and(|p| !p.requests.is_empty())
        {
            world.resource_mut::<crate::engine::ScaleDue>().cold_start = true;
        }
    }
    mark(world, e, i, true);
    world.resource_scope(|world, mut c: Mut<Crashes>| {
        c.marked.push(i);
        let k = c.events.len();
        c.events.push(CrashRecord {
            instance: i,
            at: now,
            back: None,
            listed,
            lost: 0,
        });
        for l in c
            .listed
            .iter_mut()
            .filter(|l| l.instance == i && l.at == now)
        {
            l.happened = true;
        }
        let mut queue = world.resource_mut::<EventQueue>();
        if autoscaled {
            c.draw(i, now, &mut queue);
        } else {
            c.went_down(i, now);
            c.open[i as usize] = Some(k);
            let back = match c.weights.get(i as usize).and_then(Option::as_ref) {
                None => now + c.repair + c.reload[i as usize],
                Some(w) => SimTime(w.done_us(now.as_us(), (now + c.repair).as_us())),
            };
            if back < crate::engine::MAX_SIM_TIME {
                queue.push(back, Event::Restart { instance: i });
            }
        }
    });
    settle_fates(world, i, now, lost);
    no_progress(world, now);
}

/// Counts a crash towards [`NO_PROGRESS_CRASHES`] unless something was served since the last.
fn no_progress(world: &mut World, now: SimTime) {
    let mut steps = 0;
    for s in world.query::<&Scheduler>().iter(world) {
        steps += s.counters.steps;
    }
    let injected = world.resource::<crate::engine::Injected>().0;
    let ended = world.resource::<crate::metrics::Aggregates>().ended();
    let progress = steps + injected + ended;
    let mut c = world.resource_mut::<Crashes>();
    // Crashes while no request is in the system keep no one waiting.
    c.idle_crashes = if progress == c.progress && injected > ended {
        c.idle_crashes + 1
    } else {
        0
    };
    c.progress = progress;
    if c.idle_crashes < NO_PROGRESS_CRASHES {
        return;
    }
    let mtbf = c
        .mtbf_s
        .map(|m| format!(" (faults.mtbf_s = {m} s)"))
        .unwrap_or_default();
    let msg = format!(
        "{NO_PROGRESS_CRASHES} crashes in a row by t = {:.1} s with no step run, request arrived \
         or request ended between them: instances crash{mtbf} before they are up again, and \
         the requests waiting for them would wait for ever; raise faults.mtbf_s, shorten the \
         start (provision_s, load_s, warmup_s) or the repair (repair_s, reload_s), give the \
         requests a timeout_s, or set horizon_s",
        now.as_us() as f64 / 1e6
    );
    world
        .resource_mut::<crate::engine::SimFault>()
        .0
        .get_or_insert(crate::engine::Fault::NoProgress(msg));
}

/// Takes everything off instance `i`: its requests (and those in KV transfer to or from it,
/// whose blocks are released on the other side), its step, its KV cache. Returns the
/// requests in instance order: waiting, running, handed off, arrived, incoming, leaving,
/// then those sent from here.
fn take_down(world: &mut World, i: u32) -> Vec<Lost> {
    let index = world.resource::<InstanceIndex>().0.clone();
    let mut lost = Vec::new();
    world.resource_scope(|world, mut view: Mut<ClusterView>| {
        world.resource_scope(|world, mut due: Mut<InstanceDue>| {
            let mut q = world.query::<(&mut Scheduler, &mut KvCache)>();
            // Hand-offs from here still in transfer: the decode side frees its reservation.
            let mut sent: Vec<Seq> = Vec::new();
            for (d, &e) in index.iter().enumerate() {
                let d = d as u32;
                if d == i {
                    continue;
                }
                let (mut sched, mut kv) = q.get_mut(world, e).expect("instance exists");
                if !sched.incoming.iter().any(|t| t.from == i) {
                    continue;
                }
                let mut k = 0;
                while k < sched.incoming.len() {
                    if sched.incoming[k].from != i {
                        k += 1;
                        continue;
                    }
                    let mut x = sched.incoming.remove(k).expect("index is valid");
                    kv.release(&mut x.reserved);
                    let slot = &mut view.instances[d as usize];
                    slot.in_flight = slot.in_flight.saturating_sub(1);
                    sent.push(x.handoff.seq);
                }
                list_for_batch(&mut due, d, &mut sched);
                refresh_view(&mut view, d, &sched, &kv);
            }
            let (mut sched, mut kv) = q.get_mut(world, index[i as usize]).expect("instance");
            let sched = &mut *sched;
            sched.settle();
            fn on(mut seq: Seq, kv: &mut KvCache, lost: &mut Vec<Lost>) {
                kv.release(&mut seq.kv);
                lost.push(Lost::Seq(seq));
            }
            for seq in sched.waiting.drain(..) {
                on(seq, &mut kv, &mut lost);
            }
            for seq in sched.running.drain(..) {
                on(seq, &mut kv, &mut lost);
            }
            for h in sched.handoff.drain(..) {
                on(h.seq, &mut kv, &mut lost);
            }
            for seq in sched.arrived.drain(..) {
                on(seq, &mut kv, &mut lost);
            }
            // Hand-offs headed here: the prefill side frees the blocks it was sending.
            let mut from: Vec<(u32, SeqBlocks)> = Vec::new();
            for mut x in sched.incoming.drain(..) {
                kv.release(&mut x.reserved);
                let slot = &mut view.instances[i as usize];
                slot.in_flight = slot.in_flight.saturating_sub(1);
                from.push((x.from, std::mem::take(&mut x.handoff.seq.kv)));
                lost.push(Lost::Seq(x.handoff.seq));
            }
            for f in sched.leaving.drain(..) {
                lost.push(Lost::Leaving(f));
            }
            for seq in sent {
                on(seq, &mut kv, &mut lost);
            }
            for (_, mut blocks) in sched.sent.drain(..) {
                kv.release(&mut blocks);
            }
            sched.outbound = 0;
            sched.plan.clear();
            sched.step_end = None;
            sched.in_flight.clear();
            sched.lockstep = Default::default();
            sched.stalled_steps = 0;
            sched.scheduled.clear();
            sched.unordered = false;
            kv.wipe();
            for (p, mut blocks) in from {
                let (mut src, mut src_kv) = q
                    .get_mut(world, index[p as usize])
                    .expect("instance exists");
                src_kv.release(&mut blocks);
                src.outbound -= 1;
                list_for_batch(&mut due, p, &mut src);
                refresh_view(&mut view, p, &src, &src_kv);
            }
        });
    });
    lost
}

/// The crash policy on each request instance `i`'s crash (or its being down) took down:
/// sent again after its backoff, or ended `failed`.
fn settle_fates(world: &mut World, i: u32, now: SimTime, lost: Vec<Lost>) {
    if lost.is_empty() {
        return;
    }
    let policy = world.resource::<Crashes>().policy.clone();
    let (mut failed, mut retried) = (0u64, 0u64);
    let n = lost.len() as u64;
    for l in lost {
        let entity = match &l {
            Lost::Seq(s) => s.entity,
            Lost::Leaving(f) => f.entity,
            Lost::Arriving(e) => *e,
        };
        let Some(retries) = world.get::<Lifecycle>(entity).map(|l| l.retries) else {
            continue;
        };
        if let Some(wait) = policy.backoff(retries + 1) {
            let spent = match &l {
                Lost::Seq(s) => s.energy_nj,
                Lost::Leaving(f) => f.energy_nj,
                Lost::Arriving(_) => 0,
            };
            let mut life = world
                .get_mut::<Lifecycle>(entity)
                .expect("the request is live");
            life.retries += 1;
            // The attempt's energy stays the request's (its Seq already counts what
            // earlier attempts spent).
            life.retried_energy_nj = spent.max(life.retried_energy_nj);
            life.enqueued = None;
            world.entity_mut(entity).remove::<AssignedTo>();
            let at = now + SimDuration::from_secs_f64(wait);
            world
                .resource_mut::<EventQueue>()
                .push(at, Event::Retry { request: entity });
            retried += 1;
            continue;
        }
        let f = match l {
            Lost::Seq(seq) => seq.finish(FinalState::Failed, i, None, None),
            Lost::Leaving(mut f) => {
                f.state = FinalState::Failed;
                f.completed = None;
                f.e2e = None;
                f
            }
            Lost::Arriving(e) => {
                let spec = world
                    .get::<RequestSpec>(e)
                    .expect("the request is live")
                    .clone();
                let life = *world.get::<Lifecycle>(e).expect("the request is live");
                FinishedRequest::unserved(e, spec, life, FinalState::Failed, Some(i))
            }
        };
        world.resource_mut::<RecordDue>().0.push(f);
        failed += 1;
    }
    let mut c = world.resource_mut::<Crashes>();
    c.lost += n;
    c.failed += failed;
    c.retried += retried;
    if let Some(k) = c.open[i as usize].or_else(|| c.events.iter().rposition(|x| x.instance == i)) {
        c.events[k].lost += n;
    }
}

/// Enqueue stage (after routed requests join their queues, before timeouts): the requests
/// that reached a down instance meet the crash policy.
pub fn lose_arrivals(world: &mut World) {
    let now = world.resource::<crate::engine::SimClock>().now;
    let marked = world.resource::<Crashes>().marked.clone();
    let index = world.resource::<InstanceIndex>().0.clone();
    let mut still = Vec::with_capacity(marked.len());
    for i in marked {
        let mut sched = world
            .get_mut::<Scheduler>(index[i as usize])
            .expect("instance exists");
        let arrived = std::mem::take(&mut sched.lost);
        if sched.down {
            still.push(i);
        }
        let arrived: Vec<Lost> = arrived
            .into_iter()
            .filter(|&e| {
                world
                    .get::<Lifecycle>(e)
                    .is_some_and(|l| l.enqueued.is_none())
            })
            .map(Lost::Arriving)
            .collect();
        settle_fates(world, i, now, arrived);
    }
    world.resource_mut::<Crashes>().marked = still;
}

/// True when some instance is marked down (its arrivals may need the crash policy).
pub fn any_marked(c: Res<Crashes>) -> bool {
    !c.marked.is_empty()
}

/// True when crashes or restarts are due now.
pub fn faults_due(due: Res<FaultDue>) -> bool {
    !due.crashes.is_empty() || !due.restarts.is_empty()
}
