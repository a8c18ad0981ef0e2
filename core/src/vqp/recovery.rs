//! What a virtual QP keeps to survive failed QPs (`Config::redispatch`): the runs a
//! failed data QP left, to post again on the others; the pass-through requests that
//! wait for data QP 0's replacement; whether no path is left and since when; what
//! it survived so far; and the error of the last QP that failed alone.
//!
//! [`Recovery`] knows no QP: deciding what fails and re-posting runs, which needs
//! the lanes, is the virtual QP's work (`failover`, `counted`); the send slot ring
//! is passed down where a request is credited.

use heapless::Deque;

use super::run::Taken;
use super::slots::{credit_data, park, Ring, SendSlot};
use crate::wr::WcStatus;

/// What a virtual QP survived (with [`Config::redispatch`](super::Config::redispatch)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Failover {
    /// QPs that failed while the virtual QP went on: data QPs, and SPRAY's notify QP.
    pub failovers: u32,
    /// Fragments posted again on another data QP.
    pub redispatched: u64,
    /// Failed QPs replaced ([`VirtualQp::restore`](crate::VirtualQp::restore), [`VirtualQp::resume_notify`](crate::VirtualQp::resume_notify)).
    pub restored: u32,
    /// Data QPs healthy now.
    pub healthy: u32,
}

/// When every data QP has failed: since when (the caller's clock, once it told).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// A path is left.
    No,
    /// No path is left; the grace period runs from the first sample after.
    Since(Option<u64>),
    /// The grace period ended with no path: the virtual QP failed for it.
    Expired,
}

/// The failover state of a virtual QP: `S` requests in flight, `W` runs to post again.
pub(super) struct Recovery<const S: usize, const W: usize> {
    /// Runs failed data QPs left, to post again on the others.
    redo: Deque<Taken, W>,
    /// Pass-through requests that were in flight on data QP 0 when it failed, to be
    /// posted again on its replacement (unless the peer's count says they landed).
    again: Deque<u64, S>,
    /// `redo` or `again` may hold something: one flag for `progress` to test.
    rework: bool,
    /// Whether every data QP has failed, and since when.
    hold: Hold,
    /// What re-dispatch survived.
    survived: Failover,
    /// The error of the last data QP that failed alone.
    error: WcStatus,
}

impl<const S: usize, const W: usize> Recovery<S, W> {
    /// Nothing survived yet.
    pub(super) fn new() -> Self {
        Self {
            redo: Deque::new(),
            again: Deque::new(),
            rework: false,
            hold: Hold::No,
            survived: Failover::default(),
            error: WcStatus::SUCCESS,
        }
    }

    /// Whether runs or pass-through requests may wait to be posted again.
    #[inline]
    pub(super) fn pending(&self) -> bool {
        self.rework
    }

    /// A data QP failed: its runs, if any, wait to be posted again.
    pub(super) fn expect_rework(&mut self) {
        self.rework = true;
    }

    /// After posting again: whether anything still waits.
    pub(super) fn resettle(&mut self) {
        self.rework = !self.redo.is_empty() || !self.again.is_empty();
    }

    /// What was survived so far (`healthy` left for the caller).
    pub(super) fn counters(&self) -> Failover {
        self.survived
    }

    /// A QP failed and the virtual QP went on without it.
    pub(super) fn count_failover(&mut self) {
        self.survived.failovers += 1;
    }

    /// A failed QP was replaced.
    pub(super) fn count_restored(&mut self) {
        self.survived.restored += 1;
    }

    /// The error of the last QP that failed alone.
    #[inline]
    pub(super) fn error(&self) -> WcStatus {
        self.error
    }

    /// A QP failed alone with `status`.
    pub(super) fn set_error(&mut self, status: WcStatus) {
        self.error = status;
    }

    /// Keep `run` of a failed data QP: a pass-through request's waits for data QP 0
    /// (or is credited: see [`park`]), a fragmented one's is posted again on the
    /// others. False when it does not fit.
    pub(super) fn keep_run(
        &mut self,
        send: &mut Ring<SendSlot, S>,
        run: Taken,
        wait: bool,
        status: WcStatus,
    ) -> bool {
        if send.get(run.id).passthrough {
            park(send, &mut self.again, (run.id, run.count), wait, status)
        } else {
            self.redo.push_back(run).is_ok()
        }
    }

