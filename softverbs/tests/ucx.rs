//! UCX 1.13 (Debian's `ucx-utils`), unmodified, through `softverbs run`: `ucx_info -d`
//! lists the verbs transports on every soft device, and `ucx_perftest` runs as two
//! processes (server and client, each its own `softverbs run`, UCX's own set-up over a
//! TCP socket on 127.0.0.1) over `rc_verbs`/`ud_verbs` — UCP tag, put/get, atomics,
//! stream and active messages, and UCT `rc_verbs` put/get/am and 64-bit atomics — each
//! side exiting 0, the client with its result line. Gated on the package: skipped with a
//! line naming it when `ucx_info` is missing, failed then under
//! `VQP_REQUIRE_SYSTEM_PACKAGES=1`.

mod procs;
mod system;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const PACKAGE: &str = "ucx-utils";

fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_softverbs"))
}

/// `(transport, device)` of every resource `ucx_info -d` printed.
fn resources(out: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut transport = None;
    for line in out.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(t) = line.strip_prefix("Transport: ") {
            transport = Some(t.to_string());
        } else if let (Some(d), Some(t)) = (line.strip_prefix("Device: "), transport.take()) {
            found.push((t, d.to_string()));
        }
    }
    found
}

#[test]
fn ucx_info_lists_rc_verbs_and_ud_verbs_on_every_soft_device() {
    let test = "ucx_info_lists_rc_verbs_and_ud_verbs_on_every_soft_device";
    if system::program(test, "ucx_info", PACKAGE).is_none() {
        return;
    }
    let dir = procs::namespace(test);
    let run = system::run(
        Command::new(launcher())
            .args(["run", "--devices", "3", "--dir"])
            .arg(&dir)
            .args(["--", "ucx_info", "-d"]),
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        run.describe()
    );
    let found = resources(&run.stdout);
    for dev in ["soft0:1", "soft1:1", "soft2:1"] {
        for tl in ["rc_verbs", "ud_verbs"] {
            assert!(
                found.contains(&(tl.to_string(), dev.to_string())),
                "no {tl} on {dev}: {found:?}\n{}",
                run.describe()
            );
        }
    }
    // rc_verbs offers UCX's 64-bit device atomics, as on a ConnectX (atomic_cap HCA).
    let rc = run
        .stdout
        .split("Transport: rc_verbs")
        .nth(1)
        .unwrap_or_default();
    let rc = rc.split("Transport:").next().unwrap_or_default();
    for op in ["atomic_fadd: 64 bit", "atomic_cswap: 64 bit"] {
        assert!(
            rc.contains(op),
            "rc_verbs without {op:?}:\n{}",
            run.describe()
        );
    }
}

/// Runs a pair through the launcher — `server` and `client` are the commands (from
/// `ucx_perftest` or an `env` before it) without the port and the client's host, which
/// are added — with UCX restricted to `rc_verbs`, `ud_verbs` and `self`; checks that both
/// exit 0 and that the client printed its result line.
fn perftest_pair(test: &str, server: &[&str], client: &[&str]) {
    let Some(_) = system::program(test, "ucx_perftest", PACKAGE) else {
        return;
    };
    let dir = procs::namespace(test);
    let port = procs::free_port().to_string();
    let side = |args: &[&str], host: bool| {
        let mut v: Vec<String> = ["run", "--dir"].map(String::from).to_vec();
        v.push(dir.display().to_string());
        v.push("--".into());
        v.extend(args.iter().map(|s| s.to_string()));
        v.extend(["-p".to_string(), port.clone()]);
        if host {
            v.push("127.0.0.1".into());
        }
        v
    };
    let (sa, ca) = (side(server, false), side(client, true));
    let env: [(&str, &OsStr); 2] = [
        ("UCX_TLS", OsStr::new("rc_verbs,ud_verbs,self")),
        ("UCX_WARN_UNUSED_ENV_VARS", OsStr::new("n")),
    ];
    let launcher = launcher();
    let (s, c) = procs::pair_outputs(
        (&launcher, &sa),
        (&launcher, &ca),
        &env,
        port.parse().unwrap(),
        Duration::from_secs(90),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let (_, c) = procs::succeeded((s, c));
    let out = String::from_utf8_lossy(&c.stdout);
    assert!(
        out.lines().any(|l| l.starts_with("Final:")),
        "{test}: no result line from the client:\n{out}"
    );
}

/// A UCP test: the server on soft0, the client on soft1.
fn ucp(test: &str, args: &[&str]) {
    let with = |dev: &'static str| {
        let mut v = vec!["env", dev, "ucx_perftest"];
        v.extend_from_slice(args);
        v
    };
    perftest_pair(
        test,
        &with("UCX_NET_DEVICES=soft0:1"),
        &with("UCX_NET_DEVICES=soft1:1"),
    );
}

/// A UCT test on transport `tl`: the server on soft0, the client on soft1.
fn uct(test: &str, tl: &str, args: &[&str]) {
    let with = |dev: &'static str| {
        let mut v = vec!["ucx_perftest", "-d", dev, "-x", tl];
        v.extend_from_slice(args);
        v
    };
    perftest_pair(test, &with("soft0:1"), &with("soft1:1"));
}

#[test]
fn ucp_tag_latency_and_bandwidth_as_two_processes() {
    ucp("ucp_tag_lat", &["-t", "tag_lat", "-n", "1000", "-w", "100"]);
    ucp(
        "ucp_tag_bw",
        &["-t", "tag_bw", "-s", "65536", "-n", "500", "-w", "50"],
    );
}

#[test]
fn ucp_put_and_get_of_1_mib_as_two_processes() {
    ucp(
        "ucp_put_bw",
        &["-t", "ucp_put_bw", "-s", "1048576", "-n", "200", "-w", "20"],
    );
    ucp(
        "ucp_get",
        &["-t", "ucp_get", "-s", "1048576", "-n", "200", "-w", "20"],
    );
}

#[test]
fn ucp_atomics_stream_and_active_messages_as_two_processes() {
    for t in ["ucp_fadd", "ucp_cswap", "ucp_add", "stream_bw", "ucp_am_bw"] {
        ucp(t, &["-t", t, "-n", "500", "-w", "50"]);
    }
}

#[test]
fn uct_rc_verbs_put_get_am_and_atomics_as_two_processes() {
    let zcopy = ["-s", "1048576", "-D", "zcopy", "-n", "200", "-w", "20"];
    for t in ["put_bw", "get"] {
        let mut args = vec!["-t", t];
        args.extend_from_slice(&zcopy);
        uct(&format!("uct_rc_{t}"), "rc_verbs", &args);
    }
    for t in ["am_lat", "put_lat", "fadd", "cswap", "add_lat"] {
        uct(
            &format!("uct_rc_{t}"),
            "rc_verbs",
            &["-t", t, "-n", "500", "-w", "50"],
        );
    }
    uct(
        "uct_ud_am_lat",
        "ud_verbs",
        &["-t", "am_lat", "-n", "500", "-w", "50"],
    );
}
