//! Debian's own verbs programs (ibverbs-utils, perftest), unmodified, run as two
//! processes over the provider's cdylib substituted for libibverbs both ways: preloaded
//! (`LD_PRELOAD`, the system's libibverbs still loaded) and found first
//! (`LD_LIBRARY_PATH` naming a directory whose `libibverbs.so.1` is the cdylib). Each
//! side must exit 0 and print what the program prints on hardware: pingpong's
//! "bytes in ... seconds" and "iters in" lines, perftest's result row. Each test uses
//! its own TCP port and namespace directory (removed at the end), and both processes
//! are killed when they run past the limit.

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

/// How the cdylib stands in for libibverbs.
#[derive(Clone, Copy, Debug)]
enum Subst {
    /// `LD_PRELOAD=<cdylib>`.
    Preload,
    /// `LD_LIBRARY_PATH=<dir>`, `<dir>/libibverbs.so.1` → the cdylib.
    LibraryPath,
}

/// Both sides' standard output.
struct Outputs {
    server: String,
    client: String,
}

/// Runs `prog` as server (`server_args`) and client (`client_args` then `127.0.0.1`),
/// on `port`, with the cdylib substituted as `subst` says; `None` when the package is
/// missing (the test is skipped).
fn two_processes(
    test: &str,
    package: &str,
    prog: &str,
    subst: Subst,
    (server_args, client_args): (&[&str], &[&str]),
    port: u16,
) -> Option<Outputs> {
    let path = system::program(test, prog, package)?;
    let dir = procs::namespace(test);
    let lib = cdylib();
    let lib_dir = system::LibDir::new(&lib, test);
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
    let load: (&str, &OsStr) = match subst {
        Subst::Preload => ("LD_PRELOAD", lib.as_os_str()),
        Subst::LibraryPath => ("LD_LIBRARY_PATH", lib_dir.0.as_os_str()),
    };
    // perftest calibrates its cycle counter against the wall clock before it reports,
    // and gives up ("Correlation coefficient r^2 … < 0.9", "Can't produce a report")
    // when a loaded machine makes the samples scatter: a failure of the program's
    // clock, not of the provider, so such a run is repeated, at most twice.
    let calibration = |o: &std::process::Output| {
        !o.status.success()
            && String::from_utf8_lossy(&o.stderr).contains("Correlation coefficient")
    };
    let env = [load, (vqp_softverbs::ENV_DIR, dir.as_os_str())];
    let limit = Duration::from_secs(60);
    let mut tries = 1;
    let (s, c) = loop {
        let (s, c) = procs::pair_outputs((&path, &sa), (&path, &ca), &env, port, limit);
        let _ = std::fs::remove_dir_all(&dir);
        if tries == 3 || !(calibration(&s) || calibration(&c)) {
            break procs::succeeded((s, c));
        }
        eprintln!("{test}: {prog} could not calibrate its clock; running it again");
        tries += 1;
    };
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    Some(Outputs {
        server: text(&s),
        client: text(&c),
    })
}

/// Checks that both sides of a pingpong program ran 200 round trips of 4096 bytes
/// (2 · 200 · 4096 bytes each way) and said so; returns both outputs, for messages.
fn ran_200_round_trips(o: &Outputs, subst: Subst) -> String {
    let both = format!("--- server\n{}--- client\n{}", o.server, o.client);
    for out in [&o.server, &o.client] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("1638400 bytes in ") && l.contains(" seconds = ")),
            "no bytes line under {subst:?}:\n{both}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("200 iters in ")),
            "no iters line under {subst:?}:\n{both}"
        );
    }
    both
}

/// ibv_rc_pingpong, `iters` round trips, server on `server_dev`, client on `client_dev`.
fn pingpong(test: &str, subst: Subst, devs: (&str, &str), port: u16) {
    pingpong_with(test, "ibv_rc_pingpong", subst, devs, &[], port);
}

