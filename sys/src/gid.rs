//! [`Gid`]: a port's 128-bit global identifier as a plain value, beside the C union
//! [`ibv_gid`] that the library reads and writes.

use core::fmt;

use crate::ibv_gid;

/// A 128-bit global identifier, in network byte order as on the wire.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Gid {
    raw: [u8; 16],
}

impl Gid {
    /// Wraps 16 bytes in network order.
    pub const fn from_bytes(raw: [u8; 16]) -> Self {
        Gid { raw }
    }

    /// The 16 bytes in network order.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.raw
    }

    /// The subnet prefix (upper 64 bits) in host order.
    pub fn subnet_prefix(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.raw[..8]);
        u64::from_be_bytes(b)
    }

    /// The interface id (lower 64 bits) in host order.
    pub fn interface_id(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.raw[8..]);
        u64::from_be_bytes(b)
    }

    /// Whether all bytes are zero (an empty GID table slot).
    pub fn is_zero(&self) -> bool {
        self.raw == [0; 16]
    }

    /// The C union.
    pub fn to_sys(self) -> ibv_gid {
        ibv_gid { raw: self.raw }
    }

    /// From the C union.
    pub fn from_sys(gid: &ibv_gid) -> Self {
        // SAFETY: both members of `ibv_gid` cover the same 16 bytes, and every bit
        // pattern is a valid `[u8; 16]`.
        let raw = unsafe { gid.raw };
        Gid { raw }
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Self {
        Gid { raw }
    }
}

impl fmt::Display for Gid {
    /// Eight colon-separated groups of four hex digits, as `show_gids` prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.raw.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::string::ToString;

    use super::*;

    #[test]
    fn gid_views() {
        let mut raw = [0u8; 16];
        raw[0] = 0xfe;
        raw[1] = 0x80;
        raw[15] = 0x01;
        let gid = Gid::from_bytes(raw);
        assert_eq!(gid.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(gid.interface_id(), 1);
        assert_eq!(gid.to_string(), "fe80:0000:0000:0000:0000:0000:0000:0001");
        assert_eq!(Gid::from_sys(&gid.to_sys()), gid);
        assert!(!gid.is_zero());
        assert!(Gid::default().is_zero());
    }
}
