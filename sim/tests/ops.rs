//! Every operation moves the right bytes and reports the right completion.

mod common;

use common::{drain_one_by_one, pair, pair_with, pattern, recv, wqe};
use vqp_core::{Opcode, PhysQp, RecvWqe, SendFlags, SendWqe, WcOpcode, WcStatus};
use vqp_sim::{Access, NicConfig, QpState, ReorderPolicy};

#[test]
fn rdma_write_copies_exactly_the_range_across_devices() {
    let mut p = pair_with(
        NicConfig {
            devices: 2,
            ..NicConfig::default()
        },
        1,
        64,
    );
    let data = pattern(100, 3);
    p.nic.write(p.mr_a.at(10), &data).unwrap();
    p.a.post_send(&[wqe(7, Opcode::RDMA_WRITE, &p.mr_a, 10, 100, &p.mr_b, 200)])
        .unwrap();
    assert_eq!(
        p.nic.read_vec(p.mr_b.at(200), 100).unwrap(),
        vec![0; 100],
        "posting only queues"
    );
    assert_eq!(p.nic.run(), 1);
    let b = p.nic.read_vec(p.mr_b.addr, 4096).unwrap();
    assert_eq!(&b[200..300], &data[..]);
    assert!(b[..200].iter().chain(&b[300..]).all(|&x| x == 0));
    let wcs = p.cq_a.drain();
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (
            wcs[0].wr_id,
            wcs[0].status,
            wcs[0].opcode,
            wcs[0].qp_num,
            wcs[0].byte_len
        ),
        (
            7,
            WcStatus::SUCCESS,
            WcOpcode::RDMA_WRITE,
            p.a.qp_num(),
            100
        )
    );
    assert!(
        p.cq_b.is_empty(),
        "a plain write completes nothing at the responder"
    );
}

#[test]
fn write_with_imm_copies_then_completes_the_head_receive() {
    let mut p = pair();
    let data = pattern(64, 9);
    p.nic.write(p.mr_a.addr, &data).unwrap();
    p.b.post_recv(&[recv(50, &p.mr_b, 0, 0), recv(51, &p.mr_b, 0, 0)])
        .unwrap();
    let w = SendWqe {
        imm_data: 0x1234_5678,
        ..wqe(
            1,
            Opcode::RDMA_WRITE_WITH_IMM,
            &p.mr_a,
            0,
            64,
            &p.mr_b,
            1000,
        )
    };
    p.a.post_send(&[w]).unwrap();
    p.nic.run();
    assert_eq!(p.nic.read_vec(p.mr_b.at(1000), 64).unwrap(), data);
    let rx = p.cq_b.drain();
    assert_eq!(rx.len(), 1);
    assert_eq!(
        (
            rx[0].wr_id,
            rx[0].status,
            rx[0].opcode,
            rx[0].qp_num,
            rx[0].byte_len,
            rx[0].imm_data
        ),
        (
            50,
            WcStatus::SUCCESS,
            WcOpcode::RECV_RDMA_WITH_IMM,
            p.b.qp_num(),
            64,
            Some(0x1234_5678)
        )
    );
    assert_eq!(p.b.recv_queued(), 1);
    let tx = p.cq_a.drain();
    assert_eq!(
        (tx[0].wr_id, tx[0].opcode, tx[0].imm_data),
        (1, WcOpcode::RDMA_WRITE, None)
    );
}

#[test]
fn rdma_read_copies_remote_into_local() {
    let mut p = pair();
    let data = pattern(300, 1);
    p.nic.write(p.mr_b.at(500), &data).unwrap();
    p.a.post_send(&[wqe(2, Opcode::RDMA_READ, &p.mr_a, 8, 300, &p.mr_b, 500)])
        .unwrap();
    p.nic.run();
    assert_eq!(p.nic.read_vec(p.mr_a.at(8), 300).unwrap(), data);
    let wc = p.cq_a.drain()[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::SUCCESS, WcOpcode::RDMA_READ, 300)
    );
}

