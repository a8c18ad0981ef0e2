//! What a process publishes about its responder side so that a requester in another
//! process can execute an RDMA WRITE or READ itself, with the responder's checks, and
//! without waiting for the responder to be scheduled.
//!
//! A NIC serves one-sided operations with no help from the responder's CPU: a peer that
//! spins on its buffer (`ib_write_lat`, a trading loop) sees the data as soon as it
//! lands. Through the inbox the data lands only when the owner's service thread or a
//! polling thread picks the request up, which a process busy elsewhere delays. So each
//! process exports, in the tail of its file in the namespace, what a responder checks:
//! - per QP number: whether the QP accepts requests now (RTR or RTS), whom it is
//!   connected to, its remote access flags, its protection domain and whether it is UC
//!   ([`QpView`]);
//! - per key slot: the registered region or bound memory window (address, length,
//!   access, device, PD, and a type 2 window's QP number) under a
//!   version word (a key's generation, a valid bit and a change counter): a reader that
//!   sees the same valid version before and after reading the fields read a consistent
//!   region;
//! - the mask of its devices whose link is down;
//! - the port of its UCX listener, which serves other machines (0: none);
//! - the RoCE GIDs of its devices bound to network interfaces, with the device index
//!   (written once, when it joins), so that a GID names a device across processes.
//!
//! A requester that passes every check copies with `process_vm_writev`/`readv` and
//! completes the WQE itself. Anything else (an unknown key, a bound, an access right, a
//! QP not ready, a copy that fails) goes through the inbox, where the responder makes
//! the same checks and reports the error as before: the direct path only ever executes
//! what would succeed.
//!
//! # Deregistration
//! `ibv_dereg_mr` promises that the region is no longer accessed once it returns. A
//! requester announces the key slot it is about to use in one of its *lanes* (an
//! accessor entry per requester process, claimed once, with four lanes) before it
//! reads the region's version; the owner invalidates the version before it reads the
//! lanes, and waits for any lane that names the slot. Both sides order their store
//! before their load (`SeqCst`), so either the requester sees the region invalid, or
//! the owner sees the lane and waits for the copy to end. A requester that dies holding
//! a lane is not waited for (its liveness lock is free), nor one stopped for longer
//! than [`REVOKE_LIMIT`] (reported once).

use std::fs::File;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::sys::Mapping;
use super::Owner;
use crate::region::MrInfo;

/// Where the exports start in a process's file (after the inbox, page-aligned).
pub(crate) const OFFSET: usize = super::inbox::FILE_SIZE.div_ceil(4096) * 4096;
/// Requester processes that can hold lanes at once.
const ACCESSORS: usize = 64;
/// Copies one requester process can have in progress to one owner at once.
const LANES: usize = 4;
/// Key slots exported (a key of a higher slot always goes through the inbox).
const MR_SLOTS: usize = 1 << 14;
const QP_SLOTS: usize = super::registry::SLOTS;
const MAGIC: u64 = u64::from_le_bytes(*b"vqpsexp\x01");
const OFF_MAGIC: usize = 0;
const OFF_DOWN: usize = 8;
/// The port of this process's UCX listener on its bound interfaces' addresses, 0 when
/// it has none (`crate::ucx`, discovery).
const OFF_UCX_PORT: usize = 16;
const OFF_ACC: usize = 64;
const ACC_SIZE: usize = 32;
/// The GID table: [`GID_SLOTS`] entries of 32 bytes (a word with the valid bit and the
/// device index, then the GID), between the accessors and the QP words.
const OFF_GID: usize = 2560;
const GID_SIZE: usize = 32;
/// RoCE GIDs a process publishes (more are not reachable from other processes).
pub(crate) const GID_SLOTS: usize = 48;
const OFF_QP: usize = 4096;
const _: () = assert!(OFF_ACC + ACCESSORS * ACC_SIZE <= OFF_GID);
const _: () = assert!(OFF_GID + GID_SLOTS * GID_SIZE <= OFF_QP);
const OFF_MR: usize = OFF_QP + QP_SLOTS * 8;
const MR_SIZE: usize = 32;
/// Bytes of the exports.
const SIZE: usize = OFF_MR + MR_SLOTS * MR_SIZE;
/// Size of a process's file: the inbox, then the exports.
pub(crate) const FILE_SIZE: usize = OFFSET + SIZE;
/// How long a deregistration waits for a live requester's copy.
pub(crate) const REVOKE_LIMIT: Duration = Duration::from_secs(4);

