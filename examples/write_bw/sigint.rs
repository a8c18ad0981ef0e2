//! Ctrl-C: a SIGINT handler that only sets a flag; the run loops look at it, stop
//! posting, drain what is in flight and print the partial table.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Installs the handler (a second Ctrl-C then still only sets the flag; the drain
/// is bounded by its own timeout).
pub fn install() {
    // SAFETY: an all-zero `sigaction` is a valid value (empty mask, no flags) that is
    // then filled in.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: `sa` is initialised and names a handler that only touches an atomic,
    // which is async-signal-safe; a null old-action pointer is allowed.
    let rc = unsafe { libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut()) };
    if rc != 0 {
        eprintln!(
            "write_bw: cannot install the Ctrl-C handler; Ctrl-C will end the run without a table"
        );
    }
}

/// Whether Ctrl-C was pressed.
pub fn interrupted() -> bool {
    // Relaxed: the flag carries no data; a late read only delays the stop by a round.
    INTERRUPTED.load(Ordering::Relaxed)
}
