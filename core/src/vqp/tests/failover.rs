//! Re-dispatch over the mock provider: a failed data QP's fragments go again on
//! the others, each request is reported once.

use super::*;

fn redispatching(max_outstanding: u32) -> Config {
    Config {
        redispatch: true,
        max_outstanding,
        ..config(Mode::Dqplb)
    }
}

/// The fragments (remote offset, length) each QP was given, in posting order.
fn placed(f: &Fabric, qpn: u32) -> Vec<(u64, u32), 64> {
    f.sends
        .borrow()
        .iter()
        .filter(|(q, _)| *q == qpn)
        .map(|(_, w)| (w.remote_addr - 0x2000_0000, w.len))
        .collect()
}

#[test]
fn a_failed_qps_fragments_go_again_on_the_others() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build_with(&f, redispatching(16), 2);
    vqp.post_send(&write(7, 4 << 16)).unwrap();
    // Round-robin: fragments 0 and 2 on QP 100, 1 and 3 on QP 101.
    assert_eq!(placed(&f, 100).len(), 2);
    let sends = f.sends.borrow().clone();
    let first_on_100 = sends.iter().position(|(q, _)| *q == 100).unwrap();
    f.complete_send(first_on_100, WcStatus::RETRY_EXC_ERR);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    // QP 100 is put in error; its two fragments went to QP 101.
    assert_eq!(f.errored.borrow().as_slice(), &[100]);
    let on_101 = placed(&f, 101);
    assert_eq!(on_101.len(), 4, "{on_101:?}");
    let mut offsets: Vec<u64, 8> = on_101.iter().map(|p| p.0).collect();
    offsets.sort_unstable();
    assert_eq!(offsets.as_slice(), &[0, 1 << 16, 2 << 16, 3 << 16]);
    // The flush of QP 100's second WQE changes nothing; QP 101's completions end it.
    for i in f.signaled() {
        if f.sends.borrow()[i].0 == 101 {
            f.complete_send(i, WcStatus::SUCCESS);
        }
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (7, WcStatus::SUCCESS));
    let s = vqp.failover();
    assert_eq!((s.failovers, s.redispatched, s.healthy), (1, 2, 1));
    assert_eq!(vqp.failure(), None);
}

#[test]
fn a_qp_failed_by_an_event_has_everything_it_held_posted_again() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build_with(&f, redispatching(16), 3);
    vqp.post_send(&write(1, 6 << 16)).unwrap();
    assert_eq!(placed(&f, 101).len(), 2);
    assert!(vqp.fail_qp(101, 0, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), None);
    // Nothing of QP 101 had completed: both its fragments go again, on 100 and 102.
    vqp.progress();
    assert_eq!(placed(&f, 100).len() + placed(&f, 102).len(), 6);
    // A late success on the failed QP counts for nothing; the others' complete it.
    let sends = f.sends.borrow().clone();
    for (i, (q, w)) in sends.iter().enumerate() {
        if w.flags.contains(SendFlags::SIGNALED) {
            f.complete_send(
                i,
                if *q == 101 {
                    WcStatus::WR_FLUSH_ERR
                } else {
                    WcStatus::SUCCESS
                },
            );
        }
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::SUCCESS));
    assert_eq!(vqp.failover().healthy, 2);
}

#[test]
fn when_every_qp_failed_each_request_is_reported_once_with_the_error() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build_with(&f, redispatching(16), 2);
    vqp.post_send(&write(1, 4 << 16)).unwrap();
    vqp.post_send(&write(2, 4 << 16)).unwrap();
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), None);
    vqp.progress();
    assert!(vqp.fail_qp(101, 0, WcStatus::RETRY_EXC_ERR));
    assert_eq!(vqp.failure(), Some(WcStatus::RETRY_EXC_ERR));
    // QP 101's own WQEs are flushed by the provider; what QP 100 left is reported
    // by the failure itself.
    let sends = f.sends.borrow().clone();
    for (i, (q, w)) in sends.iter().enumerate() {
        if *q == 101 && w.flags.contains(SendFlags::SIGNALED) {
            f.complete_send(i, WcStatus::WR_FLUSH_ERR);
        }
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let got: Vec<u64, 4> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(got.as_slice(), &[1, 2]);
    assert!(wcs.iter().all(|w| !w.status.is_ok()));
    assert_eq!(vqp.sends_in_flight(), 0);
}

