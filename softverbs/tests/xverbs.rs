//! The extended verbs, reached as verbs.h's inline wrappers reach them: through the
//! `verbs_context` in front of every context (`verbs_get_ctx_op`), the `ibv_cq_ex` of
//! `ibv_create_cq_ex` and the `ibv_qp_ex` of `ibv_create_qp_ex` (the helpers in
//! `xverbs_support` are the inline functions of `<infiniband/verbs.h>`). Across two
//! processes: `xproc.rs`.
//!
//! Tests here run in parallel in one process, each on its own contexts.

mod common;
mod xverbs_support;

use core::ffi::c_int;
use std::ptr::null_mut;
use std::time::Duration;

use common::verbs;
use vqp_host::sys::*;
use vqp_host::{AccessFlags, Context};
use vqp_softverbs as sv;
use xverbs_support::*;

#[test]
fn every_context_is_an_extended_verbs_context() {
    let v = verbs();
    let ctx = Context::open(&v, Some("soft0")).unwrap();
    let x = vctx(ctx.as_raw());
    assert!(x.query_device_ex.is_some() && x.query_port.is_some());
    assert!(x.create_cq_ex.is_some() && x.create_qp_ex.is_some());
    assert!(x.alloc_td.is_some() && x.alloc_parent_domain.is_some());
    assert!(x.query_rt_values.is_some());
    // What the provider does not have stays null (verbs.h: EOPNOTSUPP).
    assert!(x.create_flow_action_esp.is_none() && x.open_xrcd.is_none());
    // The legacy verbs still work through the same context.
    assert_eq!(ctx.query_device().unwrap().raw().phys_port_cnt, 1);
}

#[test]
fn query_device_ex_extends_query_device_and_query_port_is_sized() {
    let v = verbs();
    let ctx = Context::open(&v, Some("soft1")).unwrap();
    let c = ctx.as_raw();
    let a = query_device_ex(c, None).unwrap();
    let legacy = ctx.query_device().unwrap();
    assert_eq!(a.orig_attr.node_guid, legacy.raw().node_guid);
    assert_eq!(a.orig_attr.max_qp_wr, legacy.raw().max_qp_wr);
    assert_eq!(a.phys_port_cnt_ex, 1);
    assert_eq!(a.hca_core_clock, 1_000_000, "a 1 GHz (nanosecond) clock");
    assert_eq!(a.completion_timestamp_mask, u64::MAX);
    assert_eq!(
        a.device_cap_flags_ex,
        u64::from(legacy.raw().device_cap_flags)
    );
    assert_eq!(
        a.odp_caps.general_caps,
        1 | 2, // IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT
        "explicit and implicit on-demand paging"
    );
    assert_eq!(query_device_ex(c, Some(1)).err(), Some(libc::EINVAL));
    // A caller with an older, shorter struct gets its prefix.
    let f = vctx(c).query_device_ex.unwrap();
    let mut short = ibv_device_attr_ex {
        phys_port_cnt_ex: 77,
        ..Default::default()
    };
    // SAFETY: a live context; the buffer is larger than the size passed.
    let rc = unsafe {
        f(
            c,
            core::ptr::null(),
            &mut short,
            core::mem::size_of::<ibv_device_attr>(),
        )
    };
    assert_eq!((rc, short.phys_port_cnt_ex), (0, 77));
    // SAFETY: as above, a size below `struct ibv_device_attr`.
    assert_eq!(
        unsafe { f(c, core::ptr::null(), &mut short, 8) },
        libc::EINVAL
    );

    let qp = vctx(c).query_port.unwrap();
    let mut p = ibv_port_attr::default();
    // SAFETY: a live context and a writable port attribute struct of that size.
    assert_eq!(unsafe { qp(c, 1, &mut p, core::mem::size_of_val(&p)) }, 0);
    assert_eq!(p.lid, lid(&ctx));
    assert_eq!(p.state, IBV_PORT_ACTIVE);
    // SAFETY: as above.
    assert_eq!(
        unsafe { qp(c, 2, &mut p, core::mem::size_of_val(&p)) },
        libc::EINVAL
    );

    let rt = vctx(c).query_rt_values.unwrap();
    let mut val = ibv_values_ex {
        comp_mask: IBV_VALUES_MASK_RAW_CLOCK,
        raw_clock: libc::timespec {
            tv_sec: 9,
            tv_nsec: 0,
        },
    };
    // SAFETY: a live context and readable, writable values.
    assert_eq!(unsafe { rt(c, &mut val) }, 0);
    let first = val.raw_clock.tv_nsec as u64;
    assert_eq!(
        (val.comp_mask, val.raw_clock.tv_sec),
        (IBV_VALUES_MASK_RAW_CLOCK, 0)
    );
    std::thread::sleep(Duration::from_millis(2));
    // SAFETY: as above.
    assert_eq!(unsafe { rt(c, &mut val) }, 0);
    assert!(val.raw_clock.tv_nsec as u64 >= first + 2_000_000);
    val.comp_mask = 2;
    // SAFETY: as above.
    assert_eq!(unsafe { rt(c, &mut val) }, libc::EINVAL);
}

