//! The operations of an extended QP's batch (`ibv_wr_send`, `ibv_wr_rdma_write`, …):
//! each starts a request with the QP's `wr_id` and `wr_flags` of that moment; those this
//! provider does not have fail the batch with `EOPNOTSUPP`.

use core::ffi::c_void;

use vqp_sys::*;

use super::batch::{begin, refuse, set};
use crate::abi::object::{unchecked, MrObj, MwObj};
use crate::mem::BindRequest;

/// `ibv_wr_send`.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { begin(qp, IBV_WR_SEND, |_| {}) }
}

/// `ibv_wr_send_imm`.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: __be32) {
    // SAFETY: forwarded.
    unsafe { begin(qp, IBV_WR_SEND_WITH_IMM, |w| w.imm = imm_data) }
}

/// `ibv_wr_rdma_write`.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
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
pub(super) unsafe extern "C" fn wr_rdma_write_imm(
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
pub(super) unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
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
pub(super) unsafe extern "C" fn wr_atomic_cmp_swp(
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
pub(super) unsafe extern "C" fn wr_atomic_fetch_add(
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
pub(super) unsafe extern "C" fn wr_bind_mw(
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
pub(super) unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: forwarded. The key travels where `ibv_send_wr` has it, in the union it
    // shares with the immediate data.
    unsafe { begin(qp, IBV_WR_LOCAL_INV, |w| w.imm = invalidate_rkey) }
}

/// `ibv_wr_send_inv`: a SEND that invalidates `invalidate_rkey` at the responder.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: forwarded, as `wr_local_inv`.
    unsafe { begin(qp, IBV_WR_SEND_WITH_INV, |w| w.imm = invalidate_rkey) }
}

/// `ibv_wr_send_tso`: no TSO (raw packet QPs); `EOPNOTSUPP` at `ibv_wr_complete`.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_send_tso(
    qp: *mut ibv_qp_ex,
    _hdr: *mut c_void,
    _hdr_sz: u16,
    _mss: u16,
) {
    // SAFETY: forwarded.
    unsafe { refuse(qp, IBV_WR_TSO, libc::EOPNOTSUPP) }
}

/// `ibv_wr_atomic_write`: not an operation of this provider; `EOPNOTSUPP` at
/// `ibv_wr_complete`.
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    _rkey: u32,
    _remote_addr: u64,
    _atomic_wr: *const c_void,
) {
    // SAFETY: forwarded.
    unsafe { refuse(qp, IBV_WR_ATOMIC_WRITE, libc::EOPNOTSUPP) }
}
