//! Scatter/gather, inline data, unsignaled WRs, chains and `bad_wr`.

use std::ptr::null_mut;

use vqp_host::sys::*;

use crate::common::*;
use crate::ops;

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
