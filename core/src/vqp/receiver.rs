//! The receive side's own state: the ring of the application's receives in posting
//! order, how far they were posted (or matched), and DQPLB's reorder window with the
//! messages that arrived before a receive waited for them.
//!
//! [`Receiver`] knows no QP: posting receives on the QPs, which needs the lanes, is
//! the virtual QP's work (`recv`), which hands the receiver what it learnt.

use core::ops::Range;

use heapless::Deque;

use super::slots::{RecvSlot, Ring};
use crate::imm::Imm;
use crate::reorder::ReorderWindow;
use crate::seq::Seq;
use crate::wr::{RecvWr, Wc, WcOpcode, WcOut, WcStatus};

/// The receive side of a virtual QP: `S` receives in flight, a DQPLB window of `W`.
pub(super) struct Receiver<const S: usize, const W: usize> {
    /// The application's receives, oldest first: `head` is the oldest not yet
    /// reported, `tail` the next id.
    ring: Ring<RecvSlot, S>,
    /// Oldest receive not yet posted (or, in DQPLB, not yet matched to a message):
    /// `ring.head ≤ next ≤ ring.tail`.
    next: u64,
    window: ReorderWindow<W>,
    /// DQPLB messages delivered before any receive waited for them (their lengths).
    backlog: Deque<u64, S>,
    /// DQPLB's kept-posted receives are on (see `VirtualQp::arm_receiver`).
    armed: bool,
    /// The data QP DQPLB replenishment starts with.
    replenish_next: u32,
}

/// The opcode a receive `wr` completes with when it ends without a message.
#[inline]
fn empty_opcode(wr: &RecvWr) -> WcOpcode {
    if wr.len == 0 {
        WcOpcode::RECV_RDMA_WITH_IMM
    } else {
        WcOpcode::RECV
    }
}

impl<const S: usize, const W: usize> Receiver<S, W> {
    /// An empty receive side whose DQPLB window expects `first` next.
    pub(super) fn new(first: Seq) -> Self {
        Self {
            ring: Ring::new(RecvSlot::EMPTY),
            next: 0,
            window: ReorderWindow::new(first),
            backlog: Deque::new(),
            armed: false,
            replenish_next: 0,
        }
    }

    /// Receives taken and not yet reported.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether `progress` has receive work: receives not yet posted, or DQPLB's.
    #[inline]
    pub(super) fn has_work(&self) -> bool {
        self.next != self.ring.tail || self.armed
    }

    /// The DQPLB window's next expected sequence number.
    pub(super) fn recv_seq(&self) -> Seq {
        self.window.next()
    }

    /// DQPLB fragments that arrived ahead of an earlier one, in total.
    pub(super) fn reordered(&self) -> u64 {
        self.window.reordered()
    }

    /// Whether DQPLB's kept-posted receives are on.
    #[inline]
    pub(super) fn armed(&self) -> bool {
        self.armed
    }

    /// Turn DQPLB's kept-posted receives on.
    pub(super) fn arm(&mut self) {
        self.armed = true;
    }

    /// Messages held for receives not yet taken.
    pub(super) fn held(&self) -> usize {
        self.backlog.len()
    }

    /// Take receive `wr`, returning its id; `None` when the ring is full.
    pub(super) fn take(&mut self, wr: &RecvWr) -> Option<u64> {
        if self.ring.is_full() {
            return None;
        }
        let id = self.ring.tail;
        let slot = self.ring.get_mut(id);
        *slot = RecvSlot::EMPTY;
        slot.wr = *wr;
        self.ring.tail += 1;
        Some(id)
    }

    /// DQPLB: complete the receive just taken with a message held for it, if any.
    pub(super) fn match_held(&mut self) -> bool {
        let Some(bytes) = self.backlog.pop_front() else {
            return false;
        };
        let id = self.next;
        debug_assert_eq!(id + 1, self.ring.tail);
        self.ring
            .get_mut(id)
            .finish(WcStatus::SUCCESS, WcOpcode::RECV_RDMA_WITH_IMM, bytes, None);
        self.next += 1;
        true
    }

