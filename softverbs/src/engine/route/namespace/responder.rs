//! The responder's side: a request from another process run through the engine's
//! `respond`, the answer coalesced or queued until the requester's inbox has room.

use std::sync::Arc;

use vqp_sys::*;

use super::mover::RemoteMover;
use super::{RespSeq, RESP_DROP, RESP_ERR, RESP_OK, RESP_RNR};
use crate::engine::qp::QP_REQ_ERR;
use crate::engine::{respond, Requester, Response, Tables};
use crate::shared::inbox::{
    iov, Inbox, Record, F_GRH, F_INLINE, F_UC, F_UD, F_XRC, GRH_SGID_SHIFT,
};
use crate::shared::{Ack, Owner, Shared};
use crate::wqe::Datagram;

/// Acknowledgements coalesced into one response carry at most this many bytes of
/// WRITE/SEND data (so a large transfer's completions are not held back).
const ACK_BYTES: u64 = 256 << 10;

/// Whether a request's sizes agree with themselves (a peer's record is not trusted).
fn well_formed(rec: &Record, payload: &[u8]) -> bool {
    if payload.len() != rec.payload_len {
        return false;
    }
    // A datagram and an XRC request share the flags' top bits: never both.
    if rec.flags & F_UD != 0 && rec.flags & F_XRC != 0 {
        return false;
    }
    if rec.flags & F_INLINE != 0 {
        return rec.payload_len as u64 == rec.len;
    }
    let total: Option<u64> =
        (0..rec.n_iov as usize).try_fold(0u64, |t, i| t.checked_add(iov(payload, i).1));
    total == Some(rec.len)
}

pub(super) fn on_request<P: Tables>(
    p: &'static P,
    sh: &'static Shared,
    rec: &Record,
    payload: &[u8],
    ack: &mut Option<Ack>,
) {
    let from = Owner {
        pid: rec.from_pid,
        token: rec.from_token,
    };
    let (dst_dev, src_dev) = (rec.dst_dev as usize, rec.src_dev as usize);
    let mut answer = |inbox: Option<Arc<Inbox>>, code: u32, value: u32| {
        if code == RESP_OK {
            if let Some(a) = ack.as_mut() {
                let r = &mut a.rec;
                if a.to == from
                    && r.src_qpn == rec.src_qpn
                    && r.src_dev == rec.src_dev
                    && r.dst_qpn == rec.dst_qpn
                    && r.dst_dev == rec.dst_dev
                    && r.conn == rec.conn
                    && r.value == value
                    && r.psn.wrapping_add(r.len as u32) == rec.psn
                    && a.bytes < ACK_BYTES
                {
                    r.len += 1;
                    a.bytes += rec.len;
                    return;
                }
            }
        }
        sh.flush_ack(ack);
        let r = super::response_to(sh, rec, code, value);
        if let Some(ib) = inbox.or_else(|| sh.peer_inbox(from)) {
            if code == RESP_OK {
                *ack = Some(Ack {
                    to: from,
                    inbox: ib,
                    rec: r,
                    bytes: rec.len,
                });
            } else {
                sh.send_response(from, ib, r);
            }
        }
    };
    if dst_dev >= p.devices().len() || src_dev >= p.devices().len() {
        return answer(None, RESP_DROP, 0);
    }
    let Some(b) = p
        .find_qp(dst_dev, rec.dst_qpn)
        .filter(|_| p.devices()[dst_dev].is_up())
    else {
        return answer(None, RESP_DROP, 0);
    };
    // The key table before the QP: the engine takes them in that order too (its
    // requester lock aside), so a waiting deregistration cannot wedge us.
    let mrs = p.mrs().read().unwrap_or_else(|e| e.into_inner());
    let mut gb = b.lock();
    // A datagram has no sequence (nothing is re-sent on UD); a connection's requests
    // execute in sequence.
    let datagram = rec.flags & F_UD != 0;
    let inbox = if datagram {
        sh.peer_inbox(from)
    } else {
        let same = matches!(&gb.remote.resp,
            Some(s) if s.from == from && s.qpn == rec.src_qpn && s.conn == rec.conn);
        if !same {
            gb.remote.resp = Some(RespSeq {
                from,
                qpn: rec.src_qpn,
                conn: rec.conn,
                expect: rec.psn,
                inbox: sh.peer_inbox(from),
                forwarded: None,
            });
        }
        let (expect, inbox) = match &gb.remote.resp {
            Some(s) => (s.expect, s.inbox.clone()),
            None => return,
        };
        if rec.psn != expect {
            // Out of sequence (after an RNR NAK or an error): the requester re-sends.
            return;
        }
        inbox
    };
    if !datagram && well_formed(rec, payload) {
        // An XRC request for another process's SRQ goes there (see `xrc`).
        match super::xrc::route(p, sh, rec, payload, &b, &mut gb) {
            super::xrc::Route::Here => {}
            super::xrc::Route::Held => return,
            super::xrc::Route::Busy(t) => {
                drop(gb);
                drop(mrs);
                return answer(inbox, RESP_RNR, u32::from(t));
            }
        }
    }
    let response = if well_formed(rec, payload) {
        let w = super::request_of(
            rec,
            datagram.then_some(Datagram {
                dev: Some(dst_dev),
                qpn: rec.dst_qpn,
                qkey: rec.rkey,
                global: rec.flags & F_GRH != 0,
                sgid_index: (rec.flags >> GRH_SGID_SHIFT) as u8,
            }),
        );
        // A datagram's GRH names the sender's GID: a RoCE GID is the sender's own (its
        // exports), not that of our device of the same index.
        let sgid = (datagram && rec.flags & F_GRH != 0)
            .then(|| {
                let index = usize::from((rec.flags >> GRH_SGID_SHIFT) as u8);
                sh.peer(from)?.exports.gid_of(src_dev, index)
            })
            .flatten();
        let mut mv = RemoteMover {
            pid: rec.from_pid,
            rec,
            payload,
        };
        let a = Requester {
            qpn: rec.src_qpn,
            dev: src_dev,
            sgid,
            qp_type: if datagram {
                IBV_QPT_UD
            } else if rec.flags & F_UC != 0 {
                IBV_QPT_UC
            } else if rec.flags & F_XRC != 0 {
                IBV_QPT_XRC_SEND
            } else {
                IBV_QPT_RC
            },
        };
        respond(p, a, &b, &mut gb, &mrs, &w, rec.len, &mut mv)
    } else {
        Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR)
    };
    let (code, value) = match response {
        Response::Ok(n) => {
            if let Some(s) = gb.remote.resp.as_mut().filter(|_| !datagram) {
                s.expect = s.expect.wrapping_add(1);
            }
            (RESP_OK, n)
        }
        Response::Rnr(t) => (RESP_RNR, u32::from(t)),
        Response::Error { status, responder } => {
            // A responder-class error moves this process's QP to error and raises the
            // event here, where its owner polls for it (as in one process: `execute`).
            if let Some(event) = responder {
                b.to_error(&mut gb, Some(event));
            }
            (RESP_ERR, status)
        }
        Response::Dropped => return,
        Response::Unanswered => (RESP_DROP, 0),
    };
    drop(gb);
    drop(mrs);
    answer(inbox, code, value);
}
