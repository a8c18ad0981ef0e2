//! The extended device verbs of every context's `verbs_context`: `ibv_query_device_ex`,
//! `ibv_query_port` (the sized form verbs.h calls), `ibv_query_rt_values_ex`, and thread
//! and parent domains (`ibv_alloc_td`, `ibv_alloc_parent_domain`).

use core::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use vqp_sys::*;

use super::device::{ibv_query_device, ibv_query_port};
use super::object::{ctx, live, publish, retire, Parent, PdCore, PdObj, TdObj};
use super::set_errno;

/// Frequency of the completion timestamp clock, in kHz, as `hca_core_clock` reports it:
/// the clock counts nanoseconds (`CLOCK_MONOTONIC_RAW`), 1 GHz.
pub const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;

/// Copies the first `len` bytes of `src` to `dst` and zeroes `dst` from
/// `size_of::<T>()` up to `len`, as the kernel answers a caller whose struct is larger.
///
/// # Safety
/// `dst` is writable for `len` bytes.
unsafe fn put_sized<T>(dst: *mut T, len: usize, src: &T) {
    let n = len.min(core::mem::size_of::<T>());
    // SAFETY: `src` is a whole `T` (at least `n` bytes), `dst` writable for `len >= n`
    // bytes (contract); a local and the caller's buffer cannot overlap.
    unsafe { core::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst.cast::<u8>(), n) };
    if len > n {
        // SAFETY: bytes `n..len` of `dst`, writable (contract).
        unsafe { core::ptr::write_bytes(dst.cast::<u8>().add(n), 0, len - n) };
    }
}

/// `verbs_context.query_device_ex` (verbs.h's `ibv_query_device_ex`): `ibv_query_device`'s
/// attributes, and of the extended ones those a ConnectX reports that this provider
/// honours: `device_cap_flags_ex` (the same flags), the completion timestamp clock
/// (`hca_core_clock` 1 GHz, `completion_timestamp_mask` all 64 bits: see `cq_ex`),
/// device memory (`max_dm_size`), `phys_port_cnt_ex` 1, and on-demand paging
/// (`odp::odp_caps`). TSO, RSS,
/// packet pacing, tag matching, CQ moderation and PCI atomics are zero: not offered.
/// `EINVAL` for a non-zero input `comp_mask`, or an `attr_size` smaller than
/// `struct ibv_device_attr`; a smaller (older) struct gets its prefix, a larger one zeros
/// past ours.
///
/// # Safety
/// `context` is a live context; `input` is null or readable; `attr` writable for
/// `attr_size` bytes.
pub(super) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: null or readable (contract).
    if unsafe { input.as_ref() }.is_some_and(|i| i.comp_mask != 0) {
        return libc::EINVAL;
    }
    if attr.is_null() || attr_size < core::mem::size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    let mut a = ibv_device_attr_ex::default();
    // SAFETY: `context` per the contract; `a.orig_attr` a writable local.
    let rc = unsafe { ibv_query_device(context, &mut a.orig_attr) };
    if rc != 0 {
        return rc;
    }
    a.device_cap_flags_ex = u64::from(a.orig_attr.device_cap_flags);
    a.completion_timestamp_mask = u64::MAX;
    a.hca_core_clock = HCA_CORE_CLOCK_KHZ;
    a.max_dm_size = super::dm::MAX_DM_SIZE as u64;
    a.odp_caps = super::odp::odp_caps();
    a.phys_port_cnt_ex = u32::from(a.orig_attr.phys_port_cnt);
    // SAFETY: writable for `attr_size` bytes (contract).
    unsafe { put_sized(attr, attr_size, &a) };
    0
}