/// As [`pingpong`], for pingpong program `prog` (`ibv_rc_pingpong`, `ibv_uc_pingpong`),
/// with `extra` arguments on both sides.
fn pingpong_with(
    test: &str,
    prog: &str,
    subst: Subst,
    devs: (&str, &str),
    extra: &[&str],
    port: u16,
) {
    let n = "200";
    let server = [&["-d", devs.0, "-n", n], extra].concat();
    let client = [&["-d", devs.1, "-n", n], extra].concat();
    let Some(o) = two_processes(test, "ibverbs-utils", prog, subst, (&server, &client), port)
    else {
        return;
    };
    let both = ran_200_round_trips(&o, subst);
    // Each side's remote QPN is the other's local one, and they differ (on one device
    // the client no longer connects to itself).
    let qpn = |out: &str, which: &str| -> String {
        out.lines()
            .find(|l| l.trim_start().starts_with(which))
            .and_then(|l| l.split("QPN ").nth(1))
            .and_then(|s| s.split(',').next())
            .unwrap_or_else(|| panic!("no {which} line:\n{both}"))
            .to_string()
    };
    let (sl, sr) = (qpn(&o.server, "local"), qpn(&o.server, "remote"));
    let (cl, cr) = (qpn(&o.client, "local"), qpn(&o.client, "remote"));
    assert_eq!(
        (sl.as_str(), sr.as_str()),
        (cr.as_str(), cl.as_str()),
        "{both}"
    );
    assert_ne!(sl, cl, "{both}");
}

#[test]
fn rc_pingpong_between_two_devices_under_ld_preload() {
    pingpong(
        "rc_pingpong_between_two_devices_under_ld_preload",
        Subst::Preload,
        ("soft1", "soft0"),
        procs::free_port(),
    );
}

#[test]
fn rc_pingpong_with_both_sides_on_one_device_under_ld_preload() {
    pingpong(
        "rc_pingpong_with_both_sides_on_one_device_under_ld_preload",
        Subst::Preload,
        ("soft0", "soft0"),
        procs::free_port(),
    );
}

#[test]
fn rc_pingpong_between_two_devices_as_libibverbs_so_1() {
    pingpong(
        "rc_pingpong_between_two_devices_as_libibverbs_so_1",
        Subst::LibraryPath,
        ("soft1", "soft0"),
        procs::free_port(),
    );
}

#[test]
fn rc_pingpong_with_both_sides_on_one_device_as_libibverbs_so_1() {
    pingpong(
        "rc_pingpong_with_both_sides_on_one_device_as_libibverbs_so_1",
        Subst::LibraryPath,
        ("soft0", "soft0"),
        procs::free_port(),
    );
}

/// `-e`: each side sleeps on its completion channel (`ibv_get_cq_event`) instead of
/// polling, so completions of work from the other process must wake it.
#[test]
fn rc_pingpong_with_completion_events_under_ld_preload() {
    pingpong_with(
        "rc_pingpong_with_completion_events_under_ld_preload",
        "ibv_rc_pingpong",
        Subst::Preload,
        ("soft1", "soft0"),
        &["-e"],
        procs::free_port(),
    );
}

#[test]
fn rc_pingpong_with_completion_events_as_libibverbs_so_1() {
    pingpong_with(
        "rc_pingpong_with_completion_events_as_libibverbs_so_1",
        "ibv_rc_pingpong",
        Subst::LibraryPath,
        ("soft1", "soft0"),
        &["-e"],
        procs::free_port(),
    );
}

/// ibv_uc_pingpong: the ping-pong over UC QPs (no acknowledgements; the receives are
/// posted ahead, so nothing is dropped).
#[test]
fn uc_pingpong_under_ld_preload() {
    pingpong_with(
        "uc_pingpong_under_ld_preload",
        "ibv_uc_pingpong",
        Subst::Preload,
        ("soft1", "soft0"),
        &[],
        procs::free_port(),
    );
}

