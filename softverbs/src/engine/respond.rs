//! The responder's side of a WQE: the checks a responder makes, receive consumption,
//! the receive completion, and the payload's movement through a [`Mover`].

use std::collections::VecDeque;
use std::sync::Arc;

use vqp_sys::*;

use super::Tables;
use crate::engine::qp::{QpCore, QpInner, QP_ACCESS_ERR, QP_REQ_ERR};
use crate::mem::{self, KeyError, MrTable, Span};
use crate::srq::SrqCore;
use crate::wqe::{RecvWqe, SendWqe, GRH_BYTES, MAX_SGE};

/// What the responder side reported.
pub(crate) enum Response {
    /// Done; the requester's completion carries this byte count.
    Ok(u32),
    /// No receive posted: an RNR NAK with the responder's `min_rnr_timer`.
    Rnr(u8),
    /// The request failed with this status at the requester. When `responder` names
    /// an event, the responder detected the error itself and goes to the error state
    /// raising it.
    Error { status: u32, responder: Option<u32> },
    /// The requester is gone (another process that exited): nothing was consumed and
    /// nobody is told.
    Dropped,
    /// Nobody took the request (the responder QP is not connected to the requester):
    /// the packet is lost, as on the wire, and the requester retransmits it.
    Unanswered,
}

impl Response {
    /// The response an unreliable (UC) requester sees: success, whatever happened
    /// after the request left it, unless its own memory could not be read
    /// (`Dropped` stays: the requester is gone).
    pub(crate) fn unacknowledged(self) -> Response {
        match self {
            Response::Dropped => Response::Dropped,
            Response::Error { status, .. } if is_local(status) => Response::requester(status),
            _ => Response::Ok(0),
        }
    }

    /// The requester fails with `status`; the responder is not affected (nothing
    /// answered, or the error is the requester's own).
    pub(crate) fn requester(status: u32) -> Response {
        Response::Error {
            status,
            responder: None,
        }
    }

    /// A responder-class error: the requester completes with `status`, the responder
    /// QP goes to the error state and raises `event`.
    ///
    /// This is what the specification prescribes for the errors a responder detects
    /// (InfiniBand Architecture Specification Vol. 1, §9.9.3 "Responder error
    /// behavior": an invalid request, a remote access error or a remote operational
    /// error NAKs the request and, on a reliable connection, puts the responder's QP in
    /// the error state; where no receive WQE can carry the error, it is reported as an
    /// affiliated asynchronous error, §11.6.3: "Invalid Request Local Work Queue
    /// Error", "Local Access Violation Work Queue Error"), and what ConnectX does: the
    /// responder's QP moves to error, and mlx5 (drivers/infiniband/hw/mlx5/qp.c,
    /// `mlx5_ib_qp_event`) delivers `MLX5_EVENT_TYPE_WQ_ACCESS_ERROR` as
    /// `IBV_EVENT_QP_ACCESS_ERR` and `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR` as
    /// `IBV_EVENT_QP_REQ_ERR`. Its receives are flushed like any QP's in error.
    pub(crate) fn responder(status: u32, event: u32) -> Response {
        Response::Error {
            status,
            responder: Some(event),
        }
    }
}

/// Whether `status` reports the requester's own memory (a failed read of its buffers
/// by the mover), which a UC requester still fails with.
fn is_local(status: u32) -> bool {
    matches!(
        status,
        IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_LEN_ERR | IBV_WC_LOC_QP_OP_ERR
    )
}

/// Moves a WQE's payload between the requester's buffers and the responder's checked
/// spans: one per route (`route::process`'s plain copies in one process, the namespace
/// route's process-to-process copies across processes). The responder logic in
/// [`respond`] is the same for all.
pub(crate) trait Mover {
    /// Copies the requester's payload into `dst` (SEND, WRITE).
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError>;
    /// Copies `src` into the requester's buffers (READ).
    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError>;
    /// Copies `bytes` into the requester's buffers (an atomic's original value).
    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError>;
}