#[test]
fn pass_through_is_refused_once_data_qp_0_failed() {
    let f = Fabric::default();
    let cfg = Config {
        mode: Mode::Spray,
        ..redispatching(16)
    };
    let (mut vqp, _) = build_with(&f, cfg, 2);
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    let send = SendWr {
        opcode: Opcode::SEND,
        ..write(3, 100)
    };
    assert_eq!(
        vqp.post_send(&send),
        Err(PostSendError::Failed(WcStatus::FATAL_ERR))
    );
    // Fragmented requests go on over QP 101.
    vqp.post_send(&write(4, 2 << 16)).unwrap();
    assert_eq!(placed(&f, 101).len(), 2);
}

#[test]
fn a_receiver_goes_on_without_a_qp_whose_receives_were_flushed() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build_with(&f, redispatching(16), 2);
    vqp.arm_receiver();
    vqp.post_recv(&RecvWr::notification(9)).unwrap();
    // QP 100's kept receives are flushed; the message arrives on QP 101.
    let wr_id = f
        .recvs
        .borrow()
        .iter()
        .find(|(q, _)| *q == 100)
        .unwrap()
        .1
        .wr_id;
    f.push(PhysWc {
        wr_id,
        status: WcStatus::WR_FLUSH_ERR,
        opcode: WcOpcode::RECV,
        qp_num: 100,
        byte_len: 0,
        imm_data: None,
    });
    f.arrive(101, 0, false, 10);
    f.arrive(101, 1, true, 5);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (9, WcStatus::SUCCESS, 15)
    );
    assert_eq!(vqp.failover().failovers, 1);
    assert_eq!(vqp.failure(), None);
}

#[test]
fn without_redispatch_a_failed_qp_fails_the_virtual_qp() {
    let f = Fabric::default();
    let (mut vqp, _) = build(&f, Mode::Dqplb, 2);
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), Some(WcStatus::FATAL_ERR));
    assert_eq!(vqp.failover().failovers, 0);
}

