//! Debian's `ibv_xsrq_pingpong` (ibverbs-utils) with several clients, each process its
//! own `softverbs run` sharing one namespace directory: a server with `-c N` and N
//! client processes. The server has one XRC SRQ, and a receive QP and a send QP per
//! client; each client one of each. The clients open the same domain
//! (`/tmp/xrc_domain`), and the server sends to client i's SRQ through the send QPs in
//! turn (`(i + count) % N`), so most requests reach a client's SRQ through another
//! client's receive QP: an SRQ of one process served by a receive QP of another
//! (`engine::route::namespace::xrc`). Each process exits 0 and prints "success".
//! Gated on the package: skipped with a line naming it when the program is missing,
//! failed then under `VQP_REQUIRE_SYSTEM_PACKAGES=1`.

mod procs;
mod system;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PACKAGE: &str = "ibverbs-utils";

fn launcher(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softverbs"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VQP_SOFT_") {
            c.env_remove(k);
        }
    }
    c.env_remove("SYSFS_PATH");
    c.args(["run", "--dir"]).arg(dir).arg("--");
    c
}

/// The "QPN RECV …, SRQN …" part of a program's `which` ("local" or "remote") lines.
fn ids(out: &str, which: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.trim_start().starts_with(which))
        .map(|l| {
            let from = l.find("QPN").unwrap_or(0);
            let to = l.find(", GID").unwrap_or(l.len());
            // The PSNs differ by direction: keep the QP and SRQ numbers.
            l[from..to]
                .split(", ")
                .filter(|p| !p.starts_with("PSN"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// Runs the server with `-c clients` and that many client processes, all through the
/// launcher, and checks each exits 0 with "success" and that every client's local
/// numbers are among the server's remote ones (and the other way round).
fn xsrq_with_clients(test: &str, clients: usize) {
    let Some(prog) = system::program(test, "ibv_xsrq_pingpong", PACKAGE) else {
        return;
    };
    let dir = procs::namespace(test);
    let port = procs::free_port();
    let p = port.to_string();
    let n = clients.to_string();
    let deadline = Instant::now() + Duration::from_secs(90);
    let start = |args: &[&str]| {
        let mut c = launcher(&dir);
        c.arg(&prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        procs::Killed(Some(c.spawn().expect("start the launcher")))
    };
    let mut server = start(&["-d", "soft1", "-c", &n, "-n", "50", "-p", &p]);
    if let Err(status) = procs::listen_by(server.0.as_mut().unwrap(), port, deadline) {
        let out = server.0.take().unwrap().wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if status.code() == Some(125) && stderr.contains("namespace") {
            let line =
                format!("skipped {test}: the launcher gets no namespace on this machine: {stderr}");
            if std::env::var(system::REQUIRE).is_ok_and(|v| v == "1") {
                panic!("{line}; {}=1 says it must run", system::REQUIRE);
            }
            eprintln!("{line}");
            return;
        }
        panic!("the server exited before listening: {status}\n{stderr}");
    }
    let mut cs: Vec<procs::Killed> = (0..clients)
        .map(|_| start(&["-d", "soft0", "-n", "50", "-p", &p, "127.0.0.1"]))
        .collect();
    let text = |o: &std::process::Output| {
        format!(
            "{}\n--- stdout\n{}--- stderr\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let outs: Vec<_> = cs
        .iter_mut()
        .enumerate()
        .map(|(i, c)| procs::wait(c, deadline, &format!("client {i}")))
        .collect();
    let s = procs::wait(&mut server, deadline + Duration::from_secs(5), "server");
    let _ = std::fs::remove_dir_all(&dir);
    let all = std::iter::once(format!("=== server {}", text(&s)))
        .chain(
            outs.iter()
                .enumerate()
                .map(|(i, o)| format!("=== client {i} {}", text(o))),
        )
        .collect::<Vec<_>>()
        .join("\n");
    for o in std::iter::once(&s).chain(&outs) {
        assert!(o.status.success(), "{all}");
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(stdout.lines().any(|l| l == "success"), "{all}");
    }
    let server_out = String::from_utf8_lossy(&s.stdout);
    let (s_local, s_remote) = (ids(&server_out, "local"), ids(&server_out, "remote"));
    assert_eq!(s_remote.len(), clients, "{all}");
    for o in &outs {
        let out = String::from_utf8_lossy(&o.stdout);
        let (local, remote) = (ids(&out, "local"), ids(&out, "remote"));
        assert_eq!((local.len(), remote.len()), (1, 1), "{all}");
        assert!(s_remote.contains(&local[0]), "{all}");
        assert!(s_local.contains(&remote[0]), "{all}");
    }
}

#[test]
fn xsrq_pingpong_with_two_clients_through_softverbs_run() {
    xsrq_with_clients("xsrq_pingpong_with_two_clients_through_softverbs_run", 2);
}

#[test]
fn xsrq_pingpong_with_three_clients_through_softverbs_run() {
    xsrq_with_clients("xsrq_pingpong_with_three_clients_through_softverbs_run", 3);
}
