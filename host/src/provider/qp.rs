//! [`VerbsQp`]: vqp-core's [`PhysQp`] over a verbs [`QueuePair`].

use core::ptr;

use vqp_core::{Opcode, PhysQp, PostFailure, RecvWqe, SendWqe};

use crate::enums::QpState;
use crate::error::{Error, Result};
use crate::flags::QpAttrMask;
use crate::sys;
use crate::verbs::QueuePair;

/// A physical RC QP for vqp-core: posts each chain of WQEs as one linked
/// `ibv_send_wr` / `ibv_recv_wr` chain through the provider's ops table.
///
/// The chain storage is allocated once, here; a post only fills it in. A chain longer
/// than the storage is posted in pieces, one post call per piece (vqp-core's chains
/// are at most `max_outstanding` long, so sizing the storage to the QP's depth, as
/// [`VerbsQp::new`] does, keeps every chain one call).
///
/// Its posts are vqp-core's `unsafe` trait methods: the library copies an `INLINE`
/// payload from the WQE's address with the CPU, checking nothing.
///
/// ```compile_fail,E0133
/// use vqp_core::{PhysQp, SendWqe};
/// // Safe code cannot hand the library an address of its choosing.
/// fn post(qp: &mut vqp_host::VerbsQp, wqe: SendWqe) {
///     let _ = qp.post_send(&[wqe]);
/// }
/// ```
pub struct VerbsQp {
    qp: QueuePair,
    /// Send chain storage. Invariant: `send.len() == send_sge.len() >= 1`; the `next`
    /// and `sg_list` pointers inside are rewritten by every post before the library
    /// sees them and point only into these two boxes.
    send: Box<[sys::ibv_send_wr]>,
    send_sge: Box<[sys::ibv_sge]>,
    /// Receive chain storage, with the same invariant.
    recv: Box<[sys::ibv_recv_wr]>,
    recv_sge: Box<[sys::ibv_sge]>,
    /// The error of the last failed `set_error`, kept for diagnosis.
    set_error_failure: Option<Error>,
}

// SAFETY: the raw pointers in the chain storage point only into the storage that
// `VerbsQp` owns (heap boxes that move with it) and are rewritten before every post;
// `QueuePair` is `Send`. Nothing is shared with another owner.
unsafe impl Send for VerbsQp {}

impl VerbsQp {
    /// Wraps `qp`, with chain storage for as many WQEs as the QP's granted send and
    /// receive depths (at least one each).
    pub fn new(qp: QueuePair) -> Self {
        let cap = qp.cap();
        Self::with_chain(qp, cap.max_send_wr as usize, cap.max_recv_wr as usize)
    }

    /// Wraps `qp`, with storage for chains of `send` send WQEs and `recv` receive WQEs
    /// (each at least one).
    pub fn with_chain(qp: QueuePair, send: usize, recv: usize) -> Self {
        let (send, recv) = (send.max(1), recv.max(1));
        VerbsQp {
            qp,
            send: vec![sys::ibv_send_wr::default(); send].into_boxed_slice(),
            send_sge: vec![sys::ibv_sge::default(); send].into_boxed_slice(),
            recv: vec![sys::ibv_recv_wr::default(); recv].into_boxed_slice(),
            recv_sge: vec![sys::ibv_sge::default(); recv].into_boxed_slice(),
            set_error_failure: None,
        }
    }

    /// The queue pair (to connect it, or query it).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// How many send and receive WQEs one post call carries at most.
    pub fn chain_capacity(&self) -> (usize, usize) {
        (self.send.len(), self.recv.len())
    }

    /// Why the last [`PhysQp::set_error`] could not move the QP to the error state,
    /// if it failed (the trait method cannot return it).
    pub fn set_error_failure(&self) -> Option<&Error> {
        self.set_error_failure.as_ref()
    }

