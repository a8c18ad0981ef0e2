//! The operating-system calls the shared namespace needs, each wrapped once: shared
//! mappings, `flock`, futexes, `process_vm_readv`/`process_vm_writev` and the `*at`
//! calls that work relative to the namespace directory's descriptor.
//!
//! This is the only file of the `shared` module that uses `unsafe`.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

/// A `MAP_SHARED` read-write mapping of a whole file, unmapped on drop.
///
/// Invariant: `ptr` is page-aligned and `len` bytes are mapped for the mapping's
/// lifetime; every value other processes may change concurrently is accessed through
/// atomics or through the ring's slot-ownership protocol (see `inbox`).
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all concurrent access goes through
// atomics or the inbox's slot-ownership protocol.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file` (which must be at least that long).
    pub(crate) fn new(file: &File, len: usize) -> io::Result<Mapping> {
        Mapping::new_at(file, 0, len)
    }

    /// Maps `len` bytes of `file` from byte `off` (a multiple of the page size; the file
    /// must reach `off + len`).
    pub(crate) fn new_at(file: &File, off: usize, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The atomic `u64` at byte offset `off` (8-aligned, inside the mapping).
    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off % 8 == 0 && off + 8 <= self.len,
            "offset {off} out of the mapping"
        );
        // SAFETY: in bounds and 8-aligned (checked; the base is page-aligned); the memory
        // lives as long as `self`; every access to it is atomic.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// The atomic `u32` at byte offset `off` (4-aligned, inside the mapping).
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(
            off % 4 == 0 && off + 4 <= self.len,
            "offset {off} out of the mapping"
        );
        // SAFETY: as `u64_at`.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// Copies `src` to byte offset `off`. The caller owns that range (ring protocol).
    pub(crate) fn write_bytes(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len);
        // SAFETY: in bounds (checked); the range is owned by the caller under the ring's
        // protocol, so no other access races with this plain copy.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
    }

    /// Copies from byte offset `off` into `dst`. The caller owns that range.
    pub(crate) fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len);
        // SAFETY: as `write_bytes`.
        unsafe {
            core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `new` and nothing borrows it past `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `flock(fd, op)`; `Ok(false)` when a non-blocking request would block.
pub(crate) fn flock(file: &File, op: i32) -> io::Result<bool> {
    loop {
        // SAFETY: a plain syscall on an open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Sleeps while `*word == expected`, at most `timeout` (a shared, non-private futex:
/// the word lives in a file mapping other processes wake it through).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32; `tsp` is null or points to a timespec that
    // outlives the call. A spurious return is harmless: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            0usize,
            0u32,
        )
    };
}

/// Wakes one waiter of `word` in any process.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; waking has no memory effect.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            1i32,
            0usize,
            0usize,
            0u32,
        )
    };
}

/// The last bytes of a copy into registered memory, which land after all the others.
/// A NIC places a message's data in address order (mlx5's writes over PCIe), and
/// consumers rely on it: they poll the last bytes of an RDMA WRITE's target to learn
/// that the rest has landed (Open MPI's openib eager RDMA footer). `memcpy` keeps no
/// order: glibc's stores the first 32 bytes of a 256-byte to 4 KiB copy after its last
/// ones, and a fast-string copy may store its bytes in any order.
pub(crate) const LAST: u64 = 8;

/// Why a copy to or from another process failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyError {
    /// The process is gone (`ESRCH`).
    Gone,
    /// The kernel refused access (`EPERM`: ptrace_scope or seccomp).
    Denied,
    /// Part of the remote range is not mapped (`EFAULT`, or a short copy).
    Fault,
}

/// One contiguous range: an address and a length.
pub(crate) type Range = (u64, u64);

/// Moves bytes between `local` ranges of this process and `remote` ranges of process
/// `pid`: `pull` reads the remote ranges into the local ones (`process_vm_readv`),
/// otherwise the local ones are written to the remote ones. The copy stops where the
/// shorter list ends; anything less than that is a fault. The destination's last
/// [`LAST`] bytes are an iovec of their own, which the kernel
/// copies after all the others (it copies page by page, segment by segment, in
/// order), so that they land last, as a NIC's would.
///
/// The local ranges must be writable (pull) or readable (push) memory of this process
/// for the duration of the call: the callers pass checked spans of registered memory.
pub(crate) fn process_copy(
    pid: u32,
    local: &[Range],
    remote: &[Range],
    pull: bool,
) -> Result<(), CopyError> {
    const MAX_IOV: usize = 64;
    let total: u64 = local
        .iter()
        .map(|r| r.1)
        .sum::<u64>()
        .min(remote.iter().map(|r| r.1).sum());
    if total == 0 {
        return Ok(());
    }
    let to_iov = |r: &Range| libc::iovec {
        iov_base: r.0 as usize as *mut libc::c_void,
        iov_len: r.1 as usize,
    };
    let mut liov = [libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV + 1];
    let mut riov = liov;
    if local.len() > MAX_IOV || remote.len() > MAX_IOV {
        return Err(CopyError::Fault);
    }
    for (d, s) in liov.iter_mut().zip(local) {
        *d = to_iov(s);
    }
    for (d, s) in riov.iter_mut().zip(remote) {
        *d = to_iov(s);
    }
    let (mut nl, mut nr) = (local.len(), remote.len());
    if pull {
        nl = last_apart(&mut liov, nl, total);
    } else {
        nr = last_apart(&mut riov, nr, total);
    }
    // SAFETY: the local iovecs name memory of this process valid for the call (the
    // caller's contract); the remote ones are checked by the kernel against `pid`'s
    // address space and fail with EFAULT rather than touch anything else.
    let n = unsafe {
        if pull {
            libc::process_vm_readv(
                pid as libc::pid_t,
                liov.as_ptr(),
                nl as libc::c_ulong,
                riov.as_ptr(),
                nr as libc::c_ulong,
                0,
            )
        } else {
            libc::process_vm_writev(
                pid as libc::pid_t,
                liov.as_ptr(),
                nl as libc::c_ulong,
                riov.as_ptr(),
                nr as libc::c_ulong,
                0,
            )
        }
    };
    if n < 0 {
        return Err(match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => CopyError::Gone,
            Some(libc::EPERM) => CopyError::Denied,
            _ => CopyError::Fault,
        });
    }
    if n as u64 != total {
        return Err(CopyError::Fault);
    }
    Ok(())
}

/// Splits the iovec list `iov` (its first `n` used, room for one more) where the last
/// [`LAST`] bytes of a `total`-byte copy begin, when they lie inside
/// one entry; returns the entries used then.
fn last_apart(iov: &mut [libc::iovec], n: usize, total: u64) -> usize {
    let last = LAST;
    if total <= last || n >= iov.len() {
        return n;
    }
    let cut = total - last;
    let mut at = 0u64;
    for i in 0..n {
        let len = iov[i].iov_len as u64;
        if cut > at && cut < at + len {
            let head = (cut - at) as usize;
            iov.copy_within(i..n, i + 1);
            iov[i].iov_len = head;
            iov[i + 1].iov_base = iov[i].iov_base.wrapping_byte_add(head);
            iov[i + 1].iov_len = len as usize - head;
            return n + 1;
        }
        at += len;
    }
    n
}

/// Lets any process of the user attach to this one with `process_vm_*` even where
/// Yama's `ptrace_scope` is 1 (restricted to descendants).
pub(crate) fn allow_any_tracer() {
    // SAFETY: a plain prctl with integer arguments; failure (no Yama) is harmless.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// The effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

/// Registers `f` to run at normal process exit.
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: `f` is a plain function that stays mapped (the cdylib is `nodelete`).
    unsafe { libc::atexit(f) };
}

/// `openat(dir, name, flags)` with `O_NOFOLLOW | O_CLOEXEC` added: a symlink as the
/// last component fails with `ELOOP`; `mode` applies when `O_CREAT` creates the file.
pub(crate) fn openat(dir: &File, name: &CStr, flags: i32, mode: u32) -> io::Result<File> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    loop {
        // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string that
        // outlives the call.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode) };
        if fd >= 0 {
            // SAFETY: a descriptor the kernel just returned, owned by nobody else.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// `renameat(dir, from, dir, to)`.
pub(crate) fn renameat(dir: &File, from: &CStr, to: &CStr) -> io::Result<()> {
    let d = dir.as_raw_fd();
    // SAFETY: an open descriptor and two NUL-terminated strings that outlive the call.
    if unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `unlinkat(dir, name, 0)`.
pub(crate) fn unlinkat(dir: &File, name: &CStr) -> io::Result<()> {
    // SAFETY: an open descriptor and a NUL-terminated string that outlives the call.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The `/proc/self/fd` path of an open descriptor (lists the directory it names even if
/// its path was replaced meanwhile).
pub(crate) fn fd_path(f: &File) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(base: usize, len: usize) -> libc::iovec {
        libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: len,
        }
    }

    fn lens(v: &[libc::iovec], n: usize) -> Vec<(usize, usize)> {
        v[..n]
            .iter()
            .map(|i| (i.iov_base as usize, i.iov_len))
            .collect()
    }

    #[test]
    fn the_last_bytes_of_a_copy_are_an_iovec_of_their_own() {
        let mut v = [iov(0, 0); 4];
        v[0] = iov(0x1000, 100);
        v[1] = iov(0x9000, 50);
        // A 150-byte copy: its last 8 bytes split off the second entry.
        assert_eq!(last_apart(&mut v, 2, 150), 3);
        assert_eq!(lens(&v, 3), [(0x1000, 100), (0x9000, 42), (0x9000 + 42, 8)]);
        // A 104-byte copy of a longer list: the cut is inside the first entry, and the
        // entries after it move up.
        let mut v = [iov(0, 0); 4];
        v[0] = iov(0x1000, 100);
        v[1] = iov(0x9000, 50);
        assert_eq!(last_apart(&mut v, 2, 104), 3);
        assert_eq!(lens(&v, 3), [(0x1000, 96), (0x1000 + 96, 4), (0x9000, 50)]);
        // A cut on an entry's boundary, a copy of at most 8 bytes, a full list: as is.
        let mut v = [iov(0, 0); 3];
        v[0] = iov(0x1000, 92);
        v[1] = iov(0x9000, 8);
        assert_eq!(last_apart(&mut v, 2, 100), 2);
        assert_eq!(last_apart(&mut v, 2, 8), 2);
        assert_eq!(last_apart(&mut v[..2], 2, 60), 2);
    }
}
