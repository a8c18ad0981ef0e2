//! The key table: a slot per region (or memory window), keys as slot and generation,
//! and the checks that make a [`Span`] from a key.

use super::copy::{mapped, Span};
use super::{KeyError, MrInfo};
use window::Window;

mod window;

pub(crate) use window::BindRequest;

/// The key table of every registered region in the process. A key is
/// `(slot + 1) << 8 | generation`: lookups are an index, and a stale key (deregistered,
/// slot reused) fails by its generation byte. `lkey` and `rkey` are the same value.
///
/// Memory windows take slots of the same table, so that an rkey names a region or a
/// window and the responder's checks (here and across processes, `shared::exports`)
/// are the same for both. A window's slot holds no region (`info` is `None`, so its
/// key never passes as an lkey); its binding carries the key and range it grants.
#[derive(Default)]
pub(crate) struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots holding windows (to unbind those of a region being deregistered).
    windows: Vec<u32>,
}

struct Slot {
    gen: u8,
    info: Option<MrInfo>,
    /// Added (wrapping) to an address of the region's `[addr, addr + len)` to find
    /// its byte in the process: 0 for an ordinary region; for a zero-based one
    /// (`IBV_ACCESS_ZERO_BASED`: device memory) the host address of its first byte.
    shift: u64,
    window: Option<Box<Window>>,
}

/// The largest slot index a key can carry (24 bits).
const MAX_SLOTS: usize = (1 << 24) - 1;

impl MrTable {
    /// Takes a free slot and gives it a new generation; `None` when the table is full.
    pub(super) fn take_slot(&mut self) -> Option<usize> {
        let slot = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return None;
                }
                self.slots.push(Slot {
                    gen: 0,
                    info: None,
                    shift: 0,
                    window: None,
                });
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[slot];
        s.gen = s.gen.wrapping_add(1);
        Some(slot)
    }

    pub(super) fn key_of(&self, slot: usize) -> u32 {
        (((slot + 1) as u32) << 8) | u32::from(self.slots[slot].gen)
    }

    /// Registers a region; `None` when the table is full.
    pub(crate) fn register(&mut self, info: MrInfo) -> Option<u32> {
        self.register_at(info, info.addr)
    }

    /// Registers a region whose addresses `[info.addr, info.addr + info.len)` name the
    /// bytes from `host` on (a zero-based region: `info.addr` 0). Such a region is not
    /// among [`MrTable::live`]'s, which are exported for other processes to copy into
    /// directly (its addresses are not the process's): their requests to it come through
    /// the responder. `None` when the table is full.
    pub(crate) fn register_at(&mut self, info: MrInfo, host: u64) -> Option<u32> {
        let slot = self.take_slot()?;
        let s = &mut self.slots[slot];
        s.info = Some(info);
        s.shift = host.wrapping_sub(info.addr);
        Some(self.key_of(slot))
    }

    /// Removes a region; false when the key is not live.
    pub(crate) fn deregister(&mut self, key: u32) -> bool {
        let Some(i) = self.index(key) else {
            return false;
        };
        self.slots[i].info = None;
        self.free.push(i as u32);
        true
    }

    /// Replaces the region of a live key, which stays the same (`ibv_rereg_mr`); false
    /// when the key is not live.
    pub(crate) fn update(&mut self, key: u32, info: MrInfo) -> bool {
        let Some(i) = self.index(key) else {
            return false;
        };
        self.slots[i].info = Some(info);
        true
    }

    pub(super) fn index(&self, key: u32) -> Option<usize> {
        let slot = (key >> 8).checked_sub(1)? as usize;
        let s = self.slots.get(slot)?;
        (s.gen == key as u8 && s.info.is_some()).then_some(slot)
    }

    /// The live region of `key`.
    pub(crate) fn get(&self, key: u32) -> Option<&MrInfo> {
        self.index(key).and_then(|i| self.slots[i].info.as_ref())
    }

    /// The live region of `key` and its shift (see [`MrTable::register_at`]).
    pub(super) fn region(&self, key: u32) -> Option<(&MrInfo, u64)> {
        let s = &self.slots[self.index(key)?];
        Some((s.info.as_ref()?, s.shift))
    }

    /// Every live region, and every bound window, with its key; not the zero-based
    /// regions ([`MrTable::register_at`]).
    pub(crate) fn live(&self) -> Vec<(u32, MrInfo)> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(info) = s.info.filter(|_| s.shift == 0) {
                out.push(((((i + 1) as u32) << 8) | u32::from(s.gen), info));
            }
            if let Some(w) = &s.window {
                let b = w.bound.lock().unwrap_or_else(|e| e.into_inner());
                out.extend(b.map(|b| (b.key, b.info)));
            }
        }
        out
    }

    /// Number of live regions.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.info.is_some()).count()
    }

    /// Checks `[addr, addr + len)` against the region of lkey `key` and returns a span
    /// over it. `need` are the `IBV_ACCESS_*` bits the operation needs (0 for a local
    /// read). A window's key is no lkey (IBA Vol. 1 §10.6.7: windows grant remote
    /// access only): `BadKey`.
    pub(crate) fn span(
        &self,
        key: u32,
        dev: usize,
        pd: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Span<'_>, KeyError> {
        let (mr, shift) = self.region(key).ok_or(KeyError::BadKey)?;
        check(mr, shift, dev, pd, addr, len, need)
    }

    /// Checks a remote request's `[addr, addr + len)` against rkey `key`, which names
    /// a region or a bound window, at responder QP `qpn` (a type 2 window answers only
    /// through its own QP); as [`MrTable::span`] otherwise.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remote_span(
        &self,
        key: u32,
        dev: usize,
        pd: u32,
        qpn: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Span<'_>, KeyError> {
        if let Some((mr, shift)) = self.region(key) {
            return check(mr, shift, dev, pd, addr, len, need);
        }
        let win = self.window(key >> 8).ok_or(KeyError::BadKey)?;
        let bound = *win.bound.lock().unwrap_or_else(|e| e.into_inner());
        let b = bound.filter(|b| b.key == key).ok_or(KeyError::BadKey)?;
        if b.info.qpn != 0 && b.info.qpn != qpn {
            return Err(KeyError::BadKey);
        }
        check(&b.info, 0, dev, pd, addr, len, need)
    }
}