    /// The oldest receive not yet posted, with its id.
    #[inline]
    pub(super) fn unposted(&self) -> Option<(u64, RecvWr)> {
        (self.next != self.ring.tail).then(|| (self.next, self.ring.get(self.next).wr))
    }

    /// The receive [`Self::unposted`] named was posted.
    #[inline]
    pub(super) fn posted_one(&mut self) {
        self.next += 1;
    }

    /// The receives posted (or matched) and not yet reported, oldest first.
    pub(super) fn posted(&self) -> Range<u64> {
        self.ring.head..self.next
    }

    /// Receive `id`'s slot.
    pub(super) fn slot(&self, id: u64) -> &RecvSlot {
        self.ring.get(id)
    }

    /// The data QP DQPLB replenishment starts with among `n`, moving the start on
    /// for next time so that withheld receives are shared.
    pub(super) fn replenish_from(&mut self, n: usize) -> usize {
        let first = self.replenish_next as usize % n;
        self.replenish_next = ((first + 1) % n) as u32;
        first
    }

    /// The posted receive whose id modulo 2^45 is `short` and that has not
    /// completed.
    pub(super) fn find_posted(&self, short: u64) -> Option<u64> {
        let id = self.ring.widen(short)?;
        (id < self.next && !self.ring.get(id).done).then_some(id)
    }

    /// Receive `id` completed with a message.
    pub(super) fn complete(
        &mut self,
        id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        len: u64,
        imm: Option<u32>,
    ) {
        self.ring.get_mut(id).finish(status, opcode, len, imm);
    }

    /// Receive `id` ended with `status` and no message.
    pub(super) fn end(&mut self, id: u64, status: WcStatus) {
        let slot = self.ring.get_mut(id);
        let opcode = empty_opcode(&slot.wr);
        slot.finish(status, opcode, 0, None);
    }

    /// A DQPLB fragment with immediate `imm` and length `byte_len` arrived: count it
    /// in the window, completing the receives of the messages it ends (or holding
    /// them). False for a protocol error: outside the window, or more messages than
    /// the store holds.
    pub(super) fn arrive(&mut self, imm: Imm, byte_len: u32) -> bool {
        let recv = &mut self.ring;
        let next = &mut self.next;
        let backlog = &mut self.backlog;
        let mut overflow = false;
        let arrival = self.window.arrive(imm, byte_len, |bytes| {
            if *next != recv.tail {
                recv.get_mut(*next).finish(
                    WcStatus::SUCCESS,
                    WcOpcode::RECV_RDMA_WITH_IMM,
                    bytes,
                    None,
                );
                *next += 1;
            } else if backlog.push_back(bytes).is_err() {
                overflow = true;
            }
        });
        arrival.is_ok() && !overflow
    }

    /// Every receive not yet posted (or matched) ends with `status`.
    pub(super) fn end_unposted(&mut self, status: WcStatus) {
        for id in self.next..self.ring.tail {
            self.end(id, status);
        }
        self.next = self.ring.tail;
    }

    /// Report completed receives in posting order into `out` from index `at`, as
    /// completions of virtual QP `qp_num`; returns how many.
    #[inline]
    pub(super) fn drain<O: WcOut + ?Sized>(
        &mut self,
        out: &mut O,
        at: usize,
        qp_num: u32,
    ) -> usize {
        let mut n = at;
        while self.ring.head != self.ring.tail && n < out.capacity() {
            let slot = self.ring.get(self.ring.head);
            if !slot.done {
                break;
            }
            out.put(
                n,
                Wc {
                    wr_id: slot.wr.wr_id,
                    status: slot.status,
                    opcode: slot.opcode,
                    qp_num,
                    imm_data: slot.imm_data,
                    byte_len: slot.byte_len,
                },
            );
            n += 1;
            self.ring.head += 1;
        }
        n - at
    }
}
