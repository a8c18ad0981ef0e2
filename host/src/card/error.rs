//! [`CardError`]: why a card could not be encoded, decoded or agreed on.

use core::fmt;

use vqp_core::Mode;

use super::Capabilities;

/// Why a card could not be encoded or decoded, or why two cards do not agree.
///
/// Values come from a peer, so every malformed input is one of these, never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CardError {
    /// The bytes do not start with [`MAGIC`](super::MAGIC): not a vqp card.
    BadMagic([u8; 4]),
    /// The card's format version is not one this build reads.
    UnsupportedVersion(u16),
    /// Fewer bytes than the card needs.
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The length the card declares is not the one its QP count implies.
    BadLength {
        /// Length field of the card.
        declared: usize,
        /// Length its contents need.
        expected: usize,
    },
    /// More data QPs than a virtual QP can have ([`MAX_DATA_QPS`](super::MAX_DATA_QPS)).
    TooManyQps(usize),
    /// A card names no data QP.
    NoDataQps,
    /// A card lists no port address, or more than [`MAX_PORTS`](super::MAX_PORTS).
    Ports(usize),
    /// A QP entry names a port address the card does not list.
    UnknownPort {
        /// The index the QP names.
        port: u8,
        /// Port addresses the card lists.
        ports: usize,
    },
    /// The mode byte names no mode this build knows.
    UnknownMode(u8),
    /// A 24-bit field (QP number, PSN, sequence number) has its top bits set.
    OutOfRange {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// The flags byte sets bits this build does not know (only bit 0, the notify QP,
    /// is defined).
    UnknownFlags(u8),
    /// A QP entry's reserved bytes are not zero.
    Reserved {
        /// The entry: data QPs from 0, then the notify QP.
        entry: usize,
        /// The three reserved bytes as sent.
        bytes: [u8; 3],
    },
    /// A port address carries an MTU that is not an InfiniBand path MTU
    /// ([`IB_MTUS`](super::IB_MTUS)).
    Mtu {
        /// The port address's index.
        port: usize,
        /// The MTU it carries, in bytes.
        mtu: u16,
    },
    /// A QP entry names QP 0 or 1, the subnet management and general services QPs,
    /// which are never a reliable-connected QP.
    SpecialQpn {
        /// The entry: data QPs from 0, then the notify QP.
        entry: usize,
        /// Its QP number.
        qpn: u32,
    },
    /// Two QP entries name the same QP number at the same port address (QP numbers are
    /// unique per device).
    DuplicateQpn {
        /// The QP number.
        qpn: u32,
        /// The port address both entries name.
        port: u8,
        /// The first entry that names it.
        first: usize,
        /// The entry that names it again.
        second: usize,
    },
    /// The DQPLB reorder window is not a power of two (vqp-core's `W` always is).
    WindowNotPowerOfTwo(u32),
    /// The caller's buffer cannot hold the encoded card.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The two sides run different load-balancing modes.
    Mode {
        /// This side's mode.
        mine: Mode,
        /// The peer's mode.
        peer: Mode,
    },
    /// The two sides cut requests into fragments of different sizes.
    MaxFrag {
        /// This side's `max_frag`.
        mine: u32,
        /// The peer's.
        peer: u32,
    },
    /// A queue depth differs.
    Depth {
        /// `max_outstanding` or `recv_depth`.
        what: &'static str,
        /// This side's value.
        mine: u32,
        /// The peer's.
        peer: u32,
    },
    /// The two sides have different numbers of data QPs (they connect one to one).
    DataQps {
        /// This side's count.
        mine: usize,
        /// The peer's.
        peer: usize,
    },
    /// One side has a notify QP and the other does not.
    Notify {
        /// Whether this side has one.
        mine: bool,
        /// Whether the peer has one.
        peer: bool,
    },
    /// Data QP `qp` pairs this side's port address `mine` with the peer's `peer`, but
    /// an earlier data QP paired one of them with another device: each device must
    /// reach exactly one device of the peer, because a request carries one rkey per
    /// local device.
    DevicePairing {
        /// The data QP.
        qp: usize,
        /// Its port address on this side.
        mine: u8,
        /// Its port address on the peer.
        peer: u8,
    },
    /// The peer's DQPLB reorder window cannot cover what this side may have in flight.
    Window {
        /// The peer's window.
        peer: u32,
        /// The window this side's sender needs at the peer.
        needed: u64,
    },
    /// This side's DQPLB reorder window cannot cover what the peer may have in flight.
    OwnWindow {
        /// This side's window.
        mine: u32,
        /// The window the peer's sender needs here.
        needed: u64,
    },
    /// The peer lacks capabilities this side requires.
    MissingCapabilities(Capabilities),
    /// The peer requires capabilities this side lacks.
    PeerRequires(Capabilities),
}

