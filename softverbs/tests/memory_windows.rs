//! Memory windows as a ConnectX has them (IBA Vol. 1 §10.6.7; verbs.h's
//! `ibv_alloc_mw`, `ibv_bind_mw`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`,
//! `IBV_WR_SEND_WITH_INV`): type 1 windows bound through `ibv_bind_mw`, type 2 windows
//! bound by work requests, remote access checked against the window's range and
//! rights, invalidation, and the bind errors. Across processes: `xproc.rs`.
//!
//! Tests here run in parallel in one process, each on its own objects.

mod common;

use std::ptr::null_mut;

use common::*;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{AccessFlags, QpCap, QpInit, QueuePair, WcStatus};

/// verbs.h's `IBV_DEVICE_MEM_WINDOW`.
const IBV_DEVICE_MEM_WINDOW: u32 = 1 << 17;
/// verbs.h's `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
const IBV_DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;

/// Local write, remote write/read/atomic and `IBV_ACCESS_MW_BIND`.
const BINDABLE: u32 = 0x1f;

fn opts() -> Opts {
    Opts {
        access: AccessFlags::from_bits(BINDABLE),
        ..Opts::default()
    }
}

fn ops(s: &Side) -> ibv_context_ops {
    // SAFETY: a live context; the provider fills `ops` at open and never changes it.
    unsafe { (*s.ctx.as_raw()).ops }
}

/// `ibv_alloc_mw` (verbs.h: the context's `alloc_mw`).
fn alloc_mw(s: &Side, ty: u32) -> *mut ibv_mw {
    // SAFETY: a live PD of the provider.
    let mw = unsafe { ops(s).alloc_mw.unwrap()(s.pd.as_raw(), ty) };
    assert!(!mw.is_null());
    mw
}

fn dealloc_mw(s: &Side, mw: *mut ibv_mw) -> i32 {
    // SAFETY: a window of the provider, not used afterwards.
    unsafe { ops(s).dealloc_mw.unwrap()(mw) }
}

fn rkey(mw: *mut ibv_mw) -> u32 {
    // SAFETY: a live window.
    unsafe { (*mw).rkey }
}

/// `ibv_bind_mw` through `qp` of side `s` (verbs.h's own checks are the test's).
fn bind_mw(s: &Side, qp: &QueuePair, mw: *mut ibv_mw, off: u64, len: u64, access: u32) -> i32 {
    let mut b = ibv_mw_bind {
        wr_id: 77,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: ibv_mw_bind_info {
            mr: s.mr.as_raw(),
            addr: s.mr.addr() + off,
            length: len,
            mw_access_flags: access,
        },
    };
    // SAFETY: live QP and window; `b` lives across the call.
    unsafe { ops(s).bind_mw.unwrap()(qp.as_raw(), mw, &mut b) }
}

/// An `IBV_WR_BIND_MW` request binding type 2 window `mw` under `key`.
fn bind_wr(s: &Side, mw: *mut ibv_mw, key: u32, off: u64, len: u64, access: u32) -> ibv_send_wr {
    let mut wr = send_wr(88, IBV_WR_BIND_MW, &mut []);
    wr.bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
        mw,
        rkey: key,
        bind_info: ibv_mw_bind_info {
            mr: s.mr.as_raw(),
            addr: s.mr.addr() + off,
            length: len,
            mw_access_flags: access,
        },
    };
    wr
}

fn next_key(k: u32) -> u32 {
    (k & !0xff) | (k.wrapping_add(1) & 0xff)
}

/// Posts a signaled one-sided `opcode` of 16 bytes from `a` to `b`'s address
/// `b.mr.addr() + off` under `key`; its completion status.
fn one_sided(a: &Side, b: &Side, opcode: u32, key: u32, off: u64) -> WcStatus {
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut w = send_wr(5, opcode, std::slice::from_mut(&mut sge));
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: b.mr.addr() + off,
        rkey: key,
    };
    post(a, &mut w);
    poll_n(&a.cq, 1)[0].status()
}

fn wc_one(s: &Side) -> (u32, WcStatus) {
    let c = poll_n(&s.cq, 1);
    (c[0].raw().opcode, c[0].status())
}

#[test]
fn the_device_reports_type_1_and_2b_windows() {
    let v = verbs();
    let a = side(&v, "soft0", &opts());
    let attr = a.ctx.query_device().unwrap();
    let raw = attr.raw();
    assert_ne!(raw.device_cap_flags & IBV_DEVICE_MEM_WINDOW, 0);
    assert_ne!(raw.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, 0);
    assert!(raw.max_mw > 0);
}