#[test]
fn uc_pingpong_as_libibverbs_so_1() {
    pingpong_with(
        "uc_pingpong_as_libibverbs_so_1",
        "ibv_uc_pingpong",
        Subst::LibraryPath,
        ("soft1", "soft0"),
        &[],
        procs::free_port(),
    );
}

/// ibv_ud_pingpong: datagrams through address handles, 4096 bytes (the port's MTU) each
/// way, behind the 40-byte GRH area of each receive.
#[test]
fn ud_pingpong_under_ld_preload() {
    pingpong_with(
        "ud_pingpong_under_ld_preload",
        "ibv_ud_pingpong",
        Subst::Preload,
        ("soft1", "soft0"),
        &["-s", "4096"],
        procs::free_port(),
    );
}

#[test]
fn ud_pingpong_as_libibverbs_so_1() {
    pingpong_with(
        "ud_pingpong_as_libibverbs_so_1",
        "ibv_ud_pingpong",
        Subst::LibraryPath,
        ("soft1", "soft0"),
        &["-s", "4096"],
        procs::free_port(),
    );
}

/// `-g 0`: address handles with a global route, so every datagram carries a GRH.
#[test]
fn ud_pingpong_with_global_routes_under_ld_preload() {
    pingpong_with(
        "ud_pingpong_with_global_routes_under_ld_preload",
        "ibv_ud_pingpong",
        Subst::Preload,
        ("soft1", "soft0"),
        &["-s", "4096", "-g", "0"],
        procs::free_port(),
    );
}

/// ibv_srq_pingpong: 16 RC QPs per side, each side's receives on one shared receive
/// queue, 200 round trips of 4096 bytes.
fn srq_pingpong(test: &str, subst: Subst, port: u16) {
    let args: &[&str] = &["-n", "200"];
    let Some(o) = two_processes(
        test,
        "ibverbs-utils",
        "ibv_srq_pingpong",
        subst,
        (
            &[&["-d", "soft1"], args].concat(),
            &[&["-d", "soft0"], args].concat(),
        ),
        port,
    ) else {
        return;
    };
    let both = ran_200_round_trips(&o, subst);
    // The 16 QPNs each side announces are the ones the other side connected to.
    let qpns = |out: &str, which: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.trim_start().starts_with(which))
            .filter_map(|l| l.split("QPN ").nth(1))
            .filter_map(|s| s.split(',').next())
            .map(str::to_string)
            .collect()
    };
    let server_local = qpns(&o.server, "local");
    assert_eq!(server_local.len(), 16, "{both}");
    assert_eq!(server_local, qpns(&o.client, "remote"), "{both}");
    assert_eq!(
        qpns(&o.client, "local"),
        qpns(&o.server, "remote"),
        "{both}"
    );
}

#[test]
fn srq_pingpong_under_ld_preload() {
    srq_pingpong(
        "srq_pingpong_under_ld_preload",
        Subst::Preload,
        procs::free_port(),
    );
}

#[test]
fn srq_pingpong_as_libibverbs_so_1() {
    srq_pingpong(
        "srq_pingpong_as_libibverbs_so_1",
        Subst::LibraryPath,
        procs::free_port(),
    );
}

