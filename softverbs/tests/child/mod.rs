//! A child process driven by line commands: the test binary re-run as its `child` test
//! with a marker variable set, reading one command a line on stdin and answering with
//! lines on stdout, each prefixed `@` (the harness may print "test child ... " on the
//! same line first), the last one `end`. [`Driver`] is the parent's end, [`serve`] the
//! child's loop; a rig includes this file and adds its own commands. Every wait is
//! bounded; the child is killed when its driver drops.
#![allow(dead_code)]

use std::fmt::Display;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running child and the answers it has sent.
pub struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The child's stderr so far, when [`Driver::spawn`] was asked to keep it.
    stderr: Option<Arc<Mutex<String>>>,
    /// How long one command may take.
    step: Duration,
    /// The last command sent, named when its answer is late.
    last: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts this test binary's `child` test with `marker` set in its environment.
    /// `setup` adds the rest: the child's environment, and `stderr(Stdio::piped())` to
    /// keep its stderr for [`Driver::stderr`] rather than let it through. Each command
    /// must be answered within `step`.
    pub fn spawn(marker: &str, step: Duration, setup: impl FnOnce(&mut Command)) -> Driver {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(marker, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        setup(&mut c);
        let mut child = c.spawn().expect("spawn the child");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find('@') {
                    if tx.send(line[at + 1..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let stderr = child.stderr.take().map(|mut err| {
            let kept = Arc::new(Mutex::new(String::new()));
            let sink = Arc::clone(&kept);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
            kept
        });
        Driver {
            child,
            stdin,
            lines,
            stderr,
            step,
            last: String::new(),
        }
    }

    /// Sends a command without waiting for its answer.
    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("child stdin");
        self.stdin.flush().unwrap();
        self.last = line.to_string();
    }

    /// Waits for the answer lines (up to `end`) of the command sent last.
    pub fn answer(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let l = self.lines.recv_timeout(self.step).unwrap_or_else(|e| {
                let err = match &self.stderr {
                    Some(_) => format!("\nstderr:\n{}", self.stderr()),
                    None => String::new(),
                };
                panic!("child did not answer {:?}: {e}{err}", self.last)
            });
            if l == "end" {
                return out;
            }
            out.push(l);
        }
    }

    /// Sends a command and collects its answer lines.
    pub fn cmd(&mut self, line: &str) -> Vec<String> {
        self.send(line);
        self.answer()
    }

    /// The one answer line of a command.
    pub fn one(&mut self, line: &str) -> String {
        let mut v = self.cmd(line);
        assert_eq!(v.len(), 1, "{line}: {v:?}");
        v.pop().unwrap()
    }

    /// What the child wrote on stderr so far (nothing unless it was kept).
    pub fn stderr(&self) -> String {
        self.stderr
            .as_ref()
            .map_or_else(String::new, |s| s.lock().unwrap().clone())
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child with `SIGKILL` (no exit handler runs) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Ends the child normally (its exit handlers run) and returns its stderr.
    pub fn exit(mut self) -> String {
        self.cmd("exit");
        let deadline = Instant::now() + self.step;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "child did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The reader thread sees end of file once the child is gone.
        std::thread::sleep(Duration::from_millis(20));
        self.stderr()
    }
}

/// Sends one answer line to the parent.
pub fn out(line: impl Display) {
    println!("@{line}");
}

/// Word `i` of a command, as a number.
pub fn num(w: &[&str], i: usize) -> u64 {
    w[i].parse().unwrap()
}

/// The child's command loop: each line on stdin, split into words, goes to `handle`,
/// which answers with [`out`] and returns whether it knew the command; `end` follows
/// every answer. `exit` (answered, then the loop returns) and end of input end it.
pub fn serve(mut handle: impl FnMut(&[&str]) -> bool) {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() == Some(&"exit") {
            out("end");
            return;
        }
        if !handle(&w) {
            out(format!("unknown {line}"));
        }
        out("end");
    }
}
