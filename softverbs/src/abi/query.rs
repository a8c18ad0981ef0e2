//! Queries beyond the basic set: device index, the GID table with GID types, P_Key
//! lookup, port speed, and the questions about extended QPs.
//!
//! Conventions are rdma-core's for each function: `_ibv_query_gid_ex` returns an errno
//! value, `_ibv_query_gid_table` a count or a negative errno value, `ibv_query_gid_type`
//! and `ibv_get_pkey_index` -1 with `errno`.

use core::ffi::{c_int, c_uint, c_void};

use vqp_sys::*;

use super::object::{live, CtxObj, QpObj};
use super::set_errno;
use crate::provider;

/// `enum ibv_gid_type`: an InfiniBand GID (the type of an InfiniBand port's GIDs).
pub const IBV_GID_TYPE_IB: u32 = 0;
/// `enum ibv_gid_type`: a RoCE v1 GID.
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
/// `enum ibv_gid_type`: a RoCE v2 GID.
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
/// `enum ibv_gid_type_sysfs` (rdma-core's driver.h): IB or RoCE v1, the type
/// `ibv_query_gid_type` reports for an InfiniBand GID.
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
/// `enum ibv_gid_type_sysfs`: RoCE v2.
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

/// An unlimited port's effective speed for `ibv_query_port_speed`, in units of 100 Mb/s:
/// 4X EDR, 100 Gb/s, as `ibv_query_port` reports it (`active_width` 4X, `active_speed`
/// EDR). A rated port reports the speed of its width and lane speed instead.
pub const PORT_SPEED_100MBPS: u64 = 1000;

/// `struct ibv_gid_entry`: one GID table entry.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ibv_gid_entry {
    /// The GID.
    pub gid: ibv_gid,
    /// Its index in the port's table.
    pub gid_index: u32,
    /// The port.
    pub port_num: u32,
    /// `enum ibv_gid_type` (`IBV_GID_TYPE_*`).
    pub gid_type: u32,
    /// The network device of a RoCE GID (0 on InfiniBand).
    pub ndev_ifindex: u32,
}

/// The device index of a context, `None` for null.
///
/// # Safety
/// `context` is null or a live context of this provider.
unsafe fn ctx_dev(context: *mut ibv_context) -> Option<usize> {
    // SAFETY: forwarded.
    unsafe { live::<CtxObj>(context) }.map(|c| c.core.dev)
}

/// The GID table entry `(port, index)` of device `dev`: port 1's table, an InfiniBand
/// port's one GID (type IB) or a RoCE port's RoCE v2 GIDs with their interface.
fn gid_entry(dev: usize, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    let d = &provider::get().devices[dev];
    let gid = usize::try_from(index).ok().and_then(|i| d.gids().get(i));
    let (Some(&raw), 1) = (gid, port) else {
        return Err(libc::EINVAL);
    };
    let (gid_type, ndev_ifindex) = match d.roce() {
        Some(n) => (IBV_GID_TYPE_ROCE_V2, n.ifindex),
        None => (IBV_GID_TYPE_IB, 0),
    };
    Ok(ibv_gid_entry {
        gid: ibv_gid { raw },
        gid_index: index,
        port_num: port,
        gid_type,
        ndev_ifindex,
    })
}

/// Writes `e` into a caller's entry of `entry_size` bytes (at least the struct), zeroing
/// the bytes of a larger entry that this version does not know.
///
/// # Safety
/// `dst` is writable for `entry_size` bytes and `entry_size >= size_of::<ibv_gid_entry>()`.
unsafe fn put_entry(dst: *mut u8, entry_size: usize, e: &ibv_gid_entry) {
    let n = core::mem::size_of::<ibv_gid_entry>();
    // SAFETY: `dst` holds `entry_size >= n` writable bytes (contract); the source is a
    // local, so the ranges cannot overlap.
    unsafe {
        core::ptr::copy_nonoverlapping((e as *const ibv_gid_entry).cast::<u8>(), dst, n);
        core::ptr::write_bytes(dst.add(n), 0, entry_size - n);
    }
}

