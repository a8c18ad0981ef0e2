//! The server's loop: posts notification receives (write_imm), checks every message
//! it is told about, returns credits, until the client's `E` frame — and believes no
//! count from the client that it could not have reached.
//!
//! The client is not trusted: every count it sends is held to what the server knows.
//! A writer can have at most `slots` messages beyond the server's last credit, so a
//! `D`, `E` or `X` count above that is refused. The server never sees a read, so a
//! reader's counts are held to the run's `--iters` and to a rate no RDMA device
//! reaches ([`MAX_MSG_RATE`], [`MAX_BYTE_RATE`]) over the time since the barrier.
//! With `--iters`, `E` must equal it unless someone pressed Ctrl-C (an `S` frame).
//!
//! When a virtual QP fails, the server reports the client's count of the run (see
//! `tally`), which must add up: its own failure it tells the client (`X`), credits
//! nothing more and waits for that count, checking meanwhile the messages notified in
//! order; a failure the client tells first it meets the same way.

use std::time::{Duration, Instant};

use vqp_core::{Opcode, PostRecvError, RecvWr, Wc, WcOpcode, WcStatus};

use crate::args::{show_secs, Limit, Params};
use crate::control::{
    Control, DONE, END, FAILBACK, FAILED, FLUSHED, LATER, POSTED, QP_FAILED, STOP, VERIFIED,
};
use crate::data::{check, fill, slot, slot_mut};
use crate::failback;
use crate::idle;
use crate::run::{disconnected, poll, qp_failed, Link};
use crate::tally::Tally;
use crate::{sigint, Fail};

/// Messages per second no RDMA device reaches (today's fastest NICs send a few
/// hundred million): a reader's count above this rate is a lie.
pub const MAX_MSG_RATE: f64 = 1e9;
/// Bytes per second no RDMA device reaches (8 Tb/s, ten times an 800 Gb/s port).
pub const MAX_BYTE_RATE: f64 = 1e12;
/// Added to the time a reader had: its clock starts when it leaves the barrier,
/// which may be a little before the server's.
const CLOCK_SLACK: Duration = Duration::from_millis(10);
/// How long, after the client's count of a failed run came and a QP broke here too,
/// the server waits for the notifications still due before it says how many of the
/// client's messages it verified.
const SETTLE: Duration = Duration::from_millis(100);

/// What the server checked.
#[derive(Debug)]
pub struct Verified {
    pub messages: u64,
    /// Ctrl-C here, or at the client.
    pub interrupted: bool,
}

/// The most messages of `size` bytes a reader can have completed in `elapsed`.
pub fn max_reads(size: u64, elapsed: Duration) -> u64 {
    let rate = MAX_MSG_RATE.min(MAX_BYTE_RATE / size.max(1) as f64);
    ((elapsed + CLOCK_SLACK).as_secs_f64() * rate).ceil() as u64
}

/// The server's state.
struct Server<'a> {
    p: &'a Params,
    slots: u64,
    start: Instant,
    /// Messages below this were verified here.
    verified: u64,
    /// The last credit sent (`V`).
    announced: u64,
    /// The highest count the client sent in a `D` frame.
    said: u64,
    /// The client's `E` count.
    end: Option<u64>,
    /// The client's count of a failed run so far (its `P`, `L`, `U` frames).
    count: Tally,
    /// The client's count, closed by its `X` frame: its virtual QP failed, or it
    /// answered ours.
    client_failed: Option<Tally>,
    /// This side's virtual QP failed (and the client was told) before the client
    /// said its own had.
    own: Option<WcStatus>,
    interrupted: bool,
}

