//! 24-bit DQPLB sequence numbers with serial-number arithmetic.

/// Sequence numbers live in `0..SEQ_SPACE` and wrap.
pub const SEQ_SPACE: u32 = 1 << 24;
const MASK: u32 = SEQ_SPACE - 1;

/// A sequence number modulo 2^24.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Seq(u32);

impl Seq {
    /// The sequence number `n mod 2^24`.
    #[inline]
    pub const fn new(n: u32) -> Self {
        Self(n & MASK)
    }

    /// The number as a `u32` below 2^24.
    #[inline]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    #[inline]
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Self(self.0.wrapping_add(n) & MASK)
    }

    /// How far `self` is ahead of `base`, modulo 2^24 (0 when equal).
    #[inline]
    pub const fn since(self, base: Seq) -> u32 {
        self.0.wrapping_sub(base.0) & MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_exactly() {
        let top = Seq::new(SEQ_SPACE - 1);
        assert_eq!(top.add(1), Seq::new(0));
        assert_eq!(Seq::new(3).since(top), 4);
        assert_eq!(top.since(Seq::new(3)), SEQ_SPACE - 4);
        assert_eq!(Seq::new(SEQ_SPACE + 7), Seq::new(7));
    }
}
