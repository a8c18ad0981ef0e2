//! Dispatching accepted requests: fragments spread over the data QPs with room,
//! chained per QP and posted once per round; SPRAY notifies in order.

use super::complete::{credit_data, credit_notify};
use super::counted::consumes;
use super::lane::Lane;
use super::policy::{Policy, Striping};
use super::send::{numbered, passthrough_wqe, send_id};
use super::slots::{Notify, SendSlot};
use super::{Config, Mode, Signaling, VirtualQp};
use crate::imm::Imm;
use crate::phys::{PhysQp, SendWqe};
use crate::seq::Seq;
use crate::split::Plan;
use crate::wr::{Opcode, SendFlags, SendWr, WcStatus};
use crate::wrid::{Kind, WrId, NOTIFY_LANE};

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
fn allowed(room: u64, fanout: u8, used: u64) -> u64 {
    if fanout != 0 && used.count_ones() >= u32::from(fanout) {
        room & used
    } else {
        room
    }
}

/// The least loaded data QP among `allowed` (not empty): fewest bytes staged or in
/// flight, relative to each QP's weight when `weighted`; the lowest index on a tie.
#[inline]
fn least_loaded<Q: PhysQp, const N: usize, const D: usize>(
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
fn choose<Q: PhysQp, const N: usize, const D: usize>(
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
                return None;
            }
        }
    })
}

/// Where a request's fragments lie, for staging what it has left in one go.
#[derive(Clone, Copy)]
struct Layout {
    plan: Plan,
    count: u64,
    /// The first fragment left (the slot's `posted`).
    first: u64,
    /// The DQPLB number of fragment `first`.
    base_seq: Seq,
    /// Fragments but the first and the last are `step` long, `step` apart, from
    /// `origin` (see [`Plan::grid`]).
    origin: u64,
    step: u64,
}

impl Layout {
    #[inline(always)]
    fn of(slot: &SendSlot, base_seq: Seq) -> Self {
        let (origin, step) = slot.plan.grid();
        Self {
            plan: slot.plan,
            count: slot.plan.count(),
            first: slot.posted,
            base_seq,
            origin,
            step,
        }
    }
}

/// What every fragment of one request shares.
pub(super) struct Spread {
    id: u64,
    /// The request's physical wr_id with lane 0.
    base_id: u64,
    opcode: Opcode,
    fence: SendFlags,
    /// Flags of the last fragment (DQPLB adds `SOLICITED` when asked).
    last_flags: SendFlags,
    dqplb_imm: bool,
    local: u64,
    remote: u64,
}

impl Spread {
    /// What the fragments of request `id` (`wr`, on the virtual QP tagged `tag`) share.
    #[inline]
    pub(super) fn of(wr: &SendWr, id: u64, tag: u8, mode: Mode) -> Self {
        let dqplb_imm = numbered(wr, mode);
        let fence = SendFlags(wr.flags.0 & SendFlags::FENCE.0);
        Self {
            id,
            base_id: send_id(tag, id),
            opcode: match wr.opcode {
                Opcode::RDMA_READ => Opcode::RDMA_READ,
                _ if dqplb_imm => Opcode::RDMA_WRITE_WITH_IMM,
                _ => Opcode::RDMA_WRITE,
            },
            fence,
            last_flags: if dqplb_imm {
                fence.with(SendFlags(wr.flags.0 & SendFlags::SOLICITED.0))
            } else {
                fence
            },
            dqplb_imm,
            local: wr.local_addr,
            remote: wr.remote_addr,
        }
    }