impl Server<'_> {
    /// Refuses a count `n` from the client's `tag` frame that it cannot have reached.
    fn plausible(&self, tag: u8, n: u64) -> Result<(), Fail> {
        let frame = tag as char;
        let refuse = |why: String| {
            Err(Fail::bad(format!(
                "the client's {frame} frame claims {n} messages, {why}; refusing the run"
            )))
        };
        if let Limit::Iters(k) = self.p.limit {
            if n > k {
                return refuse(format!("but the run is for {k}"));
            }
        }
        if n < self.said {
            return refuse(format!("fewer than the {} it reported before", self.said));
        }
        if self.p.read() {
            let elapsed = self.start.elapsed();
            let max = max_reads(self.p.size, elapsed);
            if n > max {
                return refuse(format!(
                    "more than any RDMA device reads in {} (at most {max} of {} bytes)",
                    show_secs(elapsed),
                    self.p.size
                ));
            }
        } else if n > self.announced + self.slots {
            return refuse(format!(
                "but with {} credited it can have sent at most {}",
                self.announced,
                self.announced + self.slots
            ));
        }
        Ok(())
    }

    /// Checks the client's `E` count against the run it asked for.
    fn check_end(&self, n: u64) -> Result<(), Fail> {
        match self.p.limit {
            Limit::Iters(k) if n != k && !self.interrupted => Err(Fail::bad(format!(
                "the client ended after {n} of its {k} messages without a Ctrl-C or a failure; refusing the run"
            ))),
            Limit::Time(_) if n == 0 && !self.interrupted => Err(Fail::bad(
                "the client ended its timed run without a message; refusing the run",
            )),
            _ => Ok(()),
        }
    }

    /// Takes one frame from the client.
    fn frame(&mut self, tag: u8, n: u64) -> Result<(), Fail> {
        match tag {
            DONE => {
                self.plausible(tag, n)?;
                self.said = n;
            }
            END => {
                self.plausible(tag, n)?;
                self.check_end(n)?;
                self.said = n;
                self.end = Some(n);
            }
            POSTED => {
                self.plausible(tag, n)?;
                self.count.posted = n;
            }
            LATER => self.count.later = n,
            FLUSHED => self.count.flushed = n,
            QP_FAILED => {
                self.plausible(tag, n)?;
                self.said = n;
                // A client that sends no `P` posted no more than its prefix.
                let t = Tally {
                    prefix: n,
                    posted: self.count.posted.max(n),
                    ..self.count
                };
                let counted = n
                    .checked_add(t.later)
                    .and_then(|c| c.checked_add(t.flushed));
                if counted.map_or(true, |c| c > t.posted) {
                    return Err(Fail::bad(format!(
                        "the client's count of its failed run does not add up ({t}); refusing the run"
                    )));
                }
                self.client_failed = Some(t);
            }
            STOP => self.interrupted = true,
            t => {
                return Err(Fail::bad(format!(
                    "the client sent an unknown frame {t:#x}"
                )))
            }
        }
        Ok(())
    }

    /// The error to end with once the client sent its count `t` of the failed run
    /// and every message of its prefix that the server can check was checked: the
    /// client's count, the same phrase as the client's line, and what was verified.
    fn failure(&self, t: &Tally) -> Fail {
        let verified = match self.p.read() {
            true => String::new(),
            false => format!("; {} verified on the server", self.verified),
        };
        match (self.own, self.p.read()) {
            (Some(st), _) => {
                let f = qp_failed(st, t, "");
                Fail::peer(format!("{}{verified}", f.msg))
            }
            (None, true) => Fail::peer(format!("the client's virtual QP failed after it read {t}")),
            (None, false) => Fail::peer(format!(
                "the client's virtual QP failed after {t}{verified}"
            )),
        }
    }
}