#[test]
fn a_type_1_window_grants_its_range_and_rights_only() {
    let v = verbs();
    let o = opts();
    let (mut a, b) = pair_with(&v, &o);
    fill(&mut a, 3);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    let before = rkey(mw);
    // Unbound, its key grants nothing.
    assert_eq!(bind_mw(&b, &b.qp, mw, 64, 128, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_eq!(rkey(mw), next_key(before), "ibv_bind_mw moves the key on");
    assert_eq!(wc_one(&b), (IBV_WC_BIND_MW, WcStatus::Success));
    let key = rkey(mw);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, key, 64),
        WcStatus::Success
    );
    assert_eq!(&bytes(&b)[64..80], &bytes(&a)[..16]);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, key, 64 + 112),
        WcStatus::Success
    );
    // Past its end: remote access error (and both QPs go to error).
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, key, 64 + 113),
        WcStatus::RemAccessErr
    );

    // A READ through a write-only window.
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 256, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_READ, rkey(mw), 0),
        WcStatus::RemAccessErr
    );
    // The key the window had before its bind grants nothing.
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    let unbound = rkey(mw);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 256, IBV_ACCESS_REMOTE_READ), 0);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_READ, rkey(mw), 0),
        WcStatus::Success
    );
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_READ, unbound, 0),
        WcStatus::RemAccessErr
    );

    // Rebinding moves the key: the new one works, the old one fails.
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 64, IBV_ACCESS_REMOTE_WRITE), 0);
    let k1 = rkey(mw);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 64, IBV_ACCESS_REMOTE_WRITE), 0);
    let k2 = rkey(mw);
    assert_ne!(k1, k2);
    assert_eq!(poll_n(&b.cq, 2).len(), 2);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k2, 0),
        WcStatus::Success
    );
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k1, 0),
        WcStatus::RemAccessErr
    );

    // Unbinding (no region, no range) leaves the window's key granting nothing.
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 64, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    let mut ub = ibv_mw_bind {
        wr_id: 1,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: ibv_mw_bind_info {
            mr: null_mut(),
            addr: 0,
            length: 0,
            mw_access_flags: 0,
        },
    };
    // SAFETY: live QP and window.
    assert_eq!(
        unsafe { ops(&b).bind_mw.unwrap()(b.qp.as_raw(), mw, &mut ub) },
        0
    );
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, rkey(mw), 0),
        WcStatus::RemAccessErr
    );
    assert_eq!(dealloc_mw(&b, mw), 0);
    assert_eq!(dealloc_mw(&b, mw), libc::EINVAL, "a second dealloc");
}

#[test]
fn a_window_key_is_no_lkey_and_dies_with_its_window_or_region() {
    let v = verbs();
    let o = opts();
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 256, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    // As an lkey at b: local protection error.
    let mut sge = ibv_sge {
        addr: b.mr.addr(),
        length: 8,
        lkey: rkey(mw),
    };
    let mut w = send_wr(9, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut w, &a.mr, 0);
    post(&b, &mut w);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::LocProtErr);

    // Deallocated: remote access error.
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    assert_eq!(bind_mw(&b, &b.qp, mw, 0, 256, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    let key = rkey(mw);
    assert_eq!(dealloc_mw(&b, mw), 0);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, key, 0),
        WcStatus::RemAccessErr
    );

    // Its region deregistered: remote access error through the window.
    let (a, b) = pair_with(&v, &o);
    let mr2 =
        b.pd.register_buffer(4096, AccessFlags::from_bits(BINDABLE))
            .unwrap();
    let mw = alloc_mw(&b, IBV_MW_TYPE_1);
    let mut bi = ibv_mw_bind {
        wr_id: 3,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: ibv_mw_bind_info {
            mr: mr2.as_raw(),
            addr: mr2.addr(),
            length: 4096,
            mw_access_flags: IBV_ACCESS_REMOTE_WRITE,
        },
    };
    // SAFETY: live QP and window.
    assert_eq!(
        unsafe { ops(&b).bind_mw.unwrap()(b.qp.as_raw(), mw, &mut bi) },
        0
    );
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    let key = rkey(mw);
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut w = send_wr(5, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: mr2.addr(),
        rkey: key,
    };
    post(&a, &mut w);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::Success);
    drop(mr2);
    post(&a, &mut w);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::RemAccessErr);
    assert_eq!(dealloc_mw(&b, mw), 0);
}

