//! Striping policies: which data QP each fragment goes to.
//!
//! Round-robin gives every QP an equal share. The weighted policies follow a
//! 64-entry *schedule*, each QP holding entries in proportion to its weight and
//! spread evenly over the table (smooth weighted round-robin), so picking a QP costs
//! one table read whatever the number of QPs; a QP without room is passed over for
//! the next entry that has some, so a QP that falls behind does not stall the rest.
//! The adaptive policy rebuilds the schedule from each QP's measured service rate
//! (see [`Striping::sample`]): the bytes a busy QP completed over the time it was
//! busy to complete them, smoothed by an exponential moving average over about
//! four measurements. Whether a QP was busy is told by whether work waited for it
//! (a fragment the schedule gave it found it full) or it never ran dry, so that it
//! does not depend on how many WQEs one completion acknowledges. The time is the
//! busy time since the QP's last completion, not one sampling interval: a slow
//! link's fragment may take many intervals, and a rate per interval would read
//! zero for most of them and a burst for one.

/// How a virtual QP spreads fragments over its data QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Equal shares in turn, skipping QPs without room (the default).
    RoundRobin,
    /// Shares in proportion to fixed weights: per device from
    /// [`Config::weights`](super::Config::weights) (vqp-host fills them from each
    /// port's speed and width), per QP with
    /// [`VirtualQp::set_weight`](super::VirtualQp::set_weight).
    Weighted,
    /// Each fragment to the QP with the fewest bytes outstanding (staged or in
    /// flight); a scan of the QPs with room, at most `N` of them.
    LeastOutstanding,
    /// Weights that follow each QP's measured service rate: started from the
    /// configured weights and updated by [`VirtualQp::sample`](super::VirtualQp::sample)
    /// (a moving average, weight 1/4, of the rate at which each saturated QP completed
    /// bytes over the time it was busy; under every signaling mode alike).
    Adaptive,
}

impl Policy {
    /// The policy's name as write_bw's `--policy` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::RoundRobin => "rr",
            Self::Weighted => "weighted",
            Self::LeastOutstanding => "outstanding",
            Self::Adaptive => "adaptive",
        }
    }

    /// The policy named `name` (see [`Self::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::RoundRobin,
            Self::Weighted,
            Self::LeastOutstanding,
            Self::Adaptive,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// Entries in a schedule.
const SLOTS: usize = 64;

/// Send WQEs an adaptive virtual QP's data QP may hold before the meter saw it
/// complete bytes (its *slow start*). The policy starts from the configured weights,
/// which say nothing of the paths; without a limit, a burst posted at once (a
/// window of requests) is spread by them and a slow path gets a backlog of the
/// window's share, which holds every request behind it in order long after the
/// weights are right (measured over links of 100 and 300 Mbit/s: 0.7 s at half the
/// links' sum). Four WQEs keep a path busy enough to be measured.
pub(crate) const SLOW_START: u32 = 4;

/// How long a data QP's backlog may take to drain at its estimated rate under the
/// adaptive policy: the bytes it holds are bounded by that. Requests complete in
/// order, so a path given more than it serves holds every request behind it back
/// for as long as its excess takes; the bound keeps an estimate's error (a probe,
/// a path that slowed) to that long. 20 ms is many round trips of a fabric.
pub(crate) const BACKLOG_NS: u64 = 20_000_000;

/// A weight estimate never passes this (bytes per second); past it every estimate
/// is halved, which keeps their ratios.
const MAX_RATE: u64 = 1 << 50;

/// The schedule of a weighted or adaptive virtual QP and, for adaptive, its meter.
pub(crate) struct Striping<const N: usize> {
    /// Data QP of each entry.
    slots: [u8; SLOTS],
    cursor: u32,
    /// Each data QP's weight: configured, or (adaptive) its estimated service rate
    /// in bytes per second once one was measured.
    weights: [u64; N],
    /// The instant of the last sample (adaptive), in the caller's nanoseconds.
    sampled_at: Option<u64>,
    /// Each data QP's completed bytes at the last sample.
    done_at: [u64; N],
    /// Each data QP's busy time (nanoseconds) since its last completion: the
    /// intervals it stayed busy without completing anything.
    busy_ns: [u64; N],
    /// The data QPs (a bit each) that work waited for since the last sample: a
    /// fragment the schedule gave one of them found it full (see
    /// [`Self::note_wait`]).
    waited: u64,
    /// The data QPs (a bit each) seen completing bytes at a sample: measured.
    measured: u64,
}

