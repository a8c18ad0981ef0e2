//! A process's inbox: a bounded multi-producer ring of fixed-size [`Record`]s in a
//! shared file mapping, with a futex word that wakes the owner.
//!
//! The ring is Vyukov's bounded MPMC queue: a producer claims position `pos` by a
//! compare-and-swap of `tail` when slot `pos % SLOTS` carries sequence `pos`, writes
//! the record, and publishes it by moving the sequence to `pos + 1`; the consumer reads
//! a slot whose sequence is `head + 1` and frees it by setting `head + SLOTS`. Only one
//! thread of the owner consumes at a time (the caller serialises), which keeps the
//! records of one sender in the order they were pushed.
//!
//! A producer that died between claiming and publishing would block the ring for
//! good; the consumer therefore skips a slot that stayed claimed for [`STUCK`], by a
//! compare-and-swap of its sequence — a producer that was merely slow then fails its
//! own publishing compare-and-swap and sends again.
//!
//! Wake-ups: the owner sets `sleeping`, re-checks the ring and waits on `futex`; a
//! producer, after publishing, reads `sleeping` and only then bumps and wakes the futex
//! (both sides separate their store from their load by a `SeqCst` fence, so one of
//! them sees the other).

use std::fs::File;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use super::sys::{self, Mapping};

/// Records the ring holds.
pub(crate) const SLOTS: u64 = 512;
/// Bytes of one slot: the sequence word and the record.
const SLOT_SIZE: usize = 1152;
/// Largest payload of a record (inline data, or the requester's address ranges).
pub(crate) const PAYLOAD: usize = 1024;
/// A slot claimed but not published for this long is skipped.
const STUCK: Duration = Duration::from_secs(1);
const MAGIC: u64 = u64::from_le_bytes(*b"vqpsibx\x02");
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
const FIXED: usize = 96;

/// What a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A request from a requester QP to a responder QP.
    Request = 1,
    /// The responder's answer to one request.
    Response = 2,
}

/// One message between processes (its fixed part; the payload travels beside it). A
/// request names the requester's QP (`src_*`), the responder's (`dst_*`), the
/// operation and where the requester's data lives; a response echoes the QP numbers,
/// `conn` and `psn`, and carries `code` and `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub kind: Kind,
    /// Request: `IBV_WR_*`. Response: a response code (see `remote`).
    pub code: u32,
    /// Bit 0: solicited; bit 1: the payload is inline data.
    pub flags: u32,
    /// The sending process.
    pub from_pid: u32,
    pub from_token: u32,
    pub src_qpn: u32,
    pub src_dev: u32,
    pub dst_qpn: u32,
    pub dst_dev: u32,
    /// Requester's connection id (changes when its QP is reset and reconnected).
    pub conn: u32,
    /// Requester's sequence number of this request on `conn`.
    pub psn: u32,
    pub rkey: u32,
    pub imm: u32,
    /// Response: byte count, RNR timer or completion status.
    pub value: u32,
    /// Message length.
    pub len: u64,
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    /// Address ranges in the payload: `n_iov` of them, 16 bytes each.
    pub n_iov: u32,
    /// Bytes of payload (inline data or ranges) that came with the record.
    pub payload_len: usize,
}

/// Flag: the solicited-event bit.
pub(crate) const F_SOLICITED: u32 = 1;
/// Flag: the payload is inline data.
pub(crate) const F_INLINE: u32 = 2;
/// Flag: the requester QP is UC (a responder answers only a QP of its own type).
pub(crate) const F_UC: u32 = 4;
/// Flag: the requester QP is UD (the request is a datagram: no sequence, `rkey` is the
/// Q_Key).
pub(crate) const F_UD: u32 = 8;
/// Flag: the datagram's address handle had a global route (the receiver gets a GRH).
pub(crate) const F_GRH: u32 = 16;

impl Record {
    /// An empty record of `kind`.
    pub(crate) fn new(kind: Kind) -> Record {
        Record {
            kind,
            code: 0,
            flags: 0,
            from_pid: 0,
            from_token: 0,
            src_qpn: 0,
            src_dev: 0,
            dst_qpn: 0,
            dst_dev: 0,
            conn: 0,
            psn: 0,
            rkey: 0,
            imm: 0,
            value: 0,
            len: 0,
            remote_addr: 0,
            compare_add: 0,
            swap: 0,
            n_iov: 0,
            payload_len: 0,
        }
    }

