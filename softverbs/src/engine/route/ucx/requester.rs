//! The requester's side of a WQE whose responder QP is on another machine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vqp_sys::*;

use crate::engine::complete::{complete, fail};
use crate::engine::qp::remote_state::InFlight;
use crate::engine::qp::{ack_timeout, rnr_delay, QpCore, QpInner};
use crate::engine::{Step, Tables};
use crate::mem::{self, MrTable, Span};
use crate::os::lock;
use crate::transport::machine::REQUEST;
use crate::transport::{Ep, Reach};
use crate::ucx::wire;
use crate::wqe::SendWqe;

/// Requests one QP keeps in flight at most; more wait in its send queue.
const MAX_IN_FLIGHT: usize = 64;

/// Payload bytes one QP keeps in flight (beyond its first request, which always
/// goes): the route's window, what its responder acknowledged in the last
/// [`WINDOW_TIME`] within these bounds. UCP queues what it cannot send yet, so a
/// window much larger than the link drains in an ACK timeout would have a deep send
/// queue of large WQEs (perftest's 128 × 1 MiB) wait in UCP's queue past its ACK
/// timer and be retransmitted, while a NIC's timer only runs for packets on the wire;
/// one too small leaves a fast link idle between a request's ACK and the next (two
/// 1 MiB requests in flight moved half what eight did between two namespaces).
const MIN_BYTES_IN_FLIGHT: u64 = 2 << 20;
const MAX_BYTES_IN_FLIGHT: u64 = 8 << 20;
const WINDOW_TIME: Duration = Duration::from_millis(8);

/// How long the acknowledged bytes are counted before the rate is taken: long enough
/// that a burst of ACKs after a pause cannot pass for a fast link (over 2 ms, three
/// 256 KiB ACKs coming together would read as 390 MB/s and lift a 48 Mbit/s link's
/// window off its floor).
const RATE_SPAN: Duration = Duration::from_millis(20);

/// The window of a QP whose responder acknowledges `rate` bytes per second.
fn window(rate: u64) -> u64 {
    let w = u128::from(rate) * WINDOW_TIME.as_micros() / 1_000_000;
    (w.min(u128::from(MAX_BYTES_IN_FLIGHT)) as u64).max(MIN_BYTES_IN_FLIGHT)
}

/// Counts `bytes` acknowledged now, and takes the rate once [`RATE_SPAN`] passed.
fn note_acked(g: &mut QpInner, bytes: u64, now: Instant) {
    let r = &mut g.remote;
    r.machine_acked += bytes;
    match r.machine_since {
        Some(t0) if now.duration_since(t0) >= RATE_SPAN => {
            let us = now.duration_since(t0).as_micros().max(1);
            r.machine_rate = (u128::from(r.machine_acked) * 1_000_000 / us) as u64;
            r.machine_acked = 0;
            r.machine_since = Some(now);
        }
        Some(_) => {}
        None => r.machine_since = Some(now),
    }
}

/// The bytes WQE `w` moves (its payload, or a READ's data).
fn bytes_of(w: &SendWqe) -> u64 {
    match &w.inline {
        Some(d) => d.len() as u64,
        None => w.sges.as_slice().iter().map(|s| u64::from(s.length)).sum(),
    }
}

/// How long a QP waits before looking again while its responder is looked up, or its
/// pipeline is full.
const BACKOFF: Duration = Duration::from_micros(200);

/// Connection ids: a fresh one each time a QP starts sending after a reset or a
/// reconnection, so the responder restarts its sequence.
static NEXT_CONN: AtomicU32 = AtomicU32::new(1);

/// What went on each endpoint to another machine: requests sent, answers come, and
/// when the last came. A request queued in UCP behind others leaves only when they
/// did; its ACK timer counts from then (see [`started`]).
struct Progress {
    sent: u64,
    answered: u64,
    last_answer: Instant,
}

static LINKS: Mutex<Option<HashMap<Ep, Progress>>> = Mutex::new(None);

/// Counts a request sent on `ep`: how many went on it before.
fn note_sent(ep: Ep) -> u64 {
    let mut l = lock(&LINKS);
    let p = l
        .get_or_insert_with(HashMap::new)
        .entry(ep)
        .or_insert(Progress {
            sent: 0,
            answered: 0,
            last_answer: Instant::now(),
        });
    p.sent += 1;
    p.sent - 1
}

