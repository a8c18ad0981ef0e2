//! A process's inbox: a bounded multi-producer ring of fixed-size [`Record`]s in a
//! shared file mapping, with a futex word that wakes the owner.
//!
//! The ring is Vyukov's bounded MPMC queue, with the claim moved into the slot: a
//! producer claims position `pos` when slot `pos % SLOTS` carries sequence `pos`, by a
//! compare-and-swap of that sequence to a word that names it (its process id and
//! token, and the lap), then moves `tail` on (any producer that finds the slot claimed
//! helps it on), so a claimed slot always names its claimant. It writes the record and
//! publishes it by moving the sequence to `pos + 1`; the consumer reads a slot whose
//! sequence is `head + 1` and frees it by setting `head + SLOTS`. Only one thread of
//! the owner consumes at a time (the caller serialises), which keeps the records of one
//! sender in the order they were pushed.
//!
//! A producer that died between claiming and publishing would block the ring for
//! good; the consumer therefore skips a slot that stayed claimed for [`STUCK`], by a
//! compare-and-swap of its sequence. When the claimant is dead the slot is freed at
//! once. When it lives (stalled, not dead) the slot is marked skipped and stays its
//! claimant's: when it resumes, its publishing compare-and-swap fails, it hands the
//! slot back for the next lap and sends its record again. Until then producers find
//! the ring full when they come round to that slot, and a claimant found dead meanwhile
//! has its slot freed by the consumer. So no producer ever writes a slot that another
//! may still be writing: a stalled producer cannot tear a later record.
//!
//! Wake-ups: the owner sets `sleeping`, reads `futex`, re-checks the ring and its stop
//! flag, and waits on `futex` unless one of them says not to; a producer, after
//! publishing, reads `sleeping` and only then bumps and wakes the futex (both sides
//! separate their store from their load by a `SeqCst` fence, so one of them sees the
//! other). A stop request sets the flag, then bumps the futex with `Release`: an owner
//! that read the bumped word sees the flag, one that read it before is woken.
//!
//! The protocol is in `ring.rs`, written against the memory it runs on, so that a
//! model of that memory under loom (`loom.rs`) checks it; the records' encoding is in
//! `record.rs`.

#[cfg(all(test, loom))]
#[allow(unsafe_code)]
mod loom;
mod record;
mod ring;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use super::sys::{self, Mapping};
use ring::{Flag, Memory, Word};

pub(crate) use record::{
    iov, Kind, Record, F_GRH, F_INLINE, F_SOLICITED, F_UC, F_UD, F_XRC, GRH_SGID_SHIFT,
    XRC_SRQN_SHIFT,
};

/// Records the ring holds.
pub(crate) const SLOTS: u64 = 512;
/// Bytes of one slot: the sequence word and the record.
const SLOT_SIZE: usize = 1152;
/// Largest payload of a record (inline data, or the requester's address ranges).
pub(crate) const PAYLOAD: usize = 1024;
/// A slot claimed but not published for this long is skipped.
const STUCK: Duration = Duration::from_secs(1);
const MAGIC: u64 = u64::from_le_bytes(*b"vqpsibx\x03");
// Header offsets (producers' and consumer's words on separate cache lines).
const OFF_MAGIC: usize = 0;
const OFF_FUTEX: usize = 8;
const OFF_SLEEPING: usize = 12;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const HEADER: usize = 192;
/// Size of an inbox file.
pub(crate) const FILE_SIZE: usize = HEADER + SLOTS as usize * SLOT_SIZE;
/// Bytes of a record's fixed part.
const FIXED: usize = 104;
// A slot holds its sequence word, the fixed part and the largest payload.
const _: () = assert!(8 + FIXED + PAYLOAD <= SLOT_SIZE);

/// Why a push failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The ring is full: try again later.
    Full,
    /// The slot was skipped by the consumer while we wrote it: send again.
    Lost,
}

/// One inbox mapping (our own, or a peer's that we push to).
pub(crate) struct Inbox {
    map: Mapping,
    /// Producer side: our id, which a slot we claim names.
    id: u64,
    /// Consumer side: when the slot at the head was first seen claimed but unpublished.
    stuck_since: std::sync::Mutex<Option<(u64, Instant)>>,
    /// Consumer side: when a claimant's liveness was last asked about.
    dead_checked: std::sync::Mutex<Option<Instant>>,
}

/// How often the consumer asks whether the claimant of a stuck slot died (each ask is a
/// few system calls).
const DEAD_RECHECK: Duration = Duration::from_millis(100);

