//! Error paths: each reported with the status real RC hardware uses, and flushes.

mod common;

use common::{ids_status, pair, pair_with, recv, wqe, Pair};
use vqp_core::{Opcode, PhysQp, PostFailure, SendFlags, SendWqe, WcOpcode, WcStatus};
use vqp_sim::{Access, NicConfig, QpState};

/// Posts `w` then a signaled WRITE (wr_id 99) behind it; runs; returns a's completions.
fn fail_then_flush(p: &mut Pair, w: SendWqe) -> Vec<(u64, WcStatus)> {
    let after = wqe(99, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0);
    p.a.post_send(&[w, after]).unwrap();
    p.nic.run();
    ids_status(&p.cq_a.drain())
}

fn expect_local(w: impl FnOnce(&Pair) -> SendWqe, status: WcStatus) {
    let mut p = pair();
    p.b.post_recv(&[recv(500, &p.mr_b, 0, 64)]).unwrap();
    let w = w(&p);
    assert_eq!(
        fail_then_flush(&mut p, w),
        [(1, status), (99, WcStatus::WR_FLUSH_ERR)]
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.b.state(), QpState::Rts, "a local error stays local");
    assert_eq!(p.b.recv_queued(), 1);
    assert!(p.cq_b.is_empty());
}

fn expect_remote(w: impl FnOnce(&Pair) -> SendWqe, status: WcStatus) {
    let mut p = pair();
    p.b.post_recv(&[recv(500, &p.mr_b, 0, 64)]).unwrap();
    let w = w(&p);
    assert_eq!(
        fail_then_flush(&mut p, w),
        [(1, status), (99, WcStatus::WR_FLUSH_ERR)]
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(
        p.b.state(),
        QpState::Error,
        "a remote error breaks both ends"
    );
    assert_eq!(ids_status(&p.cq_b.drain()), [(500, WcStatus::WR_FLUSH_ERR)]);
}

#[test]
fn bad_lkey_bounds_or_local_access_is_a_local_protection_error() {
    expect_local(
        |p| SendWqe {
            lkey: 0xbad,
            ..wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
        },
        WcStatus::LOC_PROT_ERR,
    );
    expect_local(
        |p| wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 4090, 8, &p.mr_b, 0),
        WcStatus::LOC_PROT_ERR,
    );
    expect_local(
        |p| SendWqe {
            lkey: p.mr_a.rkey,
            ..wqe(1, Opcode::SEND, &p.mr_a, 0, 8, &p.mr_b, 0)
        },
        WcStatus::LOC_PROT_ERR,
    );
    // READ results need local write access.
    expect_local(
        |p| {
            let ro = p.nic.alloc_mr(0, 64, Access::REMOTE_READ).unwrap();
            wqe(1, Opcode::RDMA_READ, &ro, 0, 8, &p.mr_b, 0)
        },
        WcStatus::LOC_PROT_ERR,
    );
    expect_local(
        |p| wqe(1, Opcode::ATOMIC_FETCH_AND_ADD, &p.mr_a, 0, 4, &p.mr_b, 0),
        WcStatus::LOC_LEN_ERR,
    );
}

#[test]
fn wrong_device_lkey_is_a_local_protection_error() {
    let mut p = pair_with(
        NicConfig {
            devices: 2,
            ..NicConfig::default()
        },
        1,
        64,
    );
    let w = SendWqe {
        lkey: p.mr_b.lkey,
        addr: p.mr_b.addr,
        ..wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
    };
    assert_eq!(
        fail_then_flush(&mut p, w),
        [(1, WcStatus::LOC_PROT_ERR), (99, WcStatus::WR_FLUSH_ERR)]
    );
}

