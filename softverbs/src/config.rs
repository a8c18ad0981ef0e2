//! Run-time configuration: device count, reorder policy, progress model and fault
//! injection, set by API or read once from the environment.
//!
//! Every environment variable is read when the provider first initialises (the first
//! verbs call or the first configuration call); API calls made later override it.

use std::fmt;
use std::time::Duration;

/// Environment variable: number of devices (`soft0` …), default [`DEFAULT_DEVICES`].
pub const ENV_DEVICES: &str = "VQP_SOFT_DEVICES";
/// Environment variable: cross-QP reorder policy, `fifo`, `random:SEED` or
/// `adversarial` (see [`Reorder`]).
pub const ENV_REORDER: &str = "VQP_SOFT_REORDER";
/// Environment variable: progress model, `thread` (default) or `inline` (see
/// [`Progress`]).
pub const ENV_PROGRESS: &str = "VQP_SOFT_PROGRESS";
/// Environment variable: QPs to put into error, a comma-separated list of
/// `SELECTOR:N` (the QP fails when it starts its (N+1)-th WQE, after N were executed).
/// `SELECTOR` is `qpn=NUM` (decimal or `0x` hex) or `nth=K` (the K-th QP created in the
/// process, from 1). Example: `VQP_SOFT_FAIL_QP=nth=2:10,qpn=0x11:0`.
pub const ENV_FAIL_QP: &str = "VQP_SOFT_FAIL_QP";
/// Environment variable: execution delays, a comma-separated list of `SELECTOR:MICROS`
/// where `SELECTOR` is as in [`ENV_FAIL_QP`] or `all`. A delayed QP executes a WQE no
/// earlier than `MICROS` µs after it was posted. Example: `VQP_SOFT_DELAY=nth=1:200`.
pub const ENV_DELAY: &str = "VQP_SOFT_DELAY";
/// Environment variable: devices whose link starts down, comma-separated indices
/// (`0,1`).
pub const ENV_LINK_DOWN: &str = "VQP_SOFT_LINK_DOWN";

/// Environment variable: link rates, comma-separated `DEVICE=RATE` in bytes per second
/// with an optional decimal `K`/`M`/`G`/`T` suffix (`soft0=1G,soft1=3G`); a WQE leaving
/// through a rated port completes when its bytes would have crossed the link, and the
/// port reports the InfiniBand width and speed nearest its rate.
pub const ENV_RATE: &str = "VQP_SOFT_RATE";

/// Environment variable: devices bound to network interfaces, comma-separated
/// `DEVICE=INTERFACE` (`soft0=eth1,soft1=eth2`; `DEVICE` may be the bare index). A bound
/// device's port is a RoCE port: link layer Ethernet, LID 0, the interface's addresses
/// as RoCE v2 GIDs, the MTU and state of the interface (see the crate's "RoCE" section).
pub const ENV_NETDEV: &str = "VQP_SOFT_NETDEV";

/// Devices created when [`ENV_DEVICES`] is unset.
pub const DEFAULT_DEVICES: usize = 2;
/// Largest device count accepted.
pub const MAX_DEVICES: usize = 64;

/// How the progress engine orders work *across* QPs. Within one QP, WQEs always execute
/// in posting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reorder {
    /// WQEs execute in global posting order: a post to QP A before a post to QP B
    /// executes first.
    Fifo,
    /// A seeded pseudo-random choice: each step picks a random pending post (any QP)
    /// and executes a random number of its WQEs. Deterministic for a given seed and
    /// posting sequence.
    Random {
        /// The generator's seed.
        seed: u64,
    },
    /// Newest first: each step executes one WQE of the most recently posted pending
    /// chain, so older QPs are passed over — up to a bound. A post that has waited
    /// [`ADVERSARIAL_BOUND`] steps is served before anything newer: a pending WQE
    /// executes at the latest `ADVERSARIAL_BOUND` + (posts older than it still pending)
    /// steps after it was posted. Real NICs do not starve a QP, and neither does this.
    Adversarial,
}

/// Steps an adversarial (or random) schedule may pass over the oldest pending post
/// before it must serve it.
pub const ADVERSARIAL_BOUND: u64 = 64;

impl Reorder {
    /// Parses `fifo`, `random:SEED` (decimal or `0x` hex) or `adversarial`.
    pub fn parse(s: &str) -> Option<Reorder> {
        let s = s.trim();
        match s {
            "fifo" => Some(Reorder::Fifo),
            "adversarial" => Some(Reorder::Adversarial),
            _ => {
                let seed = s.strip_prefix("random:")?;
                parse_u64(seed).map(|seed| Reorder::Random { seed })
            }
        }
    }
}

impl fmt::Display for Reorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reorder::Fifo => f.write_str("fifo"),
            Reorder::Random { seed } => write!(f, "random:{seed}"),
            Reorder::Adversarial => f.write_str("adversarial"),
        }
    }
}

