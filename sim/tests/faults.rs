//! Injected faults, CQ overflow, and RNR.

mod common;

use std::collections::BTreeMap;

use common::{ids_status, pair, pair_with, recv, wqe};
use vqp_core::{Opcode, PhysQp, SendFlags, SendWqe, WcStatus};
use vqp_sim::{NicConfig, QpState, ReorderPolicy};

#[test]
fn fail_qp_after_flushes_every_outstanding_wqe_exactly_once() {
    for policy in [
        ReorderPolicy::Fifo,
        ReorderPolicy::Random,
        ReorderPolicy::Adversarial,
    ] {
        let mut p = pair_with(
            NicConfig {
                policy,
                seed: 5,
                ..NicConfig::default()
            },
            0,
            64,
        );
        // A second, healthy pair sharing the NIC must be unaffected.
        let cq2 = p.nic.create_cq(0, 64).unwrap();
        let mut c = p.nic.create_qp(0, &cq2, &cq2, common::CAPS).unwrap();
        let d = p.nic.create_qp(0, &cq2, &cq2, common::CAPS).unwrap();
        p.nic.connect(&c, &d).unwrap();

        p.a.post_recv(&[recv(1000, &p.mr_a, 0, 8), recv(1001, &p.mr_a, 0, 8)])
            .unwrap();
        let ws: Vec<SendWqe> = (0..12)
            .map(|i| {
                let flags = if i % 3 == 2 {
                    SendFlags::NONE
                } else {
                    SendFlags::SIGNALED
                };
                SendWqe {
                    flags,
                    ..wqe(i, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
                }
            })
            .collect();
        p.a.post_send(&ws).unwrap();
        c.post_send(&ws[..4]).unwrap();
        p.nic.fail_qp_after(p.a.qp_num(), 4).unwrap();
        p.nic.run();

        let mut seen = BTreeMap::new();
        for (id, st) in ids_status(&p.cq_a.drain()) {
            assert!(seen.insert(id, st).is_none(), "wr_id {id} reported twice");
        }
        // 0, 1 signaled successes; 2 unsignaled success; 3 success; 4 is the fifth: fails.
        let mut expected = BTreeMap::from([
            (0, WcStatus::SUCCESS),
            (1, WcStatus::SUCCESS),
            (3, WcStatus::SUCCESS),
        ]);
        expected.insert(4, WcStatus::RETRY_EXC_ERR);
        for id in (5..12).chain([1000, 1001]) {
            expected.insert(id, WcStatus::WR_FLUSH_ERR);
        }
        assert_eq!(seen, expected, "{policy:?}");
        let st = p.nic.qp_stats(p.a.qp_num()).unwrap();
        assert_eq!((st.executed, st.flushed), (5, 9));
        assert_eq!(p.a.state(), QpState::Error);
        assert_eq!(p.b.state(), QpState::Rts, "the peer is not told");
        assert_eq!(c.state(), QpState::Rts);
        let mut cq2 = cq2;
        assert!(cq2.drain().iter().all(|w| w.status.is_ok()));
        assert!(p.nic.is_idle());
    }
}

#[test]
fn fail_qp_after_zero_fails_the_next_wqe() {
    let mut p = pair();
    p.nic.fail_qp_after(p.a.qp_num(), 0).unwrap();
    let w = SendWqe {
        flags: SendFlags::NONE,
        ..wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
    };
    p.a.post_send(&[w]).unwrap();
    p.nic.run();
    assert_eq!(ids_status(&p.cq_a.drain()), [(1, WcStatus::RETRY_EXC_ERR)]);
}

#[test]
fn link_down_fails_every_qp_of_the_device() {
    let mut p = pair_with(
        NicConfig {
            devices: 2,
            ..NicConfig::default()
        },
        1,
        64,
    );
    p.b.post_recv(&[recv(500, &p.mr_b, 0, 8)]).unwrap();
    p.nic.set_link_down(1).unwrap();
    assert!(!p.nic.link_up(1).unwrap() && p.nic.link_up(0).unwrap());
    assert_eq!((p.a.state(), p.b.state()), (QpState::Rts, QpState::Error));
    p.a.post_send(&[wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)])
        .unwrap();
    p.nic.run();
    assert_eq!(ids_status(&p.cq_b.drain()), [(500, WcStatus::WR_FLUSH_ERR)]);
    assert_eq!(ids_status(&p.cq_a.drain()), [(1, WcStatus::RETRY_EXC_ERR)]);
    let late = p.nic.create_qp(1, &p.cq_b, &p.cq_b, common::CAPS).unwrap();
    assert_eq!(late.state(), QpState::Error);
}

#[test]
fn cq_overflow_is_recorded_and_fails_the_qp() {
    let mut p = pair_with(NicConfig::default(), 0, 4);
    let ws: Vec<SendWqe> = (0..6)
        .map(|i| wqe(i, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0))
        .collect();
    p.a.post_send(&ws).unwrap();
    p.nic.run();
    assert!(p.cq_a.overflowed());
    // The fifth completion overflows (QP to error), the sixth is a flush that overflows too.
    assert_eq!(p.cq_a.overflows(), 2);
    assert_eq!(p.nic.stats().overflows, 2);
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.cq_a.len(), 4);
    assert!(ids_status(&p.cq_a.drain()).iter().all(|&(_, s)| s.is_ok()));
    assert!(!p.cq_b.overflowed());
}

