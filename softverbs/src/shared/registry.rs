//! The registry: one fixed-size file of the namespace, mapped `MAP_SHARED` by every
//! process, holding the machine-wide QP number table.
//!
//! Slot `i` stands for QPN `FIRST_QPN + i`. A slot is one `u64` word: 0 when free,
//! else `pid << 32 | token << 8 | state`, where `state` is [`RESERVED`] between
//! allocation and creation, or `device index + 1` once the QP is findable. Every change
//! is a compare-and-swap, so two processes never get the same number. Slots of a dead
//! owner (see [`super::Owner`]) are reclaimed lazily: when a lookup finds one, and when
//! an allocation has passed over the whole table without finding a free slot.
//!
//! The file is initialised race-free: every process opens it with `O_CREAT` and takes
//! an exclusive `flock` before looking at it; the first one to find it empty sizes it,
//! writes the header and sets the `ready` word, all under the lock. A creator that died
//! half-way leaves `ready` at 0 and the next process simply initialises it again.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::sys::{self, Mapping};
use super::{Owner, SharedError};

/// The first QP number handed out (0 and 1 are special in InfiniBand).
pub(crate) const FIRST_QPN: u32 = 0x11;
/// QP numbers in the table.
pub(crate) const SLOTS: usize = 1 << 18;
/// Slot state between allocation and publication.
const RESERVED: u64 = 0xff;
const MAGIC: u64 = u64::from_le_bytes(*b"vqpsreg\x01");
const VERSION: u32 = 1;
const HEADER: usize = 64;
const SIZE: usize = HEADER + SLOTS * 8;
// Header offsets.
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_READY: usize = 12;
const OFF_DEVICES: usize = 16;
const OFF_HINT: usize = 24;

/// The mapped registry.
pub(crate) struct Registry {
    map: Mapping,
    /// The device count the registry recorded (its first user's).
    pub devices: u32,
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
    /// Opens (creating and initialising when needed) the registry in `dir`.
    ///
    /// # Errors
    /// [`SharedError::Registry`] when the file cannot be opened, locked or mapped, or
    /// holds another format.
    pub(crate) fn attach(dir: &Path, devices: u32) -> Result<Registry, SharedError> {
        let path = dir.join("registry");
        let err = |what: &'static str| {
            let p = path.clone();
            move |e: std::io::Error| SharedError::Registry(p, what, e.kind())
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(err("open"))?;
        lock_bounded(&file).map_err(err("lock"))?;
        let result = Self::init_locked(&file, devices, &path);
        let _ = sys::flock(&file, libc::LOCK_UN);
        result
    }