    /// Pass-through request `id` meets a failed data QP 0: it waits for the
    /// replacement when `wait` (a grace period) and there is room, and is credited
    /// with the QP's error otherwise. Whether it waits.
    pub(super) fn wait_for_qp0(
        &mut self,
        send: &mut Ring<SendSlot, S>,
        id: u64,
        wait: bool,
    ) -> bool {
        if !wait || self.again.push_back(id).is_err() {
            credit_data(send, id, 1, self.error);
            false
        } else {
            self.rework = true;
            true
        }
    }

    /// Whether pass-through requests wait for data QP 0.
    pub(super) fn waits_for_qp0(&self) -> bool {
        !self.again.is_empty()
    }

    /// The oldest pass-through request waiting for data QP 0.
    #[inline]
    pub(super) fn next_again(&self) -> Option<u64> {
        self.again.front().copied()
    }

    /// Take the oldest pass-through request waiting for data QP 0.
    pub(super) fn pop_again(&mut self) -> Option<u64> {
        self.again.pop_front()
    }

    /// Data QP 0 resumes: each waiting pass-through request is settled by `landed`
    /// (`Some(status)`: credit it with that; `None`: it waits on, in order).
    pub(super) fn settle_again(
        &mut self,
        send: &mut Ring<SendSlot, S>,
        mut landed: impl FnMut(&mut SendSlot) -> Option<WcStatus>,
    ) {
        for _ in 0..self.again.len() {
            let Some(id) = self.again.pop_front() else {
                break;
            };
            if let Some(status) = landed(send.get_mut(id)) {
                credit_data(send, id, 1, status);
                continue;
            }
            // Room: it came out of the queue just now.
            let _ = self.again.push_back(id);
        }
    }

    /// The pass-through requests waiting for data QP 0 are credited with `status`.
    pub(super) fn drop_again(&mut self, send: &mut Ring<SendSlot, S>, status: WcStatus) {
        while let Some(id) = self.again.pop_front() {
            credit_data(send, id, 1, status);
        }
    }

    /// The oldest run to post again.
    #[inline]
    pub(super) fn next_redo(&self) -> Option<Taken> {
        self.redo.front().copied()
    }

    /// `done` fragments of the oldest run were posted again.
    pub(super) fn redone(&mut self, done: u32) {
        self.survived.redispatched += u64::from(done);
        if let Some(front) = self.redo.front_mut() {
            *front = front.after(done);
            if front.count == 0 {
                self.redo.pop_front();
            }
        }
    }

    /// Runs left to post again are credited with `status` (the virtual QP failed).
    pub(super) fn drop_redo(&mut self, send: &mut Ring<SendSlot, S>, status: WcStatus) {
        while let Some(run) = self.redo.pop_front() {
            credit_data(send, run.id, run.count, status);
        }
    }

    /// Whether requests are held for want of a path.
    #[inline]
    pub(super) fn held(&self) -> bool {
        self.hold != Hold::No
    }

    /// Whether the grace period ended with no path.
    pub(super) fn expired(&self) -> bool {
        self.hold == Hold::Expired
    }

    /// Start the grace period's clock when the last path went (`pathless`), stop it
    /// when one is back.
    pub(super) fn settle_hold(&mut self, pathless: bool) {
        match (pathless, self.hold) {
            (true, Hold::No) => self.hold = Hold::Since(None),
            (false, Hold::Since(_)) => self.hold = Hold::No,
            _ => {}
        }
    }

    /// The grace period at `now`: true when it ended (the caller fails the virtual
    /// QP, then calls [`Self::expire`]).
    pub(super) fn grace_over(&mut self, now: u64, grace_ns: u64) -> bool {
        match self.hold {
            Hold::No | Hold::Expired => false,
            Hold::Since(None) => {
                self.hold = Hold::Since(Some(now));
                false
            }
            Hold::Since(Some(at)) => now.saturating_sub(at) >= grace_ns,
        }
    }

    /// The grace period ended: the virtual QP failed for it.
    pub(super) fn expire(&mut self) {
        self.hold = Hold::Expired;
    }

    /// The virtual QP failed: nothing is held any more.
    pub(super) fn release(&mut self) {
        self.hold = Hold::No;
    }
}
