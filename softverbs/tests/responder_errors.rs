//! Errors the responder detects — a bad rkey (unknown, of another PD, of another
//! device), a range outside the region, access the region or the responder's QP does
//! not grant, a misaligned atomic — as ConnectX reports them: the requester's request
//! completes in error and its QP goes to error; the responder's QP goes to error too
//! (its receives are flushed) and raises an affiliated asynchronous event on its
//! context, `IBV_EVENT_QP_ACCESS_ERR` (`IBV_EVENT_QP_REQ_ERR` for an invalid request).
//!
//! Tests here run in parallel in one process, each on its own QPs and contexts.

mod common;

use common::*;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{AccessFlags, QpState, WcStatus};

/// `IBV_EVENT_QP_REQ_ERR`.
const QP_REQ_ERR: u32 = 2;
/// `IBV_EVENT_QP_ACCESS_ERR`.
const QP_ACCESS_ERR: u32 = 3;

fn statuses(wcs: &[vqp_host::Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id(), w.status())).collect()
}

/// Posts `w` (wr_id 1) on `a` after a receive (wr_id 50) on `b`, and checks that the
/// request fails with `status`, both QPs end in error, `b`'s receive is flushed and
/// `b`'s context (only) raised `event` for `b`'s QP.
fn check_responder_error(
    what: &str,
    a: &Side,
    b: &Side,
    w: &mut ibv_send_wr,
    status: WcStatus,
    event: u32,
) {
    let mut r = recv_wr(50, &mut []);
    post_recv(b, &mut r);
    post(a, w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, status)], "{what}");
    assert_eq!(a.qp.state().unwrap(), QpState::Err, "{what}: requester");
    assert_eq!(b.qp.state().unwrap(), QpState::Err, "{what}: responder");
    assert_eq!(
        statuses(&poll_n(&b.cq, 1)),
        [(50, WcStatus::WrFlushErr)],
        "{what}: the responder's receive is flushed"
    );
    assert_eq!(
        async_events(&b.ctx),
        [(event, b.qp.as_raw() as usize)],
        "{what}: one event, for the responder's QP"
    );
    assert_eq!(
        async_events(&a.ctx),
        [],
        "{what}: the requester's error is in its completion"
    );
    // A receive posted now completes at once, flushed.
    let mut r = recv_wr(51, &mut []);
    post_recv(b, &mut r);
    assert_eq!(statuses(&poll_n(&b.cq, 1)), [(51, WcStatus::WrFlushErr)]);
}

#[test]
fn remote_access_errors_put_the_responder_in_error_with_an_access_event() {
    let v = verbs();
    // (case, opcode, build) with the responder's second PD's region at hand.
    type Case = fn(&Side, &Side, &vqp_host::MemoryRegion, &mut ibv_send_wr);
    let cases: [(&str, u32, Case); 7] = [
        ("bad rkey", IBV_WR_RDMA_WRITE, |_, b, _, w| {
            rdma(w, &b.mr, 0);
            // SAFETY: plain integer union member.
            unsafe { w.wr.rdma.rkey ^= 0x0f00 };
        }),
        ("beyond the region", IBV_WR_RDMA_WRITE, |_, b, _, w| {
            rdma(w, &b.mr, b.mr.len() as u64 - 4)
        }),
        (
            "READ of a region without remote read",
            IBV_WR_RDMA_READ,
            |_, b, _, w| rdma(w, &b.mr, 0),
        ),
        (
            "address before the region",
            IBV_WR_RDMA_READ,
            |_, b, _, w| {
                w.wr.rdma = ibv_send_wr_rdma {
                    remote_addr: b.mr.addr() - 8,
                    rkey: b.mr.rkey(),
                }
            },
        ),
        ("rkey of another device", IBV_WR_RDMA_WRITE, |a, _, _, w| {
            rdma(w, &a.mr, 0)
        }),
        (
            "rkey of another PD on the responder's device",
            IBV_WR_RDMA_WRITE,
            |_, _, other, w| rdma(w, other, 0),
        ),
        (
            "atomic on a region without remote atomic",
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            |_, b, _, w| {
                w.wr.atomic = ibv_send_wr_atomic {
                    remote_addr: b.mr.addr(),
                    compare_add: 1,
                    swap: 0,
                    rkey: b.mr.rkey(),
                }
            },
        ),
    ];
    for (name, opcode, build) in cases {
        let o = Opts {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            ..Opts::default()
        };
        let (a, b) = pair_with(&v, &o);
        let other_pd = b.ctx.alloc_pd().unwrap();
        let other = other_pd
            .register_buffer(4096, AccessFlags::ALL_REMOTE)
            .unwrap();
        let mut sge = a.mr.sge(0, 8).unwrap();
        let mut w = send_wr(1, opcode, std::slice::from_mut(&mut sge));
        build(&a, &b, &other, &mut w);
        check_responder_error(name, &a, &b, &mut w, WcStatus::RemAccessErr, QP_ACCESS_ERR);
    }
}

#[test]
fn the_responder_qps_own_access_flags_are_an_access_error_too() {
    let v = verbs();
    let o = Opts {
        qp_access: AccessFlags::REMOTE_READ,
        ..Opts::default()
    };
    let (a, b) = pair_with(&v, &o);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    check_responder_error(
        "QP without remote write",
        &a,
        &b,
        &mut w,
        WcStatus::RemAccessErr,
        QP_ACCESS_ERR,
    );
}

#[test]
fn a_misaligned_atomic_is_an_invalid_request_at_the_responder() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(
        1,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        std::slice::from_mut(&mut sge),
    );
    w.wr.atomic = ibv_send_wr_atomic {
        remote_addr: b.mr.addr() + 4,
        compare_add: 1,
        swap: 0,
        rkey: b.mr.rkey(),
    };
    check_responder_error(
        "misaligned atomic",
        &a,
        &b,
        &mut w,
        WcStatus::RemInvReqErr,
        QP_REQ_ERR,
    );
}

#[test]
fn a_zero_length_write_checks_no_key_and_leaves_both_qps_alone() {
    let v = verbs();
    let (a, b) = pair(&v);
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, &mut []);
    rdma(&mut w, &b.mr, 0);
    // SAFETY: plain integer union member.
    unsafe { w.wr.rdma.rkey ^= 0x0f00 };
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::Success)]);
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
    assert_eq!(async_events(&b.ctx), []);
}

#[test]
fn a_qp_connected_to_itself_reports_its_request_before_the_flush() {
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    let lid = a.ctx.query_port(1).unwrap().lid();
    let path = Path::new(1, Address::lid(lid), a.qp.qp_num(), 0x10, 0x10);
    connect::connect(&a.qp, &path).unwrap();
    let mut r = recv_wr(50, &mut []);
    post_recv(&a, &mut r);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &a.mr, 64);
    // SAFETY: plain integer union member.
    unsafe { w.wr.rdma.rkey ^= 0x0f00 };
    post(&a, &mut w);
    assert_eq!(
        statuses(&poll_n(&a.cq, 2)),
        [(1, WcStatus::RemAccessErr), (50, WcStatus::WrFlushErr)]
    );
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    assert_eq!(
        async_events(&a.ctx),
        [(QP_ACCESS_ERR, a.qp.as_raw() as usize)]
    );
}
