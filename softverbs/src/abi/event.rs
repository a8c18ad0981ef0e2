//! Asynchronous events: `struct ibv_async_event` and `ibv_get_async_event` /
//! `ibv_ack_async_event` over the context's `async_fd` (the struct is vqp-sys').

use core::ffi::c_int;

use vqp_sys::*;

pub use vqp_sys::{ibv_async_event, ibv_async_event_element};

use super::object::ctx;
use super::set_errno;

/// `ibv_get_async_event`: waits for the next asynchronous event of the context
/// (`IBV_EVENT_CQ_ERR` on a CQ overrun, `IBV_EVENT_QP_FATAL` for an injected QP
/// failure, `IBV_EVENT_QP_REQ_ERR` at a responder that received an invalid request,
/// `IBV_EVENT_QP_ACCESS_ERR` at one that refused a remote access (bad rkey, bounds,
/// access flags),
/// `IBV_EVENT_PORT_ERR` / `IBV_EVENT_PORT_ACTIVE` on link changes). Honours `O_NONBLOCK`
/// on `context->async_fd`.
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
    if let Err(e) = c.core.async_fd.wait_one() {
        set_errno(e.raw_os_error().unwrap_or(libc::EIO));
        return -1;
    }
    let Some(ev) = c.core.take() else {
        set_errno(libc::EIO);
        return -1;
    };
    let mut out = ibv_async_event {
        event_type: ev.kind,
        ..Default::default()
    };
    if matches!(
        ev.kind,
        crate::cq::event::PORT_ACTIVE | crate::cq::event::PORT_ERR
    ) {
        out.element.port_num = ev.element as c_int;
    } else {
        out.element.cq = ev.element as *mut ibv_cq;
    }
    // SAFETY: writable (contract).
    unsafe { event.write(out) };
    0
}

/// `ibv_ack_async_event`: nothing to release here.
///
/// # Safety
/// `event` came from [`ibv_get_async_event`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
