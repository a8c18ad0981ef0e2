//! The verbs of features softverbs does not have, answering as an rdma-core provider
//! without the operation does (rdma-core's `dummy_ops`): a pointer-returning verb gives
//! null with `errno` `EOPNOTSUPP`, an `int` verb returns `EOPNOTSUPP`, a `void` one does
//! nothing. None dereferences its arguments: no object of these kinds is ever handed
//! out here, so a pointer passed in cannot be one of ours.
//!
//! - sharing objects between processes through the kernel (`ibv_import_device`,
//!   `ibv_import_pd`, `ibv_import_mr`, `ibv_import_dm` and their `unimport`s): contexts
//!   have no command file descriptor;
//! - enhanced connection establishment (`ibv_query_ece`, `ibv_set_ece`);
//! - DMA handles and device memory (`ibv_alloc_dmah`, `ibv_dealloc_dmah`,
//!   `ibv_dm_export_dmabuf_fd`);
//! - `ibv_register_driver`, the pre-2017 provider registration, which rdma-core also
//!   ignores.

use core::ffi::{c_char, c_int, c_void};

use vqp_sys::*;

use super::set_errno;

/// Null with `errno` = `EOPNOTSUPP`.
fn none<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

/// `ibv_import_device`: null, `EOPNOTSUPP`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
    none()
}

/// `ibv_import_pd`: null, `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_import_pd(_context: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    none()
}

/// `ibv_unimport_pd`: nothing (no PD is ever imported).
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

/// `ibv_import_mr`: null, `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    none()
}

/// `ibv_unimport_mr`: nothing (no MR is ever imported).
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

/// `ibv_import_dm`: null, `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_import_dm(_context: *mut ibv_context, _handle: u32) -> *mut c_void {
    none()
}

/// `ibv_unimport_dm`: nothing (no device memory is ever imported).
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// `ibv_query_ece`: `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_set_ece`: `EOPNOTSUPP`, with `errno` set too, as rdma-core does.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// `ibv_alloc_dmah`: null, `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_alloc_dmah(
    _context: *mut ibv_context,
    _attr: *mut c_void,
) -> *mut c_void {
    none()
}

/// `ibv_dealloc_dmah`: `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_dmah(_dmah: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_dm_export_dmabuf_fd`: -1, `errno` `EOPNOTSUPP`.
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_dm_export_dmabuf_fd(_dm: *mut c_void) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// `ibv_register_driver`: nothing; providers are not loaded here (rdma-core ignores it
/// too since version 13).
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_register_driver(_name: *const c_char, _init: *mut c_void) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno_after<T>(f: impl FnOnce() -> T) -> (T, c_int) {
        set_errno(0);
        let v = f();
        (v, std::io::Error::last_os_error().raw_os_error().unwrap())
    }

    #[test]
    fn pointer_verbs_give_null_and_eopnotsupp() {
        let n = core::ptr::null_mut::<c_void>();
        // SAFETY: none of these dereferences its arguments.
        unsafe {
            let cases: [(*mut c_void, c_int); 5] = [
                errno_after(|| ibv_import_device(3).cast()),
                errno_after(|| ibv_import_pd(n.cast(), 1).cast()),
                errno_after(|| ibv_import_mr(n.cast(), 1).cast()),
                errno_after(|| ibv_import_dm(n.cast(), 1)),
                errno_after(|| ibv_alloc_dmah(n.cast(), n)),
            ];
            for (i, (p, e)) in cases.into_iter().enumerate() {
                assert!(p.is_null(), "case {i}");
                assert_eq!(e, libc::EOPNOTSUPP, "case {i}");
            }
        }
    }

    #[test]
    fn int_verbs_return_eopnotsupp_and_void_verbs_do_nothing() {
        let n = core::ptr::null_mut::<c_void>();
        // SAFETY: none of these dereferences its arguments.
        unsafe {
            assert_eq!(ibv_query_ece(n.cast(), n), libc::EOPNOTSUPP);
            assert_eq!(
                errno_after(|| ibv_set_ece(n.cast(), n)),
                (libc::EOPNOTSUPP, libc::EOPNOTSUPP)
            );
            assert_eq!(ibv_dealloc_dmah(n), libc::EOPNOTSUPP);
            assert_eq!(
                errno_after(|| ibv_dm_export_dmabuf_fd(n)),
                (-1, libc::EOPNOTSUPP)
            );
            ibv_unimport_pd(n.cast());
            ibv_unimport_mr(n.cast());
            ibv_unimport_dm(n);
            ibv_register_driver(core::ptr::null(), n);
        }
    }
}
