//! Checked spans of registered memory and what moves bytes through them: copies
//! between spans and byte slices, atomics, and the guards for on-demand memory.

use core::marker::PhantomData;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::shared::sys::LAST;

/// Whether every page of `[addr, addr + len)` is mapped in this process now
/// (`mincore(2)` fails with `ENOMEM` on a range that is not). Whether a mapping is
/// resident does not matter (an access faults it in), nor whether it grants the
/// access: the copies find that out ([`guarded_copy`]); this check tells an unmapped
/// range before anything is moved.
pub(crate) fn mapped(addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    /// Pages asked about per call (the answer vector's size).
    const CHUNK: u64 = 4096;
    // SAFETY: `sysconf` reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page_size = u64::try_from(size)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let mut page = addr & !(page_size - 1);
    let mut vec = [0u8; CHUNK as usize];
    while page < end {
        let bytes = (end - page).min(CHUNK * page_size);
        // SAFETY: `mincore` only reads the page tables of the range (any range is
        // allowed; unmapped ones fail) and writes one byte per page into `vec`, which
        // holds `CHUNK` bytes for at most `CHUNK` pages; `page` is page-aligned.
        let rc = unsafe {
            libc::mincore(
                page as usize as *mut libc::c_void,
                bytes as usize,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return false;
        }
        page += bytes;
    }
    true
}

/// A checked range of registered memory, valid while the table's read lock that made it
/// is held (the lifetime).
///
/// Invariant: `[addr, addr + len)` lies inside a region registered when the span was
/// made, with the access the operation needed, and the region stays registered for
/// `'t` (deregistration needs the write lock).
///
/// A span of an on-demand region (`odp`) was mapped when it was made; the copies reach
/// it only through `process_vm_readv` / `writev` on this process ([`guarded_copy`]),
/// which fail instead of faulting where it is no longer (or not in the needed way)
/// accessible.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span<'t> {
    addr: u64,
    len: u64,
    odp: bool,
    /// Borrowed from the key table that checked it (`MrTable::span`).
    _table: PhantomData<&'t ()>,
}

impl Span<'static> {
    /// An empty span (fills unused slots of fixed arrays; copies skip it).
    pub(crate) const fn empty() -> Span<'static> {
        Span {
            addr: 0,
            len: 0,
            odp: false,
            _table: PhantomData,
        }
    }
}

impl<'t> Span<'t> {
    /// A span of `len` bytes at `addr` (`odp`: of an on-demand region). Made only by
    /// the key table's checks, which establish the invariant above.
    pub(super) fn checked(addr: u64, len: u64, odp: bool) -> Span<'t> {
        Span {
            addr,
            len,
            odp,
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
                odp: s.odp,
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

/// A copy touching on-demand memory found it inaccessible (unmapped, or mapped
/// without the access) on its source side or its destination side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    Src,
    Dst,
}

/// Copies `n` bytes from address `s` to address `d`, where the source (`s_odp`) or the
/// destination (`d_odp`) lies in an on-demand region: through a bounce buffer, the
/// on-demand side read or written with `process_vm_readv` / `writev` on this process,
/// which fail with `EFAULT` where the memory is not accessible instead of faulting.
/// Overlapping ranges (a loopback copy) are copied in the order that keeps them right.
/// Where the system refuses `process_vm_*` on this process (a seccomp filter), the
/// range, found mapped when its span was made, is copied directly.
fn guarded_copy(d: u64, s: u64, n: u64, s_odp: bool, d_odp: bool) -> Result<(), Fault> {
    use crate::shared::sys::{process_copy, CopyError};
    const PIECE: u64 = 4096;
    let mut bounce = [0u8; PIECE as usize];
    let b = bounce.as_mut_ptr() as u64;
    let me = std::process::id();
    let backward = d > s && d < s.saturating_add(n);
    let mut done = 0u64;
    while done < n {
        let k = (n - done).min(PIECE);
        let off = if backward { n - done - k } else { done };
        let read = s_odp
            && match process_copy(me, &[(b, k)], &[(s + off, k)], true) {
                Ok(()) => true,
                Err(CopyError::Denied) => false,
                Err(_) => return Err(Fault::Src),
            };
        if !read {
            // SAFETY: `[s + off, s + off + k)` lies in a span of registered memory
            // (pinned, or on-demand and mapped when checked); `bounce` holds `k` bytes
            // and is the provider's own.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (s + off) as usize as *const u8,
                    bounce.as_mut_ptr(),
                    k as usize,
                )
            }
        }
        let written = d_odp
            && match process_copy(me, &[(b, k)], &[(d + off, k)], false) {
                Ok(()) => true,
                Err(CopyError::Denied) => false,
                Err(_) => return Err(Fault::Dst),
            };
        if !written {
            // SAFETY: as above, for the destination span.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    bounce.as_ptr(),
                    (d + off) as usize as *mut u8,
                    k as usize,
                )
            }
        }
        done += k;
    }
    Ok(())
}

