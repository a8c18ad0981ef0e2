//! The virtual work requests and completions an application exchanges with a
//! [`VirtualQp`](crate::VirtualQp).
//!
//! Numeric codes (`Opcode`, `WcOpcode`, `WcStatus`, `SendFlags`) use libibverbs'
//! values so that a binding converts them without a table, and are newtypes over
//! `u32` so that a value the library does not know stays representable (and is
//! rejected or reported, never a panic).

use core::fmt;

/// How many RDMA devices one virtual QP's data QPs may span.
pub const MAX_DEVICES: usize = 4;

/// A work request opcode, with libibverbs' `ibv_wr_opcode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Opcode(pub u32);

impl Opcode {
    /// One-sided write.
    pub const RDMA_WRITE: Self = Self(0);
    /// One-sided write that also consumes a receive at the responder.
    pub const RDMA_WRITE_WITH_IMM: Self = Self(1);
    /// Two-sided send.
    pub const SEND: Self = Self(2);
    /// Two-sided send carrying an immediate.
    pub const SEND_WITH_IMM: Self = Self(3);
    /// One-sided read.
    pub const RDMA_READ: Self = Self(4);
    /// 64-bit compare and swap.
    pub const ATOMIC_CMP_AND_SWP: Self = Self(5);
    /// 64-bit fetch and add.
    pub const ATOMIC_FETCH_AND_ADD: Self = Self(6);

    /// The opcode's libibverbs name, or `None` for a value vqp does not handle.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::RDMA_WRITE => "RDMA_WRITE",
            Self::RDMA_WRITE_WITH_IMM => "RDMA_WRITE_WITH_IMM",
            Self::SEND => "SEND",
            Self::SEND_WITH_IMM => "SEND_WITH_IMM",
            Self::RDMA_READ => "RDMA_READ",
            Self::ATOMIC_CMP_AND_SWP => "ATOMIC_CMP_AND_SWP",
            Self::ATOMIC_FETCH_AND_ADD => "ATOMIC_FETCH_AND_ADD",
            _ => return None,
        })
    }

    /// True for the one-sided data movers that a virtual QP cuts into fragments.
    pub const fn is_rdma(self) -> bool {
        matches!(
            self,
            Self::RDMA_WRITE | Self::RDMA_WRITE_WITH_IMM | Self::RDMA_READ
        )
    }

    /// The completion opcode a successful request of this opcode reports.
    pub const fn completion(self) -> WcOpcode {
        match self {
            Self::RDMA_WRITE | Self::RDMA_WRITE_WITH_IMM => WcOpcode::RDMA_WRITE,
            Self::RDMA_READ => WcOpcode::RDMA_READ,
            Self::ATOMIC_CMP_AND_SWP => WcOpcode::COMP_SWAP,
            Self::ATOMIC_FETCH_AND_ADD => WcOpcode::FETCH_ADD,
            _ => WcOpcode::SEND,
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "opcode {}", self.0),
        }
    }
}

/// Send flags, with libibverbs' `ibv_send_flags` bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// No flag.
    pub const NONE: Self = Self(0);
    /// Wait for earlier RDMA reads and atomics before this request.
    pub const FENCE: Self = Self(1);
    /// Generate a completion for this request.
    pub const SIGNALED: Self = Self(2);
    /// Ask the responder for a solicited event.
    pub const SOLICITED: Self = Self(4);
    /// Copy the payload into the WQE at post time. The provider copies it with the
    /// CPU, checking no key, so the safe posts refuse it with a payload given by
    /// address: see the [post contract](crate::phys#the-post-contract) and
    /// [`VirtualQp::post_send_inline`](crate::VirtualQp::post_send_inline).
    pub const INLINE: Self = Self(8);

    /// True when every bit of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` with the bits of `other` set.
    #[must_use]
    pub const fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// `self` with the bits of `other` cleared.
    #[must_use]
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.with(rhs)
    }
}

/// Local and remote memory keys of one buffer pair, per device index.
///
/// A virtual QP whose data QPs span several devices needs the keys each device gave
/// the buffers; a fixed small array, indexed by the device index the QPs were built
/// with, not a map.
///
/// The layout is C's (`#[repr(C)]`: the mask, then an `(lkey, rkey)` pair per
/// device), so that a C caller's request can be read in place (vqp-capi's
/// `vqp_send_wr`, checked at compile time there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Keys {
    /// Bit `d` set: `pairs[d]` is given. Only the low [`MAX_DEVICES`] bits are ever
    /// set.
    present: u32,
    /// `[lkey, rkey]` per device.
    pairs: [[u32; 2]; MAX_DEVICES],
}

impl Keys {
    /// Keys for device 0 only: the common single-device case.
    pub const fn single(lkey: u32, rkey: u32) -> Self {
        Self::none().with(0, lkey, rkey)
    }

