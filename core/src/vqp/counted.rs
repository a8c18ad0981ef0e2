//! The QPs whose sends consume the peer's receives — SPRAY's notify QP (its notifies)
//! and data QP 0 (the pass-through SENDs, and a one-QP virtual QP's WRITE_WITH_IMMs) —
//! failing and coming back (`Config::redispatch` with a grace period).
//!
//! Such a WQE cannot simply be posted again: the receiver could not tell a second
//! copy from the next message (a notify carries the application's immediate, a SEND
//! its data), and one that completed in error at the sender may still have landed
//! (its acknowledgement lost). What settles it is the receiver's count: each side
//! counts, per QP role, the receive-consuming WQEs it posted and the application's
//! receives that completed (one RC QP delivers in order, so those that landed are the
//! first `seen` of those posted). Once the failed QP's receives have all completed
//! (flushed), a side's count is final; the two sides exchange counts while they
//! connect the replacement (over a channel of their own), and each sender then knows
//! which WQEs landed (their requests complete) and which to post again (the rest, in
//! order, on the new QP). The receiver posts the receives that did not complete
//! again, first, on the new QP.
//!
//! Notify QP: [`VirtualQp::retire_notify`], [`VirtualQp::notifies_seen`],
//! [`VirtualQp::rejoin_notify`], [`VirtualQp::resume_notify`]; requests whose notify
//! waits are held meanwhile (data keeps moving on the data QPs), within the grace
//! period. Data QP 0: [`VirtualQp::retire`], [`VirtualQp::receives_seen`],
//! [`VirtualQp::rejoin`], [`VirtualQp::resume_seen`]. Pass-through requests in
//! flight on a failed data QP 0 wait for it: a RDMA WRITE or READ (one-QP virtual QP)
//! is posted again, an atomic is reported with the error (whether it took effect
//! cannot be known).

