//! A single-producer single-consumer ring of fixed capacity.
//!
//! The ring carries submissions from an application thread to a poll thread and
//! completions back. It is built for that one job: one thread pushes, one thread pops,
//! nothing blocks, nothing allocates, and a push or a pop costs a handful of
//! instructions with no read-modify-write atomics.
//!
//! # Ownership
//!
//! [`Ring<T, N>`] owns its `N` slots inline, so it can live wherever the caller puts it: in
//! a `static`, on the stack, or behind a `Box` or `Arc`. Items move in through a
//! [`Producer`] and out through a [`Consumer`]. Both handles are generic over the pointer
//! `P` they reach the ring through:
//!
//! * [`Ring::split`] takes `&mut self` and lends `Producer<&Ring>` / `Consumer<&Ring>`;
//!   the borrow checker proves no other handles exist, so it cannot fail.
//! * [`Ring::try_split`] takes any pointer whose clones all point at the same ring
//!   ([`CloneStableDeref`]: `&'static Ring` from a `static`, or `Arc<Ring>` when the
//!   `alloc` feature is on). A flag in the ring makes it succeed once per ring, so two
//!   producers can never exist, and a poll thread and an application thread can each own
//!   one handle without any `unsafe` on their side.
//!
//! Handles are [`Send`] when `T` is.
//!
//! # Indices
//!
//! `tail` counts every push since the ring was created and `head` every pop, both
//! wrapping at `usize::MAX + 1`. Because `N` is a power of two (checked at compile time),
//! slot `i & (N - 1)` is the home of index `i` across the wrap, and
//! `tail.wrapping_sub(head)` is the number of items held: `0` is empty and `N` is full,
//! so all `N` slots are usable.
//!
//! A third index, `released`, is how far the consumer has handed slots back to the
//! producer: the producer fills only slots below `released + N`. The consumer moves it up
//! to `head` in steps rather than at every pop: after [`Ring::RELEASE_BATCH`] pops at
//! most, at the end of every batch pop, and whenever it finds the ring empty, so a
//! consumer that waits for items never holds slots back. When the ring runs full because
//! the consumer is the slower side, the producer then refills a batch of slots the
//! consumer left a while ago, instead of trading one cache line back and forth with it
//! item by item, and the line holding `released` moves between the cores once per batch
//! instead of once per item. The producer, on the other hand, publishes `tail` at every
//! push: an item is visible to the consumer as soon as it is pushed.
//!
//! Each index is written by one side only and lives on its own cache line (`head` is the
//! consumer's record of its position: pushing never reads it, only
//! [`Producer::len`] does). Each handle keeps its own index in a plain field and the last
//! value it saw of the other side's; it reads the shared one only when the cached value
//! says the ring is full (producer) or empty (consumer).
//!
//! # Memory ordering
//!
//! A push writes the slot, then stores `tail` with `Release`; a pop that loads `tail`
//! with `Acquire` and sees the new value therefore sees the slot's contents. A pop moves
//! the item out; later, after this pop and maybe others, the consumer stores `released`
//! with `Release`, which orders every slot read before it in program order (the deferred
//! ones included) before the store. A push that loads `released` with `Acquire` and sees
//! a slot handed back therefore cannot overwrite it before the read has finished; until
//! then it treats the slot as taken, which is safe, only pessimistic.
//!
//! A [`Stamped`] ring also publishes each item by a stamp in its slot (`i + 1` for index
//! `i`, stored with `Release` after the item, before `tail`), and a single pop that has
//! no item left from an earlier look reads the stamp (`Acquire`) instead of `tail`: one
//! cache line, the item's, rather than `tail`'s and then the item's. Such a pop can run
//! ahead of the published `tail` for a moment; batch pops and counts take a `tail`
//! behind `head` as nothing new. See [`Stamp`] for when to choose it.
//!
//! The consumer stores `head` after every pop with `Relaxed`. The code that relies on it
//! holds the ring exclusively (dropping the ring, splitting it again), and whatever ended
//! the handles' borrows or threads already ordered their stores before that; it is what
//! keeps an item from being moved out twice when a consumer disappears (even through
//! [`mem::forget`](core::mem::forget)) before it has handed its last slots back.
//! [`Producer::len`] reads it too, only to count: it gains no access to any slot.
//!
//! # Example
//!
//! ```
//! use vqp_core::ring::{PopError, Ring};
//!
//! let mut ring = Ring::<u64, 4>::new();
//! let (mut tx, mut rx) = ring.split();
//!
//! tx.push(7).unwrap();
//! assert_eq!(tx.push_slice(&[8, 9, 10, 11]), 3); // one slot was taken
//! assert_eq!(rx.pop(), Ok(7));
//!
//! let mut out = [0; 8];
//! assert_eq!(rx.pop_slice(&mut out), 3);
//! assert_eq!(&out[..3], &[8, 9, 10]);
//! assert_eq!(rx.pop(), Err(PopError::Empty));
//! ```
//!
//! Across threads, with the ring in an `Arc` (the `alloc` feature):
//!
//! ```
//! use std::sync::Arc;
//! use vqp_core::ring::Ring;
//!
//! let ring = Arc::new(Ring::<u64, 64>::new());
//! let (mut tx, mut rx) = Ring::try_split(ring).unwrap();
//!
//! let poller = std::thread::spawn(move || {
//!     let mut sum = 0;
//!     let mut seen = 0;
//!     while seen < 1000 {
//!         if let Ok(v) = rx.pop() {
//!             sum += v;
//!             seen += 1;
//!         }
//!     }
//!     sum
//! });
//! for i in 0..1000 {
//!     let mut item = i;
//!     while let Err(full) = tx.push(item) {
//!         item = full.into_inner();
//!         std::hint::spin_loop();
//!     }
//! }
//! assert_eq!(poller.join().unwrap(), 999 * 1000 / 2);
//! ```