/// The server: fills the source slots (reads), meets the client at the barrier,
/// posts notification receives (write_imm), checks every message it is told about,
/// returns credits, until the client's `E` frame (or `X`: its QP failed).
pub fn server(link: Link, p: &Params) -> Result<Verified, Fail> {
    // `more` (the buffer's other registrations) is bound after `mr`: dropped first.
    let Link {
        mut conn,
        mut mr,
        more: _more,
        peer: _,
        peer_qpns: _,
        peer_notify: _,
        mut wire,
        cm: _cm,
    } = link;
    let timeout = wire.timeout();
    let (size, slots) = (p.size, p.slots());
    let read = p.read();
    let imm = p.opcode == Opcode::RDMA_WRITE_WITH_IMM;
    if read {
        // After `link` checked the client's buffer: nothing is filled for a peer whose
        // run does not fit.
        for k in 0..=slots {
            // SAFETY: no work request exists yet (the client posts after the barrier).
            fill(unsafe { slot_mut(&mut mr, k, size) }, p.seed, k);
        }
    }
    wire.barrier()?;
    let mut ctl: Control = wire.into_control()?;
    let mut s = Server {
        p,
        slots,
        start: Instant::now(),
        verified: 0,
        announced: 0,
        said: 0,
        end: None,
        count: Tally::default(),
        client_failed: None,
        own: None,
        interrupted: false,
    };
    let mut recvs = 0u64;
    let mut stop_sent = false;
    let mut out = [Wc::EMPTY; 32];
    let mut last_move = s.start;
    // A completion failed here, or the virtual QP did.
    let mut broken = false;
    let lost = |f: Fail, verified: u64| disconnected(f, verified, " verified");
    loop {
        // After `E` or `X` the client may close the connection at any time: read no
        // further (unless this side failed: then the client's count is awaited).
        while (s.end.is_none() || s.own.is_some()) && s.client_failed.is_none() {
            let Some((tag, n)) = ctl.recv().map_err(|f| lost(f, s.verified))? else {
                break;
            };
            last_move = Instant::now();
            if tag == FAILBACK {
                failback::take(&mut conn, &mut ctl, n).map_err(|f| lost(f, s.verified))?;
            } else {
                s.frame(tag, n)?;
            }
        }
        while imm && recvs < s.verified + slots && !broken {
            match conn.vqp.post_recv(&RecvWr::notification(recvs)) {
                Ok(()) => recvs += 1,
                // Taken up below, from `failure()`.
                Err(PostRecvError::Full | PostRecvError::Failed(_)) => break,
                Err(e) => {
                    return Err(Fail::peer(format!(
                        "receive refused after {} messages: {e}",
                        s.verified
                    )))
                }
            }
        }
        let n = poll(&mut conn, &mut out)?;
        let before = s.verified;
        // Messages below `landed` are in place: notified (write_imm), or completed at
        // the client by its word (write).
        let mut landed = if imm { s.verified } else { s.said };
        let mut failure: Option<WcStatus> = None;
        for wc in &out[..n] {
            if !wc.status.is_ok() {
                failure = failure.or(Some(wc.status));
                continue;
            }
            // (byte_len is not checked: a SPRAY notify is a zero-byte write.)
            if wc.opcode == WcOpcode::RECV_RDMA_WITH_IMM && wc.wr_id == landed {
                landed += 1;
            } else if failure.is_none() && s.own.is_none() {
                return Err(Fail::bad(format!(
                    "unexpected completion: receive {} when {landed} was due",
                    wc.wr_id
                )));
            }
            // After a failure, a receive past a flushed one is not checked: the
            // messages checked are the ones notified in order.
        }
        while s.verified < landed && !read {
            let v = s.verified;
            // SAFETY: message `v` has landed and the client writes this slot again
            // only after our credit for it (it keeps < slots unverified).
            let got = unsafe { slot(&mr, v % slots, size) };
            if let Some(at) = check(got, p.seed, v) {
                let _ = ctl.send(FAILED, v);
                return Err(Fail::data(format!(
                    "data check FAILED on the server: message {v}, byte {at}"
                )));
            }
            s.verified += 1;
        }
        if n > 0 || s.verified > before {
            last_move = Instant::now();
        }
        broken |= failure.is_some() || conn.vqp.failure().is_some();
        if let Some(t) = s.client_failed {
            // Once the client's prefix is checked (or, with a QP broken here, nothing
            // more comes for a while), say so; the client has gone, so no credit is
            // sent.
            let stuck = broken && last_move.elapsed() >= SETTLE;
            if read || s.verified >= t.prefix || stuck {
                return Err(s.failure(&t));
            }
        }
        // The clock of a virtual QP that lost every path (re-dispatch's grace period).
        let since = s.start.elapsed().as_nanos();
        conn.vqp.sample(u64::try_from(since).unwrap_or(u64::MAX));
        if let Some(st) = failure.or(conn.vqp.failure()) {
            if s.own.is_none() && s.client_failed.is_none() {
                // The client counts what completed and sends its count (which both
                // sides then report); until it comes, nothing is credited.
                s.own = Some(st);
                last_move = Instant::now();
                ctl.send(QP_FAILED, u64::from(st.0))
                    .map_err(|f| lost(f, s.verified))?;
            }
        }
        if s.client_failed.is_none() && s.own.is_none() {
            if s.verified > s.announced {
                ctl.send(VERIFIED, s.verified)
                    .map_err(|f| lost(f, s.verified))?;
                s.announced = s.verified;
            }
            if sigint::interrupted() && !stop_sent {
                s.interrupted = true;
                ctl.send(STOP, 0).map_err(|f| lost(f, s.verified))?;
                stop_sent = true;
            }
        }
        if s.client_failed.is_none() {
            ctl.flush().map_err(|f| lost(f, s.verified))?;
        }
        match s.end {
            _ if s.own.is_some() => {}
            Some(e) if read => {
                ctl.send(VERIFIED, e).map_err(|f| lost(f, s.verified))?;
                s.verified = e;
                break;
            }
            Some(e) if s.verified >= e => break,
            _ => {}
        }
        let now = Instant::now();
        if now.duration_since(last_move) > timeout {
            if let Some(st) = s.own {
                let f = qp_failed(st, format!("{} messages verified", s.verified), "");
                return Err(Fail::peer(format!(
                    "{}; the client sent no count of its messages within {}",
                    f.msg,
                    show_secs(timeout)
                )));
            }
            let got = match (read, s.client_failed) {
                (_, Some(t)) => format!(
                    "the client's virtual QP failed after {t}, {} of them verified here",
                    s.verified
                ),
                (true, None) => format!("the client reported {} messages read", s.said),
                (false, None) => format!("{} messages verified", s.verified),
            };
            return Err(Fail::peer(format!(
                "no progress from the client for {} ({got})",
                show_secs(timeout)
            )));
        }
        if n == 0 && s.verified == before {
            // A client that stopped costs no busy core (see `idle`).
            idle::pause(now.duration_since(last_move));
        }
    }
    // Make sure the last credit left before this side closes the connection.
    let until = Instant::now() + timeout;
    while !ctl.flushed() {
        ctl.flush().map_err(|f| lost(f, s.verified))?;
        if Instant::now() > until {
            return Err(Fail::peer(format!(
                "the client took no frame for {}",
                show_secs(timeout)
            )));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(Verified {
        messages: s.verified,
        interrupted: s.interrupted,
    })
}