/// Copies from the `src` spans, in order, into the `dst` spans, in order, until either
/// list is exhausted; returns the bytes copied. The last [`LAST`] bytes land after the
/// others. A source span and a destination span may overlap (a loopback copy inside
/// one region): each pair is copied as `memmove` would, the last bytes read before
/// anything is written.
///
/// # Errors
/// [`Fault`] when on-demand memory on either side is not accessible; the bytes before
/// it may have been copied.
pub(crate) fn copy_spans(dst: &[Span<'_>], src: &[Span<'_>]) -> Result<u64, Fault> {
    if let ([d], [s]) = (dst, src) {
        if !d.odp && !s.odp {
            let n = d.len.min(s.len);
            // SAFETY: both ranges lie inside live registered regions, pinned (the
            // `Span` invariant), `n` bytes within each; `ptr::copy` allows overlap, and
            // the last bytes are read before anything is written.
            unsafe { copy_in_order(d.ptr(), s.ptr(), n as usize) };
            return Ok(n);
        }
    }
    let n = total(dst).min(total(src));
    if n <= LAST {
        return copy_spans_upto(dst, src, n);
    }
    let cut = n - LAST;
    let mut last = [0u8; LAST as usize];
    each_part(src, cut, n, |part, at| {
        copy_to_bytes(&mut last[at as usize..], &[part]).map(drop)
    })?;
    copy_spans_upto(dst, src, cut)?;
    fence(Ordering::Release);
    each_part(dst, cut, n, |part, at| {
        copy_from_bytes_unordered(&[part], &last[at as usize..]).map(drop)
    })?;
    Ok(n)
}

/// Copies `n` bytes from `s` to `d` (which may overlap, as `memmove`), the last
/// [`LAST`] of them stored after all the others.
///
/// # Safety
/// `s` is readable and `d` writable for `n` bytes.
#[inline]
unsafe fn copy_in_order(d: *mut u8, s: *const u8, n: usize) {
    const L: usize = LAST as usize;
    if n <= L {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::copy(s, d, n) };
        return;
    }
    // SAFETY: the caller's contract: `n - L .. n` lies in both ranges; the last
    // bytes are read before anything is written, so an overlap keeps them.
    unsafe {
        let last = core::ptr::read_unaligned(s.add(n - L).cast::<[u8; L]>());
        core::ptr::copy(s, d, n - L);
        fence(Ordering::Release);
        core::ptr::write_unaligned(d.add(n - L).cast::<[u8; L]>(), last);
    }
}

