//! A cm id's QP: made by `rdma_create_qp` (with the device's default PD and CQs of its
//! own when the program gives none), and moved through INIT, RTR and RTS with the
//! attributes the CM agreed — the same `rdma_init_qp_attr` gives programs that move
//! their own QPs (IB CM's `cm_init_qp_*_attr`, as the kernel's rdma_cm uses them).

use core::ffi::c_int;
use core::ptr;

use vqp_sys::*;

use crate::abi::{rdma_cm_id, RDMA_UDP_QKEY};
use crate::conn::Conn;
use crate::verbs;

/// The local ACK timeout set on RC QPs: 4.096 µs · 2^14 ≈ 67 ms.
pub const ACK_TIMEOUT: u8 = 14;
/// The RNR NAK timer set on RC QPs: code 12, 0.64 ms.
const MIN_RNR_TIMER: u8 = 12;

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Releases what `rdma_create_qp` made.
pub fn destroy(c: &mut rdma_cm_id, own_cqs: &mut bool) {
    let Ok(t) = verbs::table() else { return };
    if !c.qp.is_null() {
        // SAFETY: the QP was created by `create_qp` and is not used after this.
        unsafe { (t.destroy_qp)(c.qp) };
        c.qp = ptr::null_mut();
    }
    if *own_cqs {
        for (cq, ch) in [
            (c.send_cq, c.send_cq_channel),
            (c.recv_cq, c.recv_cq_channel),
        ] {
            // SAFETY: CQs and channels `create_qp` made; each destroyed once (a CQ
            // before its channel).
            unsafe {
                if !cq.is_null() {
                    (t.destroy_cq)(cq);
                }
                if !ch.is_null() {
                    (t.destroy_comp_channel)(ch);
                }
            }
        }
        c.send_cq = ptr::null_mut();
        c.recv_cq = ptr::null_mut();
        c.send_cq_channel = ptr::null_mut();
        c.recv_cq_channel = ptr::null_mut();
        *own_cqs = false;
    }
}

fn modify(qp: *mut ibv_qp, mut attr: ibv_qp_attr, mask: u32) -> Result<(), i32> {
    let t = verbs::table()?;
    // SAFETY: `qp` is the id's live QP; `attr` is a full, initialised attribute.
    let rc = unsafe { (t.modify_qp)(qp, &mut attr, mask as c_int) };
    if rc != 0 {
        return Err(if rc > 0 { rc } else { last_errno() });
    }
    Ok(())
}

fn zero_attr() -> ibv_qp_attr {
    // SAFETY: all-zero is a valid ibv_qp_attr (integers and plain structs).
    unsafe { core::mem::zeroed() }
}

/// The attributes for moving the id's QP to `state`, from what the CM agreed, as
/// `rdma_init_qp_attr` gives them (IB CM's `cm_init_qp_*_attr`).
pub fn attr(conn: &Conn, c: &rdma_cm_id, state: u32) -> Result<(ibv_qp_attr, u32), i32> {
    let s = conn.lock();
    let mut a = zero_attr();
    a.qp_state = state;
    let ud = conn.is_ud();
    match state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = c.port_num.max(1);
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                return Ok((
                    a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                ));
            }
            // IB CM grants READ and atomics only when this side takes such requests.
            let resp = s.mine.map_or(0, |m| m.responder_resources);
            a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE
                | if resp > 0 {
                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                } else {
                    0
                };
            Ok((
                a,
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            ))
        }
        IBV_QPS_RTR => {
            if ud {
                return Ok((a, IBV_QP_STATE));
            }
            let (Some(p), Some(m)) = (s.peer, s.mine) else {
                return Err(libc::EINVAL);
            };
            let dev = verbs::by_context(c.verbs).ok_or(libc::EINVAL)?;
            a.path_mtu = u32::from(dev.mtu.min(p.conn.mtu).max(1));
            a.dest_qp_num = p.conn.qpn;
            a.rq_psn = p.conn.psn;
            a.max_dest_rd_atomic = m.responder_resources;
            a.min_rnr_timer = MIN_RNR_TIMER;
            a.ah_attr.dlid = p.conn.lid;
            a.ah_attr.port_num = c.port_num.max(1);
            if p.conn.lid == 0 || dev.link_layer == IBV_LINK_LAYER_ETHERNET {
                a.ah_attr.is_global = 1;
                a.ah_attr.grh.dgid = ibv_gid { raw: p.conn.gid };
                a.ah_attr.grh.hop_limit = 64;
                // From the GID of the id's own address (rdma_cm's `sgid_index` of the
                // path it resolved).
                a.ah_attr.grh.sgid_index = dev.gid_index(&crate::id::sgid_of(c));
            }
            Ok((
                a,
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER,
            ))
        }
        IBV_QPS_RTS => {
            let Some(m) = s.mine else {
                return Err(libc::EINVAL);
            };
            a.sq_psn = m.psn;
            if ud {
                return Ok((a, IBV_QP_STATE | IBV_QP_SQ_PSN));
            }
            a.timeout = ACK_TIMEOUT;
            a.retry_cnt = m.retry_count;
            a.rnr_retry = m.rnr_retry_count;
            a.max_rd_atomic = m.initiator_depth;
            Ok((
                a,
                IBV_QP_STATE
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_SQ_PSN
                    | IBV_QP_MAX_QP_RD_ATOMIC,
            ))
        }
        _ => Err(libc::EINVAL),
    }
}

