//! What a registered memory region is ([`MrInfo`]): plain data, kept by the key table
//! (`mem`) and published to other processes by the shared namespace's exports, so it
//! lives under both.

/// A registered memory region as the table keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MrInfo {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// `IBV_ACCESS_*` bits.
    pub access: u32,
    /// Device index the region was registered on.
    pub dev: usize,
    /// Protection domain id.
    pub pd: u32,
    /// A type 2 memory window's QP number: only requests arriving at that QP may use
    /// its rkey (IBA Vol. 1 §10.6.7.2, type 2B windows). 0 for a region or a type 1
    /// window, which any QP of the PD may use.
    pub qpn: u32,
}

impl MrInfo {
    /// Whether the range `[addr, addr + len)` lies inside the region.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        match addr.checked_add(len) {
            Some(end) => addr >= self.addr && end <= self.addr.saturating_add(self.len),
            None => false,
        }
    }

    /// Whether the region is on-demand paging (`IBV_ACCESS_ON_DEMAND`): its pages
    /// need not be mapped while it is registered.
    pub(crate) fn on_demand(&self) -> bool {
        self.access & vqp_sys::IBV_ACCESS_ON_DEMAND != 0
    }
}
