//! Sends: refusals, chains and signaling, completion order, backpressure, SPRAY's notify.

use super::*;

#[test]
fn bad_requests_are_refused_and_post_nothing() {
    let f = Fabric::default();
    let (mut vqp, _) = build(&f, Mode::Dqplb, 4);
    let cases = [
        (write(1, 0), PostSendError::ZeroLength),
        (
            write(1, 10).flags(SendFlags::NONE),
            PostSendError::Unsignaled(Opcode::RDMA_WRITE),
        ),
        (
            SendWr {
                opcode: Opcode(42),
                ..write(1, 10)
            },
            PostSendError::UnknownOpcode(Opcode(42)),
        ),
        (
            SendWr {
                keys: Keys::none().with(1, 1, 2),
                ..write(1, 10)
            },
            PostSendError::MissingKey { device: 0 },
        ),
        (
            SendWr {
                opcode: Opcode::SEND,
                ..write(1, 10)
            },
            PostSendError::SendNeedsSpray,
        ),
    ];
    for (wr, err) in cases {
        assert_eq!(vqp.post_send(&wr), Err(err));
    }
    assert!(f.sends.borrow().is_empty());
    assert_eq!(vqp.sends_in_flight(), 0);
    // An unsignaled WRITE_WITH_IMM may be fragmented.
    let imm = SendWr {
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        ..write(2, 10).flags(SendFlags::NONE)
    };
    assert_eq!(vqp.post_send(&imm), Ok(()));
}

#[test]
fn pass_through_too_long_is_refused() {
    let f = Fabric::default();
    let (mut vqp, _) = build(&f, Mode::Spray, 1);
    assert_eq!(
        vqp.post_send(&write(1, 3 << 30)),
        Err(PostSendError::TooLong(3 << 30))
    );
    assert!(f.sends.borrow().is_empty());
}

#[test]
fn a_request_of_more_than_u32_max_fragments_is_refused() {
    let f = Fabric::default();
    let cfg = Config {
        split: SplitPolicy::new(1),
        ..config(Mode::Dqplb)
    };
    let (mut vqp, _) = build_with(&f, cfg, 4);
    let len = u64::from(u32::MAX) + 1;
    assert_eq!(
        vqp.post_send(&write(1, len)),
        Err(PostSendError::TooManyFragments {
            len,
            fragments: len
        })
    );
    assert!(f.sends.borrow().is_empty());
    assert_eq!(vqp.sends_in_flight(), 0);
    // One fragment fewer is taken.
    assert_eq!(vqp.post_send(&write(2, len - 1)), Ok(()));
}

/// A request's slot is touched by its post and by each completion: it stays within
/// 168 bytes (it was 184 before the fragment counters became `u32`).
#[test]
fn a_send_slot_stays_small() {
    assert!(core::mem::size_of::<crate::vqp::slots::SendSlot>() <= 168);
}

#[test]
fn one_chain_per_qp_with_only_its_last_wqe_signaled() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 4);
    vqp.post_send(&write(9, 1 << 20)).unwrap();
    let sends = f.sends.borrow().clone();
    assert_eq!(sends.len(), 16);
    assert_eq!(f.send_calls.get(), 4);
    let mut covered = 0u64;
    for (i, (qpn, w)) in sends.iter().enumerate() {
        assert_eq!(w.opcode, Opcode::RDMA_WRITE);
        assert_eq!(w.len, 64 << 10);
        covered += u64::from(w.len);
        assert_eq!(w.addr - 0x1000_0000, w.remote_addr - 0x2000_0000);
        let id = WrId::decode(w.wr_id).unwrap();
        assert_eq!(u32::from(id.lane) + 100, *qpn);
        assert_eq!(id.kind, Kind::Send);
        assert_eq!(w.flags.contains(SendFlags::SIGNALED), i % 4 == 3);
    }
    assert_eq!(covered, 1 << 20);
    for i in f.signaled() {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 9);
    assert_eq!(wcs[0].byte_len, 1 << 20);
    assert_eq!(wcs[0].qp_num, 77);
    assert_eq!(wcs[0].opcode, WcOpcode::RDMA_WRITE);
}

