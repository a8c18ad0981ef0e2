//! Calls a careless program makes, through the C ABI functions: destroying an object
//! twice, a pointer of the wrong kind, too many SGEs, inline data over the limit, a
//! negative `num_sge`, `poll_cq` with a negative count. Each gets a definite answer and
//! leaves the provider's bookkeeping as it was.
//!
//! Where the specification leaves the answer open, the provider answers as rdma-core's
//! mlx5 provider does (ConnectX being the hardware it stands in for).
//!
//! Tests here run in parallel in one process, each on its own objects.

mod common;

use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use vqp_host::sys::*;
use vqp_host::{WcOpcode, WcStatus};
use vqp_softverbs::{
    ibv_alloc_pd, ibv_close_device, ibv_create_comp_channel, ibv_create_cq, ibv_create_qp,
    ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_destroy_qp,
    ibv_free_device_list, ibv_get_device_list, ibv_get_device_name, ibv_open_device, ibv_reg_mr,
};

/// A context on `soft0` opened through the C functions.
fn open() -> *mut ibv_context {
    // SAFETY: a null count pointer is allowed; the list is freed below.
    let list = unsafe { ibv_get_device_list(null_mut()) };
    assert!(!list.is_null());
    // SAFETY: the list holds at least the default two devices.
    let ctx = unsafe { ibv_open_device(*list) };
    // SAFETY: from `ibv_get_device_list`, freed once; the devices outlive it.
    unsafe { ibv_free_device_list(list) };
    assert!(!ctx.is_null());
    ctx
}

fn cq(ctx: *mut ibv_context, channel: *mut ibv_comp_channel) -> *mut ibv_cq {
    // SAFETY: an open context; `channel` is null or live.
    let cq = unsafe { ibv_create_cq(ctx, 16, null_mut(), channel, 0) };
    assert!(!cq.is_null());
    cq
}

fn qp(pd: *mut ibv_pd, cq: *mut ibv_cq) -> *mut ibv_qp {
    let mut init = ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    // SAFETY: a live PD and CQ; `init` is readable and writable.
    let qp = unsafe { ibv_create_qp(pd, &mut init) };
    assert!(!qp.is_null());
    qp
}

#[test]
fn destroying_a_qp_twice_is_einval_and_keeps_the_counts() {
    let ctx = open();
    // SAFETY: every pointer below comes from the function that creates it and is
    // passed back while live, except the second destroys, which are the test.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let cq = cq(ctx, null_mut());
        let (q1, q2) = (qp(pd, cq), qp(pd, cq));
        assert_eq!(ibv_destroy_qp(q1), 0);
        assert_eq!(ibv_destroy_qp(q1), libc::EINVAL, "second destroy");
        // The PD and CQ counted q1 once: they are still busy with q2 only.
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);
        assert_eq!(ibv_destroy_cq(cq), libc::EBUSY);
        assert_eq!(ibv_destroy_qp(q2), 0);
        assert_eq!(ibv_destroy_qp(q2), libc::EINVAL);
        assert_eq!(ibv_destroy_cq(cq), 0, "no QP left on the CQ");
        assert_eq!(ibv_dealloc_pd(pd), 0, "no QP left in the PD");
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn destroying_a_cq_twice_is_einval_and_keeps_the_channel_count() {
    let ctx = open();
    // SAFETY: as above.
    unsafe {
        let channel = ibv_create_comp_channel(ctx);
        assert!(!channel.is_null());
        let (c1, c2) = (cq(ctx, channel), cq(ctx, channel));
        assert_eq!(ibv_destroy_cq(c1), 0);
        assert_eq!(ibv_destroy_cq(c1), libc::EINVAL, "second destroy");
        assert_eq!(ibv_destroy_comp_channel(channel), libc::EBUSY, "c2 uses it");
        assert_eq!(ibv_destroy_cq(c2), 0);
        assert_eq!(ibv_destroy_comp_channel(channel), 0);
        assert_eq!(ibv_destroy_comp_channel(channel), libc::EINVAL);
        // A destroyed channel is refused when a CQ names it.
        assert!(ibv_create_cq(ctx, 16, null_mut(), channel, 0).is_null());
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn deregistering_an_mr_twice_is_einval_and_keeps_the_pd_count() {
    let ctx = open();
    let mut buf = vec![0u8; 4096];
    // SAFETY: as above; the buffer outlives both registrations.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let access = IBV_ACCESS_LOCAL_WRITE as i32;
        let m1 = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), 2048, access);
        let m2 = ibv_reg_mr(pd, buf.as_mut_ptr().add(2048).cast(), 2048, access);
        assert!(!m1.is_null() && !m2.is_null());
        assert_eq!(ibv_dereg_mr(m1), 0);
        assert_eq!(ibv_dereg_mr(m1), libc::EINVAL, "second dereg");
        // The PD counted m1 once: it is still busy with m2.
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);
        assert_eq!(ibv_dereg_mr(m2), 0);
        assert_eq!(ibv_dereg_mr(m2), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn a_pd_context_or_pointer_of_the_wrong_kind_is_einval() {
    let ctx = open();
    // SAFETY: as above; the wrong-kind and stale pointers are the test.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let cq = cq(ctx, null_mut());
        assert_eq!(ibv_destroy_qp(cq.cast()), libc::EINVAL, "a CQ is not a QP");
        assert_eq!(ibv_dereg_mr(pd.cast()), libc::EINVAL, "a PD is not an MR");
        assert_eq!(ibv_destroy_cq(pd.cast()), libc::EINVAL, "a PD is not a CQ");
        let mut not_an_object = [0u64; 64];
        assert_eq!(
            ibv_destroy_qp(not_an_object.as_mut_ptr().cast()),
            libc::EINVAL
        );
        assert!(ibv_get_device_name(not_an_object.as_mut_ptr().cast()).is_null());
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_dealloc_pd(pd), libc::EINVAL, "second dealloc");
        assert_eq!(ibv_close_device(ctx), 0);
        assert_eq!(ibv_close_device(ctx), libc::EINVAL, "second close");
        assert!(ibv_alloc_pd(ctx).is_null(), "a closed context");
    }
}

