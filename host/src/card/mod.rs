//! The endpoint card: what one side of a virtual QP tells the other before the
//! physical QPs are connected.
//!
//! Both sides must agree on the mode, the fragment size and the depths (the receiver
//! sizes its window and receives for the sender's traffic), and each needs the other's
//! QP numbers, PSNs, addresses and first DQPLB sequence number. A card carries all of
//! it in a small, versioned, self-describing byte format; [`Card::agree`] refuses a
//! peer whose settings do not fit, with one clear error per mismatch.
//!
//! A card is strict: [`Card::decode`] refuses, each with its own [`CardError`], any
//! field this build does not understand or that no real endpoint sends — unknown
//! flag bits, non-zero reserved bytes, an MTU that is not an InfiniBand MTU, QP
//! number 0 or 1 (the SMI and GSI QPs, never an RC QP), one QP number named twice at
//! one port address, a reorder window that is not a power of two — rather than
//! ignoring it. [`Card::agree`] checks both directions (what this side requires of
//! the peer and what the peer requires of this side), so both ends of a refused
//! pairing compute the refusal themselves; [`crate::exchange`] also tells the peer
//! why it refused, so a card only one side can read is refused visibly on both.
//!
//! A virtual QP may spread its QPs over several devices (ports), so a card lists the
//! address of each port it uses — MTU, LID, GID — and names, for each QP, the port
//! address it is reached at. The peer connects its QP `i` to this side's QP `i` at
//! that address, whatever device its own QP `i` is on.
//!
//! # Wire format, version 2
//! Every integer is big-endian (network order). Version 1 (one address for all QPs,
//! 8-byte QP entries) is refused with [`CardError::UnsupportedVersion`].
//!
//! | offset | bytes | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `"VQPC"` |
//! | 4 | 2 | format version (2) |
//! | 6 | 2 | total length of the card in bytes: `40 + 20·m + 12·n (+ 12 with a notify QP)` |
//! | 8 | 1 | mode: 0 SPRAY, 1 DQPLB |
//! | 9 | 1 | `n`, the number of data QPs (1–64) |
//! | 10 | 1 | flags: bit 0 = a notify QP follows the data QPs; other bits 0 (refused when set) |
//! | 11 | 1 | `m`, the number of port addresses (1–4) |
//! | 12 | 4 | capability bits this side offers ([`Capabilities`]) |
//! | 16 | 4 | capability bits this side requires of the peer |
//! | 20 | 4 | `max_frag`: largest fragment in bytes |
//! | 24 | 4 | `max_outstanding`: send WQEs in flight per physical QP |
//! | 28 | 4 | `recv_depth`: receives kept posted per receiving QP |
//! | 32 | 4 | DQPLB reorder window (fragments, a power of two) |
//! | 36 | 4 | first DQPLB sequence number this side sends (24 bits) |
//! | 40 | 20·m | port addresses, each: path MTU in bytes (2, the port's active MTU: 256, 512, 1024, 2048 or 4096), LID (2, 0 when the port has none, e.g. RoCE), GID (16, zero when unused) |
//! | 40 + 20·m | 12·n | data QPs, in order, each: QP number (4, 24 bits, not 0 or 1, not repeated at one port address), first PSN (4, 24 bits), index of its port address (1, below `m`), reserved (3, 0; refused when not) |
//! | 40 + 20·m + 12·n | 12 | the notify QP, as a data QP entry, when flag bit 0 is set |
//!
//! A reader refuses a version it does not know rather than guessing, and refuses a
//! reserved byte or flag bit that is set rather than ignoring it: a later format that
//! gives them a meaning (or appends fields, its length field saying where the card
//! ends) carries a new version number.
//!
//! QP numbers are unique per device, not across devices (each HCA numbers its own
//! QPs), so two QPs at different port addresses may share a number; two at the same
//! port address may not.

mod error;

use std::fmt;