/// Moves the id's QP (if it has one) to RTS with the agreed attributes: INIT again
/// with the access the CM grants, RTR, RTS (as rdma-core's `ucma_modify_qp_rtr`/`rts`).
pub fn connect(conn: &Conn, c: &rdma_cm_id) -> Result<(), i32> {
    let qp = c.qp;
    if qp.is_null() || conn.is_ud() {
        return Ok(());
    }
    let (a, m) = attr(conn, c, IBV_QPS_INIT)?;
    modify(qp, a, m)?;
    let (a, m) = attr(conn, c, IBV_QPS_RTR)?;
    modify(qp, a, m)?;
    let (a, m) = attr(conn, c, IBV_QPS_RTS)?;
    modify(qp, a, m)
}

/// Moves the id's QP, if it has one, to ERROR (flushing what is posted).
pub fn to_error(c: &rdma_cm_id) {
    if !c.qp.is_null() {
        let mut a = zero_attr();
        a.qp_state = IBV_QPS_ERR;
        let _ = modify(c.qp, a, IBV_QP_STATE);
    }
}

/// `rdma_create_qp`: a QP on the id's device (with the device's default PD and CQs of
/// the requested depths when none are given), in INIT — or, for UD, in RTS, as
/// rdma-core leaves it.
///
/// # Safety
/// `pd` is null or a live PD; `xrcd` null or a live XRC domain (used for an XRC
/// receive QP only); `attr` points to a valid `ibv_qp_init_attr`.
pub unsafe fn create(
    conn: &Conn,
    c: &mut rdma_cm_id,
    own_cqs: &mut bool,
    pd: *mut ibv_pd,
    xrcd: *mut ibv_xrcd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), i32> {
    // SAFETY: the caller's contract.
    let attr = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
    if c.verbs.is_null() || !c.qp.is_null() {
        return Err(libc::EINVAL);
    }
    let t = verbs::table()?;
    let pd = if pd.is_null() {
        if c.pd.is_null() {
            verbs::default_pd(c.verbs)?
        } else {
            c.pd
        }
    } else {
        // SAFETY: a live PD (the caller's contract).
        if unsafe { (*pd).context } != c.verbs {
            return Err(libc::EINVAL);
        }
        pd
    };
    if crate::id::is_xrc_recv(c.qp_type) {
        // SAFETY: forwarded from the caller.
        return unsafe { create_xrc_recv(c, pd, xrcd, attr) };
    }
    let mut made = false;
    if attr.send_cq.is_null() || attr.recv_cq.is_null() {
        for (depth, cq, ch) in [
            (attr.cap.max_send_wr, &mut c.send_cq, &mut c.send_cq_channel),
            (attr.cap.max_recv_wr, &mut c.recv_cq, &mut c.recv_cq_channel),
        ] {
            // SAFETY: `verbs` is an open context.
            *ch = unsafe { (t.create_comp_channel)(c.verbs) };
            if ch.is_null() {
                return Err(last_errno());
            }
            // SAFETY: as above; `*ch` was just created on it.
            *cq = unsafe { (t.create_cq)(c.verbs, depth.max(1) as c_int, ptr::null_mut(), *ch, 0) };
            if cq.is_null() {
                return Err(last_errno());
            }
        }
        *own_cqs = true;
        made = true;
        attr.send_cq = c.send_cq;
        attr.recv_cq = c.recv_cq;
    }
    attr.qp_type = c.qp_type;
    // SAFETY: `pd` is live on the id's device; `attr` is valid. (An XRC send QP is made
    // the same way: a send queue and its CQ, no receive queue.)
    let qp = unsafe { (t.create_qp)(pd, attr) };
    if qp.is_null() {
        let e = last_errno();
        if made {
            destroy(c, own_cqs);
        }
        return Err(e);
    }
    c.qp = qp;
    c.pd = pd;
    if !attr.srq.is_null() {
        c.srq = attr.srq;
    }
    let mut a = zero_attr();
    a.qp_state = IBV_QPS_INIT;
    a.port_num = c.port_num.max(1);
    let init = if conn.is_ud() {
        a.qkey = RDMA_UDP_QKEY;
        modify(
            qp,
            a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
        )
        .and_then(|()| {
            let mut r = zero_attr();
            r.qp_state = IBV_QPS_RTR;
            modify(qp, r, IBV_QP_STATE)
        })
        .and_then(|()| {
            let mut r = zero_attr();
            r.qp_state = IBV_QPS_RTS;
            modify(qp, r, IBV_QP_STATE | IBV_QP_SQ_PSN)
        })
    } else {
        // Access 0 until the CM agrees on more, as rdma-core's ucma_init_conn_qp.
        modify(
            qp,
            a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        )
    };
    if let Err(e) = init {
        destroy(c, own_cqs);
        return Err(e);
    }
    Ok(())
}

