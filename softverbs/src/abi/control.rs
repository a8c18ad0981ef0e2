//! The exported control-path functions, with libibverbs' names and C prototypes.
//!
//! Conventions follow libibverbs: functions returning a pointer return null and set
//! `errno`; functions returning `int` return 0 or an errno value (`ibv_query_gid`:
//! -1 with `errno`; `ibv_get_cq_event` / `ibv_get_async_event`: -1 with `errno`).
//! Null object pointers are refused with `EINVAL` rather than dereferenced.

use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use vqp_host::sys::*;

use super::ibv_async_event;
use super::{
    context_ops, free, into_raw, obj, set_errno, ChannelObj, CqObj, CtxObj, MrObj, PdCore, PdObj,
    QpObj,
};
use crate::cq::{ChannelCore, CqCore, CtxCore};
use crate::mem::MrInfo;
use crate::provider;
use crate::qp::{QpCore, MAX_INLINE, MAX_QP_WR, MAX_RD_ATOMIC, MAX_SGE};

/// Entries a CQ may have at most (`max_cqe`).
pub const MAX_CQE: c_int = (1 << 22) - 1;

/// The `ibv_device` structs, one per device, alive for the whole process.
struct DeviceTable(Vec<*mut ibv_device>);
// SAFETY: the structs are written once, before the table is published, and never again;
// sharing their addresses between threads is sharing immutable data.
unsafe impl Send for DeviceTable {}
// SAFETY: as above.
unsafe impl Sync for DeviceTable {}

static DEVICES: OnceLock<DeviceTable> = OnceLock::new();

fn devices() -> &'static [*mut ibv_device] {
    &DEVICES
        .get_or_init(|| {
            let p = provider::get();
            DeviceTable(
                p.devices
                    .iter()
                    .map(|d| {
                        let mut dev = ibv_device {
                            node_type: IBV_NODE_CA,
                            transport_type: IBV_TRANSPORT_IB,
                            ..Default::default()
                        };
                        fill(&mut dev.name, &d.name);
                        fill(&mut dev.dev_name, &format!("uverbs{}", d.index));
                        fill(
                            &mut dev.dev_path,
                            &format!("/sys/class/infiniband_verbs/uverbs{}", d.index),
                        );
                        fill(
                            &mut dev.ibdev_path,
                            &format!("/sys/class/infiniband/{}", d.name),
                        );
                        Box::into_raw(Box::new(dev))
                    })
                    .collect(),
            )
        })
        .0
}

/// Copies `s` into a fixed C string buffer, NUL-terminated and truncated to fit.
fn fill(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

fn device_index(dev: *mut ibv_device) -> Option<usize> {
    devices().iter().position(|&d| d == dev)
}

/// `ibv_get_device_list`: a null-terminated array of the `soft*` devices, to be freed
/// with [`ibv_free_device_list`]; `*num_devices` (when not null) gets the count.
///
/// # Safety
/// `num_devices` is null or points to a writable `int`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let devs = devices();
    // SAFETY: `calloc` returns zeroed memory for `len + 1` pointers, or null.
    let list = unsafe { libc::calloc(devs.len() + 1, core::mem::size_of::<*mut ibv_device>()) }
        .cast::<*mut ibv_device>();
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return list;
    }
    for (i, &d) in devs.iter().enumerate() {
        // SAFETY: `i < len`, inside the allocation; the last slot stays null.
        unsafe { list.add(i).write(d) };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int (or null, excluded above).
        unsafe { *num_devices = devs.len() as c_int };
    }
    list
}

/// `ibv_free_device_list`. Devices stay valid: they live as long as the process.
///
/// # Safety
/// `list` came from [`ibv_get_device_list`] and is freed once.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` was allocated with `calloc` by `ibv_get_device_list`.
    unsafe { libc::free(list.cast()) };
}

/// `ibv_get_device_name`: `soft<N>`; null for null.
///
/// # Safety
/// `device` is null or a device of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    if device.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null();
    }
    // SAFETY: a live device struct (they are never freed); the name is NUL-terminated.
    unsafe { (*device).name.as_ptr() }
}

