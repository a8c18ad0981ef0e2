//! Protection domains and memory regions: `ibv_alloc_pd` / `ibv_dealloc_pd` and the
//! `ibv_reg_mr` family / `ibv_dereg_mr`.

use core::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vqp_sys::*;

use super::object::{ctx, live, publish, retire, MrObj, PdCore, PdObj};
use super::set_errno;
use crate::mem::MrInfo;
use crate::provider;

/// `ibv_alloc_pd`.
///
/// # Safety
/// `context` is a live context of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let id = provider::get().next_id();
    publish(PdObj {
        ibv: ibv_pd {
            context,
            handle: id,
        },
        core: Arc::new(PdCore {
            id,
            dev: c.core.dev,
            users: Default::default(),
        }),
        parent: None,
    })
}

/// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs or parent domains use it; `EINVAL` for a
/// PD that is not allocated (deallocated already, or never allocated here). A parent
/// domain is deallocated here too, releasing its protection and thread domains.
///
/// # Safety
/// No other thread uses the PD during the call or after it succeeds.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    let busy = |p: &PdObj| {
        if p.core.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match retire::<PdObj>(pd, busy) {
        Ok(p) => {
            if let Some(parent) = &p.get().parent {
                parent.pd.users.fetch_sub(1, Ordering::AcqRel);
                if let Some(td) = &parent.td {
                    td.fetch_sub(1, Ordering::AcqRel);
                }
            }
            p.free();
            0
        }
        Err(e) => e,
    }
}

/// Access bits `ibv_reg_mr` (and `ibv_rereg_mr`) accepts.
pub(super) const MR_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB
    | IBV_ACCESS_RELAXED_ORDERING;

/// `ibv_reg_mr`: registers `[addr, addr + length)`. Remote write or atomic access
/// without local write is `EINVAL`, as the specification requires.
///
/// With `IBV_ACCESS_ON_DEMAND` the region is on-demand paging: its pages need not be
/// mapped while it is registered; an access to a range not mapped (or not with the
/// access) at that moment fails as a NIC's would (a local protection error for a
/// local buffer, a remote access error at the responder) rather than fault the
/// process (see `abi::odp`). `addr` null with `length`
/// `SIZE_MAX` and `IBV_ACCESS_ON_DEMAND` registers the whole address space (implicit
/// ODP, as mlx5 has it: `mlx5_ib_reg_user_mr` takes `start == 0` and `length ==
/// U64_MAX` for it); its lkey and rkey are good for any address.
///
/// # Safety
/// `pd` is a live PD; the memory stays valid (mapped, readable and writable as the
/// access flags allow) until [`ibv_dereg_mr`], unless the region is on-demand (then
/// any part may be unmapped or protected, except under an atomic while it runs).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { live::<PdObj>(pd) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let access = access as u32;
    let remote_needs_local = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    let implicit = super::odp::implicit(addr, length, access);
    if length == 0
        || (addr.is_null() && !implicit)
        || access & !MR_ACCESS != 0
        || (access & remote_needs_local != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0)
        || (addr as u64).checked_add(length as u64).is_none()
    {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let info = MrInfo {
        addr: addr as u64,
        len: length as u64,
        access,
        dev: p.core.dev,
        pd: p.core.id,
        qpn: 0,
    };
    let key = provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .register(info);
    let Some(key) = key else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    provider::get().transport().export_mr(key, &info);
    p.core.users.fetch_add(1, Ordering::AcqRel);
    publish(MrObj {
        ibv: ibv_mr {
            // SAFETY: a live PD (contract).
            context: unsafe { (*pd).context },
            pd,
            addr,
            length,
            handle: key,
            lkey: key,
            rkey: key,
        },
        pd: Arc::clone(&p.core),
        dm: None,
    })
}

/// `ibv_reg_mr_iova2`: only `iova == addr` is supported (`EOPNOTSUPP` otherwise).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    if iova != addr as u64 {
        set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    }
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr(pd, addr, length, access as c_int) }
}

/// `ibv_reg_mr_iova`: as [`ibv_reg_mr_iova2`].
///
/// # Safety
/// As [`ibv_reg_mr`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

/// `ibv_dereg_mr`. WQEs that reach the region afterwards fail with a protection error,
/// as do requests through memory windows bound in it (they are unbound).
/// `EINVAL` for a region that is not registered (deregistered already, or never
/// registered here): the key table and the PD's count are left alone.
///
/// # Safety
/// No other thread uses the MR during the call or after it.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    let m = match retire::<MrObj>(mr, |_| Ok(())) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut mrs = provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner());
    // Under the table's lock, so the slot is not reused before other processes let go.
    // Windows bound in the region go with it (a NIC fails accesses through them).
    for k in mrs.unbind_windows_of(m.get().ibv.lkey) {
        provider::get().transport().revoke_mr(k);
    }
    provider::get().transport().revoke_mr(m.get().ibv.lkey);
    mrs.deregister(m.get().ibv.lkey);
    drop(mrs);
    m.get().pd.users.fetch_sub(1, Ordering::AcqRel);
    if let Some(dm) = &m.get().dm {
        dm.fetch_sub(1, Ordering::AcqRel);
    }
    m.free();
    0
}

/// Whether `pd` is a live parent domain (`ibv_alloc_parent_domain`).
///
/// # Safety
/// No other thread deallocates `pd` during the call.
pub(super) unsafe fn is_parent_domain(pd: *mut ibv_pd) -> bool {
    // SAFETY: per the contract.
    unsafe { live::<PdObj>(pd) }.is_some_and(|p| p.parent.is_some())
}
