//! Between two machines — two network namespaces joined by a veth pair, made with
//! `scripts/hosts.sh` — the TCP baselines the targets are measured against, in
//! one run and one table with the softverbs rows beside them:
//!
//! - one TCP stream of 1 MiB writes (bytes per second at the receiver's acknowledgement
//!   of the last byte), beside 1 MiB RDMA WRITE bandwidth (target ≥ 70% of it);
//! - an 8-byte TCP ping-pong (`TCP_NODELAY`), half the round trip, beside an 8-byte
//!   SEND ping-pong (target ≤ 1.5× it): once with blocking reads (each side sleeps in
//!   the kernel until the message comes) and once with both sides spinning on
//!   non-blocking reads, as `ib_send_lat` spins on its completion queue.
//!
//! The softverbs rows run Debian's perftest, unmodified, over softverbs' route between
//! machines (the cdylib preloaded, each host with its own softverbs namespace
//! directory and soft0 bound to its veth end): `ib_write_bw -s 1048576 -x 1 -t 4` (at
//! most 4 WQEs in flight; perftest's default of 128 completes as well, the route
//! keeping a window per QP, at the same rate within the scatter), and
//! `ib_send_lat -s 8 -x 1` (perftest's own half round trip, its typical and average);
//! and vqp's `write_bw --qps 4 --size 1M` (release build of the example, built apart:
//! `cargo build --release --example write_bw`). A row that cannot run (perftest or the
//! example missing) or fails says so in place of its figure.
//!
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
    let soft = softverbs_rows(&prefix, runs());
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
        .env(SOFT_ROWS, soft.join("\n"))
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

/// The softverbs figures, one line per row, from the bench's run to the client's table.
const SOFT_ROWS: &str = "VQP_MACHINES_BENCH_SOFT";

