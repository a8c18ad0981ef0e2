//! The main job across processes: `write_bw --device soft1 --server` in one process and
//! `write_bw --device soft0 --connect 127.0.0.1:PORT` in another, over the softverbs
//! cdylib loaded both ways write_bw can load a verbs library — named by
//! `VQP_IBVERBS_PATH`, or found as `libibverbs.so.1` on `LD_LIBRARY_PATH` (its default
//! `dlopen`) — in both modes, all three opcodes and 1, 2 and 8 data QPs, every byte
//! verified; and the failures: the server or the client killed mid-transfer, a data QP
//! failing mid-transfer (both sides then report one count), and a client stopped
//! mid-run, which must cost the server no busy core. Every run is bounded in time (both processes are killed past
//! it), uses its own TCP port and namespace directory (removed at the end). No system
//! package is needed.
//!
//! Needs the example built (`cargo test` builds examples; alone:
//! `cargo build --example write_bw`).

#[path = "common/live.rs"]
mod live;
#[path = "../softverbs/tests/procs/mod.rs"]
mod procs;
#[path = "../softverbs/tests/system/mod.rs"]
mod system;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use live::{Ended, Live};

fn write_bw() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|d| d.parent()).unwrap();
    let p = profile.join("examples").join("write_bw");
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --example write_bw` (cargo test builds it)",
        p.display()
    );
    p
}

/// How write_bw finds the cdylib.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// `VQP_IBVERBS_PATH=<cdylib>`.
    EnvPath,
    /// `LD_LIBRARY_PATH=<dir>` with `<dir>/libibverbs.so.1` → the cdylib, and
    /// `VQP_IBVERBS_PATH` empty: write_bw's default `dlopen("libibverbs.so.1")`.
    LibraryPath,
}

/// One test's surroundings: its namespace directory and library directory, removed
/// when dropped, and the environment both processes get.
struct Setup {
    ns: PathBuf,
    _lib_dir: system::LibDir,
    env: Vec<(&'static str, OsString)>,
}

impl Setup {
    fn new(test: &str, load: Load) -> Setup {
        let ns = procs::namespace(test);
        let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
        let lib_dir = system::LibDir::new(&lib, test);
        let mut env = vec![("VQP_SOFT_DIR", ns.clone().into_os_string())];
        match load {
            Load::EnvPath => env.push(("VQP_IBVERBS_PATH", lib.into_os_string())),
            Load::LibraryPath => {
                env.push(("VQP_IBVERBS_PATH", OsString::new()));
                env.push(("LD_LIBRARY_PATH", lib_dir.0.clone().into_os_string()));
            }
        }
        Setup {
            ns,
            _lib_dir: lib_dir,
            env,
        }
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

fn server_args(port: u16) -> Vec<String> {
    ["--device", "soft1", "--server", "--port", &port.to_string()]
        .map(String::from)
        .to_vec()
}

fn client_args(port: u16, mode: &str, opcode: &str, qps: usize, run: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--device",
        "soft0",
        "--connect",
        &format!("127.0.0.1:{port}"),
        "--mode",
        mode,
        "--opcode",
        opcode,
        "--size",
        "256K",
        "--qps",
        &qps.to_string(),
    ]
    .map(String::from)
    .to_vec();
    v.extend(run.iter().map(|s| s.to_string()));
    v
}

/// A successful run: 40 messages of 256 KiB, checked on both sides' reports.
fn run_ok(test: &str, load: Load, mode: &str, opcode: &str, qps: usize, port: u16) {
    let setup = Setup::new(test, load);
    let prog = write_bw();
    let (so, co) = procs::run_pair(
        (&prog, &server_args(port)),
        (
            &prog,
            &client_args(port, mode, opcode, qps, &["--iters", "40"]),
        ),
        &setup.env(),
        port,
        Duration::from_secs(120),
    );
    let (s, c) = (
        String::from_utf8_lossy(&so.stdout),
        String::from_utf8_lossy(&co.stdout),
    );
    let ctx = format!("{load:?}\n--- server\n{s}--- client\n{c}");
    let header = format!(" vqp write_bw: {qps} data QPs, {mode}, {opcode}, ");
    assert!(
        s.contains(&header) && c.contains(&header),
        "no header {header:?}:\n{ctx}"
    );
    let source = match load {
        Load::EnvPath => format!(
            "libibverbs via dlopen {}",
            vqp_softverbs::find_cdylib().unwrap().display()
        ),
        Load::LibraryPath => "libibverbs via dlopen libibverbs.so.1".into(),
    };
    assert!(c.contains(&source), "not loaded as {source:?}:\n{ctx}");
    let row = c
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .nth(1)
        .unwrap_or_else(|| panic!("no result table:\n{ctx}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.get(..2), Some(&["262144", "40"][..]), "{ctx}");
    let mut carried = 0;
    for i in 0..qps {
        let (wqes, bytes) = c
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("data QP {i}: ")))
            .and_then(|w| w.strip_suffix(" bytes")?.split_once(" WQEs, "))
            .and_then(|(n, b)| Some((n.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
            .unwrap_or_else(|| panic!("no WQE and byte counts of data QP {i}:\n{ctx}"));
        assert!(wqes > 0, "data QP {i} carried nothing:\n{ctx}");
        carried += bytes;
    }
    assert_eq!(carried, 40 * 262144, "bytes over the data QPs:\n{ctx}");
    let place = if opcode == "read" {
        "on the client (reader)"
    } else {
        "on the server"
    };
    let check =
        format!("data check: 40 messages x 262144 bytes, every byte verified {place}: passed");
    assert!(c.contains(&check), "{check:?} missing:\n{ctx}");
    if opcode == "read" {
        assert!(
            s.contains("the client read 40 messages and checked them"),
            "{ctx}"
        );
    } else {
        assert!(
            s.contains(&check),
            "{check:?} missing on the server:\n{ctx}"
        );
    }
}

/// One test per case.
macro_rules! ok_runs {
    ($($name:ident: $load:ident, $mode:literal, $opcode:literal, $qps:literal;)*) => {$(
        #[test]
        fn $name() {
            run_ok(stringify!($name), Load::$load, $mode, $opcode, $qps, procs::free_port());
        }
    )*};
}

ok_runs! {
    spray_write: EnvPath, "spray", "write", 2;
    spray_write_imm: EnvPath, "spray", "write_imm", 2;
    spray_read: EnvPath, "spray", "read", 2;
    dqplb_write: EnvPath, "dqplb", "write", 2;
    dqplb_write_imm: EnvPath, "dqplb", "write_imm", 2;
    dqplb_read: EnvPath, "dqplb", "read", 2;
    spray_write_as_libibverbs_so_1: LibraryPath, "spray", "write", 2;
    spray_write_imm_as_libibverbs_so_1: LibraryPath, "spray", "write_imm", 2;
    spray_read_as_libibverbs_so_1: LibraryPath, "spray", "read", 2;
    dqplb_write_as_libibverbs_so_1: LibraryPath, "dqplb", "write", 2;
    dqplb_write_imm_as_libibverbs_so_1: LibraryPath, "dqplb", "write_imm", 2;
    dqplb_read_as_libibverbs_so_1: LibraryPath, "dqplb", "read", 2;
    spray_one_qp: EnvPath, "spray", "write_imm", 1;
    dqplb_one_qp: EnvPath, "dqplb", "write_imm", 1;
    spray_eight_qps: EnvPath, "spray", "write_imm", 8;
    dqplb_eight_qps: EnvPath, "dqplb", "read", 8;
}

/// How long a side may take to notice its peer's or its QP's failure and exit.
const NOTICE: Duration = Duration::from_secs(30);

/// Words of which a failure line names at least one.
const FAILURE_WORDS: &[&str] = &[
    "fail",
    "peer",
    "disconnect",
    "closed the connection",
    "went away",
    "no progress",
    "silent",
    "error",
];

/// The checks of a side that failed cleanly, in one place: it exited by itself within
/// [`NOTICE`] (no hang, no signal) with exit code 2, wrote exactly one error line
/// (`write_bw: …`, other than the server's "waiting for a client") naming the failure,
/// and claimed no passed data check.
fn assert_failed_cleanly(e: &Ended, who: &str) {
    let ctx = e.describe(who);
    let status = e
        .status
        .unwrap_or_else(|| panic!("{who} did not exit within {NOTICE:?} of the failure:\n{ctx}"));
    assert_eq!(status.code(), Some(2), "{who}: exit code:\n{ctx}");
    let errors: Vec<&String> = e
        .stderr
        .iter()
        .filter(|l| l.starts_with("write_bw: ") && !l.contains("waiting for a client"))
        .collect();
    assert_eq!(errors.len(), 1, "{who}: one error line expected:\n{ctx}");
    let line = errors[0].to_lowercase();
    assert!(
        FAILURE_WORDS.iter().any(|w| line.contains(w)),
        "{who}: the error line does not name the failure:\n{ctx}"
    );
    assert!(!e.stdout.contains(": passed"), "{who}:\n{ctx}");
}

/// A progress line with at least one message done.
fn progressed(l: &str) -> bool {
    l.trim_start()
        .strip_prefix("... ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|n| n > 0)
}

/// Which side dies, or what fails.
#[derive(Clone, Copy, Debug)]
enum Fault {
    ServerKilled,
    ClientKilled,
    /// The client's `VQP_SOFT_FAIL_QP` rule.
    QpFails(&'static str),
}

/// A 60-second run in `mode` that `fault` interrupts once data moves.
fn run_faulty(test: &str, mode: &str, fault: Fault, port: u16) {
    let setup = Setup::new(test, Load::EnvPath);
    let prog = write_bw();
    let env = setup.env();
    let mut server = Live::spawn(&prog, &server_args(port), &env);
    server.listen(port, Duration::from_secs(30));
    let mut cenv = env.clone();
    if let Fault::QpFails(rule) = fault {
        cenv.push(("VQP_SOFT_FAIL_QP", OsStr::new(rule)));
    }
    let args = client_args(port, mode, "write_imm", 4, &["--duration", "60"]);
    let client = Live::spawn(&prog, &args, &cenv);
    let (mut server, mut client) = (server, client);
    match fault {
        Fault::ServerKilled | Fault::ClientKilled => {
            assert!(
                client.wait_line(Duration::from_secs(30), progressed),
                "no data moved:\n{}",
                client.finish(Duration::ZERO).describe("client")
            );
            let start = Instant::now();
            if let Fault::ServerKilled = fault {
                server.kill();
                let c = client.finish(NOTICE);
                assert_failed_cleanly(&c, "client");
            } else {
                client.kill();
                let s = server.finish(NOTICE);
                assert_failed_cleanly(&s, "server");
            }
            assert!(start.elapsed() < NOTICE);
        }
        Fault::QpFails(_) => {
            let c = client.finish(NOTICE);
            assert_failed_cleanly(&c, "client");
            assert!(
                c.stderr.iter().any(|l| progressed(l))
                    || c.stderr.iter().any(|l| l.contains("after ")),
                "the QP failed before any data moved:\n{}",
                c.describe("client")
            );
            let s = server.finish(NOTICE);
            assert_failed_cleanly(&s, "server");
            // The two processes report the one count of the failed run.
            let (cc, sc) = (failure_count(&c), failure_count(&s));
            assert!(
                cc.is_some() && cc == sc,
                "the two sides count the failed run differently:\n{}\n{}",
                c.describe("client"),
                s.describe("server")
            );
        }
    }
}

/// The count of a failed run in a side's error line: `N messages (of … were flushed`.
fn failure_count(e: &Ended) -> Option<String> {
    let line = e.stderr.iter().find(|l| l.contains(" messages (of "))?;
    let end = line.find(" were flushed")? + " were flushed".len();
    let of = line[..end].rfind(" messages (of ")?;
    let start = line[..of].rfind(' ')? + 1;
    Some(line[start..end].to_string())
}

#[test]
fn server_killed_mid_transfer_dqplb() {
    run_faulty(
        "server_killed_mid_transfer_dqplb",
        "dqplb",
        Fault::ServerKilled,
        procs::free_port(),
    );
}

#[test]
fn server_killed_mid_transfer_spray() {
    run_faulty(
        "server_killed_mid_transfer_spray",
        "spray",
        Fault::ServerKilled,
        procs::free_port(),
    );
}

#[test]
fn client_killed_mid_transfer_dqplb() {
    run_faulty(
        "client_killed_mid_transfer_dqplb",
        "dqplb",
        Fault::ClientKilled,
        procs::free_port(),
    );
}

#[test]
fn client_killed_mid_transfer_spray() {
    run_faulty(
        "client_killed_mid_transfer_spray",
        "spray",
        Fault::ClientKilled,
        procs::free_port(),
    );
}

#[test]
fn data_qp_failing_mid_transfer_dqplb() {
    run_faulty(
        "data_qp_failing_mid_transfer_dqplb",
        "dqplb",
        Fault::QpFails("nth=2:200"),
        procs::free_port(),
    );
}

#[test]
fn data_qp_failing_mid_transfer_spray() {
    run_faulty(
        "data_qp_failing_mid_transfer_spray",
        "spray",
        Fault::QpFails("nth=2:200"),
        procs::free_port(),
    );
}

/// CPU time (user and system, all threads) process `pid` has used.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // After the command name (in parentheses, possibly with spaces): fields 3 on;
    // utime and stime are fields 14 and 15, in clock ticks.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 2..]
        .split(' ')
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(100);
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {pid} failed");
}

/// A client stopped mid-run (SIGSTOP) for two seconds costs the server no busy core:
/// the server process uses under a tenth of a core meanwhile (polling without pause it
/// takes all the core the machine gives it), and once the client resumes the run goes
/// on to its end, every byte verified.
#[test]
fn a_stopped_client_costs_the_server_no_busy_core() {
    let setup = Setup::new(
        "a_stopped_client_costs_the_server_no_busy_core",
        Load::EnvPath,
    );
    let prog = write_bw();
    let env = setup.env();
    let port = procs::free_port();
    // Deadlines far beyond the stop: neither side may give up on the other.
    let mut sargs = server_args(port);
    sargs.extend(["--timeout", "60"].map(String::from));
    let mut server = Live::spawn(&prog, &sargs, &env);
    server.listen(port, Duration::from_secs(30));
    let run = ["--duration", "3", "--timeout", "60"];
    let mut client = Live::spawn(
        &prog,
        &client_args(port, "dqplb", "write_imm", 2, &run),
        &env,
    );
    assert!(
        client.wait_line(Duration::from_secs(30), progressed),
        "no data moved:\n{}",
        client.finish(Duration::ZERO).describe("client")
    );
    let (spid, cpid) = (server.pid(), client.pid());
    signal(cpid, "STOP");
    // Past the server's spin before it sleeps (10 ms), with room to spare.
    std::thread::sleep(Duration::from_millis(200));
    let (used, start) = (cpu_time(spid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (used, took) = (cpu_time(spid) - used, start.elapsed());
    signal(cpid, "CONT");
    let c = client.finish(NOTICE);
    let s = server.finish(NOTICE);
    assert!(
        used < took / 10,
        "the server used {used:?} of CPU in the {took:?} its client was stopped"
    );
    for (e, who) in [(&c, "client"), (&s, "server")] {
        assert_eq!(
            e.status.and_then(|s| s.code()),
            Some(0),
            "{}",
            e.describe(who)
        );
    }
    assert!(c.stdout.contains(": passed"), "{}", c.describe("client"));
}
