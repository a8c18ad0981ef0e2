//! SPRAY's notify QP failing and coming back (`Config::redispatch` with a grace
//! period): the notifies wait, in order, until a fresh notify QP pair replaces it.
//!
//! A notify cannot simply be posted again: it carries the application's immediate,
//! so the receiver could not tell a second copy from the next message, and a notify
//! that completed in error at the sender may still have landed (its acknowledgement
//! lost). What settles it is the receiver's count: both sides count the notifies
//! they posted and received on the notify QP, in order (one RC QP delivers them in
//! order, so the notifies that landed are the first `seen` of those posted). Once
//! the failed QP's receives have all completed (flushed), a side's count is final;
//! the two sides exchange their counts while they connect the replacement (over a
//! channel of their own, as for a data QP's fail-back), and each sender then knows
//! which notifies landed (those before the peer's count: their requests complete)
//! and which to post again (the rest, in order, on the new QP).
//!
//! The steps: the notify QP fails (an error completion, an asynchronous event) or
//! the peer asks to replace it ([`VirtualQp::retire_notify`]); its receives flush;
//! [`VirtualQp::notifies_seen`] gives the final count; [`VirtualQp::rejoin_notify`]
//! puts the fresh QP in its place, its receives posted (the notification receives
//! that did not complete first); [`VirtualQp::resume_notify`] with the peer's count
//! sends again. Requests whose notify waits are held meanwhile; data keeps moving
//! on the data QPs. If the grace period ends first, the virtual QP fails.

