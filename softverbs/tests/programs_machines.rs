//! Debian's verbs programs (ibverbs-utils, perftest), unmodified, between two hosts:
//! the server in one network namespace and the client in another, joined by a veth
//! (192.0.2.1 and 192.0.2.2), each with its own softverbs namespace directory, so no
//! shared memory can carry the data: it crosses the veth through the UCX route
//! (README, "Between machines"). Each side's soft0 is bound to its end of the veth
//! (`VQP_SOFT_NETDEV`) and the programs address the peer by its RoCE v2 GID, index 1
//! (`ibv_rc_pingpong -g 1`, perftest's `-x 1`). The cdylib stands in for libibverbs
//! both ways, preloaded (`LD_PRELOAD`) and found first as `libibverbs.so.1`
//! (`LD_LIBRARY_PATH`), and through `softverbs run --netdev` (its own preload, with the
//! device files and sysfs tree of a kernel provider). Each side must exit 0 and print
//! what the program prints on hardware.
//!
//! Needs root and iproute2 (`netns`), UCX (`libucx0`) and the programs' packages; each
//! test skips with one line without them, and fails instead under
//! `VQP_REQUIRE_SYSTEM_PACKAGES=1`. The namespaces and directories are removed even
//! when a test fails.

mod netns;
mod procs;
mod system;

use std::ffi::OsStr;
use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use netns::{Netns, TempDir};

/// How the cdylib stands in for libibverbs.
#[derive(Clone, Copy, Debug)]
enum Subst {
    /// `LD_PRELOAD=<cdylib>`.
    Preload,
    /// `LD_LIBRARY_PATH=<dir>`, `<dir>/libibverbs.so.1` → the cdylib.
    LibraryPath,
    /// `softverbs run --netdev soft0=IF --dir DIR -- PROGRAM`: the launcher's mount
    /// namespace, `/dev/infiniband` and sysfs tree, and its preload.
    Launcher,
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
            // Not captured by the test harness: CI looks for this line.
            let _ = writeln!(std::io::stderr(), "skipped {test}: needs libucx0 ({e})");
            false
        }
    }
}

/// Both sides' outputs.
struct Outputs {
    server: String,
    client: String,
}

impl Outputs {
    fn both(&self) -> String {
        format!("--- server\n{}--- client\n{}", self.server, self.client)
    }
}

/// A program's stdout and stderr, one after the other.
fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs Debian's `prog` (from `package`) with `args` as server in one host and as
/// client of `192.0.2.1` in the other, the cdylib substituted as `subst` says; `None`
/// when something it needs is missing (the test is skipped).
fn two_hosts(
    test: &str,
    package: &str,
    prog: &str,
    subst: Subst,
    args: &[&str],
) -> Option<Outputs> {
    let path = system::program(test, prog, package)?;
    if !netns::available(test) || !ucx_available(test) {
        return None;
    }
    let ns = Netns::new(test, 2);
    ns.veth((0, "vr0", "192.0.2.1/24"), (1, "vr1", "192.0.2.2/24"), 1500);
    // The link-local addresses (GID index 0) usable before the programs start, as a
    // host's are long before its programs run.
    ns.wait_ipv6_usable(0, "vr0");
    ns.wait_ipv6_usable(1, "vr1");
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
    let lib_dir = system::LibDir::new(&lib, test);
    let load: Option<(&str, &OsStr)> = match subst {
        Subst::Preload => Some(("LD_PRELOAD", lib.as_os_str())),
        Subst::LibraryPath => Some(("LD_LIBRARY_PATH", lib_dir.0.as_os_str())),
        Subst::Launcher => None,
    };
    // perftest calibrates its cycle counter against the wall clock before it reports
    // and gives up on a loaded machine ("Correlation coefficient"): the program's
    // clock, not the provider, so such a run is repeated, at most twice.
    let calibration =
        |o: &Output| !o.status.success() && text(o).contains("Correlation coefficient");
    for tries in 1.. {
        let dirs = [0, 1].map(|i| TempDir(procs::namespace(&format!("{test}-h{i}"))));
        let port = procs::free_port().to_string();
        let side = |i: usize| {
            let netdev = format!("soft0=vr{i}");
            let mut c = match load {
                Some((var, value)) => {
                    let mut c = ns.exec(i, &path);
                    c.env(var, value)
                        .env(vqp_softverbs::ENV_DIR, &dirs[i].0)
                        .env("VQP_SOFT_NETDEV", &netdev);
                    c
                }
                None => {
                    let launcher = std::path::Path::new(env!("CARGO_BIN_EXE_softverbs"));
                    let mut c = ns.exec(i, launcher);
                    c.args(["run", "--netdev", &netdev, "--lib"])
                        .arg(&lib)
                        .arg("--dir")
                        .arg(&dirs[i].0)
                        .arg("--")
                        .arg(&path);
                    // The launcher's settings only.
                    for (k, _) in std::env::vars_os() {
                        if k.to_string_lossy().starts_with("VQP_SOFT_") {
                            c.env_remove(k);
                        }
                    }
                    c
                }
            };
            c.args(args)
                .args(["-p", &port])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c
        };
        let mut client = side(1);
        client.arg("192.0.2.1");
        let (s, c) = server_and_client(side(0), port.parse().unwrap(), client);
        if tries == 3 || !(calibration(&s) || calibration(&c)) {
            let o = Outputs {
                server: text(&s),
                client: text(&c),
            };
            assert!(s.status.success() && c.status.success(), "{}", o.both());
            return Some(o);
        }
        eprintln!("{test}: {prog} could not calibrate its clock; running it again");
    }
    unreachable!()
}