#[test]
fn with_no_path_left_requests_wait_out_the_grace_period_then_fail_once() {
    let f = Fabric::default();
    let cfg = Config {
        grace_ns: 1000,
        ..redispatching(16)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    vqp.post_send(&write(1, 4 << 16)).unwrap();
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    assert!(vqp.fail_qp(101, 0, WcStatus::RETRY_EXC_ERR));
    // Held: not failed, still taking requests, nothing reported.
    assert_eq!((vqp.failure(), vqp.failover().healthy), (None, 0));
    vqp.post_send(&write(2, 1 << 16)).unwrap();
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    vqp.sample(5_000);
    vqp.sample(5_999);
    assert_eq!((vqp.failure(), vqp.grace_expired()), (None, false));
    vqp.sample(6_000);
    assert_eq!(vqp.failure(), Some(WcStatus::RETRY_EXC_ERR));
    assert!(vqp.grace_expired(), "it failed for want of a path");
    let wcs = poll(&mut vcq, &mut vqp);
    let got: Vec<u64, 4> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(got.as_slice(), &[1, 2]);
    assert!(wcs.iter().all(|w| !w.status.is_ok()));
}

#[test]
fn a_replacement_qp_takes_the_failed_ones_place_and_the_held_requests_go_on() {
    let f = Fabric::default();
    let cfg = Config {
        grace_ns: u64::MAX,
        ..redispatching(16)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    assert_eq!(
        vqp.restore(5, MockQp { qpn: 300, f: &f }).err(),
        Some(RestoreError::NoSuchQp(5))
    );
    vqp.post_send(&write(1, 4 << 16)).unwrap();
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    assert!(vqp.fail_qp(101, 0, WcStatus::FATAL_ERR));
    assert!(vqp.data_qp_failed(0) && vqp.data_qp_failed(1));
    let old = vqp.restore(1, MockQp { qpn: 301, f: &f }).unwrap();
    assert_eq!(old.qpn, 101);
    assert_eq!(vqp.data_qp_num(1), Some(301));
    // Every fragment goes again on the new QP, and completes the request there.
    assert_eq!(placed(&f, 301).len(), 4);
    for i in f.signaled() {
        if f.sends.borrow()[i].0 == 301 {
            f.complete_send(i, WcStatus::SUCCESS);
        }
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::SUCCESS));
    let s = vqp.failover();
    assert_eq!(
        (s.failovers, s.restored, s.healthy, s.redispatched),
        (2, 1, 1, 4)
    );
}

#[test]
fn without_redispatch_or_as_the_last_path_without_grace_a_qp_is_not_replaced() {
    let f = Fabric::default();
    let (mut vqp, _vcq) = build_with(&f, config(Mode::Dqplb), 2);
    assert_eq!(
        vqp.rejoin(0, MockQp { qpn: 300, f: &f }).err(),
        Some(RestoreError::Unavailable(0))
    );
    assert_eq!(vqp.resume(0), Err(RestoreError::NotJoining(0)));
    let (mut vqp, _vcq) = build_with(&f, redispatching(16), 2);
    assert!(vqp.fail_qp(101, 0, WcStatus::FATAL_ERR));
    // QP 0 is the only path left and no grace period is set: taking it out for a
    // replacement would fail the virtual QP.
    assert_eq!(
        vqp.restore(0, MockQp { qpn: 300, f: &f }).err(),
        Some(RestoreError::Unavailable(0))
    );
    assert_eq!((vqp.data_qp_num(0), vqp.failure()), (Some(100), None));
    assert!(f.errored.borrow().iter().all(|&q| q != 100));
}

/// The two steps of fail-back: a replacement posts its receives at once (before the
/// peer can send to it) and carries sends only once resumed; a healthy QP the peer
/// replaces is taken out first, its fragments going again on the others.
#[test]
fn a_rejoining_qp_receives_at_once_and_sends_only_once_resumed() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build_with(&f, redispatching(16), 2);
    vqp.arm_receiver();
    vqp.post_send(&write(1, 4 << 16)).unwrap();
    assert_eq!(placed(&f, 100).len(), 2);
    let old = vqp.rejoin(0, MockQp { qpn: 300, f: &f }).unwrap();
    assert_eq!(old.qpn, 100);
    assert!(f.errored.borrow().contains(&100), "the old QP is flushed");
    assert!(vqp.data_qp_failed(0));
    assert_eq!(vqp.failover().healthy, 1);
    let recvs_on_300 = f.recvs.borrow().iter().filter(|(q, _)| *q == 300).count();
    assert_eq!(
        recvs_on_300, 4,
        "recv_depth receives, posted while it waits"
    );
    // QP 100's two fragments went to QP 101, none to the waiting QP.
    assert_eq!(placed(&f, 101).len(), 4);
    vqp.post_send(&write(2, 2 << 16)).unwrap();
    assert!(placed(&f, 300).is_empty());
    assert_eq!(placed(&f, 101).len(), 6);
    vqp.resume(0).unwrap();
    assert_eq!(vqp.resume(0), Err(RestoreError::NotJoining(0)));
    vqp.post_send(&write(3, 2 << 16)).unwrap();
    assert_eq!(
        placed(&f, 300).len(),
        1,
        "resumed, it takes its share again"
    );
    for i in f.signaled() {
        if f.sends.borrow()[i].0 != 100 {
            f.complete_send(i, WcStatus::SUCCESS);
        }
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let got: Vec<(u64, WcStatus), 4> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got.as_slice(),
        &[
            (1, WcStatus::SUCCESS),
            (2, WcStatus::SUCCESS),
            (3, WcStatus::SUCCESS)
        ]
    );
    let s = vqp.failover();
    assert_eq!((s.failovers, s.restored, s.healthy), (1, 1, 2));
}
