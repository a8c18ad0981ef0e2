//! The provider's cost across processes: an RC QP of this process and one of a second
//! process (this bench binary re-run as a peer, in a namespace directory of its own),
//! connected through the shared namespace.
//!
//! - `xproc_write_1MiB`: 1 MiB RDMA WRITEs (chains of 4, the last signaled, two chains
//!   in flight) in bytes per second, beside a one-core `memcpy` of 1 MiB in the same run;
//! - `xproc_write_64B`: 64-byte RDMA WRITEs in chains of 32 with the last signaled, two
//!   chains in flight (as perftest keeps its send queue full), in WQEs per second;
//! - `xproc_pingpong_8B`: an 8-byte inline SEND to the peer, which polls its CQ and
//!   answers with one; the time reported is half the round trip.
//!
//! Beside the first and the last, UCX over softverbs where `ucx_perftest` is installed
//! (`support/ucx.rs`): `ucx_put_bw`, UCP puts of 1 MiB, and `ucx_tag_lat`, UCP tagged
//! 8-byte messages' half round trip.
//!
//! With `VQP_XPROC_LAT_MEDIANS=RUNS` the 8-byte half round trip is also timed by its
//! median, softverbs' ping-pong and UCX's alternating for that many runs, in a table
//! printed at the end.
//!
//! Threads are left to the scheduler; with `VQP_XPROC_BENCH_PIN=1` each process pins
//! its main thread (and the provider threads it starts) to a core of its own.
//!
//! `cargo bench -p vqp-softverbs --bench xproc`

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use support::ucx::Ucx;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QpCap, QpInit, QueuePair, Verbs, Wc,
};

mod support {
    pub mod ucx;
}

/// Set in the peer's environment: its role (`sink` or `echo`).
const ENV_ROLE: &str = "VQP_XPROC_BENCH_ROLE";
/// Set (to anything) to pin each process's main thread to a core of its own.
const ENV_PIN: &str = "VQP_XPROC_BENCH_PIN";
/// A peer exits by itself after this long, whatever happens to its parent.
const PEER_LIFETIME: Duration = Duration::from_secs(900);
/// How long the parent waits for a peer's line.
const STEP: Duration = Duration::from_secs(30);
/// Set to a number of runs to time the 8-byte half round trip by its median as well,
/// softverbs' and UCX's alternating ([`latency_medians`]).
const ENV_MEDIANS: &str = "VQP_XPROC_LAT_MEDIANS";
/// Buffer of each side.
const BUF: usize = 1 << 20;

/// One side of a connection.
struct Side {
    _ctx: Context,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn verbs() -> Verbs {
    // SAFETY: the provider's functions implement the libibverbs ABI.
    unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) }
}

fn side(v: &Verbs, dev: &str) -> Side {
    let ctx = Context::open(v, Some(dev)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&QpInit::rc(&cq, cap)).unwrap();
    let mr = pd.register_buffer(BUF, AccessFlags::ALL_REMOTE).unwrap();
    Side {
        _ctx: ctx,
        cq,
        qp,
        mr,
    }
}

impl Side {
    /// `qpn lid addr rkey`.
    fn info(&self) -> String {
        let lid = self._ctx.query_port(1).unwrap().lid();
        format!(
            "{} {} {} {}",
            self.qp.qp_num(),
            lid,
            self.mr.addr(),
            self.mr.rkey()
        )
    }

    fn connect(&self, info: &str) -> (u64, u32) {
        let v: Vec<u64> = info.split(' ').map(|x| x.parse().unwrap()).collect();
        let path = Path::new(1, Address::lid(v[1] as u16), v[0] as u32, 0, 0);
        connect::connect(&self.qp, &path).unwrap();
        (v[2], v[3] as u32)
    }

    fn post_recvs(&self, n: usize, len: usize) {
        for i in 0..n {
            let mut sge = self.mr.sge(0, len).unwrap();
            let mut wr = ibv_recv_wr {
                wr_id: i as u64,
                sg_list: &mut sge,
                num_sge: 1,
                ..Default::default()
            };
            // SAFETY: a valid WR over a registered buffer that outlives it.
            unsafe { self.qp.post_recv(&mut wr) }.unwrap();
        }
    }

