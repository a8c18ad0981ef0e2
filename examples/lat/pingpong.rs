//! One side's ping-pong loop, the same whether its completions come through a poll
//! thread's handle or from the virtual CQ polled on the spot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use hdrhistogram::Histogram;
use vqp_core::{RecvWr, SendWr, Wc, WcOpcode};
use vqp_host::{Connected, Event, Handle, Request};

use crate::args::Wait;
use crate::{Side, RECV_AHEAD, RING, STALL};

/// What one side's loop needs to know.
#[derive(Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) wr: SendWr,
    pub(crate) total: u64,
    pub(crate) warmup: u64,
    pub(crate) wait: Wait,
}

/// Stops the other side's loop early when one side fails.
pub(crate) type Stop = Arc<AtomicBool>;

/// Completions seen so far by one side.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) sends: u64,
    pub(crate) recvs: u64,
}

impl Seen {
    /// Counts a completion; a failed one is an error.
    fn count(&mut self, wc: &Wc) -> Result<(), String> {
        if !wc.status.is_ok() {
            return Err(format!("request {} failed: {}", wc.wr_id, wc.status));
        }
        if wc.opcode == WcOpcode::RECV_RDMA_WITH_IMM {
            self.recvs += 1;
        } else {
            self.sends += 1;
        }
        Ok(())
    }
}

/// Where a side's completions come from: a poll thread's handle, or the virtual CQ
/// polled on the spot.
pub(crate) trait Port {
    fn post_send(&mut self, wr: SendWr) -> Result<(), String>;
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), String>;
    /// Takes whatever completions are ready into `seen`; returns how many.
    fn progress(&mut self, seen: &mut Seen) -> Result<usize, String>;
}

impl Port for Handle<RING> {
    fn post_send(&mut self, wr: SendWr) -> Result<(), String> {
        submit(self, Request::Send(wr))
    }
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), String> {
        submit(self, Request::Recv(wr))
    }
    fn progress(&mut self, seen: &mut Seen) -> Result<usize, String> {
        let mut n = 0;
        while let Some(event) = self.poll() {
            match event {
                Event::Completed(wc) => seen.count(&wc)?,
                Event::Rejected { wr_id, error } => {
                    return Err(format!("request {wr_id}: {error}"))
                }
                Event::PathFailed(e) => return Err(format!("a path failed: {e}")),
            }
            n += 1;
        }
        Ok(n)
    }
}

/// Pushes `request`, waiting while the ring is full (the poll thread empties it).
pub(crate) fn submit(h: &mut Handle<RING>, mut request: Request) -> Result<(), String> {
    let since = Instant::now();
    loop {
        match h.submit(request) {
            Ok(()) => return Ok(()),
            Err(vqp_core::ring::PushError::Full(r)) => request = r,
        }
        if since.elapsed() > STALL {
            return Err("the poll thread took no request for 10 s".into());
        }
        thread::yield_now();
    }
}

impl Port for Box<Side> {
    fn post_send(&mut self, wr: SendWr) -> Result<(), String> {
        self.vqp
            .post_send(&wr)
            .map_err(|e| format!("post_send: {e}"))
    }
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), String> {
        self.vqp
            .post_recv(&wr)
            .map_err(|e| format!("post_recv: {e}"))
    }
    fn progress(&mut self, seen: &mut Seen) -> Result<usize, String> {
        let mut out = [Wc::EMPTY; 8];
        let Connected { vqp, vcq, .. } = &mut **self;
        let n = vcq
            .poll(&mut [vqp], &mut out)
            .map_err(|e| format!("poll failed: errno {}", e.errno))?;
        for wc in &out[..n] {
            seen.count(wc)?;
        }
        Ok(n)
    }
}

/// Polls `port` until `done(seen)` holds, pausing as `wait` says; an error after
/// [`STALL`] without it, or when the other side stopped.
pub(crate) fn wait_for(
    port: &mut impl Port,
    seen: &mut Seen,
    wait: Wait,
    stop: &AtomicBool,
    what: &str,
    done: impl Fn(&Seen) -> bool,
) -> Result<(), String> {
    let since = Instant::now();
    let mut polls = 0u32;
    while !done(seen) {
        if port.progress(seen)? == 0 {
            polls = polls.wrapping_add(1);
            // Reading the clock and the stop flag every poll would cost more than
            // the poll itself.
            if polls % 1024 == 0 {
                if stop.load(Ordering::Relaxed) {
                    return Err("stopped: the other side failed".into());
                }
                if since.elapsed() > STALL {
                    return Err(format!("no {what} for 10 s"));
                }
            }
            match wait {
                Wait::Spin => std::hint::spin_loop(),
                Wait::Yield => thread::yield_now(),
            }
        }
    }
    Ok(())
}

/// Side A: `total` pings, each timed from posting the write to the completion of the
/// notification receive of the pong; round trips after the first `warmup` go into the
/// histogram, in nanoseconds.
pub(crate) fn client(
    port: &mut impl Port,
    plan: Plan,
    stop: &AtomicBool,
) -> Result<Histogram<u64>, String> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    let mut seen = Seen::default();
    for i in 0..plan.total {
        // The pong's receive is posted before the clock starts, as a real client
        // would keep receives posted ahead.
        port.post_recv(RecvWr::notification(i))?;
        let t0 = Instant::now();
        port.post_send(SendWr {
            wr_id: i,
            ..plan.wr
        })?;
        wait_for(port, &mut seen, plan.wait, stop, "pong", |s| s.recvs > i)?;
        let rtt = t0.elapsed();
        if i >= plan.warmup {
            let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
            hist.record(ns.max(1))
                .map_err(|e| format!("histogram: {e:?}"))?;
        }
    }
    wait_for(port, &mut seen, plan.wait, stop, "send completion", |s| {
        s.sends == plan.total
    })?;
    Ok(hist)
}

/// Side B: answers each ping's notification with a write back, keeping
/// [`RECV_AHEAD`] notification receives posted.
pub(crate) fn server(port: &mut impl Port, plan: Plan, stop: &AtomicBool) -> Result<(), String> {
    let mut seen = Seen::default();
    let ahead = RECV_AHEAD.min(plan.total);
    for i in 0..ahead {
        port.post_recv(RecvWr::notification(i))?;
    }
    for i in 0..plan.total {
        wait_for(port, &mut seen, plan.wait, stop, "ping", |s| s.recvs > i)?;
        port.post_send(SendWr {
            wr_id: i,
            ..plan.wr
        })?;
        if i + ahead < plan.total {
            port.post_recv(RecvWr::notification(i + ahead))?;
        }
    }
    wait_for(port, &mut seen, plan.wait, stop, "send completion", |s| {
        s.sends == plan.total
    })
}