use vqp_core::Mode;

use crate::verbs::Gid;

pub use error::CardError;

/// The four bytes every card starts with.
pub const MAGIC: [u8; 4] = *b"VQPC";
/// The format version this build writes and reads.
pub const VERSION: u16 = 2;
/// Bytes before the port addresses.
pub const HEADER_LEN: usize = 40;
/// Bytes per port address (MTU, LID, GID).
pub const PORT_ENTRY_LEN: usize = 20;
/// Bytes per QP entry (QP number, PSN, port index, reserved).
pub const QP_ENTRY_LEN: usize = 12;
/// The most data QPs a card (and a virtual QP) can name.
pub const MAX_DATA_QPS: usize = 64;
/// The most port addresses a card can list: one per device a virtual QP may span
/// (vqp-core's [`MAX_DEVICES`](vqp_core::MAX_DEVICES)).
pub const MAX_PORTS: usize = vqp_core::MAX_DEVICES;
/// The longest card: four port addresses, 64 data QPs and a notify QP.
pub const MAX_LEN: usize = card_len(MAX_PORTS, MAX_DATA_QPS, true);

const FLAG_NOTIFY: u8 = 1;
const MAX_24BIT: u32 = (1 << 24) - 1;

/// The path MTUs InfiniBand defines (`IBV_MTU_256` to `IBV_MTU_4096`), in bytes: the
/// only values a port address may carry.
pub const IB_MTUS: [u16; 5] = [256, 512, 1024, 2048, 4096];

/// Capability bits: optional behaviours an endpoint implements. A card offers some and
/// requires some of the peer; [`Card::agree`] refuses a peer that lacks a required one.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(pub u32);

impl Capabilities {
    /// No capability.
    pub const NONE: Self = Self(0);
    /// Speaks SPRAY: plain-write fragments, then a WRITE_WITH_IMM on the notify QP.
    pub const SPRAY: Self = Self(1 << 0);
    /// Speaks DQPLB: sequence-numbered WRITE_WITH_IMM fragments on every data QP.
    pub const DQPLB: Self = Self(1 << 1);
    /// SPRAY notifies may be in flight several at a time (the receiver keeps
    /// `recv_depth` receives on its notify QP).
    pub const PIPELINED_NOTIFY: Self = Self(1 << 2);
    /// The DQPLB receiver ignores a duplicate sequence number inside its window, which
    /// a sender that re-posts a failed QP's fragments on healthy ones needs.
    pub const DUPLICATE_TOLERANT: Self = Self(1 << 3);
    /// Replaces a failed data QP with a fresh pair through the three messages of
    /// [`crate::failback`], over a channel of the application's.
    pub const FAIL_BACK: Self = Self(1 << 4);

    /// What this build implements.
    pub const fn supported() -> Self {
        Self(
            Self::SPRAY.0
                | Self::DQPLB.0
                | Self::PIPELINED_NOTIFY.0
                | Self::DUPLICATE_TOLERANT.0
                | Self::FAIL_BACK.0,
        )
    }

