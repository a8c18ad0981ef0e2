//! What one CM connection's private data carries of an endpoint card: the card's
//! settings, and the one QP the connection is for with the address of its port. A
//! virtual QP is brought up as one CM connection per physical QP (data QPs, then the
//! notify QP), as rdma_cm connects one QP per id; the peer rebuilds the whole card from
//! the pieces, the QP numbers taken from the CM (its REQ's and REP's QPN).
//!
//! Every piece fits the 56 bytes of private data a REQ carries (IBA 12.6; the limit
//! rdma_cm gives an RC connect). Big-endian:
//!
//! ```text
//! offset size
//!  0     1     'V'
//!  1     1     version (1)
//!  2     1     flags: bit 0 a notify QP, bit 1 DQPLB (else SPRAY)
//!  3     1     this connection's QP: 0..n-1 a data QP, n the notify QP
//!  4     1     n, the number of data QPs
//!  5     3     session tag: the same in every piece of one card, random
//!  8     4     capabilities offered        12  4  capabilities required
//! 16     4     largest fragment            20  4  sends in flight per QP
//! 24     4     receives per QP             28  1  log2 of the reorder window
//! 29     3     first sequence number       32  3  this QP's first PSN
//! 35     1     its port's index            36  2  the port's MTU in bytes
//! 38     2     the port's LID              40 16  the port's GID
//! ```
//!
//! [`Piece::decode`] refuses, never panics; [`Assembly`] checks that the pieces of one
//! card agree with each other and that each QP comes once.

use core::fmt;

use crate::card::{Capabilities, Card, PortAddr, QpAddr, MAX_DATA_QPS, MAX_PORTS};
use crate::sys::Gid;
use vqp_core::Mode;

/// A piece's length.
pub const LEN: usize = 56;
/// The format's version.
pub const VERSION: u8 = 1;

/// The settings every piece of a card repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Settings {
    mode: Mode,
    notify: bool,
    data: u8,
    tag: u32,
    caps: u32,
    required: u32,
    max_frag: u32,
    max_outstanding: u32,
    recv_depth: u32,
    window_log2: u8,
    init_seq: u32,
}

/// One connection's piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    settings: Settings,
    /// Which QP: `0..data` a data QP, `data` the notify QP.
    pub index: u8,
    /// Its first PSN.
    pub psn: u32,
    /// Its port's index in the card.
    pub port: u8,
    /// Its port's address.
    pub addr: PortAddr,
}

/// Why private data is not a piece, or pieces not a card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceError {
    /// Shorter than [`LEN`].
    Short(usize),
    /// Not 'V', or another version.
    Format,
    /// A field out of its range (named).
    Field(&'static str),
    /// A piece whose settings differ from the card's first piece.
    Inconsistent,
    /// A QP twice.
    Duplicate(u8),
    /// The card has too many QPs or ports for pieces, or a window that is not a power
    /// of two.
    Unencodable(&'static str),
}

impl fmt::Display for PieceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PieceError::Short(n) => write!(f, "CM private data of {n} bytes is too short"),
            PieceError::Format => f.write_str("CM private data is not a vqp card piece"),
            PieceError::Field(name) => write!(f, "card piece field {name} is out of range"),
            PieceError::Inconsistent => {
                f.write_str("the pieces of one card disagree on its settings")
            }
            PieceError::Duplicate(i) => write!(f, "QP {i} of the card came twice"),
            PieceError::Unencodable(why) => write!(f, "the card cannot go in pieces: {why}"),
        }
    }
}

impl std::error::Error for PieceError {}

impl Piece {
    /// The pieces of `card`, tagged `tag` (24 bits): data QPs in order, then the notify
    /// QP.
    ///
    /// # Errors
    /// [`PieceError::Unencodable`] for a card that does not fit the format.
    pub fn split(card: &Card, tag: u32) -> Result<Vec<Piece>, PieceError> {
        if card.data.is_empty() || card.data.len() > MAX_DATA_QPS {
            return Err(PieceError::Unencodable("data QPs"));
        }
        if !card.window.is_power_of_two() {
            return Err(PieceError::Unencodable("window"));
        }
        let settings = Settings {
            mode: card.mode,
            notify: card.notify.is_some(),
            data: card.data.len() as u8,
            tag: tag & 0x00ff_ffff,
            caps: card.caps.0,
            required: card.required.0,
            max_frag: card.max_frag,
            max_outstanding: card.max_outstanding,
            recv_depth: card.recv_depth,
            window_log2: card.window.trailing_zeros() as u8,
            init_seq: card.init_seq & 0x00ff_ffff,
        };
        card.data
            .iter()
            .chain(card.notify.iter())
            .enumerate()
            .map(|(i, qp)| {
                let addr = *card
                    .ports
                    .get(usize::from(qp.port))
                    .ok_or(PieceError::Unencodable("a QP's port"))?;
                Ok(Piece {
                    settings,
                    index: i as u8,
                    psn: qp.psn & 0x00ff_ffff,
                    port: qp.port,
                    addr,
                })
            })
            .collect()
    }

