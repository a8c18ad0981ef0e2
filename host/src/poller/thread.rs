//! [`PollThread`]: starting, running and stopping a poll thread.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use vqp_core::ring::{Ring, Stamped};
use vqp_core::{Keys, PhysCq, PhysQp, VirtualQp};

use super::handle::{Handle, Shared, ABORT, DRAIN};
use super::msg::Event;
use super::round::run;
use super::stack::Stack;
use super::wire::Item;
use super::{Idle, PollerConfig, Stats};
use crate::error::{Error, Result};

/// A running poll thread; stop it with [`drain`](Self::drain) or
/// [`abort`](Self::abort) (dropping it aborts with a one-second deadline).
///
/// `R` is the capacity of each request and event ring (a power of two).
pub struct PollThread<const R: usize> {
    join: Option<JoinHandle<Stats>>,
    shared: Arc<Shared>,
}

fn pin(core: usize) -> bool {
    core_affinity::get_core_ids()
        .and_then(|ids| ids.into_iter().find(|c| c.id == core))
        .is_some_and(core_affinity::set_for_current)
}

impl<const R: usize> PollThread<R> {
    /// Starts a poll thread serving `qps` virtual QPs: it pins itself (when
    /// `config.core` is set), builds its [`Stack`] with `factory`, and starts polling.
    /// Returns once the set-up succeeded, with one [`Handle`] per virtual QP, in the
    /// stack's order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero `batch`; [`Error::Poller`] when the thread
    /// cannot start, cannot be pinned, or the factory built another number of virtual
    /// QPs than `qps` (or two with the same number); whatever the factory returned.
    pub fn spawn<
        Q,
        C,
        F,
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
        const DEVS: usize,
        const B: usize,
    >(
        config: PollerConfig,
        qps: usize,
        factory: F,
    ) -> Result<(Self, Vec<Handle<R>>)>
    where
        Q: PhysQp + 'static,
        C: PhysCq + 'static,
        F: FnOnce() -> Result<Stack<Q, C, N, D, S, W, DEVS, B>> + Send + 'static,
    {
        if config.batch == 0 {
            return Err(Error::InvalidArgument {
                what: "a poll thread takes at least one request per round",
            });
        }
        let shared = Arc::new(Shared::new(matches!(config.idle, Idle::Block { .. })));
        let mut handles = Vec::with_capacity(qps);
        let mut ends = Vec::with_capacity(qps);
        for index in 0..qps {
            let split = |_| Error::Poller {
                what: "a fresh ring refused to split",
            };
            let (rp, rc) =
                Ring::try_split(Arc::new(Ring::<Item, R, Stamped>::new())).map_err(split)?;
            let (ep, ec) =
                Ring::try_split(Arc::new(Ring::<Event, R, Stamped>::new())).map_err(split)?;
            handles.push(Handle {
                requests: rp,
                events: ec,
                shared: Arc::clone(&shared),
                index,
                keys: Keys::none(),
            });
            ends.push((rc, ep));
        }
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
        let sh = Arc::clone(&shared);
        let join = thread::Builder::new()
            .name(config.name.clone())
            .spawn(move || {
                let _ = sh.thread.set(thread::current());
                if let Some(core) = config.core {
                    if !pin(core) {
                        let _ = ready_tx.send(Err(Error::Poller {
                            what: "cannot pin the poll thread to the chosen core",
                        }));
                        return Stats::default();
                    }
                }
                let stack = match factory() {
                    Ok(stack) => stack,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Stats::default();
                    }
                };
                if stack.vqps.len() != ends.len() {
                    let _ = ready_tx.send(Err(Error::Poller {
                        what: "the factory built another number of virtual QPs than handles were asked for",
                    }));
                    return Stats::default();
                }
                let nums: Vec<u32> = stack.vqps.iter().map(VirtualQp::qp_num).collect();
                if (1..nums.len()).any(|i| nums[..i].contains(&nums[i])) {
                    let _ = ready_tx.send(Err(Error::Poller {
                        what: "the virtual QPs of one poll thread need distinct numbers",
                    }));
                    return Stats::default();
                }
                if let Some(w) = stack.blocker.as_ref().and_then(|b| b.waker()) {
                    let _ = sh.wake_fd.set(w);
                }
                if let Some(watch) = &stack.events {
                    watch.wake_with(Arc::clone(&sh));
                }
                let _ = ready_tx.send(Ok(()));
                run(&config, stack, ends, &sh)
            })
            .map_err(|_| Error::Poller {
                what: "cannot start the poll thread",
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok((
                PollThread {
                    join: Some(join),
                    shared,
                },
                handles,
            )),
            Ok(Err(e)) => {
                let _ = join.join();
                Err(e)
            }
            Err(_) => {
                let _ = join.join();
                Err(Error::Poller {
                    what: "the poll thread panicked during set-up",
                })
            }
        }
    }

    /// Whether the thread has stopped (it only stops when asked, or on a panic).
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().map_or(true, JoinHandle::is_finished)
    }

    fn stop(&mut self, command: u8, timeout: Duration) -> Result<Stats> {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.shared.timeout_ns.store(ns, Ordering::Relaxed);
        // Release: the timeout above is read after the command is seen (Acquire).
        self.shared.command.store(command, Ordering::Release);
        self.shared.interrupt();
        match self.join.take() {
            Some(join) => join.join().map_err(|_| Error::Poller {
                what: "the poll thread panicked",
            }),
            None => Err(Error::Poller {
                what: "the poll thread was already stopped",
            }),
        }
    }

    /// Lets everything submitted complete, then stops the thread and returns its
    /// statistics. If that takes longer than `timeout`, the thread aborts (as
    /// [`abort`](Self::abort), with the same timeout again).
    ///
    /// # Errors
    /// [`Error::Poller`] when the thread panicked.
    pub fn drain(mut self, timeout: Duration) -> Result<Stats> {
        self.stop(DRAIN, timeout)
    }

    /// Shuts every virtual QP down (their physical QPs go to the error state), polls
    /// until every outstanding request was reported once (or `timeout` passed),
    /// rejects requests still queued, stops the thread and returns its statistics.
    ///
    /// # Errors
    /// [`Error::Poller`] when the thread panicked.
    pub fn abort(mut self, timeout: Duration) -> Result<Stats> {
        self.stop(ABORT, timeout)
    }
}

impl<const R: usize> Drop for PollThread<R> {
    fn drop(&mut self) {
        if self.join.is_some() {
            let _ = self.stop(ABORT, Duration::from_secs(1));
        }
    }
}

impl<const R: usize> core::fmt::Debug for PollThread<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PollThread")
            .field("finished", &self.is_finished())
            .finish()
    }
}