/// Runs of each workload (`VQP_MACHINES_BENCH_RUNS`, 3 by default).
fn runs() -> usize {
    std::env::var("VQP_MACHINES_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// A program from Debian's perftest, if installed.
fn perftest(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Runs `server` on host 1 and, once it listens on `port`, `client` on host 0 (each
/// killed after 120 s): the client's output, or why it has none.
fn pair(prefix: &str, server: &[String], client: &[String], port: u16) -> Result<String, String> {
    let limit = Duration::from_secs(120);
    let mut srv = hosts(prefix)
        .args(["exec", "1", "--", "timeout", "120"])
        .args(server)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("server: {e}"))?;
    // The server listens in host 1's namespace: look there.
    let ns = format!("{prefix}-h1");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "ss", "-Htln"])
            .output()
            .map_err(|e| format!("ss: {e}"))?;
        if String::from_utf8_lossy(&out.stdout).contains(&format!(":{port} ")) {
            break;
        }
        if Instant::now() > deadline || srv.try_wait().ok().flatten().is_some() {
            let _ = srv.kill();
            let _ = srv.wait();
            return Err("the server never listened".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = hosts(prefix)
        .args(["exec", "0", "--", "timeout", &limit.as_secs().to_string()])
        .args(client)
        .output()
        .map_err(|e| format!("client: {e}"))?;
    // The server has ended (or is ended now): its last word, for a failed run.
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = srv.kill();
    let srv = srv.wait_with_output().map_err(|e| format!("server: {e}"))?;
    let server_said = String::from_utf8_lossy(&srv.stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        // The program's last word: what ended it.
        let why = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.starts_with('-'))
            .unwrap_or("")
            .trim()
            .to_string();
        Err(format!(
            "failed ({}: {why}; the server: {server_said})",
            out.status
        ))
    }
}

/// The numbers of perftest's result row (after its `#bytes` header).
fn perftest_row(out: &str) -> Option<Vec<f64>> {
    let mut lines = out.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    lines
        .next()?
        .split_whitespace()
        .map(|w| w.parse::<f64>().ok())
        .collect()
}

/// The softverbs rows, each `runs` runs: 1 MiB RDMA WRITE bandwidth (GB/s), 8 B SEND
/// half round trip (µs, typical (average)), `write_bw --qps 4` (GB/s).
fn softverbs_rows(prefix: &str, runs: usize) -> [String; 3] {
    let Some(lib) = vqp_softverbs::find_cdylib() else {
        let no = "— (the softverbs cdylib is not built)".to_string();
        return [no.clone(), no.clone(), no];
    };
    let preload = format!("LD_PRELOAD={}", lib.display());
    let mut port = 18620u16;
    let mut perf = |name: &str, args: &[&str], row: fn(&[f64]) -> String| -> String {
        let Some(prog) = perftest(name) else {
            return format!("— ({name} missing: Debian's perftest)");
        };
        let mut figures = Vec::new();
        for _ in 0..runs {
            port += 1;
            let mut side: Vec<String> = ["env", &preload].iter().map(|s| s.to_string()).collect();
            side.push(prog.display().to_string());
            side.extend(args.iter().map(|s| s.to_string()));
            side.extend(["-p".to_string(), port.to_string()]);
            let mut client = side.clone();
            client.push(SERVER.split(':').next().unwrap().to_string());
            figures.push(match pair(prefix, &side, &client, port) {
                Ok(out) => perftest_row(&out).map_or("no result row".into(), |r| row(&r)),
                Err(e) => e,
            });
        }
        list(&figures)
    };
    // perftest's MB is 2^20 bytes.
    let bw = perf(
        "ib_write_bw",
        &[
            "-d", "soft0", "-x", "1", "-s", "1048576", "-n", "1000", "-t", "4",
        ],
        |r| format!("{:.2}", r[3] * MIB as f64 / 1e9),
    );
    let lat = perf(
        "ib_send_lat",
        &["-d", "soft0", "-x", "1", "-s", "8", "-n", "10000"],
        |r| format!("{:.1} ({:.1})", r[4], r[5]),
    );
    let exe = std::env::current_exe().unwrap();
    let write_bw = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("examples").join("write_bw"))
        .filter(|p| p.is_file());
    let wb = match write_bw {
        None => "— (build it: cargo build --release --example write_bw)".to_string(),
        Some(prog) => {
            let mut figures = Vec::new();
            for _ in 0..runs {
                port += 1;
                let base = vec![
                    "env".to_string(),
                    format!("VQP_IBVERBS_PATH={}", lib.display()),
                    prog.display().to_string(),
                    "--device".into(),
                    "soft0".into(),
                ];
                let server = [
                    base.clone(),
                    vec!["--server".into(), "--port".into(), port.to_string()],
                ]
                .concat();
                let to = format!("{}:{port}", SERVER.split(':').next().unwrap());
                let client = [
                    base,
                    [
                        "--connect",
                        &to,
                        "--qps",
                        "4",
                        "--size",
                        "1M",
                        "--iters",
                        "1000",
                        "--json",
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                ]
                .concat();
                figures.push(match pair(prefix, &server, &client, port) {
                    Ok(out) => out
                        .lines()
                        .find(|l| l.starts_with('{'))
                        .and_then(|j| {
                            let at = j.find("\"bw_avg_mb_s\":")? + 14;
                            j[at..].split(',').next()?.parse::<f64>().ok()
                        })
                        .map_or("no figure".into(), |v| {
                            format!("{:.2}", v * MIB as f64 / 1e9)
                        }),
                    Err(e) => e,
                });
            }
            list(&figures)
        }
    };
    [bw, lat, wb]
}

/// Host 1: one connection at a time; its first byte says what it is: `B` a stream to
/// read to its end and acknowledge with the count, `P` a ping-pong of 8-byte messages
/// with blocking reads, `S` the same spinning on non-blocking reads.
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
            b'P' | b'S' => {
                if kind[0] == b'S' {
                    s.set_nonblocking(true).unwrap();
                }
                let mut m = [0u8; 8];
                while read_message(&mut s, &mut m) {
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

/// Fills `m` from `s`, blocking or spinning as the socket was set: whether it was
/// filled (false at the end of the stream or on an error).
fn read_message(s: &mut TcpStream, m: &mut [u8]) -> bool {
    let mut got = 0;
    while got < m.len() {
        match s.read(&mut m[got..]) {
            Ok(0) => return false,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// One ping-pong run, blocking (`P`) or spinning (`S`): (median, mean) half round
/// trip in µs.
fn pingpong(kind: u8) -> (f64, f64) {
    let mut s = open(kind);
    if kind == b'S' {
        s.set_nonblocking(true).unwrap();
    }
    let mut m = [7u8; 8];
    for _ in 0..1_000 {
        s.write_all(&m).unwrap();
        assert!(read_message(&mut s, &mut m), "the ping-pong ended");
    }
    let mut half = Vec::with_capacity(ROUNDS);
    let t = Instant::now();
    for _ in 0..ROUNDS {
        let r = Instant::now();
        s.write_all(&m).unwrap();
        assert!(read_message(&mut s, &mut m), "the ping-pong ended");
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
    let runs = runs();
    let soft = std::env::var(SOFT_ROWS).unwrap_or_default();
    let soft: Vec<&str> = soft.lines().collect();
    let soft = |i: usize| soft.get(i).copied().unwrap_or("—");
    let (mut bw, mut lat, mut spin) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        bw.push(format!("{:.2}", bulk() / 1e9));
        let (p50, mean) = pingpong(b'P');
        lat.push(format!("{p50:.1} ({mean:.1})"));
        let (p50, mean) = pingpong(b'S');
        spin.push(format!("{p50:.1} ({mean:.1})"));
    }
    let link = std::env::var("VQP_MACHINES_BENCH_LINK").unwrap_or_default();
    println!("Two network namespaces, one veth pair (MTU 1500, {link}), {runs} runs each:");
    println!();
    println!("| workload | softverbs | TCP | softverbs / TCP | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| 1 MiB RDMA WRITE bandwidth (`ib_write_bw -t 4`); one TCP stream of 1 MiB writes, GB/s | {} | {} | | ≥ 0.70 |",
        soft(0),
        list(&bw)
    );
    println!(
        "| 8 B SEND ping-pong (`ib_send_lat`); 8 B TCP ping-pong, blocking reads, half round trip, µs: median (mean) | {} | {} | | ≤ 1.5 |",
        soft(1),
        list(&lat)
    );
    println!(
        "| the same; the TCP ping-pong spinning on non-blocking reads | {} | {} | | ≤ 1.5 |",
        soft(1),
        list(&spin)
    );
    println!(
        "| `write_bw --qps 4`, 1 MiB messages, GB/s | {} | | | |",
        soft(2)
    );
}
