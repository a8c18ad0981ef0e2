//! The virtual QP across two processes over softverbs' shared namespace: this test
//! binary re-runs itself as a child (its `peer` test, with `VQP_VQP_XPROC_PEER` set)
//! that owns side B on soft1 in its own process; the test owns side A on soft0. Both
//! use the provider linked into the binary (`vqp_softverbs::verbs_table()`) and swap
//! cards over loopback TCP (`vqp_host::exchange`), as two hosts would.
//!
//! A alternates 64 KiB RDMA WRITEs into B's write area and 64 KiB RDMA READs of B's
//! pattern area, both modes, 1, 2 and 8 data QPs: every request is reported once, in
//! order, successful; every READ brings B's pattern and, at the end, one READ of B's
//! whole write area brings back what A wrote. Then the failures: B's process killed
//! (SIGKILL) mid-transfer, and one of A's data QPs failing mid-transfer. A must report
//! every request it accepted exactly once, in order, successes then errors (the first
//! error the QP's own: `RETRY_EXC_ERR` for a vanished peer), within bounded time, and
//! shut down cleanly. Every wait is bounded; the child is killed when its handle drops.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, PostSendError, SendWr, Wc, WcStatus};
use vqp_host::{
    exchange, AccessFlags, Connected, Context, Endpoint, MemoryRegion, Settings, Verbs,
};
use vqp_softverbs::QpSelector;

type Ep = Endpoint<8, 16, 128, 512, 1, 32>;
type Conn = Connected<8, 16, 128, 512, 1, 32>;

/// Set in the child's environment: `MODE QPS PORT`.
const ENV_PEER: &str = "VQP_VQP_XPROC_PEER";
/// Bytes per request.
const CHUNK: u64 = 64 << 10;
/// Slots per area: requests of one kind to one slot are at least this many apart.
const SLOTS: u64 = 16;
/// Requests in flight at most (fewer than `SLOTS`, so a READ slot is checked before
/// it is read into again).
const IN_FLIGHT: u64 = 8;
/// How long anything may take before the test calls it hung.
const LIMIT: Duration = Duration::from_secs(60);

fn verbs() -> Verbs {
    // SAFETY: the table is the provider linked into this binary; its functions have
    // libibverbs' signatures and live as long as the process.
    unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) }
}

/// The namespace [`isolate`] made, removed at exit.
static NS: OnceLock<PathBuf> = OnceLock::new();

/// Gives this process (and its children) a namespace directory of its own, before the
/// provider starts; the parent removes it at exit.
fn isolate() -> PathBuf {
    static ONCE: Once = Once::new();
    let dir = std::env::temp_dir().join(format!("vqp-vqp-xproc-{}", std::process::id()));
    ONCE.call_once(|| {
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var(vqp_softverbs::ENV_DIR, &dir);
        if NS.set(dir.clone()).is_ok() {
            // SAFETY: `remove_ns` is an `extern "C" fn()` that neither unwinds nor
            // calls `exit`.
            unsafe { libc::atexit(remove_ns) };
        }
    });
    dir
}

