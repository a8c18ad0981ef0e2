//! Configuration read from the environment at first use (its own process), and the
//! device count set by API before that.

mod common;

use common::*;
use vqp_host::sys::*;
use vqp_host::{PortState, WcStatus};
use vqp_softverbs::{ConfigError, Progress, Reorder};

#[test]
fn environment_and_api_configure_the_provider_before_first_use() {
    std::env::set_var("VQP_SOFT_DEVICES", "5");
    std::env::set_var("VQP_SOFT_REORDER", "random:7");
    std::env::set_var("VQP_SOFT_PROGRESS", "inline");
    std::env::set_var("VQP_SOFT_FAIL_QP", "nth=1:2");
    std::env::set_var("VQP_SOFT_LINK_DOWN", "2");
    // The API wins over the environment, but only before first use.
    vqp_softverbs::set_device_count(3).unwrap();
    assert_eq!(
        vqp_softverbs::set_device_count(0),
        Err(ConfigError::OutOfRange)
    );
    assert_eq!(vqp_softverbs::device_count(), 3);
    assert_eq!(
        vqp_softverbs::set_device_count(4),
        Err(ConfigError::AlreadyInitialised)
    );
    assert_eq!(vqp_softverbs::reorder(), Reorder::Random { seed: 7 });
    assert_eq!(vqp_softverbs::link_up(2), Some(false));
    assert_eq!(vqp_softverbs::link_up(3), None);

    let v = verbs();
    let list = vqp_host::DeviceList::new(&v).unwrap();
    assert_eq!(list.len(), 3);
    let c2 = vqp_host::Context::open(&v, Some("soft2")).unwrap();
    assert_eq!(c2.query_port(1).unwrap().state(), PortState::Down);

    // The first QP created fails when it starts its third WQE.
    let (a, b) = pair(&v);
    assert_eq!(vqp_softverbs::qp_rank(a.qp.qp_num()), Some(1));
    let mut sge = a.mr.sge(0, 8).unwrap();
    for i in 0..4 {
        let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        rdma(&mut w, &b.mr, 0);
        post(&a, &mut w);
    }
    let got: Vec<_> = poll_n(&a.cq, 4).iter().map(|w| w.status()).collect();
    assert_eq!(
        got,
        [
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::RetryExcErr,
            WcStatus::WrFlushErr
        ]
    );

    // Inline progress: nothing runs until someone polls (or calls `progress`).
    vqp_softverbs::clear_faults();
    let (a, b) = pair(&v);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(7, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(vqp_softverbs::pending(), 1);
    assert_eq!(vqp_softverbs::progress(16), 1);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    vqp_softverbs::set_progress(Progress::Thread);
}
