//! On-demand paging (ODP), as a ConnectX has it: regions registered with
//! `IBV_ACCESS_ON_DEMAND` (explicit, or implicit over the whole address space),
//! `ibv_advise_mr`, and the capabilities the device reports.
//!
//! A NIC with ODP faults a region's pages in when it accesses them, and fails the
//! access when there is nothing to fault in (the range is not mapped, or not with the
//! access). softverbs copies with the CPU, so "faulting in" is what the copy does
//! anyway; what it must not do is touch memory that is not there (a `SIGSEGV` in the
//! process, where a NIC reports a completion error). So every span of an on-demand
//! region is checked to be mapped when it is made (`mem::mapped`, `mincore(2)`), under
//! the key table's read lock, and is copied only through `process_vm_readv` /
//! `writev` on this process (`mem::copy_spans`), which fail with `EFAULT` where a
//! plain copy would fault; an atomic first finds a read-write mapping under it. An
//! inaccessible local buffer completes with `IBV_WC_LOC_PROT_ERR`, an inaccessible
//! target at the responder with `IBV_WC_REM_ACCESS_ERR` at the requester — in one
//! process and across processes. A mapping removed or protected while an atomic runs
//! on it is not caught: a race of the application's.
//!
//! [`advise_mr`] is the extended context's `advise_mr` (`abi::verbs_ops`), and
//! [`odp_caps`] what `ibv_query_device_ex` reports (`xdevice`).

use core::ffi::{c_int, c_void};

use vqp_sys::*;

use super::object::{live, PdObj};
use crate::provider;

/// verbs.h's `IBV_ODP_SUPPORT`: on-demand paging.
pub(crate) const IBV_ODP_SUPPORT: u64 = 1 << 0;
/// verbs.h's `IBV_ODP_SUPPORT_IMPLICIT`: a region over the whole address space.
pub(crate) const IBV_ODP_SUPPORT_IMPLICIT: u64 = 1 << 1;
/// verbs.h's `enum ibv_odp_transport_cap_bits`.
pub(crate) const IBV_ODP_SUPPORT_SEND: u32 = 1 << 0;
/// The transport may receive into on-demand memory.
pub(crate) const IBV_ODP_SUPPORT_RECV: u32 = 1 << 1;
/// RDMA WRITE to on-demand memory.
pub(crate) const IBV_ODP_SUPPORT_WRITE: u32 = 1 << 2;
/// RDMA READ from on-demand memory.
pub(crate) const IBV_ODP_SUPPORT_READ: u32 = 1 << 3;
/// Atomics on on-demand memory.
pub(crate) const IBV_ODP_SUPPORT_ATOMIC: u32 = 1 << 4;
/// Receives of a shared receive queue into on-demand memory.
pub(crate) const IBV_ODP_SUPPORT_SRQ_RECV: u32 = 1 << 5;

/// The on-demand paging capabilities (for `ibv_query_device_ex`'s `odp_caps`):
/// explicit and implicit regions; on RC every operation (SEND, receives, shared
/// receive queues, WRITE, READ, atomics), on UC what UC carries (SEND, receives,
/// WRITE), on UD SEND and receives — every access path checks on-demand spans the
/// same way (`mem::MrTable::span`).
pub(crate) fn odp_caps() -> ibv_odp_caps {
    let send_recv = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
    ibv_odp_caps {
        general_caps: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
        per_transport_caps: ibv_odp_caps_per_transport {
            rc_odp_caps: send_recv
                | IBV_ODP_SUPPORT_WRITE
                | IBV_ODP_SUPPORT_READ
                | IBV_ODP_SUPPORT_ATOMIC
                | IBV_ODP_SUPPORT_SRQ_RECV,
            uc_odp_caps: send_recv | IBV_ODP_SUPPORT_WRITE,
            ud_odp_caps: send_recv,
        },
    }
}

