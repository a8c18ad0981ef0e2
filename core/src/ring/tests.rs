//! Single-threaded behaviour of the ring, plus a std-thread stream over an `Arc`.

extern crate std;

use std::boxed::Box;
use std::cell::Cell;
use std::string::{String, ToString};
use std::sync::Arc;
use std::vec::Vec;

use super::{Consumer, PopError, Producer, PushError, Ring, SplitError};

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
fn push_then_pop_is_fifo() {
    let mut ring = Ring::<u32, 8>::new();
    let (mut tx, mut rx) = ring.split();
    for i in 0..5 {
        tx.push(i).unwrap();
    }
    for i in 0..5 {
        assert_eq!(rx.pop(), Ok(i));
    }
    assert_eq!(rx.pop(), Err(PopError::Empty));
}

#[test]
fn all_n_slots_are_usable_and_full_gives_the_value_back() {
    let mut ring = Ring::<String, 4>::new();
    assert_eq!(ring.capacity(), 4);
    let (mut tx, mut rx) = ring.split();
    assert!(tx.is_empty() && rx.is_empty());
    assert_eq!((tx.len(), tx.slots()), (0, 4));
    for i in 0..4 {
        tx.push(i.to_string()).unwrap();
    }
    assert!(tx.is_full() && rx.is_full());
    assert_eq!((tx.len(), tx.slots(), rx.len(), rx.slots()), (4, 0, 4, 0));
    assert_eq!(
        tx.push("extra".to_string()),
        Err(PushError::Full("extra".to_string()))
    );
    assert_eq!(rx.pop().as_deref(), Ok("0"));
    assert_eq!((tx.len(), tx.slots()), (3, 1));
    tx.push("4".to_string()).unwrap();
    let rest: Vec<String> = core::iter::from_fn(|| rx.pop().ok()).collect();
    assert_eq!(rest, ["1", "2", "3", "4"]);
    assert!(rx.is_empty() && !rx.is_full());
    assert_eq!(rx.pop(), Err(PopError::Empty));
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
        let batch: Vec<u8> = (0..round % 11)
            .map(|i| next_in.wrapping_add(i as u8))
            .collect();
        next_in = next_in.wrapping_add(tx.push_slice(&batch) as u8);
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
        let popped = rx.pop().unwrap();
        assert_eq!(popped.id, 0);
        drop(popped);
        assert_eq!(drops.get(), 1);
        let Err(PushError::Full(back)) = (|| {
            for id in 6..20 {
                tx.push(Counted { id, drops: &drops })?;
            }
            Ok(())
        })() else {
            panic!("ring should fill up")
        };
        assert_eq!(back.id, 9);
        drop(back);
        assert_eq!(drops.get(), 2);
    }
    // 0 and 9 were dropped by hand; 1..=8 by the ring.
    assert_eq!(drops.get(), 10);
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
        let ids: Vec<usize> = rx.pop_iter().map(|c| c.id).collect();
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
fn split_by_exclusive_borrow_can_repeat_and_keeps_items() {
    let mut ring = Ring::<Box<u32>, 2>::new();
    {
        let (mut tx, _rx) = ring.split();
        tx.push(Box::new(1)).unwrap();
        tx.push(Box::new(2)).unwrap();
    }
    {
        let (mut tx, mut rx) = ring.split();
        assert_eq!(tx.push(Box::new(3)), Err(PushError::Full(Box::new(3))));
        assert_eq!(rx.pop(), Ok(Box::new(1)));
    }
    let (_tx, mut rx) = ring.split();
    assert_eq!(rx.pop(), Ok(Box::new(2)));
    assert_eq!(rx.pop(), Err(PopError::Empty));
}

#[test]
fn second_try_split_is_refused() {
    let ring = Ring::<u8, 2>::new();
    {
        let _handles = Ring::try_split(&ring).unwrap();
        assert_eq!(Ring::try_split(&ring).err(), Some(SplitError));
    }
    assert_eq!(
        Ring::try_split(&ring).err(),
        Some(SplitError),
        "even after the handles are gone"
    );

    let shared = Arc::new(Ring::<u8, 2>::new());
    let handles = Ring::try_split(Arc::clone(&shared)).unwrap();
    assert!(Ring::try_split(Arc::clone(&shared)).is_err());
    assert_eq!(Arc::strong_count(&shared), 3);
    drop(handles);
    assert_eq!(Arc::strong_count(&shared), 1);
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
fn handles_are_send_for_send_items() {
    fn assert_send<S: Send>() {}
    assert_send::<Producer<&'static Ring<String, 4>>>();
    assert_send::<Consumer<Arc<Ring<Box<u8>, 4>>>>();
}

#[test]
fn errors_display_and_debug() {
    assert_eq!(PushError::Full(1).to_string(), "ring is full");
    assert_eq!(PushError::Full(1).into_inner(), 1);
    assert_eq!(PopError::Empty.to_string(), "ring is empty");
    assert!(SplitError.to_string().contains("already split"));
    let mut ring = Ring::<u8, 4>::new();
    let text = std::format!("{ring:?}");
    assert!(text.contains("capacity: 4"), "{text}");
    let (mut tx, rx) = ring.split();
    tx.push(1).unwrap();
    assert!(std::format!("{tx:?} {rx:?}").contains("len: 1"));
}

#[test]
fn streams_between_threads_through_an_arc() {
    const COUNT: u64 = 200_000;
    let ring = Arc::new(Ring::<u64, 16>::new());
    let (mut tx, mut rx) = Ring::try_split(ring).unwrap();
    let consumer = std::thread::spawn(move || {
        let mut expected = 0;
        let mut buf = [0; 5];
        while expected < COUNT {
            // Alternate single pops and batches.
            if expected % 2 == 0 {
                if let Ok(v) = rx.pop() {
                    assert_eq!(v, expected);
                    expected += 1;
                }
            } else {
                let n = rx.pop_slice(&mut buf);
                for &v in &buf[..n] {
                    assert_eq!(v, expected);
                    expected += 1;
                }
            }
            std::hint::spin_loop();
        }
    });
    let mut next = 0;
    while next < COUNT {
        if next % 3 == 0 {
            if tx.push(next).is_ok() {
                next += 1;
            }
        } else {
            let batch: Vec<u64> = (next..(next + 7).min(COUNT)).collect();
            next += tx.push_slice(&batch) as u64;
        }
    }
    consumer.join().unwrap();
}

#[test]
fn static_ring_across_threads() {
    static RING: Ring<Box<u32>, 4> = Ring::new();
    let (mut tx, mut rx) = Ring::try_split(&RING).unwrap();
    let consumer = std::thread::spawn(move || {
        let mut sum = 0;
        for _ in 0..100 {
            loop {
                if let Ok(v) = rx.pop() {
                    sum += *v;
                    break;
                }
                std::hint::spin_loop();
            }
        }
        sum
    });
    for i in 0..100 {
        let mut item = Box::new(i);
        while let Err(PushError::Full(back)) = tx.push(item) {
            item = back;
            std::hint::spin_loop();
        }
    }
    assert_eq!(consumer.join().unwrap(), 4950);
}
