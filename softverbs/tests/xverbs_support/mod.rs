//! Helpers for the extended verbs as verbs.h's inline wrappers reach them: through the
//! `verbs_context` in front of every context (`verbs_get_ctx_op`), the `ibv_cq_ex` of
//! `ibv_create_cq_ex` and the `ibv_qp_ex` of `ibv_create_qp_ex`. Each is the inline
//! function of the same name in `<infiniband/verbs.h>`, or a side built from them.
#![allow(dead_code)]

use core::ffi::c_int;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use crate::common::verbs;
use vqp_host::sys::*;
use vqp_host::{AccessFlags, Context, MemoryRegion, ProtectionDomain};
use vqp_softverbs as sv;

/// verbs.h's `verbs_get_ctx`: the `verbs_context` in front of an extended context.
pub fn vctx<'a>(ctx: *mut ibv_context) -> &'a verbs_context {
    // SAFETY: a live context of the provider.
    let c = unsafe { &*ctx };
    assert_eq!(
        c.abi_compat, VERBS_ABI_IS_EXTENDED,
        "not an extended context"
    );
    let off = core::mem::offset_of!(verbs_context, context);
    // SAFETY: an extended context is the last field of a `verbs_context`.
    let v = unsafe { &*ctx.cast::<u8>().sub(off).cast::<verbs_context>() };
    assert_eq!(v.sz, core::mem::size_of::<verbs_context>());
    v
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// `ibv_query_device_ex`.
pub fn query_device_ex(
    ctx: *mut ibv_context,
    input: Option<u32>,
) -> Result<ibv_device_attr_ex, i32> {
    let mut a = ibv_device_attr_ex::default();
    let inp = input.map(|m| ibv_query_device_ex_input { comp_mask: m });
    let p = inp.as_ref().map_or(core::ptr::null(), |i| i as *const _);
    let f = vctx(ctx).query_device_ex.expect("query_device_ex");
    // SAFETY: a live context, a readable input, a writable attribute struct.
    match unsafe { f(ctx, p, &mut a, core::mem::size_of_val(&a)) } {
        0 => Ok(a),
        e => Err(e),
    }
}

/// `ibv_create_cq_ex`.
pub fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: &mut ibv_cq_init_attr_ex,
) -> Result<*mut ibv_cq_ex, i32> {
    let f = vctx(ctx).create_cq_ex.expect("create_cq_ex");
    // SAFETY: a live context and a readable attribute struct.
    let cq = unsafe { f(ctx, attr) };
    if cq.is_null() {
        Err(errno())
    } else {
        Ok(cq)
    }
}

pub fn cq_attr(cqe: u32, wc_flags: u64) -> ibv_cq_init_attr_ex {
    ibv_cq_init_attr_ex {
        cqe,
        cq_context: null_mut(),
        channel: null_mut(),
        comp_vector: 0,
        wc_flags,
        comp_mask: 0,
        flags: 0,
        parent_domain: null_mut(),
    }
}

/// One completion as the `ibv_wc_read_*` functions give it.
#[derive(Debug, Clone, Copy)]
pub struct XWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub qp_num: u32,
    pub wc_flags: u32,
    pub ts: u64,
    pub wall: u64,
}

/// Reads the current completion of an extended CQ.
///
/// # Safety
/// `cq` is inside a poll that found a completion.
pub unsafe fn read_current(cq: *mut ibv_cq_ex) -> XWc {
    // SAFETY: per the contract; the functions of a CQ created with these flags.
    unsafe {
        let c = &*cq;
        XWc {
            wr_id: c.wr_id,
            status: c.status,
            opcode: c.read_opcode.unwrap()(cq),
            byte_len: c.read_byte_len.unwrap()(cq),
            imm: u32::from_be(c.read_imm_data.unwrap()(cq)),
            qp_num: c.read_qp_num.unwrap()(cq),
            wc_flags: c.read_wc_flags.unwrap()(cq),
            ts: c.read_completion_ts.unwrap()(cq),
            wall: c.read_completion_wallclock_ns.unwrap()(cq),
        }
    }
}

