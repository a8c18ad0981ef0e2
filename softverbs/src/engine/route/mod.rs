//! The route interface: where every WQE that leaves its requester goes. The engine's
//! requester side (`execute`) hands each WQE, its local buffers already checked, to
//! [`send`], which resolves where the responder QP lives ([`Route`]) and hands the WQE
//! to that route; the answers of the routes that answer later come back through
//! [`on_record`] and [`check_deadlines`]. The contract every route keeps is written in
//! `crate::transport`'s documentation ("Routes"), beside the transport they run over.
//!
//! The routes, one module each, none naming another:
//! - `process`: the responder QP is in this process; the requester's thread runs the
//!   responder;
//! - `namespace`: the responder QP belongs to another process of the shared namespace
//!   (or to nobody there); requests go through that process's inbox, or are executed
//!   directly for one-sided operations;
//! - `ucx`: the responder QP is on another machine (a RoCE port's destination GID that
//!   no device of the namespace has); requests travel as UCX active messages to the
//!   process serving it, whose responder runs them and answers ([`serve_machine`]).
//!
//! A route is a variant of an enum, not a trait object: the per-WQE dispatch is one
//! match that the compiler sees through (no dynamic call on the data path).

use std::sync::Arc;

use super::complete::{complete, fail, unanswered};
use super::qp::{QpCore, QpInner};
use super::{Step, Tables};
use crate::mem::{MrTable, Span};
use crate::shared::inbox::Record;
use crate::shared::{Ack, Shared};
use crate::wqe::SendWqe;
use vqp_sys::IBV_WC_RETRY_EXC_ERR;

mod namespace;
mod process;
mod ucx;

/// Where the responder QP of a WQE lives.
pub(crate) enum Route {
    /// In this process: the QP itself (a QP connected to itself is its own responder).
    Process(Arc<QpCore>),
    /// Not in this process: QP `qpn` of device `dev`, looked up in the shared
    /// namespace (another process's, or nobody's).
    Namespace { dev: usize, qpn: u32 },
    /// On another machine: QP `qpn` at RoCE GID `gid`, which names no device of this
    /// process or of the shared namespace, addressed from a RoCE port.
    Machine { gid: [u8; 16], qpn: u32 },
    /// Nowhere: the address names no device, or a link on the way is down. The
    /// request is lost, and ends at once: `IBV_WC_RETRY_EXC_ERR` for an RC requester
    /// (nothing could answer its retries), completed for an unreliable one.
    Nowhere,
}

/// Where WQE `w` of `qp` (locked as `g`) goes: a datagram to the QP its address handle
/// names, a connected QP's to the QP it is connected to (cached in `g.peer`).
#[inline(always)]
pub(crate) fn resolve<P: Tables>(p: &P, qp: &QpCore, g: &mut QpInner, w: &SendWqe) -> Route {
    let devices = p.devices();
    let local_up = devices[qp.dev].is_up();
    let (dev, qpn) = match &w.ud {
        Some(d) => {
            let Some(dev) = d.dev.filter(|&dv| local_up && devices[dv].is_up()) else {
                if d.dev.is_none() && d.global && local_up {
                    return machine_datagram(&devices[qp.dev], w, d.qpn);
                }
                return Route::Nowhere;
            };
            if let Some(b) = p.find_qp(dev, d.qpn) {
                return Route::Process(b);
            }
            (dev, d.qpn)
        }
        None => {
            if let Some(b) = peer(p, g).filter(|b| local_up && devices[b.dev].is_up()) {
                return Route::Process(b);
            }
            match p.resolve_av(&g.attr.ah_attr) {
                Some(dev) if local_up && devices[dev].is_up() => (dev, g.attr.dest_qp_num),
                None if local_up => return machine(&devices[qp.dev], &g.attr),
                _ => return Route::Nowhere,
            }
        }
    };
    Route::Namespace { dev, qpn }
}

/// Where a connected QP of device `dev` goes when its address names no device of the
/// namespace: to another machine when the address is a GID and the port a RoCE port
/// (whose GIDs are its interface's addresses, reachable beyond this machine); nowhere
/// for an InfiniBand port, whose fabric is this machine's.
#[cold]
fn machine(dev: &crate::device::Device, attr: &vqp_sys::ibv_qp_attr) -> Route {
    if dev.roce().is_none() || attr.ah_attr.is_global == 0 {
        return Route::Nowhere;
    }
    Route::Machine {
        gid: *vqp_sys::Gid::from_sys(&attr.ah_attr.grh.dgid).as_bytes(),
        qpn: attr.dest_qp_num,
    }
}

