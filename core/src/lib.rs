//! vqp-core: the `no_std`, allocation-free algorithms of a virtual queue pair.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod phys;
pub mod wr;

pub use phys::{PhysCq, PhysQp, PhysWc, PollFailure, PostFailure, RecvWqe, SendWqe};
pub use wr::{Keys, Opcode, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, MAX_DEVICES};
