//! Entries for a fake verbs table without shared receive queues (creation fails with
//! `EOPNOTSUPP`, libibverbs' answer for a provider without them) or asynchronous events
//! (none ever comes: taking one fails with `EAGAIN`).

use std::ffi::c_int;

use vqp_host::sys::{
    ibv_async_event, ibv_context, ibv_pd, ibv_srq, ibv_srq_attr, ibv_srq_init_attr,
};

pub unsafe extern "C" fn create_srq(_pd: *mut ibv_pd, _a: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
    std::ptr::null_mut()
}

pub unsafe extern "C" fn modify_srq(_s: *mut ibv_srq, _a: *mut ibv_srq_attr, _m: c_int) -> c_int {
    libc::EOPNOTSUPP
}

pub unsafe extern "C" fn query_srq(_s: *mut ibv_srq, _a: *mut ibv_srq_attr) -> c_int {
    libc::EOPNOTSUPP
}

pub unsafe extern "C" fn destroy_srq(_s: *mut ibv_srq) -> c_int {
    libc::EOPNOTSUPP
}

pub unsafe extern "C" fn get_async_event(_c: *mut ibv_context, _e: *mut ibv_async_event) -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = libc::EAGAIN };
    -1
}

pub unsafe extern "C" fn ack_async_event(_e: *mut ibv_async_event) {}
