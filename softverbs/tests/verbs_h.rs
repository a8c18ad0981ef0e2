//! A C program built against the system's `<infiniband/verbs.h>` and libibverbs
//! (`tests/c/verbs_h_paths.c`) runs on the cdylib, preloaded and as `libibverbs.so.1`: the
//! header's inline paths to the extended verbs (through the `verbs_context` in front of
//! every softverbs context: `ibv_query_device_ex`, `ibv_query_rt_values_ex`,
//! `ibv_create_cq_ex` and `ibv_start_poll`, `ibv_create_qp_ex` and the `ibv_wr_*` API,
//! device memory, thread and parent domains), the unsupported verbs, memory windows
//! through the inline `ibv_alloc_mw` / `ibv_bind_mw` / `ibv_dealloc_mw`, and RDMA WRITEs
//! through the data-path ops and the `ibv_wr_*` API. Gated on gcc and libibverbs-dev.

mod system;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/verbs_h_paths.c");

fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

/// Compiles the probe into `dir`, or returns `None` after skipping for want of the
/// compiler or the header and library.
fn build(test: &str, dir: &Path) -> Option<PathBuf> {
    let exe = dir.join("verbs_h_paths");
    let out = match Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(SOURCE)
        .arg("-libverbs")
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            system::skip(
                test,
                "gcc",
                &format!("the C compiler cc does not run ({e})"),
            );
            return None;
        }
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("infiniband/verbs.h") || err.contains("-libverbs") {
            system::skip(
                test,
                "libibverbs-dev",
                "<infiniband/verbs.h> or libibverbs.so is not installed",
            );
            return None;
        }
        panic!("the probe does not compile:\n{err}");
    }
    Some(exe)
}

fn run_probe(test: &str, preload: bool) {
    let lib_dir = system::LibDir::new(&cdylib(), if preload { "probe-pre" } else { "probe-lib" });
    let Some(exe) = build(test, &lib_dir.0) else {
        return;
    };
    let mut cmd = Command::new(&exe);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VQP_SOFT_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("VQP_SOFT_DEVICES", "2");
    if preload {
        cmd.env("LD_PRELOAD", cdylib());
    } else {
        cmd.env("LD_LIBRARY_PATH", &lib_dir.0);
    }
    let run = system::run(&mut cmd, Duration::from_secs(30));
    assert!(
        run.status.is_some_and(|s| s.success()),
        "the probe failed (preload: {preload}):\n{}",
        run.describe()
    );
    let oks = run.stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, 48, "every check ran:\n{}", run.describe());
    assert!(run.stdout.contains("\n0 failures"), "{}", run.describe());
}

#[test]
fn verbs_h_inline_paths_work_under_ld_preload() {
    run_probe("verbs_h_inline_paths_work_under_ld_preload", true);
}

#[test]
fn verbs_h_inline_paths_work_as_libibverbs_so_1() {
    run_probe("verbs_h_inline_paths_work_as_libibverbs_so_1", false);
}