/// Counts an answer that came on `ep`.
fn note_answer(ep: Ep) {
    if let Some(p) = lock(&LINKS).as_mut().and_then(|l| l.get_mut(&ep)) {
        p.answered += 1;
        p.last_answer = Instant::now();
    }
}

/// When the ACK timer of `f`, the oldest request in flight of a QP, started: when it
/// was sent or its QP last progressed (`f.sent`), or, while no request sent after it on
/// its endpoint has been answered and answers keep coming, the last answer — it was
/// still queued behind other QPs' requests to the same process, not on the wire (a
/// NIC's timer runs for packets sent). Bounded: every answer counts, so once as many
/// came as were sent before it, it counts from `f.sent` again.
fn started(g: &mut QpInner, f_psn: u32, f_sent: Instant) -> Instant {
    let Some(ep) = g.remote.machine_ep else {
        return f_sent;
    };
    while g.remote.machine_marks.front().is_some_and(|m| m.0 != f_psn) {
        g.remote.machine_marks.pop_front();
    }
    let Some(&(_, ahead)) = g.remote.machine_marks.front() else {
        return f_sent;
    };
    match lock(&LINKS).as_ref().and_then(|l| l.get(&ep)) {
        Some(p) if p.answered <= ahead => f_sent.max(p.last_answer),
        _ => f_sent,
    }
}

/// Whether an opcode's request carries the WQE's data.
fn carries(opcode: u32) -> bool {
    matches!(
        opcode,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM
    )
}

