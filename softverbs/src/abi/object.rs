//! The objects handed out: each is a `#[repr(C)]` wrapper whose **first field** is the
//! rdma-core struct (`ibv_context`, `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`,
//! `ibv_qp`), followed by the provider's state. A pointer to the wrapper is a valid
//! pointer to the struct, so an application reads `qp->qp_num`, `mr->lkey` or
//! `cq->cq_context` directly, and a pointer it hands back is cast to the wrapper.

use core::cell::UnsafeCell;
use std::sync::Arc;

use vqp_host::sys::*;

use crate::cq::{ChannelCore, CqCore, CtxCore};
use crate::qp::QpCore;

/// A protection domain's shared part: its id, device and users.
pub(crate) struct PdCore {
    pub id: u32,
    pub dev: usize,
    /// MRs and QPs in this PD (deallocating it while non-zero is `EBUSY`).
    pub users: std::sync::atomic::AtomicU32,
}

/// `ibv_context` and the context's state.
#[repr(C)]
pub(crate) struct CtxObj {
    pub(super) ibv: UnsafeCell<ibv_context>,
    pub(super) core: Arc<CtxCore>,
}

/// `ibv_pd` and the PD's state.
#[repr(C)]
pub(crate) struct PdObj {
    pub(super) ibv: ibv_pd,
    pub(super) core: Arc<PdCore>,
}

/// `ibv_mr` and the region's PD.
#[repr(C)]
pub(crate) struct MrObj {
    pub(super) ibv: ibv_mr,
    pub(super) pd: Arc<PdCore>,
}

/// `ibv_comp_channel` and its events.
#[repr(C)]
pub(crate) struct ChannelObj {
    pub(super) ibv: ibv_comp_channel,
    pub(super) core: Arc<ChannelCore>,
}

/// `ibv_cq` and the CQ's state.
#[repr(C)]
pub(crate) struct CqObj {
    pub(super) ibv: UnsafeCell<ibv_cq>,
    pub(super) core: Arc<CqCore>,
}

/// `ibv_qp` and the QP's state.
#[repr(C)]
pub(crate) struct QpObj {
    pub(super) ibv: UnsafeCell<ibv_qp>,
    pub(super) core: Arc<QpCore>,
    pub(super) pd: Arc<PdCore>,
}

// The wrappers must start with the ABI struct, so that the two pointers are one.
const _: () = {
    assert!(core::mem::offset_of!(CtxObj, ibv) == 0);
    assert!(core::mem::offset_of!(PdObj, ibv) == 0);
    assert!(core::mem::offset_of!(MrObj, ibv) == 0);
    assert!(core::mem::offset_of!(ChannelObj, ibv) == 0);
    assert!(core::mem::offset_of!(CqObj, ibv) == 0);
    assert!(core::mem::offset_of!(QpObj, ibv) == 0);
};

/// Moves `obj` to the heap and returns the pointer to its leading ABI struct.
pub(super) fn into_raw<T, U>(obj: T) -> *mut U {
    Box::into_raw(Box::new(obj)).cast::<U>()
}

/// Borrows the wrapper behind an ABI pointer; `None` for null.
///
/// # Safety
/// `p` is null or was returned by [`into_raw`] for a `T` and not yet freed.
pub(super) unsafe fn obj<'a, T, U>(p: *mut U) -> Option<&'a T> {
    // SAFETY: per the contract, a non-null `p` points to a live `T` whose first field
    // (offset 0, checked above) is the `U` the caller holds.
    unsafe { p.cast::<T>().as_ref() }
}

/// Frees a wrapper made by [`into_raw`].
///
/// # Safety
/// `p` was returned by [`into_raw`] for a `T`, is freed once, and is not used after.
pub(super) unsafe fn free<T, U>(p: *mut U) {
    // SAFETY: per the contract, `p` is the `Box<T>` allocation `into_raw` leaked.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
}
