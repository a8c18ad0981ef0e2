//! XRC, as verbs.h reaches it through the `verbs_context`: `ibv_open_xrcd` /
//! `ibv_close_xrcd`, `ibv_create_srq_ex` (XRC SRQs; basic ones go to `ibv_create_srq`),
//! `ibv_get_srq_num`, XRC receive QPs (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`) and
//! `ibv_open_qp`. XRC send QPs are made by `qp::create`; the semantics are in
//! [`crate::xrc`], [`crate::srq`] and the engine's responder.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use vqp_sys::*;

use super::object::{ctx, live, publish, retire, CqObj, PdCore, PdObj, QpObj, SrqObj, XrcdObj};
use super::set_errno;
use crate::provider;
use crate::qp::{Qp, QpCore};
use crate::srq::{SrqCore, XrcSrq};
use crate::xrc::XrcdCore;

fn fail<T>(e: c_int) -> *mut T {
    set_errno(e);
    core::ptr::null_mut()
}

/// `verbs_context.open_xrcd` (`ibv_open_xrcd`): with `fd` -1 a private domain; with the
/// descriptor of a file, the domain every process of the node that opens that file on
/// this device shares, created when `oflags` has `O_CREAT` and nobody has it, refused
/// (`EAGAIN`) otherwise; `O_EXCL` refuses an existing one (`EINVAL`); a descriptor
/// that is not open is `EBADF` (the kernel's `ib_uverbs_open_xrcd`). As rdma-core's
/// `ibv_cmd_open_xrcd`: unknown `comp_mask` bits are `EOPNOTSUPP`, a mask without both
/// `IBV_XRCD_INIT_ATTR_FD` and `IBV_XRCD_INIT_ATTR_OFLAGS` is `EINVAL`.
///
/// # Safety
/// `context` is a live context; `attr` readable.
pub(super) unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    // SAFETY: per the contract.
    let (Some(c), Some(a)) = (unsafe { ctx(context) }, unsafe { attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
        return fail(libc::EOPNOTSUPP);
    }
    let both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if a.comp_mask & both != both {
        return fail(libc::EINVAL);
    }
    let dev = c.core.dev;
    let core = if a.fd == -1 {
        XrcdCore::private(dev)
    } else {
        match XrcdCore::of_file(dev, a.fd, a.oflags) {
            Ok(x) => x,
            Err(e) => return fail(e),
        }
    };
    publish(XrcdObj {
        ibv: ibv_xrcd { context },
        core: Arc::new(core),
    })
}

/// `verbs_context.close_xrcd` (`ibv_close_xrcd`): `EBUSY` while QPs or SRQs created
/// through this handle use it, `EINVAL` for one that does not exist. A file-named
/// domain lives on while another opener has it.
///
/// # Safety
/// No other thread uses the handle during the call or after it succeeds.
pub(super) unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    let busy = |x: &XrcdObj| {
        if x.core.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match retire::<XrcdObj>(xrcd, busy) {
        Ok(x) => {
            x.free();
            0
        }
        Err(e) => e,
    }
}

