//! The physical queue pairs and completion queues a virtual QP drives.
//!
//! The core knows nothing of libibverbs' structs: a provider (the host's real verbs,
//! the software provider, a simulated NIC in tests) implements [`PhysQp`] and
//! [`PhysCq`] over its own objects and converts these plain descriptions.
//!
//! # The post contract
//!
//! A work request names memory by raw address. What a provider may touch, and what the
//! caller of [`PhysQp::post_send`] and [`PhysQp::post_recv`] promises for it:
//!
//! 1. **Memory behind a key is checked by the device.** A scatter/gather element with
//!    a local key (a SEND's or WRITE's source, a READ's target, an atomic's 8-byte
//!    result, a data receive's buffer) and a remote address with a remote key are
//!    touched only after the device (the NIC, softverbs' engine) found the whole range
//!    inside the memory region the key names, in the QP's protection domain, with the
//!    access asked for; otherwise the request completes with a protection or remote
//!    access error and nothing is touched. Registering a region is therefore what hands
//!    memory over, and the caller promises that every region its keys name was
//!    registered soundly: over memory owned or borrowed for as long as the region is
//!    registered (vqp-host's `register_buffer` allocates and owns it, and leaks it if
//!    deregistration fails; `register_raw`, which takes an address, is `unsafe`), with
//!    no Rust reference assuming that memory unchanged while a request may write it.
//! 2. **An inline payload is read by the CPU, unchecked.** A send WQE with
//!    [`SendFlags::INLINE`] and `len > 0` is copied from `addr..addr + len` into the
//!    WQE during the post call itself, with no key and no bounds check. The caller
//!    promises that the range is initialised memory of this process, readable, and not
//!    written during the call.
//! 3. **The chain is read during the call only**: a provider keeps no reference to the
//!    slice of WQEs.
//!
//! [`VirtualQp`](crate::VirtualQp) keeps the contract for its callers. Its safe posts
//! take no inline payload by address
//! ([`PostSendError::RawInline`](crate::PostSendError::RawInline));
//! [`VirtualQp::post_send_inline`](crate::VirtualQp::post_send_inline) takes it as a
//! slice and posts it before it returns, never later (an inline request in flight on a
//! data QP that fails is reported with the error, not posted again);
//! [`VirtualQp::post_send_unchecked`](crate::VirtualQp::post_send_unchecked) takes it by
//! address and moves item 2's promise to its caller until the request is posted. Every
//! other address it posts comes with a key (item 1) or with no scatter/gather element.

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
/// call (one doorbell on real hardware). Both are `unsafe`: a WQE names memory by raw
/// address, which a provider reads (inline payloads) or hands to a device (everything
/// else), so safe code must not reach them with addresses of its choosing.
///
/// ```compile_fail,E0133
/// # use vqp_core::{PhysQp, SendWqe};
/// // A safe caller cannot post raw addresses: the call needs `unsafe`.
/// fn post(qp: &mut impl PhysQp, wqe: SendWqe) {
///     let _ = qp.post_send(&[wqe]);
/// }
/// ```
///
/// ```compile_fail,E0053
/// # use vqp_core::{PhysQp, PostFailure, RecvWqe, SendWqe};
/// // An implementation cannot offer the post as a safe method either.
/// struct Qp;
/// impl PhysQp for Qp {
///     fn qp_num(&self) -> u32 { 1 }
///     fn post_send(&mut self, _: &[SendWqe]) -> Result<(), PostFailure> { Ok(()) }
///     fn post_recv(&mut self, _: &[RecvWqe]) -> Result<(), PostFailure> { Ok(()) }
///     fn set_error(&mut self) {}
/// }
/// ```
pub trait PhysQp {
    /// The QP number completions carry.
    fn qp_num(&self) -> u32;
    /// Post a chain of send WQEs, in order.
    ///
    /// # Safety
    /// The [post contract](self#the-post-contract): every key names a soundly
    /// registered region, and every WQE with [`SendFlags::INLINE`] and `len > 0`
    /// names initialised, readable memory of this process that is not written during
    /// the call.
    unsafe fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure>;
    /// Post a chain of receive WQEs, in order.
    ///
    /// # Safety
    /// The [post contract](self#the-post-contract): every WQE with `len > 0` carries
    /// the key of a soundly registered region (the device checks the buffer against
    /// it before writing).
    unsafe fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure>;
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
    unsafe fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        // SAFETY: the caller keeps the post contract for `wqes`; forwarded unchanged.
        unsafe { (**self).post_send(wqes) }
    }
    #[inline]
    unsafe fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        // SAFETY: the caller keeps the post contract for `wqes`; forwarded unchanged.
        unsafe { (**self).post_recv(wqes) }
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
