//! Device memory: `ibv_alloc_dm`, `ibv_free_dm`, the copies verbs.h's inline
//! `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm` call through `struct ibv_dm`, and
//! `ibv_reg_dm_mr`.
//!
//! A ConnectX has a little memory on the chip (MEMIC) that a program allocates, copies
//! into and out of through a mapping, and registers as a zero-based region for RDMA.
//! Here it is host memory with the same rules (mlx5, `providers/mlx5/verbs.c`): an
//! allocation is at most [`MAX_DM_SIZE`] and the device's allocations together no more
//! (`ENOMEM` beyond); copies are of whole 4-byte words at 4-byte offsets (`EINVAL`
//! otherwise, `mlx5_access_dm`) inside the allocation (`EFAULT` otherwise); a region
//! over it must be `IBV_ACCESS_ZERO_BASED` (libibverbs' `ibv_cmd_reg_dm_mr`), its
//! addresses running from 0 over `[dm_offset, dm_offset + length)`. A peer in another
//! process reaches such a region too, but never by copying into this process itself:
//! the region is not exported for direct copies (its addresses are not the process's),
//! so the peer's requests to it travel through the inbox to this process's responder.

use core::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use vqp_sys::*;

use super::object::{ctx, live, publish, retire, DmObj, MrObj, PdObj};
use super::set_errno;
use super::state::{DmMem, IN_USE};
use crate::mem::MrInfo;
use crate::provider;

/// Largest device memory allocation, and the most a device's allocations hold together
/// (`max_dm_size`): 256 KiB.
pub const MAX_DM_SIZE: usize = 256 << 10;

/// Largest alignment an allocation may ask for (`log_align_req`): a page.
const MAX_LOG_ALIGN: u32 = 12;

/// Access bits a region over device memory may have (mlx5's `MLX5_DM_ALLOWED_ACCESS`,
/// but the optional ones, which this provider has none of).
const DM_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_ZERO_BASED;

/// `verbs_context.alloc_dm` (`ibv_alloc_dm`): `attr.length` bytes of device memory,
/// zeroed. `EINVAL` for a length of 0 or over [`MAX_DM_SIZE`], an alignment over a page,
/// or a non-zero `comp_mask`; `ENOMEM` when the device's allocations would exceed
/// [`MAX_DM_SIZE`].
///
/// # Safety
/// `context` is a live context; `attr` readable.
pub(super) unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: per the contract.
    let (Some(c), Some(a)) = (unsafe { ctx(context) }, unsafe { attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if a.comp_mask != 0
        || a.length == 0
        || a.length > MAX_DM_SIZE
        || a.log_align_req > MAX_LOG_ALIGN
    {
        return fail(libc::EINVAL);
    }
    let dev = c.core.dev;
    let taken = IN_USE[dev].fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
        (used + a.length <= MAX_DM_SIZE).then_some(used + a.length)
    });
    if taken.is_err() {
        return fail(libc::ENOMEM);
    }
    let align = (1usize << a.log_align_req).max(core::mem::size_of::<usize>());
    let mem = match DmMem::alloc(dev, a.length, align) {
        Ok(m) => m,
        Err(e) => {
            IN_USE[dev].fetch_sub(a.length, Ordering::AcqRel);
            return fail(e);
        }
    };
    publish(DmObj {
        ibv: ibv_dm {
            context,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            comp_mask: 0,
            handle: provider::get().next_id(),
        },
        mem,
        users: Arc::new(AtomicU32::new(0)),
    })
}

/// `verbs_context.free_dm` (`ibv_free_dm`): `EBUSY` while regions lie in it, `EINVAL`
/// for device memory that is not allocated.
///
/// # Safety
/// No other thread uses the device memory during the call or after it succeeds.
pub(super) unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    let busy = |d: &DmObj| {
        if d.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match retire::<DmObj>(dm, busy) {
        Ok(d) => {
            d.free();
            0
        }
        Err(e) => e,
    }
}