    /// Moves the QP to `IBV_QPS_ERR` (`ibv_modify_qp` with the state alone), which
    /// flushes every outstanding WQE.
    ///
    /// # Errors
    /// [`Error::Verbs`] naming `ibv_modify_qp` when the library refuses.
    pub fn to_error(&self) -> Result<()> {
        let attr = sys::ibv_qp_attr {
            qp_state: QpState::Err.as_raw(),
            ..Default::default()
        };
        self.qp
            .modify_named(&attr, QpAttrMask::STATE, "ibv_modify_qp (to ERR)")
    }

    /// Fills the send storage with `wqes` (at most its length) and links it into one
    /// null-terminated chain; returns its head.
    fn build_send(&mut self, wqes: &[SendWqe]) -> *mut sys::ibv_send_wr {
        debug_assert!(!wqes.is_empty() && wqes.len() <= self.send.len());
        for (i, w) in wqes.iter().enumerate() {
            self.send_sge[i] = sys::ibv_sge {
                addr: w.addr,
                length: w.len,
                lkey: w.lkey,
            };
            let atomic = matches!(
                w.opcode,
                Opcode::ATOMIC_CMP_AND_SWP | Opcode::ATOMIC_FETCH_AND_ADD
            );
            let wr = &mut self.send[i];
            wr.wr_id = w.wr_id;
            wr.num_sge = i32::from(w.len != 0);
            wr.opcode = w.opcode.0;
            wr.send_flags = w.flags.0;
            // Verbatim: the core keeps immediates in network byte order, as verbs does.
            wr.imm = sys::ibv_send_wr_imm {
                imm_data: w.imm_data,
            };
            wr.wr = if atomic {
                sys::ibv_send_wr_wr {
                    atomic: sys::ibv_send_wr_atomic {
                        remote_addr: w.remote_addr,
                        compare_add: w.compare_add,
                        swap: w.swap,
                        rkey: w.rkey,
                    },
                }
            } else {
                sys::ibv_send_wr_wr {
                    rdma: sys::ibv_send_wr_rdma {
                        remote_addr: w.remote_addr,
                        rkey: w.rkey,
                    },
                }
            };
        }
        link(
            &mut self.send,
            &mut self.send_sge,
            wqes.iter().map(|w| w.len != 0),
        )
    }

    /// Fills the receive storage with `wqes` (at most its length) and links it into one
    /// null-terminated chain; returns its head.
    fn build_recv(&mut self, wqes: &[RecvWqe]) -> *mut sys::ibv_recv_wr {
        debug_assert!(!wqes.is_empty() && wqes.len() <= self.recv.len());
        for (i, w) in wqes.iter().enumerate() {
            self.recv_sge[i] = sys::ibv_sge {
                addr: w.addr,
                length: w.len,
                lkey: w.lkey,
            };
            let wr = &mut self.recv[i];
            wr.wr_id = w.wr_id;
            wr.num_sge = i32::from(w.len != 0);
        }
        link(
            &mut self.recv,
            &mut self.recv_sge,
            wqes.iter().map(|w| w.len != 0),
        )
    }
}

/// A work request that chains to the next one and points at its scatter entries.
trait Chained {
    fn set_links(&mut self, next: *mut Self, sg_list: *mut sys::ibv_sge);
}

impl Chained for sys::ibv_send_wr {
    fn set_links(&mut self, next: *mut Self, sg_list: *mut sys::ibv_sge) {
        self.next = next;
        self.sg_list = sg_list;
    }
}

impl Chained for sys::ibv_recv_wr {
    fn set_links(&mut self, next: *mut Self, sg_list: *mut sys::ibv_sge) {
        self.next = next;
        self.sg_list = sg_list;
    }
}

