//! The registry: one fixed-size file of the namespace, mapped `MAP_SHARED` by every
//! process, holding the machine-wide QP number table.
//!
//! Slot `i` stands for QPN `FIRST_QPN + i`. A slot is one `u64` word: 0 when free,
//! else `pid << 32 | token << 8 | state`, where `state` is [`RESERVED`] between
//! allocation and creation, or `device index + 1` once the QP is findable. Every change
//! is a compare-and-swap, so two processes never get the same number.
//!
//! The header counts the slots in use. An allocation first takes room in that count
//! (a compare-and-swap that fails when it has reached [`SLOTS`]), then looks for a free
//! slot from a rotating hint, so a full table is known at once instead of by a scan of
//! 2^18 slots; a release frees the slot, then gives its room back. The count is never
//! below the slots in use (it grows before a slot is taken and shrinks after one is
//! freed), so a full table is never missed; a process killed between the two steps
//! leaves it one too high, which only matters when the table is nearly full. This is
//! the accounting rdma_rxe keeps for its object pools (`rxe_pool.c`: an atomic element
//! count checked against the pool's maximum before the element is added).
//!
//! Slots of dead owners (see [`super::Owner`]) are reclaimed by [`Registry::reclaim_owners`]
//! (every slot of owners found dead, one pass) and [`Registry::sweep`] (a bounded run
//! of slots from a cursor shared by every process, whose owners are checked).
//!
//! The file is initialised race-free: every process opens it with `O_CREAT` and takes
//! an exclusive `flock` before looking at it; the first one to find it empty sizes it,
//! writes the header and sets the `ready` word, all under the lock. A creator that died
//! half-way leaves `ready` at 0 and the next process simply initialises it again. The
//! name carries the format version, so a process of an older format sharing the
//! directory keeps its own table.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::dir::{Create, FileError, NsDir};
use super::sys::{self, Mapping};
use super::{Owner, SharedError};

/// The registry's file name in the namespace directory.
pub(crate) const FILE: &str = "registry-2";
/// The first QP number handed out (0 and 1 are special in InfiniBand).
pub(crate) const FIRST_QPN: u32 = 0x11;
/// QP numbers in the table.
pub(crate) const SLOTS: usize = 1 << 18;
/// Slot state between allocation and publication.
const RESERVED: u64 = 0xff;
const MAGIC: u64 = u64::from_le_bytes(*b"vqpsreg\x02");
const VERSION: u32 = 2;
const HEADER: usize = 64;
const SIZE: usize = HEADER + SLOTS * 8;
// Header offsets.
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_READY: usize = 12;
const OFF_DEVICES: usize = 16;
const OFF_HINT: usize = 24;
const OFF_USED: usize = 32;
const OFF_SWEEP: usize = 40;

/// The mapped registry.
pub(crate) struct Registry {
    map: Mapping,
}

fn pack(owner: Owner, state: u64) -> u64 {
    (u64::from(owner.pid) << 32) | (u64::from(owner.token & 0x00ff_ffff) << 8) | state
}

fn owner_of(word: u64) -> Owner {
    Owner {
        pid: (word >> 32) as u32,
        token: ((word >> 8) & 0x00ff_ffff) as u32,
    }
}

