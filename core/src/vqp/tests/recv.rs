//! The DQPLB and SPRAY receivers: receives, arrivals and protocol errors.

use super::*;

#[test]
fn dqplb_receiver_completes_notification_receives_in_order() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    vqp.arm_receiver();
    assert_eq!(f.recvs.borrow().len(), 8, "recv_depth on each data QP");
    assert!(f.recvs.borrow().iter().all(|(_, r)| r.len == 0));
    vqp.post_recv(&RecvWr::notification(10)).unwrap();
    // Message A = seq 0..=1, message B = seq 2; B's fragment arrives first.
    f.arrive(101, 2, true, 7);
    f.arrive(101, 1, true, 5);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.arrive(100, 0, false, 3);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 10);
    assert_eq!(wcs[0].byte_len, 8);
    assert_eq!(wcs[0].imm_data, None);
    assert_eq!(wcs[0].opcode, WcOpcode::RECV_RDMA_WITH_IMM);
    // Message B waited for a receive; it completes this one at once.
    vqp.post_recv(&RecvWr::notification(11)).unwrap();
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (11, 7));
    // Each consumed receive was replenished.
    assert_eq!(f.recvs.borrow().len(), 11);
    assert_eq!(
        vqp.post_recv(&RecvWr::data(12, 0, 8, 1)),
        Err(PostRecvError::DataNeedsSpray)
    );
}

#[test]
fn dqplb_protocol_errors_fail_waiting_receives() {
    for bad in [0x0100_0000u32, 60] {
        let f = Fabric::default();
        let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
        vqp.arm_receiver();
        vqp.post_recv(&RecvWr::notification(1)).unwrap();
        if bad == 60 {
            // A window of 128 seen from 0 ends at 127: 128 + 60 is outside.
            f.arrive(100, 128 + 60, true, 1);
        } else {
            let wr_id = f.recvs.borrow()[0].1.wr_id;
            f.push(PhysWc {
                wr_id,
                status: WcStatus::SUCCESS,
                opcode: WcOpcode::RECV_RDMA_WITH_IMM,
                qp_num: 100,
                byte_len: 1,
                imm_data: Some(bad.to_be()),
            });
        }
        let wcs = poll(&mut vcq, &mut vqp);
        assert_eq!(wcs.len(), 1);
        assert_eq!(wcs[0].status, WcStatus::PROTOCOL_ERR);
        assert_eq!(vqp.failure(), Some(WcStatus::PROTOCOL_ERR));
    }
}

#[test]
fn spray_receiver_posts_on_the_notify_qp_and_passes_the_immediate() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Spray, 2);
    for id in 0..6 {
        vqp.post_recv(&RecvWr::notification(id)).unwrap();
    }
    // recv_depth 4: two wait in the FIFO.
    assert_eq!(f.recvs.borrow().len(), 4);
    assert!(f.recvs.borrow().iter().all(|(q, _)| *q == 200));
    for i in 0..2 {
        let wr_id = f.recvs.borrow()[i].1.wr_id;
        f.push(PhysWc {
            wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV_RDMA_WITH_IMM,
            qp_num: 200,
            byte_len: 0,
            imm_data: Some(0x55 + i as u32),
        });
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 2);
    assert_eq!(wcs[1].imm_data, Some(0x56));
    assert_eq!(
        f.recvs.borrow().len(),
        6,
        "the waiting receives went as room freed"
    );
}

#[test]
fn a_dqplb_receiver_that_falls_behind_holds_the_sender_back() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    vqp.arm_receiver();
    assert_eq!(f.recvs.borrow().len(), 8);
    // 16 one-fragment messages arrive and no receive waits for them.
    for seq in 0..16 {
        f.arrive(100 + seq % 2, seq, true, 10);
        poll(&mut vcq, &mut vqp);
    }
    // 16 slots: 8 receives went back after the first 8 messages, then none.
    assert_eq!(f.recvs.borrow().len(), 16);
    assert_eq!(vqp.failure(), None);
    // Each receive the application posts takes a held message and frees a slot.
    vqp.post_recv(&RecvWr::notification(1)).unwrap();
    assert_eq!(f.recvs.borrow().len(), 17);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, 10));
}
