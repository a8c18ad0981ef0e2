//! The physical queue pairs and completion queues a virtual QP drives.
//!
//! The core knows nothing of libibverbs' structs: a provider (the host's real verbs,
//! the software provider, a simulated NIC in tests) implements [`PhysQp`] and
//! [`PhysCq`] over its own objects and converts these plain descriptions.

use crate::wr::{Opcode, SendFlags, WcOpcode, WcStatus};

/// One physical send WQE with a single scatter/gather element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendWqe {
    /// Our identifier; comes back in the completion.
    pub wr_id: u64,
    /// Opcode.
    pub opcode: Opcode,
    /// Send flags (`SIGNALED` set on the WQEs that must produce a completion).
    pub flags: SendFlags,
    /// Local address.
    pub addr: u64,
    /// Length in bytes; 0 means no scatter/gather element.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Immediate, network byte order.
    pub imm_data: u32,
    /// Atomic compare operand or addend.
    pub compare_add: u64,
    /// Atomic swap operand.
    pub swap: u64,
}

impl SendWqe {
    /// An all-zero WQE, for initialising buffers.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        opcode: Opcode::RDMA_WRITE,
        flags: SendFlags::NONE,
        addr: 0,
        len: 0,
        lkey: 0,
        remote_addr: 0,
        rkey: 0,
        imm_data: 0,
        compare_add: 0,
        swap: 0,
    };
}

impl Default for Opcode {
    fn default() -> Self {
        Opcode::RDMA_WRITE
    }
}

/// One physical receive WQE; `len == 0` posts no scatter/gather element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWqe {
    /// Our identifier; comes back in the completion.
    pub wr_id: u64,
    /// Buffer address.
    pub addr: u64,
    /// Buffer length.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

/// One physical completion, as a provider polled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysWc {
    /// The WQE's identifier.
    pub wr_id: u64,
    /// Status; when not success, `opcode` and `byte_len` are undefined (as in verbs).
    pub status: WcStatus,
    /// Completion opcode.
    pub opcode: WcOpcode,
    /// The physical QP's number.
    pub qp_num: u32,
    /// Bytes transferred (receive side).
    pub byte_len: u32,
    /// Immediate, network byte order, when the completion carries one.
    pub imm_data: Option<u32>,
}

impl PhysWc {
    /// An all-zero completion, for initialising buffers.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        status: WcStatus::SUCCESS,
        opcode: WcOpcode::SEND,
        qp_num: 0,
        byte_len: 0,
        imm_data: None,
    };
}

impl Default for PhysWc {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// A provider refused a post: the WQEs before `posted` were accepted (as verbs'
/// `bad_wr` says), the rest were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostFailure {
    /// How many WQEs of the chain were accepted.
    pub posted: usize,
    /// The provider's errno-style code.
    pub errno: i32,
}

impl core::fmt::Display for PostFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "post refused after {} WQEs (errno {})",
            self.posted, self.errno
        )
    }
}

impl core::error::Error for PostFailure {}

/// A provider could not poll its completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollFailure {
    /// The provider's errno-style code.
    pub errno: i32,
}

impl core::fmt::Display for PollFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "polling the completion queue failed (errno {})",
            self.errno
        )
    }
}

impl core::error::Error for PollFailure {}

/// A physical RC queue pair.
///
/// `post_send` and `post_recv` receive a whole chain: a provider posts it with one
/// call (one doorbell on real hardware).
pub trait PhysQp {
    /// The QP number completions carry.
    fn qp_num(&self) -> u32;
    /// Post a chain of send WQEs, in order.
    fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure>;
    /// Post a chain of receive WQEs, in order.
    fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure>;
    /// Move the QP to the error state, so that every WQE outstanding on it completes
    /// with a flush error. Called once, when the virtual QP that owns it fails, so
    /// that every outstanding request is reported (off the data path).
    fn set_error(&mut self);
}

/// A physical completion queue.
pub trait PhysCq {
    /// Poll up to `out.len()` completions into `out`, returning how many.
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure>;
}

impl<T: PhysQp + ?Sized> PhysQp for &mut T {
    #[inline]
    fn qp_num(&self) -> u32 {
        (**self).qp_num()
    }
    #[inline]
    fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        (**self).post_send(wqes)
    }
    #[inline]
    fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        (**self).post_recv(wqes)
    }
    fn set_error(&mut self) {
        (**self).set_error()
    }
}

impl<T: PhysCq + ?Sized> PhysCq for &mut T {
    #[inline]
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure> {
        (**self).poll(out)
    }
}