const VALID: u32 = 1 << 8;
const COUNTER: u32 = 1 << 9;

/// A responder QP as requesters in other processes see it while it accepts requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpView {
    /// `IBV_ACCESS_REMOTE_{WRITE,READ,ATOMIC}` bits of `qp_access_flags`.
    pub access: u32,
    /// The device and QP number it is connected to.
    pub dest_dev: usize,
    pub dest_qpn: u32,
    /// Its protection domain.
    pub pd: u32,
    /// It is UC (it takes only a UC requester's operations).
    pub uc: bool,
}

const REMOTE_BITS: u32 = 0b1110;

impl QpView {
    /// Packs into one word; `None` when a field does not fit (the QP is then not
    /// exported and requesters use the inbox).
    fn pack(&self) -> Option<u64> {
        if self.dest_dev > 0xff || self.dest_qpn > 0x00ff_ffff || self.pd >= 1 << 27 {
            return None;
        }
        Some(
            1 << 63
                | u64::from((self.access & REMOTE_BITS) >> 1) << 60
                | (self.dest_dev as u64) << 52
                | u64::from(self.dest_qpn) << 28
                | u64::from(self.uc) << 27
                | u64::from(self.pd),
        )
    }

    fn unpack(w: u64) -> Option<QpView> {
        (w >> 63 == 1).then_some(QpView {
            access: ((w >> 60) as u32 & 0b111) << 1,
            dest_dev: (w >> 52) as usize & 0xff,
            dest_qpn: (w >> 28) as u32 & 0x00ff_ffff,
            uc: (w >> 27) & 1 == 1,
            pd: w as u32 & 0x07ff_ffff,
        })
    }
}

fn pack_owner(o: Owner) -> u64 {
    u64::from(o.pid) << 32 | u64::from(o.token)
}

fn unpack_owner(w: u64) -> Owner {
    Owner {
        pid: (w >> 32) as u32,
        token: w as u32,
    }
}

/// The key slot of `key` (see `mem::MrTable`), if it is exported.
fn mr_slot(key: u32) -> Option<usize> {
    let s = (key >> 8).checked_sub(1)? as usize;
    (s < MR_SLOTS).then_some(s)
}

/// One process's exports, mapped by the owner (which writes them) or by a requester.
pub(crate) struct Exports {
    map: Mapping,
}

/// A lane held while a copy is in progress; released on drop.
pub(crate) struct Entered<'a> {
    lane: &'a AtomicU32,
    /// The region the key names (checked consistent).
    pub info: MrInfo,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.lane.store(0, Ordering::Release);
    }
}

impl Exports {
    /// Maps the exports of a process's file (`init`: a fresh file of its creator, which
    /// is already [`FILE_SIZE`] long).
    pub(crate) fn map(file: &File, init: bool) -> std::io::Result<Exports> {
        let ex = Exports {
            map: Mapping::new_at(file, OFFSET, SIZE)?,
        };
        if init {
            ex.map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        } else if ex.map.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        Ok(ex)
    }

    fn qp_word(&self, qpn: u32) -> Option<&AtomicU64> {
        let i = qpn.checked_sub(super::registry::FIRST_QPN)? as usize;
        (i < QP_SLOTS).then(|| self.map.u64_at(OFF_QP + i * 8))
    }

    fn mr_ver(&self, slot: usize) -> &AtomicU32 {
        self.map.u32_at(OFF_MR + slot * MR_SIZE)
    }

    fn lane(&self, acc: usize, lane: usize) -> &AtomicU32 {
        self.map.u32_at(OFF_ACC + acc * ACC_SIZE + 8 + lane * 4)
    }

    fn accessor(&self, acc: usize) -> &AtomicU64 {
        self.map.u64_at(OFF_ACC + acc * ACC_SIZE)
    }

    // ---- the owner's side ----

