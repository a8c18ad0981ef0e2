//! Responses on their way to requester processes: the acknowledgement a consumer is
//! coalescing, and the responses that wait for room in a full requester inbox (sent in
//! order, dropped when the requester died).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::inbox::{Inbox, PushError, Record};
use super::{Owner, Shared};
use crate::os::lock;

/// Successful answers not sent yet: consecutive sequence numbers of one requester QP
/// with the same byte count, acknowledged by one response (its `len` is the count), as
/// an RC responder coalesces its ACKs. Sent when a different answer comes, when the
/// responder's bound on the data one response acknowledges is reached, and at the end
/// of each pass over the inbox.
pub(crate) struct Ack {
    /// The requester process.
    pub to: Owner,
    /// Its inbox.
    pub inbox: Arc<Inbox>,
    /// The response; its `len` counts the requests it acknowledges.
    pub rec: Record,
    /// The WRITE/SEND bytes those requests carried.
    pub bytes: u64,
}

/// A response that could not be delivered yet (the requester's inbox was full).
pub(crate) struct Pending {
    to: Owner,
    inbox: Arc<Inbox>,
    rec: Record,
    since: Instant,
}

impl Shared {
    /// Sends the pending acknowledgement, if any.
    pub(crate) fn flush_ack(&self, ack: &mut Option<Ack>) {
        if let Some(a) = ack.take() {
            self.send_response(a.to, a.inbox, a.rec);
        }
    }

    /// Sends a response, or queues it behind earlier undelivered ones (responses to
    /// one requester stay in order; the consumer never blocks on a full peer).
    pub(crate) fn send_response(&self, to: Owner, inbox: Arc<Inbox>, rec: Record) {
        let mut out = lock(&self.outbox);
        if out.is_empty() {
            loop {
                match inbox.push(&rec, &[]) {
                    Ok(()) => return,
                    Err(PushError::Lost) => continue,
                    Err(PushError::Full) => break,
                }
            }
        }
        out.push_back(Pending {
            to,
            inbox,
            rec,
            since: Instant::now(),
        });
    }

    /// Retries undelivered responses; drops those whose requester died. Returns
    /// whether some remain.
    pub(crate) fn flush_outbox(&self) -> bool {
        let mut out = lock(&self.outbox);
        while let Some(front) = out.front() {
            match front.inbox.push(&front.rec, &[]) {
                Ok(()) => {
                    out.pop_front();
                }
                Err(PushError::Lost) => {}
                Err(PushError::Full) => {
                    if front.since.elapsed() > Duration::from_millis(100)
                        && !self.is_alive(front.to)
                    {
                        let dead = front.to;
                        out.retain(|x| x.to != dead);
                        continue;
                    }
                    break;
                }
            }
        }
        !out.is_empty()
    }
}
