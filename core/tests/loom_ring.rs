#![cfg(loom)]
//! Every interleaving of a producer and a consumer thread on tiny rings, under loom.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p vqp-core --release
//! --test loom_ring`. Rings have 2 or 4 slots so that a few items already wrap around them,
//! or 8 where the consumer should hold slots back (`RELEASE_BATCH` is 1 below 8 slots).

use core::ops::Deref;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use stable_deref_trait::{CloneStableDeref, StableDeref};

use vqp_core::ring::{Consumer, PopError, Producer, PushError, Ring, Stamp, Stamped, Unstamped};

/// loom's `Arc`, made acceptable to [`Ring::try_split`].
struct Shared<R>(Arc<R>);

impl<R> Deref for Shared<R> {
    type Target = R;
    fn deref(&self) -> &R {
        &self.0
    }
}

impl<R> Clone for Shared<R> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

// SAFETY: an `Arc` points at one heap allocation that lives as long as any clone; moving
// the `Arc` does not move it, and there is no `DerefMut`.
unsafe impl<R> StableDeref for Shared<R> {}
// SAFETY: clones of an `Arc` point at the same allocation.
unsafe impl<R> CloneStableDeref for Shared<R> {}

type Handles<T, const N: usize, S = Unstamped> = (
    Producer<Shared<Ring<T, N, S>>>,
    Consumer<Shared<Ring<T, N, S>>>,
);

fn split<T, const N: usize, S: Stamp>(ring: Ring<T, N, S>) -> Handles<T, N, S> {
    Ring::try_split(Shared(Arc::new(ring))).unwrap()
}

fn push_spinning<T, const N: usize, S: Stamp>(
    tx: &mut Producer<Shared<Ring<T, N, S>>>,
    mut value: T,
) {
    while let Err(PushError::Full(back)) = tx.push(value) {
        value = back;
        thread::yield_now();
    }
}

fn pop_spinning<T, const N: usize, S: Stamp>(rx: &mut Consumer<Shared<Ring<T, N, S>>>) -> T {
    loop {
        match rx.pop() {
            Ok(value) => return value,
            Err(PopError::Empty) => thread::yield_now(),
        }
    }
}

#[test]
fn push_pop_wraps_around_slots_and_indices() {
    push_pop_wraps::<Unstamped>();
}

/// The same with stamps: each item is found by its slot's stamp, across the wrap.
#[test]
fn stamped_push_pop_wraps_around_slots_and_indices() {
    push_pop_wraps::<Stamped>();
}

fn push_pop_wraps<S: Stamp + Send + Sync + 'static>() {
    loom::model(|| {
        let (mut tx, mut rx) = split(Ring::<usize, 2, S>::starting_at(usize::MAX - 1));
        let producer = thread::spawn(move || {
            for i in 0..4 {
                push_spinning(&mut tx, i);
            }
        });
        for i in 0..4 {
            assert_eq!(pop_spinning(&mut rx), i);
        }
        assert_eq!(rx.pop(), Err(PopError::Empty));
        producer.join().unwrap();
    });
}

#[test]
fn full_and_empty_are_never_wrong() {
    full_and_empty::<Unstamped>();
}

#[test]
fn stamped_full_and_empty_are_never_wrong() {
    full_and_empty::<Stamped>();
}

fn full_and_empty<S: Stamp + Send + Sync + 'static>() {
    loom::model(|| {
        let (mut tx, mut rx) = split(Ring::<usize, 2, S>::new());
        let producer = thread::spawn(move || {
            // Three tries into two slots: the third succeeds only if the consumer freed one.
            let mut pushed = 0;
            for i in 0..3 {
                match tx.push(i) {
                    Ok(()) => pushed += 1,
                    Err(PushError::Full(back)) => {
                        assert_eq!(back, i);
                        assert!(tx.len() <= 2);
                        return pushed;
                    }
                }
            }
            pushed
        });
        let first = rx.pop();
        let pushed = producer.join().unwrap();
        let mut popped: Vec<usize> = first.ok().into_iter().collect();
        popped.extend(core::iter::from_fn(|| rx.pop().ok()));
        // Whatever interleaving ran: items arrive in order, none lost, none invented.
        assert_eq!(popped, (0..pushed).collect::<Vec<_>>());
        assert!((2..=3).contains(&pushed));
    });
}

#[test]
fn batches_cross_threads_in_order() {
    batches_cross::<Unstamped>();
}

/// Batches through a stamped ring, whose single pops may run ahead of `tail`.
#[test]
fn stamped_batches_cross_threads_in_order() {
    batches_cross::<Stamped>();
}

fn batches_cross<S: Stamp + Send + Sync + 'static>() {
    loom::model(|| {
        let (mut tx, mut rx) = split(Ring::<u8, 4, S>::starting_at(usize::MAX - 2));
        let producer = thread::spawn(move || {
            let items = [0, 1, 2, 3, 4, 5];
            let mut sent = 0;
            while sent < items.len() {
                sent += tx.push_slice(&items[sent..]);
                thread::yield_now();
            }
        });
        let mut received = Vec::new();
        let mut buf = [0u8; 3];
        while received.len() < 6 {
            // A single pop, then a batch: in a stamped ring the pop may take an item
            // whose `tail` the producer has not published yet.
            let n = if received.len() == 1 {
                rx.pop().map_or(0, |v| {
                    received.push(v);
                    1
                })
            } else {
                let n = rx.pop_slice(&mut buf);
                received.extend_from_slice(&buf[..n]);
                n
            };
            if n == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(received, [0, 1, 2, 3, 4, 5]);
        producer.join().unwrap();
    });
}

