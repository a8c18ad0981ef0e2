//! The main job across processes: `write_bw --device soft1 --server` in one process and
//! `write_bw --device soft0 --connect 127.0.0.1:PORT` in another, over the softverbs
//! cdylib (`VQP_IBVERBS_PATH`), both modes and all three opcodes, every byte verified.
//!
//! Needs the example built (`cargo test` builds examples; alone:
//! `cargo build --example write_bw`).

#[path = "../softverbs/tests/procs/mod.rs"]
mod procs;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

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

fn run(mode: &str, opcode: &str, port: u16) {
    let test = format!("write_bw_{mode}_{opcode}");
    let dir = procs::namespace(&test);
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
    let prog = write_bw();
    let s: Vec<String> = ["--device", "soft1", "--server", "--port", &port.to_string()]
        .map(String::from)
        .to_vec();
    let c: Vec<String> = [
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
        "--iters",
        "40",
        "--qps",
        "2",
    ]
    .map(String::from)
    .to_vec();
    let env: [(&str, &OsStr); 2] = [
        ("VQP_IBVERBS_PATH", lib.as_os_str()),
        ("VQP_SOFT_DIR", dir.as_os_str()),
    ];
    let (so, co) = procs::run_pair(
        (&prog, &s),
        (&prog, &c),
        &env,
        port,
        Duration::from_secs(120),
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&so.stdout),
        String::from_utf8_lossy(&co.stdout)
    );
    assert!(
        all.contains("every byte verified") && all.contains("passed"),
        "{all}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spray_write() {
    run("spray", "write", 18831);
}

#[test]
fn spray_write_imm() {
    run("spray", "write_imm", 18832);
}

#[test]
fn spray_read() {
    run("spray", "read", 18833);
}

#[test]
fn dqplb_write() {
    run("dqplb", "write", 18834);
}

#[test]
fn dqplb_write_imm() {
    run("dqplb", "write_imm", 18835);
}

#[test]
fn dqplb_read() {
    run("dqplb", "read", 18836);
}
