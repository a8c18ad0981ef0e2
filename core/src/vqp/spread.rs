//! Staging what a request has left in one go: round-robin's spread over every data
//! QP, and the weighted policies' schedule. Both stage each QP's share as one run
//! and fall back, staging nothing, to the fragment-by-fragment round
//! (`dispatch`) when a QP lacks room.

use super::choice::allowed;
use super::config::Signaling;
use super::fragment::Spread;
use super::slots::SendSlot;
use super::VirtualQp;
use crate::imm::Imm;
use crate::phys::{PhysQp, SendWqe};
use crate::seq::Seq;
use crate::split::Plan;

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
            first: u64::from(slot.posted),
            base_seq,
            origin,
            step,
        }
    }
}

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Stage what request `id` has left across all data QPs at once if each has
    /// room for its share and the DQPLB budget covers it; false (nothing staged)
    /// otherwise. Kept out of line: inlined, its state would crowd the
    /// one-fragment path of [`Self::dispatch`].
    #[inline(never)]
    pub(super) fn try_spread(&mut self, id: u64, seq_budget: &mut Option<u32>) -> bool {
        let slot = self.tx.slots.get(id);
        let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
        let left = slot.plan.count() - u64::from(slot.posted);
        let share = left.div_ceil(self.lanes.data.len() as u64) as u32;
        if !self.lanes.data.iter().all(|l| l.has_room_for(share)) {
            return false;
        }
        if req.dqplb_imm {
            let budget = seq_budget.get_or_insert_with(|| self.tx.num.budget(&self.lanes.data));
            if u64::from(*budget) < left {
                return false;
            }
            *budget -= left as u32;
        }
        // One copy of the staging loop per signaling, each with its runs known, and
        // per lane bookkeeping: plain round-robin keeps no per-run figures (nor byte
        // counts, unless asked).
        let plain = !self.lanes.data[0].tally;
        match (self.cfg.signaling == Signaling::LastOfChain, plain) {
            (true, true) => self.stage_spread::<true, true>(&req),
            (true, false) => self.stage_spread::<true, false>(&req),
            (false, true) => self.stage_spread::<false, true>(&req),
            (false, false) => self.stage_spread::<false, false>(&req),
        }
        true
    }

    /// Whether a round may spread a request in one go: always, but for the tests
    /// that compare the spread with the fragment-by-fragment round.
    #[inline]
    pub(super) fn may_spread(&self) -> bool {
        #[cfg(test)]
        return !self.one_by_one;
        #[cfg(not(test))]
        true
    }

    /// Stage every fragment request `s.id` has left, fragment `posted + k` on data
    /// QP `(next_lane + k) mod n` exactly as one-by-one round-robin would place
    /// them. The caller checked that every QP has room for its share and that the
    /// DQPLB budget covers them.
    fn stage_spread<const MERGE: bool, const PLAIN: bool>(&mut self, s: &Spread) {
        let n = self.lanes.data.len() as u64;
        let at = Layout::of(self.tx.slots.get(s.id), self.tx.num.next());
        let (first, left) = (at.first, at.count - at.first);
        let start = u64::from(self.lanes.next);
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
            self.stage_share::<MERGE, PLAIN>(s, &at, l as usize, first + k, share, n, ends);
        }
        self.lanes.next = ((start + left) % n) as u32;
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
    ) {
        let Layout {
            plan,
            count,
            first,
            base_seq,
            origin,
            step,
        } = *at;
        let keys = self
            .tx
            .slots
            .get(s.id)
            .wr
            .keys
            .pair(self.lanes.data[l].device);
        let run_seq = if s.dqplb_imm {
            base_seq.add((i - first) as u32)
        } else {
            base_seq
        };
        // This share's fragments are numbered d apart.
        let seq_step = if s.dqplb_imm { d as u32 } else { 0 };
        let stride = d * step;
        let lane = &mut self.lanes.data[l];
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
        self.lanes.staged |= 1 << l;
        if !lane.has_room() {
            self.lanes.room &= !(1 << l);
        }
    }

    /// Every fragment of request `s.id`, `left` of them from its `posted`, is staged.
    #[inline]
    fn spread_done(&mut self, s: &Spread, left: u64) {
        if s.dqplb_imm {
            self.tx.num.skip(left as u32);
        }
        let slot = self.tx.slots.get_mut(s.id);
        slot.posted = slot.fragments();
        slot.offset = slot.wr.len;
    }

    /// The weighted policies' counterpart of [`Self::try_spread`]: take the next
    /// entries of the schedule, one per fragment left (within the fan-out limit),
    /// and if every QP named has room for its share and the DQPLB budget covers
    /// them, stage each QP's share as consecutive fragments; false, with nothing
    /// staged and the schedule where it was, otherwise.
    #[inline(never)]
    pub(super) fn try_scheduled(&mut self, id: u64, seq_budget: &mut Option<u32>) -> bool {
        let slot = self.tx.slots.get(id);
        let left = slot.plan.count() - u64::from(slot.posted);
        // A request the round meets first has used no QP yet.
        let mut used = if slot.posted == 0 { 0 } else { slot.used };
        let mut shares = [0u32; N];
        let mark = self.lanes.striping.mark();
        let n = self.lanes.data.len() as u32;
        let fanout = self.cfg.fanout;
        if fanout == 0 || u32::from(fanout) >= n {
            for _ in 0..left {
                shares[self.lanes.striping.next()] += 1;
            }
        } else {
            let all = u64::MAX >> (64 - n);
            for _ in 0..left {
                let l = self.lanes.striping.next_in(allowed(all, fanout, used));
                used |= 1 << l;
                shares[l] += 1;
            }
        }
        let fits = shares
            .iter()
            .zip(&self.lanes.data)
            .all(|(&k, lane)| k == 0 || lane.has_room_for(k));
        let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
        let budget_ok = !req.dqplb_imm || {
            let budget = seq_budget.get_or_insert_with(|| self.tx.num.budget(&self.lanes.data));
            u64::from(*budget) >= left
        };
        if !fits || !budget_ok {
            self.lanes.striping.rewind(mark);
            return false;
        }
        if let Some(b) = seq_budget.as_mut().filter(|_| req.dqplb_imm) {
            *b -= left as u32;
        }
        let at = Layout::of(slot, self.tx.num.next());
        let mut i = at.first;
        for (l, &k) in shares.iter().enumerate().take(n as usize) {
            if k == 0 {
                continue;
            }
            used |= 1 << l;
            let ends = i + u64::from(k) == at.count;
            if self.cfg.signaling == Signaling::LastOfChain {
                self.stage_share::<true, false>(&req, &at, l, i, k, 1, ends);
            } else {
                self.stage_share::<false, false>(&req, &at, l, i, k, 1, ends);
            }
            i += u64::from(k);
        }
        self.tx.slots.get_mut(id).used = used;
        self.spread_done(&req, left);
        true
    }
}
