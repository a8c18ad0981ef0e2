#![cfg(not(loom))]
//! Behaviour of the ring through its public API that needs std: heap-owning items,
//! `Arc`-held rings, `Debug`/`Display` text, and streams between two threads.

use std::sync::Arc;

use vqp_core::ring::{
    Consumer, PopError, Producer, PushError, Ring, SplitError, Stamp, Stamped, Unstamped,
};

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
    let text = format!("{ring:?}");
    assert!(text.contains("capacity: 4"), "{text}");
    let (mut tx, rx) = ring.split();
    tx.push(1).unwrap();
    assert!(format!("{tx:?} {rx:?}").contains("len: 1"));
}

#[test]
fn streams_between_threads_through_an_arc() {
    stream::<Unstamped>();
}

/// The same through a stamped ring, whose single pops find items by their stamps.
#[test]
fn streams_between_threads_through_a_stamped_ring() {
    stream::<Stamped>();
}

fn stream<S: Stamp + Send + Sync + 'static>() {
    const COUNT: u64 = 200_000;
    let ring = Arc::new(Ring::<u64, 16, S>::new());
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

/// Counts its drops in a shared counter.
struct Tracked {
    seq: u64,
    drops: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn heap_items_stream_while_slots_go_back_in_batches() {
    const COUNT: u64 = 100_000;
    const LEFT: u64 = 10;
    assert_eq!(Ring::<Tracked, 64>::RELEASE_BATCH, 16);
    let drops = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ring = Arc::new(Ring::<Tracked, 64>::new());
    let (mut tx, mut rx) = Ring::try_split(Arc::clone(&ring)).unwrap();
    let consumer = std::thread::spawn(move || {
        let mut expected = 0;
        let mut iter_turn = false;
        while expected < COUNT - LEFT {
            // Single pops and iterator runs in turn, stopping short of the last items:
            // the consumer goes away holding some slots back.
            if iter_turn {
                let left = (COUNT - LEFT - expected) as usize;
                for item in rx.pop_iter().take(left) {
                    assert_eq!(item.seq, expected);
                    expected += 1;
                }
            } else if let Ok(item) = rx.pop() {
                assert_eq!(item.seq, expected);
                expected += 1;
            }
            iter_turn = !iter_turn;
            std::hint::spin_loop();
        }
    });
    for seq in 0..COUNT {
        let mut item = Tracked {
            seq,
            drops: Arc::clone(&drops),
        };
        while let Err(PushError::Full(back)) = tx.push(item) {
            item = back;
            std::hint::spin_loop();
        }
    }
    consumer.join().unwrap();
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(drops.load(relaxed), COUNT - LEFT);
    assert_eq!(tx.len() as u64, LEFT);
    let held_back = 64 - tx.slots() as u64 - LEFT;
    assert!(held_back < 16, "less than a batch held back: {held_back}");
    drop(tx);
    // The last handle is gone: the ring drops the items never popped, once each.
    assert_eq!(Arc::strong_count(&ring), 1);
    drop(ring);
    assert_eq!(drops.load(relaxed), COUNT);
}
