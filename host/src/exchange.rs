//! Exchanging endpoint cards over TCP, before the QPs are connected.
//!
//! Each side writes its card as one frame — a 4-byte big-endian length, then the
//! card's bytes ([`crate::card`]) — and reads the peer's the same way. Both sides write
//! first and read second, which cannot deadlock: a card (at most 900 bytes) fits any
//! socket buffer. Every read and write has a timeout, so a silent peer is an
//! [`Error::Exchange`] after [`DEFAULT_TIMEOUT`], and a peer that disconnects mid-frame
//! is an [`Error::Exchange`] carrying `UnexpectedEof`; a malformed card is an
//! [`Error::Card`]. Nothing here panics on what the peer sends.
//!
//! ```no_run
//! # fn f(card: &vqp_host::Card) -> vqp_host::Result<()> {
//! // Server side:
//! let (peer, mut stream) = vqp_host::exchange::serve("0.0.0.0:18515", card)?;
//! // ... connect the QPs with `peer`, then wait for the other side to be ready:
//! vqp_host::exchange::barrier(&mut stream)?;
//! # Ok(()) }
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::card::{Card, MAX_LEN};
use crate::error::{Error, Result};

/// How long one exchange waits for the peer by default (each read and write, and
/// [`connect`]'s attempts in total).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest frame accepted: a card of a later format version may be longer than
/// this build's largest, but never this long.
const MAX_FRAME: usize = 64 << 10;

fn io_err(stage: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Exchange { stage, source }
}

/// Sends `mine` and receives the peer's card on `stream`, waiting at most
/// [`DEFAULT_TIMEOUT`] for each read and write.
///
/// # Errors
/// [`Error::Card`] when `mine` cannot be encoded or the peer's card cannot be decoded;
/// [`Error::Exchange`] when the stream fails, times out or is closed mid-frame.
pub fn exchange(stream: &mut TcpStream, mine: &Card) -> Result<Card> {
    exchange_timeout(stream, mine, DEFAULT_TIMEOUT)
}

/// [`exchange`] with another timeout (not zero).
///
/// # Errors
/// As [`exchange`]; a zero timeout is [`Error::InvalidArgument`].
pub fn exchange_timeout(stream: &mut TcpStream, mine: &Card, timeout: Duration) -> Result<Card> {
    if timeout.is_zero() {
        return Err(Error::InvalidArgument {
            what: "exchange timeout must not be zero",
        });
    }
    let card = mine.to_bytes()?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(io_err("set socket options"))?;
    let mut frame = Vec::with_capacity(4 + card.len());
    frame.extend_from_slice(&(card.len() as u32).to_be_bytes());
    frame.extend_from_slice(&card);
    stream
        .write_all(&frame)
        .and_then(|()| stream.flush())
        .map_err(io_err("send this side's card"))?;

    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .map_err(io_err("receive the peer's card length"))?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(Error::Exchange {
            stage: "receive the peer's card length",
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a {len}-byte card is not plausible (at most {MAX_LEN} expected)"),
            ),
        });
    }
    let mut peer = vec![0u8; len];
    stream
        .read_exact(&mut peer)
        .map_err(io_err("receive the peer's card"))?;
    Ok(Card::decode(&peer)?)
}

/// Waits until the peer calls `barrier` too (one byte each way), e.g. after both sides
/// connected their QPs, so that neither sends before the other can receive.
///
/// # Errors
/// [`Error::Exchange`] when the stream fails, times out (the stream's timeouts, which
/// [`exchange`] set) or is closed.
pub fn barrier(stream: &mut TcpStream) -> Result<()> {
    stream
        .write_all(b"R")
        .and_then(|()| stream.flush())
        .map_err(io_err("send the ready byte"))?;
    let mut b = [0u8; 1];
    stream
        .read_exact(&mut b)
        .map_err(io_err("receive the peer's ready byte"))?;
    if b[0] != b'R' {
        return Err(Error::Exchange {
            stage: "receive the peer's ready byte",
            source: io::Error::new(io::ErrorKind::InvalidData, "unexpected byte"),
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

/// Accepts one peer on `listener` and exchanges cards with it.
///
/// # Errors
/// [`Error::Exchange`] when accepting fails, or what [`exchange`] returns.
pub fn serve_on(listener: &TcpListener, mine: &Card) -> Result<(Card, TcpStream)> {
    let (mut stream, _) = listener.accept().map_err(io_err("accept the peer"))?;
    let peer = exchange(&mut stream, mine)?;
    Ok((peer, stream))
}

/// Connects to a peer [`serve`]ing at `addr` — retrying while it is not listening yet,
/// for up to [`DEFAULT_TIMEOUT`] — and exchanges cards with it.
///
/// # Errors
/// [`Error::Exchange`] when `addr` does not resolve or no connection succeeds in time,
/// or what [`exchange`] returns.
pub fn connect(addr: impl ToSocketAddrs, mine: &Card) -> Result<(Card, TcpStream)> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(io_err("resolve the peer's address"))?
        .collect();
    let deadline = Instant::now() + DEFAULT_TIMEOUT;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolved to nothing");
    loop {
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Exchange {
                    stage: "connect to the peer",
                    source: last,
                });
            }
            match TcpStream::connect_timeout(a, left) {
                Ok(mut stream) => {
                    let peer = exchange(&mut stream, mine)?;
                    return Ok((peer, stream));
                }
                Err(e) => last = e,
            }
        }
        if addrs.is_empty() || Instant::now() >= deadline {
            return Err(Error::Exchange {
                stage: "connect to the peer",
                source: last,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
