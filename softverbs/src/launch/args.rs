//! The launcher's command line: `softverbs run [--devices N] [--dir DIR] [--lib PATH]
//! [--netdev DEV=IF,…] -- PROGRAM [ARGS…]`.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// What `softverbs help` prints.
pub const USAGE: &str = "\
usage: softverbs run [--devices N] [--dir DIR] [--lib PATH] [--netdev DEV=IF,...]
                     -- PROGRAM [ARGS...]

Runs PROGRAM on softverbs' devices soft0..soft<N-1>, presented as a kernel RDMA
provider presents a NIC (/dev/infiniband/uverbs<i>, /sys/class/infiniband/soft<i>,
/sys/class/infiniband_verbs/uverbs<i>) in a private mount namespace, with softverbs
loaded as libibverbs.so.1. Every `softverbs run` naming the same DIR (by default
softverbs' own, shared by the user's processes) sees the same devices.

  --devices N   number of soft devices, 1 to 64 (default: $VQP_SOFT_DEVICES, else 2)
  --dir DIR     the shared namespace directory (VQP_SOFT_DIR)
  --lib PATH    libvqp_softverbs.so to load (default: $VQP_SOFT_LIB, else the one
                built beside this binary)
  --netdev DEV=IF,...  binds devices to network interfaces (soft0=eth1,soft1=eth2):
                their ports are RoCE ports with the interfaces' addresses as GIDs
                (VQP_SOFT_NETDEV)

Exit status: PROGRAM's; 2 for a bad command line, 125 when the namespace cannot be
made, 126 when PROGRAM cannot be executed, 127 when it is not found.";

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// `softverbs help`, `-h`, `--help`.
    Help,
    /// `softverbs run …`.
    Run(Options),
}

/// What `softverbs run` was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// `--devices`, when given.
    pub devices: Option<usize>,
    /// `--dir`, when given.
    pub dir: Option<PathBuf>,
    /// `--lib`, when given.
    pub lib: Option<PathBuf>,
    /// `--netdev`, when given (checked: `DEV=IF,…`).
    pub netdev: Option<String>,
    /// The program and its arguments (never empty).
    pub program: Vec<OsString>,
}

/// A command line that does not parse; the message says what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn bad(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

/// Parses the arguments after the binary's name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut args = args.into_iter();
    match args.next().as_ref().and_then(|a| a.to_str()) {
        Some("run") => {}
        Some("help" | "-h" | "--help") => return Ok(Command::Help),
        Some(other) => return Err(bad(format!("unknown command {other:?}"))),
        None => return Err(bad("no command given")),
    }
    let mut o = Options {
        devices: None,
        dir: None,
        lib: None,
        netdev: None,
        program: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().filter(|t| t.starts_with('-')) else {
            o.program.push(arg);
            break;
        };
        if text == "--" {
            break;
        }
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(OsString::from(v))),
            None => (text.to_string(), None),
        };
        if matches!(name.as_str(), "-h" | "--help") {
            return Ok(Command::Help);
        }
        if !matches!(name.as_str(), "--devices" | "--dir" | "--lib" | "--netdev") {
            return Err(bad(format!("unknown option {name}")));
        }
        let value = inline
            .or_else(|| args.next())
            .ok_or_else(|| bad(format!("{name} needs a value")))?;
        match name.as_str() {
            "--devices" => o.devices = Some(device_count(&value)?),
            "--dir" => o.dir = Some(PathBuf::from(value)),
            "--netdev" => {
                let text = value
                    .to_str()
                    .filter(|v| crate::netdev::parse_bindings(v).is_some_and(|b| !b.is_empty()));
                let Some(text) = text else {
                    return Err(bad(format!(
                        "--netdev {value:?}: want DEVICE=INTERFACE,... (soft0=eth1)"
                    )));
                };
                o.netdev = Some(text.to_string());
            }
            _ => o.lib = Some(PathBuf::from(value)),
        }
    }
    o.program.extend(args);
    if o.program.is_empty() {
        return Err(bad("no program given (softverbs run -- PROGRAM [ARGS...])"));
    }
    Ok(Command::Run(o))
}

/// A device count, 1 to [`crate::MAX_DEVICES`].
pub fn device_count(value: &std::ffi::OsStr) -> Result<usize, UsageError> {
    value
        .to_str()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=crate::MAX_DEVICES).contains(n))
        .ok_or_else(|| {
            bad(format!(
                "--devices {value:?}: want a number from 1 to {}",
                crate::MAX_DEVICES
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    fn run(devices: Option<usize>, dir: Option<&str>, program: &[&str]) -> Command {
        Command::Run(Options {
            devices,
            dir: dir.map(PathBuf::from),
            lib: None,
            netdev: None,
            program: program.iter().map(OsString::from).collect(),
        })
    }

    #[test]
    fn options_then_the_program_and_its_own_options() {
        assert_eq!(
            p(&[
                "run",
                "--devices",
                "3",
                "--dir=/tmp/d",
                "--",
                "ucx_info",
                "-d"
            ]),
            Ok(run(Some(3), Some("/tmp/d"), &["ucx_info", "-d"]))
        );
        assert_eq!(
            p(&["run", "ucx_info", "--devices", "9"]),
            Ok(run(None, None, &["ucx_info", "--devices", "9"]))
        );
        assert_eq!(
            p(&["run", "--", "--weird-name"]),
            Ok(run(None, None, &["--weird-name"]))
        );
        assert_eq!(p(&["--help"]), Ok(Command::Help));
        assert_eq!(p(&["run", "-h", "--", "x"]), Ok(Command::Help));
    }

    #[test]
    fn netdev_bindings_are_checked() {
        let Ok(Command::Run(o)) = p(&["run", "--netdev", "soft0=eth1,soft1=eth2", "x"]) else {
            panic!("does not parse");
        };
        assert_eq!(o.netdev.as_deref(), Some("soft0=eth1,soft1=eth2"));
        assert!(p(&["run", "--netdev", "eth1", "x"])
            .unwrap_err()
            .0
            .contains("DEVICE=INTERFACE"));
        assert!(p(&["run", "--netdev=", "x"]).is_err());
    }

    #[test]
    fn what_does_not_parse_says_why() {
        assert!(p(&[]).unwrap_err().0.contains("no command"));
        assert!(p(&["walk"]).unwrap_err().0.contains("unknown command"));
        assert!(p(&["run"]).unwrap_err().0.contains("no program"));
        assert!(p(&["run", "--"]).unwrap_err().0.contains("no program"));
        assert!(p(&["run", "--devices"])
            .unwrap_err()
            .0
            .contains("needs a value"));
        assert!(p(&["run", "--devices", "0", "x"])
            .unwrap_err()
            .0
            .contains("1 to 64"));
        assert!(p(&["run", "--devices=65", "x"]).is_err());
        assert!(p(&["run", "--bogus", "x"])
            .unwrap_err()
            .0
            .contains("--bogus"));
    }
}
