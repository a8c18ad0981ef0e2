//! `--inject TIME:ACTION,...`: softverbs link and QP events at set times of the run,
//! driven from a thread of the client while it sends — a link's rate changing
//! (`rate=soft1:0.5G`), a link going down or coming back (`link-down=soft0`,
//! `link-up=soft0`), a data QP of the client or of the server failing (`fail-qp=1`,
//! `server-fail-qp=3`: the QP goes to the error state at once, as a fatal QP error),
//! or their SPRAY notify QP (`fail-notify`, `server-fail-notify`): the QPs the run
//! started with, not replacements fail-back made. They act on the
//! softverbs this process loaded (its `vqp_soft_*`
//! controls when it is the `dlopen`ed library, else the one linked in), which in one
//! process serves both sides.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vqp_host::Verbs;

use vqp_core::Mode;

use crate::params::{Limit, Params};
use crate::Fail;

/// What happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Device `dev`'s link rate becomes `rate` bytes per second (0: unlimited).
    Rate { dev: usize, rate: u64 },
    /// Device `dev`'s link goes down.
    LinkDown(usize),
    /// Device `dev`'s link comes back up.
    LinkUp(usize),
    /// The client's data QP `i` fails.
    FailQp(usize),
    /// The server's data QP `i` fails.
    ServerFailQp(usize),
    /// The client's notify QP fails.
    FailNotify,
    /// The server's notify QP fails.
    ServerFailNotify,
}

/// The QPs injections act on, by number.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// The client's data QPs.
    pub client: Vec<u32>,
    /// The client's notify QP (SPRAY).
    pub client_notify: Option<u32>,
    /// The server's data QPs.
    pub server: Vec<u32>,
    /// The server's notify QP (SPRAY).
    pub server_notify: Option<u32>,
}

/// One action at `at` from the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injection {
    pub at: Duration,
    pub action: Action,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Rate { dev, rate: 0 } => write!(f, "soft{dev}'s link is unlimited"),
            Action::Rate { dev, rate } => {
                write!(f, "soft{dev}'s link runs at {} MB/s", *rate as f64 / 1e6)
            }
            Action::LinkDown(dev) => write!(f, "soft{dev}'s link goes down"),
            Action::LinkUp(dev) => write!(f, "soft{dev}'s link comes up"),
            Action::FailQp(i) => write!(f, "the client's data QP {i} fails"),
            Action::ServerFailQp(i) => write!(f, "the server's data QP {i} fails"),
            Action::FailNotify => write!(f, "the client's notify QP fails"),
            Action::ServerFailNotify => write!(f, "the server's notify QP fails"),
        }
    }
}

impl Action {
    /// The action as `--inject` spells it.
    fn spec(self) -> String {
        match self {
            Action::Rate { dev, rate } => {
                let (n, unit) = [(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "K")]
                    .into_iter()
                    .find(|&(u, _)| rate >= u && rate % u == 0)
                    .map_or((rate, ""), |(u, name)| (rate / u, name));
                format!("rate=soft{dev}:{n}{unit}")
            }
            Action::LinkDown(dev) => format!("link-down=soft{dev}"),
            Action::LinkUp(dev) => format!("link-up=soft{dev}"),
            Action::FailQp(i) => format!("fail-qp={i}"),
            Action::ServerFailQp(i) => format!("server-fail-qp={i}"),
            Action::FailNotify => "fail-notify".into(),
            Action::ServerFailNotify => "server-fail-notify".into(),
        }
    }
}

fn device(s: &str) -> Option<usize> {
    s.trim().strip_prefix("soft")?.parse().ok()
}

fn time(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, scale) = match s.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (s.strip_suffix('s')?, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0 && v * scale < 1e6).then(|| Duration::from_secs_f64(v * scale))
}