/// Sends `w` (see the parent's docs): to the endpoint of the process serving (`gid`,
/// `dest`) once known; lost (in flight with nobody to answer it) when nobody is.
#[allow(clippy::too_many_arguments)]
pub(super) fn send<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    w: SendWqe,
    local: &[Span<'_>],
    len: u64,
    gid: [u8; 16],
    dest: u32,
) -> Step {
    let known = matches!(
        w.opcode,
        IBV_WR_SEND
            | IBV_WR_SEND_WITH_IMM
            | IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
            | IBV_WR_RDMA_READ
            | IBV_WR_ATOMIC_CMP_AND_SWP
            | IBV_WR_ATOMIC_FETCH_AND_ADD
    );
    if let Some(d) = w.ud {
        return send_datagram(p, qp, g, w, local, len, gid, dest, d);
    }
    if !known || !matches!(qp.qp_type, IBV_QPT_RC | IBV_QPT_UC) {
        // What this route does not carry (SEND_WITH_INV, XRC): lost, as on a wire
        // whose far end does not answer.
        return crate::engine::complete::unanswered(qp, g, w);
    }
    // Until the responder first answers, one request at a time: UCP has been seen
    // handing a fresh endpoint's second message over before its first, which the
    // responder would drop and the requester re-send only an ACK timeout later.
    let limit = if g.remote.machine_answered {
        MAX_IN_FLIGHT
    } else {
        1
    };
    let window_full = !g.remote.in_flight.is_empty()
        && g.remote
            .in_flight
            .iter()
            .map(|f| bytes_of(&f.w))
            .sum::<u64>()
            + len
            > window(g.remote.machine_rate);
    if g.remote.in_flight.len() >= limit || window_full {
        g.sq.push_front(w);
        g.remote.full = true;
        return Step::Rnr(BACKOFF);
    }
    let t = p.engine().transport();
    let ep = match t.machine_reach(&gid, dest, || port_ifindex(p, qp)) {
        Reach::Ready(ep) => {
            g.remote.machine_wait = None;
            Some(ep)
        }
        Reach::Pending => {
            // The lookup runs off this lock; the WQE waits for it one ACK timeout at
            // most, then counts as sent and lost.
            let since = *g.remote.machine_wait.get_or_insert_with(Instant::now);
            if since.elapsed() < ack_timeout(&g.attr) {
                g.sq.push_front(w);
                return Step::Rnr(BACKOFF);
            }
            g.remote.machine_wait = None;
            None
        }
        Reach::Unreachable => None,
    };
    if g.remote.conn == 0 {
        g.remote.conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed).max(1);
        g.remote.next_psn = 0;
    }
    let psn = g.remote.next_psn;
    let mut sent = false;
    if let Some(ep) = ep {
        // A long RC WRITE goes in pieces (`wire::FRAGMENT`), once the responder has
        // answered (UCP may hand a fresh endpoint's first messages over out of order).
        let pieces = matches!(w.opcode, IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM)
            && w.inline.is_none()
            && !qp.unreliable()
            && g.remote.machine_answered
            && len > wire::FRAGMENT;
        let mut payloads = Vec::new();
        if !carries(w.opcode) {
            payloads.push(Vec::new());
        } else if let Some(d) = &w.inline {
            payloads.push(d.to_vec());
        } else {
            let piece = if pieces { wire::FRAGMENT } else { len };
            let mut from = 0;
            while from < len || payloads.is_empty() {
                let mut b = t.machine_buffer(piece.min(len - from) as usize);
                let read = mem::copy_range_to_bytes(&mut b, local, from);
                payloads.push(b);
                if read.is_err() {
                    // The local (on-demand) buffer could not be read.
                    for b in payloads {
                        t.machine_recycle(b);
                    }
                    fail(qp, g, &w, IBV_WC_LOC_PROT_ERR, None);
                    return Step::Failed;
                }
                from += piece;
            }
        }
        let sgid = p.devices()[qp.dev]
            .gids()
            .get(usize::from(g.attr.ah_attr.grh.sgid_index))
            .copied()
            .unwrap_or_default();
        let mut flags = if w.solicited { wire::F_SOLICITED } else { 0 };
        if qp.unreliable() {
            flags |= wire::F_UC;
        }
        let req = wire::Request {
            opcode: w.opcode,
            flags,
            src_qpn: qp.qpn,
            dst_qpn: dest,
            conn: g.remote.conn,
            psn,
            len,
            imm: w.imm,
            rkey: w.rkey,
            remote_addr: w.remote_addr,
            compare_add: w.compare_add,
            swap: w.swap,
            sgid,
            dgid: gid,
            epoch: g.remote.machine_epoch,
            offset: 0,
        };
        // A failed endpoint is forgotten by the transport: the request is lost, and
        // its retransmission looks the peer up again.
        let count = payloads.len();
        sent = true;
        for (i, payload) in payloads.into_iter().enumerate() {
            let mut piece = req;
            piece.offset = (i as u64 * wire::FRAGMENT) as u32;
            if i + 1 < count && piece.opcode == IBV_WR_RDMA_WRITE_WITH_IMM {
                // Only the last piece takes the receive and carries the immediate.
                piece.opcode = IBV_WR_RDMA_WRITE;
                piece.imm = 0;
            }
            if !sent {
                t.machine_recycle(payload);
                continue;
            }
            sent = t.machine_send(ep, REQUEST, &piece.encode(), payload);
        }
        if sent {
            let ahead = note_sent(ep);
            if g.remote.machine_ep != Some(ep) {
                g.remote.machine_marks.clear();
                g.remote.machine_ep = Some(ep);
            }
            g.remote.machine_marks.push_back((psn, ahead));
        }
    }
    g.remote.next_psn = psn.wrapping_add(1);
    // A WQE put back by a retransmission leaves again (the send queue's head).
    g.remote.machine_rewound = g.remote.machine_rewound.saturating_sub(1);
    if qp.unreliable() && !sent {
        // Sent into the void: nothing will answer.
        return complete(qp, g, &w, 0);
    }
    g.remote.in_flight.push_back(InFlight {
        w,
        psn,
        sent: Instant::now(),
        solo: false,
    });
    if !g.remote.machine_watched {
        g.remote.machine_watched = true;
        lock(&p.engine().machine_watch).push(Arc::downgrade(qp));
    }
    Step::Done
}

