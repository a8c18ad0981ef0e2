//! XRC across three processes: a request that arrives at an XRC receive QP of one
//! process and names an XRC SRQ that another process of the same domain owns.
//!
//! InfiniBand's XRC (IBA Vol. 1 §9.8 and Annex A14) lets any process of a node that
//! shares an XRC domain own the SRQ a request names: the XRC extended transport header
//! carries the SRQ number, and the responder — the receive (XRC_TGT) QP — takes the
//! receive from that SRQ whoever created it, checks the request against that SRQ's
//! protection domain and completes the receive on that SRQ's CQ, in the SRQ owner's
//! process. The receive QP keeps the transport: its state, its connection, the order
//! of the requests it executes (§9.7.7, a responder executes requests in PSN order),
//! and the responder-class errors that move it to the error state (§9.9.3).
//!
//! How it is done here: the receive QP's process **forwards**. Its responder runs the
//! transport checks it runs for every request (connected to the requester, the
//! expected sequence number) and, when the named SRQ is not one of its own but the
//! machine-wide number table says another live process owns it, passes the request on
//! to that process ([`Kind::XrcForward`]) with what the SRQ's side needs of the QP: its
//! domain, remote access flags and RNR timer. The SRQ owner checks the SRQ (an XRC SRQ
//! of that domain and device), runs the request through the engine's `respond` with
//! the receive QP's attributes — data moves directly between the requester's process
//! and its own — and sends the outcome back ([`Kind::XrcResult`]). The receive QP's
//! process then advances its sequence, or moves the QP to error for a responder-class
//! error (raising the event where its owner polls for it), and answers the requester.
//! So the QP's state, sequence and errors stay with the process that owns the QP, and
//! the SRQ's receives, limit event and completions with the process that owns the
//! SRQ, as each owns them through the kernel on a ConnectX.
//!
//! The alternative, the requester routing each request to the SRQ's owner, would need
//! the receive QP's state, domain and sequence readable (and its error transition
//! writable) by a third process. Forwarding costs one more hop for such requests only.
//!
//! Order: while a forwarded request is outstanding, the receive QP executes nothing
//! else of that connection; the requester keeps such a request alone in flight (it
//! sends nothing after it until it is answered, see `requester`), so nothing is lost
//! or executed out of order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vqp_sys::*;

use super::mover::RemoteMover;
use super::{RESP_DROP, RESP_ERR, RESP_OK, RESP_RNR};
use crate::engine::qp::{QpCore, QpInner, QP_REQ_ERR};
use crate::engine::Tables;
use crate::engine::{respond, Requester, Response};
use crate::shared::inbox::{Kind, PushError, Record, F_XRC, XRC_SRQN_SHIFT};
use crate::shared::{Ack, Owner, Shared};
use crate::xrc::XrcdCore;

/// Result code: the requester is gone; nothing was consumed and nobody is answered.
const GONE: u32 = 0x100;

/// What the receive QP's process does with a request.
pub(super) enum Route {
    /// Not a forwarded XRC request: run it here.
    Here,
    /// Forwarded (or a forward is outstanding): nothing to answer now.
    Held,
    /// The SRQ owner's inbox is full: an RNR NAK with this timer (the requester
    /// retries).
    Busy(u8),
}

/// Whether XRC request `srqn` of a requester whose responder is in the process of
/// `tgt_owner` names an SRQ owned elsewhere (the request is then forwarded, and the
/// requester keeps it alone in flight).
pub(super) fn forwarded(sh: &Shared, tgt_owner: Owner, dev: usize, srqn: u32) -> bool {
    sh.registry
        .lookup(srqn, dev)
        .is_some_and(|(o, _)| o != tgt_owner)
}

