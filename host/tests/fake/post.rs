//! The fake's data path: posted sends execute at once against the peer QP's receives.

use std::ffi::{c_int, c_uint};
use std::ptr;

use vqp_host::sys::*;

use super::cq::push_wc;
use super::qp::to_error;
use super::state::{with, State};
use super::BAD_WR_ID;

/// Executes one send WR of the QP at `key`; returns the status of its completion.
///
/// # Safety
/// `w` is a valid WR whose scatter/gather entry and remote address name live memory of
/// this process, as the test's registered buffers are.
unsafe fn execute(s: &mut State, key: usize, w: &ibv_send_wr) -> (c_uint, c_uint, u32) {
    let q = &s.qps[&key];
    let len = if w.num_sge > 0 {
        // SAFETY: `num_sge > 0` means `sg_list` is valid (the caller's contract).
        unsafe { (*w.sg_list).length }
    } else {
        0
    };
    let local = if w.num_sge > 0 {
        // SAFETY: as above.
        unsafe { (*w.sg_list).addr }
    } else {
        0
    };
    // SAFETY: the RDMA member is a prefix of the union made of integers.
    let rdma = unsafe { w.wr.rdma };
    let dest = s.by_qpn.get(&q.dest).copied();
    let peer_ready = dest
        .and_then(|d| s.qps.get(&d))
        .is_some_and(|p| p.state == IBV_QPS_RTR || p.state == IBV_QPS_RTS);
    let wc_op = match w.opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => IBV_WC_SEND,
        _ => return (IBV_WC_LOC_QP_OP_ERR, IBV_WC_SEND, 0),
    };
    if !peer_ready {
        return (IBV_WC_RETRY_EXC_ERR, wc_op, 0);
    }
    let dest = dest.unwrap_or_default();
    let consumes = matches!(
        w.opcode,
        IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_SEND | IBV_WR_SEND_WITH_IMM
    );
    if consumes && s.qps[&dest].recvs.is_empty() {
        return (IBV_WC_RNR_RETRY_EXC_ERR, wc_op, 0);
    }
    match w.opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM if len > 0 => {
            // SAFETY: both ranges are live memory of this process (the contract).
            unsafe {
                ptr::copy(
                    local as *const u8,
                    rdma.remote_addr as *mut u8,
                    len as usize,
                )
            }
        }
        IBV_WR_RDMA_READ if len > 0 => {
            // SAFETY: as above.
            unsafe {
                ptr::copy(
                    rdma.remote_addr as *const u8,
                    local as *mut u8,
                    len as usize,
                )
            }
        }
        _ => {}
    }
    if consumes {
        let p = s.qps.get_mut(&dest).expect("checked above");
        let (wr_id, addr, cap) = p.recvs.pop_front().expect("checked above");
        let (pqpn, pcq) = (p.qpn, p.recv_cq);
        let is_send = matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM);
        if is_send && len > 0 {
            let n = len.min(cap);
            // SAFETY: the receive buffer and the local buffer are live memory.
            unsafe { ptr::copy(local as *const u8, addr as *mut u8, n as usize) };
        }
        let with_imm = w.opcode != IBV_WR_SEND;
        push_wc(
            s,
            pcq,
            ibv_wc {
                wr_id,
                status: IBV_WC_SUCCESS,
                opcode: if is_send {
                    IBV_WC_RECV
                } else {
                    IBV_WC_RECV_RDMA_WITH_IMM
                },
                byte_len: len,
                qp_num: pqpn,
                wc_flags: if with_imm { IBV_WC_WITH_IMM } else { 0 },
                // SAFETY: both union members are u32s.
                imm: ibv_wc_imm {
                    imm_data: unsafe { w.imm.imm_data },
                },
                ..Default::default()
            },
        );
    }
    (IBV_WC_SUCCESS, wc_op, len)
}

pub(super) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let key = qp as usize;
    with(|s| {
        s.post_sends += 1;
        let Some(state) = s.qps.get(&key).map(|q| q.state) else {
            return libc::EINVAL;
        };
        if state != IBV_QPS_RTS && state != IBV_QPS_ERR {
            // SAFETY: a writable out-pointer.
            unsafe { *bad = wr };
            return libc::EINVAL;
        }
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: a valid chain (the wrapper's contract).
            let w = unsafe { &*cur };
            if w.wr_id == BAD_WR_ID {
                // SAFETY: a writable out-pointer.
                unsafe { *bad = cur };
                return libc::EINVAL;
            }
            let q = &s.qps[&key];
            let (qpn, cq) = (q.qpn, q.send_cq);
            let (status, opcode, len) = if q.state == IBV_QPS_ERR {
                (IBV_WC_WR_FLUSH_ERR, 0, 0)
            } else {
                // SAFETY: the test's buffers are live memory.
                unsafe { execute(s, key, w) }
            };
            if status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR {
                to_error(s, key);
            }
            if status != IBV_WC_SUCCESS || w.send_flags & IBV_SEND_SIGNALED != 0 {
                push_wc(
                    s,
                    cq,
                    ibv_wc {
                        wr_id: w.wr_id,
                        status,
                        opcode,
                        byte_len: len,
                        qp_num: qpn,
                        ..Default::default()
                    },
                );
            }
            cur = w.next;
        }
        0
    })
}

pub(super) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let key = qp as usize;
    with(|s| {
        s.post_recvs += 1;
        let Some(state) = s.qps.get(&key).map(|q| q.state) else {
            return libc::EINVAL;
        };
        if state == IBV_QPS_RESET {
            // SAFETY: a writable out-pointer.
            unsafe { *bad = wr };
            return libc::EINVAL;
        }
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: a valid chain (the wrapper's contract).
            let w = unsafe { &*cur };
            if w.wr_id == BAD_WR_ID {
                // SAFETY: a writable out-pointer.
                unsafe { *bad = cur };
                return libc::EINVAL;
            }
            let (addr, len) = if w.num_sge > 0 {
                // SAFETY: `num_sge > 0` means a valid entry.
                unsafe { ((*w.sg_list).addr, (*w.sg_list).length) }
            } else {
                (0, 0)
            };
            let q = s.qps.get_mut(&key).expect("checked");
            q.recvs.push_back((w.wr_id, addr, len));
            q.recv_states.push(state);
            cur = w.next;
        }
        if state == IBV_QPS_ERR {
            to_error(s, key);
        }
        0
    })
}
