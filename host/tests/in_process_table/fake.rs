//! The fake provider: its state, the libibverbs functions it implements, their table, `setup`.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

use vqp_host::sys::*;
use vqp_host::{Verbs, VerbsTable};

use crate::absent;

// ---- the fake provider's state ---------------------------------------------------------

static TEST_LOCK: Mutex<()> = Mutex::new(());
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());
pub static MODIFIES: Mutex<Vec<(ibv_qp_attr, c_int)>> = Mutex::new(Vec::new());
static COMPLETIONS: Mutex<VecDeque<(u64, u32)>> = Mutex::new(VecDeque::new());
static ARMED: AtomicPtr<ibv_cq> = AtomicPtr::new(null_mut());

pub const FAKE_QPN: u32 = 0x99;
pub const BAD_WR_ID: u64 = 0xbad;

fn log(s: &str) {
    log_lines().push(s.to_string());
}

pub fn log_lines() -> MutexGuard<'static, Vec<String>> {
    LOG.lock().unwrap_or_else(|e| e.into_inner())
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

// ---- control path ----------------------------------------------------------------------

/// The one fake device. Like libibverbs, which keeps a reference on every opened device,
/// the fake never frees it: contexts opened from a list outlive the list.
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

unsafe extern "C" fn get_device_list(n: *mut c_int) -> *mut *mut ibv_device {
    let list: Box<[*mut ibv_device; 2]> = Box::new([device(), null_mut()]);
    // SAFETY: the caller passes a writable int.
    unsafe { *n = 1 };
    Box::into_raw(list).cast()
}

unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array came from `get_device_list`.
    unsafe { unbox(list.cast::<[*mut ibv_device; 2]>()) };
    log("free_device_list");
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
        num_comp_vectors: 2,
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
    log("close_device");
    0
}

unsafe extern "C" fn query_device(_ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: a writable attribute struct.
    let attr = unsafe { &mut *attr };
    attr.max_qp_rd_atom = 4;
    attr.max_qp_init_rd_atom = 2;
    attr.phys_port_cnt = 1;
    attr.max_qp_wr = 1024;
    0
}

/// Behaves like a library newer than v44: checks that the buffer was zeroed, then writes
/// the 56-byte layout (with `active_speed_ex` right after `port_cap_flags2`).
unsafe extern "C" fn query_port(
    _ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    if port != 1 {
        return libc::EINVAL;
    }
    let bytes = attr.cast::<u8>();
    // SAFETY: the caller's buffer is at least 56 bytes (that is what this test proves).
    let dirty = (0..56).any(|i| unsafe { *bytes.add(i) } != 0);
    if dirty {
        return libc::EFAULT;
    }
    // SAFETY: as above; fields of the v44 prefix, then the 4 bytes at offset 52.
    unsafe {
        (*attr).state = IBV_PORT_ACTIVE;
        (*attr).max_mtu = IBV_MTU_4096;
        (*attr).active_mtu = IBV_MTU_1024;
        (*attr).lid = 7;
        (*attr).link_layer = IBV_LINK_LAYER_INFINIBAND;
        (*attr).gid_tbl_len = 16;
        ptr::write_unaligned(bytes.add(52).cast::<u32>(), 0x100);
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
    raw[15] = 7;
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
    log("dealloc_pd");
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
    log("dereg_mr");
    0
}

unsafe extern "C" fn create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    boxed(ibv_comp_channel {
        context: ctx,
        fd: -1,
        refcnt: 0,
    })
}

unsafe extern "C" fn destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    // SAFETY: from `create_comp_channel`.
    unsafe { unbox(ch) };
    log("destroy_comp_channel");
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
    boxed(ibv_cq {
        context: ctx,
        channel,
        cq_context,
        cqe,
        ..Default::default()
    })
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: from `create_cq`.
    unsafe { unbox(cq) };
    log("destroy_cq");
    0
}

unsafe extern "C" fn get_cq_event(
    _ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    ctx: *mut *mut c_void,
) -> c_int {
    let armed = ARMED.swap(null_mut(), Ordering::SeqCst);
    if armed.is_null() {
        set_errno(libc::EAGAIN);
        return -1;
    }
    // SAFETY: writable out-pointers; `armed` is a live CQ.
    unsafe {
        *cq = armed;
        *ctx = (*armed).cq_context;
    }
    0
}

unsafe extern "C" fn ack_cq_events(_cq: *mut ibv_cq, n: c_uint) {
    log(&format!("ack {n}"));
}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: a live PD and a writable init struct.
    let (init, pd_ref) = unsafe { (&mut *init, &*pd) };
    if init.qp_type != IBV_QPT_RC {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    init.cap.max_inline_data = 64;
    boxed(ibv_qp {
        context: pd_ref.context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        qp_num: FAKE_QPN,
        qp_type: init.qp_type,
        ..Default::default()
    })
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: from `create_qp`.
    unsafe { unbox(qp) };
    log("destroy_qp");
    0
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    // SAFETY: a live QP and a readable attr.
    let attr = unsafe { *attr };
    MODIFIES.lock().unwrap().push((attr, mask));
    if mask as c_uint & IBV_QP_STATE != 0 {
        // SAFETY: a live QP.
        unsafe { (*qp).state = attr.qp_state };
    }
    0
}

unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    _init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: a live QP and a writable attr.
    unsafe { (*attr).qp_state = (*qp).state };
    0
}

unsafe extern "C" fn wc_status_str(_status: c_uint) -> *const c_char {
    c"fake status".as_ptr()
}

// ---- data path (ops table) --------------------------------------------------------------

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: a valid chain (the wrapper's contract).
        let w = unsafe { &*cur };
        if w.wr_id == BAD_WR_ID {
            // SAFETY: a writable out-pointer.
            unsafe { *bad = cur };
            return libc::EINVAL;
        }
        // SAFETY: a live QP.
        COMPLETIONS
            .lock()
            .unwrap()
            .push_back((w.wr_id, unsafe { (*qp).qp_num }));
        cur = w.next;
    }
    0
}

unsafe extern "C" fn post_recv(
    _qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: writable out-pointer; the receive path of the fake refuses everything.
    unsafe { *bad = wr };
    libc::ENOMEM
}

unsafe extern "C" fn poll_cq(_cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let mut queue = COMPLETIONS.lock().unwrap();
    let mut i = 0;
    while i < n {
        let Some((wr_id, qp_num)) = queue.pop_front() else {
            break;
        };
        let entry = ibv_wc {
            wr_id,
            qp_num,
            status: if wr_id == 0xe77 {
                IBV_WC_REM_ACCESS_ERR
            } else {
                IBV_WC_SUCCESS
            },
            opcode: IBV_WC_RDMA_WRITE,
            ..Default::default()
        };
        // SAFETY: the caller provides room for `n` entries.
        unsafe { wc.add(i as usize).write(entry) };
        i += 1;
    }
    i
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited: c_int) -> c_int {
    ARMED.store(cq, Ordering::SeqCst);
    0
}

fn fake_table() -> VerbsTable {
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

pub fn setup() -> (MutexGuard<'static, ()>, Verbs) {
    let guard = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    log_lines().clear();
    MODIFIES.lock().unwrap_or_else(|e| e.into_inner()).clear();
    COMPLETIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    // SAFETY: the fake functions follow libibverbs' conventions for what the tests use.
    let verbs = unsafe { Verbs::from_table(fake_table()) };
    (guard, verbs)
}
