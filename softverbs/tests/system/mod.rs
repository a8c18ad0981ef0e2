//! Gates for the tests that run a program from a system package (`ibv_devinfo` from
//! ibverbs-utils, `ib_write_bw` from perftest).
//!
//! On a machine without the package such a test is skipped: it passes after writing one
//! line to the terminal that names the Debian package it needs. CI installs the packages
//! and sets `VQP_REQUIRE_SYSTEM_PACKAGES=1`, which turns every skip into a failure, so a gated test can never
//! pass silently there. (The same rules as vqp-sys' `tests/system`.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../sys/tests/system/gate.rs"]
mod gate;
pub use gate::skip;
/// The variable that turns a skip into a failure (read by tests with skips of their own).
#[allow(unused_imports)]
pub use gate::REQUIRE;

/// The program `name` on `PATH`, or `None` after [`skip`] naming `package`.
pub fn program(test: &str, name: &str, package: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        skip(test, package, &format!("{name} is not installed"));
    }
    found
}

/// How a bounded run ended.
#[derive(Debug)]
pub struct Run {
    /// The exit status; `None` when the run was killed for taking too long.
    pub status: Option<ExitStatus>,
    /// Everything the program wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl Run {
    /// The run, for an assertion message.
    pub fn describe(&self) -> String {
        format!(
            "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Starts `cmd` with stdout and stderr captured.
pub fn spawn(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"))
}

/// Waits at most `limit` for `child`, killing it past that; collects its output (read
/// meanwhile, so a chatty program cannot block on a full pipe).
pub fn finish(mut child: Child, limit: Duration) -> Run {
    fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let mut bytes = Vec::new();
                let _ = p.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Runs `cmd` to completion within `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Run {
    finish(spawn(cmd), limit)
}

/// A directory holding `libibverbs.so.1`, a link to `library`, for `LD_LIBRARY_PATH`;
/// removed when dropped.
pub struct LibDir(pub PathBuf);

impl LibDir {
    /// Makes the directory (unique per process and `tag`).
    pub fn new(library: &Path, tag: &str) -> LibDir {
        let dir = std::env::temp_dir().join(format!("vqp-libibverbs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(library, dir.join("libibverbs.so.1")).unwrap();
        LibDir(dir)
    }
}

impl Drop for LibDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