/// At XRC receive QP `b` (locked as `gb`, the request in sequence): forwards `rec` when
/// the SRQ it names belongs to another live process.
pub(super) fn route<P: Tables>(
    p: &'static P,
    sh: &'static Shared,
    rec: &Record,
    payload: &[u8],
    b: &Arc<QpCore>,
    gb: &mut QpInner,
) -> Route {
    if b.qp_type != IBV_QPT_XRC_RECV || rec.flags & F_XRC == 0 {
        return Route::Here;
    }
    if gb
        .remote
        .resp
        .as_ref()
        .is_some_and(|s| s.forwarded.is_some())
    {
        return Route::Held;
    }
    let srqn = rec.flags >> XRC_SRQN_SHIFT;
    let (src_dev, dev) = (rec.src_dev as usize, b.dev);
    let connected = matches!(gb.state, IBV_QPS_RTR | IBV_QPS_RTS)
        && gb.attr.dest_qp_num == rec.src_qpn
        && p.resolve_av(&gb.attr.ah_attr) == Some(src_dev);
    // A private domain (bit 63 of its identity) has no SRQ in another process.
    let domain = b.xrcd.as_ref().map(|d| d.id).filter(|id| id >> 63 == 0);
    let (Some(domain), true, None) = (domain, connected, p.find_srq(srqn)) else {
        return Route::Here;
    };
    let Some((owner, _)) = sh.registry.lookup(srqn, dev) else {
        return Route::Here;
    };
    if owner == sh.me || !sh.is_alive(owner) {
        return Route::Here;
    }
    let Some(peer) = sh.peer(owner) else {
        return Route::Here;
    };
    let mut fwd = *rec;
    fwd.kind = Kind::XrcForward;
    fwd.aux = domain;
    fwd.value = (gb.attr.qp_access_flags & 0xff) | u32::from(gb.attr.min_rnr_timer) << 8;
    // An acknowledgement of earlier requests still coalescing is sent before the
    // outcome: [`on_result`] runs with the same consumer's `ack` and flushes it first.
    loop {
        match peer.inbox.push(&fwd, payload) {
            Ok(()) => break,
            Err(PushError::Lost) => continue,
            Err(PushError::Full) => return Route::Busy(gb.attr.min_rnr_timer),
        }
    }
    if let Some(s) = gb.remote.resp.as_mut() {
        s.forwarded = Some((owner, Instant::now()));
    }
    // The service thread looks after it should the SRQ's owner die ([`watch`]).
    if !gb.remote.watched {
        gb.remote.watched = true;
        super::lock(&p.engine().watch).push(Arc::downgrade(b));
    }
    Route::Held
}

/// How long a forwarded request waits before its SRQ owner's liveness is checked.
const LATE: Duration = Duration::from_millis(100);

/// From the service thread's deadline round, for watched receive QP `b` (locked as
/// `gb`): whether a forwarded request is still outstanding. One whose SRQ owner died
/// is answered as a request naming an SRQ that no longer exists: an invalid request,
/// the receive QP going to error (IBA Vol. 1 §9.9.3).
pub(super) fn watch<P: Tables>(p: &P, sh: &Shared, b: &QpCore, gb: &mut QpInner) -> bool {
    let Some(s) = gb.remote.resp.as_mut() else {
        return false;
    };
    let Some((to, since)) = s.forwarded else {
        return false;
    };
    if since.elapsed() < LATE || sh.is_alive(to) {
        return true;
    }
    s.forwarded = None;
    let (from, qpn, conn, psn) = (s.from, s.qpn, s.conn, s.expect);
    let inbox = s.inbox.clone().or_else(|| sh.peer_inbox(from));
    // The requester's device: where the QP's address vector points (checked when the
    // request was forwarded).
    let src_dev = p.resolve_av(&gb.attr.ah_attr).unwrap_or(b.dev);
    b.to_error(gb, Some(QP_REQ_ERR));
    let mut r = Record::new(Kind::Response);
    r.code = RESP_ERR;
    r.value = IBV_WC_REM_INV_REQ_ERR;
    r.from_pid = sh.me.pid;
    r.from_token = sh.me.token;
    r.src_qpn = qpn;
    r.src_dev = src_dev as u32;
    r.dst_qpn = b.qpn;
    r.dst_dev = b.dev as u32;
    r.conn = conn;
    r.psn = psn;
    r.len = 1;
    if let Some(ib) = inbox {
        sh.send_response(from, ib, r);
    }
    false
}

/// At the SRQ's owner: runs forwarded request `rec` against XRC SRQ `srqn` with the
/// receive QP's attributes it carries, and sends the outcome to the receive QP's
/// process.
pub(super) fn on_forward<P: Tables>(
    p: &'static P,
    sh: &'static Shared,
    rec: &Record,
    payload: &[u8],
) {
    let (dev, src_dev) = (rec.dst_dev as usize, rec.src_dev as usize);
    if dev >= p.devices().len() || src_dev >= p.devices().len() {
        return;
    }
    // The receive QP's process, which the outcome goes to.
    let Some((tgt, _)) = sh.registry.lookup(rec.dst_qpn, dev) else {
        return;
    };
    let Some(tgt_inbox) = sh.peer_inbox(tgt) else {
        return;
    };
    let srqn = rec.flags >> XRC_SRQN_SHIFT;
    let srq = p
        .find_srq(srqn)
        .filter(|s| s.dev == dev && s.xrc.as_ref().is_some_and(|x| x.xrcd.id == rec.aux));
    let response = match srq {
        // The SRQ is gone, of another device or domain: an invalid request (IBA Vol. 1
        // Annex A14: the XRCETH must name an SRQ of the receive QP's domain).
        None => Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR),
        Some(srq) => serve(p, rec, payload, &srq),
    };
    let (code, value, event) = match response {
        Response::Ok(n) => (RESP_OK, n, 0),
        Response::Rnr(t) => (RESP_RNR, u32::from(t), 0),
        Response::Error { status, responder } => (RESP_ERR, status, responder.unwrap_or(0)),
        Response::Dropped => (GONE, 0, 0),
        Response::Unanswered => (RESP_DROP, 0, 0),
    };
    let mut r = *rec;
    r.kind = Kind::XrcResult;
    r.code = code;
    r.value = value;
    r.imm = event;
    r.n_iov = 0;
    r.payload_len = 0;
    r.len = 1;
    sh.send_response(tgt, tgt_inbox, r);
}

