//! The no-op provider: round trip, shuffled order, receive injection, overflow.

use vqp_core::{Opcode, PhysCq, PhysWc, RecvWqe, SendFlags, SendWqe, WcOpcode, WcStatus};
use vqp_sim::noop::{NoopConfig, NoopCq, NoopError, NoopOrder, RecvMode};

fn send(wr_id: u64, signaled: bool) -> SendWqe {
    let flags = if signaled {
        SendFlags::SIGNALED
    } else {
        SendFlags::NONE
    };
    SendWqe {
        wr_id,
        opcode: Opcode::RDMA_WRITE,
        flags,
        len: 4096,
        ..SendWqe::default()
    }
}

fn poll_all(cq: &mut NoopCq, batch: usize) -> Vec<PhysWc> {
    let mut all = Vec::new();
    let mut buf = vec![PhysWc::EMPTY; batch];
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&buf[..n]);
    }
}

/// Three QPs post 10 WQEs each round-robin, every third unsignaled.
fn workload(order: NoopOrder) -> Vec<PhysWc> {
    let mut cq = NoopCq::new(NoopConfig {
        order,
        ..NoopConfig::default()
    });
    let mut qps: Vec<_> = (0..3).map(|i| cq.create_qp(0x10 + i)).collect();
    for k in 0..10 {
        for (i, qp) in qps.iter_mut().enumerate() {
            qp.post_send(&[send((i as u64) << 32 | k, k % 3 != 2)])
                .unwrap();
        }
    }
    assert_eq!(cq.queued(), 21);
    poll_all(&mut cq, 4)
}

#[test]
fn fifo_round_trip_returns_signaled_wqes_in_posting_order() {
    let wcs = workload(NoopOrder::Fifo);
    let expected: Vec<u64> = (0..10)
        .filter(|k| k % 3 != 2)
        .flat_map(|k| (0..3).map(move |i| i << 32 | k))
        .collect();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), expected);
    for w in &wcs {
        assert_eq!(
            (w.status, w.opcode, w.byte_len, w.imm_data),
            (WcStatus::SUCCESS, WcOpcode::RDMA_WRITE, 4096, None)
        );
        assert_eq!(w.qp_num, 0x10 + (w.wr_id >> 32) as u32);
    }
}

#[test]
fn shuffled_keeps_per_qp_order_and_is_deterministic() {
    let fifo = workload(NoopOrder::Fifo);
    let mut differs = 0;
    for seed in 0..10 {
        let wcs = workload(NoopOrder::Shuffled { seed });
        assert_eq!(wcs, workload(NoopOrder::Shuffled { seed }));
        assert_eq!(wcs.len(), fifo.len());
        for qp in 0..3u64 {
            let mine: Vec<u64> = wcs
                .iter()
                .filter(|w| w.wr_id >> 32 == qp)
                .map(|w| w.wr_id)
                .collect();
            let want: Vec<u64> = fifo
                .iter()
                .filter(|w| w.wr_id >> 32 == qp)
                .map(|w| w.wr_id)
                .collect();
            assert_eq!(mine, want, "QP {qp} reordered (seed {seed})");
        }
        differs += usize::from(wcs != fifo);
    }
    assert!(differs > 0);
}

#[test]
fn shuffled_may_start_with_any_qp_and_skips_empty_ones() {
    // Five QPs, the middle one idle: over seeds, each busy QP comes first at least
    // once, and the idle one never shows up.
    let mut first = [0; 5];
    for seed in 0..64 {
        let mut cq = NoopCq::new(NoopConfig {
            order: NoopOrder::Shuffled { seed },
            ..NoopConfig::default()
        });
        let mut qps: Vec<_> = (0..5).map(|i| cq.create_qp(0x20 + i)).collect();
        for (i, qp) in qps.iter_mut().enumerate().filter(|(i, _)| *i != 2) {
            qp.post_send(&[send(i as u64, true), send(i as u64, true)])
                .unwrap();
        }
        let wcs = poll_all(&mut cq, 3);
        assert_eq!(wcs.len(), 8);
        assert!(wcs.iter().all(|w| w.qp_num != 0x22));
        first[(wcs[0].qp_num - 0x20) as usize] += 1;
    }
    assert_eq!(first[2], 0);
    assert!(
        first.iter().enumerate().all(|(i, &n)| i == 2 || n > 0),
        "{first:?}"
    );
}