    /// No keys at all (valid only for requests that touch no memory key).
    pub const fn none() -> Self {
        Self {
            present: 0,
            pairs: [[0; 2]; MAX_DEVICES],
        }
    }

    /// `self` with the keys of `device` set; a device index ≥ [`MAX_DEVICES`] is
    /// ignored (and so later reported missing).
    #[must_use]
    pub const fn with(mut self, device: usize, lkey: u32, rkey: u32) -> Self {
        if device < MAX_DEVICES {
            self.pairs[device] = [lkey, rkey];
            self.present |= 1 << device;
        }
        self
    }

    /// The `(lkey, rkey)` of `device`, if given.
    #[inline]
    pub const fn get(&self, device: usize) -> Option<(u32, u32)> {
        if device < MAX_DEVICES && self.present & (1 << device) != 0 {
            Some((self.pairs[device][0], self.pairs[device][1]))
        } else {
            None
        }
    }

    /// The `(lkey, rkey)` stored for `device` (zeros when absent): for callers that
    /// checked [`Keys::present`] already.
    #[inline]
    pub(crate) const fn pair(&self, device: u8) -> (u32, u32) {
        let d = device as usize % MAX_DEVICES;
        (self.pairs[d][0], self.pairs[d][1])
    }

    /// Bit mask of the devices whose keys are present.
    #[inline]
    pub const fn present(&self) -> u8 {
        // Only the low MAX_DEVICES bits are set (`with`; vqp-capi checks a C
        // caller's mask before reading its request in place).
        self.present as u8
    }
}

/// A virtual send work request.
///
/// `len` is 64-bit: a fragmented request may be larger than one verbs WQE allows.
/// `imm_data` is in network byte order, exactly as in `ibv_send_wr.imm_data`; vqp
/// passes it through untouched. The layout is C's (`#[repr(C)]`), so that vqp-capi
/// reads a C caller's `vqp_send_wr` in place instead of converting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct SendWr {
    /// The application's identifier, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: Opcode,
    /// [`SendFlags`]; `SIGNALED` asks for a completion.
    pub flags: SendFlags,
    /// Local buffer address, inside the region of the request's local key (the device
    /// checks it; see the [post contract](crate::phys#the-post-contract)).
    pub local_addr: u64,
    /// Bytes to move.
    pub len: u64,
    /// Remote buffer address (RDMA and atomics).
    pub remote_addr: u64,
    /// Immediate data, network byte order (WITH_IMM opcodes).
    pub imm_data: u32,
    /// Memory keys per device.
    pub keys: Keys,
    /// Compare operand (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap operand (CMP_AND_SWP).
    pub swap: u64,
}

impl SendWr {
    /// A signaled request with the given opcode over `[local_addr, +len)` →
    /// `remote_addr`; atomics' operands and the immediate start at zero.
    pub const fn new(
        wr_id: u64,
        opcode: Opcode,
        local_addr: u64,
        len: u64,
        remote_addr: u64,
        keys: Keys,
    ) -> Self {
        Self {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            local_addr,
            len,
            remote_addr,
            imm_data: 0,
            keys,
            compare_add: 0,
            swap: 0,
        }
    }

    /// `self` with the immediate set (network byte order).
    #[must_use]
    pub const fn imm(mut self, imm_data: u32) -> Self {
        self.imm_data = imm_data;
        self
    }

    /// `self` with `flags`.
    #[must_use]
    pub const fn flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }
}

/// A virtual receive work request.
///
/// `len == 0` is a **notification receive**: it completes when a whole
/// RDMA_WRITE_WITH_IMM message from the peer has landed. `len > 0` is a data receive
/// for a two-sided SEND, passed straight through to data QP 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWr {
    /// The application's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffer address (data receive).
    pub addr: u64,
    /// Buffer length; 0 for a notification receive.
    pub len: u32,
    /// Local key of the buffer on data QP 0's device (data receive).
    pub lkey: u32,
}

impl RecvWr {
    /// A notification receive.
    pub const fn notification(wr_id: u64) -> Self {
        Self {
            wr_id,
            addr: 0,
            len: 0,
            lkey: 0,
        }
    }

    /// A data receive into `[addr, +len)`, which the device writes only once it found
    /// the range inside the region `lkey` names (the
    /// [post contract](crate::phys#the-post-contract)), so any address is safe here.
    pub const fn data(wr_id: u64, addr: u64, len: u32, lkey: u32) -> Self {
        Self {
            wr_id,
            addr,
            len,
            lkey,
        }
    }
}

/// A completion opcode, with libibverbs' `ibv_wc_opcode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcOpcode(pub u32);

