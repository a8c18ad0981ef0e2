//! Per-QP order always holds; cross-QP order is the policy's.

mod common;

use common::wqe;
use vqp_core::{Opcode, PhysWc, RecvWqe, SendWqe};
use vqp_sim::{Access, Nic, NicConfig, QpCaps, ReorderPolicy};

const QPS: u64 = 4;
const PER_QP: u64 = 8;

/// Four QP pairs sharing one send CQ and one receive CQ; each sender posts `PER_QP`
/// WRITE_WITH_IMMs round-robin (wr_id = qp << 32 | k); returns (send, recv) completions.
fn run(policy: ReorderPolicy, seed: u64) -> (Vec<PhysWc>, Vec<PhysWc>) {
    let nic = Nic::new(NicConfig {
        policy,
        seed,
        ..NicConfig::default()
    });
    let mut tx_cq = nic.create_cq(0, 64).unwrap();
    let mut rx_cq = nic.create_cq(0, 64).unwrap();
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
    };
    let mr = nic.alloc_mr(0, 1024, Access::ALL).unwrap();
    let mut senders = Vec::new();
    for i in 0..QPS {
        let s = nic.create_qp(0, &tx_cq, &tx_cq, caps).unwrap();
        let mut r = nic.create_qp(0, &rx_cq, &rx_cq, caps).unwrap();
        nic.connect(&s, &r).unwrap();
        let recvs: Vec<RecvWqe> = (0..PER_QP)
            .map(|k| RecvWqe {
                wr_id: i << 32 | k,
                ..RecvWqe::default()
            })
            .collect();
        r.post_recv(&recvs).unwrap();
        senders.push(s);
    }
    for k in 0..PER_QP {
        for (i, s) in senders.iter_mut().enumerate() {
            let w = SendWqe {
                imm_data: k as u32,
                ..wqe(
                    (i as u64) << 32 | k,
                    Opcode::RDMA_WRITE_WITH_IMM,
                    &mr,
                    0,
                    8,
                    &mr,
                    512,
                )
            };
            s.post_send(&[w]).unwrap();
        }
    }
    assert_eq!(nic.run(), QPS * PER_QP);
    (tx_cq.drain(), rx_cq.drain())
}

fn assert_per_qp_order(wcs: &[PhysWc]) {
    assert_eq!(wcs.len() as u64, QPS * PER_QP);
    let mut next = [0u64; QPS as usize];
    for w in wcs {
        assert!(w.status.is_ok());
        let (qp, k) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
        assert_eq!(k, next[qp], "QP {qp} out of order");
        next[qp] += 1;
        if let Some(imm) = w.imm_data {
            assert_eq!(u64::from(imm), k);
        }
    }
}

fn ids(wcs: &[PhysWc]) -> Vec<u64> {
    wcs.iter().map(|w| w.wr_id).collect()
}

#[test]
fn fifo_runs_in_posting_order() {
    let (tx, rx) = run(ReorderPolicy::Fifo, 0);
    let posted: Vec<u64> = (0..PER_QP)
        .flat_map(|k| (0..QPS).map(move |i| i << 32 | k))
        .collect();
    assert_eq!(ids(&tx), posted);
    assert_eq!(ids(&rx), posted);
}

#[test]
fn random_keeps_per_qp_order_and_reorders_across_qps() {
    let fifo = ids(&run(ReorderPolicy::Fifo, 0).0);
    let mut differs = 0;
    for seed in 0..20 {
        let (tx, rx) = run(ReorderPolicy::Random, seed);
        assert_per_qp_order(&tx);
        assert_per_qp_order(&rx);
        differs += usize::from(ids(&tx) != fifo);
    }
    assert!(differs > 0, "no seed reordered anything");
}

#[test]
fn adversarial_reverses_cross_qp_order() {
    let (tx, rx) = run(ReorderPolicy::Adversarial, 0);
    assert_per_qp_order(&tx);
    assert_per_qp_order(&rx);
    // The newest head is always the last QP's until it drains, then the one before.
    let expected: Vec<u64> = (0..QPS)
        .rev()
        .flat_map(|i| (0..PER_QP).map(move |k| i << 32 | k))
        .collect();
    assert_eq!(ids(&tx), expected);
    assert_ne!(ids(&tx), ids(&run(ReorderPolicy::Fifo, 0).0));
}
