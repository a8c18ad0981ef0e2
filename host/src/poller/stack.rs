//! [`Stack`]: what a poll thread owns, and [`Blocker`]: how it sleeps when idle.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use vqp_core::{PhysCq, PhysQp, VirtualCq, VirtualQp};

use super::wake::WakeFd;
use crate::error::Result;
use crate::verbs::{CompletionChannel, CompletionQueue};

/// How a poll thread in [`Idle::Block`](super::Idle::Block) waits for completions.
///
/// The thread calls [`arm`](Self::arm), polls its CQs once more (a completion that
/// arrived before the arming raises no event), and only if that finds nothing calls
/// [`block`](Self::block).
pub trait Blocker {
    /// Ask to be woken by the next completion (e.g. `ibv_req_notify_cq` on every CQ).
    ///
    /// # Errors
    /// When the provider refuses; the thread then waits by parking instead.
    fn arm(&mut self) -> Result<()>;
    /// Wait until an armed CQ raised an event, the [`waker`](Self::waker) was woken,
    /// or `timeout` passed; consume (and acknowledge) the events.
    fn block(&mut self, timeout: Duration);
    /// What submitters and shutdown requests wake to interrupt [`block`](Self::block);
    /// `None` when only the timeout (or a completion) ends it.
    fn waker(&self) -> Option<Arc<WakeFd>> {
        None
    }
}

/// A [`Blocker`] over a verbs completion channel that the CQs report to.
///
/// Waits in `poll(2)` on the channel's descriptor and on an eventfd ([`WakeFd`]) that
/// a submission or a shutdown request writes, so either wakes the thread at once.
pub struct ChannelBlocker {
    channel: CompletionChannel,
    cqs: Vec<CompletionQueue>,
    wake: Arc<WakeFd>,
}

impl ChannelBlocker {
    /// Blocks on `channel` for the completions of `cqs` (which must report to it).
    ///
    /// # Errors
    /// [`Error::Verbs`](crate::Error::Verbs) when the channel cannot be made
    /// non-blocking or the eventfd cannot be created.
    pub fn new(channel: CompletionChannel, cqs: Vec<CompletionQueue>) -> Result<Self> {
        channel.set_nonblocking(true)?;
        Ok(ChannelBlocker {
            channel,
            cqs,
            wake: Arc::new(WakeFd::new()?),
        })
    }
}

impl Blocker for ChannelBlocker {
    fn arm(&mut self) -> Result<()> {
        for cq in &self.cqs {
            cq.req_notify(false)?;
        }
        Ok(())
    }

    fn block(&mut self, timeout: Duration) {
        let ready = self
            .channel
            .wait_readable_or(Some(self.wake.as_raw_fd()), timeout);
        if let Ok((events, woken)) = ready {
            if woken {
                self.wake.clear();
            }
            if events {
                // Take (and, on drop, acknowledge) every pending event; the CQs are
                // polled next whichever CQ each names.
                while let Ok(event) = self.channel.get_cq_event() {
                    drop(event);
                }
            }
        }
    }

    fn waker(&self) -> Option<Arc<WakeFd>> {
        Some(Arc::clone(&self.wake))
    }
}

impl core::fmt::Debug for ChannelBlocker {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ChannelBlocker")
            .field("channel", &self.channel)
            .field("cqs", &self.cqs.len())
            .finish()
    }
}

/// Everything a poll thread owns: a virtual CQ, the virtual QPs attached to it (in
/// attachment order), and optionally a [`Blocker`].
///
/// Built inside the poll thread by the factory given to
/// [`PollThread::spawn`](super::PollThread::spawn), so providers that are not `Send`
/// (simulated ones, say) work too.
pub struct Stack<
    Q,
    C,
    const N: usize,
    const D: usize,
    const S: usize,
    const W: usize,
    const DEVS: usize,
    const B: usize,
> {
    pub(super) vcq: VirtualCq<C, DEVS, B>,
    pub(super) vqps: Vec<VirtualQp<Q, N, D, S, W>>,
    pub(super) blocker: Option<Box<dyn Blocker>>,
    pub(super) events: Option<super::EventWatch>,
}

impl<
        Q: PhysQp,
        C: PhysCq,
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
        const DEVS: usize,
        const B: usize,
    > Stack<Q, C, N, D, S, W, DEVS, B>
{
    /// A stack of `vqps`, which must have been attached to `vcq` in this order (the
    /// virtual QP attached `i`-th at index `i`), with distinct virtual QP numbers.
    pub fn new(vcq: VirtualCq<C, DEVS, B>, vqps: Vec<VirtualQp<Q, N, D, S, W>>) -> Self {
        Stack {
            vcq,
            vqps,
            blocker: None,
            events: None,
        }
    }

    /// The virtual CQ and the virtual QPs, taken apart again.
    pub fn into_parts(self) -> (VirtualCq<C, DEVS, B>, Vec<VirtualQp<Q, N, D, S, W>>) {
        (self.vcq, self.vqps)
    }

    /// `self` with a watch on the devices' asynchronous events: a failure it reports
    /// fails the virtual QP owning the physical QP it names (see
    /// [`EventWatch`](super::EventWatch)).
    #[must_use]
    pub fn with_events(mut self, watch: super::EventWatch) -> Self {
        self.events = Some(watch);
        self
    }

    /// `self` with a way to block on completions (for [`Idle::Block`](super::Idle::Block)).
    #[must_use]
    pub fn with_blocker(mut self, blocker: impl Blocker + 'static) -> Self {
        self.blocker = Some(Box::new(blocker));
        self
    }
}
