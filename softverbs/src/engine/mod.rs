//! The progress engine: a run queue of posted work, a reorder policy that picks what
//! runs next, and the execution of WQEs (data movement, completions, errors).
//!
//! # Model
//! Posting only queues: `post_send` appends WQEs to the QP's send queue and a
//! `(QP, count)` entry to the engine's run queue (consecutive posts to one QP merge).
//! Work runs when someone holds the engine's *execution token*:
//! - every `poll_cq` tries to take it (never waits for it) and executes up to
//!   [`POLL_BUDGET`] WQEs before it reads its CQ — progress is inline, on the polling
//!   thread, with no hand-off between threads; a poll that finds nothing queued or
//!   parked (an atomic flag) takes neither the token nor a lock;
//! - in [`Progress::Thread`] mode (the default) a background thread also takes it when
//!   work is pending and no poll has run the engine for about [`IDLE_GRACE`], and to
//!   serve RNR back-offs and delays when they expire. Blocking on a completion channel
//!   therefore works without a polling thread. The thread is stopped and joined when
//!   the process exits (or the library is unloaded), so that it leaves nothing behind
//!   for a leak checker; polls still run the engine afterwards.
//!
//! One thread executes at a time, so work is serialised: a WQE executes completely
//! (data moved, responder and requester completions written) before the next one starts.
//! Order within a QP is posting order. Across QPs the [`Reorder`] policy decides.
//!
//! Files: this one holds the scheduler (run queue, reorder policy, execution token,
//! background thread) and [`Tables`], what the engine asks of the provider; `qp` the
//! part of a QP the engine runs (with `qp::remote_state`, what it holds of another
//! process); `execute` runs a QP's WQEs as the requester;
//! `complete` how a requester's WQE ends (success, error, unanswered); `respond` is the
//! responder's side, over a [`Mover`] that moves the payload in one process or between
//! two; [`route`] is where every WQE that leaves its requester goes — the route
//! interface, which resolves where the responder QP lives and hands the WQE to the
//! in-process route or to the namespace route (which carries a WQE to a QP of another
//! process and runs the requests other processes send, over the shared namespace's
//! inbox and copies, `shared`). The routes' contract is in `crate::transport`.
//!
//! Locks, always taken in this order: execution token → run queue → requester QP →
//! responder QP → memory key table (read) → the responder's SRQ → CQ → completion
//! channel. Posting takes a QP
//! lock, then the run queue; polling takes only a CQ lock (and the token, by `try_lock`),
//! and neither when the engine and the CQ have nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::{Progress, Reorder, ADVERSARIAL_BOUND};
use crate::device::Device;
use crate::mem::MrTable;
use crate::os::lock;
use crate::srq::SrqCore;
use crate::transport::Transport;

mod complete;
mod execute;
pub(crate) mod qp;
mod respond;
pub(crate) mod route;

use execute::run;
pub(crate) use qp::{QpCore, QpInner};
pub(crate) use respond::{respond, MoveError, Mover, Requester, Response};

/// What the engine asks of the provider that holds it: the devices, the memory key
/// table and the objects named by number. The provider implements it and hands itself
/// down to every call that runs work; the engine is generic over it (one instance, no
/// dynamic dispatch on the per-WQE path) and fetches nothing from a global.
pub(crate) trait Tables: Sync + 'static {
    /// The engine the provider holds.
    fn engine(&self) -> &Engine;
    /// The devices, by index.
    fn devices(&self) -> &[Device];
    /// The memory key table (regions and windows).
    fn mrs(&self) -> &RwLock<MrTable>;
    /// The live QP `qpn` of device `dev` in this process.
    fn find_qp(&self, dev: usize, qpn: u32) -> Option<Arc<QpCore>>;
    /// The live XRC SRQ `srqn` of this process.
    fn find_srq(&self, srqn: u32) -> Option<Arc<SrqCore>>;
    /// The device index an address vector points at.
    fn resolve_av(&self, ah: &vqp_sys::ibv_ah_attr) -> Option<usize>;
    /// Handles a record of our inbox about objects rather than data (the calls on an
    /// XRC receive QP that another process opened, their replies, its events): the
    /// verbs they run are above the engine.
    fn on_object_record(
        &'static self,
        sh: &'static crate::shared::Shared,
        rec: &crate::shared::inbox::Record,
        payload: &[u8],
    );
}

