//! Single-threaded behaviour of the ring that needs its crate-private starting
//! index (to cross the `usize` wrap in a few steps). What needs std (threads,
//! `Arc`, heap-owning items) is in `core/tests/ring.rs`.

use core::cell::Cell;

use super::{PopError, PushError, Ring, Slot, Stamped, Unstamped};

/// Counts its drops in a shared cell.
#[derive(Debug)]
struct Counted<'a> {
    id: usize,
    drops: &'a Cell<usize>,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.drops.set(self.drops.get() + 1);
    }
}

#[test]
fn indices_wrap_past_usize_max() {
    for start in [usize::MAX - 2, usize::MAX - 3, usize::MAX, 0] {
        let mut ring = Ring::<usize, 4>::starting_at(start);
        let (mut tx, mut rx) = ring.split();
        let (mut next_in, mut next_out) = (0, 0);
        // Vary the fill level so every slot offset meets every index offset.
        for round in 0..1000 {
            for _ in 0..(round % 5) {
                if tx.push(next_in).is_ok() {
                    next_in += 1;
                }
            }
            assert!(tx.len() <= 4);
            for _ in 0..(round % 3 + 1) {
                match rx.pop() {
                    Ok(v) => {
                        assert_eq!(v, next_out);
                        next_out += 1;
                    }
                    Err(PopError::Empty) => assert_eq!(next_in, next_out),
                }
            }
        }
        assert!(next_out > 1000);
    }
}