    /// Publishes whether QP `qpn` accepts requests (`Some`) or not.
    pub(crate) fn set_qp(&self, qpn: u32, view: Option<QpView>) {
        if let Some(w) = self.qp_word(qpn) {
            w.store(view.and_then(|v| v.pack()).unwrap_or(0), Ordering::Release);
        }
    }

    /// Publishes GID `gid` of device `dev` in slot `slot` (ignored past [`GID_SLOTS`]).
    pub(crate) fn set_gid(&self, slot: usize, dev: usize, gid: &[u8; 16]) {
        if slot >= GID_SLOTS {
            return;
        }
        let at = OFF_GID + slot * GID_SIZE;
        let (hi, lo) = gid.split_at(8);
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        self.map.u64_at(at + 8).store(word(hi), Ordering::Relaxed);
        self.map.u64_at(at + 16).store(word(lo), Ordering::Relaxed);
        // Release: pairs with the Acquire load of the word in `gid_device`/`gid_of`, so a
        // reader that sees the valid bit sees the GID's two words.
        self.map
            .u64_at(at)
            .store(1 << 63 | (dev as u64 & 0xff), Ordering::Release);
    }

    /// The device whose RoCE GID `gid` this process published.
    pub(crate) fn gid_device(&self, gid: &[u8; 16]) -> Option<usize> {
        (0..GID_SLOTS).find_map(|slot| {
            let at = OFF_GID + slot * GID_SIZE;
            let w = self.map.u64_at(at).load(Ordering::Acquire);
            if w >> 63 == 0 {
                return None;
            }
            let mut g = [0u8; 16];
            g[..8].copy_from_slice(
                &self
                    .map
                    .u64_at(at + 8)
                    .load(Ordering::Relaxed)
                    .to_le_bytes(),
            );
            g[8..].copy_from_slice(
                &self
                    .map
                    .u64_at(at + 16)
                    .load(Ordering::Relaxed)
                    .to_le_bytes(),
            );
            (&g == gid).then_some((w & 0xff) as usize)
        })
    }

    /// The `index`-th GID this process published for device `dev` (its RoCE GID table
    /// entry `index`).
    pub(crate) fn gid_of(&self, dev: usize, index: usize) -> Option<[u8; 16]> {
        (0..GID_SLOTS)
            .filter_map(|slot| {
                let at = OFF_GID + slot * GID_SIZE;
                let w = self.map.u64_at(at).load(Ordering::Acquire);
                (w >> 63 == 1 && (w & 0xff) as usize == dev).then_some(at)
            })
            .nth(index)
            .map(|at| {
                let mut g = [0u8; 16];
                g[..8].copy_from_slice(
                    &self
                        .map
                        .u64_at(at + 8)
                        .load(Ordering::Relaxed)
                        .to_le_bytes(),
                );
                g[8..].copy_from_slice(
                    &self
                        .map
                        .u64_at(at + 16)
                        .load(Ordering::Relaxed)
                        .to_le_bytes(),
                );
                g
            })
    }

    /// Publishes the port of this process's UCX listener (0: none).
    pub(crate) fn set_ucx_port(&self, port: u16) {
        self.map
            .u64_at(OFF_UCX_PORT)
            .store(u64::from(port), Ordering::Release);
    }

    /// The port of the process's UCX listener, if it has one.
    pub(crate) fn ucx_port(&self) -> Option<u16> {
        let p = self.map.u64_at(OFF_UCX_PORT).load(Ordering::Acquire) as u16;
        (p != 0).then_some(p)
    }

    /// Publishes the mask of devices whose link is down.
    pub(crate) fn set_down(&self, mask: u64) {
        self.map.u64_at(OFF_DOWN).store(mask, Ordering::Release);
    }

