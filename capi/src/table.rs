//! Handle tables: how a C handle names an object, and why a stale one is an error
//! code rather than a use-after-free.
//!
//! A handle is a 64-bit value: bits 0–23 the slot index plus one, bits 24–31 the
//! object type's tag, bits 32–63 the slot's generation when the object was put there.
//! Destroying an object empties its slot and bumps the slot's generation, so every
//! handle to it (copies included) stops matching: using one afterwards returns
//! `VQP_ERR_STALE_HANDLE`, even once the slot holds a new object. A handle of another
//! type is `VQP_ERR_WRONG_HANDLE`; zero is `VQP_ERR_NULL`.
//!
//! Each table is a fixed array of [`CAPACITY`] slots in static memory. Creating and
//! destroying take the table's mutex (set-up calls, which allocate anyway); looking a
//! handle up — every data-path call does — is an index and one compare of the whole
//! handle with the one the slot holds (two plain loads on x86-64), no lock; which
//! error a mismatch is gets worked out out of line.
//!
//! The contract that keeps a lookup sound: a handle is not destroyed while another
//! thread is inside a call on it (the header says so for each call). A stale handle
//! used *after* its destroy returned is always caught; a destroy racing a call on the
//! same handle is the caller's bug, as `ibv_destroy_qp` racing `ibv_post_send` is.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::status::{Fail, VQP_ERR_NO_MEMORY, VQP_ERR_STALE_HANDLE, VQP_ERR_WRONG_HANDLE};

/// Objects of one type alive at once, at most.
pub(crate) const CAPACITY: usize = 4096;

const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

const _: () = assert!(CAPACITY as u64 <= INDEX_MASK);

struct Slot<T> {
    /// The handle of the object in the slot, 0 when it is free. Stored with Release
    /// after `ptr`; loaded with Acquire by lookups, pairing with that store.
    handle: AtomicU64,
    /// Bumped (under the table's mutex) each time the slot is emptied.
    gen: AtomicU32,
    /// The object, or null when the slot is free.
    ptr: AtomicPtr<T>,
}

/// The slots of one object type.
pub(crate) struct Table<T> {
    tag: u8,
    lock: Mutex<()>,
    slots: [Slot<T>; CAPACITY],
}

impl<T: Send> Table<T> {
    /// An empty table whose handles carry `tag` (not zero).
    pub(crate) const fn new(tag: u8) -> Self {
        Table {
            tag,
            lock: Mutex::new(()),
            slots: [const {
                Slot {
                    handle: AtomicU64::new(0),
                    gen: AtomicU32::new(0),
                    ptr: AtomicPtr::new(ptr::null_mut()),
                }
            }; CAPACITY],
        }
    }

    /// Puts `value` in a free slot and returns its handle.
    pub(crate) fn insert(&self, value: T) -> Result<u64, Fail> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = self
            .slots
            .iter()
            .position(|s| s.ptr.load(Ordering::Relaxed).is_null())
        else {
            return Err(Fail::new(
                VQP_ERR_NO_MEMORY,
                "every handle of this type is in use (4096 at most)",
            ));
        };
        let slot = &self.slots[i];
        let gen = slot.gen.load(Ordering::Relaxed);
        let handle = u64::from(gen) << 32 | u64::from(self.tag) << INDEX_BITS | (i as u64 + 1);
        slot.ptr
            .store(Box::into_raw(Box::new(value)), Ordering::Relaxed);
        slot.handle.store(handle, Ordering::Release);
        Ok(handle)
    }

    /// The slot a handle names, if it is of this table's type.
    #[inline]
    fn slot(&self, handle: u64) -> Result<(&Slot<T>, u32), Fail> {
        let tag = (handle >> INDEX_BITS) as u8;
        if tag != self.tag {
            return Err(Fail::new(
                VQP_ERR_WRONG_HANDLE,
                "the handle is of another type (or garbage)",
            ));
        }
        let index = (handle & INDEX_MASK) as usize;
        match index.checked_sub(1).and_then(|i| self.slots.get(i)) {
            Some(s) => Ok((s, (handle >> 32) as u32)),
            None => Err(Fail::new(VQP_ERR_STALE_HANDLE, "no such handle")),
        }
    }

    /// The object `handle` names: a pointer valid until the handle is destroyed.
    ///
    /// The slot holds its object's whole handle (index, tag, generation), and no
    /// other handle ever equals it: one compare tells a live handle from every other.
    #[inline]
    pub(crate) fn get(&self, handle: u64) -> Result<*mut T, Fail> {
        let index = ((handle & INDEX_MASK) as usize).wrapping_sub(1);
        match self.slots.get(index) {
            Some(s) if s.handle.load(Ordering::Acquire) == handle => {
                Ok(s.ptr.load(Ordering::Relaxed))
            }
            _ => Err(self.refused(handle)),
        }
    }

    /// Why `get` refused `handle`.
    #[cold]
    #[inline(never)]
    fn refused(&self, handle: u64) -> Fail {
        match self.slot(handle) {
            Err(f) => f,
            Ok(_) => Fail::new(
                VQP_ERR_STALE_HANDLE,
                "the handle was destroyed (a stale handle)",
            ),
        }
    }

    /// Takes the object out of its slot; the handle and every copy of it are stale
    /// from now on.
    pub(crate) fn remove(&self, handle: u64) -> Result<Box<T>, Fail> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let p = self.get(handle)?;
        let (slot, _) = self.slot(handle)?;
        slot.gen.fetch_add(1, Ordering::Relaxed);
        slot.handle.store(0, Ordering::Release);
        slot.ptr.store(ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: `p` came from Box::into_raw in `insert` and was still in the slot;
        // the slot no longer holds it, so nothing else will free it.
        Ok(unsafe { Box::from_raw(p) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::VQP_ERR_STALE_HANDLE;

    static T: Table<u32> = Table::new(9);
    static U: Table<u32> = Table::new(10);

    #[test]
    fn stale_wrong_and_reused_handles() {
        let a = T.insert(1).unwrap();
        assert_ne!(a, 0);
        // SAFETY: `a` is live and used by this thread alone.
        assert_eq!(unsafe { *T.get(a).unwrap() }, 1);
        assert_eq!(U.get(a).unwrap_err().code, VQP_ERR_WRONG_HANDLE);
        assert_eq!(*T.remove(a).unwrap(), 1);
        assert_eq!(T.get(a).unwrap_err().code, VQP_ERR_STALE_HANDLE);
        assert_eq!(T.remove(a).unwrap_err().code, VQP_ERR_STALE_HANDLE);
        // The slot is reused with a new generation: the old handle stays stale.
        let b = T.insert(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(T.get(a).unwrap_err().code, VQP_ERR_STALE_HANDLE);
        drop(T.remove(b).unwrap());
        let bogus = u64::from(T.tag) << INDEX_BITS | (CAPACITY as u64 + 5);
        assert_eq!(T.get(bogus).unwrap_err().code, VQP_ERR_STALE_HANDLE);
    }
}
