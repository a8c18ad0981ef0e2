//! The ring's protocol under loom, over a model of its memory: two slots, words as
//! loom atomics, slot bytes in loom cells (so that a write racing a read is reported),
//! and the futex as a mutex and condition variable. Loom runs every interleaving of
//! the threads (up to its preemption bound): records must arrive once each, in each
//! producer's order, a skipped slot must cost its producer a `Lost` and nothing else,
//! no producer may write a slot another producer (stalled, skipped) still writes (the
//! cells report it), a dead claimant's slot must be freed, a consumer that goes to
//! sleep must always be woken by a record, and a stop request must always end its
//! sleep (loom reports a deadlock otherwise).
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!   cargo test -p vqp-softverbs --release --lib shared::inbox::loom
//! ```

use std::sync::atomic::Ordering;
use std::time::Duration;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use super::record::{Kind, Record};
use super::ring::{self, Flag, Memory, Word};
use super::{PushError, FIXED, PAYLOAD};

/// Slots of the modelled ring: few, so that it fills and wraps.
const SLOTS: usize = 2;
/// Payload bytes a modelled slot keeps.
const BYTES: usize = 2;

struct Model {
    tail: AtomicU64,
    head: AtomicU64,
    seq: [AtomicU64; SLOTS],
    futex: AtomicU32,
    sleeping: AtomicU32,
    fixed: [UnsafeCell<[u8; FIXED]>; SLOTS],
    payload: [UnsafeCell<[u8; BYTES]>; SLOTS],
    lock: Mutex<()>,
    woken: Condvar,
}

impl Model {
    fn new() -> Self {
        Model {
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
            seq: [AtomicU64::new(0), AtomicU64::new(0)],
            futex: AtomicU32::new(0),
            sleeping: AtomicU32::new(0),
            fixed: [UnsafeCell::new([0; FIXED]), UnsafeCell::new([0; FIXED])],
            payload: [UnsafeCell::new([0; BYTES]), UnsafeCell::new([0; BYTES])],
            lock: Mutex::new(()),
            woken: Condvar::new(),
        }
    }

    fn word(&self, w: Word) -> &AtomicU64 {
        match w {
            Word::Tail => &self.tail,
            Word::Head => &self.head,
            Word::Seq(pos) => &self.seq[pos as usize % SLOTS],
        }
    }

    fn flag(&self, f: Flag) -> &AtomicU32 {
        match f {
            Flag::Futex => &self.futex,
            Flag::Sleeping => &self.sleeping,
        }
    }
}

impl Memory for Model {
    fn slots(&self) -> u64 {
        SLOTS as u64
    }
    fn load(&self, w: Word, o: Ordering) -> u64 {
        self.word(w).load(o)
    }
    fn store(&self, w: Word, v: u64, o: Ordering) {
        self.word(w).store(v, o);
    }
    fn cas(
        &self,
        w: Word,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        self.word(w).compare_exchange(current, new, ok, err)
    }
    fn load32(&self, f: Flag, o: Ordering) -> u32 {
        self.flag(f).load(o)
    }
    fn store32(&self, f: Flag, v: u32, o: Ordering) {
        self.flag(f).store(v, o);
    }
    fn add32(&self, f: Flag, v: u32, o: Ordering) -> u32 {
        self.flag(f).fetch_add(v, o)
    }
    fn fence(&self) {
        fence(Ordering::SeqCst);
    }
    fn write_slot(&self, pos: u64, fixed: &[u8; FIXED], payload: &[u8]) {
        let i = pos as usize % SLOTS;
        // SAFETY: loom's cell checks the access: the protocol gives the slot to the
        // producer that claimed it until it publishes.
        self.fixed[i].with_mut(|p| unsafe { *p = *fixed });
        // SAFETY: as above.
        self.payload[i]
            .with_mut(|p| unsafe { (&mut *p)[..payload.len()].copy_from_slice(payload) });
    }
    fn read_fixed(&self, pos: u64, fixed: &mut [u8; FIXED]) {
        // SAFETY: as `write_slot`: the consumer owns a published slot until it frees it.
        self.fixed[pos as usize % SLOTS].with(|p| unsafe { *fixed = *p });
    }
    fn read_payload(&self, pos: u64, payload: &mut [u8]) {
        let n = payload.len();
        // SAFETY: as `read_fixed`.
        self.payload[pos as usize % SLOTS]
            .with(|p| unsafe { payload.copy_from_slice(&(&*p)[..n]) });
    }
    fn futex_wait(&self, expected: u32, _timeout: Option<Duration>) {
        // The futex's check and sleep are one step for a waker: it bumps the word, then
        // takes the lock to notify.
        let g = self.lock.lock().unwrap();
        if self.futex.load(Ordering::SeqCst) == expected {
            drop(self.woken.wait(g).unwrap());
        }
    }
    fn futex_wake(&self) {
        let _g = self.lock.lock().unwrap();
        self.woken.notify_all();
    }
}

