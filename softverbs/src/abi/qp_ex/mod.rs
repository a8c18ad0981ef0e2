//! Extended QPs: `verbs_context.create_qp_ex` (verbs.h's `ibv_create_qp_ex`) and the
//! `ibv_wr_*` posting functions in the `ibv_qp_ex` of a QP created with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (`ibv_qp_to_qp_ex` finds it).
//!
//! A batch (`ibv_wr_start` … `ibv_wr_complete`) feeds the same posting path as
//! `ibv_post_send`: each operation (`ibv_wr_send`, `ibv_wr_rdma_write`, …) starts a work
//! request with the QP's `wr_id` and `wr_flags` of that moment, the setters
//! (`ibv_wr_set_sge`, `ibv_wr_set_inline_data`, `ibv_wr_set_ud_addr`, …) complete it, and
//! `ibv_wr_complete` posts the whole batch or nothing: the first error a request met
//! (the errno `ibv_post_send` would have returned for it: `EINVAL`, `ENOMEM`), or the
//! state or room of the QP, fails it. `ibv_wr_abort` posts nothing. As in mlx5, the
//! functions of every operation of the QP's type are filled whatever `send_ops_flags`
//! named.

use core::ffi::{c_int, c_void};

use vqp_sys::*;

use super::object::{live, unchecked, AhObj, MrObj, MwObj, PdObj, QpObj};
use super::set_errno;
use super::state::{Batch, Building};
use crate::mem::BindRequest;
use crate::provider;
use crate::qp::{Datagram, SendWqe, Sges};

/// Send operations `ibv_create_qp_ex` accepts per QP type: those of mlx5
/// (`MLX5_SUPPORTED_SEND_OPS_FLAGS_RC` / `_XRC` / `_UC` / `_UD`, `providers/mlx5/qp.c`;
/// XRC's are RC's), the memory-window operations (`LOCAL_INV`, `BIND_MW`,
/// `SEND_WITH_INV`) included.
fn send_ops_allowed(qp_type: u32) -> u64 {
    let mw = IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
    let uc = IBV_QP_EX_WITH_SEND
        | IBV_QP_EX_WITH_SEND_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | mw;
    match qp_type {
        IBV_QPT_RC | IBV_QPT_XRC_SEND => {
            uc | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
        }
        IBV_QPT_UC => uc,
        IBV_QPT_UD => IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
        _ => 0,
    }
}

/// `verbs_context.create_qp_ex`: `ibv_create_qp` with `attr.pd` (required:
/// `IBV_QP_INIT_ATTR_PD`; a parent domain goes too) and, with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, an extended QP; an XRC receive QP
/// (`IBV_QPT_XRC_RECV`) takes `attr.xrcd` instead (`xrc::create_recv_qp`). `EINVAL`
/// without a PD, with creation flags, or with `send_ops_flags` 0; `EOPNOTSUPP` for RSS,
/// TSO and indirection tables, and for send operations the QP type does not have. Writes the
/// granted sizes back into `attr.cap`.
///
/// # Safety
/// `context` is a live context; `attr` readable and writable; its objects not
/// destroyed during the call.
pub(super) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: readable and writable (contract).
    let Some(a) = (unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let unsupported =
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & unsupported != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !(known | unsupported) != 0
        || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
    {
        return fail(libc::EINVAL);
    }
    if a.qp_type == IBV_QPT_XRC_RECV {
        // No PD and no send queue: an XRC receive QP lives in its domain.
        if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        // SAFETY: per the contract.
        return unsafe { super::xrc::create_recv_qp(context, a) };
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract (the PD is not deallocated during the call).
    match unsafe { live::<PdObj>(a.pd) } {
        Some(p) if p.ibv.context == context => {}
        _ => return fail(libc::EINVAL),
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        if a.send_ops_flags == 0 {
            return fail(libc::EINVAL);
        }
        if a.send_ops_flags & !send_ops_allowed(a.qp_type) != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        a.send_ops_flags
    } else {
        0
    };
    let mut init = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    // SAFETY: `init` is a local; the objects it names are the caller's (contract).
    let qp = unsafe { super::qp::create(a.pd, &mut init, send_ops, fill) };
    if !qp.is_null() {
        a.cap = init.cap;
    }
    qp
}

/// Fills an extended QP's posting functions.
pub(super) fn fill(x: &mut ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_send_inv = Some(wr_send_inv);
    // Operations the provider has no counterpart of (TSO on raw packet QPs, XRC, the
    // atomic write): the batch fails with `EOPNOTSUPP`.
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_atomic_write = Some(wr_atomic_write);
}

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
unsafe fn begin(qp: *mut ibv_qp_ex, opcode: u32, fill: impl FnOnce(&mut SendWqe)) {
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
unsafe fn refuse(qp: *mut ibv_qp_ex, opcode: u32, err: c_int) {
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
unsafe fn set(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpObj, &mut Building) -> Result<(), c_int>) {
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
unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { with_batch(qp, |_, b| b.clear()) }
}

/// `ibv_wr_complete`: posts the batch, all or nothing (see the module docs); 0 or the
/// errno.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
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
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { with_batch(qp, |_, b| b.clear()) }
}

/// `ibv_wr_send`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { begin(qp, IBV_WR_SEND, |_| {}) }
}