/// `rdma_create_qp` of an XRC receive QP (an id of `IBV_QPT_XRC_RECV`, as
/// `rdma_xserver -c x` makes from `rdma_create_ep`): made with `ibv_create_qp_ex` in
/// the device's XRC domain ([`verbs::xrcd`], rdma-core's `ucma_get_xrcd`), with no PD,
/// CQs or queues of its own — its receives come from the XRC SRQ each request names,
/// made with `rdma_create_srq` — and moved to INIT like an RC QP. The id keeps the
/// device's default PD (or the one given), as rdma-core's id holds its device's PD, so
/// that `rdma_reg_msgs` on it works.
///
/// # Safety
/// `pd` is a live PD of the id's device; `xrcd` null or a live XRC domain.
unsafe fn create_xrc_recv(
    c: &mut rdma_cm_id,
    pd: *mut ibv_pd,
    xrcd: *mut ibv_xrcd,
    attr: &mut ibv_qp_init_attr,
) -> Result<(), i32> {
    let xrcd = if xrcd.is_null() {
        verbs::xrcd(c.verbs)?
    } else {
        // SAFETY: a live domain (the caller's contract).
        if unsafe { (*xrcd).context } != c.verbs {
            return Err(libc::EINVAL);
        }
        xrcd
    };
    // SAFETY: all-zero is a valid `ibv_qp_init_attr_ex` (null pointers, no mask bits).
    let mut a: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    a.qp_context = attr.qp_context;
    a.qp_type = IBV_QPT_XRC_RECV;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = xrcd;
    // SAFETY: the id's open context; `a` names only the domain opened on it.
    let qp = unsafe { verbs::create_qp_ex(c.verbs, &mut a) }?;
    attr.qp_type = IBV_QPT_XRC_RECV;
    attr.cap = a.cap;
    let mut init = zero_attr();
    init.qp_state = IBV_QPS_INIT;
    init.port_num = c.port_num.max(1);
    // Access 0 until the CM agrees on more, as for RC.
    if let Err(e) = modify(
        qp,
        init,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
    ) {
        if let Ok(t) = verbs::table() {
            // SAFETY: the QP just made, used by nothing else.
            unsafe { (t.destroy_qp)(qp) };
        }
        return Err(e);
    }
    c.qp = qp;
    c.pd = if pd.is_null() {
        if c.pd.is_null() {
            verbs::default_pd(c.verbs)?
        } else {
            c.pd
        }
    } else {
        pd
    };
    Ok(())
}
