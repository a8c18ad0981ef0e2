//! Taking a device's link down (a process-wide setting, hence its own binary).

mod common;

use common::*;
use vqp_host::sys::*;
use vqp_host::{PortState, QpState, WcStatus};

#[test]
fn link_down_fails_traffic_and_raises_port_events() {
    let v = verbs();
    let (a, b) = pair(&v);
    assert_eq!(
        vqp_softverbs::set_link(9, false),
        Err(vqp_softverbs::ConfigError::NoSuchDevice(9))
    );
    vqp_softverbs::set_link(1, false).unwrap();
    assert_eq!(b.ctx.query_port(1).unwrap().state(), PortState::Down);
    let mut ev = vqp_host::sys::ibv_async_event::default();
    // SAFETY: live context; writable event.
    let rc = unsafe { vqp_softverbs::ibv_get_async_event(b.ctx.as_raw(), &mut ev) };
    assert_eq!((rc, ev.event_type), (0, 10), "IBV_EVENT_PORT_ERR");
    // SAFETY: the element of a port event is the port number.
    assert_eq!(unsafe { ev.element.port_num }, 1);

    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].status(), WcStatus::RetryExcErr);
    assert_eq!(a.qp.state().unwrap(), QpState::Err);

    vqp_softverbs::set_link(1, true).unwrap();
    // SAFETY: as above.
    let rc = unsafe { vqp_softverbs::ibv_get_async_event(b.ctx.as_raw(), &mut ev) };
    assert_eq!((rc, ev.event_type), (0, 9), "IBV_EVENT_PORT_ACTIVE");
    let (a, b) = pair(&v);
    let mut w = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    let mut sge2 = a.mr.sge(0, 8).unwrap();
    w.sg_list = &mut sge2;
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
}
