//! lat's flags: parsing, the checks on core placement, and their names in reports.

use vqp_core::split::SplitPolicy;
use vqp_core::Mode;

use crate::{size, MAX_QPS, MAX_SIZE};

#[derive(Clone, Debug)]
pub(crate) struct Args {
    pub(crate) size: u64,
    pub(crate) iters: u64,
    pub(crate) warmup: u64,
    pub(crate) qps: usize,
    pub(crate) mode: Mode,
    pub(crate) max_frag: u32,
    pub(crate) client_core: usize,
    pub(crate) server_core: usize,
    /// The application threads' cores, when not their poll threads' (`--*-app-core`).
    pub(crate) client_app_core: Option<usize>,
    pub(crate) server_app_core: Option<usize>,
    pub(crate) idle: Wait,
    pub(crate) direct: bool,
    pub(crate) json: bool,
}

/// How a thread waits for its next completion or event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Poll without pause.
    Spin,
    /// Yield the core between polls (lets two threads share one core).
    Yield,
}

pub(crate) const USAGE: &str =
    "usage: lat [--size BYTES] [--iters N] [--warmup N] [--qps N] [--mode spray|dqplb]
           [--max-frag BYTES] [--client-core ID] [--server-core ID] [--idle spin|yield]
           [--client-app-core ID] [--server-app-core ID] [--direct] [--json]
  --size takes a K, M or G suffix (binary), as write_bw's does. --client-core and
  --server-core place each side's poll thread (with --direct, its application thread);
  --client-app-core and --server-app-core give the application threads cores of their
  own (by default they share their poll thread's, which --idle yield allows and --idle
  spin refuses: two spinning threads on one core never finish).";

/// The arguments, or `None` when help was asked for.
pub(crate) fn parse() -> Result<Option<Args>, String> {
    let mut a = Args {
        size: 8,
        iters: 10_000,
        warmup: 1_000,
        qps: 1,
        mode: Mode::Dqplb,
        max_frag: 64 << 10,
        client_core: 0,
        server_core: 1,
        client_app_core: None,
        server_app_core: None,
        idle: Wait::Yield,
        direct: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--json" => {
                a.json = true;
                continue;
            }
            "--direct" => {
                a.direct = true;
                continue;
            }
            "--help" | "-h" => return Ok(None),
            "--size" | "--iters" | "--warmup" | "--qps" | "--max-frag" | "--client-core"
            | "--server-core" | "--mode" | "--idle" | "--client-app-core" | "--server-app-core" => {
            }
            _ => return Err(format!("unknown flag {flag} (see --help)")),
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
        };
        match flag.as_str() {
            "--size" => a.size = size::bytes(&flag, &value)?,
            "--iters" => a.iters = num(&value)?,
            "--warmup" => a.warmup = num(&value)?,
            "--qps" => {
                a.qps = usize::try_from(num(&value)?).unwrap_or(usize::MAX);
            }
            "--max-frag" => {
                a.max_frag = u32::try_from(num(&value)?).unwrap_or(0);
            }
            "--client-core" => {
                a.client_core = usize::try_from(num(&value)?).unwrap_or(usize::MAX);
            }
            "--server-core" => {
                a.server_core = usize::try_from(num(&value)?).unwrap_or(usize::MAX);
            }
            "--client-app-core" => {
                a.client_app_core = Some(usize::try_from(num(&value)?).unwrap_or(usize::MAX));
            }
            "--server-app-core" => {
                a.server_app_core = Some(usize::try_from(num(&value)?).unwrap_or(usize::MAX));
            }
            "--mode" => {
                a.mode = match value.as_str() {
                    "spray" => Mode::Spray,
                    "dqplb" => Mode::Dqplb,
                    v => return Err(format!("--mode: '{v}' is not spray or dqplb")),
                }
            }
            "--idle" => {
                a.idle = match value.as_str() {
                    "spin" => Wait::Spin,
                    "yield" => Wait::Yield,
                    v => return Err(format!("--idle: '{v}' is not spin or yield")),
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.size == 0 || a.size > MAX_SIZE {
        return Err(format!("--size must be between 1 and {MAX_SIZE} bytes"));
    }
    if a.iters == 0 || a.iters > 1 << 40 {
        return Err("--iters must be between 1 and 2^40".into());
    }
    if a.warmup > 1 << 40 {
        return Err("--warmup must be at most 2^40".into());
    }
    if a.qps == 0 || a.qps > MAX_QPS {
        return Err(format!("--qps must be between 1 and {MAX_QPS}"));
    }
    if SplitPolicy::new(a.max_frag).validate().is_err() {
        return Err(format!(
            "--max-frag must be between 1 and {}",
            vqp_core::reorder::MAX_FRAGMENT
        ));
    }
    let cores: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    for (flag, core) in [
        ("--client-core", Some(a.client_core)),
        ("--server-core", Some(a.server_core)),
        ("--client-app-core", a.client_app_core),
        ("--server-app-core", a.server_app_core),
    ] {
        match core {
            Some(core) if !cores.contains(&core) => {
                return Err(format!(
                    "{flag}: core {core} is not available to this process (available: {cores:?})"
                ));
            }
            _ => {}
        }
    }
    check_placement(&a)?;
    Ok(Some(a))
}

/// Refuses a placement that cannot run: an application core with `--direct` (there
/// is no poll thread to sit beside), or two spinning threads on one core (neither
/// yields, so the one that waits for the other never gets the core).
pub(crate) fn check_placement(a: &Args) -> Result<(), String> {
    if a.direct && (a.client_app_core.is_some() || a.server_app_core.is_some()) {
        return Err(
            "--client-app-core and --server-app-core place application threads beside poll threads; --direct has none (its application threads are on --client-core and --server-core)".into(),
        );
    }
    let spin = a.direct || a.idle == Wait::Spin;
    if !spin {
        return Ok(());
    }
    let mut threads = vec![
        (
            a.client_core,
            if a.direct {
                "the client's application thread"
            } else {
                "the client's poll thread"
            },
        ),
        (
            a.server_core,
            if a.direct {
                "the server's application thread"
            } else {
                "the server's poll thread"
            },
        ),
    ];
    if !a.direct {
        threads.push((
            a.client_app_core.unwrap_or(a.client_core),
            "the client's application thread",
        ));
        threads.push((
            a.server_app_core.unwrap_or(a.server_core),
            "the server's application thread",
        ));
    }
    for (i, &(core, one)) in threads.iter().enumerate() {
        if let Some(&(_, other)) = threads[i + 1..].iter().find(|t| t.0 == core) {
            return Err(format!(
                "{one} and {other} would both spin on core {core}, and two spinning threads on one core never finish: give each thread a core of its own (--client-core, --server-core, --client-app-core, --server-app-core) or use --idle yield"
            ));
        }
    }
    Ok(())
}

pub(crate) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Spray => "spray",
        Mode::Dqplb => "dqplb",
    }
}

pub(crate) fn idle_name(wait: Wait) -> &'static str {
    match wait {
        Wait::Spin => "spin",
        Wait::Yield => "yield",
    }
}