/// `ibv_get_device_guid`: the node GUID in network byte order (0 for an unknown
/// device).
///
/// # Safety
/// `device` is null or a device of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> __be64 {
    device_index(device).map_or(0, |i| provider::get().devices[i].guid.to_be())
}

/// `ibv_open_device`: a new context on `device`.
///
/// # Safety
/// `device` is null or a device of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let Some(index) = device_index(device) else {
        set_errno(libc::ENODEV);
        return core::ptr::null_mut();
    };
    let core = match CtxCore::new(index) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return core::ptr::null_mut();
        }
    };
    provider::get().register_context(&core);
    let ibv = ibv_context {
        device,
        ops: context_ops(),
        cmd_fd: -1,
        async_fd: core.async_fd.raw(),
        num_comp_vectors: 1,
        ..Default::default()
    };
    into_raw::<_, ibv_context>(CtxObj {
        ibv: UnsafeCell::new(ibv),
        core,
    })
}

/// `ibv_close_device`. Objects still open on the context stay usable by the engine but
/// must not be used through the closed context.
///
/// # Safety
/// `context` came from [`ibv_open_device`] and is closed once.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    if context.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: per the contract.
    unsafe { free::<CtxObj, _>(context) };
    0
}

/// # Safety
/// `context` is null or a live context of this provider.
unsafe fn ctx<'a>(context: *mut ibv_context) -> Option<&'a CtxObj> {
    // SAFETY: forwarded.
    unsafe { obj::<CtxObj, _>(context) }
}

/// `ibv_query_device`.
///
/// # Safety
/// `context` is a live context; `device_attr` points to a writable `ibv_device_attr`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        return libc::EINVAL;
    };
    if device_attr.is_null() {
        return libc::EINVAL;
    }
    let d = &provider::get().devices[c.core.dev];
    let mut a = ibv_device_attr {
        node_guid: d.guid.to_be(),
        sys_image_guid: d.guid.to_be(),
        max_mr_size: 1 << 46,
        page_size_cap: 0xffff_f000,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 1,
        max_qp: 1 << 20,
        max_qp_wr: MAX_QP_WR as c_int,
        device_cap_flags: (1 << 5) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11) | (1 << 12),
        max_sge: MAX_SGE as c_int,
        max_sge_rd: MAX_SGE as c_int,
        max_cq: 1 << 20,
        max_cqe: MAX_CQE,
        max_mr: 1 << 24,
        max_pd: 1 << 24,
        max_qp_rd_atom: c_int::from(MAX_RD_ATOMIC),
        max_res_rd_atom: c_int::from(MAX_RD_ATOMIC) << 16,
        max_qp_init_rd_atom: c_int::from(MAX_RD_ATOMIC),
        atomic_cap: IBV_ATOMIC_GLOB,
        max_pkeys: 1,
        local_ca_ack_delay: 16,
        phys_port_cnt: 1,
        ..Default::default()
    };
    fill(
        &mut a.fw_ver,
        concat!("softverbs ", env!("CARGO_PKG_VERSION")),
    );
    // SAFETY: the caller's buffer is a whole `ibv_device_attr` (its size never changed).
    unsafe { device_attr.write(a) };
    0
}

