//! Behaviour through the verbs ABI: scatter/gather, inline, unsignaled WRs, chains and
//! `bad_wr`, local and receive-side error statuses, RNR, flushes, the QP state
//! machine's masks, CQ overflow, completion channels with poll(2), asynchronous events,
//! injected QP faults and concurrent post/poll. Errors the responder detects are in
//! `responder_errors.rs`; misuse of the verbs in `bad_calls.rs`.
//!
//! Tests here run in parallel in one process, so each uses its own QPs; process-wide
//! settings (reorder policy, links) are tested in their own binaries.

mod common;

use std::ptr::null_mut;
use std::time::{Duration, Instant};

use common::*;
use vqp_host::sys::*;
use vqp_host::{AccessFlags, Error, QpAttrMask, QpState, WcOpcode, WcStatus};

fn ops(s: &Side) -> ibv_context_ops {
    // SAFETY: a live context; the provider fills `ops` at open and never changes it.
    unsafe { (*s.ctx.as_raw()).ops }
}

fn statuses(wcs: &[vqp_host::Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id(), w.status())).collect()
}

#[test]
fn gather_from_three_sges_and_inline_data_copied_at_post_time() {
    let v = verbs();
    let (mut a, b) = pair(&v);
    fill(&mut a, 9);
    let a0 = bytes(&a).to_vec();
    let mut sges = [
        a.mr.sge(0, 10).unwrap(),
        a.mr.sge(100, 20).unwrap(),
        a.mr.sge(1000, 30).unwrap(),
    ];
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, &mut sges);
    rdma(&mut wr, &b.mr, 64);
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    let mut want = a0[0..10].to_vec();
    want.extend_from_slice(&a0[100..120]);
    want.extend_from_slice(&a0[1000..1030]);
    assert_eq!(&bytes(&b)[64..124], &want[..]);

    // Inline: the bytes are taken at post time, and the lkey is not consulted.
    let mut data = *b"inline payload!!";
    let mut sge = ibv_sge {
        addr: data.as_mut_ptr() as u64,
        length: data.len() as u32,
        lkey: 0xbad,
    };
    let mut wr = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.send_flags |= IBV_SEND_INLINE;
    rdma(&mut wr, &b.mr, 4096);
    // Keep the engine from running before we scribble over the source.
    post(&a, &mut wr);
    data.fill(b'x');
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    assert_eq!(&bytes(&b)[4096..4112], b"inline payload!!");
    // Inline data over the QP's limit: see bad_calls.rs.
}