/// Who runs the progress engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Only `poll_cq` runs it: each poll executes pending WQEs (a bounded batch)
    /// before reading the CQ. Nothing progresses while no one polls, so a thread
    /// blocked on a completion channel waits for another thread's poll.
    Inline,
    /// `poll_cq` runs it as in [`Progress::Inline`], and a background thread runs it
    /// whenever work is pending and no poll has made progress for a short while (and
    /// for RNR retries and delays). Completion channels and `poll(2)` work without a
    /// polling thread. The default.
    Thread,
}

impl Progress {
    /// Parses `inline` or `thread`.
    pub fn parse(s: &str) -> Option<Progress> {
        match s.trim() {
            "inline" => Some(Progress::Inline),
            "thread" => Some(Progress::Thread),
            _ => None,
        }
    }
}

/// Which QP a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpSelector {
    /// The QP with this number (on any device).
    QpNum(u32),
    /// The n-th QP created in this process, counting from 1.
    Nth(u64),
    /// Every QP.
    All,
}

impl QpSelector {
    /// Parses `qpn=NUM`, `nth=K` or `all`.
    pub fn parse(s: &str) -> Option<QpSelector> {
        let s = s.trim();
        if s == "all" {
            return Some(QpSelector::All);
        }
        if let Some(v) = s.strip_prefix("qpn=") {
            return parse_u64(v)
                .and_then(|n| u32::try_from(n).ok())
                .map(QpSelector::QpNum);
        }
        if let Some(v) = s.strip_prefix("nth=") {
            return parse_u64(v).filter(|&n| n > 0).map(QpSelector::Nth);
        }
        None
    }

    /// Whether this selects the QP numbered `qpn`, created `nth` in the process.
    pub fn matches(self, qpn: u32, nth: u64) -> bool {
        match self {
            QpSelector::QpNum(n) => n == qpn,
            QpSelector::Nth(k) => k == nth,
            QpSelector::All => true,
        }
    }
}

/// One "fail after n WQEs" rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailRule {
    /// Which QP.
    pub qp: QpSelector,
    /// WQEs it executes normally before it goes to the error state.
    pub after: u64,
}

/// One delay rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayRule {
    /// Which QP.
    pub qp: QpSelector,
    /// Minimum time between posting a WQE and executing it.
    pub delay: Duration,
}

/// Parses the `SELECTOR:VALUE` list format of [`ENV_FAIL_QP`] and [`ENV_DELAY`].
pub(crate) fn parse_rules(s: &str) -> Option<Vec<(QpSelector, u64)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|part| {
            let (sel, val) = part.trim().rsplit_once(':')?;
            Some((QpSelector::parse(sel)?, parse_u64(val)?))
        })
        .collect()
}

/// Parses a comma-separated list of device indices.
pub(crate) fn parse_indices(s: &str) -> Option<Vec<usize>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| parse_u64(p).and_then(|v| usize::try_from(v).ok()))
        .collect()
}

fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Reads an environment variable, warning on stderr (once, at start-up) when it is set
/// but not understood; the default is used then.
pub(crate) fn env_parsed<T>(name: &str, parse: impl FnOnce(&str) -> Option<T>) -> Option<T> {
    let raw = std::env::var(name).ok()?;
    if raw.trim().is_empty() {
        return None;
    }
    let parsed = parse(&raw);
    if parsed.is_none() {
        eprintln!("vqp-softverbs: ignoring {name}={raw:?}: not understood");
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_parses() {
        assert_eq!(Reorder::parse("fifo"), Some(Reorder::Fifo));
        assert_eq!(Reorder::parse(" adversarial "), Some(Reorder::Adversarial));
        assert_eq!(
            Reorder::parse("random:0x10"),
            Some(Reorder::Random { seed: 16 })
        );
        assert_eq!(Reorder::parse("random:"), None);
        assert_eq!(Reorder::parse("lifo"), None);
        assert_eq!(Reorder::Random { seed: 3 }.to_string(), "random:3");
    }

    #[test]
    fn rules_parse() {
        assert_eq!(
            parse_rules("nth=2:10, qpn=0x11:0"),
            Some(vec![(QpSelector::Nth(2), 10), (QpSelector::QpNum(0x11), 0)])
        );
        assert_eq!(parse_rules("all:5"), Some(vec![(QpSelector::All, 5)]));
        assert_eq!(parse_rules("nth=0:1"), None);
        assert_eq!(parse_rules("bogus"), None);
        assert_eq!(parse_indices("0, 3"), Some(vec![0, 3]));
        assert!(QpSelector::Nth(3).matches(0x99, 3));
        assert!(!QpSelector::QpNum(5).matches(6, 5));
    }

    #[test]
    fn progress_parses() {
        assert_eq!(Progress::parse("inline"), Some(Progress::Inline));
        assert_eq!(Progress::parse("thread"), Some(Progress::Thread));
        assert_eq!(Progress::parse("x"), None);
    }
}
