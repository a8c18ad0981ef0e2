//! Asynchronous events: `struct ibv_async_event` and `ibv_get_async_event` /
//! `ibv_ack_async_event` over the context's `async_fd` (the struct is vqp-sys').

use core::ffi::c_int;

use vqp_sys::*;

pub use vqp_sys::{ibv_async_event, ibv_async_event_element};

use super::object::ctx;
use super::set_errno;

// `ibv_ack_async_event` finds the context through the object an event names.
const _: () = {
    assert!(core::mem::offset_of!(ibv_qp, context) == 0);
    assert!(core::mem::offset_of!(ibv_cq, context) == 0);
    assert!(core::mem::offset_of!(ibv_srq, context) == 0);
};

/// Before the QP at `qp` is freed: its events nobody took are dropped, and those
/// taken are waited on until acknowledged ([`crate::cq::CtxCore::forget`]).
///
/// # Safety
/// `qp` is a retired QP of ours, not yet freed.
pub(super) unsafe fn forget_qp(qp: *mut ibv_qp) {
    // SAFETY: the QP's ABI struct is still allocated (contract); its context outlives it.
    if let Some(c) = unsafe { ctx((*qp).context) } {
        c.core.forget(qp as usize);
    }
}

/// `ibv_get_async_event`: waits for the next asynchronous event of the context
/// (`IBV_EVENT_CQ_ERR` on a CQ overrun, `IBV_EVENT_QP_FATAL` for an injected QP
/// failure, `IBV_EVENT_QP_REQ_ERR` at a responder that received an invalid request,
/// `IBV_EVENT_QP_ACCESS_ERR` at one that refused a remote access (bad rkey, bounds,
/// access flags),
/// `IBV_EVENT_PORT_ERR` / `IBV_EVENT_PORT_ACTIVE` on link changes). Honours `O_NONBLOCK`
/// on `context->async_fd`. As with a kernel provider, destroying a QP, CQ or SRQ drops
/// its events not yet taken and waits until those taken were acknowledged.
///
/// # Safety
/// `context` is a live context; `event` points to a writable [`ibv_async_event`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let ev = match c.core.async_fd.wait_for(|| c.core.take()) {
        Ok(ev) => ev,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
    };
    let mut out = ibv_async_event {
        event_type: ev.kind,
        ..Default::default()
    };
    if crate::cq::names_object(ev.kind) {
        out.element.cq = ev.element as *mut ibv_cq;
    } else {
        out.element.port_num = ev.element as c_int;
    }
    // SAFETY: writable (contract).
    unsafe { event.write(out) };
    0
}

/// `ibv_ack_async_event`: an event naming a QP, CQ or SRQ no longer holds back
/// that object's destruction. Like libibverbs, it finds the context through the
/// object (`context` is the first member of each of them).
///
/// # Safety
/// `event` came from [`ibv_get_async_event`] and was not acknowledged before; the
/// object it names is not yet destroyed (its destruction waits for this).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: an event `ibv_get_async_event` wrote (contract).
    let ev = unsafe { &*event };
    if !crate::cq::names_object(ev.event_type) {
        return;
    }
    // SAFETY: every member of the element union is a pointer over the same bytes.
    let object = unsafe { ev.element.cq };
    if object.is_null() {
        return;
    }
    // SAFETY: the object is live until this acknowledgement (its destroy waits for
    // it), and `ibv_qp`, `ibv_cq` and `ibv_srq` all begin with `context`.
    let context = unsafe { (*object).context };
    // SAFETY: the object's context, live while the object is.
    if let Some(c) = unsafe { ctx(context) } {
        c.core.ack(ev.event_type, object as usize);
    }
}
