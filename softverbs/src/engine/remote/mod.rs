//! The data path between processes, the engine's side of it over the shared namespace
//! (`crate::shared`: inbox, exports, process-to-process copies). The requester's side
//! ([`requester`]) sends a request, keeps the WQE in flight, completes it when the
//! answer comes and gives up when the owner died; the responder's ([`responder`]) runs
//! a request through the engine's `respond` with a process-to-process data mover and
//! answers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Tables;
use crate::shared::inbox::{Inbox, Kind, Record, PAYLOAD};
use crate::shared::{Ack, Owner, Peer, Shared};
use crate::wqe::SendWqe;

mod direct;
mod requester;
mod responder;
mod xrc;

use requester::on_response;
pub(crate) use requester::{check_deadlines, send};
use responder::on_request;

/// Requests one QP keeps in flight at most; more wait in its send queue.
pub(crate) const MAX_IN_FLIGHT: usize = 64;
/// Response codes.
const RESP_OK: u32 = 0;
const RESP_RNR: u32 = 1;
const RESP_ERR: u32 = 2;
/// Nobody took the request (no such QP, or not connected): the requester retransmits.
const RESP_DROP: u32 = 3;

/// A WQE sent to another process, waiting for its answer.
struct InFlight {
    w: SendWqe,
    psn: u32,
    sent: Instant,
    /// An XRC request the responder forwards to another process's SRQ: nothing is
    /// sent after it until it is answered ([`xrc`]).
    solo: bool,
}

/// The resolved peer of a requester QP.
struct Link {
    dev: usize,
    qpn: u32,
    /// The owning process: its inbox and exports.
    peer: Arc<Peer>,
    /// Where a request's payload is put together.
    scratch: Box<[u8; PAYLOAD]>,
}

/// A responder QP's view of the requester feeding it: who, and the next sequence
/// number it executes.
struct RespSeq {
    from: Owner,
    qpn: u32,
    conn: u32,
    expect: u32,
    inbox: Option<Arc<Inbox>>,
    /// The request at `expect` went to another process's XRC SRQ ([`xrc`]): that
    /// process, and when. Nothing else of the connection executes until its outcome
    /// comes back.
    forwarded: Option<(Owner, Instant)>,
}

/// A QP's cross-process state, kept under the QP's lock. Empty (and allocation-free)
/// for a QP that only talks within its process.
#[derive(Default)]
pub(crate) struct RemoteState {
    in_flight: VecDeque<InFlight>,
    conn: u32,
    next_psn: u32,
    link: Option<Link>,
    resp: Option<RespSeq>,
    /// The QP is on the service thread's deadline list.
    watched: bool,
    /// The QP waits for room in its pipeline (an answer makes it runnable again).
    full: bool,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Handles one record of our inbox (`payload`: its payload bytes); an answer may be
/// left in `ack` (see [`Ack`]; `Shared::flush_ack` sends it).
pub(crate) fn handle<P: Tables>(
    p: &'static P,
    sh: &'static Shared,
    rec: Record,
    payload: &[u8],
    ack: &mut Option<Ack>,
) {
    match rec.kind {
        Kind::Request => on_request(p, sh, &rec, payload, ack),
        Kind::Response => on_response(p, &rec),
        Kind::XrcForward => xrc::on_forward(p, sh, &rec, payload),
        Kind::XrcResult => xrc::on_result(p, sh, &rec, ack),
        Kind::XrcCall | Kind::XrcReply | Kind::XrcEvent => p.on_object_record(sh, &rec, payload),
    }
}
