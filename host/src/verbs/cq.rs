//! [`CompletionQueue`]: completions are polled through the provider's ops table.

use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use std::sync::Arc;

use super::channel::{ChannelInner, CompletionChannel};
use super::context::{Context, ContextInner};
use super::wc::Wc;
use crate::error::{Error, Result};
use crate::sys;

/// A completion queue (`struct ibv_cq`), destroyed on drop.
///
/// Cheap to clone; QPs using the CQ hold a reference, so it is destroyed after them.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    pub(crate) ctx: Arc<ContextInner>,
    /// Kept so the channel is destroyed after the CQ (it refuses while a CQ uses it).
    _channel: Option<Arc<ChannelInner>>,
    pub(crate) cq: NonNull<sys::ibv_cq>,
    /// `ops.poll_cq`, read once at creation (the provider never changes it).
    poll_cq: sys::ibv_poll_cq_fn,
    /// `ops.req_notify_cq`, read once at creation.
    req_notify_cq: Option<sys::ibv_req_notify_cq_fn>,
    cqe: u32,
}

// SAFETY: libibverbs is thread-safe, including polling one CQ from several threads
// (providers lock internally); the pointers are only handed to the library.
unsafe impl Send for CqInner {}
// SAFETY: as above; nothing is mutated through `&CqInner`.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: `cq` came from `ibv_create_cq` and is destroyed once; QPs hold
        // `Arc<CqInner>`, so none uses it. `CqEvent`s ack before they go away, so the
        // destroy does not wait for unacknowledged events (unless one was leaked).
        let _ = unsafe { (self.ctx.verbs.table().destroy_cq)(self.cq.as_ptr()) };
    }
}

impl CompletionQueue {
    pub(crate) fn new(
        ctx: &Context,
        cqe: u32,
        channel: Option<&CompletionChannel>,
        comp_vector: u32,
    ) -> Result<Self> {
        let cqe_c = c_int::try_from(cqe).map_err(|_| Error::InvalidArgument {
            what: "CQ size does not fit a C int",
        })?;
        let vector = c_int::try_from(comp_vector).map_err(|_| Error::InvalidArgument {
            what: "completion vector does not fit a C int",
        })?;
        // SAFETY: live context; the provider fills `ops` at open and never changes it.
        let ops = unsafe { (*ctx.inner.ctx.as_ptr()).ops };
        let poll_cq = ops.poll_cq.ok_or(Error::OpMissing { op: "ops.poll_cq" })?;
        let channel_ptr = channel.map_or(core::ptr::null_mut(), |c| c.inner.ch.as_ptr());
        // SAFETY: live context; `channel_ptr` is null or a live channel of the same
        // library, kept alive by the `Arc` stored below.
        let cq = unsafe {
            (ctx.inner.verbs.table().create_cq)(
                ctx.inner.ctx.as_ptr(),
                cqe_c,
                core::ptr::null_mut::<c_void>(),
                channel_ptr,
                vector,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| Error::verbs_errno("ibv_create_cq"))?;
        // SAFETY: `cq` is live; `cqe` is set by the library at creation.
        let granted = unsafe { (*cq.as_ptr()).cqe };
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                ctx: Arc::clone(&ctx.inner),
                _channel: channel.map(|c| Arc::clone(&c.inner)),
                cq,
                poll_cq,
                req_notify_cq: ops.req_notify_cq,
                cqe: u32::try_from(granted).unwrap_or(cqe),
            }),
        })
    }

    /// The number of entries the library granted (at least what was asked).
    pub fn capacity(&self) -> u32 {
        self.inner.cqe
    }

    /// The raw CQ, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.inner.cq.as_ptr()
    }

    /// Polls up to `out.len()` completions into `out` and returns the filled prefix.
    /// Never allocates; one call into the provider.
    ///
    /// # Errors
    /// [`Error::Verbs`] naming `ibv_poll_cq` when the provider reports a failure.
    #[inline]
    pub fn poll<'a>(&self, out: &'a mut [Wc]) -> Result<&'a mut [Wc]> {
        // SAFETY: `Wc` is `repr(transparent)` over `ibv_wc`, and an initialised `Wc` is
        // a valid `MaybeUninit<Wc>`; `poll_uninit` only writes whole entries.
        let uninit = unsafe { &mut *(out as *mut [Wc] as *mut [MaybeUninit<Wc>]) };
        self.poll_uninit(uninit)
    }

    /// Polls into uninitialised storage and returns the initialised prefix.
    #[inline]
    pub fn poll_uninit<'a>(&self, out: &'a mut [MaybeUninit<Wc>]) -> Result<&'a mut [Wc]> {
        let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: live CQ; `out` has room for `n` `ibv_wc`s (`Wc` is transparent over
        // it); the provider writes at most `n` entries.
        let rc = unsafe {
            (self.inner.poll_cq)(
                self.inner.cq.as_ptr(),
                n,
                out.as_mut_ptr().cast::<sys::ibv_wc>(),
            )
        };
        if rc < 0 {
            // verbs only promises "a negative value"; providers do not set errno.
            return Err(Error::Verbs {
                function: "ibv_poll_cq",
                source: std::io::Error::other(format!("the provider returned {rc}")),
            });
        }
        let filled = (rc as usize).min(out.len());
        // SAFETY: the provider initialised the first `filled` entries.
        Ok(unsafe { &mut *(&mut out[..filled] as *mut [MaybeUninit<Wc>] as *mut [Wc]) })
    }

    /// Arms the CQ: the next completion (or, with `solicited_only`, the next solicited
    /// one) produces an event on the completion channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let op = self.inner.req_notify_cq.ok_or(Error::OpMissing {
            op: "ops.req_notify_cq",
        })?;
        // SAFETY: live CQ, op from its context's table.
        let rc = unsafe { op(self.inner.cq.as_ptr(), c_int::from(solicited_only)) };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_req_notify_cq", rc));
        }
        Ok(())
    }
}

impl core::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("raw", &self.inner.cq)
            .field("capacity", &self.inner.cqe)
            .finish()
    }
}
