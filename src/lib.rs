//! vqp: one virtual RDMA queue pair over several physical RC queue pairs.
//!
//! This façade re-exports [`vqp_core`] (the algorithms) and [`vqp_host`] (the
//! libibverbs binding).
#![deny(missing_docs)]

pub use vqp_core as core;
pub use vqp_host as host;
