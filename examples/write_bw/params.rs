//! The run's parameters: what the client asks and the server must agree to, sent by
//! the client as one text line, and checked the same way as the flags they come from.

use std::time::Duration;

use vqp_core::{Mode, Opcode};

use crate::size::{bytes, number};

/// Data QPs the virtual QP type holds at most (its `N`).
pub const MAX_QPS: usize = 16;
/// Devices a side spreads its data QPs over at most (the virtual CQ type's `DEVS`).
pub const MAX_DEVICES: usize = 4;
/// Largest message: the buffers hold several, and 1 GiB keeps them allocatable.
pub const MAX_SIZE: u64 = 1 << 30;
/// The shortest `--duration` (and `--timeout`): a run shorter than this measures
/// nothing but its own start.
pub const MIN_DURATION: Duration = Duration::from_millis(1);
/// The longest `--duration` and `--timeout` accepted, in seconds.
const MAX_SECS: f64 = 1e9;

/// How long the client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// This many messages (`--iters`).
    Iters(u64),
    /// As many messages as fit in this time (`--duration`).
    Time(Duration),
}

/// What the client asks of the server: everything both sides must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub size: u64,
    pub qps: usize,
    pub max_frag: u32,
    pub mode: Mode,
    pub opcode: Opcode,
    pub seed: u64,
    /// Sent so that the server can hold the client's counts to it.
    pub limit: Limit,
    /// Devices each side spreads its data QPs over (data QP i on device i mod N).
    pub devices: usize,
    /// Both sides survive a data QP's failure (`Config::redispatch`).
    pub failover: bool,
    /// With `failover`, how long a side that lost every data QP holds its requests
    /// waiting for fail-back (`Config::grace_ns`).
    pub grace: Duration,
    /// The virtual QP's QPs are connected through the RDMA connection manager (the
    /// card in the CM's private data) instead of the card exchange on the TCP wire.
    pub rdma_cm: bool,
}

/// `--grace`'s default: long enough to ride out a link that flaps for a second.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

impl Params {
    /// Messages that may be in flight (and buffer slots per side): about 16 MiB of
    /// buffer, between 2 and 128 messages.
    pub fn slots(&self) -> u64 {
        ((16u64 << 20) / self.size).clamp(2, 128)
    }

    /// Whether the client reads (the server is the source) rather than writes.
    pub fn read(&self) -> bool {
        self.opcode == Opcode::RDMA_READ
    }

    /// The bytes the server registers: `slots` messages, one more for reads (the
    /// source slots are one more than the client's, see `server`). Saturates rather
    /// than wraps, so an absurd request is refused, not mis-sized.
    pub fn server_buffer(&self) -> u64 {
        let slots = self.slots() + u64::from(self.read());
        slots.saturating_mul(self.size)
    }

    /// The bytes the client registers.
    pub fn client_buffer(&self) -> u64 {
        self.slots().saturating_mul(self.size)
    }

    /// The line the client sends.
    pub fn to_line(self) -> String {
        let limit = match self.limit {
            Limit::Iters(n) => format!("iters={n}"),
            Limit::Time(d) => format!("duration_ns={}", d.as_nanos()),
        };
        // One device is the default and is not said (the line stays as before).
        let mut devices = if self.devices > 1 {
            format!(" devices={}", self.devices)
        } else {
            String::new()
        };
        if self.failover {
            devices.push_str(&format!(" failover=1 grace_ns={}", self.grace.as_nanos()));
        }
        if self.rdma_cm {
            devices.push_str(" rdma_cm=1");
        }
        format!(
            "{VERSION} size={} qps={} max_frag={} mode={} opcode={} seed={} {limit}{devices}\n",
            self.size,
            self.qps,
            self.max_frag,
            mode_name(self.mode),
            opcode_name(self.opcode),
            self.seed
        )
    }

    /// Parses the client's line (and checks it as flags are checked): every key once,
    /// `iters` or `duration_ns` but not both.
    pub fn from_line(line: &str) -> Result<Params, String> {
        let mut words = line.split_whitespace();
        if words.next() != Some(VERSION) {
            return Err("the peer is not a write_bw client of this version".into());
        }
        let mut p = Params::default();
        let mut seen: Vec<&str> = Vec::new();
        for w in words {
            let (k, v) = w.split_once('=').ok_or("malformed parameter line")?;
            if seen.contains(&k)
                || (k == "iters" && seen.contains(&"duration_ns"))
                || (k == "duration_ns" && seen.contains(&"iters"))
            {
                return Err(format!("parameter {k} given twice or with its alternative"));
            }
            seen.push(k);
            match k {
                "iters" => p.limit = Limit::Iters(number("iters", v)?),
                "duration_ns" => {
                    p.limit = Limit::Time(Duration::from_nanos(number("duration_ns", v)?))
                }
                "grace_ns" => p.grace = Duration::from_nanos(number("grace_ns", v)?),
                _ => p.set(&format!("--{}", k.replace('_', "-")), v)?,
            }
        }
        p.check()?;
        Ok(p)
    }

