//! The path from one of this side's QPs to a peer's QP: the peer's address for it
//! from its card, limited to the local port and device and to the peer's MTU.

use super::Settings;
use crate::card::{Card, CardError, QpAddr};
use crate::connect::{Address, Path};
use crate::enums::Mtu;
use crate::error::Result;
use crate::verbs::{DeviceAttr, PortAttr};

/// The MTU whose size in bytes is `bytes`, if it is one.
fn mtu_from_bytes(bytes: u16) -> Option<Mtu> {
    Some(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// The path from a local QP on a port `port` of a device `attr`, whose first PSN is
/// `local_psn`, to the peer QP `remote` of `peer`'s card, limited to the local port
/// and device and the peer's MTU; by GID from local GID index `gid_index` (the
/// device's, chosen when the endpoint was made), else by LID.
pub(super) fn path_to(
    s: &Settings,
    gid_index: Option<u8>,
    port: &PortAttr,
    attr: &DeviceAttr,
    peer: &Card,
    remote: QpAddr,
    local_psn: u32,
) -> Result<Path> {
    let theirs = peer.port_of(&remote).ok_or(CardError::UnknownPort {
        port: remote.port,
        ports: peer.ports.len(),
    })?;
    let address = match gid_index {
        Some(i) => Address::gid(theirs.gid, i),
        None => Address::lid(theirs.lid),
    };
    let mut path =
        Path::new(s.port, address, remote.qpn, local_psn, remote.psn).limit_to(port, attr);
    if let Some(mtu) = mtu_from_bytes(theirs.mtu) {
        path.mtu = path.mtu.min(mtu);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus_are_known_by_their_size() {
        assert_eq!(mtu_from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(mtu_from_bytes(1500), None);
    }
}