/// Parses `--inject`'s value: `TIME:ACTION` items, comma-separated, `TIME` in seconds
/// (`2s`, `0.5s`) or milliseconds (`250ms`); returned in time order.
pub fn parse(spec: &str) -> Result<Vec<Injection>, String> {
    let bad = |item: &str, why: &str| format!("--inject: '{item}': {why}");
    let mut out = Vec::new();
    for item in spec.split(',').filter(|i| !i.trim().is_empty()) {
        let (t, action) = item
            .split_once(':')
            .ok_or_else(|| bad(item, "not TIME:ACTION"))?;
        let at = time(t).ok_or_else(|| bad(item, "the time is not like 2s or 250ms"))?;
        // NAME=VALUE, or NAME alone for the notify QPs.
        let (what, arg) = action.split_once('=').unwrap_or((action, ""));
        let action = match what.trim() {
            "rate" => {
                let (dev, rate) = arg
                    .split_once(':')
                    .ok_or_else(|| bad(item, "rate takes softN:RATE"))?;
                Action::Rate {
                    dev: device(dev).ok_or_else(|| bad(item, "the device is not softN"))?,
                    rate: vqp_softverbs::parse_rate(rate)
                        .ok_or_else(|| bad(item, "the rate is not like 1G, 500M or 0"))?,
                }
            }
            "link-down" => {
                Action::LinkDown(device(arg).ok_or_else(|| bad(item, "the device is not softN"))?)
            }
            "link-up" => {
                Action::LinkUp(device(arg).ok_or_else(|| bad(item, "the device is not softN"))?)
            }
            "fail-qp" | "server-fail-qp" => {
                let i: usize = arg
                    .trim()
                    .parse()
                    .map_err(|_| bad(item, "the data QP is not a number"))?;
                if what.trim() == "fail-qp" {
                    Action::FailQp(i)
                } else {
                    Action::ServerFailQp(i)
                }
            }
            "fail-notify" | "server-fail-notify" if action.trim() == what.trim() => {
                if what.trim() == "fail-notify" {
                    Action::FailNotify
                } else {
                    Action::ServerFailNotify
                }
            }
            other => {
                return Err(bad(
                    item,
                    &format!(
                        "'{other}' is not rate, link-down, link-up, fail-qp, server-fail-qp, fail-notify or server-fail-notify"
                    ),
                ))
            }
        };
        out.push(Injection { at, action });
    }
    out.sort_by_key(|i| i.at);
    Ok(out)
}

/// Refuses an injection the run described by `p` cannot carry out: a data QP index at
/// or above `--qps`, a notify QP in a run without one (DQPLB, or SPRAY over one data
/// QP), a device the run does not use (the client's soft0 to soft{N-1} and the
/// server's soft1 to softN for `--devices N`), and, in a `--duration` run, a time at
/// or after its end, when nothing is left for the injection to act on. (With
/// `--iters` the run's length is not known beforehand: an injection that did not
/// happen is told when the run ends, see [`Injector`].)
pub fn check(list: &[Injection], p: &Params) -> Result<(), String> {
    let notify = p.mode == Mode::Spray && p.qps > 1;
    for i in list {
        let item = format!("--inject {}s:{}", i.at.as_secs_f64(), i.action.spec());
        let why = match i.action {
            Action::FailQp(q) | Action::ServerFailQp(q) if q >= p.qps => Some(format!(
                "the run has data QPs 0 to {} (--qps {})",
                p.qps - 1,
                p.qps
            )),
            Action::FailNotify | Action::ServerFailNotify if !notify => Some(
                "the run has no notify QP (only --mode spray with --qps 2 or more has one)"
                    .to_string(),
            ),
            Action::Rate { dev, .. } | Action::LinkDown(dev) | Action::LinkUp(dev)
                if dev > p.devices =>
            {
                let span = |a: usize, b: usize| match a == b {
                    true => format!("soft{a}"),
                    false => format!("soft{a} to soft{b}"),
                };
                Some(format!(
                    "the run uses {} (--devices {}: the client {}, the server {})",
                    span(0, p.devices),
                    p.devices,
                    span(0, p.devices - 1),
                    span(1, p.devices)
                ))
            }
            _ => None,
        };
        let late = match p.limit {
            Limit::Time(d) if i.at >= d => Some(format!(
                "{} s is not before the run's end ({} s, --duration): it would never happen",
                i.at.as_secs_f64(),
                d.as_secs_f64()
            )),
            _ => None,
        };
        if let Some(why) = why.or(late) {
            return Err(format!("{item}: {why}"));
        }
    }
    Ok(())
}

