//! lat: ping-pong latency over a virtual QP, in the spirit of perftest's `ib_write_lat`.
//!
//! Two endpoints run in this process over the software provider (`soft0` ↔ `soft1`).
//! Side A (the client) does an RDMA_WRITE_WITH_IMM of `--size` bytes to side B (the
//! server); B, on the notification receive's completion, writes the same size back;
//! A measures the round trip. Like `ib_write_lat`, the figures are **half the round
//! trip**.
//!
//! By default each side's virtual QP and virtual CQ are owned by a [`PollThread`]
//! pinned to a core (`--client-core`, `--server-core`), and each side's application
//! thread, on the same core or on its own (`--client-app-core`, `--server-app-core`),
//! talks to it through a [`Handle`] (a request ring in, an event ring out). Two threads
//! that spin (`--idle spin`, or `--direct`) are never placed on one core: refused.
//! With `--direct` the application threads own the virtual QP and poll the virtual CQ
//! themselves, pinned to the same cores: the difference is what the rings and the
//! hand-off between threads cost.
//!
//! The provider is `libvqp_softverbs.so` opened with the host's `dlopen` loader when
//! cargo built it next to this example, else the provider linked into this binary
//! (`vqp_softverbs::verbs_table()`); the output says which. Softverbs executes work
//! on the threads that poll its CQs, so the figures are the library's and the
//! provider's software cost, not a fabric's.
//!
//! ```text
//! cargo run --release --example lat -- --size 8 --iters 10000
//! cargo run --release --example lat -- --size 1048576 --qps 4 --mode spray --direct
//! ```

/// The byte-count parser `write_bw` uses, so that both take `4K`, `1M`, `1G`.
#[path = "write_bw/size.rs"]
mod size;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, Wc, WcOpcode};
use vqp_host::{
    AccessFlags, Connected, Context, Endpoint, Event, Handle, Idle, MemoryRegion, PollThread,
    PollerConfig, Request, Settings, Stack, Verbs, VerbsCq, VerbsQp,
};

/// Data QPs at most (the virtual QP type's `N`).
const MAX_QPS: usize = 16;
/// Send WQEs per data QP (`D`) and receives kept posted per data QP.
const DEPTH: u32 = 16;
type Ep = Endpoint<MAX_QPS, 16, 256, 512, 32>;
type Side = Connected<MAX_QPS, 16, 256, 512, 32>;
type SideStack = Stack<VerbsQp, VerbsCq, MAX_QPS, 16, 256, 512, 1, 32>;
/// Capacity of each handle's request and event ring.
const RING: usize = 16;
/// Largest message: two buffers of this size are registered per side.
const MAX_SIZE: u64 = 256 << 20;
/// A wait for one completion longer than this is reported as a stall.
const STALL: Duration = Duration::from_secs(10);
/// Notification receives the server keeps posted ahead of the pings.
const RECV_AHEAD: u64 = 8;

#[derive(Clone, Debug)]
struct Args {
    size: u64,
    iters: u64,
    warmup: u64,
    qps: usize,
    mode: Mode,
    max_frag: u32,
    client_core: usize,
    server_core: usize,
    /// The application threads' cores, when not their poll threads' (`--*-app-core`).
    client_app_core: Option<usize>,
    server_app_core: Option<usize>,
    idle: Wait,
    direct: bool,
    json: bool,
}

/// How a thread waits for its next completion or event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Poll without pause.
    Spin,
    /// Yield the core between polls (lets two threads share one core).
    Yield,
}

const USAGE: &str =
    "usage: lat [--size BYTES] [--iters N] [--warmup N] [--qps N] [--mode spray|dqplb]
           [--max-frag BYTES] [--client-core ID] [--server-core ID] [--idle spin|yield]
           [--client-app-core ID] [--server-app-core ID] [--direct] [--json]
  --size takes a K, M or G suffix (binary), as write_bw's does. --client-core and
  --server-core place each side's poll thread (with --direct, its application thread);
  --client-app-core and --server-app-core give the application threads cores of their
  own (by default they share their poll thread's, which --idle yield allows and --idle
  spin refuses: two spinning threads on one core never finish).";

