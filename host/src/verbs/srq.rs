//! [`SharedReceiveQueue`]: one receive queue for many RC QPs of a protection domain's
//! device; posting goes through the provider's ops table.

use core::ptr::NonNull;
use std::sync::Arc;

use super::pd::{PdInner, ProtectionDomain};
use super::qp::post_result;
use crate::error::{Error, Result};
use crate::sys;

/// A shared receive queue (`struct ibv_srq`), destroyed on drop (after the QPs that use
/// it, which keep it alive, and before its PD).
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
    /// `ops.post_srq_recv`, read once at creation.
    post_recv: sys::ibv_post_srq_recv_fn,
    attr: sys::ibv_srq_attr,
}

pub(crate) struct SrqInner {
    pd: Arc<PdInner>,
    pub(crate) srq: NonNull<sys::ibv_srq>,
}

// SAFETY: libibverbs is thread-safe; the pointer is only handed to the library.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: `srq` came from `ibv_create_srq`; the last QP using it is gone (each
        // holds this `Arc`), and it is destroyed once, before the PD reference drops.
        let _ = unsafe { (self.pd.ctx.verbs.table().destroy_srq)(self.srq.as_ptr()) };
    }
}

impl SharedReceiveQueue {
    pub(crate) fn new(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<Self> {
        let ctx = &pd.inner.ctx;
        // SAFETY: live context; the provider fills `ops` at open and never changes it.
        let ops = unsafe { (*ctx.ctx.as_ptr()).ops };
        let post_recv = ops.post_srq_recv.ok_or(Error::OpMissing {
            op: "ops.post_srq_recv",
        })?;
        let mut init = sys::ibv_srq_init_attr {
            srq_context: core::ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: live PD; `init` is a valid, writable `ibv_srq_init_attr`.
        let srq = unsafe { (ctx.verbs.table().create_srq)(pd.inner.pd.as_ptr(), &mut init) };
        let srq = NonNull::new(srq).ok_or_else(|| Error::verbs_errno("ibv_create_srq"))?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: Arc::clone(&pd.inner),
                srq,
            }),
            post_recv,
            attr: init.attr,
        })
    }

    /// The sizes granted at creation.
    pub fn granted(&self) -> sys::ibv_srq_attr {
        self.attr
    }

    /// The raw `ibv_srq` (valid while `self` lives).
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.inner.srq.as_ptr()
    }

    /// Posts a chain of receive requests (`ibv_post_srq_recv`).
    ///
    /// # Safety
    /// `wr` heads a valid, null-terminated chain whose scatter entries name memory of
    /// the SRQ's PD's regions that stays valid and untouched until the completion.
    ///
    /// # Errors
    /// [`Error::PostFailed`] with the position of the first request not posted.
    #[inline]
    pub unsafe fn post_recv(&self, wr: &mut sys::ibv_recv_wr) -> Result<()> {
        let head: *mut sys::ibv_recv_wr = wr;
        let mut bad: *mut sys::ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: live SRQ; the op belongs to its context; the caller vouches for the
        // chain.
        let rc = unsafe { (self.post_recv)(self.as_raw(), head, &mut bad) };
        // SAFETY: the caller vouches that the chain is valid and null-terminated.
        unsafe { post_result("ibv_post_srq_recv", rc, head, bad, |w| (*w).next) }
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when fewer than `limit`
    /// receives remain, the context gets `IBV_EVENT_SRQ_LIMIT_REACHED` once.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut attr = sys::ibv_srq_attr {
            srq_limit: limit,
            ..Default::default()
        };
        // SAFETY: live SRQ; `attr` is a valid `ibv_srq_attr`.
        let rc = unsafe {
            (self.inner.pd.ctx.verbs.table().modify_srq)(
                self.as_raw(),
                &mut attr,
                sys::IBV_SRQ_LIMIT,
            )
        };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_modify_srq", rc));
        }
        Ok(())
    }

    /// The SRQ's sizes and limit now (`ibv_query_srq`).
    pub fn query(&self) -> Result<sys::ibv_srq_attr> {
        let mut attr = sys::ibv_srq_attr::default();
        // SAFETY: live SRQ; `attr` is writable.
        let rc = unsafe { (self.inner.pd.ctx.verbs.table().query_srq)(self.as_raw(), &mut attr) };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_query_srq", rc));
        }
        Ok(attr)
    }
}

impl core::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("raw", &self.inner.srq)
            .field("granted", &self.attr)
            .finish()
    }
}
