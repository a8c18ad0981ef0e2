//! A request's fragments staged QP by QP in one go, against fragment by fragment.

use super::*;

/// Everything of a posted WQE but its `SIGNALED` bit, with the QP it went to.
fn placement(sends: &[(u32, SendWqe)]) -> Vec<(u32, SendWqe), 64> {
    sends
        .iter()
        .map(|&(qpn, w)| {
            let flags = SendFlags(w.flags.0 & !SendFlags::SIGNALED.0);
            (qpn, SendWqe { flags, ..w })
        })
        .collect()
}

#[test]
fn a_request_spread_in_one_go_lands_exactly_as_fragment_by_fragment() {
    // A round stages a request's fragments QP by QP when every QP has room for its
    // share; with the spread turned off it goes fragment by fragment. Both must post
    // the same WQEs to the same QPs with the same sequence numbers, whichever
    // signaling (which changes the runs: one per QP's share, or one per WQE).
    let requests = [
        (Opcode::RDMA_WRITE_WITH_IMM, 1000, 0x2000_0000),
        (Opcode::RDMA_WRITE_WITH_IMM, 5 << 16, 0x2000_0000),
        (Opcode::RDMA_WRITE_WITH_IMM, (9 << 16) + 77, 0x2000_1234),
        (Opcode::RDMA_WRITE, 3 << 16, 0x2000_0010),
        (Opcode::RDMA_READ, (2 << 16) + 1, 0x2000_0000),
        (Opcode::RDMA_WRITE_WITH_IMM, 2 << 16, 0x2000_0000),
    ];
    let run = |signaling, one_by_one| {
        let f = Fabric::default();
        let cfg = Config {
            signaling,
            send_seq: (1 << 24) - 5,
            split: SplitPolicy {
                align: 4096,
                ..SplitPolicy::new(64 << 10)
            },
            ..config(Mode::Dqplb)
        };
        let (mut vqp, _) = build_with(&f, cfg, 4);
        vqp.one_by_one = one_by_one;
        for (i, &(opcode, len, remote)) in requests.iter().enumerate() {
            let flags = if i % 2 == 0 {
                SendFlags::SIGNALED.with(SendFlags::SOLICITED)
            } else {
                SendFlags::SIGNALED.with(SendFlags::FENCE)
            };
            let wr = SendWr {
                opcode,
                remote_addr: remote,
                flags,
                ..write(i as u64, len)
            };
            vqp.post_send(&wr).unwrap();
        }
        let sends = placement(&f.sends.borrow());
        (sends, vqp.send_seq())
    };
    let (one_by_one, seq_one) = run(Signaling::LastOfChain, true);
    assert_eq!(one_by_one.len(), 1 + 5 + 11 + 3 + 3 + 2);
    for signaling in [Signaling::LastOfChain, Signaling::Every] {
        let (spread, seq_spread) = run(signaling, false);
        assert_eq!(seq_spread, seq_one);
        // Chains are per QP, so compare each QP's WQEs in order.
        for qpn in 100..104 {
            let of = |v: &[(u32, SendWqe)]| {
                v.iter()
                    .filter(|(q, _)| *q == qpn)
                    .map(|(_, w)| *w)
                    .collect::<Vec<_, 64>>()
            };
            assert_eq!(of(&spread), of(&one_by_one), "QP {qpn}, {signaling:?}");
        }
    }
}

#[test]
fn with_every_wqe_signaled_a_spread_request_waits_for_each_fragment() {
    // 8 fragments over 4 QPs, staged two per QP in one go: each WQE is its own run,
    // so each completion credits one fragment, and none is a stray.
    let f = Fabric::default();
    let cfg = Config {
        signaling: Signaling::Every,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 4);
    vqp.post_send(&write(9, 8 << 16)).unwrap();
    let signaled = f.signaled();
    assert_eq!((signaled.len(), f.sends.borrow().len()), (8, 8));
    // Each QP's chain is posted whole, so the last WQE is QP 103's second.
    for &i in &signaled[..7] {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.complete_send(signaled[7], WcStatus::SUCCESS);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs.len(), wcs[0].wr_id), (1, 9));
    assert_eq!((vqp.strays(), vqp.sends_in_flight()), (0, 0));
}
