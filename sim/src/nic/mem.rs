//! The memory registry: regions, their keys and access rights, and the checks every
//! operation makes against them.

use std::collections::HashMap;

use super::dma::SpanId;
use super::SimError;

/// Memory access rights, with libibverbs' `ibv_access_flags` bits.
///
/// Local reads are always allowed; everything else must be granted. As in verbs,
/// remote write or remote atomic access requires local write as well.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    /// No right beyond local reads.
    pub const NONE: Self = Self(0);
    /// The NIC may write the region on behalf of the local QP (receives, read and
    /// atomic results).
    pub const LOCAL_WRITE: Self = Self(1);
    /// A peer may RDMA_WRITE into the region.
    pub const REMOTE_WRITE: Self = Self(2);
    /// A peer may RDMA_READ from the region.
    pub const REMOTE_READ: Self = Self(4);
    /// A peer may perform atomics on the region.
    pub const REMOTE_ATOMIC: Self = Self(8);
    /// Every right above.
    pub const ALL: Self = Self(15);

    /// True when every bit of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Refuses combinations verbs refuses (remote write or atomic without local write)
    /// and unknown bits.
    pub(crate) fn validate(self) -> Result<(), SimError> {
        let needs_local = Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0;
        if self.0 & !Self::ALL.0 != 0
            || (self.0 & needs_local != 0 && !self.contains(Self::LOCAL_WRITE))
        {
            return Err(SimError::InvalidAccess(self));
        }
        Ok(())
    }
}

impl core::ops::BitOr for Access {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A registered memory region: valid on one device only.
///
/// `lkey` and `rkey` differ (a request that confuses them fails as it would on a NIC
/// that gives distinct keys), and every key is unique across the whole NIC, so a key
/// used on the wrong device is never mistaken for another region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mr {
    /// The device the region is registered on.
    pub device: usize,
    /// Key for local access (send WQE and receive buffers).
    pub lkey: u32,
    /// Key a peer uses for RDMA and atomics.
    pub rkey: u32,
    /// First byte's address.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Rights granted.
    pub access: Access,
}

impl Mr {
    /// The address `offset` bytes into the region (not bounds-checked: a test may want
    /// an address outside it).
    pub const fn at(&self, offset: u64) -> u64 {
        self.addr.wrapping_add(offset)
    }
}

/// Why a key check failed; the engine turns it into a completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyFault {
    /// No region with this key on this device.
    BadKey,
    /// The range is not inside the region.
    Bounds,
    /// The region does not grant the right.
    Access,
}

#[derive(Debug)]
struct Region {
    mr: Mr,
    span: Option<SpanId>,
}

/// All regions of the NIC, found by key.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    regions: Vec<Option<Region>>,
    by_lkey: HashMap<u32, usize>,
    by_rkey: HashMap<u32, usize>,
}

impl Registry {
    /// Records a region and gives it fresh keys.
    pub(crate) fn insert(
        &mut self,
        device: usize,
        addr: u64,
        len: usize,
        access: Access,
        span: Option<SpanId>,
    ) -> Mr {
        let idx = self.regions.len();
        // Keys: a recognisable high byte, the region index, and the low bit telling
        // lkey (0) from rkey (1).
        let lkey = 0x5100_0000 | ((idx as u32 & 0x007F_FFFF) << 1);
        let rkey = lkey | 1;
        let mr = Mr {
            device,
            lkey,
            rkey,
            addr,
            len,
            access,
        };
        self.regions.push(Some(Region { mr, span }));
        self.by_lkey.insert(lkey, idx);
        self.by_rkey.insert(rkey, idx);
        mr
    }

    /// Forgets a region; returns its raw span, if it had one.
    pub(crate) fn remove(&mut self, mr: &Mr) -> Result<Option<SpanId>, SimError> {
        let idx = *self.by_lkey.get(&mr.lkey).ok_or(SimError::UnknownMr)?;
        match &self.regions[idx] {
            Some(r) if r.mr == *mr => {}
            _ => return Err(SimError::UnknownMr),
        }
        let r = self.regions[idx].take().ok_or(SimError::UnknownMr)?;
        self.by_lkey.remove(&mr.lkey);
        self.by_rkey.remove(&mr.rkey);
        Ok(r.span)
    }