/// What a perftest program reports.
#[derive(Clone, Copy)]
enum Table {
    /// Bandwidth: `#bytes #iterations BW peak BW average MsgRate`, on both sides.
    Bw,
    /// Latency: `#bytes #iterations t_min t_max t_typical t_avg …`; `server` says
    /// whether the server prints it too (ib_read_lat's does not).
    Lat { server: bool },
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

/// Checks the result row of one side: `bytes`-byte messages, 100 iterations, and a
/// positive average bandwidth or a minimum latency no larger than the average.
fn check_row(out: &str, table: Table, bytes: f64, ctx: &str) {
    let row = result_row(out).unwrap_or_else(|| panic!("no result row:\n{ctx}"));
    assert!(row.len() >= 5, "short result row {row:?}:\n{ctx}");
    assert_eq!((row[0], row[1]), (bytes, 100.0), "{ctx}");
    match table {
        Table::Bw => assert!(row[3] > 0.0 && row[4] > 0.0, "no bandwidth:\n{ctx}"),
        Table::Lat { .. } => assert!(row[2] > 0.0 && row[2] <= row[5], "latency:\n{ctx}"),
    }
}

fn perftest(test: &str, prog: &str, subst: Subst, table: Table, port: u16) {
    perftest_with(test, prog, subst, table, &[], port);
}

/// As [`perftest`], with `extra` arguments on both sides.
fn perftest_with(test: &str, prog: &str, subst: Subst, table: Table, extra: &[&str], port: u16) {
    let s = [&["-d", "soft1", "-n", "100"], extra].concat();
    let c = [&["-d", "soft0", "-n", "100"], extra].concat();
    let Some(o) = two_processes(test, "perftest", prog, subst, (&s, &c), port) else {
        return;
    };
    let ctx = format!(
        "{prog} under {subst:?}\n--- server\n{}--- client\n{}",
        o.server, o.client
    );
    // perftest's defaults: 64 KiB bandwidth messages, 8-byte atomics, 2-byte latency
    // messages.
    let bytes = match (table, prog) {
        (Table::Bw, "ib_atomic_bw") => 8.0,
        (Table::Bw, _) => 65536.0,
        (Table::Lat { .. }, _) => 2.0,
    };
    check_row(&o.client, table, bytes, &ctx);
    if matches!(table, Table::Bw | Table::Lat { server: true }) {
        check_row(&o.server, table, bytes, &ctx);
    }
}

/// One test per program and substitution.
macro_rules! perftests {
    ($($name:ident: $prog:literal, $subst:ident, $table:expr;)*) => {$(
        #[test]
        fn $name() {
            perftest(stringify!($name), $prog, Subst::$subst, $table, procs::free_port());
        }
    )*};
}

perftests! {
    perftest_write_bw_under_ld_preload: "ib_write_bw", Preload, Table::Bw;
    perftest_read_bw_under_ld_preload: "ib_read_bw", Preload, Table::Bw;
    perftest_send_bw_under_ld_preload: "ib_send_bw", Preload, Table::Bw;
    perftest_atomic_bw_under_ld_preload: "ib_atomic_bw", Preload, Table::Bw;
    perftest_write_lat_under_ld_preload: "ib_write_lat", Preload, Table::Lat { server: true };
    perftest_read_lat_under_ld_preload: "ib_read_lat", Preload, Table::Lat { server: false };
    perftest_send_lat_under_ld_preload: "ib_send_lat", Preload, Table::Lat { server: true };
    perftest_write_bw_as_libibverbs_so_1: "ib_write_bw", LibraryPath, Table::Bw;
    perftest_read_bw_as_libibverbs_so_1: "ib_read_bw", LibraryPath, Table::Bw;
    perftest_send_bw_as_libibverbs_so_1: "ib_send_bw", LibraryPath, Table::Bw;
    perftest_atomic_bw_as_libibverbs_so_1: "ib_atomic_bw", LibraryPath, Table::Bw;
    perftest_write_lat_as_libibverbs_so_1: "ib_write_lat", LibraryPath, Table::Lat { server: true };
    perftest_read_lat_as_libibverbs_so_1: "ib_read_lat", LibraryPath, Table::Lat { server: false };
    perftest_send_lat_as_libibverbs_so_1: "ib_send_lat", LibraryPath, Table::Lat { server: true };
}

/// perftest over XRC (`-c XRC`): each side's XRC send QP names the other's XRC SRQ,
/// which its XRC receive QP serves; the QPs are moved with RC's attribute masks, which
/// the kernel trims for each XRC half (`modify_qp_mask`).
macro_rules! xrc_perftests {
    ($($name:ident: $prog:literal, $subst:ident, $table:expr;)*) => {$(
        #[test]
        fn $name() {
            perftest_with(
                stringify!($name),
                $prog,
                Subst::$subst,
                $table,
                &["-c", "XRC"],
                procs::free_port(),
            );
        }
    )*};
}

xrc_perftests! {
    perftest_xrc_send_bw_under_ld_preload: "ib_send_bw", Preload, Table::Bw;
    perftest_xrc_write_bw_under_ld_preload: "ib_write_bw", Preload, Table::Bw;
    perftest_xrc_read_bw_under_ld_preload: "ib_read_bw", Preload, Table::Bw;
    perftest_xrc_atomic_bw_under_ld_preload: "ib_atomic_bw", Preload, Table::Bw;
    perftest_xrc_send_lat_under_ld_preload: "ib_send_lat", Preload, Table::Lat { server: true };
    perftest_xrc_send_bw_as_libibverbs_so_1: "ib_send_bw", LibraryPath, Table::Bw;
}

/// ibv_xsrq_pingpong: XRC. Each side opens the XRC domain of `/tmp/xrc_domain`,
/// creates an XRC SRQ with its own CQ, an XRC receive QP and an XRC send QP, and sends
/// naming the other side's SRQ number; `-n` round trips each way, then "success".
/// Each side's remote receive QP, send QP and SRQ numbers are the other's local ones.
fn xsrq_pingpong(test: &str, subst: Subst, extra: &[&str]) {
    let server = [&["-d", "soft1", "-n", "50"], extra].concat();
    let client = [&["-d", "soft0", "-n", "50"], extra].concat();
    let Some(o) = two_processes(
        test,
        "ibverbs-utils",
        "ibv_xsrq_pingpong",
        subst,
        (&server, &client),
        procs::free_port(),
    ) else {
        return;
    };
    let both = format!("--- server\n{}--- client\n{}", o.server, o.client);
    // "  local: LID 0002, QPN RECV 000012 SEND 000013, PSN 47e3ee, SRQN 000011, GID ::"
    let ids = |out: &str, which: &str| -> (String, String, String) {
        let l = out
            .lines()
            .find(|l| l.trim_start().starts_with(which))
            .unwrap_or_else(|| panic!("no {which} line:\n{both}"));
        let after = |key: &str| {
            l.split(key)
                .nth(1)
                .and_then(|s| s.split([',', ' ']).next())
                .unwrap_or_else(|| panic!("no {key} in {l:?}:\n{both}"))
                .to_string()
        };
        (after("RECV "), after("SEND "), after("SRQN "))
    };
    for out in [&o.server, &o.client] {
        assert!(out.lines().any(|l| l == "success"), "{both}");
    }
    assert_eq!(ids(&o.server, "local"), ids(&o.client, "remote"), "{both}");
    assert_eq!(ids(&o.client, "local"), ids(&o.server, "remote"), "{both}");
    assert_ne!(ids(&o.server, "local"), ids(&o.client, "local"), "{both}");
}

#[test]
fn xsrq_pingpong_under_ld_preload() {
    xsrq_pingpong("xsrq_pingpong_under_ld_preload", Subst::Preload, &[]);
}

#[test]
fn xsrq_pingpong_as_libibverbs_so_1() {
    xsrq_pingpong("xsrq_pingpong_as_libibverbs_so_1", Subst::LibraryPath, &[]);
}

/// With `-e`: each side sleeps on its receive CQ's completion channel, woken by the
/// completions the XRC SRQ's receives put on that CQ.
#[test]
fn xsrq_pingpong_with_completion_events_under_ld_preload() {
    xsrq_pingpong(
        "xsrq_pingpong_with_completion_events_under_ld_preload",
        Subst::Preload,
        &["-e"],
    );
}
