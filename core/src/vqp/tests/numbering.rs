//! DQPLB's sequence numbers: which fragments take one, the wrap, and the window.

use super::*;

#[test]
fn dqplb_numbers_with_imm_fragments_only_and_wraps() {
    let f = Fabric::default();
    let cfg = Config {
        send_seq: (1 << 24) - 2,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, _) = build_with(&f, cfg, 2);
    vqp.post_send(&write(1, 100 << 10)).unwrap();
    let imm = SendWr {
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        ..write(2, 256 << 10)
    };
    vqp.post_send(&imm).unwrap();
    let sends = f.sends.borrow();
    assert_eq!(sends[0].1.opcode, Opcode::RDMA_WRITE);
    assert_eq!(sends[1].1.opcode, Opcode::RDMA_WRITE);
    let words: Vec<u32, 4> = sends[2..]
        .iter()
        .map(|(_, w)| {
            assert_eq!(w.opcode, Opcode::RDMA_WRITE_WITH_IMM);
            u32::from_be(w.imm_data)
        })
        .collect();
    // Chains are per QP: QP 0 took fragments 0 and 2, QP 1 fragments 1 and 3.
    let mut sorted = words.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0x0000_0000, 0x00ff_fffe, 0x00ff_ffff, 0x8000_0001]);
    assert_eq!(vqp.send_seq().get(), 2);
}

#[test]
fn a_stalled_qp_holds_back_dqplb_numbering_within_the_window() {
    let f = Fabric::default();
    let cfg = Config {
        split: SplitPolicy::new(1),
        max_outstanding: 4,
        recv_depth: 4,
        ..config(Mode::Dqplb)
    };
    // 2 QPs: window 128, of which 2 × 4 receives may sit unprocessed at the peer.
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    let imm = SendWr {
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        ..write(1, 1000)
    };
    vqp.post_send(&imm).unwrap();
    // QP 0 never completes; QP 1 completes everything it gets.
    let mut done = 0;
    loop {
        let sends = f.sends.borrow().clone();
        let fresh: Vec<usize, 512> = (done..sends.len())
            .filter(|&i| sends[i].0 == 101 && sends[i].1.flags.contains(SendFlags::SIGNALED))
            .collect();
        done = sends.len();
        if fresh.is_empty() {
            break;
        }
        for i in fresh {
            f.complete_send(i, WcStatus::SUCCESS);
        }
        poll(&mut vcq, &mut vqp);
    }
    let highest = f
        .sends
        .borrow()
        .iter()
        .map(|(_, w)| u32::from_be(w.imm_data) & 0xff_ffff)
        .max()
        .unwrap();
    // The oldest outstanding number is 0 (on QP 0): nothing reaches 128 - 8.
    assert_eq!(highest, 128 - 8 - 1);
    assert_eq!(vqp.send_seq().get(), 128 - 8);
}

#[test]
fn one_fragment_requests_posted_straight_away_stay_within_the_window() {
    // 2 QPs, window 64, of which 2 × 28 receives may sit unprocessed at the peer:
    // 8 sequence numbers may be in flight.
    type Narrow<'f> = VirtualQp<MockQp<'f>, 4, 16, 64, 64>;
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 4,
        recv_depth: 28,
        ..config(Mode::Dqplb)
    };
    let data = (0..2).map(|i| {
        (
            MockQp {
                qpn: 100 + i,
                f: &f,
            },
            0,
        )
    });
    let mut vqp = Narrow::new(cfg, data, None).unwrap();
    let mut vcq = Vcq::new();
    vcq.add_cq(MockCq(&f), 0, 1024).unwrap();
    vcq.attach(&mut vqp).unwrap();
    let mut done = 0;
    let mut out = [Wc::EMPTY; 8];
    for i in 0..15 {
        let imm = SendWr {
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            ..write(i, 1000)
        };
        vqp.post_send(&imm).unwrap();
        // QP 0 never completes; QP 1 completes everything it gets.
        let sends = f.sends.borrow().clone();
        for (k, (qpn, _)) in sends.iter().enumerate().skip(done) {
            if *qpn == 101 {
                f.complete_send(k, WcStatus::SUCCESS);
            }
        }
        done = sends.len();
        vcq.poll(&mut [&mut vqp], &mut out).unwrap();
    }
    let sends = f.sends.borrow();
    let seqs: Vec<u32, 16> = sends
        .iter()
        .map(|(_, w)| u32::from_be(w.imm_data) & 0xff_ffff)
        .collect();
    assert_eq!(seqs.len(), 8, "{seqs:?}");
    assert_eq!(seqs.iter().max(), Some(&7));
    assert_eq!(vqp.send_seq().get(), 8);
    assert_eq!(vqp.sends_in_flight(), 15);
}