/// Sends datagram `w` of UD QP `qp` to QP `dest` at `gid` (`d` its address): one
/// message, completed once handed to UCP, or at once when nobody is known to serve
/// the address (lost, as a datagram is); never re-sent, never answered.
#[allow(clippy::too_many_arguments)]
fn send_datagram<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    w: SendWqe,
    local: &[Span<'_>],
    len: u64,
    gid: [u8; 16],
    dest: u32,
    d: crate::wqe::Datagram,
) -> Step {
    let t = p.engine().transport();
    let ep = match t.machine_reach(&gid, dest, || port_ifindex(p, qp)) {
        Reach::Ready(ep) => {
            g.remote.machine_wait = None;
            ep
        }
        Reach::Pending => {
            // As a connected QP's first WQE: the lookup runs off this lock; the
            // datagram waits for it one local ACK timeout at most, then is lost.
            let since = *g.remote.machine_wait.get_or_insert_with(Instant::now);
            if since.elapsed() < ack_timeout(&g.attr) {
                g.sq.push_front(w);
                return Step::Rnr(BACKOFF);
            }
            g.remote.machine_wait = None;
            return complete(qp, g, &w, 0);
        }
        Reach::Unreachable => return complete(qp, g, &w, 0),
    };
    let payload = match &w.inline {
        Some(b) => b.to_vec(),
        None => {
            let mut b = t.machine_buffer(len as usize);
            if mem::copy_to_bytes(&mut b, local).is_err() {
                t.machine_recycle(b);
                fail(qp, g, &w, IBV_WC_LOC_PROT_ERR, None);
                return Step::Failed;
            }
            b
        }
    };
    let sgid = p.devices()[qp.dev]
        .gids()
        .get(usize::from(d.sgid_index))
        .copied()
        .unwrap_or_default();
    let mut flags = wire::F_UD;
    if d.global {
        flags |= wire::F_GRH;
    }
    if w.solicited {
        flags |= wire::F_SOLICITED;
    }
    let req = wire::Request {
        opcode: w.opcode,
        flags,
        src_qpn: qp.qpn,
        dst_qpn: dest,
        len,
        imm: w.imm,
        // The Q_Key, resolved by the requester (a high bit meaning the QP's own).
        rkey: w.rkey,
        sgid,
        dgid: gid,
        ..wire::Request::default()
    };
    let _ = t.machine_send(ep, REQUEST, &req.encode(), payload);
    complete(qp, g, &w, 0)
}

/// The RoCE GID of the requester QP a response names is not checked: a response
/// reaches a QP only through the endpoint its requests went on, and must match its
/// connection id and oldest sequence number in flight.
fn find<P: Tables>(p: &P, qpn: u32) -> Option<Arc<QpCore>> {
    (0..p.devices().len())
        .filter(|&d| p.devices()[d].roce().is_some())
        .find_map(|d| p.find_qp(d, qpn))
}

/// A NAK's status as the requester reports it: the remote errors a responder gives;
/// anything else a peer names is a remote operation error.
fn nak_status(value: u32) -> u32 {
    match value {
        IBV_WC_REM_ACCESS_ERR | IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_OP_ERR => value,
        _ => IBV_WC_REM_OP_ERR,
    }
}

/// The interface of `qp`'s port, through which a link-local GID is reached (0 for a
/// port bound to none).
fn port_ifindex<P: Tables>(p: &'static P, qp: &QpCore) -> u32 {
    p.devices()[qp.dev].roce().map_or(0, |n| n.ifindex)
}

