//! [`QueuePair`]: posting goes through the provider's ops table.

use core::ffi::c_int;
use core::ptr::NonNull;
use std::sync::Arc;

use super::context::Context;
use super::cq::{CompletionQueue, CqInner};
use super::pd::{PdInner, ProtectionDomain};
use super::srq::{SharedReceiveQueue, SrqInner};
use crate::enums::{QpState, QpType};
use crate::error::{errno_error, Error, Result};
use crate::flags::QpAttrMask;
use crate::sys;

/// Queue sizes asked for at creation and granted by the library.
pub use crate::sys::ibv_qp_cap as QpCap;

/// What [`ProtectionDomain::create_qp`] needs.
#[derive(Clone, Copy, Debug)]
pub struct QpInit<'a> {
    /// CQ for send completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ for receive completions (may be the same CQ).
    pub recv_cq: &'a CompletionQueue,
    /// Requested queue sizes.
    pub cap: QpCap,
    /// Transport type; this crate connects [`QpType::Rc`].
    pub qp_type: QpType,
    /// Every send request generates a completion, whatever its flags.
    pub sq_sig_all: bool,
    /// Receives come from this shared receive queue (the QP then has no receive queue
    /// of its own).
    pub srq: Option<&'a SharedReceiveQueue>,
}

impl<'a> QpInit<'a> {
    /// An RC QP on `cq` for both directions, with `cap` sizes, signaling per request.
    pub fn rc(cq: &'a CompletionQueue, cap: QpCap) -> Self {
        QpInit {
            send_cq: cq,
            recv_cq: cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            srq: None,
        }
    }
}

/// A queue pair (`struct ibv_qp`), destroyed on drop (before its CQs and PD, which it
/// keeps alive).
pub struct QueuePair {
    pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _srq: Option<Arc<SrqInner>>,
    qp: NonNull<sys::ibv_qp>,
    /// `ops.post_send`, read once at creation.
    post_send: sys::ibv_post_send_fn,
    /// `ops.post_recv`, read once at creation.
    post_recv: sys::ibv_post_recv_fn,
    cap: QpCap,
    qp_num: u32,
}

// SAFETY: libibverbs is thread-safe, including posting to one QP from several threads
// (providers lock each queue); the pointers are only handed to the library.
unsafe impl Send for QueuePair {}
// SAFETY: as above; nothing is mutated through `&QueuePair` on the Rust side.
unsafe impl Sync for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: `qp` came from `ibv_create_qp` and is destroyed once, before the CQ
        // and PD references (fields) are released.
        let _ = unsafe { (self.pd.ctx.verbs.table().destroy_qp)(self.qp.as_ptr()) };
    }
}

impl QueuePair {
    pub(crate) fn new(pd: &ProtectionDomain, init: &QpInit<'_>) -> Result<Self> {
        let ctx = &pd.inner.ctx;
        if !Arc::ptr_eq(&init.send_cq.inner.ctx, ctx) || !Arc::ptr_eq(&init.recv_cq.inner.ctx, ctx)
        {
            return Err(Error::InvalidArgument {
                what: "the QP's CQs belong to another device context",
            });
        }
        // SAFETY: live context; the provider fills `ops` at open and never changes it.
        let ops = unsafe { (*ctx.ctx.as_ptr()).ops };
        let post_send = ops.post_send.ok_or(Error::OpMissing {
            op: "ops.post_send",
        })?;
        let post_recv = ops.post_recv.ok_or(Error::OpMissing {
            op: "ops.post_recv",
        })?;
        let mut attr = sys::ibv_qp_init_attr {
            send_cq: init.send_cq.inner.cq.as_ptr(),
            recv_cq: init.recv_cq.inner.cq.as_ptr(),
            cap: init.cap,
            qp_type: init.qp_type.as_raw(),
            sq_sig_all: c_int::from(init.sq_sig_all),
            srq: init.srq.map_or(core::ptr::null_mut(), |s| s.as_raw()),
            ..Default::default()
        };
        // SAFETY: live PD; `attr` names live CQs of the same context.
        let qp = unsafe { (ctx.verbs.table().create_qp)(pd.inner.pd.as_ptr(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::verbs_errno("ibv_create_qp"))?;
        // SAFETY: `qp` is live; `qp_num` is set at creation and never changes.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        Ok(QueuePair {
            pd: Arc::clone(&pd.inner),
            _send_cq: Arc::clone(&init.send_cq.inner),
            _recv_cq: Arc::clone(&init.recv_cq.inner),
            _srq: init.srq.map(|s| Arc::clone(&s.inner)),
            qp,
            post_send,
            post_recv,
            cap: attr.cap,
            qp_num,
        })
    }

