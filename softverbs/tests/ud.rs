//! Unreliable datagram QPs and address handles as ConnectX has them: a SEND reaches any
//! UD QP through an address handle and a Q_Key; the receive buffer starts with the
//! 40-byte GRH area (filled, with `IBV_WC_GRH`, when the address had a global route);
//! the completion names the sender (`src_qp`, `slid`) and counts the GRH area;
//! `ibv_init_ah_from_wc` answers it; a datagram with the wrong Q_Key, or to a QP with
//! no receive posted, is dropped while the sender completes; more than the MTU is a
//! local length error. Across processes, Debian's `ibv_ud_pingpong`
//! (`debian_programs.rs`).
//!
//! Tests here run in parallel in one process, each on its own QPs and contexts.

mod common;

use common::*;
use vqp_host::sys::*;
use vqp_host::{QpAttrMask, QpInit, QpType, WcFlags, WcStatus};

const QKEY: u32 = 0x1111_1111;

/// An address handle on `from`'s PD for `to`'s port (with a global route if `global`).
fn ah_to(from: &Side, to: &Side, global: bool) -> *mut ibv_ah {
    let dgid = global.then(|| gid(&to.ctx));
    ah_for(&from.pd, lid(&to.ctx), dgid)
}

#[test]
fn a_datagram_arrives_behind_the_grh_area_and_names_its_sender() {
    let v = verbs();
    let mut a = ud_side(&v, "soft0", QKEY);
    let b = ud_side(&v, "soft1", QKEY);
    fill(&mut a, 3);
    let ah = ah_to(&a, &b, false);
    post_receive(&b, 7, 0, 40 + 100);
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), QKEY, 0, 100),
        WcStatus::Success
    );
    let wc = poll_n(&b.cq, 1);
    let w = &wc[0];
    assert_eq!(
        (w.wr_id(), w.status(), w.byte_len()),
        (7, WcStatus::Success, 140)
    );
    assert_eq!(w.src_qp(), a.qp.qp_num());
    assert_eq!(w.raw().slid, a.ctx.query_port(1).unwrap().lid());
    assert_eq!(w.imm_data(), Some(0xabcd));
    assert!(!w.flags().contains(WcFlags::GRH), "no global route, no GRH");
    assert_eq!(&bytes(&b)[40..140], &bytes(&a)[..100]);
    // SAFETY: the AH is live and used by nothing else.
    assert_eq!(unsafe { vqp_softverbs::ibv_destroy_ah(ah) }, 0);
    // SAFETY: destroyed already: refused, nothing touched.
    assert_eq!(unsafe { vqp_softverbs::ibv_destroy_ah(ah) }, libc::EINVAL);
}

#[test]
fn a_global_route_fills_the_grh_and_the_answer_is_built_from_it() {
    let v = verbs();
    let mut a = ud_side(&v, "soft0", QKEY);
    let mut b = ud_side(&v, "soft1", QKEY);
    fill(&mut a, 5);
    fill(&mut b, 6);
    let ah = ah_to(&a, &b, true);
    post_receive(&b, 1, 0, 40 + 64);
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), QKEY, 0, 64),
        WcStatus::Success
    );
    let wc = poll_n(&b.cq, 1)[0];
    let mut raw_wc = *wc.raw();
    assert!(wc.flags().contains(WcFlags::GRH));
    let head = &bytes(&b)[..40];
    assert_eq!(head[0] >> 4, 6, "IPv6 version");
    assert_eq!(head[6], 0x1b, "next header: IB transport");
    // SAFETY: `raw` is the byte view of the GID union.
    let (ga, gb) = unsafe { (gid(&a.ctx).raw, gid(&b.ctx).raw) };
    assert_eq!(&head[8..24], &ga, "source GID");
    assert_eq!(&head[24..40], &gb, "destination GID");
    assert_eq!(&bytes(&b)[40..104], &bytes(&a)[..64]);
    // The receiver answers through an address built from the completion and the GRH.
    let grh = bytes(&b).as_ptr() as *mut vqp_softverbs::ibv_grh;
    // SAFETY: a live PD; the completion and the 40-byte GRH it describes are readable.
    let back = unsafe { vqp_softverbs::ibv_create_ah_from_wc(b.pd.as_raw(), &mut raw_wc, grh, 1) };
    assert!(!back.is_null());
    post_receive(&a, 2, 4096, 40 + 32);
    assert_eq!(
        ud_send(&b, back, wc.src_qp(), QKEY, 200, 32),
        WcStatus::Success
    );
    let wc = poll_n(&a.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].byte_len()), (2, 72));
    assert!(wc[0].flags().contains(WcFlags::GRH));
    assert_eq!(&bytes(&a)[4096 + 40..4096 + 72], &bytes(&b)[200..232]);
}

