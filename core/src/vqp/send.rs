//! The send side: validating, dispatching fragments and SPRAY notifies, crediting
//! completions, reporting in posting order.

use super::lane::Lane;
use super::slots::{Notify, Ring, SendSlot};
use super::{Mode, PostSendError, Signaling, Stray, VirtualQp};
use crate::imm::Imm;
use crate::phys::{PhysQp, SendWqe};
use crate::seq::Seq;
use crate::split::{Plan, MAX_WQE_BYTES};
use crate::wr::{Opcode, SendFlags, SendWr, Wc, WcStatus};
use crate::wrid::{Kind, WrId, NOTIFY_LANE};

/// The data QP round-robin picks: the first with room at or after `from`.
#[inline]
fn pick(room: u64, from: u32) -> usize {
    debug_assert!(room != 0);
    let k = room.rotate_right(from).trailing_zeros();
    ((from + k) & 63) as usize
}

/// The data QP after `l` of `n`, round robin.
#[inline]
fn after(l: usize, n: usize) -> u32 {
    if l + 1 == n {
        0
    } else {
        l as u32 + 1
    }
}

/// Credit `count` data WQEs of request `id` with `status`.
#[inline]
fn credit_data<const S: usize>(send: &mut Ring<SendSlot, S>, id: u64, count: u32, st: WcStatus) {
    let slot = send.get_mut(id);
    slot.done += u64::from(count);
    if !st.is_ok() {
        slot.fail(st);
    }
}

/// Credit request `id`'s notify with `status`.
#[inline]
fn credit_notify<const S: usize>(send: &mut Ring<SendSlot, S>, id: u64, _: u32, st: WcStatus) {
    let slot = send.get_mut(id);
    slot.notify = Notify::Settled;
    if !st.is_ok() {
        slot.fail(st);
    }
}

/// The physical wr_id of request `id`'s send WQEs on data QP 0 of the virtual QP
/// tagged `tag` (other data QPs add their index at bit 48).
#[inline]
fn send_id(tag: u8, id: u64) -> u64 {
    WrId {
        tag,
        lane: 0,
        kind: Kind::Send,
        id,
    }
    .encode()
}

/// Whether the fragments of `wr` carry DQPLB sequence numbers.
#[inline]
fn numbered(wr: &SendWr, mode: Mode) -> bool {
    mode == Mode::Dqplb && wr.opcode == Opcode::RDMA_WRITE_WITH_IMM
}