/// WQEs one `poll_cq` executes at most before reading its CQ.
pub const POLL_BUDGET: usize = 256;
/// WQEs of one QP executed per pick at most (FIFO); bounds how long one QP holds the
/// engine.
const BATCH: u32 = 64;
/// How long the background thread leaves pending work to polling threads before it
/// runs the engine itself.
pub const IDLE_GRACE: Duration = Duration::from_micros(200);

struct Entry {
    qp: Arc<QpCore>,
    count: u32,
    /// Pick number when the entry was queued.
    enq: u64,
}

struct Parked {
    at: Instant,
    qp: Arc<QpCore>,
    count: u32,
}

struct Sched {
    runq: VecDeque<Entry>,
    parked: Vec<Parked>,
    picks: u64,
    policy: Reorder,
    rng: u64,
    bg_sleeping: bool,
}

impl Sched {
    fn next_rand(&mut self) -> u64 {
        // xorshift64*: small, fast, and deterministic per seed.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn release_parked(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.parked.len() {
            if self.parked[i].at <= now {
                let p = self.parked.swap_remove(i);
                self.runq.push_back(Entry {
                    qp: p.qp,
                    count: p.count,
                    enq: self.picks,
                });
            } else {
                i += 1;
            }
        }
    }

    /// Chooses the next `(QP, WQE count)` to execute.
    fn pick(&mut self, now: &mut Option<Instant>) -> Option<(Arc<QpCore>, u32)> {
        if !self.parked.is_empty() {
            let t = *now.get_or_insert_with(Instant::now);
            self.release_parked(t);
        }
        let len = self.runq.len();
        if len == 0 {
            return None;
        }
        self.picks += 1;
        let front_age = self.picks - self.runq[0].enq;
        let (idx, n) = if front_age > ADVERSARIAL_BOUND {
            (0, self.runq[0].count.min(BATCH))
        } else {
            match self.policy {
                Reorder::Fifo => (0, self.runq[0].count.min(BATCH)),
                Reorder::Random { .. } => {
                    let idx = (self.next_rand() % len as u64) as usize;
                    let max = self.runq[idx].count.min(BATCH);
                    let n = 1 + (self.next_rand() % u64::from(max)) as u32;
                    (idx, n)
                }
                Reorder::Adversarial => (len - 1, 1),
            }
        };
        let e = &mut self.runq[idx];
        e.count -= n;
        let qp = Arc::clone(&e.qp);
        if e.count == 0 {
            self.runq.remove(idx);
        }
        Some((qp, n))
    }

    fn earliest_parked(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.at).min()
    }
}

/// The engine: run queue, policy, execution token and background thread.
pub(crate) struct Engine {
    token: Mutex<()>,
    sched: Mutex<Sched>,
    wake: Condvar,
    /// Bumped by every inline progress attempt; the background thread stays away while
    /// it moves.
    activity: AtomicU64,
    /// Whether the run queue or the parked list may hold WQEs: set under the `sched`
    /// lock by whatever queues or parks one, cleared under it by a progress attempt
    /// that found both empty; read without it, so that a poll with nothing to run
    /// (what a polling loop does most) takes neither the token nor the lock.
    work: AtomicBool,
    /// QPs with requests in flight to another process (the shared namespace's service
    /// thread watches their deadlines, `route::check_deadlines`).
    pub(crate) watch: Mutex<Vec<std::sync::Weak<QpCore>>>,
    /// QPs with requests in flight to another machine (the UCX route's timer,
    /// `route::serve_machine`).
    pub(crate) machine_watch: Mutex<Vec<std::sync::Weak<QpCore>>>,
    /// Held by the thread serving other machines' messages (the machine thread, or a
    /// polling thread in its stead): `engine::route`'s `ucx`.
    pub(crate) machine_serving: Mutex<()>,
    /// Threads blocked in `ibv_get_cq_event`: while one is, a poll that ran a moment ago
    /// does not mean another is coming, so nobody naps on its account.
    waiters: AtomicU32,
    thread_mode: AtomicBool,
    thread: Once,
    /// The background thread, once started, until [`Engine::stop_thread`] joins it.
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Tells the background thread to return. Set under the `sched` lock, which the
    /// thread holds when it decides to wait, so that the wake-up cannot be missed.
    stop: AtomicBool,
    /// The way to other processes (the shared namespace), handed over at construction.
    transport: Transport,
}

