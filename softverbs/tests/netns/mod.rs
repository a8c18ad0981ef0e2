//! Network namespaces joined by veth pairs, for the tests of RoCE ports: each made
//! with `ip` (iproute2) and deleted when the guard is dropped — at the end of the test,
//! and when it fails (a panic unwinds through the guard). Addresses come from the
//! documentation ranges 192.0.2.0/24 and 198.51.100.0/24 only.
//!
//! Needs root and `ip`: without them a test is skipped with one line, or fails when
//! `VQP_REQUIRE_SYSTEM_PACKAGES=1` (as in CI, which runs as root).
#![allow(dead_code)]

use std::io::Write as _;
use std::process::{Command, Stdio};

/// The variable that turns a skip into a failure.
const REQUIRE: &str = "VQP_REQUIRE_SYSTEM_PACKAGES";

/// Whether namespaces can be made here; otherwise says why on one line (or panics
/// under [`REQUIRE`]).
pub fn available(test: &str) -> bool {
    // SAFETY: `geteuid` has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let why = match (root, ip) {
        (true, true) => return true,
        (false, _) => "network namespaces need root".to_string(),
        (true, false) => {
            "`ip netns` does not work; it needs the Debian package iproute2".to_string()
        }
    };
    let line = format!("skipped {test}: {why}");
    if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
        panic!("{line}; {REQUIRE}=1 says it must run, so this is a failure");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
    false
}

/// Runs `ip ARGS`, panicking with its message when it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Network namespaces, deleted (with the veths in them) when dropped.
pub struct Netns {
    pub names: Vec<String>,
}

impl Netns {
    /// `count` fresh namespaces named after `tag` and this process, loopback up.
    pub fn new(tag: &str, count: usize) -> Netns {
        let mut ns = Netns { names: Vec::new() };
        for i in 0..count {
            let name = format!("vqp-{tag}-{}-{i}", std::process::id());
            let _ = Command::new("ip")
                .args(["netns", "del", &name])
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", &name]);
            ns.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"]);
        }
        ns
    }

    /// Namespace `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// A veth pair: `a` in namespace `na` with address `addr_a` (CIDR), `b` in `nb` with
    /// `addr_b`, MTU `mtu`, both up.
    pub fn veth(
        &self,
        (na, a, addr_a): (usize, &str, &str),
        (nb, b, addr_b): (usize, &str, &str),
        mtu: u32,
    ) {
        let (sa, sb) = (self.name(na), self.name(nb));
        ip(&[
            "-n",
            sa,
            "link",
            "add",
            a,
            "mtu",
            &mtu.to_string(),
            "type",
            "veth",
            "peer",
            "name",
            b,
            "netns",
            sb,
            "mtu",
            &mtu.to_string(),
        ]);
        ip(&["-n", sa, "addr", "add", addr_a, "dev", a]);
        ip(&["-n", sb, "addr", "add", addr_b, "dev", b]);
        ip(&["-n", sa, "link", "set", a, "up"]);
        ip(&["-n", sb, "link", "set", b, "up"]);
        self.wait_up(na, a);
        self.wait_up(nb, b);
    }

    /// Waits (up to 5 s) until interface `ifname` of namespace `i` is operationally up:
    /// the kernel's link watch sets the state of a link just brought up with a delay.
    pub fn wait_up(&self, i: usize, ifname: &str) {
        self.wait_for(i, &["-br", "link", "show", "dev", ifname], "came up", |t| {
            t.split_whitespace().nth(1) == Some("UP")
        });
    }

    /// Waits (5 s at most) until `ifname` in namespace `i` has no IPv6 address still
    /// tentative: a link-local address cannot be used for a second or two after its
    /// link comes up (duplicate address detection).
    #[allow(dead_code)]
    pub fn wait_ipv6_usable(&self, i: usize, ifname: &str) {
        let args = ["-6", "addr", "show", "dev", ifname];
        self.wait_for(i, &args, "had a usable IPv6 address", |t| {
            t.contains("inet6") && !t.contains("tentative")
        });
    }

    /// Runs `ip -n <namespace i> <args>` every 20 ms until `done` holds for its
    /// output; fails after 5 s, naming what never `happened`.
    fn wait_for(&self, i: usize, args: &[&str], happened: &str, done: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let out = Command::new("ip")
                .args(["-n", self.name(i)])
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("ip: {e}"));
            let text = String::from_utf8_lossy(&out.stdout);
            if done(&text) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{args:?} in {} never {happened}: {text}",
                self.name(i)
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A command that runs `program` in namespace `i`.
    pub fn exec(&self, i: usize, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.name(i)]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A directory removed when dropped (a test's softverbs namespace directory), also when
/// the test fails.
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether process `pid` (in whatever network namespace) listens on TCP `port`.
pub fn listening_in(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}
