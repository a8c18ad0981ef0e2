//! Completion queues: fixed capacity, overflow recorded, never a panic.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use vqp_core::{PhysCq, PhysWc, PollFailure};

use super::State;

/// Which queue slot a completion releases when it is polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Send WQE with this index: it and every earlier send WQE of the QP.
    Send(u64),
    /// Receive WQE with this index.
    Recv(u64),
}

/// One completion waiting in a CQ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqEntry {
    pub(crate) wc: PhysWc,
    /// Index of the QP that produced it.
    pub(crate) qp: usize,
    pub(crate) slot: Slot,
}

/// One CQ inside the NIC state.
#[derive(Debug)]
pub(crate) struct Cq {
    pub(crate) device: usize,
    pub(crate) capacity: usize,
    pub(crate) entries: VecDeque<CqEntry>,
    pub(crate) overflows: u64,
}

impl Cq {
    pub(crate) fn new(device: usize, capacity: usize) -> Self {
        Self {
            device,
            capacity,
            entries: VecDeque::with_capacity(capacity),
            overflows: 0,
        }
    }
}

/// A simulated completion queue; implements [`PhysCq`].
///
/// Polling a completion releases the queue slot of its WQE (and, for a send, of every
/// earlier send WQE of that QP), as a real provider advances its queue tails in poll.
#[derive(Debug)]
pub struct SimCq {
    pub(crate) state: Rc<RefCell<State>>,
    pub(crate) idx: usize,
}

impl SimCq {
    pub(crate) fn new(state: Rc<RefCell<State>>, idx: usize) -> Self {
        Self { state, idx }
    }

    /// The device the CQ lives on.
    pub fn device(&self) -> usize {
        self.state.borrow().cqs[self.idx].device
    }

    /// How many completions it holds at most.
    pub fn capacity(&self) -> usize {
        self.state.borrow().cqs[self.idx].capacity
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.state.borrow().cqs[self.idx].entries.len()
    }

    /// True when no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Completions dropped because the CQ was full.
    pub fn overflows(&self) -> u64 {
        self.state.borrow().cqs[self.idx].overflows
    }

    /// True once any completion was dropped.
    pub fn overflowed(&self) -> bool {
        self.overflows() > 0
    }

    /// Polls every waiting completion into a vector (a test convenience).
    pub fn drain(&mut self) -> Vec<PhysWc> {
        let mut out = vec![PhysWc::EMPTY; self.len()];
        let n = self.poll(&mut out).unwrap_or(0);
        out.truncate(n);
        out
    }
}

impl PhysCq for SimCq {
    /// Moves up to `out.len()` completions, oldest first, into `out`. Never fails.
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure> {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let mut n = 0;
        while n < out.len() {
            let Some(e) = st.cqs[self.idx].entries.pop_front() else {
                break;
            };
            out[n] = e.wc;
            n += 1;
            let qp = &mut st.qps[e.qp];
            match e.slot {
                Slot::Send(i) => qp.sq_released = qp.sq_released.max(i + 1),
                Slot::Recv(i) => qp.rq_released = qp.rq_released.max(i + 1),
            }
        }
        Ok(n)
    }
}