/// `ibv_query_port`: port 1 only. Writes the 52-byte `ibv_port_attr` of rdma-core v44
/// (through `port_cap_flags2`), which every caller's buffer holds; fields newer headers
/// append are left as the caller zeroed them.
///
/// # Safety
/// `context` is a live context; `port_attr` points to a writable `ibv_port_attr` of at
/// least 52 bytes.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        return libc::EINVAL;
    };
    if port_num != 1 || port_attr.is_null() {
        return libc::EINVAL;
    }
    let d = &provider::get().devices[c.core.dev];
    let up = d.is_up();
    let a = ibv_port_attr {
        state: if up { IBV_PORT_ACTIVE } else { IBV_PORT_DOWN },
        max_mtu: IBV_MTU_4096,
        active_mtu: IBV_MTU_4096,
        gid_tbl_len: 1,
        port_cap_flags: 1 << 16, // IBV_PORT_SYS_IMAGE_GUID_SUP
        max_msg_sz: crate::qp::MAX_MSG as u32,
        pkey_tbl_len: 1,
        lid: d.lid,
        sm_lid: 1,
        max_vl_num: 1,
        subnet_timeout: 18,
        active_width: 2,                    // 4x
        active_speed: 32,                   // EDR
        phys_state: if up { 5 } else { 3 }, // LinkUp / Disabled
        link_layer: IBV_LINK_LAYER_INFINIBAND,
        ..Default::default()
    };
    // SAFETY: copies the v44 prefix, which the caller's buffer holds (contract), from a
    // local of the larger type; the byte ranges cannot overlap.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&a as *const ibv_port_attr).cast::<u8>(),
            port_attr.cast::<u8>(),
            IBV_PORT_ATTR_V44_SIZE,
        )
    };
    0
}

/// `ibv_query_gid`: port 1, index 0 only (`fe80::` + node GUID); otherwise -1 with
/// `errno` `EINVAL`.
///
/// # Safety
/// `context` is a live context; `gid` points to a writable `ibv_gid`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if port_num != 1 || index != 0 || gid.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let raw = provider::get().devices[c.core.dev].gid;
    // SAFETY: a writable 16-byte `ibv_gid` (contract).
    unsafe { gid.write(ibv_gid { raw }) };
    0
}

/// `ibv_query_pkey`: index 0 of port 1 is the default P_Key 0xffff (network order).
///
/// # Safety
/// `context` is a live context; `pkey` points to a writable `u16`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if context.is_null() || port_num != 1 || index != 0 || pkey.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a writable u16 (contract).
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `context` is a live context of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let id = provider::get().next_id();
    into_raw::<_, ibv_pd>(PdObj {
        ibv: ibv_pd {
            context,
            handle: id,
        },
        core: Arc::new(PdCore {
            id,
            dev: c.core.dev,
            users: Default::default(),
        }),
    })
}

/// `ibv_dealloc_pd`: `EBUSY` while MRs or QPs use it.
///
/// # Safety
/// `pd` came from [`ibv_alloc_pd`]; on success it is freed.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { obj::<PdObj, _>(pd) }) else {
        return libc::EINVAL;
    };
    if p.core.users.load(Ordering::Acquire) != 0 {
        return libc::EBUSY;
    }
    // SAFETY: per the contract; `p` is not used after this.
    unsafe { free::<PdObj, _>(pd) };
    0
}

/// Access bits `ibv_reg_mr` accepts.
const MR_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB
    | IBV_ACCESS_RELAXED_ORDERING;

/// `ibv_reg_mr`: registers `[addr, addr + length)`. Remote write or atomic access
/// without local write is `EINVAL`, as the specification requires.
///
/// # Safety
/// `pd` is a live PD; the memory stays valid (mapped, readable and writable as the
/// access flags allow) until [`ibv_dereg_mr`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { obj::<PdObj, _>(pd) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let access = access as u32;
    let remote_needs_local = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if length == 0
        || addr.is_null()
        || access & !MR_ACCESS != 0
        || (access & remote_needs_local != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0)
        || (addr as u64).checked_add(length as u64).is_none()
    {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let info = MrInfo {
        addr: addr as u64,
        len: length as u64,
        access,
        dev: p.core.dev,
        pd: p.core.id,
    };
    let key = provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .register(info);
    let Some(key) = key else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    p.core.users.fetch_add(1, Ordering::AcqRel);
    into_raw::<_, ibv_mr>(MrObj {
        ibv: ibv_mr {
            // SAFETY: a live PD (contract).
            context: unsafe { (*pd).context },
            pd,
            addr,
            length,
            handle: key,
            lkey: key,
            rkey: key,
        },
        pd: Arc::clone(&p.core),
    })
}

