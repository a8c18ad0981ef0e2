//! Memory windows (IBA Vol. 1 §10.6.7), as a ConnectX has them: type 1 and type 2B
//! windows, allocated and freed through `ibv_context_ops` (`alloc_mw`, `dealloc_mw`,
//! which verbs.h's inline `ibv_alloc_mw` / `ibv_dealloc_mw` call), a type 1 window
//! bound by `ibv_bind_mw` (`ops.bind_mw`), a type 2 window by an `IBV_WR_BIND_MW`
//! work request. Both kinds of bind are work requests executed in the QP's order
//! (`engine::execute`), as on mlx5, whose `mlx5_bind_mw` (`providers/mlx5/verbs.c`)
//! posts one; the window's rkey and range then answer remote requests exactly as a
//! region's do (`mem::MrTable::remote_span`, and across processes
//! `shared::exports`).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vqp_sys::*;

use super::object::{live, publish, retire, unchecked, MrObj, MwObj, PdObj};
use super::set_errno;
use crate::provider;

/// `ops.alloc_mw`: a window of type `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2` (type 2 windows
/// are type 2B, as on ConnectX: bound to a QP). Its `rkey` names it but grants nothing
/// until it is bound. Null with `errno` `EINVAL` for another type or a PD that does
/// not exist, `ENOMEM` when the key table is full.
///
/// # Safety
/// `pd` is null or a pointer this provider handed out (checked in the registry).
pub(super) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: c_uint) -> *mut ibv_mw {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { live::<PdObj>(pd) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if type_ != IBV_MW_TYPE_1 && type_ != IBV_MW_TYPE_2 {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let key = provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .alloc_window(type_, p.core.dev, p.core.id);
    let Some(key) = key else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    p.core.users.fetch_add(1, Ordering::AcqRel);
    publish(MwObj {
        ibv: UnsafeCell::new(ibv_mw {
            context: p.ibv.context,
            pd,
            rkey: key,
            handle: key >> 8,
            type_,
        }),
        handle: key >> 8,
        pd: Arc::clone(&p.core),
    })
}

/// `ops.dealloc_mw`: frees the window; requests through its rkey fail from now on
/// (with a remote access error). `EINVAL` for a window that does not exist.
///
/// # Safety
/// No other thread uses the window during the call or after it.
pub(super) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    let m = match retire::<MwObj>(mw, |_| Ok(())) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut mrs = provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner());
    if let Ok(Some(key)) = mrs.free_window(m.get().handle) {
        // Under the table's lock, as `ibv_dereg_mr`: the slot is not reused before
        // other processes let go.
        provider::get().transport().revoke_mr(key);
    }
    drop(mrs);
    m.get().pd.users.fetch_sub(1, Ordering::AcqRel);
    m.free();
    0
}

/// `ibv_inc_rkey` (verbs.h): the next key of a window, its low 8 bits incremented.
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// `ops.bind_mw`, what verbs.h's `ibv_bind_mw` calls for a type 1 window (after its
/// own checks: type 1, no range without a region, `EPERM` for a region of another
/// PD). As mlx5's `mlx5_bind_mw`: `EINVAL` for a zero-based window, `EPERM` for a
/// region of another PD; then an `IBV_WR_BIND_MW` work request with the window's
/// next rkey (`ibv_inc_rkey`) is posted on `qp` (its errors are `ibv_post_send`'s),
/// and on success `mw->rkey` is that key at once. The binding takes effect when the
/// request executes; it completes (`IBV_WC_BIND_MW`, if signaled) or fails
/// (`IBV_WC_MW_BIND_ERR`) on the QP's send CQ. A region of null with length 0
/// unbinds the window.
///
/// # Safety
/// `qp` and `mw` are live objects of this provider; `mw_bind` is readable and its
/// region, if any, a live MR of this provider.
pub(super) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: per the contract (data-path objects are not looked up, see `data`).
    let Some(m) = (unsafe { unchecked::<MwObj>(mw) }) else {
        return libc::EINVAL;
    };
    // SAFETY: readable (contract).
    let Some(b) = (unsafe { mw_bind.as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: the window's struct; no other control call changes it meanwhile.
    let cur = unsafe { *m.ibv.get() };
    if cur.type_ != IBV_MW_TYPE_1 || b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
        return libc::EINVAL;
    }
    if !b.bind_info.mr.is_null() {
        // SAFETY: a live MR of this provider (contract).
        let Some(mr) = (unsafe { unchecked::<MrObj>(b.bind_info.mr) }) else {
            return libc::EINVAL;
        };
        if !Arc::ptr_eq(&mr.pd, &m.pd) {
            return libc::EPERM;
        }
    } else if b.bind_info.addr != 0 || b.bind_info.length != 0 {
        return libc::EINVAL;
    }
    let new_key = inc_rkey(cur.rkey);
    let mut wr = ibv_send_wr {
        wr_id: b.wr_id,
        opcode: IBV_WR_BIND_MW,
        send_flags: b.send_flags,
        ..Default::default()
    };
    wr.bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
        mw,
        rkey: new_key,
        bind_info: b.bind_info,
    };
    let mut bad = core::ptr::null_mut();
    // SAFETY: a live QP (contract); `wr` is a one-request chain living across the
    // call; `bad` is writable.
    let rc = unsafe { super::data::post_send(qp, &mut wr, &mut bad) };
    if rc == 0 {
        // SAFETY: as above: the window's struct, changed by this call only.
        unsafe { (*m.ibv.get()).rkey = new_key };
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_wraps_the_key_byte_only() {
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0x0000_0107), 0x0000_0108);
    }
}
