//! This process on the network (issue 29; `crate::ucx`'s design): its UCX worker, the
//! lookups it answers and asks, the endpoints it holds to other machines' processes,
//! and the messages that arrived for the engine.
//!
//! # Threads and locks
//! The worker and everything beside it live in one [`Machine`] behind one mutex (the
//! *worker lock*). UCX's callbacks run inside `Worker::progress`, with the worker lock
//! held, so its active-message handlers only copy what came into a queue of their own
//! (a leaf lock) and return. The service thread takes the worker lock, progresses,
//! accepts connections, closes failed endpoints, turns finished lookups into endpoints
//! and answers lookups; then, with the worker lock released, the engine's UCX route
//! takes the queued messages ([`super::Transport::serve_machine`]'s value) and runs
//! them (responder, requester completions) under QP locks, and hands the responses to
//! [`super::Transport::machine_send`]. A requester sends with its QP locked and takes
//! the worker lock inside it ([`super::Transport::machine_reach`],
//! [`super::Transport::machine_send`]): the order is requester QP → worker lock → the
//! queues, and nobody takes a QP lock while holding the worker lock.
//!
//! A lookup never runs under a lock: it runs on a thread of its own (its steps bounded
//! by [`LOOKUP_LIMIT`]), and its answer waits in a queue until the service thread's
//! next turn connects an endpoint. One endpoint serves each pair of processes (by the
//! peer's address and UCX port), shared by all their QPs and used both ways: the
//! process that connected says its UCX port in its first message ([`HELLO`]), and the
//! one that accepted sends its own requests on that endpoint instead of connecting
//! back. It is forgotten when it fails, and the next request looks up again.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Spare;
use crate::os::{lock, Wake};
use crate::ucx::{self, lookup, Data, EpId, Event, Worker};

/// The active message id of a request (`ucx::wire::Request` header).
pub(crate) const REQUEST: u16 = 1;
/// The active message id of a response (`ucx::wire::Response` header).
pub(crate) const RESPONSE: u16 = 2;
/// The active message id of a request with a response riding along: the header is a
/// response's (which carries no payload) followed by a request's, the payload the
/// request's. An answer held back by a polling thread ([`Machine::hold`]) goes so
/// with the next request on the same endpoint. Two processes that send each other
/// requests share one endpoint ([`HELLO`]) unless both connected at once; so the
/// answers to a requester QP go on the endpoint this process sends its own requests
/// to that QP on, when it has one ([`Machine::ready`]), not on the one the requests
/// came on, where no request of ours might ever take them along (docs/benchmarks.md,
/// "Between machines").
pub(crate) const ANSWERED: u16 = 3;
/// The active message id of the first message on an endpoint this process connected:
/// its header is the port this process listens at for UCX (2 bytes, little-endian).
/// The peer that accepted the connection then sends its own requests to this process
/// on it rather than connecting back ([`Machine::hello`]): one TCP connection then
/// carries both directions, and each side's TCP acknowledgements ride on its own
/// messages (two connections, one per direction, each made the kernel send an
/// acknowledgement of its own for every other message: 1.5 packets per message).
pub(crate) const HELLO: u16 = 4;
/// The answers held back at most (past it, they are sent as they are).
const MAX_HELD: usize = 64;
/// How long a polling thread's turns leave held answers for a request to take along
/// before they send them as they are (the machine thread's turn sends them at once).
/// A program polls more than one CQ between an answer and its reply (perftest's
/// `ib_send_lat` polls its send CQ, then its receive CQ); sent at the next turn, the
/// answer went alone more often than not. A tiny fraction of any QP's ACK timeout
/// (5 ms at least).
const HOLD_FOR: Duration = Duration::from_micros(50);

/// How long a lookup connection may take to ask and be answered before it is closed
/// (it holds one of a listener's few slots meanwhile, never the service thread); and
/// each step of a lookup this process asks.
pub(super) const LOOKUP_LIMIT: Duration = Duration::from_millis(200);

/// An endpoint of one of this process's workers (one worker per bound interface).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Ep {
    worker: usize,
    ep: EpId,
}

/// A message from another machine, as the handler queued it.
pub(crate) struct Incoming {
    /// [`REQUEST`], [`RESPONSE`] or [`ANSWERED`].
    pub(crate) id: u16,
    pub(crate) header: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    /// The endpoint to answer on.
    pub(crate) from: Option<Ep>,
}

/// What the handlers queued, and the payload bytes it holds.
#[derive(Default)]
struct Inbox {
    messages: VecDeque<Incoming>,
    bytes: usize,
}

