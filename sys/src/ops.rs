//! `struct ibv_context_ops`: the provider's function table inside every `ibv_context`.
//!
//! verbs.h implements the data-path verbs (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`) as static inline functions that call through this
//! table; there are no exported symbols for them. We do the same. Entries named
//! `_compat_*` are kept only for their slot in the layout and are never called.

use core::ffi::{c_int, c_uint, c_void};

use super::{
    _compat_ibv_port_attr, ibv_context, ibv_cq, ibv_device_attr, ibv_mw, ibv_mw_bind, ibv_pd,
    ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_srq, ibv_wc, zeroed_default,
};

/// A retired slot of the ops table (`void *(*)(void)` in C).
pub type ibv_compat_op = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `ops.poll_cq`: poll up to `num_entries` completions into `wc`; returns how many were
/// written, or a negative value on error.
pub type ibv_poll_cq_fn =
    unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
/// `ops.req_notify_cq`: arm the CQ's completion channel; 0 or an errno value.
pub type ibv_req_notify_cq_fn =
    unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
/// `ops.post_send`: post a chain of send work requests; 0 or an errno value, with
/// `*bad_wr` set to the first request not posted.
pub type ibv_post_send_fn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int;
/// `ops.post_recv`: post a chain of receive work requests; 0 or an errno value, with
/// `*bad_wr` set to the first request not posted.
pub type ibv_post_recv_fn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;
/// `ops.post_srq_recv`: post a chain of receive work requests to an SRQ.
pub type ibv_post_srq_recv_fn = unsafe extern "C" fn(
    srq: *mut ibv_srq,
    recv_wr: *mut ibv_recv_wr,
    bad_recv_wr: *mut *mut ibv_recv_wr,
) -> c_int;

/// `struct ibv_context_ops`, slot for slot.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_context_ops {
    /// Retired slot (`_compat_query_device`).
    pub _compat_query_device: Option<
        unsafe extern "C" fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int,
    >,
    /// Retired slot (`_compat_query_port`).
    pub _compat_query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int,
    >,
    /// Retired slot.
    pub _compat_alloc_pd: ibv_compat_op,
    /// Retired slot.
    pub _compat_dealloc_pd: ibv_compat_op,
    /// Retired slot.
    pub _compat_reg_mr: ibv_compat_op,
    /// Retired slot.
    pub _compat_rereg_mr: ibv_compat_op,
    /// Retired slot.
    pub _compat_dereg_mr: ibv_compat_op,
    /// Allocate a memory window (`enum ibv_mw_type`).
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: c_uint) -> *mut ibv_mw>,
    /// Bind a memory window.
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    /// Free a memory window.
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    /// Retired slot.
    pub _compat_create_cq: ibv_compat_op,
    /// Poll a CQ (data path).
    pub poll_cq: Option<ibv_poll_cq_fn>,
    /// Request a completion notification.
    pub req_notify_cq: Option<ibv_req_notify_cq_fn>,
    /// Retired slot.
    pub _compat_cq_event: ibv_compat_op,
    /// Retired slot.
    pub _compat_resize_cq: ibv_compat_op,
    /// Retired slot.
    pub _compat_destroy_cq: ibv_compat_op,
    /// Retired slot.
    pub _compat_create_srq: ibv_compat_op,
    /// Retired slot.
    pub _compat_modify_srq: ibv_compat_op,
    /// Retired slot.
    pub _compat_query_srq: ibv_compat_op,
    /// Retired slot.
    pub _compat_destroy_srq: ibv_compat_op,
    /// Post receives to an SRQ.
    pub post_srq_recv: Option<ibv_post_srq_recv_fn>,
    /// Retired slot.
    pub _compat_create_qp: ibv_compat_op,
    /// Retired slot.
    pub _compat_query_qp: ibv_compat_op,
    /// Retired slot.
    pub _compat_modify_qp: ibv_compat_op,
    /// Retired slot.
    pub _compat_destroy_qp: ibv_compat_op,
    /// Post send work requests (data path).
    pub post_send: Option<ibv_post_send_fn>,
    /// Post receive work requests (data path).
    pub post_recv: Option<ibv_post_recv_fn>,
    /// Retired slot.
    pub _compat_create_ah: ibv_compat_op,
    /// Retired slot.
    pub _compat_destroy_ah: ibv_compat_op,
    /// Retired slot.
    pub _compat_attach_mcast: ibv_compat_op,
    /// Retired slot.
    pub _compat_detach_mcast: ibv_compat_op,
    /// Retired slot.
    pub _compat_async_event: ibv_compat_op,
}

zeroed_default!(ibv_context_ops);
