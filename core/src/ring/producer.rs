//! The pushing end of a ring.

use core::fmt;
use core::mem::MaybeUninit;
use core::ops::Deref;

use super::{PushError, Ring, Stamp};
use crate::sync::Ordering;

/// The only handle that can push into a [`Ring`].
///
/// `P` is the pointer it reaches the ring through: `&Ring` from [`Ring::split`] or
/// [`Ring::try_split`] on a reference, `Arc<Ring>` from `try_split` on an `Arc`.
/// It is [`Send`] when `T` is, so it can move to the thread that pushes; with items that
/// must stay on one thread it is not:
///
/// ```compile_fail
/// use std::rc::Rc;
/// use vqp_core::ring::Ring;
///
/// fn assert_send<S: Send>(_: &S) {}
/// let mut ring = Ring::<Rc<u8>, 4>::new();
/// let (tx, _rx) = ring.split();
/// assert_send(&tx);
/// ```
pub struct Producer<P> {
    /// The ring this handle pushes into.
    ring: P,
    /// Our own copy of `ring.tail`: only this handle stores that index, so the copy is
    /// always equal to it between calls and never needs reloading.
    tail: usize,
    /// The consumer's `released` as last loaded. It only grows and never passes the
    /// consumer's `head`, so `tail - cached_released` is an upper bound on the items held;
    /// invariant: `tail.wrapping_sub(cached_released) <= N`.
    cached_released: usize,
}