fn ops(s: &Side) -> ibv_context_ops {
    // SAFETY: a live context; the provider fills `ops` at open and never changes it.
    unsafe { (*s.ctx.as_raw()).ops }
}

fn statuses(wcs: &[vqp_host::Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id(), w.status())).collect()
}

#[test]
fn more_sges_than_max_send_sge_is_enomem_inline_or_not() {
    let v = verbs();
    let (a, b) = pair(&v); // max_send_sge 4
    let post_send = ops(&a).post_send.expect("post_send");
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w1 = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w1, &b.mr, 0);
    let mut five = [a.mr.sge(0, 1).unwrap(); 5];
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, &mut five);
    rdma(&mut w2, &b.mr, 0);
    w1.next = &mut w2;
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: a live QP; a valid chain over live buffers; a writable `bad`.
    let rc = unsafe { post_send(a.qp.as_raw(), &mut w1, &mut bad) };
    assert_eq!(
        (rc, bad),
        (libc::ENOMEM, &mut w2 as *mut _),
        "mlx5: num_sge > max_gs is ENOMEM; the first WR was posted"
    );
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::Success)]);

    // Inline data does not lift the SGE limit.
    w2.send_flags |= IBV_SEND_INLINE;
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: as above, a single WR.
    let rc = unsafe { post_send(a.qp.as_raw(), &mut w2, &mut bad) };
    assert_eq!((rc, bad), (libc::ENOMEM, &mut w2 as *mut _));
    assert!(drain(&a.cq, 20).is_empty(), "nothing refused was queued");
    assert_eq!(a.qp.state().unwrap(), vqp_host::QpState::Rts);

    // Receives over max_recv_sge stay EINVAL, as in mlx5_post_recv.
    let mut rs = [b.mr.sge(0, 8).unwrap(); 5];
    let mut r = recv_wr(3, &mut rs);
    let post_recv = ops(&b).post_recv.expect("post_recv");
    let mut bad: *mut ibv_recv_wr = null_mut();
    // SAFETY: a live QP; a valid WR; a writable `bad`.
    let rc = unsafe { post_recv(b.qp.as_raw(), &mut r, &mut bad) };
    assert_eq!((rc, bad), (libc::EINVAL, &mut r as *mut _));
}

