//! softverbs' UCP binding (`vqp_softverbs::ucx`) between processes: active messages
//! with their data checked, small (eager) and large (rendezvous, fetched into the
//! receiver's buffer), both ways; the same across two network namespaces joined by a
//! veth pair over UCX's TCP transport; an endpoint to an address nobody serves, and a
//! peer killed in the middle of an exchange, failing with the error callback's typed
//! error in bounded time. In one process, between two workers: a panicking handler,
//! refused arguments, deferred and scattered rendezvous payloads, the event fd, and
//! messages of an id nobody handles. And what a stranger can do to a worker through
//! UCX's TCP transport (the reason the route is for trusted hosts).
//!
//! The server (and, across namespaces, the client) is this test binary re-run as its
//! `child` test. Gated on UCP being loadable (Debian's `libucx0`): skipped with a line
//! naming it, failed under `VQP_REQUIRE_SYSTEM_PACKAGES=1`. The namespace test needs
//! root and iproute2 as well (see `netns`).

mod netns;
#[path = "procs/mod.rs"]
mod procs;
mod system;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vqp_softverbs::ucx::{self, Data, EpId, Error, Event, Ucp, Worker};

const PACKAGE: &str = "libucx0";
/// Set in a child: what it runs (`server` or `client`).
const MODE: &str = "VQP_UCXT_MODE";
/// The server's listening address (port 0), or the client's peer (with the port).
const ADDR: &str = "VQP_UCXT_ADDR";
/// A value for UCX's `TLS` setting, over the defaults.
const TLS: &str = "VQP_UCXT_TLS";

/// Message ids: check this payload (client → server), its verdict (server → client),
/// send me a payload (client → server), the payload (server → client).
const CHECK: u16 = 1;
const VERDICT: u16 = 2;
const GIVE: u16 = 3;
const GIVEN: u16 = 4;

/// How long one step may take.
const STEP: Duration = Duration::from_secs(30);

/// Whether UCP loads; otherwise skips `test` naming the package.
fn ucp_or_skip(test: &str) -> bool {
    match Ucp::get() {
        Ok(_) => true,
        Err(e) => {
            system::skip(test, PACKAGE, &e.to_string());
            false
        }
    }
}

/// The byte at `i` of payload `seed`: changes within every 256 bytes and from one
/// 2 KiB block to the next, so a misplaced block shows.
fn pattern(seed: u64, i: usize) -> u8 {
    (seed.wrapping_mul(31) as usize + i * 7 + (i >> 11)) as u8
}

fn payload(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(seed, i)).collect()
}

/// The first byte of `data` that is not `pattern(seed, _)`.
fn first_bad(seed: u64, data: &[u8]) -> Option<usize> {
    data.iter()
        .enumerate()
        .position(|(i, &b)| b != pattern(seed, i))
}

