//! Payload buffers of the messages to and from other machines, kept for the next
//! message: a fresh buffer of a megabyte per message costs the kernel's page faults
//! (and, once freed, the work of giving the pages back) on every message, which on a
//! busy machine took more cycles than copying the payload did.

use std::sync::Mutex;

use crate::os::lock;

/// Buffers smaller than this are not kept: the allocator serves them from its own
/// free lists.
const MIN_KEPT: usize = 64 << 10;

/// The bytes of the buffers kept at most (their capacities).
const MAX_KEPT: usize = 32 << 20;

/// The buffers kept: a leaf lock, taken with or without the worker lock.
#[derive(Default)]
pub(crate) struct Spare(Mutex<Vec<Vec<u8>>>);

impl Spare {
    /// A buffer of `len` bytes (their values are whatever the last message left). A
    /// small one is the allocator's: a kept buffer cut to a small length would be
    /// filled again when it next serves a large one.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        if len < MIN_KEPT {
            return vec![0; len];
        }
        let kept = {
            let mut s = lock(&self.0);
            s.iter()
                .rposition(|b| b.capacity() >= len)
                .map(|i| s.swap_remove(i))
        };
        let mut b = kept.unwrap_or_default();
        if b.len() >= len {
            b.truncate(len);
        } else {
            b.resize(len, 0);
        }
        b
    }

    /// Keeps `b` for a later [`Spare::take`], within [`MAX_KEPT`] bytes.
    pub(crate) fn give(&self, b: Vec<u8>) {
        if b.capacity() < MIN_KEPT {
            return;
        }
        let mut s = lock(&self.0);
        let held: usize = s.iter().map(Vec::capacity).sum();
        if held + b.capacity() <= MAX_KEPT {
            s.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_at_any_length_it_holds() {
        let s = Spare::default();
        let b = s.take(1 << 20);
        assert_eq!(b.len(), 1 << 20);
        let at = b.as_ptr();
        s.give(b);
        let c = s.take(MIN_KEPT);
        assert_eq!((c.len(), c.as_ptr()), (MIN_KEPT, at));
        s.give(c);
        // Longer than what the last message left: the rest is filled.
        let d = s.take(1 << 20);
        assert_eq!((d.len(), d.as_ptr()), (1 << 20, at));
    }

    #[test]
    fn a_small_buffer_never_takes_a_large_one() {
        let s = Spare::default();
        let b = s.take(1 << 20);
        let at = b.as_ptr();
        s.give(b);
        for len in [0, 8, 100] {
            let small = s.take(len);
            assert_eq!(small.len(), len);
            assert_ne!(small.as_ptr(), at);
        }
        let again = s.take(1 << 20);
        assert_eq!(again.as_ptr(), at);
    }

    #[test]
    fn small_buffers_and_those_past_the_bound_are_not_kept() {
        let s = Spare::default();
        s.give(vec![0u8; 100]);
        assert!(lock(&s.0).is_empty());
        for _ in 0..(MAX_KEPT / (8 << 20)) + 2 {
            s.give(vec![0u8; 8 << 20]);
        }
        let held: usize = lock(&s.0).iter().map(Vec::capacity).sum();
        assert!(held <= MAX_KEPT, "{held}");
        assert_eq!(lock(&s.0).len(), MAX_KEPT / (8 << 20));
    }
}