/// An answer to one of our requests.
pub(super) fn on_response<P: Tables>(p: &'static P, r: &wire::Response, payload: &[u8]) {
    let Some(qp) = find(p, r.src_qpn) else {
        return;
    };
    // The key table before the QP (a READ's data lands in the WQE's buffers), as the
    // responders take them.
    let mrs = p.mrs().read().unwrap_or_else(|e| e.into_inner());
    let mut g = qp.lock();
    if g.remote.conn != r.conn || g.attr.dest_qp_num != r.dst_qpn {
        return;
    }
    if let Some(ep) = g.remote.machine_ep {
        note_answer(ep);
    }
    // The responder's epoch only grows (its port going down again and again).
    g.remote.machine_epoch = g.remote.machine_epoch.max(r.epoch.saturating_add(1));
    let f = match g.remote.in_flight.front() {
        Some(f) if f.psn == r.psn => g.remote.in_flight.pop_front(),
        None if g.remote.machine_rewound > 0
            && r.psn == g.remote.next_psn
            && g.state == IBV_QPS_RTS =>
        {
            // The answer to a request the timer put back before it came (go-back-N:
            // the retransmission had not left yet). It counts, as a NIC's requester
            // takes an ACK for a PSN it is about to send again.
            g.remote.machine_rewound -= 1;
            g.remote.next_psn = r.psn.wrapping_add(1);
            g.sq.pop_front().map(|w| InFlight {
                w,
                psn: r.psn,
                sent: Instant::now(),
                solo: false,
            })
        }
        _ => {
            return;
        }
    };
    let Some(f) = f else {
        return;
    };
    g.remote.machine_answered = true;
    if qp.unreliable() {
        // A UC requester completes whatever the answer: its responder answers only
        // to say the data left the requester (as the namespace route's does).
        complete(&qp, &mut g, &f.w, 0);
        return;
    }
    match r.code {
        wire::ACK => {
            if matches!(
                f.w.opcode,
                IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
            ) {
                if let Err(status) = land(&mrs, &qp, &f.w, payload) {
                    fail(&qp, &mut g, &f.w, status, None);
                    return;
                }
            }
            if matches!(complete(&qp, &mut g, &f.w, r.value), Step::Failed) {
                return;
            }
            let now = Instant::now();
            note_acked(&mut g, bytes_of(&f.w), now);
            // Progress: the local ACK timer restarts for what is still outstanding
            // (IBA Vol. 1 §9.7.6.1.3: the timer runs from the last request sent or
            // acknowledgement received; the kernel's rdma_rxe re-arms its
            // retransmit timer after each ACK that leaves requests outstanding,
            // rxe_comp.c). Without it the last of a deep pipeline over a slow link
            // would time out while the ones before it are still being answered.
            if let Some(next) = g.remote.in_flight.front_mut() {
                next.sent = next.sent.max(now);
            }
            if g.remote.full && g.state == IBV_QPS_RTS {
                // Room in the pipeline again: run the waiting WQEs now.
                g.remote.full = false;
                g.not_before = None;
                let n = g.sq.len() as u32;
                drop(g);
                p.engine().enqueue(p, &qp, n);
            }
        }
        wire::RNR => {
            let retry = g.attr.rnr_retry;
            if retry != 7 && g.rnr_tries >= retry {
                fail(&qp, &mut g, &f.w, IBV_WC_RNR_RETRY_EXC_ERR, None);
                return;
            }
            g.rnr_tries = g.rnr_tries.saturating_add(1);
            let delay = rnr_delay(r.value as u8);
            resend_from(p, &qp, g, f, delay);
        }
        wire::STALE => {
            // Sent before the responder's port went down, it was not taken: the
            // network lost it, and the link is up again (the answer's epoch is now
            // ours). Sent again at once, as after a NAK for a sequence error.
            resend_from(p, &qp, g, f, Duration::ZERO);
        }
        wire::DROP => {
            // Nobody took it (see `complete::unanswered`): re-sent after the ACK
            // timeout, counted against `retry_cnt`.
            if g.retries >= g.attr.retry_cnt.min(7) {
                fail(&qp, &mut g, &f.w, IBV_WC_RETRY_EXC_ERR, None);
                return;
            }
            g.retries += 1;
            let delay = ack_timeout(&g.attr);
            resend_from(p, &qp, g, f, delay);
        }
        _ => fail(&qp, &mut g, &f.w, nak_status(r.value), None),
    }
}

/// Copies a READ's data or an atomic's original value into `w`'s buffers, checked
/// again now (they were when it was sent; a deregistration since fails it).
fn land(mrs: &MrTable, qp: &QpCore, w: &SendWqe, data: &[u8]) -> Result<(), u32> {
    let mut spans = Vec::with_capacity(w.sges.as_slice().len());
    for s in w.sges.as_slice() {
        let span = mrs
            .span(
                s.lkey,
                qp.dev,
                qp.pd,
                s.addr,
                u64::from(s.length),
                IBV_ACCESS_LOCAL_WRITE,
            )
            .map_err(|_| IBV_WC_LOC_PROT_ERR)?;
        spans.push(span);
    }
    let want = match w.opcode {
        IBV_WR_RDMA_READ => mem::total(&spans),
        _ => 8,
    };
    if data.len() as u64 != want {
        return Err(IBV_WC_REM_OP_ERR);
    }
    mem::copy_from_bytes(&spans, data)
        .map(drop)
        .map_err(|_| IBV_WC_LOC_PROT_ERR)
}

