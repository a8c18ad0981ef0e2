//! The main job between two hosts: `write_bw --server` in one network namespace and
//! `--connect` in another, each with its own softverbs namespace directory
//! (`VQP_SOFT_DIR`), so no shared memory can carry the data: every byte crosses the
//! veths through softverbs' UCX route (`softverbs/README.md`, "Between machines").
//! Each host's soft0 and soft1 are bound to its ends of two veth pairs
//! (`VQP_SOFT_NETDEV`: 192.0.2.0/24 and 198.51.100.0/24), no `--gid-index` is given
//! (each side chooses its port's RoCE v2 IPv4 GID), and every byte is verified (on
//! the server for writes, on the client for reads).
//!
//! Needs root and iproute2 (the namespaces are deleted even when a test fails) and UCX
//! (Debian's `libucx0`); skips with one line without them, fails under
//! `VQP_REQUIRE_SYSTEM_PACKAGES=1`. Needs the example built (`cargo test` builds
//! examples).

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;
#[path = "../softverbs/tests/netns/mod.rs"]
mod netns;
#[path = "../softverbs/tests/procs/mod.rs"]
mod procs;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli::{number_after, text};
use netns::{Netns, TempDir};

/// Each host's interfaces: link 0 (192.0.2.0/24) and link 1 (198.51.100.0/24).
const LINKS: [(&str, &str); 2] = [("vm", "192.0.2"), ("vn", "198.51.100")];

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

/// Whose softverbs namespace directory each host has.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dirs {
    /// Each its own: the data crosses the veths through the UCX route.
    Own,
    /// One for both, as two processes of one machine: the data moves through shared
    /// memory, while each port's state still follows its veth.
    Shared,
}

/// Two hosts: namespaces 0 (the server's) and 1 (the client's) joined by one or two
/// veth pairs (`LINKS`), soft0 (and soft1) bound to each host's ends, each host with
/// a softverbs namespace directory of its own (or one shared, [`Dirs`]).
struct Hosts {
    ns: Netns,
    dirs: [TempDir; 2],
    lib: PathBuf,
    prog: PathBuf,
    /// Each host's `VQP_SOFT_NETDEV`: soft0 (and soft1) on its interfaces.
    netdev: [String; 2],
}

impl Hosts {
    /// The hosts, or `None` (said on one line) when this machine cannot make them.
    fn new(test: &str, links: usize, dirs: Dirs) -> Option<Hosts> {
        if !netns::available(test) || (dirs == Dirs::Own && !ucx_available(test)) {
            return None;
        }
        let shared = dirs == Dirs::Shared;
        let prog = cli::example("write_bw");
        let ns = Netns::new(test, 2);
        for (name, net) in &LINKS[..links] {
            ns.veth(
                (0, &format!("{name}0"), &format!("{net}.1/24")),
                (1, &format!("{name}1"), &format!("{net}.2/24")),
                1500,
            );
        }
        let dirs = [0, 1].map(|i| {
            let host = if shared { 0 } else { i };
            let d = TempDir(procs::namespace(&format!("{test}-h{host}")));
            std::fs::create_dir_all(&d.0).expect("a namespace directory");
            d
        });
        let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
        let netdev = [0, 1].map(|i| {
            LINKS[..links]
                .iter()
                .enumerate()
                .map(|(d, (name, _))| format!("soft{d}={name}{i}"))
                .collect::<Vec<_>>()
                .join(",")
        });
        Some(Hosts {
            ns,
            dirs,
            lib,
            prog,
            netdev,
        })
    }

    /// `write_bw ARGS` on host `i`, its devices bound to its interfaces.
    fn start(&self, i: usize, args: &[&str]) -> procs::Killed {
        let mut c = self.ns.exec(i, &self.prog);
        c.args(args)
            .env("VQP_SOFT_DIR", &self.dirs[i].0)
            .env("VQP_IBVERBS_PATH", &self.lib)
            .env("VQP_SOFT_NETDEV", &self.netdev[i])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        procs::Killed(Some(c.spawn().expect("spawn write_bw")))
    }

    /// Runs `ip -n HOST ARGS` (`link set vm0 down`, ...) in host `i`.
    fn ip(&self, i: usize, args: &[&str]) {
        netns::ip(&[&["-n", self.ns.name(i)][..], args].concat());
    }

