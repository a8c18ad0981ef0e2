//! Gates for the tests that need a system package (the real libibverbs).
//!
//! On a machine with only the Rust toolchain such a test is skipped: it passes after
//! writing one line to the terminal that names the Debian package it needs. CI installs
//! the packages and sets `VQP_REQUIRE_SYSTEM_PACKAGES=1`, which turns every skip into a failure, so a gated
//! test can never pass silently there.
//!
//! Each test binary that includes it uses only some of its gates.
#![allow(dead_code)]

use std::path::Path;

use vqp_host::{Error, Verbs};

#[path = "../../../sys/tests/system/gate.rs"]
mod gate;
pub use gate::skip;

/// The system's libibverbs, loaded by its soname as the default build does, or `None`
/// after [`skip`] when no such library is installed. A library that is there but does
/// not load (a missing symbol or version) fails the test: that is what it checks.
pub fn libibverbs(test: &str) -> Option<Verbs> {
    // SAFETY: a library found under the soname `libibverbs.so.1` implements the
    // libibverbs ABI.
    match unsafe { Verbs::load_from(Path::new("libibverbs.so.1")) } {
        Ok(verbs) => Some(verbs),
        Err(e @ Error::LibraryNotFound { .. }) => {
            skip(
                test,
                "libibverbs1",
                &format!("libibverbs.so.1 is not installed ({e})"),
            );
            None
        }
        Err(e) => panic!("libibverbs.so.1 is installed but does not load: {e}"),
    }
}