    /// Posts one 8-byte inline SEND, signaled.
    fn send8(&self) {
        let mut sge = self.mr.sge(0, 8).unwrap();
        let mut wr = ibv_send_wr {
            wr_id: 1,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_SEND,
            send_flags: IBV_SEND_SIGNALED | IBV_SEND_INLINE,
            ..Default::default()
        };
        // SAFETY: a valid WR over a registered buffer.
        unsafe { self.qp.post_send(&mut wr) }.unwrap();
    }
}

/// Pins the calling thread to core `i` (of those available) when [`ENV_PIN`] is set
/// and there is more than one core. Threads it creates later inherit the pinning.
fn pin(i: usize) {
    if std::env::var_os(ENV_PIN).is_none() {
        return;
    }
    if let Some(ids) = core_affinity::get_core_ids() {
        if ids.len() > 1 {
            core_affinity::set_for_current(ids[i % ids.len()]);
        }
    }
}

/// The peer process: its side on `soft1`, connected to the parent's, then its role
/// until its stdin closes (the parent exits or drops it) or its lifetime ends.
fn peer_main(role: &str) {
    pin(1);
    let v = verbs();
    let s = side(&v, "soft1");
    println!("@{}", s.info());
    let stop = Arc::new(AtomicBool::new(false));
    let mut lines = std::io::stdin().lock().lines();
    let Some(Ok(parent)) = lines.next() else {
        return;
    };
    s.connect(&parent);
    if role == "echo" {
        s.post_recvs(512, 8);
    }
    println!("@ready");
    let flag = Arc::clone(&stop);
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines() {
            if l.is_err() {
                break;
            }
        }
        flag.store(true, Ordering::Relaxed);
    });
    let deadline = Instant::now() + PEER_LIFETIME;
    let mut wcs = [Wc::default(); 64];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        if role != "echo" {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        // The deadline is checked every 4096 rounds only.
        for _ in 0..4096 {
            let polled = s.cq.poll(&mut wcs).unwrap();
            for wc in polled.iter() {
                assert!(wc.is_ok(), "peer completion failed: {:?}", wc.status());
                if wc.opcode() == vqp_host::WcOpcode::Recv {
                    s.post_recvs(1, 8);
                    s.send8();
                    n += 1;
                }
            }
        }
    }
    black_box(n);
}

/// A running peer, killed when dropped.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    /// Starts a peer in `role` and connects `s` to it; returns the peer and its
    /// buffer's (address, rkey).
    fn start(role: &str, s: &Side) -> (Peer, u64, u32) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(ENV_ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the peer process");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(l) = line.strip_prefix('@') {
                    if tx.send(l.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let mut p = Peer {
            child,
            stdin,
            lines,
        };
        let info = p.line();
        let (addr, rkey) = s.connect(&info);
        writeln!(p.stdin, "{}", s.info()).unwrap();
        p.stdin.flush().unwrap();
        assert_eq!(p.line(), "ready");
        (p, addr, rkey)
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(STEP)
            .expect("the peer process did not answer")
    }
}

