//! The objects handed out: each is a `#[repr(C)]` wrapper whose **first field** holds the
//! rdma-core struct (`ibv_pd`, `ibv_mr`, `ibv_cq_ex` with `ibv_cq` at its head,
//! `ibv_comp_channel`, `ibv_qp_ex` with `ibv_qp` at its head, …), followed by the
//! provider's state. The pointer handed out is the struct's, at [`Object::OFFSET`] in the
//! wrapper: 0 for all but the context, whose `ibv_context` is the *last* field of the
//! `verbs_context` in front of it (verbs.h's `verbs_get_ctx` finds the extended
//! operations just before the pointer). So an application reads `qp->qp_num`,
//! `mr->lkey` or `cq->cq_context` directly, and a pointer it hands back is turned back
//! into the wrapper.
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
use crate::qp::Qp;

/// A protection domain's shared part: its id, device and users.
pub(crate) struct PdCore {
    pub id: u32,
    pub dev: usize,
    /// MRs and QPs in this PD (deallocating it while non-zero is `EBUSY`).
    pub users: std::sync::atomic::AtomicU32,
}

/// `verbs_context` (whose last field is the `ibv_context` handed out) and the context's
/// state.
#[repr(C)]
pub(crate) struct CtxObj {
    pub(super) ibv: UnsafeCell<verbs_context>,
    pub(super) core: Arc<CtxCore>,
    /// The context's `cmd_fd`: a descriptor it owns and closes with it, as a kernel
    /// provider's context owns its open `uverbs` device (programs `dup` it to share
    /// the context, `ibv_import_device`, which answers `EOPNOTSUPP` here). No command
    /// goes through it; it never becomes readable.
    pub(super) cmd: crate::os::EventFd,
}

/// `ibv_pd` and the PD's state. A parent domain (`ibv_alloc_parent_domain`) is a PD
/// too: its core has the protection domain's id and device (so keys of the one are
/// good in the other) and a count of users of its own.
#[repr(C)]
pub(crate) struct PdObj {
    pub(super) ibv: ibv_pd,
    pub(super) core: Arc<PdCore>,
    /// What a parent domain holds; `None` for a protection domain.
    pub(super) parent: Option<Parent>,
}

/// A parent domain's references: the protection domain's and the thread domain's user
/// counts it raised (and lowers when it is deallocated), and its `pd_context`.
pub(crate) struct Parent {
    pub(super) pd: Arc<PdCore>,
    pub(super) td: Option<Arc<std::sync::atomic::AtomicU32>>,
    #[allow(dead_code)]
    pub(super) pd_context: usize,
}

/// `ibv_td`: a thread domain, and the parent domains using it.
#[repr(C)]
pub(crate) struct TdObj {
    pub(super) ibv: ibv_td,
    pub(super) users: Arc<std::sync::atomic::AtomicU32>,
}

/// `ibv_mr` and the region's PD (and device memory, for `ibv_reg_dm_mr`'s regions).
#[repr(C)]
pub(crate) struct MrObj {
    pub(super) ibv: ibv_mr,
    pub(super) pd: Arc<PdCore>,
    /// The user count of the device memory the region lies in, if it does.
    pub(super) dm: Option<Arc<std::sync::atomic::AtomicU32>>,
}

/// `ibv_dm` and the host memory that stands for device memory.
#[repr(C)]
pub(crate) struct DmObj {
    pub(super) ibv: ibv_dm,
    pub(super) mem: super::state::DmMem,
    /// Regions registered over it (`ibv_free_dm` is `EBUSY` while non-zero).
    pub(super) users: Arc<std::sync::atomic::AtomicU32>,
}

/// `ibv_comp_channel` and its events.
#[repr(C)]
pub(crate) struct ChannelObj {
    pub(super) ibv: ibv_comp_channel,
    pub(super) core: Arc<ChannelCore>,
}

/// `ibv_cq_ex` (whose head is the `ibv_cq` handed out) and the CQ's state. A CQ made
/// by `ibv_create_cq` has the extended part zeroed; `ibv_create_cq_ex` fills it.
#[repr(C)]
pub(crate) struct CqObj {
    pub(super) ibv: UnsafeCell<ibv_cq_ex>,
    pub(super) core: Arc<CqCore>,
    /// The completion between `ibv_start_poll` and `ibv_end_poll` (extended CQs).
    pub(super) current: Mutex<super::state::Current>,
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

/// `ibv_qp_ex` (whose head is the `ibv_qp` handed out) and the QP's state. A QP made
/// without send ops has the extended part zeroed and `send_ops` 0.
#[repr(C)]
pub(crate) struct QpObj {
    pub(super) ibv: UnsafeCell<ibv_qp_ex>,
    pub(super) core: Arc<Qp>,
    pub(super) pd: Arc<PdCore>,
    /// `IBV_QP_EX_WITH_*` the QP was created with (`ibv_create_qp_ex`); non-zero makes
    /// it an extended QP (`ibv_qp_to_qp_ex`).
    pub(super) send_ops: u64,
    /// The work requests between `ibv_wr_start` and `ibv_wr_complete`.
    pub(super) batch: Mutex<super::state::Batch>,
    /// A handle `ibv_open_qp` made on an XRC receive QP created elsewhere: destroying
    /// it closes the handle only.
    pub(super) opened: bool,
}

/// An `ibv_xrcd`: an XRC domain as one `ibv_open_xrcd` opened it.
#[repr(C)]
pub(crate) struct XrcdObj {
    pub(super) ibv: ibv_xrcd,
    pub(super) core: Arc<crate::xrc::XrcdCore>,
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
    assert!(core::mem::offset_of!(TdObj, ibv) == 0);
    assert!(core::mem::offset_of!(DmObj, ibv) == 0);
    assert!(core::mem::offset_of!(MwObj, ibv) == 0);
    assert!(core::mem::offset_of!(XrcdObj, ibv) == 0);
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
    Td,
    Dm,
    Mw,
    Xrcd,
}

/// A wrapper and the C struct at its offset 0.
pub(super) trait Object: Sized {
    /// The rdma-core struct the application sees.
    type Abi;
    /// The wrapper's kind in the registry.
    const KIND: Kind;
    /// Where the ABI struct handed out sits in the wrapper.
    const OFFSET: usize = 0;
}

macro_rules! object {
    ($t:ty, $abi:ty, $kind:ident) => {
        impl Object for $t {
            type Abi = $abi;
            const KIND: Kind = Kind::$kind;
        }
    };
}
impl Object for CtxObj {
    type Abi = ibv_context;
    const KIND: Kind = Kind::Context;
    const OFFSET: usize = core::mem::offset_of!(verbs_context, context);
}
object!(PdObj, ibv_pd, Pd);
object!(MrObj, ibv_mr, Mr);
object!(ChannelObj, ibv_comp_channel, Channel);
object!(CqObj, ibv_cq, Cq);
object!(QpObj, ibv_qp, Qp);
object!(SrqObj, ibv_srq, Srq);
object!(AhObj, ibv_ah, Ah);
object!(TdObj, ibv_td, Td);
object!(DmObj, ibv_dm, Dm);
object!(MwObj, ibv_mw, Mw);
object!(XrcdObj, ibv_xrcd, Xrcd);

/// Where a registered object is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Usable.
    Live,
    /// Its destroy verb is under way (`ibv_destroy_cq` waiting for event acks): found
    /// only by [`live_or_closing`], and a second destroy is refused.
    Closing,
}