/// Where a datagram of device `dev` goes when its address handle's GID names no device
/// of the namespace: to another machine from a RoCE port (the GID recorded in the WQE,
/// `SendWqe::remote_dgid`), nowhere from an InfiniBand one.
#[cold]
fn machine_datagram(dev: &crate::device::Device, w: &SendWqe, qpn: u32) -> Route {
    if dev.roce().is_none() {
        return Route::Nowhere;
    }
    Route::Machine {
        gid: w.remote_dgid(),
        qpn,
    }
}

/// Resolves (and caches) the QP of this process that `g`'s QP is connected to.
#[inline]
fn peer<P: Tables>(p: &P, g: &mut QpInner) -> Option<Arc<QpCore>> {
    if let Some(b) = g.peer.upgrade() {
        if b.qpn == g.attr.dest_qp_num {
            return Some(b);
        }
    }
    let dev = p.resolve_av(&g.attr.ah_attr)?;
    let b = p.find_qp(dev, g.attr.dest_qp_num)?;
    g.peer = Arc::downgrade(&b);
    Some(b)
}

/// Hands WQE `w` of `qp` (locked as `g`; `local` its checked buffers, or its inline
/// data; `len` bytes) to the route its responder QP is on. What it returns is the
/// engine's [`Step`]: done (completed, or in flight on a route that answers later),
/// back at the head of the send queue after a delay, or failed.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn send<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    mrs: &MrTable,
    w: SendWqe,
    local: &[Span<'_>],
    len: u64,
) -> Step {
    match resolve(p, qp, g, &w) {
        Route::Process(b) => match process::deliver(p, qp, &b, g, mrs, &w, local, len) {
            Ok(step) => step,
            Err(process::Again::Rnr(delay)) => {
                g.sq.push_front(w);
                Step::Rnr(delay)
            }
            Err(process::Again::Unanswered) => unanswered(qp, g, w),
        },
        Route::Namespace { dev, qpn } => namespace::send(p, qp, g, w, local, len, dev, qpn),
        Route::Machine { gid, qpn } => ucx::send(p, qp, g, w, local, len, gid, qpn),
        // Requests of the QP still in flight to another machine (its port went down
        // under them) end first, in order.
        Route::Nowhere if g.remote.machine_watched => ucx::lost_under(qp, g, w),
        Route::Nowhere => lost(qp, g, &w),
    }
}

/// A request no route can carry: completed for an unreliable requester, which waits
/// for no answer; `IBV_WC_RETRY_EXC_ERR` for a reliable one, as when its retries run
/// out (nothing can answer them).
fn lost(qp: &QpCore, g: &mut QpInner, w: &SendWqe) -> Step {
    if qp.unreliable() {
        return complete(qp, g, w, 0);
    }
    fail(qp, g, w, IBV_WC_RETRY_EXC_ERR, None);
    Step::Failed
}

/// The namespace route's way in: one record of this process's inbox (a request from
/// another process, the answer to one of ours, an XRC forward); an answer may be left
/// in `ack` for the namespace to send (see [`Ack`]).
pub(crate) fn on_record<P: Tables>(
    p: &'static P,
    sh: &'static Shared,
    rec: Record,
    payload: &[u8],
    ack: &mut Option<Ack>,
) {
    namespace::handle(p, sh, rec, payload, ack);
}

/// The service thread's turn for other machines (the UCX route's messages and timer;
/// `device_of` names the device of a RoCE GID for the lookups answered; `polling`: a
/// polling thread serves in the machine thread's stead). Returns when to look again:
/// `None` when nothing is going on with other machines.
pub(crate) fn serve_machine<P: Tables>(
    p: &'static P,
    device_of: impl Fn(&[u8; 16]) -> Option<usize>,
    polling: bool,
) -> Option<std::time::Duration> {
    ucx::serve_machine(p, device_of, polling)
}

/// Ends the requests in flight on a route that answers later whose responder died
/// (the namespace's service thread calls it). Returns whether any QP is still
/// watched.
pub(crate) fn check_deadlines<P: Tables>(p: &P, sh: &Shared) -> bool {
    namespace::check_deadlines(p, sh)
}
