//! Queue pairs: `ibv_create_qp`, `ibv_destroy_qp`, `ibv_modify_qp` and
//! `ibv_query_qp`. Posting is in `data`.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vqp_sys::*;

use super::object::{live, publish, retire, CqObj, PdObj, QpObj};
use super::set_errno;
use super::srq::srq_core;
use crate::provider;
use crate::qp::{Qp, QpCore, MAX_INLINE};

/// `ibv_create_qp`: RC, UC and UD (`EOPNOTSUPP` for other types, `EINVAL` for sizes beyond
/// the device's limits, or an SRQ of another device). A QP given an SRQ takes its
/// receives from it and has no receive queue of its own (granted receive sizes 0). Writes the granted sizes back into `qp_init_attr.cap`.
///
/// `EINVAL` too for a PD or CQ that does not exist.
///
/// # Safety
/// `qp_init_attr` points to a readable and writable `ibv_qp_init_attr`; no other
/// thread destroys the PD or the CQs during the call.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: forwarded.
    unsafe { create(pd, qp_init_attr, 0, |_| {}) }
}

/// `ibv_create_qp`, and `ibv_create_qp_ex` with `send_ops` (`IBV_QP_EX_WITH_*`, checked
/// by the caller): non-zero makes an extended QP whose `ibv_qp_ex` has the `ibv_wr_*`
/// functions, which `fill` (given by `qp_ex`, which builds on this module) puts in.
/// Null with `errno` on failure.
///
/// # Safety
/// As [`ibv_create_qp`].
pub(super) unsafe fn create(
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
    send_ops: u64,
    fill: fn(&mut ibv_qp_ex),
) -> *mut ibv_qp {
    // SAFETY: per the contract.
    let (Some(p), Some(init)) = (unsafe { live::<PdObj>(pd) }, unsafe {
        qp_init_attr.as_mut()
    }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if !matches!(
        init.qp_type,
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD | IBV_QPT_XRC_SEND
    ) {
        set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    }
    // An XRC send QP has a send queue only: no receive CQ, no SRQ (mlx5 creates it
    // without a receive queue).
    let xrc_send = init.qp_type == IBV_QPT_XRC_SEND;
    let recv_cq = if xrc_send { init.send_cq } else { init.recv_cq };
    // SAFETY: per the contract.
    let (Some(scq), Some(rcq)) = (unsafe { live::<CqObj>(init.send_cq) }, unsafe {
        live::<CqObj>(recv_cq)
    }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if xrc_send && !init.srq.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: per the contract (the SRQ, like the CQs, is not destroyed meanwhile).
    let srq = (!init.srq.is_null()).then(|| unsafe { srq_core(init.srq) });
    let bad_srq = matches!(&srq, Some(s) if !s.as_ref().is_some_and(|s| s.dev == p.core.dev));
    if bad_srq || scq.core.dev != p.core.dev || rcq.core.dev != p.core.dev {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let srq = srq.flatten();
    let mut cap = match Qp::grant(&init.cap) {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            return core::ptr::null_mut();
        }
    };
    if srq.is_some() || xrc_send {
        // Receives come from the SRQ (or, XRC, there are none); the QP has no receive
        // queue of its own (mlx5 reports zero sizes).
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    init.cap = cap;
    let prov = provider::get();
    let (qpn, nth) = match prov.alloc_qpn() {
        Ok(x) => x,
        Err(e) => {
            set_errno(e);
            return core::ptr::null_mut();
        }
    };
    let running = QpCore::new(
        prov.transport(),
        qpn,
        init.qp_type,
        nth,
        p.core.dev,
        p.core.id,
        Arc::clone(&scq.core.ctx),
        Arc::clone(&scq.core),
        Arc::clone(&rcq.core),
        srq,
    );
    let core = Arc::new(Qp::new(running, init.sq_sig_all != 0, cap));
    super::faults::register(prov, &core);
    p.core.users.fetch_add(1, Ordering::AcqRel);
    let base = ibv_qp {
        // SAFETY: a live PD (contract).
        context: unsafe { (*pd).context },
        qp_context: init.qp_context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: init.srq,
        handle: qpn,
        qp_num: qpn,
        state: IBV_QPS_RESET,
        qp_type: init.qp_type,
        ..Default::default()
    };
    let mut ibv = ibv_qp_ex {
        qp_base: base,
        ..Default::default()
    };
    if send_ops != 0 {
        fill(&mut ibv);
    }
    let ptr = publish(QpObj {
        ibv: UnsafeCell::new(ibv),
        core: Arc::clone(&core),
        pd: Arc::clone(&p.core),
        send_ops,
        batch: Default::default(),
        opened: false,
    });
    core.handle.store(ptr as usize, Ordering::Relaxed);
    ptr
}

/// The QP behind `qp`; `None` for null or a QP that does not exist.
///
/// # Safety
/// No other thread destroys the QP while the reference is used.
unsafe fn qp_obj<'a>(qp: *mut ibv_qp) -> Option<&'a QpObj> {
    // SAFETY: forwarded.
    unsafe { live::<QpObj>(qp) }
}

/// `ibv_destroy_qp`: outstanding WQEs are dropped without completions, its completions
/// not yet polled are removed from its CQs (as mlx5's `mlx5_destroy_qp`), and type 2
/// memory windows bound through it are unbound. `EINVAL` for a
/// QP that does not exist (destroyed already, or never created here): the QP registry,
/// the CQs' and the PD's counts are left alone.
///
/// # Safety
/// No other thread uses the QP during the call or after it succeeds.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    let q = match retire::<QpObj>(qp, |_| Ok(())) {
        Ok(q) => q,
        Err(e) => return e,
    };
    // An XRC receive QP's handle (the creator's or one `ibv_open_qp` made) drops its
    // hold; the QP is destroyed with the last (`crate::xrc::TgtHandles`).
    if q.get().opened {
        q.get().core.opens.fetch_sub(1, Ordering::AcqRel);
    }
    if q.get().core.qp_type == IBV_QPT_XRC_RECV {
        let core = &q.get().core;
        if let Some(owner) = core.tgt_handles.owner() {
            // Our handle on another process's QP: that process drops our hold.
            super::xrc::close_remote(owner, core, qp as u64);
            q.get().pd.users.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: retired above, freed below.
            unsafe { super::event::forget_qp(qp) };
            q.free();
            return 0;
        }
        let ns = provider::get().transport().namespace();
        let (other, held) = core.tgt_handles.remove(qp as usize, ns);
        if held {
            core.handle.store(other.unwrap_or(0), Ordering::Relaxed);
            q.get().pd.users.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: retired above, freed below.
            unsafe { super::event::forget_qp(qp) };
            q.free();
            return 0;
        }
    }
    let p = provider::get();
    if q.get().core.qp_type == IBV_QPT_XRC_RECV {
        // No other process holds it any more (those that did have died).
        p.xrc_open.release(q.get().core.dev, q.get().core.qpn);
    }
    // Answers held back for a request yet to come go now: the process may exit before
    // the machine is served again.
    p.transport().machine_flush();
    p.unregister_qp(q.get().core.qpn);
    q.get().core.destroy();
    // Type 2 windows bound through it grant nothing any more.
    let mrs = p.mrs.read().unwrap_or_else(|e| e.into_inner());
    for k in mrs.unbind_windows_of_qp(q.get().core.dev, q.get().core.qpn) {
        p.transport().revoke_mr(k);
    }
    drop(mrs);
    q.get().pd.users.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: retired above, freed below; the engine raises nothing for it any more.
    unsafe { super::event::forget_qp(qp) };
    q.free();
    0
}

/// `ibv_modify_qp`: the RC state machine, with the attribute mask each transition
/// requires and allows (anything else is `EINVAL`).
///
/// # Safety
/// `qp` is a live QP; `attr` points to a readable `ibv_qp_attr`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(q), Some(a)) = (unsafe { qp_obj(qp) }, unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    let mask = attr_mask as u32;
    let p = provider::get();
    if let Some(owner) = q.core.tgt_handles.owner() {
        // Another process's XRC receive QP, opened here: that process modifies it.
        return match super::xrc::modify_remote(p, owner, &q.core, a, mask) {
            Ok(()) => {
                if mask & IBV_QP_STATE != 0 {
                    // SAFETY: as below.
                    unsafe { (*q.ibv.get()).qp_base.state = a.qp_state };
                }
                0
            }
            Err(e) => e,
        };
    }
    let port = &p.devices[q.core.dev];
    // An address vector on a RoCE port needs a GRH: the kernel's mlx5 refuses one
    // without (`mlx5_set_path`: a RoCE AH without `IB_AH_GRH` is `-EINVAL`).
    if mask & IBV_QP_AV != 0 && port.is_roce() && a.ah_attr.is_global == 0 {
        return libc::EINVAL;
    }
    let gids = port.gids().len();
    match q.core.modify(a, mask, gids, |ah| p.resolve_av(ah)) {
        Ok(()) => {
            if mask & IBV_QP_STATE != 0 {
                // SAFETY: the `ibv_qp` is live; `state` is the library's to write, as
                // libibverbs' own `ibv_modify_qp` does.
                unsafe { (*q.ibv.get()).qp_base.state = a.qp_state };
            }
            0
        }
        Err(e) => e,
    }
}

