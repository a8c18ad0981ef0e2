//! The poll loop: each round takes requests from every handle's ring and posts them,
//! polls the virtual CQ once and hands each completion to its handle's event ring;
//! idle, it spins, yields or sleeps as configured.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use vqp_core::ring::{Consumer, Producer, PushError, Ring, Stamped};
use vqp_core::{
    PhysCq, PhysQp, Policy, PostRecvError, PostSendError, VirtualCq, VirtualQp, Wc, WcStatus,
};

use super::handle::{Shared, ABORT, DRAIN, RUN};
use super::msg::{Event, Refusal, Request};
use super::stack::{Blocker, Stack};
use super::wire::{Assembly, Item};
use super::{Idle, PollerConfig, Stats};

/// Virtual completions taken per poll of the virtual CQ.
const POLL_BATCH: usize = 32;

/// The poll thread's end of one handle, and what waits on its behalf.
struct Lane<const R: usize> {
    requests: Consumer<Arc<Ring<Item, R, Stamped>>>,
    /// What the items taken so far leave for the next request (its keys).
    assembly: Assembly,
    events: Producer<Arc<Ring<Event, R, Stamped>>>,
    /// A request refused for backpressure, retried before anything behind it, and
    /// whether its submitter vouched for its inline payload.
    stalled: Option<(Request, bool)>,
    /// Events that found the event ring full, oldest first. Capacity reserved at
    /// start; the loop never lets more than `POLL_BATCH` wait (it stops polling and
    /// taking requests for a lane whose events wait).
    carry: VecDeque<Event>,
    qp_num: u32,
    /// An [`Event::PathFailed`] was reported.
    path_failed: bool,
}

impl<const R: usize> Lane<R> {
    fn emit(&mut self, event: Event, stats: &mut Stats) {
        if self.carry.is_empty() {
            match self.events.push(event) {
                Ok(()) => return,
                Err(PushError::Full(event)) => {
                    stats.events_waited += 1;
                    self.carry.push_back(event);
                }
            }
        } else {
            self.carry.push_back(event);
        }
        debug_assert!(self.carry.len() <= 2 * POLL_BATCH);
    }

    /// Moves waiting events into the ring while it has room; true if any moved.
    fn flush(&mut self) -> bool {
        let mut moved = false;
        while let Some(&event) = self.carry.front() {
            if self.events.push(event).is_err() {
                break;
            }
            self.carry.pop_front();
            moved = true;
        }
        moved
    }
}

/// Polls the virtual CQ once and routes what it returns; returns how many.
fn poll_once<
    Q,
    C,
    const R: usize,
    const N: usize,
    const D: usize,
    const S: usize,
    const W: usize,
    const DEVS: usize,
    const B: usize,
>(
    vcq: &mut VirtualCq<C, DEVS, B>,
    vqps: &mut [&mut VirtualQp<Q, N, D, S, W>],
    lanes: &mut [Lane<R>],
    out: &mut [Wc; POLL_BATCH],
    stats: &mut Stats,
) -> usize
where
    Q: PhysQp,
    C: PhysCq,
{
    match vcq.poll(vqps, out) {
        Ok(n) => {
            for wc in &out[..n] {
                let k = lanes
                    .iter()
                    .position(|l| l.qp_num == wc.qp_num)
                    .unwrap_or_default();
                debug_assert_eq!(lanes[k].qp_num, wc.qp_num);
                stats.completed += 1;
                lanes[k].emit(Event::Completed(*wc), stats);
            }
            n
        }
        Err(_) => {
            stats.poll_failures += 1;
            0
        }
    }
}

fn is_backpressure(e: &Refusal) -> bool {
    matches!(
        e,
        Refusal::Send(PostSendError::Full) | Refusal::Recv(PostRecvError::Full)
    )
}

pub(super) type Ends<const R: usize> = Vec<(
    Consumer<Arc<Ring<Item, R, Stamped>>>,
    Producer<Arc<Ring<Event, R, Stamped>>>,
)>;

/// Rounds between two readings of the clock for the adaptive striping policy and
/// re-dispatch's grace period: a busy round takes some hundreds of nanoseconds, an
/// idle one up to the idle strategy's sleep (so a sleeping thread ends a grace period
/// that late), against intervals of milliseconds.
const SAMPLE_ROUNDS: u64 = 64;

/// The poll loop.
pub(super) fn run<
    Q,
    C,
    const R: usize,
    const N: usize,
    const D: usize,
    const S: usize,
    const W: usize,
    const DEVS: usize,
    const B: usize,
