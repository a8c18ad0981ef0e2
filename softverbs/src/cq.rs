//! Completion queues, completion channels and asynchronous events.
//!
//! A CQ has a fixed capacity (what `ibv_create_cq` granted). A completion that does not
//! fit is not dropped silently: the CQ enters the error state (`IBV_EVENT_CQ_ERR` is
//! raised on its context's asynchronous event queue), the producing QP is moved to the
//! error state by the engine, and once the entries already queued are polled,
//! `poll_cq` returns a negative value — as a CQ overrun does on hardware.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use vqp_sys::ibv_wc;

use crate::os::{lock, EventFd};

/// `enum ibv_event_type` values this provider raises.
pub(crate) mod event {
    /// `IBV_EVENT_CQ_ERR`.
    pub const CQ_ERR: u32 = 0;
    /// `IBV_EVENT_QP_FATAL`.
    pub const QP_FATAL: u32 = 1;
    /// `IBV_EVENT_QP_REQ_ERR`.
    pub const QP_REQ_ERR: u32 = 2;
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    pub const QP_ACCESS_ERR: u32 = 3;
    /// `IBV_EVENT_PORT_ACTIVE`.
    pub const PORT_ACTIVE: u32 = 9;
    /// `IBV_EVENT_PORT_ERR`.
    pub const PORT_ERR: u32 = 10;
    /// `IBV_EVENT_PATH_MIG_ERR`.
    pub const PATH_MIG_ERR: u32 = 7;
    /// `IBV_EVENT_DEVICE_FATAL`.
    pub const DEVICE_FATAL: u32 = 8;
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    pub const QP_LAST_WQE_REACHED: u32 = 16;
}

/// One asynchronous event: its type and the element (object address or port number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AsyncEvent {
    pub kind: u32,
    pub element: usize,
}

/// Whether events of `kind` name an object (a QP, CQ or SRQ, whose address is the
/// element) rather than a port or the device.
pub(crate) fn names_object(kind: u32) -> bool {
    !matches!(
        kind,
        vqp_sys::IBV_EVENT_DEVICE_FATAL
            | vqp_sys::IBV_EVENT_PORT_ACTIVE
            | vqp_sys::IBV_EVENT_PORT_ERR
            | vqp_sys::IBV_EVENT_LID_CHANGE
            | vqp_sys::IBV_EVENT_PKEY_CHANGE
            | vqp_sys::IBV_EVENT_SM_CHANGE
            | vqp_sys::IBV_EVENT_CLIENT_REREGISTER
            | vqp_sys::IBV_EVENT_GID_CHANGE
    )
}

/// Events waiting to be taken, announced on an eventfd whose count is 1 exactly while
/// one waits (0 otherwise), as a kernel event file is readable exactly while its list
/// holds an event. Only its owner reads that count, under the lock that guards this.
struct Announced<T> {
    pending: VecDeque<T>,
    signalled: bool,
}

impl<T> Default for Announced<T> {
    fn default() -> Self {
        Announced {
            pending: VecDeque::new(),
            signalled: false,
        }
    }
}

impl<T> Announced<T> {
    /// Queues `ev`; `fd` is readable from now on.
    fn push(&mut self, fd: &EventFd, ev: T) {
        self.pending.push_back(ev);
        if !self.signalled {
            self.signalled = true;
            fd.signal();
        }
    }

    /// Takes the oldest event; `fd` is no longer readable once none is left.
    fn pop(&mut self, fd: &EventFd) -> Option<T> {
        let ev = self.pending.pop_front()?;
        self.settle(fd);
        Some(ev)
    }

    /// Drops the events `keep` refuses; likewise for `fd`.
    fn retain(&mut self, fd: &EventFd, keep: impl FnMut(&T) -> bool) {
        self.pending.retain(keep);
        self.settle(fd);
    }

    /// Takes `fd`'s count once nothing is pending. The count is 1 here; checked all
    /// the same, so that a program reading the descriptor itself cannot make this
    /// block.
    fn settle(&mut self, fd: &EventFd) {
        if self.pending.is_empty() && self.signalled {
            if crate::os::readable_now(fd.raw()) {
                let _ = fd.wait_one();
            }
            self.signalled = false;
        }
    }
}

