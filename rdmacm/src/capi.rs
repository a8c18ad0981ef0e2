//! The exported C functions: every function of rdma-core's `rdma_cma.h` and
//! `rsocket.h` (the list of `librdmacm.map`), as librdmacm reports failure — -1 (or
//! null) with `errno` set. What is not implemented fails with `ENOSYS`: multicast,
//! ECE, `rdma_resolve_addrinfo`/`rdma_query_addrinfo`, and of
//! the rsocket functions `rselect` and `repoll_*`. No panic crosses this boundary: each body runs under
//! `catch_unwind`, and a panic is reported as `EIO`.
#![allow(clippy::missing_safety_doc)]

use core::ffi::{c_char, c_int, c_void};
use core::ptr;
use std::ffi::CStr;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use vqp_sys::{
    ibv_context, ibv_pd, ibv_qp_attr, ibv_qp_init_attr, ibv_srq_init_attr, ibv_srq_init_attr_ex,
    ibv_xrcd,
};

use crate::abi::*;
use crate::addr;
use crate::id::{self, Channel, Event, Id};
use crate::rsocket;
use crate::verbs;

fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `f`, turning an error or a panic into -1 with `errno`.
fn int(f: impl FnOnce() -> Result<(), i32>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

/// Runs `f`, turning an error or a panic into null with `errno`.
fn null<T>(f: impl FnOnce() -> Result<*mut T, i32>) -> *mut T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            set_errno(e);
            ptr::null_mut()
        }
        Err(_) => {
            set_errno(libc::EIO);
            ptr::null_mut()
        }
    }
}

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    null(|| id::create_channel().map(|c| c.cast()))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    // SAFETY: the program hands back a channel of ours, not used again.
    let _ = catch_unwind(|| unsafe { id::destroy_channel(ch.cast::<Channel>()) });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `ch` is null or the program's live channel.
        let id = unsafe { id::create_id(ch, context, ps) }?;
        // SAFETY: `out` is writable (checked non-null; the program's pointer).
        unsafe { *out = id.cast() };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(idp: *mut rdma_cm_id) -> c_int {
    // SAFETY: the program hands back an id of ours, not used again.
    int(|| unsafe { id::destroy_id(idp.cast::<Id>()) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(idp: *mut rdma_cm_id, sa: *mut libc::sockaddr) -> c_int {
    // SAFETY: the program's id and address.
    int(|| unsafe { id::bind_addr(id::id(idp)?, sa) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    idp: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the program's id and addresses.
    int(|| unsafe { id::resolve_addr(id::id(idp)?, src, dst, timeout_ms) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(idp: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    // SAFETY: the program's id.
    int(|| id::resolve_route(unsafe { id::id(idp) }?, timeout_ms))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    idp: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the program's id, PD and attributes.
    int(|| unsafe { id::create_qp(id::id(idp)?, pd, attr) })
}

/// `struct ibv_qp_init_attr_ex`'s leading part: `ibv_qp_init_attr`, then `comp_mask`,
/// `pd` and `xrcd`.
#[repr(C)]
struct QpInitAttrExHead {
    base: ibv_qp_init_attr,
    comp_mask: u32,
    pd: *mut ibv_pd,
    xrcd: *mut ibv_xrcd,
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(idp: *mut rdma_cm_id, attr: *mut c_void) -> c_int {
    int(|| {
        // SAFETY: the program's `ibv_qp_init_attr_ex`, which starts with this head.
        let a = unsafe { attr.cast::<QpInitAttrExHead>().as_mut() }.ok_or(libc::EINVAL)?;
        let known = vqp_sys::IBV_QP_INIT_ATTR_PD | vqp_sys::IBV_QP_INIT_ATTR_XRCD;
        if a.comp_mask & !known != 0 {
            // Extended QP creation beyond a PD and an XRC domain is not offered here.
            return Err(libc::EOPNOTSUPP);
        }
        let pd = if a.comp_mask & vqp_sys::IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            ptr::null_mut()
        };
        let xrcd = if a.comp_mask & vqp_sys::IBV_QP_INIT_ATTR_XRCD != 0 {
            a.xrcd
        } else {
            ptr::null_mut()
        };
        // SAFETY: the program's id; `a.base` is a valid `ibv_qp_init_attr`; the
        // domain, if any, is the program's live one.
        unsafe { id::create_qp_in(id::id(idp)?, pd, xrcd, &mut a.base) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(idp: *mut rdma_cm_id) {
    let _ = int(|| {
        // SAFETY: the program's id.
        id::destroy_qp_of(unsafe { id::id(idp) }?);
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(idp: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int {
    // SAFETY: the program's id and parameters.
    int(|| unsafe { id::connect(id::id(idp)?, p) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(idp: *mut rdma_cm_id) -> c_int {
    // SAFETY: the program's id.
    int(|| id::establish(unsafe { id::id(idp) }?))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(idp: *mut rdma_cm_id, backlog: c_int) -> c_int {
    // SAFETY: the program's id.
    int(|| id::listen(unsafe { id::id(idp) }?, backlog))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program's id.
        let new = id::get_request(unsafe { id::id(listen) }?)?;
        // SAFETY: `out` is the program's writable pointer.
        unsafe { *out = new };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(idp: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int {
    // SAFETY: the program's id and parameters.
    int(|| unsafe { id::accept(id::id(idp)?, p) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(idp: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: the program's id and private data.
    int(|| unsafe { id::reject(id::id(idp)?, data, len) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    idp: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: as rdma_reject (no ECE is negotiated here).
    unsafe { rdma_reject(idp, data, len) }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_notify(idp: *mut rdma_cm_id, _event: c_int) -> c_int {
    // The CM learns of the first packet from the RTU here; nothing to do.
    // SAFETY: the program's id.
    int(|| unsafe { id::id(idp) }.map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(idp: *mut rdma_cm_id) -> c_int {
    // SAFETY: the program's id.
    int(|| id::disconnect(unsafe { id::id(idp) }?))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let ev = id::get_event(id::queue_of(ch)?)?;
        // SAFETY: `out` is the program's writable pointer.
        unsafe { *out = ev.cast() };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(ev: *mut rdma_cm_event) -> c_int {
    int(|| {
        if ev.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: an event of ours, handed back once.
        unsafe { id::ack(ev.cast::<Event>()) };
        Ok(())
    })
}

fn port_of(st: &libc::sockaddr_storage) -> u16 {
    // SAFETY: the storage holds an address this library wrote (or zeros).
    match unsafe { addr::from_c((st as *const libc::sockaddr_storage).cast()) } {
        Ok(a) => a.port().to_be(),
        Err(_) => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(idp: *mut rdma_cm_id) -> u16 {
    // SAFETY: the program's id.
    unsafe { idp.as_ref() }.map_or(0, |i| port_of(&i.route.addr.src))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(idp: *mut rdma_cm_id) -> u16 {
    // SAFETY: the program's id.
    unsafe { idp.as_ref() }.map_or(0, |i| port_of(&i.route.addr.dst))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    null(|| {
        let devs = verbs::devices()?;
        let n = devs.list.len();
        // SAFETY: calloc of n + 1 pointers; freed by rdma_free_devices.
        let list = unsafe { libc::calloc(n + 1, core::mem::size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, d) in devs.list.iter().enumerate() {
            // SAFETY: `list` has room for n + 1 entries.
            unsafe { *list.add(i) = d.context };
        }
        if !num.is_null() {
            // SAFETY: the program's writable int.
            unsafe { *num = n as c_int };
        }
        Ok(list)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: the array rdma_get_devices calloc'd (the contexts stay open).
    unsafe { libc::free(list.cast()) };
}

#[no_mangle]
pub extern "C" fn rdma_event_str(ev: u32) -> *const c_char {
    let s: &'static CStr = match ev {
        0 => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        1 => c"RDMA_CM_EVENT_ADDR_ERROR",
        2 => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        3 => c"RDMA_CM_EVENT_ROUTE_ERROR",
        4 => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        5 => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        6 => c"RDMA_CM_EVENT_CONNECT_ERROR",
        7 => c"RDMA_CM_EVENT_UNREACHABLE",
        8 => c"RDMA_CM_EVENT_REJECTED",
        9 => c"RDMA_CM_EVENT_ESTABLISHED",
        10 => c"RDMA_CM_EVENT_DISCONNECTED",
        11 => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        12 => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        13 => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        14 => c"RDMA_CM_EVENT_ADDR_CHANGE",
        15 => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        16 => c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
        17 => c"RDMA_CM_EVENT_ADDRINFO_ERROR",
        18 => c"RDMA_CM_EVENT_USER",
        19 => c"RDMA_CM_EVENT_INTERNAL",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    idp: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    // SAFETY: the program's id and option value.
    int(|| unsafe { id::set_option(id::id(idp)?, level, name, val, len) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    idp: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    // SAFETY: the program's id and channel.
    int(|| unsafe { id::migrate(id::id(idp)?, ch) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    idp: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    int(|| {
        // SAFETY: the program's id and out-pointers.
        let (id, attr, mask) = unsafe {
            (
                id::id(idp)?,
                attr.as_mut().ok_or(libc::EINVAL)?,
                mask.as_mut().ok_or(libc::EINVAL)?,
            )
        };
        let (a, m) = id::qp_attr(id, attr.qp_state)?;
        *attr = a;
        *mask = m as c_int;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_write_cm_event(
    idp: *mut rdma_cm_id,
    event: u32,
    status: c_int,
    arg: u64,
) -> c_int {
    // SAFETY: the program's id.
    int(|| id::write_event(unsafe { id::id(idp) }?, event, status, arg))
}

/// One `rdma_addrinfo` with the storage of its addresses.
#[repr(C)]
struct AddrInfo {
    ai: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

/// Resolves `node:service` with the system resolver.
///
/// # Safety
/// `node` and `service` are null or NUL-terminated strings.
unsafe fn lookup(
    node: *const c_char,
    service: *const c_char,
    family: c_int,
    flags: c_int,
) -> Result<SocketAddr, i32> {
    // SAFETY: all-zero addrinfo hints are valid.
    let mut hints: libc::addrinfo = unsafe { core::mem::zeroed() };
    hints.ai_family = family;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags = flags;
    let mut res: *mut libc::addrinfo = ptr::null_mut();
    // SAFETY: strings per the caller; `res` is an out-pointer freed below.
    let rc = unsafe { libc::getaddrinfo(node, service, &hints, &mut res) };
    if rc != 0 {
        return Err(libc::EADDRNOTAVAIL);
    }
    let mut p = res;
    let mut found = Err(libc::EAFNOSUPPORT);
    while !p.is_null() {
        // SAFETY: a node of getaddrinfo's list.
        let ai = unsafe { &*p };
        // SAFETY: `ai_addr` is an address of `ai_addrlen` bytes.
        if let Ok(a) = unsafe { addr::from_c(ai.ai_addr) } {
            found = Ok(a);
            break;
        }
        p = ai.ai_next;
    }
    // SAFETY: `res` came from getaddrinfo.
    unsafe { libc::freeaddrinfo(res) };
    found
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<(), i32> {
        if res.is_null() || (node.is_null() && service.is_null()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program's hints, if any.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        let passive = flags & RAI_PASSIVE != 0;
        let mut gai = 0;
        if passive {
            gai |= libc::AI_PASSIVE;
        }
        if flags & RAI_NUMERICHOST != 0 {
            gai |= libc::AI_NUMERICHOST;
        }
        let family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
        // SAFETY: the program's strings.
        let a = unsafe { lookup(node, service, family, gai) }?;
        let qp_type = h.map_or(0, |h| h.ai_qp_type);
        let qp_type = if qp_type == 0 {
            vqp_sys::IBV_QPT_RC as c_int
        } else {
            qp_type
        };
        let ps = match h.map_or(0, |h| h.ai_port_space) {
            0 if qp_type == vqp_sys::IBV_QPT_UD as c_int => RDMA_PS_UDP as c_int,
            0 => RDMA_PS_TCP as c_int,
            ps => ps,
        };
        let mut b = Box::new(AddrInfo {
            // SAFETY: all-zero is a valid rdma_addrinfo (null pointers, zero lengths).
            ai: unsafe { core::mem::zeroed() },
            src: addr::to_storage(&a),
            dst: addr::to_storage(&a),
        });
        b.ai.ai_flags = flags;
        b.ai.ai_family = if a.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        b.ai.ai_qp_type = qp_type;
        b.ai.ai_port_space = ps;
        if passive {
            b.ai.ai_src_len = addr::c_len(&a);
            b.ai.ai_src_addr = (&mut b.src as *mut libc::sockaddr_storage).cast();
        } else {
            b.ai.ai_dst_len = addr::c_len(&a);
            b.ai.ai_dst_addr = (&mut b.dst as *mut libc::sockaddr_storage).cast();
        }
        // SAFETY: `res` is the program's writable pointer; the box's first field is
        // the rdma_addrinfo.
        unsafe { *res = Box::into_raw(b).cast() };
        Ok(())
    }));
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a node rdma_getaddrinfo made (an `AddrInfo` box).
        let b = unsafe { Box::from_raw(p.cast::<AddrInfo>()) };
        p = b.ai.ai_next;
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    int(|| {
        // SAFETY: the program's addrinfo (ours, from rdma_getaddrinfo, or its own).
        let ai = unsafe { res.as_ref() }.ok_or(libc::EINVAL)?;
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let ps = ai.ai_port_space as u32;
        // The address's QP type, as rdma-core's `rdma_create_id2` takes it (XRC's two
        // halves included); none given, the port space's.
        let qp_type = match ai.ai_qp_type {
            0 if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB => vqp_sys::IBV_QPT_UD,
            0 => vqp_sys::IBV_QPT_RC,
            t => t as u32,
        };
        // SAFETY: a synchronous id: no channel.
        let idp = unsafe { id::create_id_of(ptr::null_mut(), ptr::null_mut(), ps, qp_type) }?;
        // SAFETY: just made.
        let idr = unsafe { &mut *idp };
        let done = (|| -> Result<(), i32> {
            if ai.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: the addrinfo's source address.
                unsafe { id::bind_addr(idr, ai.ai_src_addr) }?;
                // SAFETY: the program's attributes, if any, copied.
                if let Some(a) = unsafe { attr.as_ref() } {
                    id::keep_ep_attr(idr, *a, pd);
                }
                return Ok(());
            }
            // SAFETY: the addrinfo's addresses.
            unsafe { id::resolve_addr(idr, ai.ai_src_addr, ai.ai_dst_addr, 2000) }?;
            id::resolve_route(idr, 2000)?;
            if !attr.is_null() {
                // SAFETY: the program's PD and attributes.
                unsafe { id::create_qp(idr, pd, attr) }?;
            }
            Ok(())
        })();
        if let Err(e) = done {
            // SAFETY: the id just made, not handed out.
            let _ = unsafe { id::destroy_id(idp) };
            return Err(e);
        }
        // SAFETY: the program's writable pointer.
        unsafe { *out = idp.cast() };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(idp: *mut rdma_cm_id) {
    // As rdma-core's: the QP, the SRQ, then the id.
    let _ = int(|| {
        // SAFETY: the program's id.
        let id = unsafe { id::id(idp) }?;
        id::destroy_qp_of(id);
        id::destroy_srq(id);
        Ok(())
    });
    // SAFETY: the program's id, not used again.
    let _ = int(|| unsafe { id::destroy_id(idp.cast::<Id>()) });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    idp: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    int(|| {
        // SAFETY: the program's id and attributes.
        let (id, base) = unsafe { (id::id(idp)?, attr.as_mut().ok_or(libc::EINVAL)?) };
        // As rdma-core's: the SRQ type follows the id's QP type (an XRC SRQ for an XRC
        // receive id), the PD is the one given or the id's.
        let mut a = ibv_srq_init_attr_ex {
            srq_context: base.srq_context,
            attr: base.attr,
            comp_mask: vqp_sys::IBV_SRQ_INIT_ATTR_TYPE | vqp_sys::IBV_SRQ_INIT_ATTR_PD,
            srq_type: if id::is_xrc_recv(id.c.qp_type) {
                vqp_sys::IBV_SRQT_XRC
            } else {
                vqp_sys::IBV_SRQT_BASIC
            },
            pd,
            xrcd: ptr::null_mut(),
            cq: ptr::null_mut(),
            tm_cap: Default::default(),
        };
        // SAFETY: the program's PD, if any, of the id's device.
        let r = unsafe { id::create_srq(id, &mut a) };
        base.attr = a.attr;
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    idp: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    int(|| {
        // SAFETY: the program's id and attributes.
        let (id, a) = unsafe { (id::id(idp)?, attr.as_mut().ok_or(libc::EINVAL)?) };
        // SAFETY: the program's objects, of the id's device.
        unsafe { id::create_srq(id, a) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(idp: *mut rdma_cm_id) {
    let _ = int(|| {
        // SAFETY: the program's id.
        id::destroy_srq(unsafe { id::id(idp) }?);
        Ok(())
    });
}

/// Defines functions that fail with `ENOSYS`, returning -1 of their C return type.
macro_rules! not_implemented {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)+) => {
        $(
            /// Not implemented here: -1 with `errno` `ENOSYS`.
            #[no_mangle]
            pub unsafe extern "C" fn $name($(_: $arg),*) -> $ret {
                set_errno(libc::ENOSYS);
                (-1i64) as $ret
            }
        )+
    };
}

type Ptr = *mut c_void;

not_implemented! {
    rdma_join_multicast(Ptr, Ptr, Ptr) -> c_int;
    rdma_join_multicast_ex(Ptr, Ptr, Ptr) -> c_int;
    rdma_leave_multicast(Ptr, Ptr) -> c_int;
    rdma_set_local_ece(Ptr, Ptr) -> c_int;
    rdma_get_remote_ece(Ptr, Ptr) -> c_int;
    rdma_resolve_addrinfo(Ptr, Ptr, Ptr, Ptr) -> c_int;
    rdma_query_addrinfo(Ptr, Ptr) -> c_int;
    rselect(c_int, Ptr, Ptr, Ptr, Ptr) -> c_int;
    repoll_create(c_int) -> c_int;
    repoll_ctl(c_int, c_int, c_int, Ptr) -> c_int;
    repoll_wait(c_int, Ptr, c_int, c_int) -> c_int;
}

/// Runs `f`, turning an error or a panic into -1 with `errno`; a count otherwise.
fn count(f: impl FnOnce() -> Result<usize, i32>) -> isize {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n as isize,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

/// Runs `f`, turning an error or a panic into -1 with `errno`.
fn num(f: impl FnOnce() -> Result<c_int, i32>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

/// The caller's buffer as a slice (empty for a null pointer with length 0).
///
/// # Safety
/// `p` is null only with `len` 0, else `len` bytes that stay the caller's for the call.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(p.cast(), len) })
}

/// As [`bytes`], writable.
///
/// # Safety
/// As [`bytes`].
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], i32> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(p.cast(), len) })
}

#[no_mangle]
pub extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    num(|| rsocket::socket(domain, kind, protocol))
}

#[no_mangle]
pub unsafe extern "C" fn rbind(fd: c_int, sa: *const libc::sockaddr, _len: u32) -> c_int {
    // SAFETY: the caller's address.
    int(|| unsafe { rsocket::bind(fd, sa) })
}

#[no_mangle]
pub extern "C" fn rlisten(fd: c_int, backlog: c_int) -> c_int {
    int(|| rsocket::listen(fd, backlog))
}

#[no_mangle]
pub unsafe extern "C" fn raccept(
    fd: c_int,
    sa: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's address buffer.
    num(|| unsafe { rsocket::accept(fd, sa, len) })
}

#[no_mangle]
pub unsafe extern "C" fn rconnect(fd: c_int, sa: *const libc::sockaddr, _len: u32) -> c_int {
    // SAFETY: the caller's address.
    int(|| unsafe { rsocket::connect(fd, sa) })
}

#[no_mangle]
pub extern "C" fn rshutdown(fd: c_int, how: c_int) -> c_int {
    int(|| rsocket::shutdown(fd, how))
}

#[no_mangle]
pub extern "C" fn rclose(fd: c_int) -> c_int {
    int(|| rsocket::close(fd))
}

#[no_mangle]
pub unsafe extern "C" fn rrecv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: the caller's buffer.
    count(|| rsocket::recv(fd, unsafe { bytes_mut(buf, len) }?, flags))
}

#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    _src: *mut libc::sockaddr,
    _srclen: *mut libc::socklen_t,
) -> isize {
    // SAFETY: the caller's buffer.
    unsafe { rrecv(fd, buf, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn rread(fd: c_int, buf: *mut c_void, len: usize) -> isize {
    // SAFETY: the caller's buffer.
    unsafe { rrecv(fd, buf, len, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rsend(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: the caller's buffer.
    count(|| rsocket::send(fd, unsafe { bytes(buf, len) }?, flags))
}

#[no_mangle]
pub unsafe extern "C" fn rsendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    _dst: *const libc::sockaddr,
    _dstlen: u32,
) -> isize {
    // SAFETY: the caller's buffer.
    unsafe { rsend(fd, buf, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn rwrite(fd: c_int, buf: *const c_void, len: usize) -> isize {
    // SAFETY: the caller's buffer.
    unsafe { rsend(fd, buf, len, 0) }
}

/// The caller's I/O vector.
///
/// # Safety
/// `iov` holds `n` entries.
unsafe fn iovec<'a>(iov: *const libc::iovec, n: c_int) -> Result<&'a [libc::iovec], i32> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(iov, n as usize) })
}

#[no_mangle]
pub unsafe extern "C" fn rwritev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    count(|| {
        let mut total = 0;
        // SAFETY: the caller's vector.
        for v in unsafe { iovec(iov, n) }? {
            // SAFETY: a buffer the vector names.
            let b = unsafe { bytes(v.iov_base, v.iov_len) }?;
            total += rsocket::send(fd, b, 0)?;
        }
        Ok(total)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rreadv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    count(|| {
        let mut total = 0;
        // SAFETY: the caller's vector.
        for v in unsafe { iovec(iov, n) }? {
            // SAFETY: a buffer the vector names.
            let b = unsafe { bytes_mut(v.iov_base, v.iov_len) }?;
            let got = rsocket::recv(fd, b, 0)?;
            total += got;
            if got < v.iov_len {
                break;
            }
        }
        Ok(total)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rsendmsg(fd: c_int, msg: *const libc::msghdr, _flags: c_int) -> isize {
    // SAFETY: the caller's message header.
    match unsafe { msg.as_ref() } {
        // SAFETY: its vector.
        Some(m) => unsafe { rwritev(fd, m.msg_iov, m.msg_iovlen as c_int) },
        None => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(fd: c_int, msg: *mut libc::msghdr, _flags: c_int) -> isize {
    // SAFETY: the caller's message header.
    match unsafe { msg.as_ref() } {
        // SAFETY: its vector.
        Some(m) => unsafe { rreadv(fd, m.msg_iov, m.msg_iovlen as c_int) },
        None => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: u64, timeout: c_int) -> c_int {
    // SAFETY: the caller's array.
    num(|| unsafe { rsocket::poll(fds, nfds, timeout) })
}

#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    fd: c_int,
    sa: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's buffer.
    int(|| unsafe { rsocket::name(fd, true, sa, len) })
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    fd: c_int,
    sa: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's buffer.
    int(|| unsafe { rsocket::name(fd, false, sa, len) })
}

#[no_mangle]
pub extern "C" fn rsetsockopt(
    fd: c_int,
    _level: c_int,
    _name: c_int,
    _val: *const c_void,
    _len: u32,
) -> c_int {
    int(|| rsocket::setsockopt(fd))
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    fd: c_int,
    _level: c_int,
    _name: c_int,
    val: *mut c_void,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's buffer.
    int(|| unsafe { rsocket::getsockopt(fd, val, len) })
}

/// `rfcntl(fd, cmd, ...)`: the one optional argument is read as an integer (what
/// `F_SETFL` passes), as the C calling convention hands it to a variadic function.
#[no_mangle]
pub extern "C" fn rfcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    num(|| rsocket::fcntl(fd, cmd, arg))
}

#[no_mangle]
pub unsafe extern "C" fn riomap(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    _prot: c_int,
    _flags: c_int,
    offset: i64,
) -> i64 {
    // SAFETY: the caller's buffer, theirs until riounmap.
    match catch_unwind(AssertUnwindSafe(|| unsafe {
        rsocket::iomap(fd, buf, len, offset)
    })) {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

#[no_mangle]
pub extern "C" fn riounmap(fd: c_int, buf: *mut c_void, len: usize) -> c_int {
    int(|| rsocket::iounmap(fd, buf, len))
}

#[no_mangle]
pub unsafe extern "C" fn riowrite(
    fd: c_int,
    buf: *const c_void,
    count: usize,
    offset: i64,
    _flags: c_int,
) -> usize {
    // SAFETY: the caller's buffer.
    count_of(|| rsocket::iowrite(fd, unsafe { bytes(buf, count) }?, offset.max(0) as u64))
}

/// As [`count`], for the functions that return `size_t` (-1 as `SIZE_MAX`).
fn count_of(f: impl FnOnce() -> Result<usize, i32>) -> usize {
    count(f) as usize
}
