//! Helpers for XRC tests: the verbs.h inline wrappers of XRC (`ibv_open_xrcd`,
//! `ibv_create_srq_ex`, `ibv_get_srq_num`, `ibv_open_qp`, `ibv_create_qp_ex` of the two
//! XRC QP types) through the `verbs_context`, and a node (context, PD, buffer, CQ) to
//! build them on. The state transitions are xsrq_pingpong's.
#![allow(dead_code)]

use core::ffi::c_int;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use vqp_host::sys::*;
use vqp_host::{AccessFlags, Context, MemoryRegion, ProtectionDomain, Verbs};
use vqp_softverbs as sv;

/// The extended-verbs helpers the XRC ones build on.
pub use crate::xverbs_support::{create_qp_ex, errno, vctx};

/// A context with a PD, a registered 64 KiB buffer and a CQ.
pub struct Node {
    pub cq: *mut ibv_cq,
    pub mr: MemoryRegion,
    pub pd: ProtectionDomain,
    pub ctx: Context,
}

impl Node {
    pub fn new(v: &Verbs, dev: &str) -> Node {
        let ctx = Context::open(v, Some(dev)).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd
            .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
            .unwrap();
        let cq = new_cq(&ctx);
        Node { cq, mr, pd, ctx }
    }

    pub fn c(&self) -> *mut ibv_context {
        self.ctx.as_raw()
    }

    pub fn lid(&self) -> u16 {
        self.ctx.query_port(1).unwrap().lid()
    }

    #[allow(clippy::mut_from_ref)]
    pub fn buf(&self) -> &mut [u8] {
        // SAFETY: the registered buffer, touched by the test between posts and polls.
        unsafe { std::slice::from_raw_parts_mut(self.mr.addr() as *mut u8, 1 << 16) }
    }

    pub fn sge(&self, offset: usize, len: usize) -> ibv_sge {
        self.mr.sge(offset, len).unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: a live CQ nothing uses any more (the tests destroy their QPs and SRQs
        // first, or leak them with the process).
        unsafe { sv::ibv_destroy_cq(self.cq) };
    }
}

pub fn new_cq(ctx: &Context) -> *mut ibv_cq {
    // SAFETY: a live context.
    let cq = unsafe { sv::ibv_create_cq(ctx.as_raw(), 64, null_mut(), null_mut(), 0) };
    assert!(!cq.is_null());
    cq
}

/// `ibv_open_xrcd` with `fd` and `oflags` (both named in the mask).
pub fn open_xrcd(ctx: *mut ibv_context, fd: c_int, oflags: c_int) -> Result<*mut ibv_xrcd, i32> {
    let mut a = ibv_xrcd_init_attr {
        comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        fd,
        oflags,
    };
    open_xrcd_with(ctx, &mut a)
}

pub fn open_xrcd_with(
    ctx: *mut ibv_context,
    a: &mut ibv_xrcd_init_attr,
) -> Result<*mut ibv_xrcd, i32> {
    let f = vctx(ctx).open_xrcd.expect("open_xrcd");
    // SAFETY: a live context and a readable attribute struct.
    let x = unsafe { f(ctx, a) };
    if x.is_null() {
        Err(errno())
    } else {
        Ok(x)
    }
}

/// `ibv_close_xrcd`.
pub fn close_xrcd(x: *mut ibv_xrcd) -> c_int {
    // SAFETY: `x` was handed out by the provider (its context is live).
    let f = vctx(unsafe { (*x).context })
        .close_xrcd
        .expect("close_xrcd");
    // SAFETY: as above.
    unsafe { f(x) }
}

/// `ibv_create_srq_ex` of an XRC SRQ.
pub fn xrc_srq(n: &Node, xrcd: *mut ibv_xrcd, cq: *mut ibv_cq) -> Result<*mut ibv_srq, i32> {
    let mut a = ibv_srq_init_attr_ex {
        attr: ibv_srq_attr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_XRCD
            | IBV_SRQ_INIT_ATTR_CQ
            | IBV_SRQ_INIT_ATTR_PD,
        srq_type: IBV_SRQT_XRC,
        pd: n.pd.as_raw(),
        xrcd,
        cq,
        ..Default::default()
    };
    create_srq_ex(n.c(), &mut a)
}

pub fn create_srq_ex(
    ctx: *mut ibv_context,
    a: &mut ibv_srq_init_attr_ex,
) -> Result<*mut ibv_srq, i32> {
    let f = vctx(ctx).create_srq_ex.expect("create_srq_ex");
    // SAFETY: a live context and a readable, writable attribute struct.
    let s = unsafe { f(ctx, a) };
    if s.is_null() {
        Err(errno())
    } else {
        Ok(s)
    }
}

/// `ibv_get_srq_num`.
pub fn srq_num(srq: *mut ibv_srq) -> Result<u32, i32> {
    // SAFETY: a live SRQ.
    let f = vctx(unsafe { (*srq).context }).get_srq_num.unwrap();
    let mut n = 0;
    // SAFETY: a live SRQ and a writable number.
    match unsafe { f(srq, &mut n) } {
        0 => Ok(n),
        e => Err(e),
    }
}

/// `ibv_create_qp_ex` of an XRC receive QP in `xrcd`.
pub fn recv_qp(ctx: *mut ibv_context, xrcd: *mut ibv_xrcd) -> Result<*mut ibv_qp, i32> {
    let mut a = ibv_qp_init_attr_ex {
        qp_type: IBV_QPT_XRC_RECV,
        comp_mask: IBV_QP_INIT_ATTR_XRCD,
        xrcd,
        ..Default::default()
    };
    create_qp_ex(ctx, &mut a)
}

/// `ibv_create_qp_ex` of an XRC send QP (with the `ibv_wr_*` API when `send_ops`).
pub fn send_qp(n: &Node, send_ops: u64) -> Result<*mut ibv_qp, i32> {
    let mut a = ibv_qp_init_attr_ex {
        qp_type: IBV_QPT_XRC_SEND,
        send_cq: n.cq,
        cap: ibv_qp_cap {
            max_send_wr: 16,
            max_send_sge: 1,
            ..Default::default()
        },
        comp_mask: IBV_QP_INIT_ATTR_PD,
        pd: n.pd.as_raw(),
        ..Default::default()
    };
    if send_ops != 0 {
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = send_ops;
    }
    create_qp_ex(n.c(), &mut a)
}

/// `ibv_open_qp` of XRC receive QP `qpn` in `xrcd`.
pub fn open_qp(ctx: *mut ibv_context, xrcd: *mut ibv_xrcd, qpn: u32) -> Result<*mut ibv_qp, i32> {
    let mut a = ibv_qp_open_attr {
        comp_mask: IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
        qp_num: qpn,
        xrcd,
        qp_context: null_mut(),
        qp_type: IBV_QPT_XRC_RECV,
    };
    let f = vctx(ctx).open_qp.unwrap();
    // SAFETY: a live context and a readable attribute struct.
    let q = unsafe { f(ctx, &mut a) };
    if q.is_null() {
        Err(errno())
    } else {
        Ok(q)
    }
}

pub fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> c_int {
    // SAFETY: a live QP and a readable attribute struct.
    unsafe { sv::ibv_modify_qp(qp, a, mask as c_int) }
}

pub fn qpn(qp: *mut ibv_qp) -> u32 {
    // SAFETY: a live QP.
    unsafe { (*qp).qp_num }
}

pub fn state(qp: *mut ibv_qp) -> u32 {
    let mut a = ibv_qp_attr::default();
    let mut i = ibv_qp_init_attr::default();
    // SAFETY: a live QP, writable structs.
    assert_eq!(unsafe { sv::ibv_query_qp(qp, &mut a, 0, &mut i) }, 0);
    a.qp_state
}

const INIT: u32 = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
const RTR: u32 = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

/// The XRC receive QP to RTS from (`dlid`, `dqpn`), with xsrq_pingpong's masks
/// (RTR with the responder's depth and RNR timer; RTS with timeout and send PSN).
pub fn connect_recv(qp: *mut ibv_qp, dlid: u16, dqpn: u32) {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qp_access_flags: IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
        ..Default::default()
    };
    assert_eq!(modify(qp, &mut a, INIT), 0);
    a.qp_state = IBV_QPS_RTR;
    a.dest_qp_num = dqpn;
    a.path_mtu = IBV_MTU_1024;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    let rtr = RTR | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    assert_eq!(modify(qp, &mut a, rtr), 0);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    assert_eq!(
        modify(qp, &mut a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN),
        0
    );
}