/// Starts `server`, then `client` once the server listens on `port`; both outputs,
/// each side killed past its time limit (60 s, the server 5 s more).
fn server_and_client(mut server: Command, port: u16, mut client: Command) -> (Output, Output) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut srv = procs::Killed(Some(server.spawn().expect("spawn the server")));
    let pid = srv.0.as_ref().unwrap().id();
    while !netns::listening_in(pid, port) {
        let exited = srv.0.as_mut().unwrap().try_wait().ok().flatten().is_some();
        if exited || Instant::now() >= deadline {
            let s = procs::wait(&mut srv, deadline, "server");
            panic!("the server never listened:\n{}", text(&s));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cli = procs::Killed(Some(client.spawn().expect("spawn the client")));
    let c = procs::wait(&mut cli, deadline, "client");
    let s = procs::wait(&mut srv, deadline + Duration::from_secs(5), "server");
    (s, c)
}

/// A pingpong program (`ibv_rc_pingpong`, `ibv_ud_pingpong`) with `-g 1` (the RoCE v2
/// IPv4 GID): both sides ran 200 round trips and name their own GID and the peer's.
fn pingpong(test: &str, prog: &str, subst: Subst, bytes: &str) {
    let named = [
        ("::ffff:192.0.2.1", "::ffff:192.0.2.2"),
        ("::ffff:192.0.2.2", "::ffff:192.0.2.1"),
    ];
    pingpong_by(test, prog, subst, bytes, "1", |local, remote| {
        (local == named[0].0 && remote == named[0].1)
            || (local == named[1].0 && remote == named[1].1)
    });
}

/// [`pingpong`] by GID index `gid`, `gids_ok` judging each side's own GID and the
/// peer's as the program prints them.
fn pingpong_by(
    test: &str,
    prog: &str,
    subst: Subst,
    bytes: &str,
    gid: &str,
    gids_ok: impl Fn(&str, &str) -> bool,
) {
    let args = ["-d", "soft0", "-g", gid, "-n", "200"];
    let Some(o) = two_hosts(test, "ibverbs-utils", prog, subst, &args) else {
        return;
    };
    let both = o.both();
    assert!(!both.contains("UCX  ERROR"), "UCX complained:\n{both}");
    let mut seen = Vec::new();
    for out in [&o.server, &o.client] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{bytes} bytes in ")) && l.contains(" seconds = ")),
            "no bytes line under {subst:?}:\n{both}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("200 iters in ")),
            "no iters line under {subst:?}:\n{both}"
        );
        // "  local address:  LID 0x0000, QPN 0x…, PSN 0x…, GID <gid>", then "remote".
        let gid_of = |which: &str| {
            out.lines()
                .find(|l| l.trim_start().starts_with(which))
                .and_then(|l| l.split("GID ").nth(1))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {which} GID:\n{both}"))
                .to_string()
        };
        let (local, remote) = (gid_of("local address"), gid_of("remote address"));
        assert!(gids_ok(&local, &remote), "GIDs {local} / {remote}:\n{both}");
        seen.push((local, remote));
    }
    assert_eq!(
        (&seen[0].0, &seen[0].1),
        (&seen[1].1, &seen[1].0),
        "each side names the other's GID"
    );
}

/// `ibv_rc_pingpong -g 0`: the default GID, the interface's link-local IPv6 address
/// (`fe80::`), on both sides; the route looks the peer up there, through the
/// interface of the program's port, and carries the traffic to the address of that
/// interface the peer names.
#[test]
fn ibv_rc_pingpong_by_link_local_gids_between_two_hosts() {
    pingpong_by(
        "ibv_rc_pingpong_by_link_local_gids_between_two_hosts",
        "ibv_rc_pingpong",
        Subst::Preload,
        "1638400",
        "0",
        |local, remote| local.starts_with("fe80::") && remote.starts_with("fe80::"),
    );
}

/// `ibv_ud_pingpong -g 0`: datagrams by address handles to link-local GIDs.
#[test]
fn ibv_ud_pingpong_by_link_local_gids_between_two_hosts() {
    pingpong_by(
        "ibv_ud_pingpong_by_link_local_gids_between_two_hosts",
        "ibv_ud_pingpong",
        Subst::Preload,
        "409600",
        "0",
        |local, remote| local.starts_with("fe80::") && remote.starts_with("fe80::"),
    );
}

