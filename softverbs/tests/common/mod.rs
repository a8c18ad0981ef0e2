//! Shared set-up for the behaviour tests: two connected RC QPs on `soft0` and `soft1`
//! through vqp-host's RAII objects, over any `Verbs` (in-process table or the cdylib).
#![allow(dead_code)]

use std::ptr::null_mut;
use std::time::{Duration, Instant};

use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpAttrMask, QpCap, QpInit, QpType, QueuePair, Verbs, Wc, WcStatus,
};

/// The in-process table.
pub fn verbs() -> Verbs {
    // SAFETY: the provider's functions implement the libibverbs ABI.
    unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) }
}

/// One side of a connection.
pub struct Side {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub channel: Option<CompletionChannel>,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

pub struct Opts {
    pub cqe: u32,
    pub cap: QpCap,
    pub access: AccessFlags,
    pub qp_access: AccessFlags,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub buf: usize,
    pub channel: bool,
    pub sq_sig_all: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            cqe: 256,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 128,
            },
            access: AccessFlags::ALL_REMOTE,
            qp_access: Path::DEFAULT_ACCESS,
            rnr_retry: 7,
            min_rnr_timer: 1,
            buf: 1 << 16,
            channel: false,
            sq_sig_all: false,
        }
    }
}

pub fn side(verbs: &Verbs, dev: &str, o: &Opts) -> Side {
    let ctx = Context::open(verbs, Some(dev)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let channel = o.channel.then(|| ctx.create_comp_channel().unwrap());
    let cq = ctx.create_cq(o.cqe, channel.as_ref(), 0).unwrap();
    let mut init = QpInit::rc(&cq, o.cap);
    init.sq_sig_all = o.sq_sig_all;
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.register_buffer(o.buf, o.access).unwrap();
    Side {
        ctx,
        pd,
        channel,
        cq,
        qp,
        mr,
    }
}

/// Connects `a` and `b` to each other along the host's `connect` path.
pub fn connect_pair(a: &Side, b: &Side, o: &Opts) {
    let lid = |s: &Side| s.ctx.query_port(1).unwrap().lid();
    let mut pa = Path::new(1, Address::lid(lid(b)), b.qp.qp_num(), 0x100, 0x200);
    let mut pb = Path::new(1, Address::lid(lid(a)), a.qp.qp_num(), 0x200, 0x100);
    for p in [&mut pa, &mut pb] {
        p.rnr_retry = o.rnr_retry;
        p.min_rnr_timer = o.min_rnr_timer;
        p.access = o.qp_access;
    }
    connect::connect(&a.qp, &pa).unwrap();
    connect::connect(&b.qp, &pb).unwrap();
}

pub fn pair_with(verbs: &Verbs, o: &Opts) -> (Side, Side) {
    let a = side(verbs, "soft0", o);
    let b = side(verbs, "soft1", o);
    connect_pair(&a, &b, o);
    (a, b)
}

pub fn pair(verbs: &Verbs) -> (Side, Side) {
    pair_with(verbs, &Opts::default())
}

/// Fills the side's buffer with a pattern derived from `seed`.
pub fn fill(s: &mut Side, seed: u8) {
    // SAFETY: no WQE is moving this buffer while the test writes it.
    let b = unsafe { s.mr.as_mut_slice() }.unwrap();
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

pub fn bytes(s: &Side) -> &[u8] {
    // SAFETY: read after the completions that wrote it were polled.
    unsafe { s.mr.as_slice() }.unwrap()
}

pub fn bytes_mut(s: &mut Side) -> &mut [u8] {
    // SAFETY: as `fill`.
    unsafe { s.mr.as_mut_slice() }.unwrap()
}

/// Polls until `n` completions arrived (fails after 5 s).
pub fn poll_n(cq: &CompletionQueue, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [Wc::default(); 16];
    while out.len() < n {
        let got = cq.poll(&mut buf).unwrap();
        out.extend_from_slice(got);
        if out.len() >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out with {} of {n} completions: {out:?}",
            out.len()
        );
    }
    out
}

/// Polls for a while and returns whatever arrived.
pub fn drain(cq: &CompletionQueue, for_ms: u64) -> Vec<Wc> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(for_ms);
    let mut buf = [Wc::default(); 16];
    while Instant::now() < deadline {
        out.extend_from_slice(cq.poll(&mut buf).unwrap());
    }
    out
}

