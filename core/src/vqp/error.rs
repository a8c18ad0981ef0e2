//! Why a virtual request was refused. A refused request posted nothing.

use core::fmt;

use crate::wr::{Opcode, WcStatus};

/// `post_send` refused a request; nothing of it was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostSendError {
    /// The opcode is not one a virtual QP carries.
    UnknownOpcode(Opcode),
    /// A request that would be fragmented has length 0.
    ZeroLength,
    /// A request that would be fragmented is unsignaled; only RDMA_WRITE_WITH_IMM may
    /// be (its receiver learns of it through the immediate).
    Unsignaled(Opcode),
    /// No memory keys were given for a device whose QPs the request would use.
    MissingKey {
        /// The device index.
        device: u8,
    },
    /// A pass-through request is longer than one WQE carries (2^31 bytes).
    TooLong(u64),
    /// A request would be split into more fragments than one request may have
    /// (`u32::MAX`): `len` bytes in `fragments` of the split policy's size.
    TooManyFragments {
        /// The request's length.
        len: u64,
        /// The fragments it would take.
        fragments: u64,
    },
    /// Two-sided SEND shares the receive queue that DQPLB keeps filled with
    /// zero-length receives: use SPRAY or a single data QP.
    SendNeedsSpray,
    /// An `INLINE` request with a payload names it by a raw address, which the
    /// provider would copy unchecked: give the payload as a slice
    /// ([`VirtualQp::post_send_inline`](crate::VirtualQp::post_send_inline)), or
    /// vouch for the address ([`VirtualQp::post_send_unchecked`](crate::VirtualQp::post_send_unchecked)).
    RawInline,
    /// [`VirtualQp::post_send_inline`](crate::VirtualQp::post_send_inline) with a
    /// request that would not pass through whole to data QP 0 as a SEND or WRITE: an
    /// inline payload is copied once, at post time, so it cannot be an RDMA READ's
    /// target, an atomic's operand or a fragmented request's source.
    CannotInline(Opcode),
    /// Every slot is taken: wait for completions (backpressure). For
    /// [`VirtualQp::post_send_inline`](crate::VirtualQp::post_send_inline), also: data
    /// QP 0 has no room now, earlier requests still wait, or data QP 0 is being
    /// replaced, so the payload could not be posted before the call returns.
    Full,
    /// The virtual QP failed with this status and takes no new requests.
    Failed(WcStatus),
}

impl fmt::Display for PostSendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::UnknownOpcode(op) => write!(f, "{op} is not carried by a virtual QP"),
            Self::ZeroLength => f.write_str("a fragmented request must not be empty"),
            Self::Unsignaled(op) => write!(
                f,
                "an unsignaled {op} cannot be fragmented; only RDMA_WRITE_WITH_IMM may be unsignaled"
            ),
            Self::MissingKey { device } => write!(f, "no memory keys for device {device}"),
            Self::TooLong(len) => write!(f, "{len} bytes exceed one work request (2^31)"),
            Self::TooManyFragments { len, fragments } => write!(
                f,
                "{len} bytes would take {fragments} fragments; a request may have at most 2^32 - 1"
            ),
            Self::SendNeedsSpray => f.write_str(
                "SEND cannot share DQPLB's receive queues: use SPRAY mode or one data QP",
            ),
            Self::RawInline => f.write_str(
                "an INLINE payload given by raw address is not read by the safe post: \
                 use post_send_inline with a slice (or the unsafe post_send_unchecked)",
            ),
            Self::CannotInline(op) => write!(
                f,
                "{op} cannot carry an inline payload here: only SEND, SEND_WITH_IMM and \
                 (over one data QP) RDMA_WRITE and RDMA_WRITE_WITH_IMM pass through whole"
            ),
            Self::Full => f.write_str("virtual QP is full: poll completions and retry"),
            Self::Failed(st) => write!(f, "virtual QP failed ({st}): no new requests"),
        }
    }
}

impl core::error::Error for PostSendError {}

/// `post_recv` refused a request; nothing of it was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostRecvError {
    /// Data receives are for SEND, which DQPLB with several QPs does not carry.
    DataNeedsSpray,
    /// Every receive slot is taken: wait for completions.
    Full,
    /// The virtual QP failed with this status and takes no new requests.
    Failed(WcStatus),
}

impl fmt::Display for PostRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::DataNeedsSpray => f.write_str(
                "data receives need SPRAY mode or one data QP (DQPLB keeps the receive queues)",
            ),
            Self::Full => f.write_str("receive slots are full: poll completions and retry"),
            Self::Failed(st) => write!(f, "virtual QP failed ({st}): no new requests"),
        }
    }
}

impl core::error::Error for PostRecvError {}

/// A replacement QP was refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// The virtual QP has no notify QP (DQPLB, or SPRAY over one data QP).
    NoNotifyQp,
    /// The notify QP's replacement was offered a device no data QP uses (requests
    /// carry no keys for it).
    NotADataDevice(u8),
    /// The QP (the notify QP, or data QP 0 where it takes the application's
    /// receives) has not failed or still has receives outstanding: how many it
    /// received is not final yet.
    NotDrained,
    /// No data QP of that index.
    NoSuchQp(usize),
    /// Data QP `i` cannot be replaced: re-dispatch is off, the virtual QP failed,
    /// or the QP is healthy and the last path, with no grace period to wait in.
    Unavailable(usize),
    /// [`VirtualQp::resume`](crate::VirtualQp::resume) of a data QP that is not waiting for its peer.
    NotJoining(usize),
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoSuchQp(i) => write!(f, "no data QP {i}"),
            Self::Unavailable(i) => write!(
                f,
                "data QP {i} cannot be replaced (re-dispatch is off, the virtual QP failed, \
                 or it is the last path and no grace period is set)"
            ),
            Self::NotJoining(i) => write!(f, "data QP {i} has no replacement waiting to resume"),
            Self::NoNotifyQp => f.write_str("the virtual QP has no notify QP"),
            Self::NotADataDevice(d) => write!(
                f,
                "device {d} has no data QP, so requests carry no keys for a notify QP there"
            ),
            Self::NotDrained => f.write_str(
                "the QP has not failed or still has receives outstanding, so the count of \
                 what it received is not final",
            ),
        }
    }
}

impl core::error::Error for RestoreError {}

/// A physical completion that no in-flight request of this virtual QP owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stray;