impl<T, const N: usize, S: Stamp, P> Producer<P>
where
    P: Deref<Target = Ring<T, N, S>>,
{
    /// Creates the handle; `released` and `tail` are the ring's current indices.
    #[inline]
    pub(super) fn new(ring: P, released: usize, tail: usize) -> Self {
        Self {
            ring,
            tail,
            cached_released: released,
        }
    }

    /// Moves `value` into the ring.
    ///
    /// Loads the consumer's index only when the cached one says the ring is full, and
    /// publishes the item at once: the consumer can pop it as soon as this returns.
    ///
    /// ```
    /// use vqp_core::ring::{PushError, Ring};
    ///
    /// let mut ring = Ring::<String, 2>::new();
    /// let (mut tx, mut rx) = ring.split();
    /// tx.push("a".to_owned()).unwrap();
    /// tx.push("b".to_owned()).unwrap();
    /// let Err(PushError::Full(back)) = tx.push("c".to_owned()) else { panic!() };
    /// assert_eq!(back, "c");
    /// assert_eq!(rx.pop().as_deref(), Ok("a"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`PushError::Full`], carrying `value` back, when all `N` slots are taken.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), PushError<T>> {
        let tail = self.tail;
        if tail.wrapping_sub(self.cached_released) == N && self.refresh_released() == 0 {
            return Err(PushError::Full(value));
        }
        debug_assert!(tail.wrapping_sub(self.cached_released) < N);
        let slot = self.ring.slot(tail);
        slot.item.with_mut(|item| {
            // SAFETY: `tail - released < N`, so this slot is outside `released..tail`: the
            // consumer handed it back (its Release store of `released`, which our Acquire
            // load saw, follows its read of the slot) and will not read it again until
            // its stamp or `tail` is published past it.
            unsafe { item.write(MaybeUninit::new(value)) };
        });
        // A stamped ring publishes the item in its slot first (Release: the write above
        // is visible to a consumer that sees the stamp).
        slot.stamp.set(tail.wrapping_add(1));
        self.publish(tail.wrapping_add(1));
        Ok(())
    }

    /// Copies as many items from the front of `items` as there are free slots, and
    /// returns how many it copied. The consumer sees them all at once: the index is
    /// published once per call.
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// let mut ring = Ring::<u16, 4>::new();
    /// let (mut tx, mut rx) = ring.split();
    /// assert_eq!(tx.push_slice(&[1, 2, 3, 4, 5, 6]), 4);
    /// assert_eq!(tx.push_slice(&[5, 6]), 0);
    /// assert_eq!(rx.pop(), Ok(1));
    /// assert_eq!(tx.push_slice(&[5, 6]), 1);
    /// ```
    #[inline]
    pub fn push_slice(&mut self, items: &[T]) -> usize
    where
        T: Copy,
    {
        let tail = self.tail;
        let mut free = N - tail.wrapping_sub(self.cached_released);
        if free < items.len() {
            free = self.refresh_released();
        }
        let n = free.min(items.len());
        if n == 0 {
            return 0;
        }
        let (first, second) = self.ring.slot_runs(tail, n);
        let (items_first, items_second) = items[..n].split_at(first.len());
        let mut index = tail;
        for (slot, &item) in first.iter().zip(items_first) {
            // SAFETY: the `n <= free` slots from `tail` on are outside `released..tail`: the
            // consumer handed them back (Release/Acquire on `released`) and will not read
            // them until their stamps or `tail` move past.
            slot.item
                .with_mut(|cell| unsafe { cell.write(MaybeUninit::new(item)) });
            index = index.wrapping_add(1);
            slot.stamp.set(index);
        }
        for (slot, &item) in second.iter().zip(items_second) {
            // SAFETY: as above; these are the same run continued at the start of storage.
            slot.item
                .with_mut(|cell| unsafe { cell.write(MaybeUninit::new(item)) });
            index = index.wrapping_add(1);
            slot.stamp.set(index);
        }
        self.publish(tail.wrapping_add(n));
        n
    }

    /// How many items could be pushed now without failing: at least this many, since
    /// the consumer can only free more.
    ///
    /// These are the slots the consumer has handed back. It hands them back in batches
    /// (at most [`Ring::RELEASE_BATCH`] pops late, and at once when a pop finds the ring
    /// empty or a [`pop_slice`](super::Consumer::pop_slice) ends), so this can be fewer
    /// than the slots truly free, `N - len()`, by less than `RELEASE_BATCH`, until the
    /// consumer next finds the ring empty:
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// let mut ring = Ring::<u32, 16>::new(); // hands back every 4 pops
    /// let (mut tx, mut rx) = ring.split();
    /// assert_eq!(tx.push_slice(&[0; 16]), 16);
    /// rx.pop().unwrap();
    /// assert_eq!((tx.len(), tx.slots()), (15, 0)); // popped, not handed back yet
    /// assert!(tx.is_full());
    /// for _ in 0..3 {
    ///     rx.pop().unwrap();
    /// }
    /// assert_eq!((tx.len(), tx.slots()), (12, 4));
    /// ```
    #[inline]
    #[must_use]
    pub fn slots(&self) -> usize {
        // Acquire pairs with the consumer's Release store of `released`, like in `push`.
        let released = self.ring.released.load(Ordering::Acquire);
        let held = self.tail.wrapping_sub(released);
        debug_assert!(held <= N);
        N - held
    }

    /// How many items the ring holds, pushed and not popped yet: at most this many, since
    /// the consumer may be popping meanwhile.
    ///
    /// This reads the consumer's position, which it stores at every pop, so it counts
    /// items as gone as soon as they are popped, before their slots are handed back (see
    /// [`slots`](Self::slots)). It also pulls the line the consumer writes that position
    /// to into this core's cache: fine now and then, costly in a loop racing the consumer.
    #[inline]
    #[must_use]
    pub fn len(&self) -> usize {
        // Relaxed: this only counts, it does not hand us any slot. The consumer stores
        // `head` before the `released` we last loaded with Acquire (`cached_released`), so
        // the value read here is at least that one, and `tail - head <= tail -
        // cached_released <= N`.
        let head = self.ring.head.load(Ordering::Relaxed);
        let len = self.tail.wrapping_sub(head);
        debug_assert!(len <= N);
        len
    }

    /// Whether the ring holds no item, as seen now ([`len`](Self::len) is 0); the consumer
    /// can only keep it so.
    #[inline]
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a push would fail now ([`slots`](Self::slots) is 0), which can be the case a
    /// little before every slot holds an item; the consumer may free some any moment.
    #[inline]
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.slots() == 0
    }

    /// The ring's capacity, `N`.
    #[inline]
    #[must_use]
    pub fn capacity(&self) -> usize {
        N
    }

    /// Reloads the consumer's hand-back index and returns how many slots are free.
    #[inline]
    fn refresh_released(&mut self) -> usize {
        // Acquire pairs with the consumer's Release store of `released` after it moved
        // items out, so its reads of the slots we are about to reuse are finished.
        self.cached_released = self.ring.released.load(Ordering::Acquire);
        let held = self.tail.wrapping_sub(self.cached_released);
        debug_assert!(held <= N, "released ran past tail");
        N - held
    }

    /// Makes every slot before `tail` visible to the consumer.
    #[inline(always)]
    fn publish(&mut self, tail: usize) {
        debug_assert!(tail.wrapping_sub(self.cached_released) <= N);
        debug_assert_eq!(self.ring.tail.load(Ordering::Relaxed), self.tail);
        self.tail = tail;
        // Release pairs with the consumer's Acquire load of `tail`: the slot writes above
        // happen before it reads them.
        self.ring.tail.store(tail, Ordering::Release);
    }
}

impl<T, const N: usize, S: Stamp, P> fmt::Debug for Producer<P>
where
    P: Deref<Target = Ring<T, N, S>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &N)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