/// A context's asynchronous events: those raised and not yet taken, and the objects of
/// those taken and not yet acknowledged (one entry per event).
#[derive(Default)]
struct AsyncQueue {
    pending: Announced<AsyncEvent>,
    unacked: Vec<usize>,
}

/// The Rust side of an opened device context: its device and its asynchronous events.
pub(crate) struct CtxCore {
    /// Device index.
    pub dev: usize,
    /// Readable while asynchronous events are pending, as the kernel's event file is
    /// (its count is 1 then, 0 otherwise; only [`CtxCore`] reads it, under its lock).
    pub async_fd: EventFd,
    events: Mutex<AsyncQueue>,
    acked: Condvar,
}

impl CtxCore {
    pub fn new(dev: usize) -> io::Result<CtxCore> {
        Ok(CtxCore {
            dev,
            async_fd: EventFd::new()?,
            events: Mutex::new(AsyncQueue::default()),
            acked: Condvar::new(),
        })
    }

    /// Queues an asynchronous event and makes `async_fd` readable.
    pub fn raise(&self, kind: u32, element: usize) {
        lock(&self.events)
            .pending
            .push(&self.async_fd, AsyncEvent { kind, element });
    }

    /// Takes the next event without waiting (`async_fd` says when there is one). An
    /// event naming an object counts as unacknowledged until [`CtxCore::ack`].
    pub fn take(&self) -> Option<AsyncEvent> {
        let mut g = lock(&self.events);
        let ev = g.pending.pop(&self.async_fd)?;
        if names_object(ev.kind) {
            g.unacked.push(ev.element);
        }
        Some(ev)
    }

    /// Acknowledges one taken event of `kind` on `element` (`ibv_ack_async_event`).
    pub fn ack(&self, kind: u32, element: usize) {
        if !names_object(kind) {
            return;
        }
        let mut g = lock(&self.events);
        if let Some(i) = g.unacked.iter().position(|&e| e == element) {
            g.unacked.swap_remove(i);
        }
        drop(g);
        self.acked.notify_all();
    }

