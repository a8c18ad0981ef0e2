//! [`DeadlineStream`]: one deadline for a whole message on a blocking TCP stream.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, Secs};

/// Bytes [`DeadlineStream::read_line`] looks at per peek.
const LINE_CHUNK: usize = 256;

/// A blocking [`TcpStream`] whose reads and writes share one deadline.
///
/// A socket timeout bounds each `read`, so a peer that sends one byte just inside it
/// can stretch a message without end (one byte every 9 s under a 10 s timeout holds a
/// 64 KiB frame for a week). Before every read or write this sets the socket's timeout
/// to the time left until the deadline, so a whole message — however the peer splits
/// it — gets `timeout` and no more. Make one per message (or per group of messages
/// that should share a deadline).
///
/// The typed reads ([`read_exact`](Self::read_exact), [`read_frame`](Self::read_frame),
/// [`read_line`](Self::read_line)) bound what they allocate and report what happened
/// in the peer's terms: [`Error::PeerTimeout`], [`Error::PeerClosed`] (with how many
/// bytes of how many arrived), [`Error::PeerTooLong`], [`Error::PeerMalformed`],
/// [`Error::PeerIo`]. It also implements [`Read`] and [`Write`], whose calls fail with
/// [`ErrorKind::TimedOut`] once the deadline has passed.
///
/// The stream is put in blocking mode; its read and write timeouts are set back to
/// what they were when this is dropped.
///
/// ```no_run
/// # fn f(stream: &std::net::TcpStream) -> vqp_host::Result<()> {
/// use std::time::Duration;
/// use vqp_host::exchange::DeadlineStream;
/// let mut io = DeadlineStream::new(stream, Duration::from_secs(10))?;
/// let line = io.read_line(512, "parameter line")?; // the whole line within 10 s
/// io.write_all(b"ok\n", "reply")?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DeadlineStream<'s> {
    stream: &'s TcpStream,
    deadline: Instant,
    timeout: Duration,
    /// The socket's timeouts before, restored on drop.
    saved: (Option<Duration>, Option<Duration>),
}

