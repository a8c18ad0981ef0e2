//! The data check: a pattern that depends on a key (the message number, or for reads
//! the source slot) and on the byte offset, written by the side that owns the source and
//! compared byte for byte by the side that receives it.
//!
//! Buffers are cut into slots of `--size` bytes; a slot is only touched by the program
//! while no work request uses it (the credit scheme in `run` guarantees that), so each
//! access makes a slice of that slot alone.

use vqp_host::MemoryRegion;

/// The 64-bit word at word index `w` of the message with key `key`.
#[inline]
fn word(base: u64, w: u64) -> u64 {
    base ^ w.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A key mixed with the run's seed (splitmix64's finaliser), so that two keys give
/// unrelated patterns.
fn base(seed: u64, key: u64) -> u64 {
    let mut z = seed ^ key.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ 0x94d0_49bb_1331_11eb;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of `key`.
pub fn fill(buf: &mut [u8], seed: u64, key: u64) {
    let b = base(seed, key);
    let words = (buf.len() / 8) as u64;
    let mut chunks = buf.chunks_exact_mut(8);
    for (w, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&word(b, w as u64).to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let last = word(b, words).to_le_bytes();
    let n = tail.len();
    tail.copy_from_slice(&last[..n]);
}

/// The offset of the first byte of `buf` that differs from the pattern of `key`.
pub fn check(buf: &[u8], seed: u64, key: u64) -> Option<usize> {
    let b = base(seed, key);
    let mut chunks = buf.chunks_exact(8);
    for (w, c) in (&mut chunks).enumerate() {
        let want = word(b, w as u64).to_le_bytes();
        if c != want {
            let i = c.iter().zip(&want).position(|(x, y)| x != y).unwrap_or(0);
            return Some(w * 8 + i);
        }
    }
    let tail = chunks.remainder();
    let last = word(b, (buf.len() / 8) as u64).to_le_bytes();
    tail.iter()
        .zip(&last)
        .position(|(x, y)| x != y)
        .map(|i| buf.len() - tail.len() + i)
}

/// The address of slot `slot` of `size` bytes in `mr`.
pub fn slot_addr(mr: &MemoryRegion, slot: u64, size: u64) -> u64 {
    mr.addr() + slot * size
}

/// Slot `slot` of `mr`, to fill.
///
/// # Safety
/// No work request may read or write the slot while the slice lives (`&mut` only
/// excludes other slices made by this program).
pub unsafe fn slot_mut(mr: &mut MemoryRegion, slot: u64, size: u64) -> &mut [u8] {
    let start = (slot * size) as usize;
    debug_assert!(start + size as usize <= mr.len());
    // SAFETY: the slot lies inside the registered region (the buffers are sized
    // slots × size, checked above), which lives as long as `mr`; the caller excludes
    // the device and other slices.
    unsafe { std::slice::from_raw_parts_mut(mr.as_ptr().add(start), size as usize) }
}

/// Slot `slot` of `mr`, to check.
///
/// # Safety
/// No work request may write the slot while the slice lives, and no mutable slice of
/// it may exist.
pub unsafe fn slot(mr: &MemoryRegion, slot: u64, size: u64) -> &[u8] {
    let start = (slot * size) as usize;
    debug_assert!(start + size as usize <= mr.len());
    // SAFETY: as `slot_mut`; the caller excludes writers.
    unsafe { std::slice::from_raw_parts(mr.as_ptr().add(start), size as usize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_finds_every_byte() {
        for len in [1usize, 7, 8, 9, 4096 + 5] {
            let mut v = vec![0u8; len];
            fill(&mut v, 3, 42);
            assert_eq!(check(&v, 3, 42), None);
            if len >= 8 {
                assert!(check(&v, 3, 43).is_some());
            }
            v[len - 1] ^= 1;
            assert_eq!(check(&v, 3, 42), Some(len - 1));
        }
    }
}
