//! The command line: flags, their syntax checks, and the run parameters both sides
//! agree on (sent by the client to the server as one text line).

use std::time::Duration;

use vqp_core::{Mode, Opcode};

/// Data QPs the virtual QP type holds at most (its `N`).
pub const MAX_QPS: usize = 16;
/// Largest message: the buffers hold several, and 1 GiB keeps them allocatable.
pub const MAX_SIZE: u64 = 1 << 30;
/// The TCP port perftest uses by default.
pub const DEFAULT_PORT: u16 = 18515;

pub const USAGE: &str = "usage: write_bw [--size BYTES] [--iters N | --duration SECS] [--qps N] [--max-frag BYTES]
         [--mode spray|dqplb] [--opcode write|write_imm|read] [--reorder fifo|random|adversarial]
         [--seed N] [--poll-core CORE] [--json]
         [--device NAME [--server | --connect HOST:PORT] [--port PORT] [--ib-port N] [--gid-index N]]
  BYTES takes a K, M or G suffix (binary). Without --device both sides run in this process on
  softverbs (soft1 serves, soft0 sends); with --device they run on that device through libibverbs.";

/// What the client asks of the server: everything both sides must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub size: u64,
    pub qps: usize,
    pub max_frag: u32,
    pub mode: Mode,
    pub opcode: Opcode,
    pub seed: u64,
}

impl Params {
    /// Messages that may be in flight (and buffer slots per side): about 16 MiB of
    /// buffer, between 2 and 128 messages.
    pub fn slots(&self) -> u64 {
        ((16u64 << 20) / self.size).clamp(2, 128)
    }

    /// The line the client sends.
    pub fn to_line(self) -> String {
        format!(
            "write_bw/1 size={} qps={} max_frag={} mode={} opcode={} seed={}\n",
            self.size,
            self.qps,
            self.max_frag,
            mode_name(self.mode),
            opcode_name(self.opcode),
            self.seed
        )
    }

    /// Parses the client's line (and checks it as flags are checked).
    pub fn from_line(line: &str) -> Result<Params, String> {
        let mut words = line.split_whitespace();
        if words.next() != Some("write_bw/1") {
            return Err("the peer is not a write_bw client of this version".into());
        }
        let mut p = Params::default();
        for w in words {
            let (k, v) = w.split_once('=').ok_or("malformed parameter line")?;
            p.set(&format!("--{}", k.replace('_', "-")), v)?;
        }
        p.check()?;
        Ok(p)
    }

    fn set(&mut self, flag: &str, v: &str) -> Result<(), String> {
        match flag {
            "--size" => self.size = bytes(flag, v)?,
            "--qps" => self.qps = usize::try_from(number(flag, v)?).unwrap_or(usize::MAX),
            "--max-frag" => {
                let n = bytes(flag, v)?;
                self.max_frag = u32::try_from(n).map_err(|_| {
                    format!("{flag}: {n} is above the 4 GiB a work request can carry")
                })?;
            }
            "--seed" => self.seed = number(flag, v)?,
            "--mode" => {
                self.mode = match v {
                    "spray" => Mode::Spray,
                    "dqplb" => Mode::Dqplb,
                    _ => return Err(format!("--mode: '{v}' is not spray or dqplb")),
                }
            }
            "--opcode" => {
                self.opcode = match v {
                    "write" => Opcode::RDMA_WRITE,
                    "write_imm" => Opcode::RDMA_WRITE_WITH_IMM,
                    "read" => Opcode::RDMA_READ,
                    _ => return Err(format!("--opcode: '{v}' is not write, write_imm or read")),
                }
            }
            _ => return Err(format!("unknown parameter {flag}")),
        }
        Ok(())
    }

    /// Checks that need no device.
    fn check(&self) -> Result<(), String> {
        if self.size == 0 {
            return Err("--size must be at least 1 byte".into());
        }
        if self.size > MAX_SIZE {
            return Err(format!(
                "--size {} is above the 1 GiB this program supports",
                self.size
            ));
        }
        if self.qps == 0 || self.qps > MAX_QPS {
            return Err(format!("--qps must be between 1 and {MAX_QPS}"));
        }
        if self.max_frag == 0 {
            return Err("--max-frag must be at least 1 byte".into());
        }
        Ok(())
    }
}

