//! Poll threads: a busy-poll thread, pinned to a chosen core, that owns a virtual CQ
//! and its virtual QPs; application threads talk to it through SPSC rings.
//!
//! ```text
//!  app thread ── Handle ──► request ring ──┐          ┌──────────── poll thread ──────────┐
//!                                          ├────────► │ post_send / post_recv              │
//!  app thread ◄─ Handle ◄── event ring ◄───┘  ◄────── │ VirtualCq::poll → Completed / Rejected │
//!                                                     └───────────────────────────────────┘
//! ```
//! [`PollThread::spawn`] starts the thread, which builds its [`Stack`] (virtual CQ,
//! virtual QPs, optional [`Blocker`]) from a `Send` factory — so providers that are not
//! `Send` work — pins itself, and hands back one [`Handle`] per virtual QP.
//!
//! # The loop
//! Each round takes up to [`PollerConfig::batch`] requests per virtual QP and posts
//! them, then polls the virtual CQ once and routes each virtual completion to the
//! event ring of the virtual QP whose number it carries. A request refused for
//! backpressure ([`PostSendError::Full`](vqp_core::PostSendError::Full) or
//! [`PostRecvError::Full`](vqp_core::PostRecvError::Full)) is kept, and that virtual
//! QP's later requests wait behind it, until a retry succeeds: order is kept and
//! nothing is dropped. Any other refusal becomes [`Event::Rejected`]. Events that do not
//! fit a full event ring wait inside the poll thread (and the thread stops polling until
//! they are delivered, so they cannot pile up). Nothing on this path allocates.
//!
//! # Idle policy
//! - [`Idle::Spin`]: poll without pause; the lowest latency, one core used fully.
//! - [`Idle::SpinThenYield`]: after `spins` idle rounds, `yield_now` between rounds.
//! - [`Idle::Block`]: after `spins` idle rounds, sleep. With a [`Blocker`] (for verbs,
//!   [`ChannelBlocker`]: `ibv_req_notify_cq` + the completion channel) the thread arms
//!   the CQs, polls once more, and waits in `poll(2)` on the channel and on an eventfd
//!   ([`WakeFd`]) for up to `timeout`: a completion, a submission or a shutdown request
//!   wakes it at once. A provider without a completion channel degrades to parking for
//!   up to `timeout`: a submission or shutdown unparks the thread at once, but
//!   completions are only noticed at the next timeout (the thread polls at least every
//!   `timeout`). Submitters pay for this mode only while the thread sleeps: a fence on
//!   every submission, and a wake-up call (futex or eventfd write) when it sleeps.
//!
//! # Asynchronous events
//! With an [`EventWatch`] ([`Stack::with_events`]), failures that no completion
//! carries — a QP put in error as a responder, a port gone down, a device failed —
//! fail the virtual QP that owns the physical QP at the next round (see `watch`).
//!
//! # Shutdown
//! [`PollThread::drain`] lets everything outstanding complete (requests already
//! submitted included) and stops; if that takes longer than its timeout it continues as
//! an abort. [`PollThread::abort`] calls [`VirtualQp::shut_down`](vqp_core::VirtualQp::shut_down)
//! on every virtual QP and polls until every outstanding request was reported once
//! (with a flush error); requests still in the rings are rejected. Both return
//! [`Stats`]. Events the application has not taken stay in its [`Handle`]; any the
//! thread could not deliver before its deadline are in [`Stats::undelivered`].

mod handle;
mod msg;
mod round;
mod stack;
mod thread;
#[allow(unsafe_code)]
mod wake;
#[allow(unsafe_code)]
mod watch;
mod wire;

use std::time::Duration;

pub use handle::Handle;
pub use msg::{Event, Refusal, Request};
pub use stack::{Blocker, ChannelBlocker, Stack};
pub use thread::PollThread;
pub use wake::WakeFd;
pub use watch::{EventWatch, PathFailure};

/// What a poll thread does when a round found no work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Poll again at once.
    Spin,
    /// After `spins` idle rounds in a row, yield the core between rounds.
    SpinThenYield {
        /// Idle rounds before yielding.
        spins: u32,
    },
    /// After `spins` idle rounds in a row, sleep until a completion (with a
    /// [`Blocker`]) or a submission (without one), or at most `timeout`.
    Block {
        /// Idle rounds before sleeping.
        spins: u32,
        /// The longest sleep.
        timeout: Duration,
    },
}

/// How a poll thread runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollerConfig {
    /// The core to pin the thread to (`core_affinity`'s id), or `None` to leave it to
    /// the scheduler.
    pub core: Option<usize>,
    /// What to do when idle.
    pub idle: Idle,
    /// Requests taken per virtual QP per round, at most.
    pub batch: usize,
    /// The thread's name.
    pub name: String,
}

impl Default for PollerConfig {
    /// Unpinned, spinning, 32 requests per round, named `vqp-poll`.
    fn default() -> Self {
        PollerConfig {
            core: None,
            idle: Idle::Spin,
            batch: 32,
            name: "vqp-poll".into(),
        }
    }
}

/// What a poll thread did, returned when it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests the virtual QPs took.
    pub submitted: u64,
    /// Completions delivered or left undelivered.
    pub completed: u64,
    /// Requests refused ([`Event::Rejected`]).
    pub rejected: u64,
    /// Times a request was refused for backpressure and kept to retry.
    pub backpressure: u64,
    /// Times the event ring was full and events waited in the thread.
    pub events_waited: u64,
    /// Rounds of the loop.
    pub rounds: u64,
    /// Times the thread slept ([`Idle::Block`]).
    pub sleeps: u64,
    /// Polls of the virtual CQ that failed (the provider's `poll_cq` error).
    pub poll_failures: u64,
    /// Virtual QPs failed by an asynchronous event ([`Event::PathFailed`]).
    pub path_failures: u64,
    /// Whether the thread stopped by aborting (asked to, or a drain that timed out).
    pub aborted: bool,
    /// Whether it stopped at its deadline with work left (see `outstanding`,
    /// `undelivered`).
    pub timed_out: bool,
    /// Requests still in flight in the virtual QPs when the thread stopped.
    pub outstanding: usize,
    /// Events the thread could not deliver before its deadline, in order, per
    /// virtual QP index.
    pub undelivered: Vec<(usize, Event)>,
}
