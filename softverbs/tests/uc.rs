//! Unreliable connected QPs as ConnectX has them: SEND and RDMA WRITE (with immediate or
//! not), no READ and no atomics (refused at post), UC's state machine (no RNR timer,
//! read/atomic depths, timeout or retry counts), and no acknowledgements — what the
//! responder cannot take it drops silently, and the requester completes successfully
//! anyway. Across processes, Debian's `ibv_uc_pingpong` (`debian_programs.rs`).
//!
//! Tests here run in parallel in one process, each on its own QPs and contexts.

mod common;

use common::*;
use vqp_host::sys::*;
use vqp_host::{QpAttrMask, QpState, QpType, WcStatus};

fn uc_pair(v: &vqp_host::Verbs) -> (Side, Side) {
    let a = side_of(v, "soft0", QpType::Uc);
    let b = side_of(v, "soft1", QpType::Uc);
    connect_typed(&a.qp, lid(&b.ctx), b.qp.qp_num(), false);
    connect_typed(&b.qp, lid(&a.ctx), a.qp.qp_num(), false);
    (a, b)
}

#[test]
fn uc_carries_sends_and_writes_and_refuses_read_and_atomics_at_post() {
    let v = verbs();
    let (mut a, b) = uc_pair(&v);
    fill(&mut a, 5);
    let mut rsge = b.mr.sge(0, 64).unwrap();
    let mut r = recv_wr(10, std::slice::from_mut(&mut rsge));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(0, 48).unwrap();
    let mut wr = send_wr(1, IBV_WR_SEND_WITH_IMM, std::slice::from_mut(&mut sge));
    wr.imm = ibv_send_wr_imm {
        imm_data: 0x1234_5678u32.to_be(),
    };
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    let wc = poll_n(&b.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].byte_len()), (10, 48));
    assert_eq!(wc[0].imm_data(), Some(0x1234_5678));
    assert_eq!(&bytes(&b)[..48], &bytes(&a)[..48]);
    let mut sge = a.mr.sge(100, 200).unwrap();
    let mut wr = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut wr, &b.mr, 1000);
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    assert_eq!(&bytes(&b)[1000..1200], &bytes(&a)[100..300]);
    for op in [
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_ATOMIC_CMP_AND_SWP,
    ] {
        let mut sge = a.mr.sge(0, 8).unwrap();
        let mut wr = send_wr(3, op, std::slice::from_mut(&mut sge));
        rdma(&mut wr, &b.mr, 0);
        // SAFETY: the WR and its SGE live across the call.
        let e = unsafe { a.qp.post_send(&mut wr) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "opcode {op}");
    }
    assert!(
        drain(&a.cq, 20).is_empty(),
        "a refused request posts nothing"
    );
}

#[test]
fn what_the_responder_cannot_take_is_dropped_and_the_requester_completes() {
    let v = verbs();
    let (mut a, b) = uc_pair(&v);
    fill(&mut a, 9);
    // No receive posted: dropped (no RNR, no retry).
    let mut sge = a.mr.sge(0, 32).unwrap();
    let mut wr = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    // A bad rkey: dropped, the responder untouched.
    let mut sge = a.mr.sge(0, 32).unwrap();
    let mut wr = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey() ^ 0x100,
    };
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    assert!(bytes(&b)[..32].iter().all(|&x| x == 0), "nothing written");
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
    assert_eq!(async_events(&b.ctx), []);
    // The next message is the one a receive now posted gets.
    let mut rsge = b.mr.sge(0, 64).unwrap();
    let mut r = recv_wr(20, std::slice::from_mut(&mut rsge));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(64, 16).unwrap();
    let mut wr = send_wr(3, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    let wc = poll_n(&b.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].byte_len()), (20, 16));
    assert_eq!(&bytes(&b)[..16], &bytes(&a)[64..80]);
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn a_receive_too_small_completes_in_error_and_the_requester_still_succeeds() {
    let v = verbs();
    let (a, b) = uc_pair(&v);
    let mut rsge = b.mr.sge(0, 8).unwrap();
    let mut r = recv_wr(30, std::slice::from_mut(&mut rsge));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    let wc = poll_n(&b.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].status()), (30, WcStatus::LocLenErr));
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
    assert_eq!(async_events(&b.ctx), [], "the error is in the completion");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn uc_transitions_take_uc_masks_only() {
    let v = verbs();
    let a = side_of(&v, "soft0", QpType::Uc);
    let m = QpAttrMask::from_bits;
    let mut attr = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        ..Default::default()
    };
    a.qp.modify(
        &attr,
        m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
    )
    .unwrap();
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.ah_attr.dlid = 1;
    attr.ah_attr.port_num = 1;
    attr.min_rnr_timer = 1;
    let rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    let e =
        a.qp.modify(&attr, m(rtr | IBV_QP_MIN_RNR_TIMER))
            .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "no RNR timer on UC");
    a.qp.modify(&attr, m(rtr)).unwrap();
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    let e =
        a.qp.modify(&attr, m(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT))
            .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "no timeout on UC");
    a.qp.modify(&attr, m(IBV_QP_STATE | IBV_QP_SQ_PSN)).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn uc_and_rc_qps_do_not_talk_to_each_other() {
    let v = verbs();
    let uc = side_of(&v, "soft0", QpType::Uc);
    let rc = side_of(&v, "soft1", QpType::Rc);
    connect_typed(&uc.qp, lid(&rc.ctx), rc.qp.qp_num(), false);
    connect_typed(&rc.qp, lid(&uc.ctx), uc.qp.qp_num(), true);
    let post_both_ways = |from: &Side, to: &Side| {
        let mut rsge = to.mr.sge(0, 64).unwrap();
        let mut r = recv_wr(40, std::slice::from_mut(&mut rsge));
        post_recv(to, &mut r);
        let mut sge = from.mr.sge(0, 16).unwrap();
        let mut wr = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
        post_status(from, &mut wr)
    };
    // UC into an RC QP: lost, and the UC requester does not know.
    assert_eq!(post_both_ways(&uc, &rc), WcStatus::Success);
    assert!(drain(&rc.cq, 20).is_empty());
    // RC into a UC QP: nobody acknowledges, the retries run out.
    assert_eq!(post_both_ways(&rc, &uc), WcStatus::RetryExcErr);
}