/// `verbs_context.create_srq_ex` (`ibv_create_srq_ex` when verbs.h does not turn it
/// into `ibv_create_srq`): a basic SRQ (`IBV_SRQT_BASIC` with a PD) as
/// `ibv_create_srq` makes it, or an XRC SRQ (`IBV_SRQT_XRC`), which needs a PD (its
/// receives' memory), an XRC domain and a CQ (its completions), all of this context's
/// device. `EOPNOTSUPP` for tag-matching SRQs (`IBV_SRQT_TM`, `IBV_SRQ_INIT_ATTR_TM`),
/// `EINVAL` for anything missing, of another device, or an unknown type; the sizes as
/// for `ibv_create_srq`, the granted ones written back.
///
/// # Safety
/// `context` is a live context; `attr` readable and writable; its objects not
/// destroyed during the call.
pub(super) unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: per the contract.
    let (Some(c), Some(a)) = (unsafe { ctx(context) }, unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let known = IBV_SRQ_INIT_ATTR_TYPE
        | IBV_SRQ_INIT_ATTR_PD
        | IBV_SRQ_INIT_ATTR_XRCD
        | IBV_SRQ_INIT_ATTR_CQ
        | IBV_SRQ_INIT_ATTR_TM;
    if a.comp_mask & !known != 0 {
        return fail(libc::EINVAL);
    }
    let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    if srq_type == IBV_SRQT_TM || a.comp_mask & IBV_SRQ_INIT_ATTR_TM != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract (the PD is not deallocated during the call).
    let Some(p) = (unsafe { live::<PdObj>(a.pd) }).filter(|p| p.core.dev == c.core.dev) else {
        return fail(libc::EINVAL);
    };
    if srq_type == IBV_SRQT_BASIC {
        let mut init = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        // SAFETY: a live PD (checked); `init` a local.
        let srq = unsafe { super::srq::ibv_create_srq(a.pd, &mut init) };
        a.attr = init.attr;
        return srq;
    }
    let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if srq_type != IBV_SRQT_XRC || a.comp_mask & need != need {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract (the domain and the CQ are not destroyed meanwhile).
    let (Some(x), Some(cq)) = (unsafe { live::<XrcdObj>(a.xrcd) }, unsafe {
        live::<CqObj>(a.cq)
    }) else {
        return fail(libc::EINVAL);
    };
    if x.core.dev != c.core.dev || cq.core.dev != c.core.dev {
        return fail(libc::EINVAL);
    }
    let prov = provider::get();
    let srq = match SrqCore::new(c.core.dev, p.core.id, Arc::clone(&c.core), &a.attr) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let srqn = match prov.alloc_srqn() {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let core = Arc::new(srq.with_xrc(XrcSrq {
        xrcd: Arc::clone(&x.core),
        cq: Arc::clone(&cq.core),
        srqn,
    }));
    prov.register_srq(srqn, &core);
    a.attr = core.query();
    p.core.users.fetch_add(1, Ordering::AcqRel);
    let ibv = ibv_srq {
        context,
        srq_context: a.srq_context,
        pd: a.pd,
        handle: srqn,
        // SAFETY: plain data; libibverbs initialises these for its own use.
        mutex: unsafe { core::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { core::mem::zeroed() },
        events_completed: 0,
    };
    let ptr = publish(SrqObj {
        ibv: UnsafeCell::new(ibv),
        core: Arc::clone(&core),
        pd: Arc::clone(&p.core),
    });
    core.handle.store(ptr as usize, Ordering::Relaxed);
    ptr
}

/// `verbs_context.get_srq_num` (`ibv_get_srq_num`): an XRC SRQ's number, which XRC
/// send requests name (`qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn`). `EINVAL` for
/// a basic SRQ (it has none here: nothing could name it), a null pointer, or an SRQ
/// that does not exist.
///
/// # Safety
/// `srq` is a live SRQ; `srq_num` writable.
pub(super) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { live::<SrqObj>(srq) }) else {
        return libc::EINVAL;
    };
    match (&s.core.xrc, srq_num.is_null()) {
        (Some(x), false) => {
            // SAFETY: writable (contract).
            unsafe { srq_num.write(x.srqn) };
            0
        }
        _ => libc::EINVAL,
    }
}

/// `ibv_create_qp_ex` of an XRC receive QP (`IBV_QPT_XRC_RECV`, `IBV_QP_INIT_ATTR_XRCD`):
/// a QP of the domain with no send or receive queue, no CQ and no PD (the sizes granted
/// are all zero); requests arriving at it take their receives from the XRC SRQ of the
/// domain they name. `EINVAL` without a domain of this device.
///
/// # Safety
/// `context` is a live context; `a`'s domain is not closed during the call.
pub(super) unsafe fn create_recv_qp(
    context: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        return fail(libc::EINVAL);
    };
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let Some(x) = (unsafe { live::<XrcdObj>(a.xrcd) }).filter(|x| x.core.dev == c.core.dev) else {
        return fail(libc::EINVAL);
    };
    let prov = provider::get();
    let (qpn, nth) = match prov.alloc_qpn() {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let dev = c.core.dev;
    // Its completions go to the SRQs' CQs; this one (never handed out) receives none.
    let none = Arc::new(crate::cq::CqCore::new(1, dev, Arc::clone(&c.core), None, 0));
    let cap = ibv_qp_cap::default();
    let running = QpCore::new(
        prov.transport(),
        qpn,
        IBV_QPT_XRC_RECV,
        nth,
        dev,
        0,
        Arc::clone(&c.core),
        Arc::clone(&none),
        none,
        None,
    )
    .in_xrcd(Arc::clone(&x.core));
    let core = Arc::new(Qp::new(running, false, cap));
    super::faults::register(prov, &core);
    a.cap = cap;
    publish_qp(context, &c.core, &core, a.qp_context, false)
}

/// Hands out an `ibv_qp` for XRC receive QP `core` (created here, or `opened` by
/// `ibv_open_qp`) on context `context` (`ctx`): no PD, CQs or SRQ. The handle is one of
/// the QP's [`crate::xrc::TgtHandles`].
fn publish_qp(
    context: *mut ibv_context,
    ctx: &Arc<crate::cq::CtxCore>,
    core: &Arc<Qp>,
    qp_context: *mut core::ffi::c_void,
    opened: bool,
) -> *mut ibv_qp {
    let base = ibv_qp {
        context,
        qp_context,
        handle: core.qpn,
        qp_num: core.qpn,
        state: core.state.load(Ordering::Acquire),
        qp_type: IBV_QPT_XRC_RECV,
        ..Default::default()
    };
    let ptr = publish(QpObj {
        ibv: UnsafeCell::new(ibv_qp_ex {
            qp_base: base,
            ..Default::default()
        }),
        core: Arc::clone(core),
        // No PD: a placeholder nothing else counts on.
        pd: Arc::new(PdCore {
            id: 0,
            dev: core.dev,
            users: AtomicU32::new(1),
        }),
        send_ops: 0,
        batch: Default::default(),
        opened,
    });
    if !opened {
        core.handle.store(ptr as usize, Ordering::Relaxed);
    }
    core.tgt_handles.add(Arc::clone(ctx), ptr as usize);
    ptr
}

/// `verbs_context.open_qp` (`ibv_open_qp`): another handle on XRC receive QP `qp_num`
/// of this process, created in the domain `xrcd` names (the same domain through any
/// handle), for a process sharing the domain to modify, query and close. Every handle,
/// the creator's too, holds the QP and receives its affiliated events; destroying a
/// handle drops its hold, the last one destroys the QP ([`crate::xrc::TgtHandles`]).
/// As rdma-core's `ibv_cmd_open_qp` and the kernel's `ib_uverbs_open_qp`: unknown
/// `comp_mask` bits are `EOPNOTSUPP`; a mask without the number, the domain and the
/// type, a type other than `IBV_QPT_XRC_RECV`, or a number that is no XRC receive QP of
/// the domain is `EINVAL`. A QP of another process is opened through that process
/// ([`open_remote`]).
///
/// # Safety
/// `context` is a live context; `attr` readable; its domain not closed during the call.
pub(super) unsafe extern "C" fn open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    // SAFETY: per the contract.
    let (Some(c), Some(a)) = (unsafe { ctx(context) }, unsafe { attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if a.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED {
        return fail(libc::EOPNOTSUPP);
    }
    let need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if a.comp_mask & need != need || a.qp_type != IBV_QPT_XRC_RECV {
        return fail(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let Some(x) = (unsafe { live::<XrcdObj>(a.xrcd) }).filter(|x| x.core.dev == c.core.dev) else {
        return fail(libc::EINVAL);
    };
    let prov = provider::get();
    let qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
        a.qp_context
    } else {
        core::ptr::null_mut()
    };
    let Some(q) = prov.find_qp_object(c.core.dev, a.qp_num) else {
        return open_remote(context, c, x, a.qp_num, qp_context);
    };
    let same_domain = q.xrcd.as_ref().is_some_and(|d| d.id == x.core.id);
    if q.qp_type != IBV_QPT_XRC_RECV || !same_domain {
        return fail(libc::EINVAL);
    }
    q.opens.fetch_add(1, Ordering::AcqRel);
    publish_qp(context, &c.core, &q, qp_context, true)
}

/// `ibv_open_qp` of XRC receive QP `qpn` that another live process of the namespace
/// owns: that process checks it (an XRC receive QP of the domain `x` names) and holds
/// it for our handle, a stand-in QP whose modify, query and destroy are calls to it
/// (`provider::xrc_open`). `EINVAL` when no process owns such a QP.
fn open_remote(
    context: *mut ibv_context,
    c: &super::object::CtxObj,
    x: &XrcdObj,
    qpn: u32,
    qp_context: *mut core::ffi::c_void,
) -> *mut ibv_qp {
    let prov = provider::get();
    let dev = c.core.dev;
    let Some(owner) = prov.transport().qp_owner(prov, dev, qpn) else {
        return fail(libc::EINVAL);
    };
    if x.core.id >> 63 != 0 {
        // A private domain is no other process's.
        return fail(libc::EINVAL);
    }
    let none = Arc::new(crate::cq::CqCore::new(1, dev, Arc::clone(&c.core), None, 0));
    let core = QpCore::new(
        prov.transport(),
        qpn,
        IBV_QPT_XRC_RECV,
        0,
        dev,
        0,
        Arc::clone(&c.core),
        Arc::clone(&none),
        none,
        None,
    )
    .in_xrcd(Arc::clone(&x.core));
    core.tgt_handles.set_owner(owner);
    let core = Arc::new(Qp::new(core, false, ibv_qp_cap::default()));
    // The handle's address is its identity at the owner: published first, then
    // announced (and withdrawn if the owner refuses).
    let ptr = publish_qp(context, &c.core, &core, qp_context, true);
    if ptr.is_null() {
        return ptr;
    }
    use crate::provider::xrc_open::{call, OP_OPEN};
    prov.xrc_open.track(ptr as u64, Some(Arc::clone(&c.core)));
    match call(
        prov,
        owner,
        dev,
        qpn,
        OP_OPEN,
        ptr as u64,
        x.core.id,
        0,
        &[],
    ) {
        Ok(_) => ptr,
        Err(e) => {
            prov.xrc_open.track(ptr as u64, None);
            let q = match super::object::retire::<QpObj>(ptr, |_| Ok(())) {
                Ok(q) => q,
                Err(_) => return fail(e),
            };
            q.get().core.destroy();
            q.free();
            fail(e)
        }
    }
}

/// `ibv_destroy_qp` of our handle `handle` on another process's QP (stand-in `core`):
/// that process drops our hold.
pub(super) fn close_remote(owner: crate::shared::Owner, core: &QpCore, handle: u64) {
    use crate::provider::xrc_open::{call, OP_CLOSE};
    let p = provider::get();
    let _ = call(p, owner, core.dev, core.qpn, OP_CLOSE, handle, 0, 0, &[]);
    p.xrc_open.track(handle, None);
    core.destroy();
}

/// `ibv_modify_qp` through our handle on another process's QP: that process runs it.
pub(super) fn modify_remote(
    p: &'static crate::provider::Provider,
    owner: crate::shared::Owner,
    core: &QpCore,
    a: &ibv_qp_attr,
    mask: u32,
) -> Result<(), c_int> {
    use crate::provider::xrc_open::{call, encode_attr, OP_MODIFY};
    let attr = encode_attr(a);
    call(p, owner, core.dev, core.qpn, OP_MODIFY, 0, 0, mask, &attr).map(drop)
}

/// `ibv_query_qp` through our handle on another process's QP: that process answers.
pub(super) fn query_remote(
    p: &'static crate::provider::Provider,
    owner: crate::shared::Owner,
    core: &QpCore,
) -> Result<ibv_qp_attr, c_int> {
    use crate::provider::xrc_open::{call, decode_attr, OP_QUERY};
    let got = call(p, owner, core.dev, core.qpn, OP_QUERY, 0, 0, 0, &[])?;
    decode_attr(got.bytes()).ok_or(libc::EPROTO)
}
