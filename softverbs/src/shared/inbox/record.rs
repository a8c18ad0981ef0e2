//! A record: what one message between processes carries, and its encoding in a slot.

use super::{FIXED, PAYLOAD};

/// What a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A request from a requester QP to a responder QP.
    Request = 1,
    /// The responder's answer to one request.
    Response = 2,
    /// A request that arrived at an XRC receive QP whose named SRQ another process
    /// owns, passed on to that process (`engine::route::namespace::xrc`); `aux` is the receive
    /// QP's domain.
    XrcForward = 3,
    /// The SRQ owner's outcome of an [`Kind::XrcForward`], back to the receive QP's
    /// process.
    XrcResult = 4,
    /// A call on an XRC receive QP by a process that opened it (`ibv_open_qp`) to the
    /// process that owns it.
    XrcCall = 5,
    /// The answer to an [`Kind::XrcCall`].
    XrcReply = 6,
    /// An affiliated event of an XRC receive QP, for a handle another process opened.
    XrcEvent = 7,
}

/// One message between processes (its fixed part; the payload travels beside it). A
/// request names the requester's QP (`src_*`), the responder's (`dst_*`), the
/// operation and where the requester's data lives; a response echoes the QP numbers,
/// `conn` and `psn`, and carries `code` and `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub kind: Kind,
    /// Request: `IBV_WR_*`. Response: a response code (see `engine::route::namespace`).
    pub code: u32,
    /// Bit 0: solicited; bit 1: the payload is inline data; the other `F_*`; an XRC
    /// request's SRQ number from [`XRC_SRQN_SHIFT`] up.
    pub flags: u32,
    /// The sending process.
    pub from_pid: u32,
    pub from_token: u32,
    pub src_qpn: u32,
    pub src_dev: u32,
    pub dst_qpn: u32,
    pub dst_dev: u32,
    /// Requester's connection id (changes when its QP is reset and reconnected).
    pub conn: u32,
    /// Requester's sequence number of this request on `conn`.
    pub psn: u32,
    pub rkey: u32,
    pub imm: u32,
    /// Response: byte count, RNR timer or completion status.
    pub value: u32,
    /// Message length.
    pub len: u64,
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    /// Address ranges in the payload: `n_iov` of them, 16 bytes each.
    pub n_iov: u32,
    /// Bytes of payload (inline data or ranges) that came with the record.
    pub payload_len: usize,
    /// A word a kind gives its own meaning (an XRC forward's domain).
    pub aux: u64,
}

/// Flag: the solicited-event bit.
pub(crate) const F_SOLICITED: u32 = 1;
/// Flag: the payload is inline data.
pub(crate) const F_INLINE: u32 = 2;
/// Flag: the requester QP is UC (a responder answers only a QP of its own type).
pub(crate) const F_UC: u32 = 4;
/// Flag: the requester QP is UD (the request is a datagram: no sequence, `rkey` is the
/// Q_Key).
pub(crate) const F_UD: u32 = 8;
/// Flag: the datagram's address handle had a global route (the receiver gets a GRH);
/// the flags' top byte is then its source GID index ([`GRH_SGID_SHIFT`]).
pub(crate) const F_GRH: u32 = 16;
/// Flag: the requester QP is an XRC send QP; bits 8 to 31 of `flags` carry the
/// remote SRQ number (24 bits, as the XRC extended transport header's).
pub(crate) const F_XRC: u32 = 32;
/// Where the remote SRQ number of an XRC request sits in `flags`.
pub(crate) const XRC_SRQN_SHIFT: u32 = 8;
/// Where a datagram's source GID index sits in the flags (bits 24 to 31). The bits
/// are shared with an XRC request's SRQ number: a request is one or the other (`F_UD`
/// or `F_XRC`), never both.
pub(crate) const GRH_SGID_SHIFT: u32 = 24;

