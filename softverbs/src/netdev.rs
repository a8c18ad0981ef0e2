//! A soft device bound to a network interface: its RoCE v2 GID table, the IB MTU its
//! interface's MTU allows, and the interface's operational state.
//!
//! # The GID table
//! The table is made as the kernel makes a RoCE port's table (`roce_gid_mgmt.c`) for a
//! device that supports RoCE v2 only, as `rdma_rxe` does (its port's core capability is
//! `RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP`, so `ib_cache_gid_add` writes one v2 entry per
//! address): index 0 is the default GID, `fe80::` and the interface's EUI-64 from its
//! MAC (`make_default_gid`, `addrconf_ifid_eui48`: the MAC with `ff:fe` in the middle
//! and the universal/local bit flipped); then each IPv4 address as the IPv4-mapped
//! `::ffff:a.b.c.d`, then each IPv6 address, in the order the kernel lists them, an
//! address already in the table (the link-local one equal to the default GID) not
//! repeated. A ConnectX (mlx5) holds a RoCE v1 entry beside each v2 one; we hold no v1
//! entries, so the first IPv4 address is at index 1 on every bound device.
//!
//! The table is read once, when the provider starts; the port's state and MTU follow
//! the interface (see [`Netdev::refresh`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::os::{self, IfAddr};

/// `enum ibv_mtu` values.
const IBV_MTU_256: u32 = 1;
const IBV_MTU_4096: u32 = 5;

/// A binding of a device to an interface that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NetdevError {
    /// No interface of that name in the process's network namespace.
    NoSuchInterface(String, i32),
    /// The interface has no IPv4 or IPv6 address.
    NoAddress(String),
}

impl fmt::Display for NetdevError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetdevError::NoSuchInterface(n, e) => write!(
                f,
                "interface {n:?}: {}",
                std::io::Error::from_raw_os_error(*e)
            ),
            NetdevError::NoAddress(n) => write!(f, "interface {n:?} has no IP address"),
        }
    }
}

impl std::error::Error for NetdevError {}

/// The interface a device is bound to, as the port presents it.
#[derive(Debug)]
pub(crate) struct Netdev {
    /// The interface's name.
    pub name: String,
    /// Its index (`ndev_ifindex` of the GID entries).
    pub ifindex: u32,
    /// The RoCE v2 GIDs, index order (never empty: index 0 is the default GID).
    pub gids: Vec<[u8; 16]>,
    /// The interface's own addresses (the GIDs are these and the default GID, which
    /// may not be one).
    pub addrs: Vec<std::net::IpAddr>,
    /// The port's active MTU (`enum ibv_mtu`), from the interface's MTU.
    mtu: AtomicU32,
    /// Whether the interface was operationally up when last looked at.
    up: AtomicBool,
}

impl Netdev {
    /// Reads interface `name`: its addresses, MTU and state.
    pub fn open(name: &str) -> Result<Netdev, NetdevError> {
        let missing = |e: std::io::Error| {
            NetdevError::NoSuchInterface(name.into(), e.raw_os_error().unwrap_or(libc::ENODEV))
        };
        let (ifindex, mac) = os::if_index_mac(name).map_err(missing)?;
        let (up, mtu) = os::if_state(name).map_err(missing)?;
        let addrs = os::if_addrs(name).map_err(missing)?;
        if addrs.is_empty() {
            return Err(NetdevError::NoAddress(name.into()));
        }
        Ok(Netdev {
            name: name.into(),
            ifindex,
            gids: gid_table(&mac, &addrs),
            addrs: addrs
                .iter()
                .map(|a| match *a {
                    IfAddr::V4(b) => std::net::IpAddr::from(b),
                    IfAddr::V6(b) => std::net::IpAddr::from(b),
                })
                .collect(),
            mtu: AtomicU32::new(ib_mtu(mtu)),
            up: AtomicBool::new(up),
        })
    }

    /// The port's active MTU (`enum ibv_mtu`).
    pub fn mtu(&self) -> u32 {
        self.mtu.load(Ordering::Relaxed)
    }

    /// Whether the interface was up when last looked at.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Looks at the interface again (`SIOCGIFFLAGS`, `SIOCGIFMTU`: two ioctls): updates
    /// the MTU and returns the new state when it changed. An interface that vanished
    /// counts as down.
    pub fn refresh(&self) -> Option<bool> {
        let (up, mtu) = os::if_state(&self.name).unwrap_or((false, 0));
        if mtu != 0 {
            self.mtu.store(ib_mtu(mtu), Ordering::Relaxed);
        }
        (self.up.swap(up, Ordering::AcqRel) != up).then_some(up)
    }
}

