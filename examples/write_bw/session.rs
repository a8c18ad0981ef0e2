//! Setting a run up with the peer over TCP: the server accepts one client and holds
//! its proposed parameters to its own limits; the client connects (retrying while the
//! server starts) and proposes them. Then each side runs its part.

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use crate::args::{self, Params};
use crate::device::Device;
use crate::report::Measured;
use crate::run::{self, Plan};
use crate::server::{self, Verified};
use crate::wire::Wire;
use crate::{client, inject, sigint, Fail, Limits};
use vqp_host::cm::CmListener;

/// Accepts one client (giving up after `wait`, or at Ctrl-C), agrees on its
/// parameters and serves its run.
///
/// Every parameter is checked — against the flags' rules, the device and
/// `limits.max_buffer` — before anything is built for the client; each message of
/// the set-up has `limits.timeout` as a whole, and so has the run for any progress.
/// Whatever was built is freed on every error (the values drop on return).
pub fn serve(
    devs: Vec<Device>,
    listener: &TcpListener,
    mut cm: Option<CmListener>,
    wait: Option<Duration>,
    limits: &Limits,
) -> Result<(Params, Verified), Fail> {
    let stream = accept(listener, wait)?;
    let mut wire = Wire::new(stream, "client", limits.timeout)?;
    let line = wire.read_line("parameters")?;
    let checked = Params::from_line(&line).and_then(|p| {
        args::check_buffer(&p, limits.max_buffer)?;
        if p.devices != devs.len() {
            return Err(format!(
                "the client spreads its QPs over {} devices; this server has {}",
                p.devices,
                devs.len()
            ));
        }
        for dev in &devs {
            dev.check(&p, run::DEPTH)?;
        }
        if p.rdma_cm && cm.is_none() {
            return Err("the client connects through the RDMA-CM; this server was not started with --rdma-cm".into());
        }
        Ok(p)
    });
    let p = match checked {
        Ok(p) => p,
        Err(e) => {
            let _ = wire.write_all(format!("error {e}\n").as_bytes(), "refusal");
            return Err(Fail::bad(format!("refused the client's run: {e}")));
        }
    };
    wire.write_all(b"ok\n", "acceptance of the run")?;
    // The server posts no RDMA operation: its striping policy is moot.
    let link = run::link(
        &devs,
        &p,
        run::Stripe::ROUND_ROBIN,
        wire,
        (p.server_buffer(), p.client_buffer()),
        2,
        match cm.as_mut() {
            Some(l) if p.rdma_cm => run::Cards::CmServer(l),
            _ => run::Cards::Wire,
        },
    )?;
    let v = server::server(link, &p)?;
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

/// Connects to the server (retrying a refused connection for 2 s, in case it is
/// still starting), proposes the run and runs it.
pub fn connect(
    devs: Vec<Device>,
    addr: &str,
    p: &Params,
    plan: &Plan,
    timeout: Duration,
) -> Result<Measured, Fail> {
    let targets: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| Fail::bad(format!("--connect {addr}: {e}")))?
        .collect();
    let stream = tcp_connect(addr, &targets, timeout)?;
    // The CM is reached at the address the TCP connection went to.
    let cm_to = stream
        .peer_addr()
        .map_err(|e| Fail::bad(format!("cannot connect to {addr}: {e}")))?;
    let mut wire = Wire::new(stream, "server", timeout)?;
    wire.write_all(p.to_line().as_bytes(), "parameters")?;
    let reply = wire.read_line("answer to the run's parameters")?;
    if let Some(e) = reply.strip_prefix("error ") {
        return Err(Fail::bad(format!("the server refused the run: {e}")));
    }
    if reply != "ok" {
        return Err(Fail::bad(format!("{addr} is not a write_bw server")));
    }
    let link = run::link(
        &devs,
        p,
        plan.stripe,
        wire,
        (p.client_buffer(), p.server_buffer()),
        1,
        if p.rdma_cm {
            run::Cards::CmClient(cm_to)
        } else {
            run::Cards::Wire
        },
    )?;
    let ours = (0..link.conn.vqp.data_qps())
        .filter_map(|i| link.conn.vqp.data_qp_num(i))
        .collect();
    let targets = inject::Targets {
        client: ours,
        client_notify: link.conn.vqp.notify_qp_num(),
        server: link.peer_qpns.clone(),
        server_notify: link.peer_notify,
    };
    let _injector = inject::start(devs[0].pd.context().verbs(), &plan.inject, targets)?;
    client::client(link, p, plan)
}

fn tcp_connect(
    addr: &str,
    targets: &[std::net::SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, Fail> {
    let start = Instant::now();
    loop {
        let mut last = None;
        for t in targets {
            match TcpStream::connect_timeout(t, timeout) {
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
