//! The fake's CQs and completion channels: completions land, are polled, raise events.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::null_mut;

use vqp_host::sys::*;

use super::state::{with, FakeChannel, FakeCq, State};
use super::{boxed, set_errno, unbox};

pub(super) unsafe extern "C" fn create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return null_mut();
    }
    let ch = boxed(ibv_comp_channel {
        context: ctx,
        fd: fds[0],
        refcnt: 0,
    });
    with(|s| {
        s.channels.insert(
            ch as usize,
            FakeChannel {
                read: fds[0],
                write: fds[1],
                events: VecDeque::new(),
            },
        )
    });
    ch
}

pub(super) unsafe extern "C" fn destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if let Some(c) = with(|s| s.channels.remove(&(ch as usize))) {
        // SAFETY: both ends were opened by `create_comp_channel` and are closed once.
        unsafe {
            libc::close(c.read);
            libc::close(c.write);
        }
    }
    // SAFETY: from `create_comp_channel`.
    unsafe { unbox(ch) };
    0
}

pub(super) unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _vector: c_int,
) -> *mut ibv_cq {
    if cqe <= 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let cq = boxed(ibv_cq {
        context: ctx,
        channel,
        cq_context,
        cqe,
        ..Default::default()
    });
    with(|s| {
        s.cqs.insert(
            cq as usize,
            FakeCq {
                cap: cqe as usize,
                channel: channel as usize,
                ..FakeCq::default()
            },
        )
    });
    cq
}

pub(super) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    with(|s| s.cqs.remove(&(cq as usize)));
    // SAFETY: from `create_cq`.
    unsafe { unbox(cq) };
    0
}

pub(super) unsafe extern "C" fn get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    ctx: *mut *mut c_void,
) -> c_int {
    let event = with(|s| {
        let c = s.channels.get_mut(&(ch as usize))?;
        let cq = c.events.pop_front()?;
        let mut byte = 0u8;
        // SAFETY: reads one byte from the channel's own pipe into `byte`.
        unsafe { libc::read(c.read, (&mut byte as *mut u8).cast(), 1) };
        Some(cq)
    });
    let Some(event) = event else {
        set_errno(libc::EAGAIN);
        return -1;
    };
    let event = event as *mut ibv_cq;
    // SAFETY: writable out-pointers; `event` is a live CQ (its destroy waits for acks
    // in libibverbs; the tests acknowledge before destroying).
    unsafe {
        *cq = event;
        *ctx = (*event).cq_context;
    }
    0
}

pub(super) unsafe extern "C" fn ack_cq_events(_cq: *mut ibv_cq, _n: c_uint) {}

pub(super) fn push_wc(s: &mut State, cq: usize, wc: ibv_wc) {
    let Some(c) = s.cqs.get_mut(&cq) else { return };
    if c.wcs.len() >= c.cap {
        c.overflows += 1;
        return;
    }
    c.wcs.push_back(wc);
    if c.armed && c.channel != 0 {
        c.armed = false;
        if let Some(ch) = s.channels.get_mut(&c.channel) {
            ch.events.push_back(cq);
            let byte = 1u8;
            // SAFETY: writes one byte to the channel's own pipe.
            unsafe { libc::write(ch.write, (&byte as *const u8).cast(), 1) };
        }
    }
}

pub(super) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    with(|s| {
        let Some(c) = s.cqs.get_mut(&(cq as usize)) else {
            return -1;
        };
        let mut i = 0;
        while i < n {
            let Some(entry) = c.wcs.pop_front() else {
                break;
            };
            // SAFETY: the caller provides room for `n` entries.
            unsafe { wc.add(i as usize).write(entry) };
            i += 1;
        }
        i
    })
}

pub(super) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited: c_int) -> c_int {
    with(|s| {
        if let Some(c) = s.cqs.get_mut(&(cq as usize)) {
            c.armed = true;
        }
    });
    0
}

pub(super) unsafe extern "C" fn wc_status_str(_status: c_uint) -> *const c_char {
    c"fake status".as_ptr()
}