/// `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` until `n` completions arrived
/// (fails after 5 s).
pub fn poll_ex(cq: *mut ibv_cq_ex, n: usize) -> Vec<XWc> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "got {} of {n} completions",
            out.len()
        );
        let mut attr = ibv_poll_cq_attr::default();
        // SAFETY: a live extended CQ; the poll is ended below when it started.
        unsafe {
            let c = &*cq;
            let mut rc = c.start_poll.unwrap()(cq, &mut attr);
            if rc == libc::ENOENT {
                continue;
            }
            assert_eq!(rc, 0);
            while rc == 0 {
                out.push(read_current(cq));
                rc = c.next_poll.unwrap()(cq);
            }
            assert_eq!(rc, libc::ENOENT);
            c.end_poll.unwrap()(cq);
        }
    }
    out
}

/// Whether an extended CQ has nothing to poll now.
pub fn empty(cq: *mut ibv_cq_ex) -> bool {
    let mut attr = ibv_poll_cq_attr::default();
    // SAFETY: a live extended CQ.
    unsafe {
        sv::progress(64);
        let rc = (*cq).start_poll.unwrap()(cq, &mut attr);
        if rc == 0 {
            (*cq).end_poll.unwrap()(cq);
        }
        rc == libc::ENOENT
    }
}

/// A context, PD, registered buffer, extended CQ and QP (created by
/// `ibv_create_qp_ex`, with send ops unless `send_ops` is 0).
pub struct XSide {
    pub qp: *mut ibv_qp,
    pub cq: *mut ibv_cq_ex,
    pub mr: MemoryRegion,
    pub pd: ProtectionDomain,
    pub ctx: Context,
}

impl Drop for XSide {
    fn drop(&mut self) {
        // SAFETY: the QP and CQ are live and used by nothing else.
        unsafe {
            assert_eq!(sv::ibv_destroy_qp(self.qp), 0);
            assert_eq!(sv::ibv_destroy_cq(self.cq.cast()), 0);
        }
    }
}

pub const ALL_OPS: u64 = IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

pub fn qp_attr_ex(
    pd: *mut ibv_pd,
    cq: *mut ibv_cq_ex,
    qp_type: u32,
    send_ops: u64,
) -> ibv_qp_init_attr_ex {
    let mut a = ibv_qp_init_attr_ex {
        send_cq: cq.cast(),
        recv_cq: cq.cast(),
        cap: ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        },
        qp_type,
        comp_mask: IBV_QP_INIT_ATTR_PD,
        pd,
        ..Default::default()
    };
    if send_ops != 0 {
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = send_ops;
    }
    a
}

