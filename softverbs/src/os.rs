//! The platform helpers the layers above share: event file descriptors for completion
//! channels and asynchronous events, `atexit`, and a lock that survives poisoning.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};

/// An `eventfd` in semaphore mode: each [`signal`](Self::signal) adds one, each read
/// takes one. Readable (for `poll(2)`) while the count is non-zero; a read blocks while
/// it is zero unless the application set `O_NONBLOCK`.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// A new event fd with a zero count, close-on-exec.
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: `eventfd` takes an initial count and flags; it returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds one to the count.
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live `u64` to our own eventfd. It can only fail
        // when the count would overflow (2^64 - 2 pending events), which cannot happen.
        let _ = unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }

    /// Takes one from the count, blocking while it is zero (unless the fd was made
    /// non-blocking, then `EAGAIN`). Retries on `EINTR`.
    pub(crate) fn wait_one(&self) -> io::Result<()> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into a live `u64` from our own eventfd.
            let n = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Registers `f` to run at process exit (`atexit`), or when this library is unloaded
/// if it was loaded with `dlopen` (glibc's `atexit` records the calling object). False
/// when it could not be registered.
pub(crate) fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: `f` is a plain function with the C ABI, valid for the life of the code
    // that registers it (the handler runs before that code is unloaded).
    unsafe { libc::atexit(f) == 0 }
}

/// Locks, ignoring poisoning: the provider's state stays consistent across a panic in
/// a caller's thread because every critical section is short and panic-free.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Clock `id` (`CLOCK_MONOTONIC_RAW`, `CLOCK_REALTIME`, …) in nanoseconds; 0 if it
/// cannot be read.
pub(crate) fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a writable timespec; `clock_gettime` writes only it.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
