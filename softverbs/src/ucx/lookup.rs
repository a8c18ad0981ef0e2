//! The lookup of discovery ("Finding the process that serves QP *n* at GID *g*" in
//! this module's parent): one fixed-size question over a TCP connection to a
//! well-known port of the machine that has GID *g* — "who serves QP *n* at *g*?" — and
//! one fixed-size answer: the UCX listener address of the process that does, or
//! "nobody". The address is the one asked at, except where that is a link-local IPv6
//! address: UCX 1.13 connects its TCP lanes back to the address a connection came
//! from without its interface's scope, which fails for `fe80::/10`, so a listener at
//! a link-local address names another address of the same interface
//! ([`Listener::naming`]) and the asker checks that it is on that link. Every process
//! of a softverbs namespace with a RoCE-bound device listens on that port with
//! `SO_REUSEPORT` (the kernel shares it among sockets of the same effective user and
//! hands each connection to one of them), and any of them can answer, because the
//! answer comes from the namespace's registry.
//!
//! Both sides bound every step in time and read exactly the message's size. The
//! listener never waits on a peer: it holds at most [`MAX_PENDING`] accepted
//! connections, non-blocking, advances each by the bytes ready on each turn, and closes
//! it after the answer, after a malformed question, or at its deadline; so a peer that
//! sends too little, too much, garbage or nothing costs a slot of that fixed table for
//! a bounded time, never a wait of the thread that serves it, a panic, or an
//! allocation by the peer's say.
//!
//! | message | bytes |
//! |---|---|
//! | question ([`QUESTION_LEN`]) | `"VQPL"`, version 4, 3 zero bytes, QPN (big endian, < 2^24), GID (16) |
//! | answer ([`ANSWER_LEN`]) | `"VQPA"`, version 4, status (0 found, 1 nobody), port (big endian), IP address (16: IPv6, or IPv4-mapped `::ffff:a.b.c.d`); found: a port and an address that are not zero; nobody: both zero |
//!
//! Version 2 added the address (version 1 answered a port at the address asked);
//! version 3 has the same form, for processes whose UCX workers take larger pieces of
//! a message (`ROUTE_SETTINGS`' receive segment), which a process of version 2 could
//! not receive; version 4 likewise, for processes that send a long WRITE in pieces
//! (`wire`'s version 3, and a receive segment that holds one piece). A listener
//! refuses the other versions' questions, so mixed versions find nobody.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::sockaddr::to_storage;

/// The lookup port when `VQP_SOFT_UCX_PORT` does not name another (TCP; next to
/// perftest's default 18515).
pub const DEFAULT_PORT: u16 = 18516;
/// Bytes of a question.
pub const QUESTION_LEN: usize = 28;
/// Bytes of an answer.
pub const ANSWER_LEN: usize = 24;

const QUESTION_MAGIC: &[u8; 4] = b"VQPL";
const ANSWER_MAGIC: &[u8; 4] = b"VQPA";
const VERSION: u8 = 4;
const FOUND: u8 = 0;
const NOBODY: u8 = 1;

/// Why a lookup found no answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum LookupError {
    /// The QP number does not fit 24 bits.
    BadQpn(u32),
    /// Nobody listens at the address, or it cannot be reached in time.
    Connect(io::Error),
    /// The connection failed or stalled before a whole answer came.
    Io(io::Error),
    /// The answer was not one (wrong magic, version or status, or port or address 0
    /// when found).
    Malformed,
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::BadQpn(q) => write!(f, "QP number {q:#x} does not fit 24 bits"),
            LookupError::Connect(e) => write!(f, "cannot reach the lookup port: {e}"),
            LookupError::Io(e) => write!(f, "the lookup did not complete: {e}"),
            LookupError::Malformed => f.write_str("the lookup's answer is malformed"),
        }
    }
}

impl std::error::Error for LookupError {}

/// The question for QP `qpn` at `gid`.
fn question(gid: &[u8; 16], qpn: u32) -> [u8; QUESTION_LEN] {
    let mut q = [0u8; QUESTION_LEN];
    q[..4].copy_from_slice(QUESTION_MAGIC);
    q[4] = VERSION;
    q[8..12].copy_from_slice(&qpn.to_be_bytes());
    q[12..].copy_from_slice(gid);
    q
}

