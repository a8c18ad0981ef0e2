//! The DQPLB receiver's reorder window.
//!
//! Fragments of a virtual QP travel on several physical QPs, so their sequence
//! numbers arrive in any order. The window keeps the next expected number (the
//! frontier) and a fixed array of marks for numbers that arrived early: one `u32`
//! per sequence slot packing an arrived bit, the notify bit and the fragment's
//! length (so a completed message reports its whole length). Each arrival marks
//! its slot; while the slot at the frontier is marked the frontier advances,
//! adding lengths, and each notify bit met there delivers one message.
//!
//! In-order arrivals, the common case, touch no mark at all. An arrival more than
//! `W` ahead of the frontier is a protocol error; one behind the frontier (within
//! `W`) is a duplicate, which is ignored. Wrap-around at 2^24 is exact.

use core::fmt;

use crate::imm::Imm;
use crate::seq::{Seq, SEQ_SPACE};

const ARRIVED: u32 = 1 << 31;
const NOTIFY: u32 = 1 << 30;
/// The largest fragment the window can record (its length shares a word with two flags).
pub const MAX_FRAGMENT: u32 = NOTIFY - 1;

/// What an accepted arrival was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Recorded (and possibly delivered messages).
    New,
    /// Already seen: ignored.
    Duplicate,
}

/// An arrival outside the window: the peer sent more than the window can track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfWindow {
    /// The sequence number that arrived.
    pub seq: Seq,
    /// The frontier when it arrived.
    pub next: Seq,
}

impl fmt::Display for OutOfWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DQPLB sequence {} arrived outside the reorder window (expecting {})",
            self.seq.get(),
            self.next.get()
        )
    }
}

impl core::error::Error for OutOfWindow {}

/// A reorder window of `W` sequence numbers (`W` a power of two, `64 ≤ W ≤ 2^22`).
#[derive(Clone)]
pub struct ReorderWindow<const W: usize> {
    /// The next sequence number expected in order: every number before it arrived.
    next: Seq,
    /// Marks for numbers in `(next, next + W)` that arrived early; slot `seq % W`.
    /// The slot of `next` itself is always zero.
    marks: [u32; W],
    /// How many marks are set; 0 means in-order arrivals may skip the marks.
    early: u32,
    /// Bytes of the message under way (arrived in order, no notify yet).
    bytes: u64,
    /// Arrivals that came ahead of the frontier, in total.
    reordered: u64,
}

impl<const W: usize> ReorderWindow<W> {
    const CHECK: () = assert!(
        W.is_power_of_two() && W >= 64 && W <= (SEQ_SPACE as usize) / 4,
        "window must be a power of two between 64 and 2^22"
    );
    const MASK: u32 = W as u32 - 1;

    /// An empty window expecting `initial` first.
    pub const fn new(initial: Seq) -> Self {
        let () = Self::CHECK;
        Self {
            next: initial,
            marks: [0; W],
            early: 0,
            bytes: 0,
            reordered: 0,
        }
    }

    /// The window's size.
    pub const fn capacity(&self) -> usize {
        W
    }

    /// The next sequence number expected in order.
    pub const fn next(&self) -> Seq {
        self.next
    }

    /// How many numbers arrived ahead of the frontier.
    pub const fn early(&self) -> u32 {
        self.early
    }

    /// How many arrivals, in total, came ahead of the frontier.
    pub const fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Record fragment `imm` of `len` bytes; `deliver(bytes)` is called once per
    /// message completed by this arrival, in order, with the message's total length.
    #[inline]
    pub fn arrive(
        &mut self,
        imm: Imm,
        len: u32,
        mut deliver: impl FnMut(u64),
    ) -> Result<Arrival, OutOfWindow> {
        let ahead = imm.seq.since(self.next);
        if ahead == 0 {
            self.take(imm.notify, len, &mut deliver);
            if self.early != 0 {
                self.advance(&mut deliver);
            }
            return Ok(Arrival::New);
        }
        if ahead as usize >= W {
            return if ahead >= SEQ_SPACE - W as u32 {
                Ok(Arrival::Duplicate)
            } else {
                Err(OutOfWindow {
                    seq: imm.seq,
                    next: self.next,
                })
            };
        }
        let mark = &mut self.marks[(imm.seq.get() & Self::MASK) as usize];
        if *mark != 0 {
            return Ok(Arrival::Duplicate);
        }
        debug_assert!(len <= MAX_FRAGMENT);
        *mark = ARRIVED | if imm.notify { NOTIFY } else { 0 } | (len & MAX_FRAGMENT);
        self.early += 1;
        self.reordered += 1;
        Ok(Arrival::New)
    }

