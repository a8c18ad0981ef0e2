//! Verbs between machines over UCX (`engine::route`'s `ucx`): two processes in two
//! network namespaces joined by one veth, each with its own softverbs namespace
//! directory (so no shared memory can carry the data) and a soft device bound to its
//! veth end, RC QPs connected by GID. The requester's operations land at the responder
//! with every byte checked (WRITE, WRITE_WITH_IMM, SEND and inline SEND with their
//! receive completions, an RNR NAK waited out, READ, both atomics, a 1 MiB WRITE_WITH_IMM); a wrong
//! rkey is `IBV_WC_REM_ACCESS_ERR` at the requester and moves the responder's QP to
//! error; RNR NAKs end in `IBV_WC_RNR_RETRY_EXC_ERR` after `rnr_retry`; a killed or
//! stopped peer ends in `IBV_WC_RETRY_EXC_ERR`, the rest flushed, within the QP's
//! timeout × retries; the requester's link taken down under WRITEs in flight fails
//! the oldest with `IBV_WC_RETRY_EXC_ERR` and flushes the rest, in posting order, and
//! what TCP still held of them never lands once the link is back; a deleted veth
//! ends WRITEs in flight the same way, the responder alive; a deep queue of
//! 1 MiB WRITEs (128 posted, as `ib_write_bw -s 1M`) all complete.
//! UC WRITE and SEND land, and a UD SEND with its GRH. Forged and malformed messages from a peer speaking UCP itself, and a fuzz of them, change nothing.
//! An atomic sent again (as after a lost answer) is answered with its first result,
//! not run twice; the pieces of a long WRITE run only in order and are answered once.
//! Two processes of one namespace serve their QPs to another machine's. Two processes
//! that send each other requests (a SEND ping-pong) do so over one connection.
//!
//! The checks run in child processes (this test binary, `#[ignore]`d tests started with
//! `ip netns exec` and `VQP_MACHINE_CHILD` set), which swap QP numbers and keys through
//! files. Needs root and iproute2 (`netns`) and UCX (Debian's `libucx0`); each skips with
//! one line without them, and fails instead under `VQP_REQUIRE_SYSTEM_PACKAGES=1`. The
//! namespaces and directories are removed even when a test fails.

mod common;
mod netns;
#[path = "procs/mod.rs"]
mod procs;

use std::io::Write as _;
use std::path::{Path as FsPath, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use netns::Netns;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::WcStatus;
use vqp_softverbs::ucx::wire;

/// Set in a child: the checks it runs.
const CHILD: &str = "VQP_MACHINE_CHILD";
/// The base path of the files the children swap.
const RENDEZVOUS: &str = "VQP_MACHINE_RENDEZVOUS";

/// `::ffff:a.b.c.d`.
fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// Whether UCX (Debian's `libucx0`) can be loaded; prints a line naming the package
/// when it cannot, and fails instead under `VQP_REQUIRE_SYSTEM_PACKAGES=1`.
fn ucx_available(test: &str) -> bool {
    match vqp_softverbs::ucx::Ucp::get() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var("VQP_REQUIRE_SYSTEM_PACKAGES").map_or(true, |v| v != "1"),
                "{test}: {e}"
            );
            // Not through the test harness's capture: the line must show.
            let _ = writeln!(std::io::stderr(), "skipped {test}: needs libucx0 ({e})");
            false
        }
    }
}

fn is_child(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == name)
}

fn rendezvous() -> PathBuf {
    PathBuf::from(std::env::var_os(RENDEZVOUS).unwrap())
}

fn wait_file(p: &FsPath) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(p) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "no {}", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether file `p` (which a child writes) appeared within 30 s; the caller shows
/// what the children made of it when it did not.
fn appeared(p: &FsPath) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !p.exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

fn write_file(p: &FsPath, text: &str) {
    let mut tmp = p.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, p).unwrap();
}

