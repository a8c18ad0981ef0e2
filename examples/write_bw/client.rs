//! The client's loop: posts every message, with at most `slots` unverified, polls,
//! measures, and counts what completed — also when the virtual QP fails.

use std::time::{Duration, Instant};

use vqp_core::{Keys, Opcode, PostSendError, SendWr, Wc, WcStatus};
use vqp_host::MemoryRegion;

use crate::args::{show_secs, Params};
use crate::control::{Control, DONE, END, FAILBACK, FAILED, QP_FAILED, STOP, VERIFIED};
use crate::data::{check, fill, slot, slot_addr, slot_mut};
use crate::failback::{self, Rejoiner};
use crate::idle;
use crate::report::{Measured, Progress};
use crate::run::{disconnected, poll, qp_failed, Conn, Link, Plan};
use crate::tally::Tally;
use crate::wire::Remote;
use crate::{sigint, Fail};

/// The longest gap between two `D` frames of a read run that completes messages.
const BEAT: Duration = Duration::from_millis(10);

/// Whose virtual QP failed.
#[derive(Clone, Copy, Debug)]
enum Broke {
    /// This side's, with this status.
    Here(WcStatus),
    /// The server's (its `X` frame), with the status it sent.
    Server(WcStatus),
}

impl Broke {
    /// The server's `X` frame's value as a status: one that does not fit is shown as
    /// an unknown status, not taken for another.
    fn server(n: u64) -> Broke {
        Broke::Server(WcStatus(u32::try_from(n).unwrap_or(u32::MAX)))
    }
}

/// The client's state.
struct Client<'a> {
    conn: Box<Conn>,
    /// The buffer's registrations on devices 1, … (dropped before `mr`, which owns
    /// the memory).
    _more: Vec<MemoryRegion>,
    mr: MemoryRegion,
    peer: Remote,
    /// The requests' keys on every device.
    keys: Keys,
    ctl: Control,
    p: &'a Params,
    slots: u64,
    /// Slots of the peer's buffer messages cycle through (one more for reads).
    remote_slots: u64,
    timeout: Duration,
    /// Messages the virtual QP took.
    posted: u64,
    /// Messages reported (completed, with or without success): the next wr_id due.
    reported: u64,
    /// Messages that completed successfully (and, for reads, passed the check).
    completed: u64,
    /// Messages below this were reported successfully, all of them.
    prefix: u64,
    /// Messages below this were verified by the server.
    credit: u64,
    /// The last `D` frame's count.
    sent_done: u64,
    /// With `--failover`: replaces failed data QPs.
    rejoiner: Option<Rejoiner>,
}

/// The client: posts `--size` messages with at most `slots` unverified, polls, and
/// measures. Returns the measurements once the server confirmed every message.
pub fn client(link: Link, p: &Params, plan: &Plan) -> Result<Measured, Fail> {
    let keys = link.keys();
    let Link {
        conn,
        mr,
        more,
        peer,
        peer_qpns: _,
        peer_notify: _,
        mut wire,
        cm: _cm,
    } = link;
    let timeout = wire.timeout();
    wire.barrier()?;
    let slots = p.slots();
    let mut c = Client {
        conn,
        _more: more,
        mr,
        peer,
        keys,
        ctl: wire.into_control()?,
        p,
        slots,
        remote_slots: if p.read() { slots + 1 } else { slots },
        timeout,
        posted: 0,
        reported: 0,
        completed: 0,
        prefix: 0,
        credit: 0,
        sent_done: 0,
        rejoiner: p.failover.then(|| Rejoiner::new(p.qps, Instant::now())),
    };
    c.run(plan)
}

