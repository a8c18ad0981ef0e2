//! Extended QPs: `verbs_context.create_qp_ex` (verbs.h's `ibv_create_qp_ex`) and the
//! `ibv_wr_*` posting functions in the `ibv_qp_ex` of a QP created with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (`ibv_qp_to_qp_ex` finds it).
//!
//! A batch (`ibv_wr_start` … `ibv_wr_complete`) feeds the same posting path as
//! `ibv_post_send`: each operation (`ibv_wr_send`, `ibv_wr_rdma_write`, …) starts a work
//! request with the QP's `wr_id` and `wr_flags` of that moment, the setters
//! (`ibv_wr_set_sge`, `ibv_wr_set_inline_data`, `ibv_wr_set_ud_addr`, …) complete it, and
//! `ibv_wr_complete` posts the whole batch or nothing: the first error a request met
//! (the errno `ibv_post_send` would have returned for it: `EINVAL`, `ENOMEM`), or the
//! state or room of the QP, fails it. `ibv_wr_abort` posts nothing. As in mlx5, the
//! functions of every operation of the QP's type are filled whatever `send_ops_flags`
//! named.
//!
//! Files: this one creates extended QPs and fills their function table; `batch` holds
//! the batch (start, complete, abort, and the request being built), `ops` the
//! operations that start a request, `setters` the functions that complete it.

use vqp_sys::*;

use super::object::{live, PdObj, QpObj};
use super::set_errno;

mod batch;
mod ops;
mod setters;

use batch::{wr_abort, wr_complete, wr_start};
use ops::{
    wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_atomic_write, wr_bind_mw, wr_local_inv,
    wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso,
};
use setters::{
    wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_set_ud_addr,
    wr_set_xrc_srqn,
};

/// Send operations `ibv_create_qp_ex` accepts per QP type: those of mlx5
/// (`MLX5_SUPPORTED_SEND_OPS_FLAGS_RC` / `_XRC` / `_UC` / `_UD`, `providers/mlx5/qp.c`;
/// XRC's are RC's), the memory-window operations (`LOCAL_INV`, `BIND_MW`,
/// `SEND_WITH_INV`) included.
fn send_ops_allowed(qp_type: u32) -> u64 {
    let mw = IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
    let uc = IBV_QP_EX_WITH_SEND
        | IBV_QP_EX_WITH_SEND_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | mw;
    match qp_type {
        IBV_QPT_RC | IBV_QPT_XRC_SEND => {
            uc | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
        }
        IBV_QPT_UC => uc,
        IBV_QPT_UD => IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
        _ => 0,
    }
}

/// `verbs_context.create_qp_ex`: `ibv_create_qp` with `attr.pd` (required:
/// `IBV_QP_INIT_ATTR_PD`; a parent domain goes too) and, with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, an extended QP; an XRC receive QP
/// (`IBV_QPT_XRC_RECV`) takes `attr.xrcd` instead (`xrc::create_recv_qp`). `EINVAL`
/// without a PD, with creation flags, or with `send_ops_flags` 0; `EOPNOTSUPP` for RSS,
/// TSO and indirection tables, and for send operations the QP type does not have. Writes the
/// granted sizes back into `attr.cap`.
///
/// # Safety
/// `context` is a live context; `attr` readable and writable; its objects not
/// destroyed during the call.
pub(super) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: readable and writable (contract).
    let Some(a) = (unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let unsupported =
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & unsupported != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !(known | unsupported) != 0
        || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
    {
        return fail(libc::EINVAL);
    }
    if a.qp_type == IBV_QPT_XRC_RECV {
        // No PD and no send queue: an XRC receive QP lives in its domain.
        if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        // SAFETY: per the contract.
        return unsafe { super::xrc::create_recv_qp(context, a) };
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract (the PD is not deallocated during the call).
    match unsafe { live::<PdObj>(a.pd) } {
        Some(p) if p.ibv.context == context => {}
        _ => return fail(libc::EINVAL),
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        if a.send_ops_flags == 0 {
            return fail(libc::EINVAL);
        }
        if a.send_ops_flags & !send_ops_allowed(a.qp_type) != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        a.send_ops_flags
    } else {
        0
    };
    let mut init = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    // SAFETY: `init` is a local; the objects it names are the caller's (contract).
    let qp = unsafe { super::qp::create(a.pd, &mut init, send_ops, fill) };
    if !qp.is_null() {
        a.cap = init.cap;
    }
    qp
}

/// Fills an extended QP's posting functions.
pub(super) fn fill(x: &mut ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_send_inv = Some(wr_send_inv);
    // Operations the provider has no counterpart of (TSO on raw packet QPs, XRC, the
    // atomic write): the batch fails with `EOPNOTSUPP`.
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_atomic_write = Some(wr_atomic_write);
}

/// `ibv_qp_to_qp_ex`'s answer for a QP of this provider: its `ibv_qp_ex` when it was
/// created with send ops, otherwise null.
pub(super) fn to_qp_ex(q: &QpObj) -> *mut ibv_qp_ex {
    if q.send_ops == 0 {
        core::ptr::null_mut()
    } else {
        q.ibv.get()
    }
}
