//! Where the two sides run: pinned threads, with a poll thread per side or polling
//! their virtual CQs themselves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use hdrhistogram::Histogram;
use vqp_host::{Connected, Idle, PollThread, PollerConfig, Stack};

use crate::args::{Args, Wait};
use crate::pingpong::{client, server, Plan, Stop};
use crate::{Side, SideStack, RING};

pub(crate) fn pin(core: usize) -> Result<(), String> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(format!("cannot pin to core {core}"))
    }
}

/// Runs `body` on a thread pinned to `core`; a failure raises `stop` for the other
/// side.
pub(crate) fn on_core<T: Send + 'static>(
    name: &str,
    core: usize,
    stop: Stop,
    body: impl FnOnce(&AtomicBool) -> Result<T, String> + Send + 'static,
) -> Result<thread::JoinHandle<Result<T, String>>, String> {
    thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let result = pin(core).and_then(|()| body(&stop));
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            result
        })
        .map_err(|e| format!("cannot start a thread: {e}"))
}

pub(crate) fn join<T>(h: thread::JoinHandle<Result<T, String>>, who: &str) -> Result<T, String> {
    h.join()
        .map_err(|_| format!("the {who} thread panicked"))
        .and_then(|r| r.map_err(|e| format!("{who}: {e}")))
}

/// The ping-pong with poll threads: one per side, pinned, owning the side's virtual
/// QP; the application threads run on the same cores and use handles.
pub(crate) fn run_polled(
    a: &Args,
    plans: [Plan; 2],
    sides: [Side; 2],
) -> Result<Histogram<u64>, String> {
    let idle = match a.idle {
        Wait::Spin => Idle::Spin,
        Wait::Yield => Idle::SpinThenYield { spins: 0 },
    };
    let mut pollers = Vec::with_capacity(2);
    let mut handles = Vec::with_capacity(2);
    for (side, (core, name)) in sides
        .into_iter()
        .zip([(a.client_core, "lat-poll-a"), (a.server_core, "lat-poll-b")])
    {
        let side = Box::new(side);
        let config = PollerConfig {
            core: Some(core),
            idle,
            batch: 8,
            name: name.into(),
        };
        let factory = move || -> vqp_host::Result<SideStack> {
            let Connected { vqp, vcq, .. } = *side;
            Ok(Stack::new(vcq, vec![vqp]))
        };
        let (poller, mut h) =
            PollThread::<RING>::spawn(config, 1, factory).map_err(|e| e.to_string())?;
        pollers.push(poller);
        handles.push(h.pop().ok_or("the poll thread gave no handle")?);
    }
    let stop: Stop = Arc::new(AtomicBool::new(false));
    let (Some(mut hb), Some(mut ha)) = (handles.pop(), handles.pop()) else {
        return Err("two handles were not created".into());
    };
    let [plan_a, plan_b] = plans;
    let b = on_core(
        "lat-server",
        a.server_app_core.unwrap_or(a.server_core),
        Arc::clone(&stop),
        move |stop| server(&mut hb, plan_b, stop),
    )?;
    let c = on_core(
        "lat-client",
        a.client_app_core.unwrap_or(a.client_core),
        Arc::clone(&stop),
        move |stop| client(&mut ha, plan_a, stop),
    )?;
    let result = both(join(c, "client"), join(b, "server"));
    for poller in pollers {
        if result.is_err() {
            // Receives posted ahead will never complete: fail them and stop.
            let _ = poller.abort(Duration::from_secs(1));
            continue;
        }
        let stats = poller
            .drain(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        if stats.timed_out || stats.aborted {
            return Err(format!(
                "a poll thread did not drain within 5 s ({} requests outstanding)",
                stats.outstanding
            ));
        }
    }
    result
}

/// The client's histogram if both sides succeeded, else every error (the client's
/// first: the other side's is often only "stopped").
pub(crate) fn both(
    client: Result<Histogram<u64>, String>,
    server: Result<(), String>,
) -> Result<Histogram<u64>, String> {
    match (client, server) {
        (Ok(hist), Ok(())) => Ok(hist),
        (Err(e), Ok(())) | (Ok(_), Err(e)) => Err(e),
        (Err(c), Err(s)) => Err(format!("{c}; {s}")),
    }
}

/// The ping-pong with the application threads polling their virtual CQ themselves.
pub(crate) fn run_direct(
    a: &Args,
    plans: [Plan; 2],
    sides: [Side; 2],
) -> Result<Histogram<u64>, String> {
    let stop: Stop = Arc::new(AtomicBool::new(false));
    let [side_a, side_b] = sides;
    let (mut side_a, mut side_b) = (Box::new(side_a), Box::new(side_b));
    let [plan_a, plan_b] = plans;
    let b = on_core(
        "lat-server",
        a.server_core,
        Arc::clone(&stop),
        move |stop| server(&mut side_b, plan_b, stop),
    )?;
    let c = on_core(
        "lat-client",
        a.client_core,
        Arc::clone(&stop),
        move |stop| client(&mut side_a, plan_a, stop),
    )?;
    both(join(c, "client"), join(b, "server"))
}