    fn init_locked(file: &File, devices: u32, path: &Path) -> Result<Registry, SharedError> {
        let err = |what: &'static str| {
            let p = path.to_path_buf();
            move |e: std::io::Error| SharedError::Registry(p, what, e.kind())
        };
        let len = file.metadata().map_err(err("stat"))?.len();
        if len == 0 {
            file.set_len(SIZE as u64).map_err(err("size"))?;
        } else if len != SIZE as u64 {
            return Err(SharedError::Format(path.to_path_buf()));
        }
        let map = Mapping::new(file, SIZE).map_err(err("map"))?;
        if map.u32_at(OFF_READY).load(Ordering::Acquire) == 0 {
            // First user (or a creator died half-way): we hold the lock, initialise.
            map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Relaxed);
            map.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
            map.u32_at(OFF_DEVICES).store(devices, Ordering::Relaxed);
            // Pairs with the Acquire load above in later processes.
            map.u32_at(OFF_READY).store(1, Ordering::Release);
        }
        if map.u64_at(OFF_MAGIC).load(Ordering::Relaxed) != MAGIC
            || map.u32_at(OFF_VERSION).load(Ordering::Relaxed) != VERSION
        {
            return Err(SharedError::Format(path.to_path_buf()));
        }
        let devices = map.u32_at(OFF_DEVICES).load(Ordering::Relaxed);
        Ok(Registry { map, devices })
    }

    fn slot(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        self.map.u64_at(HEADER + i * 8)
    }

    /// Reserves a QP number for `me`. Free slots are taken in rotating order (numbers
    /// are not reused soon after release, as on hardware); when none is free, slots of
    /// dead owners are reclaimed. `None` when every slot belongs to a live process.
    pub(crate) fn alloc(&self, me: Owner, alive: &mut dyn FnMut(Owner) -> bool) -> Option<u32> {
        let h = self.map.u64_at(OFF_HINT).fetch_add(1, Ordering::Relaxed);
        let start = (h % SLOTS as u64) as usize;
        let mine = pack(me, RESERVED);
        for pass in 0..2 {
            let mut dead: Vec<Owner> = Vec::new();
            for k in 0..SLOTS {
                let i = (start + k) % SLOTS;
                let s = self.slot(i);
                let v = s.load(Ordering::Acquire);
                let take = if v == 0 {
                    true
                } else if pass == 1 {
                    let o = owner_of(v);
                    o != me
                        && (dead.contains(&o)
                            || (!alive(o) && {
                                dead.push(o);
                                true
                            }))
                } else {
                    false
                };
                if take
                    && s.compare_exchange(v, mine, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.map
                        .u64_at(OFF_HINT)
                        .fetch_max(h + k as u64 + 1, Ordering::Relaxed);
                    return Some(FIRST_QPN + i as u32);
                }
            }
        }
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
            let s = self.slot(i);
            let v = s.load(Ordering::Acquire);
            if v != 0 && owner_of(v) == me {
                let _ = s.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// Frees every number `me` holds (at exit).
    pub(crate) fn release_all(&self, me: Owner) {
        for i in 0..SLOTS {
            let s = self.slot(i);
            let v = s.load(Ordering::Relaxed);
            if v != 0 && owner_of(v) == me {
                let _ = s.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// The owner of QP `qpn` on device `dev`, with the slot word (for [`Self::reclaim`]).
    pub(crate) fn lookup(&self, qpn: u32, dev: usize) -> Option<(Owner, u64)> {
        let v = self.slot(Self::index(qpn)?).load(Ordering::Acquire);
        (v != 0 && v & 0xff == dev as u64 + 1).then(|| (owner_of(v), v))
    }

    /// Frees `qpn` if its slot still holds `word` (an owner found dead).
    pub(crate) fn reclaim(&self, qpn: u32, word: u64) {
        if let Some(i) = Self::index(qpn) {
            let _ = self
                .slot(i)
                .compare_exchange(word, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
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

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vqp-reg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn numbers_are_unique_published_and_reclaimed() {
        let d = tmp("unique");
        let r1 = Registry::attach(&d, 2).unwrap();
        let r2 = Registry::attach(&d, 3).unwrap();
        assert_eq!(r2.devices, 2, "the first user's count is recorded");
        let a = Owner { pid: 10, token: 1 };
        let b = Owner { pid: 11, token: 2 };
        let qa = r1.alloc(a, &mut |_| true).unwrap();
        let qb = r2.alloc(b, &mut |_| true).unwrap();
        assert_ne!(qa, qb);
        assert!(qa >= FIRST_QPN && qb >= FIRST_QPN);
        assert_eq!(r2.lookup(qa, 1), None, "reserved, not yet findable");
        r1.publish(qa, a, 1);
        assert_eq!(r2.lookup(qa, 1).map(|x| x.0), Some(a));
        assert_eq!(r2.lookup(qa, 0), None, "another device");
        r2.release(qa, b);
        assert!(r2.lookup(qa, 1).is_some(), "only the owner releases");
        let (_, w) = r2.lookup(qa, 1).unwrap();
        r2.reclaim(qa, w);
        assert_eq!(r1.lookup(qa, 1), None);
        r2.publish(qb, b, 0);
        r2.release_all(b);
        assert_eq!(r1.lookup(qb, 0), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_of_another_size_is_refused() {
        let d = tmp("format");
        std::fs::write(d.join("registry"), b"garbage").unwrap();
        assert!(matches!(
            Registry::attach(&d, 2),
            Err(SharedError::Format(_))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
