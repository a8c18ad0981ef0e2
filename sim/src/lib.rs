//! vqp-sim: test and bench support for vqp-core.
//!
//! Two providers of the [`PhysQp`](vqp_core::PhysQp) / [`PhysCq`](vqp_core::PhysCq)
//! traits, neither of which needs RDMA hardware:
//!
//! ```text
//!   tests ──► vqp-core engine ──► PhysQp / PhysCq ──┬─► nic::SimQp / SimCq   (behaviour)
//!                                                   └─► noop::NoopQp / NoopCq (benches)
//! ```
//!
//! - [`nic`]: a single-threaded, deterministic simulated RDMA NIC. Posting queues work;
//!   [`Nic::step`](nic::Nic::step) executes one WQE from one QP chosen by a reorder
//!   policy, moving real bytes between registered buffers and reporting errors the way
//!   RC hardware does (protection errors, RNR, flushes, CQ overflow, injected faults).
//! - [`noop`]: queue pairs that do no work at all: a post records the completions it
//!   owes into fixed storage and a poll hands them back, optionally shuffled across QPs.
//!   It allocates nothing after construction, so a bench measures the engine alone.
#![deny(missing_docs, unsafe_op_in_unsafe_fn, unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod nic;
pub mod noop;

pub use nic::{
    Access, Mr, Nic, NicConfig, NicStats, QpCaps, QpState, QpStats, ReorderPolicy, SimCq, SimError,
    SimQp,
};
pub use noop::{NoopConfig, NoopControl, NoopCq, NoopError, NoopOrder, NoopQp, RecvMode};
