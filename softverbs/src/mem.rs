//! Registered memory: the key table, checked [`Span`]s and the copies between them.
//!
//! This is one of the two places that touch raw memory (the other is the `extern "C"`
//! surface in [`crate::abi`]). Everything else reaches application memory only through
//! a [`Span`], and a `Span` can only be made by [`MrTable::span`], which checks the key,
//! the device, the protection domain, the bounds and the access rights against a live
//! registration while the caller holds the table's read lock (so the region cannot be
//! deregistered during the copy).
//!
//! The one trust assumption is libibverbs' own: memory stays valid (mapped, readable and
//! writable) for as long as it is registered. Concurrent access by the application to
//! memory a WQE is moving is a data race in the application, as it is with a NIC; the
//! copies use raw pointers only, never references, so no Rust aliasing rule is broken
//! on our side.

use core::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// A registered memory region as the table keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MrInfo {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// `IBV_ACCESS_*` bits.
    pub access: u32,
    /// Device index the region was registered on.
    pub dev: usize,
    /// Protection domain id.
    pub pd: u32,
}

/// Why a key check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No live region has this key on this device.
    BadKey,
    /// The key is of another protection domain.
    WrongPd,
    /// The range is not inside the region (or overflows).
    Bounds,
    /// The region was not registered with the access needed.
    Access,
}

/// The key table of every registered region in the process. A key is
/// `(slot + 1) << 8 | generation`: lookups are an index, and a stale key (deregistered,
/// slot reused) fails by its generation byte. `lkey` and `rkey` are the same value.
#[derive(Default)]
pub(crate) struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

#[derive(Clone, Copy)]
struct Slot {
    gen: u8,
    info: Option<MrInfo>,
    /// Added (wrapping) to an address of the region's `[addr, addr + len)` to find
    /// its byte in the process: 0 for an ordinary region; for a zero-based one
    /// (`IBV_ACCESS_ZERO_BASED`: device memory) the host address of its first byte.
    shift: u64,
}

/// The largest slot index a key can carry (24 bits).
const MAX_SLOTS: usize = (1 << 24) - 1;

impl MrTable {
    /// Registers a region; `None` when the table is full.
    pub(crate) fn register(&mut self, info: MrInfo) -> Option<u32> {
        self.register_at(info, info.addr)
    }

    /// Registers a region whose addresses `[info.addr, info.addr + info.len)` name the
    /// bytes from `host` on (a zero-based region: `info.addr` 0). Such a region is not
    /// among [`MrTable::live`]'s, which are exported for other processes to copy into
    /// directly (its addresses are not the process's): their requests to it come through
    /// the responder. `None` when the table is full.
    pub(crate) fn register_at(&mut self, info: MrInfo, host: u64) -> Option<u32> {
        let slot = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return None;
                }
                self.slots.push(Slot {
                    gen: 0,
                    info: None,
                    shift: 0,
                });
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[slot];
        s.gen = s.gen.wrapping_add(1);
        s.info = Some(info);
        s.shift = host.wrapping_sub(info.addr);
        Some((((slot + 1) as u32) << 8) | u32::from(s.gen))
    }

    /// Removes a region; false when the key is not live.
    pub(crate) fn deregister(&mut self, key: u32) -> bool {
        let Some(i) = self.index(key) else {
            return false;
        };
        self.slots[i].info = None;
        self.free.push(i as u32);
        true
    }

    /// Replaces the region of a live key, which stays the same (`ibv_rereg_mr`); false
    /// when the key is not live.
    pub(crate) fn update(&mut self, key: u32, info: MrInfo) -> bool {
        let Some(i) = self.index(key) else {
            return false;
        };
        self.slots[i].info = Some(info);
        true
    }

    fn index(&self, key: u32) -> Option<usize> {
        let slot = (key >> 8).checked_sub(1)? as usize;
        let s = self.slots.get(slot)?;
        (s.gen == key as u8 && s.info.is_some()).then_some(slot)
    }

    /// The live region of `key`.
    pub(crate) fn get(&self, key: u32) -> Option<&MrInfo> {
        self.index(key).and_then(|i| self.slots[i].info.as_ref())
    }

    /// Every live region with its key, but the zero-based ones ([`MrTable::register_at`]).
    pub(crate) fn live(&self) -> impl Iterator<Item = (u32, &MrInfo)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let info = s.info.as_ref().filter(|_| s.shift == 0)?;
            Some(((((i + 1) as u32) << 8) | u32::from(s.gen), info))
        })
    }

    /// Number of live regions.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.info.is_some()).count()
    }

    /// Checks `[addr, addr + len)` against the region of `key` and returns a span over
    /// it. `need` are the `IBV_ACCESS_*` bits the operation needs (0 for a local read).
    pub(crate) fn span(
        &self,
        key: u32,
        dev: usize,
        pd: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Span<'_>, KeyError> {
        let slot = self.index(key).ok_or(KeyError::BadKey)?;
        let shift = self.slots[slot].shift;
        let mr = self.get(key).ok_or(KeyError::BadKey)?;
        if mr.dev != dev {
            return Err(KeyError::BadKey);
        }
        if mr.pd != pd {
            return Err(KeyError::WrongPd);
        }
        let end = addr.checked_add(len).ok_or(KeyError::Bounds)?;
        if addr < mr.addr || end > mr.addr + mr.len {
            return Err(KeyError::Bounds);
        }
        if mr.access & need != need {
            return Err(KeyError::Access);
        }
        Ok(Span {
            addr: addr.wrapping_add(shift),
            len,
            _table: PhantomData,
        })
    }
}

