//! A QP's life as rdma-core's tests see it on a ConnectX: `ibv_resize_cq` against the
//! work still outstanding, RESET removing the QP's completions from its CQs, and which
//! states take posts (rdma-core's `tests/test_cq.py::test_resize_cq`,
//! `tests/test_mr.py`'s `restate_qps`, mlx5's `_mlx5_post_send` / `mlx5_post_recv`);
//! and its asynchronous events at its end, as with a kernel provider: those not yet
//! taken go with it, those taken hold `ibv_destroy_qp` until acknowledged.
//!
//! Tests here run in parallel in one process, each on its own QPs.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::*;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{QpAttrMask, WcStatus};
use vqp_softverbs::QpSelector;

fn to_state(s: &Side, state: u32) {
    let attr = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    s.qp.modify(&attr, QpAttrMask::STATE).unwrap();
}

fn resize(s: &Side, cqe: i32) -> i32 {
    // SAFETY: a live CQ of the provider.
    unsafe { vqp_softverbs::ibv_resize_cq(s.cq.as_raw(), cqe) }
}

fn send_errno(s: &Side, wr: &mut ibv_send_wr) -> Option<i32> {
    // SAFETY: the WR and its SGEs live across the call.
    unsafe { s.qp.post_send(wr) }
        .err()
        .and_then(|e| e.raw_os_error())
}

fn recv_errno(s: &Side, wr: &mut ibv_recv_wr) -> Option<i32> {
    // SAFETY: as `send_errno`.
    unsafe { s.qp.post_recv(wr) }
        .err()
        .and_then(|e| e.raw_os_error())
}

#[test]
fn resize_cq_counts_signaled_work_and_receives_not_yet_completed() {
    let v = verbs();
    let o = Opts {
        cqe: 8,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    // Hold a's WQEs in its send queue: posted, not executed.
    vqp_softverbs::delay_qp(QpSelector::QpNum(a.qp.qp_num()), Duration::from_millis(300));
    for i in 0..6 {
        let mut sge = a.mr.sge(0, 8).unwrap();
        let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        if i % 2 == 1 {
            w.send_flags = 0;
        }
        rdma(&mut w, &b.mr, 0);
        post(&a, &mut w);
    }
    // Three signaled WQEs owe the CQ three entries: 2 is too small, 3 is enough.
    assert_eq!(resize(&a, 2), libc::EINVAL);
    assert_eq!(resize(&a, 3), 0);
    let ids: Vec<u64> = poll_n(&a.cq, 3).iter().map(|w| w.wr_id()).collect();
    assert_eq!(ids, [0, 2, 4]);
    assert_eq!(resize(&a, 1), 0, "nothing is outstanding any more");

    // Receives owe their CQ an entry each (a completion or a flush).
    for i in 0..4 {
        let mut r = recv_wr(100 + i, &mut []);
        post_recv(&b, &mut r);
    }
    assert_eq!(resize(&b, 3), libc::EINVAL);
    assert_eq!(resize(&b, 4), 0);
    to_state(&b, IBV_QPS_ERR);
    assert_eq!(poll_n(&b.cq, 4).len(), 4);
    assert_eq!(resize(&b, 1), 0);
}

#[test]
fn reset_removes_the_qps_completions_from_its_cqs() {
    let v = verbs();
    let o = Opts::default();
    let (a, b) = pair_with(&v, &o);
    // Two receives flushed by ERR, left unpolled.
    let mut r = recv_wr(7, &mut []);
    post_recv(&b, &mut r);
    let mut r = recv_wr(8, &mut []);
    post_recv(&b, &mut r);
    to_state(&b, IBV_QPS_ERR);
    to_state(&b, IBV_QPS_RESET);
    let pa = Path::new(1, Address::lid(lid(&b.ctx)), b.qp.qp_num(), 0x300, 0x400);
    let pb = Path::new(1, Address::lid(lid(&a.ctx)), a.qp.qp_num(), 0x400, 0x300);
    to_state(&a, IBV_QPS_RESET);
    connect::connect(&a.qp, &pa).unwrap();
    connect::connect(&b.qp, &pb).unwrap();
    let mut sge = b.mr.sge(0, 64).unwrap();
    let mut r = recv_wr(9, std::slice::from_mut(&mut sge));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut w = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut w);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::Success);
    let got = poll_n(&b.cq, 1);
    assert_eq!(
        (got[0].wr_id(), got[0].status()),
        (9, WcStatus::Success),
        "the flush of before the RESET is gone"
    );
    assert!(drain(&b.cq, 20).is_empty());
}