/// Producer `t`'s record number `i`, its payload naming both.
fn record(t: u8, i: u8) -> (Record, [u8; BYTES]) {
    let mut r = Record::new(Kind::Response);
    r.src_qpn = u32::from(t);
    r.psn = u32::from(i);
    (r, [t, i])
}

/// Pushes until the record is in: a full ring is retried, and so is a record whose
/// slot was skipped (`Lost`) when `may_lose`.
fn push(m: &Model, t: u8, i: u8, may_lose: bool) {
    let (r, payload) = record(t, i);
    loop {
        match ring::push(m, u64::from(t), &r, &payload) {
            Ok(()) => return,
            Err(PushError::Full) => thread::yield_now(),
            Err(PushError::Lost) => {
                assert!(may_lose, "a slot was skipped that nobody skips");
                thread::yield_now();
            }
        }
    }
}

/// Checks a record against what producer `t` sent as number `i`.
fn check(r: &Record, payload: &[u8; PAYLOAD], t: usize, i: u32) {
    assert_eq!((r.src_qpn as usize, r.psn), (t, i), "a record out of order");
    assert_eq!(r.payload_len, BYTES);
    assert_eq!(payload[..BYTES], [t as u8, i as u8], "a payload differs");
}

/// Takes `count` records, checking each producer's order, sleeping whenever the ring
/// looks empty when `sleep`, else polling again.
fn take(m: &Model, count: [u32; 2], sleep: bool) {
    take_skipping(m, count, sleep, 0, |_| false);
}

/// [`take`], skipping the first `skips` claimed and unpublished slots it meets (freed
/// when `dead(id)`, else left to their claimants).
fn take_skipping(m: &Model, count: [u32; 2], sleep: bool, skips: u32, dead: fn(u64) -> bool) {
    let mut next = [0u32; 2];
    let mut payload = [0u8; PAYLOAD];
    let mut skips = skips;
    while next != count {
        let stuck = |_| {
            let skip = skips > 0;
            skips = skips.saturating_sub(1);
            skip
        };
        match ring::pop(m, &mut payload, stuck, dead) {
            Some(r) => {
                let t = r.src_qpn as usize;
                check(&r, &payload, t, next[t]);
                next[t] += 1;
            }
            None => {
                if sleep {
                    // Returns at once while a record is claimed and not yet published.
                    ring::wait(m, None, || false);
                }
                thread::yield_now();
            }
        }
    }
}

/// One producer pushes three records into a two-slot ring (so it fills and wraps)
/// while the owner takes them, sleeping whenever the ring looks empty: it is always
/// woken, and gets each record once, in order.
#[test]
fn a_sleeping_owner_is_woken_and_a_full_ring_wraps() {
    loom::model(|| {
        let m = Arc::new(Model::new());
        ring::init(&*m);
        let producer = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for i in 0..3 {
                    push(&m, 0, i, false);
                }
            })
        };
        take(&m, [3, 0], true);
        producer.join().unwrap();
        assert!(ring::pop(&*m, &mut [0; PAYLOAD], |_| false, |_| false).is_none());
    });
}