/// The requester's side of the rendezvous: publishes `a`'s QP number, then waits for
/// the responder's QP number, region address and rkey (in that order).
fn meet_responder(base: &FsPath, a: &Side) -> Vec<u64> {
    write_file(&base.with_extension("a"), &format!("{}\n", a.qp.qp_num()));
    wait_file(&base.with_extension("b"))
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

/// The responder's side: publishes `b`'s QP number, region address and rkey, then
/// waits for the requester's QP number.
fn meet_requester(base: &FsPath, b: &Side) -> u32 {
    write_file(
        &base.with_extension("b"),
        &format!("{} {} {}\n", b.qp.qp_num(), b.mr.addr(), b.mr.rkey()),
    );
    wait_file(&base.with_extension("a")).trim().parse().unwrap()
}

/// Two network namespaces joined by a veth (`vm0` 192.0.2.1 in the first, `vm1`
/// 192.0.2.2 in the second) and a directory holding each one's softverbs namespace
/// and the rendezvous files; all removed when dropped.
struct Lab {
    _dir: netns::TempDir,
    ns: Netns,
    dir: PathBuf,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let ns = Netns::new(tag, 2);
        ns.veth((0, "vm0", "192.0.2.1/24"), (1, "vm1", "192.0.2.2/24"), 1500);
        let dir = netns::TempDir(procs::namespace(tag));
        std::fs::create_dir_all(&dir.0).unwrap();
        Lab {
            dir: dir.0.clone(),
            _dir: dir,
            ns,
        }
    }

    /// Limits the egress of namespace `i`'s veth end `vm<i>` to `rate` (`tc` tbf).
    fn limit_egress(&self, i: usize, rate: &str) {
        let dev = format!("vm{i}");
        let args = [
            "qdisc", "replace", "dev", &dev, "root", "tbf", "rate", rate, "burst", "32kb",
            "latency", "100ms",
        ];
        let out = Command::new("tc")
            .args(["-n", self.ns.name(i)])
            .args(args)
            .output()
            .expect("tc (iproute2)");
        assert!(out.status.success(), "tc {args:?}: {out:?}");
    }

    /// Starts child test `name` in namespace `i`, its device `soft0` bound to `vm<i>`,
    /// its own softverbs namespace directory.
    fn start(&self, i: usize, name: &str) -> procs::Killed {
        self.start_with(i, name, &[])
    }

    /// [`Lab::start`] with `env` set too.
    fn start_with(&self, i: usize, name: &str, env: &[(&str, &str)]) -> procs::Killed {
        let own = self.dir.join(format!("ns{i}"));
        std::fs::create_dir_all(&own).unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut c: Command = self.ns.exec(i, &exe);
        c.args([name, "--exact", "--ignored", "--nocapture"])
            .env(CHILD, name)
            .env("VQP_SOFT_DIR", &own)
            .env("VQP_SOFT_NETDEV", format!("soft0=vm{i}"))
            .env(RENDEZVOUS, self.dir.join("rendezvous"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child: Child = c.spawn().unwrap_or_else(|e| panic!("starting {name}: {e}"));
        procs::Killed(Some(child))
    }
}

/// Waits (60 s at most) for a child to exit: whether it passed, and its output.
fn outcome(c: &mut procs::Killed, name: &str) -> (bool, String) {
    let out = procs::wait(c, Instant::now() + Duration::from_secs(60), name);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    (
        out.status.success() && o.contains("1 passed"),
        format!("--- child {name}: {}\n{o}\n{e}", out.status),
    )
}

/// Waits for the children, each under its name; all must pass.
fn passed(children: Vec<(procs::Killed, &str)>) {
    let mut ok = true;
    let mut text = String::new();
    for (mut c, name) in children {
        let (p, t) = outcome(&mut c, name);
        ok &= p;
        text += &t;
    }
    assert!(ok, "{text}");
}

/// Waits for the requester's first WRITE (`a-first` beside `base`); when it never
/// completes, fails with what each of `children` said.
fn await_first_write(base: &FsPath, children: [(&mut procs::Killed, &str); 2]) {
    if appeared(&base.with_extension("a-first")) {
        return;
    }
    let said: String = children
        .into_iter()
        .map(|(c, name)| outcome(c, name).1)
        .collect();
    panic!("the first WRITE never completed\n{said}");
}

/// The pattern `common::fill` writes with `seed`, at buffer offsets `range`.
fn pattern(range: std::ops::Range<usize>, seed: u8) -> Vec<u8> {
    range
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Both sides' options: a 2 MiB region.
fn opts() -> Opts {
    Opts {
        buf: 2 << 20,
        ..Opts::default()
    }
}

/// Connects `s`'s QP to QP `qpn` at `gid` with the default path (from GID index 1,
/// the IPv4 GID), `timeout` and `retry_cnt` as given.
fn connect_to(s: &Side, gid: [u8; 16], qpn: u32, timeout: u8, retry_cnt: u8) {
    connect_from(s, 1, gid, qpn, timeout, retry_cnt);
}

/// [`connect_to`] from GID index `sgid_index`.
fn connect_from(s: &Side, sgid_index: u8, gid: [u8; 16], qpn: u32, timeout: u8, retry_cnt: u8) {
    let g = vqp_host::sys::Gid::from_bytes(gid);
    let mut path = Path::new(1, Address::gid(g, sgid_index), qpn, 0x10, 0x20);
    path.access = Opts::default().qp_access;
    path.timeout = timeout;
    path.retry_cnt = retry_cnt;
    connect::connect(&s.qp, &path).unwrap();
}

/// Waits (10 s at most) until this process answers lookups: its thread serving other
/// machines makes UCX's worker after the device is opened, and a UC request sent
/// before is lost, as a packet to a host not up yet.
fn wait_serving() {
    let port = vqp_softverbs::ucx::lookup::DEFAULT_PORT;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !netns::listening_in(std::process::id(), port) {
        assert!(Instant::now() < deadline, "never listened at {port}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// Offsets in the responder's region.
const WRITE_AT: usize = 0;
const IMM_AT: usize = 4096;
const SEND_AT: usize = 8192;
const INLINE_AT: usize = 12288;
const RNR_AT: usize = 14336;
const READ_AT: usize = 32768;
const ATOMIC_AT: usize = 40000;
const BIG_AT: usize = 1 << 20;

#[test]
fn rc_operations_between_two_machines_over_ucx() {
    let name = "rc_operations_between_two_machines_over_ucx";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach1");
    let responder = lab.start(1, "child_responder");
    let requester = lab.start(0, "child_requester");
    passed(vec![
        (requester, "child_requester"),
        (responder, "child_responder"),
    ]);
}

#[test]
#[ignore = "run in a network namespace by rc_operations_between_two_machines_over_ucx"]
fn child_responder() {
    if !is_child("child_responder") {
        return;
    }
    let v = verbs();
    let mut b = side(&v, "soft0", &opts());
    fill(&mut b, 5);
    bytes_mut(&mut b)[..READ_AT].fill(0);
    bytes_mut(&mut b)[BIG_AT..].fill(0);
    bytes_mut(&mut b)[ATOMIC_AT..ATOMIC_AT + 8].copy_from_slice(&40u64.to_ne_bytes());
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    // WRITE_WITH_IMM takes a receive without buffers; SEND and the inline SEND theirs.
    let mut r = recv_wr(10, &mut []);
    post_recv(&b, &mut r);
    post_receive(&b, 11, SEND_AT, 4096);
    post_receive(&b, 12, INLINE_AT, 64);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    // The requester's SEND with no receive posted is NAKed (RNR) until this one comes.
    wait_file(&base.with_extension("a-rnr"));
    std::thread::sleep(Duration::from_millis(50));
    post_receive(&b, 13, RNR_AT, 256);
    // The 1 MiB WRITE_WITH_IMM (in pieces) takes the next, once.
    let mut r = recv_wr(14, &mut []);
    post_recv(&b, &mut r);
    wait_file(&base.with_extension("a-done"));
    let rc = poll_n(&b.cq, 5);
    let got: Vec<_> = rc
        .iter()
        .map(|w| (w.wr_id(), w.status(), w.byte_len(), w.imm_data()))
        .collect();
    assert_eq!(
        got,
        [
            (10, WcStatus::Success, 256, Some(0xdead_beef)),
            (11, WcStatus::Success, 1000, None),
            (12, WcStatus::Success, 40, Some(7)),
            (13, WcStatus::Success, 256, None),
            (14, WcStatus::Success, 1 << 20, Some(0x0bad_cafe)),
        ]
    );
    let m = bytes(&b);
    assert_eq!(&m[WRITE_AT..WRITE_AT + 4096], &pattern(0..4096, 9)[..]);
    assert_eq!(&m[IMM_AT..IMM_AT + 256], &pattern(4096..4352, 9)[..]);
    assert_eq!(&m[SEND_AT..SEND_AT + 1000], &pattern(8192..9192, 9)[..]);
    assert_eq!(&m[INLINE_AT..INLINE_AT + 40], &pattern(12288..12328, 9)[..]);
    assert_eq!(&m[RNR_AT..RNR_AT + 256], &pattern(14336..14592, 9)[..]);
    assert_eq!(
        &m[ATOMIC_AT..ATOMIC_AT + 8],
        &0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    assert!(
        m[BIG_AT..] == pattern(BIG_AT..2 << 20, 9)[..],
        "the 1 MiB WRITE_WITH_IMM"
    );
    // The WRITE with a wrong rkey: our QP went to error (a remote access error is the
    // responder's, as between local processes).
    assert_eq!(b.qp.state().unwrap(), vqp_host::QpState::Err);
}

#[test]
#[ignore = "run in a network namespace by rc_operations_between_two_machines_over_ucx"]
fn child_requester() {
    if !is_child("child_requester") {
        return;
    }
    let v = verbs();
    let mut a = side(&v, "soft0", &opts());
    fill(&mut a, 9);
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    let (b_qpn, b_addr, b_rkey) = (f[0] as u32, f[1], f[2] as u32);
    connect_to(&a, v4([192, 0, 2, 2]), b_qpn, 14, 7);
    wait_file(&base.with_extension("b-ready"));
    let rdma = |wr: &mut ibv_send_wr, at: usize| {
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: b_addr + at as u64,
            rkey: b_rkey,
        };
    };

    let mut sge = a.mr.sge(WRITE_AT, 4096).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut wr, WRITE_AT);
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "WRITE");

    let mut sge = a.mr.sge(IMM_AT, 256).unwrap();
    let mut wr = send_wr(
        2,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut wr, IMM_AT);
    wr.imm.imm_data = 0xdead_beefu32.to_be();
    assert_eq!(
        post_status(&a, &mut wr),
        WcStatus::Success,
        "WRITE_WITH_IMM"
    );

    let mut sge = a.mr.sge(SEND_AT, 1000).unwrap();
    let mut wr = send_wr(3, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "SEND");

    let mut sge = a.mr.sge(INLINE_AT, 40).unwrap();
    let mut wr = send_wr(4, IBV_WR_SEND_WITH_IMM, std::slice::from_mut(&mut sge));
    wr.send_flags |= IBV_SEND_INLINE;
    wr.imm.imm_data = 7u32.to_be();
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "inline SEND");

    // No receive is posted for this one yet: RNR NAKs (rnr_retry 7: for ever) until
    // the responder posts it.
    let mut sge = a.mr.sge(RNR_AT, 256).unwrap();
    let mut wr = send_wr(5, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut wr);
    write_file(&base.with_extension("a-rnr"), "sent\n");
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].status(), WcStatus::Success, "SEND after RNR");

    let mut sge = a.mr.sge(16384, 4096).unwrap();
    let mut wr = send_wr(6, IBV_WR_RDMA_READ, std::slice::from_mut(&mut sge));
    rdma(&mut wr, READ_AT);
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "READ");
    assert_eq!(
        &bytes(&a)[16384..20480],
        &pattern(READ_AT..READ_AT + 4096, 5)[..]
    );

    let mut sge = a.mr.sge(24576, 8).unwrap();
    let mut wr = send_wr(
        7,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        std::slice::from_mut(&mut sge),
    );
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: b_addr + ATOMIC_AT as u64,
        compare_add: 2,
        swap: 0,
        rkey: b_rkey,
    };
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "FETCH_ADD");
    assert_eq!(&bytes(&a)[24576..24584], &40u64.to_ne_bytes());
    let mut wr = send_wr(8, IBV_WR_ATOMIC_CMP_AND_SWP, std::slice::from_mut(&mut sge));
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: b_addr + ATOMIC_AT as u64,
        compare_add: 42,
        swap: 0x1122_3344_5566_7788,
        rkey: b_rkey,
    };
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "CMP_AND_SWP");
    assert_eq!(&bytes(&a)[24576..24584], &42u64.to_ne_bytes());

    // 1 MiB in one WRITE_WITH_IMM (in pieces; one receive completion), then 16 small
    // unsignaled WRITEs and a signaled one: all land, one completion, in order.
    let mut sge = a.mr.sge(BIG_AT, 1 << 20).unwrap();
    let mut wr = send_wr(
        9,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut wr, BIG_AT);
    wr.imm.imm_data = 0x0bad_cafeu32.to_be();
    assert_eq!(
        post_status(&a, &mut wr),
        WcStatus::Success,
        "1 MiB WRITE_WITH_IMM"
    );
    for i in 0..17u64 {
        let mut sge = a.mr.sge(WRITE_AT, 64).unwrap();
        let mut wr = send_wr(100 + i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        if i < 16 {
            wr.send_flags = 0;
        }
        rdma(&mut wr, WRITE_AT);
        post(&a, &mut wr);
    }
    let wc = poll_n(&a.cq, 1);
    assert_eq!(
        (wc[0].wr_id(), wc[0].status()),
        (116, WcStatus::Success),
        "a chain of WRITEs"
    );

    // A wrong rkey: the responder refuses it.
    let mut sge = a.mr.sge(WRITE_AT, 64).unwrap();
    let mut wr = send_wr(10, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: b_addr,
        rkey: b_rkey ^ 0x5a5a,
    };
    assert_eq!(
        post_status(&a, &mut wr),
        WcStatus::RemAccessErr,
        "wrong rkey"
    );
    write_file(&base.with_extension("a-done"), "done\n");
}

#[test]
fn a_killed_peer_ends_in_retry_exc_within_the_qps_timeout() {
    // SIGKILL: its sockets are reset, nothing of it answers again.
    peer_gone(
        "a_killed_peer_ends_in_retry_exc_within_the_qps_timeout",
        "mach2",
        libc::SIGKILL,
    );
}

#[test]
fn a_stopped_peer_ends_in_retry_exc_within_the_qps_timeout() {
    // SIGSTOP: its connections stay up and take the requests, but nothing answers —
    // as a machine that vanished without a reset, or a responder that stopped
    // progressing. Only the requester's timer can tell.
    peer_gone(
        "a_stopped_peer_ends_in_retry_exc_within_the_qps_timeout",
        "mach6",
        libc::SIGSTOP,
    );
}