fn words(h: &[u8]) -> Vec<u64> {
    h.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn header(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn worker() -> Worker {
    let mut settings = ucx::DEFAULT_SETTINGS.to_vec();
    let tls = std::env::var(TLS).unwrap_or_default();
    if !tls.is_empty() {
        settings.retain(|(k, _)| *k != "TLS");
        settings.push(("TLS", tls.as_str()));
    }
    Worker::new(&settings).unwrap_or_else(|e| panic!("a UCP worker: {e}"))
}

/// An active message as a handler queues it for the main loop: where from, header, and
/// the eager payload or the rendezvous buffer it is being fetched into.
struct Arrived {
    from: Option<EpId>,
    header: Vec<u8>,
    /// The payload (eager), or `None` while a rendezvous fetch runs.
    data: Option<Vec<u8>>,
    /// The token of that fetch.
    fetch: u64,
}

/// Registers a handler for `id` that queues every message; rendezvous payloads are
/// fetched into a fresh buffer (completed by an `Event::Received` with the token).
fn queue_handler(w: &mut Worker, id: u16, q: &Arc<Mutex<Vec<Arrived>>>) {
    let q = Arc::clone(q);
    let mut next = (id as u64) << 48;
    w.set_handler(id, move |m| {
        let from = m.from();
        let header = m.header().to_vec();
        let len = m.len();
        next += 1;
        let data = match m.into_data() {
            Data::Eager(d) => Some(d.to_vec()),
            Data::Rendezvous(r) => {
                r.receive(vec![0u8; len], next).expect("start the fetch");
                None
            }
        };
        q.lock().unwrap().push(Arrived {
            from,
            header,
            data,
            fetch: next,
        });
    })
    .unwrap();
}

/// Moves the fetched buffers of `Event::Received` into the queued messages; other
/// events go to `other`.
fn settle(w: &mut Worker, q: &Mutex<Vec<Arrived>>, mut other: impl FnMut(&mut Worker, Event)) {
    while let Some(e) = w.next_event() {
        match e {
            Event::Received {
                token,
                buffer,
                result,
            } => {
                let n = result.unwrap_or_else(|e| panic!("a rendezvous fetch failed: {e}"));
                let mut b = buffer.expect("the buffer back");
                b.truncate(n);
                let mut q = q.lock().unwrap();
                let a = q
                    .iter_mut()
                    .find(|a| a.fetch == token)
                    .expect("its message");
                a.data = Some(b);
            }
            e => other(w, e),
        }
    }
}

/// Takes the queued messages whose data is complete.
fn ready(q: &Mutex<Vec<Arrived>>) -> Vec<Arrived> {
    let mut q = q.lock().unwrap();
    let (done, wait): (Vec<Arrived>, Vec<Arrived>) = q.drain(..).partition(|a| a.data.is_some());
    *q = wait;
    done
}

/// The server: listens, prints `@port N`, accepts everyone, answers CHECK with a
/// VERDICT and GIVE with GIVEN, until it is killed.
fn serve(addr: SocketAddr) -> ! {
    let mut w = worker();
    let l = w
        .listen(addr)
        .unwrap_or_else(|e| panic!("listen on {addr}: {e}"));
    let bound = w.listener_addr(l).unwrap();
    println!("@port {}", bound.port());
    let q = Arc::new(Mutex::new(Vec::new()));
    queue_handler(&mut w, CHECK, &q);
    queue_handler(&mut w, GIVE, &q);
    loop {
        w.wait(Duration::from_millis(100)).unwrap();
        settle(&mut w, &q, |w, e| match e {
            Event::ConnRequest(r) => {
                w.accept(r).unwrap();
            }
            Event::EndpointFailed { ep, .. } => {
                let _ = w.close(ep);
            }
            _ => {}
        });
        for a in ready(&q) {
            let h = words(&a.header);
            let Some(from) = a.from else { continue };
            match h.len() {
                // CHECK: token, seed.
                2 => {
                    let data = a.data.unwrap();
                    let bad = first_bad(h[1], &data).map_or(u64::MAX, |i| i as u64);
                    let _ = w.am_send(
                        from,
                        VERDICT,
                        &header(&[h[0], data.len() as u64, bad]),
                        Vec::new(),
                        h[0],
                    );
                }
                // GIVE: token, seed, length, 0.
                4 => {
                    let p = payload(h[1], h[2] as usize);
                    let _ = w.am_send(from, GIVEN, &header(&[h[0], h[1]]), p, h[0]);
                }
                _ => {}
            }
        }
    }
}

/// Waits (progressing) until `done` says so, or panics naming `what` after [`STEP`].
fn until(w: &mut Worker, what: &str, mut done: impl FnMut(&mut Worker) -> bool) {
    let deadline = Instant::now() + STEP;
    while !done(w) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        w.wait(Duration::from_millis(50)).unwrap();
    }
}

/// The client's half: connects to `peer`, has payloads of every size checked there,
/// and fetches payloads from there and checks them here. Returns the sizes checked.
fn exchange(peer: SocketAddr) -> Vec<usize> {
    let mut w = worker();
    let ep = w.connect(peer).unwrap();
    let q = Arc::new(Mutex::new(Vec::new()));
    queue_handler(&mut w, VERDICT, &q);
    queue_handler(&mut w, GIVEN, &q);
    let sizes = [0usize, 1, 64, 8 << 10, 64 << 10, 1 << 20, (4 << 20) + 3];
    let mut sent = HashMap::new();
    for (token, &len) in sizes.iter().enumerate() {
        let token = token as u64 + 1;
        let seed = token * 1000 + 17;
        w.am_send(
            ep,
            CHECK,
            &header(&[token, seed]),
            payload(seed, len),
            token,
        )
        .unwrap();
        sent.insert(token, len);
    }
    let mut verdicts = HashMap::new();
    let mut sends_done = 0;
    until(&mut w, "the server's verdicts", |w| {
        settle(w, &q, |_, e| match e {
            Event::Sent { result, .. } => {
                result.unwrap_or_else(|e| panic!("a send failed: {e}"));
                sends_done += 1;
            }
            Event::EndpointFailed { error, .. } => panic!("the endpoint failed: {error}"),
            _ => {}
        });
        for a in ready(&q) {
            let h = words(&a.header);
            verdicts.insert(h[0], (h[1], h[2]));
        }
        verdicts.len() == sizes.len()
    });
    assert_eq!(sends_done, sizes.len(), "one Sent per send");
    for (token, len) in &sent {
        let (got, bad) = verdicts[token];
        assert_eq!(
            got as usize, *len,
            "length of payload {token} at the server"
        );
        assert_eq!(
            bad,
            u64::MAX,
            "payload {token} ({len} bytes) differs at byte {bad}"
        );
    }
    // The other way: the server sends, this side receives (rendezvous into our buffer).
    let gives = [64usize, 1 << 20, (3 << 20) + 5];
    for (i, &len) in gives.iter().enumerate() {
        let token = 100 + i as u64;
        w.am_send(
            ep,
            GIVE,
            &header(&[token, token * 3, len as u64, 0]),
            Vec::new(),
            token,
        )
        .unwrap();
    }
    let mut got = HashMap::new();
    until(&mut w, "the server's payloads", |w| {
        settle(w, &q, |_, e| {
            if let Event::EndpointFailed { error, .. } = e {
                panic!("the endpoint failed: {error}")
            }
        });
        for a in ready(&q) {
            let h = words(&a.header);
            got.insert(h[0], (h[1], a.data.unwrap()));
        }
        got.len() == gives.len()
    });
    for (i, &len) in gives.iter().enumerate() {
        let (seed, data) = &got[&(100 + i as u64)];
        assert_eq!(data.len(), len);
        assert_eq!(
            first_bad(*seed, data),
            None,
            "payload of {len} bytes from the server"
        );
    }
    sizes.iter().chain(gives.iter()).copied().collect()
}

/// A running child: its stdout lines (after `@`), killed when dropped.
struct Child {
    proc: procs::Killed,
    lines: Receiver<String>,
}

impl Child {
    fn start(mut c: Command, mode: &str, addr: &str, tls: &str) -> Child {
        c.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(MODE, mode)
            .env(ADDR, addr)
            .env(TLS, tls)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("start {c:?}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if let Some(at) = l.find('@') {
                    if tx.send(l[at + 1..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Child {
            proc: procs::Killed(Some(child)),
            lines,
        }
    }

    /// The next line, within `limit`.
    fn line(&self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("the child said nothing: {e}"))
    }

    /// The port a server child listens on.
    fn port(&self) -> u16 {
        let l = self.line(STEP);
        l.strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a port: {l:?}"))
    }

    fn pid(&self) -> u32 {
        self.proc.0.as_ref().unwrap().id()
    }

    fn kill(&mut self) {
        if let Some(c) = self.proc.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn this_test() -> Command {
    Command::new(std::env::current_exe().unwrap())
}

#[test]
fn child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let addr: SocketAddr = std::env::var(ADDR).unwrap().parse().unwrap();
    match mode.as_str() {
        "server" => serve(addr),
        "client" => {
            let sizes = exchange(addr);
            println!("@ok {sizes:?}");
        }
        "stranger" | "stranger-unknown-id" => {
            let written = written_by_a_stranger(addr, mode == "stranger");
            println!("@written {written:?}");
        }
        m => panic!("unknown mode {m}"),
    }
}

/// The inodes of this process's sockets.
fn own_sockets() -> HashSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_str()?;
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// The ports of the IPv4 TCP sockets listening at 127.0.0.1 whose inodes are in `of`
/// (`/proc/self/net/tcp`: local address, state `0A`, inode).
fn listening_ports(of: &HashSet<u64>) -> Vec<u16> {
    let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ip, port) = f.get(1)?.split_once(':')?;
            let inode: u64 = f.get(9)?.parse().ok()?;
            (ip == "0100007F" && f.get(3) == Some(&"0A") && of.contains(&inode))
                .then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect()
}

/// UCX's TCP transport's frame header (`uct_tcp_am_hdr_t`, packed): its message id
/// and the length that follows.
fn uct_tcp_frame(id: u8, body: &[u8]) -> Vec<u8> {
    let mut f = vec![id];
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(body);
    f
}

/// A child's part of the strangers' tests below: makes a worker with the route's
/// settings on loopback, and then, as a stranger that has nothing of it (no endpoint,
/// no key, not even a UCP connection), connects to each TCP socket the worker listens
/// at and sends UCX's TCP transport the eight-byte magic number its peers open with and
/// then, with `put`, one PUT request (`uct_tcp_ep_put_req_hdr_t`: address, length,
/// sequence number) naming a buffer of this process, or else a frame of an id UCX's TCP
/// transport does not have; then progresses the worker. What the buffer holds after at
/// most 5 s, if it changed.
fn written_by_a_stranger(lo: SocketAddr, put: bool) -> Option<Vec<u8>> {
    /// `UCT_TCP_MAGIC_NUMBER`; `UCT_TCP_EP_CM_AM_ID` and `UCT_TCP_EP_PUT_REQ_AM_ID`
    /// (`UCT_AM_ID_MAX`, 32, and one past it); `UCT_TCP_CM_CONN_REQ`, an enum (four
    /// bytes): UCX 1.13.1 `src/uct/tcp/tcp.h` and `src/uct/api/uct_def.h`.
    const MAGIC: u64 = 0xCAFE_BABE_1234_5678;
    const CM: u8 = 32;
    const PUT_REQ: u8 = 33;
    const CONN_REQ: u32 = 1;
    /// Past the ids UCX's TCP transport reserves for itself (32 to 35).
    const UNKNOWN: u8 = 40;
    const SAID: &[u8; 16] = b"written by peer!";

    let before = own_sockets();
    let mut settings = ucx::ROUTE_SETTINGS.to_vec();
    settings.push(("NET_DEVICES", "lo"));
    let mut w = Worker::new(&settings).unwrap_or_else(|e| panic!("a UCP worker: {e}"));
    // Made like the route's listener, though the stranger never speaks to it.
    let _l = w.listen(lo).unwrap();
    let made: HashSet<u64> = own_sockets().difference(&before).copied().collect();
    let ports = listening_ports(&made);
    assert!(!ports.is_empty(), "the worker listens nowhere on loopback");

    // Never freed: UCX is told its address, and the child ends after this.
    let target = Box::into_raw(Box::new([0u8; 16]));
    let frame = if put {
        // A connection request (`uct_tcp_cm_conn_req_pkt_t`: the event, no flags, a
        // connection number, and an address said to be the stranger's), which makes
        // the connection one UCX answers on; then the PUT request, a frame of its own,
        // its data following it on the stream.
        let mut req = CONN_REQ.to_le_bytes().to_vec();
        req.push(0);
        req.extend_from_slice(&7u64.to_le_bytes());
        req.extend_from_slice(&(libc::AF_INET as u16).to_le_bytes());
        req.extend_from_slice(&1u16.to_be_bytes());
        req.extend_from_slice(&[192, 0, 2, 99, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut put = (target as u64).to_le_bytes().to_vec();
        put.extend_from_slice(&(SAID.len() as u64).to_le_bytes());
        put.extend_from_slice(&1u32.to_le_bytes());
        let mut f = uct_tcp_frame(CM, &req);
        f.extend(uct_tcp_frame(PUT_REQ, &put));
        f.extend_from_slice(SAID);
        f
    } else {
        uct_tcp_frame(UNKNOWN, &[])
    };

    let mut strangers: Vec<std::net::TcpStream> = ports
        .iter()
        .filter_map(|&p| std::net::TcpStream::connect((lo.ip(), p)).ok())
        .collect();
    for s in &mut strangers {
        let _ = s.write_all(&MAGIC.to_le_bytes());
    }
    let start = Instant::now();
    let mut sent = false;
    while start.elapsed() < Duration::from_secs(5) {
        let _ = w.progress();
        std::thread::sleep(Duration::from_millis(10));
        if !sent && start.elapsed() > Duration::from_millis(200) {
            // The magic number has been taken by now: the rest comes as new data, so
            // that the socket is readable again.
            for s in &mut strangers {
                let _ = s.write_all(&frame);
            }
            sent = true;
        }
        // SAFETY: `target` is a live allocation of this process, only read here;
        // whatever UCX wrote into it, it wrote within this thread's `progress` call.
        let now = unsafe { std::ptr::read_volatile(target) };
        if now != [0; 16] {
            return Some(now.to_vec());
        }
    }
    None
}

/// Why the route between machines is for hosts trusted with UCX (`ucx`' docs, "What a
/// hostile peer cannot do"): UCX's TCP transport, the one that carries it, carries out
/// a PUT request at whatever address its peer names, for any peer that connects to the
/// socket it listens at and opens with its magic number — before and outside UCP, its
/// endpoints and its keys (UCX 1.13.1 `src/uct/tcp/tcp_ep.c`,
/// `uct_tcp_ep_handle_put_req`: `memcpy((void*)put_req->addr, …)`; the same in
/// 1.22.0). A stranger on the network can write any
/// byte of a process that carries the route. This test shows it in a child, on
/// loopback; if it fails, UCX has closed the hole and those docs must change.
#[test]
fn a_stranger_writes_where_it_says_in_a_route_workers_process_through_ucx_tcp() {
    if !ucp_or_skip("a_stranger_writes_where_it_says_in_a_route_workers_process_through_ucx_tcp") {
        return;
    }
    let c = Child::start(this_test(), "stranger", "127.0.0.1:0", "");
    let l = c.line(STEP);
    assert_eq!(
        l,
        format!("written {:?}", Some(b"written by peer!".to_vec())),
        "UCX's TCP transport no longer takes a stranger's PUT request"
    );
}

/// The same exposure's other half (and UCX's answer to any frame it does not expect):
/// one frame of an id UCX's TCP transport does not have, sent by a stranger after the
/// magic number, aborts the process — Debian's UCX is built with its assertions on
/// (`ucs_assert(hdr->am_id == UCT_TCP_EP_CM_AM_ID)`, `uct_tcp_ep_progress_am_rx`).
#[test]
fn a_stranger_aborts_a_route_workers_process_with_one_frame_through_ucx_tcp() {
    if !ucp_or_skip("a_stranger_aborts_a_route_workers_process_with_one_frame_through_ucx_tcp") {
        return;
    }
    let mut c = Child::start(this_test(), "stranger-unknown-id", "127.0.0.1:0", "");
    let said = c.lines.recv_timeout(STEP);
    let child = c.proc.0.as_mut().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "the child went on ({said:?}, {status}): UCX's TCP transport no longer aborts on a frame it does not know"
    );
}

#[test]
fn loading_a_library_that_is_not_there_is_a_typed_error_naming_it() {
    let e = Ucp::load("libucp-not-installed.so.0")
        .err()
        .expect("no such library");
    assert!(
        matches!(&e, ucx::LoadError::Open { library, .. } if library == "libucp-not-installed.so.0"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("libucp-not-installed.so.0") && text.contains("libucx0"),
        "{text}"
    );
}

#[test]
fn two_processes_exchange_active_messages_small_and_large() {
    if !ucp_or_skip("two_processes_exchange_active_messages_small_and_large") {
        return;
    }
    let server = Child::start(this_test(), "server", "127.0.0.1:0", "");
    let port = server.port();
    let sizes = exchange(SocketAddr::from(([127, 0, 0, 1], port)));
    assert!(sizes.iter().any(|&s| s >= 4 << 20), "{sizes:?}");
}

/// `ip netns exec NS cat FILE`.
fn read_in(ns: &netns::Netns, i: usize, file: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(i), "cat", file])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn two_network_namespaces_exchange_over_a_veth_pair() {
    let test = "two_network_namespaces_exchange_over_a_veth_pair";
    if !ucp_or_skip(test) || !netns::available(test) {
        return;
    }
    let ns = netns::Netns::new("ucx", 2);
    ns.veth((0, "vu0", "192.0.2.1/24"), (1, "vu1", "192.0.2.2/24"), 1500);
    let exe = std::env::current_exe().unwrap();
    let server = Child::start(ns.exec(0, &exe), "server", "192.0.2.1:0", "tcp");
    let port = server.port();
    let before: u64 = read_in(&ns, 1, "/sys/class/net/vu1/statistics/tx_bytes")
        .parse()
        .unwrap();
    let client = Child::start(
        ns.exec(1, &exe),
        "client",
        &format!("192.0.2.1:{port}"),
        "tcp",
    );
    let said = client.line(Duration::from_secs(90));
    assert!(said.starts_with("ok "), "the client said {said:?}");
    let after: u64 = read_in(&ns, 1, "/sys/class/net/vu1/statistics/tx_bytes")
        .parse()
        .unwrap();
    // The client sent more than 5 MiB of payloads to the server: through the veth.
    assert!(
        after - before > 5 << 20,
        "only {} bytes left through vu1",
        after - before
    );
    drop(server);
    drop(client);
}

/// Waits for endpoint `ep` of `w` to fail and for send `token` on it to complete, and
/// checks that the failure is the peer's, within 10 s of `start`, and that the endpoint
/// refuses a further send with the same error: the failure, the send's result, and how
/// long it took.
fn failure_of(
    w: &mut Worker,
    ep: EpId,
    token: u64,
    start: Instant,
) -> (Error, Result<(), Error>, Duration) {
    let (mut failed, mut sent) = (None, None);
    until(w, "the endpoint's failure", |w| {
        while let Some(e) = w.next_event() {
            match e {
                Event::EndpointFailed { ep: e, error } if e == ep => failed = Some(error),
                Event::Sent {
                    token: t, result, ..
                } if t == token => sent = Some(result),
                _ => {}
            }
        }
        failed.is_some() && sent.is_some()
    });
    let took = start.elapsed();
    let failed = failed.unwrap();
    assert!(
        matches!(failed, Error::EndpointFailed(s) if s.is_peer_failure()),
        "{failed:?}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(matches!(
        w.am_send(ep, CHECK, &[], Vec::new(), token + 1),
        Err(Error::EndpointFailed(_))
    ));
    (failed, sent.unwrap(), took)
}

#[test]
fn an_endpoint_to_an_address_nobody_serves_fails_in_bounded_time() {
    if !ucp_or_skip("an_endpoint_to_an_address_nobody_serves_fails_in_bounded_time") {
        return;
    }
    let mut w = worker();
    let port = procs::free_port();
    let start = Instant::now();
    let ep = w.connect(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    w.am_send(ep, CHECK, &header(&[1, 2]), payload(2, 100), 7)
        .unwrap();
    let (failed, sent, took) = failure_of(&mut w, ep, 7, start);
    assert!(sent.is_err(), "a send to nobody completed");
    // The endpoint keeps its error, and closes.
    assert_eq!(w.endpoint_error(ep).unwrap(), Some(failed));
    w.close(ep).unwrap();
    assert_eq!(w.close(ep), Err(Error::NoSuchObject));
    eprintln!("an endpoint to nobody failed after {took:?}");
}

#[test]
fn a_peer_killed_mid_exchange_fails_the_endpoint_in_bounded_time() {
    if !ucp_or_skip("a_peer_killed_mid_exchange_fails_the_endpoint_in_bounded_time") {
        return;
    }
    let mut server = Child::start(this_test(), "server", "127.0.0.1:0", "");
    let port = server.port();
    let mut w = worker();
    let ep = w.connect(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    let q = Arc::new(Mutex::new(Vec::new()));
    queue_handler(&mut w, VERDICT, &q);
    // One exchange: the peer is up.
    w.am_send(ep, CHECK, &header(&[1, 5]), payload(5, 4096), 1)
        .unwrap();
    until(&mut w, "the first verdict", |w| {
        settle(w, &q, |_, _| {});
        !ready(&q).is_empty()
    });
    // A large send in flight, then the peer dies.
    w.am_send(ep, CHECK, &header(&[2, 6]), payload(6, 64 << 20), 2)
        .unwrap();
    let _ = w.progress();
    let pid = server.pid();
    server.kill();
    let (failed, sent, took) = failure_of(&mut w, ep, 2, Instant::now());
    eprintln!(
        "killed peer {pid}: endpoint failed after {took:?} ({failed}); the send in flight: {sent:?}"
    );
}

/// Two workers of this process, `b` listening on loopback and `a` connected to it; the
/// endpoint of `a`, and `b`'s accepted one.
fn pair() -> (Worker, Worker, EpId, EpId) {
    let mut b = worker();
    let l = b.listen(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = b.listener_addr(l).unwrap();
    assert_ne!(addr.port(), 0, "the bound port is reported");
    let mut a = worker();
    let ea = a.connect(addr).unwrap();
    let deadline = Instant::now() + STEP;
    let eb = loop {
        assert!(Instant::now() < deadline, "no connection request");
        let _ = a.progress();
        b.wait(Duration::from_millis(10)).unwrap();
        if let Some(Event::ConnRequest(r)) = b.next_event() {
            assert_eq!(r.peer.map(|p| p.ip()), Some([127, 0, 0, 1].into()));
            break b.accept(r).unwrap();
        }
    };
    (a, b, ea, eb)
}

/// A rendezvous fetch that finished: token, buffer, result.
type Fetched = (u64, Option<Vec<u8>>, Result<usize, Error>);

/// Two workers of this process driven together until a test's condition holds: each
/// turn progresses both and keeps `a`'s send completions and `b`'s finished fetches, by
/// token, in the order they came.
struct Turns {
    /// A turn after this panics.
    deadline: Instant,
    /// `a`'s `Event::Sent`: token and result.
    sent: Vec<(u64, Result<(), Error>)>,
    /// `b`'s `Event::Received`.
    received: Vec<Fetched>,
}

impl Turns {
    /// No turn yet; the deadline [`STEP`] from now.
    fn new() -> Turns {
        Turns {
            deadline: Instant::now() + STEP,
            sent: Vec::new(),
            received: Vec::new(),
        }
    }

    /// One turn, after checking the deadline (a panic naming `what` and the sends
    /// completed so far): [`Turns::pump`].
    fn turn(&mut self, what: &str, a: &mut Worker, b: Option<&mut Worker>) -> Result<usize, Error> {
        assert!(
            Instant::now() < self.deadline,
            "timed out waiting for {what} (sent {:?}, received {:?})",
            self.sent,
            self.received
                .iter()
                .map(|r| (r.0, &r.2))
                .collect::<Vec<_>>()
        );
        self.pump(a, b)
    }

    /// Progresses `a` and `b` (when there is one) and takes their events: `b`'s
    /// progress result (0 without `b`).
    fn pump(&mut self, a: &mut Worker, b: Option<&mut Worker>) -> Result<usize, Error> {
        let _ = a.progress();
        let got = b.map_or(Ok(0), |b| {
            let got = b.progress();
            while let Some(e) = b.next_event() {
                if let Event::Received {
                    token,
                    buffer,
                    result,
                } = e
                {
                    self.received.push((token, buffer, result));
                }
            }
            got
        });
        while let Some(e) = a.next_event() {
            if let Event::Sent { token, result, .. } = e {
                self.sent.push((token, result));
            }
        }
        got
    }

    /// The result of `a`'s send `token`, once it completed.
    fn sent(&self, token: u64) -> Option<&Result<(), Error>> {
        self.sent.iter().find(|s| s.0 == token).map(|s| &s.1)
    }

    /// `b`'s fetch `token`, once it finished.
    fn received(&self, token: u64) -> Option<&Fetched> {
        self.received.iter().find(|r| r.0 == token)
    }
}

#[test]
fn a_panicking_handler_is_reported_and_the_worker_goes_on() {
    if !ucp_or_skip("a_panicking_handler_is_reported_and_the_worker_goes_on") {
        return;
    }
    let (mut a, mut b, ea, _) = pair();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    b.set_handler(CHECK, move |m| {
        if m.header() == b"boom" {
            panic!("a handler's bug");
        }
        g.lock().unwrap().push(m.header().to_vec());
    })
    .unwrap();
    a.am_send(ea, CHECK, b"boom", Vec::new(), 1).unwrap();
    a.am_send(ea, CHECK, b"fine", vec![1, 2, 3], 2).unwrap();
    let mut t = Turns::new();
    let mut panicked = false;
    while got.lock().unwrap().is_empty() {
        match t.turn("the second message", &mut a, Some(&mut b)) {
            Err(Error::HandlerPanicked) => panicked = true,
            r => {
                r.unwrap();
            }
        }
    }
    assert!(panicked, "the panic was not reported");
    assert_eq!(*got.lock().unwrap(), vec![b"fine".to_vec()]);
}

#[test]
fn bad_arguments_are_refused_with_typed_errors() {
    if !ucp_or_skip("bad_arguments_are_refused_with_typed_errors") {
        return;
    }
    let (mut a, mut b, ea, eb) = pair();
    assert!(matches!(
        a.am_send(ea, ucx::MAX_AM_ID, &[], Vec::new(), 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        a.am_send(ea, CHECK, &vec![0u8; ucx::MAX_HEADER + 1], Vec::new(), 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        b.set_handler(ucx::MAX_AM_ID, |_| {}),
        Err(Error::Invalid(_))
    ));
    // A rendezvous payload offered a buffer too short for it is refused, not written.
    let refused = Arc::new(Mutex::new(None));
    let r = Arc::clone(&refused);
    b.set_handler(CHECK, move |m| {
        if let Data::Rendezvous(rndv) = m.into_data() {
            *r.lock().unwrap() = Some(rndv.receive(vec![0u8; 16], 9));
        }
    })
    .unwrap();
    a.am_send(ea, CHECK, &[], payload(1, 8 << 20), 3).unwrap();
    let mut t = Turns::new();
    while refused.lock().unwrap().is_none() || t.sent(3).is_none() {
        let _ = t.turn("the rendezvous message and its Sent", &mut a, Some(&mut b));
    }
    assert!(matches!(
        refused.lock().unwrap().take(),
        Some(Err(Error::Invalid(_)))
    ));
    // The payload not fetched is dropped; the sender's send completes.
    assert_eq!(t.sent(3), Some(&Ok(())));
    // Closed ids name nothing; the other side's endpoint fails or closes cleanly.
    a.close(ea).unwrap();
    assert_eq!(a.close(ea), Err(Error::NoSuchObject));
    assert!(matches!(
        a.am_send(ea, CHECK, &[], Vec::new(), 4),
        Err(Error::NoSuchObject)
    ));
    b.close(eb).unwrap();
}

#[test]
fn a_deferred_rendezvous_payload_is_fetched_after_its_handler_in_any_order() {
    if !ucp_or_skip("a_deferred_rendezvous_payload_is_fetched_after_its_handler_in_any_order") {
        return;
    }
    let (mut a, mut b, ea, _) = pair();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = Arc::clone(&held);
    b.set_handler(CHECK, move |m| {
        let seed = words(m.header())[0];
        match m.into_data() {
            Data::Rendezvous(r) => h.lock().unwrap().push((seed, r.defer())),
            Data::Eager(_) => panic!("a payload this large arrives by rendezvous"),
        }
    })
    .unwrap();
    let sizes = [(11u64, 2 << 20), (12, (3 << 20) + 1), (13, 1 << 20)];
    for (seed, len) in sizes {
        a.am_send(ea, CHECK, &header(&[seed]), payload(seed, len), seed)
            .unwrap();
    }
    let mut t = Turns::new();
    while held.lock().unwrap().len() < sizes.len() {
        let _ = t.turn("the messages", &mut a, Some(&mut b));
    }
    // Held at the sender: no send completes while its payload waits.
    let settle_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle_until {
        let _ = t.pump(&mut a, Some(&mut b));
    }
    assert!(
        t.sent.is_empty(),
        "sends completed before their payloads were taken: {:?}",
        t.sent
    );
    // Fetch the last first, release the middle one, and let the worker's drop release
    // none (all are handed back here).
    let mut held: Vec<(u64, ucx::Deferred)> = held.lock().unwrap().drain(..).collect();
    held.sort_by_key(|(seed, _)| std::cmp::Reverse(*seed));
    for (seed, d) in held {
        let len = d.len();
        if seed == 12 {
            b.release(d).unwrap();
        } else {
            b.receive_deferred(d, vec![0u8; len], seed).unwrap();
        }
    }
    t.deadline = Instant::now() + STEP;
    while t.received.len() < 2 || t.sent.len() < 3 {
        let _ = t.turn("two fetches and three sends", &mut a, Some(&mut b));
    }
    for (token, buffer, result) in &t.received {
        assert!(
            result.is_ok() && buffer.is_some(),
            "fetch {token}: {result:?}"
        );
    }
    for (seed, len) in [sizes[0], sizes[2]] {
        let (_, data, n) = t.received(seed).expect("its fetch");
        assert_eq!(*n, Ok(len));
        let data = data.as_ref().unwrap();
        assert_eq!(first_bad(seed, &data[..len]), None, "payload {seed}");
    }
    assert!(t.sent.iter().all(|(_, r)| r.is_ok()), "{:?}", t.sent);
}

#[test]
fn a_deferred_payload_left_held_is_released_with_its_worker() {
    if !ucp_or_skip("a_deferred_payload_left_held_is_released_with_its_worker") {
        return;
    }
    let (mut a, mut b, ea, _) = pair();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = Arc::clone(&held);
    b.set_handler(CHECK, move |m| {
        if let Data::Rendezvous(r) = m.into_data() {
            h.lock().unwrap().push(r.defer());
        }
    })
    .unwrap();
    a.am_send(ea, CHECK, &[], payload(1, 4 << 20), 1).unwrap();
    let mut t = Turns::new();
    while held.lock().unwrap().is_empty() {
        let _ = t.turn("the message", &mut a, Some(&mut b));
    }
    // Handed to a worker that did not make it: refused.
    let d = held.lock().unwrap().pop().unwrap();
    assert_eq!(
        a.receive_deferred(d, vec![0u8; 4 << 20], 1),
        Err(Error::NoSuchObject)
    );
    // `b` still holds the descriptor and releases it when dropped.
    drop(b);
    t.deadline = Instant::now() + STEP;
    while t.sent(1).is_none() {
        let _ = t.turn("the send", &mut a, None);
    }
    eprintln!(
        "the send whose payload was held by a dropped worker: {:?}",
        t.sent(1)
    );
}

#[test]
fn the_event_fd_wakes_a_sleeping_worker_when_a_message_arrives() {
    if !ucp_or_skip("the_event_fd_wakes_a_sleeping_worker_when_a_message_arrives") {
        return;
    }
    let (mut a, mut b, ea, _) = pair();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    b.set_handler(CHECK, move |m| g.lock().unwrap().push(m.header().to_vec()))
        .unwrap();
    // Nothing pending: arm (progressing while UCP says events are waiting).
    let deadline = Instant::now() + STEP;
    while !b.arm().unwrap() {
        assert!(Instant::now() < deadline, "the worker never armed");
        while b.progress().unwrap() > 0 {}
    }
    let mut pfd = libc::pollfd {
        fd: b.event_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout only looks.
    assert_eq!(
        unsafe { libc::poll(&mut pfd, 1, 0) },
        0,
        "readable before anything was sent"
    );
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        a.am_send(ea, CHECK, b"wake", vec![7; 100], 1).unwrap();
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            let _ = a.progress();
        }
        a
    });
    let start = Instant::now();
    // SAFETY: one valid pollfd; sleeps at most 10 s.
    let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
    let woke = start.elapsed();
    assert_eq!(n, 1, "the event fd never became readable");
    assert!(woke < Duration::from_secs(3), "woke after {woke:?}");
    let deadline = Instant::now() + STEP;
    while got.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the message never reached its handler"
        );
        b.progress().unwrap();
    }
    assert_eq!(*got.lock().unwrap(), vec![b"wake".to_vec()]);
    drop(sender.join().unwrap());
    eprintln!("the event fd woke the worker {woke:?} after it went to sleep");
}

#[test]
fn a_payload_gathered_from_segments_is_scattered_into_segments() {
    if !ucp_or_skip("a_payload_gathered_from_segments_is_scattered_into_segments") {
        return;
    }
    let (mut a, mut b, ea, _) = pair();
    // The receiver scatters each payload into four buffers of unequal sizes, as a
    // receive WQE's SGE list.
    let len = (3 << 20) + 123;
    let cuts = [1000usize, 1 << 20, 77, len - 1000 - (1 << 20) - 77 + 9];
    let mut bufs: Vec<Vec<u8>> = cuts.iter().map(|&c| vec![0u8; c]).collect();
    let segs: Vec<(usize, usize)> = bufs
        .iter_mut()
        .map(|b| (b.as_mut_ptr() as usize, b.len()))
        .collect();
    let segs2 = segs.clone();
    b.set_handler(CHECK, move |m| {
        let Data::Rendezvous(r) = m.into_data() else {
            panic!("a payload this large arrives by rendezvous")
        };
        let short: Vec<(*mut u8, usize)> =
            segs2[..2].iter().map(|&(p, l)| (p as *mut u8, l)).collect();
        // SAFETY: not started: the list is refused for being short.
        let refused = unsafe { r.receive_iov_raw(&short, 1) };
        assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
        // The handle is consumed: the payload is dropped and the sender's send completes.
    })
    .unwrap();
    // The sender gathers from three buffers.
    let whole = payload(21, len);
    let parts = [&whole[..5], &whole[5..(2 << 20)], &whole[(2 << 20)..]];
    let gather: Vec<(*const u8, usize)> = parts.iter().map(|p| (p.as_ptr(), p.len())).collect();
    // SAFETY: `whole` outlives the send and is not written until its Sent is taken.
    unsafe { a.am_send_raw(ea, CHECK, &[], &gather, 1) }.unwrap();
    let mut t = Turns::new();
    while t.sent(1).is_none() {
        let _ = t.turn("the refused payload's send", &mut a, Some(&mut b));
    }
    // Now with the full list.
    b.set_handler(CHECK, move |m| {
        let Data::Rendezvous(r) = m.into_data() else {
            panic!("a payload this large arrives by rendezvous")
        };
        let all: Vec<(*mut u8, usize)> = segs.iter().map(|&(p, l)| (p as *mut u8, l)).collect();
        // SAFETY: the buffers live until the Received event is taken below, and
        // nothing else touches them meanwhile.
        unsafe { r.receive_iov_raw(&all, 2) }.unwrap();
    })
    .unwrap();
    // SAFETY: as above.
    unsafe { a.am_send_raw(ea, CHECK, &[], &gather, 2) }.unwrap();
    t.deadline = Instant::now() + STEP;
    while t.sent(2).is_none() || t.received(2).is_none() {
        let _ = t.turn("the scattered payload", &mut a, Some(&mut b));
    }
    assert_eq!(t.sent(2), Some(&Ok(())));
    assert_eq!(t.received(2).map(|r| &r.2), Some(&Ok(len)));
    let joined: Vec<u8> = bufs.concat();
    assert_eq!(first_bad(21, &joined[..len]), None, "the scattered payload");
    assert!(
        joined[len..].iter().all(|&b| b == 0),
        "written past the payload"
    );
    drop(whole);
}

#[test]
fn a_message_for_an_id_without_a_handler_is_dropped_and_the_worker_goes_on() {
    if !ucp_or_skip("a_message_for_an_id_without_a_handler_is_dropped_and_the_worker_goes_on") {
        return;
    }
    let (mut a, mut b, ea, _) = pair();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    b.set_handler(CHECK, move |m| g.lock().unwrap().push(m.len()))
        .unwrap();
    // Ids nobody listens for, eager and rendezvous, then one that is handled.
    a.am_send(ea, 9, b"x", vec![1; 10], 1).unwrap();
    a.am_send(ea, 10, b"y", payload(3, 2 << 20), 2).unwrap();
    a.am_send(ea, CHECK, b"z", vec![2; 20], 3).unwrap();
    let mut t = Turns::new();
    while got.lock().unwrap().is_empty() || t.sent.len() < 3 {
        t.turn("the handled message and three sends", &mut a, Some(&mut b))
            .unwrap();
    }
    assert_eq!(*got.lock().unwrap(), vec![20]);
    let sent: Vec<(u64, bool)> = t.sent.iter().map(|(k, r)| (*k, r.is_ok())).collect();
    eprintln!("sends to ids without a handler: {sent:?}");
}
