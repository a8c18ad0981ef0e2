//! The libibverbs C ABI: the objects handed out, the exported `ibv_*` functions, the
//! `ibv_context_ops` data path, and [`verbs_table`].
//!
//! Every object is allocated as a `#[repr(C)]` wrapper whose **first field** is the
//! rdma-core struct (`ibv_context`, `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`,
//! `ibv_qp`), followed by the provider's state. A pointer to the wrapper is a valid
//! pointer to the struct, so an application reads `qp->qp_num`, `mr->lkey` or
//! `cq->cq_context` directly, and a pointer it hands back is cast to the wrapper.
//!
//! The context is *not* an extended `verbs_context` (`abi_compat` is null): verbs.h's
//! inline wrappers that look for extended operations then fall back to the exported
//! functions (`ibv_query_port`, `ibv_query_device_ex` → `ibv_query_device`) or report
//! `EOPNOTSUPP`, as with an old provider.
//!
//! The exports, by module: `control` (devices, PD, MR, CQ, channels, QPs, events),
//! `data` (the ops table), `query` (device index, GID table and types, P_Key index, port
//! speed), `sysfs` (`ibv_read_sysfs_file` with the soft devices' attributes), `text`
//! (event and opcode names, rates, fork), `resize` (`ibv_resize_cq`, `ibv_rereg_mr`),
//! `buf` (`ibv_reg_mr_ex`, `ibv_alloc_buf`), `address` (address vectors; AH and
//! multicast unsupported), `unsupported` (SRQ, import, ECE, DMA handles), `marshall`
//! (kernel struct copies), `compat` (what the old-version and provider-private entries
//! of [`crate::symbols`] jump to), `faults` (the C fault controls).

pub(crate) mod fd;

mod address;
mod buf;
mod compat;
mod control;
mod data;
mod faults;
mod marshall;
mod query;
mod resize;
mod sysfs;
mod text;
mod unsupported;

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use std::sync::Arc;

use vqp_host::sys::*;
use vqp_host::VerbsTable;

use crate::cq::{ChannelCore, CqCore, CtxCore};
use crate::qp::QpCore;

pub use address::*;
pub use buf::*;
pub use compat::*;
pub use control::*;
pub use faults::*;
pub use marshall::*;
pub use query::*;
pub use resize::*;
pub use sysfs::*;
pub use text::*;
pub use unsupported::*;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

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
    ibv: UnsafeCell<ibv_context>,
    core: Arc<CtxCore>,
}

/// `ibv_pd` and the PD's state.
#[repr(C)]
pub(crate) struct PdObj {
    ibv: ibv_pd,
    core: Arc<PdCore>,
}

/// `ibv_mr` and the region's PD.
#[repr(C)]
pub(crate) struct MrObj {
    ibv: ibv_mr,
    pd: Arc<PdCore>,
}

/// `ibv_comp_channel` and its events.
#[repr(C)]
pub(crate) struct ChannelObj {
    ibv: ibv_comp_channel,
    core: Arc<ChannelCore>,
}

/// `ibv_cq` and the CQ's state.
#[repr(C)]
pub(crate) struct CqObj {
    ibv: UnsafeCell<ibv_cq>,
    core: Arc<CqCore>,
}

/// `ibv_qp` and the QP's state.
#[repr(C)]
pub(crate) struct QpObj {
    ibv: UnsafeCell<ibv_qp>,
    core: Arc<QpCore>,
    pd: Arc<PdCore>,
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
fn into_raw<T, U>(obj: T) -> *mut U {
    Box::into_raw(Box::new(obj)).cast::<U>()
}

/// Borrows the wrapper behind an ABI pointer; `None` for null.
///
/// # Safety
/// `p` is null or was returned by [`into_raw`] for a `T` and not yet freed.
unsafe fn obj<'a, T, U>(p: *mut U) -> Option<&'a T> {
    // SAFETY: per the contract, a non-null `p` points to a live `T` whose first field
    // (offset 0, checked above) is the `U` the caller holds.
    unsafe { p.cast::<T>().as_ref() }
}

/// Frees a wrapper made by [`into_raw`].
///
/// # Safety
/// `p` was returned by [`into_raw`] for a `T`, is freed once, and is not used after.
unsafe fn free<T, U>(p: *mut U) {
    // SAFETY: per the contract, `p` is the `Box<T>` allocation `into_raw` leaked.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
}

/// The in-process function table, for `vqp_host::Verbs::from_table`: the same functions
/// the cdylib exports, called without `dlopen`.
///
/// ```
/// let verbs = unsafe { vqp_host::Verbs::from_table(vqp_softverbs::verbs_table()) };
/// let ctx = vqp_host::Context::open(&verbs, Some("soft0")).unwrap();
/// assert_eq!(ctx.device_name(), "soft0");
/// ```
pub fn verbs_table() -> VerbsTable {
    VerbsTable {
        get_device_list: ibv_get_device_list,
        free_device_list: ibv_free_device_list,
        get_device_name: ibv_get_device_name,
        get_device_guid: ibv_get_device_guid,
        open_device: ibv_open_device,
        close_device: ibv_close_device,
        query_device: ibv_query_device,
        query_port: ibv_query_port,
        query_gid: ibv_query_gid,
        alloc_pd: ibv_alloc_pd,
        dealloc_pd: ibv_dealloc_pd,
        reg_mr: ibv_reg_mr,
        dereg_mr: ibv_dereg_mr,
        create_comp_channel: ibv_create_comp_channel,
        destroy_comp_channel: ibv_destroy_comp_channel,
        create_cq: ibv_create_cq,
        destroy_cq: ibv_destroy_cq,
        get_cq_event: ibv_get_cq_event,
        ack_cq_events: ibv_ack_cq_events,
        create_qp: ibv_create_qp,
        destroy_qp: ibv_destroy_qp,
        modify_qp: ibv_modify_qp,
        query_qp: ibv_query_qp,
        wc_status_str: ibv_wc_status_str,
    }
}

/// The data-path operations every context carries.
fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        poll_cq: Some(data::poll_cq),
        req_notify_cq: Some(data::req_notify_cq),
        post_send: Some(data::post_send),
        post_recv: Some(data::post_recv),
        ..Default::default()
    }
}

/// `union { ibv_cq *cq; ibv_qp *qp; ibv_srq *srq; ibv_wq *wq; int port_num; }` of
/// [`ibv_async_event`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    /// The CQ of a CQ event.
    pub cq: *mut ibv_cq,
    /// The QP of a QP event.
    pub qp: *mut ibv_qp,
    /// The SRQ of an SRQ event (never raised here).
    pub srq: *mut c_void,
    /// The port of a port event.
    pub port_num: c_int,
}

/// `struct ibv_async_event`, filled by [`ibv_get_async_event`].
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct ibv_async_event {
    /// The object the event is about.
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type` (`IBV_EVENT_*`).
    pub event_type: u32,
}

impl Default for ibv_async_event {
    fn default() -> Self {
        ibv_async_event {
            element: ibv_async_event_element {
                cq: core::ptr::null_mut(),
            },
            event_type: 0,
        }
    }
}

impl core::fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: every member is plain data over the same bytes; reading the pointer
        // member only copies the address.
        let element = unsafe { self.element.cq };
        f.debug_struct("ibv_async_event")
            .field("element", &element)
            .field("event_type", &self.event_type)
            .finish()
    }
}