/// The responder's process gets `signal` once the first WRITE completed; the
/// requester's next WRITE must end in `IBV_WC_RETRY_EXC_ERR` within its bound.
fn peer_gone(name: &str, tag: &str, signal: libc::c_int) {
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new(tag);
    let mut victim = lab.start(1, "child_victim");
    let mut requester = lab.start(0, "child_survivor");
    let base = lab.dir.join("rendezvous");
    await_first_write(
        &base,
        [
            (&mut requester, "child_survivor"),
            (&mut victim, "child_victim"),
        ],
    );
    let pid = victim.0.as_ref().unwrap().id();
    // SAFETY: signals our own child (`ip netns exec` execs the test binary in place).
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
    write_file(&base.with_extension("b-killed"), "killed\n");
    passed(vec![(requester, "child_survivor")]);
    // A stopped victim is killed (SIGKILL) when dropped.
    drop(victim);
}

#[test]
#[ignore = "run in a network namespace by the tests of a peer gone"]
fn child_victim() {
    if !is_child("child_victim") {
        return;
    }
    let v = verbs();
    let b = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    // Killed by the test meanwhile.
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
#[ignore = "run in a network namespace by the tests of a peer gone"]
fn child_survivor() {
    if !is_child("child_survivor") {
        return;
    }
    let v = verbs();
    let a = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    // 4.096 µs · 2^14 ≈ 67 ms an attempt, 3 retransmissions: about 270 ms in all.
    connect_to(&a, v4([192, 0, 2, 2]), f[0] as u32, 14, 3);
    wait_file(&base.with_extension("b-ready"));
    let write = |id: u64| {
        let mut sge = a.mr.sge(0, 64).unwrap();
        let mut wr = send_wr(id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1],
            rkey: f[2] as u32,
        };
        post(&a, &mut wr);
    };
    write(1);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::Success);
    write_file(&base.with_extension("a-first"), "ok\n");
    wait_file(&base.with_extension("b-killed"));
    let start = Instant::now();
    write(2);
    write(3);
    let wcs = poll_n(&a.cq, 2);
    let took = start.elapsed();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(got, [(2, WcStatus::RetryExcErr), (3, WcStatus::WrFlushErr)]);
    // Four attempts of about 67 ms (the first and three retransmissions), each
    // perhaps with a lookup refused at once; never much longer.
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_secs(3),
        "RETRY_EXC after {took:?}"
    );
}

/// Moves UC QP `s` to RTS connected to QP `qpn` at `gid` (from local GID index 1, the
/// IPv4 one), with UC's attribute masks.
fn connect_uc(s: &Side, gid: [u8; 16], qpn: u32) {
    let m = vqp_host::QpAttrMask::from_bits;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qp_access_flags: IBV_ACCESS_REMOTE_WRITE,
        ..Default::default()
    };
    s.qp.modify(
        &a,
        m(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
    )
    .unwrap();
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qpn;
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid.raw = gid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    s.qp.modify(
        &a,
        m(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
    )
    .unwrap();
    a.qp_state = IBV_QPS_RTS;
    s.qp.modify(&a, m(IBV_QP_STATE | IBV_QP_SQ_PSN)).unwrap();
}

#[test]
fn uc_writes_and_sends_between_two_machines_over_ucx() {
    let name = "uc_writes_and_sends_between_two_machines_over_ucx";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach3");
    let responder = lab.start(1, "child_uc_responder");
    let requester = lab.start(0, "child_uc_requester");
    passed(vec![
        (requester, "child_uc_requester"),
        (responder, "child_uc_responder"),
    ]);
}

#[test]
#[ignore = "run in a network namespace by uc_writes_and_sends_between_two_machines_over_ucx"]
fn child_uc_responder() {
    if !is_child("child_uc_responder") {
        return;
    }
    let v = verbs();
    let mut b = side_of(&v, "soft0", vqp_host::QpType::Uc);
    bytes_mut(&mut b).fill(0);
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_uc(&b, v4([192, 0, 2, 1]), a_qpn);
    post_receive(&b, 20, SEND_AT, 4096);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    // The SEND comes after the WRITE: once it is here, so is the WRITE's data.
    let rc = poll_n(&b.cq, 1);
    assert_eq!(
        (
            rc[0].wr_id(),
            rc[0].status(),
            rc[0].byte_len(),
            rc[0].imm_data()
        ),
        (20, WcStatus::Success, 512, Some(3))
    );
    let m = bytes(&b);
    assert_eq!(&m[WRITE_AT..WRITE_AT + 4096], &pattern(0..4096, 9)[..]);
    assert_eq!(&m[SEND_AT..SEND_AT + 512], &pattern(8192..8704, 9)[..]);
}

#[test]
#[ignore = "run in a network namespace by uc_writes_and_sends_between_two_machines_over_ucx"]
fn child_uc_requester() {
    if !is_child("child_uc_requester") {
        return;
    }
    let v = verbs();
    let mut a = side_of(&v, "soft0", vqp_host::QpType::Uc);
    fill(&mut a, 9);
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    connect_uc(&a, v4([192, 0, 2, 2]), f[0] as u32);
    wait_file(&base.with_extension("b-ready"));
    // The first WQE may wait for the lookup; a UC WQE then completes once sent.
    let mut sge = a.mr.sge(WRITE_AT, 4096).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: f[1] + WRITE_AT as u64,
        rkey: f[2] as u32,
    };
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "UC WRITE");
    let mut sge = a.mr.sge(SEND_AT, 512).unwrap();
    let mut wr = send_wr(2, IBV_WR_SEND_WITH_IMM, std::slice::from_mut(&mut sge));
    wr.imm.imm_data = 3u32.to_be();
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success, "UC SEND");
}

#[test]
fn forged_and_malformed_requests_from_another_machine_change_nothing() {
    let name = "forged_and_malformed_requests_from_another_machine_change_nothing";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach5");
    let mut responder = lab.start(1, "child_target");
    let mut requester = lab.start(0, "child_forger");
    let (ok_a, text_a) = outcome(&mut requester, "child_forger");
    let (ok_b, text_b) = outcome(&mut responder, "child_target");
    assert!(ok_a && ok_b, "{text_a}{text_b}");
    // A message of an id the protocol does not use is dropped without a word: UCP's
    // line for each would let a peer fill the process's stderr.
    assert!(
        !text_b.contains("no registered callback"),
        "the target wrote a line for a message of an unused id:\n{text_b}"
    );
}

#[test]
#[ignore = "run in a network namespace by forged_and_malformed_requests_from_another_machine_change_nothing"]
fn child_target() {
    if !is_child("child_target") {
        return;
    }
    let v = verbs();
    let mut b = side(&v, "soft0", &Opts::default());
    bytes_mut(&mut b).fill(0);
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    wait_file(&base.with_extension("a-done"));
    // Only the connected QP's WRITE landed; nothing of the forged ones did.
    let m = bytes(&b);
    assert_eq!(&m[..64], &pattern(0..64, 9)[..]);
    assert!(m[64..].iter().all(|&x| x == 0), "a forged request landed");
    assert_eq!(b.qp.state().unwrap(), vqp_host::QpState::Rts);
}