pub fn send_wr(wr_id: u64, opcode: u32, sges: &mut [ibv_sge]) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        sg_list: if sges.is_empty() {
            null_mut()
        } else {
            sges.as_mut_ptr()
        },
        num_sge: sges.len() as i32,
        opcode,
        send_flags: IBV_SEND_SIGNALED,
        ..Default::default()
    }
}

pub fn rdma(wr: &mut ibv_send_wr, remote: &MemoryRegion, offset: u64) {
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: remote.addr() + offset,
        rkey: remote.rkey(),
    };
}

pub fn recv_wr(wr_id: u64, sges: &mut [ibv_sge]) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        next: null_mut(),
        sg_list: if sges.is_empty() {
            null_mut()
        } else {
            sges.as_mut_ptr()
        },
        num_sge: sges.len() as i32,
    }
}

/// Posts one send WR (no chain).
pub fn post(s: &Side, wr: &mut ibv_send_wr) {
    // SAFETY: the WR and its SGEs live across the call; the buffers are the side's MR.
    unsafe { s.qp.post_send(wr) }.unwrap();
}

pub fn post_recv(s: &Side, wr: &mut ibv_recv_wr) {
    // SAFETY: as `post`.
    unsafe { s.qp.post_recv(wr) }.unwrap();
}

/// A real RC connection between `soft0` and `soft1`: RDMA WRITE, WRITE_WITH_IMM, READ,
/// SEND/RECV (and with immediate), both atomics; every byte checked.
pub fn exercise_all_ops(verbs: &Verbs) {
    let (mut a, mut b) = pair(verbs);
    fill(&mut a, 1);
    fill(&mut b, 2);
    let a0 = bytes(&a).to_vec();
    let b0 = bytes(&b).to_vec();

    // RDMA WRITE: a[100..1100] → b[5000..6000].
    let mut sge = a.mr.sge(100, 1000).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut wr, &b.mr, 5000);
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    assert_eq!(wc[0].wr_id(), 1);
    assert_eq!(wc[0].opcode(), vqp_host::WcOpcode::RdmaWrite);
    assert_eq!(wc[0].qp_num(), a.qp.qp_num());
    assert_eq!(&bytes(&b)[5000..6000], &a0[100..1100]);
    assert_eq!(&bytes(&b)[..5000], &b0[..5000], "nothing before the target");
    assert_eq!(&bytes(&b)[6000..], &b0[6000..], "nothing after the target");

    // RDMA WRITE_WITH_IMM consumes a receive at the responder.
    let mut rwr = recv_wr(77, &mut []);
    post_recv(&b, &mut rwr);
    let mut sge = a.mr.sge(2000, 300).unwrap();
    let mut wr = send_wr(
        2,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    wr.imm.imm_data = 0xdead_beefu32.to_be();
    rdma(&mut wr, &b.mr, 8000);
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    let rc = poll_n(&b.cq, 1);
    assert!(rc[0].is_ok(), "{:?}", rc[0]);
    assert_eq!(rc[0].wr_id(), 77);
    assert_eq!(rc[0].opcode(), vqp_host::WcOpcode::RecvRdmaWithImm);
    assert_eq!(rc[0].imm_data(), Some(0xdead_beef));
    assert!(rc[0].flags().contains(vqp_host::WcFlags::WITH_IMM));
    assert_eq!(rc[0].byte_len(), 300);
    assert_eq!(rc[0].qp_num(), b.qp.qp_num());
    assert_eq!(&bytes(&b)[8000..8300], &a0[2000..2300]);

    // RDMA READ: b[10000..12000] → a[20000..22000].
    let mut sge = a.mr.sge(20000, 2000).unwrap();
    let mut wr = send_wr(3, IBV_WR_RDMA_READ, std::slice::from_mut(&mut sge));
    rdma(&mut wr, &b.mr, 10000);
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok());
    assert_eq!(wc[0].opcode(), vqp_host::WcOpcode::RdmaRead);
    assert_eq!(wc[0].byte_len(), 2000);
    assert_eq!(&bytes(&a)[20000..22000], &b0[10000..12000]);

    // SEND / RECV with two SGEs on each side, and SEND_WITH_IMM.
    let mut rsges = [b.mr.sge(30000, 100).unwrap(), b.mr.sge(31000, 400).unwrap()];
    let mut rwr = recv_wr(88, &mut rsges);
    post_recv(&b, &mut rwr);
    let mut ssges = [a.mr.sge(40000, 250).unwrap(), a.mr.sge(41000, 150).unwrap()];
    let mut wr = send_wr(4, IBV_WR_SEND_WITH_IMM, &mut ssges);
    wr.imm.imm_data = 7u32.to_be();
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok());
    assert_eq!(wc[0].opcode(), vqp_host::WcOpcode::Send);
    let rc = poll_n(&b.cq, 1);
    assert!(rc[0].is_ok(), "{:?}", rc[0]);
    assert_eq!(rc[0].opcode(), vqp_host::WcOpcode::Recv);
    assert_eq!((rc[0].wr_id(), rc[0].byte_len()), (88, 400));
    assert_eq!(rc[0].imm_data(), Some(7));
    assert_eq!(rc[0].src_qp(), a.qp.qp_num());
    let mut sent = a0[40000..40250].to_vec();
    sent.extend_from_slice(&a0[41000..41150]);
    assert_eq!(&bytes(&b)[30000..30100], &sent[..100]);
    assert_eq!(&bytes(&b)[31000..31300], &sent[100..]);
    assert_eq!(&bytes(&b)[31300..31400], &b0[31300..31400]);

    // Atomics on an 8-byte aligned word of b; the old value lands in a.
    bytes_mut(&mut b)[48..56].copy_from_slice(&40u64.to_ne_bytes());
    let mut sge = a.mr.sge(64, 8).unwrap();
    let mut wr = send_wr(
        5,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        std::slice::from_mut(&mut sge),
    );
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: b.mr.addr() + 48,
        compare_add: 2,
        swap: 0,
        rkey: b.mr.rkey(),
    };
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok());
    assert_eq!(wc[0].opcode(), vqp_host::WcOpcode::FetchAdd);
    assert_eq!(&bytes(&a)[64..72], &40u64.to_ne_bytes());
    assert_eq!(&bytes(&b)[48..56], &42u64.to_ne_bytes());

    let mut wr = send_wr(6, IBV_WR_ATOMIC_CMP_AND_SWP, std::slice::from_mut(&mut sge));
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: b.mr.addr() + 48,
        compare_add: 42,
        swap: 0x1122_3344_5566_7788,
        rkey: b.mr.rkey(),
    };
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok());
    assert_eq!(wc[0].opcode(), vqp_host::WcOpcode::CompSwap);
    assert_eq!(&bytes(&a)[64..72], &42u64.to_ne_bytes());
    assert_eq!(&bytes(&b)[48..56], &0x1122_3344_5566_7788u64.to_ne_bytes());
    // A failed compare leaves the word alone and still returns it.
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    assert_eq!(&bytes(&a)[64..72], &0x1122_3344_5566_7788u64.to_ne_bytes());
    assert_eq!(&bytes(&b)[48..56], &0x1122_3344_5566_7788u64.to_ne_bytes());
}

