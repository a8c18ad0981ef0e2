//! The fake's one device: its list, context, ports, GID, PDs and memory registrations.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use vqp_host::sys::*;

use super::cq::{poll_cq, req_notify_cq};
use super::post::{post_recv, post_send};
use super::{boxed, unbox, LID};

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

pub(super) unsafe extern "C" fn get_device_list(n: *mut c_int) -> *mut *mut ibv_device {
    let list: Box<[*mut ibv_device; 2]> = Box::new([device(), null_mut()]);
    // SAFETY: the caller passes a writable int.
    unsafe { *n = 1 };
    Box::into_raw(list).cast()
}

pub(super) unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array came from `get_device_list`.
    unsafe { unbox(list.cast::<[*mut ibv_device; 2]>()) };
}

pub(super) unsafe extern "C" fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    // SAFETY: a live device.
    unsafe { (*dev).name.as_ptr() }
}

pub(super) unsafe extern "C" fn get_device_guid(_dev: *mut ibv_device) -> u64 {
    0x1122_3344_5566_7788u64.to_be()
}

pub(super) unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
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

pub(super) unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: from `open_device`.
    unsafe { unbox(ctx) };
    0
}

pub(super) unsafe extern "C" fn query_device(
    _ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: a writable attribute struct.
    let attr = unsafe { &mut *attr };
    attr.max_qp_rd_atom = 16;
    attr.max_qp_init_rd_atom = 16;
    attr.phys_port_cnt = 1;
    attr.max_qp_wr = 4096;
    attr.max_cqe = 1 << 16;
    0
}

pub(super) unsafe extern "C" fn query_port(
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

pub(super) unsafe extern "C" fn query_gid(
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

pub(super) unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    boxed(ibv_pd {
        context: ctx,
        handle: 1,
    })
}

pub(super) unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: from `alloc_pd`.
    unsafe { unbox(pd) };
    0
}

pub(super) unsafe extern "C" fn reg_mr(
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

/// Set: `ibv_dereg_mr` refuses with `EBUSY` and the region stays registered.
pub static REFUSE_DEREG: AtomicBool = AtomicBool::new(false);

pub(super) unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    if REFUSE_DEREG.load(Ordering::SeqCst) {
        return libc::EBUSY;
    }
    // SAFETY: from `reg_mr`.
    unsafe { unbox(mr) };
    0
}
