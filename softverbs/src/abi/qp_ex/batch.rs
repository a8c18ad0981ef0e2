//! An extended QP's batch: the request being built and those finished, started by
//! `ibv_wr_start`, fed by the operations (`ops`) and setters (`setters`), and posted
//! all or nothing by `ibv_wr_complete` through `ibv_post_send`'s path.

use core::ffi::c_int;

use vqp_sys::*;

use crate::abi::object::{unchecked, QpObj};
use crate::abi::state::{Batch, Building};
use crate::provider;
use crate::qp::{SendWqe, Sges};

/// The QP behind an `ibv_qp_ex` the application was handed.
///
/// # Safety
/// `qp` is a live extended QP of this provider, not destroyed meanwhile.
unsafe fn qp_obj<'a>(qp: *mut ibv_qp_ex) -> Option<&'a QpObj> {
    // SAFETY: per the contract; the `ibv_qp_ex` starts with the `ibv_qp` handed out.
    unsafe { unchecked::<QpObj>(qp.cast()) }
}

/// Runs `f` on the QP's batch (nothing for a null QP).
///
/// # Safety
/// `qp` is a live extended QP.
unsafe fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpObj, &mut Batch)) {
    // SAFETY: per the contract.
    if let Some(q) = unsafe { qp_obj(qp) } {
        f(q, &mut crate::os::lock(&q.batch));
    }
}

/// Checks the request being built as `ibv_post_send` checks a request and moves it to
/// the finished ones (or records its error).
fn finish(q: &QpObj, b: &mut Batch) {
    let Some(cur) = b.cur.take() else {
        return;
    };
    let w = cur.wqe;
    let flags = if w.inline.is_some() {
        IBV_SEND_INLINE
    } else {
        0
    };
    if let Err(e) = q.core.check_send(w.opcode, flags, cur.sge_n) {
        return b.fail(e);
    }
    if q.core.datagram() && w.ud.is_none() {
        return b.fail(libc::EINVAL);
    }
    b.wqes.push(w);
}

/// Starts a request of `opcode` with the QP's current `wr_id` and `wr_flags`; `fill`
/// sets its operation's fields.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe fn begin(qp: *mut ibv_qp_ex, opcode: u32, fill: impl FnOnce(&mut SendWqe)) {
    // SAFETY: per the contract: `wr_id` and `wr_flags` are the application's, read here.
    let Some((wr_id, flags)) = (unsafe { qp.as_ref() }).map(|q| (q.wr_id, q.wr_flags)) else {
        return;
    };
    // SAFETY: forwarded.
    unsafe {
        with_batch(qp, |q, b| {
            finish(q, b);
            let mut wqe = SendWqe {
                wr_id,
                opcode,
                signaled: flags & IBV_SEND_SIGNALED != 0,
                solicited: flags & IBV_SEND_SOLICITED != 0,
                imm: 0,
                sges: Sges::default(),
                inline: None,
                remote_addr: 0,
                rkey: 0,
                compare_add: 0,
                swap: 0,
                ready_at: None,
                ud: None,
                shaped: false,
                bind: None,
                xrc_srqn: 0,
            };
            fill(&mut wqe);
            b.cur = Some(Building { wqe, sge_n: 0 });
        })
    }
}

/// Fails the batch with `err` (an operation this provider does not have), starting a
/// request so that the setters that follow have one to fill.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe fn refuse(qp: *mut ibv_qp_ex, opcode: u32, err: c_int) {
    // SAFETY: forwarded.
    unsafe {
        begin(qp, opcode, |_| {});
        with_batch(qp, |_, b| b.fail(err));
    }
}

/// Runs a setter on the request being built; without one the batch fails with
/// `EINVAL` (a setter before any operation).
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe fn set(
    qp: *mut ibv_qp_ex,
    f: impl FnOnce(&QpObj, &mut Building) -> Result<(), c_int>,
) {
    // SAFETY: forwarded.
    unsafe {
        with_batch(qp, |q, b| {
            let r = match b.cur.as_mut() {
                Some(cur) => f(q, cur),
                None => Err(libc::EINVAL),
            };
            if let Err(e) = r {
                b.fail(e);
            }
        })
    }
}

/// `ibv_wr_start`: begins a batch (one left open is dropped).
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { with_batch(qp, |_, b| b.clear()) }
}

/// `ibv_wr_complete`: posts the batch, all or nothing (see the module docs); 0 or the
/// errno.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { qp_obj(qp) }) else {
        return libc::EINVAL;
    };
    let mut b = crate::os::lock(&q.batch);
    finish(q, &mut b);
    let err = b.err;
    let wqes = core::mem::take(&mut b.wqes);
    b.clear();
    drop(b);
    if let Some(e) = err {
        return e;
    }
    match q.core.post_send_all(wqes) {
        Ok(queued) => {
            let p = provider::get();
            p.engine.enqueue(p, q.core.core(), queued);
            0
        }
        Err(e) => e,
    }
}

/// `ibv_wr_abort`: drops the batch; nothing is posted.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { with_batch(qp, |_, b| b.clear()) }
}