/// Whether `ibv_reg_mr(pd, addr, length, access)` asks for an implicit on-demand
/// region (the whole address space): `addr` null, `length` `SIZE_MAX`,
/// `IBV_ACCESS_ON_DEMAND`.
pub(super) fn implicit(addr: *mut c_void, length: usize, access: u32) -> bool {
    addr.is_null() && length == usize::MAX && access & IBV_ACCESS_ON_DEMAND != 0
}

/// `enum ibv_advise_mr_advice`: prefetch for reading.
#[cfg(test)]
pub(crate) const IBV_ADVISE_MR_ADVICE_PREFETCH: u32 = 0;
/// Prefetch for reading and writing.
pub(crate) const IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: u32 = 1;
/// Make present what the CPU has present, without faulting.
pub(crate) const IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: u32 = 2;
/// `enum ibv_advise_mr_flags`: return once done.
pub(crate) const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1;

/// `advise_mr` of `verbs_context` (what verbs.h's inline `ibv_advise_mr` calls):
/// prefetches ranges of on-demand regions. Here the CPU's page tables are the
/// device's, so there is nothing to fetch; the call checks its arguments as the
/// kernel does for mlx5 (`ib_uverbs_advise_mr` → `mlx5_ib_advise_mr`,
/// `mlx5_ib_prefetch_mr_work` / `get_prefetchable_mr`; errors as
/// `ibv_advise_mr(3)` lists them) and, for the two faulting advices, that every
/// range is mapped now (what faulting it in would need). It is synchronous, so
/// `IBV_ADVISE_MR_FLAG_FLUSH` changes nothing. Returns 0 or:
/// - `EINVAL`: a PD that does not exist, unknown flags, no SGE, a key of a region
///   that is not on-demand, or of a memory window;
/// - `EOPNOTSUPP`: an unknown advice;
/// - `ENOENT`: a key that names no region of this PD;
/// - `EPERM`: `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE` on a region without local write;
/// - `EFAULT`: a range outside its region, or (faulting advices) not mapped.
///
/// # Safety
/// `pd` is null or a pointer this provider handed out (checked in the registry);
/// `sg_list` holds `num_sges` readable entries.
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: u32,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sges: u32,
) -> c_int {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { live::<PdObj>(pd) }) else {
        return libc::EINVAL;
    };
    if advice > IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT {
        return libc::EOPNOTSUPP;
    }
    if flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0 || num_sges == 0 || sg_list.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `sg_list` holds `num_sges` entries (contract), non-null (checked).
    let sges = unsafe { core::slice::from_raw_parts(sg_list, num_sges as usize) };
    let mrs = provider::get()
        .mrs
        .read()
        .unwrap_or_else(|e| e.into_inner());
    for s in sges {
        let Some(mr) = mrs.get(s.lkey) else {
            // A window's key is refused as such; any other is unknown.
            return if mrs.is_window(s.lkey) {
                libc::EINVAL
            } else {
                libc::ENOENT
            };
        };
        if mr.dev != p.core.dev || mr.pd != p.core.id {
            return libc::ENOENT;
        }
        if !mr.on_demand() {
            return libc::EINVAL;
        }
        if advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE && mr.access & IBV_ACCESS_LOCAL_WRITE == 0
        {
            return libc::EPERM;
        }
        let len = u64::from(s.length);
        if mrs
            .span(s.lkey, p.core.dev, p.core.id, s.addr, len, 0)
            .is_err_and(|e| e != crate::mem::KeyError::NotMapped)
        {
            return libc::EFAULT;
        }
        if advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT && !crate::mem::mapped(s.addr, len) {
            return libc::EFAULT;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capabilities_are_what_every_path_checks() {
        let c = odp_caps();
        assert_eq!(c.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
        assert_eq!(c.per_transport_caps.rc_odp_caps, 0x3f);
        assert_eq!(c.per_transport_caps.uc_odp_caps, 0x7);
        assert_eq!(c.per_transport_caps.ud_odp_caps, 0x3);
    }

    #[test]
    fn implicit_needs_null_size_max_and_on_demand() {
        let null = core::ptr::null_mut();
        assert!(implicit(null, usize::MAX, IBV_ACCESS_ON_DEMAND));
        assert!(!implicit(null, usize::MAX, 0));
        assert!(!implicit(null, 4096, IBV_ACCESS_ON_DEMAND));
        let mut x = 0u8;
        assert!(!implicit(
            (&mut x as *mut u8).cast(),
            usize::MAX,
            IBV_ACCESS_ON_DEMAND
        ));
    }

    #[test]
    fn advise_mr_checks_its_ranges_as_the_kernel_does() {
        let mut ctx_list = 0;
        // SAFETY: the provider's own device list and objects, used in order and
        // released at the end.
        unsafe {
            let list = crate::ibv_get_device_list(&mut ctx_list);
            let ctx = crate::ibv_open_device(*list);
            let pd = crate::ibv_alloc_pd(ctx);
            let mut buf = vec![0u8; 8192];
            let base = buf.as_mut_ptr();
            let odp = crate::ibv_reg_mr(
                pd,
                base.cast(),
                4096,
                (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE) as c_int,
            );
            let ro = crate::ibv_reg_mr(
                pd,
                base.add(4096).cast(),
                4096,
                IBV_ACCESS_ON_DEMAND as c_int,
            );
            let pinned = crate::ibv_reg_mr(pd, base.cast(), 4096, 0);
            let implicit = crate::ibv_reg_mr(
                pd,
                core::ptr::null_mut(),
                usize::MAX,
                IBV_ACCESS_ON_DEMAND as c_int,
            );
            assert!(!odp.is_null() && !ro.is_null() && !pinned.is_null() && !implicit.is_null());
            let sge = |addr: *mut u8, len: u32, lkey: u32| ibv_sge {
                addr: addr as u64,
                length: len,
                lkey,
            };
            let mut s = [sge(base, 4096, (*odp).lkey)];
            let call = |s: &mut [ibv_sge], advice, flags| {
                advise_mr(pd, advice, flags, s.as_mut_ptr(), s.len() as u32)
            };
            assert_eq!(call(&mut s, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 1), 0);
            assert_eq!(call(&mut s, 3, 0), libc::EOPNOTSUPP);
            assert_eq!(call(&mut s, 0, 2), libc::EINVAL);
            assert_eq!(call(&mut [], 0, 0), libc::EINVAL);
            s[0].length = 4097;
            assert_eq!(
                call(&mut s, IBV_ADVISE_MR_ADVICE_PREFETCH, 0),
                libc::EFAULT,
                "past the region"
            );
            s[0] = sge(base.add(4096), 8, (*ro).lkey);
            assert_eq!(call(&mut s, 0, 0), 0);
            assert_eq!(
                call(&mut s, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0),
                libc::EPERM
            );
            s[0] = sge(base, 8, (*pinned).lkey);
            assert_eq!(call(&mut s, 0, 0), libc::EINVAL, "not on-demand");
            s[0].lkey ^= 0x80; // another generation: no live region
            assert_eq!(call(&mut s, 0, 0), libc::ENOENT);
            // Implicit: any mapped address; page 0 is not mapped.
            s[0] = sge(base, 8192, (*implicit).lkey);
            assert_eq!(call(&mut s, 0, 0), 0);
            s[0] = sge(
                core::ptr::null_mut::<u8>().wrapping_add(64),
                8,
                (*implicit).lkey,
            );
            assert_eq!(call(&mut s, 0, 0), libc::EFAULT);
            assert_eq!(call(&mut s, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0), 0);
            assert_eq!(
                advise_mr(core::ptr::null_mut(), 0, 0, s.as_mut_ptr(), 1),
                libc::EINVAL
            );
            for m in [odp, ro, pinned, implicit] {
                assert_eq!(crate::ibv_dereg_mr(m), 0);
            }
            assert_eq!(crate::ibv_dealloc_pd(pd), 0);
            assert_eq!(crate::ibv_close_device(ctx), 0);
            crate::ibv_free_device_list(list);
        }
    }
}
