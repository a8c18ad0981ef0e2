//! The newer ways to register memory: `ibv_reg_mr_ex`, the provider-allocated buffers of
//! `ibv_alloc_buf` / `ibv_reg_buf_mr` / `ibv_free_buf` (rdma-core 59's `ibv_rc_pingpong`
//! uses them), and `ibv_reg_dmabuf_mr`.
//!
//! Memory is ordinary process memory here, so a buffer is page-aligned heap memory and
//! every registration ends in `ibv_reg_mr`'s checks. dma-buf file descriptors and DMA
//! handles are device memory concepts softverbs does not have: `EOPNOTSUPP`.

use core::ffi::{c_int, c_void};

use vqp_sys::*;

use super::object::{live, PdObj};
use super::{ibv_reg_mr_iova2, set_errno};

/// `enum ibv_mr_init_attr_mask`: `iova` is set.
pub const IBV_REG_MR_MASK_IOVA: u64 = 1;
/// `enum ibv_mr_init_attr_mask`: `addr` is set.
pub const IBV_REG_MR_MASK_ADDR: u64 = 1 << 1;
/// `enum ibv_mr_init_attr_mask`: `fd` (a dma-buf) is set.
pub const IBV_REG_MR_MASK_FD: u64 = 1 << 2;
/// `enum ibv_mr_init_attr_mask`: `fd_offset` is set.
pub const IBV_REG_MR_MASK_FD_OFFSET: u64 = 1 << 3;
/// `enum ibv_mr_init_attr_mask`: `dmah` is set.
pub const IBV_REG_MR_MASK_DMAH: u64 = 1 << 4;
/// `enum ibv_mr_init_attr_mask`: `buf` (from `ibv_alloc_buf`) is set.
pub const IBV_REG_MR_MASK_BUF: u64 = 1 << 5;

/// `struct ibv_mr_init_attr`: the argument of `ibv_reg_mr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ibv_mr_init_attr {
    /// Bytes to register.
    pub length: usize,
    /// `IBV_ACCESS_*`.
    pub access: c_int,
    /// `IBV_REG_MR_MASK_*`: which fields below are set.
    pub comp_mask: u64,
    /// The address the remote side uses.
    pub iova: u64,
    /// Start address.
    pub addr: *mut c_void,
    /// A dma-buf file descriptor.
    pub fd: c_int,
    /// Offset in the dma-buf.
    pub fd_offset: u64,
    /// A DMA handle (`struct ibv_dmah *`).
    pub dmah: *mut c_void,
    /// A buffer handle from [`ibv_alloc_buf`].
    pub buf: *mut SoftBuf,
}

/// What `ibv_alloc_buf` hands out as the opaque `struct ibv_buf *`: the allocation and the
/// PD it was made for.
#[derive(Debug)]
pub struct SoftBuf {
    addr: *mut c_void,
    size: usize,
    pd: *mut ibv_pd,
}

/// `ibv_alloc_buf`: `size` bytes of page-aligned memory for registration in `pd`;
/// `*buf` gets the handle for [`ibv_reg_buf_mr`] and [`ibv_free_buf`]. Null with `errno`
/// `EINVAL` (bad PD, null `buf`, size 0) or `ENOMEM`.
///
/// # Safety
/// `pd` is null or a live PD of this provider; `buf` is null or writable.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_alloc_buf(
    pd: *mut ibv_pd,
    size: usize,
    buf: *mut *mut SoftBuf,
) -> *mut c_void {
    // SAFETY: per the contract.
    if unsafe { live::<PdObj>(pd) }.is_none() || buf.is_null() || size == 0 {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: `sysconf` has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut addr = core::ptr::null_mut();
    // SAFETY: `addr` is a writable pointer; the alignment is a power of two and a
    // multiple of the pointer size.
    let rc = unsafe { libc::posix_memalign(&mut addr, page, size) };
    if rc != 0 {
        set_errno(rc);
        return core::ptr::null_mut();
    }
    let handle = Box::into_raw(Box::new(SoftBuf { addr, size, pd }));
    // SAFETY: writable (contract).
    unsafe { buf.write(handle) };
    addr
}

/// `ibv_free_buf`: frees a buffer of [`ibv_alloc_buf`] and its handle (null: nothing).
///
/// # Safety
/// `buf` is null or a handle from [`ibv_alloc_buf`], freed once, with no MR left on it.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_free_buf(buf: *mut SoftBuf) {
    if buf.is_null() {
        return;
    }
    // SAFETY: the handle `ibv_alloc_buf` leaked (contract), freed once.
    let b = unsafe { Box::from_raw(buf) };
    // SAFETY: the memory `posix_memalign` returned for this handle.
    unsafe { libc::free(b.addr) };
}

