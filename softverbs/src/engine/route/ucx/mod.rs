//! The UCX route: a WQE of an RC, UC or UD QP on a RoCE port (a device bound to a
//! network interface) whose destination GID names no device of this process nor of the
//! shared namespace — a QP on another machine, reached through `crate::ucx` (its design, which
//! this route follows, is in that module's docs; the worker, its endpoints, lookups and
//! threads are `crate::transport::machine`'s).
//!
//! # The requester ([`send`], `requester`)
//! The process serving (GID, QPN) is looked up and an endpoint connected off the QP's
//! lock (the transport's lookup thread and the service thread); meanwhile the WQE waits
//! at the head of the send queue, for one local ACK timeout at most. Then each WQE
//! travels as one active message (`ucx::wire::Request`, its payload copied from the
//! WQE's checked buffers or inline data) and stays in flight in the QP's state
//! (`qp::remote_state`, as the namespace route keeps it) with its sequence number,
//! until the responder's answer: an ACK completes it (a READ's data or an atomic's
//! original value copied into its buffers then), in posting order; an RNR NAK re-sends
//! it and everything after it after the responder's timer, counted against
//! `rnr_retry`; a NAK completes it with the status it names and the QP goes to error.
//! A UC WQE completes when the responder's process took it, whatever it made of it
//! (the answer only says the data left the requester, as the namespace route's
//! does), or, nothing answering, after the local ACK timeout (`timeout` 0: 4 s) or at
//! once when no process is known to serve it: a UC sender that exits after its
//! completion has not lost data still in UCP's queues.
//!
//! A request nobody answers — the lookup found nobody or was refused, the machine is
//! unreachable, the endpoint failed (a killed peer), the responder dropped it — ends as
//! every lost request does (`crate::transport`, "Routes"): the service thread's timer
//! (`check_deadlines`) re-sends the oldest unanswered WQE and those behind it after the
//! QP's local ACK timeout, looking the peer up again if its endpoint went, `retry_cnt`
//! times, then completes it with `IBV_WC_RETRY_EXC_ERR`; the QP goes to error and the
//! rest flush. Across machines this timer alone decides (UCX's own failure detection
//! only changes the path of the next retransmission).
//!
//! The timer runs for requests on the wire, as a NIC's does for packets sent: it
//! restarts at every ACK that leaves requests outstanding (IBA Vol. 1 §9.7.6.1.3;
//! the kernel's rdma_rxe re-arms its retransmit timer so), and a request that UCP still
//! queues behind other QPs' requests to the same process — no answer yet to as many
//! requests as went on that endpoint before it, and answers still coming — counts from
//! the last answer, not from when it was handed to UCP. A QP keeps at most 64 requests
//! in flight, and as much payload as its responder acknowledged in the last 8 ms, 2 to
//! 8 MiB (its window; one request always goes): a fast link stays busy between an ACK
//! and the next request, and a slow one drains the window well within an ACK timeout
//! (UCP queues what the link cannot take yet, and the timer would count that wait).
//! An answer that
//! comes for a request the timer already put back to be re-sent completes it
//! (go-back-N), and a port that goes down under requests in flight fails the oldest
//! of them, not the WQE that found no route ([`lost_under`]), so completions stay in
//! posting order.
//!
//! IBA Vol. 1 §9.7.6.1.3 (and rdma-core's `ibv_modify_qp(3)`): the requester
//! retransmits when no acknowledgement comes within the local ACK timeout,
//! `4.096 µs · 2^timeout`, up to `retry_cnt` times, then reports the transport retry
//! counter exceeded (`IBV_WC_RETRY_EXC_ERR`, mlx5's syndrome
//! `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`).
//!
//! # The responder (`responder`)
//! Each request is run through the engine's `respond` with a mover over its payload
//! bytes, so the QP state, connection (the QP must be connected to the requester's GID
//! and QPN), PD, rkey, bounds, access, RNR and the responder's error transition are
//! those of every other route. Requests of a connection execute strictly in sequence:
//! one out of sequence is dropped (the requester re-sends from the first unanswered
//! one); a duplicate SEND or WRITE is acknowledged again without running, a duplicate
//! READ runs again, a duplicate atomic is answered with the result its first run
//! gave, kept for the QP's last `max_dest_rd_atomic` atomics (one older is dropped).
//!
//! A link that goes down loses what is on it; TCP does not: it delivers what it held
//! once the link is back, seconds later, and a WRITE its requester gave up on
//! meanwhile would land in a buffer used again since. So each device counts the times
//! its port went down (its *epoch*), every answer carries it, and a requester QP's
//! requests name the last epoch it heard (plus one; none before its first answer). A
//! request naming an older epoch than the port's left before the port last went down
//! and comes only now (nothing is taken while the port is down): it is not taken, and
//! answered [`wire::STALE`] with the epoch, on which a requester still waiting for it
//! sends it again at once (a request sent after the link came back, before its QP
//! heard the new epoch, costs one such round trip). The first requests of a QP that
//! never had an answer name no epoch and are not judged. Datagrams (UD) are not
//! judged either: they are never answered.
//!
//! # Threads and locks
//! UCX's callbacks only queue (`transport::machine`). The machine thread drains the
//! queue ([`serve_machine`]) with the worker lock released — or, while a thread of the
//! process polls a CQ, that thread before each look at its CQ (`Provider::poll_turn`),
//! the machine thread napping meanwhile: on a machine whose cores all poll, waking
//! another thread for each message made more than half of an 8-byte SEND's half round
//! trip. One thread at a time serves (`Engine::machine_serving`), so the messages of a
//! connection run in the order they came. The serving thread runs each request under
//! the key table's read lock and the responder QP's lock (the namespace responder's
//! order), each response under the requester QP's lock, then sends the answers, taking
//! the worker lock with no QP locked. A requester sends with its QP locked and takes
//! the worker lock inside: requester QP → worker lock, never the other way.
//!
//! A UD datagram whose address handle's GID is another machine's takes this route
//! too: one request, completed once handed to UCP (or at once when nobody serves the
//! address), never answered; its responder delivers it as a local datagram.
//!
//! Not carried yet: XRC, and IPv6 GIDs.
//! Every payload is copied once on each side (an owned buffer handed to UCP; the
//! responder copies out of UCP's eager buffer into the queue and then into place),
//! through buffers kept for the next message (`transport`'s spare buffers).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::complete::{complete, fail};
use crate::engine::qp::{QpCore, QpInner};
use crate::engine::{Step, Tables};
use crate::mem::Span;
use crate::transport::machine::{ANSWERED, REQUEST, RESPONSE};
use crate::ucx::wire;
use crate::wqe::SendWqe;
use vqp_sys::IBV_WC_RETRY_EXC_ERR;

