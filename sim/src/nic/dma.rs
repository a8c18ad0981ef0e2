//! The memory the simulated NIC reads and writes, and the only unsafe operations in the
//! crate.
//!
//! Memory is a list of *spans*, each valid for reads and writes for as long as it is
//! listed:
//! - **owned** spans are zeroed buffers this module allocated ([`Dma::alloc`]); they
//!   live until the NIC's shared state is dropped;
//! - **raw** spans are caller memory added by the `unsafe` [`Nic::register`], whose
//!   caller promised validity until the registration is removed.
//!
//! Every access checks that its whole range lies inside one span before touching a
//! byte, so the safety of a copy rests only on the span invariant, not on the callers
//! having validated keys and bounds (they do that too, to report the right status).
#![allow(unsafe_code)]

use super::{Access, Mr, Nic, SimError};

/// A contiguous range of valid memory.
#[derive(Clone, Copy, Debug)]
struct Span {
    /// First byte's address.
    start: u64,
    /// Length in bytes.
    len: usize,
    /// Identifier, to remove a raw span again.
    id: u64,
    /// True for buffers allocated here (freed on drop), false for caller memory.
    owned: bool,
}

impl Span {
    /// True when `[addr, addr + len)` lies inside this span.
    fn contains(&self, addr: u64, len: usize) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        addr >= self.start && end <= self.start + self.len as u64
    }
}

/// Identifies a raw span so that deregistration can remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpanId(u64);

/// The list of valid spans.
///
/// Invariant: for every span in `spans`, `[start, start + len)` is valid for reads and
/// writes and no Rust reference to it is live while a method of `Dma` runs. Owned
/// spans came from `Box::<[u8]>::into_raw` and are freed only in `Drop`.
#[derive(Debug, Default)]
pub(crate) struct Dma {
    spans: Vec<Span>,
    next_id: u64,
}

impl Dma {
    /// Allocates `len` zeroed bytes that live as long as `self`; returns their address.
    pub(crate) fn alloc(&mut self, len: usize) -> u64 {
        let raw = Box::into_raw(vec![0u8; len].into_boxed_slice());
        let start = raw.cast::<u8>() as u64;
        self.push(start, len, true);
        start
    }

    /// Lists caller memory `[ptr, ptr + len)`.
    ///
    /// # Safety
    /// Until [`Dma::remove_raw`] is called with the returned id (or `self` is dropped),
    /// the range must stay valid for reads and writes, and no reference to it may be
    /// live during any call of a `Dma` method.
    pub(crate) unsafe fn add_raw(&mut self, ptr: *mut u8, len: usize) -> SpanId {
        SpanId(self.push(ptr as u64, len, false))
    }

    /// Stops treating a raw span as valid memory.
    pub(crate) fn remove_raw(&mut self, id: SpanId) {
        self.spans.retain(|s| s.owned || s.id != id.0);
    }

    /// True when `[addr, addr + len)` lies inside memory this module allocated.
    pub(crate) fn is_owned(&self, addr: u64, len: usize) -> bool {
        self.spans.iter().any(|s| s.owned && s.contains(addr, len))
    }

