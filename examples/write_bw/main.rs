//! write_bw: the main job, in the spirit of perftest's `ib_write_bw`. A virtual QP
//! with N data QPs moves `--size`-byte messages from a client to a server; the client
//! prints perftest's table (`#bytes #iterations BW peak[MB/sec] BW average[MB/sec]
//! MsgRate[Mpps]`, MB = 2^20 bytes as perftest counts), the send WQEs (fragments)
//! each data QP carried, and a data-check line: every byte of every message is
//! verified by the side that receives it.
//!
//! ```text
//! cargo run --release --example write_bw                       # softverbs, one process
//! cargo run --release --example write_bw -- --qps 8 --mode spray --opcode write --duration 5
//! write_bw --device mlx5_0 --server                            # on real hardware: one host...
//! write_bw --device mlx5_0 --connect server-host:18515         # ...and the other
//! ```
//!
//! # How it runs
//! - Two sides, the same code everywhere: a **server** (the target of writes, the
//!   source of reads) and a **client** (which posts every message and measures). They
//!   meet over TCP: the client sends the run's parameters, both build an
//!   [`vqp_host::Endpoint`], swap endpoint cards (framed as [`vqp_host::exchange`]
//!   frames them, read with a deadline), connect the QPs, swap buffer addresses and
//!   keys, and meet at a barrier. See `wire`; the run's frames are in `control`.
//! - Default (no `--device`): both sides run in this process, as two threads that talk
//!   over a loopback TCP connection exactly as two hosts would — the server on softverbs'
//!   `soft1`, the client on `soft0`. softverbs is loaded through the host's `dlopen`
//!   loader from `libvqp_softverbs.so` next to this binary (cargo builds it into
//!   `target/<profile>/deps/`), or, when that file is missing, from the copy linked into
//!   this binary (`vqp_softverbs::verbs_table()`); the header line says which.
//!   `--reorder` and `--seed` reach softverbs through `VQP_SOFT_REORDER`, set before it
//!   is loaded.
//! - `--device NAME` runs on that device through libibverbs (`Verbs::load`, which
//!   honours `VQP_IBVERBS_PATH`): alone, both sides in this process (loopback on one
//!   device); with `--server` or `--connect HOST:PORT`, one side per host. The server
//!   takes every run parameter from its client. `--device a,b` spreads the data QPs
//!   over both devices on each side (QP i on the (i mod 2)-th), as `--devices 2` does
//!   over softverbs' own; the server names as many as its client.
//! - One thread per side posts and polls (as perftest does); `--poll-core` pins the
//!   client's. The client keeps at most `slots` messages unverified (about 16 MiB of
//!   buffer, 2 to 128 messages) and at most 64 WQEs in flight per QP. How data is
//!   checked — a pattern per message and offset, credits so that no slot is rewritten
//!   before it was checked — is described in `run`.
//! - The figures include the pattern fill (client) and the check (server, or client
//!   for reads): this program proves the data path end to end rather than measure the
//!   wire alone. On softverbs "the wire" is a memcpy on this machine's cores.
//! - A progress line (rate so far) goes to stderr once a second. Ctrl-C stops posting,
//!   lets what is in flight complete and be checked, and prints the partial table.
//! - Neither side waits for the other without bound (`--timeout`, 10 s by default):
//!   each message of the set-up must arrive whole within it (a deadline per message,
//!   not per read, see `wire`), and during the run each side gives up on a peer that
//!   makes no progress for that long. While it waits it holds no core: after 10 ms
//!   without progress its loop sleeps between polls (at most 5 ms at a time, see
//!   `idle`), so a stopped peer costs it well under 1% of a core.
//! - The server does not trust its client: every parameter is checked before anything
//!   is built, its buffer is bounded by `--max-buffer` (1 GiB by default), and every
//!   count the client reports is held to what it can have done (see `server`).
//! - When the virtual QP fails (the client's, or the server's, which tells the
//!   client), the client still collects every completion of what it posted and both
//!   sides report its one count (`tally`): "failed after N messages" is the messages
//!   that completed in order before the first failure (those the server can check,
//!   and does), then, apart, how many of those posted completed after the first
//!   failure (on QPs still up) and how many were flushed.
//! - Every bad flag or bad circumstance (size 0, qps 0 or above what the type or the
//!   device allows, max-frag above the port's `max_msg_sz`, unknown device, no RDMA
//!   device at all, refused port, a silent or stalled peer, peer gone mid-run, a QP
//!   failing, a count from the peer that cannot be) is one line on stderr and exit
//!   code 2; a data check that fails, or a run in which no message completed, is exit
//!   code 1.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod args;
mod client;
mod control;
mod data;
mod device;
mod failback;
mod idle;
mod inject;
mod params;
mod report;
mod run;
mod server;
mod session;
mod sigint;
mod size;
mod tally;
#[cfg(test)]
mod tests;
mod wire;

