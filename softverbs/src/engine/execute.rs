//! The requester's side: running a QP's send queue, one WQE at a time, and completing
//! each (or failing the QP).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use vqp_sys::*;

use super::complete::{complete, fail};
use super::{Step, Tables};
use crate::engine::qp::{QpCore, QpInner, QP_FATAL};
use crate::mem::{self, MrTable, Span};
use crate::transport::Transport;
use crate::wqe::{SendWqe, MAX_MSG, MAX_SGE, UD_MTU};

/// Executes up to `n` WQEs from the head of `qp`'s send queue. Returns how many ran
/// and, when the QP stalled (RNR back-off, delay), the instant it may continue.
pub(super) fn run<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    n: u32,
    now: &mut Option<Instant>,
) -> (u32, Option<Instant>) {
    let mut g = qp.lock();
    if g.state != IBV_QPS_RTS {
        // ERR: already flushed; RESET: queues cleared. The entry was stale.
        return (0, None);
    }
    if let Some(t) = g.not_before {
        let cur = *now.get_or_insert_with(Instant::now);
        if cur < t {
            return (0, Some(t));
        }
        g.not_before = None;
    }
    let mrs = p.mrs().read().unwrap_or_else(|e| e.into_inner());
    let mut done = 0;
    while done < n {
        let Some(head) = g.sq.front() else {
            break;
        };
        if let Some(t) = head.ready_at {
            let cur = *now.get_or_insert_with(Instant::now);
            if cur < t {
                return (done, Some(t));
            }
        }
        if !head.shaped && p.devices()[qp.dev].link.rate() != 0 {
            // A rated link: the WQE executes (and completes) once its bytes crossed it.
            let len = head.wire_len();
            let cur = *now.get_or_insert_with(Instant::now);
            let until = p.devices()[qp.dev].link.reserve(len, cur);
            if let Some(h) = g.sq.front_mut() {
                h.shaped = true;
                if let Some(t) = until.filter(|&t| t > cur) {
                    h.ready_at = Some(t);
                    return (done, Some(t));
                }
            }
        }
        let Some(mut w) = g.sq.pop_front() else {
            break;
        };
        if g.executed >= qp.fail_after.load(Ordering::Relaxed) {
            g.executed += 1;
            fail(qp, &mut g, &w, IBV_WC_RETRY_EXC_ERR, Some(QP_FATAL));
            done += 1;
            break;
        }
        // The local buffers' checked spans, filled by `prepare`. The WQE goes from the
        // queue to its route with no copy in between (a move through one more frame
        // costs a copy of the WQE: about 30 instructions).
        let mut local_buf: [Span<'_>; MAX_SGE as usize] = [Span::empty(); MAX_SGE as usize];
        let step = match prepare(p, qp, &mut g, &mrs, &mut w, &mut local_buf) {
            Prepared::Send { n_local, len } => {
                super::route::send(p, qp, &mut g, &mrs, w, &local_buf[..n_local], len)
            }
            Prepared::Ended(step) => step,
        };
        match step {
            Step::Done => {
                g.executed += 1;
                done += 1;
            }
            Step::Rnr(delay) => {
                let at = *now.get_or_insert_with(Instant::now) + delay;
                g.not_before = Some(at);
                return (done, Some(at));
            }
            Step::Failed => {
                g.executed += 1;
                done += 1;
                break;
            }
        }
    }
    (done, None)
}

/// What [`prepare`] made of a WQE.
enum Prepared {
    /// Ready for its route: the first `n_local` spans hold its checked local buffers;
    /// `len` bytes.
    Send { n_local: usize, len: u64 },
    /// Executed here (a local operation) or failed its local checks.
    Ended(Step),
}

/// Executes what of WQE `w`, popped from `qp`'s send queue, stays at the requester: a
/// local operation (bind, local invalidation) entirely; for the others the checks of
/// its local buffers (into `local_buf`) and length, and a datagram's MTU and Q_Key.
fn prepare<'t, P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    mrs: &'t MrTable,
    w: &mut SendWqe,
    local_buf: &mut [Span<'t>; MAX_SGE as usize],
) -> Prepared {
    match w.opcode {
        IBV_WR_BIND_MW => return Prepared::Ended(bind(p.engine().transport(), qp, g, mrs, w)),
        IBV_WR_LOCAL_INV => {
            return Prepared::Ended(local_invalidate(p.engine().transport(), qp, g, mrs, w))
        }
        _ => {}
    }
    // Local buffers first: a bad lkey never leaves the requester.
    let need_local = match w.opcode {
        IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            IBV_ACCESS_LOCAL_WRITE
        }
        _ => 0,
    };
    let mut n_local = 0;
    if w.inline.is_none() {
        for s in w.sges.as_slice() {
            match mrs.span(
                s.lkey,
                qp.dev,
                qp.pd,
                s.addr,
                u64::from(s.length),
                need_local,
            ) {
                Ok(span) if n_local < local_buf.len() => {
                    local_buf[n_local] = span;
                    n_local += 1;
                }
                _ => {
                    fail(qp, g, w, IBV_WC_LOC_PROT_ERR, None);
                    return Prepared::Ended(Step::Failed);
                }
            }
        }
    }
    let len = match &w.inline {
        Some(d) => d.len() as u64,
        None => mem::total(&local_buf[..n_local]),
    };
    if len > MAX_MSG {
        fail(qp, g, w, IBV_WC_LOC_LEN_ERR, None);
        return Prepared::Ended(Step::Failed);
    }
    if let Some(d) = w.ud {
        // A datagram is one packet: at most the port's active MTU (a RoCE port's
        // follows its interface).
        if len > UD_MTU.min(128 << p.devices()[qp.dev].active_mtu()) {
            fail(qp, g, w, IBV_WC_LOC_LEN_ERR, None);
            return Prepared::Ended(Step::Failed);
        }
        // A Q_Key with the high bit set means the sending QP's own (IBA Vol. 1
        // §10.2.5). The datagram then goes to its route, which delivers it to a QP of
        // this process or of another, or loses it; unacknowledged, the send completes
        // successfully whatever the receiver made of it.
        w.rkey = if d.qkey & 0x8000_0000 != 0 {
            g.attr.qkey
        } else {
            d.qkey
        };
    }
    Prepared::Send { n_local, len }
}