/// A chain of `n` RDMA WRITEs of `len` bytes from offset 0 to `addr`, the last
/// signaled. The returned SGE vector must outlive the WRs.
fn write_chain(
    s: &Side,
    n: usize,
    len: usize,
    addr: u64,
    rkey: u32,
) -> (Vec<ibv_sge>, Vec<ibv_send_wr>) {
    let mut sges: Vec<ibv_sge> = (0..n).map(|_| s.mr.sge(0, len).unwrap()).collect();
    let mut wrs: Vec<ibv_send_wr> = (0..n)
        .map(|i| {
            let mut w = ibv_send_wr {
                wr_id: i as u64,
                sg_list: &mut sges[i],
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: if i + 1 == n { IBV_SEND_SIGNALED } else { 0 },
                ..Default::default()
            };
            w.wr.rdma = ibv_send_wr_rdma {
                remote_addr: addr,
                rkey,
            };
            w
        })
        .collect();
    let base = wrs.as_mut_ptr();
    for i in 0..n - 1 {
        // SAFETY: indices within the vector; the last `next` stays null.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    // SAFETY: index within the vector.
    unsafe { (*base.add(n - 1)).next = null_mut() };
    (sges, wrs)
}

/// Polls `cq` until one completion arrived; it must be a success.
fn reap(cq: &CompletionQueue, wcs: &mut [Wc]) -> usize {
    loop {
        let polled = cq.poll(wcs).unwrap();
        if !polled.is_empty() {
            for wc in polled.iter() {
                assert!(wc.is_ok(), "completion failed: {:?}", wc.status());
            }
            return polled.len();
        }
    }
}

/// Runs `iters` chains with up to `window` of them in flight.
fn chains(s: &Side, wrs: &mut [ibv_send_wr], iters: u64, window: u64, wcs: &mut [Wc]) {
    let (mut posted, mut done) = (0u64, 0u64);
    while done < iters {
        while posted < iters && posted - done < window {
            // SAFETY: a valid chain over registered buffers that outlive the completions.
            unsafe { s.qp.post_send(&mut wrs[0]) }.unwrap();
            posted += 1;
        }
        done += reap(&s.cq, wcs) as u64;
    }
}

fn bandwidth(c: &mut Criterion, v: &Verbs, ucx: Option<&Ucx>) {
    const LEN: usize = 1 << 20;
    const CHAIN: usize = 4;
    let s = side(v, "soft0");
    let (peer, addr, rkey) = Peer::start("sink", &s);
    let (_sges, mut wrs) = write_chain(&s, CHAIN, LEN, addr, rkey);
    let mut wcs = [Wc::default(); 16];
    let mut g = c.benchmark_group("xproc_write_1MiB");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("rdma_write", |b| {
        b.iter_custom(|iters| {
            let chains_needed = iters.div_ceil(CHAIN as u64);
            let t = Instant::now();
            chains(&s, &mut wrs, chains_needed, 2, &mut wcs);
            let wqes = chains_needed * CHAIN as u64;
            t.elapsed().mul_f64(iters as f64 / wqes as f64)
        })
    });
    let src = vec![7u8; LEN];
    let mut dst = vec![0u8; LEN];
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
    // UCX's two processes get the machine to themselves, as softverbs' pair had it.
    drop(peer);
    if let Some(u) = ucx {
        g.sample_size(10);
        g.bench_function("ucx_put_bw", |b| {
            b.iter_custom(|iters| u.run("ucp_put_bw", LEN, iters, 1000, 100))
        });
    }
    g.finish();
}

fn message_rate(c: &mut Criterion, v: &Verbs) {
    const CHAIN: usize = 32;
    let s = side(v, "soft0");
    let (_peer, addr, rkey) = Peer::start("sink", &s);
    let (_sges, mut wrs) = write_chain(&s, CHAIN, 64, addr, rkey);
    let mut wcs = [Wc::default(); 16];
    let mut g = c.benchmark_group("xproc_write_64B");
    g.throughput(Throughput::Elements(CHAIN as u64));
    g.bench_function("chain32_signal_last", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            chains(&s, &mut wrs, iters, 2, &mut wcs);
            t.elapsed()
        })
    });
    g.finish();
}

/// One round trip of the ping-pong: an 8-byte SEND to the echo peer and its answer.
fn round_trip(s: &Side, wcs: &mut [Wc]) {
    s.send8();
    // Our SEND's completion and the peer's answer, in either order.
    let mut got_recv = false;
    while !got_recv {
        let polled = s.cq.poll(wcs).unwrap();
        for wc in polled.iter() {
            assert!(wc.is_ok(), "completion failed: {:?}", wc.status());
            if wc.opcode() == vqp_host::WcOpcode::Recv {
                s.post_recvs(1, 8);
                got_recv = true;
            }
        }
    }
}

