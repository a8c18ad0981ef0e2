//! Shared receive queues as ConnectX has them: receives taken by whichever QP a message
//! arrives on, scatter lists checked against the SRQ's protection domain, the limit
//! event, the last-WQE event of a QP that fails, and the rules of creation and
//! destruction. The same SRQ across processes is exercised by Debian's
//! `ibv_srq_pingpong` (`debian_programs.rs`).
//!
//! Tests here run in parallel in one process, each on its own objects.

mod common;

use common::*;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInit, QpState,
    QueuePair, SharedReceiveQueue, Verbs, WcStatus,
};

/// `IBV_EVENT_SRQ_LIMIT_REACHED`.
const SRQ_LIMIT_REACHED: u32 = 15;
/// `IBV_EVENT_QP_LAST_WQE_REACHED`.
const QP_LAST_WQE_REACHED: u32 = 16;

/// A responder on `soft1`: two RC QPs taking their receives from one SRQ, and a region
/// in the SRQ's PD.
struct Responder {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    srq: SharedReceiveQueue,
    qps: [QueuePair; 2],
    mr: MemoryRegion,
}

fn responder(v: &Verbs, o: &Opts) -> Responder {
    let ctx = Context::open(v, Some("soft1")).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None, 0).unwrap();
    let srq = pd.create_srq(8, 2).unwrap();
    let qp = || {
        let mut init = QpInit::rc(&cq, o.cap);
        init.srq = Some(&srq);
        pd.create_qp(&init).unwrap()
    };
    let qps = [qp(), qp()];
    let mr = pd.register_buffer(4096, AccessFlags::ALL_REMOTE).unwrap();
    Responder {
        ctx,
        pd,
        cq,
        srq,
        qps,
        mr,
    }
}

/// Two requesters on `soft0`, requester `i` connected to the responder's QP `i`.
fn connected(v: &Verbs) -> (Responder, [Side; 2]) {
    let o = Opts::default();
    let r = responder(v, &o);
    let reqs = [side(v, "soft0", &o), side(v, "soft0", &o)];
    let lid = |c: &Context| c.query_port(1).unwrap().lid();
    for (q, s) in r.qps.iter().zip(&reqs) {
        let mut to_resp = Path::new(1, Address::lid(lid(&r.ctx)), q.qp_num(), 1, 2);
        let mut to_req = Path::new(1, Address::lid(lid(&s.ctx)), s.qp.qp_num(), 2, 1);
        for p in [&mut to_resp, &mut to_req] {
            p.rnr_retry = 7;
            p.min_rnr_timer = 1;
            p.access = o.qp_access;
        }
        connect::connect(&s.qp, &to_resp).unwrap();
        connect::connect(q, &to_req).unwrap();
    }
    (r, reqs)
}

/// Posts receives `wr_ids` to the SRQ, each 64 bytes of `mr` at `64 · index`.
fn post_srq(r: &Responder, mr: &MemoryRegion, wr_ids: &[u64]) {
    for (i, &id) in wr_ids.iter().enumerate() {
        let mut sge = mr.sge(64 * i, 64).unwrap();
        let mut wr = recv_wr(id, std::slice::from_mut(&mut sge));
        // SAFETY: the WR and SGE live across the call; the buffer is `mr`'s.
        unsafe { r.srq.post_recv(&mut wr) }.unwrap();
    }
}

