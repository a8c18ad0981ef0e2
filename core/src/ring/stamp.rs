//! How a ring publishes each item besides its `tail`: not at all ([`Unstamped`], the
//! default), or by a stamp in the item's own slot ([`Stamped`]).
//!
//! With a stamp, a consumer waiting for the next item reads one cache line, the one the
//! item is on: the stamp says the item is there. Without, it reads the producer's `tail`
//! first and the item's line after, two lines one after the other. The stamp costs a
//! store per pushed item and a word per slot, whose start it aligns to a cache line,
//! and batches gain nothing from it, so a
//! ring that carries one item at a time between two threads (a hand-off) takes it, and
//! a ring that moves batches does not.

use crate::sync::{AtomicUsize, Ordering};

mod sealed {
    pub trait Sealed {}
}

/// A slot's publication stamp: `i + 1` once the item of index `i` is in the slot.
/// Implemented by [`Unstamped`] and [`Stamped`] only.
pub trait Stamp: sealed::Sealed + Sized {
    /// Whether slots carry stamps (the consumer then reads them, not `tail`, to find
    /// the next item).
    const KEPT: bool;
    /// Gives a slot its alignment: a cache line for stamped slots, so that a slot no
    /// larger than a line never straddles two; nothing for unstamped ones.
    #[doc(hidden)]
    type Align: Send + Sync;
    /// A stamp that no index from 0 on matches before its item is pushed.
    #[cfg(not(loom))]
    #[doc(hidden)]
    #[allow(clippy::declare_interior_mutable_const)]
    const FRESH: Self;
    /// [`Self::FRESH`] where constants cannot hold atomics (loom).
    #[doc(hidden)]
    fn fresh() -> Self;
    /// Publishes index `value - 1`'s item: `Release`, after the item is written.
    #[doc(hidden)]
    fn set(&self, value: usize);
    /// The stamp: `Acquire`, before the item is read.
    #[doc(hidden)]
    fn get(&self) -> usize;
    /// Sets the stamp with no ordering, for a ring no handle uses yet.
    #[doc(hidden)]
    fn reset(&self, value: usize);
}

/// Slots carry no stamp: items are published by the producer's `tail` alone.
#[derive(Debug)]
pub struct Unstamped;

impl sealed::Sealed for Unstamped {}

impl Stamp for Unstamped {
    const KEPT: bool = false;
    type Align = ();
    #[cfg(not(loom))]
    const FRESH: Self = Unstamped;
    #[inline(always)]
    fn fresh() -> Self {
        Unstamped
    }
    #[inline(always)]
    fn set(&self, _: usize) {}
    #[inline(always)]
    fn get(&self) -> usize {
        0
    }
    #[inline(always)]
    fn reset(&self, _: usize) {}
}

/// Aligns what holds a zero-length array of it to a cache line (64 bytes; 128 would
/// also keep the line pairs some processors fetch together, at twice the room).
#[doc(hidden)]
#[derive(Debug)]
#[repr(align(64))]
pub struct Line;

/// Each slot carries its item's stamp beside it, and starts a cache line.
#[derive(Debug)]
pub struct Stamped(AtomicUsize);

impl sealed::Sealed for Stamped {}

impl Stamp for Stamped {
    const KEPT: bool = true;
    type Align = Line;
    #[cfg(not(loom))]
    const FRESH: Self = Stamped(AtomicUsize::new(0));
    #[inline(always)]
    fn fresh() -> Self {
        Stamped(AtomicUsize::new(0))
    }
    #[inline(always)]
    fn set(&self, value: usize) {
        self.0.store(value, Ordering::Release);
    }
    #[inline(always)]
    fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
    #[inline(always)]
    fn reset(&self, value: usize) {
        self.0.store(value, Ordering::Relaxed);
    }
}
