//! Exchanging endpoint cards over TCP, before the QPs are connected.
//!
//! # Protocol
//! 1. Each side sends its card as one frame: a 4-byte big-endian length, then the
//!    card's bytes ([`crate::card`]).
//! 2. Each side reads the peer's frame (a length above 64 KiB is refused before
//!    anything is allocated), decodes it and checks it against its own with
//!    [`Card::agree`], which checks both directions.
//! 3. Each side sends its verdict: the byte `A` (accept), or the byte `N`, a 2-byte
//!    big-endian length (at most [`MAX_REASON`]) and the reason as UTF-8 text — the
//!    refusing side's own error message.
//! 4. Each side reads the peer's verdict. The exchange succeeds only when both sides
//!    accepted. A side that refused returns its own reason ([`Error::Card`]); a side
//!    that accepted a card whose owner refused it returns the peer's reason
//!    ([`Error::PeerRefused`]).
//!
//! Because [`Card::agree`] is symmetric, a mismatch (a mode, a depth, a capability
//! one side requires) is refused by both sides, each naming it from its own point of
//! view. The verdict covers the rest: a card only one side cannot read (an unknown
//! version or flag, a malformed field from another implementation) is refused with
//! the reader's reason on both sides, instead of one side refusing and the other
//! seeing a disconnect. Both sides write before they read at each step, which cannot
//! deadlock: a card (at most 900 bytes) and a verdict fit any socket buffer.
//!
//! After the QPs are connected, [`barrier`] sends one byte `R` each way.
//!
//! # Deadlines
//! Each message from the peer must arrive whole before its deadline, not just each
//! read: the card frame within the timeout of this side starting to send its card,
//! the verdict within the timeout after that, the ready byte within the barrier's
//! timeout ([`DEFAULT_TIMEOUT`] unless told). A peer that trickles bytes is cut off
//! at the deadline ([`Error::PeerTimeout`]); one that closes mid-message is
//! [`Error::PeerClosed`], saying how many of how many bytes arrived; a malformed card
//! is [`Error::Card`]. [`DeadlineStream`] does this, and is public for other
//! messages on the same connection. Nothing here panics on what the peer sends.
//!
//! ```no_run
//! # fn f(card: &vqp_host::Card) -> vqp_host::Result<()> {
//! // Server side:
//! let (peer, mut stream) = vqp_host::exchange::serve("0.0.0.0:18515", card)?;
//! // ... connect the QPs with `peer`, then wait for the other side to be ready:
//! vqp_host::exchange::barrier(&mut stream)?;
//! # Ok(()) }
//! ```

mod deadline;

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::card::Card;
use crate::error::{Error, Result};

pub use deadline::DeadlineStream;

/// How long each message of an exchange waits for the peer by default, and
/// [`connect`]'s attempts in total.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest card frame accepted: a card of a later format version may be longer
/// than this build's largest, but never this long.
pub const MAX_FRAME: usize = 64 << 10;

/// The longest refusal reason sent or accepted, in bytes; a longer reason is cut at
/// a character boundary before it is sent.
pub const MAX_REASON: usize = 512;

/// Verdict: the peer's card is accepted.
const ACCEPT: u8 = b'A';
/// Verdict: the peer's card is refused; a 2-byte length and the reason follow.
const REFUSE: u8 = b'N';
/// The barrier's byte.
const READY: u8 = b'R';

fn io_err(stage: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Exchange { stage, source }
}

/// Sends `mine` and receives the peer's card on `stream`, each side checking the
/// other's and telling it its verdict, each message within [`DEFAULT_TIMEOUT`].
///
/// # Errors
/// As [`exchange_timeout`].
pub fn exchange(stream: &mut TcpStream, mine: &Card) -> Result<Card> {
    exchange_timeout(stream, mine, DEFAULT_TIMEOUT)
}