use std::net::TcpListener;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use args::{mode_name, opcode_name, Args, Limit, Params, Role};
use device::Device;
use report::Measured;
use run::Plan;

/// A one-line error and the exit code it ends the program with.
#[derive(Debug)]
pub struct Fail {
    pub code: u8,
    pub msg: String,
    /// Caused by the peer going away (in a one-process run, the other side's error,
    /// if it has one, says more).
    pub peer: bool,
}

impl Fail {
    /// Bad input or circumstances: exit code 2.
    pub fn bad(msg: impl Into<String>) -> Fail {
        Fail {
            code: 2,
            msg: msg.into(),
            peer: false,
        }
    }

    /// The peer went away or the QPs failed: exit code 2.
    pub fn peer(msg: impl Into<String>) -> Fail {
        Fail {
            peer: true,
            ..Fail::bad(msg)
        }
    }

    /// The data check failed: exit code 1.
    pub fn data(msg: impl Into<String>) -> Fail {
        Fail {
            code: 1,
            ..Fail::bad(msg)
        }
    }
}

/// Stack for each side's thread: the virtual QP is built on the stack before it is
/// boxed, which in a debug build takes a few copies of its several hundred KB.
const STACK: usize = 64 << 20;

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) if e == args::USAGE => {
            println!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("write_bw: {e}");
            return ExitCode::from(2);
        }
    };
    sigint::install();
    let result = match args.role.clone() {
        Role::Both => both(&args),
        Role::Server => server_only(&args),
        Role::Client(addr) => client_only(&args, &addr),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("write_bw: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

fn check_core(args: &Args) -> Result<(), Fail> {
    let Some(core) = args.poll_core else {
        return Ok(());
    };
    let ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    if ids.contains(&core) {
        return Ok(());
    }
    Err(Fail::bad(format!(
        "--poll-core {core}: this process may run on cores {ids:?}"
    )))
}

fn pin(core: Option<usize>) -> Result<(), Fail> {
    match core {
        Some(id) if !core_affinity::set_for_current(core_affinity::CoreId { id }) => Err(
            Fail::bad(format!("--poll-core {id}: cannot pin the polling thread")),
        ),
        _ => Ok(()),
    }
}

/// The description at the top of the table.
fn header(args: &Args, p: &Params, source: &str, route: &str) -> String {
    let order = match args.device {
        None => format!(", {} cross-QP order", args.soft_reorder()),
        Some(_) => String::new(),
    };
    format!(
        "vqp write_bw: {} data QPs, {}, {}, {} striping, fragments of at most {} B, up to {} messages in flight{order}\n {source}, {route}",
        p.qps,
        mode_name(p.mode),
        opcode_name(p.opcode),
        args.policy.name(),
        p.max_frag,
        p.slots()
    )
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, Fail> + Send + 'static,
) -> Result<thread::JoinHandle<Result<T, Fail>>, Fail> {
    thread::Builder::new()
        .name(name.into())
        .stack_size(STACK)
        .spawn(f)
        .map_err(|e| Fail::bad(format!("cannot start the {name} thread: {e}")))
}

fn join<T>(h: thread::JoinHandle<Result<T, Fail>>) -> Result<T, Fail> {
    h.join().unwrap_or_else(|_| {
        Err(Fail::bad(
            "a side's thread panicked (a bug; please report it)",
        ))
    })
}

/// Both sides in this process.
fn both(args: &Args) -> Result<(), Fail> {
    check_core(args)?;
    let p = args.params;
    let n = p.devices;
    let (verbs, source, names) = match &args.device {
        None => {
            // Read by softverbs when it is first used, which is below.
            std::env::set_var("VQP_SOFT_REORDER", args.soft_reorder());
            if n + 1 > vqp_softverbs::DEFAULT_DEVICES {
                std::env::set_var("VQP_SOFT_DEVICES", (n + 1).to_string());
            }
            let (v, s) = device::load_soft();
            // The client on soft0, soft1, …; the server one device further, so that
            // every data QP crosses from one device to another.
            let side = |first: usize| -> Vec<String> {
                (first..first + n).map(|i| format!("soft{i}")).collect()
            };
            (v, s, [side(1), side(0)])
        }
        Some(d) => {
            let (v, s) = device::load_hw()?;
            (v, s, [d.clone(), d.clone()])
        }
    };
    let open = |name: &str| -> Result<Device, Fail> {
        let dev = device::open(&verbs, name, args.ib_port, args.gid_index)?;
        dev.check(&p, run::DEPTH).map_err(Fail::bad)?;
        Ok(dev)
    };
    let opens = |names: &[String]| names.iter().map(|n| open(n)).collect::<Result<Vec<_>, _>>();
    let (server_dev, client_dev) = (opens(&names[0])?, opens(&names[1])?);
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Fail::bad(format!("cannot listen on loopback: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Fail::bad(format!("cannot listen on loopback: {e}")))?
        .to_string();
    let limits = Limits::of(args);
    let cm = if p.rdma_cm {
        let at = listener
            .local_addr()
            .map_err(|e| Fail::bad(format!("cannot listen on loopback: {e}")))?;
        Some(run::cm_listen(at)?)
    } else {
        None
    };
    let server = spawn("server", move || {
        session::serve(server_dev, &listener, cm, Some(limits.timeout), &limits)
    })?;
    let plan = plan(args);
    let (core, timeout) = (args.poll_core, args.timeout);
    let client = spawn("client", move || {
        pin(core)?;
        session::connect(client_dev, &addr, &p, &plan, timeout)
    })?;
    let (c, s) = (join(client), join(server));
    let (m, v) = match (c, s) {
        (Ok(m), Ok((_, v))) => (m, v),
        (Err(a), Err(b)) if a.peer && !b.peer => return Err(b),
        (Err(a), Err(b)) if a.peer && b.peer => {
            // Each saw the other go: say both, on one line.
            return Err(Fail::peer(format!("client: {}; server: {}", a.msg, b.msg)));
        }
        (Err(e), _) | (Ok(_), Err(e)) => return Err(e),
    };
    let route = format!(
        "{} -> {} in one process",
        names[1].join("+"),
        names[0].join("+")
    );
    let place = if p.read() {
        "on the client (reader)"
    } else {
        "on the server"
    };
    let checked = if p.read() { m.iters } else { v.messages };
    print(
        args,
        &p,
        &header(args, &p, &source, &route),
        &source,
        &m,
        checked,
        place,
        &names[1],
    )
}

#[allow(clippy::too_many_arguments)]
fn print(
    args: &Args,
    p: &Params,
    header: &str,
    source: &str,
    m: &Measured,
    checked: u64,
    place: &str,
    client_devices: &[String],
) -> Result<(), Fail> {
    if checked != m.iters {
        return Err(Fail::data(format!(
            "data check incomplete: {checked} of {} messages confirmed",
            m.iters
        )));
    }
    nothing_is_no_pass(m.iters)?;
    if args.json {
        let fields = [
            ("mode", report::Json::Str(mode_name(p.mode))),
            ("opcode", report::Json::Str(opcode_name(p.opcode))),
            ("qps", report::Json::Num(p.qps as u64)),
            ("max_frag", report::Json::Num(u64::from(p.max_frag))),
            ("provider", report::Json::Str(source)),
            ("policy", report::Json::Str(args.policy.name())),
        ];
        report::print_json(&fields, p.size, m, place, client_devices);
    } else {
        report::print_table(
            header,
            p.size,
            m,
            &report::check_line(checked, p.size, place),
            client_devices,
        );
    }
    Ok(())
}

/// A run in which no message completed verified nothing: it never passes.
fn nothing_is_no_pass(messages: u64) -> Result<(), Fail> {
    if messages == 0 {
        return Err(Fail::data(
            "data check: no message completed, so nothing was verified",
        ));
    }
    Ok(())
}

fn plan(args: &Args) -> Plan {
    let (iters, duration) = match args.params.limit {
        Limit::Iters(n) => (n, None),
        Limit::Time(d) => (u64::MAX, Some(d)),
    };
    Plan {
        iters,
        duration,
        // Only runs that can last longer than a second print progress; the line
        // itself first appears after one second.
        progress: duration.map_or(true, |d| d > Duration::from_secs(1)),
        inject: args.inject.clone(),
        stripe: run::Stripe {
            policy: args.policy,
            weights: args.weights,
        },
    }
}

/// What a server allows its client: how long it waits for each message and for
/// progress, and how large a buffer it registers.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub timeout: Duration,
    pub max_buffer: u64,
}

impl Limits {
    fn of(args: &Args) -> Limits {
        Limits {
            timeout: args.timeout,
            max_buffer: args.max_buffer,
        }
    }
}

/// `--server`: one run for one client.
fn server_only(args: &Args) -> Result<(), Fail> {
    let names = args.device.clone().unwrap_or_default();
    let name = names.join("+");
    let (verbs, source) = device::load_hw()?;
    let devs = names
        .iter()
        .map(|n| device::open(&verbs, n, args.ib_port, args.gid_index))
        .collect::<Result<Vec<_>, _>>()?;
    let addr = format!("0.0.0.0:{}", args.port);
    let listener =
        TcpListener::bind(&addr).map_err(|e| Fail::bad(format!("cannot listen on {addr}: {e}")))?;
    eprintln!(
        "write_bw: {name}: waiting for a client on port {}",
        args.port
    );
    let limits = Limits::of(args);
    let cm = if args.params.rdma_cm {
        let at = format!("0.0.0.0:{}", args.port)
            .parse()
            .map_err(|e| Fail::bad(format!("--port {}: {e}", args.port)))?;
        Some(run::cm_listen(at)?)
    } else {
        None
    };
    let (p, v) = join(spawn("server", move || {
        session::serve(devs, &listener, cm, None, &limits)
    })?)?;
    println!(
        " {}",
        header(args, &p, &source, &format!("server on {name}"))
    );
    nothing_is_no_pass(v.messages)?;
    if p.read() {
        println!(" the client read {} messages and checked them", v.messages);
    } else {
        if v.interrupted {
            println!(" interrupted: partial results");
        }
        println!(
            "{}",
            report::check_line(v.messages, p.size, "on the server")
        );
    }
    Ok(())
}

/// `--connect HOST:PORT`.
fn client_only(args: &Args, addr: &str) -> Result<(), Fail> {
    check_core(args)?;
    let names = args.device.clone().unwrap_or_default();
    let name = names.join("+");
    let (verbs, source) = device::load_hw()?;
    let p = args.params;
    let devs = names
        .iter()
        .map(|n| {
            let dev = device::open(&verbs, n, args.ib_port, args.gid_index)?;
            dev.check(&p, run::DEPTH).map_err(Fail::bad)?;
            Ok(dev)
        })
        .collect::<Result<Vec<_>, Fail>>()?;
    let (plan, core, a) = (plan(args), args.poll_core, addr.to_string());
    let timeout = args.timeout;
    let m = join(spawn("client", move || {
        pin(core)?;
        session::connect(devs, &a, &p, &plan, timeout)
    })?)?;
    let route = format!("{name} -> {addr}");
    let (checked, place) = if p.read() {
        (m.iters, "on the client (reader)")
    } else {
        // The client's run ends only once the server confirmed every message.
        (m.iters, "on the server")
    };
    print(
        args,
        &p,
        &header(args, &p, &source, &route),
        &source,
        &m,
        checked,
        place,
        &names,
    )
}
