//! Extended CQs: `verbs_context.create_cq_ex` (verbs.h's `ibv_create_cq_ex`) and the
//! polling functions in every `ibv_cq_ex` it hands out: `ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll` and the `ibv_wc_read_*` family.
//!
//! An extended CQ is the same CQ as `ibv_create_cq` makes (same queue, channel, arming,
//! overflow, `ibv_poll_cq`, `ibv_destroy_cq`); `ibv_cq_ex_to_cq` is a cast. The
//! completion being read lives in the CQ object between `start_poll` and `end_poll`.
//!
//! Completion timestamps: a CQ created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` or
//! `..._WALLCLOCK` stamps each completion as it enters the queue (when the engine
//! finishes the work request), with `CLOCK_MONOTONIC_RAW` nanoseconds (the "device
//! clock": `hca_core_clock` 1,000,000 kHz, `ibv_query_rt_values_ex` reads the same
//! clock) and `CLOCK_REALTIME` nanoseconds (the wall clock).

use core::ffi::{c_int, c_uint};

use vqp_sys::*;

use super::cq::{create, CqAttr};
use super::object::{unchecked, CqObj};
use super::set_errno;
use crate::cq::Stamp;
use crate::provider;

/// `wc_flags` this provider fills: the standard ones and both timestamps. The CVLAN,
/// flow tag and tag-matching fields belong to features it does not have.
pub const CQ_EX_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