    /// Runs `tc -n HOST ARGS` in host `i`.
    fn tc(&self, i: usize, args: &[&str]) {
        let out = Command::new("tc")
            .args(["-n", self.ns.name(i)])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tc {args:?}: {e} (Debian's iproute2)"));
        assert!(out.status.success(), "tc {args:?}: {}", text(&out.stderr));
    }

    /// A server on host 0 (`--device soft0[,soft1]`), then a client on host 1 with
    /// `args`, `during` called once the client started; both outputs, once both
    /// ended (killed past `limit`).
    fn run(&self, devices: &str, args: &[&str], limit: Duration, during: impl FnOnce()) -> Run {
        let _machine = cli::share();
        let port = procs::free_port().to_string();
        let deadline = Instant::now() + limit;
        let mut srv = self.start(0, &["--device", devices, "--server", "--port", &port]);
        let pid = srv.0.as_ref().unwrap().id();
        while !netns::listening_in(pid, port.parse().unwrap()) {
            let exited = srv.0.as_mut().unwrap().try_wait().ok().flatten().is_some();
            assert!(
                !exited && Instant::now() < deadline,
                "the server never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let to = format!("{}.1:{port}", LINKS[0].1);
        let mut cli = self.start(
            1,
            &[&["--device", devices, "--connect", &to][..], args].concat(),
        );
        during();
        let client = procs::wait(&mut cli, deadline, "client");
        let server = procs::wait(&mut srv, deadline + Duration::from_secs(5), "server");
        Run { server, client }
    }
}

/// Both sides' outputs.
struct Run {
    server: Output,
    client: Output,
}

impl Run {
    /// Both outputs, for a failure's message.
    fn context(&self) -> String {
        format!(
            "--- server {}\n{}{}--- client {}\n{}{}",
            self.server.status,
            text(&self.server.stdout),
            text(&self.server.stderr),
            self.client.status,
            text(&self.client.stdout),
            text(&self.client.stderr)
        )
    }

    /// Both sides succeeded and every byte of the client's messages of `size` bytes
    /// (`messages` of them when given) was verified where `opcode` verifies it; the
    /// number of messages.
    fn passed(&self, opcode: &str, messages: Option<u64>, size: u64) -> u64 {
        let ctx = self.context();
        assert!(
            self.server.status.success() && self.client.status.success(),
            "{ctx}"
        );
        // The client prints one JSON line; the server its check of the writes.
        let json = self.json();
        assert!(json.contains("\"data_check\":\"passed\""), "{ctx}");
        let done = number_after(&json, "\"iterations\":");
        assert!(done > 0 && messages.map_or(true, |m| m == done), "{ctx}");
        let messages = done;
        let check = if opcode == "read" {
            assert!(
                json.contains("\"verified_on\":\"on the client (reader)\""),
                "{ctx}"
            );
            format!("the client read {messages} messages and checked them")
        } else {
            format!(
                "data check: {messages} messages x {size} bytes, every byte verified on the server: passed"
            )
        };
        assert!(
            text(&self.server.stdout).contains(&check),
            "{check:?} missing on the server:\n{ctx}"
        );
        // Each side chose its ports' RoCE v2 IPv4 GID, index 1, for want of --gid-index.
        for (o, host) in [(&self.server, 1), (&self.client, 2)] {
            let want = format!(
                "soft0 port 1: GID index 1 (0000:0000:0000:0000:0000:ffff:c000:020{host}), \
                 chosen for want of --gid-index"
            );
            assert!(text(&o.stderr).contains(&want), "{want:?} missing:\n{ctx}");
        }
        messages
    }

    /// The client's JSON line.
    fn json(&self) -> String {
        text(&self.client.stdout)
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON line:\n{}", self.context()))
            .to_string()
    }
}

/// A number in `json` after `prefix` (`"seconds":`).
fn float_after(json: &str, prefix: &str) -> f64 {
    let at = json
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix} in {json}"))
        + prefix.len();
    json[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {prefix} in {json}"))
}

/// One message of each opcode in both modes, two fragments on two data QPs, over one
/// veth pair.
#[test]
fn one_message_of_each_opcode_between_two_hosts() {
    let Some(hosts) = Hosts::new("wbm-one", 1, Dirs::Own) else {
        return;
    };
    for mode in ["dqplb", "spray"] {
        for opcode in ["write", "write_imm", "read"] {
            let args = [
                "--mode", mode, "--opcode", opcode, "--qps", "2", "--size", "128K", "--iters", "1",
                "--json",
            ];
            eprintln!("wbm-one: {mode}, {opcode}");
            let run = hosts.run("soft0", &args, Duration::from_secs(30), || {});
            run.passed(opcode, Some(1), 128 << 10);
        }
    }
}

/// `opcode` in both modes with 1 and 8 data QPs, over one device (soft0, the first
/// veth pair) and over two (`--device soft0,soft1`, both pairs, 2 and 8 QPs).
fn matrix(test: &str, opcode: &str) {
    let Some(hosts) = Hosts::new(test, 2, Dirs::Own) else {
        return;
    };
    const MESSAGES: u64 = 40;
    const SIZE: u64 = 256 << 10;
    let iters = MESSAGES.to_string();
    for mode in ["dqplb", "spray"] {
        for (devices, qps) in [
            ("soft0", 1),
            ("soft0", 8),
            ("soft0,soft1", 2),
            ("soft0,soft1", 8),
        ] {
            let qps = qps.to_string();
            let args = [
                "--mode", mode, "--opcode", opcode, "--qps", &qps, "--size", "256K", "--iters",
                &iters, "--json",
            ];
            let what = format!("{mode}, {opcode}, --qps {qps}, --device {devices}");
            eprintln!("{test}: {what}");
            let run = hosts.run(devices, &args, Duration::from_secs(60), || {});
            run.passed(opcode, Some(MESSAGES), SIZE);
            if devices.contains(',') {
                // Both links carried data.
                let json = run.json();
                let per = cli::json_array(&json, "bytes_per_device");
                assert!(
                    per.len() == 2 && per.iter().all(|&b| b > 0),
                    "{what}: {json}"
                );
                assert_eq!(per.iter().sum::<u64>(), MESSAGES * SIZE, "{what}: {json}");
            }
        }
    }
}

/// `--device soft0,soft1` between two namespaces that share a softverbs directory
/// (the data through shared memory, each device on its own veth pair): every opcode
/// in both modes with 2 and 8 data QPs, both devices carrying data, every byte
/// verified.
#[test]
fn two_devices_between_two_namespaces_sharing_a_directory() {
    let Some(hosts) = Hosts::new("wbm-two-shared", 2, Dirs::Shared) else {
        return;
    };
    const MESSAGES: u64 = 40;
    const SIZE: u64 = 256 << 10;
    for mode in ["dqplb", "spray"] {
        for opcode in ["write", "write_imm", "read"] {
            for qps in ["2", "8"] {
                let args = [
                    "--mode", mode, "--opcode", opcode, "--qps", qps, "--size", "256K", "--iters",
                    "40", "--json",
                ];
                let what = format!("{mode}, {opcode}, --qps {qps}");
                let run = hosts.run("soft0,soft1", &args, Duration::from_secs(60), || {});
                run.passed(opcode, Some(MESSAGES), SIZE);
                let json = run.json();
                let per = cli::json_array(&json, "bytes_per_device");
                assert!(
                    per.len() == 2 && per.iter().all(|&b| b > 0),
                    "{what}: {json}"
                );
                assert_eq!(per.iter().sum::<u64>(), MESSAGES * SIZE, "{what}: {json}");
            }
        }
    }
}

#[test]
fn write_imm_between_two_hosts() {
    matrix("wbm-imm", "write_imm");
}

#[test]
fn read_between_two_hosts() {
    matrix("wbm-read", "read");
}

#[test]
fn write_between_two_hosts() {
    matrix("wbm-write", "write");
}

/// `--failover` over both links, the client's end of the second (soft1's) taken down
/// for 1.5 s mid-run: the run goes on over soft0 (no pause as long as the outage),
/// the QPs on soft1 come back once the link is up (the checks of the in-process
/// outage test, `a_virtual_qp_rides_out_a_link_outage_and_comes_back_to_full_width`:
/// failovers, restored, every QP healthy at the end), every byte verified.
#[test]
fn failover_rides_out_a_link_taken_down_between_two_hosts() {
    failover("wbm-failover", Dirs::Own);
}

/// The same between two namespaces that share a softverbs directory: the data moves
/// through shared memory, the ports follow the veths (the client's soft1 and, its peer
/// gone, the server's go down), and write_bw's `--device soft0,soft1` fails over and
/// back across two processes.
#[test]
fn failover_rides_out_a_link_taken_down_between_two_namespaces_sharing_a_directory() {
    failover("wbm-failover-shared", Dirs::Shared);
}

fn failover(test: &str, dirs: Dirs) {
    let Some(hosts) = Hosts::new(test, 2, dirs) else {
        return;
    };
    let args = [
        "--failover",
        "--qps",
        "4",
        "--size",
        "256K",
        "--duration",
        "6",
        "--opcode",
        "write_imm",
        "--json",
    ];
    let down = format!("{}1", LINKS[1].0);
    let run = hosts.run("soft0,soft1", &args, Duration::from_secs(60), || {
        std::thread::sleep(Duration::from_secs(2));
        hosts.ip(1, &["link", "set", &down, "down"]);
        std::thread::sleep(Duration::from_millis(1500));
        hosts.ip(1, &["link", "set", &down, "up"]);
    });
    run.passed("write_imm", None, 256 << 10);
    let json = run.json();
    assert!(number_after(&json, "\"failovers\":") >= 1, "{json}");
    // Data QPs 1 and 3 are on soft1: both replaced once its link is back.
    assert!(number_after(&json, "\"restored\":") >= 2, "{json}");
    assert_eq!(number_after(&json, "\"healthy_qps\":"), 4, "{json}");
    // The transfer went on during the outage: no pause in the 50 ms timeline as long
    // as the link was down (detecting the loss takes the QPs' timeout x retries).
    let timeline: Vec<f64> = {
        let at = json.find("\"timeline_mb_s\":[").expect("a timeline") + 17;
        json[at..json[at..].find(']').unwrap() + at]
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let longest_pause = timeline
        .split(|&v| v > 0.0)
        .map(<[f64]>::len)
        .max()
        .unwrap_or(0);
    assert!(
        longest_pause < 20,
        "{longest_pause} slices of 50 ms idle: {json}"
    );
    let per = cli::json_array(&json, "bytes_per_device");
    assert!(per.iter().all(|&b| b > 0), "{json}");
}

/// The two links rate-limited by the kernel at the client's egress (`tc` tbf, 100 and
/// 300 Mbit/s: a tenth of the 1 and 3 Gbit/s a fabric's links would have, so that on
/// two cores the links and not the CPU are the limit): the weighted policy (weights
/// 1,3) and the adaptive one (from equal weights) reach 90% of the links' sum, 400
/// Mbit/s, over an 8 s run. A link's rate counts its IP and TCP headers too, some 4%
/// of a 1500-byte frame. Release only: the adaptive policy measures each path from
/// its completions' timing, which a debug build's slower turns blur.
#[test]
#[ignore = "timed by the links: run in release by .ci/run with --ignored"]
fn striping_fills_two_rate_limited_links_between_two_hosts() {
    let Some(hosts) = Hosts::new("wbm-stripe", 2, Dirs::Own) else {
        return;
    };
    const RATES: [u64; 2] = [100_000_000, 300_000_000];
    for (d, (name, _)) in LINKS.iter().enumerate() {
        let rate = format!("{}bit", RATES[d]);
        hosts.tc(
            1,
            &[
                "qdisc",
                "replace",
                "dev",
                &format!("{name}1"),
                "root",
                "tbf",
                "rate",
                &rate,
                "burst",
                "262144",
                "latency",
                "50ms",
            ],
        );
    }
    let sum: u64 = RATES.iter().sum();
    cli::alone(|| {
        for policy in ["weighted", "adaptive"] {
            let mut args = vec![
                "--policy",
                policy,
                "--qps",
                "4",
                "--size",
                "256K",
                "--duration",
                "8",
                "--opcode",
                "write_imm",
                "--json",
            ];
            if policy == "weighted" {
                args.extend(["--weights", "1,3"]);
            }
            let run = hosts.run("soft0,soft1", &args, Duration::from_secs(60), || {});
            let messages = run.passed("write_imm", None, 256 << 10);
            let json = run.json();
            let bits =
                messages as f64 * (256 << 10) as f64 * 8.0 / float_after(&json, "\"seconds\":");
            eprintln!(
                "{policy}: {:.1} Mbit/s of the links' {} Mbit/s ({:.0}%), bytes per device {:?}",
                bits / 1e6,
                sum / 1_000_000,
                100.0 * bits / sum as f64,
                cli::json_array(&json, "bytes_per_device")
            );
            assert!(
                bits >= 0.9 * sum as f64,
                "{policy}: {:.1} Mbit/s of the links' {} Mbit/s: {json}",
                bits / 1e6,
                sum / 1_000_000
            );
        }
    });
}
