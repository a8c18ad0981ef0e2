//! Registering the caller's memory on a device.

use vqp_host::{AccessFlags, MemoryRegion};

use crate::device::DEVICES;
use crate::status::{guard, vqp_status, Fail};
use crate::table::Table;
use crate::types::{vqp_device, vqp_mr, vqp_mr_info};

pub(crate) static MRS: Table<MemoryRegion> = Table::new(2);

/// Registers `[addr, addr + len)` on `dev` with the `VQP_ACCESS_*` bits `access`.
/// The memory stays the caller's: it must stay allocated until `vqp_mr_deregister`
/// and until no request using it is in flight.
///
/// Errors: `VQP_ERR_NULL` (`addr` or `out` null, or a null handle),
/// `VQP_ERR_STALE_HANDLE`, `VQP_ERR_INVALID_ARGUMENT` (`len` 0, unknown access bits),
/// `VQP_ERR_VERBS` (`ibv_reg_mr` failed).
///
/// Thread-safety: any thread, concurrently with other calls on the device.
///
/// # Safety
/// `[addr, addr + len)` is memory the caller owns and keeps valid as above; the
/// device reads and writes it as the access bits allow. `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_mr_register(
    dev: vqp_device,
    addr: *mut u8,
    len: usize,
    access: u32,
    out: *mut vqp_mr,
) -> vqp_status {
    guard(|| {
        if addr.is_null() || out.is_null() {
            return Err(Fail::null("addr or out is null"));
        }
        if dev.handle == 0 {
            return Err(Fail::null("device handle is null"));
        }
        if access & !0xf != 0 {
            return Err(Fail::invalid("unknown access bits (VQP_ACCESS_* only)"));
        }
        let d = DEVICES.get(dev.handle)?;
        // SAFETY: the handle is live and not destroyed during the call (the contract).
        let pd = &unsafe { &*d }.pd;
        // SAFETY: the caller keeps the range valid for the region's life (the contract).
        let mr = unsafe { pd.register_raw(addr, len, AccessFlags::from_bits(access)) }?;
        let handle = MRS.insert(mr)?;
        // SAFETY: `out` is non-null and writable.
        unsafe { out.write(vqp_mr { handle }) };
        Ok(())
    })
}

/// The region's address, length, lkey and rkey (send the rkey and address to the
/// peer for its one-sided requests).
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`.
///
/// Thread-safety: any thread, concurrently with other calls on the region.
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_mr_query(mr: vqp_mr, out: *mut vqp_mr_info) -> vqp_status {
    guard(|| {
        if out.is_null() || mr.handle == 0 {
            return Err(Fail::null("out or the region handle is null"));
        }
        let m = MRS.get(mr.handle)?;
        // SAFETY: live handle, read only, not destroyed during the call (the contract).
        let m = unsafe { &*m };
        let info = vqp_mr_info {
            addr: m.addr(),
            len: m.len() as u64,
            lkey: m.lkey(),
            rkey: m.rkey(),
        };
        // SAFETY: `out` is non-null and writable.
        unsafe { out.write(info) };
        Ok(())
    })
}

/// Deregisters the region; the handle (and every copy) is stale after.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_WRONG_HANDLE`.
///
/// Thread-safety: not while another thread is in a call on this region.
#[no_mangle]
pub extern "C" fn vqp_mr_deregister(mr: vqp_mr) -> vqp_status {
    guard(|| {
        if mr.handle == 0 {
            return Err(Fail::null("region handle is null"));
        }
        drop(MRS.remove(mr.handle)?);
        Ok(())
    })
}