/// Executes bind request `w`: binds its window (see `MrTable::bind_window`), withdraws
/// the key it answered to from other processes and publishes the new one; completes
/// with `IBV_WC_BIND_MW`, or fails with `IBV_WC_MW_BIND_ERR` (as the kernel's
/// `rdma_rxe` reports a bind its checks refuse), the QP going to error as with any
/// completion in error.
fn bind(t: &Transport, qp: &QpCore, g: &mut QpInner, mrs: &MrTable, w: &SendWqe) -> Step {
    let Some(r) = w.bind.as_deref() else {
        fail(qp, g, w, IBV_WC_MW_BIND_ERR, None);
        return Step::Failed;
    };
    match mrs.bind_window(r) {
        Ok(r) => {
            if let Some(k) = r.old {
                t.revoke_mr(k);
            }
            if let Some((k, info)) = r.new {
                t.export_mr(k, &info);
            }
            complete(qp, g, w, 0)
        }
        Err(_) => {
            fail(qp, g, w, IBV_WC_MW_BIND_ERR, None);
            Step::Failed
        }
    }
}

/// Executes `IBV_WR_LOCAL_INV` `w`: invalidates the type 2 window bound under the
/// rkey it names (a window of the QP's PD; type 1 windows and regions cannot be
/// invalidated: o10-37.2.26). A key that names none fails the request with
/// `IBV_WC_LOC_QP_OP_ERR`, as `rdma_rxe` reports a failed local invalidation.
fn local_invalidate(
    t: &Transport,
    qp: &QpCore,
    g: &mut QpInner,
    mrs: &MrTable,
    w: &SendWqe,
) -> Step {
    match mrs.invalidate(w.imm, qp.pd, None) {
        Ok(()) => {
            t.revoke_mr(w.imm);
            complete(qp, g, w, 0)
        }
        Err(_) => {
            fail(qp, g, w, IBV_WC_LOC_QP_OP_ERR, None);
            Step::Failed
        }
    }
}
