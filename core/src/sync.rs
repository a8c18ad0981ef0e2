//! The synchronisation primitives the core is built on, in one place.
//!
//! Everything concurrent in the core takes its atomics, cells and spin hints from here
//! rather than from `core` directly. In a normal build these are the `core` types (the
//! cell is a thin wrapper with a closure API). Built with `--cfg loom`, the same names
//! come from [`loom`](https://docs.rs/loom), which then checks every interleaving of the
//! accesses a test makes. Code written against this module therefore runs unchanged under
//! both.
//!
//! Under loom the constructors are not `const`, so items that need a `const fn`
//! constructor provide a second, non-`const` one for `cfg(loom)`.

#![allow(dead_code, unused_imports)]

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};

/// A hint that the caller is busy-waiting; under loom it yields to the model's scheduler,
/// so that spin loops in tests terminate.
#[cfg(not(loom))]
pub(crate) use core::hint::spin_loop;
#[cfg(loom)]
pub(crate) use loom::hint::spin_loop;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
pub(crate) use self::cell::UnsafeCell;

#[cfg(not(loom))]
mod cell {
    /// `core::cell::UnsafeCell` with loom's closure-based access API.
    ///
    /// Loom's cell can only be reached through `with`/`with_mut`, which let it record
    /// every read and write; this wrapper offers the same two methods so that one body
    /// of code serves both builds. It is `repr(transparent)`: an array of these has the
    /// layout of an array of `T`.
    #[repr(transparent)]
    pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// Wraps `value`.
        #[inline(always)]
        pub(crate) const fn new(value: T) -> Self {
            Self(core::cell::UnsafeCell::new(value))
        }

        /// Calls `f` with a shared raw pointer to the contents.
        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Calls `f` with a mutable raw pointer to the contents.
        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// Pads and aligns a value to the length of a cache line (two lines where the hardware
/// prefetches pairs of them), so that values written by different threads never share
/// one.
pub(crate) use crossbeam_utils::CachePadded;