/// The asynchronous events waiting on `ctx`, taken without blocking (its `async_fd` is
/// made non-blocking): `(event_type, element)` with the element as an address (QP or
/// CQ events) or a port number.
pub fn async_events(ctx: &Context) -> Vec<(u32, usize)> {
    let raw = ctx.as_raw();
    // SAFETY: a live context; `async_fd` is the provider's eventfd for it.
    let fd = unsafe { (*raw).async_fd };
    // SAFETY: fcntl on a descriptor this context owns; only its status flags change.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert!(flags >= 0);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK), 0);
    }
    let mut out = Vec::new();
    loop {
        let mut ev = vqp_host::sys::ibv_async_event::default();
        // SAFETY: a live context; a writable event.
        if unsafe { vqp_softverbs::ibv_get_async_event(raw, &mut ev) } != 0 {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EAGAIN)
            );
            return out;
        }
        // SAFETY: every member of the element union is plain data over the same bytes.
        let element = unsafe { ev.element.qp } as usize;
        out.push((ev.event_type, element));
        // SAFETY: the event came from `ibv_get_async_event`.
        unsafe { vqp_softverbs::ibv_ack_async_event(&mut ev) };
    }
}

// ---- UC and UD sides ----

/// A side whose QP is of type `qp_type` (created, in RESET).
pub fn side_of(v: &vqp_host::Verbs, dev: &str, qp_type: QpType) -> Side {
    let o = Opts::default();
    let mut s = side(v, dev, &o);
    let mut init = QpInit::rc(&s.cq, o.cap);
    init.qp_type = qp_type;
    s.qp = s.pd.create_qp(&init).unwrap();
    s
}