/// The (GID, QPN) a question asks about, if it is a well-formed one.
fn parse_question(q: &[u8; QUESTION_LEN]) -> Option<([u8; 16], u32)> {
    if &q[..4] != QUESTION_MAGIC || q[4] != VERSION || q[5..8] != [0, 0, 0] {
        return None;
    }
    let qpn = u32::from_be_bytes([q[8], q[9], q[10], q[11]]);
    if qpn >> 24 != 0 {
        return None;
    }
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&q[12..]);
    Some((gid, qpn))
}

/// The answer "served at UCX address `at`", or "nobody" for `None` (or port 0).
fn answer(at: Option<SocketAddr>) -> [u8; ANSWER_LEN] {
    let mut a = [0u8; ANSWER_LEN];
    a[..4].copy_from_slice(ANSWER_MAGIC);
    a[4] = VERSION;
    match at.filter(|at| at.port() != 0) {
        Some(at) => {
            a[5] = FOUND;
            a[6..8].copy_from_slice(&at.port().to_be_bytes());
            let ip = match at.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            a[8..].copy_from_slice(&ip.octets());
        }
        None => a[5] = NOBODY,
    }
    a
}

fn parse_answer(a: &[u8; ANSWER_LEN]) -> Result<Option<SocketAddr>, LookupError> {
    if &a[..4] != ANSWER_MAGIC || a[4] != VERSION {
        return Err(LookupError::Malformed);
    }
    let port = u16::from_be_bytes([a[6], a[7]]);
    let mut ip = [0u8; 16];
    ip.copy_from_slice(&a[8..]);
    let v6 = Ipv6Addr::from(ip);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    match (a[5], port) {
        (FOUND, p) if p != 0 && !ip.is_unspecified() => Ok(Some(SocketAddr::new(ip, p))),
        (NOBODY, 0) if v6.is_unspecified() => Ok(None),
        _ => Err(LookupError::Malformed),
    }
}

/// Asks the lookup port at `to` who serves QP `qpn` at `gid`: the UCX address of the
/// process that does, or `None` when nobody there does. Each step (connect, question,
/// answer) takes at most `limit`.
pub fn lookup(
    to: SocketAddr,
    gid: &[u8; 16],
    qpn: u32,
    limit: Duration,
) -> Result<Option<SocketAddr>, LookupError> {
    if qpn >> 24 != 0 {
        return Err(LookupError::BadQpn(qpn));
    }
    let mut s = TcpStream::connect_timeout(&to, limit).map_err(LookupError::Connect)?;
    s.set_read_timeout(Some(limit)).map_err(LookupError::Io)?;
    s.set_write_timeout(Some(limit)).map_err(LookupError::Io)?;
    s.set_nodelay(true).map_err(LookupError::Io)?;
    s.write_all(&question(gid, qpn)).map_err(LookupError::Io)?;
    let mut a = [0u8; ANSWER_LEN];
    s.read_exact(&mut a).map_err(LookupError::Io)?;
    parse_answer(&a)
}

/// How many accepted lookup connections a [`Listener`] holds at once; a connection
/// past it closes the oldest, so peers that connect and stall cost a fixed number of
/// descriptors and bytes, never more.
pub const MAX_PENDING: usize = 16;

/// How many connections one [`Listener::serve_ready`] takes from the kernel's queue at
/// most, so a flood of connections cannot keep one turn going.
const ACCEPTS_PER_TURN: usize = 64;

/// A socket listening at the lookup port of one address, shared with the other
/// processes of the same user (`SO_REUSEPORT`), and the connections it accepted that
/// are not answered yet. Nothing of it blocks: [`Listener::serve_ready`] takes the
/// connections waiting now, advances each by the bytes ready now, and returns.
#[derive(Debug)]
pub struct Listener {
    sock: TcpListener,
    /// The IP address its answers name: the one it listens at, unless told another.
    names: IpAddr,
    /// Accepted, unanswered connections, oldest first; never more than [`MAX_PENDING`]
    /// (allocated once).
    pending: Vec<Pending>,
}