/// `verbs_context.create_cq_ex`: as `ibv_create_cq`, with `wc_flags` naming the fields
/// to read. Errors as mlx5's `create_cq` (`providers/mlx5/verbs.c`) answers them:
/// `EINVAL` for 0 or too many entries, unknown `comp_mask` bits or creation flags,
/// or `IBV_CQ_INIT_ATTR_MASK_PD` with something other than a parent domain;
/// `EOPNOTSUPP` for `wc_flags` outside [`CQ_EX_WC_FLAGS`] and for
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` (an overrun CQ here always enters the error
/// state). `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` is accepted (the CQ locks anyway).
///
/// # Safety
/// `context` is a live context; `attr` readable; its channel and parent domain not
/// destroyed during the call.
pub(super) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: readable (contract).
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return fail(libc::EINVAL);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        let known = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
        if a.flags & !known != 0 {
            return fail(libc::EINVAL);
        }
        if a.flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
            return fail(libc::EOPNOTSUPP);
        }
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
        // SAFETY: per the contract.
        if !unsafe { super::pd_mr::is_parent_domain(a.parent_domain) } {
            return fail(libc::EINVAL);
        }
    }
    if a.wc_flags & !CQ_EX_WC_FLAGS != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let Ok(cqe) = c_int::try_from(a.cqe) else {
        return fail(libc::EINVAL);
    };
    let stamps =
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    let cq = CqAttr {
        cqe,
        cq_context: a.cq_context,
        channel: a.channel,
        comp_vector: a.comp_vector as c_int,
        stamped: a.wc_flags & stamps != 0,
    };
    let extend = |x: &mut ibv_cq_ex| {
        x.start_poll = Some(start_poll);
        x.next_poll = Some(next_poll);
        x.end_poll = Some(end_poll);
        x.read_opcode = Some(read_opcode);
        x.read_vendor_err = Some(read_vendor_err);
        x.read_byte_len = Some(read_byte_len);
        x.read_imm_data = Some(read_imm_data);
        x.read_qp_num = Some(read_qp_num);
        x.read_src_qp = Some(read_src_qp);
        x.read_wc_flags = Some(read_wc_flags);
        x.read_slid = Some(read_slid);
        x.read_sl = Some(read_sl);
        x.read_dlid_path_bits = Some(read_dlid_path_bits);
        x.read_completion_ts = Some(read_completion_ts);
        x.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
    };
    // SAFETY: forwarded.
    match unsafe { create(context, &cq, extend) } {
        Ok(p) => p.cast(),
        Err(e) => fail(e),
    }
}

/// The CQ behind an `ibv_cq_ex` the data path was handed.
///
/// # Safety
/// `cq` is a live CQ of this provider, not destroyed during the reference's use.
unsafe fn cq_obj<'a>(cq: *mut ibv_cq_ex) -> Option<&'a CqObj> {
    // SAFETY: per the contract; the `ibv_cq_ex` starts with the `ibv_cq` handed out.
    unsafe { unchecked::<CqObj>(cq.cast()) }
}

/// Takes the next completion into `q.current` and the CQ's `status` / `wr_id`: 0, or
/// `ENOENT` when there is none; `EIO` once an overflowed CQ has nothing left (where
/// `ibv_poll_cq` returns -1).
fn advance(cq: *mut ibv_cq_ex, q: &CqObj) -> c_int {
    let mut cur = crate::os::lock(&q.current);
    cur.wc = None;
    let mut got = None;
    let polled = q.core.poll_stamped(1, |_, wc, at| got = Some((wc, at)));
    match (polled, got) {
        (Ok(_), Some((wc, at))) => {
            cur.wc = Some(wc);
            cur.at = at;
            // SAFETY: `cq` is this live CQ's `ibv_cq_ex`; its `status` and `wr_id` are
            // the application's to read after this call, written only by the polling
            // thread (the application polls a CQ from one thread at a time).
            unsafe {
                (*cq).status = wc.status;
                (*cq).wr_id = wc.wr_id;
            }
            0
        }
        (Ok(_), None) => libc::ENOENT,
        (Err(_), _) => libc::EIO,
    }
}

/// `ibv_start_poll`: runs the progress engine as `ibv_poll_cq` does, then takes the
/// first completion (see `advance`). `EINVAL` for a non-zero `attr.comp_mask`.
///
/// # Safety
/// `cq` is a live extended CQ; `attr` null or readable.
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { cq_obj(cq) }) else {
        return libc::EINVAL;
    };
    // SAFETY: null or readable (contract).
    if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
        return libc::EINVAL;
    }
    provider::get().poll_turn();
    advance(cq, q)
}

/// `ibv_next_poll`: the next completion, or `ENOENT`.
///
/// # Safety
/// `cq` is a live extended CQ inside a poll `start_poll` began.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { cq_obj(cq) }) else {
        return libc::EINVAL;
    };
    advance(cq, q)
}

/// `ibv_end_poll`: ends the poll; nothing is held between the calls.
///
/// # Safety
/// `cq` is a live extended CQ.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: per the contract.
    if let Some(q) = unsafe { cq_obj(cq) } {
        crate::os::lock(&q.current).wc = None;
    }
}

/// Reads a field of the current completion (zero when there is none: a read outside a
/// poll is the application's error, answered without a panic).
///
/// # Safety
/// `cq` is a live extended CQ.
unsafe fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&ibv_wc, &Stamp) -> T) -> T {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { cq_obj(cq) }) else {
        return T::default();
    };
    let cur = crate::os::lock(&q.current);
    match &cur.wc {
        Some(wc) => f(wc, &cur.at),
        None => T::default(),
    }
}

/// A completion's immediate data (network order).
fn imm_of(wc: &ibv_wc) -> __be32 {
    // SAFETY: both members of the union are `u32`s over the same bytes.
    unsafe { wc.imm.imm_data }
}

macro_rules! reader {
    ($($(#[$doc:meta])* $name:ident -> $t:ty = |$wc:ident, $at:ident| $e:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `cq` is a live extended CQ.
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            // SAFETY: forwarded.
            unsafe { read(cq, |$wc, $at| { let _ = (&$wc, &$at); $e }) }
        }
    )*};
}

reader! {
    /// `ibv_wc_read_opcode`.
    read_opcode -> u32 = |wc, at| wc.opcode;
    /// `ibv_wc_read_vendor_err`.
    read_vendor_err -> u32 = |wc, at| wc.vendor_err;
    /// `ibv_wc_read_byte_len`.
    read_byte_len -> u32 = |wc, at| wc.byte_len;
    /// `ibv_wc_read_imm_data` (network order, as `ibv_wc.imm_data`).
    read_imm_data -> __be32 = |wc, at| imm_of(wc);
    /// `ibv_wc_read_qp_num`.
    read_qp_num -> u32 = |wc, at| wc.qp_num;
    /// `ibv_wc_read_src_qp`.
    read_src_qp -> u32 = |wc, at| wc.src_qp;
    /// `ibv_wc_read_wc_flags`.
    read_wc_flags -> c_uint = |wc, at| wc.wc_flags;
    /// `ibv_wc_read_slid`.
    read_slid -> u32 = |wc, at| u32::from(wc.slid);
    /// `ibv_wc_read_sl`.
    read_sl -> u8 = |wc, at| wc.sl;
    /// `ibv_wc_read_dlid_path_bits`.
    read_dlid_path_bits -> u8 = |wc, at| wc.dlid_path_bits;
    /// `ibv_wc_read_completion_ts`: `CLOCK_MONOTONIC_RAW` ns when the completion entered
    /// the CQ.
    read_completion_ts -> u64 = |wc, at| at.raw;
    /// `ibv_wc_read_completion_wallclock_ns`: `CLOCK_REALTIME` ns when the completion
    /// entered the CQ.
    read_completion_wallclock_ns -> u64 = |wc, at| at.wall;
}