    /// Publishes the region of a key just registered (or re-registered).
    pub(crate) fn export_mr(&self, key: u32, info: &MrInfo) {
        let Some(s) = mr_slot(key) else {
            return;
        };
        let ver = self.mr_ver(s);
        let cur = ver.load(Ordering::Relaxed);
        // Invalid while the fields change (a reader that raced sees the counter move).
        ver.store(
            (cur & !(VALID | 0xff)).wrapping_add(COUNTER),
            Ordering::Relaxed,
        );
        fence(Ordering::Release);
        let base = OFF_MR + s * MR_SIZE;
        self.map
            .u32_at(base + 4)
            .store(info.access, Ordering::Relaxed);
        self.map
            .u64_at(base + 8)
            .store(info.addr, Ordering::Relaxed);
        self.map
            .u64_at(base + 16)
            .store(info.len, Ordering::Relaxed);
        // The device (< 256) and a type 2 window's QP number (24 bits) share a word.
        self.map
            .u32_at(base + 24)
            .store((info.dev as u32 & 0xff) | info.qpn << 8, Ordering::Relaxed);
        self.map.u32_at(base + 28).store(info.pd, Ordering::Relaxed);
        let now = ver.load(Ordering::Relaxed);
        ver.store(
            now.wrapping_add(COUNTER) | VALID | (key & 0xff),
            Ordering::Release,
        );
    }