/// Sends `len` bytes of `s`'s buffer from `offset` (wr_id `id`), and waits for it.
fn send(s: &Side, id: u64, offset: usize, len: usize) -> WcStatus {
    let mut sge = s.mr.sge(offset, len).unwrap();
    let mut wr = send_wr(id, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(s, &mut wr);
    poll_n(&s.cq, 1)[0].status()
}

#[test]
fn receives_are_taken_from_the_srq_by_whichever_qp_a_send_arrives_on() {
    let v = verbs();
    let (r, mut reqs) = connected(&v);
    for (i, s) in reqs.iter_mut().enumerate() {
        fill(s, 10 * i as u8 + 1);
    }
    post_srq(&r, &r.mr, &[100, 101, 102]);
    assert_eq!(send(&reqs[0], 1, 0, 16), WcStatus::Success);
    assert_eq!(send(&reqs[1], 2, 0, 24), WcStatus::Success);
    assert_eq!(send(&reqs[0], 3, 100, 8), WcStatus::Success);
    let got: Vec<(u64, u32, u32)> = poll_n(&r.cq, 3)
        .iter()
        .map(|w| {
            assert!(w.is_ok(), "{w:?}");
            (w.wr_id(), w.qp_num(), w.byte_len())
        })
        .collect();
    let (q0, q1) = (r.qps[0].qp_num(), r.qps[1].qp_num());
    assert_eq!(got, [(100, q0, 16), (101, q1, 24), (102, q0, 8)]);
    // SAFETY: read after the completions that wrote it.
    let b = unsafe { r.mr.as_slice() }.unwrap();
    assert_eq!(&b[..16], &bytes(&reqs[0])[..16]);
    assert_eq!(&b[64..88], &bytes(&reqs[1])[..24]);
    assert_eq!(&b[128..136], &bytes(&reqs[0])[100..108]);
}

#[test]
fn scatter_entries_are_checked_against_the_srqs_protection_domain() {
    let v = verbs();
    let o = Opts::default();
    // The QPs in another PD than the SRQ: a receive naming a region of the QPs' PD is
    // a protection error; one of the SRQ's PD is fine.
    let ctx = Context::open(&v, Some("soft1")).unwrap();
    let srq_pd = ctx.alloc_pd().unwrap();
    let qp_pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None, 0).unwrap();
    let srq = srq_pd.create_srq(8, 1).unwrap();
    let mut init = QpInit::rc(&cq, o.cap);
    init.srq = Some(&srq);
    let qp = qp_pd.create_qp(&init).unwrap();
    let good = srq_pd
        .register_buffer(4096, AccessFlags::ALL_REMOTE)
        .unwrap();
    let bad = qp_pd
        .register_buffer(4096, AccessFlags::ALL_REMOTE)
        .unwrap();
    let a = side(&v, "soft0", &o);
    let lid = |c: &Context| c.query_port(1).unwrap().lid();
    connect::connect(
        &a.qp,
        &Path::new(1, Address::lid(lid(&ctx)), qp.qp_num(), 1, 2),
    )
    .unwrap();
    connect::connect(
        &qp,
        &Path::new(1, Address::lid(lid(&a.ctx)), a.qp.qp_num(), 2, 1),
    )
    .unwrap();
    for (id, mr) in [(7u64, &good), (8, &bad)] {
        let mut sge = mr.sge(0, 64).unwrap();
        let mut wr = recv_wr(id, std::slice::from_mut(&mut sge));
        // SAFETY: the WR and SGE live across the call; the buffer is `mr`'s.
        unsafe { srq.post_recv(&mut wr) }.unwrap();
    }
    assert_eq!(send(&a, 1, 0, 32), WcStatus::Success);
    assert_eq!(send(&a, 2, 0, 32), WcStatus::RemOpErr);
    let wcs = poll_n(&cq, 2);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        [(7, WcStatus::Success), (8, WcStatus::LocProtErr)]
    );
}

#[test]
fn the_limit_event_fires_once_when_receives_fall_below_it() {
    let v = verbs();
    let (r, reqs) = connected(&v);
    post_srq(&r, &r.mr, &[1, 2, 3, 4]);
    assert_eq!(r.srq.query().unwrap().srq_limit, 0, "disarmed at creation");
    r.srq.arm_limit(3).unwrap();
    assert_eq!(r.srq.query().unwrap().srq_limit, 3);
    assert_eq!(send(&reqs[0], 1, 0, 8), WcStatus::Success);
    assert_eq!(async_events(&r.ctx), [], "3 left: not below the limit");
    assert_eq!(send(&reqs[1], 2, 0, 8), WcStatus::Success);
    assert_eq!(
        async_events(&r.ctx),
        [(SRQ_LIMIT_REACHED, r.srq.as_raw() as usize)],
        "2 left"
    );
    assert_eq!(r.srq.query().unwrap().srq_limit, 0, "disarmed once fired");
    assert_eq!(send(&reqs[0], 3, 0, 8), WcStatus::Success);
    assert_eq!(async_events(&r.ctx), [], "once");
    // A resize, or a limit not below max_wr, is refused.
    let granted = r.srq.granted();
    assert_eq!(granted.max_wr, 8);
    let e = r.srq.arm_limit(granted.max_wr).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    let mut resize = ibv_srq_attr {
        max_wr: 16,
        ..Default::default()
    };
    // SAFETY: a live SRQ of this provider; a valid attribute struct.
    let rc = unsafe { vqp_softverbs::ibv_modify_srq(r.srq.as_raw(), &mut resize, IBV_SRQ_MAX_WR) };
    assert_eq!(rc, libc::EINVAL);
    let _ = &r.pd;
}