#[test]
fn every_opcode_posts_through_the_wr_api_and_completions_read_back_stamped() {
    let flags = IBV_WC_STANDARD_FLAGS
        | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
        | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    let (a, b) = x_pair(IBV_QPT_RC, flags);
    for (i, x) in buf(&a).iter_mut().enumerate() {
        *x = i as u8;
    }
    buf(&b)[..4096].fill(0);
    post_recv(&b, 100, 0, 256);
    post_recv(&b, 101, 256, 256);
    post_recv(&b, 102, 512, 256);
    let w = Wr(qpx(a.qp));
    assert!(!w.0.is_null());
    let t0 = now_raw();
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions; the buffers are registered.
    unsafe {
        w.q().wr_send.unwrap()(w.0);
        w.sge(&a.mr, 0, 40);
        w.id(2, IBV_SEND_SIGNALED);
        w.q().wr_send_imm.unwrap()(w.0, 0xabcd_0123u32.to_be());
        let inline = *b"inline bytes!";
        w.q().wr_set_inline_data.unwrap()(w.0, inline.as_ptr() as *mut _, inline.len());
        w.id(3, IBV_SEND_SIGNALED);
        w.q().wr_rdma_write.unwrap()(w.0, b.mr.rkey(), b.mr.addr() + 1024);
        let list = [a.mr.sge(100, 10).unwrap(), a.mr.sge(200, 10).unwrap()];
        w.q().wr_set_sge_list.unwrap()(w.0, 2, list.as_ptr());
        w.id(4, IBV_SEND_SIGNALED);
        w.q().wr_rdma_write_imm.unwrap()(w.0, b.mr.rkey(), b.mr.addr() + 2048, 7u32.to_be());
        let pieces = [
            ibv_data_buf {
                addr: b"ab".as_ptr() as *mut _,
                length: 2,
            },
            ibv_data_buf {
                addr: b"cde".as_ptr() as *mut _,
                length: 3,
            },
        ];
        w.q().wr_set_inline_data_list.unwrap()(w.0, 2, pieces.as_ptr());
    }
    assert_eq!(w.complete(), 0);
    let got = poll_ex(a.cq, 4);
    let rcv = poll_ex(b.cq, 3);
    let t1 = now_raw();
    let ids: Vec<_> = got.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        ids,
        [
            (1, IBV_WC_SUCCESS, IBV_WC_SEND),
            (2, IBV_WC_SUCCESS, IBV_WC_SEND),
            (3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE),
            (4, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE),
        ]
    );
    let r: Vec<_> = rcv
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm))
        .collect();
    assert_eq!(
        r,
        [
            (100, IBV_WC_RECV, 40, 0),
            (101, IBV_WC_RECV, 13, 0xabcd_0123),
            (102, IBV_WC_RECV_RDMA_WITH_IMM, 5, 7),
        ]
    );
    assert_eq!(rcv[1].wc_flags & IBV_WC_WITH_IMM, IBV_WC_WITH_IMM);
    assert_eq!(rcv[0].qp_num, qpn(b.qp));
    let bb = buf(&b);
    assert_eq!(&bb[..40], &(0..40).collect::<Vec<u8>>()[..]);
    assert_eq!(&bb[256..269], b"inline bytes!");
    assert_eq!(&bb[1024..1034], &(100..110).collect::<Vec<u8>>()[..]);
    assert_eq!(&bb[1034..1044], &(200..210).collect::<Vec<u8>>()[..]);
    assert_eq!(&bb[2048..2053], b"abcde");
    // Timestamps: the device clock between the two readings, in completion order.
    for c in got.iter().chain(&rcv) {
        assert!(t0 <= c.ts && c.ts <= t1, "{} not in [{t0}, {t1}]", c.ts);
        let wall = wall_ns();
        assert!(c.wall <= wall && wall - c.wall < 5_000_000_000);
    }
    assert!(got.windows(2).all(|p| p[0].ts <= p[1].ts));

    // READ and the two atomics.
    bb[4096..4104].copy_from_slice(&10u64.to_ne_bytes());
    bb[4104..4112].copy_from_slice(&5u64.to_ne_bytes());
    w.start();
    w.id(5, IBV_SEND_SIGNALED);
    // SAFETY: as above.
    unsafe {
        w.q().wr_rdma_read.unwrap()(w.0, b.mr.rkey(), b.mr.addr() + 1024);
        w.sge(&a.mr, 8192, 20);
        w.id(6, IBV_SEND_SIGNALED);
        w.q().wr_atomic_fetch_add.unwrap()(w.0, b.mr.rkey(), b.mr.addr() + 4096, 32);
        w.sge(&a.mr, 9000, 8);
        w.id(7, IBV_SEND_SIGNALED);
        w.q().wr_atomic_cmp_swp.unwrap()(w.0, b.mr.rkey(), b.mr.addr() + 4104, 5, 99);
        w.sge(&a.mr, 9008, 8);
    }
    assert_eq!(w.complete(), 0);
    let got = poll_ex(a.cq, 3);
    let ops: Vec<_> = got.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        ops,
        [
            (5, IBV_WC_SUCCESS, IBV_WC_RDMA_READ),
            (6, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD),
            (7, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP),
        ]
    );
    let ab = buf(&a);
    assert_eq!(&ab[8192..8202], &(100..110).collect::<Vec<u8>>()[..]);
    assert_eq!(u64::from_ne_bytes(ab[9000..9008].try_into().unwrap()), 10);
    assert_eq!(u64::from_ne_bytes(ab[9008..9016].try_into().unwrap()), 5);
    let bb = buf(&b);
    assert_eq!(u64::from_ne_bytes(bb[4096..4104].try_into().unwrap()), 42);
    assert_eq!(u64::from_ne_bytes(bb[4104..4112].try_into().unwrap()), 99);
}

