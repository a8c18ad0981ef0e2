//! Debian's own verbs programs (ibverbs-utils, perftest), run as two processes with
//! `LD_PRELOAD` of the provider's cdylib: each side must exit 0. Each test uses its own
//! TCP port and namespace directory, and is killed when it runs past its limit.

mod procs;
mod system;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

/// Runs `prog` as server (`server_args`) and client (`client_args` then
/// `127.0.0.1`), on `port`; returns the client's stdout.
fn two_processes(
    test: &str,
    package: &str,
    prog: &str,
    server_args: &[&str],
    client_args: &[&str],
    port: u16,
) -> Option<String> {
    let path = system::program(test, prog, package)?;
    let dir = procs::namespace(test);
    let lib = cdylib();
    let p = port.to_string();
    let own = |a: &[&str], host: bool| {
        let mut v: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        v.extend(["-p".to_string(), p.clone()]);
        if host {
            v.push("127.0.0.1".into());
        }
        v
    };
    let (sa, ca) = (own(server_args, false), own(client_args, true));
    let env: [(&str, &OsStr); 2] = [
        ("LD_PRELOAD", lib.as_os_str()),
        (vqp_softverbs::ENV_DIR, dir.as_os_str()),
    ];
    let (_, c) = procs::run_pair(
        (&path, &sa),
        (&path, &ca),
        &env,
        port,
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8_lossy(&c.stdout).into_owned())
}

#[test]
fn rc_pingpong_between_two_devices() {
    let out = two_processes(
        "rc_pingpong_between_two_devices",
        "ibverbs-utils",
        "ibv_rc_pingpong",
        &["-d", "soft1", "-n", "200"],
        &["-d", "soft0", "-n", "200"],
        18801,
    );
    if let Some(out) = out {
        assert!(out.contains("200 iters"), "{out}");
    }
}

#[test]
fn rc_pingpong_with_both_sides_on_one_device() {
    let out = two_processes(
        "rc_pingpong_with_both_sides_on_one_device",
        "ibverbs-utils",
        "ibv_rc_pingpong",
        &["-d", "soft0", "-n", "200"],
        &["-d", "soft0", "-n", "200"],
        18802,
    );
    if let Some(out) = out {
        // Distinct QP numbers: the client no longer connects to itself.
        let qpns: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split("QPN ").nth(1))
            .map(|s| s.split(',').next().unwrap_or(""))
            .collect();
        assert_eq!(qpns.len(), 2, "{out}");
        assert_ne!(qpns[0], qpns[1], "{out}");
        assert!(out.contains("200 iters"), "{out}");
    }
}

fn perftest(test: &str, prog: &str, extra: &[&str], port: u16) {
    let mut s = vec!["-d", "soft1", "-n", "100"];
    let mut c = vec!["-d", "soft0", "-n", "100"];
    s.extend_from_slice(extra);
    c.extend_from_slice(extra);
    if let Some(out) = two_processes(test, "perftest", prog, &s, &c, port) {
        assert!(out.contains("#bytes"), "no result table: {out}");
    }
}

#[test]
fn perftest_write_bw() {
    perftest("perftest_write_bw", "ib_write_bw", &[], 18811);
}

#[test]
fn perftest_read_bw() {
    perftest("perftest_read_bw", "ib_read_bw", &[], 18812);
}

#[test]
fn perftest_send_bw() {
    perftest("perftest_send_bw", "ib_send_bw", &[], 18813);
}

#[test]
fn perftest_atomic_bw() {
    perftest("perftest_atomic_bw", "ib_atomic_bw", &[], 18814);
}

#[test]
fn perftest_write_lat() {
    perftest("perftest_write_lat", "ib_write_lat", &[], 18815);
}

#[test]
fn perftest_read_lat() {
    perftest("perftest_read_lat", "ib_read_lat", &[], 18816);
}

#[test]
fn perftest_send_lat() {
    perftest("perftest_send_lat", "ib_send_lat", &[], 18817);
}