/// Why a [`Mover`] could not move the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MoveError {
    /// The requester is gone: drop the request.
    Gone,
    /// The requester's memory could not be accessed: complete with this status.
    Status(u32),
    /// The responder's own memory (an on-demand range no longer accessible) could not
    /// be: a remote access error for a WRITE, READ or atomic, a protection error of
    /// the receive for a SEND.
    Target,
}

/// Where a responder QP takes its receives: its own queue (checked against its PD), or
/// its SRQ's, locked (checked against the SRQ's PD).
enum Receives<'q> {
    Own(&'q mut VecDeque<RecvWqe>, u32),
    Shared(&'q SrqCore, &'q mut crate::srq::Queue),
}

impl Receives<'_> {
    fn front(&self) -> Option<&RecvWqe> {
        match self {
            Receives::Own(q, _) => q.front(),
            Receives::Shared(_, q) => q.rq.front(),
        }
    }

    fn take(&mut self) -> Option<RecvWqe> {
        match self {
            Receives::Own(q, _) => q.pop_front(),
            Receives::Shared(s, q) => s.take(q),
        }
    }

    /// The protection domain its receives' scatter lists belong to.
    fn pd(&self) -> u32 {
        match self {
            Receives::Own(_, pd) => *pd,
            Receives::Shared(s, _) => s.pd,
        }
    }
}

/// The requester QP a WQE comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Requester {
    pub qpn: u32,
    pub dev: usize,
    /// The sender's GID for a datagram's GRH when our device table does not hold it (a
    /// RoCE GID of another process); `None`: our device `dev`'s GID at the datagram's
    /// source GID index.
    pub sgid: Option<[u8; 16]>,
    /// `IBV_QPT_RC` or `IBV_QPT_UC`: a QP answers only a requester of its own type.
    pub qp_type: u32,
}

/// The spans of receive `r`'s scatter list, checked for local write against device `dev`
/// and protection domain `pd`, into `out`; their count, or `None` when an entry is
/// unusable (bad lkey, PD, bounds or access).
fn receive_spans<'t>(
    mrs: &'t MrTable,
    r: &RecvWqe,
    dev: usize,
    pd: u32,
    out: &mut [Span<'t>; MAX_SGE as usize],
) -> Option<usize> {
    let mut n = 0;
    for s in r.sges.as_slice() {
        let span = mrs
            .span(
                s.lkey,
                dev,
                pd,
                s.addr,
                u64::from(s.length),
                IBV_ACCESS_LOCAL_WRITE,
            )
            .ok()?;
        *out.get_mut(n)? = span;
        n += 1;
    }
    Some(n)
}

/// The responder's side of one WQE from requester `a`: checks, data movement (by
/// `mv`), receive consumption and the receive completion. `gb` is the responder's
/// state (the requester's own when a QP is connected to itself). Data moves before a
/// receive is consumed, so a request whose requester vanished consumes nothing. A
/// responder-class error leaves the state change to the caller (see
/// [`Response::responder`]).
///
/// A UC responder acknowledges nothing: what it cannot take (no receive posted, a bad
/// rkey, bounds, access) it drops silently, without changing state, and the requester's
/// request succeeds (IBA Vol. 1 §9.7, unreliable connection: the responder "silently
/// drops" a packet it cannot accept); a receive that completes in error (too small, a
/// bad lkey) moves it to the error state, as any work completion in error does.
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond<M: Mover, P: Tables>(
    p: &P,
    a: Requester,
    b: &QpCore,
    gb: &mut QpInner,
    mrs: &MrTable,
    w: &SendWqe,
    len: u64,
    mv: &mut M,
) -> Response {
    let r = respond_checked(p, a, b, gb, mrs, w, len, mv);
    // (A request of another type was not taken at all: what the requester makes of
    // that is its own transport's rule.)
    if b.unreliable() && a.qp_type == b.qp_type {
        r.unacknowledged()
    } else {
        r
    }
}