mod consumer;
mod error;
mod producer;
mod stamp;

#[cfg(all(test, not(loom)))]
mod tests;

use core::fmt;
use core::mem::MaybeUninit;

pub use self::consumer::{Consumer, PopIter};
pub use self::error::{PopError, PushError, SplitError};
pub use self::producer::Producer;
pub use self::stamp::{Stamp, Stamped, Unstamped};
/// The bound on the pointers [`Ring::try_split`] accepts, re-exported from
/// `stable_deref_trait`: every clone dereferences to the same, stable address.
pub use stable_deref_trait::CloneStableDeref;

use crate::sync::{AtomicBool, AtomicUsize, CachePadded, Ordering, UnsafeCell};

/// A single-producer single-consumer ring holding up to `N` items of type `T`.
///
/// `N` must be a power of two; any other value fails to compile:
///
/// ```compile_fail
/// let ring = vqp_core::ring::Ring::<u8, 3>::new();
/// ```
///
/// See the [module documentation](self) for how to split it into handles.
pub struct Ring<T, const N: usize, S: Stamp = Unstamped> {
    /// Slots below this index are free for the producer; wraps at `usize::MAX + 1`.
    ///
    /// Stored only by the consumer, with `Release`, after it has moved the items below it
    /// out; loaded with `Acquire` by the producer. Invariants: `released` is at most
    /// `head`, by less than [`Self::RELEASE_BATCH`] between calls, and
    /// `tail.wrapping_sub(released) <= N`.
    released: CachePadded<AtomicUsize>,
    /// Index of the next slot to fill; wraps at `usize::MAX + 1`.
    ///
    /// Stored only by the producer, with `Release`, after it has written the slot(s);
    /// loaded with `Acquire` by the consumer. Invariant: `tail.wrapping_sub(head) <= N`.
    tail: CachePadded<AtomicUsize>,
    /// Index of the next item to pop; wraps at `usize::MAX + 1`.
    ///
    /// Stored only by the consumer, with `Relaxed`, after every pop. Loaded by code that
    /// holds the ring exclusively (no handle alive), ordered after those stores by
    /// whatever ended the handles, and by [`Producer::len`], which only counts.
    head: CachePadded<AtomicUsize>,
    /// Storage. Slot `i & (N - 1)` holds an initialised item exactly when `i` lies in
    /// `head..tail` (wrapping). The consumer alone touches the occupied ones, and the
    /// slots in `released..head` until it publishes `released` past them; the producer
    /// alone the others.
    slots: [Slot<T, S>; N],
    /// Set by the first successful [`Ring::try_split`]; never cleared.
    split: AtomicBool,
}

// SAFETY: the ring hands out at most one `Producer` and one `Consumer` (`split` needs
// `&mut self`, `try_split` claims the `split` flag), and they touch disjoint slots, ordered
// by the `Acquire`/`Release` pairs on `released` and `tail`. Items only move from the
// producer's thread to the consumer's, which is exactly what `T: Send` allows.
unsafe impl<T: Send, const N: usize, S: Stamp> Sync for Ring<T, N, S> {}