/// `ibv_get_device_index`: the device's index (`soft<N>` is N), as the kernel's
/// `ibdev` index would be; -1 for a device that is not this provider's.
///
/// # Safety
/// `device` may be anything: it is only compared with the provider's devices.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    match soft_device_index(device) {
        Some(i) => i as c_int,
        None => -1,
    }
}

/// The index of `device` in the provider's device list, if it is one of them.
pub(super) fn soft_device_index(device: *mut ibv_device) -> Option<usize> {
    if device.is_null() {
        return None;
    }
    let mut n: c_int = 0;
    // SAFETY: `n` is a writable int.
    let list = unsafe { super::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return None;
    }
    let count = usize::try_from(n).unwrap_or(0);
    // SAFETY: the list holds `n` device pointers (and a terminating null).
    let found = (0..count).find(|&i| unsafe { *list.add(i) } == device);
    // SAFETY: the list came from `ibv_get_device_list` and is freed once.
    unsafe { super::ibv_free_device_list(list) };
    found
}

/// `_ibv_query_gid_ex` (verbs.h's `ibv_query_gid_ex`): the GID table entry, with its type
/// (`IBV_GID_TYPE_IB`, or `IBV_GID_TYPE_ROCE_V2` on a RoCE port). `EINVAL` for a bad context, port or index, or an `entry_size`
/// smaller than `struct ibv_gid_entry`; `EOPNOTSUPP` for non-zero `flags` (none are
/// defined), as rdma-core answers without kernel support.
///
/// # Safety
/// `context` is null or a live context; `entry` is null or writable for `entry_size`
/// bytes.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if flags != 0 {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: per the contract.
    let Some(dev) = (unsafe { ctx_dev(context) }) else {
        return libc::EINVAL;
    };
    if entry.is_null() || entry_size < core::mem::size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    match gid_entry(dev, port_num, gid_index) {
        Ok(e) => {
            // SAFETY: writable for `entry_size` bytes, at least the struct (checked).
            unsafe { put_entry(entry.cast(), entry_size, &e) };
            0
        }
        Err(errno) => errno,
    }
}

/// `_ibv_query_gid_table` (verbs.h's `ibv_query_gid_table`): every valid GID of every
/// port, `entry_size` bytes apart; the count, or a negative errno value: `-EINVAL` when
/// more entries exist than `max_entries` or on a bad argument, `-EOPNOTSUPP` for
/// non-zero `flags`.
///
/// # Safety
/// `context` is null or a live context; `entries` is writable for
/// `max_entries * entry_size` bytes.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    if flags != 0 {
        return -(libc::EOPNOTSUPP as isize);
    }
    // SAFETY: per the contract.
    let Some(dev) = (unsafe { ctx_dev(context) }) else {
        return -(libc::EINVAL as isize);
    };
    if entry_size < core::mem::size_of::<ibv_gid_entry>() || (entries.is_null() && max_entries > 0)
    {
        return -(libc::EINVAL as isize);
    }
    // One port: its GIDs.
    let count = provider::get().devices[dev].gids().len() as u32;
    let table: Vec<_> = (0..count).map(|i| gid_entry(dev, 1, i)).collect();
    if table.len() > max_entries {
        return -(libc::EINVAL as isize);
    }
    for (i, e) in table.iter().enumerate() {
        let Ok(e) = e else {
            return -(libc::EINVAL as isize);
        };
        // SAFETY: `i < max_entries`, so entry `i` lies inside the caller's array.
        unsafe { put_entry(entries.cast::<u8>().add(i * entry_size), entry_size, e) };
    }
    table.len() as isize
}

