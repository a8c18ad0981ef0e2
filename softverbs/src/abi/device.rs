//! Devices and contexts: the device list, `ibv_open_device` / `ibv_close_device`, and
//! the device, port, GID and P_Key queries.

use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int};
use std::sync::{Arc, OnceLock};

use vqp_sys::*;

use super::cq::MAX_CQE;
use super::object::{ctx, publish, retire, CtxObj};
use super::{context_ops, set_errno, verbs_ops};
use crate::cq::CtxCore;
use crate::provider;
use crate::qp::{MAX_QP_WR, MAX_RD_ATOMIC, MAX_SGE};

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

/// `ibv_device_attr.vendor_id` of every soft device: "no IEEE OUI", as `rdma_rxe` reports.
pub const VENDOR_ID: u32 = 0x00ff_ffff;

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

/// `ibv_get_device_name`: `soft<N>`; null (with `errno` `EINVAL`) for null or a
/// pointer that is not one of this provider's devices.
///
/// # Safety
/// None beyond the C prototype: the pointer is compared, never dereferenced unless it
/// is one of the devices.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    if device_index(device).is_none() {
        set_errno(libc::EINVAL);
        return core::ptr::null();
    }
    // SAFETY: one of the device structs, which are never freed; the name is
    // NUL-terminated.
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

/// `ibv_open_device`: a new context on `device`, extended: the `ibv_context` returned
/// is the last field of a `verbs_context` holding the extended operations (see
/// `verbs_ops`), with `abi_compat` set to `__VERBS_ABI_IS_EXTENDED`, as rdma-core's
/// `verbs_init_and_alloc_context` lays out a provider's context.
///
/// # Safety
/// `device` is null or a device of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let Some(index) = device_index(device) else {
        set_errno(libc::ENODEV);
        return core::ptr::null_mut();
    };
    let prov = provider::get();
    // A device bound to an interface that does not exist or has no address cannot be
    // opened (the reason was printed when the provider started).
    if let Some(Err(_)) = &prov.devices[index].netdev {
        set_errno(libc::ENODEV);
        return core::ptr::null_mut();
    }
    prov.start_watching();
    let core = match CtxCore::new(index) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return core::ptr::null_mut();
        }
    };
    let cmd = match crate::os::EventFd::new() {
        Ok(f) => f,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return core::ptr::null_mut();
        }
    };
    provider::get().register_context(&core);
    let mut ibv = verbs_ops();
    ibv.context = ibv_context {
        device,
        ops: context_ops(),
        cmd_fd: cmd.raw(),
        async_fd: core.async_fd.raw(),
        num_comp_vectors: 1,
        abi_compat: VERBS_ABI_IS_EXTENDED,
        ..Default::default()
    };
    publish(CtxObj {
        ibv: UnsafeCell::new(ibv),
        core,
        cmd,
    })
}