/// What one WQE's execution came to.
pub(crate) enum Step {
    /// Executed; the requester's QP is still usable.
    Done,
    /// Not done yet, the WQE back at the head of its send queue: the responder had no
    /// receive (RNR), nobody answered (a retransmission is due), or the way to the
    /// peer is full. The QP continues after the delay.
    Rnr(Duration),
    /// The WQE completed in error and the requester is in the error state.
    Failed,
}

impl Engine {
    /// An engine with `policy` and `progress` that reaches other processes through
    /// `transport`.
    pub fn new(policy: Reorder, progress: Progress, transport: Transport) -> Engine {
        Engine {
            token: Mutex::new(()),
            sched: Mutex::new(Sched {
                runq: VecDeque::new(),
                parked: Vec::new(),
                picks: 0,
                policy,
                rng: seed_of(policy),
                bg_sleeping: false,
            }),
            wake: Condvar::new(),
            activity: AtomicU64::new(0),
            work: AtomicBool::new(false),
            watch: Mutex::new(Vec::new()),
            machine_watch: Mutex::new(Vec::new()),
            machine_serving: Mutex::new(()),
            waiters: AtomicU32::new(0),
            thread_mode: AtomicBool::new(progress == Progress::Thread),
            thread: Once::new(),
            handle: Mutex::new(None),
            stop: AtomicBool::new(false),
            transport,
        }
    }

    /// The way to other processes: the provider publishes through it what they may
    /// reach (QP numbers, regions, links).
    #[inline]
    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Sets the reorder policy (and restarts the random generator from its seed).
    pub fn set_policy(&self, policy: Reorder) {
        let mut s = lock(&self.sched);
        s.policy = policy;
        s.rng = seed_of(policy);
    }

    /// The reorder policy in force.
    pub fn policy(&self) -> Reorder {
        lock(&self.sched).policy
    }