/// One accepted connection on its way from question to answer.
#[derive(Debug)]
struct Pending {
    /// Non-blocking.
    s: TcpStream,
    /// The question's bytes so far (`got` of them).
    question: [u8; QUESTION_LEN],
    got: usize,
    /// The answer and how much of it is sent, once the question is whole.
    answer: Option<([u8; ANSWER_LEN], usize)>,
    /// When it is closed whatever it has sent.
    deadline: Instant,
}

/// What became of a connection on one turn.
enum Step {
    /// Still waiting for its peer.
    Wait,
    /// Done (answered, malformed, gone or late): close it. Whether it was answered.
    Close(bool),
}

impl Pending {
    /// Reads and writes what can be without waiting; `serves` answers a whole question.
    fn advance(
        &mut self,
        now: Instant,
        names: IpAddr,
        serves: &mut impl FnMut(&[u8; 16], u32) -> Option<u16>,
    ) -> Step {
        while self.answer.is_none() {
            match self.s.read(&mut self.question[self.got..]) {
                // The peer closed before a whole question.
                Ok(0) => return Step::Close(false),
                Ok(n) => {
                    self.got += n;
                    if self.got == QUESTION_LEN {
                        let Some((gid, qpn)) = parse_question(&self.question) else {
                            return Step::Close(false);
                        };
                        let _ = self.s.set_nodelay(true);
                        let at = serves(&gid, qpn).map(|port| SocketAddr::new(names, port));
                        self.answer = Some((answer(at), 0));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return Step::Close(false),
            }
        }
        if let Some((a, sent)) = &mut self.answer {
            while *sent < ANSWER_LEN {
                match self.s.write(&a[*sent..]) {
                    Ok(0) => return Step::Close(false),
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return Step::Close(false),
                }
            }
            if *sent == ANSWER_LEN {
                return Step::Close(true);
            }
        }
        if now >= self.deadline {
            Step::Close(false)
        } else {
            Step::Wait
        }
    }
}

impl Listener {
    /// Listens at `addr` (port 0: one the kernel picks) with `SO_REUSEADDR` and
    /// `SO_REUSEPORT`.
    pub fn bind(addr: SocketAddr) -> io::Result<Listener> {
        let family = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        // SAFETY: plain system call; the descriptor it returns is owned below.
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor just made and owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        for opt in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
            // SAFETY: a live socket, and an option value of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&one as *const libc::c_int).cast(),
                    core::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let (storage, len) = to_storage(addr);
        // SAFETY: a live socket and an address of `len` bytes in `storage`.
        let rc = unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a live, bound socket.
        if unsafe { libc::listen(fd, 64) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Listener {
            sock: TcpListener::from(owned),
            names: addr.ip(),
            pending: Vec::with_capacity(MAX_PENDING),
        })
    }

    /// Names `ip` in its answers in place of the address it listens at: for a listener
    /// at a link-local IPv6 address, another address of the same interface where the
    /// UCX listeners are (see the module's docs).
    pub fn naming(mut self, ip: IpAddr) -> Listener {
        self.names = ip;
        self
    }

    /// The address it listens at.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Its descriptor, readable when a connection waits (for a poll or epoll).
    pub fn fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }

    /// How many accepted connections wait for their question or for room to answer:
    /// their bytes come without the listening socket becoming readable, so the caller
    /// looks again soon while there are any.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// One turn, without waiting on anything: advances every held connection by the
    /// bytes ready now — answering a whole, well-formed question with the UCX port
    /// `serves` says serves QP `qpn` at `gid` (`None`: nobody), at the address it
    /// names — and closes those answered,
    /// malformed, closed by their peer, or past their deadline; then takes the
    /// connections waiting now, each advanced at once (a peer sends its question with
    /// its connection, so most are answered there and never held) and otherwise held,
    /// given `limit` from now to ask and be answered (past [`MAX_PENDING`] held, the
    /// oldest is closed). Held ones go first, so a question that came since the last
    /// turn is answered before connections arriving with nothing to say (a peer
    /// stalling them by the hundred) can push its connection out. Returns how many
    /// were answered.
    pub fn serve_ready(
        &mut self,
        limit: Duration,
        mut serves: impl FnMut(&[u8; 16], u32) -> Option<u16>,
    ) -> usize {
        let now = Instant::now();
        let names = self.names;
        let mut answered = 0;
        self.pending
            .retain_mut(|p| match p.advance(now, names, &mut serves) {
                Step::Wait => true,
                Step::Close(done) => {
                    answered += usize::from(done);
                    false
                }
            });
        // Most turns find no connection waiting: asked cheaply first.
        let accepts = if crate::os::readable_now(self.sock.as_raw_fd()) {
            ACCEPTS_PER_TURN
        } else {
            0
        };
        for _ in 0..accepts {
            let s = match self.sock.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing waits; anything else (a connection reset before it
                // was taken, out of descriptors): try again at the next turn.
                Err(_) => break,
            };
            // An accepted socket does not inherit the listener's O_NONBLOCK.
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            let mut p = Pending {
                s,
                question: [0; QUESTION_LEN],
                got: 0,
                answer: None,
                deadline: now + limit,
            };
            if let Step::Close(done) = p.advance(now, names, &mut serves) {
                answered += usize::from(done);
                continue;
            }
            if self.pending.len() == MAX_PENDING {
                self.pending.remove(0);
            }
            self.pending.push(p);
        }
        answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const LIMIT: Duration = Duration::from_millis(300);

    /// Port `port` at the loopback address the tests' listeners are at.
    fn on_lo(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A listener at a port of loopback the kernel picks, and its address.
    fn listener_on_lo() -> (Listener, SocketAddr) {
        let l = Listener::bind(on_lo(0)).unwrap();
        let addr = l.local_addr().unwrap();
        (l, addr)
    }

    fn gid(last: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[192, 0, 2, last]);
        g
    }

    /// A listener on loopback served by a thread until `rounds` questions were
    /// answered: QP 7 at 192.0.2.1 is served at port 4000, nothing else.
    fn server(rounds: usize) -> (SocketAddr, std::thread::JoinHandle<Listener>) {
        let (mut l, addr) = listener_on_lo();
        let h = std::thread::spawn(move || {
            let mut done = 0;
            let deadline = Instant::now() + Duration::from_secs(10);
            while done < rounds && Instant::now() < deadline {
                done += l.serve_ready(LIMIT, |g, q| (*g == gid(1) && q == 7).then_some(4000));
                std::thread::sleep(Duration::from_millis(1));
            }
            l
        });
        (addr, h)
    }

    #[test]
    fn a_question_is_answered_with_the_port_or_nobody() {
        let (addr, h) = server(3);
        assert_eq!(lookup(addr, &gid(1), 7, LIMIT).unwrap(), Some(on_lo(4000)));
        assert_eq!(lookup(addr, &gid(1), 8, LIMIT).unwrap(), None);
        assert_eq!(lookup(addr, &gid(2), 7, LIMIT).unwrap(), None);
        h.join().unwrap();
    }

    #[test]
    fn processes_of_one_user_share_the_port() {
        let (_a, addr) = listener_on_lo();
        let b = Listener::bind(addr).unwrap();
        assert_eq!(b.local_addr().unwrap(), addr);
    }

    #[test]
    fn bad_questions_and_stalled_peers_are_closed_unanswered_in_bounded_time() {
        let (addr, h) = server(1);
        let mut bad = question(&gid(1), 7);
        bad[0] = b'X';
        let mut big_qpn = question(&gid(1), 7);
        big_qpn[8] = 1;
        // Version 1's question (it had no address in its answer).
        let mut other_version = question(&gid(1), 7);
        other_version[4] = 1;
        for q in [&bad[..], &big_qpn[..], &other_version[..], &bad[..5]] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(q).unwrap();
            if q.len() < QUESTION_LEN {
                s.shutdown(std::net::Shutdown::Write).unwrap();
            }
            let mut a = Vec::new();
            let _ = s.read_to_end(&mut a);
            assert!(a.is_empty(), "answered {q:?}: {a:?}");
        }
        // A peer that connects and says nothing does not hold the listener.
        let stalled = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        assert_eq!(
            lookup(addr, &gid(1), 7, Duration::from_secs(5)).unwrap(),
            Some(on_lo(4000))
        );
        assert!(t.elapsed() < LIMIT * 3, "took {:?}", t.elapsed());
        drop(stalled);
        h.join().unwrap();
    }

    /// Whether `s`'s peer closed it (an end of stream or a reset within a second).
    fn closed(s: &mut TcpStream) -> bool {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        match s.read(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
        }
    }

    /// Whether `s` is open and has nothing to read now.
    fn open_and_quiet(s: &mut TcpStream) -> bool {
        s.set_nonblocking(true).unwrap();
        let r = s.read(&mut [0u8; 1]);
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Turns of `l` until `s` has its answer, each turn quick, all of them within a
    /// few milliseconds: far less than `limit`, which a listener that waited on a
    /// stalled peer would spend on it.
    fn answered_promptly(l: &mut Listener, s: &mut TcpStream, limit: Duration) -> [u8; ANSWER_LEN] {
        s.set_nonblocking(true).unwrap();
        let (mut a, mut got) = ([0u8; ANSWER_LEN], 0);
        let t = Instant::now();
        while got < ANSWER_LEN {
            let turn = Instant::now();
            l.serve_ready(limit, |g, q| (*g == gid(1) && q == 7).then_some(4000));
            assert!(
                turn.elapsed() < limit / 8,
                "one turn took {:?}",
                turn.elapsed()
            );
            match s.read(&mut a[got..]) {
                Ok(0) => panic!("closed unanswered"),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            assert!(t.elapsed() < limit / 4, "no answer in {:?}", t.elapsed());
        }
        a
    }

    #[test]
    fn stalled_peers_do_not_delay_another_lookup_and_are_closed_at_their_deadline() {
        let limit = Duration::from_millis(800);
        let (mut l, addr) = listener_on_lo();
        // Connected before the well-formed one, so a listener taking them in order meets
        // them first: one says nothing, one half a question.
        let mut silent = TcpStream::connect(addr).unwrap();
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(&question(&gid(1), 7)[..QUESTION_LEN / 2])
            .unwrap();
        let mut good = TcpStream::connect(addr).unwrap();
        good.write_all(&question(&gid(1), 7)).unwrap();
        let since = Instant::now();
        let a = answered_promptly(&mut l, &mut good, limit);
        assert_eq!(parse_answer(&a).unwrap(), Some(on_lo(4000)));
        assert!(closed(&mut good), "open after its answer");
        // The stalled ones wait for their deadline, and are closed at the first turn
        // after it.
        assert!(open_and_quiet(&mut silent) && open_and_quiet(&mut half));
        l.serve_ready(limit, |_, _| None);
        assert!(open_and_quiet(&mut silent) && open_and_quiet(&mut half));
        std::thread::sleep(
            (since + limit + Duration::from_millis(50)).saturating_duration_since(Instant::now()),
        );
        l.serve_ready(limit, |_, _| None);
        assert!(closed(&mut silent), "the silent peer outlived its deadline");
        assert!(closed(&mut half), "the half question outlived its deadline");
    }

    #[test]
    fn more_stalled_peers_than_the_table_holds_close_the_oldest() {
        let limit = Duration::from_millis(400);
        let extra = 4;
        let (mut l, addr) = listener_on_lo();
        let mut stalled: Vec<TcpStream> = (0..MAX_PENDING + extra)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let t = Instant::now();
        l.serve_ready(limit, |_, _| None);
        assert!(t.elapsed() < limit / 8, "one turn took {:?}", t.elapsed());
        for (i, s) in stalled.iter_mut().enumerate() {
            if i < extra {
                assert!(closed(s), "peer {i} held past the table's size");
            } else {
                assert!(open_and_quiet(s), "peer {i} closed before its deadline");
            }
        }
        // A well-formed lookup still gets its answer; asked with its connection, it is
        // answered as it is taken and holds no place: the oldest stays.
        let mut good = TcpStream::connect(addr).unwrap();
        good.write_all(&question(&gid(1), 8)).unwrap();
        let a = answered_promptly(&mut l, &mut good, limit);
        assert_eq!(parse_answer(&a).unwrap(), None);
        assert!(open_and_quiet(&mut stalled[extra]));
        // One more stalled peer takes the place of the oldest.
        let _one_more = TcpStream::connect(addr).unwrap();
        l.serve_ready(limit, |_, _| None);
        assert!(
            closed(&mut stalled[extra]),
            "the oldest held past the table's size"
        );
        assert!(open_and_quiet(&mut stalled[extra + 1]));
    }

    #[test]
    fn a_lookup_followed_in_one_turn_by_more_stalled_peers_than_the_table_holds_is_answered() {
        // A peer stalling connections by the hundred: between two turns of the
        // listener, a lookup and then more silent connections than the table holds.
        let limit = Duration::from_millis(400);
        let (mut l, addr) = listener_on_lo();
        let mut good = TcpStream::connect(addr).unwrap();
        good.write_all(&question(&gid(1), 8)).unwrap();
        let _stalled: Vec<TcpStream> = (0..MAX_PENDING + 4)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        assert_eq!(l.serve_ready(limit, |_, _| None), 1);
        let mut a = [0u8; ANSWER_LEN];
        good.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        good.read_exact(&mut a).unwrap();
        assert_eq!(parse_answer(&a).unwrap(), None);
    }

    #[test]
    fn a_lookup_ends_in_bounded_time_without_an_answer() {
        // Nobody listens.
        let (l, addr) = listener_on_lo();
        drop(l);
        assert!(matches!(
            lookup(addr, &gid(1), 7, LIMIT),
            Err(LookupError::Connect(_))
        ));
        // Somebody listens and never answers.
        let (_l, addr) = listener_on_lo();
        let t = Instant::now();
        assert!(matches!(
            lookup(addr, &gid(1), 7, LIMIT),
            Err(LookupError::Io(_))
        ));
        assert!(t.elapsed() < LIMIT * 3, "took {:?}", t.elapsed());
        // A QP number beyond 24 bits is not asked.
        assert!(matches!(
            lookup(addr, &gid(1), 1 << 24, LIMIT),
            Err(LookupError::BadQpn(_))
        ));
    }

    #[test]
    fn a_malformed_answer_is_an_error() {
        let v6: SocketAddr = "[2001:db8::7]:9".parse().unwrap();
        assert_eq!(
            parse_answer(&answer(Some(on_lo(9)))).unwrap(),
            Some(on_lo(9))
        );
        assert_eq!(parse_answer(&answer(Some(v6))).unwrap(), Some(v6));
        assert_eq!(parse_answer(&answer(None)).unwrap(), None);
        assert_eq!(parse_answer(&answer(Some(on_lo(0)))).unwrap(), None);
        let mut a = answer(Some(on_lo(9)));
        a[5] = 7;
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        let mut a = answer(None);
        a[7] = 1;
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        // Nobody, with an address.
        let mut a = answer(None);
        a[23] = 1;
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        let mut a = answer(Some(on_lo(9)));
        a[6..8].copy_from_slice(&[0, 0]);
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        // Found, at no address (zero, or IPv4's unspecified).
        let mut a = answer(Some(on_lo(9)));
        a[8..].fill(0);
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        let a = answer(Some(SocketAddr::from(([0, 0, 0, 0], 9))));
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        // The other version.
        let mut a = answer(Some(on_lo(9)));
        a[4] = 1;
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
    }

    #[test]
    fn a_listener_told_another_address_names_it_in_its_answers() {
        let named: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        let (l, addr) = listener_on_lo();
        let mut l = l.naming(named);
        let h = std::thread::spawn(move || lookup(addr, &gid(1), 7, Duration::from_secs(5)));
        let deadline = Instant::now() + Duration::from_secs(5);
        while l.serve_ready(LIMIT, |_, _| Some(4000)) == 0 {
            assert!(Instant::now() < deadline, "never asked");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            h.join().unwrap().unwrap(),
            Some(SocketAddr::new(named, 4000))
        );
    }

    /// xorshift32: the same bytes on every run, as the endpoint card's fuzz.
    fn junk(x: &mut u32, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 17;
                *x ^= *x << 5;
                *x as u8
            })
            .collect()
    }

    /// Whether `q` is a question as [`question`] writes them, by the table in the
    /// module docs (independently of [`parse_question`]).
    fn well_formed(q: &[u8; QUESTION_LEN]) -> bool {
        q[..4] == *b"VQPL" && q[4] == VERSION && q[5..9] == [0, 0, 0, 0]
    }

    #[test]
    fn arbitrary_questions_are_taken_only_when_well_formed() {
        let mut x = 0x2545_f491u32;
        let mut taken = 0;
        for round in 0..20_000 {
            let mut q = [0u8; QUESTION_LEN];
            q.copy_from_slice(&junk(&mut x, QUESTION_LEN));
            // Most rounds keep a valid head, so the fields behind it are reached; some
            // clear the QPN's top byte, so well-formed questions come too.
            if round % 4 != 0 {
                q[..4].copy_from_slice(b"VQPL");
                q[4] = VERSION;
            }
            if round % 2 == 0 {
                q[5..9].fill(0);
            }
            match parse_question(&q) {
                Some((gid, qpn)) => {
                    taken += 1;
                    assert!(well_formed(&q), "took {q:?}");
                    assert_eq!(question(&gid, qpn), q, "not what was asked");
                }
                None => assert!(!well_formed(&q), "refused {q:?}"),
            }
        }
        assert!(
            taken > 1000,
            "only {taken} well-formed questions were tried"
        );
    }

    #[test]
    fn arbitrary_byte_streams_are_answered_only_for_a_well_formed_question() {
        // Streams of any length, sent in pieces of any size, each on its own connection
        // closed after it: answered exactly when its first 28 bytes are a question; the
        // listener never waits on one, and holds none of them afterwards.
        let limit = Duration::from_millis(400);
        let (mut l, addr) = listener_on_lo();
        let mut x = 0x9e37_79b9u32;
        let (mut answered, mut refused) = (0, 0);
        for round in 0..300usize {
            let len = junk(&mut x, 2)
                .iter()
                .fold(0usize, |a, &b| a * 256 + usize::from(b))
                % 96;
            let mut bytes = junk(&mut x, len);
            if round % 2 == 0 && len >= QUESTION_LEN {
                let qpn = u32::from(bytes[0]) | u32::from(bytes[1]) << 8;
                bytes[..QUESTION_LEN].copy_from_slice(&question(&gid(1), qpn));
            } else if round % 4 == 1 && len >= 5 {
                // A valid head and arbitrary fields behind it, the QPN's top byte
                // mostly clear.
                bytes[..5].copy_from_slice(b"VQPL\x03");
                if len > 8 && round % 8 == 1 {
                    bytes[8] = 0;
                }
            }
            let want = bytes.len() >= QUESTION_LEN
                && well_formed(bytes[..QUESTION_LEN].try_into().unwrap());
            let mut s = TcpStream::connect(addr).unwrap();
            let mut at = 0;
            while at < bytes.len() {
                let piece = 1 + usize::from(junk(&mut x, 1)[0]) % 40;
                let end = (at + piece).min(bytes.len());
                // A peer that sends past the question may find it closed already.
                if s.write_all(&bytes[at..end]).is_err() {
                    break;
                }
                at = end;
                let turn = Instant::now();
                l.serve_ready(limit, |g, q| (*g == gid(1) && q == 7).then_some(4000));
                assert!(
                    turn.elapsed() < limit / 8,
                    "a turn took {:?}",
                    turn.elapsed()
                );
            }
            let _ = s.shutdown(std::net::Shutdown::Write);
            s.set_nonblocking(true).unwrap();
            let mut got = Vec::new();
            let t = Instant::now();
            loop {
                l.serve_ready(limit, |g, q| (*g == gid(1) && q == 7).then_some(4000));
                let mut buf = [0u8; 64];
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // A reset: closed with bytes of ours unread.
                    Err(_) => break,
                }
                assert!(t.elapsed() < limit * 2, "round {round}: never closed");
                std::thread::sleep(Duration::from_micros(200));
            }
            if want {
                assert_eq!(got.len(), ANSWER_LEN, "round {round}: {bytes:?} unanswered");
                let q: &[u8; QUESTION_LEN] = bytes[..QUESTION_LEN].try_into().unwrap();
                let (g, qpn) = parse_question(q).unwrap();
                let at = (g == gid(1) && qpn == 7).then_some(on_lo(4000));
                assert_eq!(parse_answer(&got.try_into().unwrap()).unwrap(), at);
                answered += 1;
            } else {
                assert!(got.is_empty(), "round {round}: {bytes:?} answered {got:?}");
                refused += 1;
            }
            assert!(l.pending.is_empty(), "round {round}: still held");
        }
        assert!(
            answered > 50 && refused > 50,
            "{answered} answered, {refused} refused"
        );
    }
}