/// `verbs_context.query_port` (what verbs.h's `ibv_query_port` calls): the port as
/// [`ibv_query_port`] reports it, written for the caller's `sizeof(struct
/// ibv_port_attr)` (`port_attr_len`): fields past the v44 struct (`active_speed_ex`)
/// are zero, "see `active_speed`".
///
/// # Safety
/// `context` is a live context; `port_attr` writable for `port_attr_len` bytes.
pub(super) unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    if port_attr.is_null() || port_attr_len < IBV_PORT_ATTR_V44_SIZE {
        return libc::EINVAL;
    }
    let mut a = ibv_port_attr::default();
    // SAFETY: `context` per the contract; `a` a writable local.
    let rc = unsafe { ibv_query_port(context, port_num, &mut a) };
    if rc != 0 {
        return rc;
    }
    // SAFETY: writable for `port_attr_len` bytes (contract).
    unsafe { put_sized(port_attr, port_attr_len, &a) };
    0
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex`): with
/// `IBV_VALUES_MASK_RAW_CLOCK`, the completion timestamp clock now, as mlx5 reports it
/// (`mlx5_query_rt_values`: `tv_sec` 0, the counter in `tv_nsec`; the counter here is
/// `CLOCK_MONOTONIC_RAW` in nanoseconds, the clock completions are stamped with).
/// `EINVAL` for other mask bits.
///
/// # Safety
/// `context` is a live context; `values` readable and writable.
pub(super) unsafe extern "C" fn query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(_), Some(v)) = (unsafe { ctx(context) }, unsafe { values.as_mut() }) else {
        return libc::EINVAL;
    };
    if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
        return libc::EINVAL;
    }
    let mut mask = 0;
    if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
        v.raw_clock.tv_sec = 0;
        v.raw_clock.tv_nsec = crate::os::clock_ns(libc::CLOCK_MONOTONIC_RAW) as _;
        mask |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    v.comp_mask = mask;
    0
}

/// `verbs_context.alloc_td` (`ibv_alloc_td`): a thread domain. The engine serialises
/// execution itself, so a thread domain changes nothing but is accepted wherever
/// verbs take one (parent domains). `EINVAL` for a non-zero `comp_mask`.
///
/// # Safety
/// `context` is a live context; `init_attr` readable.
pub(super) unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    // SAFETY: per the contract.
    let (Some(_), Some(a)) = (unsafe { ctx(context) }, unsafe { init_attr.as_ref() }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if a.comp_mask != 0 {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    publish(TdObj {
        ibv: ibv_td { context },
        users: Arc::new(AtomicU32::new(0)),
    })
}

/// `verbs_context.dealloc_td` (`ibv_dealloc_td`): `EBUSY` while parent domains use it,
/// `EINVAL` for one that does not exist.
///
/// # Safety
/// No other thread uses the thread domain during the call or after it succeeds.
pub(super) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    let busy = |t: &TdObj| {
        if t.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match retire::<TdObj>(td, busy) {
        Ok(t) => {
            t.free();
            0
        }
        Err(e) => e,
    }
}

/// `verbs_context.alloc_parent_domain` (`ibv_alloc_parent_domain`): a PD that goes
/// wherever a PD goes (MRs, QPs, SRQs, AHs, `ibv_dealloc_pd`), in `attr.pd`'s protection
/// domain (keys registered through either are good in both), with an optional thread
/// domain and `pd_context`. The allocators of `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`
/// are accepted and never called: this provider has no device buffers in application
/// memory (mlx5 too falls back to its own allocation when they answer
/// `IBV_ALLOCATOR_USE_DEFAULT`). `EINVAL` for a null or foreign PD, a PD that is itself
/// a parent domain, a thread domain of another context, or unknown `comp_mask` bits.
///
/// # Safety
/// `context` is a live context; `attr` readable; its `pd` and `td` not destroyed during
/// the call.
pub(super) unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: per the contract.
    let (Some(c), Some(a)) = (unsafe { ctx(context) }, unsafe { attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    if a.comp_mask & !known != 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let Some(p) = (unsafe { live::<PdObj>(a.pd) }) else {
        return fail(libc::EINVAL);
    };
    if p.parent.is_some() || p.core.dev != c.core.dev {
        return fail(libc::EINVAL);
    }
    let td = if a.td.is_null() {
        None
    } else {
        // SAFETY: per the contract.
        match unsafe { live::<TdObj>(a.td) } {
            Some(t) if t.ibv.context == context => Some(Arc::clone(&t.users)),
            _ => return fail(libc::EINVAL),
        }
    };
    p.core.users.fetch_add(1, Ordering::AcqRel);
    if let Some(t) = &td {
        t.fetch_add(1, Ordering::AcqRel);
    }
    let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
        a.pd_context as usize
    } else {
        0
    };
    publish(PdObj {
        ibv: ibv_pd {
            context,
            handle: p.ibv.handle,
        },
        core: Arc::new(PdCore {
            id: p.core.id,
            dev: p.core.dev,
            users: AtomicU32::new(0),
        }),
        parent: Some(Parent {
            pd: Arc::clone(&p.core),
            td,
            pd_context,
        }),
    })
}
