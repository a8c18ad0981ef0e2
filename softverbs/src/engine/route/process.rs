//! The in-process route: the responder QP lives in this process, and the requester's
//! thread runs the responder itself (`engine::respond`) over plain copies between the
//! two QPs' checked spans ([`LocalMover`]). No lock beyond the responder QP's, no
//! record, allocation or system call: a WQE costs what a function call and the copy
//! cost. The response comes back as the call's value and ends the WQE at once.

use std::sync::Arc;

use vqp_sys::*;

use crate::engine::complete::{complete, fail};
use crate::engine::qp::{rnr_delay, QpCore, QpInner};
use crate::engine::{respond, MoveError, Mover, Requester, Response, Step, Tables};
use crate::mem::{self, MrTable, Span};
use crate::wqe::SendWqe;

/// The error of a copy by [`LocalMover`]: `requester` names which side of the copy is
/// the requester's memory.
fn local_fault(f: mem::Fault, requester: mem::Fault) -> MoveError {
    if f == requester {
        MoveError::Status(IBV_WC_LOC_PROT_ERR)
    } else {
        MoveError::Target
    }
}

/// The in-process mover: plain copies between spans of this process.
struct LocalMover<'a, 't> {
    local: &'a [Span<'t>],
    inline: Option<&'a [u8]>,
}

impl Mover for LocalMover<'_, '_> {
    #[inline]
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError> {
        match self.inline {
            Some(d) => mem::copy_from_bytes(dst, d),
            None => mem::copy_spans(dst, self.local),
        }
        .map(drop)
        .map_err(|f| local_fault(f, mem::Fault::Src))
    }

    #[inline]
    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError> {
        mem::copy_spans(self.local, src)
            .map(drop)
            .map_err(|f| local_fault(f, mem::Fault::Dst))
    }

    #[inline]
    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError> {
        mem::copy_from_bytes(self.local, bytes)
            .map(drop)
            .map_err(|f| local_fault(f, mem::Fault::Dst))
    }
}

/// What became of a WQE at a responder of this process when it did not end.
pub(super) enum Again {
    /// An RNR NAK: the WQE goes back to the head of the send queue for this long.
    Rnr(std::time::Duration),
    /// Nobody took it: lost, as on the wire (see `complete::unanswered`).
    Unanswered,
}

/// Runs `w` of requester `qp` (locked as `g`; `local` its checked buffers, `len` bytes)
/// at responder QP `b` of this process and ends it with the response, completed or
/// failed, or says why it must go again ([`Again`]; the caller owns the WQE and puts it
/// back). A datagram's sender learns nothing of what the receiver made of it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn deliver<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    b: &Arc<QpCore>,
    g: &mut QpInner,
    mrs: &MrTable,
    w: &SendWqe,
    local: &[Span<'_>],
    len: u64,
) -> Result<Step, Again> {
    let mut mover = LocalMover {
        local,
        inline: w.inline.as_deref(),
    };
    let own_responder = Arc::ptr_eq(b, qp);
    let requester = Requester {
        qpn: qp.qpn,
        dev: qp.dev,
        sgid: None,
        qp_type: qp.qp_type,
    };
    if w.ud.is_some() {
        let r = if own_responder {
            respond(p, requester, b, g, mrs, w, len, &mut mover)
        } else {
            let mut gb = b.lock();
            respond(p, requester, b, &mut gb, mrs, w, len, &mut mover)
        };
        return Ok(match r.unacknowledged() {
            Response::Error { status, .. } => {
                fail(qp, g, w, status, None);
                Step::Failed
            }
            _ => complete(qp, g, w, 0),
        });
    }
    let response = if own_responder {
        respond(p, requester, b, g, mrs, w, len, &mut mover)
    } else {
        let mut gb = b.lock();
        let r = respond(p, requester, b, &mut gb, mrs, w, len, &mut mover);
        if let Response::Error {
            responder: Some(event),
            ..
        } = r
        {
            b.to_error(&mut gb, Some(event));
        }
        r
    };
    let response = if qp.unreliable() {
        response.unacknowledged()
    } else {
        response
    };
    Ok(match response {
        Response::Ok(byte_len) => complete(qp, g, w, byte_len),
        Response::Rnr(timer) => {
            let retry = g.attr.rnr_retry;
            if retry != 7 && g.rnr_tries >= retry {
                fail(qp, g, w, IBV_WC_RNR_RETRY_EXC_ERR, None);
                return Ok(Step::Failed);
            }
            g.rnr_tries = g.rnr_tries.saturating_add(1);
            return Err(Again::Rnr(rnr_delay(timer)));
        }
        Response::Error { status, responder } => {
            // A QP connected to itself is its own responder: its failed request
            // completes first, then its queues are flushed and the event raised.
            fail(qp, g, w, status, responder.filter(|_| own_responder));
            Step::Failed
        }
        Response::Dropped => {
            fail(qp, g, w, IBV_WC_RETRY_EXC_ERR, None);
            Step::Failed
        }
        Response::Unanswered => return Err(Again::Unanswered),
    })
}
