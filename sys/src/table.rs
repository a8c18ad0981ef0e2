//! [`VerbsTable`]: every control-path function of libibverbs that vqp calls, as one
//! struct of function pointers.
//!
//! The table is declared once, below, as (field, exported symbol, symbol version, C
//! prototype). [`with_verbs_table!`](crate::with_verbs_table) hands that list to a
//! macro of the caller's: here it makes the struct; vqp-host's loader makes from it the
//! `dlvsym` resolution and, with its `linked` feature, the table filled from `rdma-sys`'
//! link-time symbols. One list, so the three cannot drift apart.
//!
//! Versions are the ones libibverbs exports (`objdump -T libibverbs.so.1`): the
//! `IBVERBS_1.1` entry points (the `IBVERBS_1.0` ones with the same names are the old,
//! incompatible ABI) and `IBVERBS_1.0` for the completion-channel pair, which never got
//! a 1.1 version. Two functions are wrapped by verbs.h:
//! - `ibv_query_port` is a macro over an inline that may use the extended context; we
//!   call the exported `ibv_query_port@IBVERBS_1.1`, whose third parameter the header
//!   declares as `struct _compat_ibv_port_attr *`. The library writes an `ibv_port_attr`
//!   of *its* version through it, so we always pass our oversized, zeroed
//!   [`ibv_port_attr`].
//! - `ibv_reg_mr` is a macro that switches to `ibv_reg_mr_iova2` when optional access
//!   flags are used; we call the exported `ibv_reg_mr@IBVERBS_1.1` and never pass
//!   optional flags.

// The names the list in `with_verbs_table!` uses, for `define_table!`.
use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::{
    __be64, ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr,
    ibv_gid, ibv_mr, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_srq,
    ibv_srq_attr, ibv_srq_init_attr,
};

