//! Completion channels and completion queues: creation, destruction, and the
//! `ibv_get_cq_event` / `ibv_ack_cq_events` pair. Polling and arming are in `data`.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vqp_sys::*;

use super::object::{ctx, live, live_or_closing, publish, retire, ChannelObj, CqObj};
use super::set_errno;
use crate::cq::{ChannelCore, CqCore};
use crate::provider;

/// Entries a CQ may have at most (`max_cqe`).
pub const MAX_CQE: c_int = (1 << 22) - 1;

/// `ibv_create_comp_channel`: its `fd` is an eventfd, readable while events wait.
///
/// # Safety
/// `context` is a live context.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    // SAFETY: per the contract.
    if unsafe { ctx(context) }.is_none() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let core = match ChannelCore::new() {
        Ok(c) => Arc::new(c),
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return core::ptr::null_mut();
        }
    };
    publish(ChannelObj {
        ibv: ibv_comp_channel {
            context,
            fd: core.fd.raw(),
            refcnt: 0,
        },
        core,
    })
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it; `EINVAL` for a channel that
/// does not exist (destroyed already, or never created here).
///
/// # Safety
/// No other thread uses the channel during the call or after it succeeds.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    let busy = |ch: &ChannelObj| {
        if ch.core.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match retire::<ChannelObj>(channel, busy) {
        Ok(ch) => {
            ch.free();
            0
        }
        Err(e) => e,
    }
}

/// `ibv_create_cq`: exactly `cqe` entries (1 ..= [`MAX_CQE`]); completion vector 0.
/// `EINVAL` for a context or (non-null) channel that does not exist.
///
/// # Safety
/// No other thread destroys the context or the channel during the call.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let attr = CqAttr {
        cqe,
        cq_context,
        channel,
        comp_vector,
        stamped: false,
    };
    // SAFETY: forwarded.
    match unsafe { create(context, &attr, |_| {}) } {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            core::ptr::null_mut()
        }
    }
}

/// What a CQ is created with (`ibv_create_cq`'s arguments; `stamped` for an extended CQ
/// reporting completion timestamps).
pub(super) struct CqAttr {
    pub cqe: c_int,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: c_int,
    pub stamped: bool,
}

/// Creates a CQ; `extend` fills the extended part of its `ibv_cq_ex` (the `ibv_cq` head
/// is filled here). The errno on failure.
///
/// # Safety
/// No other thread destroys the context or the channel during the call.
pub(super) unsafe fn create(
    context: *mut ibv_context,
    attr: &CqAttr,
    extend: impl FnOnce(&mut ibv_cq_ex),
) -> Result<*mut ibv_cq, c_int> {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        return Err(libc::EINVAL);
    };
    if !(1..=MAX_CQE).contains(&attr.cqe) || attr.comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let ch = if attr.channel.is_null() {
        None
    } else {
        // SAFETY: per the contract.
        match unsafe { live::<ChannelObj>(attr.channel) } {
            Some(ch) => Some(Arc::clone(&ch.core)),
            None => return Err(libc::EINVAL),
        }
    };
    let mut core = CqCore::new(
        attr.cqe as usize,
        c.core.dev,
        Arc::clone(&c.core),
        ch,
        attr.cq_context as usize,
    );
    core.stamped = attr.stamped;
    let core = Arc::new(core);
    let mut ibv = ibv_cq_ex {
        context,
        channel: attr.channel,
        cq_context: attr.cq_context,
        handle: provider::get().next_id(),
        cqe: attr.cqe,
        ..Default::default()
    };
    extend(&mut ibv);
    let p = publish(CqObj {
        ibv: UnsafeCell::new(ibv),
        core: Arc::clone(&core),
        current: Default::default(),
    });
    core.handle.store(p as usize, Ordering::Relaxed);
    Ok(p)
}

/// `ibv_destroy_cq`: `EBUSY` while QPs use it; drops its events nobody took from the
/// channel, then waits until every event taken for it was acknowledged
/// (`ibv_ack_cq_events` still finds the CQ while it waits). `EINVAL` for a CQ that does not exist (destroyed already, or never created
/// here).
///
/// # Safety
/// No other thread uses the CQ during the call (but for `ibv_ack_cq_events`) or after
/// it succeeds.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    let busy = |q: &CqObj| {
        if q.core.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    let q = match retire::<CqObj>(cq, busy) {
        Ok(q) => q,
        Err(e) => return e,
    };
    if let Some(ch) = &q.get().core.channel {
        ch.discard(cq as usize);
    }
    q.get().core.wait_acked();
    q.get().core.ctx.forget(cq as usize);
    q.get().core.release_channel();
    q.free();
    0
}

/// `ibv_get_cq_event`: waits for the next event (honouring `O_NONBLOCK` on the
/// channel's fd: then -1 with `EAGAIN`).
///
/// # Safety
/// `channel` is a live channel; `cq` and `cq_context` point to writable pointers.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: per the contract.
    let Some(ch) = (unsafe { live::<ChannelObj>(channel) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // While this thread blocks, the provider's threads serve the work it waits for at
    // once rather than leave it to a poll that is not coming.
    let _waiting = crate::provider::get().engine.waiting();
    let (q, qctx) = match ch.core.fd.wait_for(|| ch.core.take()) {
        Ok(ev) => ev,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
    };
    // SAFETY: an event names a CQ of this channel, live (or being destroyed, its
    // destroy waiting for this event's acknowledgement).
    if let Some(c) = unsafe { live_or_closing::<CqObj>(q as *mut ibv_cq) } {
        c.core.delivered();
    }
    // SAFETY: writable out-pointers (contract).
    unsafe {
        *cq = q as *mut ibv_cq;
        *cq_context = qctx as *mut c_void;
    }
    0
}

/// `ibv_ack_cq_events`; ignored for a CQ that does not exist.
///
/// # Safety
/// No other thread frees the CQ during the call.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: per the contract.
    if let Some(q) = unsafe { live_or_closing::<CqObj>(cq) } {
        q.core.ack(nevents);
    }
}