#[test]
fn unsignaled_wrs_chains_and_bad_wr() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut wrs: Vec<ibv_send_wr> = (0..4)
        .map(|i| {
            let mut w = send_wr(10 + i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
            rdma(&mut w, &b.mr, 8 * i);
            w
        })
        .collect();
    wrs[0].send_flags = 0;
    wrs[2].send_flags = 0;
    let base = wrs.as_mut_ptr();
    for i in 0..3 {
        // SAFETY: indices within the vector.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    // SAFETY: a valid chain over live buffers.
    unsafe { a.qp.post_send(&mut *base) }.unwrap();
    let got = poll_n(&a.cq, 2);
    assert_eq!(
        got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
        [11, 13],
        "only signaled WRs complete, in order"
    );
    assert!(drain(&a.cq, 20).is_empty());

    // A chain whose third WR has an unknown opcode: the first two are posted and
    // `*bad_wr` names the third.
    wrs[2].opcode = 0x77;
    let post_send = ops(&a).post_send.unwrap();
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: live QP; valid chain; writable `bad`.
    let rc = unsafe { post_send(a.qp.as_raw(), base, &mut bad) };
    assert_eq!(rc, libc::EINVAL);
    // SAFETY: index within the vector.
    assert_eq!(bad, unsafe { base.add(2) });
    assert_eq!(poll_n(&a.cq, 1)[0].wr_id(), 11);

    // Too many SGEs for the send queue: see bad_calls.rs.

    // Receive side: a chain whose second WR has too many SGEs.
    let mut rs = [b.mr.sge(0, 8).unwrap(); 5];
    let mut r2 = recv_wr(31, &mut rs);
    let mut r1 = recv_wr(30, &mut []);
    r1.next = &mut r2;
    let post_recv = ops(&b).post_recv.unwrap();
    let mut bad: *mut ibv_recv_wr = null_mut();
    // SAFETY: live QP; valid chain; writable `bad`.
    let rc = unsafe { post_recv(b.qp.as_raw(), &mut r1, &mut bad) };
    assert_eq!((rc, bad), (libc::EINVAL, &mut r2 as *mut _));
}

#[test]
fn sq_sig_all_signals_every_wr_and_unsignaled_slots_fill_the_queue() {
    let v = verbs();
    let mut o = Opts {
        sq_sig_all: true,
        ..Opts::default()
    };
    o.cap.max_send_wr = 4;
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    for i in 0..3 {
        let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        w.send_flags = 0;
        rdma(&mut w, &b.mr, 0);
        post(&a, &mut w);
    }
    assert_eq!(poll_n(&a.cq, 3).len(), 3);

    // Without sq_sig_all, unsignaled WRs keep their slots until a signaled one completes.
    let o = Opts {
        cap: vqp_host::QpCap {
            max_send_wr: 4,
            ..Opts::default().cap
        },
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut unsig = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    unsig.send_flags = 0;
    rdma(&mut unsig, &b.mr, 0);
    for _ in 0..4 {
        post(&a, &mut unsig);
    }
    assert!(drain(&a.cq, 20).is_empty());
    // SAFETY: a valid single WR.
    let err = unsafe { a.qp.post_send(&mut unsig) }.unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOMEM),
        "the send queue is full"
    );
}

#[test]
fn local_protection_errors_then_flush() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut rwr = recv_wr(50, &mut []);
    post_recv(&a, &mut rwr);
    let mut bad_sge = a.mr.sge(0, 8).unwrap();
    bad_sge.lkey ^= 0xff00; // no such key
    let mut w1 = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut bad_sge));
    rdma(&mut w1, &b.mr, 0);
    let mut ok_sge = a.mr.sge(0, 8).unwrap();
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut ok_sge));
    w2.send_flags = 0; // unsignaled, yet flushed with a completion
    rdma(&mut w2, &b.mr, 0);
    w1.next = &mut w2;
    post(&a, &mut w1);
    let got = poll_n(&a.cq, 3);
    assert_eq!(
        statuses(&got),
        [
            (1, WcStatus::LocProtErr),
            (2, WcStatus::WrFlushErr),
            (50, WcStatus::WrFlushErr),
        ]
    );
    assert!(got.iter().all(|w| w.qp_num() == a.qp.qp_num()));
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    // Posting to a QP in error completes at once with a flush.
    let mut w3 = send_wr(3, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut ok_sge));
    rdma(&mut w3, &b.mr, 0);
    post(&a, &mut w3);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(3, WcStatus::WrFlushErr)]);

    // Out of bounds of a valid key, and READ into a region without local write.
    let v2 = verbs();
    let (a, b) = pair(&v2);
    let mut sge = a.mr.sge(0, 8).unwrap();
    sge.addr = a.mr.addr() + a.mr.len() as u64 - 4;
    let mut w = send_wr(4, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(4, WcStatus::LocProtErr)]);

    let o = Opts {
        access: AccessFlags::REMOTE_READ,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v2, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(5, IBV_WR_RDMA_READ, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(5, WcStatus::LocProtErr)]);
}