/// `ibv_create_qp_ex`.
pub fn create_qp_ex(
    ctx: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> Result<*mut ibv_qp, i32> {
    let f = vctx(ctx).create_qp_ex.expect("create_qp_ex");
    // SAFETY: a live context, a readable and writable attribute struct.
    let qp = unsafe { f(ctx, a) };
    if qp.is_null() {
        Err(errno())
    } else {
        Ok(qp)
    }
}

pub fn x_side(dev: &str, qp_type: u32, wc_flags: u64, send_ops: u64) -> XSide {
    let v = verbs();
    let ctx = Context::open(&v, Some(dev)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    let cq = create_cq_ex(ctx.as_raw(), &mut cq_attr(64, wc_flags)).unwrap();
    let mut a = qp_attr_ex(pd.as_raw(), cq, qp_type, send_ops);
    let qp = create_qp_ex(ctx.as_raw(), &mut a).unwrap();
    XSide {
        qp,
        cq,
        mr,
        pd,
        ctx,
    }
}

/// Moves a QP to RTS towards (`dlid`, `dqpn`), or, UD, with Q_Key 0x11.
pub fn connect(qp: *mut ibv_qp, dlid: u16, dqpn: u32, qp_type: u32) {
    let modify = |a: &mut ibv_qp_attr, mask: u32| {
        // SAFETY: a live QP and a readable attribute struct.
        assert_eq!(unsafe { sv::ibv_modify_qp(qp, a, mask as c_int) }, 0);
    };
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qkey: 0x11,
        qp_access_flags: IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC,
        ..Default::default()
    };
    let init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if qp_type == IBV_QPT_UD {
        modify(&mut a, init | IBV_QP_QKEY);
        a.qp_state = IBV_QPS_RTR;
        modify(&mut a, IBV_QP_STATE);
        a.qp_state = IBV_QPS_RTS;
        modify(&mut a, IBV_QP_STATE | IBV_QP_SQ_PSN);
        return;
    }
    modify(&mut a, init | IBV_QP_ACCESS_FLAGS);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dqpn;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    let rc = qp_type == IBV_QPT_RC;
    let rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    let rc_rtr = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    modify(&mut a, if rc { rtr | rc_rtr } else { rtr });
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
    let rc_rts = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    modify(&mut a, if rc { rts | rc_rts } else { rts });
}

pub fn lid(ctx: &Context) -> u16 {
    ctx.query_port(1).unwrap().lid()
}

pub fn qpn(qp: *mut ibv_qp) -> u32 {
    // SAFETY: a live QP.
    unsafe { (*qp).qp_num }
}

/// An RC (or UC) pair of extended sides on soft0 and soft1, connected.
pub fn x_pair(qp_type: u32, wc_flags: u64) -> (XSide, XSide) {
    let a = x_side("soft0", qp_type, wc_flags, ALL_OPS & ops_of(qp_type));
    let b = x_side("soft1", qp_type, wc_flags, ALL_OPS & ops_of(qp_type));
    connect(a.qp, lid(&b.ctx), qpn(b.qp), qp_type);
    connect(b.qp, lid(&a.ctx), qpn(a.qp), qp_type);
    (a, b)
}

pub fn ops_of(qp_type: u32) -> u64 {
    match qp_type {
        IBV_QPT_RC => ALL_OPS,
        IBV_QPT_UC => {
            IBV_QP_EX_WITH_SEND
                | IBV_QP_EX_WITH_SEND_WITH_IMM
                | IBV_QP_EX_WITH_RDMA_WRITE
                | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        }
        _ => IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
    }
}

/// `ibv_qp_to_qp_ex`.
pub fn qpx(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: a live QP.
    unsafe { sv::ibv_qp_to_qp_ex(qp) }.cast()
}

pub fn post_recv(s: &XSide, wr_id: u64, offset: usize, len: usize) {
    let mut sge = s.mr.sge(offset, len).unwrap();
    let mut wr = ibv_recv_wr {
        wr_id,
        next: null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = null_mut();
    // SAFETY: a live QP of the provider; the context's data-path op, as verbs.h calls it.
    let rc = unsafe { (*(*s.qp).context).ops.post_recv.unwrap()(s.qp, &mut wr, &mut bad) };
    assert_eq!(rc, 0);
}

#[allow(clippy::mut_from_ref)]
pub fn buf(s: &XSide) -> &mut [u8] {
    // SAFETY: the registered buffer (1 << 16 bytes), read and written by the test
    // between its posts and polls only, one slice at a time.
    unsafe { std::slice::from_raw_parts_mut(s.mr.addr() as *mut u8, 1 << 16) }
}

/// The `ibv_wr_*` calls of verbs.h, on an `ibv_qp_ex`.
pub struct Wr(pub *mut ibv_qp_ex);

impl Wr {
    pub fn q(&self) -> &ibv_qp_ex {
        // SAFETY: a live extended QP.
        unsafe { &*self.0 }
    }
    pub fn start(&self) {
        // SAFETY: a live extended QP's own function.
        unsafe { self.q().wr_start.unwrap()(self.0) }
    }
    pub fn complete(&self) -> i32 {
        // SAFETY: as above.
        unsafe { self.q().wr_complete.unwrap()(self.0) }
    }
    pub fn abort(&self) {
        // SAFETY: as above.
        unsafe { self.q().wr_abort.unwrap()(self.0) }
    }
    pub fn id(&self, wr_id: u64, flags: u32) {
        // SAFETY: `wr_id` and `wr_flags` are the application's to write.
        unsafe {
            (*self.0).wr_id = wr_id;
            (*self.0).wr_flags = flags;
        }
    }
    pub fn sge(&self, mr: &MemoryRegion, offset: usize, len: u32) {
        // SAFETY: as above; the buffer is registered.
        unsafe { self.q().wr_set_sge.unwrap()(self.0, mr.lkey(), mr.addr() + offset as u64, len) }
    }
}