/// [`exchange`] with another timeout (not zero) for each message. On return the
/// stream's read and write timeouts are `timeout` per operation, for what the caller
/// sends on it next.
///
/// # Errors
/// [`Error::Card`] when `mine` cannot be encoded (nothing is sent), or the peer's card
/// cannot be decoded or does not agree with `mine` (the peer is told why);
/// [`Error::PeerRefused`] when the peer refused `mine`, with its reason;
/// [`Error::PeerTimeout`], [`Error::PeerClosed`], [`Error::PeerTooLong`],
/// [`Error::PeerMalformed`] or [`Error::PeerIo`] when a message does not pass;
/// [`Error::InvalidArgument`] for a zero timeout.
pub fn exchange_timeout(stream: &mut TcpStream, mine: &Card, timeout: Duration) -> Result<Card> {
    if timeout.is_zero() {
        return Err(Error::InvalidArgument {
            what: "exchange timeout must not be zero",
        });
    }
    let card = mine.to_bytes()?;
    stream
        .set_nodelay(true)
        .map_err(io_err("set socket options"))?;
    let peer = swap(stream, mine, &card, timeout);
    let restored = stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io_err("set socket options"));
    let peer = peer?;
    restored?;
    Ok(peer)
}

/// Steps 1 to 4 of the protocol: `card` is `mine` encoded.
fn swap(stream: &TcpStream, mine: &Card, card: &[u8], timeout: Duration) -> Result<Card> {
    let mut frame = Vec::with_capacity(4 + card.len());
    // `card` is at most MAX_LEN (900) bytes.
    frame.extend_from_slice(&(card.len() as u32).to_be_bytes());
    frame.extend_from_slice(card);
    let mut io = DeadlineStream::new(stream, timeout)?;
    io.write_all(&frame, "card")?;
    let bytes = match io.read_frame(MAX_FRAME, "card") {
        Ok(bytes) => bytes,
        Err(e @ Error::PeerTooLong { .. }) => {
            // Not a card: say why, best effort (what follows it is not read).
            let _ = send_verdict(&mut io, Some(&e.to_string()));
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let ours = Card::decode(&bytes).and_then(|peer| mine.agree(&peer).map(|()| peer));

    let mut io = DeadlineStream::new(stream, timeout)?;
    let reason = ours.as_ref().err().map(|e| e.to_string());
    let sent = send_verdict(&mut io, reason.as_deref());
    // Read the peer's verdict even after refusing: both sides then close with
    // nothing unread, and the peer's read of ours is not cut short by a reset.
    let theirs = sent.and_then(|()| read_verdict(&mut io));
    match (ours, theirs) {
        (Err(e), _) => Err(e.into()),
        (Ok(_), Err(e)) => Err(e),
        (Ok(peer), Ok(())) => Ok(peer),
    }
}

/// Sends `A`, or `N` and `reason` (cut to [`MAX_REASON`] bytes).
fn send_verdict(io: &mut DeadlineStream<'_>, reason: Option<&str>) -> Result<()> {
    let Some(reason) = reason else {
        return io.write_all(&[ACCEPT], "verdict");
    };
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let text = &reason.as_bytes()[..end];
    let mut msg = Vec::with_capacity(3 + end);
    msg.push(REFUSE);
    // `end` ≤ MAX_REASON (512).
    msg.extend_from_slice(&(end as u16).to_be_bytes());
    msg.extend_from_slice(text);
    io.write_all(&msg, "verdict")
}

/// Reads the peer's verdict: `Ok` when it accepted, [`Error::PeerRefused`] with its
/// reason when it refused.
fn read_verdict(io: &mut DeadlineStream<'_>) -> Result<()> {
    let mut tag = [0u8; 1];
    io.fill(&mut tag, "verdict", 0, None)?;
    match tag[0] {
        ACCEPT => Ok(()),
        REFUSE => {
            let mut len = [0u8; 2];
            io.fill(&mut len, "verdict", 1, None)?;
            let len = usize::from(u16::from_be_bytes(len));
            if len > MAX_REASON {
                return Err(Error::PeerTooLong {
                    what: "refusal reason",
                    len: Some(len as u64),
                    limit: MAX_REASON,
                });
            }
            let mut text = vec![0u8; len];
            io.fill(&mut text, "verdict", 3, Some(3 + len))?;
            Err(Error::PeerRefused {
                reason: printable(&text),
            })
        }
        other => Err(Error::PeerMalformed {
            what: "verdict",
            detail: format!("expected 'A' or 'N', got byte {other:#04x}"),
        }),
    }
}

/// The peer's text, safe to print: invalid UTF-8 replaced, control characters
/// escaped (no terminal escapes from a peer in our logs).
fn printable(text: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for c in String::from_utf8_lossy(text).chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits until the peer calls `barrier` too (one byte each way), e.g. after both sides
/// connected their QPs, so that neither sends before the other can receive. The byte
/// must arrive within the stream's read timeout — which [`exchange`] leaves at its
/// timeout — taken as one deadline, or [`DEFAULT_TIMEOUT`] when the stream has none.
///
/// # Errors
/// As [`barrier_timeout`].
pub fn barrier(stream: &mut TcpStream) -> Result<()> {
    let timeout = match stream.read_timeout() {
        Ok(Some(t)) => t,
        _ => DEFAULT_TIMEOUT,
    };
    barrier_timeout(stream, timeout)
}

/// [`barrier`] with its deadline `timeout` (not zero) from now. The stream's timeouts
/// are left as they were.
///
/// # Errors
/// [`Error::PeerTimeout`], [`Error::PeerClosed`] or [`Error::PeerIo`] when the byte
/// does not pass; [`Error::PeerMalformed`] when the peer sends another byte;
/// [`Error::InvalidArgument`] for a zero timeout.
pub fn barrier_timeout(stream: &mut TcpStream, timeout: Duration) -> Result<()> {
    let mut io = DeadlineStream::new(stream, timeout)?;
    io.write_all(&[READY], "ready byte")?;
    let mut b = [0u8; 1];
    io.read_exact(&mut b, "ready byte")?;
    if b[0] != READY {
        return Err(Error::PeerMalformed {
            what: "ready byte",
            detail: format!("expected 'R', got byte {:#04x}", b[0]),
        });
    }
    Ok(())
}

/// Binds `addr`, accepts one peer and exchanges cards with it; returns the peer's card
/// and the stream (for [`barrier`]).
///
/// # Errors
/// [`Error::Exchange`] when binding or accepting fails, or what [`exchange`] returns.
pub fn serve(addr: impl ToSocketAddrs, mine: &Card) -> Result<(Card, TcpStream)> {
    let listener = TcpListener::bind(addr).map_err(io_err("bind the listening socket"))?;
    serve_on(&listener, mine)
}

/// Accepts one peer on `listener` (waiting for one as long as it takes) and
/// exchanges cards with it.
///
/// # Errors
/// [`Error::Exchange`] when accepting fails, or what [`exchange`] returns.
pub fn serve_on(listener: &TcpListener, mine: &Card) -> Result<(Card, TcpStream)> {
    serve_on_timeout(listener, mine, DEFAULT_TIMEOUT)
}

/// [`serve_on`] with another timeout for each message of the exchange.
///
/// # Errors
/// As [`serve_on`], or what [`exchange_timeout`] returns.
pub fn serve_on_timeout(
    listener: &TcpListener,
    mine: &Card,
    timeout: Duration,
) -> Result<(Card, TcpStream)> {
    let (mut stream, _) = listener.accept().map_err(io_err("accept the peer"))?;
    let peer = exchange_timeout(&mut stream, mine, timeout)?;
    Ok((peer, stream))
}

/// Connects to a peer [`serve`]ing at `addr` — retrying while it is not listening yet,
/// for up to [`DEFAULT_TIMEOUT`] in all — and exchanges cards with it.
///
/// # Errors
/// [`Error::Exchange`] when `addr` does not resolve or no connection succeeds in time,
/// or what [`exchange`] returns.
pub fn connect(addr: impl ToSocketAddrs, mine: &Card) -> Result<(Card, TcpStream)> {
    connect_timeout(addr, mine, DEFAULT_TIMEOUT)
}

/// [`connect`] with another timeout (not zero), for the attempts in all and for each
/// message of the exchange.
///
/// # Errors
/// As [`connect`]; [`Error::InvalidArgument`] for a zero timeout.
pub fn connect_timeout(
    addr: impl ToSocketAddrs,
    mine: &Card,
    timeout: Duration,
) -> Result<(Card, TcpStream)> {
    if timeout.is_zero() {
        return Err(Error::InvalidArgument {
            what: "exchange timeout must not be zero",
        });
    }
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(io_err("resolve the peer's address"))?
        .collect();
    let start = Instant::now();
    let mut last = std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "the address resolved to nothing",
    );
    loop {
        for a in &addrs {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(Error::Exchange {
                    stage: "connect to the peer",
                    source: last,
                });
            }
            match TcpStream::connect_timeout(a, left) {
                Ok(mut stream) => {
                    let peer = exchange_timeout(&mut stream, mine, timeout)?;
                    return Ok((peer, stream));
                }
                Err(e) => last = e,
            }
        }
        if addrs.is_empty() || start.elapsed() >= timeout {
            return Err(Error::Exchange {
                stage: "connect to the peer",
                source: last,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
