//! The lookup of discovery ("Finding the process that serves QP *n* at GID *g*" in
//! this module's parent): one fixed-size question over a TCP connection to a
//! well-known port of the machine that has GID *g* — "who serves QP *n* at *g*?" — and
//! one fixed-size answer: the UCX listener port of the process that does, or
//! "nobody". Every process of a softverbs namespace with a RoCE-bound device listens
//! on that port with `SO_REUSEPORT` (the kernel shares it among sockets of the same
//! effective user and hands each connection to one of them), and any of them can
//! answer, because the answer comes from the namespace's registry.
//!
//! Both sides bound every step in time and read exactly the message's size, so a peer
//! that sends too little, too much, garbage or nothing costs the listener one bounded
//! wait and a closed connection, never a panic or an allocation by the peer's say.
//!
//! | message | bytes |
//! |---|---|
//! | question ([`QUESTION_LEN`]) | `"VQPL"`, version 1, 3 zero bytes, QPN (big endian, < 2^24), GID (16) |
//! | answer ([`ANSWER_LEN`]) | `"VQPA"`, version 1, status (0 found, 1 nobody), port (big endian, non-zero when found) |

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::sockaddr::to_storage;

/// The lookup port when `VQP_SOFT_UCX_PORT` does not name another (TCP; next to
/// perftest's default 18515).
pub const DEFAULT_PORT: u16 = 18516;
/// Bytes of a question.
pub const QUESTION_LEN: usize = 28;
/// Bytes of an answer.
pub const ANSWER_LEN: usize = 8;

const QUESTION_MAGIC: &[u8; 4] = b"VQPL";
const ANSWER_MAGIC: &[u8; 4] = b"VQPA";
const VERSION: u8 = 1;
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
    /// The answer was not one (wrong magic, version or status, or port 0 when found).
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

/// The answer "served at UCX port `port`", or "nobody" for `None` (or port 0).
fn answer(port: Option<u16>) -> [u8; ANSWER_LEN] {
    let mut a = [0u8; ANSWER_LEN];
    a[..4].copy_from_slice(ANSWER_MAGIC);
    a[4] = VERSION;
    match port.filter(|&p| p != 0) {
        Some(p) => {
            a[5] = FOUND;
            a[6..].copy_from_slice(&p.to_be_bytes());
        }
        None => a[5] = NOBODY,
    }
    a
}

fn parse_answer(a: &[u8; ANSWER_LEN]) -> Result<Option<u16>, LookupError> {
    if &a[..4] != ANSWER_MAGIC || a[4] != VERSION {
        return Err(LookupError::Malformed);
    }
    let port = u16::from_be_bytes([a[6], a[7]]);
    match (a[5], port) {
        (FOUND, p) if p != 0 => Ok(Some(p)),
        (NOBODY, 0) => Ok(None),
        _ => Err(LookupError::Malformed),
    }
}

/// Asks the lookup port at `to` who serves QP `qpn` at `gid`: the UCX port of the
/// process that does, or `None` when nobody there does. Each step (connect, question,
/// answer) takes at most `limit`.
pub fn lookup(
    to: SocketAddr,
    gid: &[u8; 16],
    qpn: u32,
    limit: Duration,
) -> Result<Option<u16>, LookupError> {
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

/// A socket listening at the lookup port of one address, shared with the other
/// processes of the same user (`SO_REUSEPORT`). Non-blocking: [`Listener::serve_ready`]
/// answers the connections waiting now and returns.
#[derive(Debug)]
pub struct Listener {
    sock: TcpListener,
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
        })
    }

    /// The address it listens at.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Its descriptor, readable when a connection waits (for a poll or epoll).
    pub fn fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }

    /// Answers every connection waiting now, one at a time, each reading its question
    /// and writing its answer within `limit`: `serves` says which UCX port serves QP
    /// `qpn` at `gid` (`None`: nobody). A connection that sends no well-formed question
    /// in time is closed unanswered. Returns how many questions were answered.
    pub fn serve_ready(
        &self,
        limit: Duration,
        mut serves: impl FnMut(&[u8; 16], u32) -> Option<u16>,
    ) -> usize {
        let mut answered = 0;
        loop {
            let s = match self.sock.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing waits; anything else (a connection reset before it
                // was taken, out of descriptors): try again at the next readiness.
                Err(_) => return answered,
            };
            if serve_one(s, limit, &mut serves) {
                answered += 1;
            }
        }
    }
}

/// Reads one question from `s` and answers it; whether it did.
fn serve_one(
    mut s: TcpStream,
    limit: Duration,
    serves: &mut impl FnMut(&[u8; 16], u32) -> Option<u16>,
) -> bool {
    let ready = s.set_nonblocking(false).is_ok()
        && s.set_read_timeout(Some(limit)).is_ok()
        && s.set_write_timeout(Some(limit)).is_ok();
    if !ready {
        return false;
    }
    let mut q = [0u8; QUESTION_LEN];
    if s.read_exact(&mut q).is_err() {
        return false;
    }
    let Some((gid, qpn)) = parse_question(&q) else {
        return false;
    };
    let _ = s.set_nodelay(true);
    s.write_all(&answer(serves(&gid, qpn))).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const LIMIT: Duration = Duration::from_millis(300);

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
        let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
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
        assert_eq!(lookup(addr, &gid(1), 7, LIMIT).unwrap(), Some(4000));
        assert_eq!(lookup(addr, &gid(1), 8, LIMIT).unwrap(), None);
        assert_eq!(lookup(addr, &gid(2), 7, LIMIT).unwrap(), None);
        h.join().unwrap();
    }

    #[test]
    fn processes_of_one_user_share_the_port() {
        let a = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = a.local_addr().unwrap();
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
        let mut other_version = question(&gid(1), 7);
        other_version[4] = 2;
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
        // A peer that connects and says nothing holds the listener `LIMIT` at most.
        let stalled = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        assert_eq!(
            lookup(addr, &gid(1), 7, Duration::from_secs(5)).unwrap(),
            Some(4000)
        );
        assert!(t.elapsed() < LIMIT * 3, "took {:?}", t.elapsed());
        drop(stalled);
        h.join().unwrap();
    }

    #[test]
    fn a_lookup_ends_in_bounded_time_without_an_answer() {
        // Nobody listens.
        let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert!(matches!(
            lookup(addr, &gid(1), 7, LIMIT),
            Err(LookupError::Connect(_))
        ));
        // Somebody listens and never answers.
        let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
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
        assert_eq!(parse_answer(&answer(Some(9))).unwrap(), Some(9));
        assert_eq!(parse_answer(&answer(None)).unwrap(), None);
        assert_eq!(parse_answer(&answer(Some(0))).unwrap(), None);
        let mut a = answer(Some(9));
        a[5] = 7;
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        let mut a = answer(None);
        a[7] = 1;
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
        let mut a = answer(Some(9));
        a[6..].copy_from_slice(&[0, 0]);
        assert!(matches!(parse_answer(&a), Err(LookupError::Malformed)));
    }
}