/// `ibv_query_gid_type` (rdma-core private ABI, used by `ibv_devinfo`): the sysfs GID
/// type, `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` for an InfiniBand GID, `IBV_GID_TYPE_SYSFS_ROCE_V2`
/// for a RoCE v2 one; -1 with `errno` `EINVAL`
/// for a bad context, port or index.
///
/// # Safety
/// `context` is null or a live context; `gid_type` is null or writable.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    gid_type: *mut u32,
) -> c_int {
    // SAFETY: per the contract.
    let entry = unsafe { ctx_dev(context) }
        .ok_or(libc::EINVAL)
        .and_then(|dev| gid_entry(dev, u32::from(port_num), index));
    match entry {
        Ok(e) if !gid_type.is_null() => {
            let t = match e.gid_type {
                IBV_GID_TYPE_ROCE_V2 => IBV_GID_TYPE_SYSFS_ROCE_V2,
                _ => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
            };
            // SAFETY: writable (contract).
            unsafe { gid_type.write(t) };
            0
        }
        Ok(_) | Err(_) => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// `ibv_get_pkey_index`: the index of `pkey` (network order) in the port's P_Key table,
/// which holds the default P_Key 0xffff at index 0; -1 with `errno` `ENOENT` when it is
/// not there, `EINVAL` for a bad context or port.
///
/// # Safety
/// `context` is null or a live context.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    // SAFETY: per the contract.
    if unsafe { ctx_dev(context) }.is_none() || port_num != 1 {
        set_errno(libc::EINVAL);
        return -1;
    }
    const TABLE: [u16; 1] = [0xffff];
    match TABLE.iter().position(|&k| k.to_be() == pkey) {
        Some(i) => i as c_int,
        None => {
            set_errno(libc::ENOENT);
            -1
        }
    }
}

/// `ibv_query_port_speed`: the port's effective bandwidth in units of 100 Mb/s (rdma-core's
/// ibv_query_port_speed(3): "the effective bandwidth of the port in 100Mb/s
/// granularity"). A rated link delivers its rate, so that is what it reports, rounded
/// (at least 1): 1 GB/s is 80, where `ibv_query_port` can only say 4X SDR, 10 Gb/s. An
/// unlimited link reports lanes × lane speed of its 4X EDR, [`PORT_SPEED_100MBPS`].
/// `EINVAL` for a bad context or port.
///
/// # Safety
/// `context` is null or a live context; `port_speed` is null or writable.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_port_speed(
    context: *mut ibv_context,
    port_num: u32,
    port_speed: *mut u64,
) -> c_int {
    // SAFETY: per the contract.
    let Some(dev) = (unsafe { ctx_dev(context) }) else {
        return libc::EINVAL;
    };
    if port_num != 1 || port_speed.is_null() {
        return libc::EINVAL;
    }
    let rate = provider::get().devices[dev].link.rate();
    let speed = match rate {
        0 => crate::link::port_speed_deci_gbps(crate::link::port_speed(0)),
        r => ((u128::from(r) * 8 + 50_000_000) / 100_000_000).max(1) as u64,
    };
    // SAFETY: writable (contract).
    unsafe { port_speed.write(speed) };
    0
}

/// `ibv_query_qp_data_in_order`: 0, for every operation and with or without
/// `IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS`: the engine moves a message with `memcpy`,
/// whose store order is unspecified, so a responder may not infer the whole message
/// from its last byte (what rdma-core answers for a provider without the operation).
///
/// # Safety
/// `qp` is not dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_uint,
    _flags: u32,
) -> c_int {
    0
}