use super::config::Mode;
use super::error::{RestoreError, Stray};
use super::fragment::app_recv_wqe;
use super::lane::Lane;
use super::slots::Notify;
use super::VirtualQp;
use crate::phys::{PhysQp, PhysWc};
use crate::wr::{RecvWr, WcStatus};
use crate::wrid::{Kind, NOTIFY_LANE};

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Whether data QP `i` takes the application's receives (data QP 0 of a one-QP
    /// virtual QP, and of a SPRAY one for SENDs), whose count its fail-back needs.
    pub(super) fn counts(&self, i: usize) -> bool {
        i == 0 && (self.lanes.data.len() == 1 || self.cfg.mode == Mode::Spray)
    }

    /// Whether a receive request belongs to the notify QP (`true`) or data QP 0.
    fn on_notify(&self, wr: &RecvWr) -> bool {
        self.lanes.notify.is_some() && wr.len == 0
    }

    /// The QP in role `lane`: a data QP's index, or `NOTIFY_LANE`.
    fn role(&self, lane: u8) -> Option<&Lane<Q, D>> {
        if lane == NOTIFY_LANE {
            self.lanes.notify.as_ref()
        } else {
            self.lanes.data.get(lane as usize)
        }
    }

    /// [`Self::role`], mutably.
    fn role_mut(&mut self, lane: u8) -> Option<&mut Lane<Q, D>> {
        if lane == NOTIFY_LANE {
            self.lanes.notify.as_mut()
        } else {
            self.lanes.data.get_mut(lane as usize)
        }
    }

    /// Whether the notify QP failing is survived: re-dispatch is on with a grace
    /// period (the requests wait for its replacement), and the virtual QP has not
    /// failed.
    fn can_survive_notify(&self) -> bool {
        self.cfg.redispatch
            && self.cfg.grace_ns > 0
            && self.failed.is_none()
            && self.lanes.notify.is_some()
    }

    /// The notify QP fails alone: put it in error (its receives flush), and make every
    /// notify it had in flight unsure until the peer's count settles it.
    fn survive_notify(&mut self, status: WcStatus) {
        let Some(lane) = self.lanes.notify.as_mut() else {
            return;
        };
        if !lane.survived {
            lane.failed = true;
            lane.survived = true;
            lane.joining = false;
            lane.qp.set_error();
            self.rec.count_failover();
        }
        let send = &mut self.tx.slots;
        lane.take_runs(&mut |run| {
            let slot = send.get_mut(run.id);
            if slot.notify == Notify::InFlight {
                slot.notify = Notify::Unsure;
            }
        });
        self.rec.set_error(status);
        self.settle_hold();
    }

    /// `survive_notify` where it may be: true when the notify QP failing with
    /// `status` was survived, false when the caller must fail the virtual QP.
    pub(super) fn try_survive_notify(&mut self, status: WcStatus) -> bool {
        if self.failed.is_some() {
            return false;
        }
        if self.lanes.notify.as_ref().is_some_and(|l| l.survived) {
            return true;
        }
        if !self.can_survive_notify() {
            return false;
        }
        self.survive_notify(status);
        true
    }

    /// Whether the notify QP failed (or was retired) and the virtual QP went on
    /// without it, its replacement not yet sending; false without a notify QP.
    pub fn notify_qp_failed(&self) -> bool {
        self.lanes.notify.as_ref().is_some_and(|l| l.survived)
    }

    /// Take the notify QP out, as if it had failed, so that the peer can replace the
    /// pair (it asked to): its receives flush, and [`Self::notifies_seen`] says when
    /// they have. False, and nothing changes, when that cannot be survived (no
    /// re-dispatch or grace period, no notify QP, the virtual QP failed).
    pub fn retire_notify(&mut self) -> bool {
        self.try_survive_notify(WcStatus::WR_FLUSH_ERR)
    }

    /// Take data QP `i` out, as if it had failed, so that the peer can replace the
    /// pair: what it held goes again on the others (or waits for its replacement),
    /// its receives flush. True when it is out (or already was); false, and nothing
    /// changes, when that cannot be survived.
    pub fn retire(&mut self, i: usize) -> bool {
        match self.lanes.data.get(i) {
            Some(l) if l.survived => true,
            Some(_) => self.can_survive(i) && self.survive(i, WcStatus::WR_FLUSH_ERR),
            None => false,
        }
    }

    /// A QP's count of the application's receives completed, once final: it failed
    /// or was retired, and every receive posted on it completed (a replacement still
    /// waiting for its peer was never connected: nothing arrives on it).
    fn seen_once_drained(&self, lane: u8) -> Option<u32> {
        let l = self.role(lane)?;
        let drained = l.joining || l.recv_outstanding == 0;
        (l.survived && drained && self.failed.is_none()).then_some(l.seen)
    }

    /// How many notifies the notify QP received (mod 2^32), once that count is final:
    /// the QP failed or was retired, and every receive posted on it completed. The
    /// peer needs it to know which of its notifies to post again.
    pub fn notifies_seen(&self) -> Option<u32> {
        self.seen_once_drained(NOTIFY_LANE)
    }

    /// Data QP `i`'s count of the application's receives completed (mod 2^32), as
    /// the peer's [`Self::resume_seen`] needs it: once final (the QP failed or was
    /// retired and its receives all completed) for a data QP that takes them (data
    /// QP 0 of a one-QP or SPRAY virtual QP); 0 at once for the others. `None` until
    /// then, past the end, or once the virtual QP failed.
    pub fn receives_seen(&self, i: usize) -> Option<u32> {
        if i >= self.lanes.data.len() || self.failed.is_some() {
            return None;
        }
        if !self.counts(i) {
            return Some(0);
        }
        self.seen_once_drained(i as u8)
    }

    /// Fail-back of the notify QP, first step: `qp`, a fresh QP on the notify QP's
    /// device in INIT or later, takes its place, and the notification receives that
    /// did not complete are posted on it again, in order, before any new one; nothing
    /// is sent on it until [`Self::resume_notify`]. Returns the old QP, for the caller
    /// to destroy.
    ///
    /// # Errors
    /// [`RestoreError::NoNotifyQp`]; [`RestoreError::NotDrained`] until
    /// [`Self::notifies_seen`] is final; [`RestoreError::Unavailable`] when the
    /// virtual QP failed. Nothing changed then.
    pub fn rejoin_notify(&mut self, qp: Q) -> Result<Q, RestoreError> {
        let Some(device) = self.notify_qp_device() else {
            return Err(RestoreError::NoNotifyQp);
        };
        self.rejoin_notify_on(qp, device)
    }

    /// [`Self::rejoin_notify`] with the fresh QP on `device` — any device a data QP
    /// uses, so that every request carries keys for it: the notify role may move off a
    /// device whose port is down. The completion queue of `device` must have room for
    /// the notify QP's completions too (vqp-host sizes each device's for it).
    ///
    /// # Errors
    /// As [`Self::rejoin_notify`]; [`RestoreError::NotADataDevice`].
    pub fn rejoin_notify_on(&mut self, qp: Q, device: u8) -> Result<Q, RestoreError> {
        if self.lanes.notify.is_none() {
            return Err(RestoreError::NoNotifyQp);
        }
        if device >= 8 || self.lanes.data_devices & (1 << device) == 0 {
            return Err(RestoreError::NotADataDevice(device));
        }
        if self.failed.is_some() {
            return Err(RestoreError::Unavailable(self.lanes.data.len()));
        }
        if self.notifies_seen().is_none() {
            return Err(RestoreError::NotDrained);
        }
        let lane = self.lanes.notify.as_mut().expect("checked");
        let old = lane.replace(qp);
        lane.device = device;
        self.lanes.notify_device = 1 << device;
        lane.failed = true;
        lane.survived = true;
        lane.joining = true;
        self.repost_recvs(NOTIFY_LANE);
        self.settle_hold();
        Ok(old)
    }

    /// Fail-back of the notify QP, second step: the peer's replacement is ready to
    /// receive, and it received `peer_seen` of this side's notifies on the old QP.
    /// Notifies before that count landed (their requests complete as their data
    /// says), the rest are posted again, in order, on the new QP.
    ///
    /// # Errors
    /// [`RestoreError::NoNotifyQp`]; [`RestoreError::NotJoining`] (with the index
    /// of the notify QP, `data_qps()`) when no replacement waits or the virtual QP
    /// failed.
    pub fn resume_notify(&mut self, peer_seen: u32) -> Result<(), RestoreError> {
        let n = self.lanes.data.len();
        let Some(lane) = self.lanes.notify.as_mut() else {
            return Err(RestoreError::NoNotifyQp);
        };
        if !lane.joining || self.failed.is_some() {
            return Err(RestoreError::NotJoining(n));
        }
        lane.joining = false;
        lane.failed = false;
        lane.survived = false;
        lane.sent = peer_seen;
        let mut first_again = None;
        for id in self.tx.slots.head..self.tx.slots.tail {
            let slot = self.tx.slots.get_mut(id);
            if slot.notify != Notify::Unsure || slot.passthrough {
                continue;
            }
            if landed(slot.order, peer_seen) {
                slot.notify = Notify::Settled;
            } else {
                slot.notify = Notify::Waiting;
                first_again.get_or_insert(id);
            }
        }
        if let Some(id) = first_again {
            self.tx.notify_next = self.tx.notify_next.min(id);
        }
        self.rec.count_restored();
        self.settle_hold();
        self.progress();
        Ok(())
    }

    /// Data QP 0 resumes: of the pass-through requests waiting for it, those whose
    /// WQE landed by the peer's count complete (without a count, the unsure ones are
    /// reported with the error); the others stay, to be posted again in order.
    pub(super) fn settle_again(&mut self, peer_seen: Option<u32>) {
        if let Some(seen) = peer_seen {
            self.lanes.data[0].sent = seen;
        }
        let error = self.rec.error();
        self.rec.settle_again(&mut self.tx.slots, |slot| {
            if slot.notify != Notify::Unsure {
                return None;
            }
            slot.notify = Notify::None;
            match peer_seen {
                Some(seen) if landed(slot.order, seen) => Some(WcStatus::SUCCESS),
                Some(_) => None,
                None => Some(error),
            }
        });
    }

    /// Post the application's receives that did not complete on the old QP of
    /// `lane` (the notify QP or data QP 0), oldest first, on the new one. A refused
    /// post fails the virtual QP.
    pub(super) fn repost_recvs(&mut self, lane: u8) {
        let tag = self.tag;
        let mut refused = false;
        for id in self.rx.posted() {
            let wr = self.rx.slot(id).wr;
            if self.rx.slot(id).done || self.on_notify(&wr) != (lane == NOTIFY_LANE) {
                continue;
            }
            let Some(l) = self.role_mut(lane) else {
                return;
            };
            let wqe = app_recv_wqe(tag, lane, id, &wr);
            // SAFETY: the post contract: the buffer comes with the key the application
            // gave (the device checks it), or the WQE has no scatter/gather element.
            if unsafe { l.qp.post_recv(&[wqe]) }.is_err() {
                refused = true;
                break;
            }
            l.recv_outstanding += 1;
            l.stats.recvs += 1;
        }
        if refused {
            self.fail(WcStatus::POST_ERR);
        }
    }

    /// Post the pass-through requests waiting for data QP 0 again, in order, while it
    /// is healthy and has room (before any new pass-through request).
    pub(super) fn post_again(&mut self) {
        while let Some(id) = self.rec.next_again() {
            let lane = &self.lanes.data[0];
            if !lane.has_room() || self.tx.slots.get(id).notify == Notify::Unsure {
                return;
            }
            self.rec.pop_again();
            self.stage_passthrough(id);
        }
    }

    /// The virtual QP failed: WQEs that may or may not have landed are reported with
    /// `status` (only a count from the peer could say more), so are the pass-through
    /// requests waiting for data QP 0, and so are the application's receives a failed
    /// QP flushed, which will not be posted again (those it still holds flush through
    /// the usual polling).
    pub(super) fn settle_counted(&mut self, status: WcStatus) {
        self.rec.drop_again(&mut self.tx.slots, status);
        for id in self.tx.slots.head..self.tx.slots.tail {
            let slot = self.tx.slots.get_mut(id);
            if slot.notify == Notify::Unsure {
                slot.notify = if slot.passthrough {
                    Notify::None
                } else {
                    Notify::Settled
                };
                slot.fail(status);
            }
        }
        self.settle_flushed(NOTIFY_LANE, status);
        self.settle_flushed(0, status);
    }

    /// The receives of `lane` that its failed QP flushed (while the virtual QP went
    /// on) are reported with `status`.
    fn settle_flushed(&mut self, lane: u8, status: WcStatus) {
        if lane != NOTIFY_LANE && !self.counts(lane as usize) {
            // Its receives are DQPLB's, counted by the reorder window.
            return;
        }
        let Some(l) = self.role(lane).filter(|l| l.survived && !l.joining) else {
            // Every receive not done is outstanding on the QP, which flushes it.
            return;
        };
        let outstanding = l.recv_outstanding as usize;
        let mine = |vqp: &Self, id: u64| {
            let slot = vqp.rx.slot(id);
            !slot.done && vqp.on_notify(&slot.wr) == (lane == NOTIFY_LANE)
        };
        let waiting = self.rx.posted().filter(|&id| mine(self, id)).count();
        // Receives complete in order: the flushed ones are the oldest.
        let mut flushed = waiting.saturating_sub(outstanding);
        for id in self.rx.posted() {
            if flushed == 0 {
                break;
            }
            if mine(self, id) {
                self.rx.end(id, status);
                flushed -= 1;
            }
        }
    }

    /// A completion of a QP that was replaced (the notify QP, or data QP 0's
    /// application receives): its sends and flushed receives are over (the peer's
    /// count settled them).
    pub(super) fn retired_counted_completion(kind: Kind, wc: &PhysWc) -> Result<(), Stray> {
        match kind {
            Kind::Send => Ok(()),
            Kind::Recv if !wc.status.is_ok() => Ok(()),
            _ => Err(Stray),
        }
    }
}

/// Whether the WQE posted `order`-th on its QP landed, by the peer's count `seen`.
/// Modulo 2^24, as the fail-back messages carry counts: those still in question are
/// the last few posted, far fewer than 2^23.
fn landed(order: u32, seen: u32) -> bool {
    ((order.wrapping_sub(seen) << 8) as i32) < 0
}