/// Runs forwarded request `rec` at a stand-in for the receive QP that holds what the
/// SRQ's side of the responder reads: its number, device, domain, access flags and RNR
/// timer, connected to the requester (the receive QP's process checked that).
fn serve<P: Tables>(
    p: &'static P,
    rec: &Record,
    payload: &[u8],
    srq: &Arc<crate::srq::SrqCore>,
) -> Response {
    let (dev, src_dev) = (rec.dst_dev as usize, rec.src_dev as usize);
    let lid = p.devices()[src_dev].lid;
    if lid == 0 {
        // A RoCE requester is addressed by GID: not served across three processes.
        return Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR);
    }
    let none = Arc::new(crate::cq::CqCore::new(
        1,
        dev,
        Arc::clone(&srq.ctx),
        None,
        0,
    ));
    let stand_in = QpCore::new(
        p.engine().transport(),
        rec.dst_qpn,
        IBV_QPT_XRC_RECV,
        0,
        dev,
        0,
        Arc::clone(&srq.ctx),
        Arc::clone(&none),
        none,
        None,
    )
    .in_xrcd(Arc::new(XrcdCore::remote(dev, rec.aux)));
    let mrs = p.mrs().read().unwrap_or_else(|e| e.into_inner());
    let mut g = stand_in.lock();
    g.state = IBV_QPS_RTS;
    g.attr.qp_state = IBV_QPS_RTS;
    g.attr.dest_qp_num = rec.src_qpn;
    g.attr.ah_attr.dlid = lid;
    g.attr.ah_attr.port_num = 1;
    g.attr.qp_access_flags = rec.value & 0xff;
    g.attr.min_rnr_timer = (rec.value >> 8) as u8;
    let w = super::request_of(rec, None);
    let a = Requester {
        qpn: rec.src_qpn,
        dev: src_dev,
        sgid: None,
        qp_type: IBV_QPT_XRC_SEND,
    };
    let mut mv = RemoteMover {
        pid: rec.from_pid,
        rec,
        payload,
    };
    let r = respond(p, a, &stand_in, &mut g, &mrs, &w, rec.len, &mut mv);
    drop(g);
    drop(mrs);
    r
}

/// At the receive QP's process: the SRQ owner's outcome of a forwarded request. The
/// QP's sequence advances on success; a responder-class error moves it to error with
/// its event; the requester is answered.
pub(super) fn on_result<P: Tables>(
    p: &'static P,
    sh: &'static Shared,
    rec: &Record,
    ack: &mut Option<Ack>,
) {
    let from = Owner {
        pid: rec.from_pid,
        token: rec.from_token,
    };
    let Some(b) = p.find_qp(rec.dst_dev as usize, rec.dst_qpn) else {
        return;
    };
    let mut gb = b.lock();
    let inbox = match gb.remote.resp.as_mut() {
        Some(s)
            if s.forwarded.is_some()
                && s.from == from
                && s.qpn == rec.src_qpn
                && s.conn == rec.conn
                && s.expect == rec.psn =>
        {
            s.forwarded = None;
            if rec.code == RESP_OK {
                s.expect = s.expect.wrapping_add(1);
            }
            s.inbox.clone()
        }
        _ => return,
    };
    if rec.code == GONE {
        return;
    }
    if rec.code == RESP_ERR && rec.imm != 0 {
        b.to_error(&mut gb, Some(rec.imm));
    }
    drop(gb);
    let r = super::response_to(sh, rec, rec.code, rec.value);
    if let Some(ib) = inbox.or_else(|| sh.peer_inbox(from)) {
        sh.flush_ack(ack);
        sh.send_response(from, ib, r);
    }
}
