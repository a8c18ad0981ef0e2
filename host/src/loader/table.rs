//! Filling a [`VerbsTable`] (the struct is vqp-sys'): from a `dlopen`ed library by
//! symbol and version, or, with the `linked` feature, from `rdma-sys`' link-time
//! symbols. Both come from vqp-sys' one list of entries
//! ([`with_verbs_table!`](vqp_sys::with_verbs_table)), whose module docs say which
//! symbol versions are used and why.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::ptr::NonNull;

use super::dl::Library;
use crate::error::Result;
pub use crate::sys::VerbsTable;
use crate::sys::{
    __be64, ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr,
    ibv_gid, ibv_mr, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_srq,
    ibv_srq_attr, ibv_srq_init_attr,
};

macro_rules! fill_table {
    (
        $(
            $(#[$doc:meta])*
            $field:ident = $sym:ident @ $version:literal :
                fn($($arg:ident : $argty:ty),* $(,)?) $(-> $ret:ty)?;
        )+
    ) => {
        /// Resolves every entry from `lib`; the first missing symbol is the error.
        ///
        /// # Safety
        /// `lib` must be a verbs library: each symbol found under these names must
        /// have the C prototype declared for it.
        pub(crate) unsafe fn resolve(lib: &Library) -> Result<VerbsTable> {
            Ok(VerbsTable {
                $(
                    $field: {
                        let p: NonNull<c_void> = lib.symbol(
                            concat!(stringify!($sym), "\0"),
                            concat!($version, "\0"),
                        )?;
                        // SAFETY: a non-null code address exported under this name
                        // by a verbs library, which has this prototype (the caller's
                        // contract); data and function pointers have the same size
                        // on every platform libibverbs supports.
                        unsafe {
                            core::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($argty),*) $(-> $ret)?,
                            >(p.as_ptr())
                        }
                    },
                )+
            })
        }

        /// The table of the libibverbs this binary was linked against (through
        /// `rdma-sys`).
        #[cfg(feature = "linked")]
        pub(crate) fn linked() -> VerbsTable {
            VerbsTable {
                $(
                    // SAFETY: `rdma_sys::$sym` is the same C function with
                    // bindgen's types for the arguments; `super::linked` proves at
                    // compile time that those types have our types' size and
                    // alignment, so the call ABI is identical.
                    $field: unsafe {
                        core::mem::transmute::<
                            *const (),
                            unsafe extern "C" fn($($argty),*) $(-> $ret)?,
                        >(rdma_sys::$sym as *const ())
                    },
                )+
            }
        }
    };
}

vqp_sys::with_verbs_table!(fill_table);