    /// What a side running `mode` needs the peer to implement.
    pub const fn required_for(mode: Mode) -> Self {
        match mode {
            Mode::Spray => Self(Self::SPRAY.0 | Self::PIPELINED_NOTIFY.0),
            Mode::Dqplb => Self::DQPLB,
        }
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits of `self` not in `other`.
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Capabilities({self})")
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Capabilities, &str); 5] = [
            (Capabilities::SPRAY, "SPRAY"),
            (Capabilities::DQPLB, "DQPLB"),
            (Capabilities::PIPELINED_NOTIFY, "PIPELINED_NOTIFY"),
            (Capabilities::DUPLICATE_TOLERANT, "DUPLICATE_TOLERANT"),
            (Capabilities::FAIL_BACK, "FAIL_BACK"),
        ];
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in NAMES {
            if self.contains(bit) && bit.0 != 0 {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !bit.0;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{rest:#x}")?;
            first = false;
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

/// How the peer reaches one of this side's ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAddr {
    /// Path MTU in bytes (the port's active MTU).
    pub mtu: u16,
    /// LID (0 when the port has none).
    pub lid: u16,
    /// GID (zero when unused).
    pub gid: Gid,
}

/// One physical QP as the peer addresses it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAddr {
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number this QP sends (24 bits).
    pub psn: u32,
    /// Index, in [`Card::ports`], of the port address this QP is reached at.
    pub port: u8,
}

/// One side's endpoint card: its virtual QP's settings and its physical QPs'
/// addresses. See the [module documentation](self) for the byte layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    /// Load-balancing mode.
    pub mode: Mode,
    /// Capabilities this side offers.
    pub caps: Capabilities,
    /// Capabilities this side requires of the peer.
    pub required: Capabilities,
    /// Largest fragment in bytes.
    pub max_frag: u32,
    /// Send WQEs in flight per physical QP.
    pub max_outstanding: u32,
    /// Receives kept posted per receiving QP.
    pub recv_depth: u32,
    /// DQPLB reorder window, in fragments (the virtual QP type's `W`).
    pub window: u32,
    /// First DQPLB sequence number this side sends (24 bits).
    pub init_seq: u32,
    /// The addresses of the ports this side's QPs are on (1 to [`MAX_PORTS`]), one
    /// per device it uses, in its device order.
    pub ports: Vec<PortAddr>,
    /// Data QPs, in order: data QP `i` connects to the peer's data QP `i`.
    pub data: Vec<QpAddr>,
    /// The SPRAY notify QP, when there is one.
    pub notify: Option<QpAddr>,
}

fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn check_24(field: &'static str, value: u32) -> Result<(), CardError> {
    if value > MAX_24BIT {
        return Err(CardError::OutOfRange { field, value });
    }
    Ok(())
}

fn mode_byte(mode: Mode) -> u8 {
    match mode {
        Mode::Spray => 0,
        Mode::Dqplb => 1,
    }
}

fn byte_mode(b: u8) -> Result<Mode, CardError> {
    match b {
        0 => Ok(Mode::Spray),
        1 => Ok(Mode::Dqplb),
        other => Err(CardError::UnknownMode(other)),
    }
}

/// The encoded length of a card with `ports` port addresses, `data` data QPs and
/// maybe a notify QP.
const fn card_len(ports: usize, data: usize, notify: bool) -> usize {
    HEADER_LEN + ports * PORT_ENTRY_LEN + (data + notify as usize) * QP_ENTRY_LEN
}

impl Card {
    /// The number of bytes [`encode`](Self::encode) writes.
    pub fn encoded_len(&self) -> usize {
        card_len(self.ports.len(), self.data.len(), self.notify.is_some())
    }

    /// The address of the port `qp` is reached at, if the card lists it.
    pub fn port_of(&self, qp: &QpAddr) -> Option<&PortAddr> {
        self.ports.get(usize::from(qp.port))
    }

