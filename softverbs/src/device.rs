//! A software device as the engine moves data through it: `soft<index>`, its one
//! port's addresses, its link (state and rate) and, on a RoCE port, its network
//! interface.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::netdev::{Netdev, NetdevError};

/// One software device: `soft<index>`, one port.
#[derive(Debug)]
pub(crate) struct Device {
    /// Position in the device list.
    pub index: usize,
    /// `soft<index>`.
    pub name: String,
    /// Node GUID (host order).
    pub guid: u64,
    /// The port's LID (`index + 1`).
    pub lid: u16,
    /// The port's only GID (index 0): the link-local prefix and the GUID.
    pub gid: [u8; 16],
    /// Port state: active or down.
    pub link_up: AtomicBool,
    /// How many times the port went down: its epoch. What a requester on another
    /// machine sent before the last time and arrives after is what a network would
    /// have lost (`engine::route`'s `ucx`).
    flaps: AtomicU32,
    /// The port's rate (see `link`).
    pub link: crate::link::Link,
    /// The network interface of a RoCE port (`VQP_SOFT_NETDEV`): `None` for an
    /// InfiniBand port, `Some(Err)` for a binding that could not be made (the device
    /// then cannot be opened).
    pub netdev: Option<Result<Netdev, NetdevError>>,
}

impl Device {
    pub(crate) fn new(index: usize) -> Device {
        let guid = 0x0200_5eff_fe00_0000u64 | index as u64;
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[8..].copy_from_slice(&guid.to_be_bytes());
        Device {
            index,
            name: format!("soft{index}"),
            guid,
            lid: (index + 1) as u16,
            gid,
            link_up: AtomicBool::new(true),
            flaps: AtomicU32::new(0),
            link: crate::link::Link::default(),
            netdev: None,
        }
    }

    /// Whether the port is active: its link is up (see [`crate::set_link`]) and, on a
    /// RoCE port, its interface too.
    pub fn is_up(&self) -> bool {
        self.link_up.load(Ordering::Acquire) && self.roce().map_or(true, Netdev::is_up)
    }

    /// The port went down (its link or its interface): a new epoch.
    pub(crate) fn note_down(&self) {
        self.flaps.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times the port went down.
    pub fn epoch(&self) -> u32 {
        self.flaps.load(Ordering::Acquire)
    }

    /// The interface of a RoCE port.
    pub fn roce(&self) -> Option<&Netdev> {
        self.netdev.as_ref().and_then(|r| r.as_ref().ok())
    }

    /// Whether the port is a RoCE port (bound, even if the binding failed): addresses
    /// need a GRH.
    pub fn is_roce(&self) -> bool {
        self.netdev.is_some()
    }

    /// The port's GID table: an InfiniBand port's one GID, a RoCE port's RoCE v2 GIDs
    /// (none when its binding failed).
    pub fn gids(&self) -> &[[u8; 16]] {
        match &self.netdev {
            None => std::slice::from_ref(&self.gid),
            Some(Ok(n)) => &n.gids,
            Some(Err(_)) => &[],
        }
    }

    /// The port's LID: 0 on a RoCE port, as on Ethernet.
    pub fn port_lid(&self) -> u16 {
        if self.is_roce() {
            0
        } else {
            self.lid
        }
    }

    /// The port's active MTU (`enum ibv_mtu`): 4096 on InfiniBand, from the interface's
    /// MTU on RoCE.
    pub fn active_mtu(&self) -> u32 {
        self.roce().map_or(vqp_sys::IBV_MTU_4096, Netdev::mtu)
    }
}
