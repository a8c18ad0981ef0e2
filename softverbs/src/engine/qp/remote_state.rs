//! A QP's state across processes, kept under its lock: the requests it has in flight
//! to another process and the sequence it runs of another process's requests. The
//! engine's namespace route (`engine::route`) runs it; the QP holds it, as the part of it that only a QP
//! talking to another process fills.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::shared::inbox::{Inbox, PAYLOAD};
use crate::shared::{Owner, Peer};
use crate::wqe::{SendWqe, MAX_RD_ATOMIC};

/// A WQE sent to another process, waiting for its answer.
pub(crate) struct InFlight {
    pub(crate) w: SendWqe,
    pub(crate) psn: u32,
    pub(crate) sent: Instant,
    /// An XRC request the responder forwards to another process's SRQ: nothing is
    /// sent after it until it is answered (`engine::route::namespace::xrc`).
    pub(crate) solo: bool,
}

/// The resolved peer of a requester QP.
pub(crate) struct Link {
    pub(crate) dev: usize,
    pub(crate) qpn: u32,
    /// The owning process: its inbox and exports.
    pub(crate) peer: Arc<Peer>,
    /// Where a request's payload is put together.
    pub(crate) scratch: Box<[u8; PAYLOAD]>,
}

/// A responder QP's view of the requester feeding it: who, and the next sequence
/// number it executes.
pub(crate) struct RespSeq {
    pub(crate) from: Owner,
    pub(crate) qpn: u32,
    pub(crate) conn: u32,
    pub(crate) expect: u32,
    pub(crate) inbox: Option<Arc<Inbox>>,
    /// The request at `expect` went to another process's XRC SRQ (`engine::route::namespace::xrc`): that
    /// process, and when. Nothing else of the connection executes until its outcome
    /// comes back.
    pub(crate) forwarded: Option<(Owner, Instant)>,
}

/// A responder QP's view of the requester on another machine feeding it
/// (`engine::route`'s `ucx`): its GID, QP and connection, and the next sequence number
/// it executes.
pub(crate) struct MachineSeq {
    pub(crate) sgid: [u8; 16],
    pub(crate) qpn: u32,
    pub(crate) conn: u32,
    pub(crate) expect: u32,
    /// The bytes of the WRITE at `expect` run so far, when it comes in pieces
    /// (`ucx::wire::FRAGMENT`): where its next piece begins.
    pub(crate) partial: u64,
    /// The results of the connection's latest atomics.
    pub(crate) atomics: AtomicResults,
}

/// The original values of the last atomics a responder QP ran for its requester on
/// another machine, by PSN, at most `max_dest_rd_atomic` of them: an atomic sent again
/// after its answer was lost is answered from here, not run twice, as a NIC answers
/// one from its responder resources (Linux's soft RoCE likewise, `rxe_resp.c`'s
/// `duplicate_request`); one no longer kept is dropped, and its requester ends in
/// `IBV_WC_RETRY_EXC_ERR`.
#[derive(Default)]
pub(crate) struct AtomicResults {
    kept: [(u32, u64); MAX_RD_ATOMIC as usize],
    len: usize,
    /// Where the next result goes (the oldest once full).
    next: usize,
}

impl AtomicResults {
    /// Keeps `value`, the result of the atomic at `psn`, in place of the oldest once
    /// `capacity` (the QP's `max_dest_rd_atomic`, 1 to [`MAX_RD_ATOMIC`]) are kept.
    pub(crate) fn keep(&mut self, psn: u32, value: u64, capacity: u8) {
        let capacity = usize::from(capacity.clamp(1, MAX_RD_ATOMIC));
        if self.next >= capacity {
            self.next = 0;
        }
        self.kept[self.next] = (psn, value);
        self.next += 1;
        self.len = (self.len + 1).min(capacity);
    }

