//! The provider state some wrappers of `object` carry, beside the ABI struct: the host
//! memory behind device memory (`dm`), the completion an extended CQ is reading
//! (`cq_ex`) and the batch an extended QP is building (`qp_ex`). The modules of those
//! verbs fill it; it lives here, under `object`, so that the wrappers need none of them.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use vqp_sys::*;

use crate::cq::Stamp;
use crate::qp::SendWqe;

/// Bytes of device memory allocated per device (index), against `dm::MAX_DM_SIZE`.
pub(super) static IN_USE: [AtomicUsize; crate::MAX_DEVICES] =
    [const { AtomicUsize::new(0) }; crate::MAX_DEVICES];

/// The host memory behind a `DmObj`: `len` zeroed bytes, freed on drop.
pub(crate) struct DmMem {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    pub(super) dev: usize,
}

impl DmMem {
    pub(super) fn alloc(dev: usize, len: usize, align: usize) -> Result<DmMem, c_int> {
        let mut p: *mut c_void = core::ptr::null_mut();
        // SAFETY: `p` is writable; `align` a power of two and a multiple of the pointer
        // size; `len` non-zero.
        if unsafe { libc::posix_memalign(&mut p, align, len) } != 0 {
            return Err(libc::ENOMEM);
        }
        // SAFETY: a fresh allocation of `len` bytes.
        unsafe { core::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Ok(DmMem {
            ptr: p.cast(),
            len,
            dev,
        })
    }

    /// The range `[offset, offset + len)` of the allocation as mlx5's
    /// `mlx5_access_dm` checks it: `EFAULT` outside it, `EINVAL` unaligned.
    pub(super) fn range(&self, offset: u64, len: usize) -> Result<*mut u8, c_int> {
        let end = offset.checked_add(len as u64).ok_or(libc::EFAULT)?;
        if end > self.len as u64 {
            return Err(libc::EFAULT);
        }
        if len & 3 != 0 || offset & 3 != 0 {
            return Err(libc::EINVAL);
        }
        // `offset < len` of the allocation, checked above.
        Ok(self.ptr.wrapping_add(offset as usize))
    }
}

impl Drop for DmMem {
    fn drop(&mut self) {
        // SAFETY: the allocation `posix_memalign` made, freed once.
        unsafe { libc::free(self.ptr.cast()) };
        IN_USE[self.dev].fetch_sub(self.len, Ordering::AcqRel);
    }
}

// SAFETY: the pointer is owned (freed on drop) and its bytes are only reached through
// the copies, which the application orders as it orders access to device memory.
unsafe impl Send for DmMem {}
// SAFETY: as above.
unsafe impl Sync for DmMem {}

/// The completion an extended CQ's `read_*` functions read.
#[derive(Default)]
pub(crate) struct Current {
    pub(super) wc: Option<ibv_wc>,
    pub(super) at: Stamp,
}

/// The work requests of a batch, and the first error one of them met.
#[derive(Default)]
pub(crate) struct Batch {
    /// Finished requests, in order.
    pub(super) wqes: Vec<SendWqe>,
    /// The request the setters are filling.
    pub(super) cur: Option<Building>,
    /// The first error: `ibv_wr_complete` returns it and posts nothing.
    pub(super) err: Option<c_int>,
}

/// A request being built: the WQE, and what its checks need.
pub(super) struct Building {
    pub(super) wqe: SendWqe,
    /// SGEs named (for the `max_send_sge` check).
    pub(super) sge_n: u32,
}

impl Batch {
    pub(super) fn fail(&mut self, e: c_int) {
        self.err.get_or_insert(e);
    }

    pub(super) fn clear(&mut self) {
        self.wqes.clear();
        self.cur = None;
        self.err = None;
    }
}
