//! The popping end of a ring.

use core::fmt;
use core::iter::FusedIterator;
use core::ops::Deref;

use super::{PopError, Ring, Stamp};
use crate::sync::Ordering;

/// The only handle that can pop from a [`Ring`].
///
/// `P` is the pointer it reaches the ring through: `&Ring` from [`Ring::split`] or
/// [`Ring::try_split`] on a reference, `Arc<Ring>` from `try_split` on an `Arc`.
/// It is [`Send`] when `T` is, so it can move to the thread that pops.
pub struct Consumer<P> {
    /// The ring this handle pops from.
    ring: P,
    /// Our own copy of `ring.head`: only this handle stores that index, and it stores it
    /// after every item it moves out, so the copy equals it between calls.
    head: usize,
    /// Where the next batch of slots goes back to the producer: `ring.released` (which
    /// only this handle stores) plus [`Ring::RELEASE_BATCH`], kept in this form so that a
    /// pop checks it with one comparison. Invariants between calls: `head` lies in
    /// `release_at - RELEASE_BATCH..release_at`, at its start (every slot handed back)
    /// after a call that found the ring empty or popped a slice.
    release_at: usize,
    /// The producer's `tail` as last loaded. It only grows, so `cached_tail - head` is a
    /// lower bound on the items held; invariant: `cached_tail.wrapping_sub(head) <= N`.
    cached_tail: usize,
}

