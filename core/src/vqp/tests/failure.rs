//! A failed virtual QP: failed QPs, refused posts, shutdown and stray completions.

use super::*;

#[test]
fn a_failed_qp_fails_every_outstanding_request_once() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 2,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    for id in 0..4 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    // Requests 0 and 1 are posted (4 WQEs); 2 and 3 wait.
    assert_eq!(f.sends.borrow().len(), 4);
    let signaled = f.signaled();
    f.complete_send(signaled[0], WcStatus::SUCCESS);
    f.complete_send(signaled[1], WcStatus::RETRY_EXC_ERR);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(vqp.failure(), Some(WcStatus::RETRY_EXC_ERR));
    assert_eq!(f.errored.borrow().len(), 2, "every QP was moved to error");
    assert_eq!(
        vqp.post_send(&write(9, 8)),
        Err(PostSendError::Failed(WcStatus::RETRY_EXC_ERR))
    );
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (0, WcStatus::RETRY_EXC_ERR));
    // The provider flushes what was outstanding.
    for &i in &signaled[2..] {
        f.complete_send(i, WcStatus::WR_FLUSH_ERR);
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let ids: Vec<(u64, WcStatus), 4> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        [
            (1, WcStatus::WR_FLUSH_ERR),
            (2, WcStatus::WR_FLUSH_ERR),
            (3, WcStatus::WR_FLUSH_ERR)
        ]
    );
    assert_eq!(
        f.sends.borrow().len(),
        4,
        "nothing posted after the failure"
    );
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    assert_eq!(vqp.sends_in_flight(), 0);
}

#[test]
fn a_qp_failed_by_an_event_fails_the_virtual_qp_and_another_qp_does_not() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    for id in 0..2 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    let qpn = vqp.data_qp_num(1).unwrap();
    assert!(!vqp.fail_qp(qpn + 1000, 0, WcStatus::FATAL_ERR), "not ours");
    assert!(
        !vqp.fail_qp(qpn, 1, WcStatus::FATAL_ERR),
        "ours, but not on device 1"
    );
    assert!(!vqp.fail_device(1, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), None);
    assert!(f.errored.borrow().is_empty());
    assert!(vqp.fail_qp(qpn, 0, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), Some(WcStatus::FATAL_ERR));
    assert_eq!(f.errored.borrow().len(), 2, "every QP was moved to error");
    assert_eq!(
        vqp.post_send(&write(9, 8)),
        Err(PostSendError::Failed(WcStatus::FATAL_ERR))
    );
    // The provider flushes what was posted; each request is reported once.
    for i in f.signaled() {
        f.complete_send(i, WcStatus::WR_FLUSH_ERR);
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let ids: Vec<u64, 4> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [0, 1]);
    assert!(wcs.iter().all(|w| !w.status.is_ok()));
    assert_eq!(vqp.sends_in_flight(), 0);
    // A later event changes nothing (the first error stays).
    assert!(vqp.fail_device(0, WcStatus::RETRY_EXC_ERR));
    assert_eq!(vqp.failure(), Some(WcStatus::FATAL_ERR));
}

#[test]
fn a_refused_post_fails_the_request_not_the_caller() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    f.refuse.set(true);
    assert_eq!(vqp.post_send(&write(5, 128 << 10)), Ok(()));
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::POST_ERR);
    assert_eq!(vqp.failure(), Some(WcStatus::POST_ERR));
}

#[test]
fn stray_completions_are_counted_not_routed() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    vqp.post_send(&write(1, 8)).unwrap();
    let mut wc = PhysWc {
        wr_id: f.sends.borrow()[0].1.wr_id,
        qp_num: 999,
        ..PhysWc::EMPTY
    };
    f.push(wc);
    wc.wr_id = u64::MAX;
    f.push(wc);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    assert_eq!(vcq.strays(), 2);
    assert_eq!(vqp.sends_in_flight(), 1);
}

#[test]
fn shutting_down_reports_everything_outstanding_once() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 1,
        ..config(Mode::Spray)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    for id in 0..3 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    vqp.post_recv(&RecvWr::notification(7)).unwrap();
    vqp.shut_down();
    assert_eq!(f.errored.borrow().len(), 3, "data QPs and notify QP");
    // The provider flushes the posted WQEs (one per QP: request 0's fragments and the receive).
    for i in 0..2 {
        f.complete_send(i, WcStatus::WR_FLUSH_ERR);
    }
    let wr_id = f.recvs.borrow()[0].1.wr_id;
    f.push(PhysWc {
        wr_id,
        status: WcStatus::WR_FLUSH_ERR,
        qp_num: 200,
        ..PhysWc::EMPTY
    });
    let wcs = poll(&mut vcq, &mut vqp);
    let ids: Vec<(u64, WcOpcode), 4> = wcs.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(
        ids,
        [
            (0, WcOpcode::RDMA_WRITE),
            (1, WcOpcode::RDMA_WRITE),
            (2, WcOpcode::RDMA_WRITE),
            (7, WcOpcode::RECV_RDMA_WITH_IMM)
        ]
    );
    assert!(wcs.iter().all(|w| w.status == WcStatus::WR_FLUSH_ERR));
    assert_eq!(vqp.sends_in_flight() + vqp.recvs_in_flight(), 0);
    assert_eq!(
        vqp.post_send(&write(9, 1)),
        Err(PostSendError::Failed(WcStatus::WR_FLUSH_ERR))
    );
}
