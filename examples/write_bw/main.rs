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
//!   [`vqp_host::Endpoint`], swap endpoint cards with [`vqp_host::exchange`], connect
//!   the QPs, swap buffer addresses and keys, and meet at a barrier. See `wire`.
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
//!   takes every run parameter from its client.
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
//! - Every bad flag or bad circumstance (size 0, qps 0 or above what the type or the
//!   device allows, max-frag above the port's `max_msg_sz`, unknown device, refused
//!   port, peer gone mid-run, a QP failing) is one line on stderr and exit code 2; a
//!   data check that fails is exit code 1.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod args;
mod data;
mod device;
mod report;
mod run;
mod sigint;
mod wire;

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use args::{mode_name, opcode_name, Args, Params, Role};
use device::Device;
use report::Measured;
use run::{Plan, Verified};

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
        "vqp write_bw: {} data QPs, {}, {}, fragments of at most {} B, up to {} messages in flight{order}\n {source}, {route}",
        p.qps,
        mode_name(p.mode),
        opcode_name(p.opcode),
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
    let (verbs, source, names) = match &args.device {
        None => {
            // Read by softverbs when it is first used, which is below.
            std::env::set_var("VQP_SOFT_REORDER", args.soft_reorder());
            let (v, s) = device::load_soft();
            (v, s, ["soft1".to_string(), "soft0".to_string()])
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
    let (server_dev, client_dev) = (open(&names[0])?, open(&names[1])?);
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Fail::bad(format!("cannot listen on loopback: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Fail::bad(format!("cannot listen on loopback: {e}")))?
        .to_string();
    let server = spawn("server", move || {
        serve(server_dev, &listener, Some(wire::TIMEOUT))
    })?;
    let plan = plan(args);
    let core = args.poll_core;
    let client = spawn("client", move || {
        pin(core)?;
        connect(client_dev, &addr, &p, &plan)
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
    let route = format!("{} -> {} in one process", names[1], names[0]);
    let place = if p.opcode == vqp_core::Opcode::RDMA_READ {
        "on the client (reader)"
    } else {
        "on the server"
    };
    let checked = if p.opcode == vqp_core::Opcode::RDMA_READ {
        m.iters
    } else {
        v.messages
    };
    print(
        args,
        &p,
        &header(args, &p, &source, &route),
        &source,
        &m,
        checked,
        place,
    )
}

fn print(
    args: &Args,
    p: &Params,
    header: &str,
    source: &str,
    m: &Measured,
    checked: u64,
    place: &str,
) -> Result<(), Fail> {
    if checked != m.iters {
        return Err(Fail::data(format!(
            "data check incomplete: {checked} of {} messages confirmed",
            m.iters
        )));
    }
    if args.json {
        let fields = [
            ("mode", report::Json::Str(mode_name(p.mode))),
            ("opcode", report::Json::Str(opcode_name(p.opcode))),
            ("qps", report::Json::Num(p.qps as u64)),
            ("max_frag", report::Json::Num(u64::from(p.max_frag))),
            ("provider", report::Json::Str(source)),
        ];
        report::print_json(&fields, p.size, m, place);
    } else {
        report::print_table(
            header,
            p.size,
            m,
            &report::check_line(checked, p.size, place),
        );
    }
    Ok(())
}

fn plan(args: &Args) -> Plan {
    let long = args.duration.map_or(true, |d| d > Duration::from_secs(1));
    Plan {
        iters: args.iters,
        duration: args.duration,
        // Only runs that can last longer than a second print progress; the line
        // itself first appears after one second.
        progress: long,
    }
}

/// `--server`: one run for one client.
fn server_only(args: &Args) -> Result<(), Fail> {
    let name = args.device.clone().unwrap_or_default();
    let (verbs, source) = device::load_hw()?;
    let dev = device::open(&verbs, &name, args.ib_port, args.gid_index)?;
    let addr = format!("0.0.0.0:{}", args.port);
    let listener =
        TcpListener::bind(&addr).map_err(|e| Fail::bad(format!("cannot listen on {addr}: {e}")))?;
    eprintln!(
        "write_bw: {name}: waiting for a client on port {}",
        args.port
    );
    let (p, v) = join(spawn("server", move || serve(dev, &listener, None))?)?;
    println!(
        " {}",
        header(args, &p, &source, &format!("server on {name}"))
    );
    if p.opcode == vqp_core::Opcode::RDMA_READ {
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
    let name = args.device.clone().unwrap_or_default();
    let (verbs, source) = device::load_hw()?;
    let dev = device::open(&verbs, &name, args.ib_port, args.gid_index)?;
    let p = args.params;
    dev.check(&p, run::DEPTH).map_err(Fail::bad)?;
    let (plan, core, a) = (plan(args), args.poll_core, addr.to_string());
    let m = join(spawn("client", move || {
        pin(core)?;
        connect(dev, &a, &p, &plan)
    })?)?;
    let route = format!("{name} -> {addr}");
    let (checked, place) = if p.opcode == vqp_core::Opcode::RDMA_READ {
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
    )
}

/// Accepts one client (giving up after `wait`, or at Ctrl-C), agrees on its
/// parameters and serves its run.
fn serve(
    dev: Device,
    listener: &TcpListener,
    wait: Option<Duration>,
) -> Result<(Params, Verified), Fail> {
    let mut stream = accept(listener, wait)?;
    let what = "waited for the client's parameters";
    let line = wire::read_line(&mut stream, what)?;
    let p = match Params::from_line(&line).and_then(|p| dev.check(&p, run::DEPTH).map(|()| p)) {
        Ok(p) => p,
        Err(e) => {
            let _ = wire::write_all(&mut stream, format!("error {e}\n").as_bytes(), "refused");
            return Err(Fail::bad(format!("refused the client's run: {e}")));
        }
    };
    wire::write_all(&mut stream, b"ok\n", "accepted the client's parameters")?;
    let slots = p.slots() + u64::from(p.opcode == vqp_core::Opcode::RDMA_READ);
    let link = run::link(&dev, &p, stream, slots * p.size, 2)?;
    let v = run::server(link, &p)?;
    Ok((p, v))
}

fn accept(listener: &TcpListener, wait: Option<Duration>) -> Result<TcpStream, Fail> {
    let fail = |e: std::io::Error| Fail::bad(format!("cannot accept a client: {e}"));
    listener.set_nonblocking(true).map_err(fail)?;
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(fail)?;
                timeouts(&s)?;
                return Ok(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(fail(e)),
        }
        if sigint::interrupted() {
            return Err(Fail::bad("interrupted while waiting for a client"));
        }
        if wait.is_some_and(|w| start.elapsed() > w) {
            return Err(Fail::peer("no client connected"));
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn timeouts(s: &TcpStream) -> Result<(), Fail> {
    s.set_read_timeout(Some(wire::TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(wire::TIMEOUT)))
        .and_then(|()| s.set_nodelay(true))
        .map_err(|e| Fail::bad(format!("cannot set up the TCP connection: {e}")))
}

/// Connects to the server (retrying a refused connection for 2 s, in case it is
/// still starting), proposes the run and runs it.
fn connect(dev: Device, addr: &str, p: &Params, plan: &Plan) -> Result<Measured, Fail> {
    let targets: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| Fail::bad(format!("--connect {addr}: {e}")))?
        .collect();
    let stream = tcp_connect(addr, &targets)?;
    let mut stream = stream;
    timeouts(&stream)?;
    wire::write_all(
        &mut stream,
        p.to_line().as_bytes(),
        "sent the run's parameters",
    )?;
    let reply = wire::read_line(&mut stream, "waited for the server to accept the run")?;
    if let Some(e) = reply.strip_prefix("error ") {
        return Err(Fail::bad(format!("the server refused the run: {e}")));
    }
    if reply != "ok" {
        return Err(Fail::bad(format!("{addr} is not a write_bw server")));
    }
    let link = run::link(&dev, p, stream, p.slots() * p.size, 1)?;
    run::client(link, p, plan)
}

fn tcp_connect(addr: &str, targets: &[std::net::SocketAddr]) -> Result<TcpStream, Fail> {
    let start = Instant::now();
    loop {
        let mut last = None;
        for t in targets {
            match TcpStream::connect_timeout(t, wire::TIMEOUT) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        let e = match last {
            Some(e) => e,
            None => {
                return Err(Fail::bad(format!(
                    "--connect {addr}: no address to connect to"
                )))
            }
        };
        let retry = e.kind() == ErrorKind::ConnectionRefused
            && start.elapsed() < Duration::from_secs(2)
            && !sigint::interrupted();
        if !retry {
            return Err(Fail::bad(format!("cannot connect to {addr}: {e}")));
        }
        thread::sleep(Duration::from_millis(50));
    }
}
