//! The ring's protocol, over any memory that provides its words: the file mapping in
//! a normal build ([`super::Inbox`]), a model of it under loom (`loom.rs`), which then
//! checks every interleaving of producers, the consumer and the wake-ups.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::record::Record;
use super::{PushError, FIXED, PAYLOAD};

/// A 64-bit word of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Word {
    /// The next position a producer claims.
    Tail,
    /// The next position the consumer reads.
    Head,
    /// The sequence word of the slot of position `pos`.
    Seq(u64),
}

/// A 32-bit word of the ring's wake-up protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flag {
    /// Bumped by a producer that wakes the owner; the owner sleeps on it.
    Futex,
    /// Non-zero while the owner may be asleep.
    Sleeping,
}

/// The shared memory a ring lives in: its words, its slots' bytes, and sleeping on
/// [`Flag::Futex`].
pub(super) trait Memory {
    /// Records the ring holds.
    fn slots(&self) -> u64;
    fn load(&self, w: Word, o: Ordering) -> u64;
    fn store(&self, w: Word, v: u64, o: Ordering);
    fn cas(&self, w: Word, current: u64, new: u64, ok: Ordering, err: Ordering)
        -> Result<u64, u64>;
    /// [`Self::cas`] that may fail spuriously (for loops that retry anyway).
    fn cas_weak(
        &self,
        w: Word,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        self.cas(w, current, new, ok, err)
    }
    fn load32(&self, f: Flag, o: Ordering) -> u32;
    fn store32(&self, f: Flag, v: u32, o: Ordering);
    fn add32(&self, f: Flag, v: u32, o: Ordering) -> u32;
    /// A sequentially consistent fence.
    fn fence(&self);
    /// Writes a record's fixed part and payload into the slot of `pos`, which the
    /// caller claimed and has not published.
    fn write_slot(&self, pos: u64, fixed: &[u8; FIXED], payload: &[u8]);
    /// Reads the fixed part of the record in the slot of `pos`, published and not yet
    /// freed.
    fn read_fixed(&self, pos: u64, fixed: &mut [u8; FIXED]);
    /// Reads the first `payload.len()` bytes of that record's payload.
    fn read_payload(&self, pos: u64, payload: &mut [u8]);
    /// Sleeps while [`Flag::Futex`] holds `expected`, at most `timeout` (spurious
    /// returns allowed).
    fn futex_wait(&self, expected: u32, timeout: Option<Duration>);
    /// Wakes a sleeper of [`Flag::Futex`].
    fn futex_wake(&self);
}

/// Gives a fresh ring its slots' first sequences.
pub(super) fn init(m: &impl Memory) {
    for i in 0..m.slots() {
        m.store(Word::Seq(i), i, Ordering::Relaxed);
    }
}

/// Appends a record with its payload (at most [`PAYLOAD`] bytes) and wakes the owner if
/// it sleeps.
pub(super) fn push(m: &impl Memory, r: &Record, payload: &[u8]) -> Result<(), PushError> {
    let payload = &payload[..payload.len().min(PAYLOAD)];
    let mut pos = m.load(Word::Tail, Ordering::Relaxed);
    loop {
        // Acquire pairs with the consumer's Release when it freed the slot.
        let seq = m.load(Word::Seq(pos), Ordering::Acquire);
        let dif = seq.wrapping_sub(pos) as i64;
        if dif == 0 {
            match m.cas_weak(
                Word::Tail,
                pos,
                pos + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(p) => pos = p,
            }
        } else if dif < 0 {
            return Err(PushError::Full);
        } else {
            pos = m.load(Word::Tail, Ordering::Relaxed);
        }
    }
    m.write_slot(pos, &r.encode_fixed(payload.len()), payload);
    // Release pairs with the consumer's Acquire load of the sequence.
    if m.cas(
        Word::Seq(pos),
        pos,
        pos + 1,
        Ordering::Release,
        Ordering::Relaxed,
    )
    .is_err()
    {
        return Err(PushError::Lost);
    }
    m.fence();
    if m.load32(Flag::Sleeping, Ordering::Relaxed) != 0 {
        m.add32(Flag::Futex, 1, Ordering::Relaxed);
        m.futex_wake();
    }
    Ok(())
}

/// Whether a record may be waiting (a producer claimed a position the consumer has not
/// read).
#[inline]
pub(super) fn maybe_ready(m: &impl Memory) -> bool {
    m.load(Word::Tail, Ordering::Relaxed) != m.load(Word::Head, Ordering::Relaxed)
}

/// Takes the next record, its payload copied into the first `payload_len` bytes of
/// `payload`; the caller is the only consumer while it runs. Malformed records are
/// skipped; so is a slot claimed and not published once `stuck(pos)` says it waited
/// too long.
pub(super) fn pop(
    m: &impl Memory,
    payload: &mut [u8; PAYLOAD],
    mut stuck: impl FnMut(u64) -> bool,
) -> Option<Record> {
    loop {
        let pos = m.load(Word::Head, Ordering::Relaxed);
        let seq = m.load(Word::Seq(pos), Ordering::Acquire);
        if seq != pos + 1 {
            if seq == pos && m.load(Word::Tail, Ordering::Relaxed) > pos {
                // Claimed, not yet published.
                if !stuck(pos) {
                    return None;
                }
                // Skip it; a slow producer's publishing CAS will fail.
                if m.cas(
                    Word::Seq(pos),
                    pos,
                    pos + m.slots(),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
                {
                    m.store(Word::Head, pos + 1, Ordering::Relaxed);
                }
                continue;
            }
            return None;
        }
        let mut fixed = [0u8; FIXED];
        m.read_fixed(pos, &mut fixed);
        let rec = Record::decode(&fixed).inspect(|r| {
            m.read_payload(pos, &mut payload[..r.payload_len]);
        });
        m.store(Word::Head, pos + 1, Ordering::Relaxed);
        // Release pairs with the producers' Acquire load: the slot is free again.
        m.store(Word::Seq(pos), pos + m.slots(), Ordering::Release);
        if let Some(r) = rec {
            return Some(r);
        }
    }
}

/// Sleeps until a producer or [`wake`] wakes the owner or `timeout` passes; at once
/// when a record is already waiting or `stop()` holds. `stop` is the owner's reason to
/// be woken by [`wake`]: set before it, it is seen here, or the wake-up comes after the
/// futex word was read and ends the sleep.
pub(super) fn wait(m: &impl Memory, timeout: Option<Duration>, stop: impl Fn() -> bool) {
    m.store32(Flag::Sleeping, 1, Ordering::Relaxed);
    m.fence();
    // Acquire pairs with `wake`'s Release: a bump seen here brings its `stop` with it.
    let f = m.load32(Flag::Futex, Ordering::Acquire);
    if !maybe_ready(m) && !stop() {
        m.futex_wait(f, timeout);
    }
    m.store32(Flag::Sleeping, 0, Ordering::Relaxed);
}

/// Wakes the owner's waiting thread, to make it notice what its `stop` reads (set it
/// first).
pub(super) fn wake(m: &impl Memory) {
    m.add32(Flag::Futex, 1, Ordering::Release);
    m.futex_wake();
}
