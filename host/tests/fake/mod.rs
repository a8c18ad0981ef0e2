//! An in-process fake verbs provider whose QPs really talk to each other, for tests of
//! what is built on the verbs wrappers (the physical QP/CQ provider, the endpoint
//! builder, poll threads over verbs).
//!
//! It grows the control-path fake of `in_process_table.rs` a data path: QPs get distinct
//! numbers, follow RESET→INIT→RTR→RTS (and ERR, which flushes), and a post executes at
//! once against the connected peer QP found by its number: RDMA WRITE and READ copy
//! bytes between the addresses given (this process's memory, from registered buffers),
//! WRITE_WITH_IMM and SEND consume the peer's oldest receive, and completions land in
//! the right CQ with the flags and immediate verbs sets; an armed CQ with a completion
//! channel raises one event (a byte on the channel's pipe) at its next completion.
//! Sends to a QP not in RTR or
//! RTS, or that find no receive, fail the way RC does (retry / RNR exceeded) and move
//! the sender to ERR.
#![allow(dead_code)]

mod absent;

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

use vqp_host::sys::*;
use vqp_host::{Verbs, VerbsTable};

/// The fake's LID and the last byte of its GID.
pub const LID: u16 = 7;
/// A send or receive WR with this id is refused by the post (`EINVAL`, `bad_wr` set
/// to it); the requests before it in the chain were posted.
pub const BAD_WR_ID: u64 = 0xbad;

#[derive(Default)]
struct FakeQp {
    qpn: u32,
    state: c_uint,
    dest: u32,
    send_cq: usize,
    recv_cq: usize,
    recvs: VecDeque<(u64, u64, u32)>,
    /// (new state, mask) of every modify.
    history: Vec<(c_uint, c_uint)>,
    /// The QP's state at each receive posted.
    recv_states: Vec<c_uint>,
}

#[derive(Default)]
struct FakeCq {
    cap: usize,
    wcs: VecDeque<ibv_wc>,
    overflows: u64,
    /// The completion channel (address), 0 for none.
    channel: usize,
    /// Armed by `req_notify_cq`: the next completion raises an event.
    armed: bool,
}

/// A completion channel: a pipe whose read end is the channel's descriptor, one byte
/// per pending event, and the CQs those events name.
struct FakeChannel {
    read: c_int,
    write: c_int,
    events: VecDeque<usize>,
}

#[derive(Default)]
struct State {
    /// By `ibv_qp` address.
    qps: HashMap<usize, FakeQp>,
    by_qpn: HashMap<u32, usize>,
    /// By `ibv_cq` address.
    cqs: HashMap<usize, FakeCq>,
    /// By `ibv_comp_channel` address.
    channels: HashMap<usize, FakeChannel>,
    next_qpn: u32,
    post_sends: u64,
    post_recvs: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = state();
    let s = g.get_or_insert_with(|| State {
        next_qpn: 0x100,
        ..State::default()
    });
    f(s)
}

/// `f` of QP `qpn`, if there is one.
fn with_qp<R>(qpn: u32, f: impl FnOnce(&FakeQp) -> R) -> Option<R> {
    with(|s| s.by_qpn.get(&qpn).and_then(|k| s.qps.get(k)).map(f))
}

/// The history of state transitions (state, mask) of QP `qpn`.
pub fn history(qpn: u32) -> Vec<(c_uint, c_uint)> {
    with_qp(qpn, |q| q.history.clone()).unwrap_or_default()
}

/// The QP's state at each receive posted to QP `qpn`.
pub fn recv_states(qpn: u32) -> Vec<c_uint> {
    with_qp(qpn, |q| q.recv_states.clone()).unwrap_or_default()
}

/// The state of QP `qpn`.
pub fn qp_state(qpn: u32) -> Option<c_uint> {
    with_qp(qpn, |q| q.state)
}

/// Receives held by QP `qpn`.
pub fn held_recvs(qpn: u32) -> usize {
    with_qp(qpn, |q| q.recvs.len()).unwrap_or(0)
}

/// Calls to `post_send` and `post_recv` so far (all QPs).
pub fn post_calls() -> (u64, u64) {
    with(|s| (s.post_sends, s.post_recvs))
}

/// Completions dropped because a CQ was full.
pub fn overflows() -> u64 {
    with(|s| s.cqs.values().map(|c| c.overflows).sum())
}

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// # Safety
/// `p` came from `boxed` and is freed once.
unsafe fn unbox<T>(p: *mut T) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p) });
}