/// `ibv_wr_send_imm`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: __be32) {
    // SAFETY: forwarded.
    unsafe { begin(qp, IBV_WR_SEND_WITH_IMM, |w| w.imm = imm_data) }
}

/// `ibv_wr_rdma_write`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: forwarded.
    unsafe {
        begin(qp, IBV_WR_RDMA_WRITE, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
        })
    }
}

/// `ibv_wr_rdma_write_imm`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: __be32,
) {
    // SAFETY: forwarded.
    unsafe {
        begin(qp, IBV_WR_RDMA_WRITE_WITH_IMM, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            w.imm = imm_data;
        })
    }
}

/// `ibv_wr_rdma_read`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: forwarded.
    unsafe {
        begin(qp, IBV_WR_RDMA_READ, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
        })
    }
}

/// `ibv_wr_atomic_cmp_swp`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: forwarded.
    unsafe {
        begin(qp, IBV_WR_ATOMIC_CMP_AND_SWP, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            w.compare_add = compare;
            w.swap = swap;
        })
    }
}

/// `ibv_wr_atomic_fetch_add`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    // SAFETY: forwarded.
    unsafe {
        begin(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            w.compare_add = add;
        })
    }
}

/// `ibv_wr_bind_mw`: binds type 2 window `mw` with key `rkey` as
/// `bind_info` says (an `IBV_WR_BIND_MW` request, as `ibv_post_send` takes it); a
/// null window fails the batch with `EINVAL` at `ibv_wr_complete`.
///
/// # Safety
/// `qp` is a live extended QP; `mw` a window of this provider (or null) and
/// `bind_info` readable, as for `ibv_post_send`'s `bind_mw`.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    // SAFETY: forwarded; `bind_info` is readable (contract).
    unsafe {
        begin(qp, IBV_WR_BIND_MW, |_| {});
        set(qp, |q, cur| {
            let info = bind_info.as_ref().ok_or(libc::EINVAL)?;
            let window = unchecked::<MwObj>(mw).ok_or(libc::EINVAL)?;
            let mr = unchecked::<MrObj>(info.mr).map(|m| m.ibv.lkey);
            cur.wqe.bind = Some(Box::new(BindRequest {
                handle: window.handle,
                new_key: rkey,
                mr,
                addr: info.addr,
                len: info.length,
                access: info.mw_access_flags,
                dev: q.core.dev,
                pd: q.core.pd,
                qpn: q.core.qpn,
            }));
            Ok(())
        })
    }
}

/// `ibv_wr_local_inv`: invalidates the window (or region) of `invalidate_rkey`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: forwarded. The key travels where `ibv_send_wr` has it, in the union it
    // shares with the immediate data.
    unsafe { begin(qp, IBV_WR_LOCAL_INV, |w| w.imm = invalidate_rkey) }
}

/// `ibv_wr_send_inv`: a SEND that invalidates `invalidate_rkey` at the responder.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: forwarded, as `wr_local_inv`.
    unsafe { begin(qp, IBV_WR_SEND_WITH_INV, |w| w.imm = invalidate_rkey) }
}

/// `ibv_wr_send_tso`: no TSO (raw packet QPs); `EOPNOTSUPP` at `ibv_wr_complete`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    // SAFETY: forwarded.
    unsafe { refuse(qp, IBV_WR_TSO, libc::EOPNOTSUPP) }
}

/// `ibv_wr_atomic_write`: not an operation of this provider; `EOPNOTSUPP` at
/// `ibv_wr_complete`.
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    _rkey: u32,
    _remote_addr: u64,
    _atomic_wr: *const c_void,
) {
    // SAFETY: forwarded.
    unsafe { refuse(qp, IBV_WR_ATOMIC_WRITE, libc::EOPNOTSUPP) }
}

/// `ibv_wr_set_xrc_srqn`: the remote SRQ an XRC send QP's request goes to (`EINVAL`
/// at complete on a QP of another type, where mlx5 has no such setter).
///
/// # Safety
/// `qp` is a live extended QP.
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |q, cur| {
            if q.core.qp_type != IBV_QPT_XRC_SEND {
                return Err(libc::EINVAL);
            }
            cur.wqe.xrc_srqn = remote_srqn;
            Ok(())
        })
    }
}

