//! vqp-core: the `no_std`, allocation-free algorithms of a virtual queue pair.
//!
//! A virtual queue pair is one RDMA queue pair to the application and several
//! physical RC queue pairs underneath: large RDMA writes and reads are cut into
//! fragments that travel on all of them at once, and the fragments' completions
//! fold back into one completion per request, in posting order.
//!
//! ```text
//!  application ── SendWr / RecvWr ──► VirtualQp ──► PhysQp × N (+ notify QP)
//!       ▲                                  ▲                 │
//!       └──────── Wc (in order) ◄── VirtualCq ◄── PhysCq ◄───┘
//! ```
//! Layers, bottom up: [`seq`] and [`imm`] (the DQPLB wire word), [`reorder`] (the
//! receiver's window), [`split`] (fragment plans), [`wrid`] (physical wr_id layout),
//! [`vqp`] and [`vcq`] (the engine), over the [`phys`] traits a provider implements;
//! beside them [`ring`], the SPSC ring that carries requests and completions between
//! application threads and a poll thread.
//! Everything is fixed-capacity: no heap, no lock, no system call.
//!
//! Work requests name memory by raw address. What a provider may touch, and what a
//! caller promises for it, is the [post contract](phys#the-post-contract): addresses
//! with keys are checked by the device against soundly registered regions, so the safe
//! [`VirtualQp::post_send`] takes them as they are; an inline payload is copied by the
//! CPU unchecked, so it goes as a slice ([`VirtualQp::post_send_inline`]) or through
//! the `unsafe` [`VirtualQp::post_send_unchecked`], and [`PhysQp`]'s posts are
//! `unsafe`.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod caps;
pub mod imm;
pub mod phys;
pub mod reorder;
pub mod ring;
pub mod seq;
pub mod split;
mod sync;
pub mod vcq;
pub mod vqp;
pub mod wr;
pub mod wrid;

pub use phys::{PhysCq, PhysQp, PhysWc, PollFailure, PostFailure, RecvWqe, SendWqe};
pub use vcq::{CqError, VirtualCq};
pub use vqp::{
    BuildError, Config, Failover, LaneStats, Mode, Policy, PostRecvError, PostSendError,
    RestoreError, Signaling, VirtualQp,
};
pub use wr::{Keys, Opcode, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcOut, WcStatus, MAX_DEVICES};
