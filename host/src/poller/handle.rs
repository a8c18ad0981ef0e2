//! [`Handle`]: an application thread's end of one virtual QP served by a poll thread.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use vqp_core::ring::{Consumer, Producer, PushError, Ring, Stamped};
use vqp_core::{Keys, RecvWr, SendWr};

use super::msg::{Event, Request};
use super::wake::WakeFd;
use super::wire::{self, Item};

/// The poll thread keeps running.
pub(super) const RUN: u8 = 0;
/// The poll thread finishes what is outstanding, then stops.
pub(super) const DRAIN: u8 = 1;
/// The poll thread fails what is outstanding, then stops.
pub(super) const ABORT: u8 = 2;

/// State shared between a poll thread, its owner and the handles.
pub(super) struct Shared {
    /// Set by the poll thread before it sleeps, cleared when it wakes. A submitter
    /// reads it after a `SeqCst` fence that follows its push; the poll thread re-checks
    /// the rings after a `SeqCst` fence that follows its store. Of the two, at least one
    /// sees the other's write: either the submitter unparks, or the poll thread finds
    /// the request and does not sleep.
    pub(super) sleeping: AtomicBool,
    /// Whether the thread may sleep at all (`Idle::Block`); submitters skip the fence
    /// otherwise.
    pub(super) may_sleep: bool,
    /// `RUN`, `DRAIN` or `ABORT`.
    pub(super) command: AtomicU8,
    /// How long, in nanoseconds, a drain or abort may take from when the thread sees
    /// the command.
    pub(super) timeout_ns: AtomicU64,
    /// The poll thread, once started.
    pub(super) thread: OnceLock<Thread>,
    /// The eventfd its blocker waits on, when it has one.
    pub(super) wake_fd: OnceLock<Arc<WakeFd>>,
}

impl Shared {
    pub(super) fn new(may_sleep: bool) -> Self {
        Shared {
            sleeping: AtomicBool::new(false),
            may_sleep,
            command: AtomicU8::new(RUN),
            timeout_ns: AtomicU64::new(u64::MAX),
            thread: OnceLock::new(),
            wake_fd: OnceLock::new(),
        }
    }

    /// Wakes the poll thread if it sleeps (or is about to).
    #[inline]
    pub(super) fn wake(&self) {
        if !self.may_sleep {
            return;
        }
        // Pairs with the poll thread's fence between its `sleeping` store and its
        // re-check of the rings (see the field).
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.interrupt();
        }
    }

    /// Ends the poll thread's sleep, however it sleeps.
    pub(super) fn interrupt(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        if let Some(w) = self.wake_fd.get() {
            w.wake();
        }
    }
}

/// An application thread's end of one virtual QP that a poll thread serves: requests go
/// in through one SPSC ring of `R` slots, events come back through another.
///
/// Submitting and taking events never block and never allocate. Each request gets
/// exactly one [`Event`] (or none, for an unsignaled request that succeeded), in the
/// order the virtual QP reports them: sends in posting order, receives in posting
/// order. A request the virtual QP cannot take yet (backpressure) waits inside the
/// poll thread, in order; it is never dropped.
pub struct Handle<const R: usize> {
    pub(super) requests: Producer<Arc<Ring<Item, R, Stamped>>>,
    pub(super) events: Consumer<Arc<Ring<Event, R, Stamped>>>,
    pub(super) shared: Arc<Shared>,
    pub(super) index: usize,
    /// The keys last sent ahead of a send (see `wire`): the poll thread holds the same.
    pub(super) keys: Keys,
}

impl<const R: usize> Handle<R> {
    /// Hands `request` to the poll thread.
    ///
    /// A send takes one slot of the ring; two or three when its keys differ from the
    /// last send's or it carries atomic operands (they go ahead of it, each in a slot).
    ///
    /// # Errors
    /// [`PushError::Full`] with the request when the ring has no room for it: take some
    /// events (the poll thread keeps taking requests as the virtual QP has room) and
    /// retry. Nothing of a refused request was handed over.
    #[inline]
    pub fn submit(&mut self, request: Request) -> Result<(), PushError<Request>> {
        self.push(request, false)
    }

