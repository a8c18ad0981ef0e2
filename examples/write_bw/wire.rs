//! What the two sides say over their TCP connection besides the endpoint cards.
//!
//! Before the run (blocking, with timeouts): the client's parameter line and the
//! server's `ok` or `error MESSAGE` line; then the cards (`vqp_host::exchange`); then
//! each side's buffer (address, length, rkey); then the barrier.
//!
//! During the run (non-blocking), frames of 9 bytes: a tag and a big-endian u64.
//! - client → server `D n`: plain writes: messages below n completed at the sender.
//! - client → server `E n`: the client stopped after n messages, all completed.
//! - server → client `V n`: messages below n were verified (their slots are free again).
//! - server → client `S 0`: Ctrl-C at the server; the client stops posting.
//! - server → client `F n`: message n failed the data check.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::Fail;

pub const DONE: u8 = b'D';
pub const END: u8 = b'E';
pub const VERIFIED: u8 = b'V';
pub const STOP: u8 = b'S';
pub const FAILED: u8 = b'F';

/// How long a blocking step waits for the peer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

fn io_fail(what: &str, e: std::io::Error) -> Fail {
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            Fail::peer(format!("the peer disconnected while we {what}"))
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Fail::peer(format!(
            "the peer did not answer in {TIMEOUT:?} while we {what}"
        )),
        _ => Fail::bad(format!("TCP connection failed while we {what}: {e}")),
    }
}

/// Reads one `\n`-terminated line (at most 512 bytes), byte by byte so that nothing
/// after it is consumed.
pub fn read_line(s: &mut TcpStream, what: &str) -> Result<String, Fail> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.len() < 512 {
        s.read_exact(&mut b).map_err(|e| io_fail(what, e))?;
        if b[0] == b'\n' {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(b[0]);
    }
    Err(Fail::bad(format!(
        "the peer sent an over-long line while we {what}"
    )))
}

pub fn write_all(s: &mut TcpStream, bytes: &[u8], what: &str) -> Result<(), Fail> {
    s.write_all(bytes).map_err(|e| io_fail(what, e))
}

/// A buffer the peer may read or write.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub addr: u64,
    pub len: u64,
    pub rkey: u32,
}

/// Sends ours and receives the peer's buffer description.
pub fn swap_buffers(s: &mut TcpStream, mine: Remote) -> Result<Remote, Fail> {
    let mut out = [0u8; 20];
    out[..8].copy_from_slice(&mine.addr.to_be_bytes());
    out[8..16].copy_from_slice(&mine.len.to_be_bytes());
    out[16..].copy_from_slice(&mine.rkey.to_be_bytes());
    write_all(s, &out, "sent our buffer's address")?;
    let mut b = [0u8; 20];
    s.read_exact(&mut b)
        .map_err(|e| io_fail("waited for the peer's buffer address", e))?;
    let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    Ok(Remote {
        addr: u64_at(0),
        len: u64_at(8),
        rkey: u32::from_be_bytes(b[16..].try_into().unwrap_or([0; 4])),
    })
}

/// The run-time channel: non-blocking frames in and out.
pub struct Control {
    s: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Control {
    pub fn new(s: TcpStream) -> Result<Self, Fail> {
        s.set_nonblocking(true)
            .map_err(|e| Fail::bad(format!("cannot make the TCP connection non-blocking: {e}")))?;
        Ok(Control {
            s,
            input: Vec::with_capacity(64),
            output: Vec::with_capacity(64),
        })
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
                Ok(0) => return Err(Fail::peer("the peer disconnected")),
                Ok(n) => {
                    self.output.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_fail("sent a frame", e)),
            }
        }
        Ok(())
    }

    /// The next frame, if one has arrived. The peer closing the connection is an
    /// error (`Fail::peer`).
    pub fn recv(&mut self) -> Result<Option<(u8, u64)>, Fail> {
        if self.input.len() < 9 {
            let mut b = [0u8; 256];
            match self.s.read(&mut b) {
                Ok(0) => return Err(Fail::peer("the peer disconnected")),
                Ok(n) => self.input.extend_from_slice(&b[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(io_fail("waited for a frame", e)),
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

impl Control {
    /// Whether every queued frame was handed to the socket.
    pub fn flushed(&self) -> bool {
        self.output.is_empty()
    }
}
