//! The CM messages between processes, modelled on the InfiniBand CM's (IBA vol. 1,
//! ch. 12): REQ, REP, RTU, REJ, DREQ, DREP, and the UD service-ID resolution pair
//! SIDR_REQ/SIDR_REP. Each is one datagram of a fixed header and a body of its own:
//!
//! ```text
//! offset size  header (every message)
//!  0     4     magic "VQCM"
//!  4     1     version (1)
//!  5     1     type (1 REQ, 2 REP, 3 RTU, 4 REJ, 5 DREQ, 6 DREP, 7 SIDR_REQ, 8 SIDR_REP)
//!  6     2     body length
//!  8     4     sender's communication id (its cm id's number in its process)
//! 12     4     receiver's communication id (0 when not yet known: REQ, SIDR_REQ)
//! 16    32     sender's socket name (ASCII, zero padded)
//! 48     ...   body, little-endian
//! ```
//!
//! Bodies: REQ and SIDR_REQ carry the port space, the QP (number, type, starting PSN),
//! the sender's resources and retry counts, both socket addresses, the sender's GID,
//! LID and MTU, and up to 56 bytes of private data (IB's REQ limit; SIDR_REQ: 180);
//! REP and SIDR_REP the same for the reply, with a Q_Key and status, and up to 196 bytes
//! (SIDR_REP: 136); REJ a reason and up to 148 bytes; RTU, DREQ and DREP nothing.
//!
//! [`decode`] checks everything a peer controls — magic, version, type, the lengths
//! against the datagram and the limits, the socket name's characters, address families
//! — and refuses, never panics; the receiver then checks the ids against its state.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"VQCM";
/// The format's version.
pub const VERSION: u8 = 1;
/// The header's size.
pub const HEADER: usize = 48;
/// The longest message: the buffer a receiver needs.
pub const MAX_MESSAGE: usize = 512;
/// Length of the socket-name field.
pub const NAME_LEN: usize = 32;

/// Private data limits of the IB CM (IBA 12.6, and librdmacm's `rdma_cma.h`).
pub const REQ_PRIVATE: usize = 56;
/// REP private data.
pub const REP_PRIVATE: usize = 196;
/// REJ private data.
pub const REJ_PRIVATE: usize = 148;
/// SIDR_REQ private data.
pub const SIDR_REQ_PRIVATE: usize = 180;
/// SIDR_REP private data.
pub const SIDR_REP_PRIVATE: usize = 136;

/// A message's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Connection request.
    Req = 1,
    /// Connection reply.
    Rep = 2,
    /// Ready to use.
    Rtu = 3,
    /// Reject.
    Rej = 4,
    /// Disconnection request.
    Dreq = 5,
    /// Disconnection reply.
    Drep = 6,
    /// UD service-ID resolution request.
    SidrReq = 7,
    /// UD service-ID resolution reply.
    SidrRep = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Req,
            2 => Kind::Rep,
            3 => Kind::Rtu,
            4 => Kind::Rej,
            5 => Kind::Dreq,
            6 => Kind::Drep,
            7 => Kind::SidrReq,
            8 => Kind::SidrRep,
            _ => return None,
        })
    }
}

/// Private data: at most [`REP_PRIVATE`] bytes, held inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Private {
    len: u8,
    bytes: [u8; REP_PRIVATE],
}

impl Private {
    /// No private data.
    pub const EMPTY: Private = Private {
        len: 0,
        bytes: [0; REP_PRIVATE],
    };