/// `ibv_close_device`. Objects still open on the context stay usable by the engine but
/// must not be used through the closed context. `EINVAL` for a context that is not
/// open (closed already, or never opened here).
///
/// # Safety
/// No other thread uses the context during the call or after it.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    match retire::<CtxObj>(context, |_| Ok(())) {
        Ok(c) => {
            c.free();
            0
        }
        Err(e) => e,
    }
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
        // No IEEE OUI is ours: 0xffffff, the value the kernel's software RoCE provider
        // reports for the same reason (`RXE_VENDOR_ID`, drivers/infiniband/sw/rxe/
        // rxe_param.h). Not Mellanox's 0x02c9: UCX and Open MPI would then take
        // mlx5-only paths; Open MPI's openib uses its `[default]` parameters for it.
        vendor_id: VENDOR_ID,
        vendor_part_id: 0,
        hw_ver: 1,
        max_qp: 1 << 20,
        max_qp_wr: MAX_QP_WR as c_int,
        // Memory windows, type 1 and 2B, as a ConnectX reports them (Linux
        // drivers/infiniband/hw/mlx5/main.c, `mlx5_ib_query_device`:
        // IB_DEVICE_MEM_WINDOW | IB_DEVICE_MEM_WINDOW_TYPE_2B, bits 17 and 24), and XRC.
        device_cap_flags: (1 << 5)
            | (1 << 7)
            | (1 << 8)
            | (1 << 10)
            | (1 << 11)
            | (1 << 12)
            | (1 << 17)
            | (1 << 24)
            | IBV_DEVICE_XRC,
        max_sge: MAX_SGE as c_int,
        max_sge_rd: MAX_SGE as c_int,
        max_cq: 1 << 20,
        max_cqe: MAX_CQE,
        max_mr: 1 << 24,
        // Windows share the key table with regions.
        max_mw: 1 << 24,
        max_pd: 1 << 24,
        max_qp_rd_atom: c_int::from(MAX_RD_ATOMIC),
        max_res_rd_atom: c_int::from(MAX_RD_ATOMIC) << 16,
        max_qp_init_rd_atom: c_int::from(MAX_RD_ATOMIC),
        // What a ConnectX reports (Linux drivers/infiniband/hw/mlx5/main.c,
        // `get_atomic_caps`): atomic against the device's other atomics, which softverbs
        // guarantees across processes; UCX offers 64-bit atomics only for `HCA`.
        atomic_cap: IBV_ATOMIC_HCA,
        max_pkeys: 1,
        max_ah: 1 << 16,
        max_srq: 1 << 16,
        max_srq_wr: crate::srq::MAX_SRQ_WR as c_int,
        max_srq_sge: MAX_SGE as c_int,
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
/// append are left as the caller zeroed them. `active_width` and `active_speed` are the
/// InfiniBand pair nearest the device's link rate (4X EDR, 100 Gb/s, when unlimited).
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
    // A rated link reports the width and speed nearest its rate (read now, so a rate
    // changed at run time shows at the next query); `active_speed_ex`, past the v44
    // prefix, stays as the caller zeroed it, meaning "see `active_speed`".
    let (active_width, active_speed) = crate::link::port_speed(d.link.rate());
    // A RoCE port as mlx5 reports one (the kernel's `mlx5_query_port_roce`): LID and SM
    // LID 0, max MTU 4096 and the active MTU from the interface, capabilities CM and
    // IP-based GIDs (`IB_PORT_CM_SUP`, `IB_PORT_IP_BASED_GIDS`), link layer Ethernet.
    let roce = d.is_roce();
    let a = ibv_port_attr {
        state: if up { IBV_PORT_ACTIVE } else { IBV_PORT_DOWN },
        max_mtu: IBV_MTU_4096,
        active_mtu: d.active_mtu(),
        gid_tbl_len: d.gids().len() as c_int,
        port_cap_flags: if roce {
            1 << 16 | 1 << 26 // IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS
        } else {
            1 << 16 // IBV_PORT_CM_SUP
        },
        max_msg_sz: crate::qp::MAX_MSG as u32,
        pkey_tbl_len: 1,
        lid: d.port_lid(),
        sm_lid: u16::from(!roce),
        max_vl_num: 1,
        subnet_timeout: if roce { 0 } else { 18 },
        active_width,
        active_speed,
        phys_state: if up { 5 } else { 3 }, // LinkUp / Disabled
        link_layer: if roce {
            IBV_LINK_LAYER_ETHERNET
        } else {
            IBV_LINK_LAYER_INFINIBAND
        },
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

/// `ibv_query_gid`: an entry of port 1's GID table (an InfiniBand port's index 0,
/// `fe80::` + node GUID; a RoCE port's RoCE v2 GIDs); otherwise -1 with `errno`
/// `EINVAL`.
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
    let gids = provider::get().devices[c.core.dev].gids();
    let entry = usize::try_from(index).ok().and_then(|i| gids.get(i));
    let (Some(&raw), 1, false) = (entry, port_num, gid.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
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
    // SAFETY: per the contract.
    if unsafe { ctx(context) }.is_none() || port_num != 1 || index != 0 || pkey.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a writable u16 (contract).
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

/// `ibv_fork_init`: nothing to prepare (no pinned pages); 0.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}