/// `ibv_reg_mr_iova2`: only `iova == addr` is supported (`EOPNOTSUPP` otherwise).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    if iova != addr as u64 {
        set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    }
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr(pd, addr, length, access as c_int) }
}

/// `ibv_reg_mr_iova`: as [`ibv_reg_mr_iova2`].
///
/// # Safety
/// As [`ibv_reg_mr`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

/// `ibv_dereg_mr`. WQEs that reach the region afterwards fail with a protection error.
///
/// # Safety
/// `mr` came from [`ibv_reg_mr`] and is deregistered once.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: per the contract.
    let Some(m) = (unsafe { obj::<MrObj, _>(mr) }) else {
        return libc::EINVAL;
    };
    provider::get()
        .mrs
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .deregister(m.ibv.lkey);
    m.pd.users.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: per the contract; `m` is not used after this.
    unsafe { free::<MrObj, _>(mr) };
    0
}

/// `ibv_create_comp_channel`: its `fd` is an eventfd, readable while events wait.
///
/// # Safety
/// `context` is a live context.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    if context.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let core = match ChannelCore::new() {
        Ok(c) => Arc::new(c),
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return core::ptr::null_mut();
        }
    };
    into_raw::<_, ibv_comp_channel>(ChannelObj {
        ibv: ibv_comp_channel {
            context,
            fd: core.fd.raw(),
            refcnt: 0,
        },
        core,
    })
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it.
///
/// # Safety
/// `channel` came from [`ibv_create_comp_channel`]; on success it is freed.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: per the contract.
    let Some(ch) = (unsafe { obj::<ChannelObj, _>(channel) }) else {
        return libc::EINVAL;
    };
    if ch.core.users.load(Ordering::Acquire) != 0 {
        return libc::EBUSY;
    }
    // SAFETY: per the contract; `ch` is not used after this.
    unsafe { free::<ChannelObj, _>(channel) };
    0
}

/// `ibv_create_cq`: exactly `cqe` entries (1 ..= [`MAX_CQE`]); completion vector 0.
///
/// # Safety
/// `context` is a live context; `channel` is null or a live channel of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if !(1..=MAX_CQE).contains(&cqe) || comp_vector != 0 {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: per the contract.
    let ch = unsafe { obj::<ChannelObj, _>(channel) }.map(|ch| Arc::clone(&ch.core));
    let core = Arc::new(CqCore::new(
        cqe as usize,
        c.core.dev,
        Arc::clone(&c.core),
        ch,
        cq_context as usize,
    ));
    let ibv = ibv_cq {
        context,
        channel,
        cq_context,
        handle: provider::get().next_id(),
        cqe,
        ..Default::default()
    };
    let p = into_raw::<_, ibv_cq>(CqObj {
        ibv: UnsafeCell::new(ibv),
        core: Arc::clone(&core),
    });
    core.handle.store(p as usize, Ordering::Relaxed);
    p
}

/// `ibv_destroy_cq`: `EBUSY` while QPs use it; waits until every completion event
/// received for it was acknowledged.
///
/// # Safety
/// `cq` came from [`ibv_create_cq`]; on success it is freed.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { obj::<CqObj, _>(cq) }) else {
        return libc::EINVAL;
    };
    if q.core.users.load(Ordering::Acquire) != 0 {
        return libc::EBUSY;
    }
    q.core.wait_acked();
    q.core.release_channel();
    // SAFETY: per the contract; `q` is not used after this.
    unsafe { free::<CqObj, _>(cq) };
    0
}

/// `ibv_get_cq_event`: waits for the next event (honouring `O_NONBLOCK` on the
/// channel's fd: then -1 with `EAGAIN`).
///
/// # Safety
/// `channel` is a live channel; `cq` and `cq_context` point to writable pointers.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: per the contract.
    let Some(ch) = (unsafe { obj::<ChannelObj, _>(channel) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    if let Err(e) = ch.core.fd.wait_one() {
        set_errno(e.raw_os_error().unwrap_or(libc::EIO));
        return -1;
    }
    let Some((q, qctx)) = ch.core.take() else {
        set_errno(libc::EIO);
        return -1;
    };
    // SAFETY: writable out-pointers (contract).
    unsafe {
        *cq = q as *mut ibv_cq;
        *cq_context = qctx as *mut c_void;
    }
    0
}

/// `ibv_ack_cq_events`.
///
/// # Safety
/// `cq` is a live CQ.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: per the contract.
    if let Some(q) = unsafe { obj::<CqObj, _>(cq) } {
        q.core.ack(nevents);
    }
}

