//! The hand-off through a poll thread: an application thread submits a request through
//! a [`Handle`], the poll thread posts it on a virtual QP over the no-op provider (which
//! completes at once) and returns the completion through the event ring; the round trip
//! is timed per request, one in flight and eight. Beside it, in the same run, the same
//! work handed over the way it would otherwise be written — a `std::sync::mpsc` pair
//! each way to a thread owning the same virtual QP — and the virtual QP driven on the
//! bench thread itself (no hand-off); then the cost of choosing to block: the round
//! trip when the poll thread (`Idle::Block`) is asleep and must be woken. With one in
//! flight, the floor of any two-thread hand-off on the machine too: a counter written
//! by one thread and echoed by the other, one cache line each way. The
//! application thread (this one) and the other thread are pinned to cores of their own
//! when the machine has two. The vqp loop first proves that it allocates nothing, on
//! either thread.

mod support;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vqp_core::{Config, Keys, Mode, Opcode, SendWr, VirtualCq, VirtualQp, Wc};
use vqp_host::{Event, Handle, Idle, PollThread, PollerConfig, Stack};
use vqp_sim::noop::{NoopConfig, NoopCq, NoopOrder, NoopQp, RecvMode};

use support::alloc::{per_run, Counting};

#[global_allocator]
static ALLOC: Counting = Counting;

type Vqp = VirtualQp<NoopQp, 1, 64, 64, 128>;
type Vcq = VirtualCq<NoopCq, 1, 32>;

/// Requests in flight in the second case.
const DEPTH: usize = 8;

/// One data QP over a no-op CQ that completes every WQE at once, on this thread.
fn engine() -> (Vqp, Vcq) {
    let cq = NoopCq::new(NoopConfig {
        capacity: 1024,
        recv_capacity: 64,
        order: NoopOrder::Fifo,
        recv_mode: RecvMode::Complete,
    });
    let qp = cq.create_qp(100);
    let cfg = Config {
        max_outstanding: 64,
        recv_depth: 64,
        ..Config::new(Mode::Dqplb)
    };
    let mut vqp = Vqp::new(cfg, [(qp, 0)], None).expect("valid set-up");
    let mut vcq = Vcq::new();
    vcq.add_cq(cq, 0, 1024).expect("one CQ");
    vcq.attach(&mut vqp).expect("CQ large enough");
    (vqp, vcq)
}

fn write(id: u64) -> SendWr {
    SendWr::new(
        id,
        Opcode::RDMA_WRITE,
        0x10_0000,
        64,
        0x20_0000,
        Keys::single(1, 2),
    )
}

/// The cores of the two threads, this one and the other, when there are two (each
/// thread on the other core pins itself there).
fn cores() -> (Option<usize>, Option<usize>) {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    if ids.len() >= 2 {
        (Some(ids[0].id), Some(ids[1].id))
    } else {
        (None, None)
    }
}

fn pin(core: Option<usize>) {
    if let Some(id) = core {
        core_affinity::set_for_current(core_affinity::CoreId { id });
    }
}

/// Submit `n` requests through `h` and wait for their `n` events.
#[inline]
fn round_trip(h: &mut Handle<64>, n: usize) {
    for i in 0..n {
        while h.send(write(i as u64)).is_err() {
            std::hint::spin_loop();
        }
    }
    let mut left = n;
    while left > 0 {
        match h.poll() {
            Some(e @ Event::Completed(_)) => {
                black_box(e);
                left -= 1;
            }
            Some(other) => panic!("unexpected event {other:?}"),
            None => std::hint::spin_loop(),
        }
    }
}

/// The `mpsc` peer: requests one way, completions the other, to a thread that owns
/// the same engine and spins on both.
struct ChannelPeer {
    to: mpsc::SyncSender<Option<SendWr>>,
    from: mpsc::Receiver<Wc>,
    join: Option<thread::JoinHandle<()>>,
}

impl ChannelPeer {
    fn spawn(core: Option<usize>) -> Self {
        let (to, rx) = mpsc::sync_channel::<Option<SendWr>>(64);
        let (tx, from) = mpsc::sync_channel::<Wc>(64);
        let join = thread::spawn(move || {
            pin(core);
            let (mut vqp, mut vcq) = engine();
            let mut out = [Wc::EMPTY; 32];
            loop {
                match rx.try_recv() {
                    Ok(Some(wr)) => vqp.post_send(&wr).expect("accepted"),
                    Ok(None) | Err(mpsc::TryRecvError::Disconnected) => return,
                    Err(mpsc::TryRecvError::Empty) => {}
                }
                let n = vcq.poll(&mut [&mut vqp], &mut out).expect("poll");
                for wc in &out[..n] {
                    tx.send(*wc).expect("the bench waits");
                }
            }
        });
        ChannelPeer {
            to,
            from,
            join: Some(join),
        }
    }