/// `ibv_dm.memcpy_to_dm` (`ibv_memcpy_to_dm`): see the module docs for the rules.
///
/// # Safety
/// `dm` is live device memory of this provider; `host_addr` readable for `length` bytes.
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    // SAFETY: per the contract.
    let Some(d) = (unsafe { live::<DmObj>(dm) }) else {
        return libc::EINVAL;
    };
    match d.mem.range(dm_offset, length) {
        Ok(_) if length > 0 && host_addr.is_null() => libc::EINVAL,
        Ok(p) => {
            // SAFETY: `p` has `length` bytes of the allocation (checked); the host buffer
            // is readable for `length` (contract); they are different allocations.
            unsafe { core::ptr::copy_nonoverlapping(host_addr.cast::<u8>(), p, length) };
            0
        }
        Err(e) => e,
    }
}

/// `ibv_dm.memcpy_from_dm` (`ibv_memcpy_from_dm`): see the module docs for the rules.
///
/// # Safety
/// `dm` is live device memory of this provider; `host_addr` writable for `length` bytes.
unsafe extern "C" fn memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    // SAFETY: per the contract.
    let Some(d) = (unsafe { live::<DmObj>(dm) }) else {
        return libc::EINVAL;
    };
    match d.mem.range(dm_offset, length) {
        Ok(_) if length > 0 && host_addr.is_null() => libc::EINVAL,
        Ok(p) => {
            // SAFETY: as in `memcpy_to_dm`, the other way.
            unsafe { core::ptr::copy_nonoverlapping(p, host_addr.cast::<u8>(), length) };
            0
        }
        Err(e) => e,
    }
}

/// `verbs_context.reg_dm_mr` (`ibv_reg_dm_mr`): a zero-based region over
/// `[dm_offset, dm_offset + length)` of `dm`, its addresses 0 .. `length` (`addr` is
/// null, as libibverbs reports it). `EINVAL` without `IBV_ACCESS_ZERO_BASED`, for other
/// access bits than a DM region may have, remote write or atomic without local write,
/// a range outside the allocation, or a PD or DM that is not live (or of another
/// device). A length of 0 is a region of no bytes, as on mlx5 (every access to it is
/// out of bounds).
///
/// # Safety
/// `pd` and `dm` are live objects of this provider, not freed during the call.
pub(super) unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: per the contract.
    let (Some(p), Some(d)) = (unsafe { live::<PdObj>(pd) }, unsafe { live::<DmObj>(dm) }) else {
        return fail(libc::EINVAL);
    };
    let remote_needs_local = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if access & IBV_ACCESS_ZERO_BASED == 0
        || access & !DM_ACCESS != 0
        || (access & remote_needs_local != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0)
        || p.core.dev != d.mem.dev
    {
        return fail(libc::EINVAL);
    }
    let in_range = dm_offset
        .checked_add(length as u64)
        .is_some_and(|end| end <= d.mem.len as u64);
    if !in_range {
        return fail(libc::EINVAL);
    }
    let info = MrInfo {
        addr: 0,
        len: length as u64,
        access,
        dev: p.core.dev,
        pd: p.core.id,
        qpn: 0,
    };
    let host = d.mem.ptr as u64 + dm_offset;
    let key = provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .register_at(info, host);
    let Some(key) = key else {
        return fail(libc::ENOMEM);
    };
    p.core.users.fetch_add(1, Ordering::AcqRel);
    d.users.fetch_add(1, Ordering::AcqRel);
    publish(MrObj {
        ibv: ibv_mr {
            // SAFETY: a live PD (contract).
            context: unsafe { (*pd).context },
            pd,
            addr: core::ptr::null_mut(),
            length,
            handle: key,
            lkey: key,
            rkey: key,
        },
        pd: Arc::clone(&p.core),
        dm: Some(Arc::clone(&d.users)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_whole_words_inside_the_allocation() {
        // Device index 63: no other test allocates there.
        IN_USE[63].fetch_add(100, Ordering::AcqRel);
        let m = DmMem::alloc(63, 100, 8).unwrap();
        assert!(m.range(0, 100).is_ok() && m.range(96, 4).is_ok() && m.range(100, 0).is_ok());
        assert_eq!(m.range(2, 4).unwrap_err(), libc::EINVAL);
        assert_eq!(m.range(0, 6).unwrap_err(), libc::EINVAL);
        assert_eq!(m.range(100, 4).unwrap_err(), libc::EFAULT);
        assert_eq!(m.range(u64::MAX - 1, 4).unwrap_err(), libc::EFAULT);
        drop(m);
        assert_eq!(
            IN_USE[63].load(Ordering::Acquire),
            0,
            "freed memory is given back"
        );
    }
}