>(
    config: &PollerConfig,
    stack: Stack<Q, C, N, D, S, W, DEVS, B>,
    ends: Ends<R>,
    shared: &Shared,
) -> Stats
where
    Q: PhysQp,
    C: PhysCq,
{
    let Stack {
        mut vcq,
        mut vqps,
        mut blocker,
        mut events,
    } = stack;
    let mut lanes: Vec<Lane<R>> = ends
        .into_iter()
        .zip(&vqps)
        .map(|((requests, events), vqp)| Lane {
            requests,
            assembly: Assembly::default(),
            events,
            stalled: None,
            carry: VecDeque::with_capacity(2 * POLL_BATCH),
            qp_num: vqp.qp_num(),
            path_failed: false,
        })
        .collect();
    let mut refs: Vec<&mut VirtualQp<Q, N, D, S, W>> = vqps.iter_mut().collect();
    let mut out = [Wc::EMPTY; POLL_BATCH];
    let mut stats = Stats::default();
    let mut idle_rounds = 0u32;
    let mut phase = RUN;
    // `None`: no deadline (a timeout too large to add to the clock).
    let mut deadline: Option<Instant> = None;
    let mut timeout = Duration::ZERO;
    // The clock of the adaptive striping policy and of re-dispatch's grace period,
    // read once every `SAMPLE_ROUNDS` rounds and only when a virtual QP uses either.
    let clocked = refs.iter().any(|v| {
        let c = v.config();
        c.policy == Policy::Adaptive || (c.redispatch && c.grace_ns > 0)
    });
    let epoch = Instant::now();

    loop {
        stats.rounds += 1;
        if clocked && stats.rounds % SAMPLE_ROUNDS == 0 {
            let now = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            for vqp in refs.iter_mut() {
                vqp.sample(now);
            }
        }
        // Acquire: pairs with `stop`'s Release, so the timeout stored before is seen.
        let command = shared.command.load(Ordering::Acquire);
        if command != phase && phase != ABORT {
            timeout = Duration::from_nanos(shared.timeout_ns.load(Ordering::Relaxed));
            deadline = Instant::now().checked_add(timeout);
            phase = command;
            if phase == ABORT {
                stats.aborted = true;
                for vqp in refs.iter_mut() {
                    vqp.shut_down();
                }
            }
        }

        let mut busy = false;
        if let Some(watch) = events.as_mut() {
            while let Some(f) = watch.take() {
                busy = true;
                for (k, vqp) in refs.iter_mut().enumerate() {
                    let status = f.status();
                    let hit = match f.qp_num {
                        Some(q) => vqp.fail_qp(q, f.device, status),
                        None => vqp.fail_device(f.device, status),
                    };
                    // The first event about one of its QPs is reported (even when an
                    // error completion of the same failure got there first); later
                    // ones change nothing.
                    if hit && !lanes[k].path_failed {
                        lanes[k].path_failed = true;
                        stats.path_failures += 1;
                        lanes[k].emit(Event::PathFailed(f.event), &mut stats);
                    }
                }
            }
        }
        for (k, lane) in lanes.iter_mut().enumerate() {
            busy |= lane.flush();
            if !lane.carry.is_empty() {
                continue;
            }
            let mut taken = 0;
            while taken < config.batch {
                let ((request, vouched), retry) = match lane.stalled.take() {
                    Some(r) => (r, true),
                    None => match lane.requests.pop() {
                        Ok(item) => match lane.assembly.take_vouched(item) {
                            Some(r) => (r, false),
                            // Keys or operands for the request behind them.
                            None => continue,
                        },
                        Err(_) => break,
                    },
                };
                taken += 1;
                busy = true;
                let result = match request {
                    Request::Send(wr) if vouched => {
                        // SAFETY: submitted through `Handle::send_unchecked`, whose
                        // caller keeps an inline payload readable until it is posted.
                        #[allow(unsafe_code)]
                        let r = unsafe { refs[k].post_send_unchecked(&wr) };
                        r.map_err(Refusal::Send)
                    }
                    Request::Send(wr) => refs[k].post_send(&wr).map_err(Refusal::Send),
                    Request::Recv(wr) => refs[k].post_recv(&wr).map_err(Refusal::Recv),
                };
                match result {
                    Ok(()) => stats.submitted += 1,
                    Err(e) if is_backpressure(&e) => {
                        lane.stalled = Some((request, vouched));
                        if !retry {
                            stats.backpressure += 1;
                        }
                        break;
                    }
                    Err(error) => {
                        stats.rejected += 1;
                        let wr_id = request.wr_id();
                        lane.emit(Event::Rejected { wr_id, error }, &mut stats);
                        if !lane.carry.is_empty() {
                            break;
                        }
                    }
                }
            }
        }
        if lanes.iter().all(|l| l.carry.is_empty()) {
            busy |= poll_once(&mut vcq, &mut refs, &mut lanes, &mut out, &mut stats) > 0;
        }

        if phase != RUN {
            let quiet = lanes
                .iter()
                .all(|l| l.stalled.is_none() && l.carry.is_empty() && l.requests.is_empty())
                && refs
                    .iter()
                    .all(|v| v.sends_in_flight() == 0 && v.recvs_in_flight() == 0);
            if quiet {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if phase == DRAIN {
                    // The drain ran out of time: abort, with the same time again.
                    shared.command.store(ABORT, Ordering::Relaxed);
                    deadline = Instant::now().checked_add(timeout);
                    phase = ABORT;
                    stats.aborted = true;
                    for vqp in refs.iter_mut() {
                        vqp.shut_down();
                    }
                    continue;
                }
                stats.timed_out = true;
                break;
            }
        }

        if busy {
            idle_rounds = 0;
            continue;
        }
        idle_rounds = idle_rounds.saturating_add(1);
        match config.idle {
            Idle::Spin => std::hint::spin_loop(),
            Idle::SpinThenYield { spins } => {
                if idle_rounds > spins {
                    thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Idle::Block { spins, timeout } => {
                if idle_rounds <= spins || phase != RUN {
                    std::hint::spin_loop();
                    continue;
                }
                shared.sleeping.store(true, Ordering::Relaxed);
                // Pairs with the fence in `Shared::wake`: after it, either a submitter
                // sees `sleeping` and unparks us, or we see its request below.
                fence(Ordering::SeqCst);
                let pending = lanes.iter().any(|l| !l.requests.is_empty())
                    || shared.command.load(Ordering::Relaxed) != phase;
                if !pending {
                    sleep(
                        blocker.as_deref_mut(),
                        timeout,
                        &mut vcq,
                        &mut refs,
                        &mut lanes,
                        &mut out,
                        &mut stats,
                    );
                }
                shared.sleeping.store(false, Ordering::Relaxed);
                idle_rounds = 0;
            }
        }
    }

    // Whatever could not be delivered by the deadline goes back in the statistics, so
    // that nothing submitted is lost without a trace.
    for (k, lane) in lanes.iter_mut().enumerate() {
        lane.flush();
        let failed = refs[k].failure().unwrap_or(WcStatus::WR_FLUSH_ERR);
        let leftover = lane
            .stalled
            .take()
            .into_iter()
            .chain(
                lane.requests
                    .pop_iter()
                    .filter_map(|item| lane.assembly.take_vouched(item))
                    .collect::<Vec<_>>(),
            )
            .map(|(r, _)| Event::Rejected {
                wr_id: r.wr_id(),
                error: match r {
                    Request::Send(_) => Refusal::Send(PostSendError::Failed(failed)),
                    Request::Recv(_) => Refusal::Recv(PostRecvError::Failed(failed)),
                },
            });
        let waiting: Vec<Event> = lane.carry.drain(..).chain(leftover).collect();
        stats
            .undelivered
            .extend(waiting.into_iter().map(|e| (k, e)));
    }
    stats.outstanding = refs
        .iter()
        .map(|v| v.sends_in_flight() + v.recvs_in_flight())
        .sum();
    stats
}

/// Sleeps until a completion or `timeout`: arms the blocker and polls once more
/// (a completion before the arming raises no event), or parks when there is no
/// blocker or it cannot be armed.
#[allow(clippy::too_many_arguments)]
fn sleep<
    Q,
    C,
    const R: usize,
    const N: usize,
    const D: usize,
    const S: usize,
    const W: usize,
    const DEVS: usize,
    const B: usize,
>(
    blocker: Option<&mut (dyn Blocker + 'static)>,
    timeout: Duration,
    vcq: &mut VirtualCq<C, DEVS, B>,
    vqps: &mut [&mut VirtualQp<Q, N, D, S, W>],
    lanes: &mut [Lane<R>],
    out: &mut [Wc; POLL_BATCH],
    stats: &mut Stats,
) where
    Q: PhysQp,
    C: PhysCq,
{
    if let Some(b) = blocker {
        if b.arm().is_ok() {
            if poll_once(vcq, vqps, lanes, out, stats) == 0 {
                stats.sleeps += 1;
                b.block(timeout);
            }
            return;
        }
    }
    stats.sleeps += 1;
    thread::park_timeout(timeout);
}