extern "C" fn remove_ns() {
    if let Some(d) = NS.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Byte `j` of slot `s` of the pattern `seed`.
fn pattern(seed: u64, s: u64, j: u64) -> u8 {
    (j.wrapping_mul(31) ^ s.wrapping_mul(0x9e37) ^ seed.wrapping_mul(101)) as u8 ^ (j >> 8) as u8
}

fn fill(buf: &mut [u8], seed: u64) {
    for (s, slot) in buf.chunks_mut(CHUNK as usize).enumerate() {
        for (j, b) in slot.iter_mut().enumerate() {
            *b = pattern(seed, s as u64, j as u64);
        }
    }
}

/// One side's endpoint on `dev` with `qps` data QPs in `mode`.
fn endpoint(dev: &str, mode: Mode, qps: usize, qp_num: u32) -> (Ep, vqp_host::ProtectionDomain) {
    let cfg = Config {
        split: SplitPolicy::new(16 << 10),
        max_outstanding: 16,
        recv_depth: 16,
        qp_num,
        ..Config::new(mode)
    };
    let ctx = Context::open(&verbs(), Some(dev)).expect("open the device");
    let pd = ctx.alloc_pd().expect("pd");
    let ep = Ep::create(&pd, &Settings::new(cfg, qps), None).expect("endpoint");
    (ep, pd)
}

fn mode_of(s: &str) -> Mode {
    if s == "spray" {
        Mode::Spray
    } else {
        Mode::Dqplb
    }
}

/// The child: side B. Connects to the parent, registers a write area and a pattern
/// area, sends `buf ADDR RKEY`, then polls its virtual CQ until the parent closes the
/// connection (or kills it), for at most [`LIMIT`].
#[test]
fn peer() {
    let Ok(spec) = std::env::var(ENV_PEER) else {
        return;
    };
    let w: Vec<&str> = spec.split_whitespace().collect();
    let (mode, qps, port) = (mode_of(w[0]), w[1].parse().unwrap(), w[2]);
    let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    let (ep, pd) = endpoint("soft1", mode, qps, 0xb);
    let card = exchange::exchange(&mut stream, &ep.card()).expect("cards");
    let mut conn: Box<Conn> = Box::new(ep.connect(&card).expect("connect"));
    let mut mr = pd
        .register_buffer((2 * SLOTS * CHUNK) as usize, AccessFlags::ALL_REMOTE)
        .expect("mr");
    // SAFETY: no request uses the buffer yet.
    let bytes = unsafe { mr.as_mut_slice() }.expect("mapped");
    bytes[..(SLOTS * CHUNK) as usize].fill(0);
    fill(&mut bytes[(SLOTS * CHUNK) as usize..], 2);
    writeln!(stream, "buf {} {}", mr.addr(), mr.rkey()).expect("send buf");
    stream.set_nonblocking(true).unwrap();
    let until = Instant::now() + LIMIT;
    let mut out = [Wc::EMPTY; 32];
    let mut byte = [0u8; 1];
    while Instant::now() < until {
        let c = &mut *conn;
        let _ = c.vcq.poll(&mut [&mut c.vqp], &mut out);
        match stream.read(&mut byte) {
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => break,
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(conn);
    drop(mr);
}

/// The child process, killed when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Side A, connected to a child's side B.
struct Rig {
    conn: Box<Conn>,
    mr: MemoryRegion,
    keys: Keys,
    /// B's buffer: write area, then pattern area.
    remote: u64,
    peer: Peer,
    _stream: TcpStream,
}

fn rig(mode: Mode, qps: usize) -> Rig {
    isolate();
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().unwrap().port();
    let (ep, pd) = endpoint("soft0", mode, qps, 0xa);
    let name = if mode == Mode::Spray {
        "spray"
    } else {
        "dqplb"
    };
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "peer", "--nocapture", "--test-threads=1"])
        .env(ENV_PEER, format!("{name} {qps} {port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the peer");
    let peer = Peer(child);
    listener.set_nonblocking(true).unwrap();
    let until = Instant::now() + LIMIT;
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < until, "the peer never connected");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    let card = exchange::exchange(&mut stream, &ep.card()).expect("cards");
    let conn = Box::new(ep.connect(&card).expect("connect"));
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .expect("the peer's buffer");
    let w: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().expect("a number"))
        .collect();
    let mut mr = pd
        .register_buffer((3 * SLOTS * CHUNK) as usize, AccessFlags::ALL_REMOTE)
        .expect("mr");
    // SAFETY: no request uses the buffer yet.
    let bytes = unsafe { mr.as_mut_slice() }.expect("mapped");
    bytes.fill(0);
    fill(&mut bytes[..(SLOTS * CHUNK) as usize], 1);
    let keys = Keys::single(mr.lkey(), w[1] as u32);
    Rig {
        conn,
        mr,
        keys,
        remote: w[0],
        peer,
        _stream: stream,
    }
}