/// `ibv_reg_buf_mr`: registers `[addr, addr + length)`, which must lie inside `buf` (a
/// buffer of [`ibv_alloc_buf`] for the same PD); as [`ibv_reg_mr_ex`] otherwise.
///
/// # Safety
/// As [`ibv_reg_mr_ex`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_buf_mr(
    pd: *mut ibv_pd,
    buf: *mut SoftBuf,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    let mut attr = ibv_mr_init_attr {
        length,
        access,
        comp_mask: IBV_REG_MR_MASK_BUF | IBV_REG_MR_MASK_ADDR,
        iova: 0,
        addr,
        fd: -1,
        fd_offset: 0,
        dmah: core::ptr::null_mut(),
        buf,
    };
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_ex(pd, &mut attr) }
}

/// `ibv_reg_mr_ex`: registers by the fields `comp_mask` names. Needs `addr`; `iova`,
/// when given, must equal it (as [`ibv_reg_mr_iova2`]); `buf` checks that the range lies
/// in that buffer of the same PD (`EINVAL` otherwise). Optional access flags
/// (`IBV_ACCESS_OPTIONAL_RANGE`) are hints and dropped, as rdma-core does for a kernel
/// without them. A dma-buf (`fd`, `fd_offset`), a DMA handle or an unknown mask bit:
/// null with `errno` `EOPNOTSUPP`.
///
/// # Safety
/// `pd` is a live PD; `mr_init_attr` is null or readable; the memory follows
/// `ibv_reg_mr`'s contract; a `buf` is a live handle of [`ibv_alloc_buf`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_ex(
    pd: *mut ibv_pd,
    mr_init_attr: *mut ibv_mr_init_attr,
) -> *mut ibv_mr {
    let fail = |errno| {
        set_errno(errno);
        core::ptr::null_mut()
    };
    // SAFETY: readable (contract).
    let Some(a) = (unsafe { mr_init_attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    let known = IBV_REG_MR_MASK_IOVA | IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_BUF;
    if a.comp_mask & !known != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_REG_MR_MASK_ADDR == 0 {
        return fail(libc::EINVAL);
    }
    if a.comp_mask & IBV_REG_MR_MASK_BUF != 0 {
        // SAFETY: a live handle (contract).
        let Some(b) = (unsafe { a.buf.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        let (base, at) = (b.addr as usize, a.addr as usize);
        let inside = at
            .checked_sub(base)
            .is_some_and(|off| off <= b.size && a.length <= b.size - off);
        if b.pd != pd || !inside {
            return fail(libc::EINVAL);
        }
    }
    let iova = if a.comp_mask & IBV_REG_MR_MASK_IOVA != 0 {
        a.iova
    } else {
        a.addr as u64
    };
    let access = a.access as u32 & !IBV_ACCESS_OPTIONAL_RANGE;
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, a.addr, a.length, iova, access) }
}

/// `ibv_reg_dmabuf_mr`: null with `errno` `EOPNOTSUPP` (no dma-buf memory here).
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{
        ibv_alloc_pd, ibv_close_device, ibv_dealloc_pd, ibv_dereg_mr, ibv_free_device_list,
        ibv_get_device_list, ibv_open_device,
    };

    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    struct Pd(*mut ibv_context, *mut ibv_pd);
    impl Pd {
        fn new() -> Pd {
            // SAFETY: null count allowed; the list holds the default devices; freed
            // once; the PD is made on a live context.
            unsafe {
                let list = ibv_get_device_list(core::ptr::null_mut());
                let ctx = ibv_open_device(*list);
                ibv_free_device_list(list);
                let pd = ibv_alloc_pd(ctx);
                assert!(!pd.is_null());
                Pd(ctx, pd)
            }
        }
    }
    impl Drop for Pd {
        fn drop(&mut self) {
            // SAFETY: made in `new`, freed once.
            unsafe {
                assert_eq!(ibv_dealloc_pd(self.1), 0);
                ibv_close_device(self.0);
            }
        }
    }

    #[test]
    fn a_buffer_is_page_aligned_and_registers_within_its_bounds() {
        let pd = Pd::new();
        let mut h = core::ptr::null_mut();
        // SAFETY: a live PD; `h` is writable.
        let addr = unsafe { ibv_alloc_buf(pd.1, 10_000, &mut h) };
        assert!(!addr.is_null() && !h.is_null());
        assert_eq!(addr as usize % 4096, 0);
        let access = IBV_ACCESS_LOCAL_WRITE as c_int;
        // SAFETY: inside the buffer.
        let mr =
            unsafe { ibv_reg_buf_mr(pd.1, h, addr.cast::<u8>().add(100).cast(), 9_900, access) };
        assert!(!mr.is_null());
        // SAFETY: a live MR.
        let (off, len) = unsafe { ((*mr).addr as usize - addr as usize, (*mr).length) };
        assert_eq!((off, len), (100, 9_900));
        for (off, len) in [(100, 9_901), (0, 10_001), (10_001, 0)] {
            set_errno(0);
            // SAFETY: the range is checked before any use.
            let bad = unsafe {
                ibv_reg_buf_mr(
                    pd.1,
                    h,
                    addr.cast::<u8>().wrapping_add(off).cast(),
                    len,
                    access,
                )
            };
            assert!(bad.is_null(), "offset {off} length {len}");
            assert_eq!(errno(), libc::EINVAL);
        }
        let other = Pd::new();
        // SAFETY: the PD mismatch is refused.
        let bad = unsafe { ibv_reg_buf_mr(other.1, h, addr, 8, access) };
        assert!(bad.is_null());
        // SAFETY: freed once, MR first.
        unsafe {
            assert_eq!(ibv_dereg_mr(mr), 0);
            ibv_free_buf(h);
            ibv_free_buf(core::ptr::null_mut());
        }
        let mut h2 = core::ptr::null_mut();
        // SAFETY: size 0 is refused.
        assert!(unsafe { ibv_alloc_buf(pd.1, 0, &mut h2) }.is_null());
        // SAFETY: a null PD is refused.
        assert!(unsafe { ibv_alloc_buf(core::ptr::null_mut(), 8, &mut h2) }.is_null());
    }

    #[test]
    fn reg_mr_ex_registers_by_address_and_refuses_device_memory() {
        let pd = Pd::new();
        let mut mem = vec![0u8; 256];
        let mut attr = ibv_mr_init_attr {
            length: mem.len(),
            access: (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING | (1 << 21)) as c_int,
            comp_mask: IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_IOVA,
            iova: mem.as_ptr() as u64,
            addr: mem.as_mut_ptr().cast(),
            fd: -1,
            fd_offset: 0,
            dmah: core::ptr::null_mut(),
            buf: core::ptr::null_mut(),
        };
        // SAFETY: a live PD; `mem` outlives the MR.
        let mr = unsafe { ibv_reg_mr_ex(pd.1, &mut attr) };
        assert!(!mr.is_null(), "optional access bits are dropped");
        // SAFETY: a live MR, deregistered once.
        assert_eq!(unsafe { ibv_dereg_mr(mr) }, 0);
        for (mask, want) in [
            (IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_FD, libc::EOPNOTSUPP),
            (
                IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_DMAH,
                libc::EOPNOTSUPP,
            ),
            (IBV_REG_MR_MASK_ADDR | (1 << 40), libc::EOPNOTSUPP),
            (IBV_REG_MR_MASK_IOVA, libc::EINVAL),
        ] {
            attr.comp_mask = mask;
            set_errno(0);
            // SAFETY: refused before any memory is touched.
            assert!(unsafe { ibv_reg_mr_ex(pd.1, &mut attr) }.is_null());
            assert_eq!(errno(), want, "mask {mask:#x}");
        }
        attr.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_IOVA;
        attr.iova = 0x1000;
        // SAFETY: refused: iova differs from addr.
        assert!(unsafe { ibv_reg_mr_ex(pd.1, &mut attr) }.is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        // SAFETY: nothing is dereferenced.
        let d = unsafe { ibv_reg_dmabuf_mr(pd.1, 0, 4096, 0, 3, 1) };
        assert!(d.is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
    }
}