#[test]
#[ignore = "run in a network namespace by forged_and_malformed_requests_from_another_machine_change_nothing"]
fn child_forger() {
    if !is_child("child_forger") {
        return;
    }
    use vqp_softverbs::ucx::{lookup, wire, Worker, ROUTE_SETTINGS};
    let v = verbs();
    let mut a = side(&v, "soft0", &Opts::default());
    fill(&mut a, 9);
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    let (b_qpn, b_addr, b_rkey) = (f[0] as u32, f[1], f[2] as u32);
    connect_to(&a, v4([192, 0, 2, 2]), b_qpn, 14, 7);
    wait_file(&base.with_extension("b-ready"));

    // A peer of our own, not a QP: it finds the responder's process and talks to it
    // directly.
    let at: std::net::SocketAddr = format!("192.0.2.2:{}", lookup::DEFAULT_PORT)
        .parse()
        .unwrap();
    let served = lookup::lookup(at, &v4([192, 0, 2, 2]), b_qpn, Duration::from_secs(2))
        .unwrap()
        .expect("the responder's process serves its QP");
    assert_eq!(served.ip(), at.ip(), "served at the address asked");
    // A peer of the route speaks its settings, and takes the answers the responder
    // sends back (a DROP for each request it refuses): UCP 1.13 reads the handler
    // table at the message's id before it checks the id, so a worker with no handler
    // there dies on the first answer (`ucp_am_handler_common`).
    let mut w = Worker::new(ROUTE_SETTINGS).unwrap();
    for id in 0..vqp_softverbs::ucx::MAX_AM_ID {
        w.set_handler(id, |_| {}).unwrap();
    }
    let ep = w.connect(served).unwrap();
    let write = |src_qpn: u32, sgid: [u8; 16], at: u64, len: u64| wire::Request {
        opcode: IBV_WR_RDMA_WRITE,
        src_qpn,
        dst_qpn: b_qpn,
        conn: 1,
        psn: 0,
        len,
        rkey: b_rkey,
        remote_addr: b_addr + at,
        sgid,
        dgid: v4([192, 0, 2, 2]),
        ..wire::Request::default()
    };
    let junk = vec![0xa5u8; 64];
    let our_gid = v4([192, 0, 2, 1]);
    let a_qpn = a.qp.qp_num();
    let sends: Vec<(u16, Vec<u8>, Vec<u8>)> = vec![
        // Not a header at all.
        (1, vec![7u8; 10], junk.clone()),
        // A header whose length disagrees with its payload.
        (
            1,
            write(a_qpn, our_gid, 4096, 64).encode().to_vec(),
            vec![1; 10],
        ),
        // From a QP the responder's QP is not connected to.
        (
            1,
            write(a_qpn ^ 1, our_gid, 8192, 64).encode().to_vec(),
            junk.clone(),
        ),
        // From our QP's number, but another GID.
        (
            1,
            write(a_qpn, v4([192, 0, 2, 9]), 12288, 64)
                .encode()
                .to_vec(),
            junk.clone(),
        ),
        // A response nobody asked for, and an id nobody serves.
        (2, vec![0u8; wire::Response::LEN], Vec::new()),
        (9, vec![1u8; 16], junk.clone()),
        // A request with an answer riding along: a header of a request's size only,
        // and an answer nobody asked for with a request from a QP the responder's QP
        // is not connected to.
        (
            3,
            write(a_qpn, our_gid, 16384, 64).encode().to_vec(),
            junk.clone(),
        ),
        (
            3,
            [
                vec![0u8; wire::Response::LEN],
                write(a_qpn ^ 1, our_gid, 20480, 64).encode().to_vec(),
            ]
            .concat(),
            junk.clone(),
        ),
    ];
    let mut sends = sends;
    sends.extend(fuzzed(a_qpn, b_qpn, b_rkey, b_addr, our_gid, 3000));
    let count = sends.len();
    for (i, (id, header, payload)) in sends.into_iter().enumerate() {
        w.am_send(ep, id, &header, payload, i as u64).unwrap();
    }
    // Every send completes (taken by the peer's UCP, whatever became of it).
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while sent < count {
        assert!(
            Instant::now() < deadline,
            "{sent} of {count} sends completed"
        );
        w.wait(Duration::from_millis(50)).unwrap();
        while let Some(ev) = w.next_event() {
            if matches!(ev, vqp_softverbs::ucx::Event::Sent { .. }) {
                sent += 1;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    // The connected QP still works.
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: b_addr,
        rkey: b_rkey,
    };
    assert_eq!(post_status(&a, &mut wr), WcStatus::Success);
    write_file(&base.with_extension("a-done"), "done\n");
}

#[test]
fn a_duplicate_atomic_is_answered_with_its_first_result_not_run_again() {
    replay(
        "a_duplicate_atomic_is_answered_with_its_first_result_not_run_again",
        "mach12",
        "atomics",
    );
}

#[test]
fn the_pieces_of_a_long_write_run_in_order_and_are_answered_once() {
    replay(
        "the_pieces_of_a_long_write_run_in_order_and_are_answered_once",
        "mach13",
        "pieces",
    );
}

/// Runs test `name` (namespaces tagged `tag`): a [`RoutePeer`] in one namespace sends
/// the requests of `what` ([`child_replayer`]) to a QP in the other.
fn replay(name: &str, tag: &str, what: &str) {
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new(tag);
    let responder = lab.start(1, "child_replay_target");
    let requester = lab.start_with(0, "child_replayer", &[("VQP_REPLAY", what)]);
    passed(vec![
        (requester, "child_replayer"),
        (responder, "child_replay_target"),
    ]);
}

/// The length of the WRITE the pieces test sends in three pieces.
const PIECES_LEN: usize = 2 * wire::FRAGMENT as usize + 100;

#[test]
#[ignore = "run in a network namespace by the duplicate atomic's and the pieces' tests"]
fn child_replay_target() {
    if !is_child("child_replay_target") {
        return;
    }
    let v = verbs();
    let mut b = side(&v, "soft0", &opts());
    bytes_mut(&mut b).fill(0);
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    let what = wait_file(&base.with_extension("a-done"));
    let m = bytes(&b);
    if what.trim() == "atomics" {
        // The FETCH_ADD ran once (0 + 5), then the CMP_SWP found 5 and swapped; a
        // second FETCH_ADD would have left 10, and the CMP_SWP nothing to swap.
        assert_eq!(u64::from_ne_bytes(m[..8].try_into().unwrap()), 100);
    } else {
        assert_eq!(&m[..PIECES_LEN], &pattern(0..PIECES_LEN, 3)[..]);
        assert!(m[PIECES_LEN..].iter().all(|&x| x == 0), "past the WRITE");
    }
    assert_eq!(b.qp.state().unwrap(), vqp_host::QpState::Rts);
}

/// A peer speaking the route itself in the place of a requester QP (the responder
/// checks the GID and QP a request names, not the connection it came on): it sends
/// requests as it likes — again, as a requester whose answer was lost does, or in
/// pieces out of order — and sees every answer.
struct RoutePeer {
    w: vqp_softverbs::ucx::Worker,
    ep: vqp_softverbs::ucx::EpId,
    answers: Answers,
}

/// The answers a [`RoutePeer`] got: each response with its payload.
type Answers = std::sync::Arc<std::sync::Mutex<Vec<(wire::Response, Vec<u8>)>>>;

impl RoutePeer {
    /// Connects to the process serving QP `qpn` at 192.0.2.2.
    fn new(qpn: u32) -> RoutePeer {
        use vqp_softverbs::ucx::{lookup, Data, Worker, ROUTE_SETTINGS};
        let at: std::net::SocketAddr = format!("192.0.2.2:{}", lookup::DEFAULT_PORT)
            .parse()
            .unwrap();
        let served = lookup::lookup(at, &v4([192, 0, 2, 2]), qpn, Duration::from_secs(2))
            .unwrap()
            .expect("the responder's process serves its QP");
        let mut w = Worker::new(ROUTE_SETTINGS).unwrap();
        let answers = Answers::default();
        for id in 0..vqp_softverbs::ucx::MAX_AM_ID {
            let answers = answers.clone();
            w.set_handler(id, move |m| {
                let header = m.header().to_vec();
                if let (2, Data::Eager(p)) = (id, m.into_data()) {
                    let r = wire::Response::decode(&header, p.len() as u64).unwrap();
                    answers.lock().unwrap().push((r, p.to_vec()));
                }
            })
            .unwrap();
        }
        let ep = w.connect(served).unwrap();
        RoutePeer { w, ep, answers }
    }

    /// Sends `req` with `payload` and gathers the answers that come within `wait`, or
    /// until the first one when `first`.
    fn send(
        &mut self,
        req: &wire::Request,
        payload: &[u8],
        wait: Duration,
        first: bool,
    ) -> Vec<(wire::Response, Vec<u8>)> {
        self.answers.lock().unwrap().clear();
        self.w
            .am_send(self.ep, 1, &req.encode(), payload.to_vec(), 0)
            .unwrap();
        let deadline = Instant::now() + wait;
        loop {
            let any = !self.answers.lock().unwrap().is_empty();
            if (first && any) || Instant::now() >= deadline {
                return std::mem::take(&mut self.answers.lock().unwrap());
            }
            self.w.wait(Duration::from_millis(10)).unwrap();
            while self.w.next_event().is_some() {}
        }
    }

    /// Sends `req` and returns its one answer, an ACK of its PSN (fails after 2 s).
    fn ack(&mut self, req: &wire::Request, payload: &[u8], what: &str) -> Vec<u8> {
        let got = self.send(req, payload, Duration::from_secs(2), true);
        match &got[..] {
            [(r, p)] => {
                assert_eq!((r.code, r.psn), (wire::ACK, req.psn), "{what}: {r:?}");
                p.clone()
            }
            _ => panic!("{what}: {got:?}"),
        }
    }

    /// Sends `req` and checks that nothing answers it (within 300 ms).
    fn unanswered(&mut self, req: &wire::Request, payload: &[u8], what: &str) {
        let got = self.send(req, payload, Duration::from_millis(300), false);
        assert!(got.is_empty(), "{what}: answered {got:?}");
    }
}

#[test]
#[ignore = "run in a network namespace by the duplicate atomic's and the pieces' tests"]
fn child_replayer() {
    if !is_child("child_replayer") {
        return;
    }
    use vqp_softverbs::ucx::wire::FRAGMENT;
    let v = verbs();
    let a = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    let (b_qpn, b_addr, b_rkey) = (f[0] as u32, f[1], f[2] as u32);
    wait_file(&base.with_extension("b-ready"));
    let mut peer = RoutePeer::new(b_qpn);
    let request = |psn: u32, opcode: u32, len: usize| wire::Request {
        opcode,
        src_qpn: a.qp.qp_num(),
        dst_qpn: b_qpn,
        conn: 1,
        psn,
        len: len as u64,
        rkey: b_rkey,
        remote_addr: b_addr,
        sgid: v4([192, 0, 2, 1]),
        dgid: v4([192, 0, 2, 2]),
        ..wire::Request::default()
    };
    let what = std::env::var("VQP_REPLAY").unwrap();
    if what == "atomics" {
        let value = |p: Vec<u8>| u64::from_ne_bytes(p.as_slice().try_into().expect("8 bytes"));
        let add = wire::Request {
            compare_add: 5,
            ..request(0, IBV_WR_ATOMIC_FETCH_AND_ADD, 8)
        };
        let swap = wire::Request {
            compare_add: 5,
            swap: 100,
            ..request(1, IBV_WR_ATOMIC_CMP_AND_SWP, 8)
        };
        assert_eq!(value(peer.ack(&add, &[], "FETCH_ADD")), 0);
        assert_eq!(value(peer.ack(&add, &[], "the FETCH_ADD again")), 0);
        assert_eq!(value(peer.ack(&swap, &[], "CMP_SWP")), 5);
        assert_eq!(value(peer.ack(&swap, &[], "the CMP_SWP again")), 5);
        assert_eq!(value(peer.ack(&add, &[], "the FETCH_ADD a third time")), 0);
    } else {
        let data = pattern(0..PIECES_LEN, 3);
        let piece = |i: usize| {
            let r = wire::Request {
                offset: (i as u64 * FRAGMENT) as u32,
                ..request(0, IBV_WR_RDMA_WRITE, PIECES_LEN)
            };
            let from = i * FRAGMENT as usize;
            (r, &data[from..PIECES_LEN.min(from + FRAGMENT as usize)])
        };
        let (first, last) = (piece(0), piece(2));
        // The first piece runs unanswered; the last one, before the middle one came,
        // is out of order: dropped, and unanswered too (had it run, it would be
        // answered as the message's end).
        peer.unanswered(&first.0, first.1, "the first piece");
        peer.unanswered(&last.0, last.1, "the last piece before the middle one");
        let middle = piece(1);
        peer.unanswered(&middle.0, middle.1, "the middle piece");
        peer.ack(&last.0, last.1, "the last piece");
        // The whole message again (its answer lost): its first pieces are not
        // answered again, its last is.
        peer.unanswered(&first.0, first.1, "the first piece again");
        peer.ack(&last.0, last.1, "the last piece again");
    }
    write_file(&base.with_extension("a-done"), &format!("{what}\n"));
}

/// `n` messages of a fuzz (the same on every run): requests of every opcode with
/// their fields and lengths drawn at random and some bytes overwritten, answers to
/// nothing, requests with an answer riding along, and arbitrary bytes, under every id
/// the protocol uses and some it does not. Every request names a source GID the
/// responder's QP is not connected to (`our_gid` with its last byte changed), so
/// nothing of them may land, whatever the rest says.
fn fuzzed(
    a_qpn: u32,
    b_qpn: u32,
    b_rkey: u32,
    b_addr: u64,
    our_gid: [u8; 16],
    n: usize,
) -> Vec<(u16, Vec<u8>, Vec<u8>)> {
    use vqp_softverbs::ucx::wire;
    let mut x = 0x9e37_79b9u32;
    let mut rnd = move |below: u32| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % below.max(1)
    };
    let opcodes = [
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
    ];
    let mut forged_gid = our_gid;
    forged_gid[15] ^= 0x40;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = u64::from(rnd(3)) * u64::from(rnd(4096));
        let request = wire::Request {
            opcode: opcodes[rnd(7) as usize],
            flags: if rnd(4) == 0 { rnd(16) } else { rnd(2) },
            src_qpn: if rnd(4) == 0 { rnd(1 << 24) } else { a_qpn },
            dst_qpn: if rnd(4) == 0 { rnd(1 << 24) } else { b_qpn },
            conn: rnd(3),
            psn: rnd(4),
            len,
            imm: rnd(u32::MAX),
            rkey: if rnd(2) == 0 { b_rkey } else { rnd(u32::MAX) },
            remote_addr: b_addr + u64::from(rnd(1 << 16)),
            compare_add: u64::from(rnd(u32::MAX)),
            swap: u64::from(rnd(u32::MAX)),
            sgid: forged_gid,
            dgid: v4([192, 0, 2, 2]),
            epoch: rnd(4),
            offset: if rnd(8) == 0 {
                rnd(3) * wire::FRAGMENT as u32
            } else {
                0
            },
        }
        .encode()
        .to_vec();
        let response = wire::Response {
            code: rnd(6),
            src_qpn: b_qpn,
            dst_qpn: a_qpn,
            conn: rnd(3),
            psn: rnd(4),
            value: rnd(u32::MAX),
            value64: u64::from(rnd(u32::MAX)),
            len: u64::from(rnd(2)) * 8,
            epoch: rnd(4),
        }
        .encode()
        .to_vec();
        let junk_len = rnd(200) as usize;
        let junk: Vec<u8> = (0..junk_len).map(|_| rnd(256) as u8).collect();
        let (id, mut header) = match rnd(6) {
            0 | 1 => (1, request),
            2 => (2, response),
            3 => (3, [response, request].concat()),
            4 => ([1, 2, 3][rnd(3) as usize], junk),
            _ => (rnd(64) as u16, junk),
        };
        for _ in 0..rnd(4) {
            let at = rnd(header.len() as u32) as usize;
            if let Some(b) = header.get_mut(at) {
                *b = rnd(256) as u8;
            }
        }
        // Whatever was overwritten, a request's source GID stays one the responder's
        // QP is not connected to.
        let request_at = match (id, header.len()) {
            (1, l) if l == wire::Request::LEN => Some(0),
            (3, l) if l == wire::Response::LEN + wire::Request::LEN => Some(wire::Response::LEN),
            _ => None,
        };
        if let Some(at) = request_at {
            header[at + 72..at + 88].copy_from_slice(&forged_gid);
        }
        let payload_len = match rnd(4) {
            0 | 1 => len as usize,
            2 => 0,
            _ => rnd(8192) as usize,
        };
        let payload = (0..payload_len).map(|_| rnd(256) as u8).collect();
        out.push((id, header, payload));
    }
    out
}

