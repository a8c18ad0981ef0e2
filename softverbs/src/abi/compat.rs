//! The functions behind the cdylib's stub entries ([`crate::symbols::StubKind`]): the
//! `IBVERBS_1.0` entries (`ibv_get_device_list@IBVERBS_1.0` and the 30 others rdma-core
//! keeps for programs built against libibverbs 1.0) and the provider-private names
//! softverbs does not implement (`ibv_cmd_*`, `verbs_*`, …).
//!
//! A libibverbs 1.0 program passes and expects libibverbs 1.0's structs
//! (`ibv_device_1_0`, `ibv_context_1_0`, …), which softverbs does not implement; the
//! private functions are rdma-core's provider toolkit, which no provider uses here. Each
//! entry jumps to the function for its return type and fails cleanly: a 1.0 program
//! finds no devices (`ibv_get_device_list` returns null with `errno` `EOPNOTSUPP`) rather
//! than having its calls fall through to another libibverbs. The arguments are ignored,
//! so none is declared: the C calling convention lets a callee take fewer arguments than
//! the caller passes.

use core::ffi::{c_int, c_void};

use super::set_errno;

/// Null with `errno` = `EOPNOTSUPP` (pointer-returning 1.0 entries).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_compat_null() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

/// `EOPNOTSUPP` (1.0 entries returning an errno value).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_compat_errno() -> c_int {
    libc::EOPNOTSUPP
}

/// -1 with `errno` = `EOPNOTSUPP` (1.0 entries returning -1 on failure).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_compat_minus_one() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// Nothing (`void` 1.0 entries: there is nothing of theirs to release).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_compat_void() {}

/// 0 with `errno` = `EOPNOTSUPP` (`ibv_get_device_guid@IBVERBS_1.0`).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_compat_zero() -> u64 {
    set_errno(libc::EOPNOTSUPP);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    #[test]
    fn each_kind_fails_as_its_return_type_says() {
        set_errno(0);
        assert!(vqp_soft_compat_null().is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        set_errno(0);
        assert_eq!(vqp_soft_compat_minus_one(), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        set_errno(0);
        assert_eq!(vqp_soft_compat_zero(), 0);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(vqp_soft_compat_errno(), libc::EOPNOTSUPP);
        vqp_soft_compat_void();
    }
}