/// What interrupts a run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    /// B's process is killed once this many requests completed.
    KillPeerAfter(usize),
    /// A's second data QP fails at its (N+1)-th WQE from the start.
    FailQp(u64),
}

/// Request `i`: even ones WRITE A's source slot into B's write area, odd ones READ
/// B's pattern slot into A's read area.
fn request(r: &Rig, i: u64) -> SendWr {
    let s = (i / 2) % SLOTS;
    let a = r.mr.addr();
    if i % 2 == 0 {
        let (local, remote) = (a + s * CHUNK, r.remote + s * CHUNK);
        SendWr::new(i, Opcode::RDMA_WRITE, local, CHUNK, remote, r.keys)
    } else {
        let local = a + (SLOTS + s) * CHUNK;
        let remote = r.remote + (SLOTS + s) * CHUNK;
        SendWr::new(i, Opcode::RDMA_READ, local, CHUNK, remote, r.keys)
    }
}

/// Posts `total` requests (at most [`IN_FLIGHT`] at a time), stops posting when the
/// virtual QP refuses as failed, checks each successful READ's data on completion;
/// returns every completion once every accepted request was reported.
fn drive(r: &mut Rig, total: u64, fault: Fault) -> (u64, Vec<Wc>) {
    if let Fault::FailQp(n) = fault {
        let victim = r.conn.vqp.data_qp_num(1).expect("a second data QP");
        vqp_softverbs::fail_qp_after(QpSelector::QpNum(victim), n);
    }
    let (mut posted, mut wcs) = (0u64, Vec::new());
    let mut refused = false;
    let mut killed = None;
    let until = Instant::now() + LIMIT;
    let mut out = [Wc::EMPTY; 32];
    loop {
        while !refused && posted < total && posted < wcs.len() as u64 + IN_FLIGHT {
            match r.conn.vqp.post_send(&request(r, posted)) {
                Ok(()) => posted += 1,
                Err(PostSendError::Full) => break,
                Err(PostSendError::Failed(_)) => refused = true,
                Err(e) => panic!("request {posted} refused: {e}"),
            }
        }
        let c = &mut *r.conn;
        let n = c.vcq.poll(&mut [&mut c.vqp], &mut out).expect("poll");
        for wc in &out[..n] {
            let i = wc.wr_id;
            if i % 2 == 1 && wc.status == WcStatus::SUCCESS {
                let s = (i / 2) % SLOTS;
                // SAFETY: the READ into this slot completed; the next one into it is
                // posted only after this check (fewer than SLOTS in flight).
                let got = unsafe { r.mr.as_slice() }.expect("mapped");
                let at = ((SLOTS + s) * CHUNK) as usize;
                let bad = got[at..at + CHUNK as usize]
                    .iter()
                    .enumerate()
                    .position(|(j, &b)| b != pattern(2, s, j as u64));
                assert_eq!(bad, None, "READ {i} brought wrong data");
            }
            wcs.push(*wc);
        }
        if let Fault::KillPeerAfter(k) = fault {
            if killed.is_none() && wcs.len() >= k {
                let _ = r.peer.0.kill();
                killed = Some(Instant::now());
            }
        }
        if (posted == total || refused) && wcs.len() as u64 == posted {
            return (posted, wcs);
        }
        assert!(
            Instant::now() < until,
            "hung: {posted} posted, {} reported, failure {:?}, killed {killed:?}",
            wcs.len(),
            r.conn.vqp.failure()
        );
        if n == 0 {
            std::thread::yield_now();
        }
    }
}

