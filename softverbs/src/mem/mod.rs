//! Registered memory: the key table, checked [`Span`]s and the copies between them.
//!
//! This is one of the two places that touch raw memory (the other is the `extern "C"`
//! surface in [`crate::abi`]). Everything else reaches application memory only through
//! a [`Span`], and a `Span` can only be made by [`MrTable::span`] (an lkey's region) or
//! [`MrTable::remote_span`] (an rkey's region or memory window), which check the key,
//! the device, the protection domain, the bounds and the access rights against a live
//! registration while the caller holds the table's read lock (so the region cannot be
//! deregistered during the copy).
//!
//! The one trust assumption is libibverbs' own: memory stays valid (mapped, readable and
//! writable) for as long as it is registered — except an on-demand region's, whose
//! ranges are checked mapped when a span is made and are then copied only through
//! `process_vm_readv` / `writev` on this process, which fail rather than fault.
//! Concurrent access by the application to memory a WQE is moving is a data race in
//! the application, as it is with a NIC; the copies use raw pointers only, never
//! references, so no Rust aliasing rule is broken on our side.
//!
//! Files: this one holds why a key check fails ([`KeyError`]) (what a region is,
//! [`MrInfo`], is `crate::region`, below the shared namespace that exports it);
//! `table` the key table and its checks, with its child `table::window`, memory
//! windows (their slots in the table, binding and invalidation); `copy` the checked
//! [`Span`]s and everything that moves bytes through them (copies, atomics, on-demand
//! guards).

mod copy;
mod table;

pub(crate) use copy::*;
pub(crate) use table::BindRequest;
pub(crate) use table::MrTable;

pub(crate) use crate::region::MrInfo;

/// Why a key check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No live region has this key on this device (or a window's key is used as an
    /// lkey, or a type 2 window's through a QP it is not bound to).
    BadKey,
    /// The key is of another protection domain.
    WrongPd,
    /// The range is not inside the region (or overflows).
    Bounds,
    /// The region was not registered with the access needed.
    Access,
    /// The range of an on-demand region is not mapped in the process now.
    NotMapped,
}

/// A region over `buf` with `access`, on device 0, PD 1 (for the tests of the parts).
#[cfg(test)]
pub(crate) fn test_region(buf: &mut [u8], access: u32) -> MrInfo {
    MrInfo {
        addr: buf.as_mut_ptr() as u64,
        len: buf.len() as u64,
        access,
        dev: 0,
        pd: 1,
        qpn: 0,
    }
}