    /// Checks what the format can carry and what a real endpoint sends: 1 to 64 data
    /// QPs, 1 to [`MAX_PORTS`] port addresses each with an InfiniBand MTU
    /// ([`IB_MTUS`]), every QP's port among them, 24-bit QP numbers, PSNs and sequence
    /// number, no QP number 0 or 1, no QP number twice at one port address, and a
    /// reorder window that is a power of two (vqp-core's `W`).
    ///
    /// # Errors
    /// The first of, in this order: [`CardError::NoDataQps`],
    /// [`CardError::TooManyQps`], [`CardError::Ports`], [`CardError::Mtu`],
    /// [`CardError::WindowNotPowerOfTwo`], [`CardError::OutOfRange`],
    /// [`CardError::UnknownPort`], [`CardError::SpecialQpn`] or
    /// [`CardError::DuplicateQpn`].
    pub fn validate(&self) -> Result<(), CardError> {
        if self.data.is_empty() {
            return Err(CardError::NoDataQps);
        }
        if self.data.len() > MAX_DATA_QPS {
            return Err(CardError::TooManyQps(self.data.len()));
        }
        if self.ports.is_empty() || self.ports.len() > MAX_PORTS {
            return Err(CardError::Ports(self.ports.len()));
        }
        if let Some((port, p)) = self
            .ports
            .iter()
            .enumerate()
            .find(|(_, p)| !IB_MTUS.contains(&p.mtu))
        {
            return Err(CardError::Mtu { port, mtu: p.mtu });
        }
        if !self.window.is_power_of_two() {
            return Err(CardError::WindowNotPowerOfTwo(self.window));
        }
        check_24("init_seq", self.init_seq)?;
        let qps = || self.data.iter().chain(self.notify.iter()).enumerate();
        for (entry, q) in qps() {
            check_24("qpn", q.qpn)?;
            check_24("psn", q.psn)?;
            if usize::from(q.port) >= self.ports.len() {
                return Err(CardError::UnknownPort {
                    port: q.port,
                    ports: self.ports.len(),
                });
            }
            if q.qpn <= 1 {
                return Err(CardError::SpecialQpn { entry, qpn: q.qpn });
            }
            // At most 65 entries: a quadratic scan allocates nothing and stays cheap.
            if let Some((first, _)) = qps()
                .take(entry)
                .find(|(_, o)| o.qpn == q.qpn && o.port == q.port)
            {
                return Err(CardError::DuplicateQpn {
                    qpn: q.qpn,
                    port: q.port,
                    first,
                    second: entry,
                });
            }
        }
        Ok(())
    }