/// Every accepted request reported exactly once, in order: successes, then only
/// errors, the first of them `first_error`; the virtual QP failed and holds nothing.
fn check_failed_run(r: &Rig, posted: u64, wcs: &[Wc], first_error: WcStatus, what: &str) {
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        (0..posted).collect::<Vec<_>>(),
        "{what}: each request once, in order"
    );
    let ok = wcs
        .iter()
        .take_while(|w| w.status == WcStatus::SUCCESS)
        .count();
    assert!(ok > 0, "{what}: nothing succeeded before the failure");
    assert!(ok < wcs.len(), "{what}: the failure was not reported");
    assert_eq!(wcs[ok].status, first_error, "{what}: first error");
    assert!(
        wcs[ok..].iter().all(|w| w.status != WcStatus::SUCCESS),
        "{what}: a success after the failure"
    );
    assert!(r.conn.vqp.failure().is_some(), "{what}");
    assert_eq!(r.conn.vqp.sends_in_flight(), 0, "{what}: never reported");
}

fn run_ok(mode: Mode, qps: usize) {
    let mut r = rig(mode, qps);
    let total = 4 * SLOTS;
    let (posted, wcs) = drive(&mut r, total, Fault::None);
    assert_eq!(posted, total);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i as u64, WcStatus::SUCCESS, CHUNK),
            "{mode:?} {qps}: request {i}"
        );
    }
    // Read back B's whole write area: it holds A's source slots.
    let area = SLOTS * CHUNK;
    let back = SendWr::new(
        total,
        Opcode::RDMA_READ,
        r.mr.addr() + 2 * area,
        area,
        r.remote,
        r.keys,
    );
    r.conn.vqp.post_send(&back).expect("post the read-back");
    let until = Instant::now() + LIMIT;
    let mut out = [Wc::EMPTY; 4];
    loop {
        let c = &mut *r.conn;
        let n = c.vcq.poll(&mut [&mut c.vqp], &mut out).expect("poll");
        if n > 0 {
            assert_eq!((out[0].wr_id, out[0].status), (total, WcStatus::SUCCESS));
            break;
        }
        assert!(Instant::now() < until, "the read-back hung");
    }
    // SAFETY: every request completed.
    let bytes = unsafe { r.mr.as_slice() }.expect("mapped");
    let (src, back) = (&bytes[..area as usize], &bytes[2 * area as usize..]);
    assert!(
        src == back,
        "{mode:?} {qps}: B's write area differs from A's source"
    );
    assert_eq!(r.conn.vqp.failure(), None);
}

#[test]
fn both_modes_1_2_8_data_qps_across_processes() {
    for mode in [Mode::Dqplb, Mode::Spray] {
        for qps in [1, 2, 8] {
            run_ok(mode, qps);
        }
    }
}

/// Shuts A down after a failure, within a bounded time.
fn shut_down(mut r: Rig, what: &str) {
    let start = Instant::now();
    r.conn.vqp.shut_down();
    drop(r);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{what}: shutdown took {:?}",
        start.elapsed()
    );
}

#[test]
fn a_peer_killed_mid_transfer_reports_every_request_once() {
    for mode in [Mode::Dqplb, Mode::Spray] {
        let what = format!("{mode:?}, peer killed");
        let mut r = rig(mode, 4);
        let (posted, wcs) = drive(&mut r, 100_000, Fault::KillPeerAfter(40));
        check_failed_run(&r, posted, &wcs, WcStatus::RETRY_EXC_ERR, &what);
        shut_down(r, &what);
    }
}

#[test]
fn a_qp_failing_mid_transfer_reports_every_request_once() {
    let _g = serial();
    for mode in [Mode::Dqplb, Mode::Spray] {
        let what = format!("{mode:?}, data QP 1 failing");
        let mut r = rig(mode, 4);
        let (posted, wcs) = drive(&mut r, 100_000, Fault::FailQp(20));
        vqp_softverbs::clear_faults();
        let first = wcs
            .iter()
            .find(|w| w.status != WcStatus::SUCCESS)
            .map(|w| w.status)
            .expect("an error");
        check_failed_run(&r, posted, &wcs, first, &what);
        shut_down(r, &what);
    }
}

/// The fault rules are the process's: the test that sets one runs alone.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