/// The XRC send QP to RTS towards (`dlid`, `dqpn`), as xsrq_pingpong does it.
pub fn connect_send(qp: *mut ibv_qp, dlid: u16, dqpn: u32) {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        ..Default::default()
    };
    assert_eq!(modify(qp, &mut a, INIT), 0);
    a.qp_state = IBV_QPS_RTR;
    a.dest_qp_num = dqpn;
    a.path_mtu = IBV_MTU_1024;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    assert_eq!(modify(qp, &mut a, RTR), 0);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    let rts = IBV_QP_STATE
        | IBV_QP_TIMEOUT
        | IBV_QP_SQ_PSN
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_MAX_QP_RD_ATOMIC;
    assert_eq!(modify(qp, &mut a, rts), 0);
}

/// `ibv_post_srq_recv` of one receive.
pub fn post_srq_recv(srq: *mut ibv_srq, mut sge: ibv_sge, wr_id: u64) {
    let mut wr = ibv_recv_wr {
        wr_id,
        next: null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = null_mut();
    // SAFETY: a live SRQ; the context's data-path op, as verbs.h calls it.
    let rc = unsafe { (*(*srq).context).ops.post_srq_recv.unwrap()(srq, &mut wr, &mut bad) };
    assert_eq!(rc, 0);
}

/// `ibv_post_send` of one signaled request of `opcode` to remote SRQ `srqn`.
pub fn post_xrc(qp: *mut ibv_qp, srqn: u32, opcode: u32, mut sge: ibv_sge, wr_id: u64) -> c_int {
    // SAFETY: plain data.
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = srqn;
    post_wr(qp, &mut wr)
}

pub fn post_wr(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> c_int {
    let mut bad = null_mut();
    // SAFETY: a live QP; the context's data-path op, as verbs.h calls it.
    unsafe { (*(*qp).context).ops.post_send.unwrap()(qp, wr, &mut bad) }
}

/// Polls `cq` until `n` completions came or `ms` passed.
pub fn poll(cq: *mut ibv_cq, n: usize, ms: u64) -> Vec<ibv_wc> {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < end {
        let mut wc = ibv_wc::default();
        // SAFETY: a live CQ; the context's data-path op.
        let got = unsafe { (*(*cq).context).ops.poll_cq.unwrap()(cq, 1, &mut wc) };
        assert!(got >= 0, "poll_cq failed");
        if got == 1 {
            out.push(wc);
        } else {
            std::thread::yield_now();
        }
    }
    out
}

/// A fresh file for a file-named domain (removed when dropped).
pub struct DomainFile {
    pub path: std::path::PathBuf,
    pub file: std::fs::File,
}

impl DomainFile {
    pub fn new(tag: &str) -> DomainFile {
        let path = std::env::temp_dir().join(format!("vqp-xrcd-{}-{tag}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        DomainFile { path, file }
    }

    pub fn fd(&self) -> c_int {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }
}

impl Drop for DomainFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
