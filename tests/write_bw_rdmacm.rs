//! `write_bw --rdma-cm` across processes: `--device soft1 --server --rdma-cm` in one,
//! `--device soft0 --connect 127.0.0.1:PORT --rdma-cm` in another, the QPs connected
//! through the RDMA connection manager (vqp-rdmacm, named by `VQP_RDMACM_PATH`, on
//! the softverbs cdylib): both modes with 1 and 8 data QPs, every byte verified; a
//! client asking a server started without `--rdma-cm` is refused on both sides; a
//! client that goes away during the exchange leaves the server failing cleanly within
//! its timeout; a client whose card the server refuses (this test binary re-run as a
//! second process, speaking write_bw's line and then `vqp_host::cm::connect` with a
//! card of more data QPs than its line asked for) ends with `Error::PeerRefused`
//! carrying the server's reason while the server ends with that reason, exit 2. Every
//! run is bounded in time and has its own port and namespace directory. (A server whose
//! CM never answers and an unreachable address are `host/tests/cm_exchange.rs`'s, in
//! one process.)
//!
//! Needs the example and vqp-rdmacm's library built (`cargo test` builds both; alone:
//! `cargo build --example write_bw -p vqp-rdmacm`).

#[path = "common/live.rs"]
#[allow(dead_code)]
mod live;
#[path = "../softverbs/tests/procs/mod.rs"]
mod procs;

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use live::Live;
use vqp_core::Mode;
use vqp_host::cm;
use vqp_host::loader::cm::RdmaCm;
use vqp_host::sys::Gid;
use vqp_host::{Capabilities, Card, Error, PortAddr, QpAddr};