use super::failover::RestoreError;
use super::slots::Notify;
use super::{Stray, VirtualQp};
use crate::phys::{PhysQp, PhysWc, RecvWqe};
use crate::wr::{WcOpcode, WcStatus};
use crate::wrid::{Kind, WrId, NOTIFY_LANE};

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Whether the notify QP failing is survived: re-dispatch is on with a grace
    /// period (the requests wait for its replacement), and the virtual QP has not
    /// failed.
    fn can_survive_notify(&self) -> bool {
        self.cfg.redispatch
            && self.cfg.grace_ns > 0
            && self.failed.is_none()
            && self.notify.is_some()
    }

    /// The notify QP fails alone: put it in error (its receives flush), and make every
    /// notify it had in flight unsure until the peer's count settles it.
    fn survive_notify(&mut self, status: WcStatus) {
        let Some(lane) = self.notify.as_mut() else {
            return;
        };
        if !lane.survived {
            lane.failed = true;
            lane.survived = true;
            lane.joining = false;
            lane.qp.set_error();
            self.survived.failovers += 1;
        }
        let send = &mut self.send;
        lane.take_runs(&mut |run| {
            let slot = send.get_mut(run.id);
            if slot.notify == Notify::InFlight {
                slot.notify = Notify::Unsure;
            }
        });
        self.lane_error = status;
        self.settle_hold();
    }

    /// `survive_notify` where it may be: true when the notify QP failing with
    /// `status` was survived, false when the caller must fail the virtual QP.
    pub(super) fn try_survive_notify(&mut self, status: WcStatus) -> bool {
        if self.failed.is_some() {
            return false;
        }
        if self.notify.as_ref().is_some_and(|l| l.survived) {
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
        self.notify.as_ref().is_some_and(|l| l.survived)
    }

    /// Take the notify QP out, as if it had failed, so that the peer can replace the
    /// pair (it asked to): its receives flush, and [`Self::notifies_seen`] says when
    /// they have. False, and nothing changes, when that cannot be survived (no
    /// re-dispatch or grace period, no notify QP, the virtual QP failed).
    pub fn retire_notify(&mut self) -> bool {
        self.try_survive_notify(WcStatus::WR_FLUSH_ERR)
    }

    /// How many notifies the notify QP received (mod 2^32), once that count is final:
    /// the QP failed or was retired, and every receive posted on it completed. The
    /// peer needs it to know which of its notifies to post again.
    pub fn notifies_seen(&self) -> Option<u32> {
        let lane = self.notify.as_ref()?;
        // A replacement still waiting for its peer was never connected: nothing
        // arrives on it.
        let drained = lane.joining || lane.recv_outstanding == 0;
        (lane.survived && drained && self.failed.is_none()).then_some(self.notifies_seen)
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
        if self.notify.is_none() {
            return Err(RestoreError::NoNotifyQp);
        }
        if self.failed.is_some() {
            return Err(RestoreError::Unavailable(self.lanes.len()));
        }
        if self.notifies_seen().is_none() {
            return Err(RestoreError::NotDrained);
        }
        let lane = self.notify.as_mut().expect("checked");
        let old = lane.replace(qp);
        lane.failed = true;
        lane.survived = true;
        lane.joining = true;
        self.repost_notify_recvs();
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
        let n = self.lanes.len();
        let Some(lane) = self.notify.as_mut() else {
            return Err(RestoreError::NoNotifyQp);
        };
        if !lane.joining || self.failed.is_some() {
            return Err(RestoreError::NotJoining(n));
        }
        lane.joining = false;
        lane.failed = false;
        lane.survived = false;
        let mut first_again = None;
        for id in self.send.head..self.send.tail {
            let slot = self.send.get_mut(id);
            if slot.notify != Notify::Unsure {
                continue;
            }
            // Wrapping: the unsure notifies are the last few posted, far fewer than
            // 2^31.
            if (slot.notify_at.wrapping_sub(peer_seen) as i32) < 0 {
                slot.notify = Notify::Settled;
            } else {
                slot.notify = Notify::Waiting;
                first_again.get_or_insert(id);
            }
        }
        if let Some(id) = first_again {
            self.notify_next = self.notify_next.min(id);
        }
        self.notifies_sent = peer_seen;
        self.survived.restored += 1;
        self.settle_hold();
        self.progress();
        Ok(())
    }

    /// Post the notification receives that did not complete on the old notify QP,
    /// oldest first, on the new one. A refused post fails the virtual QP.
    fn repost_notify_recvs(&mut self) {
        let tag = self.tag;
        let Some(lane) = self.notify.as_mut() else {
            return;
        };
        let mut refused = false;
        for id in self.recv.head..self.recv_next {
            let slot = self.recv.get(id);
            if slot.done || slot.wr.len != 0 {
                continue;
            }
            let wqe = RecvWqe {
                wr_id: WrId {
                    tag,
                    lane: NOTIFY_LANE,
                    kind: Kind::Recv,
                    id,
                }
                .encode(),
                addr: 0,
                len: 0,
                lkey: 0,
            };
            if lane.qp.post_recv(&[wqe]).is_err() {
                refused = true;
                break;
            }
            lane.recv_outstanding += 1;
            lane.stats.recvs += 1;
        }
        if refused {
            self.fail(WcStatus::POST_ERR);
        }
    }

    /// The virtual QP failed: notifies that may or may not have landed are reported
    /// with `status` (only a count from the peer could say more), and so are the
    /// notification receives the failed notify QP flushed, which will not be posted
    /// again (those it still holds flush through the usual polling).
    pub(super) fn settle_notify(&mut self, status: WcStatus) {
        let Some(lane) = self.notify.as_ref() else {
            return;
        };
        for id in self.send.head..self.send.tail {
            let slot = self.send.get_mut(id);
            if slot.notify == Notify::Unsure {
                slot.notify = Notify::Settled;
                slot.fail(status);
            }
        }
        if !lane.survived || lane.joining {
            // Every receive not done is outstanding on the QP, which flushes it.
            return;
        }
        let waiting = (self.recv.head..self.recv_next)
            .filter(|&id| {
                let slot = self.recv.get(id);
                !slot.done && slot.wr.len == 0
            })
            .count();
        // Receives complete in order: the flushed ones are the oldest.
        let mut flushed = waiting.saturating_sub(lane.recv_outstanding as usize);
        for id in self.recv.head..self.recv_next {
            let slot = self.recv.get_mut(id);
            if flushed == 0 {
                break;
            }
            if !slot.done && slot.wr.len == 0 {
                slot.finish(status, WcOpcode::RECV_RDMA_WITH_IMM, 0, None);
                flushed -= 1;
            }
        }
    }

    /// A completion of a notify QP that was replaced: its sends and flushed receives
    /// are over (the peer's count settled them).
    pub(super) fn retired_notify_completion(kind: Kind, wc: &PhysWc) -> Result<(), Stray> {
        match kind {
            Kind::Send => Ok(()),
            Kind::Recv if !wc.status.is_ok() => Ok(()),
            _ => Err(Stray),
        }
    }
}