    /// The session tag.
    pub fn tag(&self) -> u32 {
        self.settings.tag
    }

    /// How many pieces (connections) the card has.
    pub fn count(&self) -> usize {
        usize::from(self.settings.data) + usize::from(self.settings.notify)
    }

    /// The bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let s = &self.settings;
        let mut b = [0u8; LEN];
        b[0] = b'V';
        b[1] = VERSION;
        b[2] = u8::from(s.notify) | (u8::from(s.mode == Mode::Dqplb) << 1);
        b[3] = self.index;
        b[4] = s.data;
        b[5..8].copy_from_slice(&s.tag.to_be_bytes()[1..]);
        for (at, v) in [
            (8, s.caps),
            (12, s.required),
            (16, s.max_frag),
            (20, s.max_outstanding),
            (24, s.recv_depth),
        ] {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[28] = s.window_log2;
        b[29..32].copy_from_slice(&s.init_seq.to_be_bytes()[1..]);
        b[32..35].copy_from_slice(&self.psn.to_be_bytes()[1..]);
        b[35] = self.port;
        b[36..38].copy_from_slice(&self.addr.mtu.to_be_bytes());
        b[38..40].copy_from_slice(&self.addr.lid.to_be_bytes());
        b[40..56].copy_from_slice(self.addr.gid.as_bytes());
        b
    }

    /// Reads a piece from private data (which may be longer: the CM pads it).
    ///
    /// # Errors
    /// [`PieceError`] for anything that is not a well-formed piece.
    pub fn decode(b: &[u8]) -> Result<Piece, PieceError> {
        if b.len() < LEN {
            return Err(PieceError::Short(b.len()));
        }
        if b[0] != b'V' || b[1] != VERSION {
            return Err(PieceError::Format);
        }
        if b[2] & !3 != 0 {
            return Err(PieceError::Field("flags"));
        }
        let u24 = |at: usize| u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]]);
        let u32_at = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let settings = Settings {
            mode: if b[2] & 2 != 0 {
                Mode::Dqplb
            } else {
                Mode::Spray
            },
            notify: b[2] & 1 != 0,
            data: b[4],
            tag: u24(5),
            caps: u32_at(8),
            required: u32_at(12),
            max_frag: u32_at(16),
            max_outstanding: u32_at(20),
            recv_depth: u32_at(24),
            window_log2: b[28],
            init_seq: u24(29),
        };
        if settings.data == 0 || usize::from(settings.data) > MAX_DATA_QPS {
            return Err(PieceError::Field("data QPs"));
        }
        if settings.window_log2 > 31 {
            return Err(PieceError::Field("window"));
        }
        let index = b[3];
        if usize::from(index) >= usize::from(settings.data) + usize::from(settings.notify) {
            return Err(PieceError::Field("QP index"));
        }
        let port = b[35];
        if usize::from(port) >= MAX_PORTS {
            return Err(PieceError::Field("port"));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[40..56]);
        Ok(Piece {
            settings,
            index,
            psn: u24(32),
            port,
            addr: PortAddr {
                mtu: u16::from_be_bytes([b[36], b[37]]),
                lid: u16::from_be_bytes([b[38], b[39]]),
                gid: Gid::from_bytes(gid),
            },
        })
    }
}

/// The pieces of one card as they come, with the QP numbers the CM gave.
#[derive(Debug, Default)]
pub struct Assembly {
    first: Option<Settings>,
    qps: Vec<Option<(QpAddr, PortAddr)>>,
}

impl Assembly {
    /// Adds `piece`, for the QP numbered `qpn`.
    ///
    /// # Errors
    /// [`PieceError::Inconsistent`] when its settings differ from the first piece's,
    /// [`PieceError::Duplicate`] when its QP came already.
    pub fn add(&mut self, piece: &Piece, qpn: u32) -> Result<(), PieceError> {
        match self.first {
            None => {
                self.first = Some(piece.settings);
                self.qps = vec![None; piece.count()];
            }
            Some(s) if s != piece.settings => return Err(PieceError::Inconsistent),
            Some(_) => {}
        }
        let slot = &mut self.qps[usize::from(piece.index)];
        if slot.is_some() {
            return Err(PieceError::Duplicate(piece.index));
        }
        *slot = Some((
            QpAddr {
                qpn: qpn & 0x00ff_ffff,
                psn: piece.psn,
                port: piece.port,
            },
            piece.addr,
        ));
        Ok(())
    }

