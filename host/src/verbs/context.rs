//! [`Context`]: an opened device.

use core::ffi::{c_int, c_uint};
use core::ptr::NonNull;
use std::ffi::CStr;
use std::sync::Arc;

use super::attr::{DeviceAttr, PortAttr};
use super::channel::CompletionChannel;
use super::cq::CompletionQueue;
use super::device_list::DeviceList;
use super::pd::ProtectionDomain;
use super::Gid;
use crate::error::{Error, Result};
use crate::loader::Verbs;
use crate::sys;

/// `enum ibv_gid_type` (verbs.h): a RoCE v1 GID.
const IBV_GID_TYPE_ROCE_V1: u32 = 1;
/// `enum ibv_gid_type`: a RoCE v2 GID.
const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// `struct ibv_gid_entry` (verbs.h, rdma-core v31): what `_ibv_query_gid_ex` writes.
/// Software providers define their own; vqp-host reads it only here.
#[repr(C)]
#[derive(Default)]
struct GidEntry {
    gid: [u8; 16],
    gid_index: u32,
    port_num: u32,
    /// `enum ibv_gid_type`.
    gid_type: u32,
    ndev_ifindex: u32,
}

// verbs.h's layout: a 16-byte GID and four `uint32_t`.
const _: () = assert!(core::mem::size_of::<GidEntry>() == 32);

/// An opened RDMA device (`struct ibv_context`), the root of every other object.
///
/// Cheap to clone: clones share the one context, which is closed when the last clone and
/// the last object created from it are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) verbs: Verbs,
    pub(crate) ctx: NonNull<sys::ibv_context>,
}

// SAFETY: libibverbs is thread-safe: a context and the verbs taking it may be used from
// any thread, and `ContextInner` only hands the pointer to those verbs.
unsafe impl Send for ContextInner {}
// SAFETY: as above; no method mutates Rust-side state through `&ContextInner`.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from `ibv_open_device` and is closed exactly once; every
        // child object holds an `Arc<ContextInner>`, so none is alive any more.
        let _ = unsafe { (self.verbs.table().close_device)(self.ctx.as_ptr()) };
    }
}

impl Context {
    /// Opens the device called `name`, or the first device when `name` is `None`.
    ///
    /// # Errors
    /// [`Error::NoDevices`] when there is no RDMA device at all,
    /// [`Error::DeviceNotFound`] when none is called `name`, [`Error::Verbs`] when
    /// `ibv_open_device` fails.
    pub fn open(verbs: &Verbs, name: Option<&str>) -> Result<Context> {
        let list = DeviceList::new(verbs)?;
        let device = match name {
            Some(name) => list.find(name)?,
            None => list.get(0).ok_or(Error::NoDevices { source: None })?,
        };
        device.open()
    }

    /// Wraps a context fresh from `ibv_open_device`.
    pub(crate) fn from_raw(verbs: Verbs, ctx: NonNull<sys::ibv_context>) -> Context {
        Context {
            inner: Arc::new(ContextInner { verbs, ctx }),
        }
    }

    /// The library handle this context was opened through.
    pub fn verbs(&self) -> &Verbs {
        &self.inner.verbs
    }

