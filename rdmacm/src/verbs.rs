//! libibverbs, as this library uses it: loaded once (`libibverbs.so.1`, which under
//! `softverbs run` or an `LD_PRELOAD` of softverbs is softverbs; or the library
//! `VQP_IBVERBS_PATH` names) through vqp-host's loader, every device opened once per
//! process — the contexts `rdma_get_devices` returns and every cm id uses, as
//! rdma-core's librdmacm keeps one context per device — and port 1 of each queried for
//! its LID, GID and MTU.

use std::net::IpAddr;
use std::sync::OnceLock;

use vqp_host::{Verbs, VerbsTable};
use vqp_sys::{
    ibv_context, ibv_gid, ibv_port_attr, ibv_qp, ibv_qp_init_attr_ex, ibv_srq,
    ibv_srq_init_attr_ex, ibv_xrcd, ibv_xrcd_init_attr, verbs_context, IBV_XRCD_INIT_ATTR_FD,
    IBV_XRCD_INIT_ATTR_OFLAGS, VERBS_ABI_IS_EXTENDED,
};

/// One opened device and the address of its port 1.
pub struct Device {
    /// The context every cm id on the device uses (never closed: the process's).
    pub context: *mut ibv_context,
    /// Port 1's LID.
    pub lid: u16,
    /// Port 1's GID 0.
    pub gid: [u8; 16],
    /// Port 1's GID table, index order, up to the first index the device does not
    /// answer (on a RoCE port: the default GID, then the bound interface's addresses).
    pub gids: Vec<[u8; 16]>,
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
        let mut gids = vec![raw];
        for index in 1..attr.gid_tbl_len.clamp(1, 256) {
            // SAFETY: `context` is open; `gid` is writable.
            if unsafe { (t.query_gid)(context, 1, index, &mut gid) } != 0 {
                break;
            }
            // SAFETY: as above.
            gids.push(unsafe { gid.raw });
        }
        out.push(Device {
            context,
            lid: attr.lid,
            gid: raw,
            gids,
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

/// An address's RoCE v2 GID: an IPv4 address as `::ffff:a.b.c.d`, an IPv6 one as it
/// is (the kernel's `rdma_ip2gid`).
pub fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Where an address of this machine lives: a device, and the GID of port 1 that
/// stands for the address.
#[derive(Clone, Copy)]
pub struct Place {
    /// The device.
    pub dev: &'static Device,
    /// The GID (the id's `sgid`, the REQ's or REP's GID).
    pub gid: [u8; 16],
}

impl Device {
    /// The index of `gid` in port 1's table (0, the default GID, when it is not there).
    pub fn gid_index(&self, gid: &[u8; 16]) -> u8 {
        self.gids
            .iter()
            .position(|g| g == gid)
            .and_then(|i| u8::try_from(i).ok())
            .unwrap_or(0)
    }
}

/// The device an address of this machine resolves to (see [`crate::addr`]): the
/// device bound to the interface that owns it — the RoCE port whose GID table holds
/// the address as a GID, as the kernel's rdma_cm binds an id to the device of the
/// netdev that owns its address and takes that address's GID — else device 0 by its
/// GID 0 (loopback, and interfaces no device is bound to).
pub fn place(ip: IpAddr) -> Result<Place, i32> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let devs = devices()?;
    let want = ip_gid(ip);
    let bound = (!ip.is_loopback() && !ip.is_unspecified())
        .then(|| {
            devs.list.iter().find(|d| {
                d.link_layer == vqp_sys::IBV_LINK_LAYER_ETHERNET && d.gids.contains(&want)
            })
        })
        .flatten();
    Ok(match bound {
        Some(dev) => Place { dev, gid: want },
        None => {
            let dev = devs.list.first().ok_or(libc::ENODEV)?;
            Place { dev, gid: dev.gid }
        }
    })
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

/// The extended operations in front of `ctx` (verbs.h's `verbs_get_ctx`), when the
/// context has them: `EOPNOTSUPP` otherwise, as verbs.h's inline wrappers answer a
/// provider without the operation.
fn extended<'a>(ctx: *mut ibv_context) -> Result<&'a verbs_context, i32> {
    // Only the process's own contexts are used.
    let dev = by_context(ctx).ok_or(libc::EINVAL)?;
    // SAFETY: an open context of the loaded library.
    if unsafe { (*dev.context).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return Err(libc::EOPNOTSUPP);
    }
    let off = core::mem::offset_of!(verbs_context, context);
    // SAFETY: an extended context is the last field of a `verbs_context` (what
    // `abi_compat` just said); the provider keeps it as long as the context.
    let v = unsafe { &*dev.context.cast::<u8>().sub(off).cast::<verbs_context>() };
    if v.sz < core::mem::size_of::<verbs_context>() {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(v)
}

fn errno_or(e: i32) -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(e)
}

static XRCDS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

/// The XRC domain librdmacm gives XRC ids on `ctx`: one per device, opened on first
/// use without a file (private to this process) and kept, as rdma-core's
/// `ucma_get_xrcd` opens it (`fd` -1, `O_CREAT`).
pub fn xrcd(ctx: *mut ibv_context) -> Result<*mut ibv_xrcd, i32> {
    let open = extended(ctx)?.open_xrcd.ok_or(libc::EOPNOTSUPP)?;
    // The process's own context (`extended` found it), not the caller's pointer.
    let ctx = by_context(ctx).ok_or(libc::EINVAL)?.context;
    let mut xs = XRCDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, x)) = xs.iter().find(|(c, _)| *c == ctx as usize) {
        return Ok(x as *mut ibv_xrcd);
    }
    let mut a = ibv_xrcd_init_attr {
        comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        fd: -1,
        oflags: libc::O_CREAT,
    };
    // SAFETY: one of the process's open contexts; `a` is a valid attribute struct.
    let x = unsafe { open(ctx, &mut a) };
    if x.is_null() {
        return Err(errno_or(libc::ENOMEM));
    }
    xs.push((ctx as usize, x as usize));
    Ok(x)
}

/// `ibv_create_qp_ex` on `ctx`.
///
/// # Safety
/// `a` is a valid attribute struct whose objects belong to `ctx` and stay alive.
pub unsafe fn create_qp_ex(
    ctx: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> Result<*mut ibv_qp, i32> {
    let f = extended(ctx)?.create_qp_ex.ok_or(libc::EOPNOTSUPP)?;
    // SAFETY: an open context; `a` per the caller's contract.
    let qp = unsafe { f(ctx, a) };
    if qp.is_null() {
        return Err(errno_or(libc::ENOMEM));
    }
    Ok(qp)
}

/// `ibv_create_srq_ex` on `ctx`.
///
/// # Safety
/// `a` is a valid attribute struct whose objects belong to `ctx` and stay alive.
pub unsafe fn create_srq_ex(
    ctx: *mut ibv_context,
    a: &mut ibv_srq_init_attr_ex,
) -> Result<*mut ibv_srq, i32> {
    let f = extended(ctx)?.create_srq_ex.ok_or(libc::EOPNOTSUPP)?;
    // SAFETY: an open context; `a` per the caller's contract.
    let srq = unsafe { f(ctx, a) };
    if srq.is_null() {
        return Err(errno_or(libc::ENOMEM));
    }
    Ok(srq)
}
