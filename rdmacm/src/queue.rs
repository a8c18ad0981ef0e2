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
                let e = io::Error::last_os_error();
                // `EAGAIN` on a descriptor the program left blocking: `forget` had made
                // it non-blocking for a moment (kernels without `RWF_NOWAIT`). It puts
                // the flags back before it lets go of the queue.
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    drop(self.items.lock().unwrap_or_else(|e| e.into_inner()));
                    if !self.nonblocking() {
                        continue;
                    }
                }
                return Err(e);
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
        // Take their counts without ever waiting, the queue locked: a reader racing us
        // may have taken a count already (it then finds another report, or none and
        // waits for the next); a read that could wait here, after a `poll` that found
        // a count the reader then took, would wait forever for that reader, which
        // waits for the queue.
        for _ in 0..gone.len() {
            if !self.take_count_now() {
                break;
            }
        }
        gone
    }

    /// Whether the program made the descriptor non-blocking.
    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on our own descriptor.
        let flags = unsafe { libc::fcntl(self.fd(), libc::F_GETFL) };
        flags >= 0 && flags & libc::O_NONBLOCK != 0
    }

    /// Takes one count off the descriptor if it has one, never waiting: a read with
    /// `RWF_NOWAIT` (Linux 5.12 and later for an eventfd), or on older kernels a read
    /// with the descriptor made non-blocking for the moment, its flags put back after
    /// (the queue is locked meanwhile; see `take`).
    fn take_count_now(&self) -> bool {
        let mut v: u64 = 0;
        let iov = libc::iovec {
            iov_base: (&mut v as *mut u64).cast(),
            iov_len: 8,
        };
        // SAFETY: one iovec over a live u64; offset -1 is the file position, which an
        // eventfd does not use.
        let n = unsafe { libc::preadv2(self.fd(), &iov, 1, -1, libc::RWF_NOWAIT) };
        if n == 8 {
            return true;
        }
        let e = io::Error::last_os_error().raw_os_error();
        if !matches!(e, Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)) {
            return false;
        }
        // SAFETY: fcntl and read on our own descriptor; 8 bytes into a live u64.
        unsafe {
            let flags = libc::fcntl(self.fd(), libc::F_GETFL);
            if flags < 0 {
                return false;
            }
            libc::fcntl(self.fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
            let n = libc::read(self.fd(), (&mut v as *mut u64).cast(), 8);
            libc::fcntl(self.fd(), libc::F_SETFL, flags);
            n == 8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader waiting in `take` while the id of the only queued report is forgotten:
    /// whichever gets the count, nobody waits forever (`forget` once read the count
    /// with a blocking read after `poll` saw it, and the reader could take it between
    /// the two while waiting for the queue `forget` held).
    #[test]
    fn forgetting_beside_a_waiting_reader_never_blocks() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                let q = Queue::new().unwrap();
                let conn = Conn::new(1, 0x106, 2, q.clone());
                q.push(Pending {
                    conn: conn.clone(),
                    what: What::Established,
                });
                let reader = {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        let _ = q.take();
                    })
                };
                let gone = q.forget(&conn);
                if gone.is_empty() {
                    // The reader had it.
                    reader.join().unwrap();
                } else {
                    // The reader waits for the next report (it may have eaten the
                    // count): give it one, then one more count, which it may leave.
                    q.push(Pending {
                        conn: conn.clone(),
                        what: What::Disconnected,
                    });
                    reader.join().unwrap();
                }
            }
            let _ = done_tx.send(());
        });
        assert!(
            done_rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .is_ok(),
            "forget and take waited for each other"
        );
    }

    /// `forget` takes the counts of the reports it drops, so a descriptor with nothing
    /// left queued is not readable.
    #[test]
    fn a_forgotten_report_leaves_the_descriptor_unreadable() {
        let q = Queue::new().unwrap();
        let (a, b) = (
            Conn::new(1, 0x106, 2, q.clone()),
            Conn::new(2, 0x106, 2, q.clone()),
        );
        for c in [&a, &a, &b] {
            q.push(Pending {
                conn: c.clone(),
                what: What::Established,
            });
        }
        assert_eq!(q.forget(&a).len(), 2);
        let readable = |q: &Queue| {
            let mut pfd = libc::pollfd {
                fd: q.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
        };
        assert!(readable(&q));
        assert!(Arc::ptr_eq(&q.take().unwrap().conn, &b));
        assert!(!readable(&q));
    }
}
