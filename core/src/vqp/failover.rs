//! Surviving a data QP's failure (`Config::redispatch`): the failed QP's fragments
//! that did not complete are posted again on the QPs that remain, the virtual QP
//! runs on with fewer paths, holds its requests for `Config::grace_ns` when none is
//! left, and takes a replacement QP back ([`VirtualQp::restore`], fail-back).
//!
//! RDMA WRITE and READ of the same range are idempotent, and a re-posted DQPLB
//! fragment keeps its sequence number, which the receiver's window counts once (an
//! arrival it already counted is a duplicate), so posting a fragment twice is
//! harmless. What is not idempotent (the pass-through opcodes, on data QP 0) waits
//! for data QP 0's replacement: a SEND is posted again unless the peer's count says
//! it landed (see `counted`), an atomic in flight is reported with the error (whether
//! it took effect cannot be known).

use super::choice::{after, pick};
use super::error::RestoreError;
use super::fragment::Spread;
use super::recovery::Failover;
use super::VirtualQp;
use crate::phys::PhysQp;
use crate::wr::{SendFlags, WcStatus};

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// What the virtual QP survived so far.
    pub fn failover(&self) -> Failover {
        Failover {
            healthy: self.lanes.data.iter().filter(|l| !l.failed).count() as u32,
            ..self.rec.counters()
        }
    }

    /// Whether the virtual QP failed because its grace period ended with no data QP
    /// left (rather than for an error it could not survive).
    pub fn grace_expired(&self) -> bool {
        self.rec.expired()
    }

    /// Whether data QP `lane` failing is survived: re-dispatch is on, the virtual
    /// QP has not failed, and another data QP is healthy or a grace period is set.
    pub(super) fn can_survive(&self, lane: usize) -> bool {
        self.cfg.redispatch
            && self.failed.is_none()
            && (self.cfg.grace_ns > 0
                || self
                    .lanes
                    .data
                    .iter()
                    .enumerate()
                    .any(|(i, l)| i != lane && !l.failed))
    }

    /// Fail data QP `lane` alone (the caller checked [`Self::can_survive`]): put it
    /// in error, take the runs it still holds to be posted again, and hold the
    /// requests when it was the last path. False when the runs do not fit the queue
    /// of runs to post again (the virtual QP then fails).
    pub(super) fn survive(&mut self, lane: usize, status: WcStatus) -> bool {
        let l = &mut self.lanes.data[lane];
        if !l.survived {
            l.failed = true;
            l.survived = true;
            l.qp.set_error();
            self.rec.count_failover();
        }
        let (rec, send) = (&mut self.rec, &mut self.tx.slots);
        let wait = self.cfg.grace_ns > 0;
        let mut fits = true;
        l.take_runs(&mut |run| fits &= rec.keep_run(send, run, wait, status));
        rec.expect_rework();
        self.lanes.room &= !(1 << lane);
        self.rec.set_error(status);
        // A request held to the QPs it used (the fan-out limit) may use another.
        for id in self.tx.slots.head..self.tx.slots.tail {
            self.tx.slots.get_mut(id).used &= !(1 << lane);
        }
        self.settle_hold();
        if !fits {
            self.fail(status);
        }
        fits
    }

    /// `survive` where it may be: true when data QP `lane` failing with `status` was
    /// survived, false when the caller must fail the virtual QP as before.
    pub(super) fn try_survive(&mut self, lane: usize, status: WcStatus) -> bool {
        if self.lanes.data[lane].survived {
            return true;
        }
        self.can_survive(lane) && self.survive(lane, status)
    }

    /// Whether requests cannot complete for want of a QP: every data QP failed, the
    /// SPRAY notify QP did, or data QP 0 did with pass-through requests waiting for it.
    fn pathless(&self) -> bool {
        self.lanes.data.iter().all(|l| l.failed)
            || self.lanes.notify.as_ref().is_some_and(|l| l.failed)
            || (self.lanes.data[0].failed && self.rec.waits_for_qp0())
    }

    /// Start the grace period's clock when the last path went, stop it when one is
    /// back.
    pub(super) fn settle_hold(&mut self) {
        let pathless = self.pathless();
        self.rec.settle_hold(pathless);
    }

    /// The grace period: with no path left since `now − grace_ns` or longer, the
    /// virtual QP fails with the last QP's error. Part of [`Self::sample`].
    pub(super) fn check_grace(&mut self, now: u64) {
        if self.rec.grace_over(now, self.cfg.grace_ns) {
            self.fail(self.rec.error());
            self.rec.expire();
        }
    }

    /// Fail-back in one step: data QP `i` is replaced by `qp` — a fresh QP on the
    /// same device, already connected to the peer's replacement, which can receive
    /// (the caller connects them over a channel of its own and replaces the peer's
    /// side too). [`Self::rejoin`] then [`Self::resume`]; returns the old QP, for the
    /// caller to destroy once it wants no more of its completions.
    pub fn restore(&mut self, i: usize, qp: Q) -> Result<Q, RestoreError> {
        let old = self.rejoin(i, qp)?;
        self.resume(i)?;
        Ok(old)
    }

    /// Fail-back, first step: data QP `i` takes `qp`, a fresh QP on the same device
    /// in INIT or later. In DQPLB its receives are posted (before the QP reaches RTR,
    /// so no fragment of the peer can miss one); on a data QP that takes the
    /// application's receives (see [`Self::receives_seen`]) those that did not
    /// complete are posted again first, and it must have drained (else
    /// [`RestoreError::NotDrained`], the old QP taken out and `qp` dropped: keep
    /// polling, and rejoin again). Nothing is sent on it until
    /// [`Self::resume`]: the peer's end may not be ready to receive yet. A QP that
    /// has not failed is taken out first, as if it had (the peer replaces its end):
    /// its fragments that did not complete go again on the others. Rejoining a QP
    /// that is already waiting replaces the waiting one. Returns the old QP, for the
    /// caller to destroy; its completions that come later still count for the
    /// fragments that landed there.
    pub fn rejoin(&mut self, i: usize, qp: Q) -> Result<Q, RestoreError> {
        if i >= self.lanes.data.len() {
            return Err(RestoreError::NoSuchQp(i));
        }
        let lane = &self.lanes.data[i];
        let ok =
            self.cfg.redispatch && self.failed.is_none() && (lane.survived || self.can_survive(i));
        if !ok {
            return Err(RestoreError::Unavailable(i));
        }
        if !lane.survived && !self.survive(i, WcStatus::WR_FLUSH_ERR) {
            return Err(RestoreError::Unavailable(i));
        }
        if self.receives_seen(i).is_none() {
            // The application's receives on it are still flushing.
            return Err(RestoreError::NotDrained);
        }
        let counted = self.counts(i);
        let lane = &mut self.lanes.data[i];
        let old = lane.replace(qp);
        // Failed to every sender until it resumes; only its receives are posted.
        lane.failed = true;
        lane.survived = true;
        lane.joining = true;
        if self.rx.armed() {
            lane.recv_owed = self.cfg.recv_depth;
        }
        if counted {
            // The application's receives that did not complete, first.
            self.repost_recvs(i as u8);
        }
        // Its receives, and the old QP's fragments on the others.
        self.progress();
        Ok(old)
    }

    /// Fail-back, second step: the peer's end of data QP `i`'s replacement is ready
    /// to receive; traffic spreads over it again and the requests held for want of
    /// a path go on. On data QP 0 of a one-QP or SPRAY virtual QP, a pass-through
    /// SEND (or one-QP WRITE_WITH_IMM) that was in flight when it failed is reported
    /// with the error: only the peer's count could say whether it landed
    /// ([`Self::resume_seen`]).
    pub fn resume(&mut self, i: usize) -> Result<(), RestoreError> {
        self.resume_inner(i, None)
    }

    /// [`Self::resume`], told that the peer's end received `peer_seen` of the
    /// receive-consuming WQEs sent on data QP `i` (its [`Self::receives_seen`]):
    /// those of the pass-through requests in flight when the QP failed that landed
    /// complete successfully, the rest are posted again, in order.
    pub fn resume_seen(&mut self, i: usize, peer_seen: u32) -> Result<(), RestoreError> {
        self.resume_inner(i, Some(peer_seen))
    }

    fn resume_inner(&mut self, i: usize, peer_seen: Option<u32>) -> Result<(), RestoreError> {
        let Some(lane) = self.lanes.data.get_mut(i) else {
            return Err(RestoreError::NoSuchQp(i));
        };
        if !lane.joining || self.failed.is_some() {
            return Err(RestoreError::NotJoining(i));
        }
        lane.joining = false;
        lane.failed = false;
        lane.survived = false;
        self.lanes.room |= 1 << i;
        self.rec.count_restored();
        if i == 0 {
            self.settle_again(peer_seen);
        }
        self.settle_hold();
        self.progress();
        Ok(())
    }

    /// Stage again, on healthy data QPs with room, the fragments failed QPs left:
    /// oldest first, round-robin, each WQE signaled and a run of its own.
    /// (Pass-through requests wait for data QP 0 instead: see `park`.)
    pub(super) fn restage(&mut self) {
        while self.lanes.room != 0 {
            let Some(run) = self.rec.next_redo() else {
                return;
            };
            let slot = self.tx.slots.get(run.id);
            let req = Spread::of(&slot.wr, run.id, self.tag, self.cfg.mode);
            let plan = slot.plan;
            let count = plan.count();
            let mut done = 0;
            while done < run.count && self.lanes.room != 0 {
                let f = run.first.wrapping_add(done.wrapping_mul(run.stride));
                let seq = run.seq.add(f.wrapping_sub(run.first));
                let l = pick(self.lanes.room, self.lanes.next);
                self.lanes.next = after(l, self.lanes.data.len());
                let lane = &mut self.lanes.data[l];
                let (off, len) = plan.fragment(u64::from(f));
                let keys = self.tx.slots.get(run.id).wr.keys.pair(lane.device);
                let last = u64::from(f) + 1 == count;
                let mut wqe = req.wqe(l as u64, keys, off, len, seq, last);
                // Signaled, and a run of its own that nothing joins: runs of one
                // request from several failed QPs may interleave with others here,
                // and a completion credits the oldest run of the request it names.
                wqe.flags = wqe.flags.with(SendFlags::SIGNALED);
                *lane.stage(run.id, seq, false, len, f) = wqe;
                lane.close_run();
                self.lanes.staged |= 1 << l;
                if !lane.has_room() {
                    self.lanes.room &= !(1 << l);
                }
                done += 1;
            }
            self.rec.redone(done);
        }
    }

    /// Runs left to post again are reported with `status` (the virtual QP failed).
    pub(super) fn drop_redo(&mut self, status: WcStatus) {
        self.rec.drop_redo(&mut self.tx.slots, status);
    }
}