#[test]
fn receive_too_small_and_receive_with_bad_key() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut rs = b.mr.sge(0, 16).unwrap();
    let mut r = recv_wr(7, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    let mut r2 = recv_wr(8, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r2);
    let mut sge = a.mr.sge(0, 32).unwrap();
    let mut w = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(
        statuses(&poll_n(&b.cq, 2)),
        [(7, WcStatus::LocLenErr), (8, WcStatus::WrFlushErr)]
    );
    assert_eq!(b.qp.state().unwrap(), QpState::Err);

    let (a, b) = pair(&v);
    let mut rs = b.mr.sge(0, 64).unwrap();
    rs.lkey = 0x1234_5601;
    let mut r = recv_wr(9, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(0, 32).unwrap();
    let mut w = send_wr(2, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(2, WcStatus::RemOpErr)]);
    assert_eq!(statuses(&poll_n(&b.cq, 1)), [(9, WcStatus::LocProtErr)]);
}

#[test]
fn rnr_retries_then_gives_up_or_succeeds_when_a_receive_arrives() {
    let v = verbs();
    // rnr_retry = 2: three attempts, then RNR retry exceeded; the rest is flushed.
    let o = Opts {
        rnr_retry: 2,
        min_rnr_timer: 1, // 10 µs
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w1 = send_wr(1, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    let mut w2 = send_wr(
        2,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut w2, &b.mr, 0);
    w1.next = &mut w2;
    post(&a, &mut w1);
    assert_eq!(
        statuses(&poll_n(&a.cq, 2)),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );

    // rnr_retry = 7 retries forever: the WRITE_WITH_IMM waits for a receive, and the
    // WQE behind it waits too (order within the QP).
    let o = Opts {
        rnr_retry: 7,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w1 = send_wr(
        1,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut w1, &b.mr, 0);
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w2, &b.mr, 8);
    w1.next = &mut w2;
    post(&a, &mut w1);
    assert!(drain(&a.cq, 30).is_empty(), "stalled on RNR");
    let mut r = recv_wr(5, &mut []);
    post_recv(&b, &mut r);
    assert_eq!(
        statuses(&poll_n(&a.cq, 2)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(poll_n(&b.cq, 1)[0].opcode(), WcOpcode::RecvRdmaWithImm);
}

#[test]
fn peer_not_connected_is_retry_exceeded() {
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    let b = side(&v, "soft1", &o);
    // a points at b, but b stays in RESET.
    let path =
        vqp_host::connect::Path::new(1, vqp_host::connect::Address::lid(2), b.qp.qp_num(), 0, 0);
    vqp_host::connect::connect(&a.qp, &path).unwrap();
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::RetryExcErr)]);
}

#[test]
fn state_machine_enforces_masks_and_states() {
    use vqp_host::connect::{self, Address, Path, INIT_MASK, RTR_MASK, RTS_MASK};
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    let b = side(&v, "soft1", &o);
    let path = Path::new(1, Address::lid(2), b.qp.qp_num(), 1, 2);
    let einval = |r: vqp_host::Result<()>| match r {
        Err(e @ Error::Verbs { .. }) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL)),
        other => panic!("{other:?}"),
    };

    // Posting in RESET.
    let mut r = recv_wr(1, &mut []);
    // SAFETY: a valid WR.
    let err = unsafe { a.qp.post_recv(&mut r) }.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));

    // RESET → RTR skips INIT.
    let (rtr, _) = path.rtr_attr();
    einval(a.qp.modify(&rtr, RTR_MASK));
    // RESET → INIT with a missing bit, with an extra bit, with a bad port.
    let (init, _) = path.init_attr();
    einval(a.qp.modify(
        &init,
        QpAttrMask::from_bits(INIT_MASK.bits() & !IBV_QP_ACCESS_FLAGS),
    ));
    einval(a.qp.modify(&init, INIT_MASK | QpAttrMask::SQ_PSN));
    let mut bad_port = init;
    bad_port.port_num = 2;
    einval(a.qp.modify(&bad_port, INIT_MASK));
    a.qp.modify(&init, INIT_MASK).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Init);
    // Receives may be posted from INIT on; sends only in RTS.
    post_recv(&a, &mut r);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(2, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    // SAFETY: a valid WR.
    let err = unsafe { a.qp.post_send(&mut w) }.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    // INIT → RTR without the destination QPN; with a bad MTU.
    einval(a.qp.modify(
        &rtr,
        QpAttrMask::from_bits(RTR_MASK.bits() & !IBV_QP_DEST_QPN),
    ));
    let mut bad_mtu = rtr;
    bad_mtu.path_mtu = 9;
    einval(a.qp.modify(&bad_mtu, RTR_MASK));
    a.qp.modify(&rtr, RTR_MASK).unwrap();
    // RTR → RTS with an RTR-only bit; with an RNR retry of 8.
    let (rts, _) = path.rts_attr();
    einval(a.qp.modify(&rts, RTS_MASK | QpAttrMask::AV));
    let mut bad_rnr = rts;
    bad_rnr.rnr_retry = 8;
    einval(a.qp.modify(&bad_rnr, RTS_MASK));
    a.qp.modify(&rts, RTS_MASK).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    // RTS → RTS may change the RNR timer, but not the PSN.
    let mut again = rts;
    again.min_rnr_timer = 3;
    a.qp.modify(&again, QpAttrMask::MIN_RNR_TIMER).unwrap();
    einval(a.qp.modify(&again, QpAttrMask::SQ_PSN));
    let q = a.qp.query(QpAttrMask::STATE).unwrap();
    assert_eq!(
        (q.min_rnr_timer, q.sq_psn, q.dest_qp_num),
        (3, 1, b.qp.qp_num())
    );
    // A wrong assumed current state.
    let mut cur = rts;
    cur.cur_qp_state = IBV_QPS_RTR;
    einval(a.qp.modify(&cur, QpAttrMask::STATE | QpAttrMask::CUR_STATE));
    // ERR flushes the receive posted in INIT; RESET then allows a fresh connection.
    let err_attr = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..Default::default()
    };
    a.qp.modify(&err_attr, QpAttrMask::STATE).unwrap();
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::WrFlushErr)]);
    einval(a.qp.modify(&rts, RTS_MASK));
    let reset = ibv_qp_attr {
        qp_state: IBV_QPS_RESET,
        ..Default::default()
    };
    a.qp.modify(&reset, QpAttrMask::STATE).unwrap();
    assert_eq!(a.qp.state().unwrap(), QpState::Reset);
    connect::connect(&a.qp, &path).unwrap();
    connect::connect(&b.qp, &Path::new(1, Address::lid(1), a.qp.qp_num(), 2, 1)).unwrap();
    let mut w = send_wr(3, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(3, WcStatus::Success)]);
}

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
    // Let the engine run everything before the first poll reads the CQ.
    let deadline = Instant::now() + Duration::from_secs(5);
    while vqp_softverbs::pending() > 0 && Instant::now() < deadline {
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
    // The channel has nothing left to give.
    ch.set_nonblocking(true).unwrap();
    match ch.get_cq_event() {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
        Ok(_) => panic!("an event of a destroyed CQ"),
    }
    drop((mr, pd, ctx));
}

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

#[test]
fn one_thread_posts_while_another_polls() {
    const N: u64 = 20_000;
    let v = verbs();
    let (mut a, b) = pair(&v);
    fill(&mut a, 3);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut next = 0u64;
            let mut buf = [vqp_host::Wc::default(); 32];
            let deadline = Instant::now() + Duration::from_secs(30);
            while next < N {
                for wc in a.cq.poll(&mut buf).unwrap().iter() {
                    assert!(wc.is_ok(), "{wc:?}");
                    assert_eq!(wc.wr_id(), next, "completions in posting order");
                    next += 1;
                }
                assert!(Instant::now() < deadline, "stuck at {next}");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut i = 0u64;
        while i < N {
            let off = (i % 512) * 64;
            let mut sge = a.mr.sge(off as usize, 64).unwrap();
            let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
            rdma(&mut w, &b.mr, off);
            // SAFETY: a valid WR over live buffers.
            match unsafe { a.qp.post_send(&mut w) } {
                Ok(()) => i += 1,
                // The send queue is full: the poller frees slots.
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        poller.join().unwrap();
    });
    assert!(stop.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(&bytes(&b)[..32768], &bytes(&a)[..32768]);
}
