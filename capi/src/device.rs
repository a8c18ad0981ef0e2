//! Opening a device: loading the verbs library (libibverbs, or softverbs' drop-in
//! `libvqp_softverbs.so`), the device context and one protection domain.

use std::ffi::{c_char, CStr};
use std::path::Path;

use vqp_host::{Context, ProtectionDomain, Verbs};

use crate::status::{guard, vqp_status, Fail};
use crate::table::Table;
use crate::types::vqp_device;

/// An open device.
pub(crate) struct Device {
    pub ctx: Context,
    pub pd: ProtectionDomain,
}

pub(crate) static DEVICES: Table<Device> = Table::new(1);

/// A C string argument as UTF-8, or `None` for null.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn opt_str<'a>(
    p: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller gives a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| Fail::invalid(what))
}

/// Opens device `name` (null: the first) of the verbs library `library` and
/// allocates a protection domain on it.
///
/// `library` null loads the library named by the environment variable
/// `VQP_IBVERBS_PATH` when set, else `libibverbs.so.1`. To run on softverbs, the
/// software RDMA device, name its `libvqp_softverbs.so` (here or in
/// `VQP_IBVERBS_PATH`); its devices are `soft0`, `soft1`, …, shared by the processes
/// that use the same `VQP_SOFT_DIR`.
///
/// Errors: `VQP_ERR_NULL` (`out` null), `VQP_ERR_INVALID_ARGUMENT` (a string that is
/// not UTF-8), `VQP_ERR_LIBRARY`, `VQP_ERR_NO_DEVICE`, `VQP_ERR_VERBS`.
///
/// Thread-safety: any thread; concurrent opens are safe.
///
/// # Safety
/// `library` and `name` are null or NUL-terminated strings; a `library` given must
/// implement the libibverbs ABI (its initialisers run). `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_device_open(
    library: *const c_char,
    name: *const c_char,
    out: *mut vqp_device,
) -> vqp_status {
    guard(|| {
        if out.is_null() {
            return Err(Fail::null("out is null"));
        }
        // SAFETY: forwarded from this function's contract.
        let library = unsafe { opt_str(library, "the library path is not UTF-8") }?;
        // SAFETY: as above.
        let name = unsafe { opt_str(name, "the device name is not UTF-8") }?;
        let verbs = match library {
            // SAFETY: the caller vouches that the library implements the libibverbs ABI.
            Some(path) => unsafe { Verbs::load_from(Path::new(path)) }?,
            None => Verbs::load()?,
        };
        let ctx = Context::open(&verbs, name)?;
        let pd = ctx.alloc_pd()?;
        let handle = DEVICES.insert(Device { ctx, pd })?;
        // SAFETY: `out` is non-null and writable (the contract).
        unsafe { out.write(vqp_device { handle }) };
        Ok(())
    })
}

/// Writes the device's name (NUL-terminated, cut to `len` bytes) into `buf`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_TOO_SMALL` when `len` is
/// 0.
///
/// Thread-safety: any thread, concurrently with other calls on the device.
///
/// # Safety
/// `buf` is null or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vqp_device_name(
    dev: vqp_device,
    buf: *mut c_char,
    len: usize,
) -> vqp_status {
    guard(|| {
        if buf.is_null() {
            return Err(Fail::null("buf is null"));
        }
        if len == 0 {
            return Err(Fail::new(crate::status::VQP_ERR_TOO_SMALL, "len is 0"));
        }
        let d = DEVICES.get(dev.handle)?;
        // SAFETY: the handle is live (table lookup) and not destroyed during the call
        // (the contract); this call only reads the device.
        let name = unsafe { &*d }.ctx.device_name();
        let n = name.len().min(len - 1);
        // SAFETY: `buf` has `len` writable bytes and n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(name.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        Ok(())
    })
}

/// Closes the device handle. Memory regions and endpoints made on it keep the device
/// open until they are destroyed too; the handle (and every copy) is stale after.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE` (closed already).
///
/// Thread-safety: not while another thread is in a call on this device handle.
#[no_mangle]
pub extern "C" fn vqp_device_close(dev: vqp_device) -> vqp_status {
    guard(|| {
        if dev.handle == 0 {
            return Err(Fail::null("device handle is null"));
        }
        drop(DEVICES.remove(dev.handle)?);
        Ok(())
    })
}
