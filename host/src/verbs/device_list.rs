//! [`DeviceList`]: the RDMA devices present.

use core::ffi::c_int;
use core::ptr::NonNull;
use std::ffi::CStr;

use super::context::Context;
use crate::enums::{NodeType, TransportType};
use crate::error::{Error, Result};
use crate::loader::Verbs;
use crate::sys;

/// The devices listed by `ibv_get_device_list`, freed on drop.
///
/// Contexts opened from it stay valid after the list is dropped (libibverbs keeps a
/// reference on every opened device), but a [`Device`] borrows the list and cannot
/// outlive it:
///
/// ```compile_fail
/// # use vqp_host::{DeviceList, Verbs};
/// # fn f(verbs: &Verbs) -> vqp_host::Result<()> {
/// let device = {
///     let list = DeviceList::new(verbs)?;
///     list.get(0).unwrap()
/// }; // error: `list` does not live long enough
/// # let _ = device;
/// # Ok(())
/// # }
/// ```
pub struct DeviceList {
    verbs: Verbs,
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

// SAFETY: the list is an immutable array owned by this value; libibverbs' device
// functions are thread-safe, and freeing happens once, in `Drop`.
unsafe impl Send for DeviceList {}
// SAFETY: as above; `&DeviceList` only reads the array.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// Lists the devices.
    ///
    /// # Errors
    /// [`Error::NoDevices`] when there are none: libibverbs answers `ENOSYS` where the
    /// kernel has no RDMA support, and an empty list where it has support but no device.
    /// [`Error::Verbs`] for any other failure.
    pub fn new(verbs: &Verbs) -> Result<DeviceList> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a writable int; the result is null or an array we own.
        let list = unsafe { (verbs.table().get_device_list)(&mut n) };
        let Some(list) = NonNull::new(list) else {
            let err = crate::error::last_errno();
            return Err(match err.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::ENODEV) => Error::NoDevices { source: Some(err) },
                _ => Error::Verbs {
                    function: "ibv_get_device_list",
                    source: err,
                },
            });
        };
        let list = DeviceList {
            verbs: verbs.clone(),
            list,
            len: usize::try_from(n).unwrap_or(0),
        };
        if list.len == 0 {
            // `list` is freed by its `Drop` on the way out.
            return Err(Error::NoDevices { source: None });
        }
        Ok(list)
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty (never true for a list [`DeviceList::new`] returned).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device at `index`.
    pub fn get(&self, index: usize) -> Option<Device<'_>> {
        if index >= self.len {
            return None;
        }
        // SAFETY: `index < len`, and the library's array holds `len` entries (then a
        // terminating null).
        let dev = unsafe { *self.list.as_ptr().add(index) };
        NonNull::new(dev).map(|dev| Device { list: self, dev })
    }

    /// All devices, in the library's order.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len).filter_map(move |i| self.get(i))
    }

    /// The device called `name`.
    ///
    /// # Errors
    /// [`Error::DeviceNotFound`] naming `name`.
    pub fn find(&self, name: &str) -> Result<Device<'_>> {
        self.iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| Error::DeviceNotFound { name: name.into() })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from `ibv_get_device_list` and is freed exactly once;
        // `Device`s borrow the list, so none is alive.
        unsafe { (self.verbs.table().free_device_list)(self.list.as_ptr()) }
    }
}

impl core::fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One device of a [`DeviceList`].
#[derive(Clone, Copy)]
pub struct Device<'list> {
    list: &'list DeviceList,
    dev: NonNull<sys::ibv_device>,
}

impl Device<'_> {
    /// The kernel device name, e.g. `mlx5_0`.
    pub fn name(&self) -> String {
        // SAFETY: `dev` is an entry of the live list.
        let name = unsafe { (self.list.verbs.table().get_device_name)(self.dev.as_ptr()) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string owned by the device, copied out at once.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// The node GUID, in host byte order.
    pub fn guid(&self) -> u64 {
        // SAFETY: `dev` is an entry of the live list.
        u64::from_be(unsafe { (self.list.verbs.table().get_device_guid)(self.dev.as_ptr()) })
    }

    /// The node type.
    pub fn node_type(&self) -> NodeType {
        // SAFETY: `dev` points to a live `ibv_device` (the list owns it).
        NodeType::from_raw(unsafe { (*self.dev.as_ptr()).node_type })
    }

    /// The transport type.
    pub fn transport_type(&self) -> TransportType {
        // SAFETY: `dev` points to a live `ibv_device` (the list owns it).
        TransportType::from_raw(unsafe { (*self.dev.as_ptr()).transport_type })
    }

    /// The raw device pointer, valid while the list lives.
    pub fn as_raw(&self) -> *mut sys::ibv_device {
        self.dev.as_ptr()
    }

    /// Opens the device (`ibv_open_device`).
    pub fn open(&self) -> Result<Context> {
        // SAFETY: `dev` is an entry of the live list.
        let ctx = unsafe { (self.list.verbs.table().open_device)(self.dev.as_ptr()) };
        match NonNull::new(ctx) {
            Some(ctx) => Ok(Context::from_raw(self.list.verbs.clone(), ctx)),
            None => Err(Error::verbs_errno("ibv_open_device")),
        }
    }
}

impl core::fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("guid", &format_args!("{:#018x}", self.guid()))
            .finish()
    }
}
