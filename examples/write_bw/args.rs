//! The command line: flags and their syntax checks. The run's parameters, which the
//! client sends the server, are in `params`.

use std::time::Duration;

use vqp_core::Policy;

use crate::params::MAX_DEVICES;

use crate::params::seconds;
pub use crate::params::{mode_name, opcode_name, Limit, Params};
use crate::size::{bytes, number};

/// The TCP port perftest uses by default.
pub const DEFAULT_PORT: u16 = 18515;
/// The largest buffer a server registers for a client unless `--max-buffer` says
/// otherwise: a client is not authenticated, so what it can make the server allocate
/// is bounded. 1 GiB serves every message size up to 512 MiB (write) or 341 MiB (read).
pub const DEFAULT_MAX_BUFFER: u64 = 1 << 30;
/// How long a side waits for the peer unless `--timeout` says otherwise: for each
/// message before the run as a whole, and for any progress during it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const USAGE: &str = "usage: write_bw [--size BYTES] [--iters N | --duration SECS] [--qps N] [--max-frag BYTES]
         [--mode spray|dqplb] [--opcode write|write_imm|read] [--reorder fifo|random|adversarial]
         [--seed N] [--poll-core CORE] [--json] [--timeout SECS] [--max-buffer BYTES]
         [--devices N] [--policy rr|weighted|outstanding|adaptive] [--weights W0,W1,..]
         [--inject TIME:ACTION,...] [--failover [--grace SECS]] [--rdma-cm]
         [--device NAME[,NAME..] [--server | --connect HOST:PORT] [--port PORT] [--ib-port N] [--gid-index N]]
  BYTES takes a K, M or G suffix (binary). Without --device both sides run in this process on
  softverbs (soft1 serves, soft0 sends); with --device they run on that device through libibverbs;
  with --device a,b on those devices, data QP i on the (i mod N)-th (--devices N is their count).
  --timeout (default 10): how long each side waits for each message of the set-up as a whole,
  and for any progress during the run. --max-buffer (default 1G): the largest buffer the
  server registers for a client's run. --inject (softverbs only): link events during the run,
  TIME as 2s or 250ms, ACTION rate=softN:RATE (bytes/s, K/M/G decimal; 0 unlimited),
  link-down=softN, link-up=softN, fail-qp=I or server-fail-qp=I (that side's data QP I fails),
  fail-notify or server-fail-notify (that side's SPRAY notify QP fails). Targets are checked
  against the run: I below --qps, a notify QP only with --mode spray and --qps 2 or more,
  soft0 to softN for --devices N; with --duration every TIME must fall before the end, and
  with --iters an injection the run ends before is told, one line each. --devices N (softverbs without --device): each side spreads its data QPs
  over N devices, data QP i on device i mod N (the client on soft0.., the server one further).
  --policy (default rr): how the client stripes fragments over its data QPs: round-robin,
  weighted by each port's speed, to the QP with the fewest bytes outstanding, or adaptive
  (weights follow each QP's measured rate, from equal). --weights W0,W1,..: one weight per
  client device instead of the ports' speeds (weighted) or equal (adaptive's start).
  --failover: both sides survive a data QP failing (its fragments go again on the others)
  while one is left, the client replaces a failed QP with a fresh pair once its port is
  active (fail-back), and a side with no QP left holds its requests for --grace SECS
  (default 2) before it fails; the table and JSON say what failed, went again, came back.
  --rdma-cm (server and client): the QPs are connected through the RDMA connection manager
  (librdmacm, or VQP_RDMACM_PATH), at the server's address and port, instead of exchanging
  endpoint cards on the TCP connection (which still carries the run's parameters and control).";

/// Flags that take a value (the others are `--json`, `--server` and `--help`).
const VALUE_FLAGS: [&str; 22] = [
    "--size",
    "--qps",
    "--max-frag",
    "--seed",
    "--mode",
    "--opcode",
    "--iters",
    "--duration",
    "--reorder",
    "--poll-core",
    "--device",
    "--connect",
    "--port",
    "--ib-port",
    "--gid-index",
    "--timeout",
    "--max-buffer",
    "--inject",
    "--devices",
    "--policy",
    "--weights",
    "--grace",
];

/// A byte count for messages: `1 GiB` when it is a whole number of KiB, MiB or GiB,
/// else `N bytes`.
pub fn show_bytes(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// A duration for messages: `10 s`, `0.25 s`.
pub fn show_secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Which side(s) this process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Both sides, in two threads of this process.
    Both,
    /// The server: waits for a client on `--port`.
    Server,
    /// The client: connects to this address.
    Client(String),
}

/// Everything on the command line.
#[derive(Clone, Debug)]
pub struct Args {
    pub params: Params,
    /// `fifo`, `random` or `adversarial` (softverbs only).
    pub reorder: Option<String>,
    pub poll_core: Option<usize>,
    pub json: bool,
    /// `--device`: the devices named, one or more (`mlx5_0`, `soft0,soft1`); data QP
    /// i on the i-th mod their number, as `--devices` spreads softverbs' own.
    pub device: Option<Vec<String>>,
    pub role: Role,
    pub port: u16,
    pub ib_port: u8,
    pub gid_index: Option<u8>,
    /// How long this side waits for the peer (see [`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
    /// The largest buffer the server registers (see [`DEFAULT_MAX_BUFFER`]).
    pub max_buffer: u64,
    /// Link events during the run (softverbs only; see `inject`).
    pub inject: Vec<crate::inject::Injection>,
    /// How the client stripes its fragments (its own choice: the server sends none).
    pub policy: Policy,
    /// Each client device's weight (`--weights`).
    pub weights: Option<[u32; MAX_DEVICES]>,
}

impl Args {
    /// The reorder policy as `VQP_SOFT_REORDER` spells it.
    pub fn soft_reorder(&self) -> String {
        match self.reorder.as_deref().unwrap_or("random") {
            "random" => format!("random:{}", self.params.seed),
            other => other.to_string(),
        }
    }
}

/// Refuses a run whose server buffer is above `max`: the message names both and the
/// flag that raises the bound.
pub fn check_buffer(p: &Params, max: u64) -> Result<(), String> {
    let need = p.server_buffer();
    if need <= max {
        return Ok(());
    }
    Err(format!(
        "--size {}{}: the server would register {} ({} messages), above its --max-buffer of {}",
        show_bytes(p.size),
        if p.read() { " --opcode read" } else { "" },
        show_bytes(need),
        p.slots() + u64::from(p.read()),
        show_bytes(max)
    ))
}

/// Parses `--device`: one name, or several separated by commas (each side's devices
/// for a run spread over them), none empty or given twice.
fn device_names(v: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = v.split(',').map(str::to_string).collect();
    if names.iter().any(String::is_empty) {
        return Err(format!("--device '{v}': an empty device name"));
    }
    if names.len() > MAX_DEVICES {
        return Err(format!(
            "--device '{v}': {} devices, at most {MAX_DEVICES}",
            names.len()
        ));
    }
    if let Some(d) = names
        .iter()
        .enumerate()
        .find(|(i, n)| names[..*i].contains(n))
    {
        return Err(format!("--device '{v}': {} named twice", d.1));
    }
    Ok(names)
}

/// Parses `--weights`: one positive integer per device of the client's `devices`,
/// comma-separated.
fn weights(v: &str, devices: usize) -> Result<[u32; MAX_DEVICES], String> {
    let given: Vec<&str> = v.split(',').collect();
    if given.len() != devices {
        return Err(format!(
            "--weights gives {} weights for {devices} devices (--devices): one each",
            given.len()
        ));
    }
    let mut w = [1; MAX_DEVICES];
    for (slot, s) in w.iter_mut().zip(given) {
        *slot =
            s.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                format!("--weights: '{s}' is not a positive integer (below 2^32)")
            })?;
    }
    Ok(w)
}

/// Parses `argv` (without the program name). `Err` is the one-line message to print.
pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        params: Params::default(),
        reorder: None,
        poll_core: None,
        json: false,
        device: None,
        role: Role::Both,
        port: DEFAULT_PORT,
        ib_port: 1,
        gid_index: None,
        timeout: DEFAULT_TIMEOUT,
        max_buffer: DEFAULT_MAX_BUFFER,
        inject: Vec::new(),
        policy: Policy::RoundRobin,
        weights: None,
    };
    let (mut iters_given, mut duration_given, mut devices_given) = (false, false, false);
    let (mut server, mut params_given, mut max_buffer_given) = (false, false, false);
    let mut connect = None;
    let mut weights_given = None;
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--json" => {
                a.json = true;
                continue;
            }
            "--rdma-cm" => {
                // Both sides take it: the server listens through the CM too.
                a.params.rdma_cm = true;
                continue;
            }
            "--failover" => {
                a.params.failover = true;
                params_given = true;
                continue;
            }
            "--server" => {
                server = true;
                continue;
            }
            "--help" | "-h" => return Err(USAGE.into()),
            f if !f.starts_with("--") => {
                return Err(format!(
                    "unexpected argument '{f}' (--help lists the flags)"
                ))
            }
            f if !VALUE_FLAGS.contains(&f) => {
                return Err(format!("unknown flag {f} (--help lists them)"))
            }
            _ => {}
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--reorder" => match v.as_str() {
                "fifo" | "random" | "adversarial" => a.reorder = Some(v),
                _ => {
                    return Err(format!(
                        "--reorder: '{v}' is not fifo, random or adversarial"
                    ))
                }
            },
            "--poll-core" => {
                a.poll_core = Some(usize::try_from(number(&flag, &v)?).unwrap_or(usize::MAX))
            }
            "--device" => a.device = Some(device_names(&v)?),
            "--connect" => connect = Some(v),
            "--port" => {
                a.port = v
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| format!("--port: '{v}' is not a port number (1-65535)"))?
            }
            "--ib-port" => {
                a.ib_port = v
                    .parse::<u8>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| format!("--ib-port: '{v}' is not a device port (1-255)"))?
            }
            "--gid-index" => {
                a.gid_index = Some(
                    v.parse::<u8>()
                        .map_err(|_| format!("--gid-index: '{v}' is not a GID index (0-255)"))?,
                )
            }
            "--timeout" => a.timeout = seconds(&flag, &v)?,
            "--inject" => a.inject = crate::inject::parse(&v)?,
            "--weights" => weights_given = Some(v),
            "--policy" => {
                a.policy = Policy::from_name(&v).ok_or_else(|| {
                    format!("--policy: '{v}' is not rr, weighted, outstanding or adaptive")
                })?
            }
            "--max-buffer" => {
                a.max_buffer = bytes(&flag, &v)?;
                if a.max_buffer == 0 {
                    return Err("--max-buffer must be at least 1 byte".into());
                }
                max_buffer_given = true;
            }
            f => {
                params_given = true;
                iters_given |= f == "--iters";
                duration_given |= f == "--duration";
                devices_given |= f == "--devices";
                a.params.set(f, &v)?
            }
        }
    }
    if iters_given && duration_given {
        return Err("--iters and --duration exclude each other".into());
    }
    if a.params.grace != crate::params::DEFAULT_GRACE && !a.params.failover {
        return Err("--grace is how long --failover waits: give --failover too".into());
    }
    a.params.check()?;
    a.role = match (server, connect) {
        (true, Some(_)) => return Err("--server and --connect exclude each other".into()),
        (true, None) => Role::Server,
        (false, Some(addr)) => Role::Client(addr),
        (false, None) => Role::Both,
    };
    if a.role != Role::Both && a.device.is_none() {
        return Err("--server and --connect run on real hardware: name it with --device".into());
    }
    if let Some(names) = &a.device {
        let n = names.len();
        if devices_given && a.params.devices != n {
            return Err(format!(
                "--devices {} with --device naming {n}: name each device the run spreads over (--device a,b), or leave --devices out",
                a.params.devices
            ));
        }
        if a.role != Role::Server {
            // The client's run spreads over the devices named (a server takes the
            // client's count and must have as many).
            a.params.devices = n;
            a.params.check()?;
        }
    }
    if let Some(v) = weights_given {
        a.weights = Some(weights(&v, a.params.devices)?);
    }
    if a.device.is_some() && !a.inject.is_empty() {
        return Err("--inject drives softverbs' link controls; a real device has none".into());
    }
    // After every flag: the QPs, devices and length the injections act on are known.
    crate::inject::check(&a.inject, &a.params)?;
    if a.device.is_some() && a.reorder.is_some() {
        return Err("--reorder sets softverbs' cross-QP order; a real device has its own".into());
    }
    if a.role == Role::Server && params_given {
        // The client decides the run; a server given these would silently ignore them.
        return Err(
            "the client chooses the run (--size, --qps, --mode, --iters, ...); give them to it, not to --server"
                .into(),
        );
    }
    match a.role {
        Role::Client(_) if max_buffer_given => return Err(
            "--max-buffer bounds what a client may make the server allocate; give it to --server"
                .into(),
        ),
        // Both sides are here: refuse now what the server would refuse.
        Role::Both => check_buffer(&a.params, a.max_buffer)?,
        _ => {}
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vqp_core::{Mode, Opcode};

    fn run(args: &str) -> Result<Args, String> {
        parse(args.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_suffixes() {
        let a = run("").unwrap();
        assert_eq!((a.params, a.role), (Params::default(), Role::Both));
        assert_eq!(a.params.limit, Limit::Iters(1000));
        assert_eq!(
            (a.timeout, a.max_buffer),
            (DEFAULT_TIMEOUT, DEFAULT_MAX_BUFFER)
        );
        let a = run("--size 64K --max-frag 1M --qps 16 --mode spray --opcode read").unwrap();
        assert_eq!(
            (a.params.size, a.params.max_frag, a.params.qps),
            (65536, 1 << 20, 16)
        );
        assert_eq!(
            (a.params.mode, a.params.opcode),
            (Mode::Spray, Opcode::RDMA_READ)
        );
        assert_eq!(
            run("--reorder random --seed 7").unwrap().soft_reorder(),
            "random:7"
        );
        let a = run("--duration 0.001 --timeout 0.25 --max-buffer 64M").unwrap();
        assert_eq!(a.params.limit, Limit::Time(Duration::from_millis(1)));
        assert_eq!(
            (a.timeout, a.max_buffer),
            (Duration::from_millis(250), 64 << 20)
        );
    }

    #[test]
    fn bad_flags_are_refused() {
        for bad in [
            "--size 0",
            "--size 2G",
            "--size 1X",
            "--qps 0",
            "--qps 17",
            "--max-frag 0",
            "--max-frag 4G",
            "--iters 0",
            "--iters 5 --duration 1",
            "--duration 1 --iters 5",
            "--duration 0",
            "--duration 1e-300",
            "--duration 0.0009",
            "--timeout 0",
            "--timeout 1e-4",
            "--max-buffer 0",
            "--mode x",
            "--opcode send",
            "--reorder none",
            "--bogus 1",
            "--size",
            "stray",
            "--server",
            "--connect h:1",
            "--server --connect h:1 --device d",
            "--device d --reorder fifo",
            "--device d --server --qps 2",
            "--device d --connect h:1 --max-buffer 1G",
            "--port 0",
        ] {
            assert!(run(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn an_unknown_flag_is_named_as_such_even_without_a_value() {
        for bad in ["--jsn", "--jsn 1", "--json --jsn"] {
            assert_eq!(
                run(bad).unwrap_err(),
                "unknown flag --jsn (--help lists them)",
                "{bad}"
            );
        }
        assert_eq!(run("--size").unwrap_err(), "--size needs a value");
    }

    #[test]
    fn durations_under_a_millisecond_are_refused_with_the_bound() {
        let e = run("--duration 1e-300").unwrap_err();
        assert!(e.contains("shortest allowed, 0.001 s"), "{e}");
    }

    #[test]
    fn the_server_buffer_is_bounded_before_the_run_starts() {
        // 2 slots of 1 GiB, plus a source slot for reads: above the 1 GiB default.
        let e = run("--size 1G --opcode read").unwrap_err();
        assert!(
            e.contains("3 GiB") && e.contains("--max-buffer of 1 GiB"),
            "{e}"
        );
        assert!(run("--size 1G --opcode read --max-buffer 3G").is_ok());
        assert!(run("--size 512M").is_ok());
        // A server takes the bound; a client cannot know the server's.
        assert!(run("--device d --server --max-buffer 4G").is_ok());
        assert!(run("--device d --connect h:1 --size 1G").is_ok());
    }

    #[test]
    fn byte_counts_are_shown_in_their_largest_whole_unit() {
        assert_eq!(show_bytes(3 << 30), "3 GiB");
        assert_eq!(show_bytes(1 << 20), "1 MiB");
        assert_eq!(show_bytes(1536), "1536 bytes");
        assert_eq!(show_bytes(3 << 10), "3 KiB");
        assert_eq!(show_bytes(4096 + 1), "4097 bytes");
        assert_eq!(show_secs(Duration::from_millis(250)), "0.25 s");
    }
}
