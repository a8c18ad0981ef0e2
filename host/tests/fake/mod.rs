//! An in-process fake verbs provider whose QPs really talk to each other, for tests of
//! what is built on the verbs wrappers (the physical QP/CQ provider, the endpoint
//! builder, poll threads over verbs).
//!
//! It grows the control-path fake of `in_process_table.rs` a data path: QPs get distinct
//! numbers, follow RESET→INIT→RTR→RTS (and ERR, which flushes), and a post executes at
//! once against the connected peer QP found by its number: RDMA WRITE and READ copy
//! bytes between the addresses given (this process's memory, from registered buffers),
//! WRITE_WITH_IMM and SEND consume the peer's oldest receive, and completions land in
//! the right CQ with the flags and immediate verbs sets; an armed CQ with a completion
//! channel raises one event (a byte on the channel's pipe) at its next completion.
//! Sends to a QP not in RTR or
//! RTS, or that find no receive, fail the way RC does (retry / RNR exceeded) and move
//! the sender to ERR.
#![allow(dead_code)]

mod absent;
mod cq;
mod device;
mod post;
mod qp;
mod state;

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

use vqp_host::{Verbs, VerbsTable};

use cq::{
    ack_cq_events, create_comp_channel, create_cq, destroy_comp_channel, destroy_cq, get_cq_event,
    wc_status_str,
};
#[allow(unused_imports)]
pub use device::REFUSE_DEREG;
use device::{
    alloc_pd, close_device, dealloc_pd, dereg_mr, free_device_list, get_device_guid,
    get_device_list, get_device_name, open_device, query_device, query_gid, query_port, reg_mr,
};
use qp::{create_qp, destroy_qp, modify_qp, query_qp};
#[allow(unused_imports)]
pub use state::{held_recvs, history, overflows, post_calls, qp_state, recv_states};

/// The fake's LID and the last byte of its GID.
pub const LID: u16 = 7;
/// A send or receive WR with this id is refused by the post (`EINVAL`, `bad_wr` set
/// to it); the requests before it in the chain were posted.
pub const BAD_WR_ID: u64 = 0xbad;

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// # Safety
/// `p` came from `boxed` and is freed once.
unsafe fn unbox<T>(p: *mut T) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p) });
}

fn table() -> VerbsTable {
    VerbsTable {
        get_device_list,
        free_device_list,
        get_device_name,
        get_device_guid,
        open_device,
        close_device,
        query_device,
        query_port,
        query_gid,
        alloc_pd,
        dealloc_pd,
        reg_mr,
        dereg_mr,
        create_comp_channel,
        destroy_comp_channel,
        create_cq,
        destroy_cq,
        get_cq_event,
        ack_cq_events,
        create_qp,
        destroy_qp,
        modify_qp,
        query_qp,
        create_srq: absent::create_srq,
        modify_srq: absent::modify_srq,
        query_srq: absent::query_srq,
        destroy_srq: absent::destroy_srq,
        get_async_event: absent::get_async_event,
        ack_async_event: absent::ack_async_event,
        wc_status_str,
    }
}

/// The fake as a loaded verbs library.
pub fn verbs() -> Verbs {
    // SAFETY: the fake functions follow libibverbs' conventions for what the tests use.
    unsafe { Verbs::from_table(table()) }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds other tests of the binary off while a test reads the fake's global counters.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