/// What one data QP did between two samples.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Served {
    /// Bytes completed in total (a running count).
    pub done: u64,
    /// Since the last sample the QP ran out of work at some point and no fragment
    /// waited for it (see [`Striping::note_wait`]): it might have served more.
    /// Running dry alone does not tell: when one completion acknowledges all a QP
    /// has in flight (last-of-chain signaling), a QP whose chain fills its room runs
    /// dry at every completion even while it holds the other QPs back; whether work
    /// waited for it does not depend on how many WQEs a completion acknowledges.
    pub idled: bool,
    /// The QP failed: it gets the smallest share.
    pub failed: bool,
    /// Bytes handed to the QP and not completed yet: while none completes, its rate
    /// is below this over its busy time.
    pub out: u64,
}

impl<const N: usize> Striping<N> {
    /// A schedule for `n` data QPs with `weights` (each at least 1).
    pub fn new(weights: impl Iterator<Item = u64>, n: usize) -> Self {
        let mut s = Self {
            slots: [0; SLOTS],
            cursor: 0,
            weights: [1; N],
            sampled_at: None,
            done_at: [0; N],
            busy_ns: [0; N],
            waited: 0,
            measured: 0,
        };
        for (w, given) in s.weights.iter_mut().zip(weights) {
            *w = given.max(1);
        }
        s.rebuild(n);
        s
    }

    /// Data QP `i`'s weight.
    pub fn weight(&self, i: usize) -> u64 {
        self.weights[i]
    }

    /// Sets data QP `i`'s weight (at least 1) and rebuilds the schedule.
    pub fn set_weight(&mut self, i: usize, w: u64, n: usize) {
        self.weights[i] = w.max(1);
        self.rebuild(n);
    }

    /// The next scheduled QP.
    #[inline]
    pub fn next(&mut self) -> usize {
        let l = self.slots[self.cursor as usize % SLOTS];
        self.cursor = self.cursor.wrapping_add(1);
        l as usize
    }

    /// Step back one entry: the one just taken comes next again.
    #[inline]
    pub fn back(&mut self) {
        self.cursor = self.cursor.wrapping_sub(1);
    }

    /// Where the schedule stands, to [`Self::rewind`] to.
    #[inline]
    pub fn mark(&self) -> u32 {
        self.cursor
    }

    /// Back to where [`Self::mark`] said.
    #[inline]
    pub fn rewind(&mut self, mark: u32) {
        self.cursor = mark;
    }

    /// The next scheduled QP among `allowed` (bit per QP, not empty): entries of
    /// other QPs are passed over. Every QP holds an entry, so this ends within one
    /// turn of the table.
    #[inline]
    pub fn next_in(&mut self, allowed: u64) -> usize {
        debug_assert!(allowed != 0);
        for _ in 0..SLOTS {
            let l = self.slots[self.cursor as usize % SLOTS] as usize;
            self.cursor = self.cursor.wrapping_add(1);
            if allowed >> l & 1 != 0 {
                return l;
            }
        }
        allowed.trailing_zeros() as usize
    }

    /// Whether data QP `a` with `load_a` bytes outstanding is less loaded than `b`
    /// with `load_b`, each load taken relative to the QP's weight.
    #[inline]
    pub fn lighter(&self, a: usize, load_a: u64, b: usize, load_b: u64) -> bool {
        u128::from(load_a) * u128::from(self.weights[b])
            < u128::from(load_b) * u128::from(self.weights[a])
    }

