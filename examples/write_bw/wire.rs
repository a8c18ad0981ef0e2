//! What the two sides say over their TCP connection before the run, each message
//! with a deadline for the whole of it.
//!
//! In order: the client's parameter line and the server's `ok` or `error MESSAGE`
//! line; the endpoint cards (a 4-byte big-endian length and the card, as
//! `vqp_host::exchange` frames them); each side's buffer (address, length, rkey);
//! the barrier (one `R` byte each way). The run's own frames are in `control`.
//!
//! A socket's read timeout bounds one read, not a message: a peer that sends one byte
//! every 9 s would pass a 10 s timeout for ever. So every message here is read
//! against a deadline taken when it is awaited, and the peer has `timeout` for all of
//! it. Errors say which message, from whom, and how much of it came ("no parameters
//! from the client within 10 s", "the client closed the connection after 37 of 412
//! bytes of its endpoint card"), never a bare OS error.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use vqp_host::Card;

use crate::args::show_secs;
use crate::control::Control;
use crate::params::MAX_DEVICES;
use crate::{sigint, Fail};

/// The longest card frame accepted: a card of a later format version may be longer
/// than this build's largest (900 bytes), never this long (as `vqp_host::exchange`).
const MAX_CARD: usize = 64 << 10;
/// The longest text line (the parameters, the server's answer).
const MAX_LINE: usize = 512;
/// How often a blocked read looks at Ctrl-C.
const TICK: Duration = Duration::from_millis(100);

/// The connection to the peer before the run.
pub struct Wire {
    s: TcpStream,
    /// Who is at the other end (`client` or `server`), for messages.
    peer: &'static str,
    /// What the peer gets for each message as a whole.
    timeout: Duration,
}

/// Why a read stopped short.
enum Stop {
    /// The peer closed (or reset) the connection.
    Closed,
    /// The message's deadline passed.
    Late,
    /// Any other failure, which is passed on.
    Fail(Fail),
}

impl Wire {
    /// Wraps a connected stream; `peer` names the other side in messages.
    pub fn new(s: TcpStream, peer: &'static str, timeout: Duration) -> Result<Wire, Fail> {
        s.set_nodelay(true)
            .and_then(|()| s.set_write_timeout(Some(timeout)))
            .map_err(|e| Fail::bad(format!("cannot set up the TCP connection: {e}")))?;
        Ok(Wire { s, peer, timeout })
    }

