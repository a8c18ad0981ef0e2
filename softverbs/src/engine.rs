//! The progress engine: a run queue of posted work, a reorder policy that picks what
//! runs next, and the execution of WQEs (data movement, completions, errors).
//!
//! # Model
//! Posting only queues: `post_send` appends WQEs to the QP's send queue and a
//! `(QP, count)` entry to the engine's run queue (consecutive posts to one QP merge).
//! Work runs when someone holds the engine's *execution token*:
//! - every `poll_cq` tries to take it (never waits for it) and executes up to
//!   [`POLL_BUDGET`] WQEs before it reads its CQ — progress is inline, on the polling
//!   thread, with no hand-off between threads;
//! - in [`Progress::Thread`] mode (the default) a background thread also takes it when
//!   work is pending and no poll has run the engine for about [`IDLE_GRACE`], and to
//!   serve RNR back-offs and delays when they expire. Blocking on a completion channel
//!   therefore works without a polling thread.
//!
//! One thread executes at a time, so work is serialised: a WQE executes completely
//! (data moved, responder and requester completions written) before the next one starts.
//! Order within a QP is posting order. Across QPs the [`Reorder`] policy decides.
//!
//! Locks, always taken in this order: execution token → run queue → requester QP →
//! responder QP → memory key table (read) → CQ → completion channel. Posting takes a QP
//! lock, then the run queue; polling takes only a CQ lock (and the token, by `try_lock`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::{Duration, Instant};

use vqp_host::sys::*;

use crate::config::{Progress, Reorder, ADVERSARIAL_BOUND};
use crate::cq::lock;
use crate::mem::{self, KeyError, MrTable, Span};
use crate::provider::{self, Provider};
use crate::qp::{rnr_delay, wc_opcode, QpCore, QpInner, SendWqe, MAX_MSG, MAX_SGE, QP_FATAL};

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
    thread_mode: AtomicBool,
    thread: Once,
}

/// What one WQE's execution came to.
pub(crate) enum Step {
    /// Executed; the requester's QP is still usable.
    Done,
    /// The responder had no receive: retry after the delay.
    Rnr(Duration),
    /// The WQE completed in error and the requester is in the error state.
    Failed,
}

/// What the responder side reported.
pub(crate) enum Response {
    /// Executed; the byte count for the requester's completion.
    Ok(u32),
    /// No receive posted: the responder's RNR timer code.
    Rnr(u8),
    /// The requester's completion status.
    Error(u32),
    /// The requester is gone (another process that exited): nothing was consumed and
    /// nobody is told.
    Dropped,
}

/// Moves a WQE's payload between the requester's buffers and the responder's checked
/// spans: [`LocalMover`] in one process, `shared::remote`'s process-to-process copy
/// across processes. The responder logic in [`respond`] is the same for both.
pub(crate) trait Mover {
    /// Copies the requester's payload into `dst` (SEND, WRITE).
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError>;
    /// Copies `src` into the requester's buffers (READ).
    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError>;
    /// Copies `bytes` into the requester's buffers (an atomic's original value).
    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError>;
}

/// Why a [`Mover`] could not move the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MoveError {
    /// The requester is gone: drop the request.
    Gone,
    /// The requester's memory could not be accessed: complete with this status.
    Status(u32),
}

/// The in-process mover: plain copies between spans of this process.
struct LocalMover<'a, 't> {
    local: &'a [Span<'t>],
    inline: Option<&'a [u8]>,
}

impl Mover for LocalMover<'_, '_> {
    #[inline]
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError> {
        match self.inline {
            Some(d) => mem::copy_from_bytes(dst, d),
            None => mem::copy_spans(dst, self.local),
        };
        Ok(())
    }

    #[inline]
    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError> {
        mem::copy_spans(self.local, src);
        Ok(())
    }

    #[inline]
    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError> {
        mem::copy_from_bytes(self.local, bytes);
        Ok(())
    }
}

impl Engine {
    pub fn new(policy: Reorder, progress: Progress) -> Engine {
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
            thread_mode: AtomicBool::new(progress == Progress::Thread),
            thread: Once::new(),
        }
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