    /// A fragment waits for room on the data QPs of `qps` (a bit each): each holds
    /// the work back, so it serves at its capacity. Kept for the adaptive policy.
    #[inline]
    pub fn note_wait(&mut self, qps: u64) {
        self.waited |= qps;
    }

    /// Every data QP of `eligible` (a bit each) is full and a fragment waits: it
    /// waits for the QP the schedule names next, or (`single`, a request of one
    /// fragment, which goes to the least loaded QP) for any of them.
    pub fn note_full(&mut self, eligible: u64, single: bool) {
        if single {
            self.note_wait(eligible);
        } else {
            let at = self.cursor;
            let l = self.next_in(eligible);
            self.cursor = at;
            self.note_wait(1 << l);
        }
    }

    /// The bytes data QP `i` may have in flight: what it serves in [`BACKLOG_NS`] at
    /// its estimated rate; `None` until a sample saw it complete bytes (it is in its
    /// slow start).
    pub fn budget(&self, i: usize) -> Option<u64> {
        (self.measured >> i & 1 != 0).then(|| {
            let serves = u128::from(self.weights[i]) * u128::from(BACKLOG_NS) / 1_000_000_000;
            u64::try_from(serves).unwrap_or(u64::MAX)
        })
    }

    /// Whether work waited for data QP `i` since the last sample.
    #[inline]
    pub fn waited_for(&self, i: usize) -> bool {
        self.waited >> i & 1 != 0
    }

    /// Whether a sample at `now` would be taken (the first is, to start the meter).
    #[inline]
    pub fn due(&self, now: u64, interval: u64) -> bool {
        self.sampled_at
            .map_or(true, |at| now.saturating_sub(at) >= interval.max(1))
    }

    /// Adaptive: fold in what each QP served since the last sample, at `now` (in
    /// nanoseconds of any fixed origin), when `interval` has passed; returns whether
    /// the weights changed.
    ///
    /// A *busy* QP — one that work waited for, or that never ran dry, in the
    /// interval (see [`Served::idled`]) — served at its capacity: when it completed
    /// bytes, its weight moves a quarter of the way to their rate over the time it
    /// was busy since its last completion (an exponential moving average with weight
    /// 1/4, about four measurements); while it completes nothing, its weight only
    /// falls to what its outstanding bytes over that busy time allow (a QP that
    /// stopped loses its share; a slow one is not judged by a quiet interval). Any
    /// other QP might have served more: its weight becomes the larger of it and the
    /// interval's rate, plus a quarter — at most twice the largest weight of a busy
    /// QP, and not at all when no QP was busy (then the shares limited nothing) —
    /// so that a QP whose share is below its capacity earns more until work waits
    /// for it, without running away while another QP is the bottleneck. Together a
    /// path that slows loses its excess share within a few measurements, and one
    /// that speeds up gains within a few intervals.
    pub fn sample(&mut self, now: u64, interval: u64, served: &[Served]) -> bool {
        let Some(at) = self.sampled_at else {
            self.sampled_at = Some(now);
            self.waited = 0;
            for (d, s) in self.done_at.iter_mut().zip(served) {
                *d = s.done;
            }
            return false;
        };
        let dt = now.saturating_sub(at);
        if dt < interval.max(1) {
            return false;
        }
        self.sampled_at = Some(now);
        self.waited = 0;
        let per_s = |bytes: u64, ns: u64| {
            (u128::from(bytes) * 1_000_000_000 / u128::from(ns.max(1))).min(MAX_RATE.into()) as u64
        };
        let mut rates = [0u64; N];
        let mut any_busy = false;
        for (i, s) in served.iter().enumerate() {
            let bytes = s.done.wrapping_sub(self.done_at[i]);
            self.done_at[i] = s.done;
            if bytes > 0 && !s.failed {
                self.measured |= 1 << i;
            }
            let w = &mut self.weights[i];
            if s.failed {
                *w = 1;
                self.busy_ns[i] = 0;
            } else if s.idled {
                rates[i] = per_s(bytes, dt);
                self.busy_ns[i] = 0;
            } else {
                any_busy = true;
                let busy = self.busy_ns[i].saturating_add(dt);
                if bytes > 0 {
                    let rate = per_s(bytes, busy);
                    *w = (*w - *w / 4 + rate / 4).max(1);
                    self.busy_ns[i] = 0;
                } else {
                    *w = (*w).min(per_s(s.out, busy)).max(1);
                    self.busy_ns[i] = busy;
                }
            }
        }
        // What a probe may reach: twice the best estimate of a QP that was busy.
        let busy_top = served
            .iter()
            .zip(&self.weights)
            .filter(|(s, _)| !s.idled && !s.failed)
            .map(|(_, &w)| w)
            .max()
            .unwrap_or(0);
        let mut top = 0;
        for (i, s) in served.iter().enumerate() {
            let w = &mut self.weights[i];
            if s.idled && !s.failed && any_busy {
                // `+ 1`: a weight of 1 to 3 grows too, its quarter being 0.
                let base = (*w).max(rates[i]);
                *w = (base + base / 4 + 1).min(busy_top.saturating_mul(2).max(base));
            }
            top = top.max(*w);
        }
        if top > MAX_RATE {
            for w in &mut self.weights[..served.len()] {
                *w = (*w / 2).max(1);
            }
        }
        self.rebuild(served.len());
        true
    }