    /// How long the peer gets for each message and for progress during the run.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The stream, for the run's non-blocking frames.
    pub fn into_control(self) -> Result<Control, Fail> {
        Control::new(self.s, self.peer)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// The error for the message `what` that stopped after `got` bytes of `len`
    /// (`None`: a line, whose length is not known).
    fn stopped(&self, why: Stop, what: &str, got: usize, len: Option<usize>) -> Fail {
        let (peer, t) = (self.peer, show_secs(self.timeout));
        Fail::peer(match (why, got, len) {
            (Stop::Fail(f), ..) => return f,
            (Stop::Closed, 0, _) => {
                format!("the {peer} closed the connection before sending its {what}")
            }
            (Stop::Closed, n, Some(len)) => {
                format!("the {peer} closed the connection after {n} of {len} bytes of its {what}")
            }
            (Stop::Closed, n, None) => format!(
                "the {peer} closed the connection after {n} bytes of its {what}, before the end of the line"
            ),
            (Stop::Late, 0, _) => format!("no {what} from the {peer} within {t}"),
            (Stop::Late, n, Some(len)) => format!(
                "no complete {what} from the {peer} within {t} ({n} of {len} bytes arrived)"
            ),
            (Stop::Late, n, None) => format!(
                "no complete {what} from the {peer} within {t} ({n} bytes arrived, no end of line)"
            ),
        })
    }

    /// Reads into `buf[*got..]` until it is full or `deadline` passes; `*got` counts
    /// what arrived.
    fn fill(
        &mut self,
        buf: &mut [u8],
        got: &mut usize,
        deadline: Instant,
        what: &str,
    ) -> Result<(), Stop> {
        while *got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Stop::Late);
            }
            if sigint::interrupted() {
                return Err(Stop::Fail(Fail::bad(format!(
                    "interrupted while waiting for the {}'s {what}",
                    self.peer
                ))));
            }
            self.s.set_read_timeout(Some(left.min(TICK))).map_err(|e| {
                Stop::Fail(Fail::bad(format!("cannot set up the TCP connection: {e}")))
            })?;
            match self.s.read(&mut buf[*got..]) {
                Ok(0) => return Err(Stop::Closed),
                Ok(n) => *got += n,
                Err(e) => match e.kind() {
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted => {}
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                        return Err(Stop::Closed)
                    }
                    _ => {
                        return Err(Stop::Fail(Fail::peer(format!(
                        "the TCP connection to the {} failed while we waited for its {what}: {e}",
                        self.peer
                    ))))
                    }
                },
            }
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes, all of the message (or message part) `what`, by
    /// `deadline`.
    fn part(&mut self, buf: &mut [u8], deadline: Instant, what: &str) -> Result<(), Fail> {
        let mut got = 0;
        self.fill(buf, &mut got, deadline, what)
            .map_err(|why| self.stopped(why, what, got, Some(buf.len())))
    }

    /// Reads a message of exactly `buf.len()` bytes, all within the timeout.
    pub fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), Fail> {
        let deadline = self.deadline();
        self.part(buf, deadline, what)
    }

    /// Reads one `\n`-terminated line (at most 512 bytes), byte by byte so that nothing
    /// after it is consumed, all within the timeout.
    pub fn read_line(&mut self, what: &str) -> Result<String, Fail> {
        let deadline = self.deadline();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while line.len() < MAX_LINE {
            self.fill(&mut b, &mut 0, deadline, what)
                .map_err(|why| self.stopped(why, what, line.len(), None))?;
            if b[0] == b'\n' {
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            line.push(b[0]);
        }
        Err(Fail::bad(format!(
            "the {} sent an over-long line ({MAX_LINE} bytes, no end) as its {what}",
            self.peer
        )))
    }

    /// Sends `bytes` (our `what`); the peer must take it within the timeout.
    pub fn write_all(&mut self, bytes: &[u8], what: &str) -> Result<(), Fail> {
        let peer = self.peer;
        self.s
            .write_all(bytes)
            .and_then(|()| self.s.flush())
            .map_err(|e| match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => Fail::peer(format!(
                    "the {peer} did not take our {what} within {}",
                    show_secs(self.timeout)
                )),
                ErrorKind::BrokenPipe
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof => Fail::peer(format!(
                    "the {peer} closed the connection before we sent our {what}"
                )),
                _ => Fail::peer(format!(
                    "the TCP connection to the {peer} failed while we sent our {what}: {e}"
                )),
            })
    }

    /// Sends our endpoint card and reads the peer's, framed as `vqp_host::exchange`
    /// frames them; the peer's frame (length and card) must come within the timeout.
    pub fn swap_cards(&mut self, mine: &Card) -> Result<Card, Fail> {
        let card = mine
            .to_bytes()
            .map_err(|e| Fail::bad(format!("cannot encode our endpoint card: {e}")))?;
        let mut frame = Vec::with_capacity(4 + card.len());
        frame.extend_from_slice(&(card.len() as u32).to_be_bytes());
        frame.extend_from_slice(&card);
        self.write_all(&frame, "endpoint card")?;
        let deadline = self.deadline();
        let mut len = [0u8; 4];
        self.part(&mut len, deadline, "endpoint card's length")?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_CARD {
            return Err(Fail::bad(format!(
                "the {} announced a {len}-byte endpoint card; a card is at most {MAX_CARD} bytes",
                self.peer
            )));
        }
        let mut peer = vec![0u8; len];
        self.part(&mut peer, deadline, "endpoint card")?;
        Card::decode(&peer)
            .map_err(|e| Fail::bad(format!("the {}'s endpoint card: {e}", self.peer)))
    }

    /// Sends ours and receives the peer's buffer description: address, length and the
    /// rkey on each of the run's `devices` devices (both sides know how many).
    pub fn swap_buffers(&mut self, mine: Remote, devices: usize) -> Result<Remote, Fail> {
        let n = 16 + 4 * devices.clamp(1, MAX_DEVICES);
        let mut out = [0u8; 16 + 4 * MAX_DEVICES];
        out[..8].copy_from_slice(&mine.addr.to_be_bytes());
        out[8..16].copy_from_slice(&mine.len.to_be_bytes());
        for (d, key) in std::iter::once(mine.rkey).chain(mine.more).enumerate() {
            out[16 + 4 * d..20 + 4 * d].copy_from_slice(&key.to_be_bytes());
        }
        self.write_all(&out[..n], "buffer description")?;
        let mut b = [0u8; 16 + 4 * MAX_DEVICES];
        self.read_exact(&mut b[..n], "buffer description")?;
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let mut more = [0u32; MAX_DEVICES - 1];
        for (d, k) in more.iter_mut().enumerate() {
            *k = u32_at(20 + 4 * d);
        }
        Ok(Remote {
            addr: u64_at(0),
            len: u64_at(8),
            rkey: u32_at(16),
            more,
        })
    }

    /// Waits until the peer is ready too (one `R` byte each way, as
    /// `vqp_host::exchange::barrier`), within the timeout.
    pub fn barrier(&mut self) -> Result<(), Fail> {
        self.write_all(b"R", "ready byte")?;
        let mut b = [0u8; 1];
        self.read_exact(&mut b, "ready byte")?;
        if b[0] != b'R' {
            return Err(Fail::bad(format!(
                "the {} sent {:#04x} where its ready byte belongs",
                self.peer, b[0]
            )));
        }
        Ok(())
    }
}

