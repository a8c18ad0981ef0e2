//! The headers of verbs over UCP (this module's parent, "The responder executes"): a
//! request's and a response's fixed-size active-message header, written and read
//! here so that every field a peer sends is checked before anything acts on it.
//!
//! A header is exactly its type's size ([`Request::LEN`], [`Response::LEN`]), begins
//! with its magic and version, and carries its fields little endian; reading refuses
//! any other size, magic or version, a QP number beyond 24 bits, an opcode or code
//! outside the protocol, a payload length the header does not allow (a READ, an
//! atomic or a response carries none; SEND and SEND_WITH_IMM carry `len` bytes, WRITE
//! and WRITE_WITH_IMM `len` bytes or one [`FRAGMENT`] of them at a time) and non-zero
//! reserved bytes. The engine's UCX route (`engine::route`'s `ucx`) writes and reads
//! them.
//!
//! A WRITE longer than [`FRAGMENT`] goes in pieces of that size, each a request of
//! its own with the WQE's PSN, address and length and the piece's [`Request::offset`]
//! (a WRITE_WITH_IMM's pieces but the last are plain WRITEs): each piece then fits
//! one receive segment of UCX's TCP transport ([`super::ROUTE_SETTINGS`]), and the
//! responder's handler reads it where UCX received it, where a longer message is
//! first put together by UCP, a copy of every byte and an allocation of its size.

use std::fmt;

use vqp_sys::*;

