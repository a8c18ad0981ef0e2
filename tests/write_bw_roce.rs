//! vqp's GID path on RoCE ports: `write_bw --device soft0 --server --gid-index 1` in one
//! network namespace and `--connect` from another (and both without `--gid-index`,
//! where each side must choose index 1, its port's RoCE v2 IPv4 GID, not index 0, the
//! link-local default GID), each process's soft0 bound to its end
//! of a veth pair (`VQP_SOFT_NETDEV`), so the QPs are addressed by the RoCE v2 GID of
//! the interface's IPv4 address (index 1) and the control connection runs over the
//! veth. Both processes share one softverbs namespace directory, so the data still
//! moves through shared memory. Every byte verified on the server.
//!
//! Needs root and iproute2 (the namespaces are deleted even when the test fails); skips
//! with one line otherwise, fails under `VQP_REQUIRE_SYSTEM_PACKAGES=1`. Needs the
//! example built (`cargo test` builds examples).

#[path = "../softverbs/tests/netns/mod.rs"]
mod netns;
#[path = "../softverbs/tests/procs/mod.rs"]
mod procs;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

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

/// A run with `--gid-index 1` on both sides, or (`gid_index` false) without it, where
/// each side must say it chose index 1, the GID of its own IPv4 address.
fn run(test: &str, opcode: &str, qps: usize) {
    run_with(test, opcode, qps, true);
}

fn run_with(test: &str, opcode: &str, qps: usize, gid_index: bool) {
    if !netns::available(test) {
        return;
    }
    let ns = netns::Netns::new(test, 2);
    ns.veth((0, "vr0", "192.0.2.1/24"), (1, "vr1", "192.0.2.2/24"), 1500);
    let dir = netns::TempDir(procs::namespace(test));
    let dir = dir.0.clone();
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
    let port = procs::free_port().to_string();
    let prog = write_bw();
    let start = |i: usize, args: &[&str]| {
        let mut c = ns.exec(i, &prog);
        c.args(args)
            .env("VQP_SOFT_DIR", &dir)
            .env("VQP_IBVERBS_PATH", &lib)
            .env("VQP_SOFT_NETDEV", format!("soft0=vr{i}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        procs::Killed(Some(c.spawn().expect("spawn write_bw")))
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let given: &[&str] = if gid_index {
        &["--gid-index", "1"]
    } else {
        &[]
    };
    let mut srv = start(
        0,
        &[
            &["--device", "soft0", "--server", "--port", &port][..],
            given,
        ]
        .concat(),
    );
    let pid = srv.0.as_ref().unwrap().id();
    while !netns::listening_in(pid, port.parse().unwrap()) {
        let exited = srv.0.as_mut().unwrap().try_wait().ok().flatten().is_some();
        assert!(
            !exited && Instant::now() < deadline,
            "the server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let qps = qps.to_string();
    let to = format!("192.0.2.1:{port}");
    let mut cli = start(
        1,
        &[
            &["--device", "soft0", "--connect", &to][..],
            given,
            &[
                "--opcode", opcode, "--size", "256K", "--iters", "40", "--qps", &qps,
            ][..],
        ]
        .concat(),
    );
    let c = procs::wait(&mut cli, deadline, "client");
    let s = procs::wait(&mut srv, deadline + Duration::from_secs(5), "server");
    let ctx = format!(
        "--- server {}\n{}{}--- client {}\n{}{}",
        s.status,
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&s.stderr),
        c.status,
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    assert!(s.status.success() && c.status.success(), "{ctx}");
    let check = "data check: 40 messages x 262144 bytes, every byte verified on the server: passed";
    let out = String::from_utf8_lossy(&s.stdout);
    assert!(
        out.contains(check),
        "{check:?} missing on the server:\n{ctx}"
    );
    if !gid_index {
        // Each side's choice: index 1, its own IPv4 address as a RoCE v2 GID.
        for (o, host) in [(&s, 1), (&c, 2)] {
            let want = format!(
                "soft0 port 1: GID index 1 (0000:0000:0000:0000:0000:ffff:c000:020{host}), \
                 chosen for want of --gid-index"
            );
            assert!(
                String::from_utf8_lossy(&o.stderr).contains(&want),
                "{want:?} missing:\n{ctx}"
            );
        }
    }
}

#[test]
fn write_by_gid_between_two_namespaces() {
    run("wbroce-write", "write", 2);
}

#[test]
fn write_imm_by_gid_between_two_namespaces() {
    run("wbroce-imm", "write_imm", 1);
}

#[test]
fn write_between_two_namespaces_without_a_gid_index() {
    run_with("wbroce-auto", "write", 2, false);
}