#[allow(clippy::too_many_arguments)]
fn respond_checked<M: Mover, P: Tables>(
    p: &P,
    a: Requester,
    b: &QpCore,
    gb: &mut QpInner,
    mrs: &MrTable,
    w: &SendWqe,
    len: u64,
    mv: &mut M,
) -> Response {
    if b.datagram() {
        return respond_datagram(p, a, b, gb, mrs, w, len, mv);
    }
    let (a_qpn, a_dev) = (a.qpn, a.dev);
    let moved = |r: Result<(), MoveError>| match r {
        Ok(()) => None,
        Err(MoveError::Gone) => Some(Response::Dropped),
        Err(MoveError::Status(s)) => Some(Response::requester(s)),
        Err(MoveError::Target) => Some(Response::responder(IBV_WC_REM_ACCESS_ERR, QP_ACCESS_ERR)),
    };
    let connected = matches!(gb.state, IBV_QPS_RTR | IBV_QPS_RTS)
        && answers(a.qp_type, b.qp_type)
        && gb.attr.dest_qp_num == a_qpn
        && p.resolve_av(&gb.attr.ah_attr) == Some(a_dev);
    if !connected {
        // A packet for a QP that is not connected to its sender is dropped; the
        // responder sees nothing and the requester retransmits.
        return Response::Unanswered;
    }
    // An XRC receive QP serves the request with the SRQ it names, which must be an XRC
    // SRQ of the QP's domain (IBA Vol. 1 Annex A14, XRC: the XRC SRQ's protection
    // domain checks the request's memory, its CQ takes the receive's completion; an
    // XRCETH naming an SRQ outside the domain is an invalid request, NAKed, and the
    // responder QP goes to error as for any invalid request, §9.9.3).
    let xrc_srq = match xrc_target(p, b, w) {
        Ok(s) => s,
        Err(()) => return Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR),
    };
    let pd = xrc_srq.as_ref().map_or(b.pd, |s| s.pd);
    let recv_cq = match xrc_srq.as_ref().and_then(|s| s.xrc.as_ref()) {
        Some(x) => &x.cq,
        None => &b.recv_cq,
    };
    let access = gb.attr.qp_access_flags;
    let remote = |need: u32, rlen: u64| -> Result<Span<'_>, KeyError> {
        if access & need == 0 {
            return Err(KeyError::Access);
        }
        mrs.remote_span(w.rkey, b.dev, pd, b.qpn, w.remote_addr, rlen, need)
    };
    let byte_len = len as u32;
    let min_rnr_timer = gb.attr.min_rnr_timer;
    // The SRQ's lock, when the QP has one, is held from the look at the head receive to
    // its consumption (another QP of the SRQ may be responding on another thread).
    let mut srq_queue = xrc_srq.as_ref().or(b.srq.as_ref()).map(|s| (s, s.lock()));
    let mut receives = match srq_queue.as_mut() {
        Some((s, q)) => Receives::Shared(s, q),
        None => Receives::Own(&mut gb.rq, b.pd),
    };
    match w.opcode {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV => {
            let recv_pd = receives.pd();
            let Some(r) = receives.front() else {
                return Response::Rnr(min_rnr_timer);
            };
            let mut dst_buf: [Span<'_>; MAX_SGE as usize] = [Span::empty(); MAX_SGE as usize];
            let n_dst = receive_spans(mrs, r, b.dev, recv_pd, &mut dst_buf);
            let bad = n_dst.is_none();
            let dst = &dst_buf[..n_dst.unwrap_or(0)];
            let (mut recv_status, mut req_status) = if bad {
                (IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR)
            } else if mem::total(dst) < len {
                (IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR)
            } else {
                (IBV_WC_SUCCESS, IBV_WC_SUCCESS)
            };
            if recv_status == IBV_WC_SUCCESS {
                match mv.pull(dst) {
                    // The receive's own (on-demand) buffer: as a bad receive.
                    Err(MoveError::Target) => {
                        (recv_status, req_status) = (IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR)
                    }
                    r => {
                        if let Some(r) = moved(r) {
                            return r;
                        }
                    }
                }
            }
            let Some(r) = receives.take() else {
                return Response::Rnr(min_rnr_timer);
            };
            drop(srq_queue);
            if recv_status != IBV_WC_SUCCESS {
                recv_cq.push(b.wc(r.wr_id, recv_status, IBV_WC_RECV, 0), false, None);
                if b.unreliable() {
                    // The error is in the receive completion; no event.
                    b.to_error(gb, None);
                }
                return Response::responder(req_status, QP_REQ_ERR);
            }
            let mut wc = b.wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, byte_len);
            wc.src_qp = a_qpn;
            wc.slid = p.devices()[a_dev].lid;
            if w.opcode == IBV_WR_SEND_WITH_IMM {
                wc.wc_flags = IBV_WC_WITH_IMM;
                wc.imm = ibv_wc_imm { imm_data: w.imm };
            }
            if w.opcode == IBV_WR_SEND_WITH_INV {
                // The rkey to invalidate names a type 2 window bound through this QP
                // (IBA Vol. 1 §10.6.7.2; a region or a type 1 window cannot be
                // invalidated remotely). When it does not, the error is the
                // responder's "class J" (as `rdma_rxe` handles it): the receive
                // completes with `IBV_WC_REM_INV_REQ_ERR`, the requester is NAKed as
                // an invalid request, and the responder goes to error.
                if mrs.invalidate(w.imm, pd, Some(b.qpn)).is_err() {
                    recv_cq.push(
                        b.wc(r.wr_id, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0),
                        false,
                        None,
                    );
                    return Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR);
                }
                p.engine().transport().revoke_mr(w.imm);
                wc.wc_flags = IBV_WC_WITH_INV;
                wc.imm = ibv_wc_imm {
                    invalidated_rkey: w.imm,
                };
            }
            if !recv_cq.push(wc, w.solicited, None) {
                b.to_error(gb, None);
            }
            Response::Ok(0)
        }
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => {
            let with_imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
            if with_imm && receives.front().is_none() {
                return Response::Rnr(min_rnr_timer);
            }
            if len > 0 {
                let Ok(dst) = remote(IBV_ACCESS_REMOTE_WRITE, len) else {
                    return Response::responder(IBV_WC_REM_ACCESS_ERR, QP_ACCESS_ERR);
                };
                if let Some(r) = moved(mv.pull(&[dst])) {
                    return r;
                }
            }
            let taken = with_imm.then(|| receives.take()).flatten();
            drop(srq_queue);
            if let Some(r) = taken {
                let mut wc = b.wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, byte_len);
                wc.src_qp = a_qpn;
                wc.slid = p.devices()[a_dev].lid;
                wc.wc_flags = IBV_WC_WITH_IMM;
                wc.imm = ibv_wc_imm { imm_data: w.imm };
                if !recv_cq.push(wc, w.solicited, None) {
                    b.to_error(gb, None);
                }
            }
            Response::Ok(0)
        }
        IBV_WR_RDMA_READ => {
            if len > 0 {
                let Ok(src) = remote(IBV_ACCESS_REMOTE_READ, len) else {
                    return Response::responder(IBV_WC_REM_ACCESS_ERR, QP_ACCESS_ERR);
                };
                if let Some(r) = moved(mv.push(&[src])) {
                    return r;
                }
            }
            Response::Ok(byte_len)
        }
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            if w.remote_addr % 8 != 0 || len != 8 {
                return Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR);
            }
            let Ok(target) = remote(IBV_ACCESS_REMOTE_ATOMIC, 8) else {
                return Response::responder(IBV_WC_REM_ACCESS_ERR, QP_ACCESS_ERR);
            };
            if !mem::atomic_accessible(&target) {
                return Response::responder(IBV_WC_REM_ACCESS_ERR, QP_ACCESS_ERR);
            }
            let orig = if w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD {
                mem::fetch_add(&target, w.compare_add)
            } else {
                mem::compare_swap(&target, w.compare_add, w.swap)
            };
            let Some(orig) = orig else {
                return Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR);
            };
            if let Some(r) = moved(mv.push_bytes(&orig.to_ne_bytes())) {
                return r;
            }
            Response::Ok(8)
        }
        _ => Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR),
    }
}