impl<T, const N: usize, S: Stamp, P> Consumer<P>
where
    P: Deref<Target = Ring<T, N, S>>,
{
    /// Creates the handle; `head` and `tail` are the ring's current indices.
    #[inline]
    pub(super) fn new(ring: P, head: usize, tail: usize) -> Self {
        Self {
            ring,
            head,
            release_at: head.wrapping_add(Ring::<T, N, S>::RELEASE_BATCH),
            cached_tail: tail,
        }
    }

    /// Moves the oldest item out of the ring.
    ///
    /// Loads the producer's index only when the cached one says the ring is empty. Hands
    /// the slot back to the producer later, with others, or when a pop finds the ring
    /// empty (see [`Ring::RELEASE_BATCH`]). A `Result` rather than an `Option`, to match
    /// [`Producer::push`](super::Producer::push) and to leave room for more reasons than
    /// emptiness; `while let Ok(item) = rx.pop()` drains the ring.
    ///
    /// ```
    /// use vqp_core::ring::{PopError, Ring};
    ///
    /// let mut ring = Ring::<u8, 2>::new();
    /// let (mut tx, mut rx) = ring.split();
    /// assert_eq!(rx.pop(), Err(PopError::Empty));
    /// tx.push(5).unwrap();
    /// assert_eq!(rx.pop(), Ok(5));
    /// ```
    ///
    /// # Errors
    ///
    /// [`PopError::Empty`] when the producer has published no item that is not popped.
    #[inline]
    pub fn pop(&mut self) -> Result<T, PopError> {
        let head = self.head;
        if head == self.cached_tail {
            let pushed = if S::KEPT {
                // The stamp is on the item's line: waiting for an item reads that line
                // alone. Acquire pairs with the producer's Release store of the stamp.
                self.ring.slot(head).stamp.get() == head.wrapping_add(1)
            } else {
                self.refresh_tail() != 0
            };
            if !pushed {
                self.release_if_held();
                return Err(PopError::Empty);
            }
            if S::KEPT {
                self.cached_tail = head.wrapping_add(1);
            }
        }
        debug_assert!(self.cached_tail.wrapping_sub(head) <= N);
        let value = self.ring.slot(head).item.with(|item| {
            // SAFETY: `head` is in `head..cached_tail`, so the slot holds an initialised item
            // that the producer's Release store of its stamp or of `tail` made visible to
            // our Acquire load; the producer will not touch it until `released` is
            // published past it, which comes after this read; `head` moves past it below,
            // so it is moved out once.
            unsafe { item.cast::<T>().read() }
        });
        self.advance(head.wrapping_add(1));
        Ok(value)
    }

    /// Copies as many of the oldest items into the front of `items` as it holds and the
    /// ring has, and returns how many it copied. The slots are handed back to the producer
    /// at once, with any that single pops before it had not handed back yet: the index is
    /// published once per call.
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// let mut ring = Ring::<u32, 8>::new();
    /// let (mut tx, mut rx) = ring.split();
    /// tx.push_slice(&[1, 2, 3]);
    /// let mut out = [0; 2];
    /// assert_eq!(rx.pop_slice(&mut out), 2);
    /// assert_eq!(out, [1, 2]);
    /// assert_eq!(rx.pop_slice(&mut out), 1);
    /// assert_eq!(out[0], 3);
    /// ```
    #[inline]
    pub fn pop_slice(&mut self, items: &mut [T]) -> usize
    where
        T: Copy,
    {
        let head = self.head;
        let mut held = self.cached_tail.wrapping_sub(head);
        if held < items.len() {
            held = self.refresh_tail();
        }
        let n = held.min(items.len());
        if n == 0 {
            if held == 0 {
                self.release_if_held();
            }
            return 0;
        }
        let (first, second) = self.ring.slot_runs(head, n);
        let (items_first, items_second) = items[..n].split_at_mut(first.len());
        for (slot, item) in first.iter().zip(items_first) {
            // SAFETY: the `n <= held` slots from `head` on are in `head..tail`: initialised,
            // published to us by the producer's Release store of `tail`, and ours until we
            // publish `released` past them. `T: Copy`, so copying leaves nothing to drop.
            *item = slot.item.with(|cell| unsafe { cell.cast::<T>().read() });
        }
        for (slot, item) in second.iter().zip(items_second) {
            // SAFETY: as above; these are the same run continued at the start of storage.
            *item = slot.item.with(|cell| unsafe { cell.cast::<T>().read() });
        }
        self.record_head(head.wrapping_add(n));
        self.release();
        n
    }

    /// Returns an iterator that pops the items the ring holds now, oldest first.
    ///
    /// Items pushed after this call are left for later, as are items the iterator was not
    /// advanced to (it is fine to drop it early). The consumer's position moves past each
    /// item as it is yielded, so even a leaked iterator never lets an item be moved out
    /// twice; slots are handed back to the producer as [`pop`](Self::pop) does, and all
    /// of them when the ring is found empty here.
    ///
    /// ```
    /// use vqp_core::ring::Ring;
    ///
    /// let mut ring = Ring::<String, 4>::new();
    /// let (mut tx, mut rx) = ring.split();
    /// for word in ["post", "poll", "done"] {
    ///     tx.push(word.to_owned()).unwrap();
    /// }
    /// let first_two: Vec<String> = rx.pop_iter().take(2).collect();
    /// assert_eq!(first_two, ["post", "poll"]);
    /// assert_eq!(rx.len(), 1);
    /// ```
    #[inline]
    pub fn pop_iter(&mut self) -> PopIter<'_, P> {
        if self.refresh_tail() == 0 {
            self.release_if_held();
        }
        PopIter {
            end: self.cached_tail,
            consumer: self,
        }
    }

    /// How many items could be popped now without failing: at least this many, since the
    /// producer can only add more.
    #[inline]
    #[must_use]
    pub fn len(&self) -> usize {
        // Acquire pairs with the producer's Release store of `tail`, like in `pop_slice`.
        self.held_by(self.ring.tail.load(Ordering::Acquire))
    }

    /// How many slots are free, as seen now: at most this many, since the producer may be
    /// pushing meanwhile. It counts the slots of items already popped that are not handed
    /// back to the producer yet, which [`Producer::slots`](super::Producer::slots) does
    /// not.
    #[inline]
    #[must_use]
    pub fn slots(&self) -> usize {
        N - self.len()
    }

    /// Whether the ring holds no item, as seen now; the producer may push one any moment.
    #[inline]
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every slot is taken, as seen now; the producer can only keep it so.
    #[inline]
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.len() == N
    }

    /// The ring's capacity, `N`.
    #[inline]
    #[must_use]
    pub fn capacity(&self) -> usize {
        N
    }

    /// Reloads the producer's index and returns how many items can be popped.
    #[inline]
    fn refresh_tail(&mut self) -> usize {
        // Acquire pairs with the producer's Release store of `tail` after it wrote the
        // slots, so their contents are visible to the reads that follow.
        let held = self.held_by(self.ring.tail.load(Ordering::Acquire));
        self.cached_tail = self.head.wrapping_add(held);
        held
    }

    /// The items from `head` up to the producer's `tail`: none when a stamped ring's
    /// `tail` is still behind us (we popped items by their stamps, which the producer
    /// stores before it publishes `tail` past them).
    #[inline(always)]
    fn held_by(&self, tail: usize) -> usize {
        let held = tail.wrapping_sub(self.head);
        if held > N {
            debug_assert!(
                S::KEPT && self.head.wrapping_sub(tail) <= N,
                "tail out of range"
            );
            return 0;
        }
        held
    }

    /// Moves our position to `head`, past items just moved out, and hands their slots
    /// back once a batch is complete.
    #[inline(always)]
    fn advance(&mut self, head: usize) {
        self.record_head(head);
        // One item at a time, so `head` cannot step over `release_at`.
        if head == self.release_at {
            self.release();
        }
        debug_assert!(
            self.release_at.wrapping_sub(head).wrapping_sub(1) < Ring::<T, N, S>::RELEASE_BATCH
        );
    }

    /// Moves our position to `head`, past items just moved out, in the ring as well, so
    /// that the ring's own drop, or a later split, starts from there.
    #[inline(always)]
    fn record_head(&mut self, head: usize) {
        debug_assert!(self.cached_tail.wrapping_sub(head) <= N);
        debug_assert_eq!(self.ring.head.load(Ordering::Relaxed), self.head);
        self.head = head;
        // Relaxed: the code that relies on `head` holds the ring exclusively, after
        // whatever ended this handle; `Producer::len` reads it only to count. The producer
        // learns of freed slots through `released`.
        self.ring.head.store(head, Ordering::Relaxed);
    }

    /// Hands every slot before `head` back to the producer, if we hold any: called when
    /// the ring is found empty, so that a consumer waiting for items holds none back and
    /// [`Producer::slots`](super::Producer::slots) counts every free slot. (The producer
    /// never waits on these slots alone: with the ring empty, fewer than `RELEASE_BATCH`
    /// are held, at most a quarter of the ring, so it sees three quarters free or more.)
    #[inline(always)]
    fn release_if_held(&mut self) {
        if self.release_at.wrapping_sub(Ring::<T, N, S>::RELEASE_BATCH) != self.head {
            self.release();
        }
    }

    /// Hands every slot before `head` back to the producer.
    #[inline(always)]
    fn release(&mut self) {
        debug_assert_eq!(
            self.ring.released.load(Ordering::Relaxed),
            self.release_at.wrapping_sub(Ring::<T, N, S>::RELEASE_BATCH)
        );
        self.release_at = self.head.wrapping_add(Ring::<T, N, S>::RELEASE_BATCH);
        // Release pairs with the producer's Acquire load of `released`: our reads of the
        // slots, this pop's and the earlier ones' not handed back yet, happen before it
        // overwrites them.
        self.ring.released.store(self.head, Ordering::Release);
    }
}