#[test]
fn bad_rkey_bounds_or_remote_access_is_a_remote_access_error() {
    expect_remote(
        |p| SendWqe {
            rkey: 0xbad,
            ..wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
        },
        WcStatus::REM_ACCESS_ERR,
    );
    expect_remote(
        |p| SendWqe {
            rkey: p.mr_b.lkey,
            ..wqe(1, Opcode::RDMA_READ, &p.mr_a, 0, 8, &p.mr_b, 0)
        },
        WcStatus::REM_ACCESS_ERR,
    );
    expect_remote(
        |p| wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 16, &p.mr_b, 4088),
        WcStatus::REM_ACCESS_ERR,
    );
    expect_remote(
        |p| wqe(1, Opcode::RDMA_READ, &p.mr_a, 0, 8, &p.mr_b, u64::MAX - 4),
        WcStatus::REM_ACCESS_ERR,
    );
    for (opcode, right) in [
        (Opcode::RDMA_WRITE, Access::REMOTE_WRITE),
        (Opcode::RDMA_WRITE_WITH_IMM, Access::REMOTE_WRITE),
        (Opcode::RDMA_READ, Access::REMOTE_READ),
        (Opcode::ATOMIC_FETCH_AND_ADD, Access::REMOTE_ATOMIC),
        (Opcode::ATOMIC_CMP_AND_SWP, Access::REMOTE_ATOMIC),
    ] {
        expect_remote(
            |p| {
                let lacking = Access(Access::ALL.0 & !right.0);
                let target = p.nic.alloc_mr(0, 64, lacking).unwrap();
                wqe(1, opcode, &p.mr_a, 0, 8, &target, 0)
            },
            WcStatus::REM_ACCESS_ERR,
        );
    }
    expect_remote(
        |p| wqe(1, Opcode::ATOMIC_CMP_AND_SWP, &p.mr_a, 0, 8, &p.mr_b, 4),
        WcStatus::REM_INV_REQ_ERR,
    );
}

#[test]
fn send_longer_than_the_receive_fails_both_ends() {
    let mut p = pair();
    p.b.post_recv(&[recv(500, &p.mr_b, 0, 16), recv(501, &p.mr_b, 0, 64)])
        .unwrap();
    let w = wqe(1, Opcode::SEND, &p.mr_a, 0, 17, &p.mr_b, 0);
    assert_eq!(
        fail_then_flush(&mut p, w),
        [(1, WcStatus::REM_INV_REQ_ERR), (99, WcStatus::WR_FLUSH_ERR)]
    );
    assert_eq!(
        ids_status(&p.cq_b.drain()),
        [(500, WcStatus::LOC_LEN_ERR), (501, WcStatus::WR_FLUSH_ERR)]
    );
    assert_eq!((p.a.state(), p.b.state()), (QpState::Error, QpState::Error));
    assert_eq!(
        p.nic.read_vec(p.mr_b.addr, 16).unwrap(),
        [0; 16],
        "nothing written"
    );
}

#[test]
fn bad_receive_buffer_is_a_remote_operation_error() {
    let mut p = pair();
    let ro = p.nic.alloc_mr(0, 64, Access::NONE).unwrap();
    p.b.post_recv(&[recv(500, &ro, 0, 64)]).unwrap();
    let w = wqe(1, Opcode::SEND, &p.mr_a, 0, 8, &p.mr_b, 0);
    assert_eq!(
        fail_then_flush(&mut p, w),
        [(1, WcStatus::REM_OP_ERR), (99, WcStatus::WR_FLUSH_ERR)]
    );
    assert_eq!(ids_status(&p.cq_b.drain()), [(500, WcStatus::LOC_PROT_ERR)]);
}

#[test]
fn unsignaled_errors_complete_and_error_completions_are_zeroed() {
    let mut p = pair();
    let w = SendWqe {
        flags: SendFlags::NONE,
        rkey: 0xbad,
        ..wqe(1, Opcode::RDMA_READ, &p.mr_a, 0, 8, &p.mr_b, 0)
    };
    p.a.post_send(&[w]).unwrap();
    p.nic.run();
    let wc = p.cq_a.drain()[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data),
        (1, WcStatus::REM_ACCESS_ERR, WcOpcode::SEND, 0, None)
    );
}

#[test]
fn deregistered_region_fails_wqes_already_posted() {
    let mut p = pair();
    p.a.post_send(&[wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)])
        .unwrap();
    p.nic.deregister(&p.mr_a).unwrap();
    assert!(p.nic.deregister(&p.mr_a).is_err());
    p.nic.run();
    assert_eq!(ids_status(&p.cq_a.drain()), [(1, WcStatus::LOC_PROT_ERR)]);
}

#[test]
fn posting_to_a_qp_in_error_is_accepted_and_flushed() {
    let mut p = pair();
    p.nic.fail_qp(p.a.qp_num()).unwrap();
    assert_eq!(p.a.state(), QpState::Error);
    p.a.post_send(&[wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)])
        .unwrap();
    p.a.post_recv(&[recv(2, &p.mr_a, 0, 8)]).unwrap();
    assert_eq!(p.nic.run(), 2);
    assert_eq!(
        ids_status(&p.cq_a.drain()),
        [(1, WcStatus::WR_FLUSH_ERR), (2, WcStatus::WR_FLUSH_ERR)]
    );
    assert_eq!(p.nic.read_vec(p.mr_b.addr, 8).unwrap(), [0; 8]);
}