    /// The result kept for the atomic at `psn`.
    pub(crate) fn find(&self, psn: u32) -> Option<u64> {
        self.kept[..self.len]
            .iter()
            .find(|(p, _)| *p == psn)
            .map(|&(_, v)| v)
    }
}

/// A QP's cross-process state, kept under the QP's lock. Empty (and allocation-free)
/// for a QP that only talks within its process.
#[derive(Default)]
pub(crate) struct RemoteState {
    pub(crate) in_flight: VecDeque<InFlight>,
    pub(crate) conn: u32,
    pub(crate) next_psn: u32,
    pub(crate) link: Option<Link>,
    pub(crate) resp: Option<RespSeq>,
    /// The QP is on the service thread's deadline list.
    pub(crate) watched: bool,
    /// The QP waits for room in its pipeline (an answer makes it runnable again).
    pub(crate) full: bool,
    /// Since when the head WQE waits for the lookup of its responder on another
    /// machine (`engine::route`'s `ucx`).
    pub(crate) machine_wait: Option<Instant>,
    /// The QP is on the UCX route's deadline list (`Engine::machine_watch`).
    pub(crate) machine_watched: bool,
    /// The sequence this QP runs of a requester on another machine.
    pub(crate) machine_resp: Option<MachineSeq>,
    /// An answer came from the responder on another machine since the QP connected:
    /// until then one request at a time is in flight (UCP may reorder the first
    /// messages of a fresh endpoint).
    pub(crate) machine_answered: bool,
    /// How many WQEs at the head of the send queue were in flight to another machine
    /// and were put back to be sent again (from `next_psn` on): an answer to one of
    /// them that comes before its retransmission completes it (`engine::route`'s `ucx`).
    pub(crate) machine_rewound: u32,
    /// The endpoint this QP's requests to another machine last went on, and for each
    /// request in flight (by PSN, in sending order) how many requests of any QP went
    /// on it before: what the UCX route's timer reads to tell a request still queued
    /// behind others from one that left.
    pub(crate) machine_ep: Option<crate::transport::Ep>,
    pub(crate) machine_marks: VecDeque<(u32, u64)>,
    /// The rate at which the responder on another machine acknowledges this QP's
    /// payload, in bytes per second, and the bytes acknowledged since `machine_since`
    /// (measured over a few milliseconds at a time): the UCX route's window follows it.
    pub(crate) machine_rate: u64,
    pub(crate) machine_acked: u64,
    pub(crate) machine_since: Option<Instant>,
    /// The responder's port epoch this QP last heard in an answer, plus one (0: no
    /// answer yet): its requests carry it (`ucx::wire::Request::epoch`).
    pub(crate) machine_epoch: u32,
}

impl RemoteState {
    /// Takes the oldest WQE in flight (to flush it).
    pub(crate) fn take_in_flight(&mut self) -> Option<SendWqe> {
        self.in_flight.pop_front().map(|f| f.w)
    }

    /// How many WQEs in flight are signaled (each owes its CQ a completion).
    pub(crate) fn signaled_in_flight(&self) -> usize {
        self.in_flight.iter().filter(|f| f.w.signaled).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_results_keep_the_latest_up_to_the_qps_resources() {
        let mut r = AtomicResults::default();
        assert_eq!(r.find(0), None);
        for psn in 0..5 {
            r.keep(psn, 100 + u64::from(psn), 3);
        }
        assert_eq!(r.find(4), Some(104));
        assert_eq!(r.find(2), Some(102));
        assert_eq!(r.find(1), None, "past the QP's three resources");
        // No resources is taken as one; more than softverbs has, as its most.
        let mut one = AtomicResults::default();
        one.keep(7, 1, 0);
        one.keep(8, 2, 0);
        assert_eq!((one.find(7), one.find(8)), (None, Some(2)));
        let mut most = AtomicResults::default();
        for psn in 0..40 {
            most.keep(psn, u64::from(psn), 255);
        }
        assert_eq!(most.find(23), None);
        assert_eq!(most.find(24), Some(24));
    }
}