fn latency(c: &mut Criterion, v: &Verbs, ucx: Option<&Ucx>) {
    let s = side(v, "soft0");
    let (peer, _, _) = Peer::start("echo", &s);
    s.post_recvs(512, 8);
    let mut wcs = [Wc::default(); 16];
    let mut g = c.benchmark_group("xproc_pingpong_8B");
    g.bench_function("send_half_round_trip", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                round_trip(&s, &mut wcs);
            }
            t.elapsed() / 2
        })
    });
    // The echo peer polls without pause: it would take a core from UCX's pair.
    drop(peer);
    if let Some(u) = ucx {
        g.sample_size(10);
        g.bench_function("ucx_tag_lat", |b| {
            b.iter_custom(|iters| u.run("tag_lat", 8, iters, 20_000, 1000))
        });
    }
    g.finish();
}

/// Round trips per run of [`latency_medians`], after [`MEDIAN_WARMUP`] untimed ones.
const MEDIAN_ITERS: usize = 20_000;
const MEDIAN_WARMUP: usize = 1_000;

/// The 8-byte half round trip by its median, softverbs' ping-pong and UCX's `tag_lat`
/// alternating for `runs` runs of [`MEDIAN_ITERS`] each, with a table of both and their
/// ratio. A median leaves out the round trips during which the scheduler ran something
/// else on a poller's core, which on a small machine make most of an average; it is
/// what `ucx_perftest` reports as typical. Each run times every round trip of
/// softverbs' pair (its median over all of them) and takes `ucx_perftest`'s 50th
/// percentile (over its last 2,048), the echo peer gone before UCX's pair starts.
fn latency_medians(v: &Verbs, ucx: &Ucx, runs: usize) {
    let mut wcs = [Wc::default(); 16];
    let mut times = Vec::with_capacity(MEDIAN_ITERS);
    let mut rows = Vec::with_capacity(runs);
    println!("8 B half round trip, medians: softverbs ping-pong, UCX tag_lat, ratio");
    for run in 0..runs {
        let s = side(v, "soft0");
        let (peer, _, _) = Peer::start("echo", &s);
        s.post_recvs(512, 8);
        for _ in 0..MEDIAN_WARMUP {
            round_trip(&s, &mut wcs);
        }
        times.clear();
        for _ in 0..MEDIAN_ITERS {
            let t = Instant::now();
            round_trip(&s, &mut wcs);
            times.push(t.elapsed());
        }
        drop(peer);
        drop(s);
        times.sort_unstable();
        let ours = times[times.len() / 2] / 2;
        let theirs = ucx.median("tag_lat", 8, MEDIAN_ITERS as u64, MEDIAN_WARMUP as u64);
        let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
        println!(
            "run {:>2}: {:>7.3} µs {:>7.3} µs {:>6.2}",
            run + 1,
            ours.as_secs_f64() * 1e6,
            theirs.as_secs_f64() * 1e6,
            ratio
        );
        rows.push((ours, theirs, ratio));
    }
    let mid = |mut x: Vec<f64>| {
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    println!(
        "median of {runs}: {:>7.3} µs {:>7.3} µs {:>6.2} (UCX within 1.5x in {} of {runs})",
        mid(rows.iter().map(|r| r.0.as_secs_f64() * 1e6).collect()),
        mid(rows.iter().map(|r| r.1.as_secs_f64() * 1e6).collect()),
        mid(rows.iter().map(|r| r.2).collect()),
        rows.iter().filter(|r| r.2 <= 1.5).count()
    );
}

/// The runs [`ENV_MEDIANS`] asks for, if any.
fn medians_runs() -> Option<usize> {
    std::env::var(ENV_MEDIANS)
        .ok()?
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

fn main() {
    if let Ok(role) = std::env::var(ENV_ROLE) {
        peer_main(&role);
        return;
    }
    let dir = std::env::temp_dir().join(format!("vqp-xproc-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Before the provider starts (the peers inherit it).
    std::env::set_var(vqp_softverbs::ENV_DIR, &dir);
    pin(0);
    let v = verbs();
    let mut c = Criterion::default().configure_from_args();
    let ucx = Ucx::find(&dir);
    bandwidth(&mut c, &v, ucx.as_ref());
    message_rate(&mut c, &v);
    latency(&mut c, &v, ucx.as_ref());
    c.final_summary();
    if let (Some(u), Some(runs)) = (ucx.as_ref(), medians_runs()) {
        latency_medians(&v, u, runs);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