/// The most the handlers queue between two turns: past either bound a message is
/// dropped and counted, as a NIC drops packets its receive buffers cannot take; the
/// requester's timer sends it again. However fast a peer sends, what waits for the
/// engine stays bounded (and far above what the requesters' windows put in flight).
const MAX_QUEUED_MESSAGES: usize = 1 << 16;
const MAX_QUEUED_BYTES: usize = 256 << 20;

impl Inbox {
    /// Whether a message of `len` bytes (header and payload) may be queued.
    fn has_room(&self, len: usize) -> bool {
        self.messages.len() < MAX_QUEUED_MESSAGES && self.bytes + len <= MAX_QUEUED_BYTES
    }

    /// Queues `m`, or refuses it (false) past the bounds.
    fn push(&mut self, m: Incoming) -> bool {
        let len = m.payload.len() + m.header.len();
        if !self.has_room(len) {
            return false;
        }
        self.bytes += len;
        self.messages.push_back(m);
        true
    }

    /// Takes everything queued.
    fn take(&mut self) -> Vec<Incoming> {
        self.bytes = 0;
        self.messages.drain(..).collect()
    }
}

/// Whether the process serving a (GID, QPN) can be sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Over this endpoint.
    Ready(Ep),
    /// Not yet: a lookup (or the worker) is on its way.
    Pending,
    /// Nobody answered, nobody serves it, or this process cannot reach other machines.
    Unreachable,
}

/// What is known of a (GID, QPN).
enum Peer {
    /// A lookup is running.
    Looking,
    /// Served through this endpoint.
    Ready(Ep),
    /// The last lookup or connection failed (told once to a requester, then forgotten).
    Failed,
}

type Key = ([u8; 16], u32);

/// The lookups' answers: the UCX address of the process serving a key, or none.
type Found = Arc<Mutex<Vec<(Key, Option<SocketAddr>)>>>;

/// This process on the network: see the module's docs.
pub(super) struct Machine {
    /// One worker per bound interface, its UCP transports kept to that interface
    /// (`NET_DEVICES`): an endpoint's traffic then crosses the link whose address it
    /// was connected to, and only it (one worker for all would spread an endpoint over
    /// every interface, and a link going down would stall the other device's QPs).
    workers: Vec<Bound>,
    lookups: Vec<lookup::Listener>,
    lookup_port: u16,
    /// What the handlers queued.
    inbox: Arc<Mutex<Inbox>>,
    /// The lookups' answers: the UCX address of the serving process, or none.
    found: Found,
    peers: HashMap<Key, Peer>,
    /// The endpoint to each process (by its UCX address): one this process connected,
    /// or one it accepted from a process that said its address ([`HELLO`]).
    endpoints: HashMap<SocketAddr, Ep>,
    /// The peer address of each endpoint accepted, until its [`HELLO`] comes.
    accepted: HashMap<Ep, IpAddr>,
    /// The port this process listens at for UCX (0: none), which its [`HELLO`]s say.
    port: u16,
    /// Messages refused by the handlers (an unexpected rendezvous payload, an id the
    /// protocol does not use).
    dropped: Arc<AtomicU64>,
    /// Wakes the machine thread's sleep: rung after a send UCP did not finish at once
    /// (it needs progress) and by a finished lookup.
    wake: Arc<Wake>,
    /// Answers (a response's header, no payload) held back for the next request to
    /// the same endpoint ([`ANSWERED`]); sent as they are at the machine thread's next
    /// turn, or at a polling thread's once [`HOLD_FOR`] passed.
    held: Vec<(Ep, Vec<u8>)>,
    /// When the oldest held answer was held.
    held_since: Option<Instant>,
    /// Payload buffers: the handlers copy into them, sent ones come back to them.
    spare: Arc<Spare>,
    /// Turns taken by polling threads, which look at the lookup sockets at every
    /// [`LOOKUP_TURNS`]th.
    polled_turns: u32,
    /// Where a listener could not be made yet, and when to try again.
    unbound: Vec<Unbound>,
    bind_again_at: Instant,
}

/// An IPv6 address of a bound interface not usable yet: an address is tentative for
/// a second or two after its link comes up (duplicate address detection), and cannot
/// be bound meanwhile. Tried again every [`BIND_AGAIN`], each time first with a
/// socket of our own ([`usable`]), so that UCX does not log a failed listen.
enum Unbound {
    /// Worker `worker`'s UCX listener at this (global) address.
    Ucx { worker: usize, at: SocketAddr },
    /// A lookup listener at `at`, its answers naming `names`.
    Lookup { at: SocketAddr, names: IpAddr },
}