#[test]
fn two_processes_of_one_machine_serve_their_qps_to_another() {
    let name = "two_processes_of_one_machine_serve_their_qps_to_another";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach7");
    // Two processes of the second namespace's softverbs namespace: they share its
    // lookup port, and either may answer a lookup of the other's QP.
    let r0 = lab.start_with(1, "child_one_of_two", &[("VQP_MACHINE_INDEX", "0")]);
    let r1 = lab.start_with(1, "child_one_of_two", &[("VQP_MACHINE_INDEX", "1")]);
    let requester = lab.start(0, "child_to_two");
    passed(vec![
        (requester, "child_to_two"),
        (r0, "child_one_of_two 0"),
        (r1, "child_one_of_two 1"),
    ]);
}

#[test]
#[ignore = "run in a network namespace by two_processes_of_one_machine_serve_their_qps_to_another"]
fn child_one_of_two() {
    if !is_child("child_one_of_two") {
        return;
    }
    let k: usize = std::env::var("VQP_MACHINE_INDEX").unwrap().parse().unwrap();
    let v = verbs();
    let mut b = side(&v, "soft0", &Opts::default());
    bytes_mut(&mut b).fill(0);
    let base = rendezvous();
    write_file(
        &base.with_extension(format!("b{k}")),
        &format!("{} {} {}\n", b.qp.qp_num(), b.mr.addr(), b.mr.rkey()),
    );
    let a: Vec<u32> = wait_file(&base.with_extension("a"))
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    connect_to(&b, v4([192, 0, 2, 1]), a[k], 14, 7);
    wait_serving();
    write_file(&base.with_extension(format!("b{k}-ready")), "ready\n");
    wait_file(&base.with_extension("a-done"));
    assert_eq!(&bytes(&b)[..4096], &pattern(0..4096, 9 + k as u8)[..]);
}

#[test]
#[ignore = "run in a network namespace by two_processes_of_one_machine_serve_their_qps_to_another"]
fn child_to_two() {
    if !is_child("child_to_two") {
        return;
    }
    let v = verbs();
    let mut sides: Vec<Side> = (0..2)
        .map(|_| side(&v, "soft0", &Opts::default()))
        .collect();
    for (k, s) in sides.iter_mut().enumerate() {
        fill(s, 9 + k as u8);
    }
    let base = rendezvous();
    write_file(
        &base.with_extension("a"),
        &format!("{} {}\n", sides[0].qp.qp_num(), sides[1].qp.qp_num()),
    );
    for (k, s) in sides.iter().enumerate() {
        let f: Vec<u64> = wait_file(&base.with_extension(format!("b{k}")))
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        connect_to(s, v4([192, 0, 2, 2]), f[0] as u32, 14, 7);
        wait_file(&base.with_extension(format!("b{k}-ready")));
        let mut sge = s.mr.sge(0, 4096).unwrap();
        let mut wr = send_wr(k as u64, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1],
            rkey: f[2] as u32,
        };
        assert_eq!(post_status(s, &mut wr), WcStatus::Success, "WRITE to {k}");
    }
    write_file(&base.with_extension("a-done"), "done\n");
}

/// SENDs of a ping-pong between the two children.
const PINGS: u64 = 32;

#[test]
fn two_processes_sending_each_other_requests_share_one_connection() {
    let name = "two_processes_sending_each_other_requests_share_one_connection";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach9");
    let pong = lab.start(1, "child_pong");
    let ping = lab.start(0, "child_ping");
    let base = lab.dir.join("rendezvous");
    if !appeared(&base.with_extension("ping-done")) || !appeared(&base.with_extension("pong-done"))
    {
        passed(vec![(ping, "child_ping"), (pong, "child_pong")]);
        panic!("the ping-pong did not end, and neither child failed");
    }
    // Every TCP connection of the first namespace is one of the two processes' (their
    // lookups are over): UCX's connection-manager connection and its data connection
    // for the one endpoint both use. Each process connecting to the other made two of
    // each (and every message then went on a connection that carried nothing back, so
    // the kernel acknowledged each with a packet of its own).
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            lab.ns.name(0),
            "ss",
            "-Htn",
            "state",
            "established",
        ])
        .output()
        .expect("ss (iproute2)");
    let conns = String::from_utf8_lossy(&out.stdout).to_string();
    write_file(&base.with_extension("inspected"), "done\n");
    passed(vec![(ping, "child_ping"), (pong, "child_pong")]);
    assert!(
        conns.lines().count() <= 2,
        "the two processes hold more than one endpoint's connections:\n{conns}"
    );
}