    /// [`submit`](Self::submit); `vouched` marks a send whose inline payload's address
    /// the caller vouched for ([`send_unchecked`](Self::send_unchecked)).
    #[inline(always)]
    fn push(&mut self, request: Request, vouched: bool) -> Result<(), PushError<Request>> {
        let parts = wire::split(&request, &self.keys, vouched);
        let ahead = parts.ahead();
        if ahead > 0 {
            // Room for all, or none goes: `slots` reads the consumer's position, which a
            // send with nothing ahead of it (the common case) does not need to.
            if self.requests.slots() <= ahead {
                return Err(PushError::Full(request));
            }
            for item in parts.ahead.into_iter().flatten() {
                let pushed = self.requests.push(item);
                debug_assert!(pushed.is_ok(), "room was counted");
            }
            if let Some(keys) = parts.keys() {
                self.keys = keys;
            }
        }
        if self.requests.push(parts.last).is_err() {
            return Err(PushError::Full(request));
        }
        self.shared.wake();
        Ok(())
    }

    /// Submits a send request.
    ///
    /// The poll thread posts it with the safe
    /// [`VirtualQp::post_send`](vqp_core::VirtualQp::post_send), so an `INLINE` request
    /// with a payload given by address is refused
    /// ([`PostSendError::RawInline`](vqp_core::PostSendError::RawInline), in an
    /// [`Event::Rejected`]): the payload would be read on
    /// another thread, later, unchecked. See [`send_unchecked`](Self::send_unchecked).
    ///
    /// # Errors
    /// As [`submit`](Self::submit).
    #[inline]
    pub fn send(&mut self, wr: SendWr) -> Result<(), PushError<Request>> {
        self.submit(Request::Send(wr))
    }

    /// Submits a send request that may carry an `INLINE` payload given by address; the
    /// poll thread posts it with
    /// [`VirtualQp::post_send_unchecked`](vqp_core::VirtualQp::post_send_unchecked).
    ///
    /// # Safety
    /// When `wr` has `INLINE` and `len > 0`, `local_addr..local_addr + len` is
    /// initialised memory of this process that stays readable, and is not written,
    /// until the poll thread has posted the request, which may be long after this call
    /// returns. It has been posted, or never will be, once this handle reports the
    /// event of this request or of a later send, or the poll thread has stopped
    /// (`drain`, `abort` or `join` returned).
    ///
    /// ```compile_fail,E0133
    /// // The hand-off reads the payload later, on the poll thread: it needs `unsafe`.
    /// fn submit<const R: usize>(h: &mut vqp_host::Handle<R>, wr: vqp_core::SendWr) {
    ///     let _ = h.send_unchecked(wr);
    /// }
    /// ```
    ///
    /// # Errors
    /// As [`submit`](Self::submit).
    #[inline]
    #[allow(unsafe_code)] // an unsafe contract, no unsafe operation
    pub unsafe fn send_unchecked(&mut self, wr: SendWr) -> Result<(), PushError<Request>> {
        self.push(Request::Send(wr), true)
    }

    /// Submits a receive request.
    ///
    /// # Errors
    /// As [`submit`](Self::submit).
    #[inline]
    pub fn recv(&mut self, wr: RecvWr) -> Result<(), PushError<Request>> {
        self.submit(Request::Recv(wr))
    }

    /// The next event, if one is ready.
    #[inline]
    pub fn poll(&mut self) -> Option<Event> {
        self.events.pop().ok()
    }

    /// Moves up to `out.len()` ready events into `out`; returns how many.
    #[inline]
    pub fn poll_many(&mut self, out: &mut [Event]) -> usize {
        self.events.pop_slice(out)
    }

    /// Ring slots holding what was submitted and not yet taken by the poll thread (at
    /// most: it may be taking some now): one per request, more for a send that carried
    /// keys or operands ahead of it. Zero once it took everything.
    pub fn queued(&self) -> usize {
        self.requests.len()
    }

    /// Which of the poll thread's virtual QPs this handle serves (its index in the
    /// [`Stack`](super::Stack)).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<const R: usize> core::fmt::Debug for Handle<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Handle")
            .field("index", &self.index)
            .field("capacity", &R)
            .finish()
    }
}
