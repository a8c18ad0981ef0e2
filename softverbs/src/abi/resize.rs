//! Changing objects after creation: `ibv_resize_cq` and `ibv_rereg_mr`.

use core::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vqp_sys::*;

use super::object::{live, CqObj, MrObj, PdObj};
use super::pd_mr::MR_ACCESS;
use super::{set_errno, MAX_CQE};
use crate::provider;

/// `ibv_resize_cq`: the CQ holds exactly `cqe` entries from now on (1 ..= `MAX_CQE`),
/// and `cq->cqe` says so. `EINVAL` for a size out of range or smaller than the number of
/// completions outstanding — waiting to be polled, or owed by work posted on its QPs
/// and not yet completed: signaled send WQEs and receives (see `CqCore::resize`); the
/// CQ is unchanged then.
///
/// # Safety
/// `cq` is null or a live CQ of this provider, not used concurrently by another control
/// call (the data path may run).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { live::<CqObj>(cq) }) else {
        return libc::EINVAL;
    };
    if !(1..=MAX_CQE).contains(&cqe) {
        return libc::EINVAL;
    }
    let p = provider::get();
    let owed = p
        .all_qps()
        .iter()
        .map(|qp| qp.owed_to(&q.core))
        .fold(0usize, usize::saturating_add);
    if let Err(e) = q.core.resize(cqe as usize, owed) {
        return e;
    }
    // SAFETY: the `ibv_cq` is live; `cqe` is the library's to write, as libibverbs'
    // providers do on resize, and no other control call runs on it (contract).
    unsafe { (*q.ibv.get()).cqe = cqe };
    0
}