    /// Writes the card into the front of `buf` and returns how many bytes it took.
    ///
    /// # Errors
    /// What [`validate`](Self::validate) finds, or [`CardError::BufferTooSmall`].
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, CardError> {
        self.validate()?;
        let len = self.encoded_len();
        if buf.len() < len {
            return Err(CardError::BufferTooSmall {
                needed: len,
                got: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        buf[0..4].copy_from_slice(&MAGIC);
        put_u16(buf, 4, VERSION);
        // `len` ≤ MAX_LEN (900) after `validate`, so it fits.
        put_u16(buf, 6, len as u16);
        buf[8] = mode_byte(self.mode);
        buf[9] = self.data.len() as u8;
        buf[10] = if self.notify.is_some() {
            FLAG_NOTIFY
        } else {
            0
        };
        buf[11] = self.ports.len() as u8;
        put_u32(buf, 12, self.caps.0);
        put_u32(buf, 16, self.required.0);
        put_u32(buf, 20, self.max_frag);
        put_u32(buf, 24, self.max_outstanding);
        put_u32(buf, 28, self.recv_depth);
        put_u32(buf, 32, self.window);
        put_u32(buf, 36, self.init_seq);
        for (i, p) in self.ports.iter().enumerate() {
            let at = HEADER_LEN + i * PORT_ENTRY_LEN;
            put_u16(buf, at, p.mtu);
            put_u16(buf, at + 2, p.lid);
            buf[at + 4..at + 20].copy_from_slice(p.gid.as_bytes());
        }
        let qps = HEADER_LEN + self.ports.len() * PORT_ENTRY_LEN;
        for (i, q) in self.data.iter().chain(self.notify.iter()).enumerate() {
            let at = qps + i * QP_ENTRY_LEN;
            put_u32(buf, at, q.qpn);
            put_u32(buf, at + 4, q.psn);
            buf[at + 8] = q.port;
            buf[at + 9..at + 12].fill(0);
        }
        Ok(len)
    }

    /// The card as a new byte vector.
    ///
    /// # Errors
    /// What [`validate`](Self::validate) finds.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CardError> {
        let mut v = vec![0; self.encoded_len()];
        self.encode(&mut v)?;
        Ok(v)
    }

    /// Reads a card from the front of `buf` (bytes past the card's declared length are
    /// ignored).
    ///
    /// # Errors
    /// [`CardError::Truncated`], [`CardError::BadMagic`],
    /// [`CardError::UnsupportedVersion`], [`CardError::UnknownMode`],
    /// [`CardError::NoDataQps`], [`CardError::TooManyQps`],
    /// [`CardError::UnknownFlags`], [`CardError::Ports`], [`CardError::BadLength`],
    /// [`CardError::Reserved`], or what [`validate`](Self::validate) finds; never a
    /// panic.
    pub fn decode(buf: &[u8]) -> Result<Card, CardError> {
        let truncated = |needed| CardError::Truncated {
            needed,
            got: buf.len(),
        };
        if buf.len() < 6 {
            return Err(truncated(HEADER_LEN));
        }
        let magic = [buf[0], buf[1], buf[2], buf[3]];
        if magic != MAGIC {
            return Err(CardError::BadMagic(magic));
        }
        let version = get_u16(buf, 4);
        if version != VERSION {
            return Err(CardError::UnsupportedVersion(version));
        }
        if buf.len() < HEADER_LEN {
            return Err(truncated(HEADER_LEN));
        }
        let declared = usize::from(get_u16(buf, 6));
        let mode = byte_mode(buf[8])?;
        let n = usize::from(buf[9]);
        if n == 0 {
            return Err(CardError::NoDataQps);
        }
        if n > MAX_DATA_QPS {
            return Err(CardError::TooManyQps(n));
        }
        let flags = buf[10];
        if flags & !FLAG_NOTIFY != 0 {
            return Err(CardError::UnknownFlags(flags & !FLAG_NOTIFY));
        }
        let has_notify = flags & FLAG_NOTIFY != 0;
        let m = usize::from(buf[11]);
        if m == 0 || m > MAX_PORTS {
            return Err(CardError::Ports(m));
        }
        let expected = card_len(m, n, has_notify);
        if declared != expected {
            return Err(CardError::BadLength { declared, expected });
        }
        if buf.len() < expected {
            return Err(truncated(expected));
        }
        let port = |i: usize| {
            let at = HEADER_LEN + i * PORT_ENTRY_LEN;
            let mut gid = [0u8; 16];
            gid.copy_from_slice(&buf[at + 4..at + 20]);
            PortAddr {
                mtu: get_u16(buf, at),
                lid: get_u16(buf, at + 2),
                gid: Gid::from_bytes(gid),
            }
        };
        let qps = HEADER_LEN + m * PORT_ENTRY_LEN;
        for entry in 0..n + usize::from(has_notify) {
            let at = qps + entry * QP_ENTRY_LEN + 9;
            let bytes = [buf[at], buf[at + 1], buf[at + 2]];
            if bytes != [0; 3] {
                return Err(CardError::Reserved { entry, bytes });
            }
        }
        let entry = |i: usize| {
            let at = qps + i * QP_ENTRY_LEN;
            QpAddr {
                qpn: get_u32(buf, at),
                psn: get_u32(buf, at + 4),
                port: buf[at + 8],
            }
        };
        let card = Card {
            mode,
            caps: Capabilities(get_u32(buf, 12)),
            required: Capabilities(get_u32(buf, 16)),
            max_frag: get_u32(buf, 20),
            max_outstanding: get_u32(buf, 24),
            recv_depth: get_u32(buf, 28),
            window: get_u32(buf, 32),
            init_seq: get_u32(buf, 36),
            ports: (0..m).map(port).collect(),
            data: (0..n).map(entry).collect(),
            notify: has_notify.then(|| entry(n)),
        };
        card.validate()?;
        Ok(card)
    }
}

mod agree;

#[cfg(test)]
pub(crate) mod tests;