/// The checks of a key's region (or window) `mr` against an access; `shift` takes the
/// region's addresses to the process's (0 but for a zero-based region).
///
/// A window's span is valid as long as its region is registered: the window lies
/// inside the region (checked when it was bound), and the region cannot be
/// deregistered while the table's read lock is held (deregistration unbinds it
/// first). An on-demand region's range must be mapped in the process now
/// ([`mapped`]): a NIC faults the pages in, or fails the access when there is
/// nothing to fault in; its span is marked, so that the copies reach it only through
/// `copy`'s `guarded_copy`.
fn check<'t>(
    mr: &MrInfo,
    shift: u64,
    dev: usize,
    pd: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<Span<'t>, KeyError> {
    if mr.dev != dev {
        return Err(KeyError::BadKey);
    }
    if mr.pd != pd {
        return Err(KeyError::WrongPd);
    }
    if !mr.contains(addr, len) {
        return Err(KeyError::Bounds);
    }
    if mr.access & need != need {
        return Err(KeyError::Access);
    }
    let addr = addr.wrapping_add(shift);
    let odp = mr.on_demand();
    if odp && !mapped(addr, len) {
        return Err(KeyError::NotMapped);
    }
    Ok(Span::checked(addr, len, odp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::test_region as info;

    #[test]
    fn a_zero_based_region_maps_from_0_and_is_not_among_the_live_ones() {
        let mut host = vec![0u8; 64];
        let base = host.as_mut_ptr() as u64;
        let mut t = MrTable::default();
        let plain = t.register(info(&mut host, 1)).unwrap();
        let zero = MrInfo {
            addr: 0,
            len: 32,
            ..info(&mut host, 1)
        };
        let k = t.register_at(zero, base + 16).unwrap();
        assert_eq!(t.span(k, 0, 1, 8, 8, 1).unwrap().range(), (base + 24, 8));
        assert_eq!(t.span(k, 0, 1, 30, 4, 0).unwrap_err(), KeyError::Bounds);
        assert_eq!(t.span(plain, 0, 1, base, 8, 0).unwrap().range(), (base, 8));
        let live: Vec<u32> = t.live().into_iter().map(|(key, _)| key).collect();
        assert_eq!(live, [plain]);
        // A slot reused by an ordinary region maps one to one again.
        assert!(t.deregister(k));
        let k2 = t.register(info(&mut host, 1)).unwrap();
        assert_eq!(
            t.span(k2, 0, 1, base + 8, 8, 0).unwrap().range(),
            (base + 8, 8)
        );
    }

    #[test]
    fn update_replaces_a_live_region_under_the_same_key() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 32];
        let mut t = MrTable::default();
        let k = t.register(info(&mut a, 1)).unwrap();
        assert!(t.update(k, info(&mut b, 3)));
        assert_eq!(t.get(k), Some(&info(&mut b, 3)));
        let base = a.as_ptr() as u64;
        assert_eq!(t.span(k, 0, 1, base, 8, 0).unwrap_err(), KeyError::Bounds);
        assert!(t.deregister(k));
        assert!(!t.update(k, info(&mut a, 1)), "a dead key is not revived");
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn keys_check_bounds_access_pd_and_staleness() {
        let mut buf = vec![0u8; 64];
        let mut t = MrTable::default();
        let k = t.register(info(&mut buf, 1)).unwrap();
        let base = buf.as_ptr() as u64;
        assert!(t.span(k, 0, 1, base, 64, 1).is_ok());
        assert_eq!(
            t.span(k, 0, 1, base + 1, 64, 0).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(
            t.span(k, 0, 1, u64::MAX, 2, 0).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(t.span(k, 0, 1, base, 8, 2).unwrap_err(), KeyError::Access);
        assert_eq!(t.span(k, 0, 2, base, 8, 0).unwrap_err(), KeyError::WrongPd);
        assert_eq!(t.span(k, 1, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert_eq!(t.span(0, 0, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert!(t.deregister(k));
        assert!(!t.deregister(k));
        let k2 = t.register(info(&mut buf, 1)).unwrap();
        assert_ne!(k, k2, "a reused slot gets a new generation");
        assert_eq!(t.span(k, 0, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn on_demand_ranges_must_be_mapped_at_access_time() {
        let mut buf = vec![0u8; 64];
        let mut t = MrTable::default();
        let odp = vqp_sys::IBV_ACCESS_ON_DEMAND | vqp_sys::IBV_ACCESS_LOCAL_WRITE;
        let implicit = MrInfo {
            addr: 0,
            len: u64::MAX,
            access: odp,
            dev: 0,
            pd: 1,
            qpn: 0,
        };
        let k = t.register(implicit).unwrap();
        let base = buf.as_mut_ptr() as u64;
        assert!(t.span(k, 0, 1, base, 64, 0).is_ok());
        // Page 0 is never mapped.
        assert_eq!(t.span(k, 0, 1, 16, 8, 0).unwrap_err(), KeyError::NotMapped);
        assert!(mapped(base, 64));
        assert!(!mapped(0, 4096));
    }
}