#[test]
fn posting_follows_mlx5_by_state() {
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    let b = side(&v, "soft1", &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    let mut r = recv_wr(2, &mut []);
    // RESET: sends ENOMEM, receives EINVAL.
    assert_eq!(send_errno(&a, &mut w), Some(libc::ENOMEM));
    assert_eq!(recv_errno(&a, &mut r), Some(libc::EINVAL));
    // RESET → ERR: still neither.
    to_state(&a, IBV_QPS_ERR);
    assert_eq!(send_errno(&a, &mut w), Some(libc::ENOMEM));
    assert_eq!(recv_errno(&a, &mut r), Some(libc::EINVAL));
    to_state(&a, IBV_QPS_RESET);
    // INIT: receives queue, sends ENOMEM; RTR: the same.
    let path = Path::new(1, Address::lid(lid(&b.ctx)), b.qp.qp_num(), 1, 2);
    let (init, _) = path.init_attr();
    a.qp.modify(&init, connect::INIT_MASK).unwrap();
    assert_eq!(recv_errno(&a, &mut r), None);
    assert_eq!(send_errno(&a, &mut w), Some(libc::ENOMEM));
    let (rtr, _) = path.rtr_attr();
    a.qp.modify(&rtr, connect::RTR_MASK).unwrap();
    assert_eq!(send_errno(&a, &mut w), Some(libc::ENOMEM));
    // ERR from RTR: the receive is flushed, later receives flushed too; sends still
    // ENOMEM (the send queue never opened).
    to_state(&a, IBV_QPS_ERR);
    assert_eq!(recv_errno(&a, &mut r), None);
    assert_eq!(send_errno(&a, &mut w), Some(libc::ENOMEM));
    let flushed = poll_n(&a.cq, 2);
    assert!(flushed.iter().all(|c| c.status() == WcStatus::WrFlushErr));
    // Through RTS into ERR: sends are taken and flushed.
    to_state(&a, IBV_QPS_RESET);
    connect::connect(&a.qp, &path).unwrap();
    to_state(&a, IBV_QPS_ERR);
    assert_eq!(send_errno(&a, &mut w), None);
    let c = poll_n(&a.cq, 1);
    assert_eq!((c[0].wr_id(), c[0].status()), (1, WcStatus::WrFlushErr));
}

/// Asks for automatic path migration, which the device does not support: the QP gets
/// an `IBV_EVENT_PATH_MIG_ERR` (and stays in RTS).
fn raise_path_mig_err(s: &Side) {
    let attr = ibv_qp_attr {
        path_mig_state: IBV_MIG_ARMED,
        ..Default::default()
    };
    s.qp.modify(&attr, QpAttrMask::from_bits(IBV_QP_PATH_MIG_STATE))
        .unwrap();
}

#[test]
fn destroying_a_qp_drops_its_events_not_yet_taken() {
    let v = verbs();
    let (a, _b) = pair(&v);
    raise_path_mig_err(&a);
    assert!(readable(a.ctx.async_fd()));
    drop(a.qp);
    // No event names the freed QP (the kernel's `ib_uverbs_release_uevent`), and the
    // descriptor no longer says there is one.
    assert!(!readable(a.ctx.async_fd()));
    assert_eq!(a.ctx.pending_async_events().unwrap(), []);
}

#[test]
fn destroying_a_qp_waits_until_its_taken_events_are_acknowledged() {
    let v = verbs();
    let (a, _b) = pair(&v);
    raise_path_mig_err(&a);
    let mut ev = ibv_async_event::default();
    // SAFETY: a live context; a writable event.
    assert_eq!(
        unsafe { vqp_softverbs::ibv_get_async_event(a.ctx.as_raw(), &mut ev) },
        0
    );
    assert_eq!(ev.event_type, IBV_EVENT_PATH_MIG_ERR);
    let qp = a.qp;
    let (tx, rx) = mpsc::channel();
    let destroyer = std::thread::spawn(move || {
        drop(qp);
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "ibv_destroy_qp returned with the QP's event unacknowledged"
    );
    // SAFETY: the event `ibv_get_async_event` returned, acknowledged once.
    unsafe { vqp_softverbs::ibv_ack_async_event(&mut ev) };
    rx.recv_timeout(Duration::from_secs(5))
        .expect("ibv_destroy_qp returns once the event is acknowledged");
    destroyer.join().unwrap();
}
