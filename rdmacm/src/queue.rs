//! An event channel's queue: what the agent thread (or a call of the program) reports,
//! in order, behind a file descriptor that is readable while anything is queued.
//!
//! The descriptor is an `eventfd` in semaphore mode: each report adds one, each
//! `rdma_get_cm_event` reads one (blocking, or `EAGAIN` once the program made it
//! `O_NONBLOCK` with `fcntl`), so `poll`, `select` and `epoll` see the channel as a
//! kernel `rdma_cm` file descriptor is seen.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use crate::conn::Conn;
use crate::wire::Private;

/// What happened, before it becomes an `rdma_cm_event` in `rdma_get_cm_event`.
#[derive(Debug)]
pub enum What {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR` with a negative errno.
    AddrError(i32),
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// A REQ or SIDR_REQ reached a listener: the new id's connection.
    Request(Arc<Conn>),
    /// A REP reached a connecting id (its contents are in the id's state).
    Reply,
    /// The passive side's RTU arrived, or a SIDR_REP (UD) was valid.
    Established,
    /// `RDMA_CM_EVENT_REJECTED` with the IB reason and the REJ's private data.
    Rejected(u16, Private),
    /// `RDMA_CM_EVENT_UNREACHABLE` with a negative errno.
    Unreachable(i32),
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit,
    /// `rdma_write_cm_event`: an event of the program's own.
    User(u32, i32, u64),
}

/// One queued report, for the id `conn`.
#[derive(Debug)]
pub struct Pending {
    /// The id it is for.
    pub conn: Arc<Conn>,
    /// What happened.
    pub what: What,
}

/// The queue and its descriptor.
#[derive(Debug)]
pub struct Queue {
    efd: OwnedFd,
    items: Mutex<VecDeque<Pending>>,
}

impl Queue {
    /// A new, empty queue.
    ///
    /// # Errors
    /// `eventfd` fails (the process is out of descriptors).
    pub fn new() -> io::Result<Arc<Queue>> {
        // SAFETY: eventfd takes an initial value and flags only.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(Queue {
            // SAFETY: `fd` was just created and is owned by nobody else.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            items: Mutex::new(VecDeque::new()),
        }))
    }

    /// The descriptor the program polls.
    pub fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    /// Queues `p` and makes the descriptor readable.
    pub fn push(&self, p: Pending) {
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(p);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. It cannot block:
        // the counter would have to reach 2^64 - 1.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Takes the oldest report, waiting for one unless the descriptor is non-blocking.
    ///
    /// # Errors
    /// `EAGAIN` when non-blocking and empty; `EINTR` on a signal.
    pub fn take(&self) -> io::Result<Pending> {
        loop {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64.
            let n = unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
            if n != 8 {
                return Err(io::Error::last_os_error());
            }
            if let Some(p) = self
                .items
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front()
            {
                return Ok(p);
            }
        }
    }

    /// Drops every report for `conn` that has not been taken (the id is destroyed),
    /// taking their counts off the descriptor.
    pub fn forget(&self, conn: &Arc<Conn>) -> Vec<Pending> {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        let mut gone = Vec::new();
        let mut kept = VecDeque::with_capacity(items.len());
        for p in items.drain(..) {
            if Arc::ptr_eq(&p.conn, conn) {
                gone.push(p);
            } else {
                kept.push_back(p);
            }
        }
        *items = kept;
        for _ in 0..gone.len() {
            // Take the count without blocking: only when poll says one is there (a
            // reader racing us may have taken it; it then finds another report, or
            // none and waits for the next).
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            if unsafe { libc::poll(&mut pfd, 1, 0) } != 1 {
                break;
            }
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64.
            unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
        }
        gone
    }
}