/// Connects `s`'s QP to QP `qpn` at `gid`, sending from PSN `local_psn` and expecting
/// `remote_psn` (the peer's `local_psn`), both ways of a ping-pong being used.
fn connect_psns(s: &Side, gid: [u8; 16], qpn: u32, local_psn: u32, remote_psn: u32) {
    let g = vqp_host::sys::Gid::from_bytes(gid);
    let mut path = Path::new(1, Address::gid(g, 1), qpn, local_psn, remote_psn);
    path.access = Opts::default().qp_access;
    path.timeout = 14;
    path.retry_cnt = 7;
    connect::connect(&s.qp, &path).unwrap();
}

/// Posts one receive of 8 bytes at offset 0 of `s`'s region.
fn post_ping_receive(s: &Side, id: u64) {
    post_receive(s, id, 0, 8);
}

/// Sends 8 bytes from offset 64 of `s`'s region as work request `id`.
fn post_ping(s: &Side, id: u64) {
    let mut sge = s.mr.sge(64, 8).unwrap();
    let mut wr = send_wr(id, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(s, &mut wr);
}

/// Waits until the completions of `want` all came, successful; completions that came
/// with them wait in `early` for a later call (a poll can return several).
fn await_ids(s: &Side, early: &mut Vec<u64>, want: &[u64]) {
    let mut missing: Vec<u64> = want
        .iter()
        .copied()
        .filter(|id| !early.contains(id))
        .collect();
    early.retain(|id| !want.contains(id));
    while !missing.is_empty() {
        for wc in poll_n(&s.cq, 1) {
            assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
            match missing.iter().position(|&id| id == wc.wr_id()) {
                Some(i) => {
                    missing.swap_remove(i);
                }
                None => early.push(wc.wr_id()),
            }
        }
    }
}

#[test]
#[ignore = "run in a network namespace by two_processes_sending_each_other_requests_share_one_connection"]
fn child_ping() {
    if !is_child("child_ping") {
        return;
    }
    let v = verbs();
    let a = side(&v, "soft0", &opts());
    let base = rendezvous();
    write_file(
        &base.with_extension("ping"),
        &format!("{}\n", a.qp.qp_num()),
    );
    let b_qpn: u32 = wait_file(&base.with_extension("pong"))
        .trim()
        .parse()
        .unwrap();
    connect_psns(&a, v4([192, 0, 2, 2]), b_qpn, 0x10, 0x20);
    wait_serving();
    wait_file(&base.with_extension("pong-ready"));
    let mut early = Vec::new();
    for i in 0..PINGS {
        post_ping_receive(&a, 1000 + i);
        post_ping(&a, i);
        await_ids(&a, &mut early, &[i, 1000 + i]);
    }
    write_file(&base.with_extension("ping-done"), "done\n");
    wait_file(&base.with_extension("inspected"));
}

#[test]
#[ignore = "run in a network namespace by two_processes_sending_each_other_requests_share_one_connection"]
fn child_pong() {
    if !is_child("child_pong") {
        return;
    }
    let v = verbs();
    let b = side(&v, "soft0", &opts());
    let base = rendezvous();
    write_file(
        &base.with_extension("pong"),
        &format!("{}\n", b.qp.qp_num()),
    );
    let a_qpn: u32 = wait_file(&base.with_extension("ping"))
        .trim()
        .parse()
        .unwrap();
    connect_psns(&b, v4([192, 0, 2, 1]), a_qpn, 0x20, 0x10);
    for i in 0..PINGS {
        post_ping_receive(&b, 1000 + i);
    }
    wait_serving();
    write_file(&base.with_extension("pong-ready"), "ready\n");
    let mut early = Vec::new();
    for i in 0..PINGS {
        await_ids(&b, &mut early, &[1000 + i]);
        post_ping(&b, i);
    }
    await_ids(&b, &mut early, &(0..PINGS).collect::<Vec<_>>());
    write_file(&base.with_extension("pong-done"), "done\n");
    wait_file(&base.with_extension("inspected"));
}

#[test]
fn ud_datagrams_between_two_machines_over_ucx() {
    let name = "ud_datagrams_between_two_machines_over_ucx";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach8");
    let responder = lab.start(1, "child_ud_receiver");
    let requester = lab.start(0, "child_ud_sender");
    passed(vec![
        (requester, "child_ud_sender"),
        (responder, "child_ud_receiver"),
    ]);
}

/// An address handle on `s`'s PD to `dgid` from local GID index 1 (the IPv4 one).
fn ah_to(s: &Side, dgid: [u8; 16]) -> *mut ibv_ah {
    let mut attr = ibv_ah_attr {
        port_num: 1,
        is_global: 1,
        ..Default::default()
    };
    attr.grh.dgid.raw = dgid;
    attr.grh.sgid_index = 1;
    attr.grh.hop_limit = 64;
    // SAFETY: a live PD and a readable attribute.
    let ah = unsafe { vqp_softverbs::ibv_create_ah(s.pd.as_raw(), &mut attr) };
    assert!(!ah.is_null(), "ibv_create_ah by GID");
    ah
}

#[test]
#[ignore = "run in a network namespace by ud_datagrams_between_two_machines_over_ucx"]
fn child_ud_receiver() {
    if !is_child("child_ud_receiver") {
        return;
    }
    let v = verbs();
    let mut b = ud_side(&v, "soft0", 0x2222);
    bytes_mut(&mut b).fill(0);
    post_receive(&b, 30, 0, 40 + 256);
    let base = rendezvous();
    write_file(&base.with_extension("b"), &format!("{}\n", b.qp.qp_num()));
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    let wc = poll_n(&b.cq, 1);
    assert_eq!(
        (wc[0].wr_id(), wc[0].status(), wc[0].byte_len()),
        (30, WcStatus::Success, 40 + 200)
    );
    let m = bytes(&b);
    // The GRH names the sender's GID and ours; the data follows it.
    assert_eq!(&m[8..24], &v4([192, 0, 2, 1]));
    assert_eq!(&m[24..40], &v4([192, 0, 2, 2]));
    assert_eq!(&m[40..240], &pattern(0..200, 9)[..]);
    write_file(&base.with_extension("b-got"), "got\n");
}

#[test]
#[ignore = "run in a network namespace by ud_datagrams_between_two_machines_over_ucx"]
fn child_ud_sender() {
    if !is_child("child_ud_sender") {
        return;
    }
    let v = verbs();
    let mut a = ud_side(&v, "soft0", 0x2222);
    fill(&mut a, 9);
    let base = rendezvous();
    let b_qpn: u32 = wait_file(&base.with_extension("b")).trim().parse().unwrap();
    wait_file(&base.with_extension("b-ready"));
    let ah = ah_to(&a, v4([192, 0, 2, 2]));
    assert_eq!(ud_send(&a, ah, b_qpn, 0x2222, 0, 200), WcStatus::Success);
    // A datagram completes once sent: stay until it is there.
    wait_file(&base.with_extension("b-got"));
}

#[test]
fn rnr_retries_run_out_between_two_machines() {
    let name = "rnr_retries_run_out_between_two_machines";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach9");
    let responder = lab.start(1, "child_no_receive");
    let requester = lab.start(0, "child_rnr_sender");
    passed(vec![
        (requester, "child_rnr_sender"),
        (responder, "child_no_receive"),
    ]);
}

#[test]
#[ignore = "run in a network namespace by rnr_retries_run_out_between_two_machines"]
fn child_no_receive() {
    if !is_child("child_no_receive") {
        return;
    }
    let v = verbs();
    let b = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    write_file(&base.with_extension("b"), &format!("{}\n", b.qp.qp_num()));
    let a_qpn: u32 = wait_file(&base.with_extension("a")).trim().parse().unwrap();
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    // No receive is ever posted here.
    wait_file(&base.with_extension("a-done"));
}

#[test]
#[ignore = "run in a network namespace by rnr_retries_run_out_between_two_machines"]
fn child_rnr_sender() {
    if !is_child("child_rnr_sender") {
        return;
    }
    let v = verbs();
    let a = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    write_file(&base.with_extension("a"), &format!("{}\n", a.qp.qp_num()));
    let b_qpn: u32 = wait_file(&base.with_extension("b")).trim().parse().unwrap();
    let g = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 2]));
    let mut path = Path::new(1, Address::gid(g, 1), b_qpn, 0x10, 0x20);
    path.access = Opts::default().qp_access;
    // Two retries after the first RNR NAK, then RNR_RETRY_EXC.
    path.rnr_retry = 2;
    connect::connect(&a.qp, &path).unwrap();
    wait_file(&base.with_extension("b-ready"));
    for id in [1, 2] {
        let mut sge = a.mr.sge(0, 64).unwrap();
        let mut wr = send_wr(id, IBV_WR_SEND, std::slice::from_mut(&mut sge));
        post(&a, &mut wr);
    }
    let wcs = poll_n(&a.cq, 2);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    write_file(&base.with_extension("a-done"), "done\n");
}

/// The requester's link goes down with WRITEs in flight (its responder stopped, so
/// none is answered), and one more WRITE is posted once its port is down: the oldest
/// in flight ends in `IBV_WC_RETRY_EXC_ERR` and the others, the new one last, flush,
/// in posting order (a completion after an error never belongs to an earlier WQE),
/// within the QP's timeout × retries.
#[test]
fn a_link_taken_down_under_writes_in_flight_fails_them_in_order() {
    let name = "a_link_taken_down_under_writes_in_flight_fails_them_in_order";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach10");
    let mut victim = lab.start(1, "child_victim");
    let mut requester = lab.start_with(0, "child_cut_off", &[]);
    let base = lab.dir.join("rendezvous");
    await_first_write(
        &base,
        [
            (&mut requester, "child_cut_off"),
            (&mut victim, "child_victim"),
        ],
    );
    let pid = victim.0.as_ref().unwrap().id();
    // SAFETY: signals our own child (`ip netns exec` execs the test binary in place).
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    write_file(&base.with_extension("b-killed"), "stopped\n");
    wait_file(&base.with_extension("a-posted"));
    netns::ip(&["-n", lab.ns.name(0), "link", "set", "vm0", "down"]);
    write_file(&base.with_extension("down"), "down\n");
    passed(vec![(requester, "child_cut_off")]);
    drop(victim);
}