/// `enum ibv_rereg_mr_flags`: new address and length.
pub const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
/// `enum ibv_rereg_mr_flags`: new protection domain.
pub const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
/// `enum ibv_rereg_mr_flags`: new access flags.
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
/// `enum ibv_rereg_mr_err_code`: bad input; the MR is unchanged.
pub const IBV_REREG_MR_ERR_INPUT: c_int = -1;
/// `enum ibv_rereg_mr_err_code`: the device refused the change; the MR is unchanged.
pub const IBV_REREG_MR_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: changes the region's translation (`addr`, `length`), protection
/// domain and/or access flags, as `flags` says; `lkey` and `rkey` stay the same, and
/// WQEs executed from now on see the new registration.
///
/// Returns 0, or rdma-core's codes with `errno`: `IBV_REREG_MR_ERR_INPUT` (`EINVAL`) for
/// unknown flags, a translation change without an address or length, access flags
/// without `IBV_REREG_MR_CHANGE_ACCESS`, or a null MR; `IBV_REREG_MR_ERR_CMD` when the
/// new PD is not a PD of the region's device, the access flags are invalid (remote write
/// or atomic without local write), or the range overflows. On any error the MR is
/// unchanged.
///
/// # Safety
/// `mr` is null or a live MR of this provider, not used by another control call
/// meanwhile; with `IBV_REREG_MR_CHANGE_PD`, `pd` is a live PD of this provider; with a
/// translation change, the new memory follows `ibv_reg_mr`'s contract.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let supported =
        IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    let translate = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    if mr.is_null()
        || flags & !supported != 0
        || (translate && (addr.is_null() || length == 0))
        || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
    {
        set_errno(libc::EINVAL);
        return IBV_REREG_MR_ERR_INPUT;
    }
    // SAFETY: a live MR of this provider, used by no other control call (contract):
    // this call is its only user, so it may change it.
    let m = unsafe { &mut *mr.cast::<MrObj>() };
    if m.dm.is_some() {
        // A region of device memory cannot be re-registered (the kernel's
        // `ib_uverbs_rereg_mr` refuses an MR with a DM: EINVAL).
        set_errno(libc::EINVAL);
        return IBV_REREG_MR_ERR_INPUT;
    }
    let refuse = |errno| {
        set_errno(errno);
        IBV_REREG_MR_ERR_CMD
    };
    let p = provider::get();
    let mut mrs = p.mrs.write().unwrap_or_else(|e| e.into_inner());
    let Some(mut info) = mrs.get(m.ibv.lkey).copied() else {
        return refuse(libc::EINVAL);
    };
    let mut new_pd = None;
    if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        // SAFETY: per the contract.
        match unsafe { live::<PdObj>(pd) } {
            Some(q) if q.core.dev == info.dev => {
                info.pd = q.core.id;
                new_pd = Some(Arc::clone(&q.core));
            }
            _ => return refuse(libc::EINVAL),
        }
    }
    if translate {
        if (addr as u64).checked_add(length as u64).is_none() {
            return refuse(libc::EINVAL);
        }
        info.addr = addr as u64;
        info.len = length as u64;
    }
    if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        let a = access as u32;
        let remote_needs_local = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
        if a & !MR_ACCESS != 0 || (a & remote_needs_local != 0 && a & IBV_ACCESS_LOCAL_WRITE == 0) {
            return refuse(libc::EINVAL);
        }
        info.access = a;
    }
    // Windows bound in the old region grant nothing any more, and other processes let
    // go of the old region before it changes (see `ibv_dereg_mr`).
    for k in mrs.unbind_windows_of(m.ibv.lkey) {
        p.transport().revoke_mr(k);
    }
    p.transport().revoke_mr(m.ibv.lkey);
    if !mrs.update(m.ibv.lkey, info) {
        return refuse(libc::EINVAL);
    }
    p.transport().export_mr(m.ibv.lkey, &info);
    drop(mrs);
    if let Some(core) = new_pd {
        core.users.fetch_add(1, Ordering::AcqRel);
        let old = core::mem::replace(&mut m.pd, core);
        old.users.fetch_sub(1, Ordering::AcqRel);
        m.ibv.pd = pd;
    }
    if translate {
        m.ibv.addr = addr;
        m.ibv.length = length;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{
        ibv_alloc_pd, ibv_close_device, ibv_create_cq, ibv_dealloc_pd, ibv_dereg_mr,
        ibv_destroy_cq, ibv_free_device_list, ibv_get_device_list, ibv_open_device, ibv_reg_mr,
    };

    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    fn open(i: usize) -> *mut ibv_context {
        // SAFETY: null count allowed; the list holds the default devices; freed once.
        unsafe {
            let list = ibv_get_device_list(core::ptr::null_mut());
            let ctx = ibv_open_device(*list.add(i));
            ibv_free_device_list(list);
            assert!(!ctx.is_null());
            ctx
        }
    }

    #[test]
    fn resize_changes_the_capacity_and_cqe() {
        let ctx = open(0);
        // SAFETY: a live context; no channel.
        let cq = unsafe { ibv_create_cq(ctx, 4, core::ptr::null_mut(), core::ptr::null_mut(), 0) };
        assert!(!cq.is_null());
        // SAFETY: a live CQ.
        assert_eq!(unsafe { ibv_resize_cq(cq, 64) }, 0);
        // SAFETY: a live CQ.
        assert_eq!(unsafe { (*cq).cqe }, 64);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_resize_cq(cq, 0) }, libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_resize_cq(cq, MAX_CQE + 1) }, libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { (*cq).cqe }, 64, "a refused resize changes nothing");
        // SAFETY: null is refused.
        let rc = unsafe { ibv_resize_cq(core::ptr::null_mut(), 8) };
        assert_eq!(rc, libc::EINVAL);
        // SAFETY: created above, destroyed once.
        unsafe {
            assert_eq!(ibv_destroy_cq(cq), 0);
            ibv_close_device(ctx);
        }
    }

    #[test]
    fn resize_below_the_waiting_completions_is_refused() {
        let ctx = open(0);
        // SAFETY: a live context.
        let cq = unsafe { ibv_create_cq(ctx, 4, core::ptr::null_mut(), core::ptr::null_mut(), 0) };
        // SAFETY: a live CQ of this provider.
        let q = unsafe { live::<CqObj>(cq) }.unwrap();
        for i in 0..3 {
            let wc = ibv_wc {
                wr_id: i,
                ..Default::default()
            };
            assert!(q.core.push(wc, false, None));
        }
        // SAFETY: a live CQ.
        assert_eq!(unsafe { ibv_resize_cq(cq, 2) }, libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_resize_cq(cq, 3) }, 0);
        let wc = ibv_wc::default();
        assert!(
            !q.core.push(wc, false, None),
            "full at the new size: overrun"
        );
        // SAFETY: created above.
        unsafe {
            ibv_destroy_cq(cq);
            ibv_close_device(ctx);
        }
    }

    #[test]
    fn rereg_moves_the_region_keeps_the_keys_and_checks_its_input() {
        let ctx = open(1);
        // SAFETY: a live context.
        let (pd1, pd2) = unsafe { (ibv_alloc_pd(ctx), ibv_alloc_pd(ctx)) };
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 128];
        let local = IBV_ACCESS_LOCAL_WRITE as c_int;
        // SAFETY: a live PD; `a` outlives the MR.
        let mr = unsafe { ibv_reg_mr(pd1, a.as_mut_ptr().cast(), a.len(), local) };
        assert!(!mr.is_null());
        // SAFETY: a live MR.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        let flags = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD;
        // SAFETY: live MR and PD; `b` outlives the MR.
        let rc = unsafe { ibv_rereg_mr(mr, flags, pd2, b.as_mut_ptr().cast(), b.len(), 0) };
        assert_eq!(rc, 0);
        // SAFETY: a live MR.
        let m = unsafe { *mr };
        assert_eq!((m.lkey, m.rkey, m.pd, m.length), (lkey, rkey, pd2, 128));
        assert_eq!(m.addr, b.as_mut_ptr().cast());
        let info = *provider::get().mrs.read().unwrap().get(lkey).unwrap();
        assert_eq!((info.addr, info.len), (b.as_ptr() as u64, 128));
        // SAFETY: live PDs: the MR moved from pd1 to pd2.
        unsafe {
            assert_eq!(ibv_dealloc_pd(pd2), libc::EBUSY);
            assert_eq!(ibv_dealloc_pd(pd1), 0);
        }
        // Bad input: the MR stays as it was.
        let remote_only = IBV_ACCESS_REMOTE_WRITE as c_int;
        for (flags, addr, len, access, code) in [
            (8, core::ptr::null_mut(), 0, 0, IBV_REREG_MR_ERR_INPUT),
            (1, core::ptr::null_mut(), 8, 0, IBV_REREG_MR_ERR_INPUT),
            (0, core::ptr::null_mut(), 0, local, IBV_REREG_MR_ERR_INPUT),
            (
                4,
                core::ptr::null_mut(),
                0,
                remote_only,
                IBV_REREG_MR_ERR_CMD,
            ),
            (2, core::ptr::null_mut(), 0, 0, IBV_REREG_MR_ERR_CMD),
        ] {
            set_errno(0);
            // SAFETY: a live MR; the PD (for flag 2) is null and refused.
            let rc = unsafe { ibv_rereg_mr(mr, flags, core::ptr::null_mut(), addr, len, access) };
            assert_eq!((rc, errno()), (code, libc::EINVAL), "flags {flags}");
        }
        let access = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) as c_int;
        // SAFETY: a live MR.
        let rc = unsafe {
            ibv_rereg_mr(
                mr,
                IBV_REREG_MR_CHANGE_ACCESS,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                0,
                access,
            )
        };
        assert_eq!(rc, 0);
        let info = *provider::get().mrs.read().unwrap().get(lkey).unwrap();
        assert_eq!((info.access, info.len), (access as u32, 128));
        // SAFETY: null is refused.
        let rc =
            unsafe { ibv_rereg_mr(core::ptr::null_mut(), 4, pd2, core::ptr::null_mut(), 0, 1) };
        assert_eq!(rc, IBV_REREG_MR_ERR_INPUT);
        // SAFETY: created above, freed once.
        unsafe {
            assert_eq!(ibv_dereg_mr(mr), 0);
            assert_eq!(ibv_dealloc_pd(pd2), 0);
            ibv_close_device(ctx);
        }
    }
}