impl Client<'_> {
    /// Tells a lost connection with how far the run got (the messages that completed
    /// in order, as after a failure).
    fn lost(&self) -> impl Fn(Fail) -> Fail {
        let done = self.prefix;
        move |f| disconnected(f, done, "")
    }

    /// Takes a credit: the server cannot have verified a message not yet posted.
    fn credit(&mut self, n: u64) -> Result<(), Fail> {
        if n > self.posted {
            return Err(Fail::bad(format!(
                "the server confirmed {n} messages, but only {} were posted",
                self.posted
            )));
        }
        self.credit = self.credit.max(n);
        Ok(())
    }

    /// The loop: post, poll, take credits, until the plan is done and every message
    /// completed (and, for writes, was verified by the server).
    fn run(&mut self, plan: &Plan) -> Result<Measured, Fail> {
        let (size, slots) = (self.p.size, self.slots);
        let read = self.p.read();
        let plain = self.p.opcode == Opcode::RDMA_WRITE;
        let keys = self.keys;
        let (mut stop, mut interrupted, mut stop_told) = (false, false, false);
        let mut out = [Wc::EMPTY; 32];
        let start = Instant::now();
        let deadline = plan.duration.map(|d| start + d);
        let mut progress = Progress::new(start, size, plan.progress);
        let mut last_move = start;
        // Reads need no D frames to be checked; they show the server that the run
        // moves, every 10 ms while it does (or a quarter of a shorter timeout), so a
        // server whose own --timeout is short still sees it.
        let beat = (self.timeout / 4).min(BEAT);
        let mut last_beat = start;
        loop {
            while let Some((tag, n)) = self.ctl.recv().map_err(self.lost())? {
                match tag {
                    VERIFIED => {
                        self.credit(n)?;
                        last_move = Instant::now();
                    }
                    STOP => interrupted = true,
                    FAILBACK => failback::take(&mut self.conn, &mut self.ctl, n)?,
                    QP_FAILED => return Err(self.failed(Broke::server(n), &mut out)),
                    FAILED => {
                        return Err(Fail::data(format!(
                            "data check FAILED on the server: message {n}"
                        )))
                    }
                    t => {
                        return Err(Fail::bad(format!(
                            "the server sent an unknown frame {t:#x}"
                        )))
                    }
                }
            }
            if sigint::interrupted() {
                interrupted = true;
                if !stop_told {
                    // So that the server knows why the run ends early.
                    self.ctl.send(STOP, 0).map_err(self.lost())?;
                    stop_told = true;
                }
            }
            stop |= interrupted
                || match deadline {
                    // A timed run sends at least one message, however short.
                    Some(d) => Instant::now() >= d && self.posted > 0,
                    None => self.posted >= plan.iters,
                };
            let before = self.posted;
            let base = if read { self.completed } else { self.credit };
            let limit = match deadline {
                Some(_) => u64::MAX,
                None => plan.iters,
            };
            while !stop && self.posted < base + slots && self.posted < limit {
                let i = self.posted;
                let s = i % slots;
                let remote = self.peer.addr + (i % self.remote_slots) * size;
                if !read {
                    // SAFETY: the slot's previous message (i − slots) was completed
                    // and verified (i < credit + slots), and nothing else is posted
                    // from it until this message is.
                    fill(unsafe { slot_mut(&mut self.mr, s, size) }, self.p.seed, i);
                }
                let wr = SendWr::new(
                    i,
                    self.p.opcode,
                    slot_addr(&self.mr, s, size),
                    size,
                    remote,
                    keys,
                )
                .imm((i as u32).to_be());
                match self.conn.vqp.post_send(&wr) {
                    Ok(()) => self.posted += 1,
                    Err(PostSendError::Full) => break,
                    Err(PostSendError::Failed(st)) => {
                        return Err(self.failed(Broke::Here(st), &mut out))
                    }
                    Err(e) => {
                        return Err(Fail::bad(format!(
                            "the virtual QP refused message {i}: {e}"
                        )))
                    }
                }
            }
            let n = poll(&mut self.conn, &mut out)?;
            if let Some(st) = self.reap(&out[..n])? {
                return Err(self.failed(Broke::Here(st), &mut out));
            }
            if n > 0 {
                last_move = Instant::now();
            }
            let now = Instant::now();
            // The adaptive policy's clock (other policies return at once).
            let since = now.duration_since(start).as_nanos();
            self.conn
                .vqp
                .sample(u64::try_from(since).unwrap_or(u64::MAX));
            if let Some(r) = self.rejoiner.as_mut() {
                if self.conn.vqp.failure().is_none() {
                    r.tick(&mut self.conn, &mut self.ctl, now)
                        .map_err(self.lost())?;
                }
            }
            let beat_due = read && now.duration_since(last_beat) >= beat;
            if (plain || beat_due) && self.completed > self.sent_done {
                self.ctl.send(DONE, self.completed).map_err(self.lost())?;
                self.sent_done = self.completed;
                last_beat = now;
            }
            self.ctl.flush().map_err(self.lost())?;
            if let Some(st) = self.conn.vqp.failure() {
                return Err(self.failed(Broke::Here(st), &mut out));
            }
            // A message counts once it completed here and its receiver checked it.
            let delivered = if read {
                self.completed
            } else {
                self.completed.min(self.credit)
            };
            progress.tick(now, delivered);
            if stop && self.completed == self.posted {
                break;
            }
            if n == 0 && self.posted == before {
                // Nothing to do this round: let the other side (and, on softverbs, the
                // progress engine) have the core; a machine with fewer cores than busy
                // threads otherwise spends its time spinning. A server that stopped
                // costs no busy core (see `idle`).
                idle::pause(now.duration_since(last_move));
            }
            if now.duration_since(last_move) > self.timeout {
                return Err(Fail::peer(format!(
                    "no progress for {} after {} messages ({} in flight, {} verified)",
                    show_secs(self.timeout),
                    self.completed,
                    self.posted - self.completed,
                    self.credit
                )));
            }
        }
        self.ctl.send(END, self.posted).map_err(self.lost())?;
        self.confirmations()?;
        let elapsed = start.elapsed();
        let vqp = &self.conn.vqp;
        let lanes = vqp.data_qps();
        Ok(Measured {
            iters: self.completed,
            elapsed,
            peak: progress.peak(elapsed, self.completed),
            timeline: progress.timeline(),
            per_qp: (0..lanes)
                .map(|i| vqp.lane_stats(i).map_or(0, |s| s.wqes))
                .collect(),
            bytes_per_qp: (0..lanes)
                .map(|i| vqp.lane_stats(i).map_or(0, |s| s.bytes))
                .collect(),
            weights: (0..lanes).filter_map(|i| vqp.weight(i)).collect(),
            failover: self.p.failover.then(|| vqp.failover()),
            notify: vqp
                .notify_qp_num()
                .and_then(|_| vqp.lane_stats(lanes))
                .map(|s| s.wqes),
            interrupted,
        })
    }

    /// Takes the successful completion `wc`: it must be the message due, whole; a
    /// read's data is checked.
    fn take(&mut self, wc: &Wc) -> Result<(), Fail> {
        let (size, i) = (self.p.size, self.reported);
        if wc.wr_id != i || wc.byte_len != size {
            return Err(Fail::bad(format!(
                "completion of message {} ({} bytes) when {i} was due",
                wc.wr_id, wc.byte_len
            )));
        }
        if self.p.read() {
            // SAFETY: the read into this slot completed, and the next read into it is
            // posted only after this check (posted < completed + slots).
            let got = unsafe { slot(&self.mr, i % self.slots, size) };
            if let Some(at) = check(got, self.p.seed, i % self.remote_slots) {
                return Err(Fail::data(format!(
                    "data check FAILED on the client: message {i}, byte {at}"
                )));
            }
        }
        if self.prefix == i {
            self.prefix += 1;
        }
        self.reported += 1;
        self.completed += 1;
        Ok(())
    }

    /// Takes a batch of completions; returns the first error's status, if any. The
    /// completions after an error are still taken (and counted if successful).
    fn reap(&mut self, wcs: &[Wc]) -> Result<Option<WcStatus>, Fail> {
        let mut first = None;
        for wc in wcs {
            if wc.status.is_ok() {
                self.take(wc)?;
            } else {
                self.reported += 1;
                first = first.or(Some(wc.status));
            }
        }
        Ok(first)
    }

    /// The virtual QP failed (this side's, or the server's as it said): posts
    /// nothing more, lets every message posted be reported (or the timeout pass),
    /// tells the server the count (`Tally`) and returns the error, which carries the
    /// same count.
    ///
    /// The count is what completed, not what had been polled when the failure was
    /// seen: the virtual QP reports a failure as soon as one physical QP breaks, while
    /// completions of earlier messages may still wait in the CQ. The run's count is
    /// the prefix, the messages before the first failure (the server can check those
    /// and no others); the ones that completed after it, on the QPs still up, are
    /// told apart.
    fn failed(&mut self, broke: Broke, out: &mut [Wc]) -> Fail {
        let until = Instant::now() + self.timeout;
        let mut last = Instant::now();
        while self.reported < self.posted && Instant::now() < until {
            let n = match poll(&mut self.conn, out) {
                Ok(n) => n,
                Err(_) => break,
            };
            if let Err(f) = self.reap(&out[..n]) {
                return f;
            }
            if n == 0 {
                idle::pause(last.elapsed());
            } else {
                last = Instant::now();
            }
        }
        let tally = Tally {
            prefix: self.prefix,
            later: self.completed - self.prefix,
            flushed: self.reported - self.completed,
            posted: self.posted,
        };
        // The server checks (plain writes) and reports as many; it may have gone, so
        // errors here change nothing.
        if self.p.opcode == Opcode::RDMA_WRITE && self.prefix > self.sent_done {
            let _ = self.ctl.send(DONE, self.prefix);
        }
        let _ = tally.send(&mut self.ctl);
        self.ctl.finish(self.timeout.min(Duration::from_secs(1)));
        let mut more = String::new();
        if tally.unreported() > 0 {
            more += &format!(
                " (the client waited {} for the rest)",
                show_secs(self.timeout)
            );
        }
        if self.conn.vqp.grace_expired() {
            more += &format!(
                "; every path was lost ({}) and none came back within the {} grace period",
                self.lost_paths(),
                show_secs(self.p.grace)
            );
        }
        match broke {
            Broke::Here(status) => qp_failed(status, tally, &more),
            Broke::Server(status) => Fail::peer(format!(
                "the server's virtual QP failed after {tally}{more}: {status} (a QP broke or the peer went away)"
            )),
        }
    }

    /// The failed data QPs and their devices: `data QPs 0, 2 on soft0, 1 on soft1`.
    fn lost_paths(&self) -> String {
        let vqp = &self.conn.vqp;
        let mut by_device: Vec<(String, Vec<usize>)> = Vec::new();
        for i in (0..vqp.data_qps()).filter(|&i| vqp.data_qp_failed(i)) {
            let name = vqp
                .data_qp(i)
                .map_or_else(|| "?".into(), |q| q.qp().context().device_name());
            match by_device.iter_mut().find(|(n, _)| *n == name) {
                Some((_, qps)) => qps.push(i),
                None => by_device.push((name, vec![i])),
            }
        }
        let parts: Vec<String> = by_device
            .iter()
            .map(|(name, qps)| {
                let list: Vec<String> = qps.iter().map(usize::to_string).collect();
                format!("{} on {name}", list.join(", "))
            })
            .collect();
        format!("data QPs {}", parts.join(", "))
    }

    /// Waits for the server to confirm (after checking) every message.
    fn confirmations(&mut self) -> Result<(), Fail> {
        let until = Instant::now() + self.timeout;
        let mut last = Instant::now();
        while self.credit < self.posted {
            match self.ctl.recv().map_err(self.lost())? {
                Some((VERIFIED, n)) => {
                    self.credit(n)?;
                    last = Instant::now();
                }
                Some((QP_FAILED, n)) => {
                    let mut out = [Wc::EMPTY; 32];
                    return Err(self.failed(Broke::server(n), &mut out));
                }
                Some((FAILED, n)) => {
                    return Err(Fail::data(format!(
                        "data check FAILED on the server: message {n}"
                    )))
                }
                Some(_) => {}
                None if Instant::now() > until => {
                    return Err(Fail::peer(format!(
                        "the server confirmed {} of {} messages, then went silent for {}",
                        self.credit,
                        self.posted,
                        show_secs(self.timeout)
                    )))
                }
                None => idle::pause(last.elapsed()),
            }
        }
        Ok(())
    }
}