#[test]
fn a_qp_of_an_srq_entering_error_raises_last_wqe_reached_and_leaves_the_receives() {
    let v = verbs();
    let (r, reqs) = connected(&v);
    post_srq(&r, &r.mr, &[100, 101]);
    let mut attr = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..Default::default()
    };
    // SAFETY: a live QP of this provider; a valid attribute struct.
    let rc =
        unsafe { vqp_softverbs::ibv_modify_qp(r.qps[0].as_raw(), &mut attr, IBV_QP_STATE as i32) };
    assert_eq!(rc, 0);
    assert_eq!(
        async_events(&r.ctx),
        [(QP_LAST_WQE_REACHED, r.qps[0].as_raw() as usize)]
    );
    assert!(
        drain(&r.cq, 20).is_empty(),
        "the SRQ's receives are not flushed"
    );
    // The other QP still takes them, in order.
    assert_eq!(send(&reqs[1], 1, 0, 8), WcStatus::Success);
    let wc = poll_n(&r.cq, 1);
    assert_eq!((wc[0].wr_id(), wc[0].qp_num()), (100, r.qps[1].qp_num()));
    // A responder-detected error (a bad rkey) fails QP 1 the same way: its access
    // error event, then the last-WQE event.
    let mut sge = reqs[1].mr.sge(0, 8).unwrap();
    let mut wr = send_wr(2, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: r.mr.addr(),
        rkey: r.mr.rkey() ^ 0x100,
    };
    post(&reqs[1], &mut wr);
    assert_eq!(poll_n(&reqs[1].cq, 1)[0].status(), WcStatus::RemAccessErr);
    let q1 = r.qps[1].as_raw() as usize;
    assert_eq!(async_events(&r.ctx), [(3, q1), (QP_LAST_WQE_REACHED, q1)]);
    assert_eq!(r.qps[1].state().unwrap(), QpState::Err);
    assert_eq!(r.srq.query().unwrap().max_wr, 8);
}

#[test]
fn a_qp_of_an_srq_has_no_receive_queue_and_an_srq_in_use_is_not_destroyed() {
    let v = verbs();
    let (r, _reqs) = connected(&v);
    assert_eq!(r.qps[0].cap().max_recv_wr, 0);
    let mut wr = recv_wr(1, &mut []);
    // SAFETY: a valid WR with no SGEs.
    let e = unsafe { r.qps[0].post_recv(&mut wr) }.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    let mut attr = ibv_qp_attr::default();
    let mut init = ibv_qp_init_attr::default();
    // SAFETY: a live QP; writable structs.
    let rc = unsafe { vqp_softverbs::ibv_query_qp(r.qps[0].as_raw(), &mut attr, 0, &mut init) };
    assert_eq!(rc, 0);
    assert_eq!(init.srq, r.srq.as_raw());
    // SAFETY: a live SRQ; the provider refuses and leaves it alive.
    assert_eq!(
        unsafe { vqp_softverbs::ibv_destroy_srq(r.srq.as_raw()) },
        libc::EBUSY
    );
    // A receive with more scatter entries than the SRQ's max_sge is refused.
    let mut sges = [r.mr.sge(0, 8).unwrap(); 3];
    let mut wr = recv_wr(2, &mut sges);
    // SAFETY: the WR and its SGEs live across the call.
    let e = unsafe { r.srq.post_recv(&mut wr) }.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
}
