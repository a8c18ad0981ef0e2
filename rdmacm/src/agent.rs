//! The process's CM agent: its datagram socket in the rendezvous directory, the
//! sockets of its listeners, the ids by communication id, and one thread that receives
//! every message and runs the timers — the part of the kernel's `rdma_cm` and IB CM
//! this library plays in each process.
//!
//! **Carrier**: `AF_UNIX` datagram sockets in the rendezvous directory (see
//! [`crate::dir`]). A datagram is one whole message (no framing to get wrong), the
//! kernel keeps them in order and never loses one between live sockets, a send to a
//! dead process fails at once (`ECONNREFUSED`, or `ENOENT` once its name is gone) so a
//! vanished peer is seen without waiting, and only the user can reach the directory.
//! Each process binds `p<pid>-<n>`; a listener binds `l-<port space>-<family>-<address
//! in hex>-<port>`, so that a REQ is addressed by the listener's (address, port) as an
//! IB CM REQ is by its service id.
//!
//! Every message is decoded defensively ([`crate::wire::decode`]) and then checked
//! against the state of the id it names: an unknown id, a message of the wrong phase
//! or from another peer is dropped. Nothing a peer sends allocates beyond the fixed
//! receive buffer, except a new id per REQ, bounded by the listener's backlog.
//!
//! **Hostile peers**: any process of the user can send to these sockets, so the agent
//! trusts nothing it is not sure of. Communication ids are random (a process that did
//! not see a REQ cannot answer it: a REP or REJ must name the requester's id, one of
//! 2^32); the thread never waits on a peer (its answers to unsolicited messages, REJ
//! and DREP, are sent without blocking and dropped when the peer's queue is full, so a
//! peer that never reads stalls nobody else); and a REQ replayed after its
//! connection was established is refused as stale (reason 10), as IB CM refuses one
//! that matches a connection in time-wait.
//!
//! **Timers**: a REQ or REP without reply, and a DREQ without DREP, expire after
//! [`cm_timeout`] (IB CM's: the REQ's 4.096 µs · 2^20 response time, tried 16 times —
//! about 69 s; `VQP_RDMACM_TIMEOUT_MS` changes it), with the events the kernel's
//! rdma_cm gives: UNREACHABLE (-ETIMEDOUT) for a connection, DISCONNECTED for a
//! disconnection. Every 0.5 s the agent also checks that the process whose answer an
//! id awaits is still there (its socket accepts a connection); when it is gone, the
//! timer ends at once. An address that is not this machine's is not answered:
//! ADDR_ERROR (-ETIMEDOUT) after the caller's timeout, as for an ARP request nobody
//! answers.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::conn::{Conn, Peer, Phase};
use crate::dir::Dir;
use crate::queue::What;
use crate::wire::{self, Body, Kind, Message, Name, Private};

/// IB REJ reasons (IBA table 112) this library sends.
pub mod reason {
    /// No resources (a listener's backlog is full).
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout.
    pub const TIMEOUT: u16 = 4;
    /// Nobody listens on that (address, port): what rdma_cm reports as REJECTED, 8.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The REQ's transport is not the listener's: an XRC send QP asking an RC listener,
    /// or an RC QP asking an XRC one (Linux's `IB_CM_REJ_INVALID_TRANSPORT_TYPE`).
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// The REQ is of a connection that was established and has ended: a replay (IBA
    /// table 112, "stale connection"; Linux's IB CM sends it for a REQ that matches a
    /// connection in time-wait).
    pub const STALE_CONNECTION: u16 = 10;
    /// The program rejected (`rdma_reject`).
    pub const CONSUMER: u16 = 28;
}

/// The variable that overrides [`cm_timeout`], in milliseconds.
pub const ENV_TIMEOUT: &str = "VQP_RDMACM_TIMEOUT_MS";

/// How long a REQ, REP or DREQ waits for its answer.
pub fn cm_timeout() -> Duration {
    std::env::var(ENV_TIMEOUT)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        // 4.096 µs · 2^20 per try, 16 tries.
        .unwrap_or(Duration::from_micros(4096 * (1 << 20) * 16 / 1000))
}

/// How long after a disconnection TIMEWAIT_EXIT comes.
const TIMEWAIT: Duration = Duration::from_millis(100);

