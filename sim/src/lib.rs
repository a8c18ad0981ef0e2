//! vqp-sim: test and bench support for vqp-core.
#![deny(missing_docs)]