    /// Checks a local access of `[addr, addr + len)` on `device` with `lkey`.
    pub(crate) fn check_local(
        &self,
        device: usize,
        lkey: u32,
        addr: u64,
        len: usize,
        need: Access,
    ) -> Result<(), KeyFault> {
        Self::check(
            self.by_lkey.get(&lkey),
            &self.regions,
            device,
            addr,
            len,
            need,
        )
    }

    /// Checks a remote access of `[addr, addr + len)` on `device` with `rkey`.
    pub(crate) fn check_remote(
        &self,
        device: usize,
        rkey: u32,
        addr: u64,
        len: usize,
        need: Access,
    ) -> Result<(), KeyFault> {
        Self::check(
            self.by_rkey.get(&rkey),
            &self.regions,
            device,
            addr,
            len,
            need,
        )
    }

    fn check(
        idx: Option<&usize>,
        regions: &[Option<Region>],
        device: usize,
        addr: u64,
        len: usize,
        need: Access,
    ) -> Result<(), KeyFault> {
        let r = idx
            .and_then(|&i| regions[i].as_ref())
            .filter(|r| r.mr.device == device)
            .ok_or(KeyFault::BadKey)?;
        let end = addr.checked_add(len as u64).ok_or(KeyFault::Bounds)?;
        if addr < r.mr.addr || end > r.mr.addr + r.mr.len as u64 {
            return Err(KeyFault::Bounds);
        }
        if !r.mr.access.contains(need) {
            return Err(KeyFault::Access);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_device_bound() {
        let mut reg = Registry::default();
        let a = reg.insert(0, 0x1000, 64, Access::ALL, None);
        let b = reg.insert(1, 0x1000, 64, Access::ALL, None);
        let keys = [a.lkey, a.rkey, b.lkey, b.rkey];
        for (i, k) in keys.iter().enumerate() {
            assert!(!keys[i + 1..].contains(k));
        }
        assert_eq!(reg.check_local(0, a.lkey, 0x1000, 64, Access::NONE), Ok(()));
        assert_eq!(
            reg.check_local(1, a.lkey, 0x1000, 64, Access::NONE),
            Err(KeyFault::BadKey)
        );
        assert_eq!(
            reg.check_remote(0, a.lkey, 0x1000, 8, Access::NONE),
            Err(KeyFault::BadKey)
        );
    }

    #[test]
    fn bounds_and_rights() {
        let mut reg = Registry::default();
        let a = reg.insert(
            0,
            0x1000,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_READ,
            None,
        );
        let check = |addr, len, need| reg.check_remote(0, a.rkey, addr, len, need);
        assert_eq!(check(0x1000, 64, Access::REMOTE_READ), Ok(()));
        assert_eq!(check(0x0fff, 2, Access::REMOTE_READ), Err(KeyFault::Bounds));
        assert_eq!(check(0x1039, 8, Access::REMOTE_READ), Err(KeyFault::Bounds));
        assert_eq!(check(u64::MAX, 2, Access::NONE), Err(KeyFault::Bounds));
        assert_eq!(
            check(0x1000, 8, Access::REMOTE_WRITE),
            Err(KeyFault::Access)
        );
    }

    #[test]
    fn removed_region_fails_its_keys() {
        let mut reg = Registry::default();
        let a = reg.insert(0, 0x1000, 64, Access::ALL, None);
        assert_eq!(reg.remove(&a), Ok(None));
        assert_eq!(reg.remove(&a), Err(SimError::UnknownMr));
        assert_eq!(
            reg.check_local(0, a.lkey, 0x1000, 1, Access::NONE),
            Err(KeyFault::BadKey)
        );
    }

    #[test]
    fn access_validation_matches_verbs() {
        assert!(Access::REMOTE_READ.validate().is_ok());
        assert!(Access::REMOTE_WRITE.validate().is_err());
        assert!(Access::REMOTE_ATOMIC.validate().is_err());
        assert!((Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .validate()
            .is_ok());
        assert!(Access(16).validate().is_err());
    }
}
