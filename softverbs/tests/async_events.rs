//! vqp-host's typed asynchronous events over softverbs: a port going down and up, a
//! responder QP failing, an SRQ running low, the device failing — each reported once,
//! to the context of the device it happened on, with its subject; the descriptor is
//! pollable.
//!
//! One test: the link control is process-wide, so the scenarios run in sequence.

mod common;

use std::time::Duration;

use common::*;
use vqp_host::sys::*;
use vqp_host::{AsyncEvent, AsyncEventKind, EventSubject, QpInit, WcStatus};

const NOW: Option<Duration> = Some(Duration::ZERO);

#[test]
fn events_are_typed_and_reach_the_context_of_their_device() {
    let v = verbs();
    let (a, b) = pair(&v);
    assert_eq!(a.ctx.next_async_event(NOW).unwrap(), None, "nothing yet");
    assert!(!readable(a.ctx.async_fd()));

    // A port going down, then up: soft0's contexts hear both, soft1's nothing.
    vqp_softverbs::set_link(0, false).unwrap();
    assert!(readable(a.ctx.async_fd()), "the descriptor is pollable");
    vqp_softverbs::set_link(0, true).unwrap();
    let port = |kind| AsyncEvent {
        kind,
        subject: EventSubject::Port(1),
    };
    assert_eq!(
        a.ctx.pending_async_events().unwrap(),
        [
            port(AsyncEventKind::PortErr),
            port(AsyncEventKind::PortActive)
        ]
    );
    assert_eq!(b.ctx.pending_async_events().unwrap(), []);

    // Automatic path migration asked for: not supported, reported as a failed
    // migration of that QP, which stays on its path (and in RTS).
    let mig = ibv_qp_attr {
        path_mig_state: IBV_MIG_ARMED,
        ..Default::default()
    };
    a.qp.modify(&mig, vqp_host::QpAttrMask::from_bits(IBV_QP_PATH_MIG_STATE))
        .unwrap();
    assert_eq!(
        a.ctx.pending_async_events().unwrap(),
        [AsyncEvent {
            kind: AsyncEventKind::PathMigErr,
            subject: EventSubject::Qp {
                qp_num: a.qp.qp_num(),
                handle: a.qp.as_raw() as usize
            }
        }]
    );
    let q =
        a.qp.query(vqp_host::QpAttrMask::from_bits(IBV_QP_PATH_MIG_STATE))
            .unwrap();
    assert_eq!(q.path_mig_state, IBV_MIG_MIGRATED);
    assert_eq!(a.qp.state().unwrap(), vqp_host::QpState::Rts);

    // A responder QP refusing a remote access: its own context is told, with its number.
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey() ^ 0x100,
    };
    post(&a, &mut wr);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::RemAccessErr);
    let ev = b
        .ctx
        .next_async_event(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("the responder's event");
    assert_eq!(ev.kind, AsyncEventKind::QpAccessErr);
    assert!(ev.kind.fails_qp());
    assert_eq!(
        ev.subject,
        EventSubject::Qp {
            qp_num: b.qp.qp_num(),
            handle: b.qp.as_raw() as usize
        }
    );
    assert_eq!(
        ev.to_string(),
        format!("QpAccessErr on QP {:#x}", b.qp.qp_num())
    );
    assert_eq!(a.ctx.pending_async_events().unwrap(), []);

    // An SRQ falling below its limit.
    let srq = b.pd.create_srq(4, 1).unwrap();
    let mut init = QpInit::rc(&b.cq, Opts::default().cap);
    init.srq = Some(&srq);
    let _qp = b.pd.create_qp(&init).unwrap();
    for id in 0..2 {
        let mut sge = b.mr.sge(0, 8).unwrap();
        let mut r = recv_wr(id, std::slice::from_mut(&mut sge));
        // SAFETY: the WR and SGE live across the call; the buffer is `b.mr`'s.
        unsafe { srq.post_recv(&mut r) }.unwrap();
    }
    srq.arm_limit(3).unwrap();
    assert_eq!(
        b.ctx.pending_async_events().unwrap(),
        [AsyncEvent {
            kind: AsyncEventKind::SrqLimitReached,
            subject: EventSubject::Srq(srq.as_raw() as usize)
        }],
        "armed below the current level: at once"
    );

    // The device failing: its contexts hear it, its QPs are in error.
    vqp_softverbs::fail_device(1).unwrap();
    let events = b.ctx.pending_async_events().unwrap();
    vqp_softverbs::set_link(1, true).unwrap();
    assert!(
        events.contains(&AsyncEvent {
            kind: AsyncEventKind::DeviceFatal,
            subject: EventSubject::Device
        }),
        "{events:?}"
    );
    assert_eq!(b.qp.state().unwrap(), vqp_host::QpState::Err);
    assert_eq!(a.ctx.pending_async_events().unwrap(), []);
}