/// A file cargo built for this profile (`target/<profile>/<rel>`).
fn built(rel: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let p = profile.join(rel);
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --example write_bw -p vqp-rdmacm` (cargo test builds them)",
        p.display()
    );
    p
}

/// vqp-rdmacm's library as cargo built it for this run (a test build leaves it in the
/// profile's deps directory only).
fn rdmacm_lib() -> PathBuf {
    let candidates = vqp_softverbs::cdylib_candidates_of("vqp_rdmacm");
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("vqp-rdmacm's library was not built; looked at {candidates:?} (cargo test builds it)")
        })
}

struct Setup {
    ns: PathBuf,
    env: Vec<(&'static str, OsString)>,
}

impl Setup {
    fn new(test: &str) -> Setup {
        let ns = procs::namespace(test);
        let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
        let env = vec![
            ("VQP_SOFT_DIR", ns.clone().into_os_string()),
            ("VQP_IBVERBS_PATH", lib.into_os_string()),
            ("VQP_RDMACM_PATH", rdmacm_lib().into_os_string()),
        ];
        Setup { ns, env }
    }

    fn env(&self) -> Vec<(&str, &OsStr)> {
        self.env.iter().map(|(k, v)| (*k, v.as_os_str())).collect()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.ns);
    }
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn server(port: u16, cm: bool, timeout: &str) -> Vec<String> {
    let p = port.to_string();
    let mut v = args(&[
        "--device",
        "soft1",
        "--server",
        "--port",
        &p,
        "--timeout",
        timeout,
    ]);
    if cm {
        v.push("--rdma-cm".into());
    }
    v
}

fn client(port: u16, mode: &str, qps: usize) -> Vec<String> {
    args(&[
        "--device",
        "soft0",
        "--connect",
        &format!("127.0.0.1:{port}"),
        "--rdma-cm",
        "--mode",
        mode,
        "--qps",
        &qps.to_string(),
        "--size",
        "256K",
        "--iters",
        "40",
        "--timeout",
        "5",
    ])
}

fn run_ok(test: &str, mode: &str, qps: usize) {
    let setup = Setup::new(test);
    let port = procs::free_port();
    let prog = built("examples/write_bw");
    let (so, co) = procs::run_pair(
        (&prog, &server(port, true, "10")),
        (&prog, &client(port, mode, qps)),
        &setup.env(),
        port,
        Duration::from_secs(120),
    );
    let (s, c) = (
        String::from_utf8_lossy(&so.stdout),
        String::from_utf8_lossy(&co.stdout),
    );
    let ctx = format!("--- server\n{s}--- client\n{c}");
    let header = format!(" vqp write_bw: {qps} data QPs, {mode}, write_imm, ");
    assert!(s.contains(&header) && c.contains(&header), "{ctx}");
    let check = "data check: 40 messages x 262144 bytes, every byte verified on the server: passed";
    assert!(c.contains(check) && s.contains(check), "{ctx}");
    for i in 0..qps {
        assert!(
            c.lines()
                .any(|l| l.trim().starts_with(&format!("data QP {i}: ")) && !l.contains(" 0 WQEs")),
            "data QP {i} carried nothing:\n{ctx}"
        );
    }
}

#[test]
fn dqplb_one_qp_through_the_cm() {
    run_ok("wb_cm_dqplb_1", "dqplb", 1);
}

#[test]
fn dqplb_eight_qps_through_the_cm() {
    run_ok("wb_cm_dqplb_8", "dqplb", 8);
}

#[test]
fn spray_one_qp_through_the_cm() {
    run_ok("wb_cm_spray_1", "spray", 1);
}

#[test]
fn spray_eight_qps_through_the_cm() {
    run_ok("wb_cm_spray_8", "spray", 8);
}

#[test]
fn a_server_without_rdma_cm_refuses_the_client_on_both_sides() {
    let setup = Setup::new("wb_cm_refused");
    let port = procs::free_port();
    let prog = built("examples/write_bw");
    let (so, co) = procs::pair_outputs(
        (&prog, &server(port, false, "10")),
        (&prog, &client(port, "dqplb", 2)),
        &setup.env(),
        port,
        Duration::from_secs(60),
    );
    let (s, c) = (
        String::from_utf8_lossy(&so.stderr),
        String::from_utf8_lossy(&co.stderr),
    );
    let why = "the client connects through the RDMA-CM; this server was not started with --rdma-cm";
    assert_eq!(so.status.code(), Some(2), "{s}");
    assert_eq!(co.status.code(), Some(2), "{c}");
    assert!(s.contains(why), "server: {s}");
    assert!(
        c.contains(&format!("the server refused the run: {why}")),
        "client: {c}"
    );
}

/// A client that proposes a `--rdma-cm` run on the TCP wire, then goes away before any
/// CM request: the server fails within its timeout, cleanly.
#[test]
fn a_client_gone_during_the_exchange_leaves_the_server_failing_within_its_timeout() {
    let setup = Setup::new("wb_cm_gone");
    let port = procs::free_port();
    let prog = built("examples/write_bw");
    let srv = Live::spawn(&prog, &server(port, true, "2"), &setup.env());
    let start = Instant::now();
    while !procs::listening(port) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    {
        let mut s = match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => s,
            Err(e) => {
                let out = srv.finish(Duration::from_secs(5));
                panic!("connect to the server: {e}\n{}", out.describe("server"));
            }
        };
        s.write_all(b"write_bw/2 size=4096 qps=2 max_frag=65536 mode=dqplb opcode=write_imm seed=1 iters=10 rdma_cm=1\n")
            .unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert_eq!(line, "ok\n", "the server refused the line");
        // Gone: closed without a CM request.
    }
    let asked = Instant::now();
    let e = srv.finish(Duration::from_secs(30));
    let ctx = e.describe("server");
    assert_eq!(e.status.and_then(|s| s.code()), Some(2), "{ctx}");
    assert!(asked.elapsed() < Duration::from_secs(10), "{ctx}");
    assert!(
        e.stderr
            .iter()
            .any(|l| l.contains("--rdma-cm") && l.contains("nothing within 2000 ms")),
        "{ctx}"
    );
}

/// Fail-over with fail-back on QPs the CM connected (both sides in one process on
/// in-process softverbs, the CM through vqp-rdmacm): data QP 1 fails mid-run, its
/// fragments go again on the others, the client replaces it with a fresh pair (the
/// fail-back messages ride the CM-made QPs), and every byte is verified.
#[test]
fn fail_back_works_on_qps_the_cm_connected() {
    let setup = Setup::new("wb_cm_failback");
    let prog = built("examples/write_bw");
    let out = std::process::Command::new(&prog)
        .args([
            "--rdma-cm",
            "--failover",
            "--qps",
            "4",
            "--size",
            "65537",
            "--duration",
            "2",
            "--inject",
            "500ms:fail-qp=1",
        ])
        .envs(setup.env())
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{o}\n{e}");
    assert!(
        o.contains("1 QP failures survived") && o.contains("1 restored; 4 of 4 data QPs healthy"),
        "{o}"
    );
    assert!(
        o.contains("every byte verified on the server: passed"),
        "{o}"
    );
}

/// Set in the environment of this binary re-run as the refused client
/// ([`refused_card_client`]): the write_bw server's port.
const ENV_REFUSED_CLIENT: &str = "VQP_WB_CM_REFUSED_CLIENT";

/// The line the refused client sends: 2 data QPs, DQPLB.
const REFUSED_LINE: &str =
    "write_bw/2 size=65536 qps=2 max_frag=65536 mode=dqplb opcode=write_imm seed=1 iters=10 rdma_cm=1\n";

/// A DQPLB card of `n` data QPs with the server's depths and fragment size (the QP
/// numbers are never used: the card is refused before any QP is connected).
fn card(n: u32) -> Card {
    Card {
        mode: Mode::Dqplb,
        caps: Capabilities::supported(),
        required: Capabilities::required_for(Mode::Dqplb),
        max_frag: 65536,
        max_outstanding: 64,
        recv_depth: 64,
        window: 1 << 16,
        init_seq: 1,
        ports: vec![PortAddr {
            mtu: 4096,
            lid: 1,
            gid: Gid::from_bytes([0; 16]),
        }],
        data: (0..n)
            .map(|i| QpAddr {
                qpn: 0x100 + i,
                psn: 0x10 + i,
                port: 0,
            })
            .collect(),
        notify: None,
    }
}

/// The refused client's half, run only in the re-run process: the write_bw line for 2
/// data QPs on TCP, then a card of 3 through the CM. Prints `refused: REASON` for
/// `Error::PeerRefused`, `other: ERROR` for anything else.
#[test]
#[ignore = "the second process of a_card_the_server_refuses_ends_both_processes_with_their_errors"]
fn refused_card_client() {
    let Some(port) = std::env::var_os(ENV_REFUSED_CLIENT) else {
        return;
    };
    let port: u16 = port.to_str().unwrap().parse().unwrap();
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    (&s).write_all(REFUSED_LINE.as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert_eq!(line, "ok\n", "the server refused the line");
    let rdmacm = RdmaCm::load().expect("vqp-rdmacm loads (VQP_RDMACM_PATH)");
    let to = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    let r = cm::connect(&rdmacm, to, &card(3), Duration::from_secs(10));
    let took = started.elapsed().as_millis();
    match r {
        Err(Error::PeerRefused { reason }) => println!("refused after {took} ms: {reason}"),
        Err(e) => println!("other after {took} ms: {e}"),
        Ok(_) => println!("other after {took} ms: the card was accepted"),
    }
    // The TCP connection stays open until the CM's answer came.
    drop(s);
}

/// A client whose card the server does not agree with (3 data QPs where its line and
/// the server's card have 2), as a process of its own: the server refuses it through
/// the CM and fails with the card error, exit 2; the client ends with
/// `Error::PeerRefused` carrying the server's reason; both well within their timeouts.
#[test]
fn a_card_the_server_refuses_ends_both_processes_with_their_errors() {
    let setup = Setup::new("wb_cm_card_refused");
    let port = procs::free_port();
    let prog = built("examples/write_bw");
    let srv = Live::spawn(&prog, &server(port, true, "10"), &setup.env());
    let start = Instant::now();
    while !procs::listening(port) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let port_s = port.to_string();
    let mut env = setup.env();
    env.push((ENV_REFUSED_CLIENT, OsStr::new(&port_s)));
    let client = Live::spawn(
        &std::env::current_exe().unwrap(),
        &args(&[
            "--exact",
            "refused_card_client",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]),
        &env,
    );
    let c = client.finish(Duration::from_secs(30));
    let s = srv.finish(Duration::from_secs(30));
    let ctx = format!("{}\n{}", c.describe("client"), s.describe("server"));
    assert!(start.elapsed() < Duration::from_secs(30), "{ctx}");
    assert_eq!(c.status.and_then(|x| x.code()), Some(0), "{ctx}");
    let reason = c
        .stdout
        .lines()
        .find_map(|l| l.split_once("refused after ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("the client did not end with PeerRefused:\n{ctx}"));
    let (_, reason) = reason.split_once(" ms: ").unwrap();
    let reason = reason.trim_end();
    assert!(reason.contains("data QP"), "{ctx}");
    assert_eq!(s.status.and_then(|x| x.code()), Some(2), "{ctx}");
    assert!(
        s.stderr
            .iter()
            .any(|l| l.contains("--rdma-cm") && l.contains(reason)),
        "the server did not fail with the reason the client got:\n{ctx}"
    );
}
