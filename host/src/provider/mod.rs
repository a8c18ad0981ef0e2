//! vqp-core's physical QP and CQ over real verbs.
//!
//! ```text
//!  VirtualQp ── &[SendWqe] / &[RecvWqe] ──► VerbsQp ── one ibv_send_wr chain ──► ops.post_send
//!  VirtualCq ◄── &mut [PhysWc] ◄── VerbsCq ◄── preallocated ibv_wc batch ◄────── ops.poll_cq
//! ```
//! [`VerbsQp`] owns a [`QueuePair`](crate::QueuePair) and the `ibv_send_wr` /
//! `ibv_recv_wr` / `ibv_sge` arrays its chains are built in, sized once at
//! construction, so posting a chain of WQEs is one call through the context's ops
//! table and no allocation. [`VerbsCq`] owns a [`CompletionQueue`](crate::CompletionQueue)
//! and a preallocated `ibv_wc` batch it converts from.

mod cq;
#[allow(unsafe_code)]
mod qp;

pub use cq::VerbsCq;
pub use qp::VerbsQp;

/// How many WQEs one chain holds when the caller does not choose: longer chains are
/// posted in pieces of this many (one post call each).
pub const DEFAULT_CHAIN: usize = 64;

/// How many completions [`VerbsCq`] polls at most per call when the caller does not
/// choose.
pub const DEFAULT_POLL_BATCH: usize = 64;
