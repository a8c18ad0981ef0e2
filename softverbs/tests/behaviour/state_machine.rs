//! The QP state machine: the masks and states each transition accepts.

use vqp_host::sys::*;
use vqp_host::{Error, QpAttrMask, QpState, WcStatus};

use crate::common::*;
use crate::statuses;

#[test]
fn state_machine_enforces_masks_and_states() {
    use vqp_host::connect::{self, Address, Path, INIT_MASK, RTR_MASK, RTS_MASK};
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    let b = side(&v, "soft1", &o);
    let path = Path::new(1, Address::lid(2), b.qp.qp_num(), 1, 2);
    let einval = |r: vqp_host::Result<()>| match r {
        Err(e @ Error::Verbs { .. }) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL)),
        other => panic!("{other:?}"),
    };

    // Posting in RESET.
    let mut r = recv_wr(1, &mut []);
    // SAFETY: a valid WR.
    let err = unsafe { a.qp.post_recv(&mut r) }.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));

    // RESET → RTR skips INIT.
    let (rtr, _) = path.rtr_attr();
    einval(a.qp.modify(&rtr, RTR_MASK));
    // RESET → INIT with a missing bit, with an extra bit, with a bad port.
    let (init, _) = path.init_attr();
    einval(a.qp.modify(
        &init,
        QpAttrMask::from_bits(INIT_MASK.bits() & !IBV_QP_ACCESS_FLAGS),
    ));
    einval(a.qp.modify(&init, INIT_MASK | QpAttrMask::SQ_PSN));
    let mut bad_port = init;
    bad_port.port_num = 2;
    einval(a.qp.modify(&bad_port, INIT_MASK));
    a.qp.modify(&init, INIT_MASK).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Init);
    // Receives may be posted from INIT on; sends only from RTS on: `ENOMEM` before,
    // as mlx5's `_mlx5_post_send` answers (its queue's SGE limit is -1 until RTS).
    post_recv(&a, &mut r);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(2, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    // SAFETY: a valid WR.
    let err = unsafe { a.qp.post_send(&mut w) }.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOMEM));
    // INIT → RTR without the destination QPN; with a bad MTU.
    einval(a.qp.modify(
        &rtr,
        QpAttrMask::from_bits(RTR_MASK.bits() & !IBV_QP_DEST_QPN),
    ));
    let mut bad_mtu = rtr;
    bad_mtu.path_mtu = 9;
    einval(a.qp.modify(&bad_mtu, RTR_MASK));
    a.qp.modify(&rtr, RTR_MASK).unwrap();
    // RTR → RTS with an RTR-only bit; with an RNR retry of 8.
    let (rts, _) = path.rts_attr();
    einval(a.qp.modify(&rts, RTS_MASK | QpAttrMask::AV));
    let mut bad_rnr = rts;
    bad_rnr.rnr_retry = 8;
    einval(a.qp.modify(&bad_rnr, RTS_MASK));
    a.qp.modify(&rts, RTS_MASK).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    // RTS → RTS may change the RNR timer, but not the PSN.
    let mut again = rts;
    again.min_rnr_timer = 3;
    a.qp.modify(&again, QpAttrMask::MIN_RNR_TIMER).unwrap();
    einval(a.qp.modify(&again, QpAttrMask::SQ_PSN));
    let q = a.qp.query(QpAttrMask::STATE).unwrap();
    assert_eq!(
        (q.min_rnr_timer, q.sq_psn, q.dest_qp_num),
        (3, 1, b.qp.qp_num())
    );
    // A wrong assumed current state.
    let mut cur = rts;
    cur.cur_qp_state = IBV_QPS_RTR;
    einval(a.qp.modify(&cur, QpAttrMask::STATE | QpAttrMask::CUR_STATE));
    // ERR flushes the receive posted in INIT; RESET then allows a fresh connection.
    let err_attr = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..Default::default()
    };
    a.qp.modify(&err_attr, QpAttrMask::STATE).unwrap();
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::WrFlushErr)]);
    einval(a.qp.modify(&rts, RTS_MASK));
    let reset = ibv_qp_attr {
        qp_state: IBV_QPS_RESET,
        ..Default::default()
    };
    a.qp.modify(&reset, QpAttrMask::STATE).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Reset);
    connect::connect(&a.qp, &path).unwrap();
    connect::connect(&b.qp, &Path::new(1, Address::lid(1), a.qp.qp_num(), 2, 1)).unwrap();
    let mut w = send_wr(3, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(3, WcStatus::Success)]);
}