#[test]
fn type_2_windows_bind_by_work_request_and_invalidate() {
    let v = verbs();
    let o = opts();
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_2);
    let k1 = next_key(rkey(mw));
    let mut w = bind_wr(&b, mw, k1, 0, 512, IBV_ACCESS_REMOTE_WRITE);
    post(&b, &mut w);
    assert_eq!(wc_one(&b), (IBV_WC_BIND_MW, WcStatus::Success));
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k1, 0),
        WcStatus::Success
    );
    // Local invalidation: the key fails afterwards.
    let mut inv = send_wr(12, IBV_WR_LOCAL_INV, &mut []);
    inv.imm.invalidate_rkey = k1;
    post(&b, &mut inv);
    assert_eq!(wc_one(&b), (IBV_WC_LOCAL_INV, WcStatus::Success));
    // Free again: bind under a new key, then the peer invalidates it with its send.
    let k2 = next_key(k1);
    let mut w = bind_wr(&b, mw, k2, 0, 512, IBV_ACCESS_REMOTE_WRITE);
    post(&b, &mut w);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k2, 0),
        WcStatus::Success
    );
    let mut rs = b.mr.sge(1024, 64).unwrap();
    let mut r = recv_wr(40, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut s = send_wr(41, IBV_WR_SEND_WITH_INV, std::slice::from_mut(&mut sge));
    s.imm.invalidate_rkey = k2;
    post(&a, &mut s);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::Success);
    let c = poll_n(&b.cq, 1);
    assert_eq!((c[0].wr_id(), c[0].status()), (40, WcStatus::Success));
    let raw = c[0].raw();
    assert_ne!(raw.wc_flags & IBV_WC_WITH_INV, 0);
    // SAFETY: with IBV_WC_WITH_INV the union holds the invalidated rkey.
    assert_eq!(unsafe { raw.imm.invalidated_rkey }, k2);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k2, 0),
        WcStatus::RemAccessErr
    );
    assert_eq!(dealloc_mw(&b, mw), 0);

    // The first key, invalidated locally, fails too.
    let (a, b) = pair_with(&v, &o);
    let mw = alloc_mw(&b, IBV_MW_TYPE_2);
    let k = next_key(rkey(mw));
    let mut w = bind_wr(&b, mw, k, 0, 64, IBV_ACCESS_REMOTE_WRITE);
    post(&b, &mut w);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    let mut inv = send_wr(12, IBV_WR_LOCAL_INV, &mut []);
    inv.imm.invalidate_rkey = k;
    post(&b, &mut inv);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k, 0),
        WcStatus::RemAccessErr
    );
}

#[test]
fn a_type_2_window_answers_through_its_own_qp_only() {
    let v = verbs();
    let o = opts();
    let (a, b) = pair_with(&v, &o);
    // A second QP on b's PD and CQ, connected to a second requester.
    let c = side(&v, "soft0", &o);
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let b2 = b.pd.create_qp(&QpInit::rc(&b.cq, cap)).unwrap();
    let lid_of = |s: &Side| s.ctx.query_port(1).unwrap().lid();
    connect::connect(
        &c.qp,
        &Path::new(1, Address::lid(lid_of(&b)), b2.qp_num(), 7, 8),
    )
    .unwrap();
    connect::connect(
        &b2,
        &Path::new(1, Address::lid(lid_of(&c)), c.qp.qp_num(), 8, 7),
    )
    .unwrap();
    let mw = alloc_mw(&b, IBV_MW_TYPE_2);
    let k = next_key(rkey(mw));
    let mut w = bind_wr(&b, mw, k, 0, 512, IBV_ACCESS_REMOTE_WRITE);
    post(&b, &mut w);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    assert_eq!(
        one_sided(&a, &b, IBV_WR_RDMA_WRITE, k, 0),
        WcStatus::Success
    );
    // Through b2: refused.
    let mut sge = c.mr.sge(0, 16).unwrap();
    let mut wr = send_wr(6, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: b.mr.addr(),
        rkey: k,
    };
    post(&c, &mut wr);
    assert_eq!(poll_n(&c.cq, 1)[0].status(), WcStatus::RemAccessErr);
    drop(b2);
}

#[test]
fn destroying_its_qp_unbinds_a_type_2_window() {
    let v = verbs();
    let o = opts();
    let (a, b) = pair_with(&v, &o);
    // The window is bound through a second QP of b's PD, then that QP is destroyed.
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let b2 = b.pd.create_qp(&QpInit::rc(&b.cq, cap)).unwrap();
    let lid_of = |s: &Side| s.ctx.query_port(1).unwrap().lid();
    connect::connect(&b2, &Path::new(1, Address::lid(lid_of(&a)), 1, 8, 7)).unwrap();
    let mw = alloc_mw(&b, IBV_MW_TYPE_2);
    let k = next_key(rkey(mw));
    let mut w = bind_wr(&b, mw, k, 0, 512, IBV_ACCESS_REMOTE_WRITE);
    // SAFETY: the WR lives across the call.
    unsafe { b2.post_send(&mut w) }.unwrap();
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    drop(b2);
    // The key is dead, even for a QP that is the window's no longer exists.
    let mut inv = send_wr(12, IBV_WR_LOCAL_INV, &mut []);
    inv.imm.invalidate_rkey = k;
    post(&b, &mut inv);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::LocQpOpErr);
    let _ = a;
    assert_eq!(dealloc_mw(&b, mw), 0);
}