    /// `data` as private data, if it is no longer than `limit`.
    pub fn new(data: &[u8], limit: usize) -> Option<Private> {
        if data.len() > limit.min(REP_PRIVATE) {
            return None;
        }
        let mut p = Private::EMPTY;
        p.bytes[..data.len()].copy_from_slice(data);
        p.len = data.len() as u8;
        Some(p)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for Private {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Private({} bytes)", self.len)
    }
}

/// The connection parameters both REQ and REP carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// QP number (24 bits).
    pub qpn: u32,
    /// QP type (`IBV_QPT_*`).
    pub qp_type: u8,
    /// Starting PSN of the sender's send queue (24 bits).
    pub psn: u32,
    /// RDMA READ/atomic requests the sender accepts as responder.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the sender issues as requester.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 is infinite).
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Whether the sender's QP uses an SRQ.
    pub srq: u8,
    /// The sender's port GID.
    pub gid: [u8; 16],
    /// The sender's port LID.
    pub lid: u16,
    /// The path MTU the sender offers (`IBV_MTU_*`).
    pub mtu: u8,
    /// The Q_Key (UD).
    pub qkey: u32,
}

/// What a message says, beyond its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// REQ or SIDR_REQ.
    Req {
        /// The port space (`RDMA_PS_*`).
        ps: u16,
        /// The requester's connection parameters.
        conn: Conn,
        /// The requester's address.
        src: SocketAddr,
        /// The address it connects to.
        dst: SocketAddr,
        /// Private data.
        private: Private,
    },
    /// REP or SIDR_REP.
    Rep {
        /// The replier's connection parameters.
        conn: Conn,
        /// SIDR status (0: the QP is valid).
        status: u8,
        /// Private data.
        private: Private,
    },
    /// REJ.
    Rej {
        /// The reason (IBA table 112: 8 invalid service ID, 28 consumer reject, …).
        reason: u16,
        /// Private data.
        private: Private,
    },
    /// RTU, DREQ, DREP: nothing.
    Empty,
}

/// One message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// The type.
    pub kind: Kind,
    /// The sender's communication id.
    pub from: u32,
    /// The receiver's communication id (0: not yet known).
    pub to: u32,
    /// The sender's socket name.
    pub name: Name,
    /// The body.
    pub body: Body,
}

/// A socket name in the rendezvous directory: up to [`NAME_LEN`] bytes of
/// `[A-Za-z0-9._-]`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Name {
    len: u8,
    bytes: [u8; NAME_LEN],
}

