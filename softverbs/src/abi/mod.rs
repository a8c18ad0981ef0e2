//! The libibverbs C ABI: the objects handed out, the exported `ibv_*` functions, the
//! `ibv_context_ops` data path, and [`verbs_table`].
//!
//! One module per kind of object or concern: `object` (the wrappers around the C
//! structs, with `state`, the provider state some of them carry), `device` (device list, contexts, queries), `pd_mr`, `mw` (memory
//! windows, through `ibv_context_ops`), `odp` (on-demand paging: `advise_mr`, the
//! capabilities), `cq`, `qp`, `event`
//! (asynchronous events), `data` (the `ibv_context_ops` data path), `strings`, and
//! `faults` (the `vqp_soft_*` controls).
//!
//! Conventions follow libibverbs: functions returning a pointer return null and set
//! `errno`; functions returning `int` return 0 or an errno value (`ibv_query_gid`:
//! -1 with `errno`; `ibv_get_cq_event` / `ibv_get_async_event`: -1 with `errno`).
//! Null object pointers are refused with `EINVAL` rather than dereferenced.
//!
//! Every context is an extended one, as rdma-core's providers make it: a
//! `verbs_context` lies in front of the `ibv_context` handed out (`abi_compat` is
//! `__VERBS_ABI_IS_EXTENDED`, `sz` its size), holding the extended operations
//! ([`verbs_ops`]) that verbs.h's inline wrappers call: `xdevice` (`query_device_ex`,
//! `query_port`, `query_rt_values`, thread and parent domains), `cq_ex`
//! (`create_cq_ex` and the `ibv_start_poll` family), `qp_ex` (`create_qp_ex` and the
//! `ibv_wr_*` posting functions), `dm` (device memory), `xrc` (XRC domains, XRC SRQs
//! and receive QPs, `ibv_open_qp`).
//!
//! The further exports, by module: `query` (device index, GID table and types, P_Key index, port
//! speed), `sysfs` (`ibv_read_sysfs_file` with the soft devices' attributes), `text`
//! (event and opcode names, rates, fork), `resize` (`ibv_resize_cq`, `ibv_rereg_mr`),
//! `buf` (`ibv_reg_mr_ex`, `ibv_alloc_buf`), `address` (address vectors; AH and
//! multicast unsupported), `unsupported` (SRQ, import, ECE, DMA handles), `marshall`
//! (kernel struct copies), `compat` (what the old-version and provider-private entries
//! of [`crate::symbols`] jump to), `faults` (the C fault controls).

mod address;
mod buf;
mod compat;
mod cq;
mod cq_ex;
mod data;
mod device;
mod dm;
mod event;
mod faults;
mod marshall;
mod mw;
mod object;
pub(crate) mod odp;
mod pd_mr;
mod qp;
mod qp_ex;
mod query;
mod resize;
mod srq;
mod state;
mod strings;
mod sysfs;
mod text;
mod unsupported;
mod xdevice;
mod xrc;

use core::ffi::c_int;

use vqp_sys::VerbsTable;
use vqp_sys::*;

pub use address::*;
pub use buf::*;
pub use compat::*;
pub use cq::*;
pub use device::*;
pub use event::*;
pub use faults::*;
pub use marshall::*;
pub use pd_mr::*;
pub use qp::*;
pub use query::*;
pub use resize::*;
pub use srq::*;
pub use strings::*;
pub use sysfs::*;
pub use text::*;
pub use unsupported::*;
pub use xdevice::*;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The in-process function table, for `vqp_host::Verbs::from_table`: the same functions
/// the cdylib exports, called without `dlopen`.
///
/// ```
/// let verbs = unsafe { vqp_host::Verbs::from_table(vqp_softverbs::verbs_table()) };
/// let ctx = vqp_host::Context::open(&verbs, Some("soft0")).unwrap();
/// assert_eq!(ctx.device_name(), "soft0");
/// ```
pub fn verbs_table() -> VerbsTable {
    VerbsTable {
        get_device_list: ibv_get_device_list,
        free_device_list: ibv_free_device_list,
        get_device_name: ibv_get_device_name,
        get_device_guid: ibv_get_device_guid,
        open_device: ibv_open_device,
        close_device: ibv_close_device,
        query_device: ibv_query_device,
        query_port: ibv_query_port,
        query_gid: ibv_query_gid,
        alloc_pd: ibv_alloc_pd,
        dealloc_pd: ibv_dealloc_pd,
        reg_mr: ibv_reg_mr,
        dereg_mr: ibv_dereg_mr,
        create_comp_channel: ibv_create_comp_channel,
        destroy_comp_channel: ibv_destroy_comp_channel,
        create_cq: ibv_create_cq,
        destroy_cq: ibv_destroy_cq,
        get_cq_event: ibv_get_cq_event,
        ack_cq_events: ibv_ack_cq_events,
        create_qp: ibv_create_qp,
        destroy_qp: ibv_destroy_qp,
        modify_qp: ibv_modify_qp,
        query_qp: ibv_query_qp,
        create_srq: ibv_create_srq,
        modify_srq: ibv_modify_srq,
        query_srq: ibv_query_srq,
        destroy_srq: ibv_destroy_srq,
        get_async_event: ibv_get_async_event,
        ack_async_event: ibv_ack_async_event,
        wc_status_str: ibv_wc_status_str,
    }
}

/// The data-path operations every context carries.
fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        poll_cq: Some(data::poll_cq),
        req_notify_cq: Some(data::req_notify_cq),
        post_send: Some(data::post_send),
        post_recv: Some(data::post_recv),
        post_srq_recv: Some(data::post_srq_recv),
        alloc_mw: Some(mw::alloc_mw),
        bind_mw: Some(mw::bind_mw),
        dealloc_mw: Some(mw::dealloc_mw),
        ..Default::default()
    }
}

/// The extended operations every context carries in its `verbs_context` (the slots a
/// ConnectX context fills and this provider implements; the others stay null, so that
/// verbs.h reports `EOPNOTSUPP` for them), with `sz` set. The caller fills `context`.
fn verbs_ops() -> verbs_context {
    verbs_context {
        query_port: Some(xdevice::query_port_ex),
        query_device_ex: Some(xdevice::query_device_ex),
        query_rt_values: Some(xdevice::query_rt_values),
        alloc_td: Some(xdevice::alloc_td),
        dealloc_td: Some(xdevice::dealloc_td),
        alloc_parent_domain: Some(xdevice::alloc_parent_domain),
        create_cq_ex: Some(cq_ex::create_cq_ex),
        create_qp_ex: Some(qp_ex::create_qp_ex),
        alloc_dm: Some(dm::alloc_dm),
        free_dm: Some(dm::free_dm),
        reg_dm_mr: Some(dm::reg_dm_mr),
        advise_mr: Some(odp::advise_mr),
        open_xrcd: Some(xrc::open_xrcd),
        close_xrcd: Some(xrc::close_xrcd),
        create_srq_ex: Some(xrc::create_srq_ex),
        get_srq_num: Some(xrc::get_srq_num),
        open_qp: Some(xrc::open_qp),
        sz: core::mem::size_of::<verbs_context>(),
        ..Default::default()
    }
}