impl<'s> DeadlineStream<'s> {
    /// Gives `stream` a deadline `timeout` from now (not zero).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero timeout; [`Error::Exchange`] when the
    /// socket cannot be made blocking or its timeouts cannot be read.
    pub fn new(stream: &'s TcpStream, timeout: Duration) -> Result<Self> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "a message's timeout must not be zero",
            });
        }
        let sock = |source| Error::Exchange {
            stage: "set up the socket",
            source,
        };
        let saved = (
            stream.read_timeout().map_err(sock)?,
            stream.write_timeout().map_err(sock)?,
        );
        stream.set_nonblocking(false).map_err(sock)?;
        let now = Instant::now();
        // A timeout past what `Instant` can hold is as good as none.
        let far = Duration::from_secs(1 << 32);
        let deadline = now
            .checked_add(timeout)
            .or_else(|| now.checked_add(far))
            .unwrap_or(now);
        Ok(Self {
            stream,
            deadline,
            timeout,
            saved,
        })
    }

    /// The time the whole message was given.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The time left before the deadline (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Sets the socket's read (or write) timeout to the time left; `TimedOut` when
    /// none is.
    fn arm(&self, read: bool) -> io::Result<()> {
        let left = self.remaining();
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        if read {
            self.stream.set_read_timeout(Some(left))
        } else {
            self.stream.set_write_timeout(Some(left))
        }
    }

    /// Runs one receiving operation (`read` or `peek`) until it returns bytes: its
    /// count, or the error for a close, the deadline or another failure. `got` and
    /// `expected` describe the whole message, for the error.
    fn recv(
        &mut self,
        mut op: impl FnMut(&TcpStream) -> io::Result<usize>,
        what: &'static str,
        got: usize,
        expected: Option<usize>,
    ) -> Result<usize> {
        loop {
            match self.arm(true).and_then(|()| op(self.stream)) {
                Ok(0) => {
                    return Err(Error::PeerClosed {
                        what,
                        got,
                        expected,
                    })
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // The socket timed out: past the deadline, or a hair before it (the
                // next read waits for the rest). The socket is blocking, so this
                // never spins.
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if self.remaining().is_zero() {
                        return Err(Error::PeerTimeout {
                            what,
                            timeout: self.timeout,
                            got,
                            expected,
                        });
                    }
                }
                Err(source) => {
                    return Err(Error::PeerIo {
                        what,
                        sending: false,
                        source,
                    })
                }
            }
        }
    }

    /// Fills `buf` from the stream; `before` bytes of the message came earlier and
    /// `expected` is its whole length, for the error.
    pub(crate) fn fill(
        &mut self,
        buf: &mut [u8],
        what: &'static str,
        before: usize,
        expected: Option<usize>,
    ) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let rest = &mut buf[got..];
            got += self.recv(|mut s| s.read(rest), what, before + got, expected)?;
        }
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes, the peer's `what`, before the deadline.
    ///
    /// # Errors
    /// [`Error::PeerTimeout`], [`Error::PeerClosed`] or [`Error::PeerIo`].
    pub fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        self.fill(buf, what, 0, Some(buf.len()))
    }

    /// Reads one frame — a 4-byte big-endian length, then that many bytes — of at
    /// most `limit` bytes (the length not counted) before the deadline, and returns
    /// its bytes. A longer length is refused before anything is allocated for it.
    ///
    /// # Errors
    /// [`Error::PeerTooLong`], or as [`read_exact`](Self::read_exact); their byte
    /// counts include the 4-byte length.
    pub fn read_frame(&mut self, limit: usize, what: &'static str) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.fill(&mut len, what, 0, None)?;
        let len = u32::from_be_bytes(len);
        let n = match usize::try_from(len) {
            Ok(n) if n <= limit => n,
            _ => {
                return Err(Error::PeerTooLong {
                    what,
                    len: Some(u64::from(len)),
                    limit,
                })
            }
        };
        let mut body = vec![0u8; n];
        self.fill(&mut body, what, 4, Some(4 + n))?;
        Ok(body)
    }

    /// Reads one `\n`-terminated line of at most `limit` bytes before the `\n`, before
    /// the deadline, and returns it without the `\n`. Nothing after the `\n` is
    /// consumed (the stream is peeked, then read up to the `\n`), so the stream can
    /// carry other messages after the line.
    ///
    /// # Errors
    /// [`Error::PeerTooLong`] as soon as `limit` bytes pass without a `\n`;
    /// [`Error::PeerMalformed`] when the line is not UTF-8; or as
    /// [`read_exact`](Self::read_exact).
    pub fn read_line(&mut self, limit: usize, what: &'static str) -> Result<String> {
        let mut line = Vec::new();
        let mut chunk = [0u8; LINE_CHUNK];
        loop {
            let room = limit.saturating_add(1) - line.len();
            let want = room.min(LINE_CHUNK);
            let peek = &mut chunk[..want];
            let n = self.recv(|s| s.peek(peek), what, line.len(), None)?;
            let (take, done) = match chunk[..n].iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (n, false),
            };
            // Those bytes are queued already: this read does not wait.
            self.fill(&mut chunk[..take], what, line.len(), None)?;
            line.extend_from_slice(&chunk[..take]);
            if done {
                line.pop();
                return String::from_utf8(line).map_err(|e| Error::PeerMalformed {
                    what,
                    detail: format!("not UTF-8 ({e})"),
                });
            }
            if line.len() > limit {
                return Err(Error::PeerTooLong {
                    what,
                    len: None,
                    limit,
                });
            }
        }
    }

    /// Writes all of `buf`, this side's `what`, before the deadline.
    ///
    /// # Errors
    /// [`Error::PeerIo`] (`TimedOut` when the peer did not take it in time).
    pub fn write_all(&mut self, buf: &[u8], what: &'static str) -> Result<()> {
        let mut sent = 0;
        while sent < buf.len() {
            match self.write(&buf[sent..]) {
                Ok(0) => {
                    return Err(Error::PeerIo {
                        what,
                        sending: true,
                        source: ErrorKind::WriteZero.into(),
                    })
                }
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                        && !self.remaining().is_zero() => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let msg = format!(
                        "the peer took {sent} of {} bytes within {}",
                        buf.len(),
                        Secs(self.timeout)
                    );
                    return Err(Error::PeerIo {
                        what,
                        sending: true,
                        source: io::Error::new(ErrorKind::TimedOut, msg),
                    });
                }
                Err(source) => {
                    return Err(Error::PeerIo {
                        what,
                        sending: true,
                        source,
                    })
                }
            }
        }
        Ok(())
    }
}

impl Read for DeadlineStream<'_> {
    /// One read, waiting at most until the deadline (`TimedOut` after it).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm(true)?;
        let mut s = self.stream;
        s.read(buf)
    }
}

impl Write for DeadlineStream<'_> {
    /// One write, waiting at most until the deadline (`TimedOut` after it).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm(false)?;
        let mut s = self.stream;
        s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for DeadlineStream<'_> {
    fn drop(&mut self) {
        // Best effort: a socket that took timeouts before takes them now.
        let _ = self.stream.set_read_timeout(self.saved.0);
        let _ = self.stream.set_write_timeout(self.saved.1);
    }
}