/// A polling thread's turns between two looks at the lookup sockets: each look costs a
/// `poll` system call per socket, a large part of a turn that finds nothing, while a
/// lookup can wait the few hundred microseconds these turns take.
const LOOKUP_TURNS: u32 = 64;

/// Endpoints accepted and not yet introduced by a [`HELLO`] that are remembered: one
/// past it is used for answers only, as before any [`HELLO`].
const MAX_ACCEPTED: usize = 4096;

/// How often the listeners not made yet are tried again.
const BIND_AGAIN: Duration = Duration::from_millis(200);

/// An address of a bound interface where this process serves other machines: the IP
/// address of one of its port's RoCE v2 GIDs, and the interface (its index scopes a
/// link-local IPv6 address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MachineAddr {
    pub ip: IpAddr,
    pub ifindex: u32,
    pub ifname: String,
}

/// A worker, the addresses of the interface it is kept to, and that interface's index.
struct Bound {
    worker: Worker,
    addrs: Vec<IpAddr>,
    ifindex: u32,
}

/// Whether `ip` is a link-local IPv6 address (`fe80::/10`), which needs its interface.
fn link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80)
}

/// `ip` at `port`, scoped to interface `ifindex` when it is link-local.
fn at(ip: IpAddr, ifindex: u32, port: u16) -> SocketAddr {
    match ip {
        IpAddr::V6(a) if link_local(&ip) => {
            SocketAddr::V6(std::net::SocketAddrV6::new(a, port, 0, ifindex))
        }
        _ => SocketAddr::new(ip, port),
    }
}

/// Whether a socket can be bound at `at`'s address now (not so while an IPv6 address
/// is tentative).
fn usable(at: SocketAddr) -> bool {
    let mut any_port = at;
    any_port.set_port(0);
    std::net::TcpListener::bind(any_port).is_ok()
}

