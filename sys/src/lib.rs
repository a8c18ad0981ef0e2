//! vqp-sys: the libibverbs C ABI, shared by vqp's binding and its software provider.
//!
//! ```text
//!  vqp-host       the binding: loads libibverbs (dlopen or link time) and fills
//!                 the function table; safe wrappers over these types
//!  vqp-softverbs  a provider: implements the functions and the objects behind them
//!  ─────────────────────────────────────────────────────────────────────────────
//!  vqp-sys        #[repr(C)] structs and constants of <infiniband/verbs.h>,
//!                 the function table (VerbsTable), Gid
//! ```
//!
//! Both sides of the ABI build on this crate and on nothing else of vqp, so the provider
//! does not depend on the binding. It holds no code that calls into a library: loading
//! and calling are vqp-host's.
//!
//! # The mirrors
//! Names, field order and types follow rdma-core's public `<infiniband/verbs.h>` one for
//! one, so that a pointer handed out by libibverbs (or by any provider that speaks its
//! ABI) can be read through these types directly. The definitions are the same in every
//! build: vqp-host's `linked` feature only changes where the function table comes from,
//! never these layouts.
//!
//! Conventions:
//! - Values the C header types as an `enum` are plain integers here (`u32`, or `i32`
//!   where the C enum has negative members). A library newer than this crate may return
//!   values we do not know; the Rust enums in vqp-host's `enums` module turn those into
//!   `Unknown(n)` instead of trusting them.
//! - C anonymous unions get a named field (`ibv_send_wr::imm`, `ibv_wc::imm`,
//!   `ibv_send_wr::bind_mw_tso`) of a named union type; the byte layout is unchanged.
//! - Structures the library *writes into* and which rdma-core has grown across releases
//!   (`ibv_port_attr`) carry explicit reserved tail space, so an older binding can never
//!   be overrun by a newer library.
//! - Every struct here is valid when all of its bytes are zero (null pointers, `None`
//!   function pointers, zero integers), which is what `Default` returns.
//!
//! The layouts are proven against the system header by `tests/layout.rs` (a C probe built
//! from the same list of structs and fields) and, with vqp-host's `linked` feature,
//! against `rdma-sys` at compile time.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

/// librdmacm's structs and constants (`rdma_cma.h`).
pub mod cm;
mod device;
mod event;
mod ex;
mod gid;
mod object;
mod ops;
mod qp;
mod table;
mod wc;
mod wr;

pub use device::*;
pub use event::*;
pub use ex::*;
pub use gid::Gid;
pub use object::*;
pub use ops::*;
pub use qp::*;
pub use table::VerbsTable;
pub use wc::*;
pub use wr::*;

/// A big-endian 64-bit value (`__be64`), kept as the raw integer the library stores.
pub type __be64 = u64;
/// A big-endian 32-bit value (`__be32`), kept as the raw integer the library stores.
pub type __be32 = u32;

/// Implements `Default` as all-zero bytes for types where that is a valid value.
macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            #[inline]
            fn default() -> Self {
                // SAFETY: every field of this `repr(C)` type (integers, raw pointers,
                // `Option` of function pointers, unions of those) is valid when zeroed.
                unsafe { ::core::mem::zeroed() }
            }
        }
    )*};
}
pub(crate) use zeroed_default;