#[test]
fn pop_iter_across_threads() {
    loom::model(|| {
        let (mut tx, mut rx) = split(Ring::<usize, 2>::new());
        let producer = thread::spawn(move || {
            for i in 0..3 {
                push_spinning(&mut tx, i);
            }
        });
        let mut received = Vec::new();
        while received.len() < 3 {
            let before = received.len();
            received.extend(rx.pop_iter());
            if received.len() == before {
                thread::yield_now();
            }
        }
        assert_eq!(received, [0, 1, 2]);
        producer.join().unwrap();
    });
}

/// An item that counts its drops.
struct Token(Arc<AtomicUsize>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn items_left_behind_are_dropped_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let ring = Shared(Arc::new(Ring::<Token, 2>::new()));
        let (mut tx, mut rx) = Ring::try_split(ring.clone()).unwrap();
        let made = Arc::clone(&drops);
        let producer = thread::spawn(move || {
            for _ in 0..3 {
                // A refused token comes back and is dropped here.
                let _ = tx.push(Token(Arc::clone(&made)));
            }
        });
        let consumer = thread::spawn(move || {
            let _ = rx.pop();
        });
        producer.join().unwrap();
        consumer.join().unwrap();
        // Both handles are gone; the last pointer drops the ring and what it holds.
        drop(ring);
        assert_eq!(drops.load(Ordering::Relaxed), 3);
    });
}

// The tests below use rings of 8 slots, whose consumer hands slots back two pops at a
// time (`RELEASE_BATCH`), or when a pop finds the ring empty, or at the end of a batch pop.

#[test]
fn deferred_release_wraps_around_slots_and_indices() {
    assert_eq!(Ring::<usize, 8>::RELEASE_BATCH, 2);
    loom::model(|| {
        // Six items in before the threads start, across the end of `usize`; five more
        // from the producer thread: the last ones only fit in slots handed back.
        let mut ring = Ring::<usize, 8>::starting_at(usize::MAX - 2);
        {
            let (mut tx, _) = ring.split();
            assert_eq!(tx.push_slice(&[0, 1, 2, 3, 4, 5]), 6);
        }
        let (mut tx, mut rx) = split(ring);
        let producer = thread::spawn(move || {
            for i in 6..11 {
                push_spinning(&mut tx, i);
            }
        });
        for i in 0..11 {
            assert_eq!(pop_spinning(&mut rx), i);
        }
        assert_eq!(rx.pop(), Err(PopError::Empty));
        producer.join().unwrap();
    });
}

#[test]
fn a_full_ring_refills_only_slots_handed_back() {
    loom::model(|| {
        let mut ring = Ring::<usize, 8>::new();
        {
            let (mut tx, _) = ring.split();
            assert_eq!(tx.push_slice(&[0, 1, 2, 3, 4, 5, 6, 7]), 8);
        }
        let (mut tx, mut rx) = split(ring);
        let producer = thread::spawn(move || {
            // Two tries each for three more items; whatever the consumer has handed back
            // by then is all the producer may use.
            let mut pushed = 0;
            for i in 8..11 {
                for _ in 0..2 {
                    if tx.push(i).is_ok() {
                        pushed += 1;
                        break;
                    }
                    thread::yield_now();
                }
                if pushed < i - 7 {
                    break;
                }
            }
            assert!(tx.len() <= 8);
            pushed
        });
        // Three pops: the first two are handed back together, the third is held.
        let popped: Vec<usize> = (0..3).map(|_| rx.pop().unwrap()).collect();
        assert_eq!(popped, [0, 1, 2]);
        let pushed = producer.join().unwrap();
        assert!(pushed <= 2, "the third slot was not handed back");
        let rest: Vec<usize> = core::iter::from_fn(|| rx.pop().ok()).collect();
        assert_eq!(rest, (3..8 + pushed).collect::<Vec<_>>());
    });
}

#[test]
fn batches_and_the_empty_ring_hand_slots_back() {
    loom::model(|| {
        let (mut tx, mut rx) = split(Ring::<u8, 8>::starting_at(usize::MAX - 3));
        let producer = thread::spawn(move || {
            let items = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
            let mut sent = 0;
            while sent < items.len() {
                let n = tx.push_slice(&items[sent..(sent + 5).min(items.len())]);
                sent += n;
                if n == 0 {
                    thread::yield_now();
                }
            }
        });
        // Single pops (held back in pairs, or handed back on an empty ring) and batch
        // pops (handing everything back) in turn.
        let mut received = Vec::new();
        let mut buf = [0u8; 3];
        while received.len() < 11 {
            let got = if received.len() % 2 == 0 {
                rx.pop().ok().map(|v| received.push(v)).is_some()
            } else {
                let n = rx.pop_slice(&mut buf);
                received.extend_from_slice(&buf[..n]);
                n > 0
            };
            if !got {
                thread::yield_now();
            }
        }
        assert_eq!(received, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        producer.join().unwrap();
    });
}

#[test]
fn items_popped_but_not_handed_back_are_not_dropped_again() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let ring = Shared(Arc::new(Ring::<Token, 8>::new()));
        let (mut tx, mut rx) = Ring::try_split(ring.clone()).unwrap();
        let made = Arc::clone(&drops);
        let producer = thread::spawn(move || {
            for _ in 0..4 {
                tx.push(Token(Arc::clone(&made))).ok().unwrap();
            }
        });
        let consumer = thread::spawn(move || {
            // One pop, fewer than a release batch: its slot stays held when the consumer
            // goes away (unless it found the ring empty first, then nothing was popped).
            rx.pop().is_ok()
        });
        producer.join().unwrap();
        let popped = usize::from(consumer.join().unwrap());
        assert_eq!(drops.load(Ordering::Relaxed), popped);
        // Both handles are gone; the ring drops what was never popped, once.
        drop(ring);
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    });
}
