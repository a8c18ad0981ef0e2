//! Running programs as two processes over the provider: a server, then a client once
//! the server listens; each bounded in time (killed when late), each test in its own
//! namespace directory.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// A fresh namespace directory for one test.
pub fn namespace(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vqp-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A TCP port free now on every address: the kernel's pick for a listener that is then
/// closed. A test's server listens on it a moment later; unlike a fixed port, two runs
/// of the suite at once (or anything else on the machine) do not collide on it. Never
/// the same port twice in one test process: a port is free again once its listener
/// closes, so two tests starting together could each be handed it, and the second
/// server would fail to listen while its client reached the first.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let l = std::net::TcpListener::bind("0.0.0.0:0").expect("a free port");
        let port = l.local_addr().expect("its address").port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Whether something listens on TCP `port` (read from /proc, without connecting: the
/// servers accept a single connection).
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Waits until something listens on TCP `port`, or `server` exits first (its status as
/// the error); panics past `deadline`.
pub fn listen_by(server: &mut Child, port: u16, deadline: Instant) -> Result<(), ExitStatus> {
    while !listening(port) {
        if let Ok(Some(status)) = server.try_wait() {
            return Err(status);
        }
        assert!(
            Instant::now() < deadline,
            "the server never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A child killed (and reaped) when dropped, so that a failing test leaves no process
/// behind.
pub struct Killed(pub Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits for `child` to exit until `deadline`: its status, or `None` when it ran past
/// the deadline and was killed (and reaped).
pub fn exit_by(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            late => {
                if matches!(late, Ok(None)) {
                    eprintln!("{}", stacks(child.id()));
                }
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Where each thread of process `pid` and of every process below it stands, from
/// gdb when it is installed: what a program that ran past its limit was waiting for,
/// taken before it is killed (its own output may still sit in its buffers).
pub fn stacks(pid: u32) -> String {
    let mut pids = vec![pid];
    let mut i = 0;
    while i < pids.len() {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", pids[i]));
        for task in tasks.into_iter().flatten().flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            pids.extend(
                children
                    .iter()
                    .flat_map(|c| c.split_whitespace())
                    .flat_map(str::parse::<u32>),
            );
        }
        i += 1;
    }
    let mut report = String::new();
    for p in pids {
        let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let bt = Command::new("timeout")
            .args(["20", "gdb", "-p", &p.to_string(), "-batch", "-nx"])
            .args(["-ex", "set pagination off", "-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .output();
        let bt = match bt {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => "(no stacks: gdb is not installed or could not attach)".into(),
        };
        report += &format!("=== process {p}: {cmdline}\n{bt}\n");
    }
    report
}

/// Waits for `child` at most until `deadline`; panics (after killing it) past that.
pub fn wait(child: &mut Killed, deadline: Instant, who: &str) -> Output {
    let c = child.0.as_mut().expect("a child not yet waited for");
    let late = exit_by(c, deadline).is_none();
    let out = child
        .0
        .take()
        .unwrap()
        .wait_with_output()
        .expect("collect output");
    assert!(
        !late,
        "{who} ran past its time limit and was killed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts `prog` with `args` and `env` set, its output captured.
pub fn start(prog: &Path, args: &[String], env: &[(&str, &std::ffi::OsStr)]) -> Killed {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    Killed(Some(
        c.spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", prog.display())),
    ))
}

/// Starts `server`, waits (until `deadline`) for it to listen on `port`, then starts
/// `client`.
pub fn start_pair(
    server: (&Path, &[String]),
    client: (&Path, &[String]),
    env: &[(&str, &std::ffi::OsStr)],
    port: u16,
    deadline: Instant,
) -> (Killed, Killed) {
    let mut srv = start(server.0, server.1, env);
    if listen_by(srv.0.as_mut().unwrap(), port, deadline).is_err() {
        let out = srv.0.take().unwrap().wait_with_output().unwrap();
        panic!(
            "server exited before listening: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let cli = start(client.0, client.1, env);
    (srv, cli)
}

/// Runs `server` then `client` (each a program and its arguments, with `env` set), the
/// client once `port` listens; both must exit 0 within `limit` (both are killed
/// otherwise). Returns both outputs.
pub fn run_pair(
    server: (&Path, &[String]),
    client: (&Path, &[String]),
    env: &[(&str, &std::ffi::OsStr)],
    port: u16,
    limit: Duration,
) -> (Output, Output) {
    succeeded(pair_outputs(server, client, env, port, limit))
}

/// Both outputs of a pair, after asserting that both exited 0 (a failure shows both
/// sides: the cause is often in the peer's output).
pub fn succeeded((s, c): (Output, Output)) -> (Output, Output) {
    let show = |who: &str, o: &Output| {
        format!(
            "{who}: {}\n{who}'s stdout:\n{}\n{who}'s stderr:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    for (who, o) in [("server", &s), ("client", &c)] {
        assert!(
            o.status.success() || rping_exit_race(o),
            "{who} failed\n{}\n{}",
            show("server", &s),
            show("client", &c)
        );
    }
    (s, c)
}

/// Whether `o` ended in rping's own exit race (Debian's rping, rdma-core 44): its CM
/// thread asks for the next event after the main thread, done, destroyed the event
/// channel, gets an error (EINVAL from vqp-rdmacm; librdmacm reads the freed channel),
/// and exits 255 "even though the test was actually successful" — upstream's words in
/// rdma-core f3ae6534a ("rping: terminate CM event thread before exiting", in 61),
/// which stops the thread first. Callers still count the pings.
pub fn rping_exit_race(o: &Output) -> bool {
    o.status.code() == Some(255)
        && String::from_utf8_lossy(&o.stderr)
            .trim_end()
            .ends_with("rdma_get_cm_event: Invalid argument")
}

/// As [`run_pair`], without judging the exit statuses.
pub fn pair_outputs(
    server: (&Path, &[String]),
    client: (&Path, &[String]),
    env: &[(&str, &std::ffi::OsStr)],
    port: u16,
    limit: Duration,
) -> (Output, Output) {
    let deadline = Instant::now() + limit;
    let (mut srv, mut cli) = start_pair(server, client, env, port, deadline);
    let c = wait(&mut cli, deadline, "client");
    let s = wait(&mut srv, deadline + Duration::from_secs(5), "server");
    (s, c)
}