impl<T, const N: usize, S: Stamp, P> fmt::Debug for Consumer<P>
where
    P: Deref<Target = Ring<T, N, S>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &N)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// An iterator that pops the items a ring held when [`Consumer::pop_iter`] was called.
///
/// Dropping it early leaves the remaining items in the ring.
pub struct PopIter<'a, P> {
    /// The consumer the items are popped through.
    consumer: &'a mut Consumer<P>,
    /// The producer's `tail` when the iterator was made; it stops there.
    /// Invariant: `consumer.head` never passes it.
    end: usize,
}

impl<T, const N: usize, S: Stamp, P> Iterator for PopIter<'_, P>
where
    P: Deref<Target = Ring<T, N, S>>,
{
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        let consumer = &mut *self.consumer;
        let head = consumer.head;
        if head == self.end {
            return None;
        }
        debug_assert!(self.end.wrapping_sub(head) <= N);
        let value = consumer.ring.slot(head).item.with(|slot| {
            // SAFETY: `head` is in `head..end`, and `end` is a `tail` we loaded with
            // Acquire, so the slot holds a published, initialised item that the producer
            // leaves alone until `released` passes it (after this read); moving `head` past
            // it below means it is moved out exactly once, even if `self` is leaked.
            unsafe { slot.cast::<T>().read() }
        });
        consumer.advance(head.wrapping_add(1));
        Some(value)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end.wrapping_sub(self.consumer.head);
        (left, Some(left))
    }
}

impl<T, const N: usize, S: Stamp, P> ExactSizeIterator for PopIter<'_, P> where
    P: Deref<Target = Ring<T, N, S>>
{
}

impl<T, const N: usize, S: Stamp, P> FusedIterator for PopIter<'_, P> where
    P: Deref<Target = Ring<T, N, S>>
{
}

impl<T, const N: usize, S: Stamp, P> fmt::Debug for PopIter<'_, P>
where
    P: Deref<Target = Ring<T, N, S>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PopIter")
            .field("left", &self.end.wrapping_sub(self.consumer.head))
            .finish_non_exhaustive()
    }
}