#[test]
fn inline_data_over_max_inline_data_is_enomem() {
    let v = verbs();
    let (a, b) = pair(&v);
    let max = a.qp.cap().max_inline_data as usize;
    let data = vec![0x5au8; max + 1];
    let post_send = ops(&a).post_send.expect("post_send");
    // Over the limit in two SGEs (neither over it alone): ENOMEM, nothing posted.
    let mut sges = [
        ibv_sge {
            addr: data.as_ptr() as u64,
            length: (max / 2) as u32,
            lkey: 0,
        },
        ibv_sge {
            addr: data.as_ptr() as u64 + (max / 2) as u64,
            length: (max + 1 - max / 2) as u32,
            lkey: 0,
        },
    ];
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, &mut sges);
    w.send_flags |= IBV_SEND_INLINE;
    rdma(&mut w, &b.mr, 0);
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: a live QP; a valid WR over a live buffer; a writable `bad`.
    let rc = unsafe { post_send(a.qp.as_raw(), &mut w, &mut bad) };
    assert_eq!(
        (rc, bad),
        (libc::ENOMEM, &mut w as *mut _),
        "mlx5's set_data_inl_seg"
    );
    assert!(drain(&a.cq, 20).is_empty());
    assert!(bytes(&b)[..=max].iter().all(|&x| x == 0), "nothing written");

    // Exactly the limit is taken.
    sges[1].length -= 1;
    let mut w = send_wr(2, IBV_WR_RDMA_WRITE, &mut sges);
    w.send_flags |= IBV_SEND_INLINE;
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(2, WcStatus::Success)]);
    assert!(bytes(&b)[..max].iter().all(|&x| x == 0x5a));
    assert_eq!(bytes(&b)[max], 0);
}

#[test]
fn a_negative_num_sge_posts_without_data_as_mlx5_does() {
    let v = verbs();
    let (mut a, b) = pair(&v);
    fill(&mut a, 3);
    // A WRITE whose num_sge is -1 (its sg_list, valid, is ignored): posted, completes,
    // moves nothing.
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    w.num_sge = -1;
    rdma(&mut w, &b.mr, 0);
    let post_send = ops(&a).post_send.expect("post_send");
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: a live QP; a valid WR; a writable `bad`.
    let rc = unsafe { post_send(a.qp.as_raw(), &mut w, &mut bad) };
    assert_eq!(rc, 0, "mlx5 compares the signed count and gathers nothing");
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::Success)]);
    assert!(bytes(&b)[..64].iter().all(|&x| x == 0), "nothing written");

    // A receive with num_sge -1 takes a zero-length SEND (also num_sge -1).
    let mut rs = b.mr.sge(0, 64).unwrap();
    let mut r = recv_wr(7, std::slice::from_mut(&mut rs));
    r.num_sge = -1;
    let post_recv = ops(&b).post_recv.expect("post_recv");
    let mut rbad: *mut ibv_recv_wr = null_mut();
    // SAFETY: as above.
    let rc = unsafe { post_recv(b.qp.as_raw(), &mut r, &mut rbad) };
    assert_eq!(rc, 0);
    let mut w = send_wr(2, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    w.num_sge = -1;
    // SAFETY: as above.
    let rc = unsafe { post_send(a.qp.as_raw(), &mut w, &mut bad) };
    assert_eq!(rc, 0);
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(2, WcStatus::Success)]);
    let got = poll_n(&b.cq, 1);
    assert_eq!(statuses(&got), [(7, WcStatus::Success)]);
    assert_eq!((got[0].opcode(), got[0].byte_len()), (WcOpcode::Recv, 0));
    assert!(bytes(&b)[..64].iter().all(|&x| x == 0), "nothing scattered");
}

#[test]
fn poll_cq_with_zero_or_negative_entries_returns_0_and_takes_nothing() {
    let v = verbs();
    let (a, b) = pair(&v);
    let poll_cq = ops(&a).poll_cq.expect("poll_cq");
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &b.mr, 0);
    post(&a, &mut w);
    // Whether or not the completion is there yet, a count of -1 or 0 polls nothing
    // (mlx5's poll_cq loop never runs) and never reports an error.
    for _ in 0..50 {
        for n in [-1, 0, i32::MIN] {
            // SAFETY: a live CQ; with no entries asked for, `wc` is not written.
            let rc = unsafe { poll_cq(a.cq.as_raw(), n, null_mut()) };
            assert_eq!(rc, 0, "poll_cq({n})");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(statuses(&poll_n(&a.cq, 1)), [(1, WcStatus::Success)]);
}
