//! vqp-softverbs: a userspace RDMA provider with the libibverbs C ABI.
#![deny(unsafe_code, missing_docs)]