    /// The object at `element` is being destroyed: drops its events nobody has taken
    /// (as the kernel's `ib_uverbs_release_uevent` frees a destroyed object's unread
    /// events, so that no event names freed memory) and waits until those taken were
    /// acknowledged (as libibverbs' `ibv_cmd_destroy_qp` waits for
    /// `events_reported`).
    pub fn forget(&self, element: usize) {
        let mut g = lock(&self.events);
        g.pending.retain(&self.async_fd, |e| {
            !(names_object(e.kind) && e.element == element)
        });
        while g.unacked.contains(&element) {
            g = self.acked.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A completion channel: CQ events queue here, and its eventfd is readable exactly
/// while one is queued, as the kernel's completion event file is, so that blocking and
/// `poll(2)` on the channel's fd both work.
pub(crate) struct ChannelCore {
    /// Its count is 1 while events are queued, 0 otherwise; only [`ChannelCore`] reads
    /// it, under its lock.
    pub fd: EventFd,
    /// CQ address and CQ context of each event.
    events: Mutex<Announced<(usize, usize)>>,
    /// CQs attached (destroying the channel while this is non-zero is `EBUSY`).
    pub users: AtomicU32,
}

impl ChannelCore {
    pub fn new() -> io::Result<ChannelCore> {
        Ok(ChannelCore {
            fd: EventFd::new()?,
            events: Mutex::default(),
            users: AtomicU32::new(0),
        })
    }

    fn post(&self, cq: usize, cq_context: usize) {
        lock(&self.events).push(&self.fd, (cq, cq_context));
    }

    /// Takes the next event (CQ address, CQ context) without waiting (`fd` says when
    /// there is one).
    pub fn take(&self) -> Option<(usize, usize)> {
        lock(&self.events).pop(&self.fd)
    }

    /// Drops the events of CQ `cq` nobody has taken (the CQ is being destroyed): as the
    /// kernel's `ib_uverbs_release_ucq` frees a destroyed CQ's unread events, which
    /// therefore need no acknowledgement; `fd` is no longer readable when none is left.
    pub fn discard(&self, cq: usize) {
        lock(&self.events).retain(&self.fd, |&(q, _)| q != cq);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    No,
    Any,
    Solicited,
}

/// Send-queue slots a completion gives back to its QP when it is polled (as a NIC's
/// driver advances the send queue's tail in `poll_cq`).
pub(crate) type Release = Option<(Arc<AtomicU32>, u32)>;

/// When a completion entered its CQ: the device clock (`CLOCK_MONOTONIC_RAW`) and the
/// wall clock (`CLOCK_REALTIME`), in nanoseconds. Taken only for CQs that report
/// completion timestamps (`ibv_create_cq_ex`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// `CLOCK_MONOTONIC_RAW`, ns: what `ibv_wc_read_completion_ts` reads.
    pub raw: u64,
    /// `CLOCK_REALTIME`, ns: what `ibv_wc_read_completion_wallclock_ns` reads.
    pub wall: u64,
}

impl Stamp {
    /// The two clocks now.
    pub fn now() -> Stamp {
        Stamp {
            raw: crate::os::clock_ns(libc::CLOCK_MONOTONIC_RAW),
            wall: crate::os::clock_ns(libc::CLOCK_REALTIME),
        }
    }
}

struct CqInner {
    /// Completions, each with its slots to release, its stamp, and whether it may
    /// raise a solicited-only event ([`Armed::Solicited`]).
    queue: VecDeque<(ibv_wc, Release, Stamp, bool)>,
    overflowed: bool,
    armed: Armed,
    /// Events taken by `ibv_get_cq_event` (what `ibv_destroy_cq` waits to see
    /// acknowledged, as libibverbs waits for the kernel's `comp_events_reported`, which
    /// counts the events read, not the events raised).
    delivered: u64,
    acks: u64,
}

/// The Rust side of a CQ.
pub(crate) struct CqCore {
    /// Entries the CQ holds (changed only by [`CqCore::resize`], under `inner`'s lock,
    /// which [`CqCore::push`] also holds when it reads it).
    cap: AtomicUsize,
    /// Device index.
    pub dev: usize,
    /// Owning context.
    pub ctx: Arc<CtxCore>,
    /// Completion channel, if any.
    pub channel: Option<Arc<ChannelCore>>,
    /// Address of the `ibv_cq` handed out (for events).
    pub handle: AtomicUsize,
    /// `cq_context` given at creation (for events).
    pub user_context: usize,
    /// QPs using this CQ (destroying it while this is non-zero is `EBUSY`).
    pub users: AtomicU32,
    /// Whether completions are stamped when they enter ([`Stamp`]).
    pub stamped: bool,
    inner: Mutex<CqInner>,
    /// The queue's length, plus one once it overflowed: written under `inner`'s lock
    /// whenever either changes, read without it so that polling an empty CQ (what a
    /// polling loop does most) takes no lock.
    waiting: AtomicUsize,
    acked: Condvar,
}

/// The CQ is in the error state (it overflowed) and holds nothing more to poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CqOverrun;

/// Initial allocation of a CQ's ring; it grows to the capacity on demand.
const INITIAL_ALLOC: usize = 1024;

impl CqCore {
    pub fn new(
        cap: usize,
        dev: usize,
        ctx: Arc<CtxCore>,
        channel: Option<Arc<ChannelCore>>,
        user_context: usize,
    ) -> CqCore {
        if let Some(ch) = &channel {
            ch.users.fetch_add(1, Ordering::Relaxed);
        }
        CqCore {
            cap: AtomicUsize::new(cap),
            dev,
            ctx,
            channel,
            handle: AtomicUsize::new(0),
            user_context,
            users: AtomicU32::new(0),
            stamped: false,
            inner: Mutex::new(CqInner {
                queue: VecDeque::with_capacity(cap.min(INITIAL_ALLOC)),
                overflowed: false,
                armed: Armed::No,
                delivered: 0,
                acks: 0,
            }),
            waiting: AtomicUsize::new(0),
            acked: Condvar::new(),
        }
    }

    /// Adds a completion; false when the CQ is full (it is then in error) or already in
    /// error. `solicited` marks a receive of a solicited message, for arming with
    /// `solicited_only`.
    /// `release` names the send-queue slots the completion frees when polled.
    pub fn push(&self, wc: ibv_wc, solicited: bool, release: Release) -> bool {
        let mut g = lock(&self.inner);
        if g.overflowed {
            return false;
        }
        if g.queue.len() >= self.cap.load(Ordering::Relaxed) {
            g.overflowed = true;
            self.publish(&g);
            drop(g);
            self.ctx
                .raise(event::CQ_ERR, self.handle.load(Ordering::Relaxed));
            return false;
        }
        let at = if self.stamped {
            Stamp::now()
        } else {
            Stamp::default()
        };
        let solicits = solicited || wc.status != vqp_sys::IBV_WC_SUCCESS;
        g.queue.push_back((wc, release, at, solicits));
        self.publish(&g);
        let fire = match g.armed {
            Armed::No => false,
            Armed::Any => true,
            Armed::Solicited => solicits,
        };
        if fire {
            g.armed = Armed::No;
        }
        drop(g);
        if fire {
            if let Some(ch) = &self.channel {
                ch.post(self.handle.load(Ordering::Relaxed), self.user_context);
            }
        }
        true
    }

    /// Pops up to `max` completions, handing each to `sink` with its index.
    ///
    /// # Errors
    /// [`CqOverrun`] when the CQ overflowed and nothing is left to poll.
    pub fn poll(
        &self,
        max: usize,
        mut sink: impl FnMut(usize, ibv_wc),
    ) -> Result<usize, CqOverrun> {
        self.poll_stamped(max, |i, wc, _| sink(i, wc))
    }

    /// As [`CqCore::poll`], with each completion's [`Stamp`] (zero unless the CQ is
    /// `stamped`).
    ///
    /// # Errors
    /// [`CqOverrun`] when the CQ overflowed and nothing is left to poll.
    pub fn poll_stamped(
        &self,
        max: usize,
        mut sink: impl FnMut(usize, ibv_wc, Stamp),
    ) -> Result<usize, CqOverrun> {
        // Pairs with `publish`'s Release: an entry seen counted is seen in the queue.
        if self.waiting.load(Ordering::Acquire) == 0 {
            return Ok(0);
        }
        let mut g = lock(&self.inner);
        let n = max.min(g.queue.len());
        if n == 0 && g.overflowed {
            return Err(CqOverrun);
        }
        for (i, (wc, release, at, _)) in g.queue.drain(..n).enumerate() {
            if let Some((slots, k)) = release {
                let _ = slots.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(v.saturating_sub(k))
                });
            }
            sink(i, wc, at);
        }
        self.publish(&g);
        Ok(n)
    }

    /// Stores what `waiting` mirrors; called with `inner`'s lock held after a change.
    fn publish(&self, g: &CqInner) {
        self.waiting
            .store(g.queue.len() + usize::from(g.overflowed), Ordering::Release);
    }

    /// Changes the capacity to `cap` entries (`ibv_resize_cq`); the entries queued stay.
    /// `owed`: completions the work outstanding on the CQ's QPs will still add (see
    /// `QpCore::owed_to`).
    ///
    /// # Errors
    /// `EINVAL` when the entries queued and owed are more than `cap`. The verbs
    /// specification refuses a size below the entries queued (IBA Vol. 1 §11.2.7.3,
    /// and the device's RESIZE_CQ, which mlx5's `mlx5_ib_resize_cq` passes on, fails
    /// so). Work posted but not yet completed counts as queued here: a NIC completes
    /// it within microseconds of the doorbell, softverbs' engine only when it runs,
    /// so a program that posts, waits and then shrinks the CQ (rdma-core's
    /// `test_resize_cq`) expects to find it queued — and a CQ shrunk below it would
    /// overflow on its completions.
    pub fn resize(&self, cap: usize, owed: usize) -> Result<(), i32> {
        let g = lock(&self.inner);
        if g.queue.len().saturating_add(owed) > cap {
            return Err(libc::EINVAL);
        }
        self.cap.store(cap, Ordering::Relaxed);
        drop(g);
        Ok(())
    }

    /// Removes every completion of QP `qpn` not yet polled (the QP was reset or
    /// destroyed: see `QpCore::clean_cqs`); the others keep their order.
    pub fn clean(&self, qpn: u32) {
        let mut g = lock(&self.inner);
        g.queue.retain(|(wc, _, _, _)| wc.qp_num != qpn);
        self.publish(&g);
    }

    /// Arms the CQ for one event; `EINVAL` without a channel. A CQ that already holds a
    /// completion the arming asks for raises the event at once, as a ConnectX does:
    /// mlx5's `mlx5_arm_cq` (rdma-core `providers/mlx5/cq.c`) writes the consumer index
    /// into the arm doorbell, and the device raises the event for a CQE at or past it,
    /// one already written and not yet polled included. Programs rely on it: Open MPI's
    /// openib connection manager (`udcm_cq_event_dispatch`) polls its CQ, then arms it,
    /// and a completion that came between the two would otherwise wait forever.
    pub fn arm(&self, solicited_only: bool) -> Result<(), i32> {
        let Some(ch) = &self.channel else {
            return Err(libc::EINVAL);
        };
        let mut g = lock(&self.inner);
        // Arming for "any" is not narrowed by a later solicited-only request.
        g.armed = match (g.armed, solicited_only) {
            (Armed::Any, _) | (_, false) => Armed::Any,
            _ => Armed::Solicited,
        };
        let fire = match g.armed {
            Armed::No => false,
            Armed::Any => !g.queue.is_empty(),
            Armed::Solicited => g.queue.iter().any(|e| e.3),
        };
        if fire {
            g.armed = Armed::No;
        }
        drop(g);
        if fire {
            ch.post(self.handle.load(Ordering::Relaxed), self.user_context);
        }
        Ok(())
    }

    /// Counts one event of this CQ taken from its channel.
    pub fn delivered(&self) {
        lock(&self.inner).delivered += 1;
    }

    /// Acknowledges `n` events.
    pub fn ack(&self, n: u32) {
        let mut g = lock(&self.inner);
        g.acks += u64::from(n);
        drop(g);
        self.acked.notify_all();
    }

    /// Waits until every event delivered for this CQ was acknowledged, as
    /// `ibv_destroy_cq` does.
    pub fn wait_acked(&self) {
        let mut g = lock(&self.inner);
        while g.acks < g.delivered {
            g = self.acked.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl CqCore {
    /// Detaches the CQ from its channel (at `ibv_destroy_cq`; the core itself may live
    /// on a little in the engine's queues).
    pub fn release_channel(&self) {
        if let Some(ch) = &self.channel {
            ch.users.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn cq(cap: usize) -> CqCore {
        CqCore::new(cap, 0, Arc::new(CtxCore::new(0).unwrap()), None, 0)
    }

    fn wc(qpn: u32) -> ibv_wc {
        ibv_wc {
            qp_num: qpn,
            ..Default::default()
        }
    }

    #[test]
    fn arming_a_cq_that_holds_a_completion_raises_the_event_at_once() {
        let ch = Arc::new(ChannelCore::new().unwrap());
        let q = CqCore::new(
            8,
            0,
            Arc::new(CtxCore::new(0).unwrap()),
            Some(ch.clone()),
            7,
        );
        // Armed with nothing queued: no event until a completion comes.
        q.arm(false).unwrap();
        assert_eq!(ch.take(), None);
        assert!(q.push(wc(1), false, None));
        assert_eq!(ch.take(), Some((0, 7)));
        // The completion is still there, not polled, when the program arms again (it
        // polled before the completion came, and arms after): the event comes at once.
        q.arm(false).unwrap();
        assert_eq!(
            ch.take(),
            Some((0, 7)),
            "an unpolled completion, armed for any"
        );
        // One event per arming: the next completion raises none until armed again.
        assert!(q.push(wc(2), false, None));
        assert_eq!(ch.take(), None);
        // Solicited-only: a queued completion that may not raise one does not; a
        // solicited one, or an error, does.
        assert_eq!(q.poll(8, |_, _| {}), Ok(2));
        assert!(q.push(wc(3), false, None));
        q.arm(true).unwrap();
        assert_eq!(ch.take(), None, "no solicited completion queued");
        assert!(q.push(wc(4), true, None));
        assert_eq!(ch.take(), Some((0, 7)));
        q.arm(true).unwrap();
        assert_eq!(
            ch.take(),
            Some((0, 7)),
            "a solicited completion still queued"
        );
        // Polled empty, armed: nothing.
        assert_eq!(q.poll(8, |_, _| {}), Ok(2));
        q.arm(false).unwrap();
        assert_eq!(ch.take(), None);
    }

    #[test]
    fn a_channel_is_readable_exactly_while_an_event_is_queued() {
        let ch = ChannelCore::new().unwrap();
        let readable = || crate::os::readable_now(ch.fd.raw());
        assert!(!readable());
        ch.post(0x1000, 1);
        ch.post(0x2000, 2);
        ch.post(0x1000, 3);
        assert!(readable());
        // A destroyed CQ's events go; the other CQ's stays, and keeps it readable.
        ch.discard(0x1000);
        assert!(readable());
        assert_eq!(ch.take(), Some((0x2000, 2)));
        assert!(!readable(), "readable with nothing queued");
        assert_eq!(ch.take(), None);
        // Dropping the only one queued leaves nothing to announce either.
        ch.post(0x1000, 4);
        ch.discard(0x1000);
        assert!(!readable());
        ch.post(0x2000, 5);
        assert!(readable());
    }

    #[test]
    fn a_destroyed_object_s_events_are_dropped_and_its_taken_ones_awaited() {
        let c = Arc::new(CtxCore::new(0).unwrap());
        let (qp, other) = (0x1000, 0x2000);
        c.raise(event::QP_FATAL, qp);
        c.raise(event::PORT_ERR, 1);
        c.raise(event::QP_REQ_ERR, other);
        c.raise(event::QP_ACCESS_ERR, qp);
        assert!(crate::os::readable_now(c.async_fd.raw()));
        // Taken and not acknowledged: its destruction waits.
        assert_eq!(c.take().map(|e| e.element), Some(qp));
        let (tx, rx) = mpsc::channel();
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            c2.forget(qp);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "waits for the acknowledgement"
        );
        c.ack(event::QP_FATAL, qp);
        rx.recv_timeout(Duration::from_secs(5))
            .expect("returns once it came");
        t.join().unwrap();
        // Its pending event went with it; the port's and the other QP's stay.
        assert_eq!(
            c.take(),
            Some(AsyncEvent {
                kind: event::PORT_ERR,
                element: 1
            })
        );
        assert!(crate::os::readable_now(c.async_fd.raw()));
        assert_eq!(c.take().map(|e| e.element), Some(other));
        assert_eq!(c.take(), None);
        assert!(
            !crate::os::readable_now(c.async_fd.raw()),
            "readable only while something is pending"
        );
        // Forgetting the last pending event leaves the descriptor unreadable too.
        c.raise(event::QP_FATAL, qp);
        c.forget(qp);
        assert!(!crate::os::readable_now(c.async_fd.raw()));
        assert_eq!(c.take(), None);
        // A port event is never awaited.
        c.raise(event::PORT_ACTIVE, 1);
        assert!(c.take().is_some());
        c.forget(1);
        c.ack(event::QP_REQ_ERR, other);
        c.forget(other);
    }

    /// Polls `q` on another thread while this one holds the CQ's lock; whether that
    /// poll returned within a second, and what it returned.
    fn poll_while_locked(q: &Arc<CqCore>) -> Option<Result<usize, CqOverrun>> {
        let g = lock(&q.inner);
        let (tx, rx) = mpsc::channel();
        let q2 = Arc::clone(q);
        let t = std::thread::spawn(move || {
            let _ = tx.send(q2.poll(4, |_, _| {}));
        });
        let got = rx.recv_timeout(Duration::from_secs(1)).ok();
        drop(g);
        t.join().unwrap();
        got
    }

    #[test]
    fn polling_an_empty_cq_takes_no_lock() {
        // A poller of an empty CQ never waits for the thread writing a completion into
        // it (or any other holder of its lock).
        let q = Arc::new(cq(4));
        assert_eq!(poll_while_locked(&q), Some(Ok(0)));
        // Emptied by a poll, and by removing a QP's completions: the same.
        assert!(q.push(wc(1), false, None));
        assert_eq!(q.poll(4, |_, _| {}), Ok(1));
        assert_eq!(poll_while_locked(&q), Some(Ok(0)));
        assert!(q.push(wc(2), false, None));
        q.clean(2);
        assert_eq!(poll_while_locked(&q), Some(Ok(0)));
    }
}