/// `ibv_query_qp`: every attribute (the mask is not needed to choose).
///
/// # Safety
/// `qp` is a live QP; `attr` and `init_attr` point to writable structs.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { qp_obj(qp) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    let got = match q.core.tgt_handles.owner() {
        // Another process's XRC receive QP, opened here: that process answers.
        Some(owner) => match super::xrc::query_remote(provider::get(), owner, &q.core) {
            Ok(a) => a,
            Err(e) => return e,
        },
        None => q.core.query(),
    };
    // SAFETY: writable (contract).
    unsafe { attr.write(got) };
    if !init_attr.is_null() {
        // SAFETY: the `ibv_qp` is live; we read fields set at creation.
        let ibv = unsafe { &(*q.ibv.get()).qp_base };
        let init = ibv_qp_init_attr {
            qp_context: ibv.qp_context,
            send_cq: ibv.send_cq,
            recv_cq: ibv.recv_cq,
            srq: ibv.srq,
            cap: q.core.cap,
            qp_type: q.core.qp_type,
            sq_sig_all: c_int::from(q.core.sq_sig_all),
        };
        // SAFETY: writable (contract).
        unsafe { init_attr.write(init) };
    }
    0
}

const _: () = {
    // Sizes the cdylib advertises must fit the host's and the C header's types.
    assert!(MAX_INLINE <= 1024);
};