impl<T, const N: usize, S: Stamp> Ring<T, N, S> {
    /// The most pops the consumer makes before it hands their slots back to the producer:
    /// a quarter of the ring, between 1 and 32.
    ///
    /// It hands them back sooner when a pop finds the ring empty (so a consumer waiting
    /// for items holds nothing back) and at the end of every
    /// [`pop_slice`](Consumer::pop_slice). Rings of 4 slots or fewer hand every slot back
    /// at once.
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// assert_eq!(Ring::<u64, 1024>::RELEASE_BATCH, 32);
    /// assert_eq!(Ring::<u64, 16>::RELEASE_BATCH, 4);
    /// assert_eq!(Ring::<u64, 4>::RELEASE_BATCH, 1);
    /// ```
    pub const RELEASE_BATCH: usize = {
        let quarter = N / 4;
        if quarter == 0 {
            1
        } else if quarter > 32 {
            32
        } else {
            quarter
        }
    };

    /// Creates an empty ring. `const`, so a ring can be a `static`:
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// static SUBMISSIONS: Ring<u64, 256> = Ring::new();
    ///
    /// let (mut tx, mut rx) = Ring::try_split(&SUBMISSIONS).unwrap();
    /// tx.push(1).unwrap();
    /// assert_eq!(rx.pop(), Ok(1));
    /// ```
    #[cfg(not(loom))]
    #[must_use]
    pub const fn new() -> Self {
        const {
            assert!(
                N.is_power_of_two() && N > 0,
                "ring capacity N must be a power of two"
            )
        };
        Self {
            released: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            head: CachePadded::new(AtomicUsize::new(0)),
            slots: [const {
                Slot {
                    stamp: S::FRESH,
                    item: UnsafeCell::new(MaybeUninit::uninit()),
                    align: [],
                }
            }; N],
            split: AtomicBool::new(false),
        }
    }

    /// Creates an empty ring (loom's types have no `const` constructors).
    #[cfg(loom)]
    #[must_use]
    pub fn new() -> Self {
        const {
            assert!(
                N.is_power_of_two() && N > 0,
                "ring capacity N must be a power of two"
            )
        };
        Self {
            released: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            head: CachePadded::new(AtomicUsize::new(0)),
            slots: core::array::from_fn(|_| Slot {
                stamp: S::fresh(),
                item: UnsafeCell::new(MaybeUninit::uninit()),
                align: [],
            }),
            split: AtomicBool::new(false),
        }
    }

    /// Creates an empty ring whose indices start at `index`, so tests can cross the
    /// `usize` wrap in a few steps. Exists only in test and loom builds (the loom
    /// tests are integration tests, hence public there).
    #[cfg(any(test, loom))]
    #[doc(hidden)]
    pub fn starting_at(index: usize) -> Self {
        let ring = Self::new();
        // No slot may look stamped for an index from `index` on before it is pushed:
        // those expect stamps `index + 1 ..= index + N`.
        for slot in &ring.slots {
            slot.stamp.reset(index);
        }
        ring.released.store(index, Ordering::Relaxed);
        ring.tail.store(index, Ordering::Relaxed);
        ring.head.store(index, Ordering::Relaxed);
        ring
    }

    /// The number of items the ring holds when full: `N`.
    #[inline]
    #[must_use]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Lends a producer and a consumer that borrow this ring.
    ///
    /// Exclusive access proves that no other handles are alive, so this always succeeds,
    /// and may be called again once the handles are gone; items left in the ring stay
    /// there for the next pair, and slots the last consumer had not handed back yet are
    /// free again. It does not touch the flag that [`Ring::try_split`] uses.
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// let mut ring = Ring::<&str, 2>::new();
    /// {
    ///     let (mut tx, _rx) = ring.split();
    ///     tx.push("left over").unwrap();
    /// }
    /// let (_tx, mut rx) = ring.split();
    /// assert_eq!(rx.pop(), Ok("left over"));
    /// ```
    #[inline]
    pub fn split(&mut self) -> (Producer<&Self>, Consumer<&Self>) {
        let ring: &Self = self;
        // `&mut self` means every earlier handle is gone, and whatever ended it (a
        // returned borrow, a joined thread) already ordered its stores before us.
        let (head, tail) = ring.reset_released();
        (
            Producer::new(ring, head, tail),
            Consumer::new(ring, head, tail),
        )
    }

