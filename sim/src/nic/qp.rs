//! Queue pairs: their queues, state, counters, and the posting side of [`PhysQp`].

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use vqp_core::{PhysQp, PostFailure, RecvWqe, SendWqe};

use super::State;

/// `ENOMEM`: the queue is full.
pub(crate) const ENOMEM: i32 = 12;
/// `EINVAL`: bad opcode, or a send on a QP that is not connected.
pub(crate) const EINVAL: i32 = 22;

/// Queue depths of a QP, as `ibv_qp_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send WQEs that may hold a slot at once.
    pub max_send_wr: u32,
    /// Receive WQEs that may hold a slot at once.
    pub max_recv_wr: u32,
}

/// The states a simulated RC QP goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Created, not connected: receives may be posted, sends are refused.
    Init,
    /// Connected: sends execute.
    Rts,
    /// Failed: every outstanding and newly posted WQE is flushed.
    Error,
}

/// Counters of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Send WQEs executed, successfully or with an error (flushes excluded).
    pub executed: u64,
    /// Receive WQEs consumed by an incoming SEND or WRITE_WITH_IMM.
    pub recvs_consumed: u64,
    /// Send and receive WQEs flushed.
    pub flushed: u64,
    /// RNR NAKs this QP received as requester.
    pub rnr_naks: u64,
    /// Completions this QP produced (to either CQ).
    pub cqes: u64,
}

/// A queued send WQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendEntry {
    pub(crate) wqe: SendWqe,
    /// NIC-wide posting sequence number (drives the reorder policies).
    pub(crate) seq: u64,
    /// Index in this QP's send queue, counting from 0 (drives slot release).
    pub(crate) idx: u64,
}

/// A queued receive WQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvEntry {
    pub(crate) wqe: RecvWqe,
    pub(crate) seq: u64,
    pub(crate) idx: u64,
}

/// One QP inside the NIC state.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) qp_num: u32,
    pub(crate) device: usize,
    pub(crate) send_cq: usize,
    pub(crate) recv_cq: usize,
    pub(crate) caps: QpCaps,
    pub(crate) state: QpState,
    /// The connected QP's index.
    pub(crate) peer: Option<usize>,
    /// Posted, not yet executed or flushed.
    pub(crate) sq: VecDeque<SendEntry>,
    pub(crate) rq: VecDeque<RecvEntry>,
    /// Send WQEs ever posted / whose slot was released by a polled completion.
    pub(crate) sq_posted: u64,
    pub(crate) sq_released: u64,
    pub(crate) rq_posted: u64,
    pub(crate) rq_released: u64,
    /// Failed RNR attempts of the head send WQE.
    pub(crate) rnr_attempts: u32,
    /// Successful send WQEs left before an injected failure.
    pub(crate) fail_after: Option<u64>,
    /// Successful send WQEs left before one whose acknowledgement is lost.
    pub(crate) lose_ack_after: Option<u64>,
    /// A send rate limit: steps of the send queue per tick, and those left in this
    /// tick (see [`Nic::tick`](super::Nic::tick)).
    pub(crate) pace: Option<Pace>,
    pub(crate) stats: QpStats,
}

/// A QP's send rate limit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    pub(crate) per_tick: u32,
    pub(crate) left: u32,
}

impl Qp {
    pub(crate) fn new(
        qp_num: u32,
        device: usize,
        send_cq: usize,
        recv_cq: usize,
        caps: QpCaps,
    ) -> Self {
        Self {
            qp_num,
            device,
            send_cq,
            recv_cq,
            caps,
            state: QpState::Init,
            peer: None,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            sq_posted: 0,
            sq_released: 0,
            rq_posted: 0,
            rq_released: 0,
            rnr_attempts: 0,
            fail_after: None,
            lose_ack_after: None,
            pace: None,
            stats: QpStats::default(),
        }
    }

    /// Send slots held (posted, completion not yet polled).
    pub(crate) fn sq_held(&self) -> u64 {
        self.sq_posted - self.sq_released
    }

    /// Receive slots held.
    pub(crate) fn rq_held(&self) -> u64 {
        self.rq_posted - self.rq_released
    }
}

