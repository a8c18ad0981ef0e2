//! [`WakeFd`]: an eventfd that interrupts a poll thread blocked on a completion channel.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};

/// An `eventfd` a poll thread waits on beside its completion channel, so that a
/// submission or a shutdown request wakes it at once instead of at its timeout.
#[derive(Debug)]
pub struct WakeFd {
    fd: OwnedFd,
}

impl WakeFd {
    /// A new, non-blocking eventfd.
    ///
    /// # Errors
    /// [`Error::Verbs`] naming `eventfd` when the system refuses.
    pub fn new() -> Result<Self> {
        // SAFETY: `eventfd` takes no pointer; the flags are valid.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Verbs {
                function: "eventfd",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(WakeFd { fd })
    }

    /// Makes the descriptor readable (adds one to the counter).
    pub fn wake(&self) {
        let one = 1u64;
        // SAFETY: writes the 8 bytes of `one` to our open eventfd. A full counter
        // (`EAGAIN`) already means "readable", so the result needs no handling.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                core::mem::size_of::<u64>(),
            )
        };
    }

    /// Resets the counter (after a wake-up was seen).
    pub fn clear(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our open, non-blocking eventfd; `EAGAIN`
        // (nothing to clear) is fine.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                core::mem::size_of::<u64>(),
            )
        };
    }
}

impl AsRawFd for WakeFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