impl Record {
    /// An empty record of `kind`.
    pub(crate) fn new(kind: Kind) -> Record {
        Record {
            kind,
            code: 0,
            flags: 0,
            from_pid: 0,
            from_token: 0,
            src_qpn: 0,
            src_dev: 0,
            dst_qpn: 0,
            dst_dev: 0,
            conn: 0,
            psn: 0,
            rkey: 0,
            imm: 0,
            value: 0,
            len: 0,
            remote_addr: 0,
            compare_add: 0,
            swap: 0,
            n_iov: 0,
            payload_len: 0,
            aux: 0,
        }
    }

    /// Appends an address range to `payload` (the record's payload under construction,
    /// its first `payload_len` bytes used); false when it is full.
    pub(crate) fn push_iov(&mut self, payload: &mut [u8; PAYLOAD], addr: u64, len: u64) -> bool {
        let at = self.n_iov as usize * 16;
        if at + 16 > PAYLOAD {
            return false;
        }
        payload[at..at + 8].copy_from_slice(&addr.to_le_bytes());
        payload[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
        self.n_iov += 1;
        self.payload_len = at + 16;
        true
    }
}

/// The `i`-th address range of a payload of ranges (zeros past its end).
pub(crate) fn iov(payload: &[u8], i: usize) -> (u64, u64) {
    let word = |at: usize| {
        payload
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    (word(i * 16), word(i * 16 + 8))
}

impl Record {
    pub(super) fn encode_fixed(&self, payload_len: usize) -> [u8; FIXED] {
        let mut b = [0u8; FIXED];
        let words32 = [
            self.kind as u32,
            self.code,
            self.flags,
            self.from_pid,
            self.from_token,
            self.src_qpn,
            self.src_dev,
            self.dst_qpn,
            self.dst_dev,
            self.conn,
            self.psn,
            self.rkey,
            self.imm,
            self.value,
            self.n_iov,
            payload_len as u32,
        ];
        for (i, w) in words32.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let words64 = [
            self.len,
            self.remote_addr,
            self.compare_add,
            self.swap,
            self.aux,
        ];
        for (i, w) in words64.iter().enumerate() {
            b[64 + i * 8..72 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Decodes a record; `None` for one that is malformed (a peer never makes us read
    /// past the payload or trust a count it sent).
    pub(super) fn decode(fixed: &[u8; FIXED]) -> Option<Record> {
        let w32 =
            |i: usize| u32::from_le_bytes(fixed[i * 4..i * 4 + 4].try_into().unwrap_or_default());
        let w64 = |i: usize| {
            u64::from_le_bytes(fixed[64 + i * 8..72 + i * 8].try_into().unwrap_or_default())
        };
        let kind = match w32(0) {
            1 => Kind::Request,
            2 => Kind::Response,
            3 => Kind::XrcForward,
            4 => Kind::XrcResult,
            5 => Kind::XrcCall,
            6 => Kind::XrcReply,
            7 => Kind::XrcEvent,
            _ => return None,
        };
        let payload_len = w32(15) as usize;
        let n_iov = w32(14);
        if payload_len > PAYLOAD || n_iov as usize * 16 > PAYLOAD {
            return None;
        }
        let mut r = Record::new(kind);
        r.code = w32(1);
        r.flags = w32(2);
        r.from_pid = w32(3);
        r.from_token = w32(4);
        r.src_qpn = w32(5);
        r.src_dev = w32(6);
        r.dst_qpn = w32(7);
        r.dst_dev = w32(8);
        r.conn = w32(9);
        r.psn = w32(10);
        r.rkey = w32(11);
        r.imm = w32(12);
        r.value = w32(13);
        r.n_iov = n_iov;
        r.payload_len = payload_len;
        r.len = w64(0);
        r.remote_addr = w64(1);
        r.compare_add = w64(2);
        r.swap = w64(3);
        r.aux = w64(4);
        Some(r)
    }
}
