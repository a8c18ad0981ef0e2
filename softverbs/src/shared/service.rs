//! The service thread that serves a process's inbox while none of its threads polls
//! (and sweeps the namespace for dead processes every [`reclaim::SWEEP_EVERY`]), and
//! the hooks that let a polling thread serve it instead; the process's exit.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use super::{current, inbox, reclaim, Shared};

impl Shared {
    /// Starts the service thread (once): it serves our inbox while nobody polls.
    pub(crate) fn start_service(&'static self) {
        self.service.get_or_init(|| {
            self.running.store(true, Ordering::Release);
            let spawned = std::thread::Builder::new()
                .name("softverbs-shared".into())
                .spawn(move || self.serve());
            if spawned.is_err() {
                self.running.store(false, Ordering::Release);
                eprintln!(
                    "vqp-softverbs: cannot start the shared-inbox thread; other processes \
                     are served only while this one polls"
                );
            }
            Mutex::new(spawned.ok())
        });
    }

    fn serve(&'static self) {
        let engine = self.endpoint;
        let mut last_poll = engine.activity();
        let mut idle_spins = 0u32;
        let mut next_check = std::time::Instant::now();
        let mut watching = false;
        let mut next_sweep = next_check + reclaim::SWEEP_EVERY;
        while !self.stop.load(Ordering::Acquire) {
            let polls = engine.activity();
            let napping = engine.polling_since(last_poll);
            last_poll = polls;
            // While a thread of ours polls, it drains the inbox: we stay out of its way
            // (not even taking the consumer lock, which a preempted holder would keep
            // from it) and unannounced, so senders skip the futex wake.
            let n = if napping { 0 } else { self.drain(1024) };
            let now = std::time::Instant::now();
            if now >= next_check {
                watching = engine.check_deadlines(self);
                next_check = now + Duration::from_millis(1);
            }
            if now >= next_sweep {
                self.sweep();
                // A slot a dead producer held since it was skipped, should nobody pop.
                self.inbox
                    .free_dead_claim(|id| !self.is_alive(super::Owner::from_id(id)));
                next_sweep = now + reclaim::SWEEP_EVERY;
            }
            let watch = engine.watch();
            let backlog = self.flush_outbox();
            if napping {
                std::thread::park_timeout(engine.idle_grace());
                continue;
            }
            if n > 0 {
                idle_spins = 0;
                continue;
            }
            // A short spin catches streams of requests without a futex round trip.
            if idle_spins < 64 {
                idle_spins += 1;
                std::hint::spin_loop();
                continue;
            }
            idle_spins = 0;
            if engine.activity() != last_poll {
                continue;
            }
            let timeout = if watching || backlog {
                Duration::from_millis(1)
            } else {
                watch.map_or(Duration::from_millis(500), |w| {
                    w.min(Duration::from_millis(500))
                })
            };
            self.inbox
                .wait(Some(timeout), || self.stop.load(Ordering::Acquire));
        }
        self.running.store(false, Ordering::Release);
    }

    /// Whether the process is exiting (the service thread has been told to stop).
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Ends the service thread's nap (a thread of ours started to wait for an event: no
    /// poll will drain the inbox meanwhile).
    pub(crate) fn nudge(&self) {
        if let Some(m) = self.service.get() {
            if let Some(h) = m.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                h.thread().unpark();
            }
        }
    }

    /// Handles up to `budget` records of our inbox unless another thread is; returns
    /// how many.
    pub(crate) fn drain(&'static self, budget: usize) -> usize {
        let Ok(mut g) = self.consuming.try_lock() else {
            return 0;
        };
        let c = &mut *g;
        self.flush_outbox();
        let mut n = 0;
        while n < budget {
            let dead = |id| !self.is_alive(super::Owner::from_id(id));
            let Some(rec) = self.inbox.pop(&mut c.payload, dead) else {
                break;
            };
            let len = rec.payload_len.min(inbox::PAYLOAD);
            self.endpoint
                .deliver(self, rec, &c.payload[..len], &mut c.ack);
            n += 1;
        }
        self.flush_ack(&mut c.ack);
        n
    }
}

/// A consumer's working state: the payload of the record in hand, and the answer
/// being coalesced.
pub(super) struct Consumer {
    pub(super) payload: Box<[u8; inbox::PAYLOAD]>,
    pub(super) ack: Option<super::Ack>,
}

/// At exit: stops the service thread (waiting briefly), frees our QP numbers and
/// removes our file.
pub(super) extern "C" fn on_exit() {
    let Some(s) = current() else {
        return;
    };
    s.stop.store(true, Ordering::Release);
    s.inbox.wake();
    for _ in 0..200 {
        if !s.running.load(Ordering::Acquire) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Join a thread that has returned (never one still running: exit must not hang).
    if !s.running.load(Ordering::Acquire) {
        let handle = s
            .service
            .get()
            .and_then(|h| h.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
    s.registry.release_all(s.me);
    let _ = s.dir.remove(&reclaim::proc_name(s.me));
}