#[test]
fn send_and_send_with_imm_fill_receives_in_order() {
    let mut p = pair();
    let (d1, d2) = (pattern(50, 4), pattern(128, 5));
    p.nic.write(p.mr_a.addr, &d1).unwrap();
    p.nic.write(p.mr_a.at(1024), &d2).unwrap();
    p.b.post_recv(&[recv(10, &p.mr_b, 0, 128), recv(11, &p.mr_b, 2048, 128)])
        .unwrap();
    let s1 = wqe(1, Opcode::SEND, &p.mr_a, 0, 50, &p.mr_b, 0);
    let s2 = SendWqe {
        imm_data: 0xdead_beef,
        ..wqe(2, Opcode::SEND_WITH_IMM, &p.mr_a, 1024, 128, &p.mr_b, 0)
    };
    p.a.post_send(&[s1, s2]).unwrap();
    p.nic.run();
    assert_eq!(p.nic.read_vec(p.mr_b.addr, 50).unwrap(), d1);
    assert_eq!(
        p.nic.read_vec(p.mr_b.at(50), 1).unwrap(),
        [0],
        "nothing beyond the payload"
    );
    assert_eq!(p.nic.read_vec(p.mr_b.at(2048), 128).unwrap(), d2);
    let rx = p.cq_b.drain();
    assert_eq!(
        rx.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        [
            (10, WcStatus::SUCCESS, WcOpcode::RECV, 50, None),
            (
                11,
                WcStatus::SUCCESS,
                WcOpcode::RECV,
                128,
                Some(0xdead_beef)
            ),
        ]
    );
    let tx = p.cq_a.drain();
    assert!(tx
        .iter()
        .all(|w| w.opcode == WcOpcode::SEND && w.status.is_ok()));
}

#[test]
fn atomics_fetch_add_and_compare_swap() {
    let mut p = pair();
    p.nic.write_u64(p.mr_b.at(64), 40).unwrap();
    let faa = SendWqe {
        compare_add: 2,
        ..wqe(1, Opcode::ATOMIC_FETCH_AND_ADD, &p.mr_a, 0, 8, &p.mr_b, 64)
    };
    let cas_hit = SendWqe {
        compare_add: 42,
        swap: 7,
        ..wqe(2, Opcode::ATOMIC_CMP_AND_SWP, &p.mr_a, 8, 8, &p.mr_b, 64)
    };
    let cas_miss = SendWqe {
        compare_add: 1,
        swap: 9,
        ..wqe(3, Opcode::ATOMIC_CMP_AND_SWP, &p.mr_a, 16, 8, &p.mr_b, 64)
    };
    let wrap = SendWqe {
        compare_add: u64::MAX,
        ..wqe(4, Opcode::ATOMIC_FETCH_AND_ADD, &p.mr_a, 24, 8, &p.mr_b, 64)
    };
    p.a.post_send(&[faa, cas_hit, cas_miss, wrap]).unwrap();
    p.nic.run();
    let olds: Vec<u64> = (0..4)
        .map(|i| p.nic.read_u64(p.mr_a.at(8 * i)).unwrap())
        .collect();
    assert_eq!(olds, [40, 42, 7, 7]);
    assert_eq!(p.nic.read_u64(p.mr_b.at(64)).unwrap(), 6);
    let tx = p.cq_a.drain();
    assert_eq!(
        tx.iter()
            .map(|w| (w.opcode, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (WcOpcode::FETCH_ADD, 8),
            (WcOpcode::COMP_SWAP, 8),
            (WcOpcode::COMP_SWAP, 8),
            (WcOpcode::FETCH_ADD, 8)
        ]
    );
}

#[test]
fn zero_length_wqes_need_no_keys() {
    let mut p = pair();
    let no_sge = RecvWqe {
        wr_id: 21,
        ..RecvWqe::default()
    };
    p.b.post_recv(&[recv(20, &p.mr_b, 0, 0), no_sge]).unwrap();
    let zero = |wr_id, opcode| SendWqe {
        wr_id,
        opcode,
        flags: SendFlags::SIGNALED,
        ..SendWqe::default()
    };
    p.a.post_send(&[
        zero(1, Opcode::RDMA_WRITE),
        zero(2, Opcode::RDMA_WRITE_WITH_IMM),
        zero(3, Opcode::RDMA_READ),
        zero(4, Opcode::SEND),
    ])
    .unwrap();
    p.nic.run();
    let tx = p.cq_a.drain();
    assert_eq!(
        tx.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=4).map(|i| (i, WcStatus::SUCCESS)).collect::<Vec<_>>()
    );
    let rx = p.cq_b.drain();
    assert_eq!(
        rx.iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (20, WcOpcode::RECV_RDMA_WITH_IMM, 0),
            (21, WcOpcode::RECV, 0)
        ]
    );
    assert_eq!(p.a.state(), QpState::Rts);
}