/// Invokes `$callback! { … }` with the list of [`VerbsTable`]'s entries, each as
///
/// ```text
/// /// docs
/// field = symbol @ "VERSION": fn(arg: Type, …) -> Ret;
/// ```
///
/// The argument and return types are written as vqp-sys and `core::ffi` name them
/// (`ibv_context`, `c_int`, …), unqualified: the callback is expanded where it is
/// invoked, so that module must have those names in scope.
#[macro_export]
macro_rules! with_verbs_table {
    ($callback:ident) => {
        $callback! {
            /// `ibv_get_device_list`: null with `errno` set on failure (`ENOSYS` without kernel
            /// support); otherwise a null-terminated array, `*num_devices` long.
            get_device_list = ibv_get_device_list @ "IBVERBS_1.1":
                fn(num_devices: *mut c_int) -> *mut *mut ibv_device;
            /// `ibv_free_device_list`.
            free_device_list = ibv_free_device_list @ "IBVERBS_1.1":
                fn(list: *mut *mut ibv_device);
            /// `ibv_get_device_name`.
            get_device_name = ibv_get_device_name @ "IBVERBS_1.1":
                fn(device: *mut ibv_device) -> *const c_char;
            /// `ibv_get_device_guid`: network byte order.
            get_device_guid = ibv_get_device_guid @ "IBVERBS_1.1":
                fn(device: *mut ibv_device) -> __be64;
            /// `ibv_open_device`: null with `errno` set on failure.
            open_device = ibv_open_device @ "IBVERBS_1.1":
                fn(device: *mut ibv_device) -> *mut ibv_context;
            /// `ibv_close_device`.
            close_device = ibv_close_device @ "IBVERBS_1.1":
                fn(context: *mut ibv_context) -> c_int;
            /// `ibv_query_device`: 0 or an errno value.
            query_device = ibv_query_device @ "IBVERBS_1.1":
                fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int;
            /// The exported `ibv_query_port` (see the module docs): 0 or an errno value.
            query_port = ibv_query_port @ "IBVERBS_1.1":
                fn(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr) -> c_int;
            /// `ibv_query_gid`: 0, or -1 / an errno value.
            query_gid = ibv_query_gid @ "IBVERBS_1.1":
                fn(
                    context: *mut ibv_context,
                    port_num: u8,
                    index: c_int,
                    gid: *mut ibv_gid,
                ) -> c_int;
            /// `ibv_alloc_pd`: null with `errno` set on failure.
            alloc_pd = ibv_alloc_pd @ "IBVERBS_1.1":
                fn(context: *mut ibv_context) -> *mut ibv_pd;
            /// `ibv_dealloc_pd`: 0 or an errno value.
            dealloc_pd = ibv_dealloc_pd @ "IBVERBS_1.1":
                fn(pd: *mut ibv_pd) -> c_int;
            /// The exported `ibv_reg_mr` (see the module docs): null with `errno` set on failure.
            reg_mr = ibv_reg_mr @ "IBVERBS_1.1":
                fn(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
            /// `ibv_dereg_mr`: 0 or an errno value.
            dereg_mr = ibv_dereg_mr @ "IBVERBS_1.1":
                fn(mr: *mut ibv_mr) -> c_int;
            /// `ibv_create_comp_channel`: null with `errno` set on failure.
            create_comp_channel = ibv_create_comp_channel @ "IBVERBS_1.0":
                fn(context: *mut ibv_context) -> *mut ibv_comp_channel;
            /// `ibv_destroy_comp_channel`: 0 or an errno value (`EBUSY` while CQs use it).
            destroy_comp_channel = ibv_destroy_comp_channel @ "IBVERBS_1.0":
                fn(channel: *mut ibv_comp_channel) -> c_int;
            /// `ibv_create_cq`: null with `errno` set on failure.
            create_cq = ibv_create_cq @ "IBVERBS_1.1":
                fn(
                    context: *mut ibv_context,
                    cqe: c_int,
                    cq_context: *mut c_void,
                    channel: *mut ibv_comp_channel,
                    comp_vector: c_int,
                ) -> *mut ibv_cq;
            /// `ibv_destroy_cq`: 0 or an errno value. Waits until every completion event
            /// received for the CQ was acknowledged.
            destroy_cq = ibv_destroy_cq @ "IBVERBS_1.1":
                fn(cq: *mut ibv_cq) -> c_int;
            /// `ibv_get_cq_event`: blocks for the next event; 0 or -1 with `errno`.
            get_cq_event = ibv_get_cq_event @ "IBVERBS_1.1":
                fn(
                    channel: *mut ibv_comp_channel,
                    cq: *mut *mut ibv_cq,
                    cq_context: *mut *mut c_void,
                ) -> c_int;
            /// `ibv_ack_cq_events`.
            ack_cq_events = ibv_ack_cq_events @ "IBVERBS_1.1":
                fn(cq: *mut ibv_cq, nevents: c_uint);
            /// `ibv_create_qp`: null with `errno` set on failure; writes the granted sizes back
            /// into `qp_init_attr.cap`.
            create_qp = ibv_create_qp @ "IBVERBS_1.1":
                fn(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
            /// `ibv_destroy_qp`: 0 or an errno value.
            destroy_qp = ibv_destroy_qp @ "IBVERBS_1.1":
                fn(qp: *mut ibv_qp) -> c_int;
            /// `ibv_modify_qp`: 0 or an errno value.
            modify_qp = ibv_modify_qp @ "IBVERBS_1.1":
                fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
            /// `ibv_query_qp`: 0 or an errno value.
            query_qp = ibv_query_qp @ "IBVERBS_1.1":
                fn(
                    qp: *mut ibv_qp,
                    attr: *mut ibv_qp_attr,
                    attr_mask: c_int,
                    init_attr: *mut ibv_qp_init_attr,
                ) -> c_int;
            /// `ibv_create_srq`: null with `errno` set on failure; writes the granted sizes back
            /// into `srq_init_attr.attr`.
            create_srq = ibv_create_srq @ "IBVERBS_1.1":
                fn(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
            /// `ibv_modify_srq`: 0 or an errno value.
            modify_srq = ibv_modify_srq @ "IBVERBS_1.1":
                fn(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int;
            /// `ibv_query_srq`: 0 or an errno value.
            query_srq = ibv_query_srq @ "IBVERBS_1.1":
                fn(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int;
            /// `ibv_destroy_srq`: 0 or an errno value.
            destroy_srq = ibv_destroy_srq @ "IBVERBS_1.1":
                fn(srq: *mut ibv_srq) -> c_int;
            /// `ibv_get_async_event`: waits for the context's next asynchronous event (unless
            /// its `async_fd` is non-blocking); 0, or -1 with `errno`.
            get_async_event = ibv_get_async_event @ "IBVERBS_1.1":
                fn(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
            /// `ibv_ack_async_event`: every event taken is acknowledged (destroying its object
            /// waits for that).
            ack_async_event = ibv_ack_async_event @ "IBVERBS_1.1":
                fn(event: *mut ibv_async_event);
            /// `ibv_wc_status_str`: a static string for an `enum ibv_wc_status`.
            wc_status_str = ibv_wc_status_str @ "IBVERBS_1.1":
                fn(status: c_uint) -> *const c_char;
        }
    };
}

/// Makes the struct from the list.
macro_rules! define_table {
    (
        $(
            $(#[$doc:meta])*
            $field:ident = $sym:ident @ $version:literal :
                fn($($arg:ident : $argty:ty),* $(,)?) $(-> $ret:ty)?;
        )+
    ) => {
        /// The libibverbs functions vqp calls on the control path, as plain function
        /// pointers.
        ///
        /// Filled by vqp-host's loader (`dlopen` + `dlvsym`, or `rdma-sys`' link-time
        /// symbols under its feature `linked`), or by anyone who implements the
        /// libibverbs C ABI in-process (a software provider such as vqp-softverbs) and
        /// hands the table to vqp-host's `Verbs::from_table`. Every pointer must behave
        /// as the libibverbs function it is named after.
        ///
        /// The data path (post send/receive, poll, arm) is not here: it goes through the
        /// provider's [`ibv_context_ops`](crate::ibv_context_ops) table, as verbs.h's
        /// inline functions do.
        #[derive(Clone, Copy)]
        pub struct VerbsTable {
            $(
                $(#[$doc])*
                pub $field: unsafe extern "C" fn($($arg: $argty),*) $(-> $ret)?,
            )+
        }

        impl VerbsTable {
            /// Every (symbol, version) the table resolves, in field order.
            pub const SYMBOLS: &'static [(&'static str, &'static str)] =
                &[$((stringify!($sym), $version)),+];
        }

        impl core::fmt::Debug for VerbsTable {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct("VerbsTable")
                    $( .field(stringify!($field), &(self.$field as *const ())) )+
                    .finish()
            }
        }
    };
}

with_verbs_table!(define_table);