/// Two producers race for the ring's positions: each record lands in a slot of its
/// own and arrives once.
#[test]
fn two_producers_claim_distinct_slots() {
    loom::model(|| {
        let m = Arc::new(Model::new());
        ring::init(&*m);
        let producers: Vec<_> = (0..2u8)
            .map(|t| {
                let m = Arc::clone(&m);
                thread::spawn(move || push(&m, t, 0, false))
            })
            .collect();
        take(&m, [1, 1], false);
        for p in producers {
            p.join().unwrap();
        }
        assert!(ring::pop(&*m, &mut [0; PAYLOAD], |_| false, |_| false).is_none());
    });
}

/// The owner skips a slot as soon as it finds it claimed and unpublished (as it does
/// after `STUCK` for a producer that died mid-push): the producer then learns `Lost`
/// and sends again, and the record arrives exactly once.
#[test]
fn a_skipped_slot_costs_its_producer_a_resend_and_nothing_else() {
    loom::model(|| {
        let m = Arc::new(Model::new());
        ring::init(&*m);
        let producer = {
            let m = Arc::clone(&m);
            thread::spawn(move || push(&m, 0, 0, true))
        };
        let mut payload = [0u8; PAYLOAD];
        let r = loop {
            if let Some(r) = ring::pop(&*m, &mut payload, |_| true, |_| false) {
                break r;
            }
            thread::yield_now();
        };
        check(&r, &payload, 0, 0);
        producer.join().unwrap();
        assert!(ring::pop(&*m, &mut payload, |_| true, |_| false).is_none());
    });
}

/// A producer claims a slot and the owner skips it before it writes; then, at once,
/// that producer writes and learns `Lost` while a second producer wraps round onto the
/// same slot: the skipped producer keeps its slot until it hands it back, so the other
/// never writes it while it is written (the cells would report the race), and the
/// second producer's records arrive intact, in order.
#[test]
fn a_skipped_producer_keeps_its_slot_until_it_hands_it_back() {
    loom::model(|| {
        let m = Arc::new(Model::new());
        ring::init(&*m);
        let pos = ring::take_slot(&*m, 0).unwrap();
        assert!(ring::pop(&*m, &mut [0; PAYLOAD], |_| true, |_| false).is_none());
        let stalled = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                let (r, payload) = record(0, 0);
                assert_eq!(ring::put(&*m, 0, pos, &r, &payload), Err(PushError::Lost));
            })
        };
        let later = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for i in 0..2 {
                    push(&m, 1, i, false);
                }
            })
        };
        stalled.join().unwrap();
        later.join().unwrap();
        take(&m, [0, 2], false);
        assert!(ring::pop(&*m, &mut [0; PAYLOAD], |_| false, |_| false).is_none());
    });
}

/// A producer that claims a slot and dies (claims, never writes): the owner frees the
/// slot when it finds it stuck, and another producer's records, which wrap round onto
/// it, all arrive.
#[test]
fn a_dead_claimants_slot_is_freed() {
    const DEAD: u64 = 7;
    loom::model(|| {
        let m = Arc::new(Model::new());
        ring::init(&*m);
        let dying = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                let _ = ring::take_slot(&*m, DEAD);
            })
        };
        dying.join().unwrap();
        let producer = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for i in 0..2 {
                    push(&m, 1, i, false);
                }
            })
        };
        take_skipping(&m, [0, 2], false, 1, |id| id == DEAD);
        producer.join().unwrap();
    });
}

/// A stop request (a flag, then `wake`) ends the owner's sleep on an empty ring, in
/// whatever order it meets the owner's going to sleep.
#[test]
fn a_stop_request_always_ends_the_owners_sleep() {
    loom::model(|| {
        let m = Arc::new(Model::new());
        ring::init(&*m);
        let stop = Arc::new(AtomicBool::new(false));
        let waker = {
            let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
            thread::spawn(move || {
                stop.store(true, Ordering::Release);
                ring::wake(&*m);
            })
        };
        while !stop.load(Ordering::Acquire) {
            ring::wait(&*m, None, || stop.load(Ordering::Acquire));
            thread::yield_now();
        }
        waker.join().unwrap();
    });
}
