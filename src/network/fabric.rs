//! Links with a bandwidth each, shared by the transfers that cross them, first come first
//! served: a transfer takes, at every moment, what the transfers started before it leave
//! free on the most loaded link of its path (see [`Fabric::reserve`]).

/// One link of the fabric, in one direction.
#[derive(Clone, Debug)]
pub struct Link {
    /// Its name in outputs, e.g. `node 0 NVLink out of instance 3`.
    pub name: String,
    /// Its level (`nvlink`, `nic`, `rack`, `store`).
    pub level: &'static str,
    /// Bytes per µs.
    pub bytes_per_us: f64,
    /// What the reserved transfers use from each time on: `(from µs, bytes per µs)`,
    /// ascending; the rate holds until the next entry; before the first, 0.
    used: Vec<(u64, f64)>,
    /// Bytes carried (reserved), for the summary.
    pub bytes: f64,
    /// Transfers that crossed it.
    pub transfers: u64,
}

impl Link {
    /// Used rate at `t`.
    fn used_at(&self, t: u64) -> f64 {
        match self.used.partition_point(|&(from, _)| from <= t) {
            0 => 0.0,
            k => self.used[k - 1].1,
        }
    }

    /// The first change of the used rate after `t`.
    fn next_change(&self, t: u64) -> Option<u64> {
        let k = self.used.partition_point(|&(from, _)| from <= t);
        self.used.get(k).map(|&(from, _)| from)
    }

    /// Adds `rate` over `[from, until)`.
    fn add(&mut self, from: u64, until: u64, rate: f64) {
        if until <= from || rate <= 0.0 {
            return;
        }
        for t in [from, until] {
            let k = self.used.partition_point(|&(at, _)| at < t);
            if self.used.get(k).is_none_or(|&(at, _)| at != t) {
                let before = self.used_at(t);
                self.used.insert(k, (t, before));
            }
        }
        let lo = self.used.partition_point(|&(at, _)| at < from);
        let hi = self.used.partition_point(|&(at, _)| at < until);
        for e in &mut self.used[lo..hi] {
            e.1 += rate;
        }
        // A change to the rate it already has is none: back-to-back transfers on a full link
        // (a burst of block writes) then leave one entry, not one each.
        self.used.dedup_by(|later, earlier| later.1 == earlier.1);
    }

    /// Forgets the profile before `now` (its value at `now` stays).
    fn forget_before(&mut self, now: u64) {
        let k = self.used.partition_point(|&(from, _)| from <= now);
        if k > 1 {
            self.used.drain(..k - 1);
        }
    }
}

/// Index of a link in its [`Fabric`].
pub type LinkId = u32;

/// The links of a cluster and what is reserved on them.
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    pub links: Vec<Link>,
}

/// What [`Fabric::reserve`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reserved {
    /// When the last byte arrives (µs).
    pub done_us: u64,
    /// When it would have arrived on an idle fabric (µs): `done_us` minus this is the
    /// contention's share.
    pub alone_us: u64,
}

impl Fabric {
    /// Adds a link of `gb_per_s` (10⁹ bytes per second); returns its id.
    pub fn add_link(&mut self, name: String, level: &'static str, gb_per_s: f64) -> LinkId {
        self.links.push(Link {
            name,
            level,
            bytes_per_us: gb_per_s * 1e3,
            used: Vec::new(),
            bytes: 0.0,
            transfers: 0,
        });
        (self.links.len() - 1) as LinkId
    }

    /// Reserves `bytes` over `path`, starting at `start_us`, at no more than `cap` bytes per
    /// µs (the sender's own limit; `f64::INFINITY` for none). At every moment the transfer
    /// gets the least that the transfers reserved before it leave free on any link of its
    /// path, until its bytes are through: first come, first served per link, and what a
    /// slow end of an earlier transfer leaves free on a fast link serves the next one. Two
    /// equal transfers started together on one link therefore end at one and at two times
    /// the time of one. Times are whole µs (a transfer holds its rate to the µs its last
    /// byte arrives in). `now_us` (≤ `start_us`) lets the links forget what is over.
    pub fn reserve(
        &mut self,
        path: &[LinkId],
        now_us: u64,
        start_us: u64,
        bytes: f64,
        cap: f64,
    ) -> Reserved {
        self.reserve_slowed(path, now_us, start_us, bytes, cap, 1.0)
    }