    /// Splits a shared ring into a producer and a consumer that each hold a clone of
    /// `ring`, once.
    ///
    /// `ring` is any pointer whose clones all dereference to the same ring for as long as
    /// they live: `&Ring` (typically `&'static` for a `static` ring) or, with the `alloc`
    /// feature, `Arc<Ring>` or `Rc<Ring>`. The first call succeeds; every later call on the
    /// same ring returns [`SplitError`], so there is never more than one producer or one
    /// consumer.
    ///
    /// ```
    /// use vqp_core::ring::{Ring, SplitError};
    ///
    /// static COMPLETIONS: Ring<u32, 8> = Ring::new();
    ///
    /// let (tx, rx) = Ring::try_split(&COMPLETIONS).unwrap();
    /// assert_eq!(Ring::try_split(&COMPLETIONS).err(), Some(SplitError));
    /// # drop((tx, rx));
    /// ```
    ///
    /// # Errors
    ///
    /// [`SplitError`] when this ring was split by `try_split` before.
    pub fn try_split<P>(ring: P) -> Result<(Producer<P>, Consumer<P>), SplitError>
    where
        P: CloneStableDeref<Target = Self>,
    {
        // AcqRel: the winner of the flag orders its index loads below after the claim;
        // only one caller can ever see `false`.
        if ring.split.swap(true, Ordering::AcqRel) {
            return Err(SplitError);
        }
        // No handle has existed since the last `&mut` access (that would have needed this
        // flag or an exclusive borrow), so nobody is storing these indices.
        let (head, tail) = ring.reset_released();
        let producer = Producer::new(ring.clone(), head, tail);
        Ok((producer, Consumer::new(ring, head, tail)))
    }

    /// Hands every popped slot back (a consumer that went away may have kept up to
    /// [`Self::RELEASE_BATCH`]` - 1`), and returns `(head, tail)`. Only for callers that
    /// know no handle is alive.
    fn reset_released(&self) -> (usize, usize) {
        // Relaxed throughout: with no handle alive nobody else touches the indices, and
        // the new handles reach other threads only through something that synchronises.
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        debug_assert!(tail.wrapping_sub(head) <= N);
        debug_assert!(
            head.wrapping_sub(self.released.load(Ordering::Relaxed)) < Self::RELEASE_BATCH
        );
        self.released.store(head, Ordering::Relaxed);
        (head, tail)
    }

    /// The slot that index `index` lives in. The mask keeps it in bounds, so the compiler
    /// drops the bounds check.
    #[inline(always)]
    fn slot(&self, index: usize) -> &Slot<T, S> {
        &self.slots[index & (N - 1)]
    }

    /// The slots from `index`'s slot up to the end of storage, at most `len` of them,
    /// followed by the wrapped-around rest of `len` from the start of storage.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn slot_runs(&self, index: usize, len: usize) -> (&[Slot<T, S>], &[Slot<T, S>]) {
        debug_assert!(len <= N);
        let start = index & (N - 1);
        let first = len.min(N - start);
        (
            &self.slots[start..start + first],
            &self.slots[..len - first],
        )
    }
}

/// One slot: its item and, in a [`Stamped`] ring, the stamp that publishes it, side by
/// side (with [`Unstamped`] the stamp takes no room). The stamp of index `i` is
/// `i + 1`; a slot's stamps grow by `N` a lap, so an earlier lap's never passes for
/// the current one.
#[repr(C)]
struct Slot<T, S: Stamp> {
    stamp: S,
    item: UnsafeCell<MaybeUninit<T>>,
    /// Takes no room; aligns the slot as the stamp asks.
    align: [S::Align; 0],
}

impl<T, const N: usize, S: Stamp> Default for Ring<T, N, S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize, S: Stamp> fmt::Debug for Ring<T, N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        f.debug_struct("Ring")
            .field("capacity", &N)
            .field("len", &tail.wrapping_sub(head))
            .finish_non_exhaustive()
    }
}

impl<T, const N: usize, S: Stamp> Drop for Ring<T, N, S> {
    /// Drops the items that were pushed and never popped.
    fn drop(&mut self) {
        if !core::mem::needs_drop::<T>() {
            return;
        }
        // Relaxed: `&mut self` means both handles are gone, and whatever ended them (the
        // end of a borrow, a join, the last `Arc`'s release) ordered their stores before us.
        let mut head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        debug_assert!(tail.wrapping_sub(head) <= N);
        while head != tail {
            self.slot(head).item.with_mut(|slot| {
                // SAFETY: `head..tail` slots hold initialised items (field invariant) and
                // each is dropped once, as `head` moves past it; no handle is left to read it.
                unsafe { slot.cast::<T>().drop_in_place() }
            });
            head = head.wrapping_add(1);
        }
    }
}