impl Registry {
    /// Opens (creating and initialising when needed) the registry in `dir`, and records
    /// `devices` as the namespace's device count when it is more than the count so far.
    ///
    /// # Errors
    /// [`SharedError::Refused`] when the file is a symlink, another user's or writable by
    /// others; [`SharedError::Registry`] when it cannot be opened, locked or mapped;
    /// [`SharedError::Format`] when it holds another format or a damaged header.
    pub(crate) fn attach(dir: &NsDir, devices: u32) -> Result<Registry, SharedError> {
        let path = dir.join(FILE);
        let err = |what: &'static str| {
            let p = path.clone();
            move |e: std::io::Error| SharedError::Registry(p, what, e)
        };
        let file = match dir.open_file(FILE, Create::IfMissing) {
            Ok(f) => f,
            Err(FileError::Refused(why)) => return Err(SharedError::Refused(path, why)),
            Err(FileError::Io(e)) => return Err(err("open")(e)),
        };
        lock_bounded(&file).map_err(err("lock"))?;
        let result = Self::init_locked(&file, devices, &path);
        let _ = sys::flock(&file, libc::LOCK_UN);
        result
    }

    fn init_locked(file: &File, devices: u32, path: &Path) -> Result<Registry, SharedError> {
        let err = |what: &'static str| {
            let p = path.to_path_buf();
            move |e: std::io::Error| SharedError::Registry(p, what, e)
        };
        let format = |why: String| SharedError::Format(path.to_path_buf(), why);
        let len = file.metadata().map_err(err("stat"))?.len();
        if len == 0 {
            file.set_len(SIZE as u64).map_err(err("size"))?;
        } else if len != SIZE as u64 {
            return Err(format(format!("it is {len} bytes long, not {SIZE}")));
        }
        let map = Mapping::new(file, SIZE).map_err(err("map"))?;
        let magic = map.u64_at(OFF_MAGIC).load(Ordering::Relaxed);
        if map.u32_at(OFF_READY).load(Ordering::Acquire) == 0 && (magic == 0 || magic == MAGIC) {
            // First user (or a creator died half-way): we hold the lock, initialise.
            map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Relaxed);
            map.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
            // Pairs with the Acquire load above in later processes.
            map.u32_at(OFF_READY).store(1, Ordering::Release);
        }
        if map.u64_at(OFF_MAGIC).load(Ordering::Relaxed) != MAGIC
            || map.u32_at(OFF_VERSION).load(Ordering::Relaxed) != VERSION
            || map.u32_at(OFF_READY).load(Ordering::Relaxed) != 1
        {
            return Err(format("its header is not this provider's".into()));
        }
        let used = map.u64_at(OFF_USED).load(Ordering::Relaxed);
        if used > SLOTS as u64 {
            return Err(format(format!(
                "it counts {used} numbers in use of {SLOTS}"
            )));
        }
        map.u32_at(OFF_DEVICES)
            .fetch_max(devices, Ordering::Relaxed);
        Ok(Registry { map })
    }

    /// The namespace's device count: the most any process that joined it had.
    #[cfg(test)]
    pub(crate) fn devices(&self) -> u32 {
        self.map.u32_at(OFF_DEVICES).load(Ordering::Relaxed)
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        self.map.u64_at(HEADER + i * 8)
    }

    fn used(&self) -> &AtomicU64 {
        self.map.u64_at(OFF_USED)
    }

    /// Frees slot `i` if it still holds `word`; true when this call freed it.
    fn free(&self, i: usize, word: u64) -> bool {
        let freed = self
            .slot(i)
            .compare_exchange(word, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if freed {
            // After the slot: the count never drops below the slots in use.
            self.used().fetch_sub(1, Ordering::AcqRel);
        }
        freed
    }

    /// Reserves a QP number for `me`. Free slots are taken in rotating order (numbers
    /// are not reused soon after release, as on hardware). `None` when every number is
    /// in use (dead owners' numbers included: the caller reclaims them and retries).
    pub(crate) fn alloc(&self, me: Owner) -> Option<u32> {
        let room = self
            .used()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < SLOTS as u64).then_some(n + 1)
            });
        room.ok()?;
        let h = self.map.u64_at(OFF_HINT).fetch_add(1, Ordering::Relaxed);
        let start = (h % SLOTS as u64) as usize;
        let mine = pack(me, RESERVED);
        // The count promises a free slot, but others take and free slots meanwhile: two
        // passes, then give up (only a count left too high by a killed process gets
        // there).
        for k in 0..2 * SLOTS {
            let i = (start + k) % SLOTS;
            let s = self.slot(i);
            if s.load(Ordering::Relaxed) == 0
                && s.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.map
                    .u64_at(OFF_HINT)
                    .fetch_max(h + k as u64 + 1, Ordering::Relaxed);
                return Some(FIRST_QPN + i as u32);
            }
        }
        self.used().fetch_sub(1, Ordering::AcqRel);
        None
    }

    fn index(qpn: u32) -> Option<usize> {
        let i = qpn.checked_sub(FIRST_QPN)? as usize;
        (i < SLOTS).then_some(i)
    }

    /// Makes a reserved number findable as a QP of device `dev`.
    pub(crate) fn publish(&self, qpn: u32, me: Owner, dev: usize) {
        if let Some(i) = Self::index(qpn) {
            let _ = self.slot(i).compare_exchange(
                pack(me, RESERVED),
                pack(me, dev as u64 + 1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Frees `qpn` if `me` holds it.
    pub(crate) fn release(&self, qpn: u32, me: Owner) {
        if let Some(i) = Self::index(qpn) {
            let v = self.slot(i).load(Ordering::Acquire);
            if v != 0 && owner_of(v) == me {
                self.free(i, v);
            }
        }
    }

    /// Frees every number `me` holds (at exit).
    pub(crate) fn release_all(&self, me: Owner) {
        self.reclaim_owners(&[me]);
    }

    /// Frees every number held by one of `owners` (processes found dead, or this one at
    /// exit): one pass over the table. Returns how many.
    pub(crate) fn reclaim_owners(&self, owners: &[Owner]) -> usize {
        if owners.is_empty() {
            return 0;
        }
        let mut n = 0;
        for i in 0..SLOTS {
            let v = self.slot(i).load(Ordering::Relaxed);
            if v != 0 && owners.contains(&owner_of(v)) && self.free(i, v) {
                n += 1;
            }
        }
        n
    }

    /// Looks at the next `budget` slots from the shared sweep cursor and frees those of
    /// owners `alive` says are dead, asking it about at most `checks` owners other than
    /// `me`. Returns how many were freed.
    pub(crate) fn sweep(
        &self,
        me: Owner,
        budget: usize,
        checks: usize,
        alive: &mut dyn FnMut(Owner) -> bool,
    ) -> usize {
        let start = self
            .map
            .u64_at(OFF_SWEEP)
            .fetch_add(budget as u64, Ordering::Relaxed);
        let mut seen: Vec<(Owner, bool)> = Vec::new();
        let mut freed = 0;
        for k in 0..budget.min(SLOTS) {
            let i = ((start + k as u64) % SLOTS as u64) as usize;
            let v = self.slot(i).load(Ordering::Relaxed);
            if v == 0 || owner_of(v) == me {
                continue;
            }
            let o = owner_of(v);
            let live = match seen.iter().find(|(s, _)| *s == o) {
                Some(&(_, live)) => live,
                None if seen.len() < checks => {
                    let live = alive(o);
                    seen.push((o, live));
                    live
                }
                None => continue,
            };
            if !live && self.free(i, v) {
                freed += 1;
            }
        }
        freed
    }

    /// The owner of QP `qpn` on device `dev`, with the slot word (for [`Self::reclaim`]).
    pub(crate) fn lookup(&self, qpn: u32, dev: usize) -> Option<(Owner, u64)> {
        let v = self.slot(Self::index(qpn)?).load(Ordering::Acquire);
        (v != 0 && v & 0xff == dev as u64 + 1).then(|| (owner_of(v), v))
    }

    /// Frees `qpn` if its slot still holds `word` (an owner found dead).
    pub(crate) fn reclaim(&self, qpn: u32, word: u64) {
        if let Some(i) = Self::index(qpn) {
            self.free(i, word);
        }
    }

    /// Numbers in use (by the count).
    pub(crate) fn in_use(&self) -> u64 {
        self.used().load(Ordering::Relaxed)
    }
}

/// Takes an exclusive lock, waiting at most a few seconds (a process stopped while it
/// initialises must not hang every other).
fn lock_bounded(file: &File) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if sys::flock(file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> (std::path::PathBuf, NsDir) {
        let d = std::env::temp_dir().join(format!("vqp-reg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let ns = NsDir::at(&d, sys::euid()).unwrap();
        (d, ns)
    }

    #[test]
    fn numbers_are_unique_published_and_reclaimed() {
        let (d, ns) = tmp("unique");
        let r1 = Registry::attach(&ns, 2).unwrap();
        let r2 = Registry::attach(&ns, 3).unwrap();
        assert_eq!(r1.devices(), 3, "the namespace grows to the larger count");
        Registry::attach(&ns, 1).unwrap();
        assert_eq!(r2.devices(), 3, "and never shrinks");
        let a = Owner { pid: 10, token: 1 };
        let b = Owner { pid: 11, token: 2 };
        let qa = r1.alloc(a).unwrap();
        let qb = r2.alloc(b).unwrap();
        assert_ne!(qa, qb);
        assert_eq!(r1.in_use(), 2);
        assert!(qa >= FIRST_QPN && qb >= FIRST_QPN);
        assert_eq!(r2.lookup(qa, 1), None, "reserved, not yet findable");
        r1.publish(qa, a, 1);
        assert_eq!(r2.lookup(qa, 1).map(|x| x.0), Some(a));
        assert_eq!(r2.lookup(qa, 0), None, "another device");
        r2.release(qa, b);
        assert!(r2.lookup(qa, 1).is_some(), "only the owner releases");
        let (_, w) = r2.lookup(qa, 1).unwrap();
        r2.reclaim(qa, w);
        r2.reclaim(qa, w);
        assert_eq!(r1.lookup(qa, 1), None);
        assert_eq!(r1.in_use(), 1, "freed once");
        r2.publish(qb, b, 0);
        r2.release_all(b);
        assert_eq!(r1.lookup(qb, 0), None);
        assert_eq!(r1.in_use(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_full_table_is_refused_at_once_and_never_twice_the_same_number() {
        let (d, ns) = tmp("full");
        let r = Registry::attach(&ns, 2).unwrap();
        let a = Owner { pid: 10, token: 1 };
        let mut seen = vec![false; SLOTS];
        for _ in 0..SLOTS {
            let q = r.alloc(a).expect("room left");
            let i = (q - FIRST_QPN) as usize;
            assert!(!seen[i], "QPN {q:#x} handed out twice");
            seen[i] = true;
        }
        let t = Instant::now();
        for _ in 0..1000 {
            assert_eq!(r.alloc(a), None);
        }
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(r.in_use(), SLOTS as u64);
        r.release(FIRST_QPN + 77, a);
        assert_eq!(r.alloc(a), Some(FIRST_QPN + 77), "the one freed number");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Mappings of one file racing as processes would: every number is handed out once,
    /// the count ends exact when the table is full, and again when all are freed.
    #[test]
    fn racing_mappings_fill_and_empty_the_table_exactly() {
        let (d, ns) = tmp("race");
        let regs: Vec<Registry> = (0..4).map(|_| Registry::attach(&ns, 2).unwrap()).collect();
        let got: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = regs
                .iter()
                .enumerate()
                .map(|(t, r)| {
                    s.spawn(move || {
                        let me = Owner {
                            pid: 100 + t as u32,
                            token: 1,
                        };
                        let mut mine = Vec::new();
                        let mut n = 0;
                        while let Some(q) = r.alloc(me) {
                            mine.push(q);
                            n += 1;
                            if n % 3 == 0 && n < 3000 {
                                // Give one back now and then, as processes do.
                                let q = mine.swap_remove(0);
                                r.release(q, me);
                            }
                        }
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u32> = got.iter().flatten().copied().collect();
        assert_eq!(all.len(), SLOTS, "the table filled");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), SLOTS, "no number twice");
        assert_eq!(regs[0].in_use(), SLOTS as u64);
        std::thread::scope(|s| {
            for (t, r) in regs.iter().enumerate() {
                s.spawn(move || {
                    r.release_all(Owner {
                        pid: 100 + t as u32,
                        token: 1,
                    })
                });
            }
        });
        assert_eq!(regs[0].in_use(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dead_owners_are_swept_in_bounded_runs() {
        let (d, ns) = tmp("sweep");
        let r = Registry::attach(&ns, 2).unwrap();
        let me = Owner { pid: 1, token: 1 };
        let dead = Owner { pid: 2, token: 2 };
        let live = Owner { pid: 3, token: 3 };
        for o in [me, dead, live, dead] {
            r.alloc(o).unwrap();
        }
        let mut asked = Vec::new();
        let mut alive = |o: Owner| {
            asked.push(o);
            o != dead
        };
        // The cursor starts at slot 0: the first run of 2 slots holds `me` and `dead`.
        assert_eq!(r.sweep(me, 2, 8, &mut alive), 1);
        assert_eq!(r.sweep(me, SLOTS, 8, &mut alive), 1);
        assert_eq!(asked.iter().filter(|o| **o == dead).count(), 2);
        assert!(!asked.contains(&me), "never asks about itself");
        assert_eq!(r.in_use(), 2);
        assert_eq!(r.reclaim_owners(&[live]), 1);
        assert_eq!(
            r.sweep(me, SLOTS, 0, &mut |_| false),
            0,
            "no checks allowed"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_damaged_file_is_refused() {
        let (d, ns) = tmp("format");
        std::fs::write(d.join(FILE), b"garbage").unwrap();
        assert!(matches!(
            Registry::attach(&ns, 2),
            Err(SharedError::Format(_, _))
        ));
        let noise: Vec<u8> = (0..SIZE).map(|i| (i * 7919 % 251) as u8 | 1).collect();
        std::fs::write(d.join(FILE), noise).unwrap();
        assert!(matches!(
            Registry::attach(&ns, 2),
            Err(SharedError::Format(_, _))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