/// Calls `f` with each part of the span list `spans` that holds its bytes `from..to`,
/// and where in those bytes the part begins.
fn each_part<'t>(
    spans: &[Span<'t>],
    from: u64,
    to: u64,
    mut f: impl FnMut(Span<'t>, u64) -> Result<(), Fault>,
) -> Result<(), Fault> {
    let mut pos = 0u64;
    for s in spans {
        if pos >= to {
            break;
        }
        let end = (pos + s.len).min(to);
        if end > from {
            let skip = from.saturating_sub(pos);
            let part = Span {
                addr: s.addr + skip,
                len: end - pos - skip,
                ..*s
            };
            f(part, pos + skip - from)?;
        }
        pos += s.len;
    }
    Ok(())
}

/// [`copy_spans`] of the first `limit` bytes, stored in whatever order `memcpy`
/// stores them.
fn copy_spans_upto(dst: &[Span<'_>], src: &[Span<'_>], limit: u64) -> Result<u64, Fault> {
    let (mut di, mut doff) = (0usize, 0u64);
    let mut copied = 0u64;
    for s in src {
        let mut soff = 0u64;
        while soff < s.len && copied < limit {
            let Some(d) = dst.get(di) else {
                return Ok(copied);
            };
            if doff == d.len {
                di += 1;
                doff = 0;
                continue;
            }
            let n = (s.len - soff).min(d.len - doff).min(limit - copied);
            if s.odp || d.odp {
                guarded_copy(d.addr + doff, s.addr + soff, n, s.odp, d.odp)?;
            } else {
                // SAFETY: both ranges lie inside live registered regions, pinned (the
                // `Span` invariant: checked bounds, registration held by the read
                // lock), `n` stays within both remainders; `ptr::copy` allows overlap.
                unsafe {
                    core::ptr::copy(
                        s.ptr().add(soff as usize),
                        d.ptr().add(doff as usize),
                        n as usize,
                    );
                }
            }
            soff += n;
            doff += n;
            copied += n;
        }
    }
    Ok(copied)
}

/// Copies `src` into the `dst` spans, in order; returns the bytes copied. The last
/// [`LAST`] bytes land after the others.
///
/// # Errors
/// [`Fault::Dst`] when on-demand memory of `dst` is not accessible.
pub(crate) fn copy_from_bytes(dst: &[Span<'_>], src: &[u8]) -> Result<u64, Fault> {
    if let [d] = dst {
        if !d.odp {
            let n = d.len.min(src.len() as u64);
            // SAFETY: `d` is a live, pinned registered range at least `n` bytes long
            // (the `Span` invariant), `src` holds at least `n`; a buffer of the
            // provider's own cannot overlap registered application memory (and
            // `copy_in_order` allows it anyway).
            unsafe { copy_in_order(d.ptr(), src.as_ptr(), n as usize) };
            return Ok(n);
        }
    }
    let n = total(dst).min(src.len() as u64);
    if n <= LAST {
        return copy_from_bytes_unordered(dst, src);
    }
    let cut = n - LAST;
    copy_from_bytes_unordered(dst, &src[..cut as usize])?;
    fence(Ordering::Release);
    each_part(dst, cut, n, |part, at| {
        copy_from_bytes_unordered(&[part], &src[(cut + at) as usize..n as usize]).map(drop)
    })?;
    Ok(n)
}

/// [`copy_from_bytes`] into the bytes of `dst` from its byte `at` on: one piece of a
/// message that arrives in several (its parts in order, so the message's last bytes
/// are still written last).
pub(crate) fn copy_from_bytes_at(dst: &[Span<'_>], at: u64, src: &[u8]) -> Result<u64, Fault> {
    if at == 0 {
        return copy_from_bytes(dst, src);
    }
    let mut n = 0;
    each_part(dst, at, at + src.len() as u64, |part, from| {
        n += copy_from_bytes(&[part], &src[from as usize..])?;
        Ok(())
    })?;
    Ok(n)
}

/// [`copy_to_bytes`] of the bytes of `src` from its byte `from` on: one piece of a
/// message sent in several.
pub(crate) fn copy_range_to_bytes(
    dst: &mut [u8],
    src: &[Span<'_>],
    from: u64,
) -> Result<u64, Fault> {
    let mut n = 0;
    each_part(src, from, from + dst.len() as u64, |part, at| {
        n += copy_to_bytes(&mut dst[at as usize..], &[part])?;
        Ok(())
    })?;
    Ok(n)
}

/// [`copy_from_bytes`], its bytes stored in whatever order `memcpy` stores them.
fn copy_from_bytes_unordered(dst: &[Span<'_>], src: &[u8]) -> Result<u64, Fault> {
    let mut off = 0usize;
    for d in dst {
        if off == src.len() {
            break;
        }
        let n = (src.len() - off).min(d.len as usize);
        if n == 0 {
            continue;
        }
        let from = src.as_ptr() as u64 + off as u64;
        if d.odp {
            guarded_copy(d.addr, from, n as u64, false, true)?;
        } else {
            // SAFETY: `d` is a live, pinned registered range at least `n` bytes long
            // (the `Span` invariant); `src[off..off + n]` is in bounds; a `Vec` owned
            // by the WQE cannot overlap registered application memory.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr().add(off), d.ptr(), n) };
        }
        off += n;
    }
    Ok(off as u64)
}

/// Copies from the spans `src`, in order, into `dst` until either ends; returns the
/// bytes copied.
///
/// # Errors
/// [`Fault::Src`] when on-demand memory of `src` is not accessible.
pub(crate) fn copy_to_bytes(dst: &mut [u8], src: &[Span<'_>]) -> Result<u64, Fault> {
    let mut off = 0usize;
    for s in src {
        if off == dst.len() {
            break;
        }
        let n = (dst.len() - off).min(s.len as usize);
        if n == 0 {
            continue;
        }
        if s.odp {
            let to = dst.as_mut_ptr() as u64 + off as u64;
            guarded_copy(to, s.addr, n as u64, true, false)?;
        } else {
            // SAFETY: `s` is a live, pinned registered range at least `n` bytes long
            // (the `Span` invariant); `dst[off..off + n]` is in bounds; a buffer of the
            // provider's own cannot overlap registered application memory.
            unsafe { core::ptr::copy_nonoverlapping(s.ptr(), dst.as_mut_ptr().add(off), n) };
        }
        off += n;
    }
    Ok(off as u64)
}

/// Whether an atomic may operate on `span` in place: always for pinned memory; for an
/// on-demand span, when the mapping under it is readable and writable now (read from
/// `/proc/self/maps`: an atomic cannot go through `process_vm_*`, and reading then
/// writing back to test access would race with other atomics on the word).
pub(crate) fn atomic_accessible(span: &Span<'_>) -> bool {
    accessible(span, true)
}

/// Whether `span` can be read (and, with `write`, written) now: always for pinned
/// memory; for an on-demand span, as its mappings say. For telling which side of a
/// failed copy between processes was at fault.
pub(crate) fn accessible(span: &Span<'_>, write: bool) -> bool {
    !span.odp || mapping_allows(span.addr, span.len, write)
}

/// Whether `[addr, addr + len)` lies in readable (and, with `write`, writable)
/// mappings of this process (`/proc/self/maps`).
fn mapping_allows(addr: u64, len: u64, write: bool) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    let end = addr.saturating_add(len);
    let mut at = addr;
    // Mappings are listed in address order; adjacent ones may cover the range.
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        if lo <= at && at < hi {
            let p = perms.as_bytes();
            if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
                return false;
            }
            at = hi;
            if at >= end {
                return true;
            }
        }
    }
    false
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
    use crate::mem::test_region as info;
    use crate::mem::MrInfo;
    use crate::mem::MrTable;

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
        assert_eq!(copy_spans(&dsts, &srcs), Ok(40));
        assert_eq!(&dst[..25], &src[..25]);
        assert_eq!(&dst[50..65], &src[25..40]);
        assert!(dst[25..50].iter().all(|&b| b == 0));
        assert_eq!(copy_from_bytes(&dsts[..1], &[9; 30]), Ok(25));
        assert_eq!(&dst[..25], &[9; 25]);
    }

    #[test]
    fn pieces_of_a_message_go_to_and_come_from_their_place_in_the_spans() {
        let mut src = (0u8..100).collect::<Vec<_>>();
        let mut dst = vec![0u8; 100];
        let mut t = MrTable::default();
        let ks = t.register(info(&mut src, 0)).unwrap();
        let kd = t.register(info(&mut dst, 1)).unwrap();
        let (s0, d0) = (src.as_ptr() as u64, dst.as_ptr() as u64);
        // A message of 40 bytes in spans of 10 and 30, in pieces of 16.
        let srcs = [
            t.span(ks, 0, 1, s0, 10, 0).unwrap(),
            t.span(ks, 0, 1, s0 + 50, 30, 0).unwrap(),
        ];
        let dsts = [
            t.span(kd, 0, 1, d0, 25, 1).unwrap(),
            t.span(kd, 0, 1, d0 + 60, 15, 1).unwrap(),
        ];
        let message: Vec<u8> = [&src[..10], &src[50..80]].concat();
        for from in [16u64, 0, 32] {
            let mut piece = vec![0u8; 16.min(40 - from as usize)];
            assert_eq!(
                copy_range_to_bytes(&mut piece, &srcs, from),
                Ok(piece.len() as u64)
            );
            assert_eq!(piece, message[from as usize..from as usize + piece.len()]);
            assert_eq!(
                copy_from_bytes_at(&dsts, from, &piece),
                Ok(piece.len() as u64)
            );
        }
        let landed: Vec<u8> = [&dst[..25], &dst[60..75]].concat();
        assert_eq!(landed, message);
        assert!(dst[25..60].iter().chain(&dst[75..]).all(|&b| b == 0));
    }

    #[test]
    fn the_last_bytes_go_where_they_belong_whichever_spans_hold_them() {
        // 20 bytes from spans of 5, 3 and 12 into spans of 14, 3 and 10: the last 8
        // come from inside one source span and land across all three destinations.
        let mut src = (1u8..=40).collect::<Vec<_>>();
        let mut dst = vec![0u8; 40];
        let mut t = MrTable::default();
        let ks = t.register(info(&mut src, 0)).unwrap();
        let kd = t.register(info(&mut dst, 1)).unwrap();
        let (s0, d0) = (src.as_ptr() as u64, dst.as_ptr() as u64);
        let srcs = [
            t.span(ks, 0, 1, s0, 5, 0).unwrap(),
            t.span(ks, 0, 1, s0 + 10, 3, 0).unwrap(),
            t.span(ks, 0, 1, s0 + 20, 12, 0).unwrap(),
        ];
        let dsts = [
            t.span(kd, 0, 1, d0, 14, 1).unwrap(),
            t.span(kd, 0, 1, d0 + 20, 3, 1).unwrap(),
            t.span(kd, 0, 1, d0 + 30, 10, 1).unwrap(),
        ];
        let stream: Vec<u8> = [&src[..5], &src[10..13], &src[20..32]].concat();
        assert_eq!(copy_spans(&dsts, &srcs), Ok(20));
        let got: Vec<u8> = [&dst[..14], &dst[20..23], &dst[30..33]].concat();
        assert_eq!(got, stream);
        assert!(dst[33..].iter().all(|&b| b == 0), "past the copy");
        // From bytes: 21 of them into the same spans.
        dst.fill(0);
        let bytes: Vec<u8> = (100..121).collect();
        assert_eq!(copy_from_bytes(&dsts, &bytes), Ok(21));
        let got: Vec<u8> = [&dst[..14], &dst[20..23], &dst[30..34]].concat();
        assert_eq!(got, bytes);
        assert!(dst[34..].iter().all(|&b| b == 0), "past the copy");
    }

    #[test]
    fn a_loopback_copy_that_overlaps_itself_is_a_memmove_either_way() {
        // The ordered copy reads the last bytes first and writes them last: with the
        // destination behind or ahead of the source, the result is memmove's.
        for shift in [-3i64, 3, -40, 40] {
            let mut buf = (0u8..=255).cycle().take(600).collect::<Vec<_>>();
            let mut want = buf.clone();
            let (from, to, n) = (100usize, (100 + shift) as usize, 300usize);
            want.copy_within(from..from + n, to);
            let mut t = MrTable::default();
            let k = t.register(info(&mut buf, 1)).unwrap();
            let b = buf.as_ptr() as u64;
            let src = [t.span(k, 0, 1, b + from as u64, n as u64, 0).unwrap()];
            let dst = [t.span(k, 0, 1, b + to as u64, n as u64, 1).unwrap()];
            assert_eq!(copy_spans(&dst, &src), Ok(n as u64));
            assert_eq!(buf, want, "shift {shift}");
        }
    }

    #[test]
    fn on_demand_copies_fail_where_the_memory_is_not_accessible() {
        // Three pages: read-write, read-only, no access.
        const P: usize = 4096;
        // SAFETY: a fresh anonymous mapping, protected page by page, unmapped below.
        let base = unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                3 * P,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let b = p.cast::<u8>();
            assert_eq!(libc::mprotect(b.add(P).cast(), P, libc::PROT_READ), 0);
            assert_eq!(libc::mprotect(b.add(2 * P).cast(), P, libc::PROT_NONE), 0);
            b as u64
        };
        let mut t = MrTable::default();
        let odp = MrInfo {
            addr: base,
            len: 3 * P as u64,
            access: vqp_sys::IBV_ACCESS_ON_DEMAND | vqp_sys::IBV_ACCESS_LOCAL_WRITE,
            dev: 0,
            pd: 1,
            qpn: 0,
        };
        let k = t.register(odp).unwrap();
        let span = |off: u64, len: u64| t.span(k, 0, 1, base + off, len, 0).unwrap();
        let page = P as u64;
        // Mapped pages of every kind pass the check; the copies tell them apart.
        assert_eq!(copy_spans(&[span(page, 8)], &[span(0, 8)]), Err(Fault::Dst));
        assert_eq!(
            copy_spans(&[span(0, 8)], &[span(2 * page, 8)]),
            Err(Fault::Src)
        );
        assert_eq!(
            copy_from_bytes(&[span(page, 4)], &[1, 2, 3, 4]),
            Err(Fault::Dst)
        );
        let mut out = [0u8; 4];
        assert_eq!(
            copy_to_bytes(&mut out, &[span(2 * page, 4)]),
            Err(Fault::Src)
        );
        // What is accessible is copied, overlapping ranges included.
        assert_eq!(
            copy_from_bytes(&[span(0, 8)], &[1, 2, 3, 4, 5, 6, 7, 8]),
            Ok(8)
        );
        assert_eq!(copy_spans(&[span(2, 6)], &[span(0, 6)]), Ok(6));
        assert_eq!(copy_to_bytes(&mut out, &[span(0, 4)]), Ok(4));
        assert_eq!(out, [1, 2, 1, 2]);
        assert_eq!(
            copy_spans(&[span(page, 4)], &[span(page, 4)]),
            Err(Fault::Dst)
        );
        assert_eq!(
            copy_to_bytes(&mut out, &[span(page, 4)]),
            Ok(4),
            "read-only reads"
        );
        assert!(atomic_accessible(&span(0, 8)));
        assert!(!atomic_accessible(&span(page, 8)));
        assert!(!atomic_accessible(&span(2 * page, 8)));
        assert!(accessible(&span(page, 8), false));
        assert!(!accessible(&span(2 * page, 8), false));
        // SAFETY: the mapping made above, no span of it used any more.
        unsafe { libc::munmap(base as usize as *mut libc::c_void, 3 * P) };
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
            qpn: 0,
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
