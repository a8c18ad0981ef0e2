//! Queue capacity: verbs' `bad_wr` prefix semantics, and slots freed by polling.

mod common;

use common::{pair, recv, wqe};
use vqp_core::{Opcode, PhysCq, PhysWc, PostFailure, SendFlags, SendWqe};

const ENOMEM: i32 = 12;

#[test]
fn post_beyond_capacity_accepts_the_prefix() {
    let mut p = pair();
    let ws: Vec<SendWqe> = (0..20)
        .map(|i| wqe(i, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0))
        .collect();
    assert_eq!(p.a.post_send(&ws[..10]), Ok(()));
    assert_eq!(
        p.a.post_send(&ws[10..]),
        Err(PostFailure {
            posted: 6,
            errno: ENOMEM
        })
    );
    assert_eq!(p.a.send_queued(), 16);
    let rs: Vec<_> = (0..17).map(|i| recv(i, &p.mr_b, 0, 8)).collect();
    assert_eq!(
        p.b.post_recv(&rs),
        Err(PostFailure {
            posted: 16,
            errno: ENOMEM
        })
    );
}

#[test]
fn slots_are_freed_when_completions_are_polled() {
    let mut p = pair();
    let ws: Vec<SendWqe> = (0..16)
        .map(|i| wqe(i, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0))
        .collect();
    p.a.post_send(&ws).unwrap();
    p.nic.run();
    assert_eq!(p.a.send_slots_held(), 16, "executed but not polled");
    assert_eq!(p.a.post_send(&ws[..1]).unwrap_err().posted, 0);
    let mut three = [PhysWc::EMPTY; 3];
    assert_eq!(p.cq_a.poll(&mut three), Ok(3));
    assert_eq!(p.a.send_slots_held(), 13);
    assert_eq!(
        p.a.post_send(&ws[..4]),
        Err(PostFailure {
            posted: 3,
            errno: ENOMEM
        })
    );
}

#[test]
fn unsignaled_wqes_hold_slots_until_a_later_completion_is_polled() {
    let mut p = pair();
    let quiet = SendWqe {
        flags: SendFlags::NONE,
        ..wqe(0, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0)
    };
    let mut ws = vec![quiet; 15];
    ws.push(wqe(15, Opcode::RDMA_WRITE, &p.mr_a, 0, 8, &p.mr_b, 0));
    p.a.post_send(&ws).unwrap();
    p.nic.run();
    assert_eq!(p.a.send_slots_held(), 16);
    assert_eq!(p.cq_a.drain().len(), 1);
    assert_eq!(
        p.a.send_slots_held(),
        0,
        "one signaled completion frees the whole chain"
    );

    // Never signaling fills the queue for good, as on hardware.
    p.a.post_send(&vec![quiet; 16]).unwrap();
    p.nic.run();
    assert!(p.cq_a.drain().is_empty());
    assert_eq!(
        p.a.post_send(&[quiet]),
        Err(PostFailure {
            posted: 0,
            errno: ENOMEM
        })
    );
}

#[test]
fn receive_slots_free_on_poll() {
    let mut p = pair();
    let rs: Vec<_> = (0..16).map(|i| recv(i, &p.mr_b, 0, 0)).collect();
    p.b.post_recv(&rs).unwrap();
    p.a.post_send(&[wqe(
        1,
        Opcode::RDMA_WRITE_WITH_IMM,
        &p.mr_a,
        0,
        0,
        &p.mr_b,
        0,
    )])
    .unwrap();
    p.nic.run();
    assert_eq!((p.b.recv_queued(), p.b.recv_slots_held()), (15, 16));
    assert_eq!(p.cq_b.drain().len(), 1);
    assert_eq!(p.b.recv_slots_held(), 15);
    assert_eq!(
        p.b.post_recv(&rs[..2]),
        Err(PostFailure {
            posted: 1,
            errno: ENOMEM
        })
    );
}