#[test]
#[should_panic(expected = "at most 64 QPs")]
fn shuffled_cq_refuses_a_65th_qp() {
    let cq = NoopCq::new(NoopConfig {
        order: NoopOrder::Shuffled { seed: 0 },
        ..NoopConfig::default()
    });
    for i in 0..65 {
        let _ = cq.create_qp(i);
    }
}

#[test]
fn receives_complete_at_once_by_default() {
    let mut cq = NoopCq::new(NoopConfig::default());
    let mut qp = cq.create_qp(5);
    qp.post_recv(&[RecvWqe {
        wr_id: 9,
        ..RecvWqe::default()
    }])
    .unwrap();
    let wcs = poll_all(&mut cq, 8);
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].opcode, wcs[0].qp_num),
        (9, WcOpcode::RECV, 5)
    );
}

#[test]
fn held_receives_are_consumed_by_delivered_immediates() {
    let mut cq = NoopCq::new(NoopConfig {
        recv_mode: RecvMode::Hold,
        order: NoopOrder::Shuffled { seed: 1 },
        ..NoopConfig::default()
    });
    let mut qp = cq.create_qp(5);
    let ctl = cq.control();
    let recvs: Vec<RecvWqe> = (0..3)
        .map(|i| RecvWqe {
            wr_id: 100 + i,
            ..RecvWqe::default()
        })
        .collect();
    qp.post_recv(&recvs).unwrap();
    assert_eq!(ctl.held_recvs(5), Ok(3));
    assert_eq!(poll_all(&mut cq, 8), [], "held, not completed");
    assert_eq!(ctl.deliver_imm(5, 0x0100_0000, 65536), Ok(100));
    assert_eq!(ctl.deliver_imm(5, 0x0200_0080, 0), Ok(101));
    assert_eq!(ctl.deliver_imm(6, 0, 0), Err(NoopError::UnknownQp(6)));
    let wcs = poll_all(&mut cq, 1);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        [
            (100, WcOpcode::RECV_RDMA_WITH_IMM, 65536, Some(0x0100_0000)),
            (101, WcOpcode::RECV_RDMA_WITH_IMM, 0, Some(0x0200_0080)),
        ]
    );
    assert_eq!(ctl.deliver_imm(5, 0, 0), Ok(102));
    assert_eq!(ctl.deliver_imm(5, 0, 0), Err(NoopError::NoReceive));
}

#[test]
fn injected_completions_come_back_verbatim() {
    let mut cq = NoopCq::new(NoopConfig::default());
    let _qp = cq.create_qp(5);
    let wc = PhysWc {
        wr_id: 77,
        status: WcStatus::WR_FLUSH_ERR,
        opcode: WcOpcode(0),
        qp_num: 5,
        byte_len: 0,
        imm_data: None,
    };
    cq.control().inject(wc).unwrap();
    assert_eq!(
        cq.control().inject(PhysWc { qp_num: 9, ..wc }),
        Err(NoopError::UnknownQp(9))
    );
    assert_eq!(poll_all(&mut cq, 2), [wc]);
}

#[test]
fn overflow_is_counted_not_reallocated() {
    for order in [NoopOrder::Fifo, NoopOrder::Shuffled { seed: 3 }] {
        let mut cq = NoopCq::new(NoopConfig {
            capacity: 4,
            recv_capacity: 1,
            recv_mode: RecvMode::Hold,
            order,
        });
        let mut qp = cq.create_qp(1);
        let mut other = cq.create_qp(2);
        qp.post_send(&[send(0, true), send(1, true), send(2, true)])
            .unwrap();
        other
            .post_send(&[send(3, true), send(4, true), send(5, false), send(6, true)])
            .unwrap();
        assert_eq!(cq.overflows(), 2);
        qp.post_recv(&[RecvWqe::default(), RecvWqe::default()])
            .unwrap();
        assert_eq!(cq.overflows(), 3, "held receive ring full");
        assert_eq!(cq.control().deliver_imm(1, 0, 0), Err(NoopError::Full));
        assert_eq!(poll_all(&mut cq, 3).len(), 4);
        other.post_send(&[send(7, true)]).unwrap();
        assert_eq!(poll_all(&mut cq, 3).len(), 1);
    }
}
