//! The send side's requests: the slot ring in posting order, where the next dispatch
//! round resumes, the SPRAY notify cursor, and DQPLB's send numbering.
//!
//! Its fields are read and written by the virtual QP's dispatch, completion and
//! failover work, which hold a slot and a lane at once; [`Sender`] itself knows no QP.

use super::numbering::Numbering;
use super::slots::{Ring, SendSlot};
use crate::seq::Seq;

/// The send side of a virtual QP: `S` requests in flight.
pub(super) struct Sender<const S: usize> {
    /// The application's send requests, oldest first: `head` is the oldest not yet
    /// reported, `tail` the next id.
    pub(super) slots: Ring<SendSlot, S>,
    /// Oldest request with fragments not yet staged.
    pub(super) dispatch: u64,
    /// Oldest request whose SPRAY notify may still need posting.
    pub(super) notify_next: u64,
    /// DQPLB's next sequence number to send and its window credit.
    pub(super) num: Numbering,
}

impl<const S: usize> Sender<S> {
    /// No request yet; DQPLB numbering starts at `first` with `credit` numbers ahead.
    pub(super) fn new(first: Seq, credit: u32) -> Self {
        Sender {
            slots: Ring::new(SendSlot::EMPTY),
            dispatch: 0,
            notify_next: 0,
            num: Numbering::new(first, credit),
        }
    }

    /// Requests taken and not yet reported.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether a request waits for dispatch, or (`notifies`: there is a notify QP) for
    /// its SPRAY notify.
    #[inline]
    pub(super) fn has_work(&self, notifies: bool) -> bool {
        self.dispatch != self.slots.tail || (notifies && self.notify_next != self.slots.tail)
    }
}