/// `ibv_create_qp`: RC only (`EOPNOTSUPP` for other types, `EINVAL` for SRQs or sizes
/// beyond the device's limits). Writes the granted sizes back into `qp_init_attr.cap`.
///
/// # Safety
/// `pd` is a live PD; `qp_init_attr` points to a readable and writable
/// `ibv_qp_init_attr` whose CQs are live CQs of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: per the contract.
    let (Some(p), Some(init)) = (unsafe { obj::<PdObj, _>(pd) }, unsafe {
        qp_init_attr.as_mut()
    }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if init.qp_type != IBV_QPT_RC {
        set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    }
    // SAFETY: per the contract.
    let (Some(scq), Some(rcq)) = (unsafe { obj::<CqObj, _>(init.send_cq) }, unsafe {
        obj::<CqObj, _>(init.recv_cq)
    }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if !init.srq.is_null() || scq.core.dev != p.core.dev || rcq.core.dev != p.core.dev {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let cap = match QpCore::grant(&init.cap) {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            return core::ptr::null_mut();
        }
    };
    init.cap = cap;
    let prov = provider::get();
    let (qpn, nth) = prov.alloc_qpn();
    let core = Arc::new(QpCore::new(
        qpn,
        nth,
        p.core.dev,
        p.core.id,
        Arc::clone(&scq.core.ctx),
        Arc::clone(&scq.core),
        Arc::clone(&rcq.core),
        init.sq_sig_all != 0,
        cap,
    ));
    {
        let faults = crate::cq::lock(&prov.faults);
        if let Some(n) = faults.fail_after(qpn, nth) {
            core.fail_after.store(n, Ordering::Relaxed);
        }
        if let Some(d) = faults.delay(qpn, nth) {
            core.delay_ns.store(
                d.as_nanos().min(u128::from(u64::MAX)) as u64,
                Ordering::Relaxed,
            );
        }
    }
    prov.register_qp(&core);
    p.core.users.fetch_add(1, Ordering::AcqRel);
    let ibv = ibv_qp {
        // SAFETY: a live PD (contract).
        context: unsafe { (*pd).context },
        qp_context: init.qp_context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: core::ptr::null_mut(),
        handle: qpn,
        qp_num: qpn,
        state: IBV_QPS_RESET,
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    let ptr = into_raw::<_, ibv_qp>(QpObj {
        ibv: UnsafeCell::new(ibv),
        core: Arc::clone(&core),
        pd: Arc::clone(&p.core),
    });
    core.handle.store(ptr as usize, Ordering::Relaxed);
    ptr
}

/// # Safety
/// `qp` is null or a live QP of this provider.
unsafe fn qp_obj<'a>(qp: *mut ibv_qp) -> Option<&'a QpObj> {
    // SAFETY: forwarded.
    unsafe { obj::<QpObj, _>(qp) }
}

/// `ibv_destroy_qp`: outstanding WQEs are dropped without completions.
///
/// # Safety
/// `qp` came from [`ibv_create_qp`] and is destroyed once.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { qp_obj(qp) }) else {
        return libc::EINVAL;
    };
    provider::get().unregister_qp(q.core.qpn);
    q.core.destroy();
    q.pd.users.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: per the contract; `q` is not used after this.
    unsafe { free::<QpObj, _>(qp) };
    0
}