/// A simulated RC queue pair; implements [`PhysQp`].
///
/// Posting checks the opcode, the state and the queue's free slots, then queues the
/// WQEs; [`Nic::step`](super::Nic::step) executes them.
#[derive(Debug)]
pub struct SimQp {
    pub(crate) state: Rc<RefCell<State>>,
    idx: usize,
    pub(crate) qp_num: u32,
}

impl SimQp {
    pub(crate) fn new(state: Rc<RefCell<State>>, idx: usize, qp_num: u32) -> Self {
        Self { state, idx, qp_num }
    }

    /// The device the QP lives on.
    pub fn device(&self) -> usize {
        self.state.borrow().qps[self.idx].device
    }

    /// The QP's state.
    pub fn state(&self) -> QpState {
        self.state.borrow().qps[self.idx].state
    }

    /// The QP's counters.
    pub fn stats(&self) -> QpStats {
        self.state.borrow().qps[self.idx].stats
    }

    /// Send slots held: posted WQEs whose completion (or a later one) was not polled.
    pub fn send_slots_held(&self) -> u64 {
        self.state.borrow().qps[self.idx].sq_held()
    }

    /// Receive slots held.
    pub fn recv_slots_held(&self) -> u64 {
        self.state.borrow().qps[self.idx].rq_held()
    }

    /// Send WQEs posted and not yet executed or flushed.
    pub fn send_queued(&self) -> usize {
        self.state.borrow().qps[self.idx].sq.len()
    }

    /// Receive WQEs posted and not yet consumed or flushed.
    pub fn recv_queued(&self) -> usize {
        self.state.borrow().qps[self.idx].rq.len()
    }
}

/// Safe posts: the simulated NIC resolves every address in its own
/// simulated memory, checked against the keys, never in the process's.
impl SimQp {
    /// Queues `wqes` in order. Refuses (with the accepted prefix in `posted`) a QP in
    /// `Init` or an opcode outside libibverbs' RC set with `EINVAL`, and a full send
    /// queue with `ENOMEM`. A QP in `Error` accepts the WQEs and flushes them.
    pub fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        for (posted, wqe) in wqes.iter().enumerate() {
            let qp = &st.qps[self.idx];
            let errno = if qp.state == QpState::Init || wqe.opcode.name().is_none() {
                Some(EINVAL)
            } else if qp.sq_held() >= u64::from(qp.caps.max_send_wr) {
                Some(ENOMEM)
            } else {
                None
            };
            if let Some(errno) = errno {
                return Err(PostFailure { posted, errno });
            }
            let seq = st.next_seq();
            let qp = &mut st.qps[self.idx];
            let idx = qp.sq_posted;
            qp.sq_posted += 1;
            qp.sq.push_back(SendEntry {
                wqe: *wqe,
                seq,
                idx,
            });
        }
        Ok(())
    }

    /// Queues receives in order; a full receive queue fails with `ENOMEM` and the
    /// accepted prefix. Allowed in every state (flushed in `Error`).
    pub fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        for (posted, wqe) in wqes.iter().enumerate() {
            let qp = &st.qps[self.idx];
            if qp.rq_held() >= u64::from(qp.caps.max_recv_wr) {
                return Err(PostFailure {
                    posted,
                    errno: ENOMEM,
                });
            }
            let seq = st.next_seq();
            let qp = &mut st.qps[self.idx];
            let idx = qp.rq_posted;
            qp.rq_posted += 1;
            qp.rq.push_back(RecvEntry {
                wqe: *wqe,
                seq,
                idx,
            });
        }
        Ok(())
    }
}

// The trait's posts are `unsafe fn`s (vqp-core's post contract); these bodies do no
// unsafe operation.
#[allow(unsafe_code)]
impl PhysQp for SimQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// [`SimQp::post_send`], which is safe on this provider.
    ///
    /// # Safety
    /// The trait's; this provider needs none of it (any WQE is sound here).
    unsafe fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        SimQp::post_send(self, wqes)
    }

    /// [`SimQp::post_recv`], which is safe on this provider.
    ///
    /// # Safety
    /// The trait's; this provider needs none of it (any WQE is sound here).
    unsafe fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        SimQp::post_recv(self, wqes)
    }

    /// Moves the QP to `Error`: everything outstanding is flushed, one WQE per step.
    fn set_error(&mut self) {
        self.state.borrow_mut().enter_error(self.idx);
    }
}