/// `ibv_wr_set_sge`: the request's one SGE.
///
/// # Safety
/// `qp` is a live extended QP; the buffer stays registered until the request completes.
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: forwarded.
    unsafe {
        set(qp, |_, cur| {
            cur.wqe.sges = Sges::from_slice(&[sge]);
            cur.wqe.inline = None;
            cur.sge_n = 1;
            Ok(())
        })
    }
}

/// `ibv_wr_set_sge_list`: the request's SGEs (`ENOMEM` at complete for more than the
/// QP's `max_send_sge`, as `ibv_post_send`; `EINVAL` for a null list).
///
/// # Safety
/// `qp` is a live extended QP; `sg_list` holds `num_sge` entries.
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |q, cur| {
            if num_sge > q.core.cap.max_send_sge as usize {
                return Err(libc::ENOMEM);
            }
            let list: &[ibv_sge] = if num_sge == 0 {
                &[]
            } else if sg_list.is_null() {
                return Err(libc::EINVAL);
            } else {
                // SAFETY: `num_sge` entries (contract), at most `max_send_sge`.
                core::slice::from_raw_parts(sg_list, num_sge)
            };
            cur.wqe.sges = Sges::from_slice(list);
            cur.wqe.inline = None;
            cur.sge_n = num_sge as u32;
            Ok(())
        })
    }
}

/// Copies inline pieces (`ENOMEM` beyond the QP's `max_inline_data`, as
/// `ibv_post_send`; `EINVAL` for a null piece with a length).
///
/// # Safety
/// Each piece's buffer is readable for its length.
unsafe fn set_inline(q: &QpObj, cur: &mut Building, pieces: &[ibv_data_buf]) -> Result<(), c_int> {
    let total = pieces
        .iter()
        .fold(0u64, |t, p| t.saturating_add(p.length as u64));
    q.core.check_inline(total)?;
    let mut data = Vec::with_capacity(total as usize);
    for p in pieces.iter().filter(|p| p.length != 0) {
        if p.addr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: readable for `length` bytes (contract); copied now, as a NIC's
        // driver copies inline data into the WQE.
        data.extend_from_slice(unsafe {
            core::slice::from_raw_parts(p.addr.cast::<u8>(), p.length)
        });
    }
    cur.wqe.inline = Some(data.into_boxed_slice());
    cur.wqe.sges = Sges::default();
    cur.sge_n = 0;
    Ok(())
}

/// `ibv_wr_set_inline_data`: the request's data, copied now.
///
/// # Safety
/// `qp` is a live extended QP; `addr` readable for `length` bytes.
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let piece = [ibv_data_buf { addr, length }];
    // SAFETY: forwarded.
    unsafe { set(qp, |q, cur| set_inline(q, cur, &piece)) }
}

/// `ibv_wr_set_inline_data_list`: the request's data from `num_buf` pieces, copied now.
///
/// # Safety
/// `qp` is a live extended QP; `buf_list` holds `num_buf` readable pieces.
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |q, cur| {
            if num_buf == 0 {
                return set_inline(q, cur, &[]);
            }
            if buf_list.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: `num_buf` pieces (contract).
            let pieces = core::slice::from_raw_parts(buf_list, num_buf);
            set_inline(q, cur, pieces)
        })
    }
}

/// `ibv_wr_set_ud_addr`: a UD request's destination (`EINVAL` at complete for a null
/// address handle).
///
/// # Safety
/// `qp` is a live extended QP; `ah` a live address handle of this provider.
unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |_, cur| {
            // SAFETY: a live address handle (contract; the data path does not consult
            // the registry, as in `ibv_post_send`).
            let Some(ah) = unchecked::<AhObj>(ah) else {
                return Err(libc::EINVAL);
            };
            cur.wqe.ud = Some(Datagram {
                dev: ah.dev,
                qpn: remote_qpn & 0x00ff_ffff,
                qkey: remote_qkey,
                global: ah.attr.is_global != 0,
                sgid_index: ah.attr.grh.sgid_index,
            });
            Ok(())
        })
    }
}

/// `ibv_qp_to_qp_ex`'s answer for a QP of this provider: its `ibv_qp_ex` when it was
/// created with send ops, otherwise null.
pub(super) fn to_qp_ex(q: &QpObj) -> *mut ibv_qp_ex {
    if q.send_ops == 0 {
        core::ptr::null_mut()
    } else {
        q.ibv.get()
    }
}
