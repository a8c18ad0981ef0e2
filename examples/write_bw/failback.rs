//! Fail-back in a run (`--failover`): the client replaces each failed data QP, and a
//! failed SPRAY notify QP, once its device's port is active, through vqp-host's three
//! fail-back messages (Offer, Answer, Ready) carried as `J` frames of the control
//! channel; the server answers. A QP whose sends consume the peer's receives (the
//! notify QP, data QP 0 in SPRAY) is offered once its receives have flushed (its
//! count is final); the server refuses until its own have.
//!
//! A data QP whose replacement fails again is offered again later, 10 ms after the
//! first try and twice as long after each try that did not last a second, up to 1 s;
//! an offer left unanswered for 1 s is made again with a fresh QP.

use std::time::{Duration, Instant};

use vqp_core::RestoreError;
use vqp_host::failback::NOTIFY_QP;
use vqp_host::{Error, FailBack};

use crate::control::{Control, FAILBACK};
use crate::run::Conn;
use crate::Fail;

/// How often the client looks at its failed data QPs and their ports.
const LOOK: Duration = Duration::from_millis(2);
/// The wait before the first try; it doubles for each try that did not last.
const FIRST_TRY: Duration = Duration::from_millis(10);
/// The longest wait between two tries, and how long a replacement must carry
/// traffic for the wait to start again from `FIRST_TRY`.
const LONGEST: Duration = Duration::from_secs(1);

/// A fail-back message as the payload of a `J` frame.
pub fn frame(m: FailBack) -> u64 {
    u64::from_be_bytes(m.encode())
}

/// Takes the peer's `J` frame `n`: its answer, if any, goes back as a `J` frame.
pub fn take(conn: &mut Conn, ctl: &mut Control, n: u64) -> Result<(), Fail> {
    let m = FailBack::decode(&n.to_be_bytes())
        .map_err(|e| Fail::bad(format!("the peer sent a bad fail-back frame: {e}")))?;
    let reply = conn.on_failback(m).map_err(|e| match m.lane() {
        NOTIFY_QP => Fail::bad(format!("the notify QP: {e}")),
        lane => Fail::bad(format!("data QP {lane}: {e}")),
    })?;
    if let Some(r) = reply {
        ctl.send(FAILBACK, frame(r))?;
    }
    Ok(())
}

/// One data QP's tries.
#[derive(Clone, Copy, Default)]
struct Tries {
    /// Tries since the QP last carried traffic for `LONGEST`.
    count: u32,
    /// When the last offer went.
    last: Option<Instant>,
}

impl Tries {
    /// The wait after the last try before the next.
    fn wait(&self) -> Duration {
        FIRST_TRY
            .saturating_mul(1 << self.count.saturating_sub(1).min(7))
            .min(LONGEST)
    }
}

/// The client's side: which data QPs (and notify QP) to offer again, and when.
pub struct Rejoiner {
    tries: Vec<Tries>,
    notify: Tries,
    next_look: Instant,
}

impl Rejoiner {
    /// For a virtual QP of `data_qps` data QPs.
    pub fn new(data_qps: usize, now: Instant) -> Rejoiner {
        Rejoiner {
            tries: vec![Tries::default(); data_qps],
            notify: Tries::default(),
            next_look: now,
        }
    }

    /// Offers a replacement for each failed data QP whose port is active and whose
    /// wait is over; a QP that carried traffic for a second starts its waits afresh.
    pub fn tick(&mut self, conn: &mut Conn, ctl: &mut Control, now: Instant) -> Result<(), Fail> {
        if now < self.next_look {
            return Ok(());
        }
        self.next_look = now + LOOK;
        // Each device's port is asked once a look.
        let mut active = [None::<bool>; crate::params::MAX_DEVICES];
        for (i, t) in self.tries.iter_mut().enumerate() {
            let due = t.last.map_or(true, |at| now.duration_since(at) >= t.wait());
            if !conn.vqp.data_qp_failed(i) {
                if t.last.is_some_and(|at| now.duration_since(at) >= LONGEST) {
                    *t = Tries::default();
                }
                continue;
            }
            let unanswered = t.last.is_some_and(|at| now.duration_since(at) >= LONGEST);
            if (conn.rejoining(i) && !unanswered) || !due {
                continue;
            }
            let d = usize::from(conn.vqp.data_qp_device(i).unwrap_or(0));
            let up = *active[d % active.len()]
                .get_or_insert_with(|| conn.port_active(i).unwrap_or(false));
            if !up {
                continue;
            }
            let offer = match conn.offer_rejoin(i) {
                Ok(m) => m,
                // Its receives are still flushing: the next look tries again.
                Err(Error::Restore(RestoreError::NotDrained)) => continue,
                Err(e) => return Err(Fail::bad(format!("cannot replace data QP {i}: {e}"))),
            };
            ctl.send(FAILBACK, frame(offer))?;
            t.count += 1;
            t.last = Some(now);
        }
        self.notify_tick(conn, ctl, now)
    }

    /// As `tick`, for the notify QP.
    fn notify_tick(
        &mut self,
        conn: &mut Conn,
        ctl: &mut Control,
        now: Instant,
    ) -> Result<(), Fail> {
        let t = &mut self.notify;
        if !conn.vqp.notify_qp_failed() {
            if t.last.is_some_and(|at| now.duration_since(at) >= LONGEST) {
                *t = Tries::default();
            }
            return Ok(());
        }
        let due = t.last.map_or(true, |at| now.duration_since(at) >= t.wait());
        let unanswered = t.last.is_some_and(|at| now.duration_since(at) >= LONGEST);
        let lane = usize::from(NOTIFY_QP);
        if (conn.rejoining(lane) && !unanswered) || !due || !conn.port_active(lane).unwrap_or(false)
        {
            return Ok(());
        }
        let offer = match conn.offer_rejoin(lane) {
            Ok(m) => m,
            // Its receives are still flushing: the next look tries again.
            Err(Error::Restore(RestoreError::NotDrained)) => return Ok(()),
            Err(e) => return Err(Fail::bad(format!("cannot replace the notify QP: {e}"))),
        };
        ctl.send(FAILBACK, frame(offer))?;
        t.count += 1;
        t.last = Some(now);
        Ok(())
    }
}
