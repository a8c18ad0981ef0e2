//! Local and receive-side error statuses, RNR, and a peer that never connected.

use vqp_host::sys::*;
use vqp_host::{AccessFlags, QpState, WcOpcode, WcStatus};

use crate::common::*;
use crate::statuses;

#[test]
fn local_protection_errors_then_flush() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut rwr = recv_wr(50, &mut []);
    post_recv(&a, &mut rwr);
    let mut bad_sge = a.mr.sge(0, 8).unwrap();
    bad_sge.lkey ^= 0xff00; // no such key
    let mut w1 = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut bad_sge));
    rdma(&mut w1, &b.mr, 0);
    let mut ok_sge = a.mr.sge(0, 8).unwrap();
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut ok_sge));
    w2.send_flags = 0; // unsignaled, yet flushed with a completion
    rdma(&mut w2, &b.mr, 0);
    w1.next = &mut w2;
    post(&a, &mut w1);
    let got = poll_n(&a.cq, 3);
    assert_eq!(
        statuses(&got),
        [
            (1, WcStatus::LocProtErr),
            (2, WcStatus::WrFlushErr),
            (50, WcStatus::WrFlushErr),
        ]
    );
    assert!(got.iter().all(|w| w.qp_num() == a.qp.qp_num()));
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    // Posting to a QP in error completes at once with a flush.
    let mut w3 = send_wr(3, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut ok_sge));
    rdma(&mut w3, &b.mr, 0);
    post(&a, &mut w3);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(3, WcStatus::WrFlushErr)]);

    // Out of bounds of a valid key, and READ into a region without local write.
    let v2 = verbs();
    let (a, b) = pair(&v2);
    let mut sge = a.mr.sge(0, 8).unwrap();
    sge.addr = a.mr.addr() + a.mr.len() as u64 - 4;
    let mut w = send_wr(4, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(4, WcStatus::LocProtErr)]);

    let o = Opts {
        access: AccessFlags::REMOTE_READ,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v2, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(5, IBV_WR_RDMA_READ, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(5, WcStatus::LocProtErr)]);
}

#[test]
fn receive_too_small_and_receive_with_bad_key() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut rs = b.mr.sge(0, 16).unwrap();
    let mut r = recv_wr(7, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    let mut r2 = recv_wr(8, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r2);
    let mut sge = a.mr.sge(0, 32).unwrap();
    let mut w = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(
        statuses(&poll_n(&b.cq, 2)),
        [(7, WcStatus::LocLenErr), (8, WcStatus::WrFlushErr)]
    );
    assert_eq!(b.qp.state().unwrap(), QpState::Err);

    let (a, b) = pair(&v);
    let mut rs = b.mr.sge(0, 64).unwrap();
    rs.lkey = 0x1234_5601;
    let mut r = recv_wr(9, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(0, 32).unwrap();
    let mut w = send_wr(2, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(2, WcStatus::RemOpErr)]);
    assert_eq!(statuses(&poll_n(&b.cq, 1)), [(9, WcStatus::LocProtErr)]);
}

#[test]
fn rnr_retries_then_gives_up_or_succeeds_when_a_receive_arrives() {
    let v = verbs();
    // rnr_retry = 2: three attempts, then RNR retry exceeded; the rest is flushed.
    let o = Opts {
        rnr_retry: 2,
        min_rnr_timer: 1, // 10 µs
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w1 = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    let mut w2 = send_wr(
        2,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut w2, &b.mr, 0);
    w1.next = &mut w2;
    post(&a, &mut w1);
    assert_eq!(
        statuses(&poll_n(&a.cq, 2)),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );

    // rnr_retry = 7 retries forever: the WRITE_WITH_IMM waits for a receive, and the
    // WQE behind it waits too (order within the QP).
    let o = Opts {
        rnr_retry: 7,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w1 = send_wr(
        1,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut w1, &b.mr, 0);
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w2, &b.mr, 8);
    w1.next = &mut w2;
    post(&a, &mut w1);
    assert!(drain(&a.cq, 30).is_empty(), "stalled on RNR");
    let mut r = recv_wr(5, &mut []);
    post_recv(&b, &mut r);
    assert_eq!(
        statuses(&poll_n(&a.cq, 2)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(poll_n(&b.cq, 1)[0].opcode(), WcOpcode::RecvRdmaWithImm);
}

/// A request to a QP that is not connected to its sender is lost, as on the wire: the
/// requester retransmits after its local ACK timeout (`timeout` 14: about 67 ms),
/// `retry_cnt` (7) times, and only then completes with `IBV_WC_RETRY_EXC_ERR`.
#[test]
fn peer_not_connected_is_retry_exceeded_after_the_retries() {
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    let b = side(&v, "soft1", &o);
    // a points at b, but b stays in RESET.
    let path =
        vqp_host::connect::Path::new(1, vqp_host::connect::Address::lid(2), b.qp.qp_num(), 0, 0);
    vqp_host::connect::connect(&a.qp, &path).unwrap();
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    let posted = std::time::Instant::now();
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::RetryExcErr)]);
    // Seven retransmissions, each after a 67 ms timeout.
    let took = posted.elapsed();
    assert!(
        took >= std::time::Duration::from_millis(7 * 67),
        "gave up after {took:?}"
    );
}

/// A responder that becomes ready while the requester retransmits takes the
/// retransmission: a WRITE posted before its target QP was connected back lands.
#[test]
fn a_responder_connected_late_takes_the_retransmission() {
    let v = verbs();
    let o = Opts::default();
    let mut a = side(&v, "soft0", &o);
    let mut b = side(&v, "soft1", &o);
    fill(&mut a, 7);
    fill(&mut b, 0);
    let lid = |s: &Side| s.ctx.query_port(1).unwrap().lid();
    let pa = vqp_host::connect::Path::new(
        1,
        vqp_host::connect::Address::lid(lid(&b)),
        b.qp.qp_num(),
        0x100,
        0x200,
    );
    vqp_host::connect::connect(&a.qp, &pa).unwrap();
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    // b is still in RESET: nothing completes yet.
    assert_eq!(statuses(&drain(&a.cq, 100)), []);
    let pb = vqp_host::connect::Path::new(
        1,
        vqp_host::connect::Address::lid(lid(&a)),
        a.qp.qp_num(),
        0x200,
        0x100,
    );
    vqp_host::connect::connect(&b.qp, &pb).unwrap();
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::Success)]);
    assert_eq!(bytes(&b)[..64], bytes(&a)[..64]);
}