#[test]
fn ibv_rc_pingpong_between_two_hosts_under_ld_preload() {
    pingpong(
        "ibv_rc_pingpong_between_two_hosts_under_ld_preload",
        "ibv_rc_pingpong",
        Subst::Preload,
        "1638400",
    );
}

#[test]
fn ibv_rc_pingpong_between_two_hosts_as_libibverbs_so_1() {
    pingpong(
        "ibv_rc_pingpong_between_two_hosts_as_libibverbs_so_1",
        "ibv_rc_pingpong",
        Subst::LibraryPath,
        "1638400",
    );
}

#[test]
fn ibv_rc_pingpong_between_two_hosts_through_softverbs_run() {
    pingpong(
        "ibv_rc_pingpong_between_two_hosts_through_softverbs_run",
        "ibv_rc_pingpong",
        Subst::Launcher,
        "1638400",
    );
}

#[test]
fn ibv_ud_pingpong_between_two_hosts_under_ld_preload() {
    // 200 round trips each way of 1024 bytes: its default size (2048) cut to the
    // port's active MTU, 1024 on a veth of MTU 1500.
    pingpong(
        "ibv_ud_pingpong_between_two_hosts_under_ld_preload",
        "ibv_ud_pingpong",
        Subst::Preload,
        "409600",
    );
}

#[test]
fn ibv_ud_pingpong_between_two_hosts_as_libibverbs_so_1() {
    pingpong(
        "ibv_ud_pingpong_between_two_hosts_as_libibverbs_so_1",
        "ibv_ud_pingpong",
        Subst::LibraryPath,
        "409600",
    );
}

/// What a perftest program reports.
#[derive(Clone, Copy)]
enum Table {
    /// Bandwidth: `#bytes #iterations BW peak BW average MsgRate`, on both sides.
    Bw,
    /// Latency: `#bytes #iterations t_min t_max t_typical t_avg …`, on both sides.
    Lat,
}

/// The numbers of the result row that follows the `#bytes` header in `out`.
fn result_row(out: &str) -> Option<Vec<f64>> {
    let mut lines = out.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    lines
        .next()?
        .split_whitespace()
        .map(|w| w.parse::<f64>().ok().filter(|x| x.is_finite()))
        .collect()
}

/// perftest's `prog` with `-x 1` (GID index 1, the RoCE v2 IPv4 GID) and 100
/// iterations: each side's result row names perftest's default size (64 KiB for
/// bandwidth, 2 bytes for latency) and 100 iterations, with a positive bandwidth or a
/// minimum latency no larger than the average.
fn perftest(test: &str, prog: &str, subst: Subst, table: Table) {
    let args = ["-d", "soft0", "-x", "1", "-n", "100"];
    let Some(o) = two_hosts(test, "perftest", prog, subst, &args) else {
        return;
    };
    let ctx = format!("{prog} under {subst:?}\n{}", o.both());
    let bytes = match table {
        Table::Bw => 65536.0,
        Table::Lat => 2.0,
    };
    for out in [&o.client, &o.server] {
        let row = result_row(out).unwrap_or_else(|| panic!("no result row:\n{ctx}"));
        assert!(row.len() >= 5, "short result row {row:?}:\n{ctx}");
        assert_eq!((row[0], row[1]), (bytes, 100.0), "{ctx}");
        match table {
            Table::Bw => assert!(row[3] > 0.0 && row[4] > 0.0, "no bandwidth:\n{ctx}"),
            Table::Lat => assert!(row[2] > 0.0 && row[2] <= row[5], "latency:\n{ctx}"),
        }
    }
}

/// One test per program and substitution.
macro_rules! perftests {
    ($($name:ident: $prog:literal, $subst:ident, $table:ident;)*) => {$(
        #[test]
        fn $name() {
            perftest(stringify!($name), $prog, Subst::$subst, Table::$table);
        }
    )*};
}

perftests! {
    ib_write_bw_between_two_hosts_under_ld_preload: "ib_write_bw", Preload, Bw;
    ib_read_bw_between_two_hosts_under_ld_preload: "ib_read_bw", Preload, Bw;
    ib_send_lat_between_two_hosts_under_ld_preload: "ib_send_lat", Preload, Lat;
    ib_write_bw_between_two_hosts_as_libibverbs_so_1: "ib_write_bw", LibraryPath, Bw;
    ib_read_bw_between_two_hosts_as_libibverbs_so_1: "ib_read_bw", LibraryPath, Bw;
    ib_send_lat_between_two_hosts_as_libibverbs_so_1: "ib_send_lat", LibraryPath, Lat;
    ib_write_bw_between_two_hosts_through_softverbs_run: "ib_write_bw", Launcher, Bw;
}
