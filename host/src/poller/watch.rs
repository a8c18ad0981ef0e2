//! [`EventWatch`]: the asynchronous events of a poll thread's devices, routed to the
//! virtual QPs that own the physical QPs they name.
//!
//! Some failures reach no completion: a receiving side's data QP that a peer's bad
//! request put in error while it had nothing posted, a port whose link went down under
//! idle QPs. The device reports them as asynchronous events (`IBV_EVENT_QP_FATAL`,
//! `…_QP_REQ_ERR`, `…_QP_ACCESS_ERR`, `…_PORT_ERR`, `…_DEVICE_FATAL`). A watcher
//! thread waits on the contexts' event descriptors (`poll(2)`, so it costs nothing
//! while nothing happens), turns each failure into a [`PathFailure`] and hands it to
//! the poll thread through a wait-free ring, waking the poll thread if it sleeps. The
//! poll thread reads the ring once per round — a load when empty: no system call, lock
//! or allocation on its path — and fails the virtual QP that owns the QP (or has QPs on
//! the device) with the status its error completion would have carried; the handle
//! gets [`Event::PathFailed`](super::Event::PathFailed) naming the event, then the
//! flushed completions.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use vqp_core::ring::{Consumer, Producer, Ring};
use vqp_core::WcStatus;

use super::handle::Shared;
use super::wake::WakeFd;
use crate::error::{Error, Result};
use crate::verbs::{AsyncEvent, AsyncEventKind, Context, EventSubject};

/// Failures the ring holds before the watcher keeps the rest (and retries).
const FEED: usize = 64;

/// A physical QP, or every QP of a device, that an asynchronous event failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathFailure {
    /// The device (its index in the poll thread's virtual CQ).
    pub device: u8,
    /// The QP; `None` for the whole device (port down, device fatal).
    pub qp_num: Option<u32>,
    /// The event.
    pub event: AsyncEvent,
}

impl PathFailure {
    /// The failure an event of `device` means, if any (events that fail nothing — a
    /// port coming up, an SRQ limit, the last WQE of a QP already in error — give
    /// `None`).
    pub fn from_event(device: u8, event: AsyncEvent) -> Option<PathFailure> {
        let qp_num = match (event.kind, event.subject) {
            (k, EventSubject::Qp { qp_num, .. }) if k.fails_qp() => Some(qp_num),
            (AsyncEventKind::PortErr | AsyncEventKind::DeviceFatal, _) => None,
            _ => return None,
        };
        Some(PathFailure {
            device,
            qp_num,
            event,
        })
    }

    /// The status the virtual QP fails with: what the QP's own error completion would
    /// have said (a remote access or invalid request error), `RETRY_EXC_ERR` for a
    /// port gone down (the transport's retries run out), `FATAL_ERR` otherwise.
    pub fn status(&self) -> WcStatus {
        match self.event.kind {
            AsyncEventKind::QpAccessErr => WcStatus::REM_ACCESS_ERR,
            AsyncEventKind::QpReqErr => WcStatus::REM_INV_REQ_ERR,
            AsyncEventKind::PortErr => WcStatus::RETRY_EXC_ERR,
            _ => WcStatus::FATAL_ERR,
        }
    }
}

/// Watches the asynchronous events of a poll thread's contexts on a thread of its own
/// (see the module docs); give it to the poll thread with
/// [`Stack::with_events`](super::Stack::with_events). Stops (and joins its thread) on
/// drop.
pub struct EventWatch {
    feed: Consumer<Arc<Ring<PathFailure, FEED>>>,
    /// The poll thread to wake, once it runs.
    target: Arc<OnceLock<Arc<Shared>>>,
    stop: Arc<AtomicBool>,
    wake: Arc<WakeFd>,
    join: Option<JoinHandle<()>>,
}

impl EventWatch {
    /// Starts watching `contexts`, each with the index of its device in the poll
    /// thread's virtual CQ (the `device` the virtual QPs know its QPs by).
    ///
    /// # Errors
    /// [`Error::Verbs`] when the wake-up descriptor cannot be made; [`Error::Poller`]
    /// when the thread cannot start.
    pub fn spawn(contexts: Vec<(Context, u8)>) -> Result<EventWatch> {
        let (tx, feed) =
            Ring::try_split(Arc::new(Ring::<PathFailure, FEED>::new())).map_err(|_| {
                Error::Poller {
                    what: "a fresh ring refused to split",
                }
            })?;
        let target: Arc<OnceLock<Arc<Shared>>> = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(WakeFd::new()?);
        let watcher = Watcher {
            contexts,
            tx,
            backlog: VecDeque::new(),
            target: Arc::clone(&target),
            stop: Arc::clone(&stop),
            wake: Arc::clone(&wake),
        };
        let join = std::thread::Builder::new()
            .name("vqp-events".into())
            .spawn(move || watcher.run())
            .map_err(|_| Error::Poller {
                what: "cannot start the event watcher thread",
            })?;
        Ok(EventWatch {
            feed,
            target,
            stop,
            wake,
            join: Some(join),
        })
    }

