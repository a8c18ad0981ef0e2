//! UCX over softverbs, timed beside softverbs' own cross-process figures in the same
//! run: Debian's `ucx_perftest` (package `ucx-utils`) as two processes through
//! `softverbs run`, UCX restricted to `rc_verbs`, `ud_verbs` and `self`, the server on
//! soft0 and the client on soft1.
//!
//! One criterion iteration is one of `ucx_perftest`'s, timed by `ucx_perftest` itself:
//! the time returned is the iterations times the average its client reports (per
//! iteration for the bandwidth tests, half a round trip for the latency ones), so
//! process start-up and UCX's wire-up stay out of the figure. Each run makes at least a
//! given number of iterations (its first ones, which register memory and unpack keys,
//! would otherwise weigh on the few criterion asks for while it warms up).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "../../tests/procs/mod.rs"]
mod procs;

/// Debian's `ucx_perftest`, run through the launcher.
pub struct Ucx {
    launcher: PathBuf,
    dir: PathBuf,
}

impl Ucx {
    /// `ucx_perftest` through the launcher, in namespace directory `dir`; `None`, with a
    /// line saying why, when it is not installed.
    pub fn find(dir: &Path) -> Option<Ucx> {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ucx_perftest").is_file()));
        if !found {
            eprintln!("ucx_perftest not found (Debian package ucx-utils): no UCX figures");
            return None;
        }
        Some(Ucx {
            launcher: PathBuf::from(env!("CARGO_BIN_EXE_softverbs")),
            dir: dir.to_path_buf(),
        })
    }

    /// Runs `ucx_perftest -t test -s size` for `iters` iterations, at least `least`
    /// (after `warmup` untimed ones), and returns what `iters` of them took by the
    /// client's average.
    pub fn run(&self, test: &str, size: usize, iters: u64, least: u64, warmup: u64) -> Duration {
        let f = self.final_line(test, size, iters.max(least), warmup);
        Duration::from_secs_f64(f.average * 1e-6 * iters as f64)
    }

    /// Runs `ucx_perftest -t test -s size` for `iters` iterations after `warmup`
    /// untimed ones, and returns its client's 50th percentile: the median of its last
    /// 2,048 iterations (UCX's `TIMING_QUEUE_SIZE`), per iteration for the bandwidth
    /// tests, half a round trip for the latency ones.
    pub fn median(&self, test: &str, size: usize, iters: u64, warmup: u64) -> Duration {
        let f = self.final_line(test, size, iters, warmup);
        Duration::from_secs_f64(f.median * 1e-6)
    }

    /// Runs the pair and reads its client's `Final:` line.
    fn final_line(&self, test: &str, size: usize, iters: u64, warmup: u64) -> Final {
        let port = procs::free_port();
        let args = |dev: &str, host: bool| -> Vec<String> {
            let mut v: Vec<String> = vec![
                "run".into(),
                "--dir".into(),
                self.dir.display().to_string(),
                "--".into(),
                "env".into(),
                format!("UCX_NET_DEVICES={dev}:1"),
                "ucx_perftest".into(),
                "-t".into(),
                test.into(),
                "-s".into(),
                size.to_string(),
                "-n".into(),
                iters.to_string(),
                "-w".into(),
                warmup.to_string(),
                "-p".into(),
                port.to_string(),
            ];
            if host {
                v.push("127.0.0.1".into());
            }
            v
        };
        let env: [(&str, &OsStr); 2] = [
            ("UCX_TLS", OsStr::new("rc_verbs,ud_verbs,self")),
            ("UCX_WARN_UNUSED_ENV_VARS", OsStr::new("n")),
        ];
        let (_, client) = procs::run_pair(
            (&self.launcher, &args("soft0", false)),
            (&self.launcher, &args("soft1", true)),
            &env,
            port,
            Duration::from_secs(120),
        );
        let out = String::from_utf8_lossy(&client.stdout);
        final_of(&out).unwrap_or_else(|| panic!("ucx_perftest {test}: no result line:\n{out}"))
    }
}

/// The latencies (µs) of `ucx_perftest`'s `Final:` line.
struct Final {
    median: f64,
    average: f64,
}

/// Reads `Final: iterations 50%ile average overall …`.
fn final_of(out: &str) -> Option<Final> {
    let line = out.lines().find(|l| l.starts_with("Final:"))?;
    let mut f = line.split_whitespace().skip(2).map(|x| x.parse::<f64>());
    Some(Final {
        median: f.next()?.ok()?,
        average: f.next()?.ok()?,
    })
}