type SetRate = extern "C" fn(u32, u64) -> c_int;
type SetLink = extern "C" fn(u32, c_int) -> c_int;
type FailQp = extern "C" fn(u32) -> c_int;

/// The loaded softverbs' link and QP controls.
#[derive(Clone, Copy)]
enum Controls {
    /// The `dlopen`ed library's exports.
    Loaded {
        set_rate: SetRate,
        set_link: SetLink,
        fail_qp: FailQp,
    },
    /// The provider linked into this binary.
    Linked,
}

impl Controls {
    fn of(verbs: &Verbs) -> Controls {
        let (Some(r), Some(l), Some(q)) = (
            verbs.symbol("vqp_soft_set_rate"),
            verbs.symbol("vqp_soft_set_link"),
            verbs.symbol("vqp_soft_fail_qp"),
        ) else {
            return Controls::Linked;
        };
        // SAFETY: softverbs' export of this name, with exactly this prototype
        // (`abi/faults.rs`); `verbs` keeps the library loaded for the process's life (it
        // is never unloaded while the run goes on). The same for the two below.
        let set_rate = unsafe { std::mem::transmute::<*mut std::ffi::c_void, SetRate>(r.as_ptr()) };
        // SAFETY: as above.
        let set_link = unsafe { std::mem::transmute::<*mut std::ffi::c_void, SetLink>(l.as_ptr()) };
        // SAFETY: as above.
        let fail_qp = unsafe { std::mem::transmute::<*mut std::ffi::c_void, FailQp>(q.as_ptr()) };
        Controls::Loaded {
            set_rate,
            set_link,
            fail_qp,
        }
    }

    /// Carries out `a` on the QPs of `qpns`.
    fn apply(self, a: Action, qpns: &Targets) -> bool {
        match a {
            Action::Rate { dev, rate } => match self {
                Controls::Loaded { set_rate, .. } => set_rate(dev as u32, rate) == 0,
                Controls::Linked => vqp_softverbs::set_rate(dev, rate).is_ok(),
            },
            Action::LinkDown(d) | Action::LinkUp(d) => {
                let up = matches!(a, Action::LinkUp(_));
                match self {
                    Controls::Loaded { set_link, .. } => set_link(d as u32, c_int::from(up)) == 0,
                    Controls::Linked => vqp_softverbs::set_link(d, up).is_ok(),
                }
            }
            Action::FailQp(i) => qpns.client.get(i).is_some_and(|&q| self.fail(q)),
            Action::ServerFailQp(i) => qpns.server.get(i).is_some_and(|&q| self.fail(q)),
            Action::FailNotify => qpns.client_notify.is_some_and(|q| self.fail(q)),
            Action::ServerFailNotify => qpns.server_notify.is_some_and(|q| self.fail(q)),
        }
    }

    fn fail(self, qpn: u32) -> bool {
        match self {
            Controls::Loaded { fail_qp, .. } => fail_qp(qpn) == 0,
            Controls::Linked => vqp_softverbs::fail_qp(vqp_softverbs::QpSelector::QpNum(qpn)) > 0,
        }
    }
}

/// The thread carrying out the injections; stopped (and joined) on drop, which also
/// tells, one line each on stderr, the injections that did not happen because the run
/// ended first (possible with `--iters`, whose length is not known when the flags are
/// checked): a run that was meant to meet a fault and did not should not look like one
/// that rode it out.
pub struct Injector {
    stop: Arc<AtomicBool>,
    /// How many of `list` were carried out (they happen in order).
    done: Arc<AtomicUsize>,
    list: Vec<Injection>,
    t0: Instant,
    join: Option<JoinHandle<()>>,
}