#[test]
fn binds_fail_as_the_specification_says() {
    let v = verbs();
    let o = opts();
    // verbs-level refusals of ops.bind_mw (mlx5_bind_mw's): a type 2 window, a
    // zero-based window, a region of another PD.
    let (_a, b) = pair_with(&v, &o);
    let mw2 = alloc_mw(&b, IBV_MW_TYPE_2);
    assert_eq!(
        bind_mw(&b, &b.qp, mw2, 0, 64, IBV_ACCESS_REMOTE_WRITE),
        libc::EINVAL
    );
    let mw1 = alloc_mw(&b, IBV_MW_TYPE_1);
    assert_eq!(
        bind_mw(&b, &b.qp, mw1, 0, 64, IBV_ACCESS_ZERO_BASED),
        libc::EINVAL
    );
    let other = side(&v, "soft1", &o);
    let mut bi = ibv_mw_bind {
        wr_id: 3,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: ibv_mw_bind_info {
            mr: other.mr.as_raw(),
            addr: other.mr.addr(),
            length: 8,
            mw_access_flags: IBV_ACCESS_REMOTE_WRITE,
        },
    };
    // SAFETY: live QP and window.
    assert_eq!(
        unsafe { ops(&b).bind_mw.unwrap()(b.qp.as_raw(), mw1, &mut bi) },
        libc::EPERM
    );
    // Work requests the device refuses (IBV_WC_MW_BIND_ERR): a window out of its
    // region (C10-75); a type 2 window bound twice (o10-37.2.30).
    let mut w = bind_wr(
        &b,
        mw2,
        next_key(rkey(mw2)),
        0,
        1 << 20,
        IBV_ACCESS_REMOTE_WRITE,
    );
    post(&b, &mut w);
    assert_eq!(wc_one(&b).1, WcStatus::MwBindErr);

    let (_a, b) = pair_with(&v, &o);
    let mw2 = alloc_mw(&b, IBV_MW_TYPE_2);
    let k = next_key(rkey(mw2));
    let mut w = bind_wr(&b, mw2, k, 0, 64, IBV_ACCESS_REMOTE_WRITE);
    post(&b, &mut w);
    assert_eq!(wc_one(&b).1, WcStatus::Success);
    let mut w = bind_wr(&b, mw2, next_key(k), 0, 64, IBV_ACCESS_REMOTE_WRITE);
    post(&b, &mut w);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::MwBindErr);

    // A region without IBV_ACCESS_MW_BIND.
    let o2 = Opts::default();
    let (_a, b) = pair_with(&v, &o2);
    let mw2 = alloc_mw(&b, IBV_MW_TYPE_2);
    let mut w = bind_wr(&b, mw2, next_key(rkey(mw2)), 0, 64, IBV_ACCESS_REMOTE_READ);
    post(&b, &mut w);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::MwBindErr);

    // Remote write through a region without local write (C10-74).
    let (_a, b) = pair_with(&v, &o);
    let ro =
        b.pd.register_buffer(
            4096,
            AccessFlags::from_bits(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND),
        )
        .unwrap();
    let mw2 = alloc_mw(&b, IBV_MW_TYPE_2);
    let mut w = bind_wr(&b, mw2, next_key(rkey(mw2)), 0, 64, IBV_ACCESS_REMOTE_WRITE);
    w.bind_mw_tso.bind_mw.bind_info.mr = ro.as_raw();
    w.bind_mw_tso.bind_mw.bind_info.addr = ro.addr();
    post(&b, &mut w);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::MwBindErr);

    // LOCAL_INV of a key that names no bound type 2 window.
    let (_a, b) = pair_with(&v, &o);
    let mut inv = send_wr(12, IBV_WR_LOCAL_INV, &mut []);
    inv.imm.invalidate_rkey = b.mr.rkey();
    post(&b, &mut inv);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::LocQpOpErr);

    // SEND_WITH_INV of a key that names no window of the responder: the receive
    // completes in error and the requester is NAKed.
    let (a, b) = pair_with(&v, &o);
    let mut r = recv_wr(50, &mut []);
    post_recv(&b, &mut r);
    let mut s = send_wr(51, IBV_WR_SEND_WITH_INV, &mut []);
    s.imm.invalidate_rkey = b.mr.rkey();
    post(&a, &mut s);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::RemInvReqErr);
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::RemInvReqErr);
}