impl Name {
    /// `s` as a name, if it is short enough and of the allowed characters.
    pub fn new(s: &str) -> Option<Name> {
        let b = s.as_bytes();
        if b.is_empty()
            || b.len() > NAME_LEN
            || !b
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
            || b[0] == b'.'
        {
            return None;
        }
        let mut n = Name {
            len: b.len() as u8,
            bytes: [0; NAME_LEN],
        };
        n.bytes[..b.len()].copy_from_slice(b);
        Some(n)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (checked in `new`).
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// Why a datagram is not a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its header or its stated body.
    Short(usize),
    /// Not "VQCM".
    Magic,
    /// A version this library does not speak.
    Version(u8),
    /// An unknown type.
    Kind(u8),
    /// The body length does not match the type's, or the datagram's.
    Length(usize),
    /// Private data longer than the type allows.
    PrivateTooLong(usize),
    /// A socket name that is empty, too long or has other characters.
    Name,
    /// An address family other than IPv4 or IPv6.
    Family(u16),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short(n) => write!(f, "message of {n} bytes is too short"),
            DecodeError::Magic => f.write_str("not a CM message (bad magic)"),
            DecodeError::Version(v) => write!(f, "CM message version {v} is not spoken here"),
            DecodeError::Kind(k) => write!(f, "unknown CM message type {k}"),
            DecodeError::Length(n) => write!(f, "CM message body of {n} bytes is malformed"),
            DecodeError::PrivateTooLong(n) => write!(f, "private data of {n} bytes is too long"),
            DecodeError::Name => f.write_str("bad sender socket name"),
            DecodeError::Family(a) => write!(f, "address family {a} is not IPv4 or IPv6"),
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
const CONN_LEN: usize = 4 + 1 + 4 + 7 + 16 + 2 + 1 + 4; // 39

/// A writer into a message buffer.
struct Out<'a> {
    buf: &'a mut [u8; MAX_MESSAGE],
    at: usize,
}

impl Out<'_> {
    fn put(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.put(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    fn conn(&mut self, c: &Conn) {
        self.u32(c.qpn);
        self.u8(c.qp_type);
        self.u32(c.psn);
        for v in [
            c.responder_resources,
            c.initiator_depth,
            c.retry_count,
            c.rnr_retry_count,
            c.flow_control,
            c.srq,
            0,
        ] {
            self.u8(v);
        }
        self.put(&c.gid);
        self.u16(c.lid);
        self.u8(c.mtu);
        self.u32(c.qkey);
    }
    fn addr(&mut self, a: &SocketAddr) {
        match a {
            SocketAddr::V4(v4) => {
                self.u16(libc::AF_INET as u16);
                self.u16(v4.port());
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&v4.ip().octets());
                self.put(&b);
                self.u32(0);
                self.u32(0);
            }
            SocketAddr::V6(v6) => {
                self.u16(libc::AF_INET6 as u16);
                self.u16(v6.port());
                self.put(&v6.ip().octets());
                self.u32(v6.flowinfo());
                self.u32(v6.scope_id());
            }
        }
    }
    fn private(&mut self, p: &Private) {
        self.u8(p.len);
        self.put(p.as_slice());
    }
}

/// Encodes `m` into `buf`; returns the message's length.
pub fn encode(m: &Message, buf: &mut [u8; MAX_MESSAGE]) -> usize {
    let mut o = Out { buf, at: 0 };
    o.put(&MAGIC);
    o.u8(VERSION);
    o.u8(m.kind as u8);
    o.u16(0); // body length, below
    o.u32(m.from);
    o.u32(m.to);
    let mut name = [0u8; NAME_LEN];
    name[..usize::from(m.name.len)].copy_from_slice(m.name.as_str().as_bytes());
    o.put(&name);
    match &m.body {
        Body::Req {
            ps,
            conn,
            src,
            dst,
            private,
        } => {
            o.u16(*ps);
            o.conn(conn);
            o.addr(src);
            o.addr(dst);
            o.private(private);
        }
        Body::Rep {
            conn,
            status,
            private,
        } => {
            o.conn(conn);
            o.u8(*status);
            o.private(private);
        }
        Body::Rej { reason, private } => {
            o.u16(*reason);
            o.private(private);
        }
        Body::Empty => {}
    }
    let len = o.at;
    let body = (len - HEADER) as u16;
    o.buf[6..8].copy_from_slice(&body.to_le_bytes());
    len
}

/// A reader over a received body; every read is bounds-checked.
struct In<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or(DecodeError::Length(n))?;
        let s = self
            .b
            .get(self.at..end)
            .ok_or(DecodeError::Length(self.b.len()))?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn conn(&mut self) -> Result<Conn, DecodeError> {
        let qpn = self.u32()? & 0x00ff_ffff;
        let qp_type = self.u8()?;
        let psn = self.u32()? & 0x00ff_ffff;
        let responder_resources = self.u8()?;
        let initiator_depth = self.u8()?;
        let retry_count = self.u8()? & 7;
        let rnr_retry_count = self.u8()? & 7;
        let flow_control = self.u8()?;
        let srq = self.u8()?;
        let _ = self.u8()?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(self.take(16)?);
        Ok(Conn {
            qpn,
            qp_type,
            psn,
            responder_resources,
            initiator_depth,
            retry_count,
            rnr_retry_count,
            flow_control,
            srq,
            gid,
            lid: self.u16()?,
            mtu: self.u8()?,
            qkey: self.u32()?,
        })
    }
    fn addr(&mut self) -> Result<SocketAddr, DecodeError> {
        let family = self.u16()?;
        let port = self.u16()?;
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        let flowinfo = self.u32()?;
        let scope = self.u32()?;
        match i32::from(family) {
            libc::AF_INET => Ok(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
                port,
            )),
            libc::AF_INET6 => Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a),
                port,
                flowinfo,
                scope,
            ))),
            _ => Err(DecodeError::Family(family)),
        }
    }
    fn private(&mut self, limit: usize) -> Result<Private, DecodeError> {
        let n = usize::from(self.u8()?);
        if n > limit {
            return Err(DecodeError::PrivateTooLong(n));
        }
        let s = self.take(n)?;
        Private::new(s, limit).ok_or(DecodeError::PrivateTooLong(n))
    }
}

