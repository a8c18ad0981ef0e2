//! The DQPLB immediate: a 24-bit sequence number and a notify bit.
//!
//! ```text
//!  31  30        24 23                          0
//! +---+------------+-----------------------------+
//! | N |  reserved  |       sequence number       |
//! +---+------------+-----------------------------+
//! ```
//! `N` is set on the last fragment of a request. Reserved bits are zero on the wire
//! and a receiver rejects anything else. On the wire the word is big-endian, as
//! verbs.h documents for `imm_data`: [`Imm::to_wire`] / [`Imm::from_wire`] convert.

use core::fmt;

use crate::seq::Seq;

/// The notify bit.
pub const NOTIFY_BIT: u32 = 1 << 31;
/// Bits 24–30, which must be zero.
pub const RESERVED_MASK: u32 = 0x7f << 24;

/// A decoded DQPLB immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imm {
    /// The fragment's sequence number.
    pub seq: Seq,
    /// Set on the last fragment of a request.
    pub notify: bool,
}

/// A received immediate had reserved bits set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedBits(pub u32);

impl fmt::Display for ReservedBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DQPLB immediate {:#010x} has reserved bits 24-30 set",
            self.0
        )
    }
}

impl core::error::Error for ReservedBits {}

impl Imm {
    /// The immediate for fragment `seq`, with the notify bit when `notify`.
    #[inline]
    pub const fn new(seq: Seq, notify: bool) -> Self {
        Self { seq, notify }
    }

    /// The host-order 32-bit word.
    #[inline]
    pub const fn to_bits(self) -> u32 {
        self.seq.get() | if self.notify { NOTIFY_BIT } else { 0 }
    }

    /// Decode a host-order word, refusing reserved bits.
    #[inline]
    pub const fn from_bits(bits: u32) -> Result<Self, ReservedBits> {
        if bits & RESERVED_MASK != 0 {
            return Err(ReservedBits(bits));
        }
        Ok(Self {
            seq: Seq::new(bits),
            notify: bits & NOTIFY_BIT != 0,
        })
    }

    /// The value for `imm_data` (network byte order).
    #[inline]
    pub const fn to_wire(self) -> u32 {
        self.to_bits().to_be()
    }

    /// Decode `imm_data` as it came in a completion (network byte order).
    #[inline]
    pub const fn from_wire(wire: u32) -> Result<Self, ReservedBits> {
        Self::from_bits(u32::from_be(wire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_the_wire() {
        for &(s, n) in &[(0, false), (1, true), (0xff_ffff, true), (0x12_3456, false)] {
            let imm = Imm::new(Seq::new(s), n);
            assert_eq!(Imm::from_wire(imm.to_wire()), Ok(imm));
        }
    }

    #[test]
    fn wire_is_big_endian() {
        let imm = Imm::new(Seq::new(0x01_0203), true);
        assert_eq!(imm.to_wire().to_ne_bytes(), [0x80, 0x01, 0x02, 0x03]);
    }

    #[test]
    fn reserved_bits_are_refused() {
        for bit in 24..31 {
            let bits = 5 | (1 << bit);
            assert_eq!(Imm::from_bits(bits), Err(ReservedBits(bits)));
        }
        assert!(Imm::from_bits(NOTIFY_BIT | 0xff_ffff).is_ok());
    }
}