/// `ibv_qp_to_qp_ex`: the `ibv_qp_ex` of a QP created by `ibv_create_qp_ex` with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (see `qp_ex`); null for any other QP, as
/// libibverbs answers for a QP without `VERBS_QP_EX` (with `errno` `EOPNOTSUPP` here,
/// `EINVAL` for a pointer that is not a live QP).
///
/// # Safety
/// `qp` is null or a live QP of this provider.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut c_void {
    // SAFETY: per the contract.
    let errno = match unsafe { live::<QpObj>(qp) } {
        Some(q) => {
            let x = super::qp_ex::to_qp_ex(q);
            if !x.is_null() {
                return x.cast();
            }
            libc::EOPNOTSUPP
        }
        None => libc::EINVAL,
    };
    set_errno(errno);
    core::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{ibv_close_device, ibv_free_device_list, ibv_get_device_list};

    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    /// Opens device `i`; the context is closed when the guard drops.
    struct Ctx(*mut ibv_context, *mut ibv_device);
    impl Ctx {
        fn open(i: usize) -> Ctx {
            // SAFETY: a null count pointer is allowed.
            let list = unsafe { ibv_get_device_list(core::ptr::null_mut()) };
            // SAFETY: the default provider has at least two devices.
            let dev = unsafe { *list.add(i) };
            // SAFETY: the list is freed once; devices outlive it.
            unsafe { ibv_free_device_list(list) };
            // SAFETY: a device of this provider.
            let ctx = unsafe { crate::abi::ibv_open_device(dev) };
            assert!(!ctx.is_null());
            Ctx(ctx, dev)
        }
    }
    impl Drop for Ctx {
        fn drop(&mut self) {
            // SAFETY: opened in `open`, closed once.
            unsafe { ibv_close_device(self.0) };
        }
    }

    #[test]
    fn device_index_is_the_soft_number_and_minus_one_for_strangers() {
        let c = Ctx::open(1);
        // SAFETY: any pointer may be passed.
        assert_eq!(unsafe { ibv_get_device_index(c.1) }, 1);
        let mut other = ibv_device::default();
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_get_device_index(&mut other) }, -1);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_get_device_index(core::ptr::null_mut()) }, -1);
    }

    #[test]
    fn gid_ex_reports_the_gid_with_type_ib_and_checks_its_arguments() {
        let c = Ctx::open(0);
        let mut e = [0u8; 40];
        let p = e.as_mut_ptr().cast::<ibv_gid_entry>();
        e.fill(0xaa);
        // SAFETY: a live context; a writable 40-byte entry.
        assert_eq!(unsafe { _ibv_query_gid_ex(c.0, 1, 0, p, 0, 40) }, 0);
        // SAFETY: initialised above; `ibv_gid_entry` is plain data.
        let got = unsafe { p.read_unaligned() };
        // SAFETY: `raw` is the union's byte view.
        assert_eq!(unsafe { got.gid.raw }, provider::get().devices[0].gid);
        assert_eq!(
            (got.gid_index, got.port_num, got.gid_type, got.ndev_ifindex),
            (0, 1, IBV_GID_TYPE_IB, 0)
        );
        assert_eq!(&e[32..], &[0; 8], "the unknown tail is zeroed");
        for (port, index, flags, size, want) in [
            (2, 0, 0, 32, libc::EINVAL),
            (1, 1, 0, 32, libc::EINVAL),
            (1, 0, 1, 32, libc::EOPNOTSUPP),
            (1, 0, 0, 31, libc::EINVAL),
        ] {
            // SAFETY: as above.
            let rc = unsafe { _ibv_query_gid_ex(c.0, port, index, p, flags, size) };
            assert_eq!(
                rc, want,
                "port {port} index {index} flags {flags} size {size}"
            );
        }
        // SAFETY: null context is refused.
        let rc = unsafe { _ibv_query_gid_ex(core::ptr::null_mut(), 1, 0, p, 0, 32) };
        assert_eq!(rc, libc::EINVAL);
    }

    #[test]
    fn gid_table_lists_the_one_gid_and_refuses_a_short_array() {
        let c = Ctx::open(1);
        let mut e = [0u8; 64];
        let p = e.as_mut_ptr().cast::<ibv_gid_entry>();
        // SAFETY: a live context; two 32-byte entries.
        assert_eq!(unsafe { _ibv_query_gid_table(c.0, p, 2, 0, 32) }, 1);
        // SAFETY: written above.
        let got = unsafe { p.read_unaligned() };
        // SAFETY: byte view.
        assert_eq!(unsafe { got.gid.raw }, provider::get().devices[1].gid);
        // SAFETY: as above.
        let rc = unsafe { _ibv_query_gid_table(c.0, p, 0, 0, 32) };
        assert_eq!(rc, -(libc::EINVAL as isize));
        // SAFETY: as above.
        let rc = unsafe { _ibv_query_gid_table(c.0, p, 2, 4, 32) };
        assert_eq!(rc, -(libc::EOPNOTSUPP as isize));
    }

    #[test]
    fn gid_type_is_ib_roce_v1_in_sysfs_terms() {
        let c = Ctx::open(0);
        let mut t = 7u32;
        // SAFETY: a live context; writable.
        assert_eq!(unsafe { ibv_query_gid_type(c.0, 1, 0, &mut t) }, 0);
        assert_eq!(t, IBV_GID_TYPE_SYSFS_IB_ROCE_V1);
        set_errno(0);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_query_gid_type(c.0, 1, 1, &mut t) }, -1);
        assert_eq!(errno(), libc::EINVAL);
    }

    #[test]
    fn pkey_index_finds_the_default_pkey_only() {
        let c = Ctx::open(0);
        // SAFETY: a live context.
        assert_eq!(unsafe { ibv_get_pkey_index(c.0, 1, 0xffffu16.to_be()) }, 0);
        set_errno(0);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_get_pkey_index(c.0, 1, 0x7fffu16.to_be()) }, -1);
        assert_eq!(errno(), libc::ENOENT);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_get_pkey_index(c.0, 2, 0xffff) }, -1);
        assert_eq!(errno(), libc::EINVAL);
    }

    #[test]
    fn port_speed_is_4x_edr_in_100_mbps_units() {
        let c = Ctx::open(0);
        let mut s = 0u64;
        // SAFETY: a live context; writable.
        assert_eq!(unsafe { ibv_query_port_speed(c.0, 1, &mut s) }, 0);
        assert_eq!(s, 1000);
        // SAFETY: as above.
        let rc = unsafe { ibv_query_port_speed(c.0, 2, &mut s) };
        assert_eq!(rc, libc::EINVAL);
    }

    #[test]
    fn a_live_qp_is_not_extended() {
        use crate::abi::{
            ibv_alloc_pd, ibv_create_cq, ibv_create_qp, ibv_dealloc_pd, ibv_destroy_cq,
            ibv_destroy_qp,
        };
        let c = Ctx::open(0);
        let null = core::ptr::null_mut();
        // SAFETY: a live context; the objects are destroyed below, once.
        unsafe {
            let pd = ibv_alloc_pd(c.0);
            let cq = ibv_create_cq(c.0, 8, null, null.cast(), 0);
            let mut init = ibv_qp_init_attr {
                send_cq: cq,
                recv_cq: cq,
                cap: ibv_qp_cap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: IBV_QPT_RC,
                ..Default::default()
            };
            let qp = ibv_create_qp(pd, &mut init);
            assert!(!qp.is_null());
            set_errno(0);
            assert!(ibv_qp_to_qp_ex(qp).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(ibv_destroy_qp(qp), 0);
            assert_eq!(ibv_destroy_cq(cq), 0);
            assert_eq!(ibv_dealloc_pd(pd), 0);
        }
    }

    #[test]
    fn no_qp_is_extended() {
        set_errno(0);
        // SAFETY: null is refused.
        assert!(unsafe { ibv_qp_to_qp_ex(core::ptr::null_mut()) }.is_null());
        assert_eq!(errno(), libc::EINVAL);
        // SAFETY: the QP is not dereferenced.
        let caps = unsafe { ibv_query_qp_data_in_order(core::ptr::null_mut(), 0, 1) };
        assert_eq!(caps, 0);
    }
}
