//! The fake's QPs: creation, the RESET→INIT→RTR→RTS state machine, and ERR's flush.

use std::ffi::{c_int, c_uint};
use std::ptr::null_mut;

use vqp_host::sys::*;

use super::cq::push_wc;
use super::state::{with, FakeQp, State};
use super::{boxed, set_errno, unbox};

pub(super) unsafe extern "C" fn create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: a live PD and a writable init struct.
    let (init, pd_ref) = unsafe { (&mut *init, &*pd) };
    if init.qp_type != IBV_QPT_RC {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let (send_cq, recv_cq) = (init.send_cq as usize, init.recv_cq as usize);
    let qpn = with(|s| {
        let n = s.next_qpn;
        s.next_qpn += 1;
        n
    });
    let qp = boxed(ibv_qp {
        context: pd_ref.context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        qp_num: qpn,
        qp_type: init.qp_type,
        ..Default::default()
    });
    with(|s| {
        s.by_qpn.insert(qpn, qp as usize);
        s.qps.insert(
            qp as usize,
            FakeQp {
                qpn,
                state: IBV_QPS_RESET,
                send_cq,
                recv_cq,
                ..FakeQp::default()
            },
        );
    });
    qp
}

pub(super) unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    with(|s| {
        if let Some(q) = s.qps.remove(&(qp as usize)) {
            s.by_qpn.remove(&q.qpn);
        }
    });
    // SAFETY: from `create_qp`.
    unsafe { unbox(qp) };
    0
}

/// Moves `key` to ERR, flushing its receives.
pub(super) fn to_error(s: &mut State, key: usize) {
    let Some(q) = s.qps.get_mut(&key) else { return };
    q.state = IBV_QPS_ERR;
    let (qpn, cq) = (q.qpn, q.recv_cq);
    let flushed: Vec<_> = q.recvs.drain(..).collect();
    for (wr_id, _, _) in flushed {
        push_wc(
            s,
            cq,
            ibv_wc {
                wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                qp_num: qpn,
                ..Default::default()
            },
        );
    }
}

pub(super) unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: a readable attr.
    let attr = unsafe { *attr };
    let mask = mask as c_uint;
    let rc = with(|s| {
        let Some(q) = s.qps.get_mut(&(qp as usize)) else {
            return libc::EINVAL;
        };
        q.history.push((attr.qp_state, mask));
        if mask & IBV_QP_STATE == 0 {
            return 0;
        }
        let ok = match attr.qp_state {
            IBV_QPS_INIT => q.state == IBV_QPS_RESET || q.state == IBV_QPS_INIT,
            IBV_QPS_RTR => q.state == IBV_QPS_INIT,
            IBV_QPS_RTS => q.state == IBV_QPS_RTR || q.state == IBV_QPS_RTS,
            IBV_QPS_ERR | IBV_QPS_RESET => true,
            _ => false,
        };
        if !ok {
            return libc::EINVAL;
        }
        if mask & IBV_QP_DEST_QPN != 0 {
            q.dest = attr.dest_qp_num;
        }
        if attr.qp_state == IBV_QPS_ERR {
            to_error(s, qp as usize);
        } else {
            q.state = attr.qp_state;
        }
        0
    });
    if rc == 0 {
        // SAFETY: a live QP.
        unsafe { (*qp).state = attr.qp_state };
    }
    rc
}

pub(super) unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    _init: *mut ibv_qp_init_attr,
) -> c_int {
    let st = with(|s| s.qps.get(&(qp as usize)).map(|q| q.state));
    // SAFETY: a writable attr.
    unsafe { (*attr).qp_state = st.unwrap_or(IBV_QPS_UNKNOWN) };
    0
}
