//! The namespace route: a WQE to a QP of another process of the shared namespace, the
//! engine's side of it (`crate::shared`: inbox, exports, process-to-process copies;
//! reached through `crate::transport`). The requester's side ([`requester`]) sends a
//! request, keeps the WQE in flight, completes it when the answer comes and gives up
//! when the owner died; the responder's ([`responder`]) runs a request through the
//! engine's `respond` with a process-to-process data mover (`mover`, which XRC
//! forwarding uses too) and answers. The engine reaches it only through the route
//! interface (`engine::route`, whose contract is in `crate::transport`).

use std::sync::Mutex;

use crate::engine::qp::remote_state::{InFlight, Link, RespSeq};
use crate::engine::Tables;
use crate::shared::inbox::{Kind, Record, F_SOLICITED, F_XRC, XRC_SRQN_SHIFT};
use crate::shared::{Ack, Shared};
use crate::wqe::{Datagram, SendWqe, Sges};

mod direct;
mod mover;
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

/// The request `rec` carries, as the engine's `respond` checks and executes it (at
/// the responder, and at an XRC SRQ's owner for a forwarded request); `ud` for a
/// datagram. No local buffers: the data comes through the mover.
fn request_of(rec: &Record, ud: Option<Datagram>) -> SendWqe {
    SendWqe {
        wr_id: 0,
        opcode: rec.code,
        signaled: false,
        solicited: rec.flags & F_SOLICITED != 0,
        imm: rec.imm,
        sges: Sges::default(),
        inline: None,
        remote_addr: rec.remote_addr,
        rkey: rec.rkey,
        compare_add: rec.compare_add,
        swap: rec.swap,
        ready_at: None,
        shaped: false,
        bind: None,
        xrc_srqn: if rec.flags & F_XRC != 0 {
            rec.flags >> XRC_SRQN_SHIFT
        } else {
            0
        },
        ud,
    }
}

/// The response to request `rec` from this process, with `code` and `value`: the
/// request's QPs, connection and sequence number echoed back.
fn response_to(sh: &Shared, rec: &Record, code: u32, value: u32) -> Record {
    let mut r = Record::new(Kind::Response);
    r.code = code;
    r.value = value;
    r.from_pid = sh.me.pid;
    r.from_token = sh.me.token;
    r.src_qpn = rec.src_qpn;
    r.src_dev = rec.src_dev;
    r.dst_qpn = rec.dst_qpn;
    r.dst_dev = rec.dst_dev;
    r.conn = rec.conn;
    r.psn = rec.psn;
    r.len = 1;
    r
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