    /// Consume the frontier's fragment.
    #[inline(always)]
    fn take(&mut self, notify: bool, len: u32, deliver: &mut impl FnMut(u64)) {
        self.bytes += u64::from(len);
        self.next = self.next.add(1);
        if notify {
            deliver(self.bytes);
            self.bytes = 0;
        }
    }

    /// Move the frontier over every early arrival that is now contiguous.
    fn advance(&mut self, deliver: &mut impl FnMut(u64)) {
        loop {
            let slot = (self.next.get() & Self::MASK) as usize;
            let mark = self.marks[slot];
            if mark == 0 {
                return;
            }
            self.marks[slot] = 0;
            self.early -= 1;
            self.take(mark & NOTIFY != 0, mark & MAX_FRAGMENT, deliver);
            if self.early == 0 {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imm(seq: u32, notify: bool) -> Imm {
        Imm::new(Seq::new(seq), notify)
    }

    #[test]
    fn in_order_delivers_each_message_with_its_length() {
        let mut w = ReorderWindow::<64>::new(Seq::new(0));
        let mut got = [0u64; 4];
        let mut n = 0;
        for (s, notify, len) in [(0, false, 10), (1, true, 5), (2, true, 7)] {
            w.arrive(imm(s, notify), len, |b| {
                got[n] = b;
                n += 1;
            })
            .unwrap();
        }
        assert_eq!(&got[..n], &[15, 7]);
        assert_eq!(w.next(), Seq::new(3));
    }

    #[test]
    fn out_of_order_waits_for_the_gap() {
        let mut w = ReorderWindow::<64>::new(Seq::new(0));
        let mut delivered = 0;
        w.arrive(imm(2, true), 1, |_| delivered += 1).unwrap();
        w.arrive(imm(1, false), 1, |_| delivered += 1).unwrap();
        assert_eq!(delivered, 0);
        assert_eq!(w.early(), 2);
        let mut len = 0;
        w.arrive(imm(0, true), 1, |b| {
            delivered += 1;
            len += b
        })
        .unwrap();
        assert_eq!(delivered, 2);
        assert_eq!(len, 3);
        assert_eq!(w.early(), 0);
        assert_eq!(w.next(), Seq::new(3));
    }

    #[test]
    fn outside_the_window_is_an_error_and_changes_nothing() {
        let mut w = ReorderWindow::<64>::new(Seq::new(100));
        let err = w.arrive(imm(164, false), 1, |_| {}).unwrap_err();
        assert_eq!(err.seq, Seq::new(164));
        assert_eq!(err.next, Seq::new(100));
        assert_eq!(w.arrive(imm(163, false), 1, |_| {}), Ok(Arrival::New));
        assert_eq!(w.early(), 1);
    }

    #[test]
    fn duplicates_are_ignored() {
        let mut w = ReorderWindow::<64>::new(Seq::new(0));
        w.arrive(imm(0, false), 1, |_| {}).unwrap();
        w.arrive(imm(5, false), 1, |_| {}).unwrap();
        assert_eq!(w.arrive(imm(0, false), 1, |_| {}), Ok(Arrival::Duplicate));
        assert_eq!(w.arrive(imm(5, false), 1, |_| {}), Ok(Arrival::Duplicate));
        assert_eq!(w.early(), 1);
    }

    #[test]
    fn wraps_exactly_at_2_pow_24() {
        let start = SEQ_SPACE - 40;
        let mut w = ReorderWindow::<64>::new(Seq::new(start));
        let mut messages = 0;
        // 80 fragments crossing the wrap, delivered in reversed blocks of 8.
        for block in 0..10u32 {
            for k in (0..8u32).rev() {
                let s = start.wrapping_add(block * 8 + k);
                w.arrive(imm(s, k == 7), 2, |b| {
                    assert_eq!(b, 16);
                    messages += 1
                })
                .unwrap();
            }
        }
        assert_eq!(messages, 10);
        assert_eq!(w.next(), Seq::new(start + 80));
        assert_eq!(w.next().get(), 40);
    }
}