/// The most READ/atomic requests a soft device takes per QP (`max_qp_rd_atom`).
pub const MAX_RD_ATOMIC: u8 = 16;

/// The most requests one listener holds unanswered, whatever its backlog.
pub const MAX_BACKLOG: usize = 1024;

/// How many ended connections are remembered to refuse their replayed REQs.
pub const STALE_MEMORY: usize = 1024;

/// The epoll key of the kick descriptor (listener keys are communication ids, `u32`).
const KICK: u64 = u64::MAX;

/// How long a send waits for room in the receiver's queue before the message is given
/// up (the CM timers then act as for a lost message).
const SEND_WAIT: Duration = Duration::from_secs(2);

/// How long a REJ sent by a program's call waits for room in the receiver's queue: a
/// requester that never reads cannot hold `rdma_reject` for long (a REJ it never gets
/// leaves its connect to time out, as a lost one would).
const BRIEF_WAIT: Duration = Duration::from_millis(50);

/// How often the processes whose answers are awaited are checked for.
const PROBE: Duration = Duration::from_millis(500);

/// The longest the thread sleeps without a timer due.
const IDLE: Duration = Duration::from_secs(1);

/// The agent.
pub struct Agent {
    dir: Dir,
    sock: UnixDatagram,
    /// The socket messages are sent from: unbound (replies go to the name a message
    /// carries) and blocking, so that a burst waits for room in the receiver's queue
    /// (Linux holds `net.unix.max_dgram_qlen`, 10 by default, datagrams per socket)
    /// instead of failing; at most [`SEND_WAIT`].
    out: UnixDatagram,
    /// The socket the agent thread answers unsolicited messages from: non-blocking, so
    /// that a peer whose queue is full (one that never reads) holds up nobody.
    quick: UnixDatagram,
    /// The socket REJs of the program's calls are sent from: waits [`BRIEF_WAIT`] at most.
    brief: UnixDatagram,
    name: Name,
    epoll: OwnedFd,
    /// An eventfd the program's calls write to when they set a timer, so that the
    /// thread recomputes how long it may sleep.
    kick: OwnedFd,
    conns: Mutex<BTreeMap<u32, Arc<Conn>>>,
    listeners: Mutex<BTreeMap<u32, Arc<UnixDatagram>>>,
    /// Requesters (socket, communication id) whose connections with a listener of this
    /// process were established: at most [`STALE_MEMORY`], the oldest forgotten first.
    ended: Mutex<std::collections::VecDeque<(Name, u32)>>,
}

static AGENT: OnceLock<Result<Agent, i32>> = OnceLock::new();

/// The agent thread's handle, taken by [`stop`] at exit.
static THREAD: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