    /// The next failure, if one waits (the poll thread, once per round).
    #[inline]
    pub(super) fn take(&mut self) -> Option<PathFailure> {
        self.feed.pop().ok()
    }

    /// Names the poll thread the watcher wakes.
    pub(super) fn wake_with(&self, shared: Arc<Shared>) {
        let _ = self.target.set(shared);
    }
}

impl Drop for EventWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake.wake();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl core::fmt::Debug for EventWatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EventWatch").finish_non_exhaustive()
    }
}

/// The watcher thread's state.
struct Watcher {
    contexts: Vec<(Context, u8)>,
    tx: Producer<Arc<Ring<PathFailure, FEED>>>,
    /// Failures the full ring could not take yet, oldest first.
    backlog: VecDeque<PathFailure>,
    target: Arc<OnceLock<Arc<Shared>>>,
    stop: Arc<AtomicBool>,
    wake: Arc<WakeFd>,
}

impl Watcher {
    fn run(mut self) {
        let mut fds: Vec<libc::pollfd> = self
            .contexts
            .iter()
            .map(|(c, _)| c.async_fd())
            .chain(std::iter::once(self.wake.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        while !self.stop.load(Ordering::Acquire) {
            // Wait for an event; while failures wait for room, look again every
            // millisecond.
            let timeout = if self.backlog.is_empty() { -1 } else { 1 };
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                // Nothing to wait on that works: stop watching rather than spin.
                return;
            }
            for (i, (ctx, device)) in self.contexts.iter().enumerate() {
                if fds[i].revents & libc::POLLIN == 0 {
                    continue;
                }
                while let Ok(Some(event)) = ctx.next_async_event(Some(Duration::ZERO)) {
                    if let Some(f) = PathFailure::from_event(*device, event) {
                        self.backlog.push_back(f);
                    }
                }
            }
            if fds[self.contexts.len()].revents & libc::POLLIN != 0 {
                self.wake.clear();
            }
            let mut delivered = false;
            while let Some(f) = self.backlog.front() {
                if self.tx.push(*f).is_err() {
                    break;
                }
                self.backlog.pop_front();
                delivered = true;
            }
            if delivered {
                if let Some(s) = self.target.get() {
                    s.interrupt();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp_event(kind: AsyncEventKind) -> AsyncEvent {
        AsyncEvent {
            kind,
            subject: EventSubject::Qp {
                qp_num: 0x42,
                handle: 1,
            },
        }
    }

    #[test]
    fn failing_events_name_their_qp_or_device_and_the_rest_fail_nothing() {
        let f = PathFailure::from_event(1, qp_event(AsyncEventKind::QpAccessErr)).unwrap();
        assert_eq!((f.device, f.qp_num), (1, Some(0x42)));
        assert_eq!(f.status(), WcStatus::REM_ACCESS_ERR);
        let f = PathFailure::from_event(0, qp_event(AsyncEventKind::QpReqErr)).unwrap();
        assert_eq!(f.status(), WcStatus::REM_INV_REQ_ERR);
        let f = PathFailure::from_event(0, qp_event(AsyncEventKind::QpFatal)).unwrap();
        assert_eq!(f.status(), WcStatus::FATAL_ERR);
        let port = |kind| AsyncEvent {
            kind,
            subject: EventSubject::Port(1),
        };
        let f = PathFailure::from_event(2, port(AsyncEventKind::PortErr)).unwrap();
        assert_eq!((f.device, f.qp_num), (2, None));
        assert_eq!(f.status(), WcStatus::RETRY_EXC_ERR);
        assert_eq!(
            PathFailure::from_event(2, port(AsyncEventKind::PortActive)),
            None
        );
        assert_eq!(
            PathFailure::from_event(0, qp_event(AsyncEventKind::QpLastWqeReached)),
            None
        );
        let dev = AsyncEvent {
            kind: AsyncEventKind::DeviceFatal,
            subject: EventSubject::Device,
        };
        assert_eq!(
            PathFailure::from_event(0, dev).map(|f| f.qp_num),
            Some(None)
        );
    }
}