    #[inline]
    fn round_trip(&mut self, n: usize) {
        for i in 0..n {
            self.to.send(Some(write(i as u64))).expect("peer runs");
        }
        for _ in 0..n {
            loop {
                match self.from.try_recv() {
                    Ok(wc) => {
                        black_box(wc);
                        break;
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
        }
    }
}

impl Drop for ChannelPeer {
    fn drop(&mut self) {
        let _ = self.to.send(None);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A cache line written by one thread and read by the other.
#[repr(align(128))]
struct Line(AtomicU64);

/// The floor of any hand-off between two threads on this machine: one cache line
/// each way, a counter written by one thread and echoed by the other (a thread pinned
/// to the other core), nothing else.
struct PingPong {
    lines: Arc<(Line, Line)>,
    next: u64,
    join: Option<thread::JoinHandle<()>>,
}

impl PingPong {
    fn spawn(core: Option<usize>) -> Self {
        let lines = Arc::new((Line(AtomicU64::new(0)), Line(AtomicU64::new(0))));
        let theirs = Arc::clone(&lines);
        let join = thread::spawn(move || {
            pin(core);
            let mut seen = 0;
            loop {
                let v = theirs.0 .0.load(Ordering::Acquire);
                if v == u64::MAX {
                    return;
                }
                if v != seen {
                    seen = v;
                    theirs.1 .0.store(v, Ordering::Release);
                }
                std::hint::spin_loop();
            }
        });
        PingPong {
            lines,
            next: 0,
            join: Some(join),
        }
    }

    #[inline]
    fn round_trip(&mut self) {
        self.next += 1;
        self.lines.0 .0.store(self.next, Ordering::Release);
        while self.lines.1 .0.load(Ordering::Acquire) != self.next {
            std::hint::spin_loop();
        }
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.lines.0 .0.store(u64::MAX, Ordering::Release);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Lets this thread (pinned to `mine`) run on `other` too for as long as `f` runs: a
/// thread inherits its parent's cores, and a poll thread is refused a core its parent
/// could not use.
fn widened<T>(mine: Option<usize>, other: Option<usize>, f: impl FnOnce() -> T) -> T {
    let (Some(a), Some(b)) = (mine, other) else {
        return f();
    };
    // SAFETY: `set` is a plain bit set that CPU_ZERO/CPU_SET initialise, and
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(a, &mut set);
        libc::CPU_SET(b, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    let out = f();
    pin(mine);
    out
}

/// A poll thread on `core` over one no-op engine, idling as `idle`, and its handle.
fn poll_thread(core: Option<usize>, idle: Idle) -> (PollThread<64>, Handle<64>) {
    let config = PollerConfig {
        core,
        idle,
        ..PollerConfig::default()
    };
    let factory = || -> vqp_host::Result<Stack<NoopQp, NoopCq, 1, 64, 64, 128, 1, 32>> {
        let (vqp, vcq) = engine();
        Ok(Stack::new(vcq, vec![vqp]))
    };
    let (poller, mut hs) = PollThread::<64>::spawn(config, 1, factory).expect("poll thread");
    (poller, hs.pop().expect("one handle"))
}

fn bench_handoff(c: &mut Criterion) {
    let (mine, other) = cores();
    // Each thread on the other core runs alone there: the spinning poll thread is
    // stopped before its peers are measured.
    pin(mine);
    for depth in [1, DEPTH] {
        let mut g = c.benchmark_group(format!("hand-off round trip, {depth} in flight"));
        g.throughput(Throughput::Elements(depth as u64));
        let (poller, mut h) = widened(mine, other, || poll_thread(other, Idle::Spin));
        // Warm up, then prove the round trip allocates nothing on either thread.
        for _ in 0..1000 {
            round_trip(&mut h, depth);
        }
        let allocs = per_run(1000, || round_trip(&mut h, depth));
        assert_eq!(
            allocs, 0.0,
            "the hand-off allocated {allocs} times a round trip"
        );
        g.bench_function("vqp poll thread (Handle, rings)", |b| {
            b.iter(|| round_trip(&mut h, depth))
        });
        drop(h);
        poller
            .drain(Duration::from_secs(5))
            .expect("poll thread stops");
        let mut peer = ChannelPeer::spawn(other);
        g.bench_function("std::sync::mpsc pair", |b| {
            b.iter(|| peer.round_trip(depth))
        });
        drop(peer);
        if depth == 1 {
            let mut floor = PingPong::spawn(other);
            g.bench_function("floor: one cache line each way, nothing else", |b| {
                b.iter(|| floor.round_trip())
            });
        }
        let (mut vqp, mut vcq) = engine();
        let mut out = [Wc::EMPTY; 32];
        g.bench_function("no hand-off (post and poll on this thread)", |b| {
            b.iter(|| {
                for i in 0..depth {
                    vqp.post_send(&write(i as u64)).expect("accepted");
                }
                let mut left = depth;
                while left > 0 {
                    left -= vcq.poll(&mut [&mut vqp], &mut out).expect("poll");
                }
                black_box(&out);
            })
        });
        g.finish();
    }

    // The cost of choosing to block: a poll thread that sleeps as soon as it has
    // nothing to do (`Idle::Block` with no spins) must be woken by every request.
    let sleepy = Idle::Block {
        spins: 0,
        timeout: Duration::from_millis(100),
    };
    let (poller, mut h) = widened(mine, other, || poll_thread(other, sleepy));
    let mut g = c.benchmark_group("hand-off round trip, 1 in flight, poll thread asleep");
    g.throughput(Throughput::Elements(1));
    g.bench_function(
        "vqp poll thread, Idle::Block (woken by the submission)",
        |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    // Untimed: long enough for the poll thread to fall asleep.
                    thread::sleep(Duration::from_micros(200));
                    let t = Instant::now();
                    round_trip(&mut h, 1);
                    spent += t.elapsed();
                }
                spent
            })
        },
    );
    g.finish();
    drop(h);
    poller
        .drain(Duration::from_secs(5))
        .expect("poll thread stops");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_handoff
}
criterion_main!(benches);
