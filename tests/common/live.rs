//! A write_bw process run by a test: its stderr read line by line as it runs, its
//! stdout collected, killed if the test lets it go or it outlives its limit. Starting,
//! waiting and killing are softverbs' `procs` (which the test includes beside this).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Child;
use std::sync::mpsc::{channel, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::procs::{self, Killed};

/// A write_bw process whose stderr is read line by line as it runs.
pub struct Live {
    child: Killed,
    lines: Receiver<String>,
    seen: Vec<String>,
    stdout: Option<JoinHandle<String>>,
}

/// How a [`Live`] process ended.
pub struct Ended {
    /// `None`: it ran past its limit and was killed.
    pub status: Option<std::process::ExitStatus>,
    pub stdout: String,
    pub stderr: Vec<String>,
}

impl Ended {
    pub fn describe(&self, who: &str) -> String {
        format!(
            "{who}: status {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr.join("\n")
        )
    }
}

impl Live {
    pub fn spawn(prog: &Path, args: &[String], env: &[(&str, &OsStr)]) -> Live {
        let mut started = procs::start(prog, args, env);
        let child = started.0.as_mut().unwrap();
        let (tx, lines) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        Live {
            child: started,
            lines,
            seen: Vec::new(),
            stdout: Some(stdout),
        }
    }

    /// Waits at most `limit` for the process to listen on TCP `port`; panics past that or
    /// if it exits first.
    pub fn listen(&mut self, port: u16, limit: Duration) {
        let child = self.child.0.as_mut().unwrap();
        if let Err(status) = procs::listen_by(child, port, Instant::now() + limit) {
            while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
                self.seen.push(l);
            }
            panic!(
                "exited ({status}) before listening on {port}; stderr:\n{}",
                self.seen.join("\n")
            );
        }
    }

    /// Waits at most `limit` for a stderr line that satisfies `pred`.
    pub fn wait_line(&mut self, limit: Duration, pred: impl Fn(&str) -> bool) -> bool {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = pred(&l);
                    self.seen.push(l);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// The process's id (while it runs).
    pub fn pid(&self) -> u32 {
        self.child.0.as_ref().map_or(0, Child::id)
    }

    /// Kills the process with SIGKILL.
    pub fn kill(&mut self) {
        if let Some(c) = self.child.0.as_mut() {
            let _ = c.kill();
        }
    }

    /// Waits at most `limit` for the process to exit, killing it past that.
    pub fn finish(mut self, limit: Duration) -> Ended {
        let child = self.child.0.as_mut().unwrap();
        let status = procs::exit_by(child, Instant::now() + limit);
        let stdout = self.stdout.take().unwrap().join().unwrap_or_default();
        // The pipe closed with the process: the reader thread ends on its own.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(l);
        }
        Ended {
            status,
            stdout,
            stderr: std::mem::take(&mut self.seen),
        }
    }
}