    pub fn set(&mut self, flag: &str, v: &str) -> Result<(), String> {
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
            "--devices" => self.devices = usize::try_from(number(flag, v)?).unwrap_or(usize::MAX),
            "--rdma-cm" => {
                self.rdma_cm = match v {
                    "1" => true,
                    "0" => false,
                    _ => return Err(format!("{flag}: '{v}' is not 0 or 1")),
                }
            }
            "--failover" => {
                self.failover = match v {
                    "1" => true,
                    "0" => false,
                    _ => return Err(format!("{flag}: '{v}' is not 0 or 1")),
                }
            }
            "--grace" => {
                self.grace = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0 && *s < MAX_SECS)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| format!("{flag}: '{v}' is not a number of seconds"))?
            }
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
            "--iters" => self.limit = Limit::Iters(number(flag, v)?),
            "--duration" => self.limit = Limit::Time(seconds(flag, v)?),
            _ => return Err(format!("unknown parameter {flag}")),
        }
        Ok(())
    }

    /// Checks that need no device.
    pub fn check(&self) -> Result<(), String> {
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
        if self.devices == 0 || self.devices > MAX_DEVICES || self.devices > self.qps {
            return Err(format!(
                "--devices must be between 1 and {MAX_DEVICES}, and no more than --qps (each device carries a data QP)"
            ));
        }
        match self.limit {
            Limit::Iters(0) => return Err("--iters must be at least 1".into()),
            Limit::Time(d) if d < MIN_DURATION => {
                return Err(format!(
                    "--duration must be at least {} s",
                    MIN_DURATION.as_secs_f64()
                ))
            }
            _ => {}
        }
        Ok(())
    }
}

/// The parameter line's first word; `/2` added the run's limit, the client's `D`
/// frames in read runs and its `S` and `X` frames (see `control`).
const VERSION: &str = "write_bw/2";

impl Default for Params {
    /// 1 MiB WRITE_WITH_IMM messages over 4 data QPs in DQPLB, 64 KiB fragments,
    /// 1000 of them.
    fn default() -> Self {
        Params {
            size: 1 << 20,
            qps: 4,
            max_frag: 64 << 10,
            mode: Mode::Dqplb,
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            seed: 1,
            limit: Limit::Iters(1000),
            devices: 1,
            failover: false,
            grace: DEFAULT_GRACE,
            rdma_cm: false,
        }
    }
}

/// A number of seconds, at least [`MIN_DURATION`] and at most 10^9.
pub fn seconds(flag: &str, v: &str) -> Result<Duration, String> {
    let secs = v
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < MAX_SECS)
        .ok_or_else(|| format!("{flag}: '{v}' is not a positive number of seconds"))?;
    let d = Duration::from_secs_f64(secs);
    if d < MIN_DURATION {
        return Err(format!(
            "{flag}: {v} s is under the shortest allowed, {} s",
            MIN_DURATION.as_secs_f64()
        ));
    }
    Ok(d)
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

    #[test]
    fn the_parameter_line_round_trips() {
        let p = Params {
            size: 12345,
            qps: 3,
            max_frag: 4096,
            mode: Mode::Spray,
            opcode: Opcode::RDMA_WRITE,
            seed: 9,
            limit: Limit::Iters(77),
            devices: 1,
            failover: false,
            grace: DEFAULT_GRACE,
            rdma_cm: false,
        };
        for (limit, devices, failover, grace) in [
            (Limit::Iters(77), 1, false, DEFAULT_GRACE),
            (
                Limit::Time(Duration::from_millis(2500)),
                3,
                true,
                DEFAULT_GRACE,
            ),
            (Limit::Iters(5), 1, true, Duration::from_millis(300)),
            (
                Limit::Time(Duration::from_nanos(12_345_678)),
                2,
                false,
                DEFAULT_GRACE,
            ),
        ] {
            let p = Params {
                limit,
                devices,
                failover,
                grace,
                // The RDMA-CM flag rides along with the fail-over one here.
                rdma_cm: failover,
                ..p
            };
            assert_eq!(
                Params::from_line(p.to_line().trim_end()),
                Ok(p),
                "{limit:?}"
            );
        }
        assert!(
            !p.to_line().contains("devices") && !p.to_line().contains("failover"),
            "one device and no failover are not said: the line is the one older builds know"
        );
        for bad in [
            "write_bw/2 size=0",
            "write_bw/2 qps=2 devices=3",
            "write_bw/2 devices=0",
            "write_bw/2 failover=yes",
            "write_bw/2 failover=1 grace_ns=-1",
            "hello",
            "write_bw/1 size=4096",
            "write_bw/2 iters=5 duration_ns=1000000",
            "write_bw/2 size=1 size=2",
            "write_bw/2 iters=0",
            "write_bw/2 duration_ns=999999",
            "write_bw/2 timeout=1",
        ] {
            assert!(Params::from_line(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn buffers_are_slots_of_messages_and_one_more_for_reads() {
        let p = Params {
            size: 8 << 20,
            opcode: Opcode::RDMA_READ,
            ..Params::default()
        };
        assert_eq!((p.slots(), p.server_buffer()), (2, 3 * (8 << 20)));
        assert_eq!(p.client_buffer(), 2 * (8 << 20));
        let p = Params {
            size: 4096,
            ..Params::default()
        };
        assert_eq!((p.slots(), p.server_buffer()), (128, 128 * 4096));
    }
}
