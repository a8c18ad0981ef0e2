//! vqp-host: binds vqp-core to libibverbs.
#![deny(unsafe_code, missing_docs)]