/// Puts `f` and every request sent after it back into the send queue, in order, to be
/// sent again from `f` after `delay` (the responder drops what follows a request it
/// did not execute, so order within the QP holds).
fn resend_from<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    mut g: std::sync::MutexGuard<'_, QpInner>,
    f: InFlight,
    delay: Duration,
) {
    g.remote.full = false;
    let mut n = 1u32;
    while let Some(x) = g.remote.in_flight.pop_back() {
        g.sq.push_front(x.w);
        n += 1;
    }
    g.sq.push_front(f.w);
    g.remote.next_psn = f.psn;
    g.remote.machine_rewound = n;
    g.remote.machine_marks.clear();
    g.not_before = Some(Instant::now() + delay);
    drop(g);
    p.engine().enqueue(p, qp, n);
}

/// The UCX route's timer (see the parent's docs): for every watched QP whose oldest
/// request is unanswered past the local ACK timeout, re-sends it and those behind it,
/// or, its retries spent, completes it with `IBV_WC_RETRY_EXC_ERR` (the QP goes to
/// error, the rest flush). Returns whether any QP is still watched.
pub(crate) fn check_deadlines<P: Tables>(p: &'static P) -> bool {
    let mut resend = Vec::new();
    let still = {
        let mut watch = lock(&p.engine().machine_watch);
        watch.retain(|weak| {
            let Some(qp) = weak.upgrade() else {
                return false;
            };
            // `try_lock`: senders hold the QP's lock while they add to this list.
            let Some(mut g) = qp.try_lock() else {
                return true;
            };
            let Some(f) = g.remote.in_flight.front() else {
                g.remote.machine_watched = false;
                return false;
            };
            let (psn, sent) = (f.psn, f.sent);
            if started(&mut g, psn, sent).elapsed() < ack_timeout(&g.attr) {
                return true;
            }
            if qp.unreliable() {
                // Nothing was to be acknowledged: what got no answer completes, as it
                // would have on the wire.
                while let Some(f) = g.remote.in_flight.pop_front() {
                    if matches!(complete(&qp, &mut g, &f.w, 0), Step::Failed) {
                        break;
                    }
                }
                g.remote.machine_watched = false;
                return false;
            }
            if g.retries >= g.attr.retry_cnt.min(7) {
                if let Some(f) = g.remote.in_flight.pop_front() {
                    fail(&qp, &mut g, &f.w, IBV_WC_RETRY_EXC_ERR, None);
                }
                g.remote.machine_watched = false;
                return false;
            }
            g.retries += 1;
            g.remote.full = false;
            let mut n = 0u32;
            let mut first = None;
            while let Some(x) = g.remote.in_flight.pop_back() {
                first = Some(x.psn);
                g.sq.push_front(x.w);
                n += 1;
            }
            if let Some(psn) = first {
                g.remote.next_psn = psn;
            }
            g.remote.machine_rewound = n;
            g.remote.machine_marks.clear();
            g.not_before = None;
            g.remote.machine_watched = false;
            drop(g);
            resend.push((qp, n));
            false
        });
        !watch.is_empty()
    };
    for (qp, n) in resend {
        p.engine().enqueue(p, &qp, n);
    }
    still
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_follows_the_acknowledged_rate_within_its_bounds() {
        // Nothing measured yet, or a slow link (16 Mbit/s): the floor.
        assert_eq!(window(0), MIN_BYTES_IN_FLIGHT);
        assert_eq!(window(2_000_000), MIN_BYTES_IN_FLIGHT);
        // 1 GB/s: what it moves in WINDOW_TIME.
        assert_eq!(window(1_000_000_000), 8_000_000);
        // Faster: the cap.
        assert_eq!(window(10_000_000_000), MAX_BYTES_IN_FLIGHT);
    }
}