#[test]
fn unsignaled_success_moves_data_without_a_completion() {
    let mut p = pair();
    p.nic.write(p.mr_a.addr, b"quiet").unwrap();
    let w = SendWqe {
        flags: SendFlags::NONE,
        ..wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 5, &p.mr_b, 0)
    };
    p.a.post_send(&[w]).unwrap();
    p.nic.run();
    assert_eq!(p.nic.read_vec(p.mr_b.addr, 5).unwrap(), b"quiet");
    assert!(p.cq_a.drain().is_empty());
    assert_eq!(p.nic.qp_stats(p.a.qp_num()).unwrap().executed, 1);
}

#[test]
fn one_buffer_registered_on_two_devices_and_loopback() {
    let nic = vqp_sim::Nic::new(NicConfig {
        devices: 2,
        ..NicConfig::default()
    });
    let buf = nic.alloc(256);
    let on0 = nic.register_buffer(0, buf, 256, Access::ALL).unwrap();
    let on1 = nic.register_buffer(1, buf, 256, Access::ALL).unwrap();
    assert_ne!(on0.lkey, on1.lkey);
    assert!(
        nic.register_buffer(0, buf + 1, 256, Access::ALL).is_err(),
        "beyond NIC memory"
    );
    let mut cq = nic.create_cq(1, 8).unwrap();
    let mut qp = nic.create_qp(1, &cq, &cq, common::CAPS).unwrap();
    nic.connect(&qp, &qp).unwrap();
    nic.write(buf, b"loop").unwrap();
    qp.post_send(&[wqe(1, Opcode::RDMA_WRITE, &on1, 0, 4, &on1, 100)])
        .unwrap();
    // device 0's keys are not valid on device 1
    qp.post_send(&[wqe(2, Opcode::RDMA_WRITE, &on0, 0, 4, &on1, 200)])
        .unwrap();
    nic.run();
    assert_eq!(nic.read_vec(buf + 100, 4).unwrap(), b"loop");
    let wcs = drain_one_by_one(&mut cq);
    assert_eq!(
        common::ids_status(&wcs),
        [(1, WcStatus::SUCCESS), (2, WcStatus::LOC_PROT_ERR)]
    );
}

#[test]
fn caller_memory_registered_unsafely() {
    let mut p = pair();
    let mut mine = vec![0u8; 32];
    let ptr = mine.as_mut_ptr();
    // SAFETY: `mine` outlives the registration (deregistered below) and is not touched
    // through a reference until then.
    let mr = unsafe { p.nic.register(0, ptr, 32, Access::ALL) }.unwrap();
    p.nic.write(p.mr_b.addr, &pattern(32, 8)).unwrap();
    p.a.post_send(&[wqe(1, Opcode::RDMA_READ, &mr, 0, 32, &p.mr_b, 0)])
        .unwrap();
    p.nic.run();
    p.nic.deregister(&mr).unwrap();
    assert_eq!(mine, pattern(32, 8));
    assert_eq!(p.cq_a.drain()[0].status, WcStatus::SUCCESS);
}

#[test]
fn same_seed_same_history() {
    let history = |seed| {
        let mut p = pair_with(
            NicConfig {
                seed,
                policy: ReorderPolicy::Random,
                ..NicConfig::default()
            },
            0,
            64,
        );
        let mut c = p.nic.create_qp(0, &p.cq_a, &p.cq_a, common::CAPS).unwrap();
        let d = p.nic.create_qp(0, &p.cq_b, &p.cq_b, common::CAPS).unwrap();
        p.nic.connect(&c, &d).unwrap();
        for i in 0..8 {
            p.a.post_send(&[wqe(i, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)])
                .unwrap();
            c.post_send(&[wqe(100 + i, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)])
                .unwrap();
        }
        p.nic.run();
        (p.cq_a.drain(), p.nic.stats())
    };
    assert_eq!(history(11), history(11));
    assert_ne!(
        history(11).0,
        history(12).0,
        "seeds differ in cross-QP order"
    );
}