#[test]
fn rnr_waits_until_a_receive_is_posted() {
    for opcode in [Opcode::RDMA_WRITE_WITH_IMM, Opcode::SEND] {
        let mut p = pair();
        let w = wqe(1, opcode, &p.mr_a, 0, 8, &p.mr_b, 0);
        let behind = wqe(2, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 64);
        p.a.post_send(&[w, behind]).unwrap();
        assert_eq!(
            p.nic.run(),
            0,
            "the head waits, and so does what is behind it"
        );
        assert!(p.nic.is_idle());
        assert_eq!((p.a.state(), p.a.send_queued()), (QpState::Rts, 2));
        assert!(p.cq_a.is_empty());
        p.b.post_recv(&[recv(500, &p.mr_b, 0, 8)]).unwrap();
        assert_eq!(p.nic.run(), 2);
        assert_eq!(
            ids_status(&p.cq_a.drain()),
            [(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)]
        );
        assert_eq!(ids_status(&p.cq_b.drain()), [(500, WcStatus::SUCCESS)]);
    }
}

#[test]
fn finite_rnr_retry_ends_in_rnr_retry_exceeded() {
    let mut p = pair_with(
        NicConfig {
            rnr_retry: 3,
            ..NicConfig::default()
        },
        0,
        64,
    );
    let behind = wqe(2, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 64);
    p.a.post_send(&[wqe(1, Opcode::SEND, &p.mr_a, 0, 8, &p.mr_b, 0), behind])
        .unwrap();
    p.nic.run();
    assert_eq!(
        ids_status(&p.cq_a.drain()),
        [
            (1, WcStatus::RNR_RETRY_EXC_ERR),
            (2, WcStatus::WR_FLUSH_ERR)
        ]
    );
    assert_eq!(
        p.nic.qp_stats(p.a.qp_num()).unwrap().rnr_naks,
        4,
        "first try plus three retries"
    );
    assert_eq!((p.a.state(), p.b.state()), (QpState::Error, QpState::Rts));
}

#[test]
fn finite_rnr_retry_succeeds_when_the_receive_comes_in_time() {
    let mut p = pair_with(
        NicConfig {
            rnr_retry: 3,
            ..NicConfig::default()
        },
        0,
        64,
    );
    p.a.post_send(&[wqe(
        1,
        Opcode::RDMA_WRITE_WITH_IMM,
        &p.mr_a,
        0,
        8,
        &p.mr_b,
        0,
    )])
    .unwrap();
    assert_eq!(p.nic.run_for(3), 3);
    p.b.post_recv(&[recv(500, &p.mr_b, 0, 0)]).unwrap();
    p.nic.run();
    assert_eq!(ids_status(&p.cq_a.drain()), [(1, WcStatus::SUCCESS)]);
    assert_eq!(p.nic.stats().rnr_naks, 3);
}

#[test]
fn rnr_counter_restarts_for_each_wqe() {
    let mut p = pair_with(
        NicConfig {
            rnr_retry: 1,
            ..NicConfig::default()
        },
        0,
        64,
    );
    let ws: Vec<SendWqe> = (0..2)
        .map(|i| wqe(i, Opcode::SEND, &p.mr_a, 0, 8, &p.mr_b, 0))
        .collect();
    p.a.post_send(&ws).unwrap();
    for id in 0..2 {
        assert_eq!(p.nic.run_for(1), 1, "one NAK for wr_id {id}");
        p.b.post_recv(&[recv(500 + id, &p.mr_b, 0, 8)]).unwrap();
        assert_eq!(p.nic.run_for(1), 1);
    }
    assert_eq!(
        ids_status(&p.cq_a.drain()),
        [(0, WcStatus::SUCCESS), (1, WcStatus::SUCCESS)]
    );
}

#[test]
fn a_lost_acknowledgement_fails_the_requester_after_the_responder_took_the_wqe() {
    let mut p = pair_with(NicConfig::default(), 0, 64);
    p.nic.write(p.mr_a.at(0), &[7u8; 16]).unwrap();
    p.b.post_recv(&[recv(500, &p.mr_b, 0, 0), recv(501, &p.mr_b, 0, 0)])
        .unwrap();
    let ws: Vec<SendWqe> = (0..3)
        .map(|i| SendWqe {
            imm_data: 40 + i as u32,
            ..wqe(i, Opcode::RDMA_WRITE_WITH_IMM, &p.mr_a, 0, 16, &p.mr_b, 0)
        })
        .collect();
    p.a.post_send(&ws).unwrap();
    p.nic.lose_ack_after(p.a.qp_num(), 1).unwrap();
    p.nic.run();
    // The second write landed and consumed a receive; its requester says it failed,
    // and the third is flushed.
    assert_eq!(
        ids_status(&p.cq_a.drain()),
        [
            (0, WcStatus::SUCCESS),
            (1, WcStatus::RETRY_EXC_ERR),
            (2, WcStatus::WR_FLUSH_ERR)
        ]
    );
    let at_b = p.cq_b.drain();
    assert_eq!(
        ids_status(&at_b),
        [(500, WcStatus::SUCCESS), (501, WcStatus::SUCCESS)]
    );
    assert_eq!(at_b[1].imm_data, Some(41));
    assert_eq!(p.nic.read_vec(p.mr_b.at(0), 16).unwrap(), [7u8; 16]);
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.b.state(), QpState::Rts, "the peer is not told");
}
