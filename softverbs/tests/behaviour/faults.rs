//! Injected QP faults: a failure after N WQEs, a delay.

use std::time::{Duration, Instant};

use vqp_host::sys::*;
use vqp_host::WcStatus;

use crate::common::*;
use crate::statuses;

#[test]
fn injected_qp_failure_after_n_wqes() {
    let v = verbs();
    let (a, b) = pair(&v);
    vqp_softverbs::fail_qp_after(vqp_softverbs::QpSelector::QpNum(a.qp.qp_num()), 3);
    let mut sge = a.mr.sge(0, 8).unwrap();
    for i in 0..5 {
        let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        rdma(&mut w, &b.mr, 0);
        post(&a, &mut w);
    }
    assert_eq!(
        statuses(&poll_n(&a.cq, 5)),
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::RetryExcErr),
            (4, WcStatus::WrFlushErr),
        ]
    );
    let mut ev = vqp_host::sys::ibv_async_event::default();
    // SAFETY: live context; writable event.
    let rc = unsafe { vqp_softverbs::ibv_get_async_event(a.ctx.as_raw(), &mut ev) };
    assert_eq!((rc, ev.event_type), (0, 1), "IBV_EVENT_QP_FATAL");
    // SAFETY: the element of a QP event is the QP.
    assert_eq!(unsafe { ev.element.qp }, a.qp.as_raw());
    // SAFETY: the event came from `ibv_get_async_event` (the QP's destruction waits for
    // this).
    unsafe { vqp_softverbs::ibv_ack_async_event(&mut ev) };
}

#[test]
fn injected_delay_holds_wqes_back() {
    let v = verbs();
    let (a, b) = pair(&v);
    vqp_softverbs::delay_qp(
        vqp_softverbs::QpSelector::QpNum(a.qp.qp_num()),
        Duration::from_millis(30),
    );
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    let t0 = Instant::now();
    post(&a, &mut w);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    assert!(t0.elapsed() >= Duration::from_millis(30));
}