/// Links the first `has_data.len()` requests of `wrs` into one null-terminated chain,
/// request `i` pointing at `sges[i]` when `has_data` says it carries bytes (else at
/// nothing), and returns its head. Called after every other write to the storage, so
/// that the pointers the library follows are the most recent ones taken from it.
fn link<W: Chained>(
    wrs: &mut [W],
    sges: &mut [sys::ibv_sge],
    has_data: impl ExactSizeIterator<Item = bool>,
) -> *mut W {
    let n = has_data.len();
    assert!(n <= wrs.len() && n <= sges.len());
    let base = wrs.as_mut_ptr();
    let sg_base = sges.as_mut_ptr();
    for (i, data) in has_data.enumerate() {
        let next = if i + 1 < n {
            base.wrapping_add(i + 1)
        } else {
            ptr::null_mut()
        };
        let sg = if data {
            sg_base.wrapping_add(i)
        } else {
            ptr::null_mut()
        };
        // SAFETY: `i < n <= wrs.len()`, so `base + i` is an element of the slice `base`
        // was just taken from, which nothing else borrows while `wrs` is held.
        unsafe { (*base.add(i)).set_links(next, sg) };
    }
    base
}

/// The core's view of a refused post: the `posted` WQEs of earlier pieces plus the
/// prefix of this piece the library took (from its `bad_wr` index), and the errno
/// (`EIO` when the library gave none).
fn post_failure(posted: usize, e: &Error) -> PostFailure {
    let index = match e {
        Error::PostFailed { index, .. } => *index,
        _ => 0,
    };
    PostFailure {
        posted: posted + index,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    }
}

impl PhysQp for VerbsQp {
    #[inline]
    fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// Posts `wqes` as linked `ibv_send_wr` chains, one library call per piece of
    /// [`chain_capacity`](Self::chain_capacity).
    ///
    /// # Safety
    /// vqp-core's [post contract](vqp_core::phys#the-post-contract): keys name soundly
    /// registered regions (the device checks every other address against them), and an
    /// `INLINE` WQE's payload is readable memory of this process during the call (the
    /// library copies it with the CPU, unchecked).
    unsafe fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        let cap = self.send.len();
        let mut posted = 0;
        for piece in wqes.chunks(cap) {
            let head = self.build_send(piece);
            // SAFETY: `head` is element 0 of `self.send`, borrowed by nothing else.
            let head = unsafe { &mut *head };
            // SAFETY: `build_send` returned the head of a null-terminated chain of
            // `piece.len()` requests inside `self.send`, each `sg_list` pointing at its
            // own entry of `self.send_sge` (or null with `num_sge` 0), and the `wr`
            // union member matching the opcode; the library reads them during this call
            // only. The buffers the entries name are this function's caller's: checked by
            // the device against their keys, or inline payloads readable now (vqp-core's
            // post contract, this function's `# Safety`).
            let result = unsafe { self.qp.post_send(head) };
            if let Err(e) = result {
                return Err(post_failure(posted, &e));
            }
            posted += piece.len();
        }
        Ok(())
    }

    /// Posts `wqes` as linked `ibv_recv_wr` chains.
    ///
    /// # Safety
    /// vqp-core's [post contract](vqp_core::phys#the-post-contract): each buffer's key
    /// names a soundly registered region, which the device checks before writing.
    unsafe fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        let cap = self.recv.len();
        let mut posted = 0;
        for piece in wqes.chunks(cap) {
            let head = self.build_recv(piece);
            // SAFETY: `head` is element 0 of `self.recv`, borrowed by nothing else.
            let head = unsafe { &mut *head };
            // SAFETY: `build_recv` returned the head of a null-terminated chain inside
            // `self.recv`, each `sg_list` pointing at its own entry of `self.recv_sge`
            // (or null with `num_sge` 0); the buffers are registered memory the device
            // checks against their keys (vqp-core's post contract, this function's
            // `# Safety`).
            let result = unsafe { self.qp.post_recv(head) };
            if let Err(e) = result {
                return Err(post_failure(posted, &e));
            }
            posted += piece.len();
        }
        Ok(())
    }

    fn set_error(&mut self) {
        if let Err(e) = self.to_error() {
            self.set_error_failure = Some(e);
        }
    }
}

impl core::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp", &self.qp)
            .field("chain", &self.chain_capacity())
            .finish()
    }
}