#[test]
fn sending_to_a_peer_in_error_times_out() {
    let mut p = pair();
    p.nic.fail_qp(p.b.qp_num()).unwrap();
    p.a.post_send(&[wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)])
        .unwrap();
    p.nic.run();
    assert_eq!(ids_status(&p.cq_a.drain()), [(1, WcStatus::RETRY_EXC_ERR)]);
    assert_eq!(p.a.state(), QpState::Error);
}

fn flush_unsignaled(flush: bool) -> Vec<(u64, WcStatus)> {
    let mut p = pair_with(
        NicConfig {
            flush_unsignaled: flush,
            ..NicConfig::default()
        },
        0,
        64,
    );
    let bad = SendWqe {
        rkey: 0xbad,
        ..wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
    };
    let quiet = SendWqe {
        flags: SendFlags::NONE,
        ..wqe(2, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
    };
    let loud = wqe(3, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0);
    p.a.post_send(&[bad, quiet, loud]).unwrap();
    p.nic.run();
    assert_eq!(p.nic.qp_stats(p.a.qp_num()).unwrap().flushed, 2);
    ids_status(&p.cq_a.drain())
}

#[test]
fn unsignaled_flushes_follow_the_config() {
    use WcStatus as S;
    assert_eq!(
        flush_unsignaled(true),
        [
            (1, S::REM_ACCESS_ERR),
            (2, S::WR_FLUSH_ERR),
            (3, S::WR_FLUSH_ERR)
        ]
    );
    assert_eq!(
        flush_unsignaled(false),
        [(1, S::REM_ACCESS_ERR), (3, S::WR_FLUSH_ERR)]
    );
}

#[test]
fn refused_posts_say_how_many_were_accepted() {
    let p = pair();
    let nic = &p.nic;
    let cq = nic.create_cq(0, 8).unwrap();
    let mut lone = nic.create_qp(0, &cq, &cq, common::CAPS).unwrap();
    let w = wqe(1, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0);
    assert_eq!(
        lone.post_send(&[w]),
        Err(PostFailure {
            posted: 0,
            errno: 22
        }),
        "not connected"
    );
    assert_eq!(
        lone.post_recv(&[recv(1, &p.mr_a, 0, 8)]),
        Ok(()),
        "receives before connecting"
    );
    let mut a = p.a;
    let odd = SendWqe {
        opcode: Opcode(42),
        ..w
    };
    assert_eq!(
        a.post_send(&[w, w, odd, w]),
        Err(PostFailure {
            posted: 2,
            errno: 22
        })
    );
    assert_eq!(a.send_queued(), 2);
}

#[test]
fn control_api_misuse_is_an_error_not_a_panic() {
    let p = pair_with(
        NicConfig {
            devices: 2,
            ..NicConfig::default()
        },
        1,
        64,
    );
    assert!(p.nic.create_cq(2, 8).is_err());
    assert!(p.nic.create_cq(0, 0).is_err());
    assert!(
        p.nic.create_qp(0, &p.cq_b, &p.cq_b, common::CAPS).is_err(),
        "CQ of another device"
    );
    assert!(p.nic.connect(&p.a, &p.b).is_err(), "already connected");
    assert!(
        p.nic.alloc_mr(0, 8, Access::REMOTE_WRITE).is_err(),
        "remote write needs local write"
    );
    assert!(p.nic.fail_qp_after(7, 1).is_err());
    assert!(p.nic.qp_stats(0x9999).is_err());
    assert!(p.nic.read_vec(0x10, 4).is_err());
}

#[test]
fn objects_of_another_nic_are_refused() {
    let p = pair();
    let q = pair_with(NicConfig::default(), 0, 8);
    let cq = q.nic.create_cq(0, 8).unwrap();
    let fresh = q.nic.create_qp(0, &cq, &cq, common::CAPS).unwrap();
    assert!(p.nic.create_qp(0, &cq, &cq, common::CAPS).is_err());
    let mine = p.nic.create_qp(0, &p.cq_a, &p.cq_a, common::CAPS).unwrap();
    assert!(p.nic.connect(&mine, &fresh).is_err());
}
