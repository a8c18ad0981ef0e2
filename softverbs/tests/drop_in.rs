//! rdma-core's own programs on the cdylib, substituted for libibverbs both ways: preloaded
//! (`LD_PRELOAD`, the system's libibverbs still loaded) and found first
//! (`LD_LIBRARY_PATH`, the only libibverbs in the process). Gated on the Debian packages
//! that hold the programs; every run is bounded in time and fails on a crash.

mod procs;
mod system;

use std::path::{Path, PathBuf};
use std::process::Command;
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
enum Mode {
    Preload,
    LibraryPath,
}

/// `program` with the cdylib substituted as `mode` says, two soft devices, and nothing
/// of the caller's softverbs settings.
fn command(program: &Path, mode: Mode, lib_dir: &system::LibDir) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VQP_SOFT_") {
            c.env_remove(k);
        }
    }
    c.env("VQP_SOFT_DEVICES", "2");
    match mode {
        Mode::Preload => c.env("LD_PRELOAD", cdylib()),
        Mode::LibraryPath => c.env("LD_LIBRARY_PATH", &lib_dir.0),
    };
    c
}

/// What `ibv_devinfo -v` prints for device `i` of softverbs.
fn expected_lines(i: u64) -> Vec<String> {
    let guid = format!("0200:5eff:fe00:{i:04x}");
    vec![
        format!("hca_id:\tsoft{i}"),
        "\ttransport:\t\t\tInfiniBand (0)".into(),
        format!("\tnode_guid:\t\t\t{guid}"),
        "\tvendor_id:\t\t\t0xffffff".into(),
        format!("\tboard_id:\t\t\tVQP_SOFT_{i:04}"),
        "\tphys_port_cnt:\t\t\t1".into(),
        "\tmax_qp_wr:\t\t\t16384".into(),
        "\tatomic_cap:\t\t\tATOMIC_HCA (1)".into(),
        "\t\tport:\t1".into(),
        "\t\t\tstate:\t\t\tPORT_ACTIVE (4)".into(),
        "\t\t\tactive_mtu:\t\t4096 (5)".into(),
        format!("\t\t\tport_lid:\t\t{}", i + 1),
        "\t\t\tlink_layer:\t\tInfiniBand".into(),
        "\t\t\tpkey_tbl_len:\t\t1".into(),
        "\t\t\tgid_tbl_len:\t\t1".into(),
        "\t\t\tactive_width:\t\t4X (2)".into(),
        "\t\t\tphys_state:\t\tLINK_UP (5)".into(),
        format!("\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:{guid}"),
    ]
}

fn devinfo_prints_both_devices(mode: Mode, test: &str) {
    let Some(devinfo) = system::program(test, "ibv_devinfo", "ibverbs-utils") else {
        return;
    };
    let dir = system::LibDir::new(&cdylib(), &format!("{mode:?}"));
    let run = system::run(
        command(&devinfo, mode, &dir).arg("-v"),
        Duration::from_secs(30),
    );
    assert!(
        run.status.is_some_and(|s| s.success()),
        "ibv_devinfo -v under {mode:?} failed:\n{}",
        run.describe()
    );
    let lines: Vec<&str> = run.stdout.lines().collect();
    for i in 0..2 {
        // Each device's lines, in order, from its hca_id to the next one.
        let start = lines
            .iter()
            .position(|l| *l == format!("hca_id:\tsoft{i}"))
            .unwrap_or_else(|| panic!("no soft{i} under {mode:?}:\n{}", run.describe()));
        let mut rest = lines[start..].iter();
        for want in expected_lines(i) {
            assert!(
                rest.any(|l| *l == want),
                "{want:?} missing or out of order for soft{i} under {mode:?}:\n{}",
                run.describe()
            );
        }
    }
    assert!(!run.stdout.contains("hca_id:\tsoft2"));
}

#[test]
fn ibv_devinfo_prints_every_device_under_ld_preload() {
    devinfo_prints_both_devices(
        Mode::Preload,
        "ibv_devinfo_prints_every_device_under_ld_preload",
    );
}

#[test]
fn ibv_devinfo_prints_every_device_as_libibverbs_so_1() {
    devinfo_prints_both_devices(
        Mode::LibraryPath,
        "ibv_devinfo_prints_every_device_as_libibverbs_so_1",
    );
}

/// perftest's `ib_write_bw` (linked with libmlx5, libefa and librdmacm, which need
/// rdma-core's private symbols) starts, opens a soft device, creates its QP and exchanges
/// addresses with its peer, without a crash. (Server and client are two processes; whether
/// the transfer itself succeeds is the cross-process provider's business.)
fn perftest_starts(mode: Mode, test: &str) {
    let Some(bw) = system::program(test, "ib_write_bw", "perftest") else {
        return;
    };
    let dir = system::LibDir::new(&cdylib(), &format!("bw-{mode:?}"));
    let port = procs::free_port().to_string();
    let server =
        system::spawn(command(&bw, mode, &dir).args(["-d", "soft0", "-p", &port, "-n", "5"]));
    std::thread::sleep(Duration::from_millis(500));
    let client = system::run(
        command(&bw, mode, &dir).args(["-d", "soft1", "-p", &port, "-n", "5", "127.0.0.1"]),
        Duration::from_secs(20),
    );
    let server = system::finish(server, Duration::from_secs(20));
    for (who, run) in [("client", &client), ("server", &server)] {
        let status = run
            .status
            .unwrap_or_else(|| panic!("{who} did not finish under {mode:?}:\n{}", run.describe()));
        assert!(
            std::os::unix::process::ExitStatusExt::signal(&status).is_none(),
            "{who} died of a signal under {mode:?}:\n{}",
            run.describe()
        );
        assert!(
            !run.stderr.contains("symbol lookup error") && !run.stderr.contains("undefined symbol"),
            "{who} did not load under {mode:?}:\n{}",
            run.describe()
        );
        assert!(
            run.stdout.contains("local address: LID 0x0"),
            "{who} did not set up its QP under {mode:?}:\n{}",
            run.describe()
        );
    }
    assert!(
        server.stdout.contains("Device         : soft0"),
        "{}",
        server.describe()
    );
}

#[test]
fn ib_write_bw_starts_under_ld_preload() {
    perftest_starts(Mode::Preload, "ib_write_bw_starts_under_ld_preload");
}

#[test]
fn ib_write_bw_starts_as_libibverbs_so_1() {
    perftest_starts(Mode::LibraryPath, "ib_write_bw_starts_as_libibverbs_so_1");
}
