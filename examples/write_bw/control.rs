//! The run's control channel: non-blocking frames of 9 bytes, a tag and a big-endian
//! u64, over the TCP connection the set-up used (`wire`).
//!
//! - client → server `D n`: messages below n completed at the client (write: the
//!   server may check them; read: progress, at least every 10 ms while messages
//!   complete, so that the server sees the run move).
//! - client → server `E n`: the client stopped after n messages, all completed.
//! - client → server `P n`, `L n`, `U n`, then `X n`: the client's virtual QP failed
//!   (or the server said its own did); of the n posted (`P`), n completed after the
//!   first failure (`L`) and n completed with an error (`U`), and the first n
//!   completed in order (`X`, which closes the count; see `tally`).
//! - server → client `X n`: the server's virtual QP failed with status n; the client
//!   stops and sends its count as above.
//!
//! The count's `P`, `L`, `U` frames and the server's `X` came after `write_bw/2` was
//! named (`params`): a server takes an `X` without them as a count with nothing after
//! the prefix, and the frames are sent only once a run has failed, so builds from
//! before them still agree on every run that does not fail.
//! - server → client `V n`: messages below n were verified (their slots are free again).
//! - `S 0`, either way: Ctrl-C on the sender's side; the client stops posting.
//! - server → client `F n`: message n failed the data check.
//! - `J m`, either way (`--failover`): a fail-back message, its 8 bytes as `m`
//!   (see `failback`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use crate::Fail;

pub const DONE: u8 = b'D';
pub const END: u8 = b'E';
pub const QP_FAILED: u8 = b'X';
pub const POSTED: u8 = b'P';
pub const LATER: u8 = b'L';
pub const FLUSHED: u8 = b'U';
pub const VERIFIED: u8 = b'V';
pub const STOP: u8 = b'S';
pub const FAILED: u8 = b'F';
pub const FAILBACK: u8 = b'J';

/// The run-time channel: non-blocking frames in and out.
pub struct Control {
    s: TcpStream,
    /// Who is at the other end, for messages.
    peer: &'static str,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Control {
    pub fn new(s: TcpStream, peer: &'static str) -> Result<Self, Fail> {
        s.set_nonblocking(true)
            .map_err(|e| Fail::bad(format!("cannot make the TCP connection non-blocking: {e}")))?;
        Ok(Control {
            s,
            peer,
            input: Vec::with_capacity(64),
            output: Vec::with_capacity(64),
        })
    }

    fn closed(&self) -> Fail {
        Fail::peer(match self.input.len() {
            0 => format!("the {} closed the connection", self.peer),
            n => format!(
                "the {} closed the connection after {n} of the 9 bytes of a frame",
                self.peer
            ),
        })
    }

    fn broken(&self, e: std::io::Error) -> Fail {
        match e.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => self.closed(),
            _ => Fail::peer(format!(
                "the TCP connection to the {} failed: {e}",
                self.peer
            )),
        }
    }

    /// Queues a frame and sends what the socket takes.
    pub fn send(&mut self, tag: u8, n: u64) -> Result<(), Fail> {
        self.output.push(tag);
        self.output.extend_from_slice(&n.to_be_bytes());
        self.flush()
    }

    /// Sends what is queued, as far as the socket takes it now.
    pub fn flush(&mut self) -> Result<(), Fail> {
        while !self.output.is_empty() {
            match self.s.write(&self.output) {
                Ok(0) => return Err(self.closed()),
                Ok(n) => {
                    self.output.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.broken(e)),
            }
        }
        Ok(())
    }

    /// Whether every queued frame was handed to the socket.
    pub fn flushed(&self) -> bool {
        self.output.is_empty()
    }

    /// Ends the conversation in order, waiting at most `wait`: sends what is queued,
    /// closes our direction, and reads (and drops) what the peer still sends until it
    /// closes too. Closing with unread input would reset the connection, and a reset
    /// can discard our last frames before the peer reads them. Errors are ignored:
    /// the peer may already be gone.
    pub fn finish(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        while !self.flushed() && Instant::now() < until {
            if self.flush().is_err() {
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        if self.s.shutdown(Shutdown::Write).is_err() {
            return;
        }
        let mut b = [0u8; 256];
        while Instant::now() < until {
            match self.s.read(&mut b) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    std::thread::sleep(Duration::from_micros(50))
                }
                Err(_) => return,
            }
        }
    }

    /// The next frame, if one has arrived. The peer closing the connection is an
    /// error (`Fail::peer`).
    pub fn recv(&mut self) -> Result<Option<(u8, u64)>, Fail> {
        if self.input.len() < 9 {
            let mut b = [0u8; 256];
            match self.s.read(&mut b) {
                Ok(0) => return Err(self.closed()),
                Ok(n) => self.input.extend_from_slice(&b[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(self.broken(e)),
            }
        }
        if self.input.len() < 9 {
            return Ok(None);
        }
        let tag = self.input[0];
        let n = u64::from_be_bytes(self.input[1..9].try_into().unwrap_or([0; 8]));
        self.input.drain(..9);
        Ok(Some((tag, n)))
    }
}
