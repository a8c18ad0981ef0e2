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
    /// The sequence word of the slot of position `pos`: the position it is free for,
    /// that position + 1 once its record is published, or a [`claim`] word.
    Seq(u64),
}

/// Set in a sequence word that names the producer holding the slot (a [`claim`]).
const CLAIMED: u64 = 1 << 63;
/// Set, with [`CLAIMED`], once the consumer skipped the slot: its claimant still holds
/// it, and hands it back itself (or is found dead).
const SKIPPED: u64 = 1 << 62;
/// Bits of a producer's id in a claim.
pub(crate) const ID_BITS: u32 = 56;

/// The sequence word of a slot that producer `id` claimed for position `pos`: the flag,
/// the low 6 bits of the lap (`pos / slots`) and the id's 56 bits.
fn claim(id: u64, pos: u64, slots: u64) -> u64 {
    CLAIMED | ((pos / slots) & 0x3f) << ID_BITS | id & ((1 << ID_BITS) - 1)
}

/// Whether claim word `seq` (skipped or not) is for position `pos`.
fn claims(seq: u64, pos: u64, slots: u64) -> bool {
    seq & CLAIMED != 0 && (seq & !SKIPPED) >> ID_BITS & 0x3f == (pos / slots) & 0x3f
}

/// The producer id in a claim word.
fn claimant(seq: u64) -> u64 {
    seq & ((1 << ID_BITS) - 1)
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

/// Appends a record with its payload (at most [`PAYLOAD`] bytes) as producer `id` (its
/// low [`ID_BITS`] bits) and wakes the owner if it sleeps.
pub(super) fn push(m: &impl Memory, id: u64, r: &Record, payload: &[u8]) -> Result<(), PushError> {
    let pos = take_slot(m, id)?;
    put(m, id, pos, r, payload)
}

/// Writes and publishes a record in the slot of `pos`, which producer `id` claimed with
/// [`take_slot`], and wakes the owner if it sleeps.
pub(super) fn put(
    m: &impl Memory,
    id: u64,
    pos: u64,
    r: &Record,
    payload: &[u8],
) -> Result<(), PushError> {
    let payload = &payload[..payload.len().min(PAYLOAD)];
    let mine = claim(id, pos, m.slots());
    m.write_slot(pos, &r.encode_fixed(payload.len()), payload);
    // Release pairs with the consumer's Acquire load of the sequence.
    if m.cas(
        Word::Seq(pos),
        mine,
        pos + 1,
        Ordering::Release,
        Ordering::Relaxed,
    )
    .is_err()
    {
        // Skipped while we wrote: the slot is still ours (nobody else writes it); hand
        // it back for the next lap. Release: our writes happen before its next
        // producer's.
        let _ = m.cas(
            Word::Seq(pos),
            mine | SKIPPED,
            pos + m.slots(),
            Ordering::Release,
            Ordering::Relaxed,
        );
        return Err(PushError::Lost);
    }
    m.fence();
    if m.load32(Flag::Sleeping, Ordering::Relaxed) != 0 {
        m.add32(Flag::Futex, 1, Ordering::Relaxed);
        m.futex_wake();
    }
    Ok(())
}

/// Claims the slot of the next position for producer `id` and returns the position.
/// The claim is the compare-and-swap of the slot's sequence to a word naming `id`, so
/// a claimed slot always names its claimant; `tail` follows, moved by the claimant or
/// by any producer that finds the slot claimed.
pub(super) fn take_slot(m: &impl Memory, id: u64) -> Result<u64, PushError> {
    let slots = m.slots();
    let mut pos = m.load(Word::Tail, Ordering::Relaxed);
    loop {
        // Acquire pairs with the Release that freed the slot (the consumer's, or a
        // skipped producer's hand-back).
        let seq = m.load(Word::Seq(pos), Ordering::Acquire);
        if seq == pos {
            // Weak: a spurious failure only reloads the slot.
            if m.cas_weak(
                Word::Seq(pos),
                pos,
                claim(id, pos, slots),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
            {
                let _ = m.cas(
                    Word::Tail,
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                return Ok(pos);
            }
            continue;
        }
        // Claimed for this position (published, or not yet), or already consumed or
        // freed: `tail` is behind (its claimant has not moved it yet, or `pos` is
        // stale). Help it on.
        let done = seq & CLAIMED == 0 && seq > pos;
        if done || claims(seq, pos, slots) {
            pos = match m.cas(
                Word::Tail,
                pos,
                pos + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => pos + 1,
                Err(p) => p,
            };
            continue;
        }
        // Held for the previous lap (published and not yet consumed, or skipped and not
        // handed back): full, unless `pos` is stale. A read-modify-write reads the
        // latest `tail`, where a load may return an old one again and again.
        match m.cas(Word::Tail, pos, pos, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Err(PushError::Full),
            Err(now) => pos = now,
        }
    }
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
/// too long: freed at once when `dead(id)` says its claimant is gone, else left to its
/// claimant, which hands it back when it resumes (the ring's producers find it full
/// when they come round to it again; a claimant found dead then frees it).
pub(super) fn pop(
    m: &impl Memory,
    payload: &mut [u8; PAYLOAD],
    mut stuck: impl FnMut(u64) -> bool,
    mut dead: impl FnMut(u64) -> bool,
) -> Option<Record> {
    let slots = m.slots();
    loop {
        let pos = m.load(Word::Head, Ordering::Relaxed);
        let seq = m.load(Word::Seq(pos), Ordering::Acquire);
        if seq != pos + 1 {
            if seq & CLAIMED == 0 || !stuck(pos) {
                return None;
            }
            let held = seq & SKIPPED != 0;
            if claims(seq, pos, slots) && !held {
                // Claimed, not published, for too long.
                let to = if dead(claimant(seq)) {
                    pos + slots
                } else {
                    seq | SKIPPED
                };
                if m.cas(Word::Seq(pos), seq, to, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    m.store(Word::Head, pos + 1, Ordering::Relaxed);
                }
                continue;
            }
            if held && free_dead_claim(m, &mut dead) {
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
        m.store(Word::Seq(pos), pos + slots, Ordering::Release);
        if let Some(r) = rec {
            return Some(r);
        }
    }
}

/// Frees the slot at the head when its claimant was skipped a lap ago and `dead(id)`
/// says it has died since (it will never hand the slot back); true when freed.
pub(super) fn free_dead_claim(m: &impl Memory, mut dead: impl FnMut(u64) -> bool) -> bool {
    let slots = m.slots();
    let pos = m.load(Word::Head, Ordering::Relaxed);
    let seq = m.load(Word::Seq(pos), Ordering::Acquire);
    seq & SKIPPED != 0
        && claims(seq, pos.wrapping_sub(slots), slots)
        && dead(claimant(seq))
        && m.cas(
            Word::Seq(pos),
            seq,
            pos,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
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