static DEVICE: AtomicPtr<ibv_device> = AtomicPtr::new(null_mut());

fn device() -> *mut ibv_device {
    let cur = DEVICE.load(Ordering::SeqCst);
    if !cur.is_null() {
        return cur;
    }
    let mut dev = ibv_device::default();
    for (d, s) in dev.name.iter_mut().zip(b"fake0\0") {
        *d = *s as c_char;
    }
    let new = boxed(dev);
    match DEVICE.compare_exchange(null_mut(), new, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => new,
        Err(existing) => {
            // SAFETY: `new` was never shared.
            unsafe { unbox(new) };
            existing
        }
    }
}

// ---- control path -------------------------------------------------------------------

unsafe extern "C" fn get_device_list(n: *mut c_int) -> *mut *mut ibv_device {
    let list: Box<[*mut ibv_device; 2]> = Box::new([device(), null_mut()]);
    // SAFETY: the caller passes a writable int.
    unsafe { *n = 1 };
    Box::into_raw(list).cast()
}

unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array came from `get_device_list`.
    unsafe { unbox(list.cast::<[*mut ibv_device; 2]>()) };
}

unsafe extern "C" fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    // SAFETY: a live device.
    unsafe { (*dev).name.as_ptr() }
}

unsafe extern "C" fn get_device_guid(_dev: *mut ibv_device) -> u64 {
    0x1122_3344_5566_7788u64.to_be()
}

unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let mut ctx = ibv_context {
        device: dev,
        num_comp_vectors: 1,
        ..Default::default()
    };
    ctx.ops.poll_cq = Some(poll_cq);
    ctx.ops.req_notify_cq = Some(req_notify_cq);
    ctx.ops.post_send = Some(post_send);
    ctx.ops.post_recv = Some(post_recv);
    boxed(ctx)
}

unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: from `open_device`.
    unsafe { unbox(ctx) };
    0
}

unsafe extern "C" fn query_device(_ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: a writable attribute struct.
    let attr = unsafe { &mut *attr };
    attr.max_qp_rd_atom = 16;
    attr.max_qp_init_rd_atom = 16;
    attr.phys_port_cnt = 1;
    attr.max_qp_wr = 4096;
    attr.max_cqe = 1 << 16;
    0
}

unsafe extern "C" fn query_port(
    _ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    if port != 1 {
        return libc::EINVAL;
    }
    // SAFETY: a writable, zeroed attribute struct.
    unsafe {
        (*attr).state = IBV_PORT_ACTIVE;
        (*attr).max_mtu = IBV_MTU_4096;
        (*attr).active_mtu = IBV_MTU_2048;
        (*attr).lid = LID;
        (*attr).link_layer = IBV_LINK_LAYER_INFINIBAND;
        (*attr).gid_tbl_len = 1;
    }
    0
}

unsafe extern "C" fn query_gid(
    _ctx: *mut ibv_context,
    _port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    if index != 0 {
        return -1;
    }
    let mut raw = [0u8; 16];
    raw[0] = 0xfe;
    raw[1] = 0x80;
    raw[15] = LID as u8;
    // SAFETY: a writable gid.
    unsafe { *gid = ibv_gid { raw } };
    0
}

unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    boxed(ibv_pd {
        context: ctx,
        handle: 1,
    })
}

unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: from `alloc_pd`.
    unsafe { unbox(pd) };
    0
}

unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    _access: c_int,
) -> *mut ibv_mr {
    boxed(ibv_mr {
        // SAFETY: a live PD.
        context: unsafe { (*pd).context },
        pd,
        addr,
        length,
        handle: 2,
        lkey: 0x11,
        rkey: 0x22,
    })
}

unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: from `reg_mr`.
    unsafe { unbox(mr) };
    0
}

unsafe extern "C" fn create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return null_mut();
    }
    let ch = boxed(ibv_comp_channel {
        context: ctx,
        fd: fds[0],
        refcnt: 0,
    });
    with(|s| {
        s.channels.insert(
            ch as usize,
            FakeChannel {
                read: fds[0],
                write: fds[1],
                events: VecDeque::new(),
            },
        )
    });
    ch
}

unsafe extern "C" fn destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if let Some(c) = with(|s| s.channels.remove(&(ch as usize))) {
        // SAFETY: both ends were opened by `create_comp_channel` and are closed once.
        unsafe {
            libc::close(c.read);
            libc::close(c.write);
        }
    }
    // SAFETY: from `create_comp_channel`.
    unsafe { unbox(ch) };
    0
}

unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _vector: c_int,
) -> *mut ibv_cq {
    if cqe <= 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let cq = boxed(ibv_cq {
        context: ctx,
        channel,
        cq_context,
        cqe,
        ..Default::default()
    });
    with(|s| {
        s.cqs.insert(
            cq as usize,
            FakeCq {
                cap: cqe as usize,
                channel: channel as usize,
                ..FakeCq::default()
            },
        )
    });
    cq
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    with(|s| s.cqs.remove(&(cq as usize)));
    // SAFETY: from `create_cq`.
    unsafe { unbox(cq) };
    0
}

unsafe extern "C" fn get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    ctx: *mut *mut c_void,
) -> c_int {
    let event = with(|s| {
        let c = s.channels.get_mut(&(ch as usize))?;
        let cq = c.events.pop_front()?;
        let mut byte = 0u8;
        // SAFETY: reads one byte from the channel's own pipe into `byte`.
        unsafe { libc::read(c.read, (&mut byte as *mut u8).cast(), 1) };
        Some(cq)
    });
    let Some(event) = event else {
        set_errno(libc::EAGAIN);
        return -1;
    };
    let event = event as *mut ibv_cq;
    // SAFETY: writable out-pointers; `event` is a live CQ (its destroy waits for acks
    // in libibverbs; the tests acknowledge before destroying).
    unsafe {
        *cq = event;
        *ctx = (*event).cq_context;
    }
    0
}

unsafe extern "C" fn ack_cq_events(_cq: *mut ibv_cq, _n: c_uint) {}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: a live PD and a writable init struct.
    let (init, pd_ref) = unsafe { (&mut *init, &*pd) };
    if init.qp_type != IBV_QPT_RC {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let (send_cq, recv_cq) = (init.send_cq as usize, init.recv_cq as usize);
    let qpn = with(|s| {
        let n = s.next_qpn;
        s.next_qpn += 1;
        n
    });
    let qp = boxed(ibv_qp {
        context: pd_ref.context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        qp_num: qpn,
        qp_type: init.qp_type,
        ..Default::default()
    });
    with(|s| {
        s.by_qpn.insert(qpn, qp as usize);
        s.qps.insert(
            qp as usize,
            FakeQp {
                qpn,
                state: IBV_QPS_RESET,
                send_cq,
                recv_cq,
                ..FakeQp::default()
            },
        );
    });
    qp
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    with(|s| {
        if let Some(q) = s.qps.remove(&(qp as usize)) {
            s.by_qpn.remove(&q.qpn);
        }
    });
    // SAFETY: from `create_qp`.
    unsafe { unbox(qp) };
    0
}

fn push_wc(s: &mut State, cq: usize, wc: ibv_wc) {
    let Some(c) = s.cqs.get_mut(&cq) else { return };
    if c.wcs.len() >= c.cap {
        c.overflows += 1;
        return;
    }
    c.wcs.push_back(wc);
    if c.armed && c.channel != 0 {
        c.armed = false;
        if let Some(ch) = s.channels.get_mut(&c.channel) {
            ch.events.push_back(cq);
            let byte = 1u8;
            // SAFETY: writes one byte to the channel's own pipe.
            unsafe { libc::write(ch.write, (&byte as *const u8).cast(), 1) };
        }
    }
}

/// Moves `key` to ERR, flushing its receives.
fn to_error(s: &mut State, key: usize) {
    let Some(q) = s.qps.get_mut(&key) else { return };
    q.state = IBV_QPS_ERR;
    let (qpn, cq) = (q.qpn, q.recv_cq);
    let flushed: Vec<_> = q.recvs.drain(..).collect();
    for (wr_id, _, _) in flushed {
        push_wc(
            s,
            cq,
            ibv_wc {
                wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                qp_num: qpn,
                ..Default::default()
            },
        );
    }
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    // SAFETY: a readable attr.
    let attr = unsafe { *attr };
    let mask = mask as c_uint;
    let rc = with(|s| {
        let Some(q) = s.qps.get_mut(&(qp as usize)) else {
            return libc::EINVAL;
        };
        q.history.push((attr.qp_state, mask));
        if mask & IBV_QP_STATE == 0 {
            return 0;
        }
        let ok = match attr.qp_state {
            IBV_QPS_INIT => q.state == IBV_QPS_RESET || q.state == IBV_QPS_INIT,
            IBV_QPS_RTR => q.state == IBV_QPS_INIT,
            IBV_QPS_RTS => q.state == IBV_QPS_RTR || q.state == IBV_QPS_RTS,
            IBV_QPS_ERR | IBV_QPS_RESET => true,
            _ => false,
        };
        if !ok {
            return libc::EINVAL;
        }
        if mask & IBV_QP_DEST_QPN != 0 {
            q.dest = attr.dest_qp_num;
        }
        if attr.qp_state == IBV_QPS_ERR {
            to_error(s, qp as usize);
        } else {
            q.state = attr.qp_state;
        }
        0
    });
    if rc == 0 {
        // SAFETY: a live QP.
        unsafe { (*qp).state = attr.qp_state };
    }
    rc
}

unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    _init: *mut ibv_qp_init_attr,
) -> c_int {
    let st = with(|s| s.qps.get(&(qp as usize)).map(|q| q.state));
    // SAFETY: a writable attr.
    unsafe { (*attr).qp_state = st.unwrap_or(IBV_QPS_UNKNOWN) };
    0
}

unsafe extern "C" fn wc_status_str(_status: c_uint) -> *const c_char {
    c"fake status".as_ptr()
}

// ---- data path (ops table) -------------------------------------------------------------

/// Executes one send WR of the QP at `key`; returns the status of its completion.
///
/// # Safety
/// `w` is a valid WR whose scatter/gather entry and remote address name live memory of
/// this process, as the test's registered buffers are.
unsafe fn execute(s: &mut State, key: usize, w: &ibv_send_wr) -> (c_uint, c_uint, u32) {
    let q = &s.qps[&key];
    let len = if w.num_sge > 0 {
        // SAFETY: `num_sge > 0` means `sg_list` is valid (the caller's contract).
        unsafe { (*w.sg_list).length }
    } else {
        0
    };
    let local = if w.num_sge > 0 {
        // SAFETY: as above.
        unsafe { (*w.sg_list).addr }
    } else {
        0
    };
    // SAFETY: the RDMA member is a prefix of the union made of integers.
    let rdma = unsafe { w.wr.rdma };
    let dest = s.by_qpn.get(&q.dest).copied();
    let peer_ready = dest
        .and_then(|d| s.qps.get(&d))
        .is_some_and(|p| p.state == IBV_QPS_RTR || p.state == IBV_QPS_RTS);
    let wc_op = match w.opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => IBV_WC_SEND,
        _ => return (IBV_WC_LOC_QP_OP_ERR, IBV_WC_SEND, 0),
    };
    if !peer_ready {
        return (IBV_WC_RETRY_EXC_ERR, wc_op, 0);
    }
    let dest = dest.unwrap_or_default();
    let consumes = matches!(
        w.opcode,
        IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_SEND | IBV_WR_SEND_WITH_IMM
    );
    if consumes && s.qps[&dest].recvs.is_empty() {
        return (IBV_WC_RNR_RETRY_EXC_ERR, wc_op, 0);
    }
    match w.opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM if len > 0 => {
            // SAFETY: both ranges are live memory of this process (the contract).
            unsafe {
                ptr::copy(
                    local as *const u8,
                    rdma.remote_addr as *mut u8,
                    len as usize,
                )
            }
        }
        IBV_WR_RDMA_READ if len > 0 => {
            // SAFETY: as above.
            unsafe {
                ptr::copy(
                    rdma.remote_addr as *const u8,
                    local as *mut u8,
                    len as usize,
                )
            }
        }
        _ => {}
    }
    if consumes {
        let p = s.qps.get_mut(&dest).expect("checked above");
        let (wr_id, addr, cap) = p.recvs.pop_front().expect("checked above");
        let (pqpn, pcq) = (p.qpn, p.recv_cq);
        let is_send = matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM);
        if is_send && len > 0 {
            let n = len.min(cap);
            // SAFETY: the receive buffer and the local buffer are live memory.
            unsafe { ptr::copy(local as *const u8, addr as *mut u8, n as usize) };
        }
        let with_imm = w.opcode != IBV_WR_SEND;
        push_wc(
            s,
            pcq,
            ibv_wc {
                wr_id,
                status: IBV_WC_SUCCESS,
                opcode: if is_send {
                    IBV_WC_RECV
                } else {
                    IBV_WC_RECV_RDMA_WITH_IMM
                },
                byte_len: len,
                qp_num: pqpn,
                wc_flags: if with_imm { IBV_WC_WITH_IMM } else { 0 },
                // SAFETY: both union members are u32s.
                imm: ibv_wc_imm {
                    imm_data: unsafe { w.imm.imm_data },
                },
                ..Default::default()
            },
        );
    }
    (IBV_WC_SUCCESS, wc_op, len)
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let key = qp as usize;
    with(|s| {
        s.post_sends += 1;
        let Some(state) = s.qps.get(&key).map(|q| q.state) else {
            return libc::EINVAL;
        };
        if state != IBV_QPS_RTS && state != IBV_QPS_ERR {
            // SAFETY: a writable out-pointer.
            unsafe { *bad = wr };
            return libc::EINVAL;
        }
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: a valid chain (the wrapper's contract).
            let w = unsafe { &*cur };
            if w.wr_id == BAD_WR_ID {
                // SAFETY: a writable out-pointer.
                unsafe { *bad = cur };
                return libc::EINVAL;
            }
            let q = &s.qps[&key];
            let (qpn, cq) = (q.qpn, q.send_cq);
            let (status, opcode, len) = if q.state == IBV_QPS_ERR {
                (IBV_WC_WR_FLUSH_ERR, 0, 0)
            } else {
                // SAFETY: the test's buffers are live memory.
                unsafe { execute(s, key, w) }
            };
            if status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR {
                to_error(s, key);
            }
            if status != IBV_WC_SUCCESS || w.send_flags & IBV_SEND_SIGNALED != 0 {
                push_wc(
                    s,
                    cq,
                    ibv_wc {
                        wr_id: w.wr_id,
                        status,
                        opcode,
                        byte_len: len,
                        qp_num: qpn,
                        ..Default::default()
                    },
                );
            }
            cur = w.next;
        }
        0
    })
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let key = qp as usize;
    with(|s| {
        s.post_recvs += 1;
        let Some(state) = s.qps.get(&key).map(|q| q.state) else {
            return libc::EINVAL;
        };
        if state == IBV_QPS_RESET {
            // SAFETY: a writable out-pointer.
            unsafe { *bad = wr };
            return libc::EINVAL;
        }
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: a valid chain (the wrapper's contract).
            let w = unsafe { &*cur };
            if w.wr_id == BAD_WR_ID {
                // SAFETY: a writable out-pointer.
                unsafe { *bad = cur };
                return libc::EINVAL;
            }
            let (addr, len) = if w.num_sge > 0 {
                // SAFETY: `num_sge > 0` means a valid entry.
                unsafe { ((*w.sg_list).addr, (*w.sg_list).length) }
            } else {
                (0, 0)
            };
            let q = s.qps.get_mut(&key).expect("checked");
            q.recvs.push_back((w.wr_id, addr, len));
            q.recv_states.push(state);
            cur = w.next;
        }
        if state == IBV_QPS_ERR {
            to_error(s, key);
        }
        0
    })
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    with(|s| {
        let Some(c) = s.cqs.get_mut(&(cq as usize)) else {
            return -1;
        };
        let mut i = 0;
        while i < n {
            let Some(entry) = c.wcs.pop_front() else {
                break;
            };
            // SAFETY: the caller provides room for `n` entries.
            unsafe { wc.add(i as usize).write(entry) };
            i += 1;
        }
        i
    })
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited: c_int) -> c_int {
    with(|s| {
        if let Some(c) = s.cqs.get_mut(&(cq as usize)) {
            c.armed = true;
        }
    });
    0
}

fn table() -> VerbsTable {
    VerbsTable {
        get_device_list,
        free_device_list,
        get_device_name,
        get_device_guid,
        open_device,
        close_device,
        query_device,
        query_port,
        query_gid,
        alloc_pd,
        dealloc_pd,
        reg_mr,
        dereg_mr,
        create_comp_channel,
        destroy_comp_channel,
        create_cq,
        destroy_cq,
        get_cq_event,
        ack_cq_events,
        create_qp,
        destroy_qp,
        modify_qp,
        query_qp,
        create_srq: absent::create_srq,
        modify_srq: absent::modify_srq,
        query_srq: absent::query_srq,
        destroy_srq: absent::destroy_srq,
        get_async_event: absent::get_async_event,
        ack_async_event: absent::ack_async_event,
        wc_status_str,
    }
}

/// The fake as a loaded verbs library.
pub fn verbs() -> Verbs {
    // SAFETY: the fake functions follow libibverbs' conventions for what the tests use.
    unsafe { Verbs::from_table(table()) }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds other tests of the binary off while a test reads the fake's global counters.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