/// `ibv_modify_qp`: the RC state machine, with the attribute mask each transition
/// requires and allows (anything else is `EINVAL`).
///
/// # Safety
/// `qp` is a live QP; `attr` points to a readable `ibv_qp_attr`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(q), Some(a)) = (unsafe { qp_obj(qp) }, unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    let mask = attr_mask as u32;
    match q.core.modify(a, mask) {
        Ok(()) => {
            if mask & IBV_QP_STATE != 0 {
                // SAFETY: the `ibv_qp` is live; `state` is the library's to write, as
                // libibverbs' own `ibv_modify_qp` does.
                unsafe { (*q.ibv.get()).state = a.qp_state };
            }
            0
        }
        Err(e) => e,
    }
}

/// `ibv_query_qp`: every attribute (the mask is not needed to choose).
///
/// # Safety
/// `qp` is a live QP; `attr` and `init_attr` point to writable structs.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { qp_obj(qp) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: writable (contract).
    unsafe { attr.write(q.core.query()) };
    if !init_attr.is_null() {
        // SAFETY: the `ibv_qp` is live; we read fields set at creation.
        let ibv = unsafe { &*q.ibv.get() };
        let init = ibv_qp_init_attr {
            qp_context: ibv.qp_context,
            send_cq: ibv.send_cq,
            recv_cq: ibv.recv_cq,
            srq: core::ptr::null_mut(),
            cap: q.core.cap,
            qp_type: IBV_QPT_RC,
            sq_sig_all: c_int::from(q.core.sq_sig_all),
        };
        // SAFETY: writable (contract).
        unsafe { init_attr.write(init) };
    }
    0
}

/// `ibv_wc_status_str`: libibverbs' text for a completion status.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_wc_status_str(status: c_uint) -> *const c_char {
    const S: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    S.get(status as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_get_async_event`: waits for the next asynchronous event of the context
/// (`IBV_EVENT_CQ_ERR` on a CQ overrun, `IBV_EVENT_QP_FATAL` for an injected QP
/// failure, `IBV_EVENT_QP_REQ_ERR` at a responder that received a bad request,
/// `IBV_EVENT_PORT_ERR` / `IBV_EVENT_PORT_ACTIVE` on link changes). Honours `O_NONBLOCK`
/// on `context->async_fd`.
///
/// # Safety
/// `context` is a live context; `event` points to a writable [`ibv_async_event`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { ctx(context) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    if let Err(e) = c.core.async_fd.wait_one() {
        set_errno(e.raw_os_error().unwrap_or(libc::EIO));
        return -1;
    }
    let Some(ev) = c.core.take() else {
        set_errno(libc::EIO);
        return -1;
    };
    let mut out = ibv_async_event {
        event_type: ev.kind,
        ..Default::default()
    };
    if matches!(
        ev.kind,
        crate::cq::event::PORT_ACTIVE | crate::cq::event::PORT_ERR
    ) {
        out.element.port_num = ev.element as c_int;
    } else {
        out.element.cq = ev.element as *mut ibv_cq;
    }
    // SAFETY: writable (contract).
    unsafe { event.write(out) };
    0
}

/// `ibv_ack_async_event`: nothing to release here.
///
/// # Safety
/// `event` came from [`ibv_get_async_event`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

/// `ibv_fork_init`: nothing to prepare (no pinned pages); 0.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_port_state_str`: libibverbs' text for a port state.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_port_state_str(port_state: c_uint) -> *const c_char {
    const S: [&CStr; 6] = [
        c"PORT_NOP",
        c"PORT_DOWN",
        c"PORT_INIT",
        c"PORT_ARMED",
        c"PORT_ACTIVE",
        c"PORT_ACTIVE_DEFER",
    ];
    S.get(port_state as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_node_type_str`: libibverbs' text for a node type.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    match node_type {
        IBV_NODE_CA => c"InfiniBand channel adapter",
        IBV_NODE_SWITCH => c"InfiniBand switch",
        IBV_NODE_ROUTER => c"InfiniBand router",
        IBV_NODE_RNIC => c"iWARP NIC",
        _ => c"unknown",
    }
    .as_ptr()
}

const _: () = {
    // Sizes the cdylib advertises must fit the host's and the C header's types.
    assert!(MAX_INLINE <= 1024);
};
