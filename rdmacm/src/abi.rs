//! The structs and constants of rdma-core's `rdma_cma.h` and `infiniband/sa.h`: vqp-sys'
//! [`cm`](vqp_sys::cm) module, shared with vqp-host, which loads a librdmacm.

pub use vqp_sys::cm::*;