/// A TCP port free now on `at`'s family (the kernel's pick for port 0 on the
/// unspecified address); 0 when none can be had.
fn free_port(at: SocketAddr) -> u16 {
    let any: SocketAddr = match at {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    std::net::TcpListener::bind(any)
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

/// Where UCX listens for the interface of `addrs`: its first IPv4 address, else its
/// first IPv6 address that is not link-local (UCX cannot carry traffic by a
/// link-local one: see [`lookup`]'s docs).
fn ucx_address(addrs: &[&MachineAddr]) -> Option<IpAddr> {
    let v4 = addrs.iter().find(|b| b.ip.is_ipv4());
    v4.or_else(|| addrs.iter().find(|b| !link_local(&b.ip)))
        .map(|b| b.ip)
}

/// Whether a lookup at `asked` may be answered with UCX address `answer`: the address
/// asked, or, asked at a link-local address, one the kernel reaches from the same
/// interface (one of `local`, its addresses); never a link-local one. Anything else
/// would let the answering peer point this process's connections elsewhere.
fn acceptable(asked: IpAddr, answer: SocketAddr, local: &[IpAddr]) -> bool {
    if link_local(&answer.ip()) {
        return false;
    }
    answer.ip() == asked
        || (link_local(&asked) && source_for(answer).is_some_and(|src| local.contains(&src)))
}

/// The local address the kernel would send from to reach `to` (a connected UDP
/// socket's own address: no packet is sent), which names the interface of the route.
fn source_for(to: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match to {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    let mut to = to;
    to.set_port(9);
    s.connect(to).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// How many ports [`listen_everywhere`] tries.
const LISTEN_TRIES: usize = 8;

/// Makes every worker listen at one port (the one the lookups answer), on its own
/// interface's addresses but the link-local ones (see [`ucx_address`]): the port, and
/// the addresses not usable yet. The kernel picks the port at the first address; when
/// another address has it taken (a connection of this namespace there, one in
/// TIME_WAIT say, which UCX's listener, made without `SO_REUSEADDR`, cannot share),
/// the listeners made are closed and the workers try again from that address, where
/// the kernel then picks a port free there, [`LISTEN_TRIES`] times at most; then they
/// keep the listeners they could make.
fn listen_everywhere(workers: &mut [Bound]) -> (u16, Vec<Unbound>) {
    let order: Vec<(usize, IpAddr)> = workers
        .iter()
        .enumerate()
        .flat_map(|(index, b)| b.addrs.iter().map(move |&ip| (index, ip)))
        .filter(|(_, ip)| !link_local(ip))
        .collect();
    let workers = std::cell::RefCell::new(workers);
    let listen = |index: usize, at: SocketAddr| {
        let mut ws = workers.borrow_mut();
        let w = &mut ws[index].worker;
        let l = w.listen(at)?;
        match w.listener_addr(l) {
            Ok(a) => Ok((l, a.port())),
            Err(e) => {
                let _ = w.close_listener(l);
                Err(e)
            }
        }
    };
    let close = |index: usize, l| {
        let _ = workers.borrow_mut()[index].worker.close_listener(l);
    };
    listen_at_one_port(order, listen, close)
}

/// [`listen_everywhere`]'s steps, over `listen` (a listener at an address and the port
/// it got) and `close`: listens at each of `order`'s addresses in turn.
fn listen_at_one_port<L>(
    mut order: Vec<(usize, IpAddr)>,
    mut listen: impl FnMut(usize, SocketAddr) -> Result<(L, u16), ucx::Error>,
    mut close: impl FnMut(usize, L),
) -> (u16, Vec<Unbound>) {
    let mut attempt = 1;
    loop {
        let mut port = 0u16;
        let mut made = Vec::new();
        let mut unbound = Vec::new();
        let mut taken = None;
        for (at_order, &(index, ip)) in order.iter().enumerate() {
            let at = SocketAddr::new(ip, port);
            if ip.is_ipv6() && !usable(at) {
                // Tentative (see `Unbound`): listened at later, at the port the others
                // have (one free now if none has one yet).
                if port == 0 {
                    port = free_port(at);
                }
                unbound.push(Unbound::Ucx {
                    worker: index,
                    at: SocketAddr::new(ip, port),
                });
                continue;
            }
            match listen(index, at) {
                Ok((l, got)) => {
                    made.push((index, l));
                    port = got;
                }
                Err(ucx::Error::Call { status, .. })
                    if status.is_busy() && port != 0 && attempt < LISTEN_TRIES =>
                {
                    taken = Some(at_order);
                    break;
                }
                Err(e) => eprintln!("vqp-softverbs: cannot listen for UCX at {at}: {e}"),
            }
        }
        let Some(at_order) = taken else {
            return (port, unbound);
        };
        for (index, l) in made {
            close(index, l);
        }
        order.rotate_left(at_order);
        attempt += 1;
    }
}

/// The IP address of a RoCE v2 GID: IPv4 for an IPv4-mapped one (`::ffff:a.b.c.d`),
/// else IPv6.
fn ip_of(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

impl Machine {
    /// Makes the worker, listening at one port on each of `addrs`, and the lookup
    /// sockets at `lookup_port` of each. The port listened at is returned beside it.
    pub(super) fn new(
        bound: &[MachineAddr],
        lookup_port: u16,
        spare: Arc<Spare>,
    ) -> Result<(Machine, u16), ucx::Error> {
        let wake = Arc::new(Wake::new().map_err(|_| ucx::Error::Invalid("no eventfd"))?);
        let inbox: Arc<Mutex<Inbox>> = Arc::default();
        let dropped = Arc::new(AtomicU64::new(0));
        let mut names: Vec<&str> = Vec::new();
        for b in bound {
            if !names.contains(&b.ifname.as_str()) {
                names.push(&b.ifname);
            }
        }
        let mut workers = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let mut settings = ucx::ROUTE_SETTINGS.to_vec();
            settings.push(("NET_DEVICES", name));
            let mut worker = Worker::new(&settings)?;
            for id in [REQUEST, RESPONSE, ANSWERED, HELLO] {
                let q = inbox.clone();
                let d = dropped.clone();
                let spare = spare.clone();
                worker.set_handler(id, move |m| {
                    let header = m.header().to_vec();
                    let from = m.from().map(|ep| Ep { worker: index, ep });
                    match m.into_data() {
                        Data::Eager(p) => {
                            let mut q = lock(&q);
                            if !q.has_room(p.len() + header.len()) {
                                d.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            let mut payload = spare.take(p.len());
                            payload.copy_from_slice(p);
                            q.push(Incoming {
                                id,
                                header,
                                payload,
                                from,
                            });
                        }
                        // Every message is eager (`ROUTE_SETTINGS`): a rendezvous one comes
                        // from another protocol, and is discarded (dropping it releases
                        // it).
                        Data::Rendezvous(_) => {
                            d.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })?;
            }
            // Every other id below MAX_AM_ID: dropped and counted, silently (UCP writes
            // a line on stderr for each message of an id nobody handles, which a peer
            // could use to fill ours).
            for id in
                (0..ucx::MAX_AM_ID).filter(|id| ![REQUEST, RESPONSE, ANSWERED, HELLO].contains(id))
            {
                let d = dropped.clone();
                worker.set_handler(id, move |_| {
                    d.fetch_add(1, Ordering::Relaxed);
                })?;
            }
            let mine: Vec<&MachineAddr> = bound.iter().filter(|b| b.ifname == *name).collect();
            let ifindex = mine.first().map_or(0, |b| b.ifindex);
            let addrs = mine.iter().map(|b| b.ip).collect();
            workers.push(Bound {
                worker,
                addrs,
                ifindex,
            });
        }
        let (port, mut unbound) = listen_everywhere(&mut workers);
        let mut lookups = Vec::new();
        for b in bound {
            let mine: Vec<&MachineAddr> = bound.iter().filter(|c| c.ifname == b.ifname).collect();
            let names = if link_local(&b.ip) {
                // Answered with another address of the interface; with none, other
                // machines cannot reach this one by its link-local GID.
                match ucx_address(&mine) {
                    Some(ip) => ip,
                    None => continue,
                }
            } else {
                b.ip
            };
            let at = at(b.ip, b.ifindex, lookup_port);
            match lookup::Listener::bind(at) {
                Ok(l) => lookups.push(l.naming(names)),
                Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) && b.ip.is_ipv6() => {
                    unbound.push(Unbound::Lookup { at, names });
                }
                Err(e) => eprintln!(
                    "vqp-softverbs: cannot answer lookups at {at} (another program or user \
                     holds the port?): {e}"
                ),
            }
        }
        Ok((
            Machine {
                workers,
                lookups,
                lookup_port,
                inbox,
                found: Arc::default(),
                peers: HashMap::new(),
                endpoints: HashMap::new(),
                accepted: HashMap::new(),
                port,
                dropped,
                wake,
                held: Vec::new(),
                held_since: None,
                spare,
                polled_turns: 0,
                unbound,
                bind_again_at: Instant::now(),
            },
            port,
        ))
    }

    /// Connects an endpoint to `to` from the worker of the interface that reaches it.
    fn connect(&mut self, to: SocketAddr) -> Option<Ep> {
        let worker = self.worker_for(&to);
        let ep = self.workers.get_mut(worker)?.worker.connect(to).ok()?;
        let ep = Ep { worker, ep };
        if self.port != 0 {
            let port = self.port.to_le_bytes();
            self.send_now(ep, HELLO, &port, Vec::new());
        }
        Some(ep)
    }

    /// A [`HELLO`] on endpoint `from`: if this process accepted it, it is this
    /// process's endpoint to the sender's UCX address (the connection's peer address
    /// at the port it says), unless one is known already (both connected at once:
    /// each keeps sending on its own).
    fn hello(&mut self, from: Ep, header: &[u8]) {
        let Some(ip) = self.accepted.remove(&from) else {
            return;
        };
        let Ok(port) = <[u8; 2]>::try_from(header) else {
            return;
        };
        let port = u16::from_le_bytes(port);
        if port != 0 {
            self.endpoints
                .entry(SocketAddr::new(ip, port))
                .or_insert(from);
        }
    }

    /// The worker that reaches `to`: the one kept to the interface the kernel routes it
    /// through, or the first.
    fn worker_for(&self, to: &SocketAddr) -> usize {
        source_for(*to)
            .and_then(|src| self.workers.iter().position(|b| b.addrs.contains(&src)))
            .unwrap_or(0)
    }

    /// Whether a request to QP `qpn` at `gid` can be sent now; starts a lookup when
    /// nothing is known (see [`Reach`]). A failure is told once: the next call looks
    /// up again.
    ///
    /// `ifindex` gives the interface of the requester's port, through which a
    /// link-local GID is reached; it is asked only when a lookup starts.
    pub(super) fn reach(
        &mut self,
        gid: &[u8; 16],
        qpn: u32,
        ifindex: impl FnOnce() -> u32,
    ) -> Reach {
        let key = (*gid, qpn);
        match self.peers.get(&key) {
            Some(Peer::Ready(ep)) => return Reach::Ready(*ep),
            Some(Peer::Looking) => return Reach::Pending,
            Some(Peer::Failed) => {
                self.peers.remove(&key);
                return Reach::Unreachable;
            }
            None => {}
        }
        let ip = ip_of(gid);
        let ifindex = ifindex();
        let found = self.found.clone();
        let wake = self.wake.clone();
        let asked = at(ip, ifindex, self.lookup_port);
        let local: Vec<IpAddr> = self
            .workers
            .iter()
            .find(|b| b.ifindex == ifindex)
            .map(|b| b.addrs.clone())
            .unwrap_or_default();
        let started = std::thread::Builder::new()
            .name("softverbs-lookup".into())
            .spawn(move || {
                // An answer naming an address it may not is no answer.
                let addr = lookup::lookup(asked, &key.0, key.1, LOOKUP_LIMIT)
                    .ok()
                    .flatten()
                    .filter(|a| acceptable(ip, *a, &local));
                lock(&found).push((key, addr));
                wake.ring();
            });
        if started.is_err() {
            return Reach::Unreachable;
        }
        self.peers.insert(key, Peer::Looking);
        Reach::Pending
    }

    /// The endpoint this process sends its requests to QP `qpn` at `gid` on, when it
    /// has one (no lookup is started).
    pub(super) fn ready(&self, gid: &[u8; 16], qpn: u32) -> Option<Ep> {
        match self.peers.get(&(*gid, qpn)) {
            Some(Peer::Ready(ep)) => Some(*ep),
            _ => None,
        }
    }

    /// Sends active message `id` on `ep`; false when the endpoint is gone or failed (it
    /// is then forgotten). A [`REQUEST`] takes along the last answer held for `ep`
    /// ([`ANSWERED`]), the ones held before it going first, as they are.
    pub(super) fn send(&mut self, ep: Ep, id: u16, header: &[u8], payload: Vec<u8>) -> bool {
        if id == REQUEST && self.held.iter().any(|(e, _)| *e == ep) {
            let mut mine = Vec::new();
            self.held.retain_mut(|(e, h)| {
                if *e == ep {
                    mine.push(std::mem::take(h));
                }
                *e != ep
            });
            if self.held.is_empty() {
                self.held_since = None;
            }
            let last = mine.pop().unwrap_or_default();
            for h in mine {
                self.send_now(ep, RESPONSE, &h, Vec::new());
            }
            let both = [last.as_slice(), header].concat();
            return self.send_now(ep, ANSWERED, &both, payload);
        }
        self.send_now(ep, id, header, payload)
    }

    /// Holds back `answer` (a response's header; it carries no payload) for the next
    /// request to `ep`, or a later turn (see [`HOLD_FOR`]), whichever comes first.
    pub(super) fn hold(&mut self, ep: Ep, answer: &[u8]) {
        if self.held.len() == MAX_HELD {
            self.flush_held();
        }
        if self.held.is_empty() {
            self.held_since = Some(Instant::now());
        }
        self.held.push((ep, answer.to_vec()));
    }

    /// Whether answers are held back.
    pub(super) fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// Sends the answers held back, as they are.
    pub(super) fn flush_held(&mut self) {
        self.held_since = None;
        for (ep, h) in std::mem::take(&mut self.held) {
            self.send_now(ep, RESPONSE, &h, Vec::new());
        }
    }

    /// [`Machine::send`], alone.
    fn send_now(&mut self, ep: Ep, id: u16, header: &[u8], payload: Vec<u8>) -> bool {
        let Some(b) = self.workers.get_mut(ep.worker) else {
            return false;
        };
        if b.worker.am_send(ep.ep, id, header, payload, 0).is_ok() {
            if b.worker.requests_in_flight() > 0 {
                // UCP kept the send to finish later: the machine thread must progress.
                self.wake.ring();
            }
            return true;
        }
        self.forget(ep);
        false
    }

    /// Forgets endpoint `ep` and every (GID, QPN) served through it, and closes it.
    fn forget(&mut self, ep: Ep) {
        self.endpoints.retain(|_, e| *e != ep);
        self.accepted.remove(&ep);
        self.peers
            .retain(|_, p| !matches!(p, Peer::Ready(e) if *e == ep));
        if let Some(b) = self.workers.get_mut(ep.worker) {
            let _ = b.worker.close(ep.ep);
        }
    }

    /// The service thread's turn (see the module's docs): the answers held back at the
    /// last turn, progress, connections, failed endpoints, finished lookups, and the
    /// lookups waiting to be answered
    /// (`serving_port` names the UCX port of the process serving a (GID, QPN)); a
    /// polling thread's turn (`polling`) looks at the lookups at every
    /// [`LOOKUP_TURNS`]th only. Returns the messages that arrived, and whether UCX did
    /// anything.
    pub(super) fn turn(
        &mut self,
        serving_port: impl Fn(&[u8; 16], u32) -> Option<u16>,
        polling: bool,
    ) -> (Vec<Incoming>, bool) {
        if !polling || self.held_since.is_some_and(|t| t.elapsed() >= HOLD_FOR) {
            self.flush_held();
        }
        self.bind_again();
        let mut busy = false;
        let mut failed = Vec::new();
        // A polling thread progresses each worker once: UCX's TCP progress reads until
        // its sockets have nothing more (one `epoll_wait` past the last message), and
        // what came goes to the engine, and so to the thread's CQ, without another
        // look (each costs a system call on the way from a request to its answer). The
        // machine thread progresses until UCX finds nothing, a bounded number of times.
        let rounds = if polling { 1 } else { 64 };
        for (w, b) in self.workers.iter_mut().enumerate() {
            for _ in 0..rounds {
                match b.worker.progress() {
                    Ok(0) => break,
                    Ok(_) => busy = true,
                    Err(e) => {
                        eprintln!("vqp-softverbs: UCX progress: {e}");
                        break;
                    }
                }
            }
            while let Some(ev) = b.worker.next_event() {
                match ev {
                    Event::ConnRequest(req) => {
                        let peer = req.peer;
                        if let (Ok(ep), Some(peer)) = (b.worker.accept(req), peer) {
                            if self.accepted.len() < MAX_ACCEPTED {
                                self.accepted.insert(Ep { worker: w, ep }, peer.ip());
                            }
                        }
                    }
                    Event::EndpointFailed { ep, .. } => failed.push(Ep { worker: w, ep }),
                    Event::Sent { buffer, .. } => self.spare.give(buffer),
                    Event::Received { .. } => {}
                }
            }
        }
        for ep in failed {
            self.forget(ep);
        }
        let found = std::mem::take(&mut *lock(&self.found));
        for (key, addr) in found {
            if !matches!(self.peers.get(&key), Some(Peer::Looking)) {
                continue;
            }
            let peer = match addr {
                Some(a) => match self.endpoints.get(&a) {
                    Some(&ep) => Peer::Ready(ep),
                    None => match self.connect(a) {
                        Some(ep) => {
                            self.endpoints.insert(a, ep);
                            Peer::Ready(ep)
                        }
                        None => Peer::Failed,
                    },
                },
                None => Peer::Failed,
            };
            self.peers.insert(key, peer);
        }
        self.polled_turns = if polling {
            self.polled_turns.wrapping_add(1)
        } else {
            0
        };
        if self.polled_turns % LOOKUP_TURNS == 0 {
            for l in &mut self.lookups {
                l.serve_ready(LOOKUP_LIMIT, &serving_port);
            }
        }
        let mut came: Vec<Incoming> = lock(&self.inbox).take();
        busy |= !came.is_empty();
        // A HELLO is this transport's own: the engine gets the rest.
        came.retain(|m| {
            if m.id != HELLO {
                return true;
            }
            if let Some(from) = m.from {
                self.hello(from, &m.header);
            }
            false
        });
        (came, busy)
    }

    /// Tries the listeners not made yet again, once [`BIND_AGAIN`] passed.
    fn bind_again(&mut self) {
        if self.unbound.is_empty() {
            return;
        }
        let now = Instant::now();
        if now < self.bind_again_at {
            return;
        }
        self.bind_again_at = now + BIND_AGAIN;
        let (workers, lookups) = (&mut self.workers, &mut self.lookups);
        self.unbound.retain(|u| match *u {
            Unbound::Ucx { worker, at } => {
                !usable(at)
                    || workers
                        .get_mut(worker)
                        .is_some_and(|b| b.worker.listen(at).is_err())
            }
            Unbound::Lookup { at, names } => match lookup::Listener::bind(at) {
                Ok(l) => {
                    lookups.push(l.naming(names));
                    false
                }
                Err(_) => true,
            },
        });
    }

    /// Arms the worker for the machine thread's sleep: the descriptors to wait on (the
    /// worker's event fd, the wake-up, the lookup sockets), or `None` when UCP has work
    /// already or answers are held back.
    pub(super) fn arm(&mut self) -> Option<Vec<RawFd>> {
        if self.holds() {
            return None;
        }
        self.wake.clear();
        let mut fds = vec![self.wake.raw()];
        for b in &mut self.workers {
            if let Ok(false) = b.worker.arm() {
                return None;
            }
            fds.push(b.worker.event_fd());
        }
        fds.extend(self.lookups.iter().map(|l| l.fd()));
        Some(fds)
    }

    /// Whether anything is going on with other machines (an endpoint or a lookup): the
    /// service thread then looks again soon.
    pub(super) fn active(&self) -> bool {
        !self.endpoints.is_empty()
            || !self.peers.is_empty()
            || self.lookups.iter().any(|l| l.waiting() > 0)
    }

    /// Messages the handlers refused so far.
    #[allow(dead_code)]
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize) -> Incoming {
        Incoming {
            id: REQUEST,
            header: vec![0; 8],
            payload: vec![0; len],
            from: None,
        }
    }

    #[test]
    fn a_port_taken_at_another_address_is_tried_again_from_there() {
        // Two workers, at 192.0.2.1 and 198.51.100.1 (IPv4: no tentative addresses).
        // The "kernel" gives port 40000 at the first; the second has it taken, and
        // gives 40001 when asked for any.
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "198.51.100.1".parse().unwrap();
        let taken = [SocketAddr::new(b, 40000)];
        let mut open: Vec<SocketAddr> = Vec::new();
        let mut tried = Vec::new();
        let busy = || ucx::Error::Call {
            call: "ucp_listener_create",
            status: ucx::Status(crate::ucx::sys::UCS_ERR_BUSY),
        };
        let (port, unbound) = {
            let open = std::cell::RefCell::new(&mut open);
            listen_at_one_port(
                vec![(0, a), (1, b)],
                |_, at: SocketAddr| {
                    tried.push(at);
                    let at = match at.port() {
                        0 if at.ip() == a => SocketAddr::new(a, 40000),
                        0 => SocketAddr::new(at.ip(), 40001),
                        _ => at,
                    };
                    if taken.contains(&at) || open.borrow().contains(&at) {
                        return Err(busy());
                    }
                    open.borrow_mut().push(at);
                    Ok((at, at.port()))
                },
                |_, l| open.borrow_mut().retain(|x| *x != l),
            )
        };
        assert_eq!(port, 40001);
        assert!(unbound.is_empty());
        open.sort();
        assert_eq!(open, [SocketAddr::new(a, 40001), SocketAddr::new(b, 40001)]);
        assert_eq!(
            tried,
            [
                SocketAddr::new(a, 0),
                SocketAddr::new(b, 40000),
                SocketAddr::new(b, 0),
                SocketAddr::new(a, 40001)
            ]
        );
        // An address where every port is taken: the others keep theirs, after the
        // tries.
        let mut tries = 0;
        let (port, _) = listen_at_one_port(
            vec![(0, a), (1, b)],
            |_, at: SocketAddr| {
                tries += 1;
                if at.ip() == b {
                    return Err(busy());
                }
                Ok(((), 40000))
            },
            |_, _| {},
        );
        assert_eq!(port, 40000);
        assert!(tries <= 2 * LISTEN_TRIES, "{tries} tries");
    }

    #[test]
    fn the_inbox_refuses_past_its_bounds_and_takes_again_once_emptied() {
        let mut q = Inbox::default();
        // Bytes: a payload that would pass the bound is refused, smaller ones are not.
        assert!(q.push(message(MAX_QUEUED_BYTES / 2)));
        assert!(!q.push(message(MAX_QUEUED_BYTES / 2)));
        assert!(q.push(message(1000)));
        assert_eq!(q.take().len(), 2);
        // Messages: however small.
        for _ in 0..MAX_QUEUED_MESSAGES {
            assert!(q.push(message(0)));
        }
        assert!(!q.push(message(0)));
        assert_eq!(q.take().len(), MAX_QUEUED_MESSAGES);
        assert!(q.push(message(MAX_QUEUED_BYTES - 8)));
    }

    fn addr(ip: &str) -> MachineAddr {
        MachineAddr {
            ip: ip.parse().unwrap(),
            ifindex: 3,
            ifname: "vm0".into(),
        }
    }

    #[test]
    fn ucx_is_listened_at_an_ipv4_address_else_a_global_ipv6_one_never_a_link_local_one() {
        let (ll, v4, global) = (addr("fe80::1"), addr("192.0.2.1"), addr("2001:db8::1"));
        assert_eq!(ucx_address(&[&ll, &global, &v4]), Some(v4.ip));
        assert_eq!(ucx_address(&[&ll, &global]), Some(global.ip));
        assert_eq!(ucx_address(&[&ll]), None);
    }

    #[test]
    fn a_lookup_answer_may_name_the_address_asked_or_one_on_the_link_asked_through() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let ll: IpAddr = "fe80::1".parse().unwrap();
        let on_lo = SocketAddr::new(lo, 4000);
        // Asked at an address that is not link-local: that address only.
        assert!(acceptable(lo, on_lo, &[lo]));
        assert!(!acceptable("127.0.0.2".parse().unwrap(), on_lo, &[lo]));
        // Asked at a link-local address: one the kernel sends to from the interface's
        // own addresses (loopback's, here), never a link-local one.
        assert!(acceptable(ll, on_lo, &[lo]));
        assert!(!acceptable(ll, on_lo, &["192.0.2.1".parse().unwrap()]));
        assert!(!acceptable(
            ll,
            "[fe80::2]:4000".parse().unwrap(),
            &[lo, ll]
        ));
        assert!(!acceptable(ll, SocketAddr::new(ll, 4000), &[lo, ll]));
    }
}