/// Whether a responder QP of type `resp` answers a requester of type `req`: its own
/// type, or for an XRC receive QP an XRC send QP (an XRC send QP receives nothing).
fn answers(req: u32, resp: u32) -> bool {
    match (req, resp) {
        (IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV) => true,
        (_, IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV) => false,
        (req, resp) => req == resp,
    }
}

/// The XRC SRQ request `w` at XRC receive QP `b` names: `Ok(None)` for a QP of
/// another type, `Err` for a number that is no XRC SRQ of `b`'s domain and device.
fn xrc_target<P: Tables>(p: &P, b: &QpCore, w: &SendWqe) -> Result<Option<Arc<SrqCore>>, ()> {
    if b.qp_type != IBV_QPT_XRC_RECV {
        return Ok(None);
    }
    let domain = b.xrcd.as_ref().map(|d| d.id);
    p.find_srq(w.xrc_srqn)
        .filter(|s| s.dev == b.dev && s.xrc.as_ref().map(|x| x.xrcd.id) == domain)
        .map(Some)
        .ok_or(())
}

/// A UD datagram at UD QP `b` (`w.rkey` carries the effective Q_Key). Dropped silently,
/// as the specification has it for UD (IBA Vol. 1 §9.6.1, §10.2.5): from a QP that is
/// not UD, to a QP not ready to receive (RTR or RTS), with a Q_Key other than the QP's,
/// or with no receive posted (no RNR on UD). Otherwise it fills a receive: the first 40
/// bytes of the receive buffer are the GRH area (written, and `IBV_WC_GRH` set, when the
/// sender's address handle had a global route), the payload follows, and the
/// completion's `byte_len` counts both; `src_qp`, `slid` and `pkey_index` name the
/// sender. A receive that cannot hold GRH area and payload, or names memory it cannot
/// use, completes in error and moves the QP to the error state.
#[allow(clippy::too_many_arguments)]
fn respond_datagram<M: Mover, P: Tables>(
    p: &P,
    a: Requester,
    b: &QpCore,
    gb: &mut QpInner,
    mrs: &MrTable,
    w: &SendWqe,
    len: u64,
    mv: &mut M,
) -> Response {
    let dropped = Response::Ok(0);
    if a.qp_type != IBV_QPT_UD
        || !matches!(gb.state, IBV_QPS_RTR | IBV_QPS_RTS)
        || w.rkey != gb.attr.qkey
    {
        return dropped;
    }
    let mut srq_queue = b.srq.as_ref().map(|s| (s, s.lock()));
    let mut receives = match srq_queue.as_mut() {
        Some((s, q)) => Receives::Shared(s, q),
        None => Receives::Own(&mut gb.rq, b.pd),
    };
    let recv_pd = receives.pd();
    let Some(r) = receives.front() else {
        return dropped;
    };
    let mut dst_buf: [Span<'_>; MAX_SGE as usize] = [Span::empty(); MAX_SGE as usize];
    let n_dst = receive_spans(mrs, r, b.dev, recv_pd, &mut dst_buf);
    let dst = &dst_buf[..n_dst.unwrap_or(0)];
    let mut status = if n_dst.is_none() {
        IBV_WC_LOC_PROT_ERR
    } else if mem::total(dst) < GRH_BYTES + len {
        IBV_WC_LOC_LEN_ERR
    } else {
        IBV_WC_SUCCESS
    };
    let mut grh_area = [Span::empty(); MAX_SGE as usize + 1];
    let mut data = [Span::empty(); MAX_SGE as usize + 1];
    let (ng, nd) = mem::split_at(dst, GRH_BYTES, &mut grh_area, &mut data);
    let global_sgid_index = w.ud.filter(|d| d.global).map(|d| d.sgid_index);
    let global = global_sgid_index.is_some();
    if status == IBV_WC_SUCCESS {
        match mv.pull(&data[..nd]) {
            Ok(()) => {}
            Err(MoveError::Gone) => return Response::Dropped,
            Err(MoveError::Status(s)) => return Response::requester(s),
            Err(MoveError::Target) => status = IBV_WC_LOC_PROT_ERR,
        }
    }
    if let (IBV_WC_SUCCESS, Some(sgid_index)) = (status, global_sgid_index) {
        let (sgid, dgid) = grh_gids(p, a, b.dev, sgid_index);
        let header = grh(&sgid, &dgid, len);
        if mem::copy_from_bytes(&grh_area[..ng], &header).is_err() {
            status = IBV_WC_LOC_PROT_ERR;
        }
    }
    let Some(r) = receives.take() else {
        return dropped;
    };
    drop(srq_queue);
    if status != IBV_WC_SUCCESS {
        b.recv_cq
            .push(b.wc(r.wr_id, status, IBV_WC_RECV, 0), false, None);
        b.to_error(gb, None);
        return dropped;
    }
    let mut wc = b.wc(
        r.wr_id,
        IBV_WC_SUCCESS,
        IBV_WC_RECV,
        (GRH_BYTES + len) as u32,
    );
    wc.src_qp = a.qpn;
    wc.slid = p.devices()[a.dev].lid;
    wc.pkey_index = 0;
    if global {
        wc.wc_flags |= IBV_WC_GRH;
    }
    if w.opcode == IBV_WR_SEND_WITH_IMM {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm = ibv_wc_imm { imm_data: w.imm };
    }
    if !b.recv_cq.push(wc, w.solicited, None) {
        b.to_error(gb, None);
    }
    dropped
}

/// The GIDs of a datagram's GRH: the sender's at the address handle's source index, and
/// the receiving port's GID of the same kind (IPv4-mapped or not; its first otherwise),
/// which is the one a RoCE sender addressed.
fn grh_gids<P: Tables>(p: &P, a: Requester, b_dev: usize, sgid_index: u8) -> ([u8; 16], [u8; 16]) {
    let sender = &p.devices()[a.dev];
    let sgid = a
        .sgid
        .or_else(|| sender.gids().get(usize::from(sgid_index)).copied())
        .unwrap_or(sender.gid);
    let v4 = |g: &[u8; 16]| g[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    let receiver = &p.devices()[b_dev];
    let dgid = receiver
        .gids()
        .iter()
        .find(|g| v4(g) == v4(&sgid))
        .or_else(|| receiver.gids().first())
        .copied()
        .unwrap_or(receiver.gid);
    (sgid, dgid)
}

/// The 40-byte global route header a datagram from `sgid` to `dgid` carries: IPv6
/// version, traffic class and flow label 0, the payload length, next header 0x1b (an
/// InfiniBand transport header follows), hop limit 64, then the two GIDs (all in
/// network order, as `struct ibv_grh`).
fn grh(sgid: &[u8; 16], dgid: &[u8; 16], len: u64) -> [u8; GRH_BYTES as usize] {
    let mut h = [0u8; GRH_BYTES as usize];
    h[0] = 6 << 4;
    h[4..6].copy_from_slice(&(len.min(u64::from(u16::MAX)) as u16).to_be_bytes());
    h[6] = 0x1b;
    h[7] = 64;
    h[8..24].copy_from_slice(sgid);
    h[24..40].copy_from_slice(dgid);
    h
}
