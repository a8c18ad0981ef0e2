//! What application threads and a poll thread exchange through the rings.

use core::fmt;

use vqp_core::{PostRecvError, PostSendError, RecvWr, SendWr, Wc};

use crate::verbs::AsyncEvent;

/// A request for the poll thread to post on the virtual QP the handle belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `VirtualQp::post_send`.
    Send(SendWr),
    /// `VirtualQp::post_recv`.
    Recv(RecvWr),
}

impl Request {
    /// The application's identifier of the request.
    pub fn wr_id(&self) -> u64 {
        match self {
            Request::Send(wr) => wr.wr_id,
            Request::Recv(wr) => wr.wr_id,
        }
    }
}

/// Why the virtual QP refused a request (for a reason other than backpressure, which
/// the poll thread absorbs by waiting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `post_send` refused it.
    Send(PostSendError),
    /// `post_recv` refused it.
    Recv(PostRecvError),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Send(e) => write!(f, "send refused: {e}"),
            Refusal::Recv(e) => write!(f, "receive refused: {e}"),
        }
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Refusal::Send(e) => Some(e),
            Refusal::Recv(e) => Some(e),
        }
    }
}

/// What the poll thread reports back: one event per request, exactly once (a
/// completion, unless the request was unsignaled and succeeded, or a refusal), and,
/// when an asynchronous event fails the virtual QP, that event first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The request completed (successfully or not: see [`Wc::status`]).
    Completed(Wc),
    /// The virtual QP refused the request; nothing of it was posted.
    Rejected {
        /// The request's identifier.
        wr_id: u64,
        /// Why.
        error: Refusal,
    },
    /// An asynchronous event failed one of the virtual QP's physical QPs (or its
    /// device), and with it the virtual QP: every request outstanding follows, each
    /// completed once with an error. Reported once, for the first event about one of
    /// its QPs, even when an error completion of the same failure failed it first (its
    /// first error stays the status it failed with).
    PathFailed(AsyncEvent),
}

impl Event {
    /// The identifier of the request the event is about (`None` for
    /// [`Event::PathFailed`]).
    pub fn wr_id(&self) -> Option<u64> {
        match self {
            Event::Completed(wc) => Some(wc.wr_id),
            Event::Rejected { wr_id, .. } => Some(*wr_id),
            Event::PathFailed(_) => None,
        }
    }
}
