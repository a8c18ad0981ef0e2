//! The physical `wr_id`s a virtual QP posts, so that a completion maps to its owner
//! in O(1): no map, no search.
//!
//! ```text
//!  63      56 55     48 47  45 44                                  0
//! +----------+---------+------+-------------------------------------+
//! |   tag    |  lane   | kind |            slot id (mod 2^45)       |
//! +----------+---------+------+-------------------------------------+
//! ```
//! `tag` names the virtual QP within its [`VirtualCq`](crate::VirtualCq), `lane` the
//! physical QP within the virtual QP ([`NOTIFY_LANE`] for the SPRAY notify QP), `kind`
//! what the WQE is, and the slot id the virtual request (a monotonically increasing
//! counter whose low bits index the slot ring).

/// Lane number of the SPRAY notify QP.
pub const NOTIFY_LANE: u8 = 0xff;
/// Slot ids are carried modulo 2^45.
pub const ID_BITS: u32 = 45;
/// Mask of the slot id field.
pub const ID_MASK: u64 = (1 << ID_BITS) - 1;

/// What a physical WQE is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A send-side WQE of a virtual send request (fragment, pass-through or notify).
    Send = 0,
    /// A zero-length DQPLB receive, kept posted on every data QP.
    SeqRecv = 1,
    /// A receive posted for one virtual receive request (notification or data).
    Recv = 2,
}

/// A decoded physical `wr_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrId {
    /// The virtual QP within its virtual CQ.
    pub tag: u8,
    /// The physical QP within the virtual QP.
    pub lane: u8,
    /// What the WQE is.
    pub kind: Kind,
    /// The virtual request's slot id, modulo 2^45.
    pub id: u64,
}

impl WrId {
    /// Pack into a `wr_id`.
    #[inline]
    pub const fn encode(self) -> u64 {
        ((self.tag as u64) << 56)
            | ((self.lane as u64) << 48)
            | ((self.kind as u64) << ID_BITS)
            | (self.id & ID_MASK)
    }

    /// Unpack a `wr_id`; `None` for a kind we never post.
    #[inline]
    pub const fn decode(raw: u64) -> Option<Self> {
        let kind = match (raw >> ID_BITS) & 7 {
            0 => Kind::Send,
            1 => Kind::SeqRecv,
            2 => Kind::Recv,
            _ => return None,
        };
        Some(Self {
            tag: (raw >> 56) as u8,
            lane: (raw >> 48) as u8,
            kind,
            id: raw & ID_MASK,
        })
    }
}

/// True when slot id `a` (mod 2^45) comes before `b` (mod 2^45), in serial-number
/// order: valid while fewer than 2^44 ids are in flight.
#[inline]
pub const fn id_before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a) & ID_MASK;
    d != 0 && d < (1 << (ID_BITS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let w = WrId {
            tag: 7,
            lane: NOTIFY_LANE,
            kind: Kind::Recv,
            id: ID_MASK,
        };
        assert_eq!(WrId::decode(w.encode()), Some(w));
        assert_eq!(WrId::decode(5 << ID_BITS), None);
    }

    #[test]
    fn serial_order_wraps() {
        assert!(id_before(ID_MASK, 0));
        assert!(!id_before(0, ID_MASK));
        assert!(!id_before(3, 3));
        assert!(id_before(1, 2));
    }
}