    /// The raw context, for calls this crate does not wrap. It stays valid while `self`
    /// (or any object created from it) lives.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.inner.ctx.as_ptr()
    }

    /// The device's name, e.g. `mlx5_0`.
    pub fn device_name(&self) -> String {
        // SAFETY: `ctx` is a live context; its `device` field is set by the library and
        // stays valid while the context is open.
        let device = unsafe { (*self.inner.ctx.as_ptr()).device };
        if device.is_null() {
            return String::new();
        }
        // SAFETY: `device` is the live device of this context.
        let name = unsafe { (self.inner.verbs.table().get_device_name)(device) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: `ibv_get_device_name` returns a NUL-terminated string owned by the
        // device, valid while it is; we copy it out at once.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// Number of completion vectors (valid `comp_vector` values for
    /// [`create_cq`](Self::create_cq) are `0..n`).
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: `ctx` is a live context; the field is written once at open.
        let n = unsafe { (*self.inner.ctx.as_ptr()).num_comp_vectors };
        u32::try_from(n).unwrap_or(0)
    }

    /// The device's attributes (`ibv_query_device`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = sys::ibv_device_attr::default();
        // SAFETY: live context; `attr` is a writable `ibv_device_attr` of the header's
        // exact size (proven by the layout tests).
        let rc =
            unsafe { (self.inner.verbs.table().query_device)(self.inner.ctx.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_query_device", rc));
        }
        Ok(DeviceAttr::from_raw(attr))
    }

    /// A port's attributes (`ibv_query_port`); ports are numbered from 1.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // Zeroed first, as verbs.h's inline wrapper does: the reserved tail stays zero
        // for libraries that do not know the newer fields.
        let mut attr = sys::ibv_port_attr::default();
        // SAFETY: live context; `attr` is larger than any `ibv_port_attr` a known
        // library writes (see `sys::ibv_port_attr`).
        let rc = unsafe {
            (self.inner.verbs.table().query_port)(self.inner.ctx.as_ptr(), port, &mut attr)
        };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_query_port", rc));
        }
        Ok(PortAttr::from_raw(attr))
    }

    /// A port's effective bandwidth in Mb/s (`ibv_query_port_speed`, rdma-core v56 and
    /// later, in units of 100 Mb/s): `None` when the library does not export it, was not
    /// loaded with `dlopen`, or fails. Exact where [`PortAttr::rate_mbps`] rounds to an
    /// InfiniBand speed and width (a rate-limited or bonded port).
    pub fn query_port_speed(&self, port: u8) -> Option<u64> {
        let f = self.inner.verbs.symbol("ibv_query_port_speed")?;
        // SAFETY: the symbol is libibverbs' `int ibv_query_port_speed(struct ibv_context *,
        // uint32_t port_num, uint64_t *port_speed)`, cast to exactly that prototype.
        let f: unsafe extern "C" fn(*mut sys::ibv_context, u32, *mut u64) -> core::ffi::c_int =
            unsafe { core::mem::transmute(f.as_ptr()) };
        let mut speed = 0u64;
        // SAFETY: live context; `speed` is writable.
        let rc = unsafe { f(self.inner.ctx.as_ptr(), u32::from(port), &mut speed) };
        (rc == 0 && speed != 0).then(|| speed.saturating_mul(100))
    }

    /// Entry `index` of a port's GID table (`ibv_query_gid`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let index = c_int::try_from(index).map_err(|_| Error::InvalidArgument {
            what: "GID index does not fit a C int",
        })?;
        let mut gid = sys::ibv_gid::default();
        // SAFETY: live context; `gid` is a writable 16-byte `ibv_gid`.
        let rc = unsafe {
            (self.inner.verbs.table().query_gid)(self.inner.ctx.as_ptr(), port, index, &mut gid)
        };
        if rc != 0 {
            return Err(Error::verbs_rc("ibv_query_gid", rc));
        }
        Ok(Gid::from_sys(&gid))
    }

    /// The GID index to address peers by from `port` when none was asked for: on an
    /// Ethernet (RoCE) port, the first RoCE v2 GID holding an IPv4-mapped address
    /// (`::ffff:a.b.c.d`), else the first RoCE v2 GID, else index 0 — as one picks on a
    /// ConnectX port, whose table holds a RoCE v1 and a v2 entry per address after the
    /// link-local default GID, and as UCX's `uct_ib_device_select_gid` prefers (RoCE v2
    /// before v1, IPv4 before IPv6). Index 0 on an InfiniBand port.
    ///
    /// Types are read with `_ibv_query_gid_ex` (rdma-core v31 and later; it asks the
    /// kernel, or reads sysfs `ports/N/gid_attrs/types/I` on older kernels), else with
    /// rdma-core's `ibv_query_gid_type`; a library with neither, or one not loaded
    /// with `dlopen`, gives index 0.
    ///
    /// # Errors
    /// [`Error::Verbs`] when `ibv_query_port` fails.
    pub fn default_gid_index(&self, port: u8) -> Result<u8> {
        let attr = self.query_port(port)?;
        if !attr.needs_grh() {
            return Ok(0);
        }
        // Indexes past 255 cannot be named in an address vector (`sgid_index` is a u8).
        let len = u32::try_from(attr.raw().gid_tbl_len).unwrap_or(0).min(256);
        let entries = (0..len).filter_map(|i| {
            let (gid, ty) = self.gid_entry(port, i)?;
            Some((i, gid, ty))
        });
        Ok(choose_gid_index(entries))
    }

    /// Entry `index` of a port's GID table with its type (`IBV_GID_TYPE_*`), `None`
    /// for an empty slot or when the library cannot tell the type.
    fn gid_entry(&self, port: u8, index: u32) -> Option<(Gid, u32)> {
        if let Some(f) = self.inner.verbs.symbol("_ibv_query_gid_ex") {
            // SAFETY: the symbol is libibverbs' `int _ibv_query_gid_ex(struct
            // ibv_context *, uint32_t port_num, uint32_t gid_index, struct ibv_gid_entry
            // *, uint32_t flags, size_t entry_size)` (verbs.h), cast to that prototype.
            let f: unsafe extern "C" fn(
                *mut sys::ibv_context,
                u32,
                u32,
                *mut GidEntry,
                u32,
                usize,
            ) -> c_int = unsafe { core::mem::transmute(f.as_ptr()) };
            let mut e = GidEntry::default();
            let size = core::mem::size_of::<GidEntry>();
            // SAFETY: live context; `e` is a writable entry of `size` bytes.
            let rc = unsafe {
                f(
                    self.inner.ctx.as_ptr(),
                    u32::from(port),
                    index,
                    &mut e,
                    0,
                    size,
                )
            };
            // Non-zero: an empty slot (`ENODATA`) or an index past the table.
            return (rc == 0).then(|| (Gid::from_bytes(e.gid), e.gid_type));
        }
        let f = self.inner.verbs.symbol("ibv_query_gid_type")?;
        // SAFETY: the symbol is rdma-core's `int ibv_query_gid_type(struct ibv_context *,
        // uint8_t port_num, unsigned int index, enum ibv_gid_type_sysfs *type)`
        // (driver.h), cast to that prototype; the enum is an int.
        let f: unsafe extern "C" fn(*mut sys::ibv_context, u8, c_uint, *mut c_uint) -> c_int =
            unsafe { core::mem::transmute(f.as_ptr()) };
        let gid = self.query_gid(port, index).ok()?;
        let mut ty: c_uint = 0;
        // SAFETY: live context; `ty` is writable.
        let rc = unsafe { f(self.inner.ctx.as_ptr(), port, index, &mut ty) };
        // driver.h's `enum ibv_gid_type_sysfs`: 0 IB/RoCE v1 (v1 on an Ethernet
        // port), 1 RoCE v2.
        let ty = if ty == 1 {
            IBV_GID_TYPE_ROCE_V2
        } else {
            IBV_GID_TYPE_ROCE_V1
        };
        (rc == 0).then_some((gid, ty))
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        ProtectionDomain::new(self)
    }

    /// Creates a completion channel (for blocking on completions).
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        CompletionChannel::new(self)
    }

    /// Creates a completion queue of at least `cqe` entries, optionally reporting to
    /// `channel`, with interrupts on completion vector `comp_vector`.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
        comp_vector: u32,
    ) -> Result<CompletionQueue> {
        CompletionQueue::new(self, cqe, channel, comp_vector)
    }
}