#[test]
fn completions_are_reported_in_posting_order() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 3);
    for id in 0..3 {
        // One fragment each: request i goes to QP i.
        vqp.post_send(&write(id, 1000)).unwrap();
    }
    let signaled = f.signaled();
    assert_eq!(signaled.len(), 3);
    f.complete_send(signaled[2], WcStatus::SUCCESS);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.complete_send(signaled[0], WcStatus::SUCCESS);
    let first = poll(&mut vcq, &mut vqp);
    assert_eq!(first.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [0]);
    f.complete_send(signaled[1], WcStatus::SUCCESS);
    let rest = poll(&mut vcq, &mut vqp);
    assert_eq!(rest.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [1, 2]);
}

#[test]
fn a_completion_releases_every_earlier_run_on_its_qp() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    for id in 0..3 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    let signaled = f.signaled();
    assert_eq!(signaled.len(), 6);
    // QP 0 completes everything with its last CQE; QP 1 lags.
    f.complete_send(signaled[4], WcStatus::SUCCESS);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.complete_send(signaled[1], WcStatus::SUCCESS);
    assert_eq!(poll(&mut vcq, &mut vqp).len(), 1);
    f.complete_send(signaled[5], WcStatus::SUCCESS);
    let rest = poll(&mut vcq, &mut vqp);
    assert_eq!(rest.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [1, 2]);
}

#[test]
fn poll_never_writes_past_the_callers_buffer() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 1);
    for id in 0..5 {
        vqp.post_send(&write(id, 8)).unwrap();
    }
    for i in f.signaled() {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    let mut out = [Wc::EMPTY; 2];
    let mut seen = 0;
    for _ in 0..3 {
        let n = vcq.poll(&mut [&mut vqp], &mut out).unwrap();
        assert!(n <= 2);
        for wc in &out[..n] {
            assert_eq!(wc.wr_id, seen);
            seen += 1;
        }
    }
    assert_eq!(seen, 5);
}

#[test]
fn full_slot_ring_is_backpressure_and_waiting_fragments_go_as_room_frees() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 2,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    for id in 0..16 {
        vqp.post_send(&write(id, 256 << 10)).unwrap();
    }
    assert_eq!(vqp.post_send(&write(16, 1)), Err(PostSendError::Full));
    // 2 QPs × 2 outstanding.
    assert_eq!(f.sends.borrow().len(), 4);
    let mut done = Vec::<u64, 16>::new();
    let mut completed = 0;
    while done.len() < 16 {
        let signaled = f.signaled();
        for &i in &signaled[completed..] {
            f.complete_send(i, WcStatus::SUCCESS);
        }
        completed = signaled.len();
        for wc in poll(&mut vcq, &mut vqp) {
            assert!(wc.status.is_ok());
            done.push(wc.wr_id).unwrap();
        }
    }
    assert!(done.iter().copied().eq(0..16));
    assert_eq!(f.sends.borrow().len(), 64);
}

#[test]
fn spray_notify_follows_the_data_in_order_and_is_pipelined() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Spray, 2);
    for id in 0..2 {
        let wr = SendWr {
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            ..write(id, 64 << 10)
        }
        .imm(0xabcd_0000 + id as u32);
        vqp.post_send(&wr).unwrap();
    }
    // One fragment each, request i on data QP i.
    let data = f.signaled();
    assert_eq!(data.len(), 2);
    assert!(f.sends.borrow().iter().all(|(q, _)| *q != 200));
    // Request 1's data completes first: its notify must wait for request 0's.
    f.complete_send(data[1], WcStatus::SUCCESS);
    poll(&mut vcq, &mut vqp);
    assert!(f.sends.borrow().iter().all(|(q, _)| *q != 200));
    f.complete_send(data[0], WcStatus::SUCCESS);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    // Both notifies went out together, in order, before either completed.
    let notifies: Vec<SendWqe, 4> = f
        .sends
        .borrow()
        .iter()
        .filter(|(q, _)| *q == 200)
        .map(|(_, w)| *w)
        .collect();
    assert_eq!(notifies.len(), 2);
    for (i, n) in notifies.iter().enumerate() {
        assert_eq!(n.opcode, Opcode::RDMA_WRITE_WITH_IMM);
        assert_eq!(n.len, 0);
        assert_eq!(n.imm_data, 0xabcd_0000 + i as u32);
    }
    let last = f.sends.borrow().len() - 1;
    f.complete_send(last, WcStatus::SUCCESS);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [0, 1]);
}
