//! DQPLB's sending side of the sequence numbers: the next number to put on a
//! WRITE_WITH_IMM fragment, and how far ahead of the oldest number still outstanding
//! it may run (the peer's reorder window less what the peer may hold unprocessed).

use super::lane::Lane;
use crate::phys::PhysQp;
use crate::seq::Seq;

/// The next DQPLB sequence number to send and the window credit that bounds it.
pub(super) struct Numbering {
    /// Next number to send.
    next: Seq,
    /// How far past the oldest number still outstanding the next may be: the
    /// peer's window `W` less the arrivals it may hold unprocessed (`N·recv_depth`).
    credit: u32,
}

impl Numbering {
    /// Numbering from `first`, at most `credit` ahead of the oldest outstanding.
    pub(super) fn new(first: Seq, credit: u32) -> Self {
        Self {
            next: first,
            credit,
        }
    }

    /// The number the next numbered fragment takes.
    #[inline(always)]
    pub(super) fn next(&self) -> Seq {
        self.next
    }

    /// `n` numbers were given out.
    #[inline(always)]
    pub(super) fn skip(&mut self, n: u32) {
        self.next = self.next.add(n);
    }

    /// Numbers that may be given out now: the credit less how far the next is past
    /// the oldest number still outstanding on any of `lanes`.
    #[inline]
    pub(super) fn budget<Q: PhysQp, const D: usize>(&self, lanes: &[Lane<Q, D>]) -> u32 {
        let span = lanes
            .iter()
            .filter_map(|l| l.oldest_seq())
            .map(|s| self.next.since(s))
            .max()
            .unwrap_or(0);
        self.credit.saturating_sub(span)
    }
}
