//! The objects handed out: each is a `#[repr(C)]` wrapper whose **first field** is the
//! rdma-core struct (`ibv_context`, `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`,
//! `ibv_qp`), followed by the provider's state. A pointer to the wrapper is a valid
//! pointer to the struct, so an application reads `qp->qp_num`, `mr->lkey` or
//! `cq->cq_context` directly, and a pointer it hands back is cast to the wrapper.
//!
//! # Lifetimes
//! Every object handed out is recorded, by address and kind, in a registry of live
//! handles until its destroy verb frees it. The control-path verbs look a pointer up
//! there before they dereference it, so a second `ibv_destroy_qp`, `ibv_destroy_cq`,
//! `ibv_dereg_mr` (and so on) of the same pointer, a pointer of another kind, or one
//! this provider never handed out is refused with `EINVAL` and freed memory is never
//! touched. libibverbs leaves this undefined; real providers (mlx5) would free twice.
//!
//! Two limits remain, both inherent in the C ABI:
//! - the data path (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
//!   `ibv_req_notify_cq`) is not checked: verbs.h's inline wrappers read
//!   `qp->context->ops` (or the CQ's) from the object before the provider is reached,
//!   so a stale pointer is already undefined behaviour in the caller, and a registry
//!   lookup would add a lock to every post and poll for nothing;
//! - an address freed and then reused by a new object of the same kind is that new
//!   object: a destroy through a stale pointer then destroys the new one.
//!
//! Using an object from one thread while another destroys it stays the caller's race,
//! as in libibverbs.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use vqp_sys::*;

use crate::cq::{ChannelCore, CqCore, CtxCore};
use crate::os::lock;
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

/// `ibv_srq` and the SRQ's state.
#[repr(C)]
pub(crate) struct SrqObj {
    pub(super) ibv: UnsafeCell<ibv_srq>,
    pub(super) core: Arc<crate::srq::SrqCore>,
    pub(super) pd: Arc<PdCore>,
}

/// `ibv_ah` and the address it names.
#[repr(C)]
pub(crate) struct AhObj {
    pub(super) ibv: ibv_ah,
    /// The attributes it was created with.
    pub(super) attr: ibv_ah_attr,
    /// The device the address resolves to, if any.
    pub(super) dev: Option<usize>,
    pub(super) pd: Arc<PdCore>,
}

/// `ibv_mw`, the window's handle in the key table and its PD.
#[repr(C)]
pub(crate) struct MwObj {
    /// The application reads `rkey`, which `ibv_bind_mw` changes.
    pub(super) ibv: UnsafeCell<ibv_mw>,
    /// The window's slot in the key table (`key >> 8`).
    pub(super) handle: u32,
    pub(super) pd: Arc<PdCore>,
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
    assert!(core::mem::offset_of!(SrqObj, ibv) == 0);
    assert!(core::mem::offset_of!(AhObj, ibv) == 0);
    assert!(core::mem::offset_of!(MwObj, ibv) == 0);
};

/// The kinds of object handed out; a pointer registered as one kind is never taken for
/// another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Context,
    Pd,
    Mr,
    Channel,
    Cq,
    Qp,
    Srq,
    Ah,
    Mw,
}

/// A wrapper and the C struct at its offset 0.
pub(super) trait Object: Sized {
    /// The rdma-core struct the application sees.
    type Abi;
    /// The wrapper's kind in the registry.
    const KIND: Kind;
}

macro_rules! object {
    ($t:ty, $abi:ty, $kind:ident) => {
        impl Object for $t {
            type Abi = $abi;
            const KIND: Kind = Kind::$kind;
        }
    };
}
object!(CtxObj, ibv_context, Context);
object!(PdObj, ibv_pd, Pd);
object!(MrObj, ibv_mr, Mr);
object!(ChannelObj, ibv_comp_channel, Channel);
object!(CqObj, ibv_cq, Cq);
object!(QpObj, ibv_qp, Qp);
object!(SrqObj, ibv_srq, Srq);
object!(AhObj, ibv_ah, Ah);
object!(MwObj, ibv_mw, Mw);

/// Where a registered object is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Usable.
    Live,
    /// Its destroy verb is under way (`ibv_destroy_cq` waiting for event acks): found
    /// only by [`live_or_closing`], and a second destroy is refused.
    Closing,
}

