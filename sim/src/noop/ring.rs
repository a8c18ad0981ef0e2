//! The fixed-capacity FIFO the no-op provider keeps completions in.

/// A fixed-capacity FIFO ring over a power-of-two buffer.
///
/// Invariant: `buf.len()` is a power of two (or zero), `tail - head ≤ cap ≤ buf.len()`
/// (free-running indices); the live items are `buf[i & mask]` for `i` in
/// `head..tail`.
#[derive(Debug)]
pub(super) struct Ring<T> {
    buf: Box<[T]>,
    /// Items held at most (`capacity` as asked, not rounded up).
    cap: usize,
    head: usize,
    tail: usize,
}

impl<T: Copy> Ring<T> {
    pub(super) fn new(capacity: usize, fill: T) -> Self {
        let size = if capacity == 0 {
            0
        } else {
            capacity.next_power_of_two()
        };
        Self {
            buf: vec![fill; size].into_boxed_slice(),
            cap: capacity,
            head: 0,
            tail: 0,
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.tail - self.head
    }

    /// Appends `v`; false (and nothing stored) when full.
    #[inline]
    pub(super) fn push(&mut self, v: T) -> bool {
        if self.len() == self.cap {
            return false;
        }
        let mask = self.buf.len() - 1;
        self.buf[self.tail & mask] = v;
        self.tail += 1;
        true
    }

    #[inline]
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.len() == 0 {
            return None;
        }
        let v = self.buf[self.head & (self.buf.len() - 1)];
        self.head += 1;
        Some(v)
    }

    /// Appends `v`; the caller checked there is room (a full ring overwrites its
    /// oldest item, which `debug_assert` catches).
    #[inline]
    pub(super) fn push_unchecked(&mut self, v: T) {
        debug_assert!(self.len() < self.cap);
        let mask = self.buf.len() - 1;
        self.buf[self.tail & mask] = v;
        self.tail += 1;
    }

    /// Moves the oldest item into `out`; the ring must not be empty.
    #[inline]
    pub(super) fn pop_oldest_into(&mut self, out: &mut T) {
        debug_assert!(self.len() > 0);
        *out = self.buf[self.head & (self.buf.len() - 1)];
        self.head += 1;
    }

    /// Moves up to `out.len()` of the oldest items into `out`; returns how many.
    #[inline]
    pub(super) fn pop_into(&mut self, out: &mut [T]) -> usize {
        let n = self.len().min(out.len());
        if n == 0 {
            return 0;
        }
        let mask = self.buf.len() - 1;
        for (k, o) in out[..n].iter_mut().enumerate() {
            *o = self.buf[(self.head + k) & mask];
        }
        self.head += n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    #[test]
    fn ring_wraps_and_refuses_when_full() {
        let mut r = Ring::new(3, 0u32);
        for round in 0..5 {
            assert!(r.push(round * 10 + 1));
            assert!(r.push(round * 10 + 2));
            assert_eq!(r.pop(), Some(round * 10 + 1));
            assert_eq!(r.pop(), Some(round * 10 + 2));
        }
        assert!(r.push(1) && r.push(2) && r.push(3));
        assert!(!r.push(4));
        assert_eq!(
            (r.pop(), r.pop(), r.pop(), r.pop()),
            (Some(1), Some(2), Some(3), None)
        );
    }

    #[test]
    fn pop_into_takes_what_fits_across_the_wrap() {
        let mut r = Ring::new(5, 0u32);
        for v in 1..=5 {
            assert!(r.push(v));
        }
        let mut out = [0; 3];
        assert_eq!(r.pop_into(&mut out), 3);
        assert_eq!(out, [1, 2, 3]);
        assert!(r.push(6) && r.push(7) && r.push(8));
        assert!(!r.push(9), "five held, capacity five");
        let mut all = [0; 8];
        assert_eq!(r.pop_into(&mut all), 5);
        assert_eq!(all[..5], [4, 5, 6, 7, 8]);
        assert_eq!(r.pop_into(&mut all), 0);
    }

    #[test]
    fn zero_capacity_ring_is_always_full() {
        let mut r = Ring::new(0, 0u8);
        assert!(!r.push(1));
        assert_eq!(r.pop(), None);
    }
}