/// Starts carrying out `list` from now, each line told on stderr as it happens, on the
/// QPs of `qpns`.
///
/// # Errors
/// When the thread cannot start.
pub fn start(verbs: &Verbs, list: &[Injection], qpns: Targets) -> Result<Option<Injector>, Fail> {
    if list.is_empty() {
        return Ok(None);
    }
    let controls = Controls::of(verbs);
    let todo = list.to_vec();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let (flag, count) = (Arc::clone(&stop), Arc::clone(&done));
    let t0 = Instant::now();
    let join = std::thread::Builder::new()
        .name("write_bw-inject".into())
        .spawn(move || {
            for i in todo {
                while t0.elapsed() < i.at {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep((i.at - t0.elapsed()).min(Duration::from_millis(10)));
                }
                let ok = controls.apply(i.action, &qpns);
                eprintln!(
                    "write_bw: at {:.3} s: {}{}",
                    t0.elapsed().as_secs_f64(),
                    i.action,
                    if ok {
                        ""
                    } else {
                        " (refused: no such device or QP)"
                    }
                );
                // Read by `Drop` after the join, which orders it.
                count.fetch_add(1, Ordering::Relaxed);
            }
        })
        .map_err(|e| Fail::bad(format!("cannot start the --inject thread: {e}")))?;
    Ok(Some(Injector {
        stop,
        done,
        list: list.to_vec(),
        t0,
        join: Some(join),
    }))
}

impl Drop for Injector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        let ended = self.t0.elapsed().as_secs_f64();
        for i in &self.list[self.done.load(Ordering::Relaxed).min(self.list.len())..] {
            eprintln!(
                "write_bw: --inject {}s:{} did not happen: the run ended after {ended:.3} s",
                i.at.as_secs_f64(),
                i.action.spec()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injections_parse_in_time_order_and_bad_ones_say_why() {
        assert_eq!(
            parse("3s:server-fail-notify,1s:fail-qp=2,2s:server-fail-qp=0,4s:fail-notify").unwrap(),
            [
                Injection {
                    at: Duration::from_secs(1),
                    action: Action::FailQp(2)
                },
                Injection {
                    at: Duration::from_secs(2),
                    action: Action::ServerFailQp(0)
                },
                Injection {
                    at: Duration::from_secs(3),
                    action: Action::ServerFailNotify
                },
                Injection {
                    at: Duration::from_secs(4),
                    action: Action::FailNotify
                },
            ]
        );
        let l = parse("2s:rate=soft1:0.5G,250ms:link-down=soft0, 1.5s:link-up=soft0").unwrap();
        assert_eq!(
            l,
            [
                Injection {
                    at: Duration::from_millis(250),
                    action: Action::LinkDown(0)
                },
                Injection {
                    at: Duration::from_millis(1500),
                    action: Action::LinkUp(0)
                },
                Injection {
                    at: Duration::from_secs(2),
                    action: Action::Rate {
                        dev: 1,
                        rate: 500_000_000
                    }
                },
            ]
        );
        // Each action as messages name it is the item that gives it.
        for i in parse("1s:rate=soft1:1500M,2s:rate=soft0:0,3s:link-up=soft2,4s:fail-notify,5s:server-fail-qp=3")
            .unwrap()
        {
            let again = parse(&format!("1s:{}", i.action.spec())).unwrap();
            assert_eq!(again[0].action, i.action, "{}", i.action.spec());
        }
        for (spec, says) in [
            ("2:rate=soft1:1G", "the time"),
            ("2s", "TIME:ACTION"),
            ("2s:rate=soft1", "softN:RATE"),
            ("2s:rate=mlx5:1G", "softN"),
            ("2s:rate=soft1:fast", "the rate"),
            ("2s:reboot=soft1", "'reboot'"),
            ("2s:fail-qp=one", "not a number"),
            ("2s:fail-qp", "not a number"),
            ("2s:fail-notify=1", "'fail-notify'"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }
}