impl Default for Params {
    /// 1 MiB WRITE_WITH_IMM messages over 4 data QPs in DQPLB, 64 KiB fragments.
    fn default() -> Self {
        Params {
            size: 1 << 20,
            qps: 4,
            max_frag: 64 << 10,
            mode: Mode::Dqplb,
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            seed: 1,
        }
    }
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
    pub iters: u64,
    pub duration: Option<Duration>,
    /// `fifo`, `random` or `adversarial` (softverbs only).
    pub reorder: Option<String>,
    pub poll_core: Option<usize>,
    pub json: bool,
    pub device: Option<String>,
    pub role: Role,
    pub port: u16,
    pub ib_port: u8,
    pub gid_index: Option<u8>,
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

fn number(flag: &str, v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
}

/// A byte count with an optional binary suffix: `4096`, `64K`, `1M`, `1G`.
fn bytes(flag: &str, v: &str) -> Result<u64, String> {
    let (digits, shift) = match v.char_indices().last() {
        Some((i, 'k' | 'K')) => (&v[..i], 10),
        Some((i, 'm' | 'M')) => (&v[..i], 20),
        Some((i, 'g' | 'G')) => (&v[..i], 30),
        _ => (v, 0),
    };
    let n = number(flag, digits).map_err(|_| format!("{flag}: '{v}' is not a byte count"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{flag}: '{v}' is too large"))
}

/// Parses `argv` (without the program name). `Err` is the one-line message to print.
pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        params: Params::default(),
        iters: 1000,
        duration: None,
        reorder: None,
        poll_core: None,
        json: false,
        device: None,
        role: Role::Both,
        port: DEFAULT_PORT,
        ib_port: 1,
        gid_index: None,
    };
    let (mut iters_given, mut server, mut params_given) = (false, false, false);
    let mut connect = None;
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--json" => {
                a.json = true;
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
            _ => {}
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--iters" => {
                a.iters = number(&flag, &v)?;
                iters_given = true;
            }
            "--duration" => {
                let secs = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .ok_or_else(|| {
                        format!("--duration: '{v}' is not a positive number of seconds")
                    })?;
                a.duration = Some(Duration::from_secs_f64(secs));
            }
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
            "--device" => a.device = Some(v),
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
            f => {
                params_given = true;
                a.params.set(f, &v).map_err(|e| {
                    if e.starts_with("unknown") {
                        format!("unknown flag {f} (--help lists them)")
                    } else {
                        e
                    }
                })?
            }
        }
    }
    a.params.check()?;
    if iters_given && a.duration.is_some() {
        return Err("--iters and --duration exclude each other".into());
    }
    if a.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    a.role = match (server, connect) {
        (true, Some(_)) => return Err("--server and --connect exclude each other".into()),
        (true, None) => Role::Server,
        (false, Some(addr)) => Role::Client(addr),
        (false, None) => Role::Both,
    };
    if a.role != Role::Both && a.device.is_none() {
        return Err("--server and --connect run on real hardware: name it with --device".into());
    }
    if a.device.is_some() && a.reorder.is_some() {
        return Err("--reorder sets softverbs' cross-QP order; a real device has its own".into());
    }
    if a.role == Role::Server && (iters_given || a.duration.is_some() || params_given) {
        // The client decides the run; a server given these would silently ignore them.
        return Err(
            "the client chooses the run (--size, --qps, --mode, --iters, ...); give them to it, not to --server"
                .into(),
        );
    }
    Ok(a)
}

pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Spray => "spray",
        Mode::Dqplb => "dqplb",
    }
}

pub fn opcode_name(o: Opcode) -> &'static str {
    match o {
        Opcode::RDMA_WRITE => "write",
        Opcode::RDMA_READ => "read",
        _ => "write_imm",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &str) -> Result<Args, String> {
        parse(args.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_suffixes() {
        let a = run("").unwrap();
        assert_eq!(
            (a.params, a.iters, a.role),
            (Params::default(), 1000, Role::Both)
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
            "--duration 0",
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
            "--port 0",
        ] {
            assert!(run(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn the_parameter_line_round_trips() {
        let p = run("--size 12345 --qps 3 --max-frag 4096 --mode spray --opcode write --seed 9")
            .unwrap()
            .params;
        assert_eq!(Params::from_line(p.to_line().trim_end()), Ok(p));
        assert!(Params::from_line("write_bw/1 size=0").is_err());
        assert!(Params::from_line("hello").is_err());
    }
}