    /// [`Fabric::reserve`] over a path whose end keeps only `share` (in (0, 1]) of its
    /// bandwidth (a degraded link, `faults`): the transfer holds the links as `bytes / share`
    /// would, so it and those behind it take that much longer, but the links count the
    /// `bytes` it carries (they counted the padding as data carried).
    pub fn reserve_slowed(
        &mut self,
        path: &[LinkId],
        now_us: u64,
        start_us: u64,
        carried: f64,
        cap: f64,
        share: f64,
    ) -> Reserved {
        let bytes = carried / share;
        let free_rate = path
            .iter()
            .map(|&l| self.links[l as usize].bytes_per_us)
            .fold(cap, f64::min);
        let alone_us = start_us + (bytes / free_rate).ceil() as u64;
        if bytes <= 0.0 || path.is_empty() {
            return Reserved {
                done_us: start_us,
                alone_us: start_us,
            };
        }
        for &l in path {
            self.links[l as usize].forget_before(now_us);
        }
        // Walk the segments where every link's use is constant.
        let mut t = start_us;
        let mut left = bytes;
        let mut segments: Vec<(u64, u64, f64)> = Vec::new();
        let done_us = loop {
            let mut rate = cap;
            let mut next: Option<u64> = None;
            for &l in path {
                let link = &self.links[l as usize];
                rate = rate.min((link.bytes_per_us - link.used_at(t)).max(0.0));
                if let Some(c) = link.next_change(t) {
                    next = Some(next.map_or(c, |n: u64| n.min(c)));
                }
            }
            // Below a billionth of the link, the link is full (rounding of earlier rates).
            if rate <= free_rate * 1e-9 {
                match next {
                    Some(n) => {
                        t = n;
                        continue;
                    }
                    None => unreachable!("after every reservation ends each link is free"),
                }
            }
            let finish = t + (left / rate).ceil() as u64;
            match next {
                Some(n) if n < finish => {
                    segments.push((t, n, rate));
                    left -= rate * (n - t) as f64;
                    t = n;
                }
                _ => {
                    segments.push((t, finish.max(t + 1), rate));
                    break finish.max(t + 1);
                }
            }
        };
        for &l in path {
            let link = &mut self.links[l as usize];
            for &(from, until, rate) in &segments {
                link.add(from, until, rate);
            }
            link.bytes += carried;
            link.transfers += 1;
        }
        Reserved { done_us, alone_us }
    }

    /// The fraction of `[0, end_us)` link `l` carried data at its full bandwidth: bytes
    /// carried over bandwidth × time.
    pub fn utilisation(&self, l: LinkId, end_us: u64) -> f64 {
        let link = &self.links[l as usize];
        if end_us == 0 {
            return 0.0;
        }
        link.bytes / (link.bytes_per_us * end_us as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One link of 1 GB/s (1,000 bytes per µs), and a second of 3 GB/s.
    fn two() -> (Fabric, LinkId, LinkId) {
        let mut f = Fabric::default();
        let a = f.add_link("a".into(), "nic", 1.0);
        let b = f.add_link("b".into(), "rack", 3.0);
        (f, a, b)
    }

    #[test]
    fn two_transfers_on_one_link_take_twice_as_long_as_one() {
        let (mut f, a, _) = two();
        let one = f.reserve(&[a], 0, 0, 1e6, f64::INFINITY);
        assert_eq!(one.done_us, 1_000);
        let two = f.reserve(&[a], 0, 0, 1e6, f64::INFINITY);
        assert_eq!((two.done_us, two.alone_us), (2_000, 1_000));
        // Once both are through, the link is free again.
        assert_eq!(f.reserve(&[a], 0, 5_000, 1e6, f64::INFINITY).done_us, 6_000);
    }

    #[test]
    fn a_transfer_uses_what_a_slower_earlier_one_leaves_on_a_shared_link() {
        // A: 1 GB/s into the 3 GB/s link b; the second transfer, over b alone, gets 2 GB/s
        // while A runs (1 ms), then 3 GB/s: 2e6 bytes in 1 ms + 1e6 / 3,000 µs.
        let (mut f, a, b) = two();
        assert_eq!(f.reserve(&[a, b], 0, 0, 1e6, f64::INFINITY).done_us, 1_000);
        assert_eq!(f.reserve(&[b], 0, 0, 3e6, f64::INFINITY).done_us, 1_334);
        assert!((f.links[b as usize].bytes - 4e6).abs() < 1e-6);
    }

    #[test]
    fn a_later_start_waits_only_for_what_is_left_and_a_cap_limits_the_rate() {
        let (mut f, a, _) = two();
        f.reserve(&[a], 0, 0, 1e6, f64::INFINITY); // 0–1,000 µs
        // Starts at 500: the link is full until 1,000, then at most 250 bytes per µs.
        let r = f.reserve(&[a], 500, 500, 1e5, 250.0);
        assert_eq!((r.done_us, r.alone_us), (1_400, 900));
        assert!((f.utilisation(a, 2_200) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_slowed_transfer_holds_the_link_longer_but_counts_only_its_bytes() {
        // At half the link: 1e6 bytes take 2 ms, and one behind it ends at 3 ms; the link
        // carried 2e6 bytes (it counted 3e6: the padding as data).
        let (mut f, a, _) = two();
        let slow = f.reserve_slowed(&[a], 0, 0, 1e6, f64::INFINITY, 0.5);
        assert_eq!((slow.done_us, slow.alone_us), (2_000, 2_000));
        assert_eq!(f.reserve(&[a], 0, 0, 1e6, f64::INFINITY).done_us, 3_000);
        assert!((f.links[a as usize].bytes - 2e6).abs() < 1e-6);
    }
}