/// Set at exit: the thread returns.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs at process exit (`atexit`): stops the agent thread and waits for it, so that
/// nothing of it is left running while the process's memory is torn down.
extern "C" fn stop() {
    STOPPING.store(true, Ordering::Release);
    if let Some(Ok(a)) = AGENT.get() {
        a.kick();
    }
    let handle = THREAD.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// The process's agent, started on first use; an errno value when the rendezvous
/// directory or the socket cannot be made.
pub fn agent() -> Result<&'static Agent, i32> {
    let a = AGENT.get_or_init(start).as_ref().map_err(|e| *e)?;
    Ok(a)
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn start() -> Result<Agent, i32> {
    let dir = Dir::open().map_err(|e| {
        eprintln!("librdmacm (vqp): {e}");
        errno_of(&e)
    })?;
    // SAFETY: epoll_create1 takes flags only.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(errno_of(&io::Error::last_os_error()));
    }
    // SAFETY: `ep` was just created and is owned by nobody else.
    let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
    let pid = std::process::id();
    let mut n = 0u32;
    let (sock, name) = loop {
        let name = format!("p{pid}-{n}");
        let path = dir.socket_path(&name);
        match UnixDatagram::bind(&path) {
            Ok(s) => break (s, name),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && n < 64 => {
                // A process of the same pid that died (pids are reused): its socket is
                // refused; remove it and bind again.
                if is_stale(&dir, &name) {
                    let _ = std::fs::remove_file(&path);
                } else {
                    n += 1;
                }
            }
            Err(e) => return Err(errno_of(&e)),
        }
    };
    sock.set_nonblocking(true).map_err(|e| errno_of(&e))?;
    // SAFETY: eventfd takes an initial value and flags only.
    let kfd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if kfd < 0 {
        return Err(errno_of(&io::Error::last_os_error()));
    }
    // SAFETY: `kfd` was just created and is owned by nobody else.
    let kick = unsafe { OwnedFd::from_raw_fd(kfd) };
    let out = UnixDatagram::unbound().map_err(|e| errno_of(&e))?;
    out.set_write_timeout(Some(SEND_WAIT))
        .map_err(|e| errno_of(&e))?;
    let quick = UnixDatagram::unbound().map_err(|e| errno_of(&e))?;
    quick.set_nonblocking(true).map_err(|e| errno_of(&e))?;
    let brief = UnixDatagram::unbound().map_err(|e| errno_of(&e))?;
    brief
        .set_write_timeout(Some(BRIEF_WAIT))
        .map_err(|e| errno_of(&e))?;
    let made = Agent {
        out,
        quick,
        brief,
        kick,
        name: Name::new(&name).ok_or(libc::ENAMETOOLONG)?,
        dir,
        sock,
        epoll,
        conns: Mutex::new(BTreeMap::new()),
        listeners: Mutex::new(BTreeMap::new()),
        ended: Mutex::new(std::collections::VecDeque::new()),
    };
    made.watch(made.sock.as_raw_fd(), 0)?;
    made.watch(made.kick.as_raw_fd(), KICK)?;
    let thread = std::thread::Builder::new()
        .name("rdmacm-agent".into())
        .spawn(|| {
            // The agent is in a static: the thread starts after it is stored.
            if let Ok(a) = agent() {
                a.run();
            }
        })
        .map_err(|e| errno_of(&e))?;
    *THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
    // SAFETY: registers a function without arguments that touches only statics.
    unsafe { libc::atexit(stop) };
    Ok(made)
}

/// Whether the socket `name` belongs to a process that is gone.
fn is_stale(dir: &Dir, name: &str) -> bool {
    let Ok(probe) = UnixDatagram::unbound() else {
        return false;
    };
    matches!(
        probe.connect(dir.socket_path(name)),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED)
    )
}

/// Why a message could not be delivered.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// Nobody is bound there (no such socket, or its process is gone).
    Gone,
    /// The receiver's queue is full, or another failure.
    Other(i32),
}

impl Agent {
    /// This process's socket name.
    pub fn name(&self) -> Name {
        self.name
    }