/// The arguments, or `None` when help was asked for.
fn parse() -> Result<Option<Args>, String> {
    let mut a = Args {
        size: 8,
        iters: 10_000,
        warmup: 1_000,
        qps: 1,
        mode: Mode::Dqplb,
        max_frag: 64 << 10,
        client_core: 0,
        server_core: 1,
        client_app_core: None,
        server_app_core: None,
        idle: Wait::Yield,
        direct: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--json" => {
                a.json = true;
                continue;
            }
            "--direct" => {
                a.direct = true;
                continue;
            }
            "--help" | "-h" => return Ok(None),
            "--size" | "--iters" | "--warmup" | "--qps" | "--max-frag" | "--client-core"
            | "--server-core" | "--mode" | "--idle" | "--client-app-core" | "--server-app-core" => {
            }
            _ => return Err(format!("unknown flag {flag} (see --help)")),
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
        };
        match flag.as_str() {
            "--size" => a.size = size::bytes(&flag, &value)?,
            "--iters" => a.iters = num(&value)?,
            "--warmup" => a.warmup = num(&value)?,
            "--qps" => {
                a.qps = usize::try_from(num(&value)?).unwrap_or(usize::MAX);
            }
            "--max-frag" => {
                a.max_frag = u32::try_from(num(&value)?).unwrap_or(0);
            }
            "--client-core" => {
                a.client_core = usize::try_from(num(&value)?).unwrap_or(usize::MAX);
            }
            "--server-core" => {
                a.server_core = usize::try_from(num(&value)?).unwrap_or(usize::MAX);
            }
            "--client-app-core" => {
                a.client_app_core = Some(usize::try_from(num(&value)?).unwrap_or(usize::MAX));
            }
            "--server-app-core" => {
                a.server_app_core = Some(usize::try_from(num(&value)?).unwrap_or(usize::MAX));
            }
            "--mode" => {
                a.mode = match value.as_str() {
                    "spray" => Mode::Spray,
                    "dqplb" => Mode::Dqplb,
                    v => return Err(format!("--mode: '{v}' is not spray or dqplb")),
                }
            }
            "--idle" => {
                a.idle = match value.as_str() {
                    "spin" => Wait::Spin,
                    "yield" => Wait::Yield,
                    v => return Err(format!("--idle: '{v}' is not spin or yield")),
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.size == 0 || a.size > MAX_SIZE {
        return Err(format!("--size must be between 1 and {MAX_SIZE} bytes"));
    }
    if a.iters == 0 || a.iters > 1 << 40 {
        return Err("--iters must be between 1 and 2^40".into());
    }
    if a.warmup > 1 << 40 {
        return Err("--warmup must be at most 2^40".into());
    }
    if a.qps == 0 || a.qps > MAX_QPS {
        return Err(format!("--qps must be between 1 and {MAX_QPS}"));
    }
    if SplitPolicy::new(a.max_frag).validate().is_err() {
        return Err(format!(
            "--max-frag must be between 1 and {}",
            vqp_core::reorder::MAX_FRAGMENT
        ));
    }
    let cores: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    for (flag, core) in [
        ("--client-core", Some(a.client_core)),
        ("--server-core", Some(a.server_core)),
        ("--client-app-core", a.client_app_core),
        ("--server-app-core", a.server_app_core),
    ] {
        match core {
            Some(core) if !cores.contains(&core) => {
                return Err(format!(
                    "{flag}: core {core} is not available to this process (available: {cores:?})"
                ));
            }
            _ => {}
        }
    }
    check_placement(&a)?;
    Ok(Some(a))
}

/// Refuses a placement that cannot run: an application core with `--direct` (there
/// is no poll thread to sit beside), or two spinning threads on one core (neither
/// yields, so the one that waits for the other never gets the core).
fn check_placement(a: &Args) -> Result<(), String> {
    if a.direct && (a.client_app_core.is_some() || a.server_app_core.is_some()) {
        return Err(
            "--client-app-core and --server-app-core place application threads beside poll threads; --direct has none (its application threads are on --client-core and --server-core)".into(),
        );
    }
    let spin = a.direct || a.idle == Wait::Spin;
    if !spin {
        return Ok(());
    }
    let mut threads = vec![
        (
            a.client_core,
            if a.direct {
                "the client's application thread"
            } else {
                "the client's poll thread"
            },
        ),
        (
            a.server_core,
            if a.direct {
                "the server's application thread"
            } else {
                "the server's poll thread"
            },
        ),
    ];
    if !a.direct {
        threads.push((
            a.client_app_core.unwrap_or(a.client_core),
            "the client's application thread",
        ));
        threads.push((
            a.server_app_core.unwrap_or(a.server_core),
            "the server's application thread",
        ));
    }
    for (i, &(core, one)) in threads.iter().enumerate() {
        if let Some(&(_, other)) = threads[i + 1..].iter().find(|t| t.0 == core) {
            return Err(format!(
                "{one} and {other} would both spin on core {core}, and two spinning threads on one core never finish: give each thread a core of its own (--client-core, --server-core, --client-app-core, --server-app-core) or use --idle yield"
            ));
        }
    }
    Ok(())
}

/// The verbs to run on, and a description of where they came from.
fn load_verbs() -> (Verbs, String) {
    if let Some(path) = vqp_softverbs::find_cdylib() {
        // SAFETY: the file is vqp-softverbs' cdylib, built from this workspace, which
        // implements the libibverbs ABI the loader resolves.
        match unsafe { Verbs::load_from(&path) } {
            Ok(v) => return (v, format!("softverbs, dlopen {}", path.display())),
            Err(e) => eprintln!("lat: {e}; using the in-process provider"),
        }
    }
    // SAFETY: the table comes from vqp-softverbs linked into this binary; its functions
    // have libibverbs' prototypes and live as long as the process.
    let v = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    (v, "softverbs, in-process table".into())
}

/// One side's registered memory: `[0, size)` is what it sends, `[size, 2·size)` what
/// the peer writes.
struct Buffers {
    mr: MemoryRegion,
    size: u64,
}

impl Buffers {
    fn src(&self) -> u64 {
        self.mr.addr()
    }
    fn dst(&self) -> u64 {
        self.mr.addr() + self.size
    }
}

/// Fills `mr`'s first `len` bytes with a pattern of `seed`.
fn fill(mr: &mut MemoryRegion, len: usize, seed: u8) -> Result<(), String> {
    // SAFETY: called before any work request is posted: nothing else reads or writes
    // the region.
    let bytes = unsafe { mr.as_mut_slice() }.ok_or("the buffer is not mapped")?;
    for (i, b) in bytes[..len].iter_mut().enumerate() {
        *b = (i % 251) as u8 ^ seed;
    }
    Ok(())
}

/// Whether `from`'s source half arrived whole in `to`'s destination half.
fn arrived(from: &Buffers, to: &Buffers) -> Result<bool, String> {
    let n = from.size as usize;
    // SAFETY: called after both sides finished: no work request is outstanding, and
    // the peer no longer writes.
    let (a, b) = unsafe { (from.mr.as_slice(), to.mr.as_slice()) };
    let (a, b) = (a.ok_or("not mapped")?, b.ok_or("not mapped")?);
    Ok(a[..n] == b[n..2 * n])
}

/// One side on `device`: its endpoint (not yet connected) and registered buffers.
fn endpoint(
    verbs: &Verbs,
    a: &Args,
    device: &str,
    qp_num: u32,
    seed: u8,
) -> Result<(Ep, Buffers), String> {
    let e = |e: vqp_host::Error| format!("{device}: {e}");
    let ctx = Context::open(verbs, Some(device)).map_err(e)?;
    let pd = ctx.alloc_pd().map_err(e)?;
    let cfg = Config {
        split: SplitPolicy::new(a.max_frag),
        max_outstanding: DEPTH,
        recv_depth: DEPTH,
        qp_num,
        ..Config::new(a.mode)
    };
    let ep = Ep::create(&pd, &Settings::new(cfg, a.qps), None).map_err(e)?;
    let mut mr = pd
        .register_buffer(2 * a.size as usize, AccessFlags::ALL_REMOTE)
        .map_err(e)?;
    fill(&mut mr, a.size as usize, seed)?;
    Ok((ep, Buffers { mr, size: a.size }))
}

/// Opens soft0 and soft1, builds a virtual QP on each with its buffers, and connects
/// them (the cards are swapped in process).
fn connect(verbs: &Verbs, a: &Args) -> Result<[(Side, Buffers); 2], String> {
    let (ep_a, buf_a) = endpoint(verbs, a, "soft0", 1, 0x5a)?;
    let (ep_b, buf_b) = endpoint(verbs, a, "soft1", 2, 0xa5)?;
    let (card_a, card_b) = (ep_a.card(), ep_b.card());
    let side_a = ep_a.connect(&card_b).map_err(|e| e.to_string())?;
    let side_b = ep_b.connect(&card_a).map_err(|e| e.to_string())?;
    Ok([(side_a, buf_a), (side_b, buf_b)])
}

/// The write each side sends: its source half to the peer's destination half.
fn write(own: &Buffers, peer: &Buffers) -> SendWr {
    let keys = Keys::single(own.mr.lkey(), peer.mr.rkey());
    SendWr::new(
        0,
        Opcode::RDMA_WRITE_WITH_IMM,
        own.src(),
        own.size,
        peer.dst(),
        keys,
    )
}

/// What one side's loop needs to know.
#[derive(Clone, Copy)]
struct Plan {
    wr: SendWr,
    total: u64,
    warmup: u64,
    wait: Wait,
}

/// Stops the other side's loop early when one side fails.
type Stop = Arc<AtomicBool>;

/// Completions seen so far by one side.
#[derive(Default)]
struct Seen {
    sends: u64,
    recvs: u64,
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
trait Port {
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
fn submit(h: &mut Handle<RING>, mut request: Request) -> Result<(), String> {
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
fn wait_for(
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
fn client(port: &mut impl Port, plan: Plan, stop: &AtomicBool) -> Result<Histogram<u64>, String> {
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
fn server(port: &mut impl Port, plan: Plan, stop: &AtomicBool) -> Result<(), String> {
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

fn pin(core: usize) -> Result<(), String> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(format!("cannot pin to core {core}"))
    }
}

/// Runs `body` on a thread pinned to `core`; a failure raises `stop` for the other
/// side.
fn on_core<T: Send + 'static>(
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

fn join<T>(h: thread::JoinHandle<Result<T, String>>, who: &str) -> Result<T, String> {
    h.join()
        .map_err(|_| format!("the {who} thread panicked"))
        .and_then(|r| r.map_err(|e| format!("{who}: {e}")))
}

/// The ping-pong with poll threads: one per side, pinned, owning the side's virtual
/// QP; the application threads run on the same cores and use handles.
fn run_polled(a: &Args, plans: [Plan; 2], sides: [Side; 2]) -> Result<Histogram<u64>, String> {
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
fn both(
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
fn run_direct(a: &Args, plans: [Plan; 2], sides: [Side; 2]) -> Result<Histogram<u64>, String> {
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

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Spray => "spray",
        Mode::Dqplb => "dqplb",
    }
}

fn idle_name(wait: Wait) -> &'static str {
    match wait {
        Wait::Spin => "spin",
        Wait::Yield => "yield",
    }
}

fn run(a: &Args) -> Result<(), String> {
    let (verbs, provider) = load_verbs();
    let [(side_a, buf_a), (side_b, buf_b)] = connect(&verbs, a)?;
    let total = a.warmup + a.iters;
    let plan = |own: &Buffers, peer: &Buffers| Plan {
        wr: write(own, peer),
        total,
        warmup: a.warmup,
        wait: if a.direct { Wait::Spin } else { a.idle },
    };
    let plans = [plan(&buf_a, &buf_b), plan(&buf_b, &buf_a)];
    let hist = if a.direct {
        run_direct(a, plans, [side_a, side_b])?
    } else {
        run_polled(a, plans, [side_a, side_b])?
    };
    let checked = arrived(&buf_a, &buf_b)? && arrived(&buf_b, &buf_a)?;
    if !checked {
        return Err("data check FAILED: a destination differs from its source".into());
    }

    // Half round trips, in microseconds.
    let us = |ns: u64| ns as f64 / 2000.0;
    let q = |p: f64| us(hist.value_at_quantile(p));
    let (min, p50, p99, p999, max) = (us(hist.min()), q(0.5), q(0.99), q(0.999), us(hist.max()));
    let avg = hist.mean() / 2000.0;
    let frags = if a.qps > 1 {
        a.size.div_ceil(u64::from(a.max_frag))
    } else {
        1
    };
    let path = if a.direct { "direct" } else { "poll threads" };
    let mode = mode_name(a.mode);
    if a.json {
        println!(
            "{{\"bytes\":{},\"iterations\":{},\"warmup\":{},\"t_min_us\":{min:.2},\"t_p50_us\":{p50:.2},\"t_p99_us\":{p99:.2},\"t_p999_us\":{p999:.2},\"t_max_us\":{max:.2},\"t_avg_us\":{avg:.2},\"qps\":{},\"mode\":\"{mode}\",\"max_frag\":{},\"fragments\":{frags},\"path\":\"{path}\",\"idle\":\"{}\",\"provider\":\"{}\",\"data_check\":\"passed\"}}",
            a.size,
            hist.len(),
            a.warmup,
            a.qps,
            a.max_frag,
            idle_name(if a.direct { Wait::Spin } else { a.idle }),
            provider.replace('\\', "\\\\").replace('"', "\\\"")
        );
        return Ok(());
    }
    let line = "-".repeat(112);
    println!("{line}");
    println!(" vqp lat: RDMA_WRITE_WITH_IMM ping-pong, {} data QP(s), {mode}, {frags} fragment(s) of at most {} B per message", a.qps, a.max_frag);
    println!(
        " path: {path} (client core {}, server core {}{})",
        a.client_core,
        a.server_core,
        if a.direct {
            String::new()
        } else {
            format!(
                ", application cores {} and {}, idle {}",
                a.client_app_core.unwrap_or(a.client_core),
                a.server_app_core.unwrap_or(a.server_core),
                idle_name(a.idle)
            )
        }
    );
    println!(" provider: {provider}");
    println!(" times are half the round trip, as ib_write_lat reports them");
    println!("{line}");
    println!(
        " {:<10} {:<12}{:>14}{:>14}{:>14}{:>15}{:>14}{:>14}",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_p50[usec]",
        "t_p99[usec]",
        "t_p99.9[usec]",
        "t_max[usec]",
        "t_avg[usec]"
    );
    println!(
        " {:<10} {:<12}{min:>14.2}{p50:>14.2}{p99:>14.2}{p999:>15.2}{max:>14.2}{avg:>14.2}",
        a.size,
        hist.len()
    );
    println!("{line}");
    println!(
        " data check: the last message of each direction ({} bytes) verified: passed",
        a.size
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("lat: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lat: {e}");
            ExitCode::from(1)
        }
    }
}