mod requester;
mod responder;

pub(crate) use requester::check_deadlines;

/// Sends WQE `w` of `qp` (locked as `g`; `local` its checked buffers, `len` bytes) to
/// QP `qpn` at RoCE GID `gid` on another machine (see the module's docs). Kept out of
/// line: the route interface's match stays small for the in-process route.
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
pub(crate) fn send<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    w: SendWqe,
    local: &[Span<'_>],
    len: u64,
    gid: [u8; 16],
    qpn: u32,
) -> Step {
    requester::send(p, qp, g, w, local, len, gid, qpn)
}

/// A request that found no route (its port went down) while older requests of its QP
/// are in flight to another machine: the error is the oldest one's and everything
/// after it flushes, `w` included, so the QP's completions come in the order its WQEs
/// were posted (IBA Vol. 1 §10.8.3; the retry counter is the oldest unacknowledged
/// request's, §9.7.6.1.3). A consumer that signals only the last of a chain takes a
/// later completion to mean the earlier WQEs succeeded.
#[cold]
pub(crate) fn lost_under(qp: &QpCore, g: &mut QpInner, w: SendWqe) -> Step {
    if qp.unreliable() {
        return complete(qp, g, &w, 0);
    }
    let Some(oldest) = g.remote.in_flight.pop_front() else {
        fail(qp, g, &w, IBV_WC_RETRY_EXC_ERR, None);
        return Step::Failed;
    };
    g.sq.push_front(w);
    fail(qp, g, &oldest.w, IBV_WC_RETRY_EXC_ERR, None);
    Step::Failed
}

/// The service thread's turn for other machines: the transport's (worker, lookups),
/// then every message that came — requests run by the responder, whose answers are
/// sent, and answers to our requests — and the timer of the QPs with requests in
/// flight. `polling`: a polling thread serves, in the machine thread's stead; it holds
/// back the answers that carry no payload, to go with the next request its process
/// sends on the same endpoint (`transport::machine`'s `ANSWERED`, which says which
/// endpoint answers take), or at its next turn, a QP's
/// destruction or the process's exit. Returns when to look again: at once when
/// anything came, soon while anything is going on with other machines, `None`
/// otherwise.
pub(crate) fn serve_machine<P: Tables>(
    p: &'static P,
    device_of: impl Fn(&[u8; 16]) -> Option<usize>,
    polling: bool,
) -> Option<Duration> {
    // One thread at a time, from progress to the answers sent: the messages of a
    // connection are run in the order they came (a responder drops one out of
    // sequence, and its requester re-sends only after its ACK timeout).
    let Ok(_serving) = p.engine().machine_serving.try_lock() else {
        return Some(Duration::from_millis(1));
    };
    let t = p.engine().transport();
    let (came, active) = t.serve_machine(device_of, polling);
    let any = !came.is_empty();
    let mut answers = Vec::new();
    for m in came {
        let request = match m.id {
            REQUEST => Some(m.header.as_slice()),
            RESPONSE => {
                response(p, &m.header, &m.payload);
                None
            }
            ANSWERED if m.header.len() == wire::Response::LEN + wire::Request::LEN => {
                let (answer, request) = m.header.split_at(wire::Response::LEN);
                response(p, answer, &[]);
                Some(request)
            }
            _ => None,
        };
        // A malformed request is dropped unanswered.
        let request = request.and_then(|h| wire::Request::decode(h, m.payload.len() as u64).ok());
        if let Some(r) = request {
            if let Some(a) = responder::on_request(p, &r, &m.payload) {
                // Every answer to a requester QP on one endpoint, so that they keep
                // their order: the one this process sends its own requests to that QP
                // on, when it has one (so that an answer can ride on the next), else
                // the one the request came on.
                if let Some(ep) = t.machine_ready(&r.sgid, r.src_qpn).or(m.from) {
                    answers.push((ep, a));
                }
            }
        }
        t.machine_recycle(m.payload);
    }
    for (ep, (r, payload)) in answers {
        if polling && payload.is_empty() {
            t.machine_hold(ep, &r.encode());
        } else {
            t.machine_send(ep, RESPONSE, &r.encode(), payload);
        }
    }
    let watching = check_deadlines(p);
    if any {
        Some(Duration::ZERO)
    } else if active || watching {
        Some(Duration::from_millis(1))
    } else {
        None
    }
}

/// An answer to one of our requests (`header` and `payload` as they came).
fn response<P: Tables>(p: &'static P, header: &[u8], payload: &[u8]) {
    if let Ok(r) = wire::Response::decode(header, payload.len() as u64) {
        requester::on_response(p, &r, payload);
    }
}