/// What every fragment of one request shares.
struct Spread {
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
    fn of(wr: &SendWr, id: u64, tag: u8, mode: Mode) -> Self {
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
    fn wqe(
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

/// The WQE of a request that passes through whole, with wr_id `wr_id` and the keys
/// of `device`.
#[inline]
fn passthrough_wqe(wr: &SendWr, wr_id: u64, device: u8) -> SendWqe {
    let (lkey, rkey) = wr.keys.pair(device);
    SendWqe {
        wr_id,
        opcode: wr.opcode,
        flags: wr.flags,
        addr: wr.local_addr,
        len: wr.len as u32,
        lkey,
        remote_addr: wr.remote_addr,
        rkey,
        imm_data: wr.imm_data,
        compare_add: wr.compare_add,
        swap: wr.swap,
    }
}

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Take one send request and post what fits now. A refused request posted
    /// nothing; an accepted one is reported exactly once (if signaled or failed).
    ///
    /// RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ are cut into fragments across
    /// the data QPs when there are several; SEND, SEND_WITH_IMM and the atomics pass
    /// through to data QP 0 (and so do all opcodes with one data QP).
    pub fn post_send(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        self.accept(wr)?;
        if !self.post_alone() {
            self.dispatch();
        }
        Ok(())
    }

    /// Take several send requests and post what fits with one chain per QP. Stops at
    /// the first refused request: `Err((i, e))` means `wrs[..i]` were taken and
    /// `wrs[i..]` posted nothing.
    pub fn post_send_many(&mut self, wrs: &[SendWr]) -> Result<(), (usize, PostSendError)> {
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.accept(wr) {
                result = Err((i, e));
                break;
            }
        }
        self.dispatch();
        result
    }

    /// Whether `wr` passes through whole (`true`) or is fragmented, or why it is refused.
    fn classify(&self, wr: &SendWr) -> Result<bool, PostSendError> {
        let op = wr.opcode;
        if op.name().is_none() {
            return Err(PostSendError::UnknownOpcode(op));
        }
        let several = self.lanes.len() > 1;
        let (passthrough, devices) = if several && op.is_rdma() {
            if wr.len == 0 {
                return Err(PostSendError::ZeroLength);
            }
            if !wr.flags.contains(SendFlags::SIGNALED) && op != Opcode::RDMA_WRITE_WITH_IMM {
                return Err(PostSendError::Unsignaled(op));
            }
            let notify_dev = if op == Opcode::RDMA_WRITE_WITH_IMM {
                self.notify_device
            } else {
                0
            };
            (false, self.data_devices | notify_dev)
        } else {
            let is_send = matches!(op, Opcode::SEND | Opcode::SEND_WITH_IMM);
            if is_send && several && self.cfg.mode == Mode::Dqplb {
                return Err(PostSendError::SendNeedsSpray);
            }
            if wr.len > MAX_WQE_BYTES {
                return Err(PostSendError::TooLong(wr.len));
            }
            let touches_keys = !is_send || (wr.len > 0 && !wr.flags.contains(SendFlags::INLINE));
            (
                true,
                if touches_keys {
                    1 << self.lanes[0].device
                } else {
                    0
                },
            )
        };
        let missing = devices & !wr.keys.present();
        if missing != 0 {
            return Err(PostSendError::MissingKey {
                device: missing.trailing_zeros() as u8,
            });
        }
        Ok(passthrough)
    }

    /// Validate `wr` and give it a slot; posts nothing.
    fn accept(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        if let Some(st) = self.failed {
            return Err(PostSendError::Failed(st));
        }
        let passthrough = self.classify(wr)?;
        if self.send.is_full() {
            return Err(PostSendError::Full);
        }
        let spray_imm = self.notify_device != 0 && wr.opcode == Opcode::RDMA_WRITE_WITH_IMM;
        let id = self.send.tail;
        let plan = if passthrough {
            Plan::whole(wr.len)
        } else {
            self.cfg.split.plan(wr.len, wr.remote_addr)
        };
        // Field by field: a whole-slot assignment would build the slot on the stack
        // first and copy it.
        let slot = self.send.get_mut(id);
        slot.wr = *wr;
        slot.plan = plan;
        slot.posted = 0;
        slot.offset = 0;
        slot.done = 0;
        slot.target = plan.count();
        slot.passthrough = passthrough;
        slot.status = WcStatus::SUCCESS;
        slot.notify = if spray_imm && !passthrough {
            Notify::Waiting
        } else {
            Notify::None
        };
        self.send.tail += 1;
        Ok(())
    }

    /// Post the request just taken straight to a data QP when it is the only one
    /// waiting, goes as one WQE (a single fragment or a pass-through) and a QP has
    /// room: what a dispatch round would do for it, without the round. False, having
    /// done nothing, when a round is needed.
    #[inline]
    fn post_alone(&mut self) -> bool {
        let id = self.dispatch;
        if id + 1 != self.send.tail {
            return false;
        }
        let max = self.cfg.max_outstanding;
        let slot = self.send.get_mut(id);
        if slot.notify != Notify::None {
            return false;
        }
        let (l, mut wqe, run_seq) = if slot.passthrough {
            let lane = &self.lanes[0];
            if !lane.has_room(max) {
                return false;
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
        let merge = self.cfg.signaling == Signaling::LastOfChain;
        let n = self.lanes.len() as u32;
        let all_lanes = u64::MAX >> (64 - n);
        // DQPLB sequence numbers this round may still use; computed when first needed.
        let mut seq_budget = None;
        'requests: while self.dispatch != self.send.tail {
            let id = self.dispatch;
            let slot = self.send.get_mut(id);
            let wr = &slot.wr;
            if slot.passthrough {
                let lane = &mut self.lanes[0];
                if !lane.has_room(max) {
                    break;
                }
                let wqe = passthrough_wqe(wr, send_id(self.tag, id), lane.device);
                *lane.stage(id, self.send_seq, false) = wqe;
                self.staged |= 1;
                slot.posted = 1;
                if !lane.has_room(max) {
                    self.room &= !1;
                }
                self.dispatch += 1;
                continue;
            }
            let count = slot.plan.count();
            // Every data QP takes its share of what is left at once when all have
            // room for it: no per-fragment pick.
            if count - slot.posted >= 2
                && self.room == all_lanes
                && self.may_spread()
                && self.try_spread(id, max, &mut seq_budget)
            {
                self.dispatch += 1;
                continue;
            }
            let slot = self.send.get_mut(id);
            let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
            let dqplb_imm = req.dqplb_imm;
            while slot.posted < count {
                if self.room == 0 {
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
                let l = pick(self.room, self.next_lane);
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
                *lane.stage(id, seq, merge) = wqe;
                self.staged |= 1 << l;
                if !lane.has_room(max) {
                    self.room &= !(1 << l);
                }
                self.next_lane = after(l, n as usize);
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
        // One copy of the staging loop per signaling, each with its runs known.
        if self.cfg.signaling == Signaling::LastOfChain {
            self.stage_spread::<true>(&req, max);
        } else {
            self.stage_spread::<false>(&req, max);
        }
        true
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
    /// them, each QP's share as one run with `MERGE` (last-of-chain signaling), a
    /// run per WQE without. The caller checked that every QP has room for its share
    /// and that the DQPLB budget covers them.
    fn stage_spread<const MERGE: bool>(&mut self, s: &Spread, max: u32) {
        let n = self.lanes.len() as u64;
        let slot = self.send.get_mut(s.id);
        let plan = slot.plan;
        let count = plan.count();
        let first = slot.posted;
        let left = count - first;
        let start = u64::from(self.next_lane);
        let base_seq = self.send_seq;
        // QP k of the round takes fragments first + k, first + k + n, ...: `whole`
        // each, one more for the first `extra` QPs. The last fragment is on QP
        // `last_k`.
        let (whole, extra) = (left / n, left % n);
        let last_k = if extra == 0 { n - 1 } else { extra - 1 };
        // Fragments but the first and the last are `step` long, `step` apart.
        let (origin, step) = plan.grid();
        let stride = n * step;
        for k in 0..left.min(n) {
            let mut l = start + k;
            if l >= n {
                l -= n;
            }
            let lane = &mut self.lanes[l as usize];
            let share = (whole + u64::from(k < extra)) as u32;
            let keys = self.send.get(s.id).wr.keys.pair(lane.device);
            let run_seq = if s.dqplb_imm {
                base_seq.add(k as u32)
            } else {
                base_seq
            };
            // This QP's fragments are numbered n apart.
            let seq_step = if s.dqplb_imm { n as u32 } else { 0 };
            let i = first + k;
            let shared = s.wqe(l, keys, 0, step as u32, run_seq, false);
            let run = lane.stage_run(s.id, run_seq, seq_step, share, MERGE);
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
            if i == 0 && origin != 0 {
                let w = &mut run[0];
                (w.addr, w.remote_addr, w.len) = (s.local, s.remote, plan.fragment(0).1);
            }
            if k == last_k {
                let w = &mut run[share as usize - 1];
                w.len = plan.fragment(count - 1).1;
                if s.dqplb_imm {
                    // What `Spread::wqe` gives a last fragment, mended in place.
                    let seq = base_seq.add((left - 1) as u32);
                    (w.flags, w.imm_data) = (s.last_flags, Imm::new(seq, true).to_wire());
                }
            }
            self.staged |= 1 << l;
            if !lane.has_room(max) {
                self.room &= !(1 << l);
            }
        }
        let next = (start + left) % n;
        self.next_lane = next as u32;
        if s.dqplb_imm {
            self.send_seq = base_seq.add(left as u32);
        }
        let slot = self.send.get_mut(s.id);
        slot.posted = count;
        slot.offset = slot.wr.len;
    }

    /// Stage SPRAY notifies: in posting order, each once its data completed.
    fn dispatch_notifies(&mut self) {
        let Some(lane) = self.notify.as_mut() else {
            return;
        };
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
                    *lane.stage(id, self.send_seq, false) = SendWqe {
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

    /// A send completion on data QP `lane` for the request whose id is `short`
    /// (mod 2^45).
    #[inline]
    pub(super) fn data_completion(
        &mut self,
        lane: usize,
        short: u64,
        status: WcStatus,
    ) -> Result<(), Stray> {
        let l = &mut self.lanes[lane];
        if let Some((id, count)) = l.complete_oldest(short, status) {
            credit_data(&mut self.send, id, count, WcStatus::SUCCESS);
            // The QP is healthy, or the completion would not have been the usual one.
            if l.outstanding < self.cfg.max_outstanding {
                self.room |= 1 << lane;
            }
            return Ok(());
        }
        self.data_completion_rest(lane, short, status)
    }

    /// [`Self::data_completion`] for anything but a success naming the oldest run
    /// on a healthy QP. Out of line, like [`Lane::complete`]'s own rest.
    #[cold]
    #[inline(never)]
    fn data_completion_rest(
        &mut self,
        lane: usize,
        short: u64,
        status: WcStatus,
    ) -> Result<(), Stray> {
        let send = &mut self.send;
        let l = &mut self.lanes[lane];
        let matched = l.complete_rest(short, status, &mut |id, n, st| credit_data(send, id, n, st));
        if l.has_room(self.cfg.max_outstanding) {
            self.room |= 1 << lane;
        }
        if status.is_ok() {
            return if matched { Ok(()) } else { Err(Stray) };
        }
        self.fail(status);
        // An error for a run already credited is a flush of an unsignaled WQE.
        Ok(())
    }

    /// A send completion on `lane` (a data QP or [`NOTIFY_LANE`]) for the request
    /// whose id is `short` (mod 2^45).
    pub(super) fn send_completion(
        &mut self,
        lane: u8,
        short: u64,
        status: WcStatus,
    ) -> Result<(), Stray> {
        if lane != NOTIFY_LANE {
            return self.data_completion(lane as usize, short, status);
        }
        let send = &mut self.send;
        let Some(l) = self.notify.as_mut() else {
            return Err(Stray);
        };
        let matched = l.complete(short, status, &mut |id, n, st| {
            credit_notify(send, id, n, st)
        });
        if !status.is_ok() {
            self.fail(status);
        }
        // An error for a run already credited is a flush of an unsignaled WQE.
        if matched || !status.is_ok() {
            Ok(())
        } else {
            Err(Stray)
        }
    }

    /// Report completed send requests in posting order.
    #[inline]
    pub(super) fn drain_sends(&mut self, out: &mut [Wc]) -> usize {
        let mut n = 0;
        while self.send.head != self.send.tail && n < out.len() {
            let slot = self.send.get(self.send.head);
            if !slot.complete() {
                break;
            }
            if slot.wr.flags.contains(SendFlags::SIGNALED) || !slot.status.is_ok() {
                out[n] = Wc {
                    wr_id: slot.wr.wr_id,
                    status: slot.status,
                    opcode: slot.wr.opcode.completion(),
                    qp_num: self.cfg.qp_num,
                    imm_data: None,
                    byte_len: slot.wr.len,
                };
                n += 1;
            }
            self.send.head += 1;
        }
        n
    }
}
