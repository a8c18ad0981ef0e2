//! vqp-core: the `no_std`, allocation-free algorithms of a virtual queue pair.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod ring;
mod sync;