pub fn lid(c: &Context) -> u16 {
    c.query_port(1).unwrap().lid()
}

/// Moves `qp` to RTS connected to (`dlid`, `dqpn`) with UC's masks; RC QPs get RC's.
pub fn connect_typed(qp: &QueuePair, dlid: u16, dqpn: u32, rc: bool) {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qp_access_flags: IBV_ACCESS_REMOTE_WRITE,
        ..Default::default()
    };
    let m = |bits: u32| QpAttrMask::from_bits(bits);
    qp.modify(
        &a,
        m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
    )
    .unwrap();
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dqpn;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    let rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    let rc_rtr = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    qp.modify(&a, m(if rc { rtr | rc_rtr } else { rtr }))
        .unwrap();
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    let rc_rts = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    let rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
    qp.modify(&a, m(if rc { rts | rc_rts } else { rts }))
        .unwrap();
}

/// Posts `wr` on `s` and waits for its completion's status.
pub fn post_status(s: &Side, wr: &mut ibv_send_wr) -> WcStatus {
    post(s, wr);
    poll_n(&s.cq, 1)[0].status()
}

/// A side whose QP is UD, in RTS with Q_Key `qkey`.
pub fn ud_side(v: &vqp_host::Verbs, dev: &str, qkey: u32) -> Side {
    let o = Opts::default();
    let mut s = side(v, dev, &o);
    let mut init = QpInit::rc(&s.cq, o.cap);
    init.qp_type = QpType::Ud;
    s.qp = s.pd.create_qp(&init).unwrap();
    let m = QpAttrMask::from_bits;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qkey,
        ..Default::default()
    };
    s.qp.modify(
        &a,
        m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
    )
    .unwrap();
    a.qp_state = IBV_QPS_RTR;
    s.qp.modify(&a, m(IBV_QP_STATE)).unwrap();
    a.qp_state = IBV_QPS_RTS;
    s.qp.modify(&a, m(IBV_QP_STATE | IBV_QP_SQ_PSN)).unwrap();
    s
}

/// The port's GID (index 0).
pub fn gid(c: &Context) -> ibv_gid {
    ibv_gid {
        raw: *c.query_gid(1, 0).unwrap().as_bytes(),
    }
}

/// An address handle on `pd` for LID `dlid` (with a global route to `dgid` if given).
pub fn ah_for(pd: &ProtectionDomain, dlid: u16, dgid: Option<ibv_gid>) -> *mut ibv_ah {
    let mut attr = ibv_ah_attr {
        dlid,
        port_num: 1,
        ..Default::default()
    };
    if let Some(g) = dgid {
        attr.is_global = 1;
        attr.grh.dgid = g;
        attr.grh.hop_limit = 64;
    }
    // SAFETY: a live PD; a readable attribute struct.
    let ah = unsafe { vqp_softverbs::ibv_create_ah(pd.as_raw(), &mut attr) };
    assert!(!ah.is_null());
    ah
}

/// Sends `len` bytes of `s`'s buffer from `offset` as a datagram (with immediate
/// 0xabcd) and waits for its completion's status.
pub fn ud_send(
    s: &Side,
    ah: *mut ibv_ah,
    qpn: u32,
    qkey: u32,
    offset: usize,
    len: usize,
) -> WcStatus {
    let mut sge = s.mr.sge(offset, len).unwrap();
    let mut wr = send_wr(1, IBV_WR_SEND_WITH_IMM, std::slice::from_mut(&mut sge));
    wr.imm = ibv_send_wr_imm {
        imm_data: 0xabcd_u32.to_be(),
    };
    wr.wr.ud = ibv_send_wr_ud {
        ah,
        remote_qpn: qpn,
        remote_qkey: qkey,
    };
    post(s, &mut wr);
    poll_n(&s.cq, 1)[0].status()
}

/// Posts receive `id` of `len` bytes of `s`'s buffer at `offset`.
pub fn post_receive(s: &Side, id: u64, offset: usize, len: usize) {
    let mut sge = s.mr.sge(offset, len).unwrap();
    let mut r = recv_wr(id, std::slice::from_mut(&mut sge));
    post_recv(s, &mut r);
}

/// Whether descriptor `fd` is readable now (`poll` without waiting).
pub fn readable(fd: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
}