fn now_raw() -> u64 {
    clock(libc::CLOCK_MONOTONIC_RAW)
}

fn wall_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a writable timespec.
    assert_eq!(unsafe { libc::clock_gettime(id, &mut ts) }, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn a_batch_posts_all_or_nothing_and_abort_posts_nothing() {
    let (a, b) = x_pair(IBV_QPT_RC, IBV_WC_STANDARD_FLAGS);
    let w = Wr(qpx(a.qp));
    let write = |id: u64| {
        w.id(id, IBV_SEND_SIGNALED);
        // SAFETY: the QP's own function.
        unsafe { w.q().wr_rdma_write.unwrap()(w.0, b.mr.rkey(), b.mr.addr()) };
        w.sge(&a.mr, 0, 8);
    };
    // Abort: nothing posted.
    w.start();
    write(1);
    write(2);
    w.abort();
    assert!(empty(a.cq), "an aborted batch posts nothing");
    // One bad request (inline data over max_inline_data): ENOMEM, as ibv_post_send,
    // and the good ones before and after it are not posted either.
    let big = [0u8; 65];
    w.start();
    write(3);
    w.id(4, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions; `big` readable.
    unsafe {
        w.q().wr_send.unwrap()(w.0);
        w.q().wr_set_inline_data.unwrap()(w.0, big.as_ptr() as *mut _, big.len());
    }
    write(5);
    assert_eq!(w.complete(), libc::ENOMEM);
    // Too many SGEs: ENOMEM; a READ with inline data: EINVAL; as ibv_post_send.
    let list = [a.mr.sge(0, 1).unwrap(); 5];
    w.start();
    write(6);
    // SAFETY: as above; `list` holds 5 entries.
    unsafe { w.q().wr_set_sge_list.unwrap()(w.0, 5, list.as_ptr()) };
    assert_eq!(w.complete(), libc::ENOMEM);
    w.start();
    w.id(7, IBV_SEND_SIGNALED);
    // SAFETY: as above.
    unsafe {
        w.q().wr_rdma_read.unwrap()(w.0, b.mr.rkey(), b.mr.addr());
        w.q().wr_set_inline_data.unwrap()(w.0, big.as_ptr() as *mut _, 4);
    }
    assert_eq!(w.complete(), libc::EINVAL);
    // A batch larger than the send queue's room: ENOMEM, nothing posted.
    w.start();
    for id in 10..27 {
        write(id);
    }
    assert_eq!(w.complete(), libc::ENOMEM);
    assert!(empty(a.cq), "no failed batch posted anything");
    // A whole queue's worth goes.
    w.start();
    for id in 40..56 {
        write(id);
    }
    assert_eq!(w.complete(), 0);
    let ids: Vec<u64> = poll_ex(a.cq, 16).iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (40..56).collect::<Vec<_>>());
}

#[test]
fn a_batch_outside_rts_is_refused_and_a_qp_without_send_ops_is_not_extended() {
    let s = x_side("soft0", IBV_QPT_RC, 0, ALL_OPS);
    let w = Wr(qpx(s.qp));
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions.
    unsafe { w.q().wr_send.unwrap()(w.0) };
    w.sge(&s.mr, 0, 8);
    assert_eq!(w.complete(), libc::EINVAL, "RESET: as ibv_post_send");
    // A setter before any operation fails the batch.
    w.start();
    w.sge(&s.mr, 0, 8);
    assert_eq!(w.complete(), libc::EINVAL);

    let plain = x_side("soft0", IBV_QPT_RC, 0, 0);
    assert!(qpx(plain.qp).is_null());
    assert_eq!(errno(), libc::EOPNOTSUPP);
    // Send ops the QP type does not have: EOPNOTSUPP; none at all: EINVAL.
    let mut a = qp_attr_ex(s.pd.as_raw(), s.cq, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE);
    assert_eq!(
        create_qp_ex(s.ctx.as_raw(), &mut a).unwrap_err(),
        libc::EOPNOTSUPP
    );
    let mut a = qp_attr_ex(s.pd.as_raw(), s.cq, IBV_QPT_RC, 0);
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    assert_eq!(
        create_qp_ex(s.ctx.as_raw(), &mut a).unwrap_err(),
        libc::EINVAL
    );
    let mut a = qp_attr_ex(s.pd.as_raw(), s.cq, IBV_QPT_RC, 0);
    a.comp_mask = 0;
    assert_eq!(
        create_qp_ex(s.ctx.as_raw(), &mut a).unwrap_err(),
        libc::EINVAL
    );
    let mut a = qp_attr_ex(s.pd.as_raw(), s.cq, IBV_QPT_RC, 0);
    a.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    assert_eq!(
        create_qp_ex(s.ctx.as_raw(), &mut a).unwrap_err(),
        libc::EOPNOTSUPP
    );
}

#[test]
fn ud_and_uc_post_through_the_wr_api() {
    let (a, b) = x_pair(IBV_QPT_UC, IBV_WC_STANDARD_FLAGS);
    post_recv(&b, 9, 0, 64);
    let w = Wr(qpx(a.qp));
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions.
    unsafe { w.q().wr_send.unwrap()(w.0) };
    w.sge(&a.mr, 0, 16);
    assert_eq!(w.complete(), 0);
    assert_eq!(poll_ex(a.cq, 1)[0].status, IBV_WC_SUCCESS);
    assert_eq!(poll_ex(b.cq, 1)[0].byte_len, 16);
    // A READ on UC: EINVAL at complete, as ibv_post_send refuses it.
    w.start();
    // SAFETY: as above.
    unsafe { w.q().wr_rdma_read.unwrap()(w.0, b.mr.rkey(), b.mr.addr()) };
    w.sge(&a.mr, 0, 16);
    assert_eq!(w.complete(), libc::EINVAL);

    let ua = x_side(
        "soft0",
        IBV_QPT_UD,
        IBV_WC_STANDARD_FLAGS,
        ops_of(IBV_QPT_UD),
    );
    let ub = x_side(
        "soft1",
        IBV_QPT_UD,
        IBV_WC_STANDARD_FLAGS,
        ops_of(IBV_QPT_UD),
    );
    connect(ua.qp, 0, 0, IBV_QPT_UD);
    connect(ub.qp, 0, 0, IBV_QPT_UD);
    post_recv(&ub, 5, 0, 40 + 64);
    let ah = common::ah_for(&ua.pd, lid(&ub.ctx), None);
    let w = Wr(qpx(ua.qp));
    // Without a destination: EINVAL, as a UD send needs one.
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions; `ah` a live address handle.
    unsafe { w.q().wr_send_imm.unwrap()(w.0, 3u32.to_be()) };
    w.sge(&ua.mr, 0, 32);
    assert_eq!(w.complete(), libc::EINVAL);
    w.start();
    w.id(2, IBV_SEND_SIGNALED);
    // SAFETY: as above.
    unsafe {
        w.q().wr_send_imm.unwrap()(w.0, 3u32.to_be());
        w.q().wr_set_ud_addr.unwrap()(w.0, ah, qpn(ub.qp), 0x11);
    }
    w.sge(&ua.mr, 0, 32);
    assert_eq!(w.complete(), 0);
    assert_eq!(poll_ex(ua.cq, 1)[0].status, IBV_WC_SUCCESS);
    let r = poll_ex(ub.cq, 1)[0];
    assert_eq!((r.wr_id, r.byte_len, r.imm), (5, 32 + 40, 3));
    // SAFETY: a live AH no longer used.
    assert_eq!(unsafe { sv::ibv_destroy_ah(ah) }, 0);
}

#[test]
fn an_extended_cq_is_a_cq_with_channels_and_legacy_polling() {
    let v = verbs();
    let ctx = Context::open(&v, Some("soft0")).unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let mut attr = cq_attr(8, IBV_WC_STANDARD_FLAGS);
    attr.channel = ch.as_raw();
    attr.cq_context = 0x55 as *mut _;
    let cq = create_cq_ex(ctx.as_raw(), &mut attr).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register_buffer(4096, AccessFlags::ALL_REMOTE).unwrap();
    let mut a = qp_attr_ex(pd.as_raw(), cq, IBV_QPT_RC, ALL_OPS);
    let qp = create_qp_ex(ctx.as_raw(), &mut a).unwrap();
    connect(qp, lid(&ctx), qpn(qp), IBV_QPT_RC); // to itself
    let legacy: *mut ibv_cq = cq.cast(); // ibv_cq_ex_to_cq
                                         // SAFETY: the data-path op of the CQ's context, as verbs.h's ibv_req_notify_cq.
    let rc = unsafe { (*(*legacy).context).ops.req_notify_cq.unwrap()(legacy, 0) };
    assert_eq!(rc, 0);
    let w = Wr(qpx(qp));
    w.start();
    w.id(77, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own function.
    unsafe { w.q().wr_rdma_write.unwrap()(w.0, mr.rkey(), mr.addr() + 64) };
    w.sge(&mr, 0, 8);
    assert_eq!(w.complete(), 0);
    let (mut got, mut gctx) = (null_mut(), null_mut());
    // SAFETY: a live channel; writable out-pointers. Blocks until the event.
    assert_eq!(
        unsafe { sv::ibv_get_cq_event(ch.as_raw(), &mut got, &mut gctx) },
        0
    );
    assert_eq!((got, gctx as usize), (legacy, 0x55));
    // SAFETY: the event's CQ.
    unsafe { sv::ibv_ack_cq_events(legacy, 1) };
    // Polled the legacy way.
    let mut wc = [ibv_wc::default(); 2];
    let n = loop {
        // SAFETY: as above; room for 2.
        let n = unsafe { (*(*legacy).context).ops.poll_cq.unwrap()(legacy, 2, wc.as_mut_ptr()) };
        if n != 0 {
            break n;
        }
    };
    assert_eq!((n, wc[0].wr_id, wc[0].opcode), (1, 77, IBV_WC_RDMA_WRITE));
    // Flags it cannot honour, and bad attributes.
    let mut bad = cq_attr(8, IBV_WC_EX_WITH_CVLAN);
    assert_eq!(
        create_cq_ex(ctx.as_raw(), &mut bad).unwrap_err(),
        libc::EOPNOTSUPP
    );
    let mut bad = cq_attr(0, 0);
    assert_eq!(
        create_cq_ex(ctx.as_raw(), &mut bad).unwrap_err(),
        libc::EINVAL
    );
    let mut bad = cq_attr(8, 0);
    bad.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    bad.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    assert_eq!(
        create_cq_ex(ctx.as_raw(), &mut bad).unwrap_err(),
        libc::EOPNOTSUPP
    );
    bad.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    bad.parent_domain = pd.as_raw();
    assert_eq!(
        create_cq_ex(ctx.as_raw(), &mut bad).unwrap_err(),
        libc::EINVAL,
        "not a parent domain"
    );
    // SAFETY: live objects no longer used.
    unsafe {
        assert_eq!(sv::ibv_destroy_qp(qp), 0);
        assert_eq!(sv::ibv_destroy_cq(legacy), 0);
    }
}

#[test]
fn a_parent_domain_goes_where_a_pd_goes_and_holds_its_domains() {
    let v = verbs();
    let ctx = Context::open(&v, Some("soft1")).unwrap();
    let c = ctx.as_raw();
    let x = vctx(c);
    let pd = ctx.alloc_pd().unwrap();
    let mut tda = ibv_td_init_attr::default();
    // SAFETY: a live context; readable attributes.
    let td = unsafe { x.alloc_td.unwrap()(c, &mut tda) };
    assert!(!td.is_null());
    let mut pa = ibv_parent_domain_init_attr {
        pd: pd.as_raw(),
        td,
        comp_mask: IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        alloc: None,
        free: None,
        pd_context: 0x77 as *mut _,
    };
    // SAFETY: as above.
    let parent = unsafe { x.alloc_parent_domain.unwrap()(c, &mut pa) };
    assert!(!parent.is_null());
    // SAFETY: both domains are in use by the parent: EBUSY.
    unsafe {
        assert_eq!(x.dealloc_td.unwrap()(td), libc::EBUSY);
        assert_eq!(sv::ibv_dealloc_pd(pd.as_raw()), libc::EBUSY);
    }
    // An MR registered through the parent and a QP created on it: the parent's keys
    // are good for a QP of the protection domain and the other way round.
    let mut buf = vec![0u8; 4096];
    // SAFETY: a live parent domain; the buffer outlives the MR (deregistered below).
    let mr = unsafe {
        sv::ibv_reg_mr(
            parent,
            buf.as_mut_ptr().cast(),
            4096,
            (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int,
        )
    };
    assert!(!mr.is_null());
    let cq = create_cq_ex(c, &mut cq_attr(8, 0)).unwrap();
    let mut cqp = cq_attr(8, IBV_WC_STANDARD_FLAGS);
    cqp.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    cqp.parent_domain = parent;
    let cq2 = create_cq_ex(c, &mut cqp).unwrap();
    let mut a = qp_attr_ex(parent, cq, IBV_QPT_RC, ALL_OPS);
    let qp_parent = create_qp_ex(c, &mut a).unwrap();
    let mut a = qp_attr_ex(pd.as_raw(), cq, IBV_QPT_RC, ALL_OPS);
    let qp_pd = create_qp_ex(c, &mut a).unwrap();
    connect(qp_parent, lid(&ctx), qpn(qp_pd), IBV_QPT_RC);
    connect(qp_pd, lid(&ctx), qpn(qp_parent), IBV_QPT_RC);
    // SAFETY: a live MR.
    let (lkey, addr) = unsafe { ((*mr).lkey, (*mr).addr as u64) };
    let w = Wr(qpx(qp_pd));
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions; the region is registered.
    unsafe {
        w.q().wr_rdma_write.unwrap()(w.0, lkey, addr + 100);
        w.q().wr_set_inline_data.unwrap()(w.0, b"parent".as_ptr() as *mut _, 6);
    }
    assert_eq!(w.complete(), 0);
    let c1 = poll_ex(cq, 1)[0];
    assert_eq!(c1.status, IBV_WC_SUCCESS);
    assert_eq!(&buf[100..106], b"parent");
    // SAFETY: the QPs and CQs are unused now; then the domains go in order.
    unsafe {
        assert_eq!(
            sv::ibv_dealloc_pd(parent),
            libc::EBUSY,
            "its MR and QP use it"
        );
        assert_eq!(sv::ibv_destroy_qp(qp_parent), 0);
        assert_eq!(sv::ibv_destroy_qp(qp_pd), 0);
        assert_eq!(sv::ibv_dereg_mr(mr), 0);
        assert_eq!(sv::ibv_destroy_cq(cq.cast()), 0);
        assert_eq!(sv::ibv_destroy_cq(cq2.cast()), 0);
        assert_eq!(sv::ibv_dealloc_pd(parent), 0);
        assert_eq!(x.dealloc_td.unwrap()(td), 0);
        assert_eq!(x.dealloc_td.unwrap()(td), libc::EINVAL);
    }
    // A parent of a parent, and a thread domain of another context: EINVAL.
    let other = Context::open(&v, Some("soft1")).unwrap();
    // SAFETY: as above.
    let td2 = unsafe { vctx(other.as_raw()).alloc_td.unwrap()(other.as_raw(), &mut tda) };
    pa.td = td2;
    // SAFETY: as above.
    let p2 = unsafe { x.alloc_parent_domain.unwrap()(c, &mut pa) };
    assert!(p2.is_null());
    assert_eq!(errno(), libc::EINVAL);
    // SAFETY: a live thread domain.
    assert_eq!(unsafe { vctx(other.as_raw()).dealloc_td.unwrap()(td2) }, 0);
}

#[test]
fn device_memory_copies_by_words_and_a_zero_based_region_over_it_carries_rdma() {
    let (a, b) = x_pair(IBV_QPT_RC, IBV_WC_STANDARD_FLAGS);
    let c = b.ctx.as_raw();
    let x = vctx(c);
    let max = query_device_ex(c, None).unwrap().max_dm_size as usize;
    assert_eq!(max, 256 << 10);
    let alloc = |len: usize, comp_mask: u32| {
        let mut at = ibv_alloc_dm_attr {
            length: len,
            log_align_req: 0,
            comp_mask,
        };
        // SAFETY: a live context; readable attributes.
        let dm = unsafe { x.alloc_dm.unwrap()(c, &mut at) };
        if dm.is_null() {
            Err(errno())
        } else {
            Ok(dm)
        }
    };
    assert_eq!(alloc(max + 1, 0).unwrap_err(), libc::EINVAL);
    assert_eq!(alloc(64, 1).unwrap_err(), libc::EINVAL);
    let dm = alloc(4096, 0).unwrap();
    // SAFETY: a live DM; its own copy functions, as verbs.h's inline wrappers call them.
    let (to, from) = unsafe { ((*dm).memcpy_to_dm.unwrap(), (*dm).memcpy_from_dm.unwrap()) };
    let data: Vec<u8> = (0..64).collect();
    let mut back = vec![0u8; 64];
    // SAFETY: a live DM; host buffers of the lengths passed.
    unsafe {
        assert_eq!(to(dm, 128, data.as_ptr().cast(), 64), 0);
        assert_eq!(from(back.as_mut_ptr().cast(), dm, 128, 64), 0);
        assert_eq!(
            to(dm, 130, data.as_ptr().cast(), 4),
            libc::EINVAL,
            "offset not of 4"
        );
        assert_eq!(
            to(dm, 128, data.as_ptr().cast(), 6),
            libc::EINVAL,
            "length not of 4"
        );
        assert_eq!(to(dm, 4096, data.as_ptr().cast(), 4), libc::EFAULT);
        assert_eq!(from(back.as_mut_ptr().cast(), dm, 4092, 8), libc::EFAULT);
    }
    assert_eq!(back, data);
    // A region over [1024, 1024 + 2048) of it, zero-based, written by the peer.
    let reg = |access: u32, off: u64, len: usize| {
        // SAFETY: a live PD and DM.
        let mr = unsafe { x.reg_dm_mr.unwrap()(b.pd.as_raw(), dm, off, len, access) };
        if mr.is_null() {
            Err(errno())
        } else {
            Ok(mr)
        }
    };
    let rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    assert_eq!(
        reg(rw, 1024, 2048).unwrap_err(),
        libc::EINVAL,
        "not zero-based"
    );
    assert_eq!(
        reg(rw | IBV_ACCESS_ZERO_BASED, 2048, 4096).unwrap_err(),
        libc::EINVAL
    );
    let mr = reg(rw | IBV_ACCESS_ZERO_BASED, 1024, 2048).unwrap();
    // SAFETY: a live MR.
    let (rkey, maddr) = unsafe { ((*mr).rkey, (*mr).addr) };
    assert!(maddr.is_null());
    let w = Wr(qpx(a.qp));
    buf(&a)[..16].copy_from_slice(b"device memory!!!");
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions; registered buffers.
    unsafe { w.q().wr_rdma_write.unwrap()(w.0, rkey, 100) };
    w.sge(&a.mr, 0, 16);
    w.id(2, IBV_SEND_SIGNALED);
    // SAFETY: as above; past the region's end: a remote access error.
    unsafe { w.q().wr_rdma_write.unwrap()(w.0, rkey, 2040) };
    w.sge(&a.mr, 0, 16);
    assert_eq!(w.complete(), 0);
    let got = poll_ex(a.cq, 2);
    assert_eq!(got[0].status, IBV_WC_SUCCESS);
    assert_eq!(got[1].status, IBV_WC_REM_ACCESS_ERR);
    let mut word = [0u8; 16];
    // SAFETY: a live DM; a 16-byte host buffer.
    assert_eq!(unsafe { from(word.as_mut_ptr().cast(), dm, 1124, 16) }, 0);
    assert_eq!(&word, b"device memory!!!");
    // The DM is busy while the region lies in it; the device's total is bounded.
    // SAFETY: live objects.
    unsafe {
        assert_eq!(x.free_dm.unwrap()(dm), libc::EBUSY);
        assert_eq!(sv::ibv_dereg_mr(mr), 0);
        assert_eq!(x.free_dm.unwrap()(dm), 0);
        assert_eq!(x.free_dm.unwrap()(dm), libc::EINVAL);
    }
    let big = alloc(max, 0).unwrap();
    assert_eq!(
        alloc(4, 0).unwrap_err(),
        libc::ENOMEM,
        "the device's memory is taken"
    );
    // SAFETY: a live DM.
    assert_eq!(unsafe { x.free_dm.unwrap()(big) }, 0);
    // The context's cmd_fd is a descriptor it owns (programs dup it).
    // SAFETY: `fcntl` on an integer.
    assert!(unsafe { libc::fcntl((*c).cmd_fd, libc::F_GETFD) } >= 0);
}

#[test]
fn bad_arguments_get_an_errno_never_a_crash() {
    let s = x_side("soft0", IBV_QPT_RC, 0, ALL_OPS);
    let c = s.ctx.as_raw();
    let x = vctx(c);
    // SAFETY: each call is given null or a value it must refuse; none is dereferenced.
    unsafe {
        assert_eq!(
            x.query_device_ex.unwrap()(c, core::ptr::null(), null_mut(), 400),
            libc::EINVAL
        );
        assert_eq!(x.query_port.unwrap()(c, 1, null_mut(), 56), libc::EINVAL);
        assert_eq!(x.query_rt_values.unwrap()(c, null_mut()), libc::EINVAL);
        assert!(x.create_cq_ex.unwrap()(c, null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(x.create_qp_ex.unwrap()(c, null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(x.alloc_td.unwrap()(c, null_mut()).is_null());
        assert_eq!(x.dealloc_td.unwrap()(null_mut()), libc::EINVAL);
        let mut pa = ibv_parent_domain_init_attr {
            pd: null_mut(),
            td: null_mut(),
            comp_mask: 0,
            alloc: None,
            free: None,
            pd_context: null_mut(),
        };
        assert!(x.alloc_parent_domain.unwrap()(c, &mut pa).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(x.alloc_dm.unwrap()(c, null_mut()).is_null());
        assert_eq!(x.free_dm.unwrap()(null_mut()), libc::EINVAL);
        assert!(
            x.reg_dm_mr.unwrap()(null_mut(), null_mut(), 0, 8, IBV_ACCESS_ZERO_BASED).is_null()
        );
        assert_eq!(errno(), libc::EINVAL);
        // The posting functions of a null QP do nothing; complete says EINVAL.
        let q = &*qpx(s.qp);
        q.wr_start.unwrap()(null_mut());
        q.wr_send.unwrap()(null_mut());
        q.wr_set_sge.unwrap()(null_mut(), 0, 0, 0);
        assert_eq!(q.wr_complete.unwrap()(null_mut()), libc::EINVAL);
    }
    // Inline pieces whose lengths add up past any size: ENOMEM, nothing read.
    let w = Wr(qpx(s.qp));
    let pieces = [
        ibv_data_buf {
            addr: null_mut(),
            length: usize::MAX,
        },
        ibv_data_buf {
            addr: null_mut(),
            length: usize::MAX,
        },
    ];
    w.start();
    // SAFETY: the QP's own functions; the pieces are refused before they are read.
    unsafe {
        w.q().wr_send.unwrap()(w.0);
        w.q().wr_set_inline_data_list.unwrap()(w.0, 2, pieces.as_ptr());
    }
    assert_eq!(w.complete(), libc::ENOMEM);
    // A CQ that is not extended has no poll functions; reads of an extended CQ outside a
    // poll give zeros.
    let cq = create_cq_ex(c, &mut cq_attr(4, IBV_WC_STANDARD_FLAGS)).unwrap();
    // SAFETY: the CQ's own function; no poll is under way.
    assert_eq!(unsafe { (*cq).read_byte_len.unwrap()(cq) }, 0);
    // SAFETY: a live CQ no longer used.
    assert_eq!(unsafe { sv::ibv_destroy_cq(cq.cast()) }, 0);
}

/// Memory-window operations through the `ibv_wr_*` API, as `ibv_post_send` takes them:
/// `ibv_wr_bind_mw` binds a type 2 window at the responder, whose key then admits a
/// WRITE; `ibv_wr_local_inv` invalidates it there; bound again under its next key,
/// `ibv_wr_send_inv` from the requester invalidates it at the responder.
#[test]
fn memory_window_operations_post_through_the_wr_api() {
    let (a, b) = x_pair(IBV_QPT_RC, IBV_WC_STANDARD_FLAGS);
    // A region of b's that allows binding, and a type 2 window over it.
    let mut target = vec![0u8; 4096];
    let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND;
    // SAFETY: a live PD; the buffer outlives the region (deregistered below).
    let mr = unsafe {
        sv::ibv_reg_mr(
            b.pd.as_raw(),
            target.as_mut_ptr().cast(),
            target.len(),
            access as c_int,
        )
    };
    assert!(!mr.is_null());
    // SAFETY: a live context; the provider fills `ops` at open.
    let ops = unsafe { (*b.ctx.as_raw()).ops };
    // SAFETY: a live PD of the provider.
    let mw = unsafe { ops.alloc_mw.unwrap()(b.pd.as_raw(), IBV_MW_TYPE_2) };
    assert!(!mw.is_null());
    let addr = target.as_ptr() as u64;
    let next = |k: u32| (k & !0xff) | (k.wrapping_add(1) & 0xff);
    let bind = |key: u32, wr_id: u64| {
        let info = ibv_mw_bind_info {
            mr,
            addr,
            length: 4096,
            mw_access_flags: IBV_ACCESS_REMOTE_WRITE,
        };
        let w = Wr(qpx(b.qp));
        w.start();
        w.id(wr_id, IBV_SEND_SIGNALED);
        // SAFETY: the QP's own function; a live window and region of its PD.
        unsafe { w.q().wr_bind_mw.unwrap()(w.0, mw, key, &info) };
        assert_eq!(w.complete(), 0);
        let c = poll_ex(b.cq, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status, c[0].opcode),
            (wr_id, IBV_WC_SUCCESS, IBV_WC_BIND_MW)
        );
    };
    let write = |key: u32, wr_id: u64| -> u32 {
        let w = Wr(qpx(a.qp));
        w.start();
        w.id(wr_id, IBV_SEND_SIGNALED);
        // SAFETY: the QP's own function; a registered buffer here.
        unsafe { w.q().wr_rdma_write.unwrap()(w.0, key, addr + 64) };
        w.sge(&a.mr, 0, 64);
        assert_eq!(w.complete(), 0);
        poll_ex(a.cq, 1)[0].status
    };
    // SAFETY: a live window.
    let key1 = next(unsafe { (*mw).rkey });
    bind(key1, 1);
    buf(&a)[..64].fill(0x5a);
    assert_eq!(write(key1, 2), IBV_WC_SUCCESS);
    assert!(target[64..128].iter().all(|&x| x == 0x5a));

    // A SEND that invalidates the window at the responder.
    post_recv(&b, 3, 0, 64);
    let w = Wr(qpx(a.qp));
    w.start();
    w.id(4, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own function; a registered buffer here.
    unsafe { w.q().wr_send_inv.unwrap()(w.0, key1) };
    w.sge(&a.mr, 0, 16);
    assert_eq!(w.complete(), 0);
    assert_eq!(poll_ex(a.cq, 1)[0].status, IBV_WC_SUCCESS);
    let c = poll_ex(b.cq, 1);
    assert_eq!((c[0].wr_id, c[0].status), (3, IBV_WC_SUCCESS));
    assert_ne!(c[0].wc_flags & IBV_WC_WITH_INV, 0, "{:?}", c[0]);

    // Bound again under its next key, then invalidated locally.
    let key2 = next(key1);
    bind(key2, 5);
    assert_eq!(write(key2, 6), IBV_WC_SUCCESS);
    let w = Wr(qpx(b.qp));
    w.start();
    w.id(7, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own function.
    unsafe { w.q().wr_local_inv.unwrap()(w.0, key2) };
    assert_eq!(w.complete(), 0);
    let c = poll_ex(b.cq, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)
    );
    // The invalidated key is refused (the requester then goes to error).
    assert_eq!(write(key2, 8), IBV_WC_REM_ACCESS_ERR);
    // SAFETY: live objects no longer used.
    unsafe {
        assert_eq!(ops.dealloc_mw.unwrap()(mw), 0);
        assert_eq!(sv::ibv_dereg_mr(mr), 0);
    }
}
