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

    /// What `take` gives, waiting until the descriptor is readable while it gives
    /// nothing ([`EventFd::wait_readable`]: `EAGAIN` at once under `O_NONBLOCK`). For a
    /// queue announced on this descriptor, read by several threads: one woken for an
    /// event another took waits again.
    pub(crate) fn wait_for<T>(&self, mut take: impl FnMut() -> Option<T>) -> io::Result<T> {
        loop {
            if let Some(v) = take() {
                return Ok(v);
            }
            self.wait_readable()?;
        }
    }

    /// Waits until the count is non-zero without taking from it: at once with
    /// `EAGAIN` when it is zero and the application set `O_NONBLOCK`, else blocking in
    /// `poll(2)` (retried on `EINTR`).
    pub(crate) fn wait_readable(&self) -> io::Result<()> {
        // SAFETY: `fcntl(F_GETFL)` on our own descriptor reads its status flags.
        let flags = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        let timeout = if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            0
        } else {
            -1
        };
        loop {
            let mut p = libc::pollfd {
                fd: self.raw(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `p` is one live pollfd for the duration of the call.
            match unsafe { libc::poll(&mut p, 1, timeout) } {
                1 => return Ok(()),
                0 => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
                _ => {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::Interrupted {
                        return Err(err);
                    }
                }
            }
        }
    }
}

/// An `eventfd` that wakes one sleeping thread: [`ring`](Self::ring) any number of
/// times, [`clear`](Self::clear) before sleeping on it again. Non-blocking.
#[derive(Debug)]
pub(crate) struct Wake(OwnedFd);

impl Wake {
    /// A new wake-up fd, not rung, close-on-exec.
    pub(crate) fn new() -> io::Result<Wake> {
        // SAFETY: `eventfd` takes an initial count and flags; it returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor, readable once rung.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the descriptor readable.
    pub(crate) fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live `u64` to our own non-blocking eventfd; a
        // failure (a counter about to overflow) leaves it readable anyway.
        let _ = unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again (no-op when not rung).
    pub(crate) fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live `u64` from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Sleeps until one of `fds` is readable or `timeout` (1 ms to 1 s) passed.
pub(crate) fn wait_readable(fds: &[RawFd], timeout: std::time::Duration) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().clamp(1, 1000) as libc::c_int;
    // SAFETY: `p` is a live array of `p.len()` pollfds for the duration of the call.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

/// Whether `fd` is readable now (a connection waits on a listening socket): a `poll`
/// that does not wait, far cheaper than an `accept` that finds nothing, which makes
/// and frees a socket file in the kernel first.
pub(crate) fn readable_now(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
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

/// One address of a network interface, as `getifaddrs` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IfAddr {
    /// An IPv4 address.
    V4([u8; 4]),
    /// An IPv6 address.
    V6([u8; 16]),
}

/// The IPv4 and IPv6 addresses of interface `name` in the calling thread's network
/// namespace, in the order the kernel lists them.
pub(crate) fn if_addrs(name: &str) -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a writable pointer; on success the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list `getifaddrs` returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name owned by the list.
        let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if n.to_bytes() != name.as_bytes() {
            continue;
        }
        // SAFETY: `ifa_addr` points to a sockaddr of the family it names, owned by
        // the list; the casts follow that family.
        unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    out.push(IfAddr::V4(sin.sin_addr.s_addr.to_ne_bytes()));
                }
                libc::AF_INET6 => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    out.push(IfAddr::V6(sin6.sin6_addr.s6_addr));
                }
                _ => {}
            }
        }
    }
    // SAFETY: the list from `getifaddrs`, freed once; no reference into it remains.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// What `SIOCGIFFLAGS` and `SIOCGIFMTU` say about interface `name` now: whether it is
/// operationally up (`IFF_UP` and `IFF_RUNNING`, the kernel's `netif_oper_up`) and its
/// MTU. `ENODEV` when there is no such interface in our network namespace.
pub(crate) fn if_state(name: &str) -> io::Result<(bool, u32)> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a valid `ifreq` naming the interface (NUL-terminated: the name
    // is shorter than IFNAMSIZ and the rest is zero); the ioctl writes its union.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = i32::from(unsafe { req.ifr_ifru.ifru_flags });
    // SAFETY: as above, for SIOCGIFMTU and its member.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled the MTU member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    let up = flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0;
    Ok((up, u32::try_from(mtu).unwrap_or(0)))
}

/// The index of interface `name` in our network namespace, and its hardware address
/// (`SIOCGIFHWADDR`, the first six bytes).
pub(crate) fn if_index_mac(name: &str) -> io::Result<(u32, [u8; 6])> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
    // SAFETY: a NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a valid `ifreq` naming the interface (checked by if_nametoindex, so
    // shorter than IFNAMSIZ); the ioctl writes its union.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR filled the hardware-address member.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok((index, mac))
}
