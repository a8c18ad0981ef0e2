//! [`Context`]: an opened device.

use core::ffi::c_int;
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