    /// A fresh communication id: random, so that a process that did not see a REQ
    /// cannot guess whom to answer (Linux's IB CM likewise hides its id allocator behind
    /// a random operand, `cm.random_id_operand`), and not 0 nor one in use.
    pub fn next_num(&self) -> u32 {
        let conns = self.lock_conns();
        loop {
            let mut b = [0u8; 4];
            // SAFETY: `b` is writable for 4 bytes.
            let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
            let n = if got == 4 {
                u32::from_ne_bytes(b)
            } else {
                // No entropy to be had: the clock's nanoseconds, still never sequential.
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| {
                        d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(7)
                    })
            };
            if n != 0 && !conns.contains_key(&n) {
                return n;
            }
        }
    }

    /// Makes `conn` reachable by its communication id.
    pub fn register(&self, conn: &Arc<Conn>) {
        self.lock_conns().insert(conn.num, conn.clone());
    }

    /// Remembers that the connection of requester (`name`, `comm`) was established, so
    /// that a replay of its REQ is refused.
    fn remember_established(&self, name: Name, comm: u32) {
        let mut e = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        if e.len() == STALE_MEMORY {
            e.pop_front();
        }
        e.push_back((name, comm));
    }

    fn replayed(&self, name: Name, comm: u32) -> bool {
        let e = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        e.iter().any(|&(n, c)| n == name && c == comm)
    }

    /// Forgets `conn`, and closes and removes its listener socket.
    pub fn unregister(&self, conn: &Conn) {
        self.lock_conns().remove(&conn.num);
        let listener = self.lock_listeners().remove(&conn.num);
        if let Some(s) = listener {
            // SAFETY: removes a descriptor we added; an error (already gone) is harmless.
            unsafe {
                libc::epoll_ctl(
                    self.epoll.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    s.as_raw_fd(),
                    core::ptr::null_mut(),
                )
            };
            if let Some(l) = conn.lock().listen.as_ref() {
                if let Some(name) = &l.listening {
                    let _ = std::fs::remove_file(self.dir.socket_path(name));
                }
                let _ = std::fs::remove_file(self.dir.socket_path(&l.socket));
            }
        }
    }

    fn lock_conns(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_listeners(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<UnixDatagram>>> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watch(&self, fd: RawFd, key: u64) -> Result<(), i32> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: `ev` is a valid event; `fd` is a live socket the agent keeps open
        // until it removes it again.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0
        {
            return Err(errno_of(&io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Binds the listener socket `socket` for `conn`: `EADDRINUSE` when a live process
    /// holds it (a stale one is removed).
    pub fn bind_listener(&self, conn: &Arc<Conn>, socket: &str) -> Result<(), i32> {
        let path = self.dir.socket_path(socket);
        let s = match UnixDatagram::bind(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                if !is_stale(&self.dir, socket) {
                    return Err(libc::EADDRINUSE);
                }
                let _ = std::fs::remove_file(&path);
                UnixDatagram::bind(&path).map_err(|e| errno_of(&e))?
            }
            Err(e) => return Err(errno_of(&e)),
        };
        s.set_nonblocking(true).map_err(|e| errno_of(&e))?;
        let s = Arc::new(s);
        self.lock_listeners().insert(conn.num, s.clone());
        if let Err(e) = self.watch(s.as_raw_fd(), u64::from(conn.num)) {
            self.lock_listeners().remove(&conn.num);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(())
    }

    /// Makes the bound socket `bound` findable as `name` too (a hard link): `EADDRINUSE`
    /// when a live listener has the name (a stale one is replaced).
    pub fn publish_listener(&self, bound: &str, name: &str) -> Result<(), i32> {
        let (from, to) = (self.dir.socket_path(bound), self.dir.socket_path(name));
        match std::fs::hard_link(&from, &to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !is_stale(&self.dir, name) {
                    return Err(libc::EADDRINUSE);
                }
                let _ = std::fs::remove_file(&to);
                std::fs::hard_link(&from, &to).map_err(|e| errno_of(&e))
            }
            Err(e) => Err(errno_of(&e)),
        }
    }

    /// Sends `m` to the socket `to`.
    pub fn send(&self, to: &str, m: &Message) -> Result<(), SendError> {
        let mut buf = [0u8; wire::MAX_MESSAGE];
        let n = wire::encode(m, &mut buf);
        match self.out.send_to(&buf[..n], self.dir.socket_path(to)) {
            Ok(_) => Ok(()),
            Err(e) => match e.raw_os_error() {
                Some(libc::ENOENT | libc::ECONNREFUSED | libc::ENOTSOCK) => Err(SendError::Gone),
                Some(c) => Err(SendError::Other(c)),
                None => Err(SendError::Other(libc::EIO)),
            },
        }
    }

    /// Sends `m` to the socket `to` without waiting: dropped when the receiver's queue
    /// is full. The agent thread's answers to messages it did not ask for go this way.
    fn send_now(&self, to: &str, m: &Message) {
        let mut buf = [0u8; wire::MAX_MESSAGE];
        let n = wire::encode(m, &mut buf);
        let _ = self.quick.send_to(&buf[..n], self.dir.socket_path(to));
    }

    /// Sends `m` to the socket `to`, waiting `BRIEF_WAIT` (50 ms) at most for room: for the
    /// REJs of the program's calls, answers to peers that may be hostile.
    pub fn send_brief(&self, to: &str, m: &Message) {
        let mut buf = [0u8; wire::MAX_MESSAGE];
        let n = wire::encode(m, &mut buf);
        let _ = self.brief.send_to(&buf[..n], self.dir.socket_path(to));
    }

    /// A message from this process.
    pub fn message(&self, kind: Kind, from: u32, to: u32, body: Body) -> Message {
        Message {
            kind,
            from,
            to,
            name: self.name,
            body,
        }
    }

    /// Replies to `peer` with an empty-bodied message of `kind`.
    pub fn tell(&self, conn: &Conn, peer: &Peer, kind: Kind) -> Result<(), SendError> {
        let m = self.message(kind, conn.num, peer.comm, Body::Empty);
        self.send(peer.name.as_str(), &m)
    }

    /// Wakes the thread to look at the timers again (a call has set one).
    pub fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own non-blocking eventfd; a full
        // counter (EAGAIN) already means "wake up".
        unsafe { libc::write(self.kick.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn run(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        let mut next: Option<Instant> = None;
        let mut next_probe = Instant::now() + PROBE;
        while !STOPPING.load(Ordering::Acquire) {
            let sleep = next.map_or(IDLE, |t| t.saturating_duration_since(Instant::now()));
            // Rounded up, so that a timer is never found a millisecond early.
            let ms = sleep.min(IDLE).as_micros().div_ceil(1000) as i32;
            // SAFETY: `events` has room for 16 entries.
            let n =
                unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), 16, ms) };
            for ev in events.iter().take(n.max(0) as usize) {
                match ev.u64 {
                    0 => self.drain(&self.sock, None),
                    KICK => {
                        let mut v: u64 = 0;
                        // SAFETY: reads 8 bytes into a live u64 (non-blocking).
                        unsafe {
                            libc::read(self.kick.as_raw_fd(), (&mut v as *mut u64).cast(), 8)
                        };
                    }
                    key => {
                        let s = self.lock_listeners().get(&(key as u32)).cloned();
                        if let Some(s) = s {
                            self.drain(&s, Some(key as u32));
                        }
                    }
                }
            }
            let now = Instant::now();
            if now >= next_probe {
                self.probe_peers();
                next_probe = now + PROBE;
            }
            next = self.expire(now).map(|t| t.min(next_probe));
        }
    }

    /// Handles every datagram waiting on `sock`.
    fn drain(&self, sock: &UnixDatagram, listener: Option<u32>) {
        let mut buf = [0u8; wire::MAX_MESSAGE + 1];
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => match wire::decode(&buf[..n.min(buf.len())]) {
                    Ok(m) => self.handle(&m, listener),
                    Err(_) => continue, // Not ours, or malformed: dropped.
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }

    fn conn(&self, num: u32) -> Option<Arc<Conn>> {
        self.lock_conns().get(&num).cloned()
    }

    /// Acts on one well-formed message.
    pub fn handle(&self, m: &Message, listener: Option<u32>) {
        match (m.kind, listener) {
            (Kind::Req | Kind::SidrReq, Some(l)) => self.on_req(m, l),
            // A REQ anywhere but at a listener, or a reply at a listener: dropped.
            (Kind::Req | Kind::SidrReq, None) | (_, Some(_)) => {}
            (Kind::Rep | Kind::SidrRep, None) => self.on_rep(m),
            (Kind::Rtu, None) => self.on_rtu(m),
            (Kind::Rej, None) => self.on_rej(m),
            (Kind::Dreq, None) => self.on_dreq(m),
            (Kind::Drep, None) => self.on_drep(m),
        }
    }

    fn reject(&self, m: &Message, reason: u16) {
        let rej = self.message(
            Kind::Rej,
            0,
            m.from,
            Body::Rej {
                reason,
                private: Private::EMPTY,
            },
        );
        self.send_now(m.name.as_str(), &rej);
    }

    fn on_req(&self, m: &Message, listener: u32) {
        let Body::Req {
            ps,
            conn,
            src,
            dst,
            private,
        } = m.body
        else {
            return;
        };
        let Some(l) = self.conn(listener) else {
            return self.reject(m, reason::INVALID_SERVICE_ID);
        };
        // A REQ repeated for a request still pending is not a new request. (No lock
        // is held while the others are taken one by one.)
        let others: Vec<Arc<Conn>> = self.lock_conns().values().cloned().collect();
        let dup = others.iter().filter(|c| !Arc::ptr_eq(c, &l)).any(|c| {
            let s = c.lock();
            s.parent.as_ref().is_some_and(|p| Arc::ptr_eq(p, &l))
                && s.peer.is_some_and(|p| p.name == m.name && p.comm == m.from)
        });
        if dup {
            return;
        }
        if m.kind == Kind::Req && self.replayed(m.name, m.from) {
            return self.reject(m, reason::STALE_CONNECTION);
        }
        let mut ls = l.lock();
        // An IPv6 listener takes IPv4 requests unless RDMA_OPTION_ID_AFONLY says not.
        let v6_only = ls.afonly && ls.local.is_some_and(|a| a.is_ipv6()) && dst.is_ipv4();
        let fits = ls.phase == Phase::Listening
            && u32::from(ps) == l.ps
            && (m.kind == Kind::SidrReq) == l.is_ud()
            && !v6_only;
        let info = match ls.listen.as_mut() {
            Some(info) if fits && info.active => info,
            _ => {
                drop(ls);
                return self.reject(m, reason::INVALID_SERVICE_ID);
            }
        };
        // XRC pairs an XRC send QP with an XRC receive QP; RC pairs RC QPs.
        let xrc_req = u32::from(conn.qp_type) == vqp_sys::IBV_QPT_XRC_SEND;
        if xrc_req != (l.qp_type == vqp_sys::IBV_QPT_XRC_RECV) {
            drop(ls);
            return self.reject(m, reason::INVALID_TRANSPORT_TYPE);
        }
        if info.pending >= info.backlog {
            drop(ls);
            return self.reject(m, reason::NO_RESOURCES);
        }
        info.pending += 1;
        let child = Conn::new(self.next_num(), l.ps, l.qp_type, ls.queue.clone());
        {
            let mut cs = child.lock();
            cs.phase = Phase::ReqRcvd;
            cs.local = Some(dst);
            cs.remote = Some(src);
            cs.parent = Some(l.clone());
            // This side's part as the REQ sets it, before any accept: what
            // `rdma_init_qp_attr` gives a program that moves its own QP first (IB CM's
            // REQ-received state: a PSN of its own, depths and retries from the REQ).
            cs.mine = Some(wire::Conn {
                qpn: 0,
                qp_type: conn.qp_type,
                psn: crate::addr::random_psn(),
                responder_resources: conn.initiator_depth.min(MAX_RD_ATOMIC),
                initiator_depth: conn.responder_resources.min(MAX_RD_ATOMIC),
                retry_count: conn.retry_count,
                rnr_retry_count: conn.rnr_retry_count,
                flow_control: conn.flow_control,
                srq: 0,
                gid: [0; 16],
                lid: 0,
                mtu: conn.mtu,
                qkey: conn.qkey,
            });
            cs.peer = Some(Peer {
                name: m.name,
                comm: m.from,
                conn,
                private,
            });
        }
        self.register(&child);
        l.report(&ls, What::Request(child));
    }

    /// The id `m` is for, when it is in `phase` and `m` comes from its peer (or the
    /// peer is not known yet).
    fn matching(&self, m: &Message, phases: &[Phase]) -> Option<Arc<Conn>> {
        let c = self.conn(m.to)?;
        let ok = {
            let s = c.lock();
            phases.contains(&s.phase)
                && s.peer
                    .map_or(true, |p| p.name == m.name && p.comm == m.from)
        };
        ok.then_some(c)
    }

    fn on_rep(&self, m: &Message) {
        let Body::Rep {
            conn,
            status,
            private,
        } = m.body
        else {
            return;
        };
        let Some(c) = self.matching(m, &[Phase::ReqSent]) else {
            return;
        };
        if (m.kind == Kind::SidrRep) != c.is_ud() {
            return;
        }
        let mut s = c.lock();
        s.deadline = None;
        s.awaiting = None;
        s.peer = Some(Peer {
            name: m.name,
            comm: m.from,
            conn,
            private,
        });
        if m.kind == Kind::SidrRep {
            if status == 0 {
                s.phase = Phase::Connected;
                c.report(&s, What::Established);
            } else {
                s.phase = Phase::Failed;
                c.report(&s, What::Unreachable(-libc::EINVAL));
            }
        } else {
            s.phase = Phase::RepRcvd;
            c.report(&s, What::Reply);
        }
    }

    fn on_rtu(&self, m: &Message) {
        let Some(c) = self.matching(m, &[Phase::RepSent]) else {
            return;
        };
        let mut s = c.lock();
        s.deadline = None;
        s.awaiting = None;
        s.phase = Phase::Connected;
        if let (Some(p), Some(_)) = (s.peer, s.parent.as_ref()) {
            self.remember_established(p.name, p.comm);
        }
        c.report(&s, What::Established);
    }

    fn on_rej(&self, m: &Message) {
        let Body::Rej { reason, private } = m.body else {
            return;
        };
        let Some(c) = self.matching(m, &[Phase::ReqSent, Phase::RepSent]) else {
            return;
        };
        let mut s = c.lock();
        s.deadline = None;
        s.awaiting = None;
        s.phase = Phase::Failed;
        c.report(&s, What::Rejected(reason, private));
    }

    fn on_dreq(&self, m: &Message) {
        let drep = self.message(Kind::Drep, m.to, m.from, Body::Empty);
        // Answered whatever our state: the peer waits for it (IB CM answers a DREQ for
        // a connection it no longer has with a DREP too).
        self.send_now(m.name.as_str(), &drep);
        let Some(c) = self.matching(m, &[Phase::Connected, Phase::DreqSent, Phase::RepSent]) else {
            return;
        };
        let mut s = c.lock();
        s.deadline = None;
        s.awaiting = None;
        s.phase = Phase::Disconnected;
        s.timewait = Some(Instant::now() + TIMEWAIT);
        c.report(&s, What::Disconnected);
    }

    fn on_drep(&self, m: &Message) {
        let Some(c) = self.matching(m, &[Phase::DreqSent]) else {
            return;
        };
        let mut s = c.lock();
        s.deadline = None;
        s.awaiting = None;
        s.phase = Phase::Disconnected;
        s.timewait = Some(Instant::now() + TIMEWAIT);
        c.report(&s, What::Disconnected);
    }

    /// Whether the socket `name` has no process behind it any more (its file is gone, or
    /// connecting to it is refused).
    fn gone(&self, name: &str) -> bool {
        let Ok(probe) = UnixDatagram::unbound() else {
            return false;
        };
        matches!(
            probe.connect(self.dir.socket_path(name)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT))
        )
    }

    /// Ends the waits on processes that are gone: what their timers would do later (a
    /// process that exits without destroying its ids sends nothing; IB CM would find
    /// out by its retries running out).
    fn probe_peers(&self) {
        let conns: Vec<Arc<Conn>> = self.lock_conns().values().cloned().collect();
        for c in conns {
            let Some(name) = c.lock().awaiting.clone() else {
                continue;
            };
            if !self.gone(&name) {
                continue;
            }
            let mut s = c.lock();
            if s.awaiting.as_deref() == Some(name.as_str()) && s.deadline.is_some() {
                s.deadline = None;
                s.awaiting = None;
                Self::expired(&c, &mut s, Instant::now());
            }
        }
    }

    /// Runs the timers that are due at `now`; returns when the next one is.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let conns: Vec<Arc<Conn>> = self.lock_conns().values().cloned().collect();
        let mut next: Option<Instant> = None;
        for c in conns {
            let mut s = c.lock();
            if s.timewait.is_some_and(|t| t <= now) {
                s.timewait = None;
                c.report(&s, What::TimewaitExit);
            }
            if s.deadline.is_some_and(|d| d <= now) {
                s.deadline = None;
                s.awaiting = None;
                Self::expired(&c, &mut s, now);
            }
            for t in [s.deadline, s.timewait].into_iter().flatten() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// What a timer that ran out does, by the phase.
    fn expired(c: &Arc<Conn>, s: &mut crate::conn::State, now: Instant) {
        match s.phase {
            Phase::AddrResolving => {
                s.phase = Phase::Idle;
                c.report(s, What::AddrError(-libc::ETIMEDOUT));
            }
            Phase::ReqSent | Phase::RepSent => {
                s.phase = Phase::Failed;
                c.report(s, What::Unreachable(-libc::ETIMEDOUT));
            }
            Phase::DreqSent => {
                s.phase = Phase::Disconnected;
                s.timewait = Some(now + TIMEWAIT);
                c.report(s, What::Disconnected);
            }
            _ => {}
        }
    }
}
