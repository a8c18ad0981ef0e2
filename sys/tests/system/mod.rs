//! Gates for the tests that need a system package (the libibverbs header).
//!
//! On a machine with only the Rust toolchain such a test is skipped: it passes after
//! writing one line to the terminal that names the Debian package it needs. CI installs
//! the packages and sets `VQP_REQUIRE_SYSTEM_PACKAGES=1`, which turns every skip into a
//! failure, so a gated test can never pass silently there.

use std::io::Write as _;
use std::process::{Command, Stdio};

mod gate;
pub use gate::skip;

/// Whether `<infiniband/verbs.h>` can be included with the C compiler `cc`; when it
/// cannot, [`skip`]s `test` and returns `false`.
pub fn verbs_header(test: &str, cc: &str) -> bool {
    let probe = Command::new(cc)
        .args(["-E", "-x", "c", "-o", "/dev/null", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut child| {
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(b"#include <infiniband/verbs.h>\n")?;
            }
            child.wait()
        });
    match probe {
        Ok(status) if status.success() => true,
        Ok(_) => {
            skip(
                test,
                "libibverbs-dev",
                "<infiniband/verbs.h> is not installed",
            );
            false
        }
        Err(e) => {
            skip(
                test,
                "gcc",
                &format!("the C compiler {cc:?} does not run ({e})"),
            );
            false
        }
    }
}
