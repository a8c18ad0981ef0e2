//! Which data QP a fragment goes to: round-robin over the QPs with room, the least
//! loaded one, or the weighted schedule ([`Policy`]). Pure functions of the lanes and
//! the striping state they are given.

use super::config::Config;
use super::lane::Lane;
use super::policy::{Policy, Striping};
use crate::phys::PhysQp;

/// The data QP round-robin picks: the first with room at or after `from`.
#[inline]
pub(super) fn pick(room: u64, from: u32) -> usize {
    debug_assert!(room != 0);
    let k = room.rotate_right(from).trailing_zeros();
    ((from + k) & 63) as usize
}

/// The data QP after `l` of `n`, round robin.
#[inline]
pub(super) fn after(l: usize, n: usize) -> u32 {
    if l + 1 == n {
        0
    } else {
        l as u32 + 1
    }
}

/// The data QPs of `room` that a request's next fragment may use: all of them
/// until its fragments went to `fanout` QPs (`used`), those after.
#[inline]
pub(super) fn allowed(room: u64, fanout: u8, used: u64) -> u64 {
    if fanout != 0 && used.count_ones() >= u32::from(fanout) {
        room & used
    } else {
        room
    }
}

/// The least loaded data QP among `allowed` (not empty): fewest bytes staged or in
/// flight, relative to each QP's weight when `weighted`; the lowest index on a tie.
#[inline]
pub(super) fn least_loaded<Q: PhysQp, const N: usize, const D: usize>(
    lanes: &[Lane<Q, D>],
    striping: &Striping<N>,
    allowed: u64,
    weighted: bool,
) -> usize {
    let mut bits = allowed;
    let mut best = bits.trailing_zeros() as usize;
    let mut best_load = lanes[best].load();
    bits &= bits - 1;
    while bits != 0 {
        let i = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let load = lanes[i].load();
        let lighter = if weighted {
            striping.lighter(i, load, best, best_load)
        } else {
            load < best_load
        };
        if lighter {
            (best, best_load) = (i, load);
        }
    }
    best
}

/// The data QP for the next fragment of a request, among `allowed` (those of
/// `eligible` — the QPs the fan-out limit leaves it — with room; not empty), by the
/// configured policy; `single` for a request of one fragment, which the load-aware
/// policies give to the least loaded QP. `None`: wait for room.
///
/// The weighted policies follow the schedule. When the QP it names has no room, the
/// fragment waits for it (its entry stays next) rather than go to another QP: a
/// fast QP that reached `max_outstanding` would otherwise push its excess onto the
/// slow ones, which then hold every request back (measured: 1:3 links, 27.7% of the
/// bytes on the slow one instead of 25%, 89% of the links' sum instead of 91%). A
/// failed QP's entries go to the least loaded QP for its weight.
#[inline(always)]
pub(super) fn choose<Q: PhysQp, const N: usize, const D: usize>(
    cfg: &Config,
    lanes: &[Lane<Q, D>],
    striping: &mut Striping<N>,
    next_lane: &mut u32,
    (eligible, allowed): (u64, u64),
    single: bool,
) -> Option<usize> {
    Some(match cfg.policy {
        Policy::RoundRobin => {
            let l = pick(allowed, *next_lane);
            *next_lane = after(l, lanes.len());
            l
        }
        Policy::LeastOutstanding => least_loaded(lanes, striping, allowed, false),
        _ if single => least_loaded(lanes, striping, allowed, true),
        Policy::Weighted | Policy::Adaptive => {
            let l = striping.next_in(eligible);
            if allowed >> l & 1 != 0 {
                return Some(l);
            }
            if lanes[l].failed {
                least_loaded(lanes, striping, allowed, true)
            } else {
                striping.back();
                if cfg.policy == Policy::Adaptive {
                    striping.note_wait(1 << l);
                }
                return None;
            }
        }
    })
}