    /// Whether every piece came.
    pub fn complete(&self) -> bool {
        self.first.is_some() && self.qps.iter().all(Option::is_some)
    }

    /// The card, once [`complete`](Self::complete); its ports are listed by the
    /// indices the pieces name (a port no QP names is left zero, and
    /// [`Card::validate`] then judges it).
    pub fn card(&self) -> Option<Card> {
        let s = self.first?;
        let qps: Vec<(QpAddr, PortAddr)> = self.qps.iter().copied().collect::<Option<_>>()?;
        let nports = qps.iter().map(|(q, _)| usize::from(q.port) + 1).max()?;
        let mut ports = vec![PortAddr::default(); nports];
        for (q, a) in &qps {
            ports[usize::from(q.port)] = *a;
        }
        let data = usize::from(s.data);
        Some(Card {
            mode: s.mode,
            caps: Capabilities(s.caps),
            required: Capabilities(s.required),
            max_frag: s.max_frag,
            max_outstanding: s.max_outstanding,
            recv_depth: s.recv_depth,
            window: 1u32 << s.window_log2,
            init_seq: s.init_seq,
            ports,
            data: qps[..data].iter().map(|(q, _)| *q).collect(),
            notify: s.notify.then(|| qps[data].0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::tests::card_on;

    #[test]
    fn a_card_goes_in_pieces_and_comes_back() {
        for (mode, n, ports) in [
            (Mode::Dqplb, 1, 1),
            (Mode::Dqplb, 8, 2),
            (Mode::Spray, 8, 1),
            (Mode::Spray, 64, 4),
        ] {
            let c = card_on(mode, n, ports);
            let pieces = Piece::split(&c, 0xabcdef).unwrap();
            assert_eq!(pieces.len(), c.data.len() + usize::from(c.notify.is_some()));
            let mut a = Assembly::default();
            // Out of order, as connections may complete.
            for p in pieces.iter().rev() {
                let d = Piece::decode(&p.encode()).unwrap();
                assert_eq!(&d, p);
                let qpn = c
                    .data
                    .iter()
                    .chain(c.notify.iter())
                    .nth(usize::from(d.index))
                    .unwrap()
                    .qpn;
                assert!(!a.complete());
                a.add(&d, qpn).unwrap();
            }
            assert!(a.complete());
            assert_eq!(a.card().unwrap(), c);
        }
    }

    #[test]
    fn inconsistent_duplicate_and_malformed_pieces_are_refused() {
        let c = card_on(Mode::Dqplb, 2, 1);
        let p = Piece::split(&c, 1).unwrap();
        let mut a = Assembly::default();
        a.add(&p[0], 0x100).unwrap();
        assert_eq!(a.add(&p[0], 0x100), Err(PieceError::Duplicate(0)));
        let other = Piece::split(
            &Card {
                recv_depth: 9,
                ..c.clone()
            },
            1,
        )
        .unwrap();
        assert_eq!(a.add(&other[1], 0x101), Err(PieceError::Inconsistent));
        let b = p[1].encode();
        assert_eq!(
            Piece::decode(&b[..LEN - 1]),
            Err(PieceError::Short(LEN - 1))
        );
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Piece::decode(&bad), Err(PieceError::Format));
        let mut bad = b;
        bad[2] = 4;
        assert_eq!(Piece::decode(&bad), Err(PieceError::Field("flags")));
        let mut bad = b;
        bad[3] = 2;
        assert_eq!(Piece::decode(&bad), Err(PieceError::Field("QP index")));
        let mut bad = b;
        bad[4] = 0;
        assert_eq!(Piece::decode(&bad), Err(PieceError::Field("data QPs")));
        assert_eq!(
            Piece::split(&Card { window: 1000, ..c }, 1),
            Err(PieceError::Unencodable("window"))
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let good = Piece::split(&card_on(Mode::Spray, 3, 2), 7).unwrap()[1].encode();
        let mut x = 0x9e37_79b9u32;
        for i in 0..20_000 {
            let mut d = good;
            for _ in 0..1 + i % 4 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                d[(x as usize) % LEN] = (x >> 8) as u8;
            }
            if let Ok(p) = Piece::decode(&d[..(x as usize >> 3) % (LEN + 1)]) {
                let mut a = Assembly::default();
                let _ = a.add(&p, x);
                let _ = a.card();
            }
            if let Ok(p) = Piece::decode(&d) {
                let mut a = Assembly::default();
                let _ = a.add(&p, x);
                let _ = a.card();
            }
        }
    }
}