    /// Fragment `[off, off + len)` of the request for data QP `lane`, whose device's
    /// keys are `(lkey, rkey)`; `seq` is its DQPLB sequence number and `last` whether
    /// it ends the request. (The keys stay in the slot: copying all devices' keys
    /// here would cost more than looking up one pair per QP.)
    #[inline]
    pub(super) fn wqe(
        &self,
        lane: u64,
        (lkey, rkey): (u32, u32),
        off: u64,
        len: u32,
        seq: Seq,
        last: bool,
    ) -> SendWqe {
        let (imm_data, flags) = if self.dqplb_imm {
            let flags = if last { self.last_flags } else { self.fence };
            (Imm::new(seq, last).to_wire(), flags)
        } else {
            (0, self.fence)
        };
        SendWqe {
            wr_id: self.base_id | lane << 48,
            opcode: self.opcode,
            flags,
            addr: self.local + off,
            len,
            lkey,
            remote_addr: self.remote + off,
            rkey,
            imm_data,
            compare_add: 0,
            swap: 0,
        }
    }
}

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Post the request just taken straight to a data QP when it is the only one
    /// waiting, goes as one WQE (a single fragment or a pass-through) and a QP has
    /// room: what a dispatch round would do for it, without the round. False, having
    /// done nothing, when a round is needed. Round-robin over every QP only: the
    /// other policies choose in the round.
    #[inline]
    pub(super) fn post_alone(&mut self) -> bool {
        let id = self.dispatch;
        if id + 1 != self.send.tail || !self.even {
            return false;
        }
        let max = self.cfg.max_outstanding;
        let slot = self.send.get_mut(id);
        if slot.notify != Notify::None {
            return false;
        }
        let (l, mut wqe, run_seq) = if slot.passthrough {
            let lane = &mut self.lanes[0];
            if !lane.has_room(max) {
                return false;
            }
            if consumes(slot.wr.opcode) {
                slot.order = lane.sent;
                lane.sent = lane.sent.wrapping_add(1);
            }
            (
                0,
                passthrough_wqe(&slot.wr, send_id(self.tag, id), lane.device),
                self.send_seq,
            )
        } else {
            if slot.plan.count() != 1 || self.room == 0 {
                return false;
            }
            let seq = self.send_seq;
            if numbered(&slot.wr, self.cfg.mode) {
                if Self::seq_budget(&self.lanes, seq, self.seq_credit) == 0 {
                    return false;
                }
                self.send_seq = seq.add(1);
            }
            let l = pick(self.room, self.next_lane);
            self.next_lane = after(l, self.lanes.len());
            // Built only now, so that little of it lives across the checks above.
            let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
            let keys = slot.wr.keys.pair(self.lanes[l].device);
            let len = slot.wr.len as u32;
            (l, req.wqe(l as u64, keys, 0, len, seq, true), seq)
        };
        slot.posted = 1;
        slot.offset = slot.wr.len;
        self.dispatch += 1;
        // A request that needs no notify is passed over by the notify cursor.
        if self.notify_next == id {
            self.notify_next += 1;
        }
        let lane = &mut self.lanes[l];
        let send = &mut self.send;
        let posted = lane.post_one(id, run_seq, &mut wqe, &mut |id, n, st| {
            credit_data(send, id, n, st)
        });
        if !lane.has_room(max) {
            self.room &= !(1 << l);
        }
        if posted.is_err() {
            self.fail(WcStatus::POST_ERR);
        }
        true
    }

    /// One dispatch round: stage every fragment that fits, in posting order, then the
    /// notifies that became due, then post one chain per QP.
    pub(super) fn dispatch(&mut self) {
        let max = self.cfg.max_outstanding;
        if self.rework {
            self.restage();
            self.post_again(max);
            self.rework = !self.redo.is_empty() || !self.again.is_empty();
        }
        let merge = self.cfg.signaling == Signaling::LastOfChain;
        let n = self.lanes.len() as u32;
        let all_lanes = u64::MAX >> (64 - n);
        // DQPLB sequence numbers this round may still use; computed when first needed.
        let mut seq_budget = None;
        'requests: while self.dispatch != self.send.tail {
            let id = self.dispatch;
            let slot = self.send.get_mut(id);
            if slot.passthrough {
                if self.lanes[0].survived {
                    self.passthrough_without_qp0(id);
                } else if self.lanes[0].has_room(max) {
                    self.stage_passthrough(id);
                } else {
                    break;
                }
                self.dispatch += 1;
                continue;
            }
            let count = slot.plan.count();
            // Every data QP takes its share of what is left at once when all have
            // room for it: no per-fragment pick.
            if count - slot.posted >= 2 && self.may_spread() {
                let staged = if self.even {
                    self.room == all_lanes && self.try_spread(id, max, &mut seq_budget)
                } else {
                    self.scheduled && self.try_scheduled(id, max, &mut seq_budget)
                };
                if staged {
                    self.dispatch += 1;
                    continue;
                }
            }
            let slot = self.send.get_mut(id);
            if slot.posted == 0 {
                // Set here rather than when the request is taken: only the
                // fragment-by-fragment round and the schedule read it.
                slot.used = 0;
            }
            let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
            let dqplb_imm = req.dqplb_imm;
            while slot.posted < count {
                let eligible = allowed(all_lanes, self.cfg.fanout, slot.used);
                let allowed = eligible & self.room;
                if allowed == 0 {
                    break 'requests;
                }
                if dqplb_imm {
                    let budget = seq_budget.get_or_insert_with(|| {
                        Self::seq_budget(&self.lanes, self.send_seq, self.seq_credit)
                    });
                    if *budget == 0 {
                        break 'requests;
                    }
                    *budget -= 1;
                }
                let Some(l) = choose(
                    &self.cfg,
                    &self.lanes,
                    &mut self.striping,
                    &mut self.next_lane,
                    (eligible, allowed),
                    count == 1,
                ) else {
                    break 'requests;
                };
                slot.used |= 1 << l;
                let lane = &mut self.lanes[l];
                let off = slot.offset;
                let len = slot.plan.next_len(slot.posted, off);
                slot.offset += u64::from(len);
                slot.posted += 1;
                let seq = self.send_seq;
                if dqplb_imm {
                    self.send_seq = seq.add(1);
                }
                let keys = slot.wr.keys.pair(lane.device);
                let wqe = req.wqe(l as u64, keys, off, len, seq, slot.posted == count);
                let fragment = (slot.posted - 1) as u32;
                *lane.stage(id, seq, merge, len, fragment) = wqe;
                self.staged |= 1 << l;
                if !lane.has_room(max) {
                    self.room &= !(1 << l);
                }
            }
            self.dispatch += 1;
        }
        self.dispatch_notifies();
        self.flush();
    }

    /// DQPLB sequence numbers that may be sent now: the peer's window credit less
    /// how far `next` is past the oldest number still outstanding on any data QP.
    fn seq_budget(lanes: &[Lane<Q, D>], next: Seq, credit: u32) -> u32 {
        let span = lanes
            .iter()
            .filter_map(|l| l.oldest_seq())
            .map(|s| next.since(s))
            .max()
            .unwrap_or(0);
        credit.saturating_sub(span)
    }

    /// Stage what request `id` has left across all data QPs at once if each has
    /// room for its share and the DQPLB budget covers it; false (nothing staged)
    /// otherwise. Kept out of line: inlined, its state would crowd the
    /// one-fragment path of [`Self::dispatch`].
    #[inline(never)]
    fn try_spread(&mut self, id: u64, max: u32, seq_budget: &mut Option<u32>) -> bool {
        let slot = self.send.get(id);
        let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
        let left = slot.plan.count() - slot.posted;
        let share = left.div_ceil(self.lanes.len() as u64) as u32;
        if !self.lanes.iter().all(|l| l.has_room_for(share, max)) {
            return false;
        }
        if req.dqplb_imm {
            let budget = seq_budget.get_or_insert_with(|| {
                Self::seq_budget(&self.lanes, self.send_seq, self.seq_credit)
            });
            if u64::from(*budget) < left {
                return false;
            }
            *budget -= left as u32;
        }
        // One copy of the staging loop per signaling, each with its runs known, and
        // per lane bookkeeping: plain round-robin keeps no per-run figures (nor byte
        // counts, unless asked).
        let plain = !self.lanes[0].tally;
        match (self.cfg.signaling == Signaling::LastOfChain, plain) {
            (true, true) => self.stage_spread::<true, true>(&req, max),
            (true, false) => self.stage_spread::<true, false>(&req, max),
            (false, true) => self.stage_spread::<false, true>(&req, max),
            (false, false) => self.stage_spread::<false, false>(&req, max),
        }
        true
    }

    /// Pass-through request `id`, not posted yet, meets a failed data QP 0: it waits
    /// for the replacement, behind those that were in flight there, when there is a
    /// grace period to wait in; it is reported with the QP's error otherwise (as the
    /// virtual QP does not hold requests then).
    #[cold]
    fn passthrough_without_qp0(&mut self, id: u64) {
        let slot = self.send.get_mut(id);
        slot.posted = 1;
        if self.cfg.grace_ns == 0 || self.again.push_back(id).is_err() {
            credit_data(&mut self.send, id, 1, self.lane_error);
        } else {
            self.rework = true;
            self.settle_hold();
        }
    }

    /// Stage pass-through request `id` whole on data QP 0 (the caller checked its
    /// room), numbering it among the receive-consuming WQEs when it is one.
    pub(super) fn stage_passthrough(&mut self, id: u64) {
        let max = self.cfg.max_outstanding;
        let slot = self.send.get_mut(id);
        let lane = &mut self.lanes[0];
        let wqe = passthrough_wqe(&slot.wr, send_id(self.tag, id), lane.device);
        if consumes(slot.wr.opcode) {
            slot.order = lane.sent;
            lane.sent = lane.sent.wrapping_add(1);
        }
        *lane.stage(id, self.send_seq, false, wqe.len, 0) = wqe;
        self.staged |= 1;
        slot.posted = 1;
        if !lane.has_room(max) {
            self.room &= !1;
        }
    }

    /// Whether a round may spread a request in one go: always, but for the tests
    /// that compare the spread with the fragment-by-fragment round.
    #[inline]
    fn may_spread(&self) -> bool {
        #[cfg(test)]
        return !self.one_by_one;
        #[cfg(not(test))]
        true
    }

    /// Stage every fragment request `s.id` has left, fragment `posted + k` on data
    /// QP `(next_lane + k) mod n` exactly as one-by-one round-robin would place
    /// them. The caller checked that every QP has room for its share and that the
    /// DQPLB budget covers them.
    fn stage_spread<const MERGE: bool, const PLAIN: bool>(&mut self, s: &Spread, max: u32) {
        let n = self.lanes.len() as u64;
        let at = Layout::of(self.send.get(s.id), self.send_seq);
        let (first, left) = (at.first, at.count - at.first);
        let start = u64::from(self.next_lane);
        // QP k of the round takes fragments first + k, first + k + n, ...: `whole`
        // each, one more for the first `extra` QPs. The last fragment is on QP
        // `last_k`.
        let (whole, extra) = (left / n, left % n);
        let last_k = if extra == 0 { n - 1 } else { extra - 1 };
        for k in 0..left.min(n) {
            let mut l = start + k;
            if l >= n {
                l -= n;
            }
            let share = (whole + u64::from(k < extra)) as u32;
            let ends = k == last_k;
            self.stage_share::<MERGE, PLAIN>(s, &at, l as usize, first + k, share, n, ends, max);
        }
        self.next_lane = ((start + left) % n) as u32;
        self.spread_done(s, left);
    }

    /// Stage `share` fragments of request `s.id` on data QP `l`: fragments `i`,
    /// `i + d`, `i + 2d`, ..., each fragment `j` numbered `send_seq + j − posted`
    /// in DQPLB, as one run with `MERGE` (last-of-chain signaling), a run per WQE
    /// without; `ends` when the last of them is the request's last fragment. The
    /// caller checked that the QP has room; [`Self::spread_done`] ends the request's
    /// staging.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn stage_share<const MERGE: bool, const PLAIN: bool>(
        &mut self,
        s: &Spread,
        at: &Layout,
        l: usize,
        i: u64,
        share: u32,
        d: u64,
        ends: bool,
        max: u32,
    ) {
        let Layout {
            plan,
            count,
            first,
            base_seq,
            origin,
            step,
        } = *at;
        let keys = self.send.get(s.id).wr.keys.pair(self.lanes[l].device);
        let run_seq = if s.dqplb_imm {
            base_seq.add((i - first) as u32)
        } else {
            base_seq
        };
        // This share's fragments are numbered d apart.
        let seq_step = if s.dqplb_imm { d as u32 } else { 0 };
        let stride = d * step;
        let lane = &mut self.lanes[l];
        let shared = s.wqe(l as u64, keys, 0, step as u32, run_seq, false);
        let run = lane.stage_run::<PLAIN>(
            s.id,
            run_seq,
            seq_step,
            share,
            MERGE,
            step as u32,
            (i as u32, d as u32),
        );
        let (mut off, mut seq) = (origin.wrapping_add(i * step), run_seq);
        for wqe in run.iter_mut() {
            *wqe = SendWqe {
                addr: s.local.wrapping_add(off),
                remote_addr: s.remote.wrapping_add(off),
                imm_data: if s.dqplb_imm {
                    Imm::new(seq, false).to_wire()
                } else {
                    0
                },
                ..shared
            };
            off = off.wrapping_add(stride);
            seq = seq.add(seq_step);
        }
        // A first fragment shortened by the alignment starts at the request's
        // start; the last one may be shorter and ends the request.
        let head = (i == 0 && origin != 0).then(|| {
            let len = plan.fragment(0).1;
            let w = &mut run[0];
            (w.addr, w.remote_addr, w.len) = (s.local, s.remote, len);
            len
        });
        let tail = ends.then(|| {
            let len = plan.fragment(count - 1).1;
            let w = &mut run[share as usize - 1];
            w.len = len;
            if s.dqplb_imm {
                // What `Spread::wqe` gives a last fragment, mended in place.
                let seq = base_seq.add((count - 1 - first) as u32);
                (w.flags, w.imm_data) = (s.last_flags, Imm::new(seq, true).to_wire());
            }
            len
        });
        // The byte counts follow the lengths mended above.
        if let Some(len) = head {
            lane.mend_len::<PLAIN>(0, share, MERGE, step as u32, len);
        }
        if let Some(len) = tail {
            lane.mend_len::<PLAIN>(share - 1, share, MERGE, step as u32, len);
        }
        self.staged |= 1 << l;
        if !lane.has_room(max) {
            self.room &= !(1 << l);
        }
    }

    /// Every fragment of request `s.id`, `left` of them from its `posted`, is staged.
    #[inline]
    fn spread_done(&mut self, s: &Spread, left: u64) {
        if s.dqplb_imm {
            self.send_seq = self.send_seq.add(left as u32);
        }
        let slot = self.send.get_mut(s.id);
        slot.posted = slot.plan.count();
        slot.offset = slot.wr.len;
    }

    /// The weighted policies' counterpart of [`Self::try_spread`]: take the next
    /// entries of the schedule, one per fragment left (within the fan-out limit),
    /// and if every QP named has room for its share and the DQPLB budget covers
    /// them, stage each QP's share as consecutive fragments; false, with nothing
    /// staged and the schedule where it was, otherwise.
    #[inline(never)]
    fn try_scheduled(&mut self, id: u64, max: u32, seq_budget: &mut Option<u32>) -> bool {
        let slot = self.send.get(id);
        let left = slot.plan.count() - slot.posted;
        // A request the round meets first has used no QP yet.
        let mut used = if slot.posted == 0 { 0 } else { slot.used };
        let mut shares = [0u32; N];
        let mark = self.striping.mark();
        let n = self.lanes.len() as u32;
        let fanout = self.cfg.fanout;
        if fanout == 0 || u32::from(fanout) >= n {
            for _ in 0..left {
                shares[self.striping.next()] += 1;
            }
        } else {
            let all = u64::MAX >> (64 - n);
            for _ in 0..left {
                let l = self.striping.next_in(allowed(all, fanout, used));
                used |= 1 << l;
                shares[l] += 1;
            }
        }
        let fits = shares
            .iter()
            .zip(&self.lanes)
            .all(|(&k, lane)| k == 0 || lane.has_room_for(k, max));
        let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
        let budget_ok = !req.dqplb_imm || {
            let budget = seq_budget.get_or_insert_with(|| {
                Self::seq_budget(&self.lanes, self.send_seq, self.seq_credit)
            });
            u64::from(*budget) >= left
        };
        if !fits || !budget_ok {
            self.striping.rewind(mark);
            return false;
        }
        if let Some(b) = seq_budget.as_mut().filter(|_| req.dqplb_imm) {
            *b -= left as u32;
        }
        let at = Layout::of(slot, self.send_seq);
        let mut i = at.first;
        for (l, &k) in shares.iter().enumerate().take(n as usize) {
            if k == 0 {
                continue;
            }
            used |= 1 << l;
            let ends = i + u64::from(k) == at.count;
            if self.cfg.signaling == Signaling::LastOfChain {
                self.stage_share::<true, false>(&req, &at, l, i, k, 1, ends, max);
            } else {
                self.stage_share::<false, false>(&req, &at, l, i, k, 1, ends, max);
            }
            i += u64::from(k);
        }
        self.send.get_mut(id).used = used;
        self.spread_done(&req, left);
        true
    }

    /// Stage SPRAY notifies: in posting order, each once its data completed.
    fn dispatch_notifies(&mut self) {
        let Some(lane) = self.notify.as_mut() else {
            return;
        };
        if lane.failed && self.failed.is_none() {
            // Failed or waiting for its peer: the notifies wait for the replacement.
            return;
        }
        let max = self.cfg.max_outstanding;
        // Requests already reported needed no notify or have settled it.
        self.notify_next = self.notify_next.max(self.send.head);
        while self.notify_next != self.send.tail {
            let id = self.notify_next;
            let slot = self.send.get_mut(id);
            if slot.notify == Notify::Waiting {
                if !slot.data_settled() {
                    break;
                }
                if !slot.status.is_ok() || self.failed.is_some() {
                    // The receiver must not be told of data that did not all land.
                    slot.fail(WcStatus::WR_FLUSH_ERR);
                    slot.notify = Notify::Settled;
                } else {
                    if !lane.has_room(max) {
                        break;
                    }
                    let (_, rkey) = slot.wr.keys.pair(lane.device);
                    *lane.stage(id, self.send_seq, false, 0, 0) = SendWqe {
                        wr_id: WrId {
                            tag: self.tag,
                            lane: NOTIFY_LANE,
                            kind: Kind::Send,
                            id,
                        }
                        .encode(),
                        opcode: Opcode::RDMA_WRITE_WITH_IMM,
                        flags: SendFlags(slot.wr.flags.0 & SendFlags::SOLICITED.0),
                        addr: 0,
                        len: 0,
                        lkey: 0,
                        remote_addr: slot.wr.remote_addr,
                        rkey,
                        imm_data: slot.wr.imm_data,
                        compare_add: 0,
                        swap: 0,
                    };
                    slot.notify = Notify::InFlight;
                    slot.order = lane.sent;
                    lane.sent = lane.sent.wrapping_add(1);
                }
            }
            self.notify_next += 1;
        }
    }

    /// Post every staged chain; a refused post fails the virtual QP.
    fn flush(&mut self) {
        let signaling = self.cfg.signaling;
        let send = &mut self.send;
        let mut refused = false;
        while self.staged != 0 {
            let l = self.staged.trailing_zeros() as usize;
            self.staged &= self.staged - 1;
            let lane = &mut self.lanes[l];
            let posted = lane.flush(signaling, &mut |id, n, st| credit_data(send, id, n, st));
            refused |= posted.is_err();
        }
        if let Some(lane) = self.notify.as_mut().filter(|l| l.has_staged()) {
            let posted = lane.flush(signaling, &mut |id, n, st| credit_notify(send, id, n, st));
            refused |= posted.is_err();
        }
        if refused {
            self.fail(WcStatus::POST_ERR);
        }
    }
}
