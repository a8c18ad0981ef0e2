//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`; posting (`ops.post_srq_recv`) is in `data`. The semantics are in
//! [`crate::srq`]. XRC SRQs are made by `xrc::create_srq_ex`; destroying and posting
//! are the same for both kinds.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vqp_sys::*;

use super::object::{live, publish, retire, PdObj, SrqObj};
use super::set_errno;
use crate::srq::SrqCore;

/// `ibv_create_srq`: an SRQ of the PD's device with the sizes `srq_init_attr.attr`
/// asks for (zero raised to one; beyond `max_srq_wr`/`max_srq_sge` is `EINVAL`), the
/// granted sizes written back. `EINVAL` for a PD that does not exist.
///
/// # Safety
/// `srq_init_attr` points to a readable and writable `ibv_srq_init_attr`; no other
/// thread destroys the PD during the call.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    srq_init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: per the contract.
    let (Some(p), Some(init)) = (unsafe { live::<PdObj>(pd) }, unsafe {
        srq_init_attr.as_mut()
    }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    // SAFETY: a live PD's context is a live context of ours.
    let Some(ctx) = (unsafe { super::object::ctx((*pd).context) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let core = match SrqCore::new(p.core.dev, p.core.id, Arc::clone(&ctx.core), &init.attr) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            set_errno(e);
            return core::ptr::null_mut();
        }
    };
    init.attr = core.query();
    p.core.users.fetch_add(1, Ordering::AcqRel);
    let ibv = ibv_srq {
        // SAFETY: a live PD (contract).
        context: unsafe { (*pd).context },
        srq_context: init.srq_context,
        pd,
        handle: 0,
        // SAFETY: plain data; libibverbs initialises these for its own use.
        mutex: unsafe { core::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { core::mem::zeroed() },
        events_completed: 0,
    };
    let ptr = publish(SrqObj {
        ibv: UnsafeCell::new(ibv),
        core: Arc::clone(&core),
        pd: Arc::clone(&p.core),
    });
    core.handle.store(ptr as usize, Ordering::Relaxed);
    ptr
}

/// `ibv_modify_srq`: arms the limit (`IBV_SRQ_LIMIT`); `EINVAL` for a resize
/// (`IBV_SRQ_MAX_WR`), a limit not below `max_wr`, or an SRQ that does not exist.
///
/// # Safety
/// `srq` is a live SRQ; `srq_attr` points to a readable `ibv_srq_attr`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    srq_attr_mask: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(s), Some(a)) = (unsafe { live::<SrqObj>(srq) }, unsafe { srq_attr.as_ref() }) else {
        return libc::EINVAL;
    };
    match s.core.modify(a, srq_attr_mask) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `ibv_query_srq`: the granted sizes and the limit (0 when disarmed).
///
/// # Safety
/// `srq` is a live SRQ; `srq_attr` points to a writable `ibv_srq_attr`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { live::<SrqObj>(srq) }) else {
        return libc::EINVAL;
    };
    if srq_attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: writable (contract).
    unsafe { srq_attr.write(s.core.query()) };
    0
}

/// `ibv_destroy_srq`: `EBUSY` while QPs use it; `EINVAL` for an SRQ that does not
/// exist. Receives still posted are dropped without completions.
///
/// # Safety
/// No other thread uses the SRQ during the call or after it succeeds.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    let busy = |s: &SrqObj| {
        if s.core.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match retire::<SrqObj>(srq, busy) {
        Ok(s) => {
            s.get().pd.users.fetch_sub(1, Ordering::AcqRel);
            if let Some(x) = &s.get().core.xrc {
                crate::provider::get().unregister_srq(x.srqn);
            }
            s.get().core.detach();
            s.get().core.ctx.forget(srq as usize);
            s.free();
            0
        }
        Err(e) => e,
    }
}

/// The SRQ behind `srq` for `ibv_create_qp`; `None` for a pointer that is not a live
/// SRQ of ours.
///
/// # Safety
/// No other thread destroys the SRQ during the call.
pub(super) unsafe fn srq_core(srq: *mut ibv_srq) -> Option<Arc<SrqCore>> {
    // SAFETY: forwarded.
    unsafe { live::<SrqObj>(srq) }.map(|s| Arc::clone(&s.core))
}