/// A checked range of registered memory, valid while the table's read lock that made it
/// is held (the lifetime).
///
/// Invariant: `[addr, addr + len)` lies inside a region registered when the span was
/// made, with the access the operation needed, and the region stays registered for
/// `'t` (deregistration needs the write lock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span<'t> {
    addr: u64,
    len: u64,
    _table: PhantomData<&'t MrTable>,
}

impl Span<'static> {
    /// An empty span (fills unused slots of fixed arrays; copies skip it).
    pub(crate) const fn empty() -> Span<'static> {
        Span {
            addr: 0,
            len: 0,
            _table: PhantomData,
        }
    }
}

impl Span<'_> {
    fn ptr(&self) -> *mut u8 {
        self.addr as usize as *mut u8
    }

    /// The start address and length (for a copy by another process's hand).
    pub(crate) fn range(&self) -> (u64, u64) {
        (self.addr, self.len)
    }
}

/// Splits the span list `spans` after `n` bytes: the first `n` bytes' spans are written
/// to `head`, the rest to `tail` (a span straddling the cut is split, both parts lying
/// inside it, so both keep the invariant); returns how many of each. Entries that do
/// not fit the output arrays are left out.
pub(crate) fn split_at<'t>(
    spans: &[Span<'t>],
    n: u64,
    head: &mut [Span<'t>],
    tail: &mut [Span<'t>],
) -> (usize, usize) {
    let (mut nh, mut nt) = (0, 0);
    let mut left = n;
    let put = |out: &mut [Span<'t>], k: &mut usize, s: Span<'t>| {
        if s.len > 0 && *k < out.len() {
            out[*k] = s;
            *k += 1;
        }
    };
    for s in spans {
        let h = s.len.min(left);
        left -= h;
        put(head, &mut nh, Span { len: h, ..*s });
        put(
            tail,
            &mut nt,
            Span {
                addr: s.addr + h,
                len: s.len - h,
                _table: PhantomData,
            },
        );
    }
    (nh, nt)
}

/// Total bytes of a span list.
pub(crate) fn total(spans: &[Span<'_>]) -> u64 {
    spans.iter().map(|s| s.len).sum()
}

/// Copies from the `src` spans, in order, into the `dst` spans, in order, until either
/// list is exhausted; returns the bytes copied. Overlap between source and destination
/// (a loopback copy inside one region) is allowed.
pub(crate) fn copy_spans(dst: &[Span<'_>], src: &[Span<'_>]) -> u64 {
    let (mut di, mut doff) = (0usize, 0u64);
    let mut copied = 0u64;
    for s in src {
        let mut soff = 0u64;
        while soff < s.len {
            let Some(d) = dst.get(di) else {
                return copied;
            };
            if doff == d.len {
                di += 1;
                doff = 0;
                continue;
            }
            let n = (s.len - soff).min(d.len - doff);
            // SAFETY: both ranges lie inside live registered regions (the `Span`
            // invariant: checked bounds, registration held by the read lock), `n` stays
            // within both remainders; `ptr::copy` allows overlap.
            unsafe {
                core::ptr::copy(
                    s.ptr().add(soff as usize),
                    d.ptr().add(doff as usize),
                    n as usize,
                );
            }
            soff += n;
            doff += n;
            copied += n;
        }
    }
    copied
}

/// Copies `src` into the `dst` spans, in order; returns the bytes copied.
pub(crate) fn copy_from_bytes(dst: &[Span<'_>], src: &[u8]) -> u64 {
    let mut off = 0usize;
    for d in dst {
        if off == src.len() {
            break;
        }
        let n = (src.len() - off).min(d.len as usize);
        if n == 0 {
            continue;
        }
        // SAFETY: `d` is a live registered range at least `n` bytes long (the `Span`
        // invariant); `src[off..off + n]` is in bounds; a `Vec` owned by the WQE cannot
        // overlap registered application memory.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr().add(off), d.ptr(), n) };
        off += n;
    }
    off as u64
}

/// Copies from the spans `src`, in order, into `dst` until either ends; returns the
/// bytes copied.
pub(crate) fn copy_to_bytes(dst: &mut [u8], src: &[Span<'_>]) -> u64 {
    let mut off = 0usize;
    for s in src {
        if off == dst.len() {
            break;
        }
        let n = (dst.len() - off).min(s.len as usize);
        if n == 0 {
            continue;
        }
        // SAFETY: `s` is a live registered range at least `n` bytes long (the `Span`
        // invariant); `dst[off..off + n]` is in bounds; a buffer of the provider's own
        // cannot overlap registered application memory.
        unsafe { core::ptr::copy_nonoverlapping(s.ptr(), dst.as_mut_ptr().add(off), n) };
        off += n;
    }
    off as u64
}

/// Views an 8-byte, 8-aligned span as an atomic; `None` when it is not one.
fn atomic<'t>(span: &Span<'t>) -> Option<&'t AtomicU64> {
    if span.len != 8 || span.addr % 8 != 0 {
        return None;
    }
    // SAFETY: the span is 8 live bytes of registered memory, 8-aligned (checked above),
    // valid for the span's lifetime; `AtomicU64` has the size and alignment of `u64`,
    // and every access we make to it is atomic. Registered memory is mutable shared
    // memory by contract (the NIC writes it), so an atomic view is the right model.
    Some(unsafe { AtomicU64::from_ptr(span.ptr().cast::<u64>()) })
}

/// Atomic fetch-and-add on an 8-byte aligned span; the original value, or `None` when
/// the span is not 8 aligned bytes. Host byte order (as rdma_rxe does).
pub(crate) fn fetch_add(span: &Span<'_>, add: u64) -> Option<u64> {
    atomic(span).map(|a| a.fetch_add(add, Ordering::SeqCst))
}

/// Atomic compare-and-swap on an 8-byte aligned span; the original value, or `None` when
/// the span is not 8 aligned bytes. Host byte order.
pub(crate) fn compare_swap(span: &Span<'_>, compare: u64, swap: u64) -> Option<u64> {
    atomic(span).map(|a| {
        match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(buf: &mut [u8], access: u32) -> MrInfo {
        MrInfo {
            addr: buf.as_mut_ptr() as u64,
            len: buf.len() as u64,
            access,
            dev: 0,
            pd: 1,
        }
    }

    #[test]
    fn a_zero_based_region_maps_from_0_and_is_not_among_the_live_ones() {
        let mut host = vec![0u8; 64];
        let base = host.as_mut_ptr() as u64;
        let mut t = MrTable::default();
        let plain = t.register(info(&mut host, 1)).unwrap();
        let zero = MrInfo {
            addr: 0,
            len: 32,
            ..info(&mut host, 1)
        };
        let k = t.register_at(zero, base + 16).unwrap();
        assert_eq!(t.span(k, 0, 1, 8, 8, 1).unwrap().range(), (base + 24, 8));
        assert_eq!(t.span(k, 0, 1, 30, 4, 0).unwrap_err(), KeyError::Bounds);
        assert_eq!(t.span(plain, 0, 1, base, 8, 0).unwrap().range(), (base, 8));
        let live: Vec<u32> = t.live().map(|(key, _)| key).collect();
        assert_eq!(live, [plain]);
        // A slot reused by an ordinary region maps one to one again.
        assert!(t.deregister(k));
        let k2 = t.register(info(&mut host, 1)).unwrap();
        assert_eq!(
            t.span(k2, 0, 1, base + 8, 8, 0).unwrap().range(),
            (base + 8, 8)
        );
    }

    #[test]
    fn update_replaces_a_live_region_under_the_same_key() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 32];
        let mut t = MrTable::default();
        let k = t.register(info(&mut a, 1)).unwrap();
        assert!(t.update(k, info(&mut b, 3)));
        assert_eq!(t.get(k), Some(&info(&mut b, 3)));
        let base = a.as_ptr() as u64;
        assert_eq!(t.span(k, 0, 1, base, 8, 0).unwrap_err(), KeyError::Bounds);
        assert!(t.deregister(k));
        assert!(!t.update(k, info(&mut a, 1)), "a dead key is not revived");
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn keys_check_bounds_access_pd_and_staleness() {
        let mut buf = vec![0u8; 64];
        let mut t = MrTable::default();
        let k = t.register(info(&mut buf, 1)).unwrap();
        let base = buf.as_ptr() as u64;
        assert!(t.span(k, 0, 1, base, 64, 1).is_ok());
        assert_eq!(
            t.span(k, 0, 1, base + 1, 64, 0).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(
            t.span(k, 0, 1, u64::MAX, 2, 0).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(t.span(k, 0, 1, base, 8, 2).unwrap_err(), KeyError::Access);
        assert_eq!(t.span(k, 0, 2, base, 8, 0).unwrap_err(), KeyError::WrongPd);
        assert_eq!(t.span(k, 1, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert_eq!(t.span(0, 0, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert!(t.deregister(k));
        assert!(!t.deregister(k));
        let k2 = t.register(info(&mut buf, 1)).unwrap();
        assert_ne!(k, k2, "a reused slot gets a new generation");
        assert_eq!(t.span(k, 0, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn scatter_gather_copies_across_uneven_spans() {
        let mut src = (0u8..100).collect::<Vec<_>>();
        let mut dst = vec![0u8; 100];
        let mut t = MrTable::default();
        let ks = t.register(info(&mut src, 0)).unwrap();
        let kd = t.register(info(&mut dst, 1)).unwrap();
        let (s0, d0) = (src.as_ptr() as u64, dst.as_ptr() as u64);
        let srcs = [
            t.span(ks, 0, 1, s0, 10, 0).unwrap(),
            t.span(ks, 0, 1, s0 + 10, 30, 0).unwrap(),
        ];
        let dsts = [
            t.span(kd, 0, 1, d0, 25, 1).unwrap(),
            t.span(kd, 0, 1, d0 + 50, 50, 1).unwrap(),
        ];
        assert_eq!(total(&srcs), 40);
        assert_eq!(copy_spans(&dsts, &srcs), 40);
        assert_eq!(&dst[..25], &src[..25]);
        assert_eq!(&dst[50..65], &src[25..40]);
        assert!(dst[25..50].iter().all(|&b| b == 0));
        assert_eq!(copy_from_bytes(&dsts[..1], &[9; 30]), 25);
        assert_eq!(&dst[..25], &[9; 25]);
    }

    #[test]
    fn atomics_need_eight_aligned_bytes() {
        let mut words = vec![5u64, 0];
        let mut t = MrTable::default();
        let m = MrInfo {
            addr: words.as_mut_ptr() as u64,
            len: 16,
            access: 0,
            dev: 0,
            pd: 1,
        };
        let k = t.register(m).unwrap();
        let a = t.span(k, 0, 1, m.addr, 8, 0).unwrap();
        assert_eq!(fetch_add(&a, 3), Some(5));
        assert_eq!(compare_swap(&a, 8, 1), Some(8));
        assert_eq!(compare_swap(&a, 8, 2), Some(1));
        let odd = t.span(k, 0, 1, m.addr + 4, 8, 0).unwrap();
        assert_eq!(fetch_add(&odd, 1), None);
        let _ = (a, odd);
        assert_eq!(words[0], 1);
    }
}
