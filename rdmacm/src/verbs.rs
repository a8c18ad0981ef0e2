//! libibverbs, as this library uses it: loaded once (`libibverbs.so.1`, which under
//! `softverbs run` or an `LD_PRELOAD` of softverbs is softverbs; or the library
//! `VQP_IBVERBS_PATH` names) through vqp-host's loader, every device opened once per
//! process — the contexts `rdma_get_devices` returns and every cm id uses, as
//! rdma-core's librdmacm keeps one context per device — and port 1 of each queried for
//! its LID, GID and MTU.

use std::sync::OnceLock;

use vqp_host::{Verbs, VerbsTable};
use vqp_sys::{ibv_context, ibv_gid, ibv_port_attr};

/// One opened device and the address of its port 1.
pub struct Device {
    /// The context every cm id on the device uses (never closed: the process's).
    pub context: *mut ibv_context,
    /// Port 1's LID.
    pub lid: u16,
    /// Port 1's GID 0.
    pub gid: [u8; 16],
    /// Port 1's active MTU (`IBV_MTU_*`).
    pub mtu: u8,
    /// Port 1's link layer (`IBV_LINK_LAYER_*`).
    pub link_layer: u8,
}

/// The loaded library and the devices.
pub struct Devices {
    /// The function table.
    pub verbs: Verbs,
    /// Every device, in libibverbs' order.
    pub list: Vec<Device>,
}

// SAFETY: the contexts are libibverbs objects, usable from any thread; this struct only
// hands their pointers out.
unsafe impl Send for Devices {}
// SAFETY: as above; nothing in it is mutated after it is built.
unsafe impl Sync for Devices {}

static DEVICES: OnceLock<Result<Devices, i32>> = OnceLock::new();

/// The devices, loading libibverbs and opening them on first use; an errno value when
/// the library or any device is missing (`ENODEV`, as librdmacm's `ucma_init` reports
/// a machine without RDMA devices).
pub fn devices() -> Result<&'static Devices, i32> {
    DEVICES.get_or_init(load).as_ref().map_err(|e| *e)
}

/// The table of the loaded library.
pub fn table() -> Result<&'static VerbsTable, i32> {
    devices().map(|d| d.verbs.table())
}

fn load() -> Result<Devices, i32> {
    let verbs = Verbs::load().map_err(|_| libc::ENODEV)?;
    let t = *verbs.table();
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer.
    let list = unsafe { (t.get_device_list)(&mut n) };
    if list.is_null() || n <= 0 {
        if !list.is_null() {
            // SAFETY: `list` came from get_device_list.
            unsafe { (t.free_device_list)(list) };
        }
        return Err(libc::ENODEV);
    }
    let mut out = Vec::new();
    for i in 0..n as usize {
        // SAFETY: `list` holds `n` device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is a device of the list, which is still alive.
        let context = unsafe { (t.open_device)(dev) };
        if context.is_null() {
            continue;
        }
        // SAFETY: a zeroed port attribute is a valid out-buffer (sized for the newest
        // layout, see vqp-sys).
        let mut attr: ibv_port_attr = unsafe { core::mem::zeroed() };
        // SAFETY: `context` is open; `attr` is writable.
        if unsafe { (t.query_port)(context, 1, &mut attr) } != 0 {
            continue;
        }
        // SAFETY: an all-zero GID is a valid value.
        let mut gid: ibv_gid = unsafe { core::mem::zeroed() };
        // SAFETY: `context` is open; `gid` is writable.
        if unsafe { (t.query_gid)(context, 1, 0, &mut gid) } != 0 {
            continue;
        }
        // SAFETY: every bit pattern is a valid `raw` view of the union.
        let raw = unsafe { gid.raw };
        out.push(Device {
            context,
            lid: attr.lid,
            gid: raw,
            mtu: attr.active_mtu as u8,
            link_layer: attr.link_layer,
        });
    }
    // SAFETY: `list` came from get_device_list; the contexts outlive it.
    unsafe { (t.free_device_list)(list) };
    if out.is_empty() {
        return Err(libc::ENODEV);
    }
    Ok(Devices { verbs, list: out })
}

/// The device whose context is `ctx`.
pub fn by_context(ctx: *mut ibv_context) -> Option<&'static Device> {
    devices().ok()?.list.iter().find(|d| d.context == ctx)
}

static PDS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

/// The protection domain librdmacm gives ids on `ctx` that were handed none (as
/// rdma-core's does, one per device, allocated on first use and kept).
pub fn default_pd(ctx: *mut ibv_context) -> Result<*mut vqp_sys::ibv_pd, i32> {
    let t = table()?;
    // Only the process's own contexts are used.
    let dev = by_context(ctx).ok_or(libc::EINVAL)?;
    let mut pds = PDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, pd)) = pds.iter().find(|(c, _)| *c == ctx as usize) {
        return Ok(pd as *mut vqp_sys::ibv_pd);
    }
    // SAFETY: one of the process's open contexts.
    let pd = unsafe { (t.alloc_pd)(dev.context) };
    if pd.is_null() {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM));
    }
    pds.push((ctx as usize, pd as usize));
    Ok(pd)
}