const REQUEST_MAGIC: u32 = u32::from_le_bytes(*b"VQPR");
const RESPONSE_MAGIC: u32 = u32::from_le_bytes(*b"VQPS");
const VERSION: u16 = 3;
/// The largest message a request names: `max_msg_sz` of softverbs' devices (2^31).
pub const MAX_LEN: u64 = 1 << 31;
/// The largest piece of a WRITE one request carries (see the module's docs).
pub const FRAGMENT: u64 = 256 << 10;

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// Not the header's size.
    Size(usize),
    /// Another magic or version.
    Version,
    /// A field outside what the protocol allows (its name).
    Field(&'static str),
    /// The payload's length disagrees with the header.
    Payload {
        /// What the header allows.
        expected: u64,
        /// What came.
        got: u64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Size(n) => write!(f, "a header of {n} bytes"),
            WireError::Version => f.write_str("another protocol or version"),
            WireError::Field(name) => write!(f, "field {name} out of range"),
            WireError::Payload { expected, got } => {
                write!(f, "a payload of {got} bytes where {expected} are due")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// A verbs request sent to the process that owns the destination QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Request {
    /// `IBV_WR_*` of the WQE: SEND, SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), RDMA_READ,
    /// ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD.
    pub opcode: u32,
    /// [`F_SOLICITED`], [`F_UC`], [`F_UD`], [`F_GRH`].
    pub flags: u32,
    /// The requester's QP (24 bits).
    pub src_qpn: u32,
    /// The responder's QP (24 bits).
    pub dst_qpn: u32,
    /// The requester's connection id.
    pub conn: u32,
    /// The request's sequence number in the connection.
    pub psn: u32,
    /// The message length.
    pub len: u64,
    /// Immediate data (SEND_WITH_IMM, WRITE_WITH_IMM).
    pub imm: u32,
    /// Remote key (WRITE, READ, atomics).
    pub rkey: u32,
    /// Remote address (WRITE, READ, atomics).
    pub remote_addr: u64,
    /// The atomics' compare or add operand.
    pub compare_add: u64,
    /// The compare-and-swap's swap operand.
    pub swap: u64,
    /// The requester's GID (the responder checks it against the QP's address).
    pub sgid: [u8; 16],
    /// The destination GID (which device of the responder's machine).
    pub dgid: [u8; 16],
    /// The responder's port epoch as the requester QP last heard it (an answer's
    /// [`Response::epoch`]) plus one; 0 before any answer. A request that names an
    /// epoch before the port's current one left before the port last went down, and
    /// comes only now: a network would have lost it with the link.
    pub epoch: u32,
    /// Where the payload begins in the message: a multiple of [`FRAGMENT`] for a
    /// piece of a WRITE, 0 for any other request.
    pub offset: u32,
}

/// Flag: the WQE asked for a solicited event.
pub const F_SOLICITED: u32 = 1;
/// Flag: the requester is a UC QP.
pub const F_UC: u32 = 2;
/// Flag: a datagram (a UD QP's SEND); `rkey` carries its Q_Key.
pub const F_UD: u32 = 4;
/// Flag: the datagram's address handle has a GRH (the receiver gets one, naming
/// `sgid`).
pub const F_GRH: u32 = 8;
/// The largest datagram: the largest MTU, 4096 bytes.
pub const MAX_DATAGRAM: u64 = 4096;

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Checks a header's size, magic, version and reserved bytes (6..8).
fn check_head(b: &[u8], len: usize, magic: u32) -> Result<(), WireError> {
    if b.len() != len {
        return Err(WireError::Size(b.len()));
    }
    if get32(b, 0) != magic || u16::from_le_bytes([b[4], b[5]]) != VERSION {
        return Err(WireError::Version);
    }
    if b[6..8] != [0, 0] {
        return Err(WireError::Field("reserved"));
    }
    Ok(())
}

impl Request {
    /// Bytes of a request header.
    pub const LEN: usize = 112;

    /// The payload bytes this request carries: `len` for SEND, for WRITE `len` or one
    /// [`FRAGMENT`] of it from `offset` (`whole`: the first piece is the whole
    /// message), else none.
    pub fn payload_len(&self, whole: bool) -> u64 {
        match self.opcode {
            IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => self.len,
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM if whole && self.offset == 0 => self.len,
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => {
                (self.len.saturating_sub(u64::from(self.offset))).min(FRAGMENT)
            }
            _ => 0,
        }
    }

    /// Whether the request carries the end of its message (`payload` bytes from
    /// `offset`): the last piece of a WRITE, or any other request.
    pub fn is_last(&self, payload: u64) -> bool {
        !matches!(self.opcode, IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM)
            || u64::from(self.offset) + payload >= self.len
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put32(&mut b, 0, REQUEST_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        put32(&mut b, 8, self.opcode);
        put32(&mut b, 12, self.flags);
        put32(&mut b, 16, self.src_qpn);
        put32(&mut b, 20, self.dst_qpn);
        put32(&mut b, 24, self.conn);
        put32(&mut b, 28, self.psn);
        put64(&mut b, 32, self.len);
        put32(&mut b, 40, self.imm);
        put32(&mut b, 44, self.rkey);
        put64(&mut b, 48, self.remote_addr);
        put64(&mut b, 56, self.compare_add);
        put64(&mut b, 64, self.swap);
        b[72..88].copy_from_slice(&self.sgid);
        b[88..104].copy_from_slice(&self.dgid);
        put32(&mut b, 104, self.epoch);
        put32(&mut b, 108, self.offset);
        b
    }

    /// Reads a request header `b` that came with `payload` bytes of payload, checking
    /// every field (see the module's docs).
    pub fn decode(b: &[u8], payload: u64) -> Result<Request, WireError> {
        check_head(b, Self::LEN, REQUEST_MAGIC)?;
        let mut r = Request {
            opcode: get32(b, 8),
            flags: get32(b, 12),
            src_qpn: get32(b, 16),
            dst_qpn: get32(b, 20),
            conn: get32(b, 24),
            psn: get32(b, 28),
            len: get64(b, 32),
            imm: get32(b, 40),
            rkey: get32(b, 44),
            remote_addr: get64(b, 48),
            compare_add: get64(b, 56),
            swap: get64(b, 64),
            epoch: get32(b, 104),
            offset: get32(b, 108),
            ..Request::default()
        };
        r.sgid.copy_from_slice(&b[72..88]);
        r.dgid.copy_from_slice(&b[88..104]);
        let known = matches!(
            r.opcode,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_RDMA_READ
                | IBV_WR_ATOMIC_CMP_AND_SWP
                | IBV_WR_ATOMIC_FETCH_AND_ADD
        );
        if !known {
            return Err(WireError::Field("opcode"));
        }
        if r.flags & !(F_SOLICITED | F_UC | F_UD | F_GRH) != 0
            || (r.flags & F_UD != 0 && r.flags & F_UC != 0)
            || (r.flags & F_GRH != 0 && r.flags & F_UD == 0)
        {
            return Err(WireError::Field("flags"));
        }
        if r.flags & F_UD != 0 {
            if !matches!(r.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM) {
                return Err(WireError::Field("opcode"));
            }
            if r.len > MAX_DATAGRAM {
                return Err(WireError::Field("len"));
            }
        }
        if r.src_qpn >> 24 != 0 || r.dst_qpn >> 24 != 0 {
            return Err(WireError::Field("qpn"));
        }
        if r.len > MAX_LEN {
            return Err(WireError::Field("len"));
        }
        let atomic = matches!(
            r.opcode,
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        );
        if atomic && r.len != 8 {
            return Err(WireError::Field("len"));
        }
        let write = matches!(r.opcode, IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM);
        let offset = u64::from(r.offset);
        if r.offset != 0
            && (!write || r.flags & F_UD != 0 || offset % FRAGMENT != 0 || offset >= r.len)
        {
            return Err(WireError::Field("offset"));
        }
        // The first piece may be the whole message (see `payload_len`).
        let whole = payload == r.len;
        if payload != r.payload_len(whole) {
            return Err(WireError::Payload {
                expected: r.payload_len(false),
                got: payload,
            });
        }
        Ok(r)
    }
}

/// The responder's answer to a request: ACK (up to and including `psn`), RNR NAK or
/// NAK; a READ's data travels as the response's payload, an atomic's original value
/// in `value64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Response {
    /// [`ACK`], [`RNR`], [`NAK`], [`DROP`] or [`STALE`].
    pub code: u32,
    /// The requester's QP.
    pub src_qpn: u32,
    /// The responder's QP.
    pub dst_qpn: u32,
    /// The requester's connection id.
    pub conn: u32,
    /// The sequence number answered.
    pub psn: u32,
    /// ACK: the byte count; RNR: the timer code; NAK: the completion status.
    pub value: u32,
    /// An atomic's original value.
    pub value64: u64,
    /// The length of a READ's data that follows as payload.
    pub len: u64,
    /// How many times the responder's port went down (its epoch) when it answered.
    pub epoch: u32,
}

/// Response code: executed.
pub const ACK: u32 = 0;
/// Response code: receiver not ready; `value` is the timer code.
pub const RNR: u32 = 1;
/// Response code: failed; `value` is the `IBV_WC_*` status.
pub const NAK: u32 = 2;
/// Response code: nobody took it (no such QP, not connected to the sender).
pub const DROP: u32 = 3;
/// Response code: not taken, as sent before the responder's port last went down
/// (the request's epoch is behind `epoch`): to be sent again at once.
pub const STALE: u32 = 4;

impl Response {
    /// Bytes of a response header.
    pub const LEN: usize = 56;

    /// The header's bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put32(&mut b, 0, RESPONSE_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        put32(&mut b, 8, self.code);
        put32(&mut b, 12, self.src_qpn);
        put32(&mut b, 16, self.dst_qpn);
        put32(&mut b, 20, self.conn);
        put32(&mut b, 24, self.psn);
        put32(&mut b, 28, self.value);
        put64(&mut b, 32, self.value64);
        put64(&mut b, 40, self.len);
        put32(&mut b, 48, self.epoch);
        b
    }

    /// Reads a response header `b` that came with `payload` bytes of payload.
    pub fn decode(b: &[u8], payload: u64) -> Result<Response, WireError> {
        check_head(b, Self::LEN, RESPONSE_MAGIC)?;
        if b[52..] != [0u8; 4] {
            return Err(WireError::Field("reserved"));
        }
        let r = Response {
            code: get32(b, 8),
            src_qpn: get32(b, 12),
            dst_qpn: get32(b, 16),
            conn: get32(b, 20),
            psn: get32(b, 24),
            value: get32(b, 28),
            value64: get64(b, 32),
            len: get64(b, 40),
            epoch: get32(b, 48),
        };
        if r.code > STALE {
            return Err(WireError::Field("code"));
        }
        if r.src_qpn >> 24 != 0 || r.dst_qpn >> 24 != 0 {
            return Err(WireError::Field("qpn"));
        }
        if r.len > MAX_LEN || (r.code != ACK && r.len != 0) {
            return Err(WireError::Field("len"));
        }
        if payload != r.len {
            return Err(WireError::Payload {
                expected: r.len,
                got: payload,
            });
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write() -> Request {
        Request {
            opcode: IBV_WR_RDMA_WRITE_WITH_IMM,
            flags: F_SOLICITED,
            src_qpn: 0x12_3456,
            dst_qpn: 0x00_0042,
            conn: 7,
            psn: 99,
            len: 4096,
            imm: 0xdead_beef,
            rkey: 0x1234,
            remote_addr: 0x7f00_0000_1000,
            sgid: [1; 16],
            dgid: [2; 16],
            epoch: 0x0123_4567,
            ..Request::default()
        }
    }

    #[test]
    fn headers_round_trip() {
        let w = write();
        assert_eq!(Request::decode(&w.encode(), 4096), Ok(w));
        let fa = Request {
            opcode: IBV_WR_ATOMIC_FETCH_AND_ADD,
            len: 8,
            compare_add: 5,
            ..write()
        };
        assert_eq!(Request::decode(&fa.encode(), 0), Ok(fa));
        let r = Response {
            code: ACK,
            src_qpn: 1,
            dst_qpn: 2,
            conn: 3,
            psn: 4,
            value: 64,
            value64: 9,
            len: 64,
            epoch: 5,
        };
        assert_eq!(Response::decode(&r.encode(), 64), Ok(r));
    }

    #[test]
    fn every_malformed_request_is_refused() {
        let good = write().encode();
        assert_eq!(
            Request::decode(&good[..111], 4096),
            Err(WireError::Size(111))
        );
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(Request::decode(&long, 4096), Err(WireError::Size(113)));
        let bad = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            Request::decode(&b, 4096)
        };
        assert_eq!(bad(0, b'X'), Err(WireError::Version));
        assert_eq!(bad(4, 1), Err(WireError::Version));
        assert_eq!(bad(6, 1), Err(WireError::Field("reserved")));
        assert_eq!(bad(110, 1), Err(WireError::Field("offset")));
        assert_eq!(bad(8, 200), Err(WireError::Field("opcode")));
        assert_eq!(bad(12, 16), Err(WireError::Field("flags")));
        // UD with UC, a GRH without UD, a datagram that is no SEND or is too long.
        assert_eq!(bad(12, 6), Err(WireError::Field("flags")));
        assert_eq!(bad(12, 8), Err(WireError::Field("flags")));
        assert_eq!(bad(12, 4), Err(WireError::Field("opcode")));
        let ud = Request {
            opcode: IBV_WR_SEND,
            flags: F_UD | F_GRH,
            len: 4097,
            ..write()
        };
        assert_eq!(
            Request::decode(&ud.encode(), 4097),
            Err(WireError::Field("len"))
        );
        let ud = Request { len: 64, ..ud };
        assert_eq!(Request::decode(&ud.encode(), 64), Ok(ud));
        assert_eq!(bad(19, 1), Err(WireError::Field("qpn")));
        assert_eq!(bad(23, 1), Err(WireError::Field("qpn")));
        assert_eq!(bad(39, 1), Err(WireError::Field("len")));
        // The payload must be what the header says: a WRITE's length, nothing for a
        // READ or an atomic, whose length is 8.
        assert_eq!(
            Request::decode(&good, 100),
            Err(WireError::Payload {
                expected: 4096,
                got: 100
            })
        );
        let read = Request {
            opcode: IBV_WR_RDMA_READ,
            ..write()
        };
        assert!(matches!(
            Request::decode(&read.encode(), 4096),
            Err(WireError::Payload { .. })
        ));
        assert!(Request::decode(&read.encode(), 0).is_ok());
        let cas = Request {
            opcode: IBV_WR_ATOMIC_CMP_AND_SWP,
            len: 16,
            ..write()
        };
        assert_eq!(
            Request::decode(&cas.encode(), 0),
            Err(WireError::Field("len"))
        );
    }

    #[test]
    fn a_long_write_goes_whole_or_in_fragments_from_their_boundaries() {
        let long = Request {
            len: 2 * FRAGMENT + 100,
            ..write()
        };
        // The whole message, or each piece from its offset (the last one short).
        assert!(Request::decode(&long.encode(), long.len).is_ok());
        for (offset, payload) in [(0, FRAGMENT), (FRAGMENT, FRAGMENT), (2 * FRAGMENT, 100)] {
            let piece = Request {
                offset: offset as u32,
                ..long
            };
            assert_eq!(Request::decode(&piece.encode(), payload), Ok(piece));
            assert_eq!(piece.is_last(payload), offset == 2 * FRAGMENT);
        }
        // A piece of another size, an offset off a boundary or past the end, and an
        // offset on anything but a WRITE are refused.
        assert!(matches!(
            Request::decode(&long.encode(), FRAGMENT - 1),
            Err(WireError::Payload { .. })
        ));
        let off = |offset: u64, r: Request| {
            let r = Request {
                offset: offset as u32,
                ..r
            };
            Request::decode(&r.encode(), r.payload_len(false))
        };
        assert_eq!(off(FRAGMENT + 1, long), Err(WireError::Field("offset")));
        assert_eq!(off(3 * FRAGMENT, long), Err(WireError::Field("offset")));
        let send = Request {
            opcode: IBV_WR_SEND,
            ..long
        };
        assert_eq!(off(FRAGMENT, send), Err(WireError::Field("offset")));
        assert!(send.is_last(send.len));
    }

    #[test]
    fn every_malformed_response_is_refused() {
        let nak = Response {
            code: NAK,
            value: IBV_WC_REM_ACCESS_ERR,
            ..Response::default()
        };
        let good = nak.encode();
        assert_eq!(Response::decode(&good, 0), Ok(nak));
        assert_eq!(Response::decode(&good[..40], 0), Err(WireError::Size(40)));
        let bad = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            Response::decode(&b, 0)
        };
        assert_eq!(bad(1, 0), Err(WireError::Version));
        assert_eq!(bad(8, 5), Err(WireError::Field("code")));
        assert_eq!(bad(53, 1), Err(WireError::Field("reserved")));
        assert_eq!(bad(15, 1), Err(WireError::Field("qpn")));
        // Only an ACK carries data, and exactly its length.
        assert_eq!(bad(40, 1), Err(WireError::Field("len")));
        assert!(matches!(
            Response::decode(&good, 1),
            Err(WireError::Payload { .. })
        ));
    }
}