impl WcOpcode {
    /// A send completed.
    pub const SEND: Self = Self(0);
    /// An RDMA write completed.
    pub const RDMA_WRITE: Self = Self(1);
    /// An RDMA read completed.
    pub const RDMA_READ: Self = Self(2);
    /// A compare-and-swap completed.
    pub const COMP_SWAP: Self = Self(3);
    /// A fetch-and-add completed.
    pub const FETCH_ADD: Self = Self(4);
    /// A receive consumed by a SEND.
    pub const RECV: Self = Self(128);
    /// A receive consumed by an RDMA_WRITE_WITH_IMM.
    pub const RECV_RDMA_WITH_IMM: Self = Self(129);

    /// True for receive-side completions (bit 7 set, as in verbs.h).
    pub const fn is_recv(self) -> bool {
        self.0 & 128 != 0
    }
}

/// A completion status, with libibverbs' `ibv_wc_status` values, plus vqp's own
/// statuses above [`WcStatus::VQP_BASE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// Success.
    pub const SUCCESS: Self = Self(0);
    /// Local length error.
    pub const LOC_LEN_ERR: Self = Self(1);
    /// Local QP operation error.
    pub const LOC_QP_OP_ERR: Self = Self(2);
    /// Local protection error.
    pub const LOC_PROT_ERR: Self = Self(4);
    /// Flushed: the QP was in error.
    pub const WR_FLUSH_ERR: Self = Self(5);
    /// Bad response.
    pub const BAD_RESP_ERR: Self = Self(7);
    /// Local access error.
    pub const LOC_ACCESS_ERR: Self = Self(8);
    /// Remote invalid request.
    pub const REM_INV_REQ_ERR: Self = Self(9);
    /// Remote access error.
    pub const REM_ACCESS_ERR: Self = Self(10);
    /// Remote operation error.
    pub const REM_OP_ERR: Self = Self(11);
    /// Transport retry counter exceeded.
    pub const RETRY_EXC_ERR: Self = Self(12);
    /// RNR retry counter exceeded.
    pub const RNR_RETRY_EXC_ERR: Self = Self(13);
    /// Fatal error.
    pub const FATAL_ERR: Self = Self(19);
    /// General error.
    pub const GENERAL_ERR: Self = Self(21);

    /// First status code that is vqp's own, not libibverbs'.
    pub const VQP_BASE: u32 = 0x1000;
    /// The peer broke the DQPLB protocol: an immediate with reserved bits set, or a
    /// sequence number outside the reorder window.
    pub const PROTOCOL_ERR: Self = Self(Self::VQP_BASE);
    /// The provider refused to post a physical work request.
    pub const POST_ERR: Self = Self(Self::VQP_BASE + 1);

    /// True for [`WcStatus::SUCCESS`].
    #[inline]
    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The status text, as `ibv_wc_status_str` prints libibverbs' codes.
    pub const fn as_str(self) -> &'static str {
        match self.0 {
            0 => "success",
            1 => "local length error",
            2 => "local QP operation error",
            3 => "local EE context operation error",
            4 => "local protection error",
            5 => "Work Request Flushed Error",
            6 => "memory management operation error",
            7 => "bad response error",
            8 => "local access error",
            9 => "remote invalid request error",
            10 => "remote access error",
            11 => "remote operation error",
            12 => "transport retry counter exceeded",
            13 => "RNR retry counter exceeded",
            14 => "local RDD violation error",
            15 => "remote invalid RD request",
            16 => "aborted error",
            17 => "invalid EE context number",
            18 => "invalid EE context state",
            19 => "fatal error",
            20 => "response timeout error",
            21 => "general error",
            22 => "TM error",
            23 => "TM software rendezvous",
            0x1000 => "vqp protocol error",
            0x1001 => "vqp post error",
            _ => "unknown",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.0)
    }
}

/// A virtual completion: one per virtual request, in posting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The application's identifier from the request.
    pub wr_id: u64,
    /// The first error any of the request's physical completions reported.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// The virtual QP's number.
    pub qp_num: u32,
    /// The immediate (network byte order), when the completion carries one.
    pub imm_data: Option<u32>,
    /// The whole request's length in bytes.
    pub byte_len: u64,
}

impl Wc {
    /// An all-zero completion, for initialising caller buffers.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        status: WcStatus::SUCCESS,
        opcode: WcOpcode::SEND,
        qp_num: 0,
        imm_data: None,
        byte_len: 0,
    };
}

/// Where a poll writes virtual completions: a `[Wc]`, or a caller's array of another
/// layout (vqp-capi writes C's `vqp_wc` in place through it, with no copy between).
pub trait WcOut {
    /// How many completions fit.
    fn capacity(&self) -> usize;
    /// Write completion `i`; called only with `i < capacity()`, each index once per
    /// poll, in increasing order.
    fn put(&mut self, i: usize, wc: Wc);
}

impl WcOut for [Wc] {
    #[inline(always)]
    fn capacity(&self) -> usize {
        self.len()
    }

    #[inline(always)]
    fn put(&mut self, i: usize, wc: Wc) {
        self[i] = wc;
    }
}

impl Default for Wc {
    fn default() -> Self {
        Self::EMPTY
    }
}
