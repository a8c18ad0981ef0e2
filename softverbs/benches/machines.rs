//! Between two machines — two network namespaces joined by a veth pair, made with
//! `scripts/hosts.sh` — the TCP baselines the targets are measured against, in
//! one run and one table with the softverbs rows beside them:
//!
//! - one TCP stream of 1 MiB writes (bytes per second at the receiver's acknowledgement
//!   of the last byte), beside 1 MiB RDMA WRITE bandwidth (target ≥ 70% of it);
//! - an 8-byte TCP ping-pong (`TCP_NODELAY`, blocking reads), half the round trip,
//!   beside an 8-byte SEND ping-pong (target ≤ 1.5× it).
//!
//! The softverbs rows stay empty until the route between machines carries requests.
//! Needs root and iproute2; without them it says so on one line and exits. Figures:
//! docs/benchmarks.md, "Between machines".
//!
//! `cargo bench -p vqp-softverbs --bench machines` (`VQP_MACHINES_BENCH_RUNS`, 3 by
//! default, runs of each workload; `VQP_MACHINES_BENCH_RATE`, e.g. `1gbit`, puts a
//! `tc tbf` on both ends of the veth first).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Which part this process plays (set when the bench re-runs itself in a namespace).
const ROLE: &str = "VQP_MACHINES_BENCH_ROLE";
/// The server's address: host 1's first address (`hosts.sh`).
const SERVER: &str = "192.0.2.2:18610";
const MIB: usize = 1 << 20;
/// Bytes per bulk run.
const BULK_BYTES: usize = 1 << 30;
/// Round trips per ping-pong run (after 1,000 unmeasured).
const ROUNDS: usize = 20_000;

fn script() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/hosts.sh"))
}

/// `hosts.sh` with this run's prefix and directory.
fn hosts(prefix: &str) -> Command {
    let mut c = Command::new(script());
    c.env("VQP_HOSTS_PREFIX", prefix)
        .env("VQP_HOSTS_DIR", std::env::temp_dir().join(prefix));
    c
}

/// Removes the hosts when dropped, also when the bench panics.
struct Hosts(String);

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = hosts(&self.0).arg("down").status();
    }
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return serve(),
        Ok("client") => return client(),
        _ => {}
    }
    // SAFETY: `geteuid` has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !root || !ip {
        println!("skipped the machines bench: network namespaces need root and iproute2");
        return;
    }
    let prefix = format!("vqpb{}", std::process::id() % 1_000_000);
    let ok = hosts(&prefix)
        .arg("up")
        .stdout(Stdio::null())
        .status()
        .expect("hosts.sh");
    assert!(ok.success(), "hosts.sh up failed");
    let _guard = Hosts(prefix.clone());
    let rate = std::env::var("VQP_MACHINES_BENCH_RATE").ok();
    if let Some(r) = &rate {
        for host in ["0", "1"] {
            let ok = hosts(&prefix)
                .args(["rate", host, "0", r])
                .status()
                .unwrap();
            assert!(ok.success(), "hosts.sh rate {host} 0 {r} failed");
        }
    }
    let exe = std::env::current_exe().unwrap();
    let mut server = hosts(&prefix)
        .args(["exec", "1", "--"])
        .arg(&exe)
        .env(ROLE, "server")
        .stdout(Stdio::null())
        .spawn()
        .expect("the server");
    let out = hosts(&prefix)
        .args(["exec", "0", "--"])
        .arg(&exe)
        .env(ROLE, "client")
        .env(
            "VQP_MACHINES_BENCH_LINK",
            rate.as_deref().unwrap_or("unlimited"),
        )
        .output()
        .expect("the client");
    let _ = server.kill();
    let _ = server.wait();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the client failed: {}", out.status);
}

/// Host 1: one connection at a time; its first byte says what it is: `B` a stream to
/// read to its end and acknowledge with the count, `P` a ping-pong of 8-byte messages.
fn serve() {
    let l = TcpListener::bind(SERVER).expect("listen");
    let mut buf = vec![0u8; MIB];
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        s.set_nodelay(true).unwrap();
        let mut kind = [0u8; 1];
        if s.read_exact(&mut kind).is_err() {
            continue;
        }
        match kind[0] {
            b'B' => {
                let mut n = 0u64;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k as u64,
                    }
                }
                let _ = s.write_all(&n.to_le_bytes());
            }
            b'P' => {
                let mut m = [0u8; 8];
                while s.read_exact(&mut m).is_ok() {
                    if s.write_all(&m).is_err() {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
}

/// A connection to the server (retried while it starts), introduced as `kind`.
fn open(kind: u8) -> TcpStream {
    let to: SocketAddr = SERVER.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("connect to {to}: {e}"),
        }
    };
    s.set_nodelay(true).unwrap();
    s.write_all(&[kind]).unwrap();
    s
}

/// One stream of [`BULK_BYTES`] in 1 MiB writes: bytes per second until the server
/// acknowledged them all.
fn bulk() -> f64 {
    let buf = vec![0x5au8; MIB];
    let mut s = open(b'B');
    let t = Instant::now();
    for _ in 0..BULK_BYTES / MIB {
        s.write_all(&buf).unwrap();
    }
    s.shutdown(Shutdown::Write).unwrap();
    let mut n = [0u8; 8];
    s.read_exact(&mut n).unwrap();
    let took = t.elapsed();
    assert_eq!(u64::from_le_bytes(n), BULK_BYTES as u64, "bytes received");
    BULK_BYTES as f64 / took.as_secs_f64()
}

/// One ping-pong run: (median, mean) half round trip in µs.
fn pingpong() -> (f64, f64) {
    let mut s = open(b'P');
    let mut m = [7u8; 8];
    for _ in 0..1_000 {
        s.write_all(&m).unwrap();
        s.read_exact(&mut m).unwrap();
    }
    let mut half = Vec::with_capacity(ROUNDS);
    let t = Instant::now();
    for _ in 0..ROUNDS {
        let r = Instant::now();
        s.write_all(&m).unwrap();
        s.read_exact(&mut m).unwrap();
        half.push(r.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    let mean = t.elapsed().as_secs_f64() * 1e6 / 2.0 / ROUNDS as f64;
    half.sort_by(f64::total_cmp);
    (half[ROUNDS / 2], mean)
}

fn list(v: &[String]) -> String {
    v.join(", ")
}

/// Host 0: the runs, then the table.
fn client() {
    let runs: usize = std::env::var("VQP_MACHINES_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let (mut bw, mut lat) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        bw.push(format!("{:.2}", bulk() / 1e9));
        let (p50, mean) = pingpong();
        lat.push(format!("{p50:.1} ({mean:.1})"));
    }
    let link = std::env::var("VQP_MACHINES_BENCH_LINK").unwrap_or_default();
    println!("Two network namespaces, one veth pair (MTU 1500, {link}), {runs} runs each:");
    println!();
    println!("| workload | softverbs | TCP | softverbs / TCP | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| 1 MiB RDMA WRITE bandwidth; one TCP stream of 1 MiB writes, GB/s | — | {} | — | ≥ 0.70 |",
        list(&bw)
    );
    println!(
        "| 8 B SEND ping-pong; 8 B TCP ping-pong, half round trip, µs: median (mean) | — | {} | — | ≤ 1.5 |",
        list(&lat)
    );
    println!("| `write_bw --qps 4`, 1 MiB messages, GB/s | — | | | |");
    println!();
    println!("softverbs: — until the route between machines carries requests.");
}