    /// Queues `count` newly posted WQEs of `qp` for execution.
    pub fn enqueue(&'static self, qp: &Arc<QpCore>, count: u32) {
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
        let sleeping = s.bg_sleeping;
        drop(s);
        if self.thread_mode.load(Ordering::Relaxed) {
            self.thread.call_once(|| self.start_thread());
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

    /// Runs the engine from a polling thread (see the module docs).
    #[inline]
    pub fn poll_progress(&'static self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
        self.progress(POLL_BUDGET);
        crate::shared::poll();
    }

    /// Executes up to `budget` WQEs if no other thread is executing; returns how many
    /// ran.
    pub fn progress(&'static self, budget: usize) -> usize {
        let Ok(_token) = self.token.try_lock() else {
            return 0;
        };
        let p = provider::get();
        let mut now = None;
        let mut done = 0usize;
        while done < budget {
            let picked = lock(&self.sched).pick(&mut now);
            let Some((qp, n)) = picked else {
                break;
            };
            let (ran, stalled) = run(p, &qp, n, &mut now);
            done += ran as usize;
            if let Some(at) = stalled {
                let rest = n - ran;
                if rest > 0 {
                    lock(&self.sched).parked.push(Parked {
                        at,
                        qp,
                        count: rest,
                    });
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

    fn start_thread(&'static self) {
        let spawned = std::thread::Builder::new()
            .name("softverbs-progress".into())
            .spawn(move || self.background());
        if spawned.is_err() {
            // Without the thread the engine still runs inline on every poll.
            self.thread_mode.store(false, Ordering::Relaxed);
        }
    }

    fn background(&'static self) {
        let mut last_seen = u64::MAX;
        let mut last_nap = u64::MAX;
        loop {
            {
                let mut s = lock(&self.sched);
                loop {
                    let enabled = self.thread_mode.load(Ordering::Relaxed);
                    if enabled && !s.runq.is_empty() {
                        break;
                    }
                    let deadline = if enabled { s.earliest_parked() } else { None };
                    let seen = self.activity.load(Ordering::Relaxed);
                    if enabled && seen != last_nap {
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
            if seen != last_seen {
                // Someone polled since we last looked: leave the work to them a while.
                last_seen = seen;
                std::thread::sleep(IDLE_GRACE);
                continue;
            }
            if self.progress(4 * POLL_BUDGET) == 0 {
                std::thread::yield_now();
            }
        }
    }
}

fn seed_of(policy: Reorder) -> u64 {
    match policy {
        // xorshift must not start from zero.
        Reorder::Random { seed } => seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
        _ => 0x9e37_79b9_7f4a_7c15,
    }
}

/// Executes up to `n` WQEs from the head of `qp`'s send queue. Returns how many ran
/// and, when the QP stalled (RNR back-off, delay), the instant it may continue.
fn run(
    p: &'static Provider,
    qp: &Arc<QpCore>,
    n: u32,
    now: &mut Option<Instant>,
) -> (u32, Option<Instant>) {
    let mut g = qp.lock();
    if g.state != IBV_QPS_RTS {
        // ERR: already flushed; RESET: queues cleared. The entry was stale.
        return (0, None);
    }
    if let Some(t) = g.not_before {
        let cur = *now.get_or_insert_with(Instant::now);
        if cur < t {
            return (0, Some(t));
        }
        g.not_before = None;
    }
    let mrs = p.mrs.read().unwrap_or_else(|e| e.into_inner());
    let mut done = 0;
    while done < n {
        let Some(head) = g.sq.front() else {
            break;
        };
        if let Some(t) = head.ready_at {
            let cur = *now.get_or_insert_with(Instant::now);
            if cur < t {
                return (done, Some(t));
            }
        }
        let Some(w) = g.sq.pop_front() else {
            break;
        };
        if g.executed >= qp.fail_after.load(Ordering::Relaxed) {
            g.executed += 1;
            fail(qp, &mut g, &w, IBV_WC_RETRY_EXC_ERR, Some(QP_FATAL));
            done += 1;
            break;
        }
        match execute(p, qp, &mut g, &mrs, w) {
            Step::Done => {
                g.executed += 1;
                done += 1;
            }
            Step::Rnr(delay) => {
                let at = *now.get_or_insert_with(Instant::now) + delay;
                g.not_before = Some(at);
                return (done, Some(at));
            }
            Step::Failed => {
                g.executed += 1;
                done += 1;
                break;
            }
        }
    }
    (done, None)
}

/// Completes `w` in error and moves the requester to the error state.
pub(crate) fn fail(qp: &QpCore, g: &mut QpInner, w: &SendWqe, status: u32, event: Option<u32>) {
    let release = qp.release(&mut g.unsignaled);
    qp.send_cq.push(
        qp.wc(w.wr_id, status, wc_opcode(w.opcode), 0),
        false,
        release,
    );
    qp.to_error(g, event);
}

/// Resolves (and caches) the QP this one is connected to.
fn peer(p: &Provider, g: &mut QpInner) -> Option<Arc<QpCore>> {
    if let Some(b) = g.peer.upgrade() {
        if b.qpn == g.attr.dest_qp_num {
            return Some(b);
        }
    }
    let dev = resolve_av(p, &g.attr.ah_attr)?;
    let b = p.find_qp(dev, g.attr.dest_qp_num)?;
    g.peer = Arc::downgrade(&b);
    Some(b)
}

/// The device index an address vector points at.
pub(crate) fn resolve_av(p: &Provider, ah: &ibv_ah_attr) -> Option<usize> {
    let gid = (ah.is_global != 0).then(|| *vqp_host::Gid::from_sys(&ah.grh.dgid).as_bytes());
    p.resolve(ah.dlid, gid.as_ref()).map(|d| d.index)
}

/// Executes one WQE popped from `qp`'s send queue.
fn execute(
    p: &'static Provider,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    mrs: &MrTable,
    w: SendWqe,
) -> Step {
    // Local buffers first: a bad lkey never leaves the requester.
    let need_local = match w.opcode {
        IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            IBV_ACCESS_LOCAL_WRITE
        }
        _ => 0,
    };
    let mut local_buf: [Span<'_>; MAX_SGE as usize] = [Span::empty(); MAX_SGE as usize];
    let mut n_local = 0;
    if w.inline.is_none() {
        for s in w.sges.as_slice() {
            match mrs.span(
                s.lkey,
                qp.dev,
                qp.pd,
                s.addr,
                u64::from(s.length),
                need_local,
            ) {
                Ok(span) if n_local < local_buf.len() => {
                    local_buf[n_local] = span;
                    n_local += 1;
                }
                _ => {
                    fail(qp, g, &w, IBV_WC_LOC_PROT_ERR, None);
                    return Step::Failed;
                }
            }
        }
    }
    let local = &local_buf[..n_local];
    let len = match &w.inline {
        Some(d) => d.len() as u64,
        None => mem::total(local),
    };
    if len > MAX_MSG {
        fail(qp, g, &w, IBV_WC_LOC_LEN_ERR, None);
        return Step::Failed;
    }
    let local_up = p.devices[qp.dev].is_up();
    let Some(b) = peer(p, g).filter(|b| local_up && p.devices[b.dev].is_up()) else {
        // Not in this process: another process's QP, or nothing answers (the
        // transport retries run out).
        return crate::shared::remote::send(p, qp, g, w, local, len);
    };
    let mut mover = LocalMover {
        local,
        inline: w.inline.as_deref(),
    };
    let response = if Arc::ptr_eq(&b, qp) {
        respond(p, qp.qpn, qp.dev, &b, g, mrs, &w, len, &mut mover)
    } else {
        let mut gb = b.lock();
        respond(p, qp.qpn, qp.dev, &b, &mut gb, mrs, &w, len, &mut mover)
    };
    match response {
        Response::Ok(byte_len) => {
            g.rnr_tries = 0;
            if w.signaled {
                let wc = qp.wc(w.wr_id, IBV_WC_SUCCESS, wc_opcode(w.opcode), byte_len);
                let release = qp.release(&mut g.unsignaled);
                if !qp.send_cq.push(wc, false, release) {
                    qp.to_error(g, None);
                    return Step::Failed;
                }
            } else {
                g.unsignaled += 1;
            }
            Step::Done
        }
        Response::Rnr(timer) => {
            let retry = g.attr.rnr_retry;
            if retry != 7 && g.rnr_tries >= retry {
                fail(qp, g, &w, IBV_WC_RNR_RETRY_EXC_ERR, None);
                return Step::Failed;
            }
            g.rnr_tries = g.rnr_tries.saturating_add(1);
            g.sq.push_front(w);
            Step::Rnr(rnr_delay(timer))
        }
        Response::Error(status) => {
            fail(qp, g, &w, status, None);
            Step::Failed
        }
        Response::Dropped => {
            fail(qp, g, &w, IBV_WC_RETRY_EXC_ERR, None);
            Step::Failed
        }
    }
}

/// The responder's side of one WQE from requester QP `a_qpn` of device `a_dev`:
/// checks, data movement (by `mv`), receive consumption and the receive completion.
/// `gb` is the responder's state (the requester's own when a QP is connected to
/// itself). Data moves before a receive is consumed, so a request whose requester
/// vanished consumes nothing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond<M: Mover>(
    p: &Provider,
    a_qpn: u32,
    a_dev: usize,
    b: &QpCore,
    gb: &mut QpInner,
    mrs: &MrTable,
    w: &SendWqe,
    len: u64,
    mv: &mut M,
) -> Response {
    let moved = |r: Result<(), MoveError>| match r {
        Ok(()) => None,
        Err(MoveError::Gone) => Some(Response::Dropped),
        Err(MoveError::Status(s)) => Some(Response::Error(s)),
    };
    let connected = matches!(gb.state, IBV_QPS_RTR | IBV_QPS_RTS)
        && gb.attr.dest_qp_num == a_qpn
        && resolve_av(p, &gb.attr.ah_attr) == Some(a_dev);
    if !connected {
        return Response::Error(IBV_WC_RETRY_EXC_ERR);
    }
    let access = gb.attr.qp_access_flags;
    let remote = |need: u32, rlen: u64| -> Result<Span<'_>, KeyError> {
        if access & need == 0 {
            return Err(KeyError::Access);
        }
        mrs.span(w.rkey, b.dev, b.pd, w.remote_addr, rlen, need)
    };
    let byte_len = len as u32;
    match w.opcode {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => {
            let Some(r) = gb.rq.front() else {
                return Response::Rnr(gb.attr.min_rnr_timer);
            };
            let mut dst_buf: [Span<'_>; MAX_SGE as usize] = [Span::empty(); MAX_SGE as usize];
            let mut n_dst = 0;
            let mut bad = false;
            for s in r.sges.as_slice() {
                match mrs.span(
                    s.lkey,
                    b.dev,
                    b.pd,
                    s.addr,
                    u64::from(s.length),
                    IBV_ACCESS_LOCAL_WRITE,
                ) {
                    Ok(span) if n_dst < dst_buf.len() => {
                        dst_buf[n_dst] = span;
                        n_dst += 1;
                    }
                    _ => bad = true,
                }
            }
            let dst = &dst_buf[..n_dst];
            let (recv_status, req_status) = if bad {
                (IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR)
            } else if mem::total(dst) < len {
                (IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR)
            } else {
                (IBV_WC_SUCCESS, IBV_WC_SUCCESS)
            };
            if recv_status == IBV_WC_SUCCESS {
                if let Some(r) = moved(mv.pull(dst)) {
                    return r;
                }
            }
            let Some(r) = gb.rq.pop_front() else {
                return Response::Rnr(gb.attr.min_rnr_timer);
            };
            if recv_status != IBV_WC_SUCCESS {
                b.recv_cq
                    .push(b.wc(r.wr_id, recv_status, IBV_WC_RECV, 0), false, None);
                b.to_error(gb, Some(crate::qp::QP_REQ_ERR));
                return Response::Error(req_status);
            }
            let mut wc = b.wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, byte_len);
            wc.src_qp = a_qpn;
            wc.slid = p.devices[a_dev].lid;
            if w.opcode == IBV_WR_SEND_WITH_IMM {
                wc.wc_flags = IBV_WC_WITH_IMM;
                wc.imm = ibv_wc_imm { imm_data: w.imm };
            }
            if !b.recv_cq.push(wc, w.solicited, None) {
                b.to_error(gb, None);
            }
            Response::Ok(0)
        }
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => {
            let with_imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
            if with_imm && gb.rq.is_empty() {
                return Response::Rnr(gb.attr.min_rnr_timer);
            }
            if len > 0 {
                let Ok(dst) = remote(IBV_ACCESS_REMOTE_WRITE, len) else {
                    return Response::Error(IBV_WC_REM_ACCESS_ERR);
                };
                if let Some(r) = moved(mv.pull(&[dst])) {
                    return r;
                }
            }
            if let Some(r) = with_imm.then(|| gb.rq.pop_front()).flatten() {
                let mut wc = b.wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, byte_len);
                wc.src_qp = a_qpn;
                wc.slid = p.devices[a_dev].lid;
                wc.wc_flags = IBV_WC_WITH_IMM;
                wc.imm = ibv_wc_imm { imm_data: w.imm };
                if !b.recv_cq.push(wc, w.solicited, None) {
                    b.to_error(gb, None);
                }
            }
            Response::Ok(0)
        }
        IBV_WR_RDMA_READ => {
            if len > 0 {
                let Ok(src) = remote(IBV_ACCESS_REMOTE_READ, len) else {
                    return Response::Error(IBV_WC_REM_ACCESS_ERR);
                };
                if let Some(r) = moved(mv.push(&[src])) {
                    return r;
                }
            }
            Response::Ok(byte_len)
        }
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            if w.remote_addr % 8 != 0 || len != 8 {
                return Response::Error(IBV_WC_REM_INV_REQ_ERR);
            }
            let Ok(target) = remote(IBV_ACCESS_REMOTE_ATOMIC, 8) else {
                return Response::Error(IBV_WC_REM_ACCESS_ERR);
            };
            let orig = if w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD {
                mem::fetch_add(&target, w.compare_add)
            } else {
                mem::compare_swap(&target, w.compare_add, w.swap)
            };
            let Some(orig) = orig else {
                return Response::Error(IBV_WC_REM_INV_REQ_ERR);
            };
            if let Some(r) = moved(mv.push_bytes(&orig.to_ne_bytes())) {
                return r;
            }
            Response::Ok(8)
        }
        _ => Response::Error(IBV_WC_REM_INV_REQ_ERR),
    }
}