#[test]
fn what_ud_cannot_deliver_is_dropped_and_the_sender_completes() {
    let v = verbs();
    let a = ud_side(&v, "soft0", QKEY);
    let b = ud_side(&v, "soft1", QKEY);
    let ah = ah_to(&a, &b, false);
    // No receive posted: dropped, no RNR.
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), QKEY, 0, 16),
        WcStatus::Success
    );
    // A wrong Q_Key: dropped, the receive stays.
    post_receive(&b, 9, 0, 40 + 64);
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), 0x2222, 0, 16),
        WcStatus::Success
    );
    assert!(drain(&b.cq, 20).is_empty());
    // A QP number nobody has: lost.
    assert_eq!(ud_send(&a, ah, 0x00ff_fff0, QKEY, 0, 16), WcStatus::Success);
    // A Q_Key with the high bit set means the sender's own (here the same as b's).
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), 0x8000_0000, 0, 16),
        WcStatus::Success
    );
    let wc = poll_n(&b.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].byte_len()), (9, 56));
    // A receive too small for the GRH area and the payload completes in error.
    post_receive(&b, 10, 0, 40 + 8);
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), QKEY, 0, 16),
        WcStatus::Success
    );
    let wc = poll_n(&b.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].status()), (10, WcStatus::LocLenErr));
}

#[test]
fn more_than_the_mtu_is_a_local_length_error_and_only_sends_are_posted() {
    let v = verbs();
    let a = ud_side(&v, "soft0", QKEY);
    let b = ud_side(&v, "soft1", QKEY);
    let ah = ah_to(&a, &b, false);
    for op in [
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
    ] {
        let mut sge = a.mr.sge(0, 8).unwrap();
        let mut wr = send_wr(1, op, std::slice::from_mut(&mut sge));
        // SAFETY: the WR and its SGE live across the call.
        let e = unsafe { a.qp.post_send(&mut wr) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "opcode {op}");
    }
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut wr = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    // SAFETY: the WR and its SGE live across the call; no address handle: refused.
    let e = unsafe { a.qp.post_send(&mut wr) }.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "no address handle");
    assert_eq!(
        ud_send(&a, ah, b.qp.qp_num(), QKEY, 0, 4097),
        WcStatus::LocLenErr
    );
}

#[test]
fn address_handles_and_ud_transitions_check_their_arguments() {
    let v = verbs();
    let a = ud_side(&v, "soft0", QKEY);
    let mut attr = ibv_ah_attr {
        dlid: 1,
        port_num: 2,
        ..Default::default()
    };
    // SAFETY: a live PD; a readable attribute struct.
    let ah = unsafe { vqp_softverbs::ibv_create_ah(a.pd.as_raw(), &mut attr) };
    assert!(ah.is_null(), "port 2");
    let o = Opts::default();
    let mut init = QpInit::rc(&a.cq, o.cap);
    init.qp_type = QpType::Ud;
    let qp = a.pd.create_qp(&init).unwrap();
    let m = QpAttrMask::from_bits;
    let attr = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qkey: QKEY,
        ..Default::default()
    };
    let e = qp
        .modify(&attr, m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "INIT needs the Q_Key");
    let e = qp
        .modify(
            &attr,
            m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS),
        )
        .unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EINVAL),
        "no access flags on UD"
    );
    qp.modify(
        &attr,
        m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
    )
    .unwrap();
    assert_eq!(qp.query(m(IBV_QP_QKEY)).unwrap().qkey, QKEY);
}