impl Inbox {
    /// Maps the inbox at the head of a process's file (at least [`FILE_SIZE`] long);
    /// `init` for a fresh file of its creator; `id` names us in the slots we claim as a
    /// producer (its low 56 bits).
    pub(crate) fn map(file: &File, init: bool, id: u64) -> std::io::Result<Inbox> {
        if file.metadata()?.len() < FILE_SIZE as u64 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        let map = Mapping::new(file, FILE_SIZE)?;
        let ib = Inbox {
            map,
            id,
            stuck_since: std::sync::Mutex::new(None),
            dead_checked: std::sync::Mutex::new(None),
        };
        if init {
            ring::init(&ib);
            // Pairs with the Acquire load of producers that map the file later.
            ib.map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        } else if ib.map.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        Ok(ib)
    }

    fn slot_off(pos: u64) -> usize {
        HEADER + (pos % SLOTS) as usize * SLOT_SIZE
    }

    fn word(&self, w: Word) -> &std::sync::atomic::AtomicU64 {
        self.map.u64_at(match w {
            Word::Tail => OFF_TAIL,
            Word::Head => OFF_HEAD,
            Word::Seq(pos) => Self::slot_off(pos),
        })
    }

    fn flag(&self, f: Flag) -> &std::sync::atomic::AtomicU32 {
        self.map.u32_at(match f {
            Flag::Futex => OFF_FUTEX,
            Flag::Sleeping => OFF_SLEEPING,
        })
    }

    /// Appends a record with its payload (at most [`PAYLOAD`] bytes; the record's
    /// `payload_len` is ignored) and wakes the owner if it sleeps.
    pub(crate) fn push(&self, r: &Record, payload: &[u8]) -> Result<(), PushError> {
        ring::push(self, self.id, r, payload)
    }

    /// Whether a record may be waiting (a cheap check for the polling path).
    #[inline]
    pub(crate) fn maybe_ready(&self) -> bool {
        ring::maybe_ready(self)
    }

    /// Takes the next record, its payload copied into the first `payload_len` bytes of
    /// `payload`; the caller is the only consumer while it runs. Malformed records are
    /// skipped, and so is a slot claimed but left unpublished for [`STUCK`] (freed when
    /// `dead(id)` says its claimant died, else left to it).
    pub(crate) fn pop(
        &self,
        payload: &mut [u8; PAYLOAD],
        dead: impl Fn(u64) -> bool,
    ) -> Option<Record> {
        ring::pop(
            self,
            payload,
            |pos| self.stuck(pos),
            |id| self.ask_dead(id, &dead),
        )
    }

    /// Frees a slot a dead claimant held since it was skipped (see the module
    /// documentation); for a consumer that has not popped for a while.
    pub(crate) fn free_dead_claim(&self, dead: impl Fn(u64) -> bool) -> bool {
        ring::free_dead_claim(self, |id| self.ask_dead(id, &dead))
    }

    /// `dead(id)`, asked at most every [`DEAD_RECHECK`] (false in between).
    fn ask_dead(&self, id: u64, dead: &impl Fn(u64) -> bool) -> bool {
        let mut at = self.dead_checked.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_some_and(|t| t.elapsed() < DEAD_RECHECK) {
            return false;
        }
        *at = Some(Instant::now());
        dead(id)
    }

    /// Whether the claimed slot at `pos` has been unpublished for [`STUCK`].
    fn stuck(&self, pos: u64) -> bool {
        let mut s = self.stuck_since.lock().unwrap_or_else(|e| e.into_inner());
        match *s {
            Some((p, at)) if p == pos => at.elapsed() >= STUCK,
            _ => {
                *s = Some((pos, Instant::now()));
                false
            }
        }
    }

    /// Sleeps until a producer or [`Self::wake`] wakes us or `timeout` passes (at once
    /// when a record is already waiting or `stop()` holds).
    pub(crate) fn wait(&self, timeout: Option<Duration>, stop: impl Fn() -> bool) {
        ring::wait(self, timeout, stop);
    }

    /// Wakes the owner's waiting thread, to make it notice what the `stop` it waits
    /// with reads (set that first).
    pub(crate) fn wake(&self) {
        ring::wake(self);
    }
}

/// The ring's words and slots in the file mapping.
impl Memory for Inbox {
    fn slots(&self) -> u64 {
        SLOTS
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
    fn cas_weak(
        &self,
        w: Word,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        self.word(w).compare_exchange_weak(current, new, ok, err)
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
        let off = Self::slot_off(pos) + 8;
        self.map.write_bytes(off, fixed);
        self.map.write_bytes(off + FIXED, payload);
    }
    fn read_fixed(&self, pos: u64, fixed: &mut [u8; FIXED]) {
        self.map.read_bytes(Self::slot_off(pos) + 8, fixed);
    }
    fn read_payload(&self, pos: u64, payload: &mut [u8]) {
        self.map
            .read_bytes(Self::slot_off(pos) + 8 + FIXED, payload);
    }
    fn futex_wait(&self, expected: u32, timeout: Option<Duration>) {
        sys::futex_wait(self.flag(Flag::Futex), expected, timeout);
    }
    fn futex_wake(&self) {
        sys::futex_wake(self.flag(Flag::Futex));
    }
}