impl fmt::Display for CardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadMagic(m) => write!(f, "not a vqp endpoint card (magic {m:02x?})"),
            Self::UnsupportedVersion(v) => write!(
                f,
                "endpoint card format version {v} is not supported (this build reads version {})",
                super::VERSION
            ),
            Self::Truncated { needed, got } => {
                write!(f, "endpoint card truncated: {got} bytes, {needed} needed")
            }
            Self::BadLength { declared, expected } => write!(
                f,
                "endpoint card declares {declared} bytes but its contents need {expected}"
            ),
            Self::TooManyQps(n) => write!(
                f,
                "endpoint card names {n} data QPs; at most {} allowed",
                super::MAX_DATA_QPS
            ),
            Self::NoDataQps => f.write_str("endpoint card names no data QP"),
            Self::Ports(m) => write!(
                f,
                "endpoint card lists {m} port addresses; 1 to {} allowed",
                super::MAX_PORTS
            ),
            Self::UnknownPort { port, ports } => write!(
                f,
                "endpoint card names port address {port} but lists only {ports}"
            ),
            Self::UnknownMode(m) => write!(f, "endpoint card has unknown mode {m}"),
            Self::OutOfRange { field, value } => {
                write!(f, "endpoint card field {field} = {value:#x} exceeds 24 bits")
            }
            Self::UnknownFlags(bits) => write!(
                f,
                "endpoint card sets unknown flag bits {bits:#04x} (only bit 0, the notify QP, is defined)"
            ),
            Self::Reserved { entry, bytes } => write!(
                f,
                "endpoint card QP entry {entry} has reserved bytes {bytes:02x?} set (they must be zero)"
            ),
            Self::Mtu { port, mtu } => write!(
                f,
                "endpoint card port address {port} has MTU {mtu}, not an InfiniBand MTU \
                 (256, 512, 1024, 2048 or 4096)"
            ),
            Self::SpecialQpn { entry, qpn } => write!(
                f,
                "endpoint card QP entry {entry} names QP {qpn}, a special QP (0 is the SMI QP, \
                 1 the GSI QP), never a reliable-connected one"
            ),
            Self::DuplicateQpn {
                qpn,
                port,
                first,
                second,
            } => write!(
                f,
                "endpoint card names QP number {qpn:#x} at port address {port} twice \
                 (QP entries {first} and {second})"
            ),
            Self::WindowNotPowerOfTwo(w) => {
                write!(f, "endpoint card's reorder window {w} is not a power of two")
            }
            Self::BufferTooSmall { needed, got } => write!(
                f,
                "buffer of {got} bytes cannot hold the {needed}-byte endpoint card"
            ),
            Self::Mode { mine, peer } => {
                write!(f, "mode mismatch: this side runs {mine:?}, the peer {peer:?}")
            }
            Self::MaxFrag { mine, peer } => write!(
                f,
                "max_frag mismatch: this side cuts {mine}-byte fragments, the peer {peer}"
            ),
            Self::Depth { what, mine, peer } => {
                write!(f, "{what} mismatch: this side has {mine}, the peer {peer}")
            }
            Self::DataQps { mine, peer } => write!(
                f,
                "data QP count mismatch: this side has {mine}, the peer {peer}"
            ),
            Self::Notify { mine, peer } => {
                let has = |b: bool| if b { "has" } else { "has no" };
                write!(
                    f,
                    "notify QP mismatch: this side {} notify QP, the peer {}",
                    has(mine),
                    has(peer)
                )
            }
            Self::DevicePairing { qp, mine, peer } => write!(
                f,
                "data QP {qp} would pair this side's device {mine} with the peer's device {peer}, \
                 but an earlier data QP paired one of them with another device; each device must \
                 talk to exactly one device of the peer (one rkey per device in a request): use \
                 the same number of devices on both sides"
            ),
            Self::Window { peer, needed } => write!(
                f,
                "the peer's reorder window of {peer} is below the {needed} this side may have in flight"
            ),
            Self::OwnWindow { mine, needed } => write!(
                f,
                "this side's reorder window of {mine} is below the {needed} the peer may have in flight"
            ),
            Self::MissingCapabilities(c) => {
                write!(f, "the peer lacks required capabilities {c}")
            }
            Self::PeerRequires(c) => {
                write!(f, "the peer requires capabilities {c} that this side lacks")
            }
        }
    }
}

impl std::error::Error for CardError {}