/// Every object handed out and not yet freed, by the address of its ABI struct, with
/// the start of its allocation. A `BTreeMap` rather than a `HashMap`: its nodes are
/// referenced by their start, so memcheck sees the memory as reachable, whereas
/// hashbrown's pointer into the middle of its table is reported as "possibly lost" at
/// exit; and the start kept beside the key does the same for an object whose ABI struct
/// is not at its start (a context: its `verbs_context` comes first), which an
/// application may keep open until it exits.
static LIVE: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());

/// A registered object: its kind, its phase, and where its allocation starts.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Entry {
    kind: Kind,
    phase: Phase,
    /// Never dereferenced: an address memcheck's leak scan finds (it reads words, not
    /// types).
    start: usize,
}

/// The ABI pointer of the wrapper at `p`.
fn abi_of<T: Object>(p: *mut T) -> *mut T::Abi {
    p.cast::<u8>().wrapping_add(T::OFFSET).cast()
}

/// The wrapper of the ABI pointer `p` (which need not be one: only arithmetic).
fn wrapper_of<T: Object>(p: *mut T::Abi) -> *mut T {
    p.cast::<u8>().wrapping_sub(T::OFFSET).cast()
}

/// Moves `obj` to the heap, registers it as live, and returns the pointer to its ABI
/// struct.
pub(super) fn publish<T: Object>(obj: T) -> *mut T::Abi {
    let start = Box::into_raw(Box::new(obj));
    let p = abi_of(start);
    let e = Entry {
        kind: T::KIND,
        phase: Phase::Live,
        start: start as usize,
    };
    lock(&LIVE).insert(p as usize, e);
    p
}

/// Whether `p` is registered as a `T` in a phase `ok` accepts.
fn registered<T: Object>(p: *mut T::Abi, ok: impl Fn(Phase) -> bool) -> bool {
    matches!(lock(&LIVE).get(&(p as usize)), Some(e) if e.kind == T::KIND && ok(e.phase))
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
    // SAFETY: registered as a live `T`, so `p` is the ABI struct of the `Box<T>`
    // allocation `publish` leaked, at `T::OFFSET`, and it is not freed before its destroy
    // verb, which the contract keeps away while the reference is used.
    unsafe { wrapper_of::<T>(p).as_ref() }
}

/// The open context behind `context`; `None` for null or one that is not open.
///
/// # Safety
/// No other thread closes the context while the reference is used.
pub(super) unsafe fn ctx<'a>(context: *mut ibv_context) -> Option<&'a CtxObj> {
    // SAFETY: forwarded.
    unsafe { live::<CtxObj>(context) }
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
    unsafe { wrapper_of::<T>(p).as_ref() }
}

/// Borrows the wrapper behind an ABI pointer without consulting the registry (the data
/// path: see the module docs); `None` for null.
///
/// # Safety
/// `p` is null or a live `T` of this provider, not destroyed while the reference is
/// used.
pub(super) unsafe fn unchecked<'a, T: Object>(p: *mut T::Abi) -> Option<&'a T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract, a non-null `p` is the ABI struct of a live `T`, at
    // `T::OFFSET` in it.
    unsafe { wrapper_of::<T>(p).as_ref() }
}

/// An object its destroy verb took out of use: lookups no longer find it (a second
/// destroy is refused) and [`Retiring::free`] frees it.
pub(super) struct Retiring<T: Object> {
    ptr: *mut T,
    /// The key it is registered under (its ABI pointer).
    key: usize,
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
        lock(&LIVE).remove(&self.key);
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
    if (entry.kind, entry.phase) != (T::KIND, Phase::Live) {
        return Err(libc::EINVAL);
    }
    let ptr = wrapper_of::<T>(p);
    // SAFETY: registered as a live `T`: the ABI struct of the `Box<T>` allocation
    // `publish` leaked, not freed while it is registered (and only `Retiring::free`
    // frees it).
    check(unsafe { &*ptr })?;
    entry.phase = Phase::Closing;
    Ok(Retiring {
        ptr,
        key: p as usize,
    })
}
