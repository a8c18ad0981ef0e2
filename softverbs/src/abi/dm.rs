//! Device memory: placeholder until implemented.

use core::ffi::{c_int, c_uint};

use vqp_sys::*;

use super::set_errno;

/// Largest device memory allocation (`max_dm_size`).
pub const MAX_DM_SIZE: usize = 0;

pub(super) unsafe extern "C" fn alloc_dm(
    _context: *mut ibv_context,
    _attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

pub(super) unsafe extern "C" fn free_dm(_dm: *mut ibv_dm) -> c_int {
    libc::EOPNOTSUPP
}

pub(super) unsafe extern "C" fn reg_dm_mr(
    _pd: *mut ibv_pd,
    _dm: *mut ibv_dm,
    _offset: u64,
    _length: usize,
    _access: c_uint,
) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}
