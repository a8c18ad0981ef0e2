//! The one rule of a gated test: skip with a line naming the Debian package, or fail
//! when [`REQUIRE`] is set. Shared by every crate's `tests/system` (included by path).

use std::io::Write as _;

/// Set to `1` (as `.ci/run` does) to make a missing package fail the test instead of
/// skipping it.
pub const REQUIRE: &str = "VQP_REQUIRE_SYSTEM_PACKAGES";

/// Skips `test` for want of `package`, or fails it when [`REQUIRE`] is set.
///
/// The line goes straight to the process's stderr, past the test harness's capture,
/// so that `cargo test` shows it.
pub fn skip(test: &str, package: &str, why: &str) {
    let line = format!(
        "skipped {test}: {why}; it needs the Debian package {package} (apt-get install {package})"
    );
    if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
        panic!("{line}; {REQUIRE}=1 says it must run, so this is a failure");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
}