impl core::fmt::Debug for Context {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device_name())
            .field("raw", &self.inner.ctx)
            .finish()
    }
}

/// Whether `gid` holds an IPv4 address, IPv4-mapped (`::ffff:a.b.c.d`).
fn is_ipv4_mapped(gid: &Gid) -> bool {
    let b = gid.as_bytes();
    b[..10] == [0; 10] && b[10..12] == [0xff, 0xff]
}

/// [`Context::default_gid_index`]'s choice among a RoCE port's valid entries
/// (index, GID, `IBV_GID_TYPE_*`), in index order: the first RoCE v2 IPv4-mapped GID,
/// else the first RoCE v2 GID, else 0.
fn choose_gid_index(entries: impl IntoIterator<Item = (u32, Gid, u32)>) -> u8 {
    let mut first_v2 = None;
    for (i, gid, ty) in entries {
        if ty != IBV_GID_TYPE_ROCE_V2 || gid.is_zero() {
            continue;
        }
        let Ok(i) = u8::try_from(i) else { continue };
        if is_ipv4_mapped(&gid) {
            return i;
        }
        first_v2.get_or_insert(i);
    }
    first_v2.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(bytes: &[u8]) -> Gid {
        let mut raw = [0u8; 16];
        raw[16 - bytes.len()..].copy_from_slice(bytes);
        Gid::from_bytes(raw)
    }

    const V1: u32 = IBV_GID_TYPE_ROCE_V1;
    const V2: u32 = IBV_GID_TYPE_ROCE_V2;

    #[test]
    fn a_connectx_table_gives_its_ipv4_roce_v2_entry() {
        let mut ll = [0u8; 16];
        ll[..2].copy_from_slice(&[0xfe, 0x80]);
        ll[15] = 1;
        let v4 = g(&[0xff, 0xff, 192, 0, 2, 1]);
        let v6 = g(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        // mlx5: v1 and v2 of the link-local GID, then of the IPv6 and IPv4 addresses.
        let table = [
            (0, Gid::from_bytes(ll), V1),
            (1, Gid::from_bytes(ll), V2),
            (2, v6, V1),
            (3, v6, V2),
            (4, v4, V1),
            (5, v4, V2),
        ];
        assert_eq!(choose_gid_index(table), 5);
        // Without the IPv4 address: the first RoCE v2 entry.
        assert_eq!(choose_gid_index(table[..4].iter().copied()), 1);
        // RoCE v1 only, or nothing known: index 0.
        assert_eq!(choose_gid_index([(0, v4, V1), (1, v6, V1)]), 0);
        assert_eq!(choose_gid_index([]), 0);
    }

    #[test]
    fn empty_slots_and_indexes_past_255_are_passed_over() {
        let v4 = g(&[0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(choose_gid_index([(0, Gid::default(), V2), (1, v4, V2)]), 1);
        assert_eq!(choose_gid_index([(300, v4, V2), (7, v4, V2)]), 7);
        assert!(!is_ipv4_mapped(&g(&[0xff, 0xfe, 192, 0, 2, 1])));
    }
}