#[test]
#[ignore = "run in a network namespace by a_link_taken_down_under_writes_in_flight_fails_them_in_order"]
fn child_cut_off() {
    if !is_child("child_cut_off") {
        return;
    }
    let v = verbs();
    let a = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    // 4.096 µs · 2^16 ≈ 268 ms an attempt, 2 retransmissions: about 0.8 s in all,
    // long enough for the link to go down while the WRITEs wait for their answers.
    connect_to(&a, v4([192, 0, 2, 2]), f[0] as u32, 16, 2);
    wait_file(&base.with_extension("b-ready"));
    let write = |id: u64| {
        let mut sge = a.mr.sge(0, 4096).unwrap();
        let mut wr = send_wr(id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1],
            rkey: f[2] as u32,
        };
        post(&a, &mut wr);
    };
    write(1);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::Success);
    write_file(&base.with_extension("a-first"), "ok\n");
    wait_file(&base.with_extension("b-killed"));
    let start = Instant::now();
    for id in 2..=4 {
        write(id);
    }
    write_file(&base.with_extension("a-posted"), "ok\n");
    wait_file(&base.with_extension("down"));
    let until = Instant::now() + Duration::from_secs(5);
    while a.ctx.query_port(1).unwrap().state() != vqp_host::PortState::Down {
        assert!(Instant::now() < until, "the port never went down");
        std::thread::sleep(Duration::from_millis(5));
    }
    write(5);
    let wcs = poll_n(&a.cq, 4);
    let took = start.elapsed();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        [
            (2, WcStatus::RetryExcErr),
            (3, WcStatus::WrFlushErr),
            (4, WcStatus::WrFlushErr),
            (5, WcStatus::WrFlushErr)
        ]
    );
    assert!(took < Duration::from_secs(4), "ended after {took:?}");
}

/// The veth between the machines is deleted (both its ends vanish, as a cable pulled
/// with the NICs behind it) with WRITEs in flight and the responder alive: the
/// requester's port goes down (its interface is gone), the oldest WRITE ends in
/// `IBV_WC_RETRY_EXC_ERR` and the others flush, in posting order, within the QP's
/// timeout × retries.
#[test]
fn a_deleted_veth_ends_writes_in_flight_in_retry_exc_within_the_qps_timeout() {
    let name = "a_deleted_veth_ends_writes_in_flight_in_retry_exc_within_the_qps_timeout";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach13");
    // 8 MiB take about 8 s at 8 Mbit/s: the WRITEs are still in flight when the veth
    // goes, however fast the machine.
    lab.limit_egress(0, "8mbit");
    let mut responder = lab.start(1, "child_sink");
    let mut requester = lab.start(0, "child_unplugged");
    let base = lab.dir.join("rendezvous");
    await_first_write(
        &base,
        [
            (&mut requester, "child_unplugged"),
            (&mut responder, "child_sink"),
        ],
    );
    wait_file(&base.with_extension("a-posted"));
    netns::ip(&["-n", lab.ns.name(0), "link", "del", "vm0"]);
    write_file(&base.with_extension("deleted"), "deleted\n");
    passed(vec![(requester, "child_unplugged")]);
    write_file(&base.with_extension("done"), "done\n");
    drop(responder);
}

#[test]
#[ignore = "run in a network namespace by a_deleted_veth_ends_writes_in_flight_in_retry_exc_within_the_qps_timeout"]
fn child_unplugged() {
    if !is_child("child_unplugged") {
        return;
    }
    let v = verbs();
    let a = side(&v, "soft0", &opts());
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    // 4.096 µs · 2^16 ≈ 268 ms an attempt, 2 retransmissions: about 0.8 s in all,
    // long enough for the veth to go while the WRITEs wait for their answers.
    connect_to(&a, v4([192, 0, 2, 2]), f[0] as u32, 16, 2);
    wait_file(&base.with_extension("b-ready"));
    let write = |id: u64, len: usize| {
        let mut sge = a.mr.sge(0, len).unwrap();
        let mut wr = send_wr(id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1],
            rkey: f[2] as u32,
        };
        post(&a, &mut wr);
    };
    write(1, 4096);
    assert_eq!(poll_n(&a.cq, 1)[0].status(), WcStatus::Success);
    write_file(&base.with_extension("a-first"), "ok\n");
    // More than the limited link carries (and has answered) before it is gone: whatever
    // was answered in time completes successfully first.
    for id in 2..=9 {
        write(id, 1 << 20);
    }
    write_file(&base.with_extension("a-posted"), "ok\n");
    wait_file(&base.with_extension("deleted"));
    let start = Instant::now();
    let until = start + Duration::from_secs(5);
    while a.ctx.query_port(1).unwrap().state() != vqp_host::PortState::Down {
        assert!(Instant::now() < until, "the port never went down");
        std::thread::sleep(Duration::from_millis(5));
    }
    let wcs = poll_n(&a.cq, 8);
    let took = start.elapsed();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id(), w.status())).collect();
    // In posting order: successes, then one RETRY_EXC, then flushes.
    let ok = got.iter().take_while(|g| g.1 == WcStatus::Success).count();
    assert!(
        ok < 8,
        "every WRITE was answered before the veth went: {got:?}"
    );
    assert_eq!(got[ok].1, WcStatus::RetryExcErr, "{got:?}");
    assert!(
        got[ok + 1..].iter().all(|g| g.1 == WcStatus::WrFlushErr),
        "{got:?}"
    );
    let ids: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(ids, (2..=9).collect::<Vec<u64>>(), "in posting order");
    assert!(took < Duration::from_secs(4), "ended after {took:?}");
}

/// RC by link-local IPv6 GIDs (index 0, `fe80::`, the interface's own link-local
/// address): a WRITE lands and a READ brings it back, the route looking the peer up
/// through the interface of the requester's port and carrying the traffic to the
/// IPv4 address of that interface the peer names. The children start while the
/// veths' link-local addresses are still tentative (duplicate address detection, a
/// second or two after the link comes up), so the responder's lookup listener there
/// is made only once the address is usable.
#[test]
fn rc_by_link_local_ipv6_gids_between_two_machines() {
    let name = "rc_by_link_local_ipv6_gids_between_two_machines";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach12");
    let target = lab.start(1, "child_v6_target");
    let writer = lab.start(0, "child_v6_writer");
    passed(vec![
        (writer, "child_v6_writer"),
        (target, "child_v6_target"),
    ]);
}

/// This process's GID index 0 on `s`'s port, published as `which` (hex), and the
/// peer's, published as `other`.
fn swap_gids(base: &FsPath, s: &Side, which: &str, other: &str) -> [u8; 16] {
    let mine = *s.ctx.query_gid(1, 0).unwrap().as_bytes();
    let hex: String = mine.iter().map(|b| format!("{b:02x}")).collect();
    write_file(&base.with_extension(which), &format!("{hex}\n"));
    let theirs = wait_file(&base.with_extension(other));
    let mut g = [0u8; 16];
    for (i, x) in g.iter_mut().enumerate() {
        *x = u8::from_str_radix(&theirs[2 * i..2 * i + 2], 16).unwrap();
    }
    assert_eq!(g[..2], [0xfe, 0x80], "a link-local GID");
    g
}

/// Whether this namespace's interface `dev` has an IPv6 address still tentative.
fn tentative(dev: &str) -> bool {
    let out = Command::new("ip")
        .args(["-6", "addr", "show", "dev", dev])
        .output()
        .expect("ip (iproute2)");
    String::from_utf8_lossy(&out.stdout).contains("tentative")
}