/// A buffer the peer may read or write.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub addr: u64,
    pub len: u64,
    /// The buffer's rkey on device 0.
    pub rkey: u32,
    /// Its rkeys on devices 1, 2, … (as many as the run has devices, less one).
    pub more: [u32; MAX_DEVICES - 1],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A connected pair: ours (wrapped, with `timeout`) and the peer's raw stream.
    fn pair(timeout: Duration) -> (Wire, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, _) = l.accept().unwrap();
        (Wire::new(ours, "client", timeout).unwrap(), peer)
    }

    const SHORT: Duration = Duration::from_millis(300);

    #[test]
    fn silence_is_a_timeout_that_names_the_message() {
        let (mut w, _peer) = pair(SHORT);
        let f = w.read_line("parameters").unwrap_err();
        assert_eq!(f.msg, "no parameters from the client within 0.3 s");
        assert!(f.peer);
    }

    #[test]
    fn a_trickling_peer_gets_one_deadline_for_the_whole_message() {
        let (mut w, mut peer) = pair(SHORT);
        // One byte every 50 ms: each read succeeds well within the timeout, but the
        // line would take 2 s.
        let t = thread::spawn(move || {
            for b in b"write_bw/2 size=4096 qps=4 junk junk".iter() {
                if peer.write_all(&[*b]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        let start = Instant::now();
        let f = w.read_line("parameters").unwrap_err();
        let took = start.elapsed();
        assert!(took < Duration::from_millis(900), "took {took:?}");
        assert!(
            f.msg
                .starts_with("no complete parameters from the client within 0.3 s ("),
            "{}",
            f.msg
        );
        assert!(
            f.msg.ends_with(" bytes arrived, no end of line)"),
            "{}",
            f.msg
        );
        drop(w);
        t.join().unwrap();
    }

    #[test]
    fn a_close_mid_card_says_how_much_came() {
        let (mut w, mut peer) = pair(Duration::from_secs(5));
        let t = thread::spawn(move || {
            // Read our card, announce 412 bytes, send 37, close.
            let mut len = [0u8; 4];
            peer.read_exact(&mut len).unwrap();
            let mut card = vec![0u8; u32::from_be_bytes(len) as usize];
            peer.read_exact(&mut card).unwrap();
            peer.write_all(&412u32.to_be_bytes()).unwrap();
            peer.write_all(&[0u8; 37]).unwrap();
        });
        let card = sample_card();
        let f = w.swap_cards(&card).unwrap_err();
        t.join().unwrap();
        assert_eq!(
            f.msg,
            "the client closed the connection after 37 of 412 bytes of its endpoint card"
        );
    }

    #[test]
    fn a_close_before_or_inside_a_line_is_told_apart() {
        let (mut w, peer) = pair(Duration::from_secs(5));
        drop(peer);
        assert_eq!(
            w.read_line("parameters").unwrap_err().msg,
            "the client closed the connection before sending its parameters"
        );
        let (mut w, mut peer) = pair(Duration::from_secs(5));
        peer.write_all(b"write_bw").unwrap();
        drop(peer);
        assert_eq!(
            w.read_line("parameters").unwrap_err().msg,
            "the client closed the connection after 8 bytes of its parameters, before the end of the line"
        );
    }

    #[test]
    fn an_implausible_card_length_is_refused_before_allocating() {
        let (mut w, mut peer) = pair(Duration::from_secs(5));
        peer.write_all(&u32::MAX.to_be_bytes()).unwrap();
        let f = w.swap_cards(&sample_card()).unwrap_err();
        assert!(f.msg.contains("4294967295-byte endpoint card"), "{}", f.msg);
    }

    #[test]
    fn a_well_formed_exchange_passes() {
        let (mut w, peer) = pair(Duration::from_secs(5));
        let t = thread::spawn(move || {
            let mut p = Wire::new(peer, "server", Duration::from_secs(5)).unwrap();
            let card = p.swap_cards(&sample_card()).unwrap();
            p.write_all(b"ok\n", "answer").unwrap();
            let r = p
                .swap_buffers(
                    Remote {
                        addr: 1,
                        len: 2,
                        rkey: 3,
                        more: [0; MAX_DEVICES - 1],
                    },
                    1,
                )
                .unwrap();
            p.barrier().unwrap();
            (card, r)
        });
        let card = w.swap_cards(&sample_card()).unwrap();
        assert_eq!(w.read_line("answer").unwrap(), "ok");
        let r = w
            .swap_buffers(
                Remote {
                    addr: 4,
                    len: 5,
                    rkey: 6,
                    more: [0; MAX_DEVICES - 1],
                },
                1,
            )
            .unwrap();
        w.barrier().unwrap();
        let (theirs, r2) = t.join().unwrap();
        assert_eq!(card, sample_card());
        assert_eq!(theirs, sample_card());
        assert_eq!((r.addr, r.len, r.rkey), (1, 2, 3));
        assert_eq!((r2.addr, r2.len, r2.rkey), (4, 5, 6));
    }

    /// A valid card with two data QPs.
    fn sample_card() -> Card {
        use vqp_host::{Capabilities, PortAddr, QpAddr};
        let mode = vqp_core::Mode::Dqplb;
        Card {
            mode,
            caps: Capabilities::supported(),
            required: Capabilities::required_for(mode),
            max_frag: 4096,
            max_outstanding: 64,
            recv_depth: 64,
            window: 2048,
            init_seq: 7,
            ports: vec![PortAddr {
                mtu: 4096,
                lid: 1,
                ..PortAddr::default()
            }],
            data: (0..2)
                .map(|i| QpAddr {
                    qpn: 0x100 + i,
                    psn: i,
                    port: 0,
                })
                .collect(),
            notify: None,
        }
    }
}