/// Every object handed out and not yet freed, by address. A `BTreeMap` rather than a
/// `HashMap`: its nodes are referenced by their start, so memcheck sees the memory as
/// reachable, whereas hashbrown's pointer into the middle of its table is reported as
/// "possibly lost" at exit.
static LIVE: Mutex<BTreeMap<usize, (Kind, Phase)>> = Mutex::new(BTreeMap::new());

/// Moves `obj` to the heap, registers it as live, and returns the pointer to its
/// leading ABI struct.
pub(super) fn publish<T: Object>(obj: T) -> *mut T::Abi {
    let p = Box::into_raw(Box::new(obj));
    lock(&LIVE).insert(p as usize, (T::KIND, Phase::Live));
    p.cast()
}

/// Whether `p` is registered as a `T` in a phase `ok` accepts.
fn registered<T: Object>(p: *mut T::Abi, ok: impl Fn(Phase) -> bool) -> bool {
    matches!(lock(&LIVE).get(&(p as usize)), Some(&(k, ph)) if k == T::KIND && ok(ph))
}

/// Borrows the live `T` behind `p`: `None` for null, for a pointer this provider did
/// not hand out as a `T`, or for one destroyed (or being destroyed).
///
/// # Safety
/// No other thread destroys the object while the reference is in use (libibverbs'
/// rule: an object is not used concurrently with its destruction).
pub(super) unsafe fn live<'a, T: Object>(p: *mut T::Abi) -> Option<&'a T> {
    if !registered::<T>(p, |ph| ph == Phase::Live) {
        return None;
    }
    // SAFETY: registered as a live `T`, so `p` is the `Box<T>` allocation `publish`
    // leaked (the ABI struct is at offset 0, checked above) and it is not freed before
    // its destroy verb, which the contract keeps away while the reference is used.
    unsafe { p.cast::<T>().as_ref() }
}

/// As [`live`], also accepting an object whose destroy verb is under way.
///
/// # Safety
/// As [`live`]: the destroy verb frees the object only after the reference's use.
pub(super) unsafe fn live_or_closing<'a, T: Object>(p: *mut T::Abi) -> Option<&'a T> {
    if !registered::<T>(p, |_| true) {
        return None;
    }
    // SAFETY: as in `live`: a registered `T` is not freed yet.
    unsafe { p.cast::<T>().as_ref() }
}

/// Borrows the wrapper behind an ABI pointer without consulting the registry (the data
/// path: see the module docs); `None` for null.
///
/// # Safety
/// `p` is null or a live `T` of this provider, not destroyed while the reference is
/// used.
pub(super) unsafe fn unchecked<'a, T: Object>(p: *mut T::Abi) -> Option<&'a T> {
    // SAFETY: per the contract, a non-null `p` is a live `T` whose first field (offset
    // 0, checked above) is the ABI struct.
    unsafe { p.cast::<T>().as_ref() }
}

/// An object its destroy verb took out of use: lookups no longer find it (a second
/// destroy is refused) and [`Retiring::free`] frees it.
pub(super) struct Retiring<T: Object> {
    ptr: *mut T,
}

impl<T: Object> Retiring<T> {
    /// The object, until it is freed.
    pub(super) fn get(&self) -> &T {
        // SAFETY: `retire` checked the pointer was a registered `T`; it is freed only
        // by `free`, which consumes `self`.
        unsafe { &*self.ptr }
    }

    /// Removes the object from the registry and frees it.
    pub(super) fn free(self) {
        lock(&LIVE).remove(&(self.ptr as usize));
        // SAFETY: the `Box<T>` allocation `publish` leaked; `retire` hands out one
        // `Retiring` per object (it marks it closing), so it is freed once.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// Starts destroying the `T` behind `p`. `EINVAL` unless it is a live `T`; otherwise
/// `check` decides (`EBUSY` while in use, say), with the registry locked so that two
/// destroy calls for one object cannot both pass. On success the object is closing.
pub(super) fn retire<T: Object>(
    p: *mut T::Abi,
    check: impl FnOnce(&T) -> Result<(), c_int>,
) -> Result<Retiring<T>, c_int> {
    let mut live = lock(&LIVE);
    let Some(entry) = live.get_mut(&(p as usize)) else {
        return Err(libc::EINVAL);
    };
    if *entry != (T::KIND, Phase::Live) {
        return Err(libc::EINVAL);
    }
    let ptr = p.cast::<T>();
    // SAFETY: registered as a live `T`: the `Box<T>` allocation `publish` leaked, not
    // freed while it is registered (and only `Retiring::free` frees it).
    check(unsafe { &*ptr })?;
    entry.1 = Phase::Closing;
    Ok(Retiring { ptr })
}