#[test]
#[ignore = "run in a network namespace by rc_by_link_local_ipv6_gids_between_two_machines"]
fn child_v6_target() {
    if !is_child("child_v6_target") {
        return;
    }
    let opened_tentative = tentative("vm1");
    let v = verbs();
    let b = side(&v, "soft0", &opts());
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    let a_gid = swap_gids(&base, &b, "b6", "a6");
    connect_from(&b, 0, a_gid, a_qpn, 16, 7);
    // The device was opened while the address was tentative (asserted: else this
    // test would not show the listener made later); once it is usable, two tries of
    // the listener (every 200 ms) and the route serves it.
    let until = Instant::now() + Duration::from_secs(10);
    while tentative("vm1") {
        assert!(
            Instant::now() < until,
            "the link-local address stayed tentative"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    write_file(&base.with_extension("b-ready"), "ready\n");
    wait_file(&base.with_extension("done"));
    assert_eq!(bytes(&b)[..4096], pattern(0..4096, 9)[..], "the WRITE");
    assert!(
        opened_tentative,
        "the address was usable before the device was opened"
    );
}

#[test]
#[ignore = "run in a network namespace by rc_by_link_local_ipv6_gids_between_two_machines"]
fn child_v6_writer() {
    if !is_child("child_v6_writer") {
        return;
    }
    let v = verbs();
    let mut a = side(&v, "soft0", &opts());
    fill(&mut a, 9);
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    let b_gid = swap_gids(&base, &a, "a6", "b6");
    connect_from(&a, 0, b_gid, f[0] as u32, 16, 7);
    wait_file(&base.with_extension("b-ready"));
    for (id, opcode, at) in [(1, IBV_WR_RDMA_WRITE, 0), (2, IBV_WR_RDMA_READ, 8192)] {
        let mut sge = a.mr.sge(at, 4096).unwrap();
        let mut wr = send_wr(id, opcode, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1],
            rkey: f[2] as u32,
        };
        assert_eq!(
            post_status(&a, &mut wr),
            WcStatus::Success,
            "opcode {opcode}"
        );
    }
    assert_eq!(bytes(&a)[8192..12288], pattern(0..4096, 9)[..], "the READ");
    write_file(&base.with_extension("done"), "done\n");
}

/// WRITEs the requester gave up on while its link was down never land once the link is
/// back. The requester's egress is limited to 8 Mbit/s (`tc` tbf), so that most of six
/// 1 MiB WRITEs still wait in its TCP queues when the link goes down after the first
/// completed; its QP ends in `IBV_WC_RETRY_EXC_ERR` (the rest flushed), the link comes
/// up again and TCP delivers what it held: the responder, whose port went down and up
/// with the veth, takes none of it (a network would have lost it with the link), and
/// its region stays as it was while the link was down.
#[test]
fn writes_given_up_on_while_the_link_was_down_never_land_once_it_is_back() {
    let name = "writes_given_up_on_while_the_link_was_down_never_land_once_it_is_back";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach11");
    lab.limit_egress(0, "8mbit");
    let mut target = lab.start(1, "child_stale_target");
    let mut writer = lab.start(0, "child_stale_writer");
    let base = lab.dir.join("rendezvous");
    await_first_write(
        &base,
        [
            (&mut writer, "child_stale_writer"),
            (&mut target, "child_stale_target"),
        ],
    );
    netns::ip(&["-n", lab.ns.name(0), "link", "set", "vm0", "down"]);
    write_file(&base.with_extension("down"), "down\n");
    wait_file(&base.with_extension("a-failed"));
    wait_file(&base.with_extension("b-snap"));
    netns::ip(&["-n", lab.ns.name(0), "link", "set", "vm0", "up"]);
    // What TCP held (up to 5 MiB at 8 Mbit/s) arrives meanwhile.
    std::thread::sleep(Duration::from_secs(10));
    write_file(&base.with_extension("check"), "check\n");
    passed(vec![
        (writer, "child_stale_writer"),
        (target, "child_stale_target"),
    ]);
}

/// Both sides of [`writes_given_up_on_while_the_link_was_down_never_land_once_it_is_back`]:
/// an 8 MiB region.
fn stale_opts() -> Opts {
    Opts {
        buf: 8 << 20,
        ..Opts::default()
    }
}

#[test]
#[ignore = "run in a network namespace by writes_given_up_on_while_the_link_was_down_never_land_once_it_is_back"]
fn child_stale_target() {
    if !is_child("child_stale_target") {
        return;
    }
    let v = verbs();
    let b = side(&v, "soft0", &stale_opts());
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    wait_file(&base.with_extension("down"));
    let until = Instant::now() + Duration::from_secs(5);
    while b.ctx.query_port(1).unwrap().state() != vqp_host::PortState::Down {
        assert!(Instant::now() < until, "the port never went down");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Nothing is taken while the port is down: this is what landed.
    let then = bytes(&b).to_vec();
    assert_eq!(
        then[..1 << 20],
        pattern(0..1 << 20, 7)[..],
        "the first WRITE"
    );
    write_file(&base.with_extension("b-snap"), "taken\n");
    wait_file(&base.with_extension("check"));
    let now = bytes(&b);
    let changed = (0..now.len()).filter(|&i| now[i] != then[i]).count();
    write_file(&base.with_extension("checked"), "checked\n");
    assert_eq!(changed, 0, "bytes written after the link came back");
}

#[test]
#[ignore = "run in a network namespace by writes_given_up_on_while_the_link_was_down_never_land_once_it_is_back"]
fn child_stale_writer() {
    if !is_child("child_stale_writer") {
        return;
    }
    let v = verbs();
    let mut a = side(&v, "soft0", &stale_opts());
    fill(&mut a, 7);
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    // 4.096 µs · 2^19 ≈ 2.1 s an attempt, one retransmission: a 1 MiB WRITE takes
    // about 1 s at 8 Mbit/s.
    connect_to(&a, v4([192, 0, 2, 2]), f[0] as u32, 19, 1);
    wait_file(&base.with_extension("b-ready"));
    for id in 0..6u64 {
        let mut sge = a.mr.sge(id as usize * (1 << 20), 1 << 20).unwrap();
        let mut wr = send_wr(id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1] + id * (1 << 20),
            rkey: f[2] as u32,
        };
        post(&a, &mut wr);
    }
    let mut got = Vec::new();
    let mut buf = [vqp_host::Wc::default(); 8];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 6 {
        assert!(Instant::now() < deadline, "only {got:?}");
        for w in a.cq.poll(&mut buf).unwrap() {
            got.push((w.wr_id(), w.status()));
            if got.len() == 1 {
                write_file(&base.with_extension("a-first"), "ok\n");
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    write_file(&base.with_extension("a-failed"), "failed\n");
    assert_eq!(got[0], (0, WcStatus::Success));
    assert_eq!(got[1], (1, WcStatus::RetryExcErr));
    assert!(
        got[2..].iter().all(|w| w.1 == WcStatus::WrFlushErr),
        "{got:?}"
    );
    // The process stays until the responder looked: its exit would close the
    // connection and what TCP held with it.
    wait_file(&base.with_extension("checked"));
}

/// A deep send queue of large WRITEs, as perftest's `ib_write_bw -s 1M` keeps it: 128
/// RDMA WRITEs of 1 MiB posted at once, one in 100 signaled, refilled as they
/// complete, 400 in all, busy polling. Every one completes successfully, in order: the ACK timer (67 ms here) runs
/// for requests on the wire, not for the WQEs queued behind them (it ended in
/// `IBV_WC_RETRY_EXC_ERR` when the timer started at the hand-over to UCP, with no
/// window).
#[test]
fn a_deep_queue_of_large_writes_completes() {
    let name = "a_deep_queue_of_large_writes_completes";
    if !netns::available(name) || !ucx_available(name) {
        return;
    }
    let lab = Lab::new("mach11");
    let mut sink = lab.start(1, "child_sink");
    let mut requester = lab.start(0, "child_deep");
    let base = lab.dir.join("rendezvous");
    let r = outcome(&mut requester, "child_deep");
    write_file(&base.with_extension("done"), "done\n");
    let s = outcome(&mut sink, "child_sink");
    assert!(r.0 && s.0, "{}{}", r.1, s.1);
}

/// Both sides of [`a_deep_queue_of_large_writes_completes`]: a 2 MiB region, 128 send
/// WQEs.
fn deep_opts() -> Opts {
    Opts {
        cqe: 512,
        cap: vqp_host::QpCap {
            max_send_wr: 128,
            ..Opts::default().cap
        },
        ..opts()
    }
}

#[test]
#[ignore = "run in a network namespace by a_deep_queue_of_large_writes_completes and the deleted veth's test"]
fn child_sink() {
    if !is_child("child_sink") {
        return;
    }
    let v = verbs();
    let b = side(&v, "soft0", &deep_opts());
    let base = rendezvous();
    let a_qpn = meet_requester(&base, &b);
    connect_to(&b, v4([192, 0, 2, 1]), a_qpn, 14, 7);
    wait_serving();
    write_file(&base.with_extension("b-ready"), "ready\n");
    wait_file(&base.with_extension("done"));
}

#[test]
#[ignore = "run in a network namespace by a_deep_queue_of_large_writes_completes"]
fn child_deep() {
    if !is_child("child_deep") {
        return;
    }
    let v = verbs();
    let a = side(&v, "soft0", &deep_opts());
    let base = rendezvous();
    let f = meet_responder(&base, &a);
    // perftest's default: timeout 14 (about 67 ms), retry_cnt 7.
    connect_to(&a, v4([192, 0, 2, 2]), f[0] as u32, 14, 7);
    wait_file(&base.with_extension("b-ready"));
    const TOTAL: u64 = 400;
    const DEPTH: u64 = 128;
    // perftest's completion moderation: one WQE in 100 signaled (and the last).
    const EVERY: u64 = 100;
    let write = |id: u64| {
        let mut sge = a.mr.sge(0, 1 << 20).unwrap();
        let mut wr = send_wr(id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        if (id + 1) % EVERY != 0 && id + 1 != TOTAL {
            wr.send_flags = 0;
        }
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: f[1] + (id % 2) * (1 << 20),
            rkey: f[2] as u32,
        };
        post(&a, &mut wr);
    };
    let start = Instant::now();
    for id in 0..DEPTH {
        write(id);
    }
    let mut posted = DEPTH;
    let mut done = 0u64;
    let mut buf = [vqp_host::Wc::default(); 16];
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < TOTAL {
        for w in a.cq.poll(&mut buf).unwrap() {
            let last = (done + EVERY).min(TOTAL) - 1;
            assert_eq!(
                (w.wr_id(), w.status()),
                (last, WcStatus::Success),
                "after {:?}",
                start.elapsed()
            );
            done = last + 1;
            while posted < TOTAL && posted < done + DEPTH {
                write(posted);
                posted += 1;
            }
        }
        assert!(Instant::now() < deadline, "{done} of {TOTAL} after 60 s");
    }
    println!("{TOTAL} x 1 MiB in {:?}", start.elapsed());
}
