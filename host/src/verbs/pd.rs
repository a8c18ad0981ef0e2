//! [`ProtectionDomain`].

use core::ptr::NonNull;
use std::sync::Arc;

use super::context::{Context, ContextInner};
use super::mr::MemoryRegion;
use super::qp::{QpInit, QueuePair};
use super::srq::SharedReceiveQueue;
use crate::error::{Error, Result};
use crate::flags::AccessFlags;
use crate::sys;

/// A protection domain (`struct ibv_pd`): MRs and QPs in the same PD may work together.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) ctx: Arc<ContextInner>,
    pub(crate) pd: NonNull<sys::ibv_pd>,
}

// SAFETY: libibverbs is thread-safe; the PD pointer is only handed to its verbs.
unsafe impl Send for PdInner {}
// SAFETY: as above; nothing is mutated through `&PdInner`.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: `pd` came from `ibv_alloc_pd` and is freed once; MRs and QPs hold
        // `Arc<PdInner>`, so none is alive.
        let _ = unsafe { (self.ctx.verbs.table().dealloc_pd)(self.pd.as_ptr()) };
    }
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: live context.
        let pd = unsafe { (ctx.inner.verbs.table().alloc_pd)(ctx.inner.ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| Error::verbs_errno("ibv_alloc_pd"))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: Arc::clone(&ctx.inner),
                pd,
            }),
        })
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> Context {
        Context {
            inner: Arc::clone(&self.inner.ctx),
        }
    }

    /// The raw PD, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.inner.pd.as_ptr()
    }

    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers it; the
    /// region owns the buffer and frees it after deregistration.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `len == 0` or a size the allocator cannot serve,
    /// [`Error::Verbs`] when `ibv_reg_mr` fails.
    pub fn register_buffer(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        MemoryRegion::new_owned(self, len, access)
    }

    /// Registers caller-owned memory.
    ///
    /// # Safety
    /// `addr..addr + len` must be memory this process may read and write, and must stay
    /// valid (not freed, not unmapped) until the returned region is dropped *and* no work
    /// request referring to it is outstanding. While the device may write into it (local
    /// write for receives and READ results, remote write), Rust code must not hold
    /// references to it that assume it does not change.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `len == 0`, [`Error::Verbs`] when `ibv_reg_mr`
    /// fails.
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: forwarded from this function's contract.
        unsafe { MemoryRegion::new_raw(self, addr, len, access) }
    }

    /// Creates a queue pair in this PD.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a CQ belongs to another context,
    /// [`Error::OpMissing`] when the provider lacks `post_send`/`post_recv`,
    /// [`Error::Verbs`] when `ibv_create_qp` fails.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<QueuePair> {
        QueuePair::new(self, init)
    }

    /// Creates a shared receive queue of `max_wr` receives of up to `max_sge` scatter
    /// entries each (`ibv_create_srq`); [`SharedReceiveQueue::granted`] tells what was
    /// granted.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        SharedReceiveQueue::new(self, max_wr, max_sge)
    }
}

impl core::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("raw", &self.inner.pd)
            .finish()
    }
}