/// Decodes one datagram.
///
/// # Errors
/// [`DecodeError`] for anything that is not a well-formed message of this version.
pub fn decode(d: &[u8]) -> Result<Message, DecodeError> {
    if d.len() < HEADER {
        return Err(DecodeError::Short(d.len()));
    }
    if d[..4] != MAGIC {
        return Err(DecodeError::Magic);
    }
    if d[4] != VERSION {
        return Err(DecodeError::Version(d[4]));
    }
    let kind = Kind::from_u8(d[5]).ok_or(DecodeError::Kind(d[5]))?;
    let body_len = usize::from(u16::from_le_bytes([d[6], d[7]]));
    if HEADER + body_len != d.len() {
        return Err(DecodeError::Length(body_len));
    }
    let from = u32::from_le_bytes([d[8], d[9], d[10], d[11]]);
    let to = u32::from_le_bytes([d[12], d[13], d[14], d[15]]);
    let raw = &d[16..16 + NAME_LEN];
    let n = raw.iter().position(|&c| c == 0).unwrap_or(NAME_LEN);
    if raw[n..].iter().any(|&c| c != 0) {
        return Err(DecodeError::Name);
    }
    let name = core::str::from_utf8(&raw[..n])
        .ok()
        .and_then(Name::new)
        .ok_or(DecodeError::Name)?;
    let mut r = In {
        b: &d[HEADER..],
        at: 0,
    };
    let body = match kind {
        Kind::Req | Kind::SidrReq => {
            let ps = r.u16()?;
            let conn = r.conn()?;
            let src = r.addr()?;
            let dst = r.addr()?;
            let limit = if kind == Kind::Req {
                REQ_PRIVATE
            } else {
                SIDR_REQ_PRIVATE
            };
            Body::Req {
                ps,
                conn,
                src,
                dst,
                private: r.private(limit)?,
            }
        }
        Kind::Rep | Kind::SidrRep => {
            let conn = r.conn()?;
            let status = r.u8()?;
            let limit = if kind == Kind::Rep {
                REP_PRIVATE
            } else {
                SIDR_REP_PRIVATE
            };
            Body::Rep {
                conn,
                status,
                private: r.private(limit)?,
            }
        }
        Kind::Rej => Body::Rej {
            reason: r.u16()?,
            private: r.private(REJ_PRIVATE)?,
        },
        Kind::Rtu | Kind::Dreq | Kind::Drep => Body::Empty,
    };
    if r.at != body_len {
        return Err(DecodeError::Length(body_len));
    }
    Ok(Message {
        kind,
        from,
        to,
        name,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Conn {
        Conn {
            qpn: 0x12_3456,
            qp_type: 2,
            psn: 0xab_cdef,
            responder_resources: 4,
            initiator_depth: 2,
            retry_count: 7,
            rnr_retry_count: 6,
            flow_control: 1,
            srq: 0,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            lid: 1,
            mtu: 5,
            qkey: 0x0123_4567,
        }
    }

    fn req(private: &[u8]) -> Message {
        Message {
            kind: Kind::Req,
            from: 7,
            to: 0,
            name: Name::new("p1234-5").unwrap(),
            body: Body::Req {
                ps: 0x106,
                conn: conn(),
                src: "127.0.0.1:40000".parse().unwrap(),
                dst: "[::1]:7174".parse().unwrap(),
                private: Private::new(private, REQ_PRIVATE).unwrap(),
            },
        }
    }

    fn round_trip(m: &Message) -> Message {
        let mut buf = [0u8; MAX_MESSAGE];
        let n = encode(m, &mut buf);
        assert!(n <= MAX_MESSAGE);
        decode(&buf[..n]).unwrap()
    }

    #[test]
    fn every_kind_round_trips_at_its_largest() {
        let m = req(&[0x5a; REQ_PRIVATE]);
        assert_eq!(round_trip(&m), m);
        let rep = Message {
            kind: Kind::Rep,
            from: 9,
            to: 7,
            name: Name::new("p99-1").unwrap(),
            body: Body::Rep {
                conn: conn(),
                status: 0,
                private: Private::new(&[1; REP_PRIVATE], REP_PRIVATE).unwrap(),
            },
        };
        assert_eq!(round_trip(&rep), rep);
        let rej = Message {
            kind: Kind::Rej,
            body: Body::Rej {
                reason: 28,
                private: Private::new(&[2; REJ_PRIVATE], REJ_PRIVATE).unwrap(),
            },
            ..rep
        };
        assert_eq!(round_trip(&rej), rej);
        for kind in [Kind::Rtu, Kind::Dreq, Kind::Drep] {
            let m = Message {
                kind,
                body: Body::Empty,
                ..rep
            };
            assert_eq!(round_trip(&m), m);
        }
    }

    #[test]
    fn private_data_over_the_limits_is_refused() {
        assert!(Private::new(&[0; REQ_PRIVATE + 1], REQ_PRIVATE).is_none());
        let mut buf = [0u8; MAX_MESSAGE];
        let n = encode(&req(&[3; 10]), &mut buf);
        // The private length byte is the body's last fixed byte before the data.
        let at = n - 10 - 1;
        buf[at] = (REQ_PRIVATE + 1) as u8;
        assert_eq!(
            decode(&buf[..n]),
            Err(DecodeError::PrivateTooLong(REQ_PRIVATE + 1))
        );
    }

    #[test]
    fn every_truncation_and_bad_header_is_refused() {
        let mut buf = [0u8; MAX_MESSAGE];
        let n = encode(&req(b"hello"), &mut buf);
        for cut in 0..n {
            assert!(decode(&buf[..cut]).is_err(), "a {cut}-byte prefix decoded");
        }
        let mut bad = buf;
        bad[0] = b'X';
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Magic));
        let mut bad = buf;
        bad[4] = 2;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Version(2)));
        let mut bad = buf;
        bad[5] = 99;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Kind(99)));
        let mut bad = buf;
        bad[16] = b'/';
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Name));
        let mut bad = buf;
        bad[HEADER + 2 + CONN_LEN] = 99; // the source address family
        assert!(matches!(decode(&bad[..n]), Err(DecodeError::Family(_))));
        // A trailing byte the stated length does not cover.
        let mut long = buf;
        long[n] = 0;
        assert!(decode(&long[..n + 1]).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A simple generator: every datagram of a sliding pattern over the valid one.
        let mut buf = [0u8; MAX_MESSAGE];
        let n = encode(&req(&[9; 20]), &mut buf);
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..20_000 {
            let mut d = buf;
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let i = (x as usize) % n;
                d[i] = (x >> 8) as u8;
            }
            let _ = decode(&d[..(x as usize >> 3) % (n + 1)]);
            let _ = decode(&d[..n]);
        }
    }

    #[test]
    fn names_allow_only_plain_characters() {
        assert!(Name::new("p123-4.x_y").is_some());
        for bad in [
            "",
            "../x",
            "a/b",
            ".hidden",
            &"x".repeat(NAME_LEN + 1),
            "sp ace",
        ] {
            assert!(Name::new(bad).is_none(), "{bad:?}");
        }
    }
}