    /// Sets the progress model. Switching to [`Progress::Inline`] leaves an already
    /// started background thread idle.
    pub fn set_progress(&self, progress: Progress) {
        self.thread_mode
            .store(progress == Progress::Thread, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// Queues `count` newly posted WQEs of `qp` for execution (`p`: the provider whose
    /// objects the WQEs name, for the background thread this may start).
    pub fn enqueue<P: Tables>(&'static self, p: &'static P, qp: &Arc<QpCore>, count: u32) {
        if count == 0 {
            return;
        }
        let mut s = lock(&self.sched);
        let picks = s.picks;
        match s.runq.back_mut() {
            Some(e) if Arc::ptr_eq(&e.qp, qp) => e.count += count,
            _ => s.runq.push_back(Entry {
                qp: Arc::clone(qp),
                count,
                enq: picks,
            }),
        }
        self.work.store(true, Ordering::Release);
        let sleeping = s.bg_sleeping;
        drop(s);
        if self.thread_mode.load(Ordering::Relaxed) {
            self.thread.call_once(|| self.start_thread(p));
            if sleeping {
                self.wake.notify_one();
            }
        }
    }

    /// A counter that moves whenever a thread polls (the shared inbox's service thread
    /// stays out of a polling process's way too).
    #[inline]
    pub(crate) fn activity(&self) -> u64 {
        self.activity.load(Ordering::Relaxed)
    }

    /// Whether the last poll may be followed by more soon: some thread polled, and
    /// none waits blocked for a completion event (then polling has stopped for now).
    #[inline]
    pub(crate) fn polling_since(&self, last: u64) -> bool {
        self.activity.load(Ordering::Relaxed) != last && self.waiters.load(Ordering::Relaxed) == 0
    }

    /// Marks the calling thread as blocked for a completion event until the guard
    /// drops (see `waiters`); wakes the background thread out of a nap.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_all();
        if let Some(h) = lock(&self.handle).as_ref() {
            h.thread().unpark();
        }
        self.transport.nudge();
        Waiting(self)
    }

    /// Runs the engine from a polling thread (see the module docs).
    #[inline]
    pub fn poll_progress<P: Tables>(&'static self, p: &'static P) {
        // Only its moving matters, to readers on other threads: a load and a store (no
        // locked instruction) suffice, and two pollers racing still move it.
        let a = self.activity.load(Ordering::Relaxed);
        self.activity.store(a.wrapping_add(1), Ordering::Relaxed);
        self.progress(p, POLL_BUDGET);
        self.transport.poll(POLL_BUDGET);
    }

    /// Executes up to `budget` WQEs if no other thread is executing; returns how many
    /// ran. `p` is the provider whose objects (QPs, regions, devices) the WQEs name.
    pub fn progress<P: Tables>(&'static self, p: &'static P, budget: usize) -> usize {
        // Pairs with the Release of whoever queued: a WQE queued before is seen.
        if !self.work.load(Ordering::Acquire) {
            return 0;
        }
        let Ok(_token) = self.token.try_lock() else {
            return 0;
        };
        let mut now = None;
        let mut done = 0usize;
        while done < budget {
            let picked = {
                let mut s = lock(&self.sched);
                let picked = s.pick(&mut now);
                if picked.is_none() && s.parked.is_empty() {
                    self.work.store(false, Ordering::Relaxed);
                }
                picked
            };
            let Some((qp, n)) = picked else {
                break;
            };
            let (ran, stalled) = run(p, &qp, n, &mut now);
            done += ran as usize;
            if let Some(at) = stalled {
                let rest = n - ran;
                if rest > 0 {
                    let mut s = lock(&self.sched);
                    s.parked.push(Parked {
                        at,
                        qp,
                        count: rest,
                    });
                    self.work.store(true, Ordering::Release);
                }
            }
        }
        done
    }

    /// WQEs waiting in the run queue or parked (counts from the run queue's entries,
    /// which may include WQEs already flushed).
    pub fn pending(&self) -> usize {
        let s = lock(&self.sched);
        s.runq.iter().map(|e| e.count as usize).sum::<usize>()
            + s.parked.iter().map(|p| p.count as usize).sum::<usize>()
    }

    fn start_thread<P: Tables>(&'static self, p: &'static P) {
        let spawned = std::thread::Builder::new()
            .name("softverbs-progress".into())
            .spawn(move || self.background(p));
        match spawned {
            Ok(h) => {
                *lock(&self.handle) = Some(h);
                lock(&RUNNING).push(self);
                // A failed registration only leaves the thread unjoined at exit.
                let _ = crate::os::at_exit(stop_progress_thread);
            }
            // Without the thread the engine still runs inline on every poll.
            Err(_) => self.thread_mode.store(false, Ordering::Relaxed),
        }
    }

    /// Stops the background thread and waits for it to return (at process exit). Work
    /// still queued runs on later polls, inline; the thread is not started again.
    pub fn stop_thread(&self) {
        {
            let _s = lock(&self.sched);
            self.stop.store(true, Ordering::Relaxed);
            self.thread_mode.store(false, Ordering::Relaxed);
        }
        self.wake.notify_all();
        let handle = lock(&self.handle).take();
        if let Some(h) = handle {
            // A panic in the thread has already been reported; nothing is left to do.
            let _ = h.join();
        }
    }

    fn background<P: Tables>(&'static self, p: &'static P) {
        let mut last_seen = u64::MAX;
        let mut last_nap = u64::MAX;
        loop {
            {
                let mut s = lock(&self.sched);
                loop {
                    if self.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let enabled = self.thread_mode.load(Ordering::Relaxed);
                    if enabled && !s.runq.is_empty() {
                        break;
                    }
                    let deadline = if enabled { s.earliest_parked() } else { None };
                    let seen = self.activity.load(Ordering::Relaxed);
                    if enabled && self.polling_since(last_nap) {
                        // A thread polls, and runs what gets posted: nap unannounced
                        // (posting then costs no wake-up) and look again after a grace.
                        last_nap = seen;
                        let nap = deadline.map_or(IDLE_GRACE, |at| {
                            at.saturating_duration_since(Instant::now()).min(IDLE_GRACE)
                        });
                        s = self
                            .wake
                            .wait_timeout(s, nap)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                        if deadline.is_some_and(|at| at <= Instant::now()) {
                            s.release_parked(Instant::now());
                        }
                        continue;
                    }
                    s.bg_sleeping = true;
                    s = match deadline {
                        Some(at) => {
                            let now = Instant::now();
                            if at <= now {
                                s.bg_sleeping = false;
                                s.release_parked(now);
                                continue;
                            }
                            self.wake
                                .wait_timeout(s, at - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0
                        }
                        None => self.wake.wait(s).unwrap_or_else(|e| e.into_inner()),
                    };
                    s.bg_sleeping = false;
                }
            }
            let seen = self.activity.load(Ordering::Relaxed);
            if self.polling_since(last_seen) {
                // Someone polled since we last looked: leave the work to them a while
                // (a thread that starts to wait for an event unparks us).
                last_seen = seen;
                std::thread::park_timeout(IDLE_GRACE);
                continue;
            }
            if self.progress(p, 4 * POLL_BUDGET) == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// A thread blocked for a completion event ([`Engine::waiting`]).
pub(crate) struct Waiting<'e>(&'e Engine);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The engines whose background thread has started, for [`stop_progress_thread`].
static RUNNING: Mutex<Vec<&'static Engine>> = Mutex::new(Vec::new());

/// Registered with `atexit` when a background thread starts: stops and joins the
/// threads, so that a process exits with no thread of ours running (a leak checker then
/// sees its stack and thread-local memory freed).
extern "C" fn stop_progress_thread() {
    let engines = std::mem::take(&mut *lock(&RUNNING));
    for e in engines {
        e.stop_thread();
    }
}

fn seed_of(policy: Reorder) -> u64 {
    match policy {
        // xorshift must not start from zero.
        Reorder::Random { seed } => seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
        _ => 0x9e37_79b9_7f4a_7c15,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine alone, with no device and no object: what the scheduler needs.
    struct Alone {
        engine: Engine,
        mrs: RwLock<MrTable>,
    }

    impl Tables for Alone {
        fn engine(&self) -> &Engine {
            &self.engine
        }
        fn devices(&self) -> &[Device] {
            &[]
        }
        fn mrs(&self) -> &RwLock<MrTable> {
            &self.mrs
        }
        fn find_qp(&self, _: usize, _: u32) -> Option<Arc<QpCore>> {
            None
        }
        fn find_srq(&self, _: u32) -> Option<Arc<SrqCore>> {
            None
        }
        fn resolve_av(&self, _: &vqp_sys::ibv_ah_attr) -> Option<usize> {
            None
        }
        fn on_object_record(
            &'static self,
            _: &'static crate::shared::Shared,
            _: &crate::shared::inbox::Record,
            _: &[u8],
        ) {
        }
    }

    #[test]
    fn a_poll_with_nothing_queued_takes_no_lock() {
        // A poller with nothing to run never waits for the thread that holds the run
        // queue's lock (posting, or the background thread deciding to nap).
        let p: &'static Alone = Box::leak(Box::new(Alone {
            engine: Engine::new(Reorder::Fifo, Progress::Inline, Transport::default()),
            mrs: RwLock::new(MrTable::default()),
        }));
        let held = lock(&p.engine.sched);
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _ = tx.send(p.engine.progress(p, POLL_BUDGET));
        });
        let got = rx.recv_timeout(Duration::from_secs(1)).ok();
        drop(held);
        t.join().unwrap();
        assert_eq!(got, Some(0));
    }

    #[test]
    fn the_background_thread_stops_when_asked_and_is_joined() {
        let p: &'static Alone = Box::leak(Box::new(Alone {
            engine: Engine::new(Reorder::Fifo, Progress::Thread, Transport::default()),
            mrs: RwLock::new(MrTable::default()),
        }));
        let e = &p.engine;
        e.thread.call_once(|| e.start_thread(p));
        assert!(lock(&e.handle).is_some(), "started");
        // Let it reach its wait on the condition variable, then stop it: the join
        // returns (a lost wake-up would hang here).
        std::thread::sleep(Duration::from_millis(20));
        e.stop_thread();
        assert!(lock(&e.handle).is_none(), "joined");
        assert!(!e.thread_mode.load(Ordering::Relaxed));
        e.stop_thread();
    }
}