/// The GID table of an interface with hardware address `mac` and addresses `addrs`
/// (see the module documentation).
pub(crate) fn gid_table(mac: &[u8; 6], addrs: &[IfAddr]) -> Vec<[u8; 16]> {
    let mut t = vec![default_gid(mac)];
    let v4 = addrs.iter().filter_map(|a| match a {
        IfAddr::V4(b) => Some(v4_mapped(*b)),
        IfAddr::V6(_) => None,
    });
    let v6 = addrs.iter().filter_map(|a| match a {
        IfAddr::V6(b) => Some(*b),
        IfAddr::V4(_) => None,
    });
    for g in v4.chain(v6) {
        if !t.contains(&g) {
            t.push(g);
        }
    }
    t
}

/// `fe80::` and the EUI-64 of `mac` (the kernel's `addrconf_ifid_eui48`).
pub(crate) fn default_gid(mac: &[u8; 6]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..11].copy_from_slice(&mac[..3]);
    g[11] = 0xff;
    g[12] = 0xfe;
    g[13..].copy_from_slice(&mac[3..]);
    g[8] ^= 0x02;
    g
}

/// `::ffff:a.b.c.d`.
pub(crate) fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// The largest IB MTU (`enum ibv_mtu`) whose packets fit an Ethernet MTU of `mtu`
/// bytes, as the kernel's `iboe_get_mtu` computes it: the RoCE headers (GRH 40, UDP 8,
/// BTH 12, XRC 4, AtomicETH 28, ICRC 4: 96 bytes) are taken off first. Where nothing
/// fits (under 352 bytes, where the kernel answers 0) we report 256.
pub(crate) fn ib_mtu(mtu: u32) -> u32 {
    let room = mtu.saturating_sub(96);
    (IBV_MTU_256..=IBV_MTU_4096)
        .rev()
        .find(|&m| room >= 128 << m)
        .unwrap_or(IBV_MTU_256)
}

/// Parses the bindings of [`crate::config::ENV_NETDEV`]: `soft0=eth1,soft1=eth2` (or
/// device indices, `0=eth1`); `None` when a part does not parse.
pub(crate) fn parse_bindings(s: &str) -> Option<Vec<(usize, String)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (dev, ifname) = p.trim().split_once('=')?;
            let dev = dev.trim();
            let index = dev.strip_prefix("soft").unwrap_or(dev).parse().ok()?;
            let ifname = ifname.trim();
            let valid = !ifname.is_empty()
                && ifname.len() < libc::IFNAMSIZ
                && !ifname.contains(['/', ' ', '\0']);
            valid.then(|| (index, ifname.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_is_the_kernels_iboe_get_mtu() {
        // 1500 - 96 = 1404: 1024 fits, 2048 does not.
        assert_eq!(ib_mtu(1500), 3);
        assert_eq!(ib_mtu(9000), 5);
        assert_eq!(ib_mtu(4096 + 96), 5);
        assert_eq!(ib_mtu(4096 + 95), 4);
        assert_eq!(ib_mtu(2048 + 96), 4);
        assert_eq!(ib_mtu(256 + 96), 1);
        assert_eq!(ib_mtu(100), 1);
    }

    #[test]
    fn the_table_is_the_default_gid_then_v4_mapped_then_v6() {
        let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        let ll = default_gid(&mac);
        assert_eq!(
            ll,
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
        );
        let v6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let t = gid_table(
            &mac,
            &[IfAddr::V6(ll), IfAddr::V6(v6), IfAddr::V4([192, 0, 2, 1])],
        );
        assert_eq!(
            t,
            vec![
                ll,
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1],
                v6
            ]
        );
    }

    #[test]
    fn bindings_parse() {
        assert_eq!(
            parse_bindings("soft0=eth1, soft1=veth-b"),
            Some(vec![(0, "eth1".into()), (1, "veth-b".into())])
        );
        assert_eq!(parse_bindings("2=lo"), Some(vec![(2, "lo".into())]));
        assert_eq!(parse_bindings("soft0"), None);
        assert_eq!(parse_bindings("softx=eth0"), None);
        assert_eq!(parse_bindings("soft0="), None);
        assert_eq!(parse_bindings("soft0=a/b"), None);
    }
}
