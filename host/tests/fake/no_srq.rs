//! Shared receive queue entries for a fake verbs table that has none: creation fails
//! with `EOPNOTSUPP`, as libibverbs' answer for a provider without SRQs.

use std::ffi::c_int;

use vqp_host::sys::{ibv_pd, ibv_srq, ibv_srq_attr, ibv_srq_init_attr};

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