    /// Appends an address range to `payload` (the record's payload under construction,
    /// its first `payload_len` bytes used); false when it is full.
    pub(crate) fn push_iov(&mut self, payload: &mut [u8; PAYLOAD], addr: u64, len: u64) -> bool {
        let at = self.n_iov as usize * 16;
        if at + 16 > PAYLOAD {
            return false;
        }
        payload[at..at + 8].copy_from_slice(&addr.to_le_bytes());
        payload[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
        self.n_iov += 1;
        self.payload_len = at + 16;
        true
    }
}

/// The `i`-th address range of a payload of ranges (zeros past its end).
pub(crate) fn iov(payload: &[u8], i: usize) -> (u64, u64) {
    let word = |at: usize| {
        payload
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    (word(i * 16), word(i * 16 + 8))
}

impl Record {
    fn encode_fixed(&self, payload_len: usize) -> [u8; FIXED] {
        let mut b = [0u8; FIXED];
        let words32 = [
            self.kind as u32,
            self.code,
            self.flags,
            self.from_pid,
            self.from_token,
            self.src_qpn,
            self.src_dev,
            self.dst_qpn,
            self.dst_dev,
            self.conn,
            self.psn,
            self.rkey,
            self.imm,
            self.value,
            self.n_iov,
            payload_len as u32,
        ];
        for (i, w) in words32.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let words64 = [self.len, self.remote_addr, self.compare_add, self.swap];
        for (i, w) in words64.iter().enumerate() {
            b[64 + i * 8..72 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Decodes a record; `None` for one that is malformed (a peer never makes us read
    /// past the payload or trust a count it sent).
    fn decode(fixed: &[u8; FIXED]) -> Option<Record> {
        let w32 =
            |i: usize| u32::from_le_bytes(fixed[i * 4..i * 4 + 4].try_into().unwrap_or_default());
        let w64 = |i: usize| {
            u64::from_le_bytes(fixed[64 + i * 8..72 + i * 8].try_into().unwrap_or_default())
        };
        let kind = match w32(0) {
            1 => Kind::Request,
            2 => Kind::Response,
            _ => return None,
        };
        let payload_len = w32(15) as usize;
        let n_iov = w32(14);
        if payload_len > PAYLOAD || n_iov as usize * 16 > PAYLOAD {
            return None;
        }
        let mut r = Record::new(kind);
        r.code = w32(1);
        r.flags = w32(2);
        r.from_pid = w32(3);
        r.from_token = w32(4);
        r.src_qpn = w32(5);
        r.src_dev = w32(6);
        r.dst_qpn = w32(7);
        r.dst_dev = w32(8);
        r.conn = w32(9);
        r.psn = w32(10);
        r.rkey = w32(11);
        r.imm = w32(12);
        r.value = w32(13);
        r.n_iov = n_iov;
        r.payload_len = payload_len;
        r.len = w64(0);
        r.remote_addr = w64(1);
        r.compare_add = w64(2);
        r.swap = w64(3);
        Some(r)
    }
}

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
    /// Consumer side: when the slot at the head was first seen claimed but unpublished.
    stuck_since: std::sync::Mutex<Option<(u64, Instant)>>,
}

impl Inbox {
    /// Maps the inbox at the head of a process's file (at least [`FILE_SIZE`] long);
    /// `init` for a fresh file of its creator.
    pub(crate) fn map(file: &File, init: bool) -> std::io::Result<Inbox> {
        if file.metadata()?.len() < FILE_SIZE as u64 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        let map = Mapping::new(file, FILE_SIZE)?;
        let ib = Inbox {
            map,
            stuck_since: std::sync::Mutex::new(None),
        };
        if init {
            for i in 0..SLOTS {
                ib.seq(i).store(i, Ordering::Relaxed);
            }
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

    fn seq(&self, pos: u64) -> &std::sync::atomic::AtomicU64 {
        self.map.u64_at(Self::slot_off(pos))
    }

    /// Appends a record with its payload (at most [`PAYLOAD`] bytes; the record's
    /// `payload_len` is ignored) and wakes the owner if it sleeps.
    pub(crate) fn push(&self, r: &Record, payload: &[u8]) -> Result<(), PushError> {
        let payload = &payload[..payload.len().min(PAYLOAD)];
        let tail = self.map.u64_at(OFF_TAIL);
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            // Acquire pairs with the consumer's Release when it freed the slot.
            let seq = self.seq(pos).load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as i64;
            if dif == 0 {
                match tail.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return Err(PushError::Full);
            } else {
                pos = tail.load(Ordering::Relaxed);
            }
        }
        let off = Self::slot_off(pos) + 8;
        self.map.write_bytes(off, &r.encode_fixed(payload.len()));
        self.map.write_bytes(off + FIXED, payload);
        // Release pairs with the consumer's Acquire load of the sequence.
        if self
            .seq(pos)
            .compare_exchange(pos, pos + 1, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return Err(PushError::Lost);
        }
        fence(Ordering::SeqCst);
        if self.map.u32_at(OFF_SLEEPING).load(Ordering::Relaxed) != 0 {
            self.map.u32_at(OFF_FUTEX).fetch_add(1, Ordering::Relaxed);
            sys::futex_wake(self.map.u32_at(OFF_FUTEX));
        }
        Ok(())
    }

    /// Whether a record may be waiting (a cheap check for the polling path).
    #[inline]
    pub(crate) fn maybe_ready(&self) -> bool {
        self.map.u64_at(OFF_TAIL).load(Ordering::Relaxed)
            != self.map.u64_at(OFF_HEAD).load(Ordering::Relaxed)
    }

    /// Takes the next record, its payload copied into the first `payload_len` bytes of
    /// `payload`; the caller is the only consumer while it runs. Malformed records are
    /// skipped.
    pub(crate) fn pop(&self, payload: &mut [u8; PAYLOAD]) -> Option<Record> {
        let head = self.map.u64_at(OFF_HEAD);
        loop {
            let pos = head.load(Ordering::Relaxed);
            let seq = self.seq(pos).load(Ordering::Acquire);
            if seq != pos + 1 {
                if seq == pos && self.map.u64_at(OFF_TAIL).load(Ordering::Relaxed) > pos {
                    // Claimed, not yet published.
                    if !self.stuck(pos) {
                        return None;
                    }
                    // Skip it; a slow producer's publishing CAS will fail.
                    if self
                        .seq(pos)
                        .compare_exchange(pos, pos + SLOTS, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        head.store(pos + 1, Ordering::Relaxed);
                    }
                    continue;
                }
                return None;
            }
            let off = Self::slot_off(pos) + 8;
            let mut fixed = [0u8; FIXED];
            self.map.read_bytes(off, &mut fixed);
            let rec = Record::decode(&fixed).inspect(|r| {
                self.map
                    .read_bytes(off + FIXED, &mut payload[..r.payload_len]);
            });
            head.store(pos + 1, Ordering::Relaxed);
            // Release pairs with the producers' Acquire load: the slot is free again.
            self.seq(pos).store(pos + SLOTS, Ordering::Release);
            if let Some(r) = rec {
                return Some(r);
            }
        }
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

    /// Sleeps until a producer wakes us or `timeout` passes (at once when a record is
    /// already waiting).
    pub(crate) fn wait(&self, timeout: Option<Duration>) {
        let sleeping = self.map.u32_at(OFF_SLEEPING);
        let futex = self.map.u32_at(OFF_FUTEX);
        sleeping.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let f = futex.load(Ordering::Relaxed);
        if !self.maybe_ready() {
            sys::futex_wait(futex, f, timeout);
        }
        sleeping.store(0, Ordering::Relaxed);
    }

    /// Wakes the owner's waiting thread (to make it notice a stop request).
    pub(crate) fn wake(&self) {
        self.map.u32_at(OFF_FUTEX).fetch_add(1, Ordering::Relaxed);
        sys::futex_wake(self.map.u32_at(OFF_FUTEX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> (std::path::PathBuf, File) {
        let p = std::env::temp_dir().join(format!("vqp-inbox-{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(FILE_SIZE as u64).unwrap();
        (p, f)
    }

    #[test]
    fn records_round_trip_in_order_and_a_full_ring_says_so() {
        let (p, f) = file("order");
        let own = Inbox::map(&f, true).unwrap();
        let peer = Inbox::map(&f, false).unwrap();
        assert!(!own.maybe_ready());
        let mut r = Record::new(Kind::Request);
        r.code = 4;
        r.len = 1 << 40;
        let mut pl = [0u8; PAYLOAD];
        assert!(r.push_iov(&mut pl, 0x1000, 64));
        assert!(r.push_iov(&mut pl, 0x2000, 32));
        let n = r.payload_len;
        for i in 0..SLOTS {
            r.psn = i as u32;
            peer.push(&r, &pl[..n]).unwrap();
        }
        assert_eq!(peer.push(&r, &pl[..n]), Err(PushError::Full));
        let mut got_pl = [0u8; PAYLOAD];
        for i in 0..SLOTS {
            let got = own.pop(&mut got_pl).unwrap();
            assert_eq!(got.psn, i as u32);
            assert_eq!(got.len, 1 << 40);
            assert_eq!(got.payload_len, 32);
            assert_eq!(iov(&got_pl[..got.payload_len], 1), (0x2000, 32));
            assert_eq!(iov(&got_pl[..got.payload_len], 2), (0, 0));
        }
        assert!(own.pop(&mut got_pl).is_none());
        r.flags = F_INLINE;
        r.n_iov = 0;
        peer.push(&r, b"abc").unwrap();
        let got = own.pop(&mut got_pl).unwrap();
        assert_eq!(got.payload_len, 3);
        assert_eq!(&got_pl[..3], b"abc");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn many_producers_lose_nothing() {
        let (p, f) = file("mpmc");
        let own = Inbox::map(&f, true).unwrap();
        let peers: Vec<Inbox> = (0..3).map(|_| Inbox::map(&f, false).unwrap()).collect();
        const N: u32 = 5000;
        let mut seen = [0u32; 3];
        std::thread::scope(|s| {
            for (t, ib) in peers.iter().enumerate() {
                s.spawn(move || {
                    let mut r = Record::new(Kind::Response);
                    r.src_qpn = t as u32;
                    for i in 0..N {
                        r.psn = i;
                        while ib.push(&r, &[]).is_err() {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut got = 0;
            let mut pl = [0u8; PAYLOAD];
            while got < 3 * N {
                match own.pop(&mut pl) {
                    Some(r) => {
                        let t = r.src_qpn as usize;
                        assert_eq!(r.psn, seen[t], "per-producer order");
                        seen[t] += 1;
                        got += 1;
                    }
                    None => own.wait(Some(Duration::from_millis(1))),
                }
            }
        });
        std::fs::remove_file(p).unwrap();
    }
}