    /// Lay the schedule out again from the weights of the first `n` QPs: each QP's
    /// quota of the 64 entries is proportional to its weight (at least 1, largest
    /// remainders first), and the entries are interleaved by smooth weighted
    /// round-robin so that a QP's entries are evenly spaced.
    fn rebuild(&mut self, n: usize) {
        let weights = &self.weights[..n];
        let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
        let mut quota = [0u32; N];
        let mut given = 0u32;
        for (q, &w) in quota.iter_mut().zip(weights) {
            *q = ((u128::from(w) * SLOTS as u128 / total) as u32).max(1);
            given += *q;
        }
        // Too many: QPs raised to 1 took entries; take them back from the largest.
        while given > SLOTS as u32 {
            let big = (0..n).max_by_key(|&i| quota[i]).unwrap_or(0);
            quota[big] -= 1;
            given -= 1;
        }
        // Too few (rounding down): the largest remainders get one more each.
        while given < SLOTS as u32 {
            let short = (0..n)
                .max_by_key(|&i| {
                    (u128::from(weights[i]) * SLOTS as u128)
                        .saturating_sub(u128::from(quota[i]) * total)
                })
                .unwrap_or(0);
            quota[short] += 1;
            given += 1;
        }
        let mut current = [0i64; N];
        for slot in &mut self.slots {
            let mut best = 0;
            for i in 0..n {
                current[i] += i64::from(quota[i]);
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= SLOTS as i64;
            *slot = best as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(s: &Striping<8>, n: usize) -> [u32; 8] {
        let mut c = [0u32; 8];
        for &l in &s.slots {
            assert!((l as usize) < n);
            c[l as usize] += 1;
        }
        c
    }

    #[test]
    fn the_schedule_follows_the_weights_and_interleaves() {
        let s = Striping::<8>::new([1, 1, 3, 3].into_iter(), 4);
        assert_eq!(&shares(&s, 4)[..4], &[8, 8, 24, 24]);
        // No QP waits more than a few entries for its turn.
        for l in 0..4u8 {
            let at: heapless::Vec<usize, 64> = (0..SLOTS).filter(|&i| s.slots[i] == l).collect();
            let gaps = at.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            assert!(gaps <= if l < 2 { 9 } else { 4 }, "QP {l}: gap {gaps}");
        }
        let eq = Striping::<8>::new([5; 3].into_iter(), 3);
        let c = shares(&eq, 3);
        assert!(c[..3].iter().all(|&k| k == 21 || k == 22), "{c:?}");
    }

    #[test]
    fn every_qp_keeps_an_entry_however_small_its_weight() {
        let s = Striping::<8>::new([1_000_000, 1, 1, 1, 1, 1, 1, 1].into_iter(), 8);
        let c = shares(&s, 8);
        assert_eq!(c.iter().sum::<u32>(), 64);
        assert!(c.iter().all(|&k| k >= 1), "{c:?}");
        assert_eq!(c[0], 57);
    }

    #[test]
    fn a_full_qp_is_passed_over_for_the_next_entry() {
        let mut s = Striping::<8>::new([1, 3].into_iter(), 2);
        let picks: heapless::Vec<usize, 64> = (0..64).map(|_| s.next_in(0b10)).collect();
        assert!(picks.iter().all(|&l| l == 1));
        let mut counts = [0; 2];
        for _ in 0..64 {
            counts[s.next_in(0b11)] += 1;
        }
        assert_eq!(counts, [16, 48]);
    }

    #[test]
    fn adaptive_weights_follow_the_measured_rates() {
        let mut s = Striping::<8>::new([1, 1].into_iter(), 2);
        let ms = 1_000_000;
        let mut done = [0u64; 2];
        let busy = |done: [u64; 2]| {
            [
                Served {
                    done: done[0],
                    idled: false,
                    failed: false,
                    out: 1 << 20,
                },
                Served {
                    done: done[1],
                    idled: false,
                    failed: false,
                    out: 1 << 20,
                },
            ]
        };
        assert!(!s.sample(0, 2 * ms, &busy(done)));
        // Both busy: 1 GB/s and 3 GB/s, 2 MB and 6 MB per 2 ms.
        for k in 1..=20 {
            done[0] += 2_000_000;
            done[1] += 6_000_000;
            assert!(s.sample(k * 2 * ms, 2 * ms, &busy(done)));
        }
        let c = shares(&s, 2);
        assert!((15..=17).contains(&c[0]), "{c:?}");
        // Too early: nothing changes.
        assert!(!s.sample(40 * ms + 1, 2 * ms, &busy(done)));
        // QP 1 slows to 1 GB/s: within ten samples the shares are even again.
        for k in 21..=30 {
            done[0] += 2_000_000;
            done[1] += 2_000_000;
            s.sample(k * 2 * ms, 2 * ms, &busy(done));
        }
        let c = shares(&s, 2);
        assert!((30..=34).contains(&c[0]), "{c:?}");
    }

    #[test]
    fn an_idle_qp_probes_upward_and_a_failed_one_gets_the_least() {
        let mut s = Striping::<8>::new([1, 1].into_iter(), 2);
        let served = |a: u64, idled: bool, failed: bool| {
            [
                Served {
                    done: a,
                    idled: false,
                    failed: false,
                    out: 1 << 20,
                },
                Served {
                    done: a,
                    idled,
                    failed,
                    out: 1 << 20,
                },
            ]
        };
        s.sample(0, 1, &served(0, false, false));
        s.sample(1000, 1, &served(1000, true, false));
        assert!(s.weight(1) > s.weight(0));
        s.sample(2000, 1, &served(2000, false, true));
        assert_eq!(s.weight(1), 1);
        assert_eq!(shares(&s, 2)[1], 1);
    }

    #[test]
    fn a_probe_stays_within_twice_the_best_busy_rate_and_waits_when_nothing_is_busy() {
        let mut s = Striping::<8>::new([1, 1].into_iter(), 2);
        let at = |done: [u64; 2], idled: [bool; 2]| {
            [
                Served {
                    done: done[0],
                    idled: idled[0],
                    failed: false,
                    out: 1 << 20,
                },
                Served {
                    done: done[1],
                    idled: idled[1],
                    failed: false,
                    out: 1 << 20,
                },
            ]
        };
        s.sample(0, 1, &at([0, 0], [false, false]));
        // QP 0 busy at 1 GB/s, QP 1 running dry at 0.1 GB/s, for many intervals: QP 1
        // grows, but to twice QP 0's rate at most.
        let mut done = [0u64; 2];
        for k in 1..=200u64 {
            done[0] += 1000;
            done[1] += 100;
            s.sample(k * 1000, 1, &at(done, [false, true]));
        }
        let busy = s.weight(0);
        assert_eq!(s.weight(1), 2 * 1_000_000_000);
        assert!(s.weight(1) > busy, "the idle QP probed upward");
        // Nothing busy: nothing moves.
        let before = (s.weight(0), s.weight(1));
        s.sample(201_000, 1, &at(done, [true, true]));
        assert_eq!((s.weight(0), s.weight(1)), before);
    }

    /// Two busy QPs and one idle one, as [`Striping::sample`] takes them.
    fn three(done: [u64; 3], idled: [bool; 3]) -> [Served; 3] {
        core::array::from_fn(|i| Served {
            done: done[i],
            idled: idled[i],
            failed: false,
            out: 64 << 10,
        })
    }

    #[test]
    fn a_slow_qp_is_measured_over_its_busy_time_not_per_interval() {
        // QP 0 completes a 64 KiB fragment every 13th interval of 2 ms (2.52 MB/s),
        // QP 1 one every interval (32.8 MB/s); both stay busy.
        let mut s = Striping::<8>::new([1, 1].into_iter(), 2);
        let ms = 1_000_000;
        let mut done = [0u64; 3];
        s.sample(0, 2 * ms, &three(done, [false; 3])[..2]);
        let slow = 65_536 * 1_000_000_000 / (26 * ms);
        for k in 1..=400u64 {
            if k % 13 == 0 {
                done[0] += 65_536;
            }
            done[1] += 65_536;
            s.sample(k * 2 * ms, 2 * ms, &three(done, [false; 3])[..2]);
            if k > 200 {
                // Every interval, not on average: a quiet interval is not a zero rate.
                let w = s.weight(0);
                assert!(w.abs_diff(slow) < slow / 20, "{k}: {w} for {slow}");
                assert!(s.weight(1) > 12 * slow, "{k}: {}", s.weight(1));
            }
        }
    }

    #[test]
    fn a_qp_left_with_the_smallest_weight_grows_back() {
        // QP 2 holds weight 1 and completes nothing (its one entry of 64 rarely comes
        // up); the busy QPs complete now and then, never in the same interval.
        let mut s = Striping::<8>::new([1, 1, 1].into_iter(), 3);
        let mut done = [0u64; 3];
        s.sample(0, 1000, &three(done, [false, false, true]));
        for k in 1..=100u64 {
            done[(k % 2) as usize] += if k % 5 == 0 { 65_536 } else { 0 };
            s.sample(k * 1000, 1000, &three(done, [false, false, true]));
        }
        let busy = s.weight(0).max(s.weight(1));
        assert!(busy > 1_000_000, "{busy}");
        let w = s.weight(2);
        assert!(
            w > busy && w <= 2 * busy,
            "{w}: it grew past the best busy QP, to twice it at most"
        );
    }

    /// A busy QP that stops completing loses its share: its rate is bounded by what
    /// it holds over the time it held it.
    #[test]
    fn a_stalled_busy_qp_loses_its_weight() {
        let mut s = Striping::<8>::new([1, 1].into_iter(), 2);
        let mut done = [0u64; 3];
        s.sample(0, 1000, &three(done, [false; 3])[..2]);
        for k in 1..=20u64 {
            done[0] += 1000;
            done[1] += 1000;
            s.sample(k * 1000, 1000, &three(done, [false; 3])[..2]);
        }
        let before = s.weight(1);
        for k in 21..=2000u64 {
            done[0] += 1000;
            s.sample(k * 1000, 1000, &three(done, [false; 3])[..2]);
        }
        // 64 KiB held for about 2 ms: at most 33 MB/s, where it stood at 1 GB/s.
        assert!(s.weight(1) < before / 25, "{} from {before}", s.weight(1));
    }

    #[test]
    fn policies_are_named() {
        for p in [
            Policy::RoundRobin,
            Policy::Weighted,
            Policy::LeastOutstanding,
            Policy::Adaptive,
        ] {
            assert_eq!(Policy::from_name(p.name()), Some(p));
        }
        assert_eq!(Policy::from_name("fast"), None);
    }
}
