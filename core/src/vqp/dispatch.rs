//! Dispatching accepted requests: fragments spread over the data QPs with room,
//! chained per QP and posted once per round; SPRAY notifies in order.

use super::choice::{after, allowed, choose, pick};
use super::config::Signaling;
use super::fragment::{consumes, numbered, passthrough_wqe, send_id, Spread};
use super::policy::Policy;
use super::slots::{credit_data, credit_notify, Notify};
use super::VirtualQp;
use crate::phys::{PhysQp, SendWqe};
use crate::wr::{Opcode, SendFlags, WcStatus};
use crate::wrid::{Kind, WrId, NOTIFY_LANE};

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Post the request just taken straight to a data QP when it is the only one
    /// waiting, goes as one WQE (a single fragment or a pass-through) and a QP has
    /// room: what a dispatch round would do for it, without the round. False, having
    /// done nothing, when a round is needed. Round-robin over every QP only: the
    /// other policies choose in the round. Always inlined: each post has its own
    /// copy, so that a binary with several post calls (the C library) does not take
    /// it out of line for all of them.
    #[inline(always)]
    pub(super) fn post_alone(&mut self) -> bool {
        let id = self.tx.dispatch;
        if id + 1 != self.tx.slots.tail || !self.lanes.even {
            return false;
        }
        let slot = self.tx.slots.get_mut(id);
        if slot.notify != Notify::None {
            return false;
        }
        let (l, mut wqe, run_seq) = if slot.passthrough {
            let lane = &mut self.lanes.data[0];
            if !lane.has_room() {
                return false;
            }
            if consumes(slot.wr.opcode) {
                slot.order = lane.sent;
                lane.sent = lane.sent.wrapping_add(1);
            }
            (
                0,
                passthrough_wqe(&slot.wr, send_id(self.tag, id), lane.device),
                self.tx.num.next(),
            )
        } else {
            if slot.plan.count() != 1 || self.lanes.room == 0 {
                return false;
            }
            let seq = self.tx.num.next();
            if numbered(&slot.wr, self.cfg.mode) {
                if self.tx.num.budget(&self.lanes.data) == 0 {
                    return false;
                }
                self.tx.num.skip(1);
            }
            let l = pick(self.lanes.room, self.lanes.next);
            self.lanes.next = after(l, self.lanes.data.len());
            // Built only now, so that little of it lives across the checks above.
            let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
            let keys = slot.wr.keys.pair(self.lanes.data[l].device);
            let len = slot.wr.len as u32;
            (l, req.wqe(l as u64, keys, 0, len, seq, true), seq)
        };
        slot.posted = 1;
        slot.offset = slot.wr.len;
        self.tx.dispatch += 1;
        // A request that needs no notify is passed over by the notify cursor.
        if self.tx.notify_next == id {
            self.tx.notify_next += 1;
        }
        let lane = &mut self.lanes.data[l];
        let send = &mut self.tx.slots;
        let posted = lane.post_one(id, run_seq, &mut wqe, &mut |id, n, st| {
            credit_data(send, id, n, st)
        });
        if !lane.has_room() {
            self.lanes.room &= !(1 << l);
        }
        if posted.is_err() {
            self.fail(WcStatus::POST_ERR);
        }
        true
    }

    /// One dispatch round: stage every fragment that fits, in posting order, then the
    /// notifies that became due, then post one chain per QP.
    pub(super) fn dispatch(&mut self) {
        if self.rec.pending() {
            self.restage();
            self.post_again();
            self.rec.resettle();
        }
        let merge = self.cfg.signaling == Signaling::LastOfChain;
        let n = self.lanes.data.len() as u32;
        let all_lanes = u64::MAX >> (64 - n);
        // DQPLB sequence numbers this round may still use; computed when first needed.
        let mut seq_budget = None;
        'requests: while self.tx.dispatch != self.tx.slots.tail {
            let id = self.tx.dispatch;
            let slot = self.tx.slots.get_mut(id);
            if slot.passthrough {
                if self.lanes.data[0].survived {
                    self.passthrough_without_qp0(id);
                } else if self.lanes.data[0].has_room() {
                    self.stage_passthrough(id);
                } else {
                    if self.cfg.policy == Policy::Adaptive {
                        self.lanes.striping.note_wait(1);
                    }
                    break;
                }
                self.tx.dispatch += 1;
                continue;
            }
            let count = slot.fragments();
            // Every data QP takes its share of what is left at once when all have
            // room for it: no per-fragment pick.
            if count - slot.posted >= 2 && self.may_spread() {
                let staged = if self.lanes.even {
                    self.lanes.room == all_lanes && self.try_spread(id, &mut seq_budget)
                } else {
                    self.lanes.scheduled && self.try_scheduled(id, &mut seq_budget)
                };
                if staged {
                    self.tx.dispatch += 1;
                    continue;
                }
            }
            let slot = self.tx.slots.get_mut(id);
            if slot.posted == 0 {
                // Set here rather than when the request is taken: only the
                // fragment-by-fragment round and the schedule read it.
                slot.used = 0;
            }
            let req = Spread::of(&slot.wr, id, self.tag, self.cfg.mode);
            let dqplb_imm = req.dqplb_imm;
            while slot.posted < count {
                let eligible = allowed(all_lanes, self.cfg.fanout, slot.used);
                let allowed = eligible & self.lanes.room;
                if allowed == 0 {
                    if self.cfg.policy == Policy::Adaptive {
                        self.lanes.striping.note_full(eligible, count == 1);
                    }
                    break 'requests;
                }
                if dqplb_imm {
                    let budget =
                        seq_budget.get_or_insert_with(|| self.tx.num.budget(&self.lanes.data));
                    if *budget == 0 {
                        break 'requests;
                    }
                    *budget -= 1;
                }
                let Some(l) = choose(
                    &self.cfg,
                    &self.lanes.data,
                    &mut self.lanes.striping,
                    &mut self.lanes.next,
                    (eligible, allowed),
                    count == 1,
                ) else {
                    break 'requests;
                };
                slot.used |= 1 << l;
                let lane = &mut self.lanes.data[l];
                let off = slot.offset;
                let len = slot.plan.next_len(u64::from(slot.posted), off);
                slot.offset += u64::from(len);
                slot.posted += 1;
                let seq = self.tx.num.next();
                if dqplb_imm {
                    self.tx.num.skip(1);
                }
                let keys = slot.wr.keys.pair(lane.device);
                let wqe = req.wqe(l as u64, keys, off, len, seq, slot.posted == count);
                let fragment = slot.posted - 1;
                *lane.stage(id, seq, merge, len, fragment) = wqe;
                self.lanes.staged |= 1 << l;
                if !lane.has_room() {
                    self.lanes.room &= !(1 << l);
                }
            }
            self.tx.dispatch += 1;
        }
        self.dispatch_notifies();
        self.flush();
    }

    /// Pass-through request `id`, not posted yet, meets a failed data QP 0: it waits
    /// for the replacement, behind those that were in flight there, when there is a
    /// grace period to wait in; it is reported with the QP's error otherwise (as the
    /// virtual QP does not hold requests then).
    #[cold]
    fn passthrough_without_qp0(&mut self, id: u64) {
        let slot = self.tx.slots.get_mut(id);
        slot.posted = 1;
        if self
            .rec
            .wait_for_qp0(&mut self.tx.slots, id, self.cfg.grace_ns > 0)
        {
            self.settle_hold();
        }
    }

    /// Stage pass-through request `id` whole on data QP 0 (the caller checked its
    /// room), numbering it among the receive-consuming WQEs when it is one.
    pub(super) fn stage_passthrough(&mut self, id: u64) {
        let slot = self.tx.slots.get_mut(id);
        let lane = &mut self.lanes.data[0];
        let wqe = passthrough_wqe(&slot.wr, send_id(self.tag, id), lane.device);
        if consumes(slot.wr.opcode) {
            slot.order = lane.sent;
            lane.sent = lane.sent.wrapping_add(1);
        }
        *lane.stage(id, self.tx.num.next(), false, wqe.len, 0) = wqe;
        self.lanes.staged |= 1;
        slot.posted = 1;
        if !lane.has_room() {
            self.lanes.room &= !1;
        }
    }

    /// Stage SPRAY notifies: in posting order, each once its data completed.
    fn dispatch_notifies(&mut self) {
        let Some(lane) = self.lanes.notify.as_mut() else {
            return;
        };
        if lane.failed && self.failed.is_none() {
            // Failed or waiting for its peer: the notifies wait for the replacement.
            return;
        }
        // Requests already reported needed no notify or have settled it.
        self.tx.notify_next = self.tx.notify_next.max(self.tx.slots.head);
        while self.tx.notify_next != self.tx.slots.tail {
            let id = self.tx.notify_next;
            let slot = self.tx.slots.get_mut(id);
            if slot.notify == Notify::Waiting {
                if !slot.data_settled() {
                    break;
                }
                if !slot.status.is_ok() || self.failed.is_some() {
                    // The receiver must not be told of data that did not all land.
                    slot.fail(WcStatus::WR_FLUSH_ERR);
                    slot.notify = Notify::Settled;
                } else {
                    if !lane.has_room() {
                        break;
                    }
                    let (_, rkey) = slot.wr.keys.pair(lane.device);
                    *lane.stage(id, self.tx.num.next(), false, 0, 0) = SendWqe {
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
            self.tx.notify_next += 1;
        }
    }

    /// Post every staged chain; a refused post fails the virtual QP.
    fn flush(&mut self) {
        let signaling = self.cfg.signaling;
        let send = &mut self.tx.slots;
        let mut refused = false;
        while self.lanes.staged != 0 {
            let l = self.lanes.staged.trailing_zeros() as usize;
            self.lanes.staged &= self.lanes.staged - 1;
            let lane = &mut self.lanes.data[l];
            let posted = lane.flush(signaling, &mut |id, n, st| credit_data(send, id, n, st));
            refused |= posted.is_err();
        }
        if let Some(lane) = self.lanes.notify.as_mut().filter(|l| l.has_staged()) {
            let posted = lane.flush(signaling, &mut |id, n, st| credit_notify(send, id, n, st));
            refused |= posted.is_err();
        }
        if refused {
            self.fail(WcStatus::POST_ERR);
        }
    }
}