    fn push(&mut self, start: u64, len: usize, owned: bool) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.spans.push(Span {
            start,
            len,
            id,
            owned,
        });
        id
    }

    /// True when `[addr, addr + len)` is empty or lies wholly inside one span.
    fn valid(&self, addr: u64, len: usize) -> bool {
        len == 0 || self.spans.iter().any(|s| s.contains(addr, len))
    }

    /// Copies `len` bytes from `src` to `dst`; the ranges may overlap.
    pub(crate) fn copy(&mut self, src: u64, dst: u64, len: usize) -> Result<(), SimError> {
        for addr in [src, dst] {
            if !self.valid(addr, len) {
                return Err(SimError::NotMapped { addr, len });
            }
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges were just found inside listed spans, which the type
        // invariant says are valid for reads and writes with no live references;
        // `ptr::copy` allows overlap.
        unsafe { core::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    /// Copies `[addr, addr + out.len())` into `out`.
    pub(crate) fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), SimError> {
        if !self.valid(addr, out.len()) {
            return Err(SimError::NotMapped {
                addr,
                len: out.len(),
            });
        }
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the source range lies inside a listed span (valid for reads, no live
        // references, by the type invariant); `out` is a distinct Rust buffer, so the
        // ranges cannot overlap.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` to `[addr, addr + data.len())`.
    pub(crate) fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        if !self.valid(addr, data.len()) {
            return Err(SimError::NotMapped {
                addr,
                len: data.len(),
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination lies inside a listed span (valid for writes, no live
        // references, by the type invariant); `data` is a distinct Rust buffer.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
        Ok(())
    }

    /// Reads the native-endian `u64` at `addr`.
    pub(crate) fn read_u64(&self, addr: u64) -> Result<u64, SimError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Writes a native-endian `u64` at `addr`.
    pub(crate) fn write_u64(&mut self, addr: u64, v: u64) -> Result<(), SimError> {
        self.write(addr, &v.to_ne_bytes())
    }
}

impl Drop for Dma {
    fn drop(&mut self) {
        for s in self.spans.iter().filter(|s| s.owned) {
            let slice = core::ptr::slice_from_raw_parts_mut(s.start as *mut u8, s.len);
            // SAFETY: owned spans came from `Box::<[u8]>::into_raw` with exactly this
            // address and length, and each is freed once, here.
            drop(unsafe { Box::from_raw(slice) });
        }
    }
}

impl Nic {
    /// Registers caller memory `[ptr, ptr + len)` on `device` with `access`.
    ///
    /// Prefer [`Nic::alloc_mr`] or [`Nic::register_buffer`], which use memory the NIC
    /// owns and are safe; this exists for tests that must place data at a given address.
    ///
    /// # Safety
    /// Until the region is removed with [`Nic::deregister`] or every handle of this NIC
    /// (the [`Nic`], its [`SimQp`](super::SimQp)s and [`SimCq`](super::SimCq)s) is
    /// dropped, `[ptr, ptr + len)` must stay valid for reads and writes, and no Rust
    /// reference to it may be live during any call on those handles (a step may write
    /// to it at any time).
    pub unsafe fn register(
        &self,
        device: usize,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr, SimError> {
        let mut st = self.state.borrow_mut();
        st.check_device(device)?;
        Access::validate(access)?;
        // SAFETY: the caller upholds `add_raw`'s contract, which is this function's.
        let span = unsafe { st.dma.add_raw(ptr, len) };
        Ok(st.mem.insert(device, ptr as u64, len, access, Some(span)))
    }
}

#[cfg(test)]
mod tests {
    use super::Dma;

    #[test]
    fn owned_memory_is_zeroed_and_copyable() {
        let mut d = Dma::default();
        let a = d.alloc(16);
        let b = d.alloc(16);
        d.write(a, b"0123456789abcdef").unwrap();
        d.copy(a + 4, b + 2, 6).unwrap();
        let mut out = [0xffu8; 16];
        d.read(b, &mut out).unwrap();
        assert_eq!(&out, b"\0\x00456789\0\0\0\0\0\0\0\0");
        assert!(d.is_owned(a, 16) && !d.is_owned(a, 17));
    }

    #[test]
    fn out_of_span_access_is_refused() {
        let mut d = Dma::default();
        let a = d.alloc(8);
        assert!(d.write(a + 4, &[0; 8]).is_err());
        assert!(d.read_u64(a + 1).is_err());
        assert!(d.copy(a, u64::MAX - 2, 4).is_err());
        assert!(d.copy(a, a + 4, 4).is_ok());
        assert!(d.copy(12345, 12345, 0).is_ok());
    }

    #[test]
    fn raw_span_works_until_removed() {
        let mut d = Dma::default();
        let mut buf = [0u8; 8];
        let p = buf.as_mut_ptr();
        // SAFETY: `buf` outlives `d`'s use of the span, which is removed below, and no
        // reference to it is used until then.
        let id = unsafe { d.add_raw(p, 8) };
        d.write_u64(p as u64, 7).unwrap();
        assert_eq!(d.read_u64(p as u64).unwrap(), 7);
        d.remove_raw(id);
        assert!(d.read_u64(p as u64).is_err());
        assert_eq!(u64::from_ne_bytes(buf), 7);
    }
}