#[test]
fn batches_stop_at_full_and_empty_and_cross_the_end_of_storage() {
    let mut ring = Ring::<u8, 8>::starting_at(usize::MAX - 4);
    let (mut tx, mut rx) = ring.split();
    assert_eq!(tx.push_slice(&[]), 0);
    assert_eq!(tx.push_slice(&[0, 1, 2, 3, 4, 5]), 6);
    assert_eq!(tx.push_slice(&[6, 7, 8, 9]), 2, "only two slots were free");
    assert_eq!(tx.push_slice(&[8]), 0);

    let mut out = [0xff; 3];
    assert_eq!(rx.pop_slice(&mut out), 3);
    assert_eq!(out, [0, 1, 2]);
    // The free slots now straddle the end of storage.
    assert_eq!(tx.push_slice(&[8, 9, 10, 11]), 3);

    let mut out = [0xff; 16];
    assert_eq!(rx.pop_slice(&mut out), 8);
    assert_eq!(&out[..8], &[3, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(out[8], 0xff, "nothing written past the popped items");
    assert_eq!(rx.pop_slice(&mut out), 0);
    assert_eq!(rx.pop_slice(&mut []), 0);

    // Long mixed run: batches, singles, partial pops, through many wraps.
    let (mut next_in, mut next_out) = (11u8, 11u8);
    for round in 0..2000usize {
        let mut batch = [0u8; 10];
        for (i, b) in batch.iter_mut().enumerate() {
            *b = next_in.wrapping_add(i as u8);
        }
        next_in = next_in.wrapping_add(tx.push_slice(&batch[..round % 11]) as u8);
        if round % 7 == 0 && tx.push(next_in).is_ok() {
            next_in = next_in.wrapping_add(1);
        }
        let mut out = [0u8; 5];
        let n = rx.pop_slice(&mut out[..round % 6]);
        for &v in &out[..n] {
            assert_eq!(v, next_out);
            next_out = next_out.wrapping_add(1);
        }
    }
}

#[test]
fn remaining_items_are_dropped_with_the_ring_exactly_once() {
    let drops = Cell::new(0);
    {
        let mut ring = Ring::<Counted<'_>, 8>::starting_at(usize::MAX - 1);
        let (mut tx, mut rx) = ring.split();
        for id in 0..6 {
            tx.push(Counted { id, drops: &drops }).unwrap();
        }
        // Two pops, one release batch: both slots go back to the producer.
        for expected in 0..2 {
            let popped = rx.pop().unwrap();
            assert_eq!(popped.id, expected);
        }
        assert_eq!(drops.get(), 2);
        let Err(PushError::Full(back)) = (|| {
            for id in 6..20 {
                tx.push(Counted { id, drops: &drops })?;
            }
            Ok(())
        })() else {
            panic!("ring should fill up")
        };
        assert_eq!(back.id, 10);
        drop(back);
        assert_eq!(drops.get(), 3);
        // One more pop, whose slot is not handed back yet: the ring stays full.
        assert_eq!(rx.pop().unwrap().id, 2);
        let Err(PushError::Full(back)) = tx.push(Counted {
            id: 20,
            drops: &drops,
        }) else {
            panic!("the popped slot should not be free to the producer yet")
        };
        drop(back);
        assert_eq!(drops.get(), 5);
    }
    // 0, 1, 2, 10 and 20 were dropped by hand; 3..=9 by the ring, not 2 again.
    assert_eq!(drops.get(), 12);
}

#[test]
fn slots_go_back_to_the_producer_in_batches_and_when_the_ring_is_found_empty() {
    let mut ring = Ring::<u32, 16>::starting_at(usize::MAX - 5);
    assert_eq!(Ring::<u32, 16>::RELEASE_BATCH, 4);
    let (mut tx, mut rx) = ring.split();
    assert_eq!(tx.push_slice(&[7; 16]), 16);
    for popped in 1..=9 {
        rx.pop().unwrap();
        assert_eq!(rx.len(), 16 - popped);
        // Whole batches of 4 are handed back, the rest not yet.
        assert_eq!(tx.slots(), popped / 4 * 4, "after {popped} pops");
        assert_eq!(tx.len(), 16 - popped, "popped counts as gone at once");
    }
    // A batch pop hands back everything popped so far.
    assert_eq!(rx.pop_slice(&mut [0; 2]), 2);
    assert_eq!(tx.slots(), 11);
    for _ in 0..5 {
        rx.pop().unwrap();
    }
    assert_eq!(tx.slots(), 15, "one more batch of 4; the last pop is held");
    // Finding the ring empty hands back the rest.
    assert_eq!(rx.pop(), Err(PopError::Empty));
    assert!(tx.is_empty() && tx.slots() == 16);

    // So does a batch pop, whether it finds items or not.
    assert_eq!(tx.push_slice(&[8; 3]), 3);
    rx.pop().unwrap();
    assert_eq!(tx.slots(), 13);
    assert_eq!(rx.pop_slice(&mut [0; 1]), 1);
    assert_eq!(tx.slots(), 15);
    rx.pop().unwrap();
    assert_eq!(tx.slots(), 15);
    assert_eq!(rx.pop_slice(&mut [0; 4]), 0);
    assert_eq!(tx.slots(), 16);

    // The iterator hands back as pop does, and everything when it finds the ring empty.
    assert_eq!(tx.push_slice(&[9; 6]), 6);
    for _ in rx.pop_iter().take(5) {}
    assert_eq!(tx.slots(), 14, "one batch of 4 handed back");
    let mut iter = rx.pop_iter();
    assert_eq!((iter.next(), iter.next()), (Some(9), None));
    assert_eq!(tx.slots(), 14);
    assert_eq!(rx.pop_iter().next(), None);
    assert_eq!(tx.slots(), 16);
}

/// `Consumer` has no `Drop` today; forgetting it stands for a consumer that goes away
/// without a chance to hand its last slots back, whatever a future one would do.
#[test]
#[allow(clippy::forget_non_drop)]
fn a_forgotten_consumer_never_lets_an_item_out_twice() {
    let drops = Cell::new(0);
    let mut ring = Ring::<Counted<'_>, 16>::new();
    {
        let (mut tx, mut rx) = ring.split();
        for id in 0..6 {
            tx.push(Counted { id, drops: &drops }).unwrap();
        }
        // Three pops, fewer than a release batch: their slots are not handed back.
        for id in 0..3 {
            assert_eq!(rx.pop().unwrap().id, id);
        }
        assert_eq!((tx.len(), tx.slots(), drops.get()), (3, 10, 3));
        core::mem::forget(rx);
    }
    {
        // The next pair starts after the popped items, and every slot is free again.
        let (tx, mut rx) = ring.split();
        assert_eq!((tx.len(), tx.slots()), (3, 13));
        assert_eq!(rx.pop().unwrap().id, 3);
        core::mem::forget(rx);
    }
    // The ring drops 4 and 5 only.
    drop(ring);
    assert_eq!(drops.get(), 6);
}

#[test]
fn pop_iter_stops_at_its_snapshot_and_leaves_the_rest() {
    let drops = Cell::new(0);
    let mut ring = Ring::<Counted<'_>, 4>::new();
    {
        let (mut tx, mut rx) = ring.split();
        tx.push(Counted {
            id: 0,
            drops: &drops,
        })
        .unwrap();
        tx.push(Counted {
            id: 1,
            drops: &drops,
        })
        .unwrap();
        {
            let mut iter = rx.pop_iter();
            assert_eq!(iter.len(), 2);
            assert_eq!(iter.next().map(|c| c.id), Some(0));
            assert_eq!(iter.len(), 1);
        }
        assert_eq!(drops.get(), 1);

        tx.push(Counted {
            id: 2,
            drops: &drops,
        })
        .unwrap();
        let ids: heapless::Vec<usize, 4> = rx.pop_iter().map(|c| c.id).collect();
        assert_eq!(ids, [1, 2]);
        assert!(rx.pop_iter().next().is_none());

        tx.push(Counted {
            id: 3,
            drops: &drops,
        })
        .unwrap();
        tx.push(Counted {
            id: 4,
            drops: &drops,
        })
        .unwrap();
        // A leaked iterator must not let an item out twice. `PopIter` has no `Drop`
        // today; this guards against it ever relying on one.
        let mut iter = rx.pop_iter();
        assert_eq!(iter.next().map(|c| c.id), Some(3));
        #[allow(clippy::forget_non_drop)]
        core::mem::forget(iter);
        assert_eq!(rx.len(), 1);
    }
    assert_eq!(drops.get(), 4);
    drop(ring);
    assert_eq!(drops.get(), 5);
}

#[test]
fn zero_sized_items() {
    let mut ring = Ring::<(), 2>::starting_at(usize::MAX);
    let (mut tx, mut rx) = ring.split();
    tx.push(()).unwrap();
    assert_eq!(tx.push_slice(&[(), ()]), 1);
    assert_eq!(tx.push(()), Err(PushError::Full(())));
    assert_eq!(rx.pop(), Ok(()));
    assert_eq!(rx.pop_slice(&mut [(); 4]), 1);
    assert_eq!(rx.pop(), Err(PopError::Empty));
}

#[test]
fn stamped_slots_start_a_line_and_unstamped_ones_take_no_more_room() {
    use core::mem::{align_of, size_of};
    assert_eq!(size_of::<Slot<u64, Unstamped>>(), size_of::<u64>());
    assert_eq!(align_of::<Slot<u64, Unstamped>>(), align_of::<u64>());
    // A 40-byte item and its stamp share one line; a 104-byte one two.
    assert_eq!(size_of::<Slot<[u64; 5], Stamped>>(), 64);
    assert_eq!(align_of::<Slot<[u64; 5], Stamped>>(), 64);
    assert_eq!(size_of::<Slot<[u64; 13], Stamped>>(), 128);
}