    /// The QP number the peer addresses.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// The queue sizes the library granted (at least those asked for).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The raw QP, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.qp.as_ptr()
    }

    /// The protection domain.
    pub fn pd(&self) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::clone(&self.pd),
        }
    }

    /// The device context.
    pub fn context(&self) -> Context {
        Context {
            inner: Arc::clone(&self.pd.ctx),
        }
    }

    /// Posts a chain of send work requests (`ibv_post_send`, through the ops table: one
    /// indirect call, no allocation).
    ///
    /// # Safety
    /// - `wr` and every request chained through `next` (null-terminated) are valid, and
    ///   so is every `sg_list` of `num_sge` entries; the library reads them during the
    ///   call only.
    /// - Every scatter/gather entry lies in a memory region of this QP's PD (or the
    ///   request is `INLINE`), and that memory stays valid and is not otherwise accessed
    ///   in a conflicting way until the request's completion (or the QP's flush).
    /// - For RDMA/atomic requests, `wr.wr` holds the matching union member.
    ///
    /// # Errors
    /// [`Error::PostFailed`] with the position of the first request not posted; the
    /// requests before it were posted.
    #[inline]
    pub unsafe fn post_send(&self, wr: &mut sys::ibv_send_wr) -> Result<()> {
        let head: *mut sys::ibv_send_wr = wr;
        let mut bad: *mut sys::ibv_send_wr = core::ptr::null_mut();
        // SAFETY: live QP; the op belongs to its context; the caller vouches for the
        // chain.
        let rc = unsafe { (self.post_send)(self.qp.as_ptr(), head, &mut bad) };
        // SAFETY: the caller vouches that the chain is valid and null-terminated.
        unsafe { post_result("ibv_post_send", rc, head, bad, |w| (*w).next) }
    }

    /// Posts a chain of receive work requests (`ibv_post_recv`, through the ops table).
    ///
    /// # Safety
    /// As [`post_send`](Self::post_send): a valid null-terminated chain, and buffers in
    /// this PD's memory regions that stay valid and untouched until the completion.
    ///
    /// # Errors
    /// [`Error::PostFailed`] with the position of the first request not posted.
    #[inline]
    pub unsafe fn post_recv(&self, wr: &mut sys::ibv_recv_wr) -> Result<()> {
        let head: *mut sys::ibv_recv_wr = wr;
        let mut bad: *mut sys::ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: live QP; the op belongs to its context; the caller vouches for the
        // chain.
        let rc = unsafe { (self.post_recv)(self.qp.as_ptr(), head, &mut bad) };
        // SAFETY: the caller vouches that the chain is valid and null-terminated.
        unsafe { post_result("ibv_post_recv", rc, head, bad, |w| (*w).next) }
    }

    /// Modifies the QP (`ibv_modify_qp`) with the fields of `attr` selected by `mask`.
    /// [`crate::connect`] builds the attributes for RESET→INIT→RTR→RTS.
    pub fn modify(&self, attr: &sys::ibv_qp_attr, mask: QpAttrMask) -> Result<()> {
        self.modify_named(attr, mask, "ibv_modify_qp")
    }

    pub(crate) fn modify_named(
        &self,
        attr: &sys::ibv_qp_attr,
        mask: QpAttrMask,
        function: &'static str,
    ) -> Result<()> {
        let mask = c_int::try_from(mask.bits()).map_err(|_| Error::InvalidArgument {
            what: "QP attribute mask out of range",
        })?;
        // The C prototype takes a mutable pointer; hand it a copy so `attr` is never
        // written through.
        let mut attr = *attr;
        // SAFETY: live QP; `attr` is a complete `ibv_qp_attr`.
        let rc =
            unsafe { (self.pd.ctx.verbs.table().modify_qp)(self.qp.as_ptr(), &mut attr, mask) };
        if rc != 0 {
            return Err(Error::verbs_rc(function, rc));
        }
        Ok(())
    }

    /// Queries the attributes selected by `mask` (`ibv_query_qp`).
    pub fn query(&self, mask: QpAttrMask) -> Result<sys::ibv_qp_attr> {
        let mask = c_int::try_from(mask.bits()).map_err(|_| Error::InvalidArgument {
            what: "QP attribute mask out of range",
        })?;
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: live QP; both out-structs are writable and of the header's size.
        let rc = unsafe {
            (self.pd.ctx.verbs.table().query_qp)(self.qp.as_ptr(), &mut attr, mask, &mut init)
        };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_query_qp", rc));
        }
        Ok(attr)
    }

    /// The QP's current state, as the device reports it.
    pub fn state(&self) -> Result<QpState> {
        Ok(QpState::from_raw(self.query(QpAttrMask::STATE)?.qp_state))
    }
}

impl core::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num)
            .field("cap", &self.cap)
            .finish()
    }
}

/// A post's result: `Ok` for 0, else [`Error::PostFailed`] naming `function` and the
/// position in chain `head` of `bad`, the first request not posted.
///
/// # Safety
/// As [`chain_index`].
#[inline]
pub(super) unsafe fn post_result<T>(
    function: &'static str,
    rc: c_int,
    head: *mut T,
    bad: *mut T,
    next: impl Fn(*mut T) -> *mut T,
) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    Err(Error::PostFailed {
        function,
        // SAFETY: forwarded.
        index: unsafe { chain_index(head, bad, next) },
        source: errno_error(rc),
    })
}

/// Position of `bad` in the chain starting at `head` (0 when `bad` is null or not found,
/// i.e. nothing can be assumed posted).
///
/// # Safety
/// `head` starts a valid null-terminated chain linked by `next`.
unsafe fn chain_index<T>(head: *mut T, bad: *mut T, next: impl Fn(*mut T) -> *mut T) -> usize {
    if bad.is_null() {
        return 0;
    }
    let mut cur = head;
    let mut i = 0;
    while !cur.is_null() {
        if cur == bad {
            return i;
        }
        cur = next(cur);
        i += 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_index_finds_the_failed_request() {
        let mut wrs = [sys::ibv_recv_wr::default(); 3];
        let base = wrs.as_mut_ptr();
        // SAFETY: indices within the 3-element array.
        unsafe {
            (*base).next = base.add(1);
            (*base.add(1)).next = base.add(2);
        }
        // SAFETY: the chain above is valid and null-terminated.
        unsafe {
            assert_eq!(chain_index(base, base.add(2), |w| (*w).next), 2);
            assert_eq!(chain_index(base, base, |w| (*w).next), 0);
            assert_eq!(chain_index(base, core::ptr::null_mut(), |w| (*w).next), 0);
        }
    }
}
