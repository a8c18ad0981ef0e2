//! CQ overflow and completion channels with poll(2).

use std::time::{Duration, Instant};

use vqp_host::sys::*;
use vqp_host::{Error, QpState};

use crate::common::*;

#[test]
fn cq_overflow_is_an_error_not_a_loss() {
    let v = verbs();
    let o = Opts {
        cqe: 4,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    for i in 0..6 {
        let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        rdma(&mut w, &b.mr, 0);
        post(&a, &mut w);
    }
    // Let the engine run everything before the first poll reads the CQ: nothing queued,
    // and the overrun seen (the QP in error). A WQE the background thread has taken is
    // no longer queued but may still be running: the queue alone said so too early.
    let deadline = Instant::now() + Duration::from_secs(5);
    while (vqp_softverbs::pending() > 0 || a.qp.state().unwrap() != QpState::Err)
        && Instant::now() < deadline
    {
        vqp_softverbs::progress(64);
    }
    let mut buf = [vqp_host::Wc::default(); 8];
    let got = a.cq.poll(&mut buf).unwrap();
    assert_eq!(got.len(), 4, "the entries that fitted are kept");
    assert!(got.iter().all(|w| w.is_ok()));
    match a.cq.poll(&mut buf) {
        Err(Error::Verbs {
            function: "ibv_poll_cq",
            ..
        }) => {}
        other => panic!("an overrun CQ reports an error: {other:?}"),
    }
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    // The overrun is also an asynchronous CQ error on the context.
    let mut ev = vqp_host::sys::ibv_async_event::default();
    // SAFETY: live context; writable event.
    let rc = unsafe { vqp_softverbs::ibv_get_async_event(a.ctx.as_raw(), &mut ev) };
    assert_eq!(rc, 0);
    assert_eq!(ev.event_type, 0, "IBV_EVENT_CQ_ERR");
    // SAFETY: the element of a CQ event is the CQ.
    assert_eq!(unsafe { ev.element.cq }, a.cq.as_raw());
    // SAFETY: the event came from `ibv_get_async_event` (the CQ's destruction waits for
    // this).
    unsafe { vqp_softverbs::ibv_ack_async_event(&mut ev) };
}

#[test]
fn completion_channel_blocks_and_polls() {
    let v = verbs();
    let o = Opts {
        channel: true,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let ch = a.channel.as_ref().unwrap();
    use std::os::fd::AsRawFd;
    let fd = ch.as_raw_fd();
    let poll_fd = |timeout_ms: i32| {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) }
    };
    assert_eq!(poll_fd(0), 0, "nothing yet");
    ch.set_nonblocking(true).unwrap();
    match ch.get_cq_event() {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
        Ok(_) => panic!("no event was due"),
    }
    ch.set_nonblocking(false).unwrap();

    a.cq.req_notify(false).unwrap();
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    // Nobody polls the CQ: the background engine runs the WQE and the fd turns readable.
    assert_eq!(poll_fd(5000), 1, "the channel's fd becomes readable");
    let ev = ch.get_cq_event().unwrap();
    assert!(ev.is_for(&a.cq));
    drop(ev); // acknowledges
    assert_eq!(poll_fd(0), 0, "one event per arm");
    assert_eq!(poll_n(&a.cq, 1)[0].wr_id(), 1);

    // Blocking get_cq_event in another thread, woken by a completion.
    a.cq.req_notify(false).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| ch.get_cq_event().map(|e| e.is_for(&a.cq)));
        std::thread::sleep(Duration::from_millis(20));
        post(&a, &mut w);
        assert!(waiter.join().unwrap().unwrap());
    });
    assert_eq!(poll_n(&a.cq, 1)[0].wr_id(), 1);

    // A CQ without a channel cannot be armed; a channel in use cannot be destroyed.
    let plain = a.ctx.create_cq(4, None, 0).unwrap();
    assert!(plain.req_notify(false).is_err());
    // SAFETY: live channel (a CQ still uses it, so the provider refuses).
    let rc = unsafe { vqp_softverbs::ibv_destroy_comp_channel(ch.as_raw()) };
    assert_eq!(rc, libc::EBUSY);
}

/// An event raised for a CQ but never taken from the channel needs no acknowledgement:
/// `ibv_destroy_cq` drops it and returns (libibverbs waits only for the events it read,
/// the kernel's `comp_events_reported`). It used to wait for it for ever.
#[test]
fn an_event_nobody_took_does_not_hold_up_destroying_its_cq() {
    let v = verbs();
    let o = Opts {
        channel: true,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    a.cq.req_notify(false).unwrap();
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(poll_n(&a.cq, 1)[0].wr_id(), 1);
    let Side {
        ctx,
        pd,
        channel,
        cq,
        qp,
        mr,
    } = a;
    let ch = channel.unwrap();
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: ch.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, 5000) },
        1,
        "the event was raised"
    );
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(qp);
        drop(cq);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("ibv_destroy_cq waited for an event nobody took");
    // The channel has nothing left to give, and its descriptor says so (as the
    // kernel's event file, whose readiness is its list of events).
    assert!(
        !readable(ch.as_raw_fd()),
        "the channel is readable with its only event dropped"
    );
    ch.set_nonblocking(true).unwrap();
    match ch.get_cq_event() {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
        Ok(_) => panic!("an event of a destroyed CQ"),
    }
    drop((mr, pd, ctx));
}
