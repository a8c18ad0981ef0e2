//! [`MemoryRegion`].

use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use std::alloc::{self, Layout};
use std::sync::Arc;

use super::pd::{PdInner, ProtectionDomain};
use crate::error::{Error, Result};
use crate::flags::AccessFlags;
use crate::sys;

/// Alignment of buffers from [`ProtectionDomain::register_buffer`]: one page, so that
/// the registration pins no neighbouring data.
const BUFFER_ALIGN: usize = 4096;

/// A registered memory region (`struct ibv_mr`), deregistered on drop.
pub struct MemoryRegion {
    pd: Arc<PdInner>,
    mr: NonNull<sys::ibv_mr>,
    /// Set when the region owns its memory; freed after deregistration (fields drop after
    /// `Drop::drop`).
    owned: Option<OwnedBuffer>,
}

// SAFETY: libibverbs is thread-safe; the MR pointer is only read (lkey/rkey/addr) and
// handed to `ibv_dereg_mr` once, in `Drop`. The owned buffer is plain heap memory.
unsafe impl Send for MemoryRegion {}
// SAFETY: `&MemoryRegion` only reads immutable fields of the `ibv_mr`.
unsafe impl Sync for MemoryRegion {}

impl Drop for MemoryRegion {
    /// Deregisters the region, then frees an owned buffer. When the library refuses
    /// (the region stays registered, so the device may still reach the memory by its
    /// keys), the buffer is leaked instead: memory is handed to the device for the
    /// whole life of its registration (vqp-core's post contract).
    fn drop(&mut self) {
        // SAFETY: `mr` came from `ibv_reg_mr` and is deregistered once.
        let rc = unsafe { (self.pd.ctx.verbs.table().dereg_mr)(self.mr.as_ptr()) };
        if rc != 0 {
            if let Some(buffer) = self.owned.take() {
                core::mem::forget(buffer);
            }
        }
    }
}

impl MemoryRegion {
    pub(crate) fn new_owned(
        pd: &ProtectionDomain,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        let buffer = OwnedBuffer::new(len)?;
        // SAFETY: the buffer is ours, `len` bytes, readable and writable; it is stored in
        // the region and freed only after deregistration.
        let mut mr = unsafe { Self::new_raw(pd, buffer.ptr.as_ptr(), len, access) }?;
        mr.owned = Some(buffer);
        Ok(mr)
    }

    /// # Safety
    /// As [`ProtectionDomain::register_raw`].
    pub(crate) unsafe fn new_raw(
        pd: &ProtectionDomain,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                what: "memory region length is 0",
            });
        }
        let access = c_int::try_from(access.bits()).map_err(|_| Error::InvalidArgument {
            what: "access flags out of range",
        })?;
        // SAFETY: live PD; the caller vouches for the memory range.
        let mr = unsafe {
            (pd.inner.ctx.verbs.table().reg_mr)(
                pd.inner.pd.as_ptr(),
                addr.cast::<c_void>(),
                len,
                access,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| Error::verbs_errno("ibv_reg_mr"))?;
        Ok(MemoryRegion {
            pd: Arc::clone(&pd.inner),
            mr,
            owned: None,
        })
    }

    fn raw(&self) -> &sys::ibv_mr {
        // SAFETY: `mr` is live until `Drop`; the library never changes these fields
        // after registration.
        unsafe { self.mr.as_ref() }
    }

    /// Local key, for scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key, for the peer's RDMA operations.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// Start address, as a work request carries it.
    pub fn addr(&self) -> u64 {
        self.raw().addr as u64
    }

    /// Start pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.raw().addr.cast::<u8>()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.raw().length
    }

    /// Whether the region is empty (never: registration rejects length 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A scatter/gather entry for `len` bytes at `offset`, or `None` when that range is
    /// not inside the region or longer than a work request can carry.
    pub fn sge(&self, offset: usize, len: usize) -> Option<sys::ibv_sge> {
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        Some(sys::ibv_sge {
            addr: self.addr().checked_add(offset as u64)?,
            length: u32::try_from(len).ok()?,
            lkey: self.lkey(),
        })
    }

    /// The owned buffer's bytes, when the region owns its memory.
    ///
    /// # Safety
    /// No work request may be writing into the region while the slice lives (no
    /// outstanding receive or RDMA READ into it, and no peer RDMA WRITE or atomic).
    pub unsafe fn as_slice(&self) -> Option<&[u8]> {
        self.owned.as_ref().map(|b| {
            // SAFETY: the buffer is `len` initialised (zeroed at allocation) bytes, live
            // while `self` is; the caller excludes concurrent device writes.
            unsafe { core::slice::from_raw_parts(b.ptr.as_ptr(), b.layout.size()) }
        })
    }

    /// The owned buffer's bytes, mutable, when the region owns its memory.
    ///
    /// # Safety
    /// No work request may be reading or writing the region while the slice lives.
    pub unsafe fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        self.owned.as_mut().map(|b| {
            // SAFETY: as `as_slice`; `&mut self` excludes other Rust references, the
            // caller excludes the device.
            unsafe { core::slice::from_raw_parts_mut(b.ptr.as_ptr(), b.layout.size()) }
        })
    }

    /// The raw MR, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.mr.as_ptr()
    }

    /// The protection domain the region was registered in.
    pub fn pd(&self) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::clone(&self.pd),
        }
    }
}

impl core::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("owned", &self.owned.is_some())
            .finish()
    }
}

/// A zeroed, page-aligned heap buffer.
struct OwnedBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl OwnedBuffer {
    fn new(len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                what: "memory region length is 0",
            });
        }
        let layout =
            Layout::from_size_align(len, BUFFER_ALIGN).map_err(|_| Error::InvalidArgument {
                what: "buffer size too large",
            })?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::InvalidArgument {
            what: "buffer allocation failed",
        })?;
        Ok(OwnedBuffer { ptr, layout })
    }
}

impl Drop for OwnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this exact layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