    /// Withdraws the region of `key` and returns once no requester copies to or from
    /// it (see the module docs); `alive` tells whether a requester process lives.
    /// Returns false when it gave up waiting for a live requester (after
    /// [`REVOKE_LIMIT`]).
    pub(crate) fn revoke_mr(&self, key: u32, alive: &dyn Fn(Owner) -> bool) -> bool {
        let Some(s) = mr_slot(key) else {
            return true;
        };
        let ver = self.mr_ver(s);
        let cur = ver.load(Ordering::Relaxed);
        ver.store(
            (cur & !(VALID | 0xff)).wrapping_add(COUNTER),
            Ordering::SeqCst,
        );
        let tag = s as u32 + 1;
        let start = Instant::now();
        for acc in 0..ACCESSORS {
            for l in 0..LANES {
                let lane = self.lane(acc, l);
                let mut spins = 0u32;
                while lane.load(Ordering::SeqCst) == tag {
                    spins += 1;
                    if spins < 1000 {
                        std::hint::spin_loop();
                        continue;
                    }
                    let holder = unpack_owner(self.accessor(acc).load(Ordering::Acquire));
                    if !alive(holder) {
                        break;
                    }
                    if start.elapsed() > REVOKE_LIMIT {
                        return false;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
        true
    }

    // ---- a requester's side ----

    /// The accessor entry of requester `me` (claimed on first use; an entry of a dead
    /// requester is taken over). `None` when every entry belongs to a live process.
    pub(crate) fn claim(&self, me: Owner, alive: &dyn Fn(Owner) -> bool) -> Option<usize> {
        let mine = pack_owner(me);
        let mut free = None;
        for acc in 0..ACCESSORS {
            match self.accessor(acc).load(Ordering::Acquire) {
                w if w == mine => return Some(acc),
                0 if free.is_none() => free = Some(acc),
                _ => {}
            }
        }
        let take = |acc: usize, old: u64| {
            let ok = self
                .accessor(acc)
                .compare_exchange(old, mine, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
            if ok {
                for l in 0..LANES {
                    self.lane(acc, l).store(0, Ordering::Release);
                }
            }
            ok
        };
        if let Some(acc) = free {
            if take(acc, 0) {
                return Some(acc);
            }
        }
        (0..ACCESSORS).find(|&acc| {
            let w = self.accessor(acc).load(Ordering::Acquire);
            (w == 0 || !alive(unpack_owner(w))) && take(acc, w)
        })
    }

    /// Whether the owner's link on device `dev` is down.
    pub(crate) fn link_down(&self, dev: usize) -> bool {
        dev >= 64 || self.map.u64_at(OFF_DOWN).load(Ordering::Acquire) >> dev & 1 != 0
    }

    /// The owner's QP `qpn` if it accepts requests now.
    pub(crate) fn qp(&self, qpn: u32) -> Option<QpView> {
        QpView::unpack(self.qp_word(qpn)?.load(Ordering::Acquire))
    }

    /// Takes a free lane of accessor entry `acc` for `key` and reads its region; `None`
    /// when the key is not a live exported region or no lane is free. The region stays
    /// registered until the returned guard is dropped.
    pub(crate) fn enter(&self, acc: usize, key: u32) -> Option<Entered<'_>> {
        let s = mr_slot(key)?;
        let tag = s as u32 + 1;
        let lane = (0..LANES).map(|l| self.lane(acc, l)).find(|lane| {
            lane.compare_exchange(0, tag, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        })?;
        let entered = |info| Entered { lane, info };
        let ver = self.mr_ver(s);
        let v1 = ver.load(Ordering::SeqCst);
        if v1 & VALID == 0 || v1 & 0xff != key & 0xff {
            drop(entered(MrInfo::default()));
            return None;
        }
        let base = OFF_MR + s * MR_SIZE;
        let dev_qpn = self.map.u32_at(base + 24).load(Ordering::Relaxed);
        let info = MrInfo {
            access: self.map.u32_at(base + 4).load(Ordering::Relaxed),
            addr: self.map.u64_at(base + 8).load(Ordering::Relaxed),
            len: self.map.u64_at(base + 16).load(Ordering::Relaxed),
            dev: (dev_qpn & 0xff) as usize,
            pd: self.map.u32_at(base + 28).load(Ordering::Relaxed),
            qpn: dev_qpn >> 8,
        };
        fence(Ordering::Acquire);
        if ver.load(Ordering::Relaxed) != v1 {
            drop(entered(info));
            return None;
        }
        Some(entered(info))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> File {
        // Unlinked once open: the test leaves nothing behind.
        let path = std::env::temp_dir().join(format!(
            "vqp-exports-{}-{}",
            std::process::id(),
            super::super::random_token()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(FILE_SIZE as u64).unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }

    fn region(addr: u64) -> MrInfo {
        MrInfo {
            addr,
            len: 4096,
            access: 0b1111,
            dev: 1,
            pd: 7,
            qpn: 0x12_3456,
        }
    }

    const ME: Owner = Owner { pid: 42, token: 9 };

    #[test]
    fn a_qp_view_round_trips_and_an_oversized_one_is_not_exported() {
        let v = QpView {
            access: 0b1110,
            dest_dev: 3,
            dest_qpn: 0x00ab_cdef,
            pd: (1 << 27) - 1,
            uc: true,
        };
        assert_eq!(QpView::unpack(v.pack().unwrap()), Some(v));
        let rc = QpView { uc: false, ..v };
        assert_eq!(QpView::unpack(rc.pack().unwrap()), Some(rc));
        assert_eq!(QpView { pd: 1 << 27, ..v }.pack(), None);
        assert_eq!(QpView::unpack(0), None);
        let f = file();
        let owner = Exports::map(&f, true).unwrap();
        let peer = Exports::map(&f, false).unwrap();
        owner.set_qp(0x11, Some(v));
        assert_eq!(peer.qp(0x11), Some(v));
        owner.set_qp(0x11, None);
        assert_eq!(peer.qp(0x11), None);
    }

    #[test]
    fn a_region_is_seen_by_its_key_and_generation_until_revoked() {
        let f = file();
        let owner = Exports::map(&f, true).unwrap();
        let peer = Exports::map(&f, false).unwrap();
        let acc = peer.claim(ME, &|_| true).unwrap();
        assert_eq!(peer.claim(ME, &|_| true), Some(acc), "claimed once");
        let key = (5 << 8) | 3;
        assert!(peer.enter(acc, key).is_none(), "nothing exported yet");
        owner.export_mr(key, &region(0x1000));
        let e = peer.enter(acc, key).unwrap();
        assert_eq!(e.info, region(0x1000));
        drop(e);
        assert!(
            peer.enter(acc, (5 << 8) | 4).is_none(),
            "another generation"
        );
        assert!(owner.revoke_mr(key, &|_| true));
        assert!(peer.enter(acc, key).is_none(), "revoked");
        owner.export_mr((5 << 8) | 4, &region(0x2000));
        assert_eq!(peer.enter(acc, (5 << 8) | 4).unwrap().info, region(0x2000));
    }

    #[test]
    fn a_published_gid_names_its_device_to_another_mapping() {
        let f = file();
        let owner = Exports::map(&f, true).unwrap();
        let peer = Exports::map(&f, false).unwrap();
        let g = |last: u8| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[15] = last;
            g
        };
        assert_eq!(peer.gid_device(&g(1)), None, "nothing published");
        owner.set_gid(0, 3, &g(1));
        owner.set_gid(1, 5, &g(2));
        owner.set_gid(GID_SLOTS, 7, &g(3));
        assert_eq!(peer.gid_device(&g(1)), Some(3));
        assert_eq!(peer.gid_device(&g(2)), Some(5));
        assert_eq!(
            peer.gid_device(&g(3)),
            None,
            "past the slots: not published"
        );
        owner.set_gid(2, 3, &g(4));
        assert_eq!(peer.gid_of(3, 0), Some(g(1)));
        assert_eq!(peer.gid_of(3, 1), Some(g(4)), "the device's second GID");
        assert_eq!(peer.gid_of(5, 1), None);
    }

    #[test]
    fn revocation_waits_for_a_live_copy_and_not_for_a_dead_one() {
        let f = file();
        let owner = Exports::map(&f, true).unwrap();
        let peer = Exports::map(&f, false).unwrap();
        let acc = peer.claim(ME, &|_| true).unwrap();
        let key = (9 << 8) | 1;
        owner.export_mr(key, &region(0x1000));
        let held = peer.enter(acc, key).unwrap();
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let t0 = Instant::now();
                assert!(owner.revoke_mr(key, &|_| true));
                t0.elapsed()
            });
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            let waited = t.join().unwrap();
            assert!(waited >= Duration::from_millis(45), "waited {waited:?}");
        });
        // A requester that died holding a lane is not waited for.
        owner.export_mr(key, &region(0x1000));
        let held = peer.enter(acc, key).unwrap();
        core::mem::forget(held);
        assert!(owner.revoke_mr(key, &|o| o != ME));
        // Its entry is taken over by another process, lanes cleared.
        let other = Owner { pid: 43, token: 1 };
        let full = (0..ACCESSORS)
            .filter_map(|i| {
                let o = Owner {
                    pid: 1000 + i as u32,
                    token: 1,
                };
                peer.claim(o, &|_| true)
            })
            .count();
        assert_eq!(full, ACCESSORS - 1, "one entry was ours");
        assert_eq!(peer.claim(other, &|o| o != ME), Some(acc));
        assert_eq!(peer.lane(acc, 0).load(Ordering::Relaxed), 0);
    }

    /// Requesters entering and leaving a region while its owner exports and revokes it
    /// again and again: a copy that entered is never running once the revocation of
    /// its registration has returned (the lanes' store-then-load protocol).
    #[test]
    fn no_copy_outlives_the_revocation_of_its_region() {
        use std::sync::atomic::AtomicBool;
        const ROUNDS: u32 = 250; // generations 1..=250: no wrap
        let f = file();
        let owner = Exports::map(&f, true).unwrap();
        let exported = AtomicU32::new(0);
        let revoked = AtomicU32::new(0);
        let stop = AtomicBool::new(false);
        let entered = AtomicU32::new(0);
        let key = |round: u32| (7 << 8) | round;
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let (exported, revoked, stop, entered, f) =
                    (&exported, &revoked, &stop, &entered, &f);
                s.spawn(move || {
                    let peer = Exports::map(f, false).unwrap();
                    let me = Owner {
                        pid: 100 + t,
                        token: 1,
                    };
                    let acc = peer.claim(me, &|_| true).unwrap();
                    while !stop.load(Ordering::Acquire) {
                        let round = exported.load(Ordering::Acquire);
                        if round == 0 {
                            continue;
                        }
                        if let Some(e) = peer.enter(acc, key(round)) {
                            entered.fetch_add(1, Ordering::Relaxed);
                            // While the lane is held, that round's revocation cannot
                            // have returned.
                            for _ in 0..50 {
                                assert!(revoked.load(Ordering::SeqCst) < round);
                                std::hint::spin_loop();
                            }
                            drop(e);
                        }
                    }
                });
            }
            for round in 1..=ROUNDS {
                owner.export_mr(key(round), &region(0x1000));
                exported.store(round, Ordering::Release);
                // Leave the requesters time to enter.
                let t0 = std::time::Instant::now();
                while t0.elapsed() < Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
                assert!(owner.revoke_mr(key(round), &|_| true));
                revoked.store(round, Ordering::SeqCst);
            }
            stop.store(true, Ordering::Release);
        });
        assert!(entered.load(Ordering::Relaxed) > 0, "no copy ever entered");
    }
}
